//! Broadcasting element-wise maps. Every result that would be ±inf becomes NaN, so no
//! operator can ever emit an infinity (conventions.md: division by zero gives NaN).

use crate::data::{with_avx512, Panel};
use rayon::prelude::*;
use std::sync::Arc;

/// An operator input or output: a constant or a full panel.
#[derive(Clone, Debug)]
pub enum Value {
    Scalar(f64),
    Panel(Arc<Panel>),
}

impl Value {
    /// Materialises a panel (a scalar is broadcast).
    pub fn into_panel(self, n_dates: usize, n_assets: usize) -> Arc<Panel> {
        match self {
            Value::Panel(p) => p,
            Value::Scalar(v) => Arc::new(Panel::filled(n_dates, n_assets, clean(v))),
        }
    }

    /// The panel, if this value is one.
    pub fn panel(&self) -> Option<&Panel> {
        match self {
            Value::Panel(p) => Some(p),
            Value::Scalar(_) => None,
        }
    }
}

/// ±inf → NaN.
#[inline(always)]
pub fn clean(v: f64) -> f64 {
    if v.is_infinite() {
        f64::NAN
    } else {
        v
    }
}

/// Chunk size for parallel element-wise loops (large enough to amortise scheduling).
const CHUNK: usize = 1 << 15;

/// Cells per run of [`map3`]'s inner loop (three stack buffers of this many stay in L1).
const RUN: usize = 512;

/// Where an input's values come from during a map.
#[derive(Clone, Copy)]
enum Src<'a> {
    Scalar(f64),
    Slice(&'a [f64]),
    /// The values already sit in the output buffer (the input's buffer was reused).
    Out,
}

impl<'a> Src<'a> {
    #[inline(always)]
    fn at(self, out: f64, i: usize) -> f64 {
        match self {
            Src::Scalar(v) => v,
            Src::Slice(s) => s[i],
            Src::Out => out,
        }
    }

    fn offset(self, start: usize, len: usize) -> Src<'a> {
        match self {
            Src::Slice(s) => Src::Slice(&s[start..start + len]),
            other => other,
        }
    }
}

/// Picks an output buffer, reusing the first uniquely-held panel input.
fn prepare(vals: &mut [Value]) -> Option<(Panel, Option<usize>)> {
    let (nd, na) = vals.iter().find_map(|v| v.panel().map(|p| (p.n_dates(), p.n_assets())))?;
    for (i, v) in vals.iter_mut().enumerate() {
        if let Value::Panel(p) = v {
            if Arc::strong_count(p) == 1 {
                let taken = std::mem::replace(v, Value::Scalar(f64::NAN));
                if let Value::Panel(p) = taken {
                    if let Ok(p) = Arc::try_unwrap(p) {
                        return Some((p, Some(i)));
                    }
                }
            }
        }
    }
    // Every cell is written by the map.
    Some((Panel::scratch(nd, na), None))
}

fn src<'a>(v: &'a Value, i: usize, reused: Option<usize>) -> Src<'a> {
    if reused == Some(i) {
        return Src::Out;
    }
    match v {
        Value::Scalar(x) => Src::Scalar(*x),
        Value::Panel(p) => Src::Slice(p.as_slice()),
    }
}

/// `f` applied element-wise to one input.
pub fn map1<F: Fn(f64) -> f64 + Sync>(a: Value, f: F) -> Value {
    let mut vals = [a];
    let Some((mut out, reused)) = prepare(&mut vals) else {
        let Value::Scalar(x) = vals[0] else { unreachable!("no panel among inputs") };
        return Value::Scalar(clean(f(x)));
    };
    let sa = src(&vals[0], 0, reused);
    out.as_mut_slice().par_chunks_mut(CHUNK).enumerate().for_each(|(k, c)| {
        with_avx512(|| match sa.offset(k * CHUNK, c.len()) {
            Src::Slice(s) => c.iter_mut().zip(s).for_each(|(o, x)| *o = clean(f(*x))),
            _ => c.iter_mut().for_each(|o| *o = clean(f(*o))),
        })
    });
    Value::Panel(Arc::new(out))
}

/// `f` applied element-wise to two inputs, broadcasting scalars.
pub fn map2<F: Fn(f64, f64) -> f64 + Sync>(a: Value, b: Value, f: F) -> Value {
    let mut vals = [a, b];
    let Some((mut out, reused)) = prepare(&mut vals) else {
        let [Value::Scalar(x), Value::Scalar(y)] = vals else { unreachable!("no panel among inputs") };
        return Value::Scalar(clean(f(x, y)));
    };
    let (sa, sb) = (src(&vals[0], 0, reused), src(&vals[1], 1, reused));
    out.as_mut_slice().par_chunks_mut(CHUNK).enumerate().for_each(|(k, c)| {
        let (sa, sb) = (sa.offset(k * CHUNK, c.len()), sb.offset(k * CHUNK, c.len()));
        // Specialised loops for the common shapes so they vectorise (for AVX-512 where
        // the CPU has it).
        with_avx512(|| match (sa, sb) {
            (Src::Slice(x), Src::Slice(y)) => {
                for ((o, x), y) in c.iter_mut().zip(x).zip(y) {
                    *o = clean(f(*x, *y));
                }
            }
            (Src::Out, Src::Slice(y)) => c.iter_mut().zip(y).for_each(|(o, y)| *o = clean(f(*o, *y))),
            (Src::Slice(x), Src::Out) => c.iter_mut().zip(x).for_each(|(o, x)| *o = clean(f(*x, *o))),
            (Src::Out, Src::Scalar(y)) => c.iter_mut().for_each(|o| *o = clean(f(*o, y))),
            (Src::Scalar(x), Src::Out) => c.iter_mut().for_each(|o| *o = clean(f(x, *o))),
            (Src::Slice(x), Src::Scalar(y)) => c.iter_mut().zip(x).for_each(|(o, x)| *o = clean(f(*x, y))),
            (Src::Scalar(x), Src::Slice(y)) => c.iter_mut().zip(y).for_each(|(o, y)| *o = clean(f(x, *y))),
            (sa, sb) => {
                for (i, o) in c.iter_mut().enumerate() {
                    *o = clean(f(sa.at(*o, i), sb.at(*o, i)));
                }
            }
        })
    });
    Value::Panel(Arc::new(out))
}

/// [`map2`] for a kernel that takes runs of cells, `k(a, b, out)` on slices of equal
/// length, where `f` is the same map for one pair of values: for kernels vectorised by
/// hand ([`super::pow`]).
pub fn map2_runs<F: Fn(f64, f64) -> f64 + Sync, K: Fn(&[f64], &[f64], &mut [f64]) + Sync>(a: Value, b: Value, f: F, k: K) -> Value {
    let mut vals = [a, b];
    let Some((mut out, reused)) = prepare(&mut vals) else {
        let [Value::Scalar(x), Value::Scalar(y)] = vals else { unreachable!("no panel among inputs") };
        return Value::Scalar(clean(f(x, y)));
    };
    let s = [src(&vals[0], 0, reused), src(&vals[1], 1, reused)];
    out.as_mut_slice().par_chunks_mut(CHUNK).enumerate().for_each(|(c, ch)| {
        let s = s.map(|x| x.offset(c * CHUNK, ch.len()));
        let (mut ba, mut bb) = ([0.0f64; RUN], [0.0f64; RUN]);
        for (r, o) in ch.chunks_mut(RUN).enumerate() {
            let at = r * RUN;
            // A reused input is copied out of `o` first, so no input aliases the output.
            let (a, b) = (run(s[0], at, o, &mut ba), run(s[1], at, o, &mut bb));
            k(a, b, o);
            o.iter_mut().for_each(|v| *v = clean(*v));
        }
    });
    Value::Panel(Arc::new(out))
}

/// `f` applied element-wise to three inputs, broadcasting scalars.
pub fn map3<F: Fn(f64, f64, f64) -> f64 + Sync>(a: Value, b: Value, c: Value, f: F) -> Value {
    let mut vals = [a, b, c];
    let Some((mut out, reused)) = prepare(&mut vals) else {
        let [Value::Scalar(x), Value::Scalar(y), Value::Scalar(z)] = vals else { unreachable!("no panel among inputs") };
        return Value::Scalar(clean(f(x, y, z)));
    };
    let s = [src(&vals[0], 0, reused), src(&vals[1], 1, reused), src(&vals[2], 2, reused)];
    out.as_mut_slice().par_chunks_mut(CHUNK).enumerate().for_each(|(k, ch)| {
        let s = s.map(|x| x.offset(k * CHUNK, ch.len()));
        // Each input as a slice of a short run (a scalar or the output's own values
        // copied to a stack buffer), so that one loop over three slices serves every
        // shape and vectorises (a per-element match on the shapes did not: 3x slower).
        let (mut ba, mut bb, mut bc) = ([0.0f64; RUN], [0.0f64; RUN], [0.0f64; RUN]);
        with_avx512(|| {
            for (r, o) in ch.chunks_mut(RUN).enumerate() {
                let at = r * RUN;
                let (a, b, c) = (run(s[0], at, o, &mut ba), run(s[1], at, o, &mut bb), run(s[2], at, o, &mut bc));
                for (((o, a), b), c) in o.iter_mut().zip(a).zip(b).zip(c) {
                    *o = clean(f(*a, *b, *c));
                }
            }
        });
    });
    Value::Panel(Arc::new(out))
}

/// The values of `s` for the run of output cells `o` starting at `at` of the chunk: the
/// slice itself, or `buf` filled with the scalar or with the output's own values.
#[inline(always)]
fn run<'a>(s: Src<'a>, at: usize, o: &[f64], buf: &'a mut [f64; RUN]) -> &'a [f64] {
    let buf = &mut buf[..o.len()];
    match s {
        Src::Slice(v) => &v[at..at + o.len()],
        Src::Scalar(v) => {
            buf.fill(v);
            buf
        }
        Src::Out => {
            buf.copy_from_slice(o);
            buf
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[f64]) -> Value {
        Value::Panel(Arc::new(Panel::from_asset_major(v.len(), 1, v.to_vec())))
    }
    fn vals(v: &Value) -> Vec<f64> {
        v.panel().map(|p| p.to_asset_major()).unwrap_or_default()
    }

    #[test]
    fn broadcasts_and_reuses_without_mixing_inputs() {
        let a = p(&[1.0, 2.0, 3.0]);
        let shared = p(&[10.0, 20.0, 30.0]);
        let keep = shared.clone();
        // a is uniquely held (reused as output), b is shared (read only).
        assert_eq!(vals(&map2(a, shared, |x, y| x - y)), vec![-9.0, -18.0, -27.0]);
        assert_eq!(vals(&map2(Value::Scalar(0.0), keep.clone(), |x, y| x - y)), vec![-10.0, -20.0, -30.0]);
        assert_eq!(vals(&map2(p(&[1.0, 2.0, 3.0]), Value::Scalar(0.0), |x, y| x / y)).iter().filter(|v| v.is_nan()).count(), 3);
        assert_eq!(vals(&keep), vec![10.0, 20.0, 30.0]);
        assert!(matches!(map2(Value::Scalar(1.0), Value::Scalar(2.0), |x, y| x + y), Value::Scalar(v) if v == 3.0));
        let t = map3(p(&[1.0, 0.0, f64::NAN]), Value::Scalar(5.0), p(&[7.0, 8.0, 9.0]), |c, x, y| {
            if c.is_nan() { f64::NAN } else if c != 0.0 { x } else { y }
        });
        let t = vals(&t);
        assert_eq!(&t[..2], &[5.0, 8.0]);
        assert!(t[2].is_nan());
    }
}

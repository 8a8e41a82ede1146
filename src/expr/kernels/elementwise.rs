//! Broadcasting element-wise maps. Every result that would be ±inf becomes NaN, so no
//! operator can ever emit an infinity (conventions.md: division by zero gives NaN).
//!
//! A chain of element-wise operators (`(close - open) / open * volume`) is fused: a map
//! whose only consumer is another element-wise map returns a [`Lazy`] value, computed a
//! run of cells at a time where it is read, so the chain makes one pass over memory
//! instead of one per operator. Each cell still goes through the same functions in the
//! same order: fused or not, the values are the same bits.

use crate::data::{with_avx512, Panel};
use rayon::prelude::*;
use std::sync::Arc;

/// An operator input or output: a constant, a full panel, or an element-wise result not
/// materialised yet.
#[derive(Clone, Debug)]
pub enum Value {
    Scalar(f64),
    Panel(Arc<Panel>),
    Lazy(Arc<Lazy>),
}

impl Value {
    /// Materialises a panel (a scalar is broadcast, a lazy value computed).
    pub fn into_panel(self, n_dates: usize, n_assets: usize) -> Arc<Panel> {
        match self {
            Value::Panel(p) => p,
            Value::Scalar(v) => Arc::new(Panel::filled(n_dates, n_assets, clean(v))),
            Value::Lazy(l) => Arc::new(l.materialise()),
        }
    }

    /// The panel, if this value is a materialised one.
    pub fn panel(&self) -> Option<&Panel> {
        match self {
            Value::Panel(p) => Some(p),
            _ => None,
        }
    }

    /// Levels of unmaterialised maps below this value (0 for a panel or a scalar).
    fn depth(&self) -> usize {
        match self {
            Value::Lazy(l) => l.depth,
            _ => 0,
        }
    }

    fn shape(&self) -> Option<(usize, usize)> {
        match self {
            Value::Scalar(_) => None,
            Value::Panel(p) => Some((p.n_dates(), p.n_assets())),
            Value::Lazy(l) => Some((l.n_dates, l.n_assets)),
        }
    }
}

/// A fill of `out` with the cells `start..start + out.len()` (at most [`RUN`]) of a lazy
/// value; the last argument is scratch space for the runs of its inputs.
type Fill = Box<dyn Fn(usize, &mut [f64], &mut [f64]) + Send + Sync>;

/// An element-wise map not computed yet: its inputs (panels, or lazy values themselves)
/// and the map, applied run by run.
pub struct Lazy {
    n_dates: usize,
    n_assets: usize,
    /// Levels of maps in this chain; each needs up to two runs of scratch.
    depth: usize,
    fill: Fill,
}

impl std::fmt::Debug for Lazy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lazy({} x {}, depth {})", self.n_dates, self.n_assets, self.depth)
    }
}

impl Lazy {
    /// Computes every cell, in parallel over chunks.
    pub fn materialise(&self) -> Panel {
        // Every cell is written by the fills.
        let mut out = Panel::scratch(self.n_dates, self.n_assets);
        let scratch = 2 * RUN * self.depth;
        out.as_mut_slice().par_chunks_mut(CHUNK).enumerate().for_each_init(
            || vec![0.0; scratch],
            |arena, (k, c)| {
                for (r, o) in c.chunks_mut(RUN).enumerate() {
                    (self.fill)(k * CHUNK + r * RUN, o, arena);
                }
            },
        );
        out
    }
}

/// Longest chain of maps computed run by run; a deeper one is materialised (each level
/// keeps its runs on the way down, and an LLM may nest hundreds).
const MAX_DEPTH: usize = 16;

/// Returns a lazy value if its consumer asked for one and the chain is not too deep, else
/// the materialised panel.
fn finish(v: Value, lazy: bool) -> Value {
    match v {
        Value::Lazy(l) if !lazy || l.depth > MAX_DEPTH => Value::Panel(Arc::new(l.materialise())),
        v => v,
    }
}

/// The lazy map of one non-scalar input.
fn lazy1<F: Fn(f64) -> f64 + Send + Sync + 'static>(a: Value, f: F) -> Value {
    let (n_dates, n_assets) = a.shape().expect("a non-scalar input");
    let depth = a.depth() + 1;
    let fill: Fill = Box::new(move |start, out, arena| {
        with_avx512(|| match &a {
            Value::Lazy(l) => {
                (l.fill)(start, out, arena);
                out.iter_mut().for_each(|o| *o = clean(f(*o)));
            }
            Value::Panel(p) => out.iter_mut().zip(&p.as_slice()[start..]).for_each(|(o, x)| *o = clean(f(*x))),
            Value::Scalar(_) => unreachable!("scalars are folded"),
        })
    });
    Value::Lazy(Arc::new(Lazy { n_dates, n_assets, depth, fill }))
}

/// The lazy map of two inputs; a scalar one is folded into the function.
fn lazy2<F: Fn(f64, f64) -> f64 + Send + Sync + 'static>(a: Value, b: Value, f: F) -> Value {
    let (n_dates, n_assets) = match (&a, &b) {
        (Value::Scalar(x), Value::Scalar(y)) => return Value::Scalar(clean(f(*x, *y))),
        (&Value::Scalar(x), _) => return lazy1(b, move |y| f(x, y)),
        (_, &Value::Scalar(y)) => return lazy1(a, move |x| f(x, y)),
        _ => a.shape().expect("a non-scalar input"),
    };
    let depth = a.depth().max(b.depth()) + 1;
    let fill: Fill = Box::new(move |start, out, arena| {
        with_avx512(|| match (&a, &b) {
            (Value::Panel(x), Value::Panel(y)) => {
                for ((o, x), y) in out.iter_mut().zip(&x.as_slice()[start..]).zip(&y.as_slice()[start..]) {
                    *o = clean(f(*x, *y));
                }
            }
            (Value::Lazy(x), Value::Panel(y)) => {
                (x.fill)(start, out, arena);
                out.iter_mut().zip(&y.as_slice()[start..]).for_each(|(o, y)| *o = clean(f(*o, *y)));
            }
            (Value::Panel(x), Value::Lazy(y)) => {
                (y.fill)(start, out, arena);
                out.iter_mut().zip(&x.as_slice()[start..]).for_each(|(o, x)| *o = clean(f(*x, *o)));
            }
            (Value::Lazy(x), Value::Lazy(y)) => {
                (x.fill)(start, out, arena);
                let (buf, rest) = arena.split_at_mut(RUN);
                let buf = &mut buf[..out.len()];
                (y.fill)(start, buf, rest);
                out.iter_mut().zip(buf.iter()).for_each(|(o, y)| *o = clean(f(*o, *y)));
            }
            _ => unreachable!("scalars are folded"),
        })
    });
    Value::Lazy(Arc::new(Lazy { n_dates, n_assets, depth, fill }))
}

/// The lazy map of three inputs (scalars broadcast into runs).
fn lazy3<F: Fn(f64, f64, f64) -> f64 + Send + Sync + 'static>(a: Value, b: Value, c: Value, f: F) -> Value {
    let Some((n_dates, n_assets)) = a.shape().or(b.shape()).or(c.shape()) else {
        let [Value::Scalar(x), Value::Scalar(y), Value::Scalar(z)] = [a, b, c] else { unreachable!("no panel among inputs") };
        return Value::Scalar(clean(f(x, y, z)));
    };
    let depth = a.depth().max(b.depth()).max(c.depth()) + 1;
    let fill: Fill = Box::new(move |start, out, arena| with_avx512(|| {
        // a's run goes to `out`, b's and c's to two runs of scratch (or are slices).
        match &a {
            Value::Scalar(v) => out.fill(*v),
            Value::Panel(p) => out.copy_from_slice(&p.as_slice()[start..start + out.len()]),
            Value::Lazy(l) => (l.fill)(start, out, arena),
        }
        let (bb, rest) = arena.split_at_mut(RUN);
        let y = cells(&b, start, &mut bb[..out.len()], rest);
        let (cb, rest) = rest.split_at_mut(RUN);
        let z = cells(&c, start, &mut cb[..out.len()], rest);
        for ((o, y), z) in out.iter_mut().zip(y).zip(z) {
            *o = clean(f(*o, *y, *z));
        }
    }));
    Value::Lazy(Arc::new(Lazy { n_dates, n_assets, depth, fill }))
}

/// The run of `v` over `buf.len()` cells from `start`: its panel's slice, or `buf` filled
/// with the scalar or the lazy value's cells (whose inputs' runs go to `arena`).
#[inline(always)]
fn cells<'a>(v: &'a Value, start: usize, buf: &'a mut [f64], arena: &mut [f64]) -> &'a [f64] {
    match v {
        Value::Panel(p) => &p.as_slice()[start..start + buf.len()],
        Value::Scalar(x) => {
            buf.fill(*x);
            buf
        }
        Value::Lazy(l) => {
            (l.fill)(start, buf, arena);
            buf
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

/// Cells per run of a [`Lazy`] fill and of [`map3`]'s inner loop (a few buffers of this
/// many stay in L1).
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
        Value::Lazy(_) => unreachable!("lazy inputs take the fused path"),
    }
}

/// `f` applied element-wise to one input; unmaterialised if `lazy` (see [`Lazy`]).
pub fn map1<F: Fn(f64) -> f64 + Send + Sync + 'static>(lazy: bool, a: Value, f: F) -> Value {
    if lazy || a.depth() > 0 {
        return match a {
            Value::Scalar(x) => Value::Scalar(clean(f(x))),
            a => finish(lazy1(a, f), lazy),
        };
    }
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

/// `f` applied element-wise to two inputs, broadcasting scalars; unmaterialised if `lazy`.
pub fn map2<F: Fn(f64, f64) -> f64 + Send + Sync + 'static>(lazy: bool, a: Value, b: Value, f: F) -> Value {
    if lazy || a.depth() + b.depth() > 0 {
        return finish(lazy2(a, b, f), lazy);
    }
    let mut vals = [a, b];
    let Some((mut out, reused)) = prepare(&mut vals) else {
        let [Value::Scalar(x), Value::Scalar(y)] = vals else { unreachable!("no panel among inputs") };
        return Value::Scalar(clean(f(x, y)));
    };
    let (sa, sb) = (src(&vals[0], 0, reused), src(&vals[1], 1, reused));
    out.as_mut_slice().par_chunks_mut(CHUNK).enumerate().for_each(|(k, c)| {
        let (sa, sb) = (sa.offset(k * CHUNK, c.len()), sb.offset(k * CHUNK, c.len()));
        // Specialised loops for the common shapes so they vectorise.
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

/// `f` applied element-wise to three inputs, broadcasting scalars; unmaterialised if `lazy`.
pub fn map3<F: Fn(f64, f64, f64) -> f64 + Send + Sync + 'static>(lazy: bool, a: Value, b: Value, c: Value, f: F) -> Value {
    if lazy || a.depth() + b.depth() + c.depth() > 0 {
        return finish(lazy3(a, b, c, f), lazy);
    }
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
        for (r, o) in ch.chunks_mut(RUN).enumerate() {
            let at = r * RUN;
            let (a, b, c) = (run(s[0], at, o, &mut ba), run(s[1], at, o, &mut bb), run(s[2], at, o, &mut bc));
            with_avx512(|| {
                for (((o, a), b), c) in o.iter_mut().zip(a).zip(b).zip(c) {
                    *o = clean(f(*a, *b, *c));
                }
            });
        }
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
        v.panel().map(|p| p.as_slice().to_vec()).unwrap_or_default()
    }

    /// A chain of maps computed lazily (each result read where its consumer runs) equals
    /// the same chain materialised at every step, bit for bit: all input shapes (panel,
    /// scalar, lazy) in every position, a chain deeper than [`MAX_DEPTH`], lengths that
    /// are not a multiple of a run, and NaN, infinities, zeros and signed zeros.
    #[test]
    fn lazy_chains_equal_materialised_ones() {
        let n = 3 * CHUNK + RUN / 2 + 7;
        let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, 1e-300, -2.5, 1e300];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut cells = |k: u64| -> Vec<f64> {
            (0..n)
                .map(|i| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407 ^ k);
                    if i % 13 == 0 { special[(seed >> 60) as usize % special.len()] } else { ((seed >> 11) as f64 / (1u64 << 53) as f64 - 0.4) * 8.0 }
                })
                .collect()
        };
        let (x, y, z) = (cells(1), cells(2), cells(3));
        let panel = |v: &Vec<f64>| Value::Panel(Arc::new(Panel::from_asset_major(v.len(), 1, v.clone())));
        // The chain: ((x / y) * 2 - z) ... pow, where, unary maps, and 20 more adds.
        let chain = |lazy: bool| {
            let a = map2(lazy, panel(&x), panel(&y), |a, b| if b == 0.0 { f64::NAN } else { a / b });
            let a = map2(lazy, Value::Scalar(2.0), a, |a, b| a - b);
            let a = map2(lazy, panel(&z), a, |a, b| a / b);
            let a = map2(lazy, a, Value::Scalar(3.0), |a, b| a - b);
            let c = map2(lazy, panel(&z), Value::Scalar(0.0), |a, b| if a.is_nan() | b.is_nan() { f64::NAN } else { f64::from(u8::from(a < b)) });
            let b = map1(lazy, panel(&y), f64::abs);
            let b = map2(lazy, b, panel(&x), f64::powf);
            let d = map2(lazy, panel(&x), panel(&z), |a, b| a - b);
            let d = map2(lazy, a.clone(), d, |a, b| a / b);
            let w = map3(lazy, c, d, b, |c, x, y| if c.is_nan() { f64::NAN } else if c != 0.0 { x } else { y });
            let w = map2(lazy, w, a, |a, b| a - b);
            let w = map3(lazy, panel(&x), w, Value::Scalar(-1.0), |c, x, y| if c.is_nan() { f64::NAN } else if c > 0.0 { x } else { y });
            let mut v = map1(lazy, w, |a| a.sqrt());
            for k in 0..2 * MAX_DEPTH + 3 {
                v = map2(lazy, v, if k % 2 == 0 { panel(&y) } else { Value::Scalar(k as f64) }, |a, b| a + b);
            }
            // The consumer that is not element-wise materialises.
            map2(false, v, panel(&z), |a, b| a * b)
        };
        let (fused, each) = (chain(true), chain(false));
        assert!(matches!(each, Value::Panel(_)) && matches!(fused, Value::Panel(_)), "a non-lazy map returns a panel");
        let bits = |v: &Value| vals(v).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&fused), bits(&each));
        assert!(vals(&each).iter().any(|v| v.is_finite()) && vals(&each).iter().any(|v| v.is_nan()));
        // A lazy result is one until something reads it, and reads as the panel would.
        let l = map2(true, panel(&x), panel(&y), |a, b| a - b);
        assert!(matches!(l, Value::Lazy(_)) && l.panel().is_none());
        assert_eq!(bits(&Value::Panel(l.into_panel(n, 1))), bits(&map2(false, panel(&x), panel(&y), |a, b| a - b)));
    }

    #[test]
    fn broadcasts_and_reuses_without_mixing_inputs() {
        let a = p(&[1.0, 2.0, 3.0]);
        let shared = p(&[10.0, 20.0, 30.0]);
        let keep = shared.clone();
        // a is uniquely held (reused as output), b is shared (read only).
        assert_eq!(vals(&map2(false, a, shared, |x, y| x - y)), vec![-9.0, -18.0, -27.0]);
        assert_eq!(vals(&map2(false, Value::Scalar(0.0), keep.clone(), |x, y| x - y)), vec![-10.0, -20.0, -30.0]);
        assert_eq!(vals(&map2(false, p(&[1.0, 2.0, 3.0]), Value::Scalar(0.0), |x, y| x / y)).iter().filter(|v| v.is_nan()).count(), 3);
        assert_eq!(vals(&keep), vec![10.0, 20.0, 30.0]);
        assert!(matches!(map2(false, Value::Scalar(1.0), Value::Scalar(2.0), |x, y| x + y), Value::Scalar(v) if v == 3.0));
        let t = map3(false, p(&[1.0, 0.0, f64::NAN]), Value::Scalar(5.0), p(&[7.0, 8.0, 9.0]), |c, x, y| {
            if c.is_nan() { f64::NAN } else if c != 0.0 { x } else { y }
        });
        let t = vals(&t);
        assert_eq!(&t[..2], &[5.0, 8.0]);
        assert!(t[2].is_nan());
    }
}

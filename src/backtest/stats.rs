//! Small numeric helpers shared by the metrics.

/// Mean and sample standard deviation (ddof = 1); NaN where undefined.
pub fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, f64::NAN);
    }
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// Whether `x` takes a single value over the `n` cells where both are finite. Checked
/// exactly: the mean of identical values can be off by an ulp, which would leave a tiny
/// non-zero variance and a meaningless correlation instead of "zero variance".
fn constant(n: usize, x: impl Fn(usize) -> f64, y: impl Fn(usize) -> f64) -> bool {
    let mut first = None;
    for i in 0..n {
        let (a, b) = (x(i), y(i));
        if a.is_finite() && b.is_finite() {
            match first {
                None => first = Some(a),
                Some(f) if f != a => return false,
                _ => {}
            }
        }
    }
    true
}

/// Pearson correlation of the cells where both `x` and `y` are finite (two passes: the
/// means first, so signals spanning many orders of magnitude stay exact). NaN when fewer
/// than `min` such cells or either side has zero variance.
pub fn pearson_finite(x: &[f64], y: &[f64], min: usize) -> f64 {
    pearson_many(x, [y], min)[0]
}

crate::expr::kernels::avx2_dispatch! {
/// [`pearson_finite`] of `x` with each of `K` series at once: `x` is read and checked once
/// per pass for all of them. Runs as AVX2 code where the CPU has it
/// ([`avx2_dispatch`](crate::expr::kernels::avx2_dispatch)).
pub fn pearson_many<const K: usize>(x: &[f64], ys: [&[f64]; K], min: usize) -> [f64; K] {
    let n = ys.iter().map(|y| y.len()).fold(x.len(), usize::min);
    pearson_cells(&x[..n], |i| ys.map(|y| y[i]), min).0
}
}

/// [`pearson_many`] of `x` with four series stored interleaved: cell i's values are
/// `y[i * stride + offset ..][..4]` (the IC at four horizons of one date). With AVX-512,
/// two cells' four values are one vector and the lanes keep exactly the generic code's
/// accumulators, so the results are the same bit for bit. Also returns each series'
/// count of cells where both sides are finite.
pub fn pearson4(x: &[f64], y: &[f64], stride: usize, offset: usize, min: usize) -> ([f64; 4], [usize; 4]) {
    assert!(offset + 4 <= stride && y.len() >= x.len() * stride, "pearson4: bad layout");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F and the layout was checked above.
        let (n, sx, sy) = unsafe { avx512::pass1(x, y, stride, offset) };
        return finish(x, |i| cell4(y, stride, offset, i), min, (n, sx, sy), |mx, my| unsafe { avx512::pass2(x, y, stride, offset, mx, my) });
    }
    pearson4_generic(x, y, stride, offset, min)
}

/// Cell i's four values in [`pearson4`]'s layout.
#[inline(always)]
fn cell4(y: &[f64], stride: usize, offset: usize, i: usize) -> [f64; 4] {
    let c = &y[i * stride + offset..i * stride + offset + 4];
    [c[0], c[1], c[2], c[3]]
}

crate::expr::kernels::avx2_dispatch! {
/// [`pearson4`] without AVX-512.
fn pearson4_generic(x: &[f64], y: &[f64], stride: usize, offset: usize, min: usize) -> ([f64; 4], [usize; 4]) {
    pearson_cells(x, |i| cell4(y, stride, offset, i), min)
}
}

/// Per-series, per-lane sums: `[k][l]` for series k and lane l (cells i with i % L == l;
/// the cells after the last full group of L two by two in lanes 0 and 1).
type Acc<const K: usize> = [[f64; L]; K];
/// Independent sums per series. Each lane's adds wait on each other; AVX-512 holds two
/// cells' four series per vector, and with one vector of accumulators (two lanes) the
/// adds waited: the scorer's metrics were 4 % slower.
const L: usize = 4;

/// `v - v == 0` exactly when v is finite (NaN and ±inf give NaN); unlike `is_finite` it
/// stays in float registers, which lets the loops vectorise.
#[inline(always)]
#[allow(clippy::eq_op)]
fn ok(v: f64) -> bool {
    v - v == 0.0
}

/// The Pearson correlations of `x` (all its cells) with `K` series, `y(i)` giving cell i
/// of each, each over the cells where both are finite. Branch-free, with independent
/// accumulators per lane: a cell outside the joint set contributes zeros, and no add waits
/// on the previous one, so the loops vectorise.
#[inline(always)]
fn pearson_cells<const K: usize>(x: &[f64], y: impl Fn(usize) -> [f64; K], min: usize) -> ([f64; K], [usize; K]) {
    let n_cells = x.len();
    let full = n_cells / L * L;
    let (mut n, mut sx, mut sy) = ([[0.0f64; L]; K], [[0.0f64; L]; K], [[0.0f64; L]; K]);
    // Cell i into lane l (a macro, not a closure: closures are not inlined into the
    // vector copies of this function, and the loops would not vectorise).
    macro_rules! pass1 {
        ($i:expr, $l:expr) => {{
            let (i, l) = ($i, $l);
            let (a, b) = (x[i], y(i));
            for k in 0..K {
                let m = ok(a) & ok(b[k]);
                n[k][l] += if m { 1.0 } else { 0.0 };
                sx[k][l] += if m { a } else { 0.0 };
                sy[k][l] += if m { b[k] } else { 0.0 };
            }
        }};
    }
    for i in (0..full).step_by(L) {
        for l in 0..L {
            pass1!(i + l, l);
        }
    }
    for i in full..n_cells {
        pass1!(i, (i - full) % 2);
    }
    finish(x, &y, min, (n, sx, sy), |mx, my| {
        let (mut cxy, mut cxx, mut cyy) = ([[0.0f64; L]; K], [[0.0f64; L]; K], [[0.0f64; L]; K]);
        macro_rules! pass2 {
            ($i:expr, $l:expr) => {{
                let (i, l) = ($i, $l);
                let (a, b) = (x[i], y(i));
                for k in 0..K {
                    let m = ok(a) & ok(b[k]);
                    let u = if m { a - mx[k] } else { 0.0 };
                    let v = if m { b[k] - my[k] } else { 0.0 };
                    cxy[k][l] += u * v;
                    cxx[k][l] += u * u;
                    cyy[k][l] += v * v;
                }
            }};
        }
        for i in (0..full).step_by(L) {
            for l in 0..L {
                pass2!(i + l, l);
            }
        }
        for i in full..n_cells {
            pass2!(i, (i - full) % 2);
        }
        (cxy, cxx, cyy)
    })
}

/// From the first pass's sums (count, Σx, Σy per series and lane): the means, the second
/// pass (`pass2(mx, my)` returns Σ(x−mx)(y−my), Σ(x−mx)², Σ(y−my)²) unless no series has
/// enough cells, and the correlations with their counts of cells.
#[inline(always)]
fn finish<const K: usize>(
    x: &[f64],
    y: impl Fn(usize) -> [f64; K],
    min: usize,
    (n, sx, sy): (Acc<K>, Acc<K>, Acc<K>),
    pass2: impl FnOnce([f64; K], [f64; K]) -> (Acc<K>, Acc<K>, Acc<K>),
) -> ([f64; K], [usize; K]) {
    let sum = |v: [f64; L]| v.iter().sum::<f64>();
    let mut out = [f64::NAN; K];
    let (mut count, mut mx, mut my) = ([0.0; K], [0.0; K], [0.0; K]);
    for k in 0..K {
        count[k] = sum(n[k]);
        mx[k] = sum(sx[k]) / count[k];
        my[k] = sum(sy[k]) / count[k];
    }
    // Sums of ones: exact.
    let cells = count.map(|c| c as usize);
    if count.iter().all(|&c| c < min.max(2) as f64) {
        return (out, cells);
    }
    let (cxy, cxx, cyy) = pass2(mx, my);
    for k in 0..K {
        let (cxy, cxx, cyy) = (sum(cxy[k]), sum(cxx[k]), sum(cyy[k]));
        if count[k] < min.max(2) as f64 || cxx <= 0.0 || cyy <= 0.0 {
            continue;
        }
        // A constant side leaves at most rounding noise in its variance (relative to the
        // sum of squares, far below 1e-20), so only such a tiny variance needs the exact
        // check.
        let tiny = |c: f64, m: f64| c <= 1e-20 * (c + count[k] * m * m);
        let (xs, ys) = (|i: usize| x[i], |i: usize| y(i)[k]);
        if (tiny(cxx, mx[k]) && constant(x.len(), xs, ys)) || (tiny(cyy, my[k]) && constant(x.len(), ys, xs)) {
            continue;
        }
        out[k] = (cxy / (cxx.sqrt() * cyy.sqrt())).clamp(-1.0, 1.0);
    }
    (out, cells)
}

/// [`pearson4`]'s two passes on AVX-512, in two accumulators of two cells each: lane
/// `4c + k` of accumulator h is the generic code's `[k][2h + c]`, updated by the same
/// operations in the same order (a masked-off lane keeps its value where the generic code
/// adds +0.0 to a sum that started at +0.0 and so is never −0.0: the same value).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::Acc;
    use std::arch::x86_64::*;

    /// Cells i and i + 1: x broadcast to each half, and each cell's four values. For the
    /// last cell of an odd count, only the low half (`lanes` = 0x0f).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn cells(x: &[f64], y: &[f64], stride: usize, offset: usize, i: usize, lanes: __mmask8) -> (__m512d, __m512d, __mmask8) {
        let (px, py) = (x.as_ptr(), y.as_ptr());
        // SAFETY (all loads): cell i (and i + 1 when its lanes are on) lie inside x and,
        // by pearson4's layout check, their four values inside y.
        unsafe {
            let lo = _mm512_set1_pd(*px.add(i));
            let b_lo = _mm512_castpd256_pd512(_mm256_loadu_pd(py.add(i * stride + offset)));
            let (a, b) = if lanes == 0xff {
                let hi = _mm256_set1_pd(*px.add(i + 1));
                (_mm512_insertf64x4::<1>(lo, hi), _mm512_insertf64x4::<1>(b_lo, _mm256_loadu_pd(py.add((i + 1) * stride + offset))))
            } else {
                (lo, b_lo)
            };
            let zero = _mm512_setzero_pd();
            let m = _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(_mm512_sub_pd(a, a), zero) & _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(_mm512_sub_pd(b, b), zero);
            (a, b, m & lanes)
        }
    }

    /// Accumulator h's lane 4c + k is the generic code's `[k][2h + c]`.
    fn split(v: [__m512d; 2]) -> Acc<4> {
        // SAFETY: __m512d and [f64; 8] have the same size and any bits are valid f64s.
        let a: [[f64; 8]; 2] = unsafe { std::mem::transmute(v) };
        std::array::from_fn(|k| [a[0][k], a[0][4 + k], a[1][k], a[1][4 + k]])
    }

    /// # Safety
    /// AVX-512F, and the layout of [`pearson4`](super::pearson4).
    #[target_feature(enable = "avx512f")]
    pub unsafe fn pass1(x: &[f64], y: &[f64], stride: usize, offset: usize) -> (Acc<4>, Acc<4>, Acc<4>) {
        let z = _mm512_setzero_pd();
        let (mut n, mut sx, mut sy) = ([z; 2], [z; 2], [z; 2]);
        let one = _mm512_set1_pd(1.0);
        let len = x.len();
        let full = len / super::L * super::L;
        let mut add = |h: usize, i: usize, lanes: __mmask8| {
            // SAFETY: passed on from the caller.
            let (a, b, m) = unsafe { cells(x, y, stride, offset, i, lanes) };
            n[h] = _mm512_mask_add_pd(n[h], m, n[h], one);
            sx[h] = _mm512_mask_add_pd(sx[h], m, sx[h], a);
            sy[h] = _mm512_mask_add_pd(sy[h], m, sy[h], b);
        };
        // Cells 4j..4j + 4 into the two accumulators, the rest two by two into the first.
        for i in (0..full).step_by(4) {
            add(0, i, 0xff);
            add(1, i + 2, 0xff);
        }
        for i in (full..len).step_by(2) {
            add(0, i, if i + 1 < len { 0xff } else { 0x0f });
        }
        (split(n), split(sx), split(sy))
    }

    /// # Safety
    /// As for [`pass1`].
    #[target_feature(enable = "avx512f")]
    pub unsafe fn pass2(x: &[f64], y: &[f64], stride: usize, offset: usize, mx: [f64; 4], my: [f64; 4]) -> (Acc<4>, Acc<4>, Acc<4>) {
        let z = _mm512_setzero_pd();
        let (mut cxy, mut cxx, mut cyy) = ([z; 2], [z; 2], [z; 2]);
        let both = |v: [f64; 4]| _mm512_setr_pd(v[0], v[1], v[2], v[3], v[0], v[1], v[2], v[3]);
        let (mx, my) = (both(mx), both(my));
        let len = x.len();
        let full = len / super::L * super::L;
        let mut add = |h: usize, i: usize, lanes: __mmask8| {
            // SAFETY: passed on from the caller.
            let (a, b, m) = unsafe { cells(x, y, stride, offset, i, lanes) };
            let (u, v) = (_mm512_maskz_sub_pd(m, a, mx), _mm512_maskz_sub_pd(m, b, my));
            cxy[h] = _mm512_add_pd(cxy[h], _mm512_mul_pd(u, v));
            cxx[h] = _mm512_add_pd(cxx[h], _mm512_mul_pd(u, u));
            cyy[h] = _mm512_add_pd(cyy[h], _mm512_mul_pd(v, v));
        };
        for i in (0..full).step_by(4) {
            add(0, i, 0xff);
            add(1, i + 2, 0xff);
        }
        for i in (full..len).step_by(2) {
            add(0, i, if i + 1 < len { 0xff } else { 0x0f });
        }
        (split(cxy), split(cxx), split(cyy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basics() {
        assert_eq!(mean_std(&[1.0, 2.0, 3.0]), (2.0, 1.0));
        assert!(mean_std(&[]).0.is_nan());
        let r = pearson_finite(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.5], 2);
        assert!(r > 0.99 && r <= 1.0);
        assert!(pearson_finite(&[1.0, 1.0], &[2.0, 4.0], 2).is_nan());
        // identical values whose computed mean is off by an ulp still count as constant
        let c = vec![0.1f64; 497];
        let y: Vec<f64> = (0..497).map(|i| i as f64).collect();
        assert!(pearson_finite(&c, &y, 20).is_nan());
        let (x, y) = ([1.0, f64::NAN, 2.0, 3.0], [2.0, 1.0, 4.0, 6.5]);
        assert!((pearson_finite(&x, &y, 2) - r).abs() < 1e-15);
        assert!(pearson_finite(&x, &y, 4).is_nan());
        // Several series at once give each one's own correlation, bit for bit.
        let mut s = 7u64;
        let mut rnd = || (crate::xorshift(&mut s) % 1000) as f64 / 7.0;
        let cols: Vec<Vec<f64>> = (0..4).map(|k| (0..97).map(|i| if (i + k) % 11 == 0 { f64::NAN } else { rnd() }).collect()).collect();
        let x: Vec<f64> = (0..97).map(|i| if i % 13 == 0 { f64::INFINITY } else { rnd() }).collect();
        let many = pearson_many(&x, [&cols[0], &cols[1], &cols[2], &c[..97]], 20);
        for k in 0..3 {
            assert_eq!(many[k], pearson_finite(&x, &cols[k], 20));
            assert!(many[k].is_finite());
        }
        assert!(many[3].is_nan());
        // The same four series interleaved (and one padding column) give the same results.
        let inter: Vec<f64> = (0..97).flat_map(|i| [f64::NAN, cols[0][i], cols[1][i], cols[2][i], c[i]]).collect();
        let counts: [usize; 4] = std::array::from_fn(|k| {
            let col = if k < 3 { &cols[k][..] } else { &c[..] };
            (0..97).filter(|&i| x[i].is_finite() && col[i].is_finite()).count()
        });
        for (r, n) in [pearson4(&x, &inter, 5, 1, 20), pearson4_generic(&x, &inter, 5, 1, 20)] {
            assert_eq!(r.map(f64::to_bits), many.map(f64::to_bits));
            assert_eq!(n, counts);
        }
    }
}

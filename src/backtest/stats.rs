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

/// The standard normal quantile Φ⁻¹(p) for 0 < p < 1 (NaN outside): Acklam's rational
/// approximation, relative error under 1.2e-9, ample for a significance bar.
#[allow(clippy::excessive_precision)] // the coefficients as published
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [-3.969683028665376e1, 2.209460984245205e2, -2.759285104469687e2, 1.383577518672690e2, -3.066479806614716e1, 2.506628277459239];
    const B: [f64; 5] = [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
    const C: [f64; 6] = [-7.784894002430293e-3, -3.223964580411365e-1, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
    const D: [f64; 4] = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
    let poly = |c: &[f64], x: f64| c.iter().fold(0.0, |acc, k| acc * x + k);
    // The tails from the smaller of p and 1 − p, so that a tiny tail keeps its digits.
    let tail = |p: f64| {
        let q = (-2.0 * p.ln()).sqrt();
        poly(&C, q) / (poly(&D, q) * q + 1.0)
    };
    const LOW: f64 = 0.02425;
    if !(p > 0.0 && p < 1.0) {
        f64::NAN
    } else if p < LOW {
        tail(p)
    } else if p > 1.0 - LOW {
        -tail(1.0 - p)
    } else {
        let q = p - 0.5;
        let r = q * q;
        poly(&A, r) * q / (poly(&B, r) * r + 1.0)
    }
}

/// The |t| that one of `n` hypotheses tried must reach to be significant at `level`
/// (two-sided) after Bonferroni's correction, each tested at level / n: the bar a signal
/// chosen as the best of n attempts has to clear before its t-statistic means anything.
/// Normal rather than Student's t: splits hold hundreds of days.
pub fn bonferroni_t(level: f64, n: usize) -> f64 {
    -normal_quantile(level / (2.0 * n.max(1) as f64))
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

/// [`pearson_many`] of `x` with four series (the IC at four horizons of one date), with
/// each series' count of cells where both sides are finite. With AVX-512, one vector holds
/// the eight lanes of a series' accumulators: the same operations in the same order as the
/// generic code, so the same bits.
///
/// `finite[k]` is [`finite_bits`] of `ys[k]`: the scorer keeps them per label row, so that
/// the passes test each label cell's bit instead of the cell (a subtraction and a compare
/// per eight cells and series, a third of the first pass's vector work).
pub fn pearson4(x: &[f64], ys: [&[f64]; 4], finite: [&[u64]; 4], min: usize) -> ([f64; 4], [usize; 4]) {
    pearson_k(x, ys, finite, min)
}

/// [`pearson4`] with any number of series: the scorer asks for one when one horizon is
/// left (four series where one was wanted was three quarters of the Pearson passes' time
/// when only the main horizon is scored, as a search scores).
pub fn pearson_k<const K: usize>(x: &[f64], ys: [&[f64]; K], finite: [&[u64]; K], min: usize) -> ([f64; K], [usize; K]) {
    assert!(ys.iter().all(|y| y.len() >= x.len()), "pearson4: a series is shorter than x");
    assert!(finite.iter().all(|f| f.len() * 64 >= x.len()), "pearson4: a bitset is shorter than x");
    debug_assert!((0..4).all(|k| ys[k][..x.len()].chunks(64).zip(finite[k]).all(|(c, &w)| finite_word(c) == w)), "pearson4: bits of other series");
    #[cfg(target_arch = "x86_64")]
    if crate::expr::kernels::simd::avx512_popcnt() {
        // On 98 % of the shipped data's dates every horizon labels the same stocks: then
        // the joint sets, and so Σx, the means of x and Σ(x − mx)², are one for all four
        // (the same operations on the same cells), and are computed once.
        let words = x.len().div_ceil(64);
        // SAFETY (all four calls): the CPU has AVX-512F and POPCNT, every series is at
        // least as long as x and every bitset covers x (asserted above); with `true`, the
        // bitsets are equal over x.
        if finite[1..].iter().all(|f| f[..words] == finite[0][..words]) {
            // SAFETY: as stated above for all four calls.
            let sums = unsafe { avx512::pass1::<K, true>(x, ys, finite) };
            return finish(x, |i| ys.map(|y| y[i]), min, sums, |mx, my| {
                // SAFETY: as stated above for all four calls.
                unsafe { avx512::pass2::<K, true>(x, ys, finite, mx, my) }
            });
        }
        // SAFETY: as stated above for all four calls.
        let sums = unsafe { avx512::pass1::<K, false>(x, ys, finite) };
        return finish(x, |i| ys.map(|y| y[i]), min, sums, |mx, my| {
            // SAFETY: as stated above for all four calls.
            unsafe { avx512::pass2::<K, false>(x, ys, finite, mx, my) }
        });
    }
    pearson_generic(x, ys, min)
}

/// Writes bit i (of word i / 64) set where `y[i]` is finite into `out`, which holds
/// `y.len().div_ceil(64)` words; bits past the end clear.
pub fn finite_bits(y: &[f64], out: &mut [u64]) {
    assert_eq!(out.len(), y.len().div_ceil(64), "finite_bits: a word per 64 cells");
    for (w, cells) in out.iter_mut().zip(y.chunks(64)) {
        *w = finite_word(cells);
    }
}

/// Bit i set where `cells[i]` (at most 64) is finite.
#[inline(always)]
fn finite_word(cells: &[f64]) -> u64 {
    cells.iter().enumerate().fold(0u64, |bits, (i, v)| bits | u64::from(v.is_finite()) << i)
}

crate::expr::kernels::avx2_dispatch! {
/// [`pearson_k`] without AVX-512.
fn pearson_generic<const K: usize>(x: &[f64], ys: [&[f64]; K], min: usize) -> ([f64; K], [usize; K]) {
    pearson_cells(x, |i| ys.map(|y| y[i]), min)
}
}

/// Per-series, per-lane sums: `[k][l]` for series k and lane l (cells i with i % L == l).
type Acc<const K: usize> = [[f64; L]; K];
/// Independent sums per series: one AVX-512 vector of them. (Four lanes, two cells' four
/// series per vector on interleaved labels, read each cell's signal value twice as often
/// and left the scorer's Pearson passes twice as slow.)
const L: usize = 8;

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
        pass1!(i, i - full);
    }
    finish(x, &y, min, (n.map(|c| c.iter().sum::<f64>()), sx, sy), |mx, my| {
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
            pass2!(i, i - full);
        }
        (cxy, cxx, cyy)
    })
}

/// From the first pass's sums (count per series, Σx, Σy per series and lane): the means,
/// the second pass (`pass2(mx, my)` returns Σ(x−mx)(y−my), Σ(x−mx)², Σ(y−my)²) unless no series has
/// enough cells, and the correlations with their counts of cells.
#[inline(always)]
fn finish<const K: usize>(
    x: &[f64],
    y: impl Fn(usize) -> [f64; K],
    min: usize,
    (count, sx, sy): ([f64; K], Acc<K>, Acc<K>),
    pass2: impl FnOnce([f64; K], [f64; K]) -> (Acc<K>, Acc<K>, Acc<K>),
) -> ([f64; K], [usize; K]) {
    let sum = |v: [f64; L]| v.iter().sum::<f64>();
    let mut out = [f64::NAN; K];
    let (mut mx, mut my) = ([0.0; K], [0.0; K]);
    for k in 0..K {
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

/// [`pearson4`]'s two passes on AVX-512: lane l of series k's accumulator is the generic
/// code's `[k][l]`, updated by the same operations in the same order (a masked-off lane
/// keeps its value where the generic code adds +0.0 to a sum that started at +0.0 and so
/// is never −0.0: the same value).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Acc, L};
    use crate::expr::kernels::simd::tail8;
    use std::arch::x86_64::*;

    #[inline]
    fn split<const K: usize>(v: [__m512d; K]) -> Acc<K> {
        // SAFETY: __m512d and [f64; 8] have the same size and any bits are valid f64s.
        v.map(|r| unsafe { std::mem::transmute::<__m512d, [f64; L]>(r) })
    }

    /// Calls `f(k, a, b, m)` for every eight cells and each series k: `a` holds the cells
    /// of x, `b` those of series k (zero outside the row) and `m` the lanes where both are
    /// finite (series k's from its bitset `ok[k]`).
    ///
    /// # Safety
    /// AVX-512F, every series at least as long as `x` and every bitset covering it.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn sweep<const K: usize, const SHARED: bool>(x: &[f64], ys: [&[f64]; K], ok: [&[u64]; K], mut f: impl FnMut(usize, __m512d, __m512d, __mmask8)) {
        let len = x.len();
        for q in 0..len.div_ceil(L) {
            let on = tail8(len, q);
            // SAFETY: only lanes inside x (and so, by the caller, inside every series) are
            // read.
            let a = unsafe { _mm512_maskz_loadu_pd(on, x.as_ptr().add(L * q)) };
            // `finite(a)`, compared under each series' bits (so the joint mask is made in a
            // mask register: combining the masks in general registers, the compiler moved
            // them through memory and stalled on it).
            let d = _mm512_sub_pd(a, a);
            let mut first = 0;
            for (k, y) in ys.iter().enumerate() {
                // SAFETY: as above.
                let b = unsafe { _mm512_maskz_loadu_pd(on, y.as_ptr().add(L * q)) };
                let m = if SHARED && k > 0 {
                    first
                } else {
                    // SAFETY: word q / 8 of a bitset covering x.
                    let bits = unsafe { *ok[k].get_unchecked(q / 8) };
                    _mm512_mask_cmp_pd_mask::<_CMP_EQ_OQ>((bits >> (8 * (q % 8))) as u8 & on, d, _mm512_setzero_pd())
                };
                first = m;
                f(k, a, b, m);
            }
        }
    }

    /// With `SHARED`, every bitset must equal the first over x (the same joint sets): the
    /// sums of x and the counts are made once, for series 0, and copied.
    ///
    /// # Safety
    /// As for [`sweep`], and POPCNT.
    #[target_feature(enable = "avx512f,popcnt")]
    pub unsafe fn pass1<const K: usize, const SHARED: bool>(x: &[f64], ys: [&[f64]; K], ok: [&[u64]; K]) -> ([f64; K], Acc<K>, Acc<K>) {
        let z = _mm512_setzero_pd();
        let (mut sx, mut sy) = ([z; K], [z; K]);
        // SAFETY: passed on from the caller.
        unsafe {
            sweep::<K, SHARED>(x, ys, ok, |k, a, b, m| {
                if !SHARED || k == 0 {
                    sx[k] = _mm512_mask_add_pd(sx[k], m, sx[k], a);
                }
                sy[k] = _mm512_mask_add_pd(sy[k], m, sy[k], b);
            })
        };
        // The counts from the bitsets, 64 cells per word (the generic code's per-lane sums
        // of ones, summed: the same exact count).
        let mut n = [0u32; K];
        let own = if SHARED { 1 } else { K };
        for (w, chunk) in x.chunks(64).enumerate() {
            let fx = super::finite_word(chunk);
            for k in 0..own {
                // SAFETY: word w of a bitset covering x.
                n[k] += (fx & unsafe { *ok[k].get_unchecked(w) }).count_ones();
            }
        }
        if SHARED {
            for k in 1..K {
                (sx[k], n[k]) = (sx[0], n[0]);
            }
        }
        (n.map(f64::from), split(sx), split(sy))
    }

    /// # Safety
    /// As for [`sweep`].
    #[target_feature(enable = "avx512f")]
    pub unsafe fn pass2<const K: usize, const SHARED: bool>(x: &[f64], ys: [&[f64]; K], ok: [&[u64]; K], mx: [f64; K], my: [f64; K]) -> (Acc<K>, Acc<K>, Acc<K>) {
        let z = _mm512_setzero_pd();
        let (mut cxy, mut cxx, mut cyy) = ([z; K], [z; K], [z; K]);
        let (mx, my) = (mx.map(|v| _mm512_set1_pd(v)), my.map(|v| _mm512_set1_pd(v)));
        // With `SHARED` the means of x are all equal (from equal sums and counts), so x − mx
        // and its square are series 0's.
        let mut first = z;
        // SAFETY: passed on from the caller.
        unsafe {
            sweep::<K, SHARED>(x, ys, ok, |k, a, b, m| {
                let u = if SHARED && k > 0 { first } else { _mm512_maskz_sub_pd(m, a, mx[k]) };
                first = u;
                let v = _mm512_maskz_sub_pd(m, b, my[k]);
                cxy[k] = _mm512_add_pd(cxy[k], _mm512_mul_pd(u, v));
                if !SHARED || k == 0 {
                    cxx[k] = _mm512_add_pd(cxx[k], _mm512_mul_pd(u, u));
                }
                cyy[k] = _mm512_add_pd(cyy[k], _mm512_mul_pd(v, v));
            })
        };
        if SHARED {
            for k in 1..K {
                cxx[k] = cxx[0];
            }
        }
        (split(cxy), split(cxx), split(cyy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_quantiles_and_the_bonferroni_bar() {
        // Reference values: Python's statistics.NormalDist().inv_cdf.
        for (p, z) in [(0.975, 1.959963984540054), (0.5, 0.0), (0.01, -2.3263478740408408), (1e-6, -4.753424308822899), (0.9999, 3.7190164854557084)] {
            assert!((normal_quantile(p) - z).abs() < 1e-8 * z.abs().max(1.0), "p {p}: {} against {z}", normal_quantile(p));
        }
        assert!(normal_quantile(0.0).is_nan() && normal_quantile(1.0).is_nan() && normal_quantile(f64::NAN).is_nan());
        assert!((bonferroni_t(0.05, 1) - 1.959963984540054).abs() < 1e-8);
        // 100 attempts: each at 0.05 / 100, two-sided, so the upper 0.00025 point.
        assert!((bonferroni_t(0.05, 100) - 3.480756404346213).abs() < 1e-7, "{}", bonferroni_t(0.05, 100));
    }

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
        // The same through pearson4 (AVX-512 where the CPU has it, and the generic code),
        // with the counts.
        let ys = [&cols[0][..], &cols[1][..], &cols[2][..], &c[..97]];
        let counts: [usize; 4] = std::array::from_fn(|k| (0..97).filter(|&i| x[i].is_finite() && ys[k][i].is_finite()).count());
        let bits: Vec<Vec<u64>> = ys
            .iter()
            .map(|y| {
                let mut b = vec![0; y.len().div_ceil(64)];
                finite_bits(y, &mut b);
                b
            })
            .collect();
        let finite = [&bits[0][..], &bits[1][..], &bits[2][..], &bits[3][..]];
        for (r, n) in [pearson4(&x, ys, finite, 20), pearson_generic(&x, ys, 20)] {
            assert_eq!(r.map(f64::to_bits), many.map(f64::to_bits));
            assert_eq!(n, counts);
        }
        // One series at a time (the scorer's route with one horizon): the same bits.
        for k in 0..4 {
            let (r, n) = pearson_k(&x, [ys[k]], [finite[k]], 20);
            assert_eq!((r[0].to_bits(), n[0]), (many[k].to_bits(), counts[k]), "series {k}");
        }
    }

    /// Series finite on the same cells (the labels at every horizon, on most dates) take
    /// pearson4's shared route: the same bits as each series on its own.
    #[test]
    fn pearson4_on_series_finite_alike() {
        let mut s = 11u64;
        let mut rnd = || (crate::xorshift(&mut s) % 100_000) as f64 / 37.0 - 1000.0;
        for len in [20usize, 63, 64, 65, 496, 511] {
            let cols: Vec<Vec<f64>> = (0..4).map(|_| (0..len).map(|i| if i % 9 == 4 { f64::NAN } else { rnd() }).collect()).collect();
            let x: Vec<f64> = (0..len).map(|i| if i % 17 == 3 { f64::NAN } else { rnd() }).collect();
            let ys = [&cols[0][..], &cols[1][..], &cols[2][..], &cols[3][..]];
            let bits: Vec<Vec<u64>> = ys
                .iter()
                .map(|y| {
                    let mut b = vec![0; len.div_ceil(64)];
                    finite_bits(y, &mut b);
                    b
                })
                .collect();
            assert!(bits.iter().all(|b| *b == bits[0]));
            let finite = [&bits[0][..], &bits[1][..], &bits[2][..], &bits[3][..]];
            let own: [f64; 4] = std::array::from_fn(|k| pearson_finite(&x, ys[k], 10));
            assert!(own.iter().all(|r| r.is_finite()), "{own:?}");
            for (r, n) in [pearson4(&x, ys, finite, 10), pearson_generic(&x, ys, 10)] {
                assert_eq!(r.map(f64::to_bits), own.map(f64::to_bits), "length {len}");
                let joint = (0..len).filter(|&i| x[i].is_finite() && cols[0][i].is_finite()).count();
                assert_eq!(n, [joint; 4]);
            }
        }
    }
}

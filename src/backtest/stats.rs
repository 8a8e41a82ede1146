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

/// Whether `x` takes a single value over the cells where both are finite. Checked exactly:
/// the mean of identical values can be off by an ulp, which would leave a tiny non-zero
/// variance and a meaningless correlation instead of "zero variance".
fn constant(x: &[f64], y: &[f64]) -> bool {
    let mut first = None;
    for (&a, &b) in x.iter().zip(y) {
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
/// per pass for all of them (the IC at every horizon of one date in one sweep). Runs as
/// AVX2 code where the CPU has it ([`avx2_dispatch`](crate::expr::kernels::avx2_dispatch)).
pub fn pearson_many<const K: usize>(x: &[f64], ys: [&[f64]; K], min: usize) -> [f64; K] {
    // Branch-free, with independent accumulators per lane: a cell outside the joint set
    // contributes zeros, and no add waits on the previous one, so the loops vectorise.
    const L: usize = 2;
    // `v - v == 0` exactly when v is finite (NaN and ±inf give NaN); unlike `is_finite`
    // it stays in float registers, which lets the loop vectorise.
    #[inline(always)]
    #[allow(clippy::eq_op)]
    fn ok(v: f64) -> bool {
        v - v == 0.0
    }
    let n_cells = ys.iter().map(|y| y.len()).fold(x.len(), usize::min);
    let x = &x[..n_cells];
    let ys: [&[f64]; K] = ys.map(|y| &y[..n_cells]);
    let full = n_cells / L * L;
    // Lanes beyond the last full chunk are folded into lane 0 below.
    let (mut n, mut sx, mut sy) = ([[0.0f64; L]; K], [[0.0f64; L]; K], [[0.0f64; L]; K]);
    for i in (0..full).step_by(L) {
        for l in 0..L {
            let a = x[i + l];
            for k in 0..K {
                let b = ys[k][i + l];
                let m = ok(a) & ok(b);
                n[k][l] += if m { 1.0 } else { 0.0 };
                sx[k][l] += if m { a } else { 0.0 };
                sy[k][l] += if m { b } else { 0.0 };
            }
        }
    }
    for i in full..n_cells {
        let a = x[i];
        for k in 0..K {
            let b = ys[k][i];
            let m = ok(a) & ok(b);
            n[k][0] += if m { 1.0 } else { 0.0 };
            sx[k][0] += if m { a } else { 0.0 };
            sy[k][0] += if m { b } else { 0.0 };
        }
    }
    let sum = |v: [f64; L]| v.iter().sum::<f64>();
    let mut out = [f64::NAN; K];
    let (mut count, mut mx, mut my) = ([0.0; K], [0.0; K], [0.0; K]);
    for k in 0..K {
        count[k] = sum(n[k]);
        mx[k] = sum(sx[k]) / count[k];
        my[k] = sum(sy[k]) / count[k];
    }
    if count.iter().all(|&c| c < min.max(2) as f64) {
        return out;
    }
    let (mut cxy, mut cxx, mut cyy) = ([[0.0f64; L]; K], [[0.0f64; L]; K], [[0.0f64; L]; K]);
    for i in (0..full).step_by(L) {
        for l in 0..L {
            let a = x[i + l];
            for k in 0..K {
                let b = ys[k][i + l];
                let m = ok(a) & ok(b);
                let u = if m { a - mx[k] } else { 0.0 };
                let v = if m { b - my[k] } else { 0.0 };
                cxy[k][l] += u * v;
                cxx[k][l] += u * u;
                cyy[k][l] += v * v;
            }
        }
    }
    for i in full..n_cells {
        let a = x[i];
        for k in 0..K {
            let b = ys[k][i];
            let m = ok(a) & ok(b);
            let u = if m { a - mx[k] } else { 0.0 };
            let v = if m { b - my[k] } else { 0.0 };
            cxy[k][0] += u * v;
            cxx[k][0] += u * u;
            cyy[k][0] += v * v;
        }
    }
    for k in 0..K {
        let (cxy, cxx, cyy) = (sum(cxy[k]), sum(cxx[k]), sum(cyy[k]));
        if count[k] < min.max(2) as f64 || cxx <= 0.0 || cyy <= 0.0 {
            continue;
        }
        // A constant side leaves at most rounding noise in its variance (relative to the
        // sum of squares, far below 1e-20), so only such a tiny variance needs the exact
        // check.
        let tiny = |c: f64, m: f64| c <= 1e-20 * (c + count[k] * m * m);
        let (x, y) = (x, ys[k]);
        if (tiny(cxx, mx[k]) && constant(x, y)) || (tiny(cyy, my[k]) && constant(y, x)) {
            continue;
        }
        out[k] = (cxy / (cxx.sqrt() * cyy.sqrt())).clamp(-1.0, 1.0);
    }
    out
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
        let mut rnd = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 1000) as f64 / 7.0
        };
        let cols: Vec<Vec<f64>> = (0..4).map(|k| (0..97).map(|i| if (i + k) % 11 == 0 { f64::NAN } else { rnd() }).collect()).collect();
        let x: Vec<f64> = (0..97).map(|i| if i % 13 == 0 { f64::INFINITY } else { rnd() }).collect();
        let many = pearson_many(&x, [&cols[0], &cols[1], &cols[2], &c[..97]], 20);
        for k in 0..3 {
            assert_eq!(many[k], pearson_finite(&x, &cols[k], 20));
            assert!(many[k].is_finite());
        }
        assert!(many[3].is_nan());
    }
}

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
    // Branch-free, with four independent accumulators per sum: a cell outside the joint
    // set contributes zeros, and no add waits on the previous one, so the loops vectorise.
    const L: usize = 4;
    // `v - v == 0` exactly when v is finite (NaN and ±inf give NaN); unlike `is_finite`
    // it stays in float registers, which lets the loop vectorise.
    #[inline(always)]
    fn ok(a: f64, b: f64) -> bool {
        (a - a == 0.0) & (b - b == 0.0)
    }
    let (mut n, mut sx, mut sy) = ([0.0f64; L], [0.0f64; L], [0.0f64; L]);
    let (xc, yc) = (x.chunks_exact(L), y.chunks_exact(L));
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (a, b) in xc.zip(yc) {
        for l in 0..L {
            let k = ok(a[l], b[l]);
            n[l] += if k { 1.0 } else { 0.0 };
            sx[l] += if k { a[l] } else { 0.0 };
            sy[l] += if k { b[l] } else { 0.0 };
        }
    }
    for (l, (&a, &b)) in xr.iter().zip(yr).enumerate() {
        let k = ok(a, b);
        n[l] += if k { 1.0 } else { 0.0 };
        sx[l] += if k { a } else { 0.0 };
        sy[l] += if k { b } else { 0.0 };
    }
    let sum = |v: [f64; L]| (v[0] + v[1]) + (v[2] + v[3]);
    let count = sum(n);
    if count < min.max(2) as f64 {
        return f64::NAN;
    }
    let (mx, my) = (sum(sx) / count, sum(sy) / count);
    let (mut cxy, mut cxx, mut cyy) = ([0.0f64; L], [0.0f64; L], [0.0f64; L]);
    for (a, b) in x.chunks_exact(L).zip(y.chunks_exact(L)) {
        for l in 0..L {
            let k = ok(a[l], b[l]);
            let u = if k { a[l] - mx } else { 0.0 };
            let v = if k { b[l] - my } else { 0.0 };
            cxy[l] += u * v;
            cxx[l] += u * u;
            cyy[l] += v * v;
        }
    }
    for (l, (&a, &b)) in xr.iter().zip(yr).enumerate() {
        let k = ok(a, b);
        let u = if k { a - mx } else { 0.0 };
        let v = if k { b - my } else { 0.0 };
        cxy[l] += u * v;
        cxx[l] += u * u;
        cyy[l] += v * v;
    }
    let (cxy, cxx, cyy) = (sum(cxy), sum(cxx), sum(cyy));
    if cxx <= 0.0 || cyy <= 0.0 {
        return f64::NAN;
    }
    // A constant side leaves at most rounding noise in its variance (relative to the sum
    // of squares, far below 1e-20), so only such a tiny variance needs the exact check.
    let tiny = |c: f64, m: f64| c <= 1e-20 * (c + count * m * m);
    if (tiny(cxx, mx) && constant(x, y)) || (tiny(cyy, my) && constant(y, x)) {
        return f64::NAN;
    }
    (cxy / (cxx.sqrt() * cyy.sqrt())).clamp(-1.0, 1.0)
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
    }
}

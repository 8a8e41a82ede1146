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

/// Two-pass Pearson correlation; NaN when either side has zero variance.
pub fn pearson(pairs: impl Iterator<Item = (f64, f64)> + Clone) -> f64 {
    let (mut n, mut sx, mut sy) = (0usize, 0.0, 0.0);
    for (x, y) in pairs.clone() {
        n += 1;
        sx += x;
        sy += y;
    }
    if n < 2 {
        return f64::NAN;
    }
    let (mx, my) = (sx / n as f64, sy / n as f64);
    let (mut cxy, mut cxx, mut cyy) = (0.0, 0.0, 0.0);
    for (x, y) in pairs {
        let (a, b) = (x - mx, y - my);
        cxy += a * b;
        cxx += a * a;
        cyy += b * b;
    }
    if cxx <= 0.0 || cyy <= 0.0 {
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
        let r = pearson([(1.0, 2.0), (2.0, 4.0), (3.0, 6.5)].into_iter());
        assert!(r > 0.99 && r <= 1.0);
        assert!(pearson([(1.0, 2.0), (1.0, 4.0)].into_iter()).is_nan());
    }
}

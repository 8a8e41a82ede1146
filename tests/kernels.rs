//! Every time-series and cross-sectional kernel against a naive O(n·w) reference loop, on
//! adversarial inputs (NaN runs, ties, constant windows, window = 1 and = length, large
//! magnitudes) and on random inputs (proptest).

mod common;

use alphaloop::expr::kernels::cross;
use alphaloop::expr::kernels::rolling::{self, Extreme};
use proptest::prelude::*;

type Kernel = fn(&[f64], usize, &mut [f64]);

fn window(x: &[f64], t: usize, d: usize) -> Option<&[f64]> {
    if t + 1 < d {
        return None;
    }
    let w = &x[t + 1 - d..=t];
    w.iter().all(|v| v.is_finite()).then_some(w)
}

fn all_equal(w: &[f64]) -> bool {
    w.iter().all(|v| *v == w[0])
}

/// Deviations from the mean, computed around the window's first value: the same numbers
/// in exact arithmetic, and exact where the values are close (their differences are),
/// where a plain two-pass mean of values differing in their last bits is off by as much as
/// the deviations themselves.
fn deviations(w: &[f64]) -> Vec<f64> {
    let o = w[0];
    let m = w.iter().map(|v| v - o).sum::<f64>() / w.len() as f64;
    w.iter().map(|v| v - o - m).collect()
}

fn naive_var(w: &[f64]) -> f64 {
    if all_equal(w) {
        return 0.0;
    }
    deviations(w).iter().map(|u| u * u).sum::<f64>() / (w.len() as f64 - 1.0)
}

fn naive(x: &[f64], d: usize, f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    (0..x.len()).map(|t| window(x, t, d).map(&f).unwrap_or(f64::NAN)).collect()
}

fn naive2(x: &[f64], y: &[f64], d: usize, f: impl Fn(&[f64], &[f64]) -> f64) -> Vec<f64> {
    (0..x.len())
        .map(|t| match (window(x, t, d), window(y, t, d)) {
            (Some(a), Some(b)) => f(a, b),
            _ => f64::NAN,
        })
        .collect()
}

fn naive_cov(a: &[f64], b: &[f64]) -> f64 {
    if all_equal(a) || all_equal(b) {
        return 0.0;
    }
    deviations(a).iter().zip(deviations(b)).map(|(u, v)| u * v).sum::<f64>() / (a.len() as f64 - 1.0)
}

fn naive_corr(a: &[f64], b: &[f64]) -> f64 {
    if all_equal(a) || all_equal(b) {
        return f64::NAN;
    }
    naive_cov(a, b) / (naive_var(a).sqrt() * naive_var(b).sqrt())
}

/// Same NaN pattern, values equal to a relative 1e-9 of the window's scale.
fn assert_close(name: &str, got: &[f64], want: &[f64], scale: f64) {
    assert_eq!(got.len(), want.len());
    for (t, (g, w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() || g.is_nan() {
            assert!(w.is_nan() && g.is_nan(), "{name}: at t={t} got {g}, want {w}");
            continue;
        }
        let tol = 1e-9 * scale.max(w.abs()).max(1.0);
        assert!((g - w).abs() <= tol, "{name}: at t={t} got {g}, want {w} (diff {})", (g - w).abs());
    }
}

fn scale_of(x: &[f64]) -> f64 {
    x.iter().filter(|v| v.is_finite()).fold(0.0f64, |a, v| a.max(v.abs()))
}

fn check_all(x: &[f64], y: &[f64], d: usize) {
    let n = x.len();
    let run = |k: Kernel| {
        let mut o = vec![0.0; n];
        k(x, d, &mut o);
        o
    };
    let s = scale_of(x);
    let dn = d as f64;
    assert_close("delay", &run(rolling::delay), &(0..n).map(|t| if t >= d { x[t - d] } else { f64::NAN }).collect::<Vec<_>>(), s);
    assert_close("delta", &run(rolling::delta), &(0..n).map(|t| if t >= d { x[t] - x[t - d] } else { f64::NAN }).collect::<Vec<_>>(), s);
    assert_close("sum", &run(rolling::sum), &naive(x, d, |w| w.iter().sum()), s * dn);
    assert_close("mean", &run(rolling::mean), &naive(x, d, |w| w.iter().sum::<f64>() / dn), s);
    let std_ref = naive(x, d, |w| if w.len() < 2 { f64::NAN } else { naive_var(w).sqrt() });
    assert_close("std", &run(rolling::std), &std_ref, s * 1e-3);
    assert_close("product", &run(rolling::product), &naive(x, d, |w| {
        // the engine never emits ±inf: overflow is NaN
        let p: f64 = w.iter().product();
        if p.is_infinite() { f64::NAN } else { p }
    }), s.powi(d as i32).min(1e300));
    assert_close(
        "ts_rank",
        &run(rolling::ts_rank),
        &naive(x, d, |w| {
            let v = w[w.len() - 1];
            let lt = w.iter().filter(|u| **u < v).count() as f64;
            let eq = w.iter().filter(|u| **u == v).count() as f64;
            (lt + (eq + 1.0) / 2.0) / dn
        }),
        1.0,
    );
    assert_close(
        "decay_linear",
        &run(rolling::decay_linear),
        &naive(x, d, |w| w.iter().enumerate().map(|(i, v)| (i + 1) as f64 * v).sum::<f64>() / (dn * (dn + 1.0) / 2.0)),
        s,
    );
    assert_close(
        "ts_zscore",
        &run(rolling::zscore),
        &naive(x, d, |w| {
            let sd = if w.len() < 2 { f64::NAN } else { naive_var(w).sqrt() };
            if sd > 0.0 { deviations(w)[w.len() - 1] / sd } else { f64::NAN }
        }),
        1e3,
    );
    assert_close(
        "ts_ffill",
        &run(rolling::ffill),
        &(0..n).map(|t| (t.saturating_sub(d - 1)..=t).rev().map(|s| x[s]).find(|v| v.is_finite()).unwrap_or(f64::NAN)).collect::<Vec<_>>(),
        s,
    );
    // The least-squares line against days 1..d, two-pass around the window's first value.
    let fit = |w: &[f64]| {
        let (m, dev) = (w.len() as f64, deviations(w));
        let mid = (m + 1.0) / 2.0;
        let sxx: f64 = (1..=w.len()).map(|i| (i as f64 - mid).powi(2)).sum();
        let sxy: f64 = dev.iter().enumerate().map(|(i, u)| (i as f64 + 1.0 - mid) * u).sum();
        let syy: f64 = dev.iter().map(|u| u * u).sum();
        let b = if all_equal(w) { 0.0 } else { sxy / sxx };
        let r2 = if all_equal(w) { f64::NAN } else { sxy * sxy / (sxx * syy) };
        let e = if all_equal(w) { 0.0 } else { dev[w.len() - 1] - b * (m - mid) };
        (b, r2, e)
    };
    let short = |w: &[f64], v: f64| if w.len() < 2 { f64::NAN } else { v };
    assert_close("ts_slope", &run(rolling::slope), &naive(x, d, |w| short(w, fit(w).0)), s);
    assert_close("ts_resi", &run(rolling::resi), &naive(x, d, |w| short(w, fit(w).2)), s * dn);
    // R² of nearly constant windows is ill-conditioned, as the correlation below.
    let (got, want) = (run(rolling::rsquare), naive(x, d, |w| short(w, fit(w).1)));
    for (t, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.is_nan(), w.is_nan(), "rsquare NaN pattern at t={t}: got {g}, want {w}");
        assert!(!w.is_finite() || ((g - w).abs() < 1e-6 && (0.0..=1.0).contains(g)), "rsquare at t={t}: got {g}, want {w}");
    }
    for q in [0.0, 0.2, 0.5, 0.8, 1.0] {
        let mut o = vec![0.0; n];
        rolling::quantile(x, d, q, &mut o);
        let want = naive(x, d, |w| {
            let mut v = w.to_vec();
            v.sort_by(f64::total_cmp);
            let h = q * (v.len() - 1) as f64;
            let i = h.floor() as usize;
            if h == i as f64 { v[i] } else { v[i] + (v[i + 1] - v[i]) * (h - i as f64) }
        });
        assert_close(&format!("ts_quantile q={q}"), &o, &want, s);
    }
    for (which, name) in [(Extreme::Min, "min"), (Extreme::Max, "max"), (Extreme::ArgMin, "argmin"), (Extreme::ArgMax, "argmax")] {
        let mut o = vec![0.0; n];
        rolling::extreme(x, d, which, &mut o);
        let want = naive(x, d, |w| {
            let mut best = 0;
            for i in 1..w.len() {
                let better = match which {
                    Extreme::Min | Extreme::ArgMin => w[i] < w[best],
                    _ => w[i] > w[best],
                };
                if better {
                    best = i;
                }
            }
            match which {
                Extreme::Min | Extreme::Max => w[best],
                _ => (best + 1) as f64,
            }
        });
        assert_close(name, &o, &want, s);
    }
    let run2 = |k: fn(&[f64], &[f64], usize, &mut [f64])| {
        let mut o = vec![0.0; n];
        k(x, y, d, &mut o);
        o
    };
    let cov_ref = naive2(x, y, d, |a, b| if a.len() < 2 { f64::NAN } else { naive_cov(a, b) });
    assert_close("cov", &run2(rolling::cov), &cov_ref, s * scale_of(y));
    // Two points always lie on a line: their correlation is ±1 (NaN if a side did not
    // move), which the two-pass formula only approximates where the values are close.
    let corr_ref = naive2(x, y, d, |a, b| match a.len() {
        0 | 1 => f64::NAN,
        2 if a[0] == a[1] || b[0] == b[1] => f64::NAN,
        2 => (a[1] - a[0]).signum() * (b[1] - b[0]).signum(),
        _ => naive_corr(a, b),
    });
    // Correlation of nearly constant windows is ill-conditioned; compare at 1e-6.
    let got = run2(rolling::corr);
    for (t, (g, w)) in got.iter().zip(&corr_ref).enumerate() {
        assert_eq!(g.is_nan(), w.is_nan(), "corr NaN pattern at t={t}: got {g}, want {w}");
        if w.is_finite() {
            assert!((g - w).abs() < 1e-6, "corr at t={t}: got {g}, want {w}");
        }
    }
}

fn series(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.max(1);
    (0..n).map(|_| (alphaloop::xorshift(&mut s) % 10_000) as f64 / 100.0 - 50.0).collect()
}

#[test]
fn adversarial_inputs_match_naive_loops() {
    let nan = f64::NAN;
    let cases: Vec<Vec<f64>> = vec![
        series(300, 7),
        // NaN runs at the start, middle and end
        [vec![nan; 5], series(50, 3), vec![nan; 7], series(60, 9), vec![nan; 3]].concat(),
        // ties: few distinct values
        series(200, 11).iter().map(|v| (v / 20.0).round()).collect(),
        // constant stretches
        [vec![3.0; 40], series(30, 5), vec![-1.5; 25], vec![0.0; 10]].concat(),
        // large magnitude with tiny variation (cancellation trap for running sums)
        series(300, 13).iter().map(|v| 1e7 + v * 1e-3).collect(),
        // equal up to rounding noise (an adjusted price whose factor wobbles in the last
        // bit): running sums cancel here, the exact two-pass answer is still defined
        series(200, 21).iter().map(|v| 1.0310937 * (1.0 + (v.abs() as i64 % 3) as f64 * f64::EPSILON)).collect(),
        // zeros and signs for product
        series(80, 17).iter().map(|v| if v.abs() < 5.0 { 0.0 } else { v / 40.0 }).collect(),
        vec![1.0],
        vec![],
    ];
    for (ci, x) in cases.iter().enumerate() {
        let y: Vec<f64> = series(x.len(), 99 + ci as u64).iter().zip(x).map(|(a, b)| if b.is_nan() { *b } else { a + 0.3 * b }).collect();
        let n = x.len().max(1);
        for d in [1, 2, 3, 5, 10, 20, 60, n] {
            if d <= n {
                check_all(x, &y, d);
            }
        }
    }
}

#[test]
fn cross_sectional_rank_matches_naive_average_ranks() {
    let nan = f64::NAN;
    let row = [3.0, nan, 1.0, 3.0, 2.0, nan, 3.0, -0.0, 0.0];
    let mut out = vec![0.0; row.len()];
    let mut buf = cross::SortBuf::default();
    cross::rank_row(&row, &mut out, &mut buf);
    let finite: Vec<f64> = row.iter().copied().filter(|v| v.is_finite()).collect();
    for (i, v) in row.iter().enumerate() {
        if v.is_nan() {
            assert!(out[i].is_nan());
            continue;
        }
        let lt = finite.iter().filter(|u| **u < *v).count() as f64;
        let eq = finite.iter().filter(|u| **u == *v).count() as f64;
        assert_eq!(out[i], (lt + (eq + 1.0) / 2.0) / finite.len() as f64, "rank of {v}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn rolling_kernels_match_naive(
        vals in prop::collection::vec(prop_oneof![8 => -100.0f64..100.0, 1 => Just(f64::NAN), 1 => Just(1.5f64)], 1..120),
        other in prop::collection::vec(-100.0f64..100.0, 120),
        d in 1usize..40,
    ) {
        let d = d.min(vals.len());
        let y: Vec<f64> = other[..vals.len()].to_vec();
        check_all(&vals, &y, d);
    }
}

/// The eight-assets-per-lane kernels on the real sample data (listings, gaps, runs of equal
/// prices, split-adjusted steps) against the one-asset walk, bit for bit.
#[test]
fn lane_kernels_equal_the_one_asset_kernels_on_real_data() {
    let d = common::sample();
    let (close, volume, high) = (d.field("close").expect("close"), d.field("volume").expect("volume"), d.field("high").expect("high"));
    let rank = |x: &[f64], _: &[f64], w: usize, o: &mut [f64]| rolling::ts_rank(x, w, o);
    let ext = |e: Extreme| move |x: &[f64], _: &[f64], w: usize, o: &mut [f64]| rolling::extreme(x, w, e, o);
    let (max, argmin) = (ext(Extreme::Max), ext(Extreme::ArgMin));
    let one = |k: fn(&[f64], usize, &mut [f64])| move |x: &[f64], _: &[f64], w: usize, o: &mut [f64]| k(x, w, o);
    let (sum, decay, std) = (one(rolling::sum), one(rolling::decay_linear), one(rolling::std));
    for w in [2, 5, 10, 20] {
        for (name, x, y, lanes, one) in [
            ("corr(close, volume)", close, volume, rolling::corr_panel(close, volume, w), &rolling::corr as &dyn Fn(&[f64], &[f64], usize, &mut [f64])),
            ("corr(high, close)", high, close, rolling::corr_panel(high, close, w), &rolling::corr),
            ("cov(close, volume)", close, volume, rolling::cov_panel(close, volume, w), &rolling::cov),
            ("ts_rank(volume)", volume, volume, rolling::ts_rank_panel(volume, w), &rank),
            ("ts_max(close)", close, close, rolling::extreme_panel(close, w, Extreme::Max), &max),
            ("ts_argmin(volume)", volume, volume, rolling::extreme_panel(volume, w, Extreme::ArgMin), &argmin),
            ("ts_sum(volume)", volume, volume, rolling::sum_panel(volume, w), &sum),
            ("decay_linear(close)", close, close, rolling::decay_linear_panel(close, w), &decay),
            ("ts_std(close)", close, close, rolling::std_panel(close, w), &std),
        ] {
            let mut want = vec![0.0; d.n_dates()];
            let mut finite = 0;
            for a in 0..d.n_assets() {
                one(&x.series(a), &y.series(a), w, &mut want);
                for (t, (g, e)) in lanes.series(a).iter().zip(&want).enumerate() {
                    assert!(g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()), "{name}, d = {w}, asset {a}, day {t}: lanes {g}, one-asset {e}");
                    finite += usize::from(e.is_finite());
                }
            }
            assert!(finite > d.n_dates() * d.n_assets() / 2, "{name}: only {finite} finite values");
        }
    }
}

/// The cross-sectional rank of real panels, every date, against average ranks counted the
/// naive way, bit for bit: prices (nearly all distinct), returns (exact ties at zero and
/// between equal price moves) and a five-day time-series rank (a handful of values, so
/// nearly every value sits in a run of ties).
#[test]
fn cross_sectional_rank_of_real_panels_matches_naive_average_ranks() {
    use alphaloop::expr::{eval_expr, NoAlphas};
    let d = common::sample();
    for expr in ["close", "returns", "ts_rank(volume, 5)"] {
        let x = eval_expr(expr, d, &NoAlphas).expect("evaluates");
        let r = eval_expr(&format!("rank({expr})"), d, &NoAlphas).expect("evaluates");
        for t in 0..d.n_dates() {
            let row: Vec<f64> = (0..d.n_assets()).map(|a| x.get(t, a)).collect();
            let finite: Vec<f64> = row.iter().copied().filter(|v| v.is_finite()).collect();
            for (a, v) in row.iter().enumerate() {
                let got = r.get(t, a);
                if !v.is_finite() {
                    assert!(got.is_nan(), "{expr}: date {t}, asset {a}");
                    continue;
                }
                let lt = finite.iter().filter(|u| **u < *v).count() as f64;
                let eq = finite.iter().filter(|u| **u == *v).count() as f64;
                let want = (lt + (eq + 1.0) / 2.0) / finite.len() as f64;
                assert_eq!(got.to_bits(), want.to_bits(), "{expr}: date {t}, asset {a}: {got} vs {want}");
            }
        }
    }
}

/// `scale` and `indneutralize` (which sum across stocks without a per-date walk) on real
/// panels, every date, against the per-date definitions, bit for bit: returns (signs and
/// exact zeros) and volume, by the GICS sectors shipped with the data.
#[test]
fn scale_and_indneutralize_of_real_panels_match_per_date_sums() {
    use alphaloop::expr::{eval_expr, NoAlphas};
    let d = common::sample();
    let groups = d.groups.as_ref().expect("the sample has sectors");
    for expr in ["returns", "volume"] {
        let x = eval_expr(expr, d, &NoAlphas).expect("evaluates");
        let sc = eval_expr(&format!("scale({expr})"), d, &NoAlphas).expect("evaluates");
        // With a factor, the conventions' order: x × a / sum(|x|), the product first.
        let sc3 = eval_expr(&format!("scale({expr}, 0.3)"), d, &NoAlphas).expect("evaluates");
        let mut reordered = 0;
        let neu = eval_expr(&format!("indneutralize({expr}, IndClass.sector)"), d, &NoAlphas).expect("evaluates");
        let mut grouped = 0;
        for t in 0..d.n_dates() {
            let row: Vec<f64> = (0..d.n_assets()).map(|a| x.get(t, a)).collect();
            let sum: f64 = row.iter().filter(|v| v.is_finite()).map(|v| v.abs()).sum();
            let in_group = |a: usize| {
                let g = groups.ids[a];
                let vals = (0..d.n_assets()).filter(|&b| g.is_some() && groups.ids[b] == g && row[b].is_finite()).map(|b| row[b]);
                let (s, n) = vals.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
                s / n as f64
            };
            for (a, v) in row.iter().enumerate() {
                let want = if sum > 0.0 && v.is_finite() { v / sum } else { f64::NAN };
                assert_eq!(sc.get(t, a).to_bits(), want.to_bits(), "scale({expr}): date {t}, asset {a}");
                let want3 = if sum > 0.0 && v.is_finite() { v * 0.3 / sum } else { f64::NAN };
                assert_eq!(sc3.get(t, a).to_bits(), want3.to_bits(), "scale({expr}, 0.3): date {t}, asset {a}");
                reordered += usize::from(want3.is_finite() && want3 != v / sum * 0.3);
                let want = if groups.ids[a].is_some() && v.is_finite() { v - in_group(a) } else { f64::NAN };
                assert_eq!(neu.get(t, a).to_bits(), want.to_bits(), "indneutralize({expr}): date {t}, asset {a}");
                grouped += usize::from(want.is_finite());
            }
        }
        assert!(grouped > d.n_dates() * d.n_assets() / 2, "{expr}: most cells demeaned");
        // Dividing first would round differently in some cells (so the order is tested).
        assert!(reordered > 0, "scale({expr}, 0.3): no cell where the order matters");
    }
}

/// A two-day correlation is exactly +1 or −1 (two points lie on a line), NaN where either
/// side did not move: on real panels, every cell, in both kernels. The running sums gave
/// ±(1 − 2e-9) where the two days' prices were close, which breaks the ties that every
/// `rank(correlation(x, y, 2))` shares.
#[test]
fn two_day_correlation_is_exactly_plus_or_minus_one() {
    let data = common::sample();
    let (close, volume) = (data.field("close").expect("close"), data.field("volume").expect("volume"));
    let lanes = rolling::corr_panel(close, volume, 2);
    let mut one = vec![0.0; data.n_dates()];
    let mut signs = [0usize; 2];
    for a in 0..data.n_assets() {
        let (x, y) = (close.series(a), volume.series(a));
        rolling::corr(&x, &y, 2, &mut one);
        assert!(one[0].is_nan() && lanes.get(0, a).is_nan());
        for t in 1..data.n_dates() {
            let (dx, dy) = (x[t] - x[t - 1], y[t] - y[t - 1]);
            let want = if dx.is_nan() || dy.is_nan() || dx == 0.0 || dy == 0.0 { f64::NAN } else { (dx * dy).signum() };
            for (name, got) in [("lanes", lanes.get(t, a)), ("one-asset", one[t])] {
                assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{name}, asset {a}, day {t}: {got} vs {want}");
            }
            if want.is_finite() {
                signs[usize::from(want > 0.0)] += 1;
            }
        }
    }
    assert!(signs[0] > 1000 && signs[1] > 1000, "both signs occur: {signs:?}");
}

//! The scorer against a deliberately plain re-implementation of conventions.md, on the
//! real sample data, and the guarantee that nothing after a period's end is read.

mod common;

use alphaloop::backtest::{prepare, Grouped, Metrics, MetricsConfig};
use alphaloop::data::{load, LoadOptions, MarketData, Panel, Period, Splits};
use alphaloop::expr::{eval_expr, NoAlphas};
use common::sample;
use std::sync::Arc;

fn avg_ranks(v: &[f64]) -> Vec<f64> {
    v.iter().map(|x| v.iter().filter(|y| *y < x).count() as f64 + (v.iter().filter(|y| *y == x).count() as f64 + 1.0) / 2.0).collect()
}

fn corr(a: &[f64], b: &[f64]) -> Option<f64> {
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let c: f64 = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = a.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = b.iter().map(|y| (y - mb).powi(2)).sum();
    (va > 0.0 && vb > 0.0).then(|| c / (va * vb).sqrt())
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn sd(v: &[f64]) -> f64 {
    let m = mean(v);
    (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() as f64 - 1.0)).sqrt()
}

/// conventions.md, written out the obvious way over the whole data (period = all).
fn reference(d: &MarketData, sig: &Panel, cost_bps: f64) -> Metrics {
    let close = &d.fields["close"];
    let (nd, na) = (d.n_dates(), d.n_assets());
    let label = |t: usize, a: usize, h: usize| if t + 1 + h < nd { close.get(t + 1 + h, a) / close.get(t + 1, a) - 1.0 } else { f64::NAN };
    let (mut ics, mut rics, mut net, mut turns) = (vec![], vec![], vec![], vec![]);
    let mut ic_h = [vec![], vec![], vec![]];
    let mut prev = vec![0.0; na];
    let (mut labelled, mut covered) = (0usize, 0usize);
    let mut distinct = vec![];
    let mut quint = [vec![], vec![], vec![], vec![], vec![]];
    for t in 0..nd - 2 {
        let idx: Vec<usize> = (0..na).filter(|&a| sig.get(t, a).is_finite() && label(t, a, 1).is_finite()).collect();
        labelled += (0..na).filter(|&a| label(t, a, 1).is_finite()).count();
        covered += idx.len();
        let fin: Vec<f64> = (0..na).map(|a| sig.get(t, a)).filter(|v| v.is_finite()).collect();
        if !fin.is_empty() {
            let mut u = fin.clone();
            u.sort_by(f64::total_cmp);
            u.dedup();
            distinct.push(u.len() as f64 / fin.len() as f64);
        }
        for (k, h) in [5, 10, 20].iter().enumerate() {
            let j: Vec<usize> = (0..na).filter(|&a| sig.get(t, a).is_finite() && label(t, a, *h).is_finite()).collect();
            if j.len() >= 20 {
                let s: Vec<f64> = j.iter().map(|&a| sig.get(t, a)).collect();
                let l: Vec<f64> = j.iter().map(|&a| label(t, a, *h)).collect();
                if let Some(c) = corr(&s, &l) {
                    ic_h[k].push(c);
                }
            }
        }
        if idx.len() < 20 {
            continue;
        }
        let s: Vec<f64> = idx.iter().map(|&a| sig.get(t, a)).collect();
        let l: Vec<f64> = idx.iter().map(|&a| label(t, a, 1)).collect();
        if let Some(c) = corr(&s, &l) {
            ics.push(c);
        }
        if let Some(c) = corr(&avg_ranks(&s), &avg_ranks(&l)) {
            rics.push(c);
        }
        // stable sort by signal: ties keep symbol order
        let mut order: Vec<usize> = (0..idx.len()).collect();
        order.sort_by(|&i, &j| s[i].total_cmp(&s[j]));
        let n = idx.len();
        for q in 0..5 {
            let part = &order[q * n / 5..(q + 1) * n / 5];
            quint[q].push(part.iter().map(|&i| l[i]).sum::<f64>() / part.len() as f64);
        }
        let k = n / 5;
        let short: Vec<usize> = order[..k].to_vec();
        let mut desc: Vec<usize> = (0..n).collect();
        desc.sort_by(|&i, &j| s[j].total_cmp(&s[i]));
        let long: Vec<usize> = desc[..k].to_vec();
        let mut w = vec![0.0; na];
        for &i in &long {
            w[idx[i]] += 1.0 / k as f64;
        }
        for &i in &short {
            w[idx[i]] -= 1.0 / k as f64;
        }
        let to = 0.5 * w.iter().zip(&prev).map(|(a, b)| (a - b).abs()).sum::<f64>();
        let gross = long.iter().map(|&i| l[i]).sum::<f64>() / k as f64 - short.iter().map(|&i| l[i]).sum::<f64>() / k as f64;
        net.push(gross - cost_bps / 1e4 * to);
        turns.push(to);
        prev = w;
    }
    let mut cum = 0.0;
    let mut peak = f64::NEG_INFINITY;
    let mut mdd = 0.0f64;
    for r in &net {
        cum += r;
        peak = peak.max(cum);
        mdd = mdd.min(cum - peak);
    }
    Metrics {
        ic: mean(&ics),
        rank_ic: mean(&rics),
        icir: mean(&ics) / sd(&ics),
        rank_icir: mean(&rics) / sd(&rics),
        ic_tstat: mean(&ics) / sd(&ics) * (ics.len() as f64).sqrt(),
        ic_h5: mean(&ic_h[0]),
        ic_h10: mean(&ic_h[1]),
        ic_h20: mean(&ic_h[2]),
        sharpe: mean(&net) / sd(&net) * 252f64.sqrt(),
        ann_return: mean(&net) * 252.0,
        volatility: sd(&net) * 252f64.sqrt(),
        max_drawdown: mdd,
        turnover: mean(&turns),
        coverage: covered as f64 / labelled as f64,
        distinctness: mean(&distinct),
        n_days: ics.len(),
        quintile_returns: [mean(&quint[0]), mean(&quint[1]), mean(&quint[2]), mean(&quint[3]), mean(&quint[4])],
    }
}

fn assert_metrics_close(got: &Metrics, want: &Metrics, what: &str) {
    let g = serde_json::to_value(got).expect("json");
    let w = serde_json::to_value(want).expect("json");
    let (g, w) = (g.as_object().expect("object"), w.as_object().expect("object"));
    for (k, wv) in w {
        let gv = &g[k];
        let pairs: Vec<(f64, f64)> = match (gv.as_array(), wv.as_array()) {
            (Some(a), Some(b)) => a.iter().zip(b).map(|(x, y)| (x.as_f64().unwrap_or(f64::NAN), y.as_f64().unwrap_or(f64::NAN))).collect(),
            _ => vec![(gv.as_f64().unwrap_or(f64::NAN), wv.as_f64().unwrap_or(f64::NAN))],
        };
        for (x, y) in pairs {
            assert!((x - y).abs() <= 1e-9 * y.abs().max(1.0) || (x.is_nan() && y.is_nan()), "{what}: {k} = {x}, reference {y}");
        }
    }
}

/// The universe bought and held: each date's mean label over the stocks that have one,
/// annualised as the book is.
#[test]
fn the_market_baseline_is_each_dates_mean_label() {
    let d = sample();
    let p = prepare(d, &Period::All, &Splits::default(), MetricsConfig::default()).expect("prepare");
    let (m, daily) = p.scorer.market();
    let close = &d.fields["close"];
    let (nd, na) = (d.n_dates(), d.n_assets());
    let want: Vec<f64> = (0..nd.saturating_sub(2))
        .filter_map(|t| {
            let l: Vec<f64> = (0..na).map(|a| close.get(t + 2, a) / close.get(t + 1, a) - 1.0).filter(|v| v.is_finite()).collect();
            (l.len() >= 20).then(|| mean(&l))
        })
        .collect();
    let got: Vec<f64> = daily.iter().copied().filter(|v| v.is_finite()).collect();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-12, "{g} against {w}");
    }
    let close_to = |x: f64, y: f64| (x - y).abs() <= 1e-9 * y.abs().max(1.0);
    assert!(close_to(m.sharpe, mean(&want) / sd(&want) * 252f64.sqrt()), "{m:?}");
    assert!(close_to(m.volatility, sd(&want) * 252f64.sqrt()) && close_to(m.ann_return, mean(&want) * 252.0), "{m:?}");
    assert!(close_to(m.cumulative, want.iter().sum()) && m.n_days == want.len() && m.max_drawdown < 0.0, "{m:?}");
}

#[test]
fn scorer_matches_the_plain_reference_on_real_data() {
    let d = sample();
    // The last two miss some of the labelled stocks on most dates (division by zero and
    // the log of a non-positive number give NaN), so the label ranks are re-ranked on the
    // joint set, across the labels' own ties.
    let exprs = [
        ("-1 * delta(close, 5)", 5.0),
        ("rank(volume / adv20)", 0.0),
        ("sign(returns)", 5.0),
        ("ts_argmax(close, 10)", 12.5),
        ("sign(returns) / (volume < 1.5 * adv20)", 5.0),
        ("log(delta(close, 5) + 0.02 * close)", 5.0),
    ];
    for (expr, cost) in exprs {
        let sig = eval_expr(expr, d, &NoAlphas).expect("evaluates");
        let cfg = MetricsConfig { cost_bps: cost, ..MetricsConfig::default() };
        let p = prepare(d, &Period::All, &Splits::default(), cfg).expect("prepare");
        let got = p.scorer.score(&sig);
        assert!(got.n_days > 900, "{expr}: {} days", got.n_days);
        assert_metrics_close(&got, &reference(d, &sig, cost), expr);
    }
}

/// On the sample with gaps (one row in 37 left out), a signal is finite on most dates for
/// some stock whose label is not: the joint set is then cut from the sorted signal and its
/// ties are found again (the scorer's other route, which the whole sample never takes).
#[test]
fn scorer_matches_the_plain_reference_on_data_with_gaps() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = load(&common::gapped_sample(dir.path(), 37), &LoadOptions::default()).expect("loads");
    let p = prepare(&d, &Period::All, &Splits::default(), MetricsConfig::default()).expect("prepare");
    for expr in ["sign(returns)", "rank(volume / adv20)", "ts_argmax(close, 10)", "-1 * delta(close, 5)"] {
        let sig = eval_expr(expr, &d, &NoAlphas).expect("evaluates");
        let got = p.scorer.score(&sig);
        let cut = (0..d.n_dates() - 2).filter(|&t| (0..d.n_assets()).any(|a| sig.get(t, a).is_finite() && !(d.fields["close"].get(t + 2, a) / d.fields["close"].get(t + 1, a)).is_finite())).count();
        assert!(got.n_days > 900 && cut > 500, "{expr}: {} days, {cut} with a finite signal and no label", got.n_days);
        assert_metrics_close(&got, &reference(&d, &sig, 5.0), expr);
    }
}

#[test]
fn a_constant_signal_has_no_ic_and_is_not_traded() {
    let d = sample();
    let p = prepare(d, &Period::All, &Splits::default(), MetricsConfig::default()).expect("prepare");
    let m = p.scorer.score(&eval_expr("rank(1)", d, &NoAlphas).expect("evaluates"));
    assert_eq!(m.n_days, 0);
    assert!(m.ic.is_nan() && m.rank_ic.is_nan() && m.ic_h5.is_nan());
    assert!(m.distinctness < 0.02, "one value among 60 stocks: {}", m.distinctness);
    assert_eq!(m.coverage, 1.0);
}

#[test]
fn nothing_after_the_period_end_is_read() {
    let d = sample();
    let period: Period = "2016-01-01:2016-12-31".parse().expect("period");
    let splits = Splits::default();
    let (_, end) = period.indices(&splits, d).expect("indices");
    // Poison every value after the period: the metrics must not move.
    let mut poisoned = d.clone();
    for p in poisoned.fields.values_mut() {
        let mut q = (**p).clone();
        for a in 0..q.n_assets() {
            for t in end..q.n_dates() {
                q.set(t, a, if a % 2 == 0 { 1e6 } else { f64::NAN });
            }
        }
        *p = Arc::new(q);
    }
    let expr = "rank(ts_mean(returns, 5)) - rank(volume)";
    let score = |data: &MarketData| {
        let p = prepare(data, &period, &splits, MetricsConfig::default()).expect("prepare");
        let sig = eval_expr(expr, &p.data, &NoAlphas).expect("evaluates");
        assert_eq!(p.data.n_dates(), end, "the evaluated data stops at the period's end");
        p.scorer.score(&sig)
    };
    let (a, b) = (score(d), score(&poisoned));
    assert_eq!(serde_json::to_string(&a).expect("json"), serde_json::to_string(&b).expect("json"));
    // The last dates of the period have no label (it would need prices after the end).
    assert!(a.n_days <= end - period.indices(&splits, d).expect("indices").0 - 2);
}

#[test]
fn signals_scored_in_a_group_score_as_they_do_alone() {
    let d = sample();
    let p = prepare(d, &Period::All, &Splits::default(), MetricsConfig::default()).expect("prepare");
    let exprs = ["-1 * delta(close, 5)", "sign(returns) / (volume < 1.5 * adv20)", "rank(volume / adv20)", "correlation(close, volume, 10)", "returns"];
    let sigs: Vec<Arc<Panel>> = exprs.iter().map(|e| eval_expr(e, d, &NoAlphas).expect("evaluates")).collect();
    let alone: Vec<String> = sigs.iter().map(|s| serde_json::to_string(&p.scorer.score(s)).expect("json")).collect();
    // Five signals through groups of SCORE_GROUP: a full group and a remainder.
    let mut group = Grouped::new(&p.scorer);
    let mut got: Vec<(usize, Metrics)> = Vec::new();
    for (i, s) in sigs.iter().enumerate() {
        got.extend(group.push(i, Arc::clone(s)));
    }
    got.extend(group.flush());
    got.sort_by_key(|(i, _)| *i);
    assert_eq!(got.len(), exprs.len());
    for (i, m) in got {
        assert_eq!(serde_json::to_string(&m).expect("json"), alone[i], "{}", exprs[i]);
    }
}

/// The daily book behind `--plot` is the one the metrics are computed from: the same
/// metrics as `score`, its net returns average to `ann_return` and their running sum draws
/// down by `max_drawdown`, costs only lower a day's return, and skipped dates are NaN.
#[test]
fn the_daily_book_is_the_one_the_metrics_come_from() {
    let data = sample();
    let prep = prepare(data, &Period::All, &Splits::default(), MetricsConfig::default()).expect("prepare");
    let sig = eval_expr("-1 * rank(delta(close, 5))", &prep.data, &NoAlphas).expect("eval");
    let (m, daily) = prep.scorer.score_daily(&sig);
    let plain = prep.scorer.score(&sig);
    assert_eq!(serde_json::to_string(&m).expect("json"), serde_json::to_string(&plain).expect("json"));
    assert!(daily.date.len() == daily.net.len() && daily.gross.len() == daily.net.len());
    assert!(daily.date.windows(2).all(|w| w[1] == w[0] + 1), "one entry per scored date");
    let net: Vec<f64> = daily.net.iter().copied().filter(|v| !v.is_nan()).collect();
    assert!(net.len() > 500 && net.len() < daily.net.len(), "{} book days of {}", net.len(), daily.net.len());
    assert_eq!(net.len(), daily.gross.iter().filter(|v| !v.is_nan()).count());
    assert!(daily.gross.iter().zip(&daily.net).all(|(g, n)| g.is_nan() || g >= n), "costs can only lower a return");
    assert!(daily.gross.iter().zip(&daily.net).any(|(g, n)| g > n), "a book that trades pays costs");
    assert!((alphaloop::backtest::mean_std(&net).0 * 252.0 - m.ann_return).abs() < 1e-15);
    let (mut cum, mut peak, mut mdd) = (0.0f64, f64::NEG_INFINITY, 0.0f64);
    for r in &net {
        cum += r;
        peak = peak.max(cum);
        mdd = mdd.min(cum - peak);
    }
    assert_eq!(mdd, m.max_drawdown);
}

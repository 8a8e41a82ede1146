//! The expression language on real data: errors that point at positions, operator
//! semantics from conventions.md, constant folding, shared sub-expressions, alpha
//! references with cycle detection.

mod common;

use alphaloop::data::Panel;
use alphaloop::expr::{eval_expr, Compiler, Node, NoAlphas, Schema};
use alphaloop::seeds::AlphaSet;
use common::sample;
use std::collections::HashMap;

fn ev(e: &str) -> Panel {
    (*eval_expr(e, sample(), &NoAlphas).unwrap_or_else(|err| panic!("{}", err.render()))).clone()
}

/// Equal values and equal NaN pattern.
fn same(a: &Panel, b: &Panel) -> bool {
    a.n_dates() == b.n_dates() && a.to_asset_major().iter().zip(b.to_asset_major().iter()).all(|(x, y)| x == y || (x.is_nan() && y.is_nan()))
}

/// Equal, or both NaN.
fn same_cell(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

fn err(e: &str) -> alphaloop::expr::ExprError {
    eval_expr(e, sample(), &NoAlphas).expect_err("should fail")
}

#[test]
fn errors_name_the_position_and_suggest() {
    let e = err("rank(delta(clsoe, 5))");
    assert_eq!(e.to_string(), "unknown field 'clsoe' at 12; did you mean 'close'?");
    let e = err("ts_meen(close, 5)");
    assert_eq!((e.pos, e.hint.as_deref()), (1, Some("did you mean 'ts_mean'?")));
    let e = err("ts_mean(close, 0.5)");
    assert_eq!(e.pos, 16);
    assert!(e.msg.contains("positive number of days"), "{e}");
    let e = err("ts_mean(close, 5000)");
    assert!(e.msg.contains("of 5000 days is longer than the data (1006 dates, 2015-01-02 to 2018-12-31)"), "{e}");
    let e = err("ts_mean(close, 1e300)");
    assert!(e.msg.contains("of 1e300 days is longer"), "{e}");
    let e = err("ts_mean(close, volume)");
    assert!(e.msg.contains("must be a constant"), "{e}");
    let e = err("correlation(close, 5)");
    assert!(e.msg.contains("takes 3 arguments, got 2"), "{e}");
    let e = err("indneutralize(close, IndClass.sectr)");
    assert_eq!(e.hint.as_deref(), Some("did you mean 'sector'?"));
    let e = err("close * cap");
    assert_eq!(e.pos, 9);
    let e = err("adv0 + 1");
    assert!(e.msg.contains("positive"), "{e}");
    let e = err("ts_quantile(close, 20, 1.5)");
    assert_eq!((e.pos, e.msg.as_str()), (24, "the level of ts_quantile must be between 0 and 1, got 1.5"));
    let e = err("quantile(close, 20, volume)");
    assert_eq!((e.pos, e.msg.as_str()), (21, "the level of quantile must be a constant between 0 and 1"));
    // `min`/`max` with a constant are the window forms; `less`/`greater` compare with it.
    assert!(err("max(close - open, 0)").msg.contains("positive number of days"));
    let (g, want) = (ev("greater(close - open, 0)"), ev("close - open > 0 ? close - open : 0"));
    assert!(same(&g, &want));
    // A literal past a double's range is an error, not a silent infinity.
    let e = err("close * 1e400");
    assert_eq!((e.pos, e.msg.as_str()), (9, "number '1e400' is beyond the range of a double (about 1.8e308)"));
}

/// Mining's window cap: an operator's window or an `adv{d}` field longer than it is
/// refused at compile time, with its position, before anything is evaluated; windows at
/// the cap compile.
#[test]
fn a_window_past_the_cap_is_refused_where_it_is_written() {
    let capped = |text: &str| Compiler::new(Schema::of(sample()), &NoAlphas).with_max_window(250).add(text).map(|_| ());
    let e = capped("rank(ts_mean(close, 300))").expect_err("300 days is past the cap");
    assert_eq!((e.pos, e.msg.as_str()), (21, "the window of ts_mean of 300 days is longer than max_window, 250 days"), "{e}");
    assert_eq!(e.hint.as_deref(), Some("use a window of at most 250 days"));
    let e = capped("volume / adv300").expect_err("adv300 is a 300-day window");
    assert_eq!(e.pos, 10, "{e}");
    assert!(capped("ts_mean(close, 250) / adv250").is_ok());
    // Without a cap, the data's length is the only limit.
    assert!(Compiler::new(Schema::of(sample()), &NoAlphas).add("rank(ts_mean(close, 300))").is_ok());
}

/// An expression in the grammar's shape, `depth` levels deep, from every operator kind,
/// with leaves and windows chosen to hit the edges: NaN-making constants, windows of 0,
/// −1, a fraction, the data's length and beyond, non-constant windows, unknown names.
fn hostile(s: &mut u64, depth: u32) -> String {
    fn pick(s: &mut u64, xs: &[&'static str]) -> &'static str {
        xs[(alphaloop::xorshift(s) % xs.len() as u64) as usize]
    }
    let leaves = ["close", "open", "volume", "returns", "vwap", "adv20", "adv1", "adv5000", "0", "-0", "1e308", "-1e308", "1e-320", "0.5", "3", "00", ".5", "5.", "1e", "cap", "nan", "alpha:foo", "alpha:", "IndClass.sector"];
    let unary = ["rank", "abs", "sign", "log", "sqrt", "exp", "scale", "cs_zscore", "-"];
    let windowed = ["delay", "delta", "ts_sum", "ts_std", "ts_min", "ts_argmax", "ts_product", "ts_rank", "decay_linear", "ts_zscore", "ts_ffill", "ts_slope", "ts_resi", "signedpower", "min", "max", "scale", "indneutralize"];
    let pairs = ["ts_corr", "ts_cov", "ts_quantile"];
    let binary = ["+", "-", "*", "/", "^", "<", ">=", "==", "&&", "||"];
    let windows = ["0", "1", "2", "5", "-1", "0.5", "1e9", "1006", "1005", "5000", "close", "2.9", "-0", "18446744073709551616"];
    let leaf = pick(s, &leaves);
    let (kind, w, op) = (alphaloop::xorshift(s) % 7, pick(s, &windows), [pick(s, &unary), pick(s, &windowed), pick(s, &pairs), pick(s, &binary)]);
    if depth == 0 || kind == 6 {
        return leaf.into();
    }
    let mut sub = || hostile(s, depth - 1);
    match kind {
        0 => format!("{}({})", op[0], sub()),
        1 => format!("{}({}, {w})", op[1], sub()),
        2 => format!("{}({}, {}, {w})", op[2], sub(), sub()),
        3 => format!("({} {} {})", sub(), op[3], sub()),
        4 => format!("({} ? {} : {})", sub(), sub(), sub()),
        _ => format!("{}({}, {})", op[1], sub(), sub()),
    }
}

/// The writer's expressions are LLM output, so nothing it can write may panic: thousands
/// of hostile expressions, a third of them then cut, broken or salted with stray
/// characters, each evaluated and scored on the sample or refused with an error that
/// points at a position. (Run longer with ALPHALOOP_FUZZ=N; 300,000 passed.)
#[test]
fn hostile_expressions_never_panic_and_every_error_points_at_a_position() {
    let prep = alphaloop::backtest::prepare(sample(), &alphaloop::data::Period::All, &common::sample_splits(), Default::default()).expect("prepare");
    let n: usize = std::env::var("ALPHALOOP_FUZZ").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    let mut s = 0x1234_5678_9abc_def1u64;
    let junk = ['(', ')', ',', '?', ':', 'é', '😀', '\0', ' ', '.', 'e', '-', '9', '$', '"'];
    let (mut scored, mut refused) = (0, 0);
    for _ in 0..n {
        let mut e: Vec<char> = hostile(&mut s, 4).chars().collect();
        if alphaloop::xorshift(&mut s).is_multiple_of(3) {
            let i = (alphaloop::xorshift(&mut s) % e.len() as u64) as usize;
            match alphaloop::xorshift(&mut s) % 3 {
                0 => drop(e.remove(i)),
                1 => e.insert(i, junk[(alphaloop::xorshift(&mut s) % junk.len() as u64) as usize]),
                _ => e.truncate(i),
            }
        }
        let e: String = e.into_iter().collect();
        let outcome = std::panic::catch_unwind(|| eval_expr(&e, &prep.data, &NoAlphas).map(|p| prep.scorer.score(&p)));
        match outcome {
            Err(_) => panic!("panicked on {e:?}"),
            Ok(Ok(_)) => scored += 1,
            Ok(Err(err)) => {
                // "... at 12", with the position at or inside the text.
                let at = err.to_string().split(" at ").skip(1).find_map(|t| t.split(|c: char| !c.is_ascii_digit()).next().and_then(|d| d.parse::<usize>().ok()));
                assert!(at.is_some_and(|p| p <= e.len() + 1), "{e:?}: {err}");
                refused += 1;
            }
        }
    }
    // Both outcomes were exercised (measured: about a sixth of them evaluate).
    assert!(scored > n / 10 && refused > n / 2, "{scored} scored, {refused} refused");
}

#[test]
fn arithmetic_and_logic_follow_the_conventions() {
    let d = sample();
    let q = ev("close / (close - close)");
    assert!(q.to_asset_major().iter().all(|v| v.is_nan()), "division by zero is NaN, never inf");
    let c = ev("delay(close, 1) < close");
    assert!(c.to_asset_major().iter().all(|v| v.is_nan() || *v == 0.0 || *v == 1.0));
    for a in 0..d.n_assets() {
        assert!(c.get(0, a).is_nan(), "comparison with NaN is NaN");
    }
    let t = ev("delay(close, 1) < close ? 1 : -1");
    assert!(t.get(0, 0).is_nan(), "a NaN condition gives NaN");
    assert_eq!(ev("log(close - close)").to_asset_major().iter().filter(|v| v.is_finite()).count(), 0);
    let sp = ev("signedpower(returns, 2)");
    let r = ev("returns");
    for (s, r) in sp.to_asset_major().iter().zip(r.to_asset_major().iter()) {
        if r.is_finite() {
            assert!((s - r.signum() * r * r).abs() < 1e-15);
        }
    }
    // The fast paths: `x ^ 2` is the rounded square (numpy's `x ** 2`), `x ^ 1` is x,
    // `x ^ 0.5` the square root (NaN below zero), and `signedpower(x, 2)` the signed
    // square; an integer exponent from 3 to 16 takes pow's product route
    // (`abs(returns) ^ 3`), with libm's bits.
    for (v, r) in ev("returns ^ 0.5").to_asset_major().iter().zip(r.to_asset_major().iter()) {
        assert!(same_cell(*v, r.sqrt()) && (*r >= 0.0 || v.is_nan()), "{r} ^ 0.5 = {v}");
    }
    let (sq, one, r3) = (ev("returns ^ 2"), ev("returns ^ 1"), ev("abs(returns) ^ 3"));
    for (((s, o), c), (r, p)) in sq.to_asset_major().iter().zip(one.to_asset_major().iter()).zip(r3.to_asset_major().iter()).zip(r.to_asset_major().iter().zip(sp.to_asset_major().iter())) {
        assert!(same_cell(*s, r * r) && same_cell(*o, *r) && same_cell(*c, r.abs().powf(3.0)));
        assert!(same_cell(*p, if *r == 0.0 { 0.0 } else { r * r.abs() }));
    }
    // signedpower(x, a) = sign(x) · |x|^a with sign(0) = 0: at a zero, 0 for a ≥ 0 (not
    // 0^0 = 1) and NaN for a < 0 (0 · inf; never inf).
    let zeros = r.to_asset_major().iter().filter(|v| **v == 0.0).count();
    assert!(zeros > 0, "the sample has unchanged closes");
    for (e, at_zero) in [("0", 0.0), ("0.5", 0.0), ("-1", f64::NAN)] {
        let p = ev(&format!("signedpower(returns, {e})"));
        let ex: f64 = e.parse().expect("a number");
        for (v, r) in p.to_asset_major().iter().zip(r.to_asset_major().iter()) {
            let want = if r.is_nan() { f64::NAN } else if *r == 0.0 { at_zero } else { r.signum() * r.abs().powf(ex) };
            assert!(same_cell(*v, want), "signedpower({r}, {e}) = {v}, want {want}");
        }
    }
    // A panel exponent: libm's bits cell by cell, negative exponents too.
    let (p, ex) = (ev("signedpower(returns, rank(volume) * 3 - 1)"), ev("rank(volume) * 3 - 1"));
    for ((v, r), e) in p.to_asset_major().iter().zip(r.to_asset_major().iter()).zip(ex.to_asset_major().iter()) {
        let want = if r.is_nan() || e.is_nan() { f64::NAN } else if *r == 0.0 { r * 0.0f64.powf(*e) } else { r.signum() * r.abs().powf(*e) };
        let want = if want.is_finite() { want } else { f64::NAN };
        assert!(same_cell(*v, want), "signedpower({r}, {e}) = {v}, want {want}");
    }
    // sign: ±1 for non-zero values (infinities included), zero keeps its sign, NaN stays.
    let sg = ev("sign(returns)");
    for (g, r) in sg.to_asset_major().iter().zip(r.to_asset_major().iter()) {
        let want = if r.is_nan() { f64::NAN } else if *r == 0.0 { *r } else { r.signum() };
        assert!(same_cell(*g, want) && g.is_sign_negative() == want.is_sign_negative(), "sign({r}) = {g}");
    }
    // where with every shape of its branches (panel, scalar, the reused buffer).
    for (e, f) in [
        ("returns > 0 ? close : open", (|r: f64, c: f64, o: f64| if r > 0.0 { c } else { o }) as fn(f64, f64, f64) -> f64),
        ("returns > 0 ? 1 : open", |r, _, o| if r > 0.0 { 1.0 } else { o }),
        ("returns > 0 ? close * 2 : -1", |r, c, _| if r > 0.0 { c * 2.0 } else { -1.0 }),
    ] {
        let w = ev(e);
        let (c, o) = (&d.fields["close"], &d.fields["open"]);
        let (r, c, o) = (r.to_asset_major(), c.to_asset_major(), o.to_asset_major());
        for (i, v) in w.to_asset_major().iter().enumerate() {
            let rv = r[i];
            let want = if rv.is_nan() { f64::NAN } else { f(rv, c[i], o[i]) };
            assert!(same_cell(*v, want), "{e} at cell {i}: {v} != {want}");
        }
    }
    // min/max with a constant are time-series, with two series element-wise.
    assert!(same(&ev("min(close, 3)"), &ev("ts_min(close, 3)")));
    let m = ev("max(open, close)");
    let (o, cl) = (&d.fields["open"], &d.fields["close"]);
    assert_eq!(m.get(10, 3), o.get(10, 3).max(cl.get(10, 3)));
    // Names are case-insensitive.
    assert!(same(&ev("Ts_ArgMax(CLOSE, 5)"), &ev("ts_argmax(close, 5)")));
}

#[test]
fn derived_fields_follow_the_conventions() {
    let d = sample();
    let (h, l, c, v) = (&d.fields["high"], &d.fields["low"], &d.fields["close"], &d.fields["volume"]);
    let vwap = ev("vwap");
    let ret = ev("returns");
    let adv = ev("adv5");
    for a in [0, 17, 59] {
        for t in [0, 4, 5, 300, 1005] {
            assert_eq!(vwap.get(t, a), (h.get(t, a) + l.get(t, a) + c.get(t, a)) / 3.0);
            if t >= 1 {
                assert_eq!(ret.get(t, a), c.get(t, a) / c.get(t - 1, a) - 1.0);
            }
            let want: f64 = if t >= 4 { (t - 4..=t).map(|s| c.get(s, a) * v.get(s, a)).sum::<f64>() / 5.0 } else { f64::NAN };
            assert!((adv.get(t, a) - want).abs() <= 1e-9 * want.abs() || (want.is_nan() && adv.get(t, a).is_nan()));
        }
    }
}

#[test]
fn cross_sectional_operators() {
    let d = sample();
    let s = ev("scale(returns, 2)");
    for t in [1, 500, 1005] {
        let tot: f64 = (0..d.n_assets()).map(|a| s.get(t, a).abs()).sum();
        assert!((tot - 2.0).abs() < 1e-12);
    }
    let n = ev("indneutralize(returns, IndClass.industry)");
    let r = ev("returns");
    let g = d.groups.as_ref().expect("groups beside the sample");
    for t in [1, 700] {
        for grp in 0..g.names.len() as u32 {
            let members: Vec<usize> = (0..d.n_assets()).filter(|a| g.ids[*a] == Some(grp)).collect();
            if members.is_empty() {
                continue;
            }
            let mean: f64 = members.iter().map(|a| r.get(t, *a)).sum::<f64>() / members.len() as f64;
            for a in members {
                assert!((n.get(t, a) - (r.get(t, a) - mean)).abs() < 1e-15);
            }
        }
    }
    let rk = ev("rank(close)");
    for t in [0, 999] {
        let vals: Vec<f64> = (0..d.n_assets()).map(|a| rk.get(t, a)).collect();
        assert!(vals.iter().all(|v| *v > 0.0 && *v <= 1.0));
        assert!(vals.contains(&1.0));
    }
}

#[test]
fn cross_sectional_zscore_and_thread_count_independence() {
    let d = sample();
    let z = ev("cs_zscore(returns)");
    for t in [1, 600] {
        let v: Vec<f64> = (0..d.n_assets()).map(|a| z.get(t, a)).collect();
        let m = v.iter().sum::<f64>() / v.len() as f64;
        let sd = (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() as f64 - 1.0)).sqrt();
        assert!(m.abs() < 1e-12 && (sd - 1.0).abs() < 1e-12, "mean {m}, std {sd}");
    }
    // Results do not depend on how many threads compute them.
    let expr = "rank(ts_corr(rank(volume), rank(close), 10)) * cs_zscore(ts_zscore(returns, 20)) + scale(indneutralize(delta(close, 3), IndClass.sector))";
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("pool").install(|| ev(expr));
    let two = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool").install(|| ev(expr));
    assert!(one.to_asset_major().iter().zip(two.to_asset_major().iter()).all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn constants_fold_and_common_subexpressions_are_shared() {
    let d = sample();
    let mut c = Compiler::new(Schema::of(d), &NoAlphas);
    let a = c.add("(-1 * 1) * rank(close) + (1 - 0.25)").expect("compiles");
    let n1 = c.graph.len();
    // -1*1 and 1-0.25 became constants: no op node has only constant inputs.
    for node in &c.graph.nodes {
        if let Node::Op { args, .. } = node {
            assert!(!args.iter().all(|x| matches!(c.graph.nodes[*x], Node::Const(_))), "unfolded {node:?}");
        }
    }
    let b = c.add("rank(close) / -1 + 0.75").expect("compiles");
    assert_ne!(a, b);
    let added = c.graph.len() - n1;
    assert!(added <= 3, "rank(close) is shared, only the new arithmetic is added ({added} nodes)");
    let same = c.add("(-1 * 1) * rank(close) + (1 - 0.25)").expect("compiles");
    assert_eq!(a, same, "an identical expression is the same node");
}

#[test]
fn symmetric_operators_share_one_node_whatever_the_argument_order() {
    let d = sample();
    let mut c = Compiler::new(Schema::of(d), &NoAlphas);
    for (x, y) in [
        ("correlation(close, volume, 5)", "correlation(volume, close, 5)"),
        ("covariance(rank(close), volume, 7)", "covariance(volume, rank(close), 7)"),
        ("close * returns", "returns * close"),
        ("open + vwap", "vwap + open"),
    ] {
        assert_eq!(c.add(x).expect("compiles"), c.add(y).expect("compiles"), "{x} and {y}");
        // Sharing is only sound because the kernels are symmetric bit for bit.
        let (a, b) = (ev(x), ev(y));
        assert!(a.to_asset_major().iter().zip(b.to_asset_major().iter()).all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan())), "{x} and {y} differ");
    }
    // Not symmetric: these stay apart.
    assert_ne!(c.add("close - open").expect("compiles"), c.add("open - close").expect("compiles"));
    assert_ne!(c.add("correlation(close, volume, 5)").expect("compiles"), c.add("correlation(close, volume, 6)").expect("compiles"));
}

#[test]
fn alpha_references_resolve_and_cycles_are_caught() {
    let set = AlphaSet(HashMap::from([
        ("mom".to_string(), "delta(close, 5)".to_string()),
        ("rev".to_string(), "-1 * alpha:mom".to_string()),
        ("a".to_string(), "alpha:b + 1".to_string()),
        ("b".to_string(), "rank(alpha:a)".to_string()),
        ("broken".to_string(), "rank(clsoe)".to_string()),
    ]));
    let d = sample();
    let r = eval_expr("alpha:rev", d, &set).expect("resolves");
    let m = eval_expr("delta(close, 5)", d, &NoAlphas).expect("plain");
    assert!(r.to_asset_major().iter().zip(m.to_asset_major().iter()).all(|(x, y)| (x.is_nan() && y.is_nan()) || *x == -y));
    let e = eval_expr("alpha:a * 2", d, &set).expect_err("cycle");
    assert!(e.to_string().contains("alpha reference cycle: a -> b -> a"), "{e}");
    let e = eval_expr("alpha:mon", d, &set).expect_err("unknown");
    assert_eq!(e.to_string(), "unknown alpha 'mon' at 1; did you mean 'mom'?");
    let e = eval_expr("alpha:broken", d, &set).expect_err("error inside");
    assert!(e.to_string().starts_with("in alpha:broken: unknown field 'clsoe' at 6"), "{e}");
}

/// Kernels get recycled buffers that still hold an earlier panel's values
/// (`Panel::scratch`); every operator must overwrite every cell. Evaluated once as usual
/// and again after the pool was filled with buffers of a sentinel value, each operator
/// gives the same panel, without the sentinel.
#[test]
fn every_operator_overwrites_recycled_buffers() {
    const SENTINEL: f64 = 123456.789;
    let (nd, na) = (sample().n_dates(), sample().n_assets());
    assert!(nd * na >= 1 << 15, "the sample panel is large enough to be pooled");
    let exprs = [
        "close + volume", "-close", "close < open", "open == open && close > 0 || volume < 0", "close > open ? high : low",
        "abs(returns)", "sign(returns)", "log(volume)", "signedpower(returns, 2)", "sqrt(volume)", "exp(returns)",
        "min(open, close)", "max(open, close)", "delay(close, 3)", "delta(close, 3)", "ts_sum(close, 5)", "ts_mean(close, 5)",
        "ts_std(close, 5)", "ts_corr(close, volume, 5)", "ts_cov(close, volume, 5)", "ts_min(close, 5)", "ts_max(close, 5)",
        "ts_argmin(close, 5)", "ts_argmax(close, 5)", "ts_product(close, 5)", "ts_rank(close, 5)", "decay_linear(close, 5)",
        "ts_zscore(close, 5)", "ts_ffill(close, 5)", "ts_slope(close, 5)", "ts_rsquare(close, 5)", "ts_resi(close, 5)",
        "ts_quantile(close, 5, 0.8)", "less(close, 100)", "rank(close)", "cs_zscore(close)", "scale(close)",
        "indneutralize(close, IndClass.sector)", "close ^ 2", "close / volume", "close * 2 - open",
    ];
    let mut recycled = false;
    for e in exprs {
        let clean = ev(e);
        for _ in 0..8 {
            drop(Panel::filled(nd, na, SENTINEL));
        }
        // The pool does hand out such buffers (other tests may take some meanwhile).
        recycled |= Panel::scratch(nd, na).as_slice().contains(&SENTINEL);
        let again = ev(e);
        assert!(same(&clean, &again), "{e}: differs when evaluated into recycled buffers");
        assert!(!again.to_asset_major().contains(&SENTINEL), "{e}: a recycled cell was not overwritten");
    }
    assert!(recycled, "no recycled buffer was ever handed out");
}

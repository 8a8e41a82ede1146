//! Scoring variants for a search, on the real sample: the sub-expression cache never
//! changes a value, stays within its bytes, and the lean train scorer agrees with the full
//! one on what it computes.

mod common;

use alphaloop::agent::gp::Rng;
use alphaloop::agent::search::{Budget, Searcher};
use alphaloop::agent::variants::{neighbours, sample as draw};
use alphaloop::backtest::{MetricsConfig, MiningView};
use alphaloop::data::Panel;
use alphaloop::expr::{evaluate, evaluate_cached, parse, Compiler, EvalCache, Schema};
use common::sample;
use std::collections::BTreeMap;
use std::path::Path;

fn seeds() -> Vec<(String, String)> {
    let defs = alphaloop::seeds::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("alpha_kb/seeds/alpha101.toml")).expect("seed file");
    defs.into_iter().map(|d| (d.id, d.formula)).collect()
}

fn bits(p: &Panel) -> Vec<u64> {
    p.to_array().iter().map(|v| v.to_bits()).collect()
}

/// Every seed's variants (its neighbours, and neighbours of some of them), formulas over
/// a NaN-heavy input, references to other alphas, windows of 1 day and longer than the
/// data: evaluated batch by batch through one cache far smaller than what passes through
/// it, and each batch again without a cache, bit for bit the same.
#[test]
fn cached_evaluation_gives_the_same_bits_and_stays_within_its_budget() {
    let data = sample();
    let alphas: BTreeMap<String, String> = seeds().into_iter().collect();
    let budget = 48 << 20;
    let mut cache = EvalCache::new(budget);
    let mut rng = Rng::new(7);
    let (mut batches, mut checked, mut refused) = (0, 0, 0);
    for (id, formula) in seeds() {
        let Ok(parent) = parse(&formula) else { continue };
        let mut texts: Vec<String> = vec![formula.clone()];
        for v in neighbours(&parent, 250) {
            texts.push(v.text.clone());
            if let Ok(e) = parse(&v.text) {
                texts.extend(draw(&mut rng, &e, 3, 250).into_iter().map(|w| w.text));
            }
        }
        texts.push(format!("ts_mean(log({formula}), 1) + alpha:{id}"));
        texts.push(format!("rank(log(returns)) * ({formula})"));
        texts.push(format!("ts_sum({formula}, 100000)"));
        let mut c = Compiler::new(Schema::of(data), &alphas);
        let roots: Vec<_> = texts.iter().filter_map(|t| c.add(t).map_err(|_| refused += 1).ok()).collect();
        if roots.is_empty() {
            continue;
        }
        let mut plain = vec![None; roots.len()];
        evaluate(&c.graph, &roots, data, |i, p| plain[i] = Some(bits(&p)));
        let mut cached = vec![None; roots.len()];
        evaluate_cached(&c.graph, &roots, data, Some(&mut cache), |i, p| cached[i] = Some(bits(&p)));
        assert!(cache.bytes() <= budget, "{} bytes held, budget {budget}", cache.bytes());
        for (i, (a, b)) in plain.iter().zip(&cached).enumerate() {
            assert!(a.is_some() && a == b, "{id}: root {i} differs with the cache");
        }
        batches += 1;
        checked += roots.len();
    }
    assert!(batches >= 90 && checked > 10_000, "{batches} batches, {checked} formulas");
    assert!(refused >= batches, "the over-long windows are refused, {refused}");
    // Later batches found earlier ones' sub-expressions (the seeds share fields' derived
    // series such as adv20 and returns), and the budget forced evictions.
    assert!(cache.hits > 0 && cache.misses > cache.len() as u64, "hits {} misses {} held {}", cache.hits, cache.misses, cache.len());
}

/// The searcher's train scores are the full train scorer's Rank IC, IC, turnover and
/// coverage for the same signal (it evaluates on data cut at the end of train: no
/// operator looks ahead, so the train cells are the same), and it stops at its budget.
#[test]
fn the_lean_scorer_agrees_with_the_full_one_and_keeps_to_its_budget() {
    let view = MiningView::new(sample(), &common::sample_splits(), MetricsConfig::default()).expect("view");
    let mut s = Searcher::new(&view, 64 << 20, 250).expect("searcher");
    let parent = "rank(ts_mean(returns, 10)) * -1";
    let mut texts: Vec<String> = vec![parent.to_string()];
    texts.extend(neighbours(&parse(parent).expect("parses"), 250).into_iter().map(|v| v.text));
    texts.push("ts_mean(close, 300)".into());
    let scores = s.score_variants(&texts, &alphaloop::expr::NoAlphas, Budget::default());
    assert_eq!(scores.len(), texts.len());
    let last = scores.last().expect("scored");
    assert!(last.error.as_deref().is_some_and(|e| e.contains("max_window")), "{last:?}");
    for sc in &scores[..scores.len() - 1] {
        let sig = alphaloop::expr::eval_expr(&sc.text, &view.data, &alphaloop::expr::NoAlphas).expect("evaluates");
        let full = view.train.score(&sig);
        assert_eq!(sc.error, None);
        let b = |v: [f64; 4]| v.map(f64::to_bits);
        assert_eq!(b([sc.rank_ic, sc.ic, sc.turnover, sc.coverage]), b([full.rank_ic, full.ic, full.turnover, full.coverage]), "{}", sc.text);
        assert_eq!((sc.rank_ic_t.to_bits(), sc.days), (full.rank_ic_t().to_bits(), full.n_days));
    }
    assert!(scores.iter().any(|s| s.rank_ic.abs() > 0.0));
    // A second call finds the parent's sub-expressions in the cache.
    let before = s.cache().hits;
    let again = s.score_variants(&texts[..3], &alphaloop::expr::NoAlphas, Budget::default());
    assert_eq!(format!("{:?}", &again[..]), format!("{:?}", &scores[..3]));
    assert!(s.cache().hits > before);
    // Budgets: a number of evaluations, and time.
    assert_eq!(s.score_variants(&texts, &alphaloop::expr::NoAlphas, Budget { evaluations: 4, seconds: f64::INFINITY }).len(), 4);
    assert!(s.score_variants(&texts, &alphaloop::expr::NoAlphas, Budget { evaluations: 100, seconds: 0.0 }).is_empty());
}

fn refiner_view(data: &alphaloop::data::MarketData) -> MiningView {
    MiningView::new(data, &common::sample_splits(), MetricsConfig::default()).expect("view")
}

/// A seed alpha with a window moved far from the published one is walked back by the
/// refiner to a formula at least as good on train as the published alpha, and the
/// finalists come oriented (positive train Rank IC), best first, within the budget.
#[test]
fn the_refiner_walks_a_planted_window_back() {
    use alphaloop::agent::refine::{refine, Overuse, RefineConfig};
    let view = refiner_view(sample());
    let mut s = Searcher::new(&view, 64 << 20, 250).expect("searcher");
    let published = "-1 * ts_corr(rank(open), rank(volume), 10)";
    let planted = "-1 * ts_corr(rank(open), rank(volume), 120)";
    let cfg = RefineConfig { budget: 120, ..RefineConfig::default() };
    let r = refine(&mut s, planted, &alphaloop::expr::NoAlphas, &Overuse::default(), &cfg, &mut Rng::new(3));
    let mut own = |text: &str| s.score_variants(&[text.to_string()], &alphaloop::expr::NoAlphas, Budget::default()).remove(0);
    let (p, q) = (own(published), own(planted));
    assert!(p.rank_ic_t.abs() > q.rank_ic_t.abs(), "the planted window is worse: {p:?} against {q:?}");
    let best = &r.finalists[0];
    assert!(best.objective >= p.rank_ic_t.abs() - 1e-12, "best {best:?}, published {p:?}, path {:?}", r.path);
    assert!(r.finalists.len() == 3 && r.finalists.windows(2).all(|w| w[0].objective >= w[1].objective));
    assert!(r.finalists.iter().all(|f| f.score.rank_ic > 0.0 && f.score.rank_ic_t > 0.0), "{:?}", r.finalists);
    assert!(r.evaluations <= 120 && r.path.len() >= 2, "{} evaluations, path {:?}", r.evaluations, r.path);
    // A finalist handed on negated says so in its text, and scores as it is said.
    for f in &r.finalists {
        let again = own(&f.score.text);
        assert_eq!(again.rank_ic.to_bits(), f.score.rank_ic.to_bits(), "{}", f.score.text);
    }
}

/// The refiner never reads valid or test: with every value after train replaced by a
/// sentinel, it takes the same path to the same finalists with the same scores.
#[test]
fn the_refiner_never_reads_past_train() {
    use alphaloop::agent::refine::{refine, Overuse, RefineConfig};
    use std::sync::Arc;
    let data = sample();
    let mut spoiled = data.clone();
    let view = refiner_view(data);
    let (_, te) = view.train.span();
    for p in spoiled.fields.values_mut() {
        let mut rows = p.to_array();
        for t in te..rows.nrows() {
            rows.row_mut(t).fill(1e6 + t as f64);
        }
        let flat: Vec<f64> = rows.iter().copied().collect();
        *p = Arc::new(Panel::from_date_major(rows.nrows(), rows.ncols(), &flat));
    }
    let cfg = RefineConfig { budget: 60, ..RefineConfig::default() };
    let run = |d: &alphaloop::data::MarketData| {
        let v = refiner_view(d);
        let mut s = Searcher::new(&v, 64 << 20, 250).expect("searcher");
        let r = refine(&mut s, "rank(ts_mean(returns, 5)) * rank(volume)", &alphaloop::expr::NoAlphas, &Overuse::default(), &cfg, &mut Rng::new(5));
        format!("{:?} {:?} {}", r.path, r.finalists, r.evaluations)
    };
    let (a, b) = (run(data), run(&spoiled));
    assert!(a.len() > 100);
    assert_eq!(a, b);
}

/// A shape in more than the set share of the accepted alphas is overused, and counted in
/// a formula that holds it; small sets overuse nothing.
#[test]
fn overused_shapes_are_those_most_accepted_alphas_share() {
    use alphaloop::agent::refine::Overuse;
    let set: Vec<String> = ["rank(ts_mean(close, 5)) * volume", "rank(ts_mean(close, 5)) - open", "ts_rank(rank(ts_mean(close, 5)), 10)", "delta(close, 3)", "rank(high - low)", "ts_std(returns, 20)"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let o = Overuse::of(&set, 0.4);
    let e = |s: &str| parse(s).expect("parses");
    assert_eq!(o.count(&e("rank(ts_mean(close, 5)) / rank(volume)")), 2, "rank(ts_mean(..)) and ts_mean(close, 5)");
    assert_eq!(o.count(&e("rank(ts_mean(close, 10))")), 0);
    assert!(Overuse::of(&set[..4], 0.1).is_empty());
}

//! Acceptance costs on the full shipped panel (496 stocks; train 2000–2012 and valid
//! 2013–2015 as mining sees them), one thread, against 200 accepted alphas whose ranks are
//! kept on disk (the alpha101 seeds that evaluate, and the same delayed by a day to reach
//! 200), for the candidate `rank(ts_std(returns, 20)) * -1`:
//!
//! * `rank_candidate`: a candidate's per-date ranks over train and valid (ranked in f64, kept as
//!   exact 16-bit codes);
//! * `exact_novelty_200`: its rank correlation over the train panel with all 200;
//! * `gain_200`: the signed-mean combination's valid Rank IC with and without it, scored
//!   day by day, and the gain's t-statistic, against a set already seen (its combination
//!   kept, as in the loop);
//! * `ridge_gram_200`: the ridge combiner's first gain, which computes the set's Gram
//!   matrix over train (20,100 products of 200 alphas, the label included);
//! * `ridge_gain_200`: each gain after it: the candidate's 202 products, a fit and the
//!   combination scored.
//!
//! Run: `RAYON_NUM_THREADS=1 cargo bench --bench accept` (figures in benches/README.md).

use alphaloop::agent::accept::{Combine, Combiner, Member, DEFAULT_RIDGE_LAMBDA};
use alphaloop::backtest::{MetricsConfig, MiningView};
use alphaloop::data::{load, LoadOptions, Splits};
use alphaloop::expr::{evaluate, Compiler, NoAlphas, Schema};
use alphaloop::kb::ranks::{pooled_corr, RankStore};
use alphaloop::seeds;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

#[global_allocator]
static ALLOCATOR: alphaloop::data::pool::LineAligned = alphaloop::data::pool::LineAligned;

const SET: usize = 200;

/// Median seconds of `runs` calls of `f`.
fn median(runs: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    let md = load(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/sp500_daily.parquet"), &LoadOptions::default()).expect("the shipped data loads");
    let splits = Splits::resolve(None, &md);
    let view = MiningView::new(&md, &splits, MetricsConfig::default()).expect("view");
    let ((ts, te), (_, ve)) = (view.train.span(), view.valid.span());
    let dir = tempfile::tempdir().expect("tmp");
    let store = RankStore::new(dir.path(), &view.data, ts, ve);

    let defs = seeds::load(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("alpha_kb/seeds/alpha101.toml")).expect("seeds");
    let mut c = Compiler::new(Schema::of(&view.data), &NoAlphas);
    let mut codes = Vec::new();
    for d in &defs {
        for f in [d.formula.clone(), format!("delay({}, 1)", d.formula)] {
            if let Ok(r) = c.add(&f) {
                codes.push((r, f));
            }
        }
    }
    codes.truncate(SET);
    assert_eq!(codes.len(), SET, "enough alphas evaluate");
    // The candidate: none of the set.
    let cand_code = "rank(ts_std(returns, 20)) * -1".to_string();
    codes.push((c.add(&cand_code).expect("compiles"), cand_code));
    let roots: Vec<_> = codes.iter().map(|c| c.0).collect();
    let mut panels = vec![None; roots.len()];
    evaluate(&c.graph, &roots, &view.data, |i, p| panels[i] = Some(p));
    let candidate = panels.pop().flatten().expect("the candidate evaluated");
    let mut members = Vec::new();
    for (i, p) in panels.into_iter().enumerate() {
        let p = p.expect("evaluated");
        let ranks = store.rank(&p);
        let id = format!("a{i:03}");
        store.put(&id, &codes[i].1, &ranks).expect("stored");
        let kept = store.get_or_compute(&id, &codes[i].1, || None).expect("read").expect("kept");
        members.push(Member { id, sign: if i % 3 == 0 { -1.0 } else { 1.0 }, ranks: kept });
    }
    let dates = te - ts;

    let rank_s = median(5, || {
        std::hint::black_box(store.rank(&candidate));
    });
    let cand = Arc::new(store.rank(&candidate));
    let novelty_s = median(5, || {
        let m = members.iter().filter_map(|m| pooled_corr(&cand, &m.ranks, dates)).fold(0f64, |a, c| a.max(c.abs()));
        std::hint::black_box(m);
    });
    let mean = Combiner::new(Combine::SignedMean, 0.0);
    let gain_s = median(5, || {
        std::hint::black_box(mean.gain(&view, &store, &members, 1.0, &cand));
    });
    // The ridge's first call computes the set's Gram matrix (kept for the calls after).
    let ridge = Combiner::new(Combine::Ridge, DEFAULT_RIDGE_LAMBDA);
    let t0 = Instant::now();
    std::hint::black_box(ridge.gain(&view, &store, &members, 1.0, &cand));
    let gram_s = t0.elapsed().as_secs_f64();
    let ridge_s = median(5, || {
        std::hint::black_box(ridge.gain(&view, &store, &members, 1.0, &cand));
    });
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_default();
    println!("{} dates × {} stocks (train {} dates), {SET} accepted alphas, {} thread(s), {cpu}", ve - ts, store.n_assets(), te - ts, rayon::current_num_threads());
    println!("rank_candidate     {:>8.1} ms", rank_s * 1e3);
    println!("exact_novelty_200  {:>8.1} ms", novelty_s * 1e3);
    println!("gain_200           {:>8.1} ms", gain_s * 1e3);
    println!("ridge_gram_200     {:>8.1} ms", gram_s * 1e3);
    println!("ridge_gain_200     {:>8.1} ms", ridge_s * 1e3);
}

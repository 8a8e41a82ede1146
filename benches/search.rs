//! The search's costs on the full shipped panel (496 stocks), one thread:
//!
//! * `search/refine_200_variants_1_thread`: ten alpha101 seeds whose windows are all at
//!   least 5 days, each with twenty variants one refiner move away
//!   ([`alphaloop::agent::variants::sample`]), scored as the refiner scores them
//!   ([`Searcher::score_variants`]: train 2000–2012 only, Rank IC, IC, t, turnover,
//!   coverage), the parent first; the sub-expression cache starts empty each iteration.
//! * `search/finalist_checks_1_thread`: one finalist as the loop checks it: evaluated on
//!   train and valid, every metric on both, the look-ahead check (evaluated again on the
//!   data with everything after the cut replaced by noise, and compared), its ranks, and
//!   the exact novelty check against 200 accepted alphas whose ranks are kept on disk.
//!
//! Run: `cargo bench --bench search` (figures in benches/README.md). Peak memory is
//! printed at the end.

mod common;
use common::peak_rss_mb;
use alphaloop::agent::gp::Rng;
use alphaloop::agent::search::{Budget, Searcher};
use alphaloop::agent::variants::{sample, windows};
use alphaloop::backtest::{MetricsConfig, MiningView};
use alphaloop::data::{load, LoadOptions, Splits};
use alphaloop::expr::{eval_expr, evaluate, parse, Compiler, NoAlphas, Schema};
use alphaloop::kb::ranks::{pooled_corr, RankStore};
use alphaloop::sandbox::lookahead;
use criterion::{criterion_group, criterion_main, Criterion};
use std::path::PathBuf;
use std::time::Duration;

#[global_allocator]
static ALLOCATOR: alphaloop::data::pool::LineAligned = alphaloop::data::pool::LineAligned;

fn benches(c: &mut Criterion) {
    alphaloop::data::pool::keep_freed_memory();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let md = load(&root.join("../shared/data/sp500_daily.parquet"), &LoadOptions::default()).expect("the shipped data loads");
    let view = MiningView::new(&md, &Splits::resolve(None, &md), MetricsConfig::default()).expect("view");
    let defs = alphaloop::seeds::load(&root.join("alpha_kb/seeds/alpha101.toml")).expect("seeds");
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("pool");

    // Ten seeds with every window at least 5 days, and twenty variants of each.
    let mut rng = Rng::new(11);
    let mut batches: Vec<Vec<String>> = Vec::new();
    for d in &defs {
        let Ok(e) = parse(&d.formula) else { continue };
        let w = windows(&e);
        if w.is_empty() || w.iter().any(|&x| x < 5.0) || eval_expr(&d.formula, &view.data, &NoAlphas).is_err() {
            continue;
        }
        let mut batch = vec![d.formula.clone()];
        batch.extend(sample(&mut rng, &e, 20, 250).into_iter().map(|v| v.text));
        if batch.len() == 21 {
            batches.push(batch);
        }
        if batches.len() == 10 {
            break;
        }
    }
    assert_eq!(batches.len(), 10, "ten seeds with twenty variants each");
    let mut searcher = Searcher::new(&view, 256 << 20, 250).expect("searcher");
    // Where one pass's time goes.
    one.install(|| {
        for v in &batches {
            searcher.score_variants(v, &NoAlphas, Budget::default());
        }
    });
    let c0 = searcher.cache();
    println!("one pass: computing {:.2} s, scoring {:.2} s; cache hits {} misses {}", searcher.seconds.0, searcher.seconds.1, c0.hits, c0.misses);

    // The finalist checks' fixed parts: 200 accepted alphas' ranks on disk (the seeds that
    // evaluate, and the same delayed by a day), and the noised data the loop keeps.
    let ((ts, te), (_, ve)) = (view.train.span(), view.valid.span());
    let dir = tempfile::tempdir().expect("tmp");
    let store = RankStore::new(dir.path(), &view.data, ts, ve);
    let mut comp = Compiler::new(Schema::of(&view.data), &NoAlphas);
    let mut codes = Vec::new();
    for d in &defs {
        for f in [d.formula.clone(), format!("delay({}, 1)", d.formula)] {
            if let Ok(r) = comp.add(&f) {
                codes.push((r, f));
            }
        }
    }
    codes.truncate(200);
    let roots: Vec<_> = codes.iter().map(|c| c.0).collect();
    let mut members = Vec::new();
    evaluate(&comp.graph, &roots, &view.data, |i, p| {
        let id = format!("a{i:03}");
        store.put(&id, &codes[i].1, &store.rank(&p)).expect("stored");
        members.push(store.get_or_compute(&id, &codes[i].1, || None).expect("read").expect("kept"));
    });
    assert_eq!(members.len(), 200);
    let cutoff = lookahead::default_cutoff(&view.data);
    let noised = lookahead::noised(&view.data, cutoff, lookahead::SEED);
    let dates = te - ts;
    let finalist = "rank(ts_corr(rank(close), rank(volume), 10)) * -1";

    let mut g = c.benchmark_group("search");
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(30));
    g.bench_function("refine_200_variants_1_thread", |b| {
        b.iter(|| {
            one.install(|| {
                searcher.clear_cache();
                let n: usize = batches.iter().map(|v| searcher.score_variants(v, &NoAlphas, Budget::default()).len()).sum();
                std::hint::black_box(n)
            })
        })
    });
    g.bench_function("finalist_checks_1_thread", |b| {
        b.iter(|| {
            one.install(|| {
                let sig = eval_expr(finalist, &view.data, &NoAlphas).expect("evaluates");
                let metrics = view.score(&sig);
                let noisy = eval_expr(finalist, &noised, &NoAlphas).expect("evaluates");
                let la = lookahead::compare(&view.data, &sig, &noisy, cutoff);
                let ranks = store.rank(&sig);
                let max = members.iter().filter_map(|m| pooled_corr(&ranks, m, dates)).fold(0f64, |a, c| a.max(c.abs()));
                std::hint::black_box((metrics, la.is_clean(), max))
            })
        })
    });
    g.finish();
    println!("peak memory {:.0} MB", peak_rss_mb());
}

criterion_group!(search, benches);
criterion_main!(search);

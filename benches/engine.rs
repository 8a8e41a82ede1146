//! Engine benchmarks on the full shipped panel (4,822 dates × 496 stocks):
//! panel loading, one cross-sectional rank, one rolling correlation, one rolling maximum,
//! scoring one signal,
//! the whole alpha101 seed set with full metrics on one thread and on all cores (and without
//! metrics on one thread, the measure KunQuant and py-alpha-lib are timed by), and Qlib's
//! Alpha158 (`alpha_kb/seeds/alpha158.toml`) with full metrics on one thread.
//!
//! Run: `cargo bench --bench engine` (figures in benches/README.md).

mod common;
use common::peak_rss_mb;
use alphaloop::backtest::{prepare, Grouped, MetricsConfig};
use alphaloop::data::{load, LoadOptions, MarketData, Panel, Period, Splits};
use alphaloop::expr::{eval_expr, evaluate, Compiler, NoAlphas, Schema};
use alphaloop::seeds::{self, AlphaSet};
use criterion::{criterion_group, criterion_main, Criterion};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

// As the CLI's (src/main.rs).
#[global_allocator]
static ALLOCATOR: alphaloop::data::pool::LineAligned = alphaloop::data::pool::LineAligned;

fn data_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/sp500_daily.parquet")
}

fn full() -> MarketData {
    load(&data_path(), &LoadOptions::default()).expect("the shipped data loads")
}

/// Evaluates every alpha of a shipped alpha file that compiles on `data`, handing each
/// result to `on_root` as it is delivered.
fn eval_seeds(data: &MarketData, file: &str, on_root: impl FnMut(usize, Arc<Panel>)) {
    let defs = seeds::load(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("alpha_kb/seeds").join(file)).expect("seeds");
    let set = AlphaSet::from_defs(&defs);
    let mut c = Compiler::new(Schema::of(data), &set);
    let roots: Vec<_> = defs.iter().filter_map(|d| c.add(&d.formula).ok()).collect();
    evaluate(&c.graph, &roots, data, on_root);
}

/// Evaluates every alpha of a shipped alpha file that compiles and scores it; returns how
/// many were evaluated.
fn all_seeds(data: &MarketData, file: &str) -> usize {
    let prep = prepare(data, &Period::All, &Splits::default(), MetricsConfig::default()).expect("prepare");
    let mut n = 0;
    let mut group = Grouped::new(&prep.scorer);
    eval_seeds(&prep.data, file, |i, p| n += std::hint::black_box(group.push(i, p)).len());
    n + group.flush().len()
}

/// The same alphas as [`all_seeds`] without scoring them (each result dropped as it is
/// delivered): the measure KunQuant and py-alpha-lib are timed by ("compute only").
fn all_seeds_compute_only(data: &MarketData, file: &str) -> usize {
    let mut n = 0;
    eval_seeds(data, file, |_, p| {
        std::hint::black_box(p);
        n += 1;
    });
    n
}

fn benches(c: &mut Criterion) {
    // As the CLI does at start (src/main.rs).
    alphaloop::data::pool::keep_freed_memory();
    let mut g = c.benchmark_group("engine");
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(10));
    g.bench_function("load_sp500_daily", |b| b.iter(full));
    let data = full();
    let ret = eval_expr("returns", &data, &NoAlphas).expect("returns");
    g.bench_function("rank_panel", |b| b.iter(|| eval_expr("rank(returns)", &data, &NoAlphas).expect("rank")));
    g.bench_function("ts_corr_10_panel", |b| b.iter(|| eval_expr("correlation(close, volume, 10)", &data, &NoAlphas).expect("corr")));
    g.bench_function("ts_max_10_panel", |b| b.iter(|| eval_expr("ts_max(close, 10)", &data, &NoAlphas).expect("ts_max")));
    let prep = prepare(&data, &Period::All, &Splits::default(), MetricsConfig::default()).expect("prepare");
    g.bench_function("score_one_signal", |b| b.iter(|| prep.scorer.score(&ret)));
    drop(prep);
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("pool");
    g.measurement_time(Duration::from_secs(60));
    g.bench_function("alpha101_full_metrics_1_thread", |b| b.iter(|| one.install(|| all_seeds(&data, "alpha101.toml"))));
    g.bench_function("alpha101_compute_only_1_thread", |b| b.iter(|| one.install(|| all_seeds_compute_only(&data, "alpha101.toml"))));
    g.bench_function("alpha101_full_metrics_all_cores", |b| b.iter(|| all_seeds(&data, "alpha101.toml")));
    g.bench_function("alpha158_full_metrics_1_thread", |b| b.iter(|| one.install(|| all_seeds(&data, "alpha158.toml"))));
    g.finish();
    eprintln!("peak RSS of the benchmark process: {:.0} MB", peak_rss_mb());
}

criterion_group!(engine, benches);
criterion_main!(engine);

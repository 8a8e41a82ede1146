//! Knowledge-base latency: insert and query p50/p99 with 1k, 10k and 100k records, on the
//! embedded engine (`cargo bench --bench kb`; `-- 1000 10000` for a subset) or on a Qdrant
//! server (`-- --server 100000`: the 1.18.3 binary from ../shared/qdrant, started here as
//! the tests start it, or the one `QDRANT_URL` names), then the same queries while three
//! miners' worth of traffic goes on (`--no-optimize` skips the index build, which takes
//! long at 100k on two cores; `--replicated` makes the collection three shards of two
//! copies, for a cluster named by `QDRANT_URL`).
//!
//! Records carry a real payload (a full record with train/valid metrics) and the three
//! named vectors at their real sizes (384, 384, 1024). Vectors are random here so that the
//! engine, not the embedding model, is measured; the model's own cost per record is
//! measured separately at the end (all-MiniLM-L6-v2 on the CPU).

#[path = "../tests/common/mod.rs"]
mod tests_common;

use alphaloop::kb::edge::EdgeStore;
use alphaloop::kb::server::{Layout, ServerStore};
use alphaloop::kb::store::{Dims, Filter, Point, Store, BEHAVIOUR, CODE, IDEA};
use alphaloop::kb::{alpha_payload, record, AlphaRecord, Kind, Status};
use std::time::{Duration, Instant};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        ((alphaloop::xorshift(&mut self.0) >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn record(i: usize, rng: &mut Rng) -> AlphaRecord {
    let status = if i.is_multiple_of(3) { Status::Rejected { reason: "low IC".into() } } else { Status::Accepted };
    let mut r = AlphaRecord::new(format!("a{i:06}"), Kind::Expression, format!("rank(delta(close, {}))", i % 60 + 1), status);
    r.family = ["momentum", "reversal", "volume", "volatility"][i % 4].into();
    r.idea = format!("idea {i}");
    for split in ["train", "valid"] {
        // Fields are evaluated in the order written: rank_ic draws first, as before.
        let m = alphaloop::backtest::Metrics { rank_ic: rng.next() as f64 / 10.0, ic: rng.next() as f64 / 10.0, ..Default::default() };
        r.metrics.insert(split.into(), m);
    }
    r
}

fn point(i: usize, rng: &mut Rng, dims: Dims) -> Point {
    let r = record(i, rng);
    Point {
        id: record::point_id(&r.id),
        vectors: vec![(IDEA, rng.vec(dims.text)), (CODE, rng.vec(dims.text)), (BEHAVIOUR, rng.vec(dims.behaviour))],
        payload: alpha_payload(&r).expect("payload"),
    }
}

/// Idea, filtered and behaviour searches, `rounds` of each: their latencies.
fn query(store: &dyn Store, rng: &mut Rng, rounds: usize) -> [Vec<Duration>; 3] {
    let dims = store.dims();
    let filt = Filter::new().is("status", "accepted").range("valid_rank_ic", Some(0.0), None);
    let mut out: [Vec<Duration>; 3] = Default::default();
    for _ in 0..rounds {
        let q = rng.vec(dims.text);
        let t = Instant::now();
        store.search(IDEA, &q, &Filter::new(), 10, false).expect("search");
        out[0].push(t.elapsed());
        let t = Instant::now();
        let hits = store.search(IDEA, &q, &filt, 10, false).expect("search");
        out[1].push(t.elapsed());
        assert!(hits.iter().all(|(_, d)| d.payload["status"] == "accepted"));
        let b = rng.vec(dims.behaviour);
        let t = Instant::now();
        store.search(BEHAVIOUR, &b, &Filter::new().is("status", "accepted"), 16, false).expect("search");
        out[2].push(t.elapsed());
    }
    out
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn report(label: &str, [mut p, mut f, mut b]: [Vec<Duration>; 3]) {
    println!(
        "    {label:>22}: idea top-10 p50 {} p99 {}; filtered top-10 p50 {} p99 {}; behaviour top-16 p50 {} p99 {}",
        ms(pct(&mut p, 0.5)),
        ms(pct(&mut p, 0.99)),
        ms(pct(&mut f, 0.5)),
        ms(pct(&mut f, 0.99)),
        ms(pct(&mut b, 0.5)),
        ms(pct(&mut b, 0.99))
    );
}

/// Fills `store` with `n` records in batches of 32 and reports the writes and the queries.
fn fill(store: &dyn Store, n: usize, rng: &mut Rng) {
    let dims = store.dims();
    let batch = 32;
    let mut ins = Vec::new();
    let t0 = Instant::now();
    let mut i = 0;
    while i < n {
        let pts: Vec<Point> = (i..(i + batch).min(n)).map(|j| point(j, rng, dims)).collect();
        let t = Instant::now();
        store.upsert(pts).expect("upsert");
        ins.push(t.elapsed());
        i += batch;
    }
    let total = t0.elapsed();
    let mut single: Vec<Duration> = (0..50)
        .map(|k| {
            let p = point(n + k, rng, dims);
            let t = Instant::now();
            store.upsert(vec![p]).expect("upsert");
            t.elapsed()
        })
        .collect();
    // Each line is printed as soon as it is measured: at 100k the index build is long.
    println!(
        "n={n:>6} {}: insert {:.0} rec/s (batch of {batch}: p50 {} p99 {}; single record: p50 {} p99 {})",
        store.location(),
        n as f64 / total.as_secs_f64(),
        ms(pct(&mut ins, 0.5)),
        ms(pct(&mut ins, 0.99)),
        ms(pct(&mut single, 0.5)),
        ms(pct(&mut single, 0.99)),
    );
}

/// The queries of one miner while two others do the same and each stores a record after
/// every round of three searches (a miner's traffic with no evaluation between: the worst
/// case): the first miner's latencies. `stores` are the three miners' connections.
fn with_miners(stores: &[&dyn Store], rounds: usize) -> [Vec<Duration>; 3] {
    std::thread::scope(|s| {
        let handles: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(m, store)| {
                s.spawn(move || {
                    let mut rng = Rng(0xA076_1D64_78BD_642F ^ m as u64);
                    let mut lat: [Vec<Duration>; 3] = Default::default();
                    for k in 0..rounds {
                        let [a, b, c] = query(*store, &mut rng, 1);
                        lat[0].extend(a);
                        lat[1].extend(b);
                        lat[2].extend(c);
                        store.upsert(vec![point(10_000_000 + m * rounds + k, &mut rng, store.dims())]).expect("upsert");
                    }
                    lat
                })
            })
            .collect();
        let mut all: Vec<[Vec<Duration>; 3]> = handles.into_iter().map(|h| h.join().expect("miner")).collect();
        all.swap_remove(0)
    })
}

fn run(store: &dyn Store, n: usize, optimize: bool, miners: &[&dyn Store]) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    fill(store, n, &mut rng);
    report("before optimize", query(store, &mut rng, 200));
    report("3 miners, before optimize", with_miners(miners, 200));
    if optimize {
        let t = Instant::now();
        store.optimize().expect("optimize");
        println!("    optimize (HNSW indexes): {:.1} s", t.elapsed().as_secs_f64());
        report("after optimize", query(store, &mut rng, 200));
        report("3 miners, after optimize", with_miners(miners, 200));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let server = args.iter().any(|a| a == "--server");
    let optimize = !args.iter().any(|a| a == "--no-optimize");
    // A cluster's layout (with QDRANT_URL at one of its nodes): three shards, two copies each.
    let layout = if args.iter().any(|a| a == "--replicated") { Layout { shards: Some(3), replication_factor: Some(2) } } else { Layout::default() };
    let sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![1_000, 10_000, 100_000] } else { sizes };
    let dims = Dims { text: 384, behaviour: alphaloop::kb::behaviour::DIM };
    for n in sizes {
        if server {
            let s = tests_common::qdrant::Server::start();
            let url = s.url.replace("qdrant://", "http://");
            let coll = format!("bench{n}_{}", alphaloop::kb::record::now());
            let open = || ServerStore::open(std::slice::from_ref(&url), &coll, dims, Default::default(), &layout).expect("server");
            // Each miner is a process with a connection of its own.
            let (store, m1, m2) = (open(), open(), open());
            run(&store, n, optimize, &[&store, &m1, &m2]);
        } else {
            let dir = tempfile::tempdir().expect("tmp");
            let store = EdgeStore::open(dir.path(), dims).expect("open");
            // One embedded store has one process: three miners are three threads of it
            // (`mine --concurrency 3`).
            run(&store, n, optimize, &[&store, &store, &store]);
            let t = Instant::now();
            drop(store);
            let store = EdgeStore::open(dir.path(), dims).expect("reopen");
            println!("    close and reopen: {:.2} s, {} records", t.elapsed().as_secs_f64(), store.count(&Filter::new()).expect("count"));
        }
    }
    if let Ok(e) = alphaloop::kb::default_embedder(None) {
        let texts: Vec<String> = (0..256).map(|i| format!("alpha idea number {i}: buy stocks whose volume rose while price fell")).collect();
        let t = Instant::now();
        e.embed(&texts).expect("embed");
        println!("embedding (all-MiniLM-L6-v2, CPU): {:.2} ms per text in batches of 32", t.elapsed().as_secs_f64() * 1e3 / 256.0);
    }
}

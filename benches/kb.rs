//! Knowledge-base latency on the embedded engine: insert and query p50/p99 with 1k, 10k
//! and 100k records (`cargo bench --bench kb`; `-- 1000 10000` for a subset).
//!
//! Records carry a real payload (a full record with train/valid metrics) and the three
//! named vectors at their real sizes (384, 384, 1024). Vectors are random here so that the
//! engine, not the embedding model, is measured; the model's own cost per record is
//! measured separately at the end (all-MiniLM-L6-v2 on the CPU).

use alphaloop::kb::edge::EdgeStore;
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

fn run(n: usize) {
    let dims = Dims { text: 384, behaviour: alphaloop::kb::behaviour::DIM };
    let dir = tempfile::tempdir().expect("tmp");
    let store = EdgeStore::open(dir.path(), dims).expect("open");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let batch = 32;
    let mut ins = Vec::new();
    let t0 = Instant::now();
    let mut i = 0;
    while i < n {
        let pts: Vec<Point> = (i..(i + batch).min(n)).map(|j| point(j, &mut rng, dims)).collect();
        let t = Instant::now();
        store.upsert(pts).expect("upsert");
        ins.push(t.elapsed());
        i += batch;
    }
    let total = t0.elapsed();
    let single: Vec<Duration> = (0..50)
        .map(|k| {
            let p = point(n + k, &mut rng, dims);
            let t = Instant::now();
            store.upsert(vec![p]).expect("upsert");
            t.elapsed()
        })
        .collect();
    let query = |store: &EdgeStore, rng: &mut Rng| {
        let filt = Filter::new().is("status", "accepted").range("valid_rank_ic", Some(0.0), None);
        let mut plain = Vec::new();
        let mut filtered = Vec::new();
        let mut beh = Vec::new();
        for _ in 0..200 {
            let q = rng.vec(dims.text);
            let t = Instant::now();
            store.search(IDEA, &q, &Filter::new(), 10, false).expect("search");
            plain.push(t.elapsed());
            let t = Instant::now();
            let hits = store.search(IDEA, &q, &filt, 10, false).expect("search");
            filtered.push(t.elapsed());
            assert!(hits.iter().all(|(_, d)| d.payload["status"] == "accepted"));
            let b = rng.vec(dims.behaviour);
            let t = Instant::now();
            store.search(BEHAVIOUR, &b, &Filter::new().is("status", "accepted"), 16, false).expect("search");
            beh.push(t.elapsed());
        }
        (plain, filtered, beh)
    };
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    let mut single = single;
    // Each line is printed as soon as it is measured: at 100k the index build is long.
    println!(
        "n={n:>6}: insert {:.0} rec/s (batch of {batch}: p50 {} p99 {}; single record: p50 {} p99 {})",
        n as f64 / total.as_secs_f64(),
        ms(pct(&mut ins, 0.5)),
        ms(pct(&mut ins, 0.99)),
        ms(pct(&mut single, 0.5)),
        ms(pct(&mut single, 0.99)),
    );
    let report = |label: &str, (mut p, mut f, mut b): (Vec<Duration>, Vec<Duration>, Vec<Duration>)| {
        println!(
            "    {label:>15}: idea top-10 p50 {} p99 {}; filtered top-10 p50 {} p99 {}; behaviour top-16 p50 {} p99 {}",
            ms(pct(&mut p, 0.5)),
            ms(pct(&mut p, 0.99)),
            ms(pct(&mut f, 0.5)),
            ms(pct(&mut f, 0.99)),
            ms(pct(&mut b, 0.5)),
            ms(pct(&mut b, 0.99))
        );
    };
    report("before optimize", query(&store, &mut rng));
    let t = Instant::now();
    store.optimize().expect("optimize");
    println!("    optimize (HNSW indexes): {:.1} s", t.elapsed().as_secs_f64());
    report("after optimize", query(&store, &mut rng));
    let t = Instant::now();
    drop(store);
    let store = EdgeStore::open(dir.path(), dims).expect("reopen");
    println!("    close and reopen: {:.2} s, {} records", t.elapsed().as_secs_f64(), store.count(&Filter::new()).expect("count"));
}

fn main() {
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![1_000, 10_000, 100_000] } else { sizes };
    for n in sizes {
        run(n);
    }
    if let Ok(e) = alphaloop::kb::default_embedder(None) {
        let texts: Vec<String> = (0..256).map(|i| format!("alpha idea number {i}: buy stocks whose volume rose while price fell")).collect();
        let t = Instant::now();
        e.embed(&texts).expect("embed");
        println!("embedding (all-MiniLM-L6-v2, CPU): {:.2} ms per text in batches of 32", t.elapsed().as_secs_f64() * 1e3 / 256.0);
    }
}

//! The knowledge base on the real embedded Qdrant engine, the real embedding model and the
//! real data: upsert/reopen, filters, search, diversified retrieval, novelty, durability
//! under kill -9, and the "store in use" error.

mod common;

use alphaloop::backtest::{MetricsConfig, MiningView};
use alphaloop::kb::novelty::NoveltyConfig;
use alphaloop::kb::{io, AlphaRecord, Filter, Kb, Kind, Lesson, Location, Status};
use alphaloop::seeds::AlphaDef;
use common::{bin, sample, shared};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::{Arc, OnceLock};

fn embedder() -> Arc<dyn alphaloop::kb::embed::Embedder> {
    static E: OnceLock<Arc<dyn alphaloop::kb::embed::Embedder>> = OnceLock::new();
    E.get_or_init(|| alphaloop::kb::default_embedder(None).expect("embedding model installed by scripts/setup")).clone()
}

fn open(dir: &Path) -> Kb {
    Kb::open(&Location::Dir(dir.to_path_buf()), embedder()).expect("kb opens")
}

fn view() -> &'static MiningView {
    static V: OnceLock<MiningView> = OnceLock::new();
    V.get_or_init(|| MiningView::new(sample(), &common::sample_splits(), MetricsConfig::default()).expect("view"))
}

fn def(id: &str, formula: &str, idea: &str) -> AlphaDef {
    AlphaDef { id: id.into(), formula: formula.into(), name: None, idea: Some(idea.into()), source: None, family: None }
}

/// Evaluates and stores formulas as accepted records.
fn add(kb: &mut Kb, defs: &[AlphaDef]) -> Vec<(AlphaRecord, Option<Vec<f32>>)> {
    let sample_spec = kb.behaviour_sample(sample(), &common::sample_splits()).expect("sample");
    let items = io::evaluate_defs(defs, &alphaloop::expr::NoAlphas, view(), &sample_spec, "test", |_| {});
    io::store_all(kb, items.clone(), |_| {}).expect("stored");
    items
}

#[test]
fn embeddings_are_unit_length_and_meaningful() {
    let e = embedder();
    assert_eq!(e.dim(), 384);
    let v = e
        .embed(&["stocks that rose keep rising".into(), "price momentum continues".into(), "how to bake bread".into()])
        .expect("embeds");
    for x in &v {
        let n: f32 = x.iter().map(|a| a * a).sum::<f32>().sqrt();
        assert!((n - 1.0).abs() < 1e-4, "norm {n}");
    }
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    assert!(dot(&v[0], &v[1]) > dot(&v[0], &v[2]) + 0.1, "momentum texts should be closer than bread");
}

#[test]
fn records_survive_reopen_and_filters_work() {
    let dir = tempfile::tempdir().expect("tmp");
    records_contract(&|| open(dir.path()));
}

#[test]
fn records_survive_reopen_and_filters_work_on_a_server() {
    let server = common::qdrant::Server::start();
    let loc: Location = server.collection("records").parse().expect("location");
    records_contract(&|| Kb::open(&loc, embedder()).expect("connects"));
}

/// What every backend does with records: they survive a reopen, filters and ranges count
/// them, `top` sorts, search finds by meaning, removal removes.
fn records_contract(open: &dyn Fn() -> Kb) {
    let defs = vec![
        def("mom", "rank(delta(close, 10))", "ten-day price momentum"),
        def("rev", "-1 * rank(delta(close, 2))", "short-term reversal of two-day moves"),
        def("vol", "-1 * ts_corr(rank(volume), rank(close), 10)", "volume and price moving apart"),
        def("bad", "rank(clsoe)", "a typo"),
    ];
    {
        let mut kb = open();
        add(&mut kb, &defs);
        let mut l = AlphaRecord::new("rejected_one", Kind::Expression, "rank(open)", Status::Rejected { reason: "low IC".into() });
        l.metrics.insert("valid".into(), Default::default());
        l.metrics.get_mut("valid").expect("valid").rank_ic = f64::NAN;
        kb.put(vec![(l, None)]).expect("put");
    }
    let kb = open();
    assert_eq!(kb.count(&Filter::new()).expect("count"), 5);
    assert_eq!(kb.count(&Filter::new().is("status", "accepted")).expect("count"), 3);
    let bad = kb.get("bad").expect("get").expect("stored");
    match &bad.status {
        Status::Error { message } => assert!(message.contains("clsoe"), "{message}"),
        s => panic!("expected an error record, got {s:?}"),
    }
    // NaN metrics survive the JSON payload.
    let rj = kb.get("rejected_one").expect("get").expect("stored");
    assert!(rj.metrics["valid"].rank_ic.is_nan());
    // Stored metrics equal a fresh evaluation.
    let mom = kb.get("mom").expect("get").expect("stored");
    let sig = alphaloop::expr::eval_expr("rank(delta(close, 10))", &view().data, &alphaloop::expr::NoAlphas).expect("eval");
    assert_eq!(mom.metrics["valid"].rank_ic.to_bits(), view().valid.score(&sig).rank_ic.to_bits());
    assert_eq!(mom.metrics.len(), 2, "train and valid only, never test");
    // Metric range filter on the indexed payload key.
    let rics: Vec<f64> = ["mom", "rev", "vol"].iter().map(|id| kb.get(id).unwrap().unwrap().metric("valid", "rank_ic").unwrap()).collect();
    let lo = rics.iter().cloned().fold(f64::INFINITY, f64::min);
    let above = kb.count(&Filter::new().range("valid_rank_ic", Some(lo + 1e-12), None)).expect("count");
    assert_eq!(above, 2);
    // top is sorted.
    let top = kb.top("rank_ic", "valid", 10, &Filter::new().is("status", "accepted")).expect("top");
    let vals: Vec<f64> = top.iter().map(|r| r.metric("valid", "rank_ic").unwrap()).collect();
    assert!(vals.windows(2).all(|w| w[0] >= w[1]), "{vals:?}");
    // Semantic search finds the volume idea for a volume query.
    let hits = kb.search_text("trading volume diverging from price", &Filter::new(), 2, false).expect("search");
    assert_eq!(hits[0].record.id, "vol");
    // Removal.
    assert!(kb.remove("rev").expect("rm"));
    assert!(!kb.remove("rev").expect("rm"));
    assert!(kb.get("rev").expect("get").is_none());
}

/// Per-date percentile ranks (ties averaged, NaN ignored) of dates `from..to`, date-major,
/// and their Pearson correlation pooled over cells finite on both sides: a plain f64
/// computation of what the exact novelty check measures.
fn direct_rank_corr(a: &alphaloop::data::Panel, b: &alphaloop::data::Panel, from: usize, to: usize) -> f64 {
    let ranks = |p: &alphaloop::data::Panel| -> Vec<f64> {
        let mut out = Vec::new();
        for d in from..to {
            let row: Vec<f64> = (0..p.n_assets()).map(|s| p.get(d, s)).collect();
            let mut idx: Vec<usize> = (0..row.len()).filter(|&i| row[i].is_finite()).collect();
            idx.sort_by(|&i, &j| row[i].total_cmp(&row[j]));
            let mut r = vec![f64::NAN; row.len()];
            let mut k = 0;
            while k < idx.len() {
                let mut e = k;
                while e + 1 < idx.len() && row[idx[e + 1]] == row[idx[k]] {
                    e += 1;
                }
                for &i in &idx[k..=e] {
                    r[i] = ((k + e) as f64 / 2.0 + 1.0) / idx.len() as f64;
                }
                k = e + 1;
            }
            out.extend(r);
        }
        out
    };
    let (x, y) = (ranks(a), ranks(b));
    let pairs: Vec<(f64, f64)> = x.into_iter().zip(y).filter(|(a, b)| a.is_finite() && b.is_finite()).collect();
    let n = pairs.len() as f64;
    let (mx, my) = (pairs.iter().map(|p| p.0).sum::<f64>() / n, pairs.iter().map(|p| p.1).sum::<f64>() / n);
    let cov: f64 = pairs.iter().map(|(a, b)| (a - mx) * (b - my)).sum();
    let vx: f64 = pairs.iter().map(|(a, _)| (a - mx) * (a - mx)).sum();
    let vy: f64 = pairs.iter().map(|(_, b)| (b - my) * (b - my)).sum();
    cov / (vx * vy).sqrt()
}

/// The exact check: the rank correlation over the whole train panel with every accepted
/// alpha, the accepted alphas' ranks kept on disk beside the store. A rescaled and a
/// sign-flipped copy are refused with that reason; the value equals a direct f64
/// computation; the ranks on disk are keyed by the data and read back unchanged.
#[test]
fn exact_novelty_is_the_train_panels_rank_correlation() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut kb = open(dir.path());
    add(&mut kb, &[def("base", "rank(delta(close, 5))", "five-day momentum"), def("corrvol", "ts_corr(rank(close), rank(volume), 10)", "price-volume correlation")]);
    let v = view();
    let ((ts, te), (_, ve)) = (v.train.span(), v.valid.span());
    let store = kb.rank_store(&v.data, ts, ve);
    let dates = te - ts;
    let cfg = NoveltyConfig::default();
    let eval = |code: &str| alphaloop::expr::eval_expr(code, &v.data, &alphaloop::expr::NoAlphas).expect("eval");
    let check = |code: &str| {
        let ranks = store.rank(&eval(code));
        let exact = alphaloop::kb::novelty::Exact { store: &store, candidate: &ranks, data: &v.data, dates };
        kb.check_novelty("cand", Kind::Expression, code, None, Some(&exact), &cfg).expect("check")
    };
    for (code, sign) in [("rank(delta(close, 5)) * 2 + 1", 1.0), ("-1 * delta(close, 5)", -1.0)] {
        let got = check(code);
        let (c, with) = (got.novelty.max_corr.expect("measured"), got.novelty.max_corr_with.as_deref());
        assert!((c - sign).abs() < 1e-6 && with == Some("base") && got.novelty.max_corr_exact, "{code}: {got:?}");
        let reason = got.reject.expect("a copy is refused");
        assert!(reason.starts_with("too correlated with accepted alpha base: rank correlation over the train panel"), "{reason}");
    }
    // A different signal: its correlation is the larger of a direct f64 computation
    // against each accepted alpha, within what summing in f32 lanes moves.
    let code = "rank(ts_std(returns, 20))";
    let got = check(code);
    let want = ["base", "corrvol"]
        .map(|id| (direct_rank_corr(&eval(code), &eval(if id == "base" { "rank(delta(close, 5))" } else { "ts_corr(rank(close), rank(volume), 10)" }), ts, te), id));
    let best = if want[0].0.abs() >= want[1].0.abs() { want[0] } else { want[1] };
    assert_eq!(got.novelty.max_corr_with.as_deref(), Some(best.1));
    assert!((got.novelty.max_corr.expect("measured") - best.0).abs() < 1e-6, "{got:?} against {want:?}");
    assert!(got.reject.is_none(), "{got:?}");
    // Kept on disk under the store, keyed by the data: read back bit for bit; other data
    // (the same cut a day shorter) has its own key.
    let files: Vec<_> = walk(&dir.path().join("ranks"));
    assert_eq!(files.len(), 2, "{files:?}");
    let again = kb.rank_store(&v.data, ts, ve);
    let stored = again.get_or_compute("base", "rank(delta(close, 5))", || panic!("read from disk, not computed")).expect("read").expect("present");
    let fresh = again.rank(&eval("rank(delta(close, 5))"));
    let n = stored.n_dates();
    assert!(n == ve - ts && (0..n).all(|d| stored.row(d) == fresh.row(d)));
    let shorter = v.data.truncate_dates(ve - 1);
    let other = kb.rank_store(&shorter, ts, ve - 1);
    assert!(other.get_or_compute("base", "rank(delta(close, 5))", || None).expect("no error").is_none(), "ranks of other data were reused");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn novelty_rejects_near_copies_and_keeps_new_signals() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut kb = open(dir.path());
    add(
        &mut kb,
        &[
            def("base", "rank(delta(close, 5))", "five-day momentum"),
            def("corrvol", "ts_corr(rank(close), rank(volume), 10)", "price-volume correlation"),
        ],
    );
    let spec = kb.behaviour_sample(sample(), &common::sample_splits()).expect("sample");
    let cfg = NoveltyConfig::default();
    let check = |kb: &Kb, code: &str, cfg: &NoveltyConfig| {
        let sig = alphaloop::expr::eval_expr(code, &view().data, &alphaloop::expr::NoAlphas).expect("eval");
        let b = spec.vector(&view().data, &sig).expect("behaviour");
        kb.check_novelty("cand", Kind::Expression, code, Some(&b), None, cfg).expect("check")
    };
    let v = check(&kb, "rank(delta(close, 5)) * 2 + 1", &cfg);
    assert!(v.reject.as_deref().unwrap_or("").contains("base"), "{v:?}");
    assert!(v.novelty.max_corr.unwrap() > 0.99);
    // A sign flip is the same signal.
    let v = check(&kb, "-1 * rank(delta(close, 5))", &cfg);
    assert!(v.novelty.max_corr.unwrap() < -0.99, "{v:?}");
    assert!(v.reject.is_some());
    // Something else passes.
    let v = check(&kb, "rank(ts_std(returns, 20))", &cfg);
    assert!(v.reject.is_none(), "{v:?}");
    assert!(v.novelty.max_corr.unwrap().abs() < 0.7);
    // AST overlap: shares the whole ts_corr(...) subtree (6 of 9 nodes). With the
    // correlation bar at 0.999 the signal passes the correlation gate (sign(returns) flips
    // it on about half the cells), so the rejection can only come from the subtree gate.
    let strict = NoveltyConfig { max_ast_overlap: 0.6, max_corr: 0.999, ..NoveltyConfig::default() };
    let v = check(&kb, "ts_corr(rank(close), rank(volume), 10) * sign(returns)", &strict);
    assert_eq!(v.novelty.ast_overlap_with.as_deref(), Some("corrvol"));
    assert!((v.novelty.ast_overlap.unwrap() - 6.0 / 9.0).abs() < 1e-12);
    assert!(v.novelty.max_corr.unwrap().abs() < strict.max_corr, "the correlation gate must pass: {v:?}");
    let reason = v.reject.as_deref().expect("rejected by the subtree gate");
    assert!(reason.contains("repeats accepted alpha corrvol") && reason.contains("shared subtree of 6 nodes") && reason.contains("67%"), "{reason}");
    // At the default 80 % the same overlap (67 %) is no reason to reject.
    let v = check(&kb, "ts_corr(rank(close), rank(volume), 10) * sign(returns)", &NoveltyConfig { max_corr: 0.999, ..NoveltyConfig::default() });
    assert!(v.reject.is_none(), "{v:?}");
    // A repeat of a stored failure is flagged (not rejected); its sign flip is not a repeat.
    assert!(check(&kb, "rank(ts_std(returns, 20))", &cfg).repeat.is_none());
    let sig = alphaloop::expr::eval_expr("rank(ts_std(returns, 20))", &view().data, &alphaloop::expr::NoAlphas).expect("eval");
    let failed = AlphaRecord::new("failed", Kind::Expression, "rank(ts_std(returns, 20))", Status::Rejected { reason: "valid Rank IC -0.01 is below 0".into() });
    kb.put(vec![(failed, spec.vector(&view().data, &sig))]).expect("put");
    let v = check(&kb, "-1 * -rank(ts_std(returns, 20))", &cfg);
    assert!(v.reject.is_none(), "{v:?}");
    let repeat = v.repeat.expect("a repeat of the stored failure");
    assert!(repeat.starts_with("failed `rank(ts_std(returns, 20))` (rejected: valid Rank IC"), "{repeat}");
    assert!(check(&kb, "-rank(ts_std(returns, 20))", &cfg).repeat.is_none());
}

#[test]
fn retrieval_separates_successes_failures_and_lessons_and_diversifies() {
    let dir = tempfile::tempdir().expect("tmp");
    let kb = open(dir.path());
    let mk = |id: &str, idea: &str, status: Status| {
        let mut r = AlphaRecord::new(id, Kind::Expression, format!("rank(delta(close, {}))", id.len()), status);
        r.idea = idea.into();
        (r, None)
    };
    kb.put(vec![
        mk("m1", "price momentum over ten days", Status::Accepted),
        mk("m2", "price momentum over ten days.", Status::Accepted),
        mk("m3", "momentum of the stock price over two weeks", Status::Accepted),
        mk("v1", "volume spikes on down days", Status::Accepted),
        mk("f1", "momentum with a one-day window", Status::Rejected { reason: "too noisy".into() }),
        mk("f2", "broken momentum code", Status::Error { message: "unknown field".into() }),
    ])
    .expect("put");
    kb.put_lesson(&Lesson {
        id: "l1".into(),
        text: "Momentum windows shorter than five days behave like reversal.".into(),
        run_id: "r".into(),
        generation: 1,
        sources: vec!["f1".into()],
        created_at: alphaloop::kb::record::now(),
    })
    .expect("lesson");
    let ctx = kb.retrieve("price momentum", 2).expect("retrieve");
    assert_eq!(ctx.successes.len(), 2);
    assert!(ctx.successes.iter().all(|h| h.record.status == Status::Accepted));
    let ids: Vec<&str> = ctx.successes.iter().map(|h| h.record.id.as_str()).collect();
    assert!(!(ids.contains(&"m1") && ids.contains(&"m2")), "near-duplicates both picked: {ids:?}");
    assert!(ctx.failures.iter().all(|h| h.record.status != Status::Accepted));
    assert_eq!(ctx.failures.len(), 2);
    assert_eq!(ctx.lessons.len(), 1);
    assert_eq!(ctx.lessons[0].lesson.id, "l1");
    assert_eq!(kb.lessons().expect("lessons").len(), 1);
}

#[test]
fn retrieval_counts_age_from_the_newest_candidate_not_the_clock() {
    // The same records stored 30 days ago and now must retrieve alike: a KB reopened the
    // next day, or a copy of it, gives the writer the same context.
    let day = 86_400;
    let scores = |shift: i64| {
        let dir = tempfile::tempdir().expect("tmp");
        let kb = open(dir.path());
        let now = alphaloop::kb::record::now() - shift;
        let mk = |id: &str, age_days: i64| {
            let mut r = AlphaRecord::new(id, Kind::Expression, format!("rank(delta(close, {}))", id.len()), Status::Accepted);
            r.idea = "price momentum over ten days".into();
            r.created_at = now - age_days * day;
            (r, None)
        };
        kb.put(vec![mk("new", 0), mk("older", 1)]).expect("put");
        let hits = kb.search_text("price momentum", &Filter::new(), 2, true).expect("search");
        let mut s: Vec<(String, f64)> = hits.into_iter().map(|h| (h.record.id, h.score)).collect();
        s.sort_by(|a, b| a.0.cmp(&b.0));
        s
    };
    let (today, month_ago) = (scores(0), scores(30 * day));
    assert_eq!(today.len(), 2);
    assert_eq!(today, month_ago, "the clock moved retrieval");
    // Same idea text, so the same relevance and performance: the one a day older than the
    // newest scores W_RECENCY × (1 − 0.5) less.
    let (new, older) = (today[0].1, today[1].1);
    assert!((new - older - 0.05).abs() < 1e-9, "{today:?}");
}

#[test]
fn a_second_process_gets_a_clear_in_use_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let _kb = open(dir.path());
    let out = bin().args(["kb", "--kb"]).arg(dir.path()).arg("stats").output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use by another alphaloop process"), "{err}");
    assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
}

/// Kills an importer with SIGKILL at random points; every record it acknowledged must be
/// found, and the store must open.
#[test]
fn kill_9_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = dir.path().join("store");
    let export = dir.path().join("export.json");
    let recs: Vec<AlphaRecord> = (0..400)
        .map(|i| {
            let mut r = AlphaRecord::new(format!("k{i:04}"), Kind::Expression, format!("rank(delta(close, {}))", i % 50 + 1), Status::Accepted);
            r.idea = format!("synthetic idea number {i} about momentum window {}", i % 50 + 1);
            r
        })
        .collect();
    std::fs::write(&export, serde_json::to_string(&recs).expect("json")).expect("write");
    let mut acked_total = std::collections::BTreeSet::new();
    // Deterministic "random" kill points (after this many acknowledged batches).
    for (round, (kill_after, delay_ms)) in [(1usize, 0u64), (3, 4), (2, 9), (5, 15)].iter().enumerate() {
        let mut child = bin()
            .args(["kb", "--json", "--kb"])
            .arg(&store)
            .arg("import")
            .arg(&export)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut acked = Vec::new();
        while let Some(Ok(line)) = lines.next() {
            let v: serde_json::Value = serde_json::from_str(&line).expect("json line");
            acked.push(v["stored"].as_str().expect("id").to_string());
            if acked.len() >= kill_after * 32 {
                break;
            }
        }
        // Let the next batch get under way, so the kill lands inside a write.
        std::thread::sleep(std::time::Duration::from_millis(*delay_ms));
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        let kb = open(&store);
        for id in &acked {
            assert!(kb.get(id).expect("get").is_some(), "round {round}: acknowledged record {id} lost");
        }
        acked_total.extend(acked);
        let found = kb.count(&Filter::new()).expect("count");
        assert!(found >= acked_total.len(), "round {round}: {found} found < {} acknowledged", acked_total.len());
        eprintln!("round {round}: {} acknowledged so far, {found} found", acked_total.len());
    }
}

/// `kb import` of the seed file, then every `kb` subcommand through the binary.
#[test]
fn kb_cli_end_to_end() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = dir.path().join("store");
    let cfg = cli_contract(dir.path(), &store);
    // A command that reads a KB, given a directory that holds none, says so and makes none.
    let typo = dir.path().join("stroe");
    for args in [&["stats"][..], &["top"], &["holdout"]] {
        let out = bin().arg("--config").arg(&cfg).args(["kb", "--kb"]).arg(&typo).args(args).output().expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("no knowledge base at ") && err.contains("stroe"), "{args:?}: {err}");
    }
    let out = bin().arg("--config").arg(&cfg).args(["train", "--top", "5", "--kb"]).arg(&typo).output().expect("runs");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no knowledge base at "), "train");
    assert!(!typo.exists());
}

/// The same commands on a collection of a real Qdrant server; the client and the server
/// agree on versions, so no command warns about them.
#[test]
fn kb_cli_end_to_end_on_a_server() {
    let server = common::qdrant::Server::start();
    let dir = tempfile::tempdir().expect("tmp");
    let store = std::path::PathBuf::from(server.collection("cli"));
    let cfg = cli_contract(dir.path(), &store);
    let out = bin().arg("--config").arg(&cfg).args(["kb", "--kb"]).arg(&store).arg("stats").output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !err.contains("compatible"), "{err}");
}

/// `kb copy` moves a store to a server collection and back: every record with its
/// vectors, metrics and lineage, the lessons and the store's settings, checked by reading
/// back; the store that returns holds what left, bit for bit.
#[test]
fn a_kb_moves_to_a_server_and_back_unchanged() {
    let server = common::qdrant::Server::start();
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = common::sample_config(dir.path(), &shared("data/sp500_sample.parquet"), None);
    let first = dir.path().join("first");
    {
        let mut kb = open(&first);
        add(&mut kb, &[def("mom", "rank(delta(close, 10))", "ten-day price momentum"), def("vol", "-1 * ts_corr(rank(volume), rank(close), 10)", "volume and price apart")]);
        let mut child = AlphaRecord::new("child", Kind::Expression, "rank(alpha:mom) - rank(volume)", Status::Rejected { reason: "adds too little".into() });
        child.parents = vec!["mom".into()];
        kb.put(vec![(child, None)]).expect("put");
        kb.put_lesson(&Lesson { id: "lesson-1".into(), text: "momentum holds on valid".into(), run_id: "r".into(), generation: 0, sources: vec!["mom".into()], created_at: 1 }).expect("lesson");
    }
    let remote = server.collection("moved");
    let back = dir.path().join("back");
    let copy = |from: &str, to: &str| -> serde_json::Value {
        let out = bin().arg("--config").arg(&cfg).args(["kb", "--json", "copy", "--from", from, "--to", to]).output().expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("json")
    };
    let there = copy(first.to_str().expect("utf8"), &remote);
    let home = copy(&remote, back.to_str().expect("utf8"));
    assert_eq!((there["records"].as_u64(), home["records"].as_u64()), (Some(3), Some(3)), "{there} {home}");
    assert_eq!(there["checksum"], home["checksum"], "the points that came back are those that left");
    let export = |store: &Path| common::kb_cli(&cfg, store, &["--json", "export"]);
    assert_eq!(export(&back), export(&first));
    let kb = open(&back);
    assert_eq!(kb.get("child").expect("get").expect("present").parents, vec!["mom".to_string()]);
    assert_eq!(kb.lessons().expect("lessons").len(), 1);
    // Vectors came along: the nearest by behaviour is found without re-evaluating.
    let (rec, b) = kb.get_with_behaviour("mom").expect("get").expect("present");
    assert_eq!(rec.id, "mom");
    assert!(b.is_some_and(|v| v.iter().any(|x| *x != 0.0)));
}

/// What `kb` does on any backend at `store`: import, stats, top, holdout, show, similar,
/// search, export in every format and import back, the alpha file `eval` reads, rm.
/// Returns the config it wrote into `dir`.
fn cli_contract(dir: &Path, store: &Path) -> std::path::PathBuf {
    let cfg = common::sample_config(dir, &shared("data/sp500_sample.parquet"), None);
    let run = |args: &[&str]| common::kb_cli(&cfg, store, args);
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("alpha_kb/seeds/alpha101.toml");
    let imported = run(&["import", seeds.to_str().expect("utf8")]);
    assert!(imported.contains("1 of them could not be evaluated (stored with status error):\n  alpha101_056: field 'cap'"), "{imported}");
    let missing = bin().arg("--config").arg(&cfg).args(["kb", "--kb"]).arg(store).args(["import", "/nonexistent/kb.json"]).output().expect("runs");
    let err = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(err.matches("No such file").count(), 1, "the reason once: {err}");
    let stats: serde_json::Value = serde_json::from_str(&run(&["--json", "stats"])).expect("json");
    assert_eq!(stats["total"], 101);
    assert_eq!(stats["by_status"]["error"], 1, "only alpha 056 (cap) fails");
    // A plain list of formulas goes in beside them, one record per line, into its own store.
    let list = dir.join("ideas.txt");
    std::fs::write(&list, "rank(delta(close, 5))
# skipped
-1 * ts_rank(volume, 10)
").expect("write list");
    let listed = dir.join("listed");
    common::kb_cli(&cfg, &listed, &["import", list.to_str().expect("utf8")]);
    let shown: serde_json::Value = serde_json::from_str(&common::kb_cli(&cfg, &listed, &["--json", "show", "ideas_003"])).expect("json");
    assert_eq!(shown["code"], "-1 * ts_rank(volume, 10)");
    assert!(shown["metrics"]["valid"]["rank_ic"].is_number(), "{shown}");
    // The same store fed data of another era: its behaviour sample (sample dates) is not
    // in it, and the import says so instead of storing empty behaviour vectors silently.
    let later = common::moved_sample(dir, 2922);
    // No [splits] for it: its own dates are split (the sample's splits have none of them).
    let plain = dir.join("plain.toml");
    std::fs::write(&plain, "").expect("config");
    let out = bin().arg("--config").arg(&plain).args(["kb", "--kb"]).arg(&listed).args(["import", "--data"]).arg(&later).arg(&list).output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("keeps a behaviour sample of 32 dates") && err.contains("has only 0 of those dates"), "{err}");
    let top: serde_json::Value = serde_json::from_str(&run(&["--json", "top", "-n", "5"])).expect("json");
    let v: Vec<f64> = top.as_array().expect("array").iter().map(|r| r["metrics"]["valid"]["rank_ic"].as_f64().expect("f64")).collect();
    assert_eq!(v.len(), 5);
    assert!(v.windows(2).all(|w| w[0] >= w[1]));
    // Or by the Rank IC's t-statistic, derived from what each record stores.
    let top: serde_json::Value = serde_json::from_str(&run(&["--json", "top", "--by", "rank_ic_t", "-n", "5"])).expect("json");
    let t: Vec<f64> = top
        .as_array()
        .expect("array")
        .iter()
        .map(|r| r["metrics"]["valid"]["rank_icir"].as_f64().expect("f64") * r["metrics"]["valid"]["n_days"].as_f64().expect("f64").sqrt())
        .collect();
    assert!(t.len() == 5 && t.windows(2).all(|w| w[0] >= w[1]) && t[0] > 1.0, "{t:?}");
    // The final report on test, in valid's order; it writes nothing back.
    let hold: serde_json::Value = serde_json::from_str(&run(&["--json", "holdout", "-n", "3"])).expect("json");
    let hold = hold.as_array().expect("array");
    assert_eq!(hold.len(), 3);
    let valid: Vec<f64> = hold.iter().map(|h| h["valid"]["rank_ic"].as_f64().expect("valid")).collect();
    assert_eq!(valid, v[..3]);
    assert!(hold.iter().all(|h| h["test"]["rank_ic"].as_f64().is_some_and(f64::is_finite) && h["test"]["n_days"].as_u64() > Some(200)), "{hold:?}");
    // Each with its Rank IC's t-statistic on valid and test, and Bonferroni's bar for the
    // 101 attempts they were chosen among (upper 0.05 / 202 point of the normal).
    for h in hold {
        let f = |v: &serde_json::Value| v.as_f64().expect("a number");
        let t = |split: &str| f(&h[split]["rank_icir"]) * f(&h[split]["n_days"]).sqrt();
        assert!((f(&h["valid_t"]) - t("valid")).abs() < 1e-9 && (f(&h["test_t"]) - t("test")).abs() < 1e-9, "{h}");
        assert!(f(&h["valid_t"]) > 0.5, "the best on valid have a positive t there: {h}");
        assert_eq!(h["attempts"], 101);
        assert!((f(&h["bar_t"]) - 3.4834208364606987).abs() < 1e-7, "{h}");
    }
    let png = dir.join("holdout.png");
    let text = run(&["holdout", "-n", "3", "--plot", png.to_str().expect("utf8")]);
    assert!(text.contains("period test (2018-01-02..2018-12-31)") && text.contains("3 alphas: mean Rank IC train") && text.contains("among 101 candidates tried"), "{text}");
    assert!(text.contains("for 101 attempts Bonferroni's bar (5 %, two-sided) is |t| >= 3.48: ") && text.contains("valid t"), "{text}");
    let bytes = std::fs::read(&png).expect("plot written");
    assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 5_000, "{} bytes", bytes.len());
    let again: serde_json::Value = serde_json::from_str(&run(&["--json", "stats"])).expect("json");
    assert_eq!(again["total"], 101);
    let show: serde_json::Value = serde_json::from_str(&run(&["--json", "show", "alpha101_001"])).expect("json");
    assert_eq!(show["id"], "alpha101_001");
    assert!(show["metrics"]["train"]["ic"].is_number());
    assert!(show["metrics"].get("test").is_none());
    let sim: serde_json::Value = serde_json::from_str(&run(&["--json", "similar", "alpha101_001", "-n", "3"])).expect("json");
    assert_eq!(sim.as_array().expect("array").len(), 3);
    assert!(sim[0]["record"]["id"] != "alpha101_001");
    let hits: serde_json::Value = serde_json::from_str(&run(&["--json", "search", "volume", "-n", "4"])).expect("json");
    assert_eq!(hits.as_array().expect("array").len(), 4);
    // A misspelt split or family is an error that names it, not an empty table.
    let fails = |args: &[&str]| {
        let out = bin().arg("--config").arg(&cfg).arg("kb").arg("--kb").arg(store).args(args).output().expect("runs");
        assert!(!out.status.success(), "kb {args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = fails(&["top", "--split", "vaild"]);
    assert!(err.contains("unknown split 'vaild': train or valid"), "{err}");
    let err = fails(&["top", "--split", "test"]);
    assert!(err.contains("`kb holdout` reports the test period"), "{err}");
    let err = fails(&["search", "volume", "--family", "volum"]);
    assert!(err.contains("no record of family 'volum'") && err.contains("its families: seed"), "{err}");
    let fam: serde_json::Value = serde_json::from_str(&run(&["--json", "top", "--family", "seed", "-n", "2"])).expect("json");
    assert_eq!(fam.as_array().expect("array").len(), 2);
    let pq = dir.join("kb.parquet");
    run(&["export", "--format", "parquet", "-o", pq.to_str().expect("utf8")]);
    assert!(std::fs::metadata(&pq).expect("written").len() > 1000);
    let csv = run(&["export", "--format", "csv"]);
    assert_eq!(csv.lines().count(), 102);
    // Without --format the file's name says which; a name that does not is refused.
    let named = dir.join("named.csv");
    run(&["export", "-o", named.to_str().expect("utf8")]);
    assert_eq!(std::fs::read_to_string(&named).expect("written"), csv);
    let err = fails(&["export", "-o", dir.join("kb.txt").to_str().expect("utf8")]);
    assert!(err.contains("cannot tell the format of") && err.contains("--format"), "{err}");
    let err = fails(&["import", named.to_str().expect("utf8")]);
    assert!(err.contains("`kb import` reads a JSON export"), "{err}");
    // The accepted expressions as an alpha file, which `eval --file` reads back: the same
    // valid Rank IC as the KB holds.
    let file = dir.join("mined.toml");
    run(&["export", "--status", "accepted", "-o", file.to_str().expect("utf8")]);
    let defs = alphaloop::seeds::load(&file).expect("an alpha file");
    assert_eq!(defs.len(), 100, "the cap alpha failed and is not accepted");
    assert!(defs.iter().all(|d| d.id != "alpha101_056" && d.source.as_deref().is_some_and(|s| s.starts_with("alphaloop knowledge base: accepted, family seed"))), "{:?}", defs[0]);
    let out = bin().arg("--config").arg(&cfg).args(["eval", "--json", "--file"]).arg(&file).output().expect("runs");
    let evals: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let e1 = evals.as_array().expect("array").iter().find(|e| e["id"] == "alpha101_001").expect("alpha101_001");
    assert!((e1["rank_ic"].as_f64().expect("f64") - show["metrics"]["valid"]["rank_ic"].as_f64().expect("f64")).abs() < 1e-12, "{e1}");
    assert!(run(&["export", "--family", "seed", "--format", "toml"]).starts_with("# 101 alphas exported"));
    // Imported into another store, each alpha keeps the family the file names.
    let other = dir.join("from-toml");
    let out = bin().arg("--config").arg(&cfg).args(["kb", "--kb"]).arg(&other).args(["import", "--family", "mined"]).arg(&file).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = bin().args(["kb", "--json", "--kb"]).arg(&other).arg("stats").output().expect("runs");
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!((st["total"].as_u64(), st["by_family"]["seed"].as_u64()), (Some(100), Some(100)), "{st}");
    let js = dir.join("kb.json");
    run(&["export", "--format", "json", "-o", js.to_str().expect("utf8")]);
    // Another team's export into a fresh store.
    let other = dir.join("other");
    let out = bin().args(["kb", "--kb"]).arg(&other).arg("import").arg(&js).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = bin().args(["kb", "--json", "--kb"]).arg(&other).arg("stats").output().expect("runs");
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(st["total"], 101);
    let rm: serde_json::Value = serde_json::from_str(&run(&["--json", "rm", "alpha101_002"])).expect("json");
    assert_eq!(rm["removed"], "alpha101_002");
    let out = bin().arg("--config").arg(&cfg).args(["kb", "--kb"]).arg(store).args(["show", "alpha101_002"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no record 'alpha101_002'"));
    cfg
}

/// The threshold that turns away a generated idea as a paraphrase: every pair of seed ideas
/// in one family stays below it, and reworded seed ideas land above it.
#[test]
fn idea_similarity_threshold_separates_paraphrases_from_distinct_ideas() {
    use alphaloop::agent::ideas::{load, MAX_IDEA_SIMILARITY};
    let ideas = load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("alpha_kb/ideas.toml")).expect("ideas");
    let texts: Vec<String> = ideas.iter().map(|i| i.hypothesis.clone()).collect();
    let v = embedder().embed(&texts).expect("embeds");
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let mut worst = (0.0f32, 0, 0);
    for i in 0..ideas.len() {
        for j in i + 1..ideas.len() {
            if ideas[i].family == ideas[j].family && dot(&v[i], &v[j]) > worst.0 {
                worst = (dot(&v[i], &v[j]), i, j);
            }
        }
    }
    assert!(worst.0 < MAX_IDEA_SIMILARITY, "seed ideas {} and {} are {:.3} similar", ideas[worst.1].id, ideas[worst.2].id, worst.0);
    // Rewordings in the style a small model produces when asked for "a different" idea.
    let pairs = [
        (0, "Stocks with the highest 20-day returns continue to outperform over the following days because investors under-react to news."),
        (0, "Stocks with the strongest 20-day return keep outperforming in the next days, as investors underreact to news."),
    ];
    for (i, p) in pairs {
        let e = embedder().embed(&[p.to_string()]).expect("embeds");
        let s = dot(&e[0], &v[i]);
        assert!(s > MAX_IDEA_SIMILARITY, "paraphrase of {} only {s:.3} similar", ideas[i].id);
    }
}

/// A store closed and reopened at once opens, even while another thread spawns processes:
/// a child between its fork and its exec holds copies of the parent's descriptors, the
/// store's lock among them (seen once in CI as "in use" by the test's own pid).
#[test]
fn reopening_while_processes_are_spawned_finds_the_store_free() {
    let dir = tempfile::tempdir().expect("tmp");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spawner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::process::Command::new("true").status();
            }
        })
    };
    let result = std::panic::catch_unwind(|| {
        for _ in 0..40 {
            drop(open(dir.path()));
        }
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    spawner.join().expect("spawner");
    assert!(result.is_ok(), "a reopen failed");
}

/// `alpha:ID` names the KB's records wherever formulas are read (`kb import`, `eval`,
/// `train`), as well as the seeds; a record others build on is not deleted by accident,
/// and a model keeps the formulas it was trained on, so it predicts after they are gone.
#[test]
fn alpha_ids_name_the_knowledge_base_s_records() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = dir.path().join("store");
    let cfg = common::sample_config(dir.path(), &shared("data/sp500_sample.parquet"), Some(&store));
    let run = |args: &[&str]| common::kb_cli(&cfg, &store, args);
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).expect("write");
        p.to_str().expect("utf8").to_string()
    };
    run(&["import", "--family", "base", &write("base.txt", "rank(delta(close, 3))\n")]);
    // A KB record, a cycle (the line names itself) and a seed that is not in the KB.
    let uses = write("uses.txt", "alpha:base_001 + rank(volume)\nalpha:uses_002 * 2\n-1 * alpha:alpha101_012\n");
    let stored: Vec<serde_json::Value> = run(&["--json", "import", &uses]).lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
    let status: std::collections::HashMap<&str, &str> = stored.iter().map(|v| (v["stored"].as_str().expect("id"), v["status"].as_str().expect("status"))).collect();
    assert_eq!(status["uses_001"], "accepted", "{stored:?}");
    assert_eq!(status["uses_002"], "error", "{stored:?}");
    assert_eq!(status["uses_003"], "accepted", "{stored:?}");
    let shown: serde_json::Value = serde_json::from_str(&run(&["--json", "show", "uses_002"])).expect("json");
    assert!(shown["status"]["message"].as_str().is_some_and(|m| m.contains("alpha reference cycle: uses_002 -> uses_002")), "{shown}");

    let eval = |expr: &str| bin().arg("--config").arg(&cfg).args(["eval", "--json", expr]).output().expect("runs");
    let (by_id, written) = (eval("alpha:base_001"), eval("rank(delta(close, 3))"));
    assert!(by_id.status.success(), "{}", String::from_utf8_lossy(&by_id.stderr));
    assert_eq!(by_id.stdout, written.stdout, "a record's id evaluates as its formula");
    let typo = eval("alpha:bsae_001 * 2");
    assert!(String::from_utf8_lossy(&typo.stderr).contains("unknown alpha 'bsae_001' at 1; did you mean 'base_001'?"), "{}", String::from_utf8_lossy(&typo.stderr));

    let rm = |force: bool| bin().arg("--config").arg(&cfg).args(["kb", "rm", "base_001"]).args(force.then_some("--force")).output().expect("runs");
    let refused = rm(false);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && err.contains("alpha:base_001 is named in the code of uses_001") && err.contains("--force"), "{err}");
    assert!(run(&["show", "base_001"]).contains("rank(delta(close, 3))"), "a refused rm deletes nothing");

    // An alpha file exported from the KB stands alone: what its alphas name goes with them.
    let exported = dir.path().join("seed.toml");
    run(&["export", "--family", "seed", "--status", "accepted", "-o", exported.to_str().expect("utf8")]);
    let defs = alphaloop::seeds::load(&exported).expect("an alpha file");
    assert_eq!(defs.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["uses_001", "uses_003", "base_001"]);
    let elsewhere = bin().arg("--config").arg(&cfg).args(["eval", "--json", "--kb"]).arg(dir.path().join("none")).arg("--file").arg(&exported).output().expect("runs");
    assert!(elsewhere.status.success(), "{}", String::from_utf8_lossy(&elsewhere.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&elsewhere.stdout).expect("json");
    assert!(rows.as_array().is_some_and(|a| a.len() == 3 && a.iter().all(|r| r["rank_ic"].is_number())), "{rows}");

    let model = dir.path().join("m.json");
    let train = bin().arg("--config").arg(&cfg).args(["train", "--ids", "uses_001,uses_003", "--no-seed-baseline", "--max-rounds", "5", "--out"]).arg(&model).output().expect("runs");
    assert!(train.status.success(), "{}", String::from_utf8_lossy(&train.stderr));
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&model).expect("model")).expect("json");
    assert_eq!(saved["alphas"]["base_001"], "rank(delta(close, 3))", "{}", saved["alphas"]);
    assert!(saved["alphas"]["alpha101_012"].is_string(), "{}", saved["alphas"]);

    assert!(rm(true).status.success());
    let broken = eval("alpha:uses_001");
    assert!(String::from_utf8_lossy(&broken.stderr).contains("unknown alpha 'base_001'"), "{}", String::from_utf8_lossy(&broken.stderr));
    let predicted = bin().arg("--config").arg(&cfg).args(["predict", "--json", "--model"]).arg(&model).output().expect("runs");
    assert!(predicted.status.success(), "the model keeps its formulas: {}", String::from_utf8_lossy(&predicted.stderr));
    let scores: serde_json::Value = serde_json::from_slice(&predicted.stdout).expect("json");
    assert!(scores.as_array().is_some_and(|a| a.len() > 40), "{scores}");
}

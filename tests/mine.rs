//! A real mining run with the local model on the sample data: records with metrics,
//! reviews, lessons and lineage land in the KB; nothing of the test period reaches a prompt
//! or a metric (a sentinel is planted there); a run killed with SIGKILL resumes without
//! redoing finished ideas; and a recorded run replays exactly without the model.

mod common;

use alphaloop::backtest::{MetricsConfig, MiningView};
use alphaloop::kb::{Filter, Kb, Location};
use polars::prelude::*;
use std::io::BufRead;
use std::path::{Path, PathBuf};

const SENTINEL: f64 = 987_654_321.0;

/// The sample with every test-period price replaced by a sentinel.
fn poisoned(dir: &Path) -> PathBuf {
    let src = common::shared("data/sp500_sample.parquet");
    let df = ParquetReader::new(std::fs::File::open(&src).expect("open")).finish().expect("read");
    let dates = df.column("date").expect("date").cast(&DataType::String).expect("str");
    let is_test: Vec<bool> = dates.str().expect("str").iter().map(|d| d.is_some_and(|d| d >= "2018-01-01")).collect();
    let mut df = df;
    for col in ["open", "high", "low", "close", "adj_close"] {
        let c = df.column(col).expect("col").cast(&DataType::Float64).expect("f64");
        let v: Vec<Option<f64>> = c.f64().expect("f64").iter().zip(&is_test).map(|(x, t)| if *t { Some(SENTINEL) } else { x }).collect();
        df.with_column(Column::new(col.into(), v)).expect("replace");
    }
    let out = dir.join("poisoned.parquet");
    ParquetWriter::new(std::fs::File::create(&out).expect("create")).finish(&mut df).expect("write");
    std::fs::copy(common::shared("data/sp500_constituents.csv"), dir.join("sp500_constituents.csv")).expect("groups");
    out
}

fn config(dir: &Path, data: &Path) -> PathBuf {
    let p = common::sample_config(dir, data, Some(&dir.join("kb")));
    // A price for the local model, so cost accounting can be checked.
    let mut text = std::fs::read_to_string(&p).expect("config");
    text.push_str("\n[prices.local]\nprompt = 1.0\ncompletion = 2.0\n");
    std::fs::write(&p, text).expect("config");
    p
}

fn mine(cfg: &Path, runs: &Path, args: &[&str]) -> std::process::Command {
    let mut c = common::bin();
    c.env("ALPHALOOP_RUNS", runs).arg("--config").arg(cfg).arg("mine").args(args);
    c
}

/// Held by every test that runs the local model. llama.cpp's threads (one per core) wait
/// for each other by spinning, so two models decoding at once on the 2-core CI machine
/// slowed each other down a hundredfold (one 400-token reply took 650 s); one at a time
/// they take seconds.
fn one_model_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed while holding it leaves it poisoned; the others still run.
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits until a running miner's log holds `n` finished ideas (fails after `secs`).
fn wait_for_lines(log: &Path, n: usize, secs: u64) {
    let t0 = std::time::Instant::now();
    while std::fs::read_to_string(log).map(|s| s.lines().count()).unwrap_or(0) < n {
        assert!(t0.elapsed().as_secs() < secs, "fewer than {n} ideas finished in {secs} s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn a_real_run_fills_the_kb_never_sees_test_and_resumes_after_kill() {
    let _model = one_model_at_a_time();
    let dir = tempfile::tempdir().expect("tmp");
    let data = poisoned(dir.path());
    let cfg = config(dir.path(), &data);
    let runs = dir.path().join("runs");

    // 1. Two ideas, recorded.
    let out = mine(&cfg, &runs, &["--ideas", "2", "--run-id", "r1", "--generation-size", "2", "--json"]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(summary["ideas"], 2);
    // Cost: tokens at the configured price (USD per million), per idea.
    for line in std::fs::read_to_string(runs.join("r1/log.jsonl")).expect("log").lines() {
        let o: serde_json::Value = serde_json::from_str(line).expect("json");
        let want = (o["prompt_tokens"].as_f64().unwrap() + 2.0 * o["completion_tokens"].as_f64().unwrap()) / 1e6;
        assert!(want > 0.0 && (o["cost_usd"].as_f64().unwrap() - want).abs() < 1e-12, "{o}");
    }
    // A generation summary after the generation of two ideas, in the run dir and the KB.
    let sums = std::fs::read_to_string(runs.join("r1/summaries.jsonl")).expect("summaries");
    assert_eq!(sums.lines().count(), 1);
    let s0: serde_json::Value = serde_json::from_str(sums.lines().next().unwrap()).expect("json");
    assert_eq!(s0["id"], "r1-gen0");
    assert!(s0["text"].as_str().unwrap().len() > "Generation 0 summary: ".len() + 10, "{s0}");
    assert_eq!(s0["sources"].as_array().unwrap().len(), 2);
    // After it, the LLM was asked for a new idea (whether its reply is one, or a paraphrase
    // of a hypothesis the library has, is the reply's: the replay test checks the outcome).
    let replies = std::fs::read_to_string(runs.join("r1/replies.jsonl")).expect("replies");
    assert!(replies.contains("who designs daily stock-selection signals"), "no request for a new idea");
    let t = &summary["time_split"];
    let (w, j, e, k) = (t["writer"].as_f64().unwrap(), t["judge"].as_f64().unwrap(), t["eval"].as_f64().unwrap(), t["kb"].as_f64().unwrap());
    // Each stage was timed (how the time splits is a figure for benches/README.md, not a test).
    assert!([w, j, e, k].iter().all(|x| x.is_finite() && *x >= 0.0) && w > 0.0 && j > 0.0 && e > 0.0, "time split {t}");

    // Every prompt: no sentinel, no calendar date, no ticker.
    assert!(!replies.is_empty());
    let sample = common::sample();
    for line in replies.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("json");
        let prompt = v["request"].to_string();
        assert!(!prompt.contains("987654321"), "the sentinel reached a prompt");
        assert!(!prompt.contains("2018-") && !prompt.contains("2017-") && !prompt.contains("2016-"), "a date reached a prompt");
        for s in &sample.symbols {
            assert!(!prompt.contains(&format!(" {s} ")) && !prompt.contains(&format!("\"{s}\"")), "ticker {s} reached a prompt");
        }
    }

    // KB contents: metrics (train and valid only), reviews, lessons, lineage fields, and the
    // metrics equal a recomputation on the clean data (so the sentinel never reached them).
    let emb = alphaloop::kb::default_embedder(None).expect("model");
    let view = MiningView::new(sample, &common::sample_splits(), MetricsConfig::default()).expect("view");
    {
        let kb = Kb::open(&Location::Dir(dir.path().join("kb")), emb.clone()).expect("kb");
        let recs = kb.records(&Filter::new().is("run_id", "r1")).expect("records");
        assert_eq!(recs.len(), 2);
        assert!(kb.lessons().expect("lessons").iter().any(|l| l.id == "r1-gen0"), "generation summary not in the KB");
        for r in &recs {
            assert!(!r.reviews.is_empty(), "{}: no reviews", r.id);
            assert!(r.model.starts_with("local:"), "model {}", r.model);
            assert!(r.tokens > 0);
            assert!(!r.family.is_empty() && !r.hypothesis.is_empty());
            if r.status.keyword() != "error" {
                assert!(!r.lessons.is_empty() && !r.lessons[0].is_empty(), "{}: no lesson", r.id);
                assert_eq!(r.metrics.keys().cloned().collect::<Vec<_>>(), vec!["train", "valid"]);
                // The look-ahead detector ran on the candidate and its verdict is stored.
                assert!(r.lookahead.as_deref().is_some_and(|l| l.starts_with("no look-ahead")), "{:?}", r.lookahead);
                let sig = alphaloop::expr::eval_expr(&r.code, &view.data, &alphaloop::expr::NoAlphas).expect("eval");
                let m = view.score(&sig);
                assert_eq!(m["valid"].rank_ic.to_bits(), r.metrics["valid"].rank_ic.to_bits(), "{}", r.code);
            }
        }
    }

    // 2. A run with two ideas in flight, killed after its first idea, resumes without
    // redoing it or reusing a record id.
    let mut child = mine(&cfg, &runs, &["--ideas", "3", "--run-id", "r2", "--no-inner-loop", "--concurrency", "2", "--json"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let log = runs.join("r2/log.jsonl");
    wait_for_lines(&log, 1, 600);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    let before: Vec<String> = std::io::BufReader::new(std::fs::File::open(&log).expect("log")).lines().map(|l| l.expect("line")).collect();
    // `--resume` without an id takes the run written to last: r2.
    let out = mine(&cfg, &runs, &["--resume", "--ideas", "1", "--no-inner-loop", "--concurrency", "2", "--json"]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(summary["run_id"], "r2");
    let after: Vec<serde_json::Value> = std::fs::read_to_string(&log).expect("log").lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    assert_eq!(after.len(), before.len() + 1);
    let ideas: std::collections::HashSet<&str> = after.iter().map(|o| o["idea"].as_str().expect("idea")).collect();
    assert_eq!(ideas.len(), after.len(), "an idea was mined twice");
    let ids: std::collections::HashSet<&str> = after.iter().map(|o| o["record_id"].as_str().expect("id")).collect();
    assert_eq!(ids.len(), after.len());

    // 3. `runs` lists both.
    let out = common::bin().env("ALPHALOOP_RUNS", &runs).args(["runs", "--json"]).output().expect("runs");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v.as_array().expect("array").len(), 2);
}

/// Replays `replies` (recorded by `scripts/record-fixtures`) into a fresh KB and run
/// directory under `dir`: returns the run directory.
fn replay(dir: &Path, replies: &Path, args: &[&str]) -> PathBuf {
    let cfg = config(dir, &common::shared("data/sp500_sample.parquet"));
    let runs = dir.join("runs");
    let out = mine(&cfg, &runs, args).arg("--json").arg("--replay").arg(replies).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    runs
}

fn read_jsonl(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).lines().map(|l| serde_json::from_str(l).expect("json")).collect()
}

/// Each outcome of `got` has the recorded one's idea, record, status, code, rounds, metrics
/// and tokens.
fn same_outcomes(got: &[serde_json::Value], want: &[serde_json::Value]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        for k in ["idea", "record_id", "status", "reason", "code", "rounds", "train_rank_ic", "valid_rank_ic", "prompt_tokens", "completion_tokens"] {
            assert_eq!(g[k], w[k], "{k} differs for {}", w["record_id"]);
        }
    }
}

/// The loop logic on recorded real replies (tests/data: a 2-idea generation of the local
/// model on the sample data): a replay calls no model and reproduces every outcome, the
/// generation summary and the new idea the recorded reply proposes, exactly.
#[test]
fn replaying_a_recorded_run_reproduces_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let runs = replay(dir.path(), &fixture.join("mine_replies.jsonl"), &["--ideas", "2", "--run-id", "fixture", "--generation-size", "2"]);
    let want = read_jsonl(&fixture.join("mine_log.jsonl"));
    let got = read_jsonl(&runs.join("fixture/log.jsonl"));
    same_outcomes(&got, &want);
    // The KB holds what the log says, with the judge's reviews.
    let kb = Kb::open(&Location::Dir(dir.path().join("kb")), alphaloop::kb::default_embedder(None).expect("model")).expect("kb");
    for w in &want {
        let r = kb.get(w["record_id"].as_str().expect("id")).expect("get").expect("stored");
        assert_eq!(r.status.keyword(), w["status"].as_str().expect("status"));
        assert_eq!(r.code, w["code"].as_str().expect("code"));
        assert!(r.reviews.len() as u64 >= w["rounds"].as_u64().expect("rounds"));
    }
    // Each outcome in the log says why it was not accepted, as its record does.
    for g in &got {
        let r = kb.get(g["record_id"].as_str().expect("id")).expect("get").expect("stored");
        assert_eq!(g["reason"].as_str().unwrap_or(""), r.status.reason().lines().next().unwrap_or(""), "{g}");
    }
    assert!(got.iter().any(|g| g["status"] != "accepted"), "the fixture's run has an alpha that was not accepted");
    // The refiner took the writer's formulas through their neighbourhoods on train: the
    // variants it scored are counted, and a record says what its formula was refined from.
    assert!(got.iter().all(|g| g["evaluations"].as_u64() > g["rounds"].as_u64().map(|r| r + 20)), "{got:?}");
    let refined: Vec<String> = want
        .iter()
        .filter_map(|w| kb.get(w["record_id"].as_str().expect("id")).expect("get"))
        .flat_map(|r| r.reviews.into_iter().filter(|v| v.reviewer == "refiner").map(|v| v.advice))
        .collect();
    assert!(refined.iter().any(|a| a.starts_with("refined from `") && a.contains("variants on train: train Rank IC")), "{refined:?}");
    // The generation's summary, in the run and the KB, cites both ideas' records.
    let sums = read_jsonl(&runs.join("fixture/summaries.jsonl"));
    assert_eq!(sums.len(), 1);
    assert_eq!(sums[0]["id"], "fixture-gen0");
    assert_eq!(sums[0]["sources"].as_array().map(Vec::len), Some(2));
    assert!(kb.lessons().expect("lessons").iter().any(|l| l.id == "fixture-gen0"), "generation summary not in the KB");
    // The recorded reply proposes a new idea for a family of the library, a hypothesis of
    // a sentence, which the run keeps for its next generation.
    let ideas = read_jsonl(&runs.join("fixture/ideas.jsonl"));
    assert_eq!(ideas, read_jsonl(&fixture.join("mine_ideas.jsonl")));
    assert_eq!(ideas.len(), 1, "the recorded reply proposes one idea");
    let idea = &ideas[0];
    assert_eq!(idea["id"], "fixture-idea0002");
    assert!(idea["hypothesis"].as_str().unwrap_or("").split_whitespace().count() >= 6, "{idea}");
    let families = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("alpha_kb/ideas.toml")).expect("ideas");
    assert!(families.contains(&format!("family = \"{}\"", idea["family"].as_str().unwrap_or("?"))), "{idea}");
}

/// The genetic-programming baseline: no model at all, same records and logs.
#[test]
fn the_gp_writer_needs_no_model() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(dir.path(), &common::shared("data/sp500_sample.parquet"));
    let runs = dir.path().join("runs");
    let out = mine(&cfg, &runs, &["--writer", "gp", "--ideas", "6", "--run-id", "gp", "--json", "--model", "/nonexistent.gguf"])
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["ideas"], 6);
    assert_eq!(v["tokens"], 0);
    let kb = Kb::open(&Location::Dir(dir.path().join("kb")), alphaloop::kb::default_embedder(None).expect("model")).expect("kb");
    let recs = kb.records(&Filter::new().is("run_id", "gp")).expect("records");
    assert_eq!(recs.len(), 6);
    assert!(recs.iter().all(|r| r.model == "gp" && r.reviews.len() == 3));
    // Every candidate scored on valid is counted, on its record and in the run's summary.
    let tried: usize = recs.iter().map(|r| r.attempts).sum();
    assert!(recs.iter().all(|r| r.attempts <= 3) && tried > 6, "{:?}", recs.iter().map(|r| r.attempts).collect::<Vec<_>>());
    assert_eq!(v["attempts"].as_u64(), Some(tried as u64));
    assert_eq!(kb.attempts().expect("attempts"), tried);
    // Each round scored a batch of offspring on train (64 by default) and sent its best on.
    let evaluated = v["evaluations"].as_u64().expect("counted");
    assert!(evaluated > 18 * 10 && evaluated <= 18 * 65, "{evaluated}");
    assert!(v["evaluations_per_second"].as_f64().is_some_and(|e| e > 0.0));
    let png = dir.path().join("gp.png");
    let out = common::bin().env("ALPHALOOP_RUNS", &runs).args(["runs", "show", "gp", "--plot"]).arg(&png).output().expect("runs show");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("6 ideas") && text.contains(&format!("{evaluated} candidates evaluated")) && text.contains("the run log is") && !text.contains("knowledge base -"), "{text}");
    let bytes = std::fs::read(&png).expect("plot written");
    assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 5_000, "{} bytes", bytes.len());
}

/// What a run's figures stand on, and how its combination grew: from a KB of seeds, the
/// summary gives the combination's valid Rank IC at the start and after each generation,
/// the data, splits and periods seen, and the t a valid result must clear for the
/// candidates tried; `runs show` prints them.
#[test]
fn a_run_states_its_protocol_and_how_its_combination_grew() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(dir.path(), &common::shared("data/sp500_sample.parquet"));
    let runs = dir.path().join("runs");
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("alpha_kb/seeds/alpha101.toml");
    let out = common::bin().arg("--config").arg(&cfg).args(["kb", "import"]).arg(&seeds).output().expect("import");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = mine(&cfg, &runs, &["--writer", "gp", "--ideas", "4", "--generation-size", "2", "--run-id", "p", "--json"]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let c = &v["combination"];
    let start = c["start"].as_f64().expect("the seeds' combination at the start");
    assert!(start.is_finite() && c["now"].as_f64().is_some(), "{c}");
    let gens = c["by_generation"].as_array().expect("steps");
    assert_eq!(gens.iter().map(|g| (g["at"].as_u64(), g["ideas"].as_u64())).collect::<Vec<_>>(), [(Some(0), Some(2)), (Some(1), Some(4))], "{c}");
    assert_eq!(c["by_hour"][0]["ideas"], 4);
    let p = &v["protocol"];
    assert_eq!(p["periods_seen"], serde_json::json!(["train", "valid"]));
    assert_eq!((p["splits"]["test"][0].as_str(), p["horizon"].as_u64(), p["cost_bps"].as_f64()), (Some("2018-01-01"), Some(1), Some(5.0)), "{p}");
    assert!(p["data"].as_str().is_some_and(|d| d.ends_with("sp500_sample.parquet")) && p["fingerprint"].as_str().is_some_and(|f| !f.is_empty()), "{p}");
    let m = &v["multiple_testing"];
    assert_eq!(m["candidates_on_valid"], v["attempts"]);
    assert!(m["bonferroni_t_5pct"].as_f64().is_some_and(|t| t > 2.0), "{m}");
    let out = common::bin().env("ALPHALOOP_RUNS", &runs).args(["runs", "show", "p"]).output().expect("runs show");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("protocol: ") && text.contains("(test 2018-01-01–2018-12-31 never loaded)") && text.contains("the accepted set's combination: valid Rank IC"), "{text}");
    assert!(text.contains("by generation"), "{text}");
}

/// The outer loop's actions with the real local model: with one family in the library and
/// a KB of seeds, the bandit tries the family, then *refine an elite*, then *combine two*
/// (each untried arm once it can run); the combined child keeps both parents in its
/// lineage; and a run stopped after two ideas and resumed chooses as the uninterrupted
/// one (the bandit's state comes back from the log), with the combination's score in its
/// summary.
#[test]
fn actions_are_chosen_and_a_resumed_run_chooses_as_an_uninterrupted_one() {
    let _model = one_model_at_a_time();
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("alpha_kb/seeds/alpha101.toml");
    let setup = |dir: &Path| {
        let cfg = config(dir, &common::shared("data/sp500_sample.parquet"));
        let text = std::fs::read_to_string(&cfg).expect("config");
        std::fs::write(&cfg, format!("{text}\n[mine]\nrefine_budget = 0\n")).expect("config");
        let out = common::bin().arg("--config").arg(&cfg).args(["kb", "import"]).arg(&seeds).output().expect("import");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let ideas = dir.join("ideas.toml");
        std::fs::write(&ideas, "[[idea]]\nid = \"m1\"\nfamily = \"momentum\"\nhypothesis = \"Stocks with the highest 20-day return keep outperforming over the next days.\"\n").expect("ideas");
        (cfg, ideas)
    };
    let families = |v: &serde_json::Value| v["outcomes"].as_array().expect("outcomes").iter().map(|o| o["family"].as_str().unwrap_or("").to_string()).collect::<Vec<_>>();
    let run = |cfg: &Path, runs: &Path, ideas: &Path, args: &[&str]| -> serde_json::Value {
        let mut all = vec!["--no-inner-loop", "--json", "--idea-file", ideas.to_str().expect("utf-8")];
        all.extend_from_slice(args);
        let out = mine(cfg, runs, &all).output().expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("json")
    };

    let one = tempfile::tempdir().expect("tmp");
    let (cfg, ideas) = setup(one.path());
    let whole = run(&cfg, &one.path().join("runs"), &ideas, &["--ideas", "3", "--run-id", "u"]);
    assert_eq!(families(&whole), ["momentum", "refine", "combine"]);
    assert!(whole["combination"]["now"].as_f64().is_some_and(f64::is_finite), "{}", whole["combination"]);
    let kb = Kb::open(&Location::Dir(one.path().join("kb")), alphaloop::kb::default_embedder(None).expect("model")).expect("kb");
    let child = &whole["outcomes"][2]["record_id"];
    let rec = kb.get(child.as_str().expect("id")).expect("get").expect("stored");
    // The idea's two alphas come first in the lineage: two different accepted records.
    assert!(rec.parents.len() >= 2 && rec.parents[0] != rec.parents[1], "{:?}", rec.parents);
    for p in &rec.parents[..2] {
        assert_eq!(kb.get(p).expect("get").expect("a parent is stored").status, alphaloop::kb::Status::Accepted);
    }
    drop(kb);

    let two = tempfile::tempdir().expect("tmp");
    let (cfg, ideas) = setup(two.path());
    let runs = two.path().join("runs");
    let first = run(&cfg, &runs, &ideas, &["--ideas", "2", "--run-id", "k"]);
    assert_eq!(families(&first), ["momentum", "refine"]);
    let resumed = run(&cfg, &runs, &ideas, &["--resume", "k", "--ideas", "1"]);
    assert_eq!(families(&resumed), families(&whole), "the resumed bandit knows what was tried");
}

/// Ctrl-C: the run stops taking ideas, finishes the one in flight, and ends normally with
/// its summary ("interrupted"); every idea in the log is in the KB, and it can be resumed.
#[test]
fn ctrl_c_stops_cleanly_with_a_summary() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(dir.path(), &common::shared("data/sp500_sample.parquet"));
    let runs = dir.path().join("runs");
    let child = mine(&cfg, &runs, &["--writer", "gp", "--ideas", "100000", "--run-id", "int", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    let log = runs.join("int/log.jsonl");
    wait_for_lines(&log, 2, 300);
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().expect("ends");
    assert!(out.status.success(), "{:?}", out.status);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("summary json");
    assert_eq!(v["stopped"], "interrupted (Ctrl-C)");
    let n = std::fs::read_to_string(&log).expect("log").lines().count();
    assert_eq!(v["ideas"].as_u64(), Some(n as u64));
    let kb = Kb::open(&Location::Dir(dir.path().join("kb")), alphaloop::kb::default_embedder(None).expect("model")).expect("kb");
    assert_eq!(kb.records(&Filter::new().is("run_id", "int")).expect("records").len(), n);
}

/// `--writer python`: the local model writes factor classes, which run in the sandbox; the
/// record is kind python, and its outcome is the one its recorded replies determine: a
/// replay of the run's own recording into a fresh KB gives the same record.
#[test]
fn the_python_writer_runs_factor_classes_in_the_sandbox() {
    let _model = one_model_at_a_time();
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(dir.path(), &common::shared("data/sp500_sample.parquet"));
    let runs = dir.path().join("runs");
    let out = mine(&cfg, &runs, &["--ideas", "1", "--run-id", "py", "--writer", "python", "--json"]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let emb = alphaloop::kb::default_embedder(None).expect("model");
    let recs = Kb::open(&Location::Dir(dir.path().join("kb")), emb.clone()).expect("kb").records(&Filter::new().is("run_id", "py")).expect("records");
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    assert_eq!(r.kind, alphaloop::kb::Kind::Python);
    assert!(!r.reviews.is_empty());
    let replies = runs.join("py/replies.jsonl");
    assert!(std::fs::read_to_string(&replies).expect("replies").contains("Factor"), "the writer was asked for a factor class");
    let again = tempfile::tempdir().expect("tmp");
    let replayed = replay(again.path(), &replies, &["--ideas", "1", "--run-id", "py", "--writer", "python"]);
    same_outcomes(&read_jsonl(&replayed.join("py/log.jsonl")), &read_jsonl(&runs.join("py/log.jsonl")));
    let twin = Kb::open(&Location::Dir(again.path().join("kb")), emb).expect("kb").get(&r.id).expect("get").expect("stored");
    assert_eq!((&twin.status, &twin.code, &twin.metrics, &twin.lookahead), (&r.status, &r.code, &r.metrics, &r.lookahead));
}

/// The Python writer on recorded replies (tests/data: one idea of the local model): the
/// sandbox runs the factor classes it wrote, and the outcome is the recorded one.
#[test]
fn a_recorded_python_run_replays_through_the_sandbox() {
    let dir = tempfile::tempdir().expect("tmp");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let runs = replay(dir.path(), &fixture.join("python_replies.jsonl"), &["--ideas", "1", "--run-id", "py", "--writer", "python"]);
    let want = read_jsonl(&fixture.join("python_log.jsonl"));
    same_outcomes(&read_jsonl(&runs.join("py/log.jsonl")), &want);
    let kb = Kb::open(&Location::Dir(dir.path().join("kb")), alphaloop::kb::default_embedder(None).expect("model")).expect("kb");
    let r = kb.get("py-0000").expect("get").expect("stored");
    assert_eq!(r.kind, alphaloop::kb::Kind::Python);
    // The recorded replies: classes the sandbox refused (their verdict was the writer's
    // next advice), then one that ran, was backtested on train and valid, passed the
    // look-ahead check and fell below the train bar.
    assert!(r.reviews.iter().any(|v| v.reviewer == "rules" && v.advice.contains("Strategy")), "{:?}", r.reviews);
    assert_eq!(r.metrics.keys().cloned().collect::<Vec<_>>(), vec!["train", "valid"]);
    assert!(r.lookahead.as_deref().is_some_and(|l| l.starts_with("no look-ahead")), "{:?}", r.lookahead);
    assert_eq!(r.status.keyword(), "rejected");
    assert!(r.status.reason().starts_with("train Rank IC 0.0009 is below 0.002"), "{}", r.status.reason());
}

/// Under the gain rule every accepted alpha records what it added when it was judged and
/// its current leave-one-out contribution, kept current as later ones join the set;
/// `kb top --by contribution` ranks by it. (The bars are lowered and only exact copies are
/// refused, so that the sample's few genetic candidates get in: the rule itself is tested
/// on its own in tests/accept.rs.)
#[test]
fn accepted_alphas_keep_their_gain_and_a_current_contribution() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(dir.path(), &common::shared("data/sp500_sample.parquet"));
    let base = std::fs::read_to_string(&cfg).expect("config");
    std::fs::write(&cfg, format!("{base}\n[mine]\nmin_gain_t = -100\nmin_train_rank_ic = -1\nmin_valid_rank_ic = -1\nmax_corr = 1\n")).expect("config");
    let runs = dir.path().join("runs");
    let out = mine(&cfg, &runs, &["--writer", "gp", "--ideas", "12", "--run-id", "g", "--json"]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let kb = Kb::open(&Location::Dir(dir.path().join("kb")), alphaloop::kb::default_embedder(None).expect("model")).expect("kb");
    let mut accepted = kb.records(&Filter::new().is("status", "accepted")).expect("records");
    accepted.sort_by(|a, b| a.id.cmp(&b.id));
    let all: Vec<String> = kb.records(&Filter::new()).expect("records").iter().map(|r| format!("{} {} {}", r.id, r.status, r.code)).collect();
    assert!(accepted.len() >= 3, "{} accepted: {all:#?}", accepted.len());
    for (k, r) in accepted.iter().enumerate() {
        let g = r.gain.as_ref().expect("the gain it was judged by");
        assert_eq!(g.set_size, k, "{}: judged against the alphas accepted before it", r.id);
        let c = r.contribution.as_ref().expect("a contribution");
        assert_eq!(c.set_size, accepted.len() - 1, "{}: kept current as the set grew", r.id);
        assert!(c.mean.is_finite() && c.t.is_finite(), "{c:?}");
    }
    // The last one's contribution is its gain: the set it was judged against is the rest.
    let last = accepted.last().expect("one");
    assert_eq!(last.contribution.as_ref().map(|c| c.mean.to_bits()), last.gain.as_ref().map(|g| g.mean.to_bits()));
    drop(kb);
    let top = common::kb_cli(&cfg, &dir.path().join("kb"), &["--json", "top", "--by", "contribution", "--split", "valid", "-n", "2"]);
    let top: serde_json::Value = serde_json::from_str(&top).expect("json");
    let means: Vec<f64> = top.as_array().expect("array").iter().map(|r| r["contribution"]["mean"].as_f64().expect("a mean")).collect();
    assert!(means.len() == 2 && means[0] >= means[1], "{means:?}");
}

/// `--resume` continues a run as it was started (its run.json): to the ideas it was given,
/// with its writer; a setting given otherwise is refused, not mixed into the run.
#[test]
fn a_resumed_run_keeps_its_settings_and_its_target() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(dir.path(), &common::shared("data/sp500_sample.parquet"));
    let runs = dir.path().join("runs");
    let summary = |args: &[&str]| -> serde_json::Value {
        let out = mine(&cfg, &runs, args).output().expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("json summary")
    };
    let first = summary(&["--writer", "gp", "--ideas", "4", "--run-id", "g", "--json"]);
    assert_eq!(first["ideas"], 4);
    let plan: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(runs.join("g/run.json")).expect("run.json")).expect("json");
    assert_eq!((plan["writer"].as_str(), plan["ideas"].as_u64()), (Some("gp"), Some(4)));
    // As if it had crashed after its first idea.
    let log = runs.join("g/log.jsonl");
    let kept = std::fs::read_to_string(&log).expect("log").lines().next().expect("a line").to_string();
    std::fs::write(&log, format!("{kept}\n")).expect("log");
    let resumed = summary(&["--resume", "g", "--json"]);
    assert_eq!((resumed["ideas"].as_u64(), resumed["new_ideas"].as_u64()), (Some(4), Some(3)), "{resumed}");
    let out = mine(&cfg, &runs, &["--resume", "g", "--writer", "llm"]).output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("run 'g' was mined with --writer gp --llm local; resume it with those settings"), "{err}");
}

/// A run keeps the local model it started with: one recorded before the model was kept
/// mined with the 0.5B (the only local model then), and resuming it on another is refused
/// before anything is loaded.
#[test]
fn a_resumed_run_keeps_its_local_model() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(dir.path(), &common::shared("data/sp500_sample.parquet"));
    let runs = dir.path().join("runs");
    std::fs::create_dir_all(runs.join("old")).expect("mkdir");
    let plan = serde_json::json!({ "ideas": 2, "hours": null, "writer": "llm", "llm": "local", "no_inner_loop": false, "no_kb": false });
    std::fs::write(runs.join("old/run.json"), plan.to_string()).expect("plan");
    std::fs::write(runs.join("old/log.jsonl"), "").expect("log");
    let out = mine(&cfg, &runs, &["--resume", "old", "--model", "medium"]).output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("was mined with --writer llm --llm local --model ") && err.contains("qwen2.5-coder-0.5b-instruct.gguf;"), "{err}");
    assert!(err.contains("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"), "{err}");
}

/// A run that fails before it starts (a mistyped path, a model that will not open) leaves
/// no empty run directory behind for `alphaloop runs` to list; a resumed run keeps its own.
#[test]
fn a_run_that_cannot_start_leaves_no_run_behind() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(dir.path(), &common::shared("data/sp500_sample.parquet"));
    let runs = dir.path().join("runs");
    let out = mine(&cfg, &runs, &["--ideas", "1", "--run-id", "ideas", "--idea-file", "/nonexistent/ideas.toml"]).output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("idea file /nonexistent/ideas.toml: "), "{err}");
    let out = mine(&cfg, &runs, &["--ideas", "1", "--run-id", "model", "--model", "/nonexistent.gguf"]).output().expect("runs");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("/nonexistent.gguf"));
    assert!(!runs.join("ideas").exists() && !runs.join("model").exists());
    std::fs::create_dir_all(runs.join("old")).expect("mkdir");
    std::fs::write(runs.join("old/log.jsonl"), "").expect("log");
    let out = mine(&cfg, &runs, &["--resume", "old", "--model", "/nonexistent.gguf"]).output().expect("runs");
    assert!(!out.status.success());
    assert!(runs.join("old/log.jsonl").exists(), "a resumed run's directory is never removed");
}

/// `writer_fields`: data columns beyond the standard ones reach the expression writer's
/// prompt and grammar; a name that is not a field stops the run before any model call.
#[test]
fn writer_fields_reach_the_writer_and_unknown_ones_are_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(dir.path(), &common::shared("data/sp500_sample.parquet"));
    let runs = dir.path().join("runs");
    let mut text = std::fs::read_to_string(&cfg).expect("config");
    std::fs::write(&cfg, format!("writer_fields = [\"dividned\"]\n{text}")).expect("config");
    let out = mine(&cfg, &runs, &["--ideas", "1", "--run-id", "bad", "--model", "/nonexistent.gguf"]).output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("writer_fields in the config: 'dividned' is not a field of") && err.contains("dividend, high"), "{err}");

    text = format!("writer_fields = [\"dividend\"]\n{text}");
    std::fs::write(&cfg, text).expect("config");
    let _model = one_model_at_a_time();
    let out = mine(&cfg, &runs, &["--ideas", "1", "--no-inner-loop", "--run-id", "wf", "--json"]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let first = std::fs::read_to_string(runs.join("wf/replies.jsonl")).expect("recorded replies");
    let writer: serde_json::Value = first
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json line"))
        .find(|v| v["request"]["system"].as_str().is_some_and(|s| s.contains("writes formulaic stock alphas")))
        .expect("a writer request");
    let system = writer["request"]["system"].as_str().expect("system");
    assert!(system.contains("Fields: open, high, low, close, volume, returns, vwap, adv5, adv10, adv20, adv60, adv120, dividend."), "{system}");
    assert!(system.contains("vwap is the typical price"), "{system}");
    assert!(writer["request"]["grammar"].as_str().expect("grammar").contains("| \"dividend\""));
}

/// `[mine]` in the config sets the bar and the effort per idea: a run mines with them (no
/// train bar and a valid Rank IC bar of 1 reject every idea for its valid Rank IC; two
/// rounds per idea), records them in run.json and in `runs show --json` (`runs` lists its
/// writer and model), and a resume under a config that has changed them is refused,
/// naming the setting; a value out of range, or a misspelt name, stops before anything
/// runs, naming the file and the setting.
#[test]
fn mine_settings_in_the_config_set_the_bar_and_stay_with_the_run() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(dir.path(), &common::shared("data/sp500_sample.parquet"));
    let runs = dir.path().join("runs");
    let base = std::fs::read_to_string(&cfg).expect("config");
    let with = |mine: &str| std::fs::write(&cfg, format!("{base}\n[mine]\n{mine}\n")).expect("config");
    with("min_train_rank_ic = -1\nmin_valid_rank_ic = 1\nrounds = 2");
    let out = mine(&cfg, &runs, &["--writer", "gp", "--ideas", "3", "--run-id", "bar", "--json"]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json summary");
    let outcomes = s["outcomes"].as_array().expect("outcomes");
    assert_eq!(outcomes.len(), 3);
    assert!(outcomes.iter().all(|o| o["status"] == "rejected" && o["rounds"] == 2), "{s}");
    let kb = Kb::open(&Location::Dir(dir.path().join("kb")), alphaloop::kb::default_embedder(None).expect("model")).expect("kb");
    let recs = kb.records(&Filter::new().is("run_id", "bar")).expect("records");
    drop(kb);
    let reasons: Vec<String> = recs.iter().map(|r| r.status.to_string()).collect();
    assert!(reasons.len() == 3 && reasons.iter().all(|r| r.starts_with("rejected: valid Rank IC") && r.ends_with("is below 1")), "{reasons:?}");
    let plan: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(runs.join("bar/run.json")).expect("run.json")).expect("json");
    assert_eq!((plan["mine"]["min_valid_rank_ic"].as_f64(), plan["mine"]["rounds"].as_u64(), plan["mine"]["max_corr"].as_f64()), (Some(1.0), Some(2), Some(0.7)));
    let out = common::bin().env("ALPHALOOP_RUNS", &runs).args(["runs", "show", "bar", "--json"]).output().expect("runs show");
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(shown["plan"]["mine"], plan["mine"]);
    // Without an id: the run written to last, here the only one.
    let out = common::bin().env("ALPHALOOP_RUNS", &runs).args(["runs", "show", "--json"]).output().expect("runs show");
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json"), shown);
    let none = dir.path().join("no-runs");
    let out = common::bin().env("ALPHALOOP_RUNS", &none).args(["runs", "show"]).output().expect("runs show");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no runs in ") && err.contains("yet: `alphaloop mine` starts one"), "{err}");
    // The list says which arm each run is.
    let out = common::bin().env("ALPHALOOP_RUNS", &runs).args(["runs", "--json"]).output().expect("runs");
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(list[0]["settings"], "--writer gp --llm local", "{list}");

    with("min_train_rank_ic = -1\nmin_valid_rank_ic = 0.01\nrounds = 2");
    let out = mine(&cfg, &runs, &["--resume", "bar", "--ideas", "1"]).output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("run 'bar' was mined with [mine] min_valid_rank_ic = 1.0 (the config now gives 0.01)"), "{err}");

    for (mine_toml, says) in [
        ("rounds = 0", "[mine] rounds = 0; give 1 or more"),
        ("max_corr = 1.5", "[mine] max_corr = 1.5; give a share above 0 and at most 1"),
        ("judge_threshold = 11", "[mine] judge_threshold = 11; give a judge score from 0 to 10"),
        ("min_valid_rank_ic = nan", "[mine] min_valid_rank_ic = NaN; give a Rank IC from -1 to 1"),
        ("max_cor = 0.5", "unknown field `max_cor`, expected one of"),
    ] {
        with(mine_toml);
        let out = mine(&cfg, &runs, &["--writer", "gp", "--ideas", "1", "--run-id", "never"]).output().expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(&format!("{}: invalid config", cfg.display())) && err.contains(says), "{mine_toml}: {err}");
        assert!(!runs.join("never").exists());
    }
}

/// An OpenAI-compatible endpoint with scripted replies, for tests of the loop's own logic
/// (the real models are exercised above and in tests/llm.rs): the writer always writes
/// `-rank(delta(close, 3))` (train Rank IC 0.0011 on the sample, below the bar of 0.002),
/// so each idea after the first repeats it, and the judge always scores it 9.
fn scripted_endpoint() -> String {
    scripted_endpoint_writing("-rank(delta(close, 3))")
}

/// [`scripted_endpoint`] with the writer's one reply given.
fn scripted_endpoint_writing(writer: &'static str) -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/v1", l.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(conn) = conn else { continue };
            let mut r = std::io::BufReader::new(conn.try_clone().expect("clone"));
            let mut len = 0;
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).expect("header") == 0 || h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().expect("length");
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).expect("body");
            let req: serde_json::Value = serde_json::from_slice(&body).expect("json");
            let system = req["messages"][0]["content"].as_str().unwrap_or("");
            let text = if system.starts_with("You review") {
                "SCORE: 9\nADVICE: use a longer window"
            } else if system.starts_with("You are a concise") {
                "Short reversals repeat what the seeds already hold."
            } else {
                writer
            };
            let reply = serde_json::json!({"choices": [{"message": {"role": "assistant", "content": text}}], "usage": {"prompt_tokens": 10, "completion_tokens": 5}}).to_string();
            let mut w = conn;
            let _ = write!(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}", reply.len());
        }
    });
    url
}

/// The same KB, data, settings and replies give the same run whatever the run is called:
/// the default run id is the clock, and prompts that quoted an earlier attempt by its id
/// made every later reply (and so every later alpha) differ from run to run. A run is
/// recorded against scripted replies, then replayed under another id into a fresh KB; the
/// replay calls no model, so it succeeds only if every prompt is the same. Also: a judge's
/// high score ends the rounds only for a candidate that clears the train bar, and a writer
/// that copies a known alpha is asked again before the copy is evaluated.
#[test]
fn a_run_does_not_depend_on_its_id_and_a_high_score_below_the_bar_goes_on() {
    let url = scripted_endpoint();
    let (a, b) = (tempfile::tempdir().expect("tmp"), tempfile::tempdir().expect("tmp"));
    let data = common::shared("data/sp500_sample.parquet");
    let (cfg_a, cfg_b) = (config(a.path(), &data), config(b.path(), &data));
    // The writer's copies go to the judge as written (the refiner would walk them away
    // from the path under test).
    for c in [&cfg_a, &cfg_b] {
        let base = std::fs::read_to_string(c).expect("config");
        std::fs::write(c, format!("{base}\n[mine]\nrefine_budget = 0\n")).expect("config");
    }
    let runs = a.path().join("runs");
    let out = mine(&cfg_a, &runs, &["--llm", "openai:scripted", "--ideas", "3", "--run-id", "first", "--json"]).env("OPENAI_BASE_URL", &url).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let recorded = std::fs::read_to_string(runs.join("first/replies.jsonl")).expect("replies");
    // The path under test was taken: a prompt quoted an earlier attempt of the run.
    assert!(recorded.contains("earlier attempt #0000"), "no prompt quoted an earlier attempt");
    assert!(!recorded.contains("first-0"), "a prompt holds the run id");
    // A copy of a known alpha (here every reply after the first) is asked again twice
    // before it is evaluated: 1 + 2 × 3 writer calls for the first idea's three rounds, 3 × 3
    // for each later one (the first idea's record is among the failures shown), and one
    // review per round all the same.
    let systems: Vec<String> = recorded.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json")["request"]["system"].as_str().expect("system").to_string()).collect();
    assert_eq!(systems.iter().filter(|s| s.starts_with("You are a quantitative researcher who writes")).count(), 1 + 2 * 3 + 2 * 9);
    assert_eq!(systems.iter().filter(|s| s.starts_with("You review")).count(), 9);
    let out = mine(&cfg_b, &runs, &["--ideas", "3", "--run-id", "second", "--json", "--replay"]).arg(runs.join("first/replies.jsonl")).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let read = |p: PathBuf| -> Vec<serde_json::Value> { std::fs::read_to_string(p).expect("log").lines().map(|l| serde_json::from_str(l).expect("json")).collect() };
    let (first, second) = (read(runs.join("first/log.jsonl")), read(runs.join("second/log.jsonl")));
    assert_eq!(first.len(), 3);
    assert_eq!(second.len(), 3);
    for o in &first {
        assert!(o["train_rank_ic"].as_f64().is_some_and(|r| r < 0.002), "{o}");
        assert_eq!(o["status"], "rejected");
        assert_eq!(o["rounds"], 3, "a judge's 9 ended the rounds on a candidate below the bar: {o}");
    }
    for (f, s) in first.iter().zip(&second) {
        for k in ["idea", "status", "code", "rounds", "train_rank_ic", "valid_rank_ic", "prompt_tokens", "completion_tokens"] {
            assert_eq!(f[k], s[k], "{k} differs for {}", f["record_id"]);
        }
    }
}

/// One idea mined as `run_id` with the scripted endpoint at `url`: the idea's outcome, the
/// run having succeeded.
fn scripted_idea(cfg: &Path, runs: &Path, url: &str, run_id: &str) -> serde_json::Value {
    let out = mine(cfg, runs, &["--llm", "openai:scripted", "--ideas", "1", "--run-id", run_id, "--json"]).env("OPENAI_BASE_URL", url).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json summary");
    s["outcomes"][0].clone()
}

/// A term that reads no data (`scale(19.9)`: one number for every stock and date, which
/// small models append to a formula) fails the rule checks with its place, before any
/// backtest, and the writer's next prompt says so.
#[test]
fn a_term_that_reads_no_data_fails_the_rule_checks() {
    let url = scripted_endpoint_writing("rank(close / delay(close, 5)) - scale(19.9)");
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(dir.path(), &common::shared("data/sp500_sample.parquet"));
    let runs = dir.path().join("runs");
    let o = &scripted_idea(&cfg, &runs, &url, "dead");
    assert_eq!(o["status"], "error", "{o}");
    let want = "`scale(19.9)` at 33 reads no data";
    assert!(o["reason"].as_str().is_some_and(|r| r.starts_with(want)), "{o}");
    assert!(o["train_rank_ic"].is_null(), "not backtested: {o}");
    let replies = std::fs::read_to_string(runs.join("dead/replies.jsonl")).expect("replies");
    assert!(replies.lines().skip(1).any(|l| l.contains("You are a quantitative researcher who writes") && l.contains(want)), "the writer is told");
}

/// A candidate that mixes units (`returns - adv20`: a return less a dollar volume) fails
/// the rule checks before any backtest or review, and the writer's next prompt says what
/// was mixed and where; with `check_units = false` the same reply is backtested and
/// reviewed like any other.
#[test]
fn a_candidate_that_mixes_units_fails_the_rule_checks_unless_turned_off() {
    let url = scripted_endpoint_writing("rank(returns - adv20)");
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(dir.path(), &common::shared("data/sp500_sample.parquet"));
    let runs = dir.path().join("runs");
    let o = &scripted_idea(&cfg, &runs, &url, "units");
    assert_eq!(o["status"], "error", "{o}");
    assert!(o["reason"].as_str().is_some_and(|r| r.starts_with("units: subtracts a dollar amount from a pure number at 6 (`returns - adv20`); scale one side first")), "{o}");
    assert!(o["train_rank_ic"].is_null(), "a candidate that fails the rules is not backtested: {o}");
    let replies = std::fs::read_to_string(runs.join("units/replies.jsonl")).expect("replies");
    let requests: Vec<serde_json::Value> = replies.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json")["request"].clone()).collect();
    assert!(!requests.iter().any(|r| r["system"].as_str().is_some_and(|s| s.starts_with("You review"))), "no review of a candidate that failed the rules");
    let writer: Vec<&serde_json::Value> = requests.iter().filter(|r| r["system"].as_str().is_some_and(|s| s.starts_with("You are a quantitative researcher who writes"))).collect();
    assert!(writer[0]["system"].as_str().is_some_and(|s| s.contains("Add, subtract and compare only like quantities")), "the writer is told the rule");
    assert!(writer.iter().any(|r| r.to_string().contains("units: subtracts a dollar amount from a pure number at 6 (`returns - adv20`)")), "the advice reaches the writer");
    let plan: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(runs.join("units/run.json")).expect("run.json")).expect("json");
    assert_eq!(plan["mine"]["check_units"], true);
    // A run recorded before the check existed mined without it: resuming it under the
    // check would move its bar midway.
    let mut old = plan.clone();
    old["mine"].as_object_mut().expect("settings").remove("check_units");
    std::fs::write(runs.join("units/run.json"), old.to_string()).expect("run.json");
    let out = mine(&cfg, &runs, &["--llm", "openai:scripted", "--resume", "units", "--ideas", "2"]).env("OPENAI_BASE_URL", &url).output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("check_units = false (the config now gives true)"), "{err}");

    let base = std::fs::read_to_string(&cfg).expect("config");
    std::fs::write(&cfg, format!("{base}\n[mine]\ncheck_units = false\n")).expect("config");
    let o = &scripted_idea(&cfg, &runs, &url, "off");
    assert!(o["status"] != "error" && o["train_rank_ic"].as_f64().is_some(), "backtested when the check is off: {o}");
    let replies = std::fs::read_to_string(runs.join("off/replies.jsonl")).expect("replies");
    assert!(!replies.contains("Add, subtract and compare only like quantities"), "the rule is not in the prompt when off");
    assert!(replies.contains("You review"), "reviewed when the check is off");
}

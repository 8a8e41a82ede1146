//! `alphaloop study` end to end on the sample: two arms (the GP writer and the random null
//! model, which need no LLM) × two seeds from a KB of three published alphas; the summary
//! recomputed from the runs' logs, a replay that reproduces it, a study killed midway that
//! continues where it stopped, and study files that are refused with their reason.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};

const ALPHAS: &str = r#"
[[alpha]]
id = "alpha101_012"
formula = "sign(delta(volume, 1)) * (-1 * delta(close, 1))"

[[alpha]]
id = "alpha101_033"
formula = "rank(-1 * ((1 - (open / close))^1))"

[[alpha]]
id = "alpha101_101"
formula = "(close - open) / ((high - low) + .001)"
"#;

fn study_file(dir: &Path, body: &str) -> PathBuf {
    std::fs::write(dir.join("start.toml"), ALPHAS).expect("alphas");
    let p = dir.join("s.toml");
    std::fs::write(&p, format!("start = {:?}\n{body}", dir.join("start.toml"))).expect("study");
    p
}

const TWO_BY_TWO: &str = r#"
seeds = [0, 1]

[budget]
ideas = 2

[[arm]]
name = "gp"
args = ["--writer", "gp"]

[[arm]]
name = "random"
args = ["--writer", "random"]
"#;

fn study(cfg: &Path, file: &Path, dir: &Path, extra: &[&str]) -> std::process::Output {
    common::bin().arg("--config").arg(cfg).arg("study").arg(file).arg("--dir").arg(dir).arg("--json").args(extra).output().expect("runs")
}

fn ok(out: &std::process::Output) -> Value {
    assert!(out.status.success(), "study failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json summary")
}

fn log(dir: &Path, id: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join("runs").join(id).join("log.jsonl")).expect("log");
    text.lines().map(|l| serde_json::from_str(l).expect("log line")).collect()
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Every run's figures but its time, which no two runs share.
fn without_time(summary: &Value) -> Vec<Value> {
    summary["arms"]
        .as_array()
        .expect("arms")
        .iter()
        .flat_map(|a| a["runs"].as_array().expect("runs").clone())
        .map(|mut r| {
            r.as_object_mut().expect("run").remove("hours");
            r
        })
        .collect()
}

#[test]
fn a_two_arm_two_seed_study_summarises_its_runs_and_replays() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cfg = common::sample_config(tmp.path(), &common::shared("data/sp500_sample.parquet"), None);
    let file = study_file(tmp.path(), TWO_BY_TWO);
    let dir = tmp.path().join("study");
    // The leaderboard's judge is the real local model (the small one), 2 pairs × 2 orders.
    let s = ok(&study(&cfg, &file, &dir, &["--curve", "--leaderboard", "--pairs", "2"]));
    let arms = s["arms"].as_array().expect("arms");
    assert_eq!(arms.iter().map(|a| a["name"].as_str().unwrap_or("")).collect::<Vec<_>>(), ["gp", "random"]);
    for arm in arms {
        let name = arm["name"].as_str().expect("name");
        let mut accepted = Vec::new();
        let mut best = Vec::new();
        for (seed, run) in [0, 1].iter().zip(arm["runs"].as_array().expect("runs")) {
            let id = format!("{name}-s{seed}");
            assert_eq!(run["id"], id.as_str());
            // Recomputed from the run's own log.
            let lines = log(&dir, &id);
            assert_eq!(lines.len(), 2, "{id}: the budget is 2 ideas");
            assert_eq!(run["ideas"], 2);
            let acc = lines.iter().filter(|o| o["status"] == "accepted").count();
            assert_eq!(run["accepted"], acc, "{id}");
            let attempts: u64 = lines.iter().map(|o| o["attempts"].as_u64().expect("attempts")).sum();
            assert_eq!(run["attempts"], attempts, "{id}");
            if attempts > 0 {
                assert!((run["accepted_per_1000"].as_f64().expect("rate") - acc as f64 * 1000.0 / attempts as f64).abs() < 1e-9, "{id}: {run}");
            }
            let b = lines.iter().filter_map(|o| o["valid_rank_ic"].as_f64()).fold(f64::NAN, f64::max);
            assert!((run["best_valid_rank_ic"].as_f64().expect("best") - b).abs() < 1e-12, "{id}: {run}");
            // The run mined from its own copy of the three alphas.
            let kb = common::kb_cli(&cfg, &dir.join("kb").join(&id), &["--json", "export"]);
            let records: Vec<Value> = serde_json::from_str(&kb).expect("export");
            assert_eq!(records.len(), 3 + 2, "{id}: the three alphas and the run's two records");
            // The model's figure is there exactly when the run accepted something; test
            // figures only with --final.
            assert_eq!(run["model_valid_rank_ic"].is_number(), acc > 0, "{id}: {run}");
            assert!(run.get("model_test_rank_ic").is_none());
            // The curve: the starting KB's (computed once for the study), then, for a run
            // that accepted some, its own points from the start's size on.
            let read = |p: PathBuf| serde_json::from_str::<Value>(&std::fs::read_to_string(&p).expect("curve")).expect("json");
            let (curve, start) = (read(dir.join("runs").join(&id).join("curve.json")), read(dir.join("start-curve.json")));
            let ks = |c: &Value| c.as_array().expect("points").iter().map(|p| p["k"].as_u64().expect("k")).collect::<Vec<_>>();
            let n_start = *ks(&start).last().expect("a start point");
            assert_eq!(ks(&curve).last().copied(), Some(n_start + acc as u64), "{id}: {curve}");
            if acc == 0 {
                assert_eq!(curve, start, "{id}: nothing accepted, nothing retrained");
            } else {
                assert!(ks(&curve).contains(&n_start), "{id}: {curve}");
            }
            accepted.push(acc as f64);
            best.push(b);
        }
        let sum = &arm["summary"];
        assert!((sum["accepted"]["mean"].as_f64().expect("mean") - mean(&accepted)).abs() < 1e-12);
        assert!((sum["best_valid_rank_ic"]["mean"].as_f64().expect("mean") - mean(&best)).abs() < 1e-12);
        assert!((sum["best_valid_rank_ic"]["median"].as_f64().expect("median") - mean(&best)).abs() < 1e-12, "the median of two is their mean");
        let sd = ((best[0] - best[1]).powi(2) / 2.0).sqrt();
        assert!((sum["best_valid_rank_ic"]["rsd"].as_f64().expect("rsd") - sd / mean(&best).abs()).abs() < 1e-9, "{sum}");
        assert!(arm["curve"].as_array().is_some_and(|c| !c.is_empty()), "the arm's mean curve: {arm}");
    }
    // The seed is what tells two runs of an arm apart.
    let codes = |id: &str| log(&dir, id).iter().map(|o| o["code"].as_str().unwrap_or("").to_string()).collect::<Vec<_>>();
    assert_ne!(codes("random-s0"), codes("random-s1"));
    assert_ne!(codes("gp-s0"), codes("gp-s1"));
    assert!(dir.join("curves.png").exists());
    assert_eq!(serde_json::from_str::<Value>(&std::fs::read_to_string(dir.join("summary.json")).expect("summary")).expect("json"), s);

    let lb = &s["leaderboard"];
    assert_eq!(lb["groups"], serde_json::json!(["gp", "random"]), "{lb}");
    assert_eq!(lb["pairs"], 2);
    let w = |i: usize, j: usize| lb["win_rate"][i][j].as_f64().expect("win rate");
    assert!((w(0, 1) + w(1, 0) - 1.0).abs() < 1e-12 && lb["win_rate"][0][0].is_null(), "{lb}");
    let pairs = std::fs::read_to_string(dir.join("leaderboard/pairs.jsonl")).expect("pairs");
    for line in pairs.lines() {
        let p: Value = serde_json::from_str(line).expect("pair");
        // Both orders were asked and kept.
        assert!(p["x_first"].is_string() && p["y_first"].is_string() && p["x"] != p["y"], "{p}");
    }
    assert!(dir.join("leaderboard/heatmap.png").exists() && dir.join("leaderboard/replies.jsonl").exists());

    // Run again: every run is finished, nothing is mined again, the summary is the same.
    assert_eq!(without_time(&ok(&study(&cfg, &file, &dir, &["--curve"]))), without_time(&s));
    // A replay into another directory gives the same figures and the same leaderboard,
    // from the recorded replies (no model is called).
    let again = tmp.path().join("again");
    let r = ok(&study(&cfg, &file, &again, &["--curve", "--leaderboard", "--pairs", "2", "--replay", dir.to_str().expect("utf-8")]));
    assert_eq!(without_time(&r), without_time(&s));
    assert_eq!(r["leaderboard"], s["leaderboard"]);
    assert_eq!(std::fs::read_to_string(again.join("leaderboard/pairs.jsonl")).expect("pairs"), pairs);
    // `kb leaderboard --arm` compares KBs given by hand: here two of the study's runs.
    let kb = |id: &str| dir.join("kb").join(id).display().to_string();
    let out = common::bin()
        .arg("--config")
        .arg(&cfg)
        .args(["kb", "--json", "leaderboard", "--pairs", "1", "--arm", &format!("gp={}", kb("gp-s1")), "--arm", &format!("random={}", kb("random-s1")), "--out"])
        .arg(tmp.path().join("lb"))
        .output()
        .expect("runs");
    let b = ok(&out);
    assert_eq!((b["groups"].clone(), b["pairs"].as_array().map(Vec::len)), (serde_json::json!(["gp", "random"]), Some(1)), "{b}");
    // Each run mined two; one whose evaluation failed has nothing to judge.
    assert!(b["sizes"].as_array().is_some_and(|s| s.iter().all(|n| (1..=2).contains(&n.as_u64().unwrap_or(0)))), "{b}");
    // --final adds the models' test figures, from the models already trained.
    let f = ok(&study(&cfg, &file, &dir, &["--final"]));
    let runs: Vec<Value> = f["arms"].as_array().expect("arms").iter().flat_map(|a| a["runs"].as_array().expect("runs").clone()).collect();
    assert!(runs.iter().all(|r| r["model_test_rank_ic"].is_number() == r["model_valid_rank_ic"].is_number()), "{f}");
    // The study file edited afterwards is refused for this directory.
    let edited = study_file(tmp.path(), &TWO_BY_TWO.replace("ideas = 2", "ideas = 3"));
    let out = study(&cfg, &edited, &dir, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("other settings"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_study_killed_midway_continues_where_it_stopped() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cfg = common::sample_config(tmp.path(), &common::shared("data/sp500_sample.parquet"), None);
    let file = study_file(tmp.path(), &TWO_BY_TWO.replace("ideas = 2", "ideas = 3"));
    let dir = tmp.path().join("study");
    let mut c = common::bin();
    c.arg("--config").arg(&cfg).arg("study").arg(&file).arg("--dir").arg(&dir).arg("--json");
    c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut c, 0);
    let mut child = c.spawn().expect("starts");
    // Killed, with every child process, once the second run has mined an idea.
    let second = dir.join("runs/random-s0/log.jsonl");
    let t = std::time::Instant::now();
    while !std::fs::read_to_string(&second).is_ok_and(|l| !l.is_empty()) {
        assert!(t.elapsed().as_secs() < 600, "the second run never started");
        assert!(child.try_wait().expect("wait").is_none(), "the study ended before it was killed");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // SAFETY: kill(2) on the process group the child leads.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    child.wait().expect("reaped");
    assert!(dir.join("runs/gp-s0/study.json").exists() && !dir.join("runs/random-s0/study.json").exists());
    let gp0 = std::fs::read_to_string(dir.join("runs/gp-s0/log.jsonl")).expect("log");

    let s = ok(&study(&cfg, &file, &dir, &[]));
    assert_eq!(std::fs::read_to_string(dir.join("runs/gp-s0/log.jsonl")).expect("log"), gp0, "a finished run is not mined again");
    for id in ["gp-s0", "random-s0", "gp-s1", "random-s1"] {
        let lines = log(&dir, id);
        assert_eq!(lines.len(), 3, "{id}: three ideas, across the kill");
        let mut ids: Vec<&str> = lines.iter().map(|o| o["record_id"].as_str().unwrap_or("")).collect();
        ids.dedup();
        assert_eq!(ids.len(), 3, "{id}: no idea twice");
    }
    assert_eq!(s["arms"][1]["runs"][0]["ideas"], 3);
}

#[test]
fn a_study_file_that_cannot_run_is_refused_with_its_reason() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cfg = common::sample_config(tmp.path(), &common::shared("data/sp500_sample.parquet"), None);
    let cases = [
        (TWO_BY_TWO.replace("seeds = [0, 1]", "seeds = [0, 1]\nrepeats = 2"), "unknown field `repeats`"),
        (TWO_BY_TWO.replace("ideas = 2", "ideas = 2\nhours = 1"), "exactly one of ideas, hours or evaluations"),
        (TWO_BY_TWO.replace("seeds = [0, 1]", "seeds = []"), "seeds: give at least one"),
        (TWO_BY_TWO.replace("[\"--writer\", \"gp\"]", "[\"--writer\", \"gp\", \"--kb\", \"x\"]"), "arm 'gp': --kb is set by the study"),
        (TWO_BY_TWO.replace("[\"--writer\", \"gp\"]", "[\"--writter\", \"gp\"]"), "arm 'gp': unexpected argument '--writter'"),
        (TWO_BY_TWO.replace("name = \"random\"", "name = \"gp\""), "arm 'gp' given twice"),
    ];
    for (body, want) in cases {
        let file = study_file(tmp.path(), &body);
        let out = study(&cfg, &file, &tmp.path().join("never"), &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{want}: {err}");
        assert!(err.contains(want) && err.contains("s.toml"), "want {want:?} naming the file, got: {err}");
        assert!(!tmp.path().join("never").exists(), "nothing is made for a study that cannot run");
    }
}

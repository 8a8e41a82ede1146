//! Team mode: several miners writing one knowledge base on a real Qdrant server or cluster
//! (started by the tests, tests/common/qdrant.rs), and the faults a team meets: the server
//! killed and restarted, the server gone for good, a miner killed, a cluster node lost.
//! The miners are `--writer gp` (no LLM, a second or two per idea on the sample) except
//! one on the local model; every run's bars are lowered so that candidates get in and
//! collide across miners.

mod common;

use alphaloop::kb::{AlphaRecord, Filter, Kb};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

/// A config on the sample with the bars lowered, `top` lines before its tables and `tail`
/// after them.
fn config(dir: &Path, top: &str, tail: &str) -> PathBuf {
    let p = common::sample_config(dir, &common::shared("data/sp500_sample.parquet"), None);
    let base = std::fs::read_to_string(&p).expect("config");
    let text = format!("{top}\n{base}\n[mine]\nmin_gain_t = -100\nmin_train_rank_ic = -1\nmin_valid_rank_ic = -1\n{tail}");
    std::fs::write(&p, text).expect("config");
    p
}

struct Team {
    cfg: PathBuf,
    runs: PathBuf,
    kb: String,
}

impl Team {
    fn new(dir: &Path, kb: String, top: &str, tail: &str) -> Team {
        Team { cfg: config(dir, top, tail), runs: dir.join("runs"), kb }
    }

    /// `mine --kb KB ARGS`, its output piped.
    fn start(&self, args: &[&str]) -> Child {
        common::bin()
            .env("ALPHALOOP_RUNS", &self.runs)
            .arg("--config")
            .arg(&self.cfg)
            .args(["mine", "--kb", &self.kb, "--json"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the miner starts")
    }

    fn gp(&self, run: &str, ideas: usize) -> Child {
        self.start(&["--writer", "gp", "--seed", "7", "--ideas", &ideas.to_string(), "--run-id", run])
    }

    /// Runs `mine --resume RUN ARGS` to its end, successfully.
    fn resume(&self, run: &str, args: &[&str]) {
        let mut a = vec!["--resume", run];
        a.extend_from_slice(args);
        succeeded(self.start(&a).wait_with_output().expect("runs"));
    }

    /// The outcomes a run has logged.
    fn logged(&self, run: &str) -> Vec<serde_json::Value> {
        let p = self.runs.join(run).join("log.jsonl");
        std::fs::read_to_string(&p).map(|s| s.lines().map(|l| serde_json::from_str(l).expect("json")).collect()).unwrap_or_default()
    }

    /// Waits until `run` has logged `n` ideas (fails after `secs`).
    fn wait_for(&self, run: &str, n: usize, secs: u64) {
        let t0 = Instant::now();
        while self.logged(run).len() < n {
            assert!(t0.elapsed() < Duration::from_secs(secs), "{run}: fewer than {n} ideas in {secs} s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn records(&self) -> Vec<AlphaRecord> {
        let kb = Kb::open(&self.kb.parse().expect("location"), alphaloop::kb::default_embedder(None).expect("model")).expect("kb opens");
        kb.records(&Filter::new()).expect("records")
    }

    /// Every run's logged outcomes are in the KB exactly once, nothing else of the run is,
    /// `runs` have `want` ideas each, and no two accepted alphas are closer than the novelty
    /// rule allows.
    fn check(&self, want: &[(&str, usize)]) -> Vec<AlphaRecord> {
        let all = self.records();
        let mut by_id: HashMap<&str, usize> = HashMap::new();
        for r in &all {
            *by_id.entry(r.id.as_str()).or_default() += 1;
        }
        assert!(by_id.values().all(|&n| n == 1), "an id stored twice");
        for &(run, n) in want {
            let logged: Vec<String> = self.logged(run).iter().map(|o| o["record_id"].as_str().expect("record id").to_string()).collect();
            assert_eq!(logged.len(), n, "{run}: ideas logged");
            assert_eq!(logged.iter().collect::<HashSet<_>>().len(), n, "{run}: a record id logged twice");
            let stored: HashSet<&str> = all.iter().filter(|r| r.run_id == run).map(|r| r.id.as_str()).collect();
            assert_eq!(stored, logged.iter().map(String::as_str).collect::<HashSet<_>>(), "{run}: the KB holds exactly the logged records");
        }
        novel(&all);
        all
    }
}

fn succeeded(out: Output) -> Output {
    assert!(out.status.success(), "the miner failed: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// No two accepted alphas have ranks correlated beyond the novelty rule's `max_corr` over
/// train (what the rule checks), however many miners accepted them.
fn novel(all: &[AlphaRecord]) {
    use alphaloop::kb::ranks::{pooled_corr, rank_rows};
    let max = alphaloop::kb::novelty::NoveltyConfig::default().max_corr;
    let view = alphaloop::backtest::MiningView::new(common::sample(), &common::sample_splits(), Default::default()).expect("view");
    let (ts, te) = view.train.span();
    let accepted: Vec<_> = all
        .iter()
        .filter(|r| r.status.keyword() == "accepted")
        .map(|r| {
            let sig = alphaloop::expr::eval_expr(&r.code, &view.data, &alphaloop::expr::NoAlphas).expect("an accepted formula evaluates");
            (r, rank_rows(&sig, ts, te))
        })
        .collect();
    for (i, (a, ra)) in accepted.iter().enumerate() {
        for (b, rb) in &accepted[..i] {
            let c = pooled_corr(ra, rb, te - ts).unwrap_or(0.0);
            assert!(c.abs() < max, "{} ({}) and {} ({}) both accepted at correlation {c:.3}", a.id, a.run_id, b.id, b.run_id);
        }
    }
}

/// Three miners on one collection at once (two genetic ones bred from the same seed, so
/// they propose the same formulas, and one on the local model): every record once, and
/// the novelty rule holds across miners (claim-and-verify: a candidate another miner
/// accepted while this one was judged steps back). Then each run is resumed on its own.
#[test]
fn three_miners_share_one_collection_and_each_resumes_on_its_own() {
    let server = common::qdrant::Server::start();
    let dir = tempfile::tempdir().expect("tmp");
    let team = Team::new(dir.path(), server.collection("team"), "", "");
    // The local model's run goes without the inner loop: the store is what is tested here,
    // the loop in tests/mine.rs.
    let llm = team.start(&["--ideas", "2", "--no-inner-loop", "--run-id", "llm"]);
    let (a, b) = (team.gp("left", 8), team.gp("right", 8));
    for c in [a, b, llm] {
        succeeded(c.wait_with_output().expect("runs"));
    }
    let all = team.check(&[("left", 8), ("right", 8), ("llm", 2)]);
    let accepted: Vec<&str> = all.iter().filter(|r| r.status.keyword() == "accepted").map(|r| r.code.as_str()).collect();
    assert_eq!(accepted.iter().collect::<HashSet<_>>().len(), accepted.len(), "a formula accepted twice");
    let stepped_back = all.iter().filter(|r| r.status.reason().contains("accepted by another miner while this one was judged")).count();
    // Something was accepted or stepped back for another miner's copy, or nothing was tested.
    assert!(!accepted.is_empty() || stepped_back > 0, "nothing got past the bars");
    eprintln!("{} accepted, {stepped_back} stepped back for another miner's copy", accepted.len());
    for run in ["left", "right", "llm"] {
        team.resume(run, &["--ideas", "1"]);
    }
    team.check(&[("left", 9), ("right", 9), ("llm", 3)]);
}

/// The server killed (SIGKILL) in the middle of two miners' runs and back a few seconds
/// later, within `retry_minutes`: the miners wait, retry and finish, and every record they
/// were told was stored is there.
#[test]
fn a_server_killed_and_restarted_mid_run_loses_nothing() {
    let mut server = common::qdrant::Server::start();
    let dir = tempfile::tempdir().expect("tmp");
    let team = Team::new(dir.path(), server.collection("restart"), "retry_minutes = 2", "");
    let (a, b) = (team.gp("left", 12), team.gp("right", 12));
    team.wait_for("left", 2, 300);
    let before = team.logged("left").len() + team.logged("right").len();
    server.kill();
    std::thread::sleep(Duration::from_secs(3));
    server.restart();
    let mut retried = false;
    for c in [a, b] {
        let out = succeeded(c.wait_with_output().expect("runs"));
        retried |= String::from_utf8_lossy(&out.stderr).contains("retrying in");
    }
    assert!(before < 24, "both runs ended before the server was killed");
    assert!(retried, "no miner met the outage");
    team.check(&[("left", 12), ("right", 12)]);
}

/// A server that stays down past `retry_minutes`: each miner stops with an error that
/// gives the command to continue; with the server back, that command finishes the run
/// with nothing lost and nothing twice.
#[test]
fn a_server_that_stays_down_stops_each_miner_with_the_command_to_resume() {
    let mut server = common::qdrant::Server::start();
    let dir = tempfile::tempdir().expect("tmp");
    let team = Team::new(dir.path(), server.collection("down"), "retry_minutes = 0.1", "");
    let (a, b) = (team.gp("left", 10), team.gp("right", 10));
    team.wait_for("left", 2, 300);
    server.kill();
    let t0 = Instant::now();
    for (run, c) in [("left", a), ("right", b)] {
        let out = c.wait_with_output().expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            // Its last idea was stored before the server went.
            assert_eq!(team.logged(run).len(), 10, "{err}");
            continue;
        }
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(&format!("mining run '{run}' stopped; --resume {run} continues it")), "{err}");
        assert!(err.contains("gave up after"), "{err}");
    }
    assert!(t0.elapsed() < Duration::from_secs(120), "the miners waited {:?} on a 6 s retry budget", t0.elapsed());
    server.restart();
    for run in ["left", "right"] {
        team.resume(run, &[]);
    }
    team.check(&[("left", 10), ("right", 10)]);
}

/// A miner killed (SIGKILL) at a random point resumes with nothing lost and nothing twice;
/// a record stored but never logged (what a kill between the two writes leaves) is removed
/// when the run resumes, since its idea is mined again.
#[test]
fn a_miner_killed_at_a_random_point_resumes_without_loss_or_duplicates() {
    let server = common::qdrant::Server::start();
    let dir = tempfile::tempdir().expect("tmp");
    let team = Team::new(dir.path(), server.collection("killed"), "", "");
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let mut c = team.gp("left", 10);
    team.wait_for("left", 1 + seed as usize % 3, 300);
    std::thread::sleep(Duration::from_millis(u64::from(seed % 1500)));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
    let _ = c.wait();
    let killed_at = team.logged("left").len();
    eprintln!("killed after {killed_at} ideas ({} ms past the wait)", seed % 1500);
    team.resume("left", &[]);
    team.check(&[("left", 10)]);

    // The last idea's record stored, its log line lost.
    let log = team.runs.join("left/log.jsonl");
    let text = std::fs::read_to_string(&log).expect("log");
    let kept: Vec<&str> = text.lines().collect();
    std::fs::write(&log, kept[..9].join("\n") + "\n").expect("log");
    team.resume("left", &["--ideas", "0"]);
    team.check(&[("left", 9)]);
    team.resume("left", &[]);
    team.check(&[("left", 10)]);
}

/// A three-node cluster holding the collection in three shards of two copies each (from
/// `[qdrant]` in the config), the miners given every node: the node they talk to is
/// killed mid-run, and they go on through the others with nothing acknowledged lost.
#[test]
fn a_cluster_keeps_mining_through_a_lost_node() {
    let mut nodes = common::qdrant::cluster(3);
    let dir = tempfile::tempdir().expect("tmp");
    let hosts: Vec<String> = nodes.iter().map(|n| n.url.trim_start_matches("qdrant://").to_string()).collect();
    let name = format!("cluster_{}", std::process::id());
    let kb = format!("qdrant://{}/{name}", hosts.join(","));
    let team = Team::new(dir.path(), kb, "retry_minutes = 2", "[qdrant]\nshards = 3\nreplication_factor = 2\n");
    let (a, b) = (team.gp("left", 10), team.gp("right", 10));
    team.wait_for("left", 2, 300);
    let info = common::qdrant::get(nodes[1].http, &format!("/collections/{name}")).expect("collection info");
    assert!(info.contains("\"shard_number\":3") && info.contains("\"replication_factor\":2"), "{info}");
    let before = team.logged("left").len() + team.logged("right").len();
    nodes[0].kill();
    let mut moved = false;
    for c in [a, b] {
        let out = succeeded(c.wait_with_output().expect("runs"));
        moved |= String::from_utf8_lossy(&out.stderr).contains(&format!("; trying http://{}", hosts[1]));
    }
    assert!(before < 20, "both runs ended before the node was killed");
    assert!(moved, "no miner moved on to the next node");
    team.check(&[("left", 10), ("right", 10)]);
}

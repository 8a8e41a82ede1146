//! `alphaloop study`: arms × seeds × a budget per run, each run mined from its own copy of
//! a starting KB, and one summary per arm: mean ± RSD and median over the seeds. A claim
//! that one way of mining beats another stands on this, not on one run of each.
//!
//! The study is an orchestrator of the commands a user would run by hand (`kb import`,
//! `mine`, `train`), each a child process of this binary with the study's config and data:
//! a run that crashes takes nothing else down, and a study stopped anywhere continues with
//! the same command (finished runs are kept, an unfinished one is resumed with `--resume`).

use super::mine::{read_log, totals, RunPlan};
use super::table::{num, render};
use super::DataArgs;
use crate::agent::Outcome;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(clap::Args, Debug)]
pub struct StudyArgs {
    /// The study file (TOML): seeds, the budget per run, the starting KB and the arms
    /// (docs/study.md).
    pub file: PathBuf,
    /// Where the runs, their KBs and summary.json go (default: the runs directory's
    /// studies/NAME, NAME the study file's stem).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also report each run's combined model on test (reported, never used for choosing).
    #[arg(long = "final")]
    pub final_test: bool,
    /// Also each run's self-improvement curve (`train --curve`: the combined model against
    /// the number of accepted alphas in mining order), and the arms' mean curves in
    /// curves.png.
    #[arg(long)]
    pub curve: bool,
    /// Also the idea-relevance leaderboard across the arms (their runs' mined alphas pooled
    /// over the seeds), into DIR/leaderboard (docs/study.md).
    #[arg(long)]
    pub leaderboard: bool,
    #[command(flatten)]
    pub judge: super::leaderboard::JudgeArgs,
    /// Rerun a recorded study (its directory) into --dir: each run mines as many ideas as
    /// it did, replaying its recorded replies; the summary comes out the same but for time.
    #[arg(long)]
    pub replay: Option<PathBuf>,
    #[command(flatten)]
    pub data: DataArgs,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The study file.
#[derive(Deserialize, Serialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct StudyFile {
    /// One run of every arm per seed (`mine --seed`).
    pub seeds: Vec<u64>,
    /// Every run's KB starts as this: an alpha file imported, or a KB directory copied
    /// (relative paths from the current directory); absent, an empty KB.
    #[serde(default)]
    pub start: Option<PathBuf>,
    pub budget: Budget,
    #[serde(rename = "arm")]
    pub arms: Vec<Arm>,
}

/// What each run may spend: exactly one of these, so that arms compare at equal cost.
#[derive(Deserialize, Serialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    pub ideas: Option<usize>,
    pub hours: Option<f64>,
    /// Candidates evaluated (`mine --budget-evals`).
    pub evaluations: Option<usize>,
}

#[derive(Deserialize, Serialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct Arm {
    pub name: String,
    /// `mine` flags, as on the command line (`["--writer", "gp"]`, `["--no-kb"]`, ...).
    #[serde(default)]
    pub args: Vec<String>,
}

/// Flags the study sets for every run, which an arm may not.
const STUDY_FLAGS: &[&str] = &["--kb", "--run-id", "--resume", "--seed", "--ideas", "--hours", "--budget-evals", "--json", "--data", "--groups"];

#[derive(clap::Parser)]
#[command(name = "mine", no_binary_name = false)]
struct MineOnly {
    #[command(flatten)]
    _m: super::mine::MineArgs,
}

impl StudyFile {
    pub fn read(path: &Path) -> Result<StudyFile> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let s: StudyFile = toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.to_string().trim_end()))?;
        let at = |what: String| anyhow::anyhow!("{}: {what}", path.display());
        if s.seeds.is_empty() {
            return Err(at("seeds: give at least one".into()));
        }
        if let Some(d) = s.seeds.iter().enumerate().find(|(i, x)| s.seeds[..*i].contains(x)) {
            return Err(at(format!("seeds: {} given twice", d.1)));
        }
        let b = &s.budget;
        let given = usize::from(b.ideas.is_some()) + usize::from(b.hours.is_some()) + usize::from(b.evaluations.is_some());
        if given != 1 {
            return Err(at("budget: give exactly one of ideas, hours or evaluations, the same for every run".into()));
        }
        if b.hours.is_some_and(|h| !(h > 0.0 && h.is_finite())) || b.ideas == Some(0) || b.evaluations == Some(0) {
            return Err(at("budget: must be above 0".into()));
        }
        if s.arms.is_empty() {
            return Err(at("no [[arm]]: a study compares at least one arm over its seeds".into()));
        }
        for (i, a) in s.arms.iter().enumerate() {
            if a.name.is_empty() || !a.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                return Err(at(format!("arm #{}: name '{}' must be letters, digits, '-' or '_'", i + 1, a.name)));
            }
            if s.arms[..i].iter().any(|b| b.name == a.name) {
                return Err(at(format!("arm '{}' given twice", a.name)));
            }
            if let Some(f) = a.args.iter().find(|x| STUDY_FLAGS.iter().any(|f| *x == f || x.starts_with(&format!("{f}=")))) {
                return Err(at(format!("arm '{}': {f} is set by the study for every run", a.name)));
            }
            <MineOnly as clap::Parser>::try_parse_from(std::iter::once("mine".to_string()).chain(a.args.iter().cloned()))
                .map_err(|e| at(format!("arm '{}': {}", a.name, e.to_string().lines().next().unwrap_or("").trim_start_matches("error: "))))?;
        }
        Ok(s)
    }
}

/// One run's figures, from its log (and its combined model's report).
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct RunFigures {
    pub id: String,
    pub seed: u64,
    pub ideas: usize,
    pub accepted: usize,
    /// Candidates whose valid metrics were computed.
    pub attempts: usize,
    pub evaluations: usize,
    /// Accepted per 1,000 candidates tried on valid: for the `random` arm, the rate at
    /// which the acceptance rule lets noise through.
    pub accepted_per_1000: f64,
    /// Over the ideas' final alphas (every status).
    pub best_valid_rank_ic: f64,
    pub median_valid_rank_ic: f64,
    /// The accepted set's combination (the acceptance rule's combiner) on valid at the end,
    /// and what mining added to it.
    pub combination_valid_rank_ic: f64,
    pub combination_gain: f64,
    /// The combined XGBoost model over the run's accepted mined alphas (NaN: none accepted).
    pub model_valid_rank_ic: f64,
    /// With `--final` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_test_rank_ic: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_test_sharpe: Option<f64>,
    pub tokens: u64,
    pub cost_usd: f64,
    pub hours: f64,
}

/// The figures [`RunFigures`] summarises per arm, in the table's order, with their labels.
const FIGURES: &[(&str, &str)] = &[
    ("ideas", "ideas"),
    ("accepted", "accepted"),
    ("attempts", "tried on valid"),
    ("evaluations", "evaluated"),
    ("accepted_per_1000", "accepted per 1,000 tried"),
    ("best_valid_rank_ic", "best valid Rank IC"),
    ("median_valid_rank_ic", "median valid Rank IC"),
    ("combination_valid_rank_ic", "combination valid Rank IC"),
    ("combination_gain", "combination gain"),
    ("model_valid_rank_ic", "model valid Rank IC"),
    ("model_test_rank_ic", "model test Rank IC"),
    ("model_test_sharpe", "model test Sharpe (net)"),
    ("tokens", "tokens"),
    ("cost_usd", "cost (USD)"),
    ("hours", "hours"),
];

/// Mean, relative standard deviation (sample standard deviation over |mean|; None for a
/// single value or a zero mean) and median of the finite values, and how many there were.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Spread {
    pub n: usize,
    pub mean: f64,
    pub rsd: Option<f64>,
    pub median: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Spread {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n == 0 {
            return Spread { n, mean: f64::NAN, rsd: None, median: f64::NAN };
        }
        let mean = v.iter().sum::<f64>() / n as f64;
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        let rsd = (n > 1 && mean != 0.0).then(|| (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt() / mean.abs());
        Spread { n, mean, rsd, median }
    }

    fn show(&self) -> String {
        if self.n == 0 {
            return "-".into();
        }
        let rsd = self.rsd.map_or(String::new(), |r| format!(" ± {:.0}%", r * 100.0));
        format!("{}{rsd} ({})", num(self.mean), num(self.median))
    }
}

impl RunFigures {
    /// From a run's log, its plan and (when it accepted anything) its model's `train --json`.
    pub fn of(id: &str, seed: u64, outcomes: &[Outcome], start: Option<f64>, spent_seconds: f64, model: Option<&Value>, final_test: bool) -> RunFigures {
        let (accepted, tokens, attempts, _, evaluations, _) = totals(outcomes);
        let valid: Vec<f64> = outcomes.iter().filter_map(|o| o.valid_rank_ic).filter(|v| v.is_finite()).collect();
        let combination = super::growth::current(outcomes, start);
        let get = |split: &str, key: &str| model.and_then(|m| m[split][key].as_f64()).unwrap_or(f64::NAN);
        RunFigures {
            id: id.to_string(),
            seed,
            ideas: outcomes.len(),
            accepted,
            attempts,
            evaluations,
            accepted_per_1000: if attempts > 0 { accepted as f64 * 1000.0 / attempts as f64 } else { f64::NAN },
            best_valid_rank_ic: valid.iter().copied().fold(f64::NAN, f64::max),
            median_valid_rank_ic: Spread::of(&valid).median,
            combination_valid_rank_ic: combination,
            combination_gain: combination - start.unwrap_or(f64::NAN),
            model_valid_rank_ic: get("valid", "rank_ic"),
            model_test_rank_ic: final_test.then(|| get("test", "rank_ic")),
            model_test_sharpe: final_test.then(|| get("test", "sharpe")),
            tokens,
            cost_usd: outcomes.iter().map(|o| o.cost_usd).sum(),
            hours: spent_seconds / 3600.0,
        }
    }
}

/// Where the study's own files go.
struct Layout {
    dir: PathBuf,
}

impl Layout {
    fn runs(&self) -> PathBuf {
        self.dir.join("runs")
    }
    fn run(&self, id: &str) -> PathBuf {
        self.runs().join(id)
    }
    fn kb(&self, id: &str) -> PathBuf {
        self.dir.join("kb").join(id)
    }
    fn start(&self) -> PathBuf {
        self.dir.join("start")
    }
}

/// The child commands: this binary with the study's config, log level and data.
struct Child<'a> {
    config: Option<&'a Path>,
    log: &'a str,
    data: &'a DataArgs,
}

impl Child<'_> {
    fn command(&self, sub: &str) -> Result<Command> {
        let mut c = Command::new(std::env::current_exe().context("cannot find the alphaloop binary to run the study's commands")?);
        if let Some(p) = self.config {
            c.arg("--config").arg(p);
        }
        c.args(["--log", self.log, sub]);
        Ok(c)
    }

    fn with_data(&self, c: &mut Command) {
        if let Some(d) = &self.data.data {
            c.arg("--data").arg(d);
        }
        if let Some(g) = &self.data.groups {
            c.arg("--groups").arg(g);
        }
    }

    /// Runs `c`, its stdout into `out` (written whole or not at all), stderr to ours.
    fn run(&self, mut c: Command, out: &Path, what: &str) -> Result<()> {
        let part = out.with_extension("part");
        let file = std::fs::File::create(&part).with_context(|| format!("cannot write {}", part.display()))?;
        let status = c.stdout(file).status().with_context(|| format!("cannot start {what}"))?;
        if !status.success() {
            bail!("{what} failed ({status}); run the study again to continue where it stopped");
        }
        std::fs::rename(&part, out).with_context(|| format!("cannot write {}", out.display()))?;
        Ok(())
    }
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    for e in std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &target)?;
        } else {
            std::fs::copy(e.path(), &target).with_context(|| format!("cannot copy {} to {}", e.path().display(), target.display()))?;
        }
    }
    Ok(())
}

pub fn run(mut args: StudyArgs, cfg: &super::Config, config: Option<&Path>, log: &str) -> Result<i32> {
    let study = StudyFile::read(&args.file)?;
    let name = args.file.file_stem().map_or_else(|| "study".into(), |s| s.to_string_lossy().into_owned());
    let dir = args.dir.clone().unwrap_or_else(|| super::mine::runs_dir().join("studies").join(&name));
    if args.replay.as_ref().is_some_and(|r| r == &dir) {
        bail!("--replay {} would overwrite the study it replays: give another --dir", dir.display());
    }
    let at = Layout { dir: dir.clone() };
    std::fs::create_dir_all(at.runs()).with_context(|| format!("cannot create {}", at.runs().display()))?;
    // The study as it was first run: a study file edited midway is refused, since its
    // runs would no longer be arms of one comparison.
    let recorded = dir.join("study.toml");
    let text = toml::to_string(&study)?;
    match std::fs::read_to_string(&recorded) {
        Ok(old) if old != text => bail!("{} holds a study started with other settings ({}): give another --dir, or remove it", dir.display(), recorded.display()),
        Ok(_) => {}
        Err(_) => std::fs::write(&recorded, &text).with_context(|| format!("cannot write {}", recorded.display()))?,
    }
    let child = Child { config, log, data: &args.data };
    prepare_start(&study, &at, &child)?;
    let total = study.seeds.len() * study.arms.len();
    let pb = super::progress(total as u64, args.json, "study");
    // Seed by seed, every arm: a study stopped early has as many seeds of each arm.
    for &seed in &study.seeds {
        for arm in &study.arms {
            let id = format!("{}-s{seed}", arm.name);
            pb.set_message(format!("study: {id}"));
            mine_one(&study, arm, seed, &id, &at, &child, args.replay.as_deref())?;
            let kb = at.kb(&id);
            let ids: Vec<String> = read_log(&at.run(&id).join("log.jsonl"))?.into_iter().filter(|o| o.status == "accepted").map(|o| o.record_id).collect();
            let model = at.run(&id).join("train.json");
            if !ids.is_empty() && !model.exists() {
                let mut c = child.command("train")?;
                c.arg("--kb").arg(&kb).args(["--ids", &ids.join(","), "--no-seed-baseline", "--json", "--out"]).arg(at.run(&id).join("model.json"));
                child.with_data(&mut c);
                child.run(c, &model, &format!("training {id}'s combined model"))?;
            }
            if args.curve && !at.run(&id).join("curve.json").exists() {
                run_curve(&study, &at, &child, &id, ids.len())?;
            }
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    let mut summary = summarise(&study, &at, args.final_test, args.curve)?;
    if args.leaderboard {
        if let (Some(old), None) = (&args.replay, &args.judge.judge_replay) {
            args.judge.judge_replay = Some(old.join("leaderboard").join("replies.jsonl"));
        }
        let mut groups = Vec::new();
        for arm in &study.arms {
            let mut alphas = Vec::new();
            for &seed in &study.seeds {
                let kb = super::kb::open(Some(&at.kb(&format!("{}-s{seed}", arm.name)).display().to_string()), cfg, false)?;
                alphas.extend(crate::agent::relevance::mined(kb.records(&crate::kb::Filter::new())?));
            }
            groups.push(crate::agent::relevance::Group { name: arm.name.clone(), alphas });
        }
        let b = super::leaderboard::run(&groups, &args.judge, cfg, &dir.join("leaderboard"), args.json)?;
        summary["leaderboard"] = json!({"groups": b.groups, "sizes": b.sizes, "win_rate": b.win_rate, "overall": b.overall, "first_shown_chosen": b.first_shown_chosen, "pairs": b.pairs.len()});
    }
    std::fs::write(dir.join("summary.json"), serde_json::to_string_pretty(&summary)?)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_table(&summary, &study);
        println!("wrote {}", dir.join("summary.json").display());
    }
    Ok(0)
}

/// The starting KB, made once: an alpha file imported, or a KB directory copied.
/// A run's self-improvement curve into its curve.json. With a starting KB, the points up
/// to its size are the start's own curve, computed once for the whole study: a run that
/// accepted nothing has exactly that curve, and the others retrain only from there on
/// (on the 101 seeds, each run's six fits below k = 101 were most of a short run's time).
fn run_curve(study: &StudyFile, at: &Layout, child: &Child<'_>, id: &str, accepted: usize) -> Result<()> {
    let out = at.run(id).join("curve.json");
    let train = |kb: &Path, dir: PathBuf, from: Option<u64>, json: &Path, what: String| -> Result<()> {
        let mut c = child.command("train")?;
        c.arg("--kb").arg(kb).arg("--curve").arg(dir).arg("--json");
        if let Some(k) = from {
            c.arg("--curve-from").arg(k.to_string());
        }
        child.with_data(&mut c);
        child.run(c, json, &what)
    };
    if study.start.is_none() {
        return train(&at.kb(id), at.run(id).join("curve"), None, &out, format!("{id}'s curve"));
    }
    let start = at.dir.join("start-curve.json");
    if !start.exists() {
        train(&at.start(), at.dir.join("start-curve"), None, &start, "the starting KB's curve".into())?;
    }
    let read = |p: &Path| -> Result<Vec<Value>> {
        let t = std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        serde_json::from_str(&t).with_context(|| format!("{}: not a curve", p.display()))
    };
    let start_points = read(&start)?;
    let points = match start_points.last().and_then(|p| p["k"].as_u64()) {
        Some(n) if accepted > 0 => {
            let from = at.run(id).join("curve-from.json");
            train(&at.kb(id), at.run(id).join("curve"), Some(n), &from, format!("{id}'s curve"))?;
            start_points.into_iter().filter(|p| p["k"].as_u64().is_some_and(|k| k < n)).chain(read(&from)?).collect()
        }
        _ => start_points,
    };
    let part = out.with_extension("part");
    std::fs::write(&part, serde_json::to_string_pretty(&points)?).with_context(|| format!("cannot write {}", part.display()))?;
    std::fs::rename(&part, &out).with_context(|| format!("cannot write {}", out.display()))?;
    Ok(())
}

fn prepare_start(study: &StudyFile, at: &Layout, child: &Child<'_>) -> Result<()> {
    let Some(start) = &study.start else { return Ok(()) };
    if at.start().exists() {
        return Ok(());
    }
    let part = at.dir.join("start.part");
    let _ = std::fs::remove_dir_all(&part);
    if start.is_dir() {
        copy_dir(start, &part)?;
    } else {
        let mut c = child.command("kb")?;
        c.arg("--kb").arg(&part).arg("import").arg(start);
        child.run(c, &at.dir.join("start-import.txt"), &format!("importing {} into the starting KB", start.display()))?;
    }
    std::fs::rename(&part, at.start()).with_context(|| format!("cannot write {}", at.start().display()))?;
    Ok(())
}

/// Mines one run to its budget: a new run from a copy of the starting KB, or the
/// unfinished one resumed. `study.json` in the run's directory marks it finished.
fn mine_one(study: &StudyFile, arm: &Arm, seed: u64, id: &str, at: &Layout, child: &Child<'_>, replay: Option<&Path>) -> Result<()> {
    let run = at.run(id);
    let done = run.join("study.json");
    if done.exists() {
        return Ok(());
    }
    let kb = at.kb(id);
    let mut c = child.command("mine")?;
    c.env("ALPHALOOP_RUNS", at.runs()).arg("--kb").arg(&kb).arg("--json");
    child.with_data(&mut c);
    // A resumed run goes on to the ideas or hours it was started with (given again, they
    // would be added to them); the evaluation budget counts the whole run either way.
    let resumed = run.join("log.jsonl").exists();
    if resumed {
        c.args(["--resume", id]);
    } else {
        let _ = std::fs::remove_dir_all(&kb);
        let _ = std::fs::remove_dir_all(&run);
        if at.start().exists() {
            copy_dir(&at.start(), &kb)?;
        }
        c.args(["--run-id", id, "--seed", &seed.to_string()]);
    }
    match replay {
        Some(old) => {
            // As many ideas as the recorded run mined, with its replies.
            let n = read_log(&old.join("runs").join(id).join("log.jsonl"))?.len();
            if n == 0 {
                bail!("{}: no run '{id}' recorded to replay", old.display());
            }
            if !resumed {
                c.args(["--ideas", &n.to_string()]);
            }
            let replies = old.join("runs").join(id).join("replies.jsonl");
            if replies.exists() {
                c.arg("--replay").arg(replies);
            }
        }
        None => {
            let b = &study.budget;
            if let (Some(n), false) = (b.ideas, resumed) {
                c.args(["--ideas", &n.to_string()]);
            }
            if let (Some(h), false) = (b.hours, resumed) {
                c.args(["--hours", &h.to_string()]);
            }
            if let Some(n) = b.evaluations {
                c.args(["--budget-evals", &n.to_string()]);
            }
        }
    }
    c.args(&arm.args);
    std::fs::create_dir_all(&run)?;
    child.run(c, &done, &format!("run {id}"))
}

fn summarise(study: &StudyFile, at: &Layout, final_test: bool, curve: bool) -> Result<Value> {
    let mut arms = Vec::new();
    let mut curves: Vec<crate::model::plot::Series> = Vec::new();
    for arm in &study.arms {
        let mut runs = Vec::new();
        let mut arm_curves: Vec<Value> = Vec::new();
        for &seed in &study.seeds {
            let id = format!("{}-s{seed}", arm.name);
            let dir = at.run(&id);
            let outcomes = read_log(&dir.join("log.jsonl"))?;
            let plan = RunPlan::read(&dir)?.with_context(|| format!("{}: no run.json", dir.display()))?;
            let model: Option<Value> = match std::fs::read_to_string(dir.join("train.json")) {
                Ok(t) => Some(serde_json::from_str(&t).with_context(|| format!("{}: not a train report", dir.join("train.json").display()))?),
                Err(_) => None,
            };
            runs.push(RunFigures::of(&id, seed, &outcomes, plan.start_combination(), plan.spent_seconds(), model.as_ref(), final_test));
            if curve {
                let t = std::fs::read_to_string(dir.join("curve.json")).with_context(|| format!("cannot read {}", dir.join("curve.json").display()))?;
                arm_curves.push(serde_json::from_str(&t)?);
            }
        }
        // Each run's figures by name, read once (NaN is written as null).
        let named: Vec<Value> = runs.iter().map(serde_json::to_value).collect::<Result<_, _>>()?;
        let mut summary = serde_json::Map::new();
        for (key, _) in FIGURES {
            let v: Vec<f64> = named.iter().filter_map(|r| r.get(*key)).map(|x| x.as_f64().unwrap_or(f64::NAN)).collect();
            if !v.is_empty() {
                summary.insert(key.to_string(), serde_json::to_value(Spread::of(&v))?);
            }
        }
        let mut entry = json!({"name": arm.name, "args": arm.args, "runs": runs, "summary": summary});
        if curve {
            let mean = mean_curve(&arm_curves, final_test);
            curves.push(crate::model::plot::Series::line(format!("{} valid", arm.name), mean.iter().map(|p| (p.0, p.1)).collect()));
            if final_test {
                curves.push(crate::model::plot::Series::line(format!("{} test", arm.name), mean.iter().map(|p| (p.0, p.2)).collect()));
            }
            entry["curve"] = json!(mean.iter().map(|p| if final_test { json!({"k": p.0, "valid_rank_ic": p.1, "test_rank_ic": p.2}) } else { json!({"k": p.0, "valid_rank_ic": p.1}) }).collect::<Vec<_>>());
        }
        arms.push(entry);
    }
    if curve && curves.iter().any(|s| s.points.iter().any(|p| p.1.is_finite())) {
        crate::model::plot::lines(&at.dir.join("curves.png"), "Combined model vs. accepted alphas, mean over seeds", "accepted alphas used (mining order)", "Rank IC", &curves).map_err(anyhow::Error::msg)?;
    }
    Ok(json!({
        "study": at.dir.join("study.toml"),
        "seeds": study.seeds,
        "budget": study.budget,
        "start": study.start,
        "final": final_test,
        "arms": arms,
    }))
}

/// An arm's curve: at each number of alphas every seed's curve has, the mean valid (and
/// test) Rank IC over the seeds.
fn mean_curve(curves: &[Value], final_test: bool) -> Vec<(f64, f64, f64)> {
    let points = |c: &Value| -> Vec<(u64, f64, f64)> {
        c.as_array().map_or_else(Vec::new, |a| {
            a.iter().filter_map(|p| Some((p["k"].as_u64()?, p["valid"]["rank_ic"].as_f64().unwrap_or(f64::NAN), p["test"]["rank_ic"].as_f64().unwrap_or(f64::NAN)))).collect()
        })
    };
    let all: Vec<Vec<(u64, f64, f64)>> = curves.iter().map(points).collect();
    let Some(first) = all.first() else { return Vec::new() };
    first
        .iter()
        .filter_map(|&(k, _, _)| {
            let at: Vec<&(u64, f64, f64)> = all.iter().filter_map(|c| c.iter().find(|p| p.0 == k)).collect();
            (at.len() == all.len()).then(|| {
                let n = at.len() as f64;
                (k as f64, at.iter().map(|p| p.1).sum::<f64>() / n, if final_test { at.iter().map(|p| p.2).sum::<f64>() / n } else { f64::NAN })
            })
        })
        .collect()
}

fn print_table(summary: &Value, study: &StudyFile) {
    let arms = summary["arms"].as_array().cloned().unwrap_or_default();
    let mut header = vec!["figure".to_string()];
    header.extend(arms.iter().map(|a| a["name"].as_str().unwrap_or("").to_string()));
    let mut rows = Vec::new();
    for (key, label) in FIGURES {
        if arms.iter().all(|a| a["summary"].get(key).is_none()) {
            continue;
        }
        let mut row = vec![label.to_string()];
        for a in &arms {
            row.push(a["summary"].get(*key).and_then(|s| serde_json::from_value::<Spread>(s.clone()).ok()).map_or("-".into(), |s| s.show()));
        }
        rows.push(row);
    }
    let h: Vec<&str> = header.iter().map(String::as_str).collect();
    println!("{}", render(&h, &rows));
    println!(
        "each cell: mean ± relative standard deviation (median) over {} seeds; the model is XGBoost over the run's accepted mined alphas{}",
        study.seeds.len(),
        if summary["final"].as_bool() == Some(true) { "; test figures are reported, never used for choosing" } else { ", on valid (--final adds test)" }
    );
}

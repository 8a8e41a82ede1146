//! `alphaloop mine`: the overnight mining run, and `alphaloop runs`.

use super::table::{num, render, short};
use super::config::MineSettings;
use super::{load_data, Config, DataArgs};
use super::growth;
use crate::agent::{evolve, ideas, MineConfig, Miner, Outcome, Templates};
use crate::backtest::MiningView;
use crate::llm::cache::{CachedModel, Mode};
use crate::llm::local::LocalModel;
use crate::llm::openai::OpenAiModel;
use crate::llm::LanguageModel;
use anyhow::{bail, Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(clap::Args, Debug)]
pub struct MineArgs {
    /// Number of ideas to mine (default 5 unless --hours is given; with --resume, those the
    /// run has left of its own --ideas, and this many more when given).
    #[arg(long)]
    pub ideas: Option<usize>,
    /// Stop after this many hours (with --resume, the run's own hours less those it has
    /// mined, unless given).
    #[arg(long)]
    pub hours: Option<f64>,
    /// `local` (embedded llama.cpp, default) or `openai:MODEL` (base URL from `llm_url` in the
    /// config or $OPENAI_BASE_URL, key from $OPENAI_API_KEY; `alphaloop serve` is one).
    #[arg(long)]
    pub llm: Option<String>,
    /// The local model: `small` (Qwen2.5-Coder 0.5B), `medium` (1.5B) or a GGUF path
    /// (default: the 1.5B when scripts/setup fetched it, else the 0.5B).
    #[arg(long, env = "ALPHALOOP_MODEL")]
    pub model: Option<PathBuf>,
    /// Threads for the local model (0: all cores); fewer leaves cores for other work.
    #[arg(long, default_value_t = 0)]
    pub llm_threads: i32,
    /// Knowledge base: a directory (embedded Qdrant) or qdrant://host:port/collection (default: the config's `kb`, else alpha_kb/store)
    #[arg(long, env = "ALPHALOOP_KB")]
    pub kb: Option<String>,
    #[command(flatten)]
    pub data: DataArgs,
    /// The run's seed: the GP and random writers' draws, the LLM's sampling, the refinement
    /// search and the actions' choices (default 0; a resumed run keeps its own).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Continue a stopped or crashed run without redoing finished ideas, with the writer,
    /// model and ablations it was started with (kept in its run.json). Without an id: the
    /// run written to last.
    #[arg(long, value_name = "RUN_ID", num_args = 0..=1, default_missing_value = "")]
    pub resume: Option<String>,
    /// Name of a new run (default: run<unix time>).
    #[arg(long, conflicts_with = "resume")]
    pub run_id: Option<String>,
    /// Replay the replies recorded by an earlier run (no model is called; `--llm` defaults
    /// to the recording's model).
    #[arg(long)]
    pub replay: Option<PathBuf>,
    /// Who writes the alphas: `llm` (default: expressions), `python` (the LLM writes Python
    /// factor classes, run in the sandbox) or `gp`, the genetic-programming baseline that
    /// needs no LLM (same evaluation budget per idea), or `random`, the null model: one
    /// expression drawn from the grammar per idea, no search, no selection.
    #[arg(long)]
    pub writer: Option<String>,
    /// Ablation: one writer round per idea, no judge feedback loop.
    #[arg(long)]
    pub no_inner_loop: bool,
    /// Ablation: no retrieval from the knowledge base (and no novelty check).
    #[arg(long)]
    pub no_kb: bool,
    #[command(flatten)]
    pub metrics: super::config::MetricsSettings,
    /// The acceptance rule, as `[mine] accept` (which this overrides): `gain`, what a
    /// candidate adds to the accepted set's combination on valid, or `standalone`.
    #[arg(long, value_enum)]
    pub accept: Option<crate::agent::Accept>,
    /// The gain's combiner, as `[mine] combiner` (which this overrides): `signed-mean` or
    /// `ridge`.
    #[arg(long, value_enum)]
    pub combiner: Option<crate::agent::accept::Combine>,
    /// Stop cleanly once this many tokens were used.
    #[arg(long)]
    pub budget_tokens: Option<u64>,
    /// Stop cleanly once this many candidates were evaluated (the run's whole count, across
    /// resumes): the cost measure that lets a study compare writers of different speeds.
    #[arg(long)]
    pub budget_evals: Option<usize>,
    /// Stop cleanly once the run cost this many USD (prices per model in the config).
    #[arg(long)]
    pub budget_usd: Option<f64>,
    /// Ideas in flight at once (LLM calls are I/O for a remote model; the local model
    /// serves one call at a time). `--writer gp` runs one at a time.
    #[arg(long, default_value_t = 1)]
    pub concurrency: usize,
    /// Ideas per generation: after each generation the LLM writes a summary into the KB.
    #[arg(long, default_value_t = 10)]
    pub generation_size: usize,
    /// Idea library (default alpha_kb/ideas.toml).
    #[arg(long)]
    pub idea_file: Option<PathBuf>,
    /// Print the run's summary as one JSON object (no progress bar)
    #[arg(long)]
    pub json: bool,
}

/// What the mining workers share: the bandit, the GP population, the sequence numbers and
/// the budget counters, and why the run stops.
struct Shared {
    bandit: ideas::Bandit,
    pop: crate::agent::gp::Population,
    rng: crate::agent::gp::Rng,
    next_seq: usize,
    started: usize,
    used_tokens: u64,
    spent_usd: f64,
    evaluations: usize,
    stop: Option<&'static str>,
    /// Outcomes sent by workers and not yet taken in by the main thread.
    pending: usize,
}

static STOP: AtomicBool = AtomicBool::new(false);

/// First Ctrl-C: take no new ideas, finish those in flight. Second: leave at once; every
/// KB write already acknowledged is durable (WAL) and `--resume` redoes unfinished ideas.
/// Only async-signal-safe calls (`write`, `_exit`) happen here.
extern "C" fn on_sigint(_: libc::c_int) {
    if STOP.swap(true, Ordering::SeqCst) {
        // SAFETY: _exit is async-signal-safe and ends the process without running handlers.
        unsafe { libc::_exit(130) };
    }
    let msg = b"\nstopping after the ideas in flight; Ctrl-C again to abandon them\n";
    // SAFETY: write(2) on stderr with a valid buffer is async-signal-safe.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

/// Where runs keep their logs and recorded replies (`$ALPHALOOP_RUNS`, default the
/// checkout's alpha_kb/runs, git-ignored; outside any checkout `$ALPHALOOP_CACHE/runs`).
pub fn runs_dir() -> PathBuf {
    std::env::var_os("ALPHALOOP_RUNS").map(PathBuf::from).unwrap_or_else(|| {
        crate::checkout_dir().map_or_else(|| crate::cache_dir().join("runs"), |c| c.join("alpha_kb/runs"))
    })
}

fn open_llm(args: &MineArgs, cfg: &Config, run_dir: &Path) -> Result<Box<dyn LanguageModel>> {
    open_model(args.llm(), args.model.as_deref(), args.llm_threads, cfg, &run_dir.join("replies.jsonl"), args.replay.as_deref())
}

/// The model `llm` names (`local` or `openai:MODEL`), its replies recorded into `record`;
/// with `replay`, no model at all: the replies recorded there, a request not among them an
/// error.
pub(super) fn open_model(llm: &str, model: Option<&Path>, threads: i32, cfg: &Config, record: &Path, replay: Option<&Path>) -> Result<Box<dyn LanguageModel>> {
    if let Some(p) = replay {
        // Replay needs no model: the name the replies were recorded under is in the file.
        return Ok(Box::new(CachedModel::<Box<dyn LanguageModel>>::open(None, &recorded_model(p)?, p, Mode::Replay)?));
    }
    let inner: Box<dyn LanguageModel> = match llm {
        "local" => {
            let path = crate::llm::model_path(model);
            Box::new(LocalModel::load(&path, crate::llm::LOCAL_CTX, threads)?)
        }
        s if s.starts_with("openai:") => {
            let (base, key) = super::config::openai_endpoint(cfg.llm_url.as_deref())?;
            let patience = crate::llm::retry::Patience::from_minutes(cfg.retry_minutes);
            Box::new(OpenAiModel::new(&base, &s["openai:".len()..], key, 4, std::time::Duration::from_secs(120))?.with_patience(patience))
        }
        s => bail!("unknown --llm '{s}': local or openai:MODEL"),
    };
    let name = inner.name();
    Ok(Box::new(CachedModel::open(Some(inner), &name, record, Mode::Record)?))
}

/// The model a reply recording was made with (`local:NAME` or `openai:MODEL`), from its
/// first line only (an overnight run's recording runs to many megabytes, and a replay asks
/// for this before the cache reads it whole).
fn recorded_model(p: &Path) -> Result<String> {
    use std::io::BufRead;
    let file = std::fs::File::open(p).with_context(|| format!("cannot read {}", p.display()))?;
    let mut first = String::new();
    std::io::BufReader::new(file).read_line(&mut first).with_context(|| format!("cannot read {}", p.display()))?;
    serde_json::from_str::<serde_json::Value>(&first)
        .ok()
        .and_then(|v| v["model"].as_str().map(str::to_string))
        .with_context(|| format!("{}: not a reply recording", p.display()))
}

impl MineArgs {
    /// The model: `--llm`, a resumed run's own, else the local one.
    pub fn llm(&self) -> &str {
        self.llm.as_deref().unwrap_or("local")
    }

    /// The writer: `--writer`, a resumed run's own, else the LLM writing expressions.
    pub fn writer(&self) -> &str {
        self.writer.as_deref().unwrap_or("llm")
    }
}

/// Whether a writer calls a language model (`gp` and `random` do not).
fn writes_with_llm(writer: &str) -> bool {
    !["gp", "random"].contains(&writer)
}

/// What a run was started with (`run.json` in its directory), so that `--resume` continues
/// the same run: the same writer, model, ablations and `[mine]` settings (a run that mixed
/// them would be no arm of a comparison), up to the ideas or hours it was given.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug)]
pub(super) struct RunPlan {
    /// The run's ideas in all (5 when neither this nor `hours` was given).
    ideas: Option<usize>,
    hours: Option<f64>,
    writer: String,
    llm: String,
    no_inner_loop: bool,
    no_kb: bool,
    /// The run's seed (runs of earlier versions: 0, which their draws used).
    #[serde(default)]
    seed: u64,
    /// The local model's GGUF (a local LLM writer's runs; runs recorded before it was kept
    /// mined with the 0.5B, the only local model there was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<PathBuf>,
    /// Wall time spent mining, over every session, as of the last idea finished.
    #[serde(default)]
    spent_seconds: f64,
    /// The accepted set's combination's valid Rank IC when the run started (runs of
    /// earlier versions kept none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start_combination: Option<f64>,
    /// What the run's figures stand on (runs of earlier versions kept none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    protocol: Option<Protocol>,
    /// The config's `[mine]` settings, defaults filled in (runs of earlier versions have
    /// none recorded: they mined with the defaults, without the units check; [`RunPlan::read`]
    /// fills them in).
    #[serde(default)]
    mine: MineSettings,
}

/// The data, periods, label and costs a run's figures stand on, as a claim about it must
/// state them.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug)]
struct Protocol {
    /// The data file and a hash of its contents (`MarketData::fingerprint`).
    data: String,
    fingerprint: String,
    splits: crate::data::Splits,
    /// The periods mining computed anything on (the data is cut at the end of valid).
    periods_seen: Vec<String>,
    horizon: usize,
    gap: usize,
    cost_bps: f64,
}

impl MineSettings {
    /// A recorded run's settings as it mined: runs recorded before a setting existed
    /// mined without what it turns on (the units check, the window cap: a million days is
    /// longer than any data, which the compiler refuses anyway); the rest, once resolved,
    /// are the defaults (runs recorded before `[mine]` existed) or what was recorded.
    fn recorded_as_mined(mut self) -> MineSettings {
        self.check_units.get_or_insert(false);
        self.max_window.get_or_insert(1_000_000);
        self.accept.get_or_insert(crate::agent::Accept::Standalone);
        self.gp_batch.get_or_insert(1);
        self.refine_budget.get_or_insert(0);
        self
    }
}

impl RunPlan {
    fn of(args: &MineArgs, cfg: &Config) -> RunPlan {
        RunPlan {
            ideas: args.ideas.or(if args.hours.is_none() { Some(5) } else { None }),
            hours: args.hours,
            writer: args.writer().to_string(),
            llm: args.llm().to_string(),
            no_inner_loop: args.no_inner_loop,
            no_kb: args.no_kb,
            seed: args.seed.unwrap_or(0),
            model: (args.llm() == "local" && writes_with_llm(args.writer()) && args.replay.is_none()).then(|| crate::llm::model_path(args.model.as_deref())),
            spent_seconds: 0.0,
            start_combination: None,
            protocol: None,
            mine: cfg.mine.resolved(),
        }
    }

    /// The settings that make a run what it is, as flags.
    fn flags(&self) -> String {
        let mut f = format!("--writer {} --llm {}", self.writer, self.llm);
        if self.no_inner_loop {
            f += " --no-inner-loop";
        }
        if self.no_kb {
            f += " --no-kb";
        }
        if self.seed != 0 {
            f += &format!(" --seed {}", self.seed);
        }
        if let Some(m) = &self.model {
            f += &format!(" --model {}", m.display());
        }
        f
    }

    /// The accepted set's combination's valid Rank IC when the run started.
    pub(super) fn start_combination(&self) -> Option<f64> {
        self.start_combination
    }

    /// Wall time spent mining, over every session.
    pub(super) fn spent_seconds(&self) -> f64 {
        self.spent_seconds
    }

    pub(super) fn read(dir: &Path) -> Result<Option<RunPlan>> {
        let p = dir.join("run.json");
        match std::fs::read_to_string(&p) {
            Ok(text) => {
                let mut plan: RunPlan = serde_json::from_str(&text).with_context(|| format!("{}: not a run plan", p.display()))?;
                plan.mine = plan.mine.recorded_as_mined().resolved();
                if plan.llm == "local" && writes_with_llm(&plan.writer) && plan.model.is_none() {
                    plan.model = Some(crate::llm::small_gguf());
                }
                Ok(Some(plan))
            }
            // Runs of earlier versions have none.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(anyhow::Error::new(e).context(format!("cannot read {}", p.display()))),
        }
    }

    /// Written whole to a temporary file and renamed over the old one, so that a crash
    /// leaves either plan, never half of one.
    fn write(&self, dir: &Path) -> Result<()> {
        let tmp = dir.join("run.json.tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(self)?).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, dir.join("run.json")).with_context(|| format!("cannot write {}", dir.join("run.json").display()))
    }
}

/// A run directory this command made, removed again (on drop) if the set-up fails before
/// the run starts; cleared (`.0 = None`) once it has.
struct UnstartedRun<'p>(Option<&'p Path>);

impl Drop for UnstartedRun<'_> {
    fn drop(&mut self) {
        if let Some(dir) = self.0 {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

pub(super) fn read_log(path: &Path) -> Result<Vec<Outcome>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = std::fs::read_to_string(path)?;
    Ok(text.lines().filter_map(|l| serde_json::from_str::<Outcome>(l).ok()).collect())
}

pub fn run(mut args: MineArgs, cfg: &Config) -> Result<i32> {
    let mut cfg = cfg.with_metrics(&args.metrics);
    if let Some(a) = args.accept {
        cfg.mine.accept = Some(a);
    }
    if let Some(c) = args.combiner {
        cfg.mine.combiner = Some(c);
    }
    let cfg = &cfg;
    if args.resume.as_deref() == Some("") {
        let latest = latest_run(&runs_dir())?.with_context(|| format!("no runs in {} to resume", runs_dir().display()))?;
        eprintln!("resuming {latest}, the run written to last");
        args.resume = Some(latest);
    }
    let run_id = match &args.resume {
        Some(r) => r.clone(),
        None => args.run_id.clone().unwrap_or_else(|| format!("run{}", crate::kb::record::now())),
    };
    let run_dir = runs_dir().join(&run_id);
    if args.resume.is_some() && !run_dir.exists() {
        bail!("no run '{run_id}' in {}", runs_dir().display());
    }
    if args.resume.is_none() && run_dir.join("log.jsonl").exists() {
        bail!("run '{run_id}' already exists in {}: use --resume {run_id}", runs_dir().display());
    }
    let log_path = run_dir.join("log.jsonl");
    let done = read_log(&log_path)?;
    let saved = if args.resume.is_some() { RunPlan::read(&run_dir)? } else { None };
    if let Some(p) = &saved {
        // Settings not given take the run's own; one given otherwise is refused.
        let asked = RunPlan {
            llm: args.llm.clone().unwrap_or_else(|| p.llm.clone()),
            writer: args.writer.clone().unwrap_or_else(|| p.writer.clone()),
            no_inner_loop: args.no_inner_loop || p.no_inner_loop,
            no_kb: args.no_kb || p.no_kb,
            seed: args.seed.unwrap_or(p.seed),
            // (A run whose writer asks no local model has none to keep.)
            model: p.model.as_ref().map(|m| args.model.as_deref().map_or_else(|| m.clone(), |a| crate::llm::model_path(Some(a)))),
            ..p.clone()
        };
        if asked.flags() != p.flags() && args.replay.is_none() {
            bail!("run '{run_id}' was mined with {}; resume it with those settings (this command asks for {}), or start a new run", p.flags(), asked.flags());
        }
        let changed = p.mine.differences(&cfg.mine.resolved());
        if !changed.is_empty() {
            let list = changed.iter().map(|(k, then, now)| format!("{k} = {then} (the config now gives {now})")).collect::<Vec<_>>().join(", ");
            bail!("run '{run_id}' was mined with [mine] {list}; resume it with the settings it was started with (a run whose bar moved midway is no arm of a comparison), or start a new run");
        }
        (args.llm, args.writer) = (Some(p.llm.clone()), Some(p.writer.clone()));
        args.model = p.model.clone().or(args.model.take());
        (args.no_inner_loop, args.no_kb, args.seed) = (p.no_inner_loop, p.no_kb, Some(p.seed));
    }
    if let (None, Some(p)) = (&args.llm, &args.replay) {
        // A replay asks what the recorded run asked, and a local model's prompts carry a
        // grammar that a remote one's do not: the kind of model is the recording's.
        let m = recorded_model(p)?;
        args.llm = Some(if m.starts_with("local:") { "local".into() } else { m });
    }
    if args.llm().starts_with("openai:") && args.replay.is_none() && writes_with_llm(args.writer()) {
        // A missing key fails now, before a run directory is made and the data loaded.
        super::config::openai_endpoint(cfg.llm_url.as_deref())?;
    }
    // A resumed run goes on to the ideas or hours it was started with, unless told otherwise.
    let (ideas, hours) = match &saved {
        Some(p) if args.ideas.is_none() && args.hours.is_none() => {
            (p.ideas.map(|n| n.saturating_sub(done.len())), p.hours.map(|h| (h - p.spent_seconds / 3600.0).max(0.0)))
        }
        _ => (args.ideas, args.hours),
    };
    let mut plan = saved.unwrap_or_else(|| RunPlan::of(&args, cfg));
    let spent_before = plan.spent_seconds;

    let data = load_data(&args.data, cfg, args.json)?;
    let splits = crate::data::Splits::resolve(cfg.splits.as_ref(), &data);
    let mcfg = cfg.metrics();
    // Everything after the end of valid is dropped here: mining never sees the test period.
    let view = MiningView::new(&data, &splits, mcfg)?;
    if plan.protocol.is_none() && done.is_empty() {
        let c = view.train.config();
        plan.protocol = Some(Protocol {
            data: data.source.display().to_string(),
            fingerprint: data.fingerprint(),
            splits: splits.clone(),
            periods_seen: vec!["train".into(), "valid".into()],
            horizon: c.horizon,
            gap: c.gap,
            cost_bps: c.cost_bps,
        });
    }
    for f in &cfg.writer_fields {
        if !data.fields.contains_key(f) {
            bail!("writer_fields in the config: '{f}' is not a field of {} (its fields: {})", data.source.display(), data.fields.keys().cloned().collect::<Vec<_>>().join(", "));
        }
    }
    drop(data);
    let mut kb = super::kb::open(args.kb.as_deref(), cfg, true)?;
    // The accepted set is what candidates are compared and combined with: it must have
    // been scored at this run's label.
    let (h, g) = view.label();
    crate::kb::AlphaRecord::same_label(&kb.records(&crate::kb::Filter::new().is("status", "accepted"))?, h, g, "this run").map_err(anyhow::Error::msg)?;
    if args.resume.is_some() {
        // A run killed between storing a record and logging it left a record that no log
        // line names; its sequence number is mined again, so the record goes rather than
        // stand beside (or be silently replaced by) a different idea's.
        let logged: std::collections::HashSet<&str> = done.iter().map(|o| o.record_id.as_str()).collect();
        for r in kb.records(&crate::kb::Filter::new().is("run_id", run_id.as_str()))? {
            if !logged.contains(r.id.as_str()) {
                tracing::info!("{}: stored but never logged by the run that was stopped; removed", r.id);
                kb.remove(&r.id)?;
            }
        }
    }
    let sample = kb.behaviour_sample(&view.data, &splits)?;
    let (gp, python, random) = match args.writer() {
        "llm" => (false, false, false),
        "python" => (false, true, false),
        "gp" => (true, false, false),
        "random" => (true, false, true),
        w => bail!("unknown --writer '{w}': llm, python, gp or random"),
    };
    let constrained = args.llm() == "local";
    let price = cfg.prices.get(args.llm()).copied().unwrap_or_default();
    if args.budget_usd.is_some() && price.prompt == 0.0 && price.completion == 0.0 && !gp && args.llm() != "local" {
        bail!("--budget-usd needs a price for '{}': add [prices.\"{}\"] prompt = ..., completion = ... (USD per million tokens) to the config", args.llm(), args.llm());
    }
    let templates = Templates::load(&Templates::default_dir())?;
    let idea_file = args.idea_file.clone().unwrap_or_else(|| crate::checkout_dir().unwrap_or_default().join("alpha_kb/ideas.toml"));
    let library = ideas::load(&idea_file).map_err(anyhow::Error::msg)?;
    // The run directory is made only once every input has been read, and removed again if
    // the model or the writer cannot be set up: a mistyped path or setting leaves no empty
    // run behind.
    let mut unstarted = UnstartedRun((!run_dir.exists()).then_some(run_dir.as_path()));
    std::fs::create_dir_all(&run_dir).with_context(|| format!("cannot create {}", run_dir.display()))?;
    plan.write(&run_dir)?;
    let llm: Box<dyn LanguageModel> = if gp { Box::new(crate::llm::NoModel) } else { open_llm(&args, cfg, &run_dir)? };
    let extra_fields = cfg.writer_fields.clone();
    let mcfg = plan.mine.apply(MineConfig { seed: plan.seed, no_inner_loop: args.no_inner_loop, no_kb: args.no_kb, price, generation_size: args.generation_size.max(1), python, extra_fields, ..MineConfig::default() });
    let summaries_path = run_dir.join("summaries.jsonl");
    let miner = Miner::new(llm.as_ref(), &kb, &view, sample, mcfg.clone(), templates, run_id.clone(), constrained)?;
    unstarted.0 = None;
    if done.is_empty() && plan.start_combination.is_none() {
        plan.start_combination = Some(miner.combination_rank_ic()?).filter(|v| v.is_finite());
        plan.write(&run_dir)?;
    }

    let mut bandit = ideas::Bandit::new(&library);
    // Ideas the LLM generated earlier in this run (a resumed run keeps them).
    let ideas_path = run_dir.join("ideas.jsonl");
    if let Ok(text) = std::fs::read_to_string(&ideas_path) {
        for (i, line) in text.lines().enumerate() {
            let idea: ideas::Idea = serde_json::from_str(line).with_context(|| format!("{} line {}", ideas_path.display(), i + 1))?;
            bandit.add(idea);
        }
    }
    evolve::replay(&mut bandit, &done, plan.start_combination);
    // Actions start from accepted alphas' code, read from the KB: not for the GP and
    // Python writers, nor without the KB.
    let actions = !gp && !python && !args.no_kb;
    let pop = if gp && !random { miner.gp_population()? } else { Default::default() };
    let rng = crate::agent::gp::Rng::new(plan.seed ^ done.len() as u64);
    let target = ideas.unwrap_or(if hours.is_some() { usize::MAX } else { 5 });
    let deadline = hours.map(|h| std::time::Instant::now() + std::time::Duration::from_secs_f64(h * 3600.0));
    // SAFETY: installs a handler that only stores to an atomic.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };

    let pb = super::progress(if target == usize::MAX { 0 } else { target as u64 }, args.json, "mining");
    let mut log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path)?;
    let t0 = std::time::Instant::now();
    // Record ids carry a sequence number; a resumed run continues after the highest one
    // (with ideas in flight concurrently, the log is not in sequence order).
    let next_seq = done.iter().filter_map(|o| o.record_id.rsplit('-').next()?.parse::<usize>().ok()).max().map_or(0, |m| m + 1);
    // GP breeds one population, so its ideas run one at a time.
    let concurrency = if gp { 1 } else { args.concurrency.max(1) };
    let shared = std::sync::Mutex::new(Shared {
        bandit,
        pop,
        rng,
        next_seq,
        started: 0,
        used_tokens: done.iter().map(|o| o.prompt_tokens + o.completion_tokens).sum(),
        spent_usd: done.iter().map(|o| o.cost_usd).sum(),
        evaluations: done.iter().map(evaluations).sum(),
        stop: None,
        pending: 0,
    });
    // Signalled when the main thread has taken in an outcome: a worker picks its next idea
    // only once every finished outcome has updated the bandit (and a generation's new idea
    // is in), so one worker behaves exactly like a sequential run.
    let processed = std::sync::Condvar::new();
    let lock = || shared.lock().unwrap_or_else(|p| p.into_inner());
    let mut outcomes = done.clone();
    let mut failure: Option<anyhow::Error> = None;
    std::thread::scope(|scope| {
        // Bounded: a worker hands over its outcome before it starts another idea.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Outcome, crate::agent::AgentError>>(concurrency);
        for _ in 0..concurrency {
            let tx = tx.clone();
            let (miner, lock, args, processed) = (&miner, &lock, &args, &processed);
            scope.spawn(move || loop {
                let (idea, seq, generation) = {
                    let mut st = lock();
                    while st.pending > 0 && st.stop.is_none() {
                        st = processed.wait(st).unwrap_or_else(|p| p.into_inner());
                    }
                    let why = if st.stop.is_some() {
                        st.stop
                    } else if STOP.load(Ordering::SeqCst) {
                        Some("interrupted (Ctrl-C)")
                    } else if st.started >= target {
                        Some("done")
                    } else if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                        Some("time limit")
                    } else if args.budget_tokens.is_some_and(|b| st.used_tokens >= b) {
                        Some("token budget")
                    } else if args.budget_usd.is_some_and(|b| st.spent_usd >= b) {
                        Some("cost budget")
                    } else if args.budget_evals.is_some_and(|b| st.evaluations >= b) {
                        Some("evaluation budget")
                    } else {
                        None
                    };
                    if why.is_some() {
                        st.stop = why;
                        return;
                    }
                    // One read of the accepted set for both actions.
                    let open = if actions { miner.actions_open().unwrap_or_default() } else { Vec::new() };
                    let can = |a: &str| open.contains(&a);
                    let seq = st.next_seq;
                    let idea = match st.bandit.pick_arm(can) {
                        Some(ideas::Arm::Action(a)) => match miner.action_idea(&a, seq) {
                            Ok(Some(i)) => Some(i),
                            Ok(None) => st.bandit.pick(),
                            Err(e) => {
                                tracing::warn!("the {a} action could not start: {e}");
                                st.bandit.pick()
                            }
                        },
                        Some(ideas::Arm::Idea(i)) => Some(i),
                        None => None,
                    };
                    let Some(idea) = idea else {
                        st.stop = Some("no ideas left");
                        return;
                    };
                    st.started += 1;
                    st.next_seq += 1;
                    (idea, seq, (seq / mcfg.generation_size) as u32)
                };
                let o = if random {
                    let mut st = lock();
                    miner.mine_idea_random(&idea, generation, seq, &mut st.rng)
                } else if gp {
                    let mut st = lock();
                    let st = &mut *st;
                    miner.mine_idea_gp(&idea, generation, seq, &mut st.pop, &mut st.rng)
                } else {
                    miner.mine_idea(&idea, generation, seq)
                };
                let failed = o.is_err();
                lock().pending += 1;
                if tx.send(o).is_err() || failed {
                    return;
                }
            });
        }
        drop(tx);
        for o in rx {
            let mut o = match o {
                Ok(o) => o,
                Err(e) => {
                    let mut st = lock();
                    st.stop = Some("error");
                    st.pending = st.pending.saturating_sub(1);
                    processed.notify_all();
                    failure.get_or_insert(e.into());
                    continue;
                }
            };
            let step = (|| -> Result<()> {
                {
                    let reward = evolve::reward(Some(growth::current(&outcomes, plan.start_combination)), o.combination);
                    let mut st = lock();
                    st.bandit.update(&o.family, reward);
                    st.used_tokens += o.prompt_tokens + o.completion_tokens;
                    st.spent_usd += o.cost_usd;
                    st.evaluations += evaluations(&o);
                }
                plan.spent_seconds = spent_before + t0.elapsed().as_secs_f64();
                o.at_seconds = Some(plan.spent_seconds);
                writeln!(log, "{}", serde_json::to_string(&o)?)?;
                log.flush()?;
                plan.write(&run_dir)?;
                outcomes.push(o);
                let g = mcfg.generation_size.max(1);
                if !gp && outcomes.len() % g == 0 {
                    let generation = ((outcomes.len() - 1) / g) as u32;
                    let (lesson, tk) = miner.summarize_generation(generation, &outcomes[outcomes.len() - g..])?;
                    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&summaries_path)?;
                    writeln!(f, "{}", serde_json::to_string(&lesson)?)?;
                    // A new idea for the family the KB is thinnest in, mined next in that family.
                    let bandit = lock().bandit.clone();
                    let (idea, tk2) = miner.generate_idea(&bandit, outcomes.len(), &lesson.text)?;
                    let mut st = lock();
                    st.used_tokens += tk.0 + tk.1 + tk2.0 + tk2.1;
                    st.spent_usd += mcfg.price.cost(tk.0 + tk2.0, tk.1 + tk2.1);
                    if let Some(idea) = idea {
                        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&ideas_path)?;
                        writeln!(f, "{}", serde_json::to_string(&idea)?)?;
                        st.bandit.add(idea);
                    }
                }
                let acc = outcomes.iter().filter(|o| o.status == "accepted").count();
                let attempts: usize = outcomes.iter().map(|o| o.attempts.unwrap_or(usize::from(o.valid_rank_ic.is_some()))).sum();
                let now = growth::current(&outcomes, plan.start_combination);
                let grew = now - plan.start_combination.unwrap_or(f64::NAN);
                let st = lock();
                pb.set_message(format!("accepted {acc}, combination valid Rank IC {now:.4} ({grew:+.4}), {attempts} tried on valid, {} tokens, ${:.2}", st.used_tokens, st.spent_usd));
                pb.inc(1);
                Ok(())
            })();
            let mut st = lock();
            st.pending = st.pending.saturating_sub(1);
            if let Err(e) = step {
                st.stop = Some("error");
                failure.get_or_insert(e);
            }
            processed.notify_all();
        }
    });
    if let Some(e) = failure {
        return Err(e.context(format!("mining run '{run_id}' stopped; --resume {run_id} continues it")));
    }
    let stop_reason = lock().stop.unwrap_or("done");
    pb.finish_and_clear();
    drop(miner);
    kb.optimize()?;
    let ended = RunSummary { id: &run_id, outcomes: &outcomes, new: outcomes.len() - done.len(), stopped: stop_reason, secs: t0.elapsed().as_secs_f64(), kb: Some(kb.location()), plan: Some(&plan) };
    summary(ended, args.json)?;
    Ok(0)
}

/// A run's outcomes and how it ended, as the summary prints them.
pub(super) struct RunSummary<'a> {
    pub(super) id: &'a str,
    pub(super) outcomes: &'a [Outcome],
    /// Outcomes of this session (the last ones).
    pub(super) new: usize,
    /// Why the run stopped ("recorded" for one read back).
    pub(super) stopped: &'a str,
    pub(super) secs: f64,
    /// Where the records went (for a run just mined).
    pub(super) kb: Option<String>,
    /// What the run was started with (its settings resolved).
    pub(super) plan: Option<&'a RunPlan>,
}

/// Candidates an idea evaluated (logs written before they were counted: one per round).
fn evaluations(o: &Outcome) -> usize {
    o.evaluations.unwrap_or(o.rounds as usize)
}

/// A run's totals: (accepted, tokens, candidates tried on valid, seconds in the writer,
/// judge, evaluation and KB, candidates evaluated, evaluated per second of evaluation).
pub(super) fn totals(all: &[Outcome]) -> (usize, u64, usize, [f64; 4], usize, f64) {
    let acc = all.iter().filter(|o| o.status == "accepted").count();
    let tokens: u64 = all.iter().map(|o| o.prompt_tokens + o.completion_tokens).sum();
    // Logs written before attempts were counted hold none: such an idea counts as one if
    // its alpha reached valid.
    let attempts: usize = all.iter().map(|o| o.attempts.unwrap_or(o.valid_rank_ic.is_some() as usize)).sum();
    let t = all.iter().fold([0.0; 4], |a, o| [a[0] + o.timings.writer, a[1] + o.timings.judge, a[2] + o.timings.eval, a[3] + o.timings.kb]);
    let evaluations: usize = all.iter().map(evaluations).sum();
    (acc, tokens, attempts, t, evaluations, evaluations as f64 / t[2].max(1e-9))
}

/// A run's summary as `runs show --json` prints it (and `report --run` shows it).
pub(super) fn summary_json(s: &RunSummary<'_>) -> serde_json::Value {
    let &RunSummary { id: run_id, outcomes: all, new, stopped: why, secs, plan, .. } = s;
    let (acc, tokens, attempts, t, evaluations, per_second) = totals(all);
    let start = plan.and_then(|p| p.start_combination);
    serde_json::json!({
        "run_id": run_id, "stopped": why, "ideas": all.len(), "new_ideas": new, "accepted": acc, "attempts": attempts, "evaluations": evaluations, "evaluations_per_second": per_second, "tokens": tokens,
        "cost_usd": all.iter().map(|o| o.cost_usd).sum::<f64>(),
        "seconds": secs, "time_split": {"writer": t[0], "judge": t[1], "eval": t[2], "kb": t[3]},
        "combination": {"start": start, "now": growth::current(all, start), "by_hour": growth::by_hour(all, start), "by_generation": growth::by_generation(all, start)},
        "protocol": plan.and_then(|p| p.protocol.as_ref()),
        "multiple_testing": {"candidates_on_valid": attempts, "bonferroni_t_5pct": crate::backtest::stats::bonferroni_t(0.05, attempts.max(1))},
        "settings": plan.map(|p| p.flags()),
        "plan": plan, "outcomes": all,
    })
}

/// A recorded run: its outcomes, its plan and the seconds its ideas took.
pub(super) fn recorded(id: Option<String>) -> Result<(String, Vec<Outcome>, Option<RunPlan>, f64)> {
    let dir = runs_dir();
    let id = match id {
        Some(id) => id,
        None => latest_run(&dir)?.with_context(|| format!("no runs in {} yet: `alphaloop mine` starts one", dir.display()))?,
    };
    let p = dir.join(&id).join("log.jsonl");
    if !p.exists() {
        bail!("no run '{id}' in {}", dir.display());
    }
    let o = read_log(&p)?;
    let plan = RunPlan::read(&dir.join(&id))?;
    let secs = o.iter().map(|x| x.timings.writer + x.timings.judge + x.timings.eval + x.timings.kb).sum();
    Ok((id, o, plan, secs))
}

fn summary(s: RunSummary<'_>, json: bool) -> Result<()> {
    if json {
        println!("{}", summary_json(&s));
        return Ok(());
    }
    let RunSummary { id: run_id, outcomes: all, new, stopped: why, secs, kb, plan } = s;
    let (acc, tokens, attempts, t, evaluations, per_second) = totals(all);
    let start = plan.and_then(|p| p.start_combination);
    let (hours, generations) = (growth::by_hour(all, start), growth::by_generation(all, start));
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|o| {
            let f = |x: Option<f64>| num(x.unwrap_or(f64::NAN));
            vec![o.record_id.clone(), o.family.clone(), o.status.clone(), short(&o.reason, 48), o.rounds.to_string(), f(o.train_rank_ic), f(o.valid_rank_ic), short(&o.code, 60)]
        })
        .collect();
    println!("{}", render(&["record", "family", "status", "why", "rounds", "train rank_ic", "valid rank_ic", "code"], &rows));
    let total: f64 = t.iter().sum::<f64>().max(1e-9);
    println!(
        "run {run_id}: {why}; {} ideas ({} this session), {evaluations} candidates evaluated ({per_second:.1} a second of evaluation), {attempts} tried on valid, {acc} accepted, {tokens} tokens, {secs:.0} s; time split writer {:.0}%, judge {:.0}%, evaluation {:.1}%, KB {:.1}%",
        all.len(),
        new,
        100.0 * t[0] / total,
        100.0 * t[1] / total,
        100.0 * t[2] / total,
        100.0 * t[3] / total
    );
    let now = growth::current(all, start);
    if now.is_finite() {
        println!("the accepted set's combination: valid Rank IC {} at the start, {} now", num(start.unwrap_or(f64::NAN)), num(now));
        let table = |steps: &[growth::Step], what: &str| {
            let rows: Vec<Vec<String>> = steps
                .iter()
                .map(|s| vec![s.at.to_string(), s.ideas.to_string(), s.accepted.to_string(), s.attempts.to_string(), num(s.combination), s.tokens.to_string(), format!("{:.2}", s.cost_usd)])
                .collect();
            println!("{}", render(&[what, "ideas", "accepted", "tried on valid", "combination valid rank_ic", "tokens", "cost usd"], &rows));
        };
        if hours.len() > 1 {
            table(&hours, "by hour");
        }
        if generations.len() > 1 {
            table(&generations, "by generation");
        }
    }
    if let Some(p) = plan.and_then(|p| p.protocol.as_ref()) {
        let s = &p.splits;
        println!(
            "protocol: {} ({}); train {}–{}, valid {}–{} (test {}–{} never loaded); label {} day(s) after a gap of {}, costs {} bps; {attempts} candidates tried on valid, so a valid t must exceed {:.2} to stand out (Bonferroni, 5 %)",
            p.data,
            p.fingerprint,
            s.train.0,
            s.train.1,
            s.valid.0,
            s.valid.1,
            s.test.0,
            s.test.1,
            p.horizon,
            p.gap,
            p.cost_bps,
            crate::backtest::stats::bonferroni_t(0.05, attempts.max(1))
        );
    }
    if let Some(p) = plan {
        let mine = serde_json::to_value(&p.mine).unwrap_or_default();
        let mine = mine.as_object().map(|m| m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")).unwrap_or_default();
        println!("settings: {}; [mine] {mine}", p.flags());
    }
    let log = runs_dir().join(run_id).join("log.jsonl");
    match kb {
        Some(kb) => println!("records are in the knowledge base {kb}; the run log is {}", log.display()),
        None => println!("the run log is {}", log.display()),
    }
    Ok(())
}

/// A run as a person would rather look at it than read: each idea's valid Rank IC (its
/// final candidate's) and the best accepted one so far, against the idea's number.
fn plot_run(id: &str, o: &[Outcome], path: &Path) -> Result<()> {
    use crate::model::plot::{lines, Series};
    let each = o.iter().enumerate().map(|(i, x)| ((i + 1) as f64, x.valid_rank_ic.unwrap_or(f64::NAN))).collect();
    let mut best = f64::NAN;
    let so_far = o
        .iter()
        .enumerate()
        .map(|(i, x)| {
            if x.status == "accepted" {
                best = best.max(x.valid_rank_ic.unwrap_or(f64::NAN));
            }
            ((i + 1) as f64, best)
        })
        .collect();
    let series = [Series::dots("valid Rank IC of each idea", each), Series::line("best accepted so far", so_far)];
    lines(path, &format!("mining run {id}"), "idea", "valid Rank IC", &series).map_err(anyhow::Error::msg)
}

#[derive(clap::Subcommand, Debug)]
pub enum RunsCmd {
    /// Every run with its summary.
    List,
    /// One run's ideas and outcomes.
    Show {
        /// The run's id (`alphaloop runs` lists them; default: the run written to last).
        id: Option<String>,
        /// Also draw the run into a PNG: each idea's valid Rank IC and the best accepted one so far.
        #[arg(long)]
        plot: Option<PathBuf>,
    },
}

/// The run in `dir` whose log was written to last (a resumed run counts as recent).
fn latest_run(dir: &Path) -> Result<Option<String>> {
    if !dir.exists() {
        return Ok(None);
    }
    let mut best: Option<(std::time::SystemTime, String)> = None;
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?.filter_map(|e| e.ok()) {
        let Ok(t) = e.path().join("log.jsonl").metadata().and_then(|m| m.modified()) else { continue };
        if best.as_ref().is_none_or(|(b, _)| t > *b) {
            best = Some((t, e.file_name().to_string_lossy().into_owned()));
        }
    }
    Ok(best.map(|(_, id)| id))
}

pub fn runs(cmd: Option<RunsCmd>, json: bool) -> Result<i32> {
    let dir = runs_dir();
    match cmd.unwrap_or(RunsCmd::List) {
        RunsCmd::List => {
            let mut rows = Vec::new();
            let mut out = Vec::new();
            if dir.exists() {
                let mut ids: Vec<String> = std::fs::read_dir(&dir)?.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
                ids.sort();
                for id in ids {
                    let o = read_log(&dir.join(&id).join("log.jsonl"))?;
                    let acc = o.iter().filter(|x| x.status == "accepted").count();
                    let tok: u64 = o.iter().map(|x| x.prompt_tokens + x.completion_tokens).sum();
                    let best = o.iter().filter(|x| x.status == "accepted").filter_map(|x| x.valid_rank_ic).fold(f64::NAN, f64::max);
                    // Which arm a run is (runs of earlier versions kept no plan).
                    let flags = RunPlan::read(&dir.join(&id)).ok().flatten().map(|p| p.flags());
                    rows.push(vec![id.clone(), flags.clone().unwrap_or_else(|| "-".into()), o.len().to_string(), acc.to_string(), num(best), tok.to_string()]);
                    out.push(serde_json::json!({"id": id, "settings": flags, "ideas": o.len(), "accepted": acc, "best_valid_rank_ic": best, "tokens": tok}));
                }
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                println!("{}", render(&["run", "settings", "ideas", "accepted", "best valid rank_ic", "tokens"], &rows));
            }
        }
        RunsCmd::Show { id, plot } => {
            if let Some(png) = &plot {
                crate::model::plot::check_png(png).map_err(anyhow::Error::msg)?;
            }
            let (id, o, plan, secs) = recorded(id)?;
            summary(RunSummary { id: &id, outcomes: &o, new: o.len(), stopped: "recorded", secs, kb: None, plan: plan.as_ref() }, json)?;
            if let Some(path) = plot {
                plot_run(&id, &o, &path)?;
                super::wrote(&path, json);
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_run_is_the_one_written_to_last() {
        let dir = tempfile::tempdir().expect("tmp");
        assert_eq!(latest_run(&dir.path().join("absent")).expect("ok"), None);
        let t0 = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        // "b" sorts after "a" by name but was written first; "c" has no log.
        for (id, secs) in [("a", 20), ("b", 10)] {
            std::fs::create_dir(dir.path().join(id)).expect("mkdir");
            let f = std::fs::File::create(dir.path().join(id).join("log.jsonl")).expect("log");
            f.set_modified(t0 + std::time::Duration::from_secs(secs)).expect("mtime");
        }
        std::fs::create_dir(dir.path().join("c")).expect("mkdir");
        assert_eq!(latest_run(dir.path()).expect("ok").as_deref(), Some("a"));
    }
}

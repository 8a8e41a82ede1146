//! `alphaloop report`: an alpha's tearsheet, a mining run's, the knowledge base's or the
//! combined model's page, each as one self-contained HTML file.

use super::{load_data, Config, DataArgs};
use crate::data::Period;
use crate::expr::Chain;
use crate::seeds::{self, AlphaSet};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// An alpha expression, or a knowledge-base record (`alpha:ID`, or its bare id).
    #[arg(allow_hyphen_values = true, required_unless_present_any = ["run", "model", "kb"], conflicts_with_all = ["run", "model"])]
    pub target: Option<String>,
    /// A mining run's page instead (`alphaloop runs` lists them; no id: the run written to
    /// last): its combination's growth, time split, accepted alphas and their correlations,
    /// and the reasons the rest were turned away.
    #[arg(long, num_args = 0..=1, default_missing_value = "", conflicts_with = "model")]
    pub run: Option<String>,
    /// A combined model's page instead (a file `alphaloop train` saved): the model against
    /// its baselines by split, feature importance, and its walk-forward windows if it was
    /// walked forward.
    #[arg(long, value_name = "FILE")]
    pub model: Option<PathBuf>,
    /// With --model: also the self-improvement curve `alphaloop train --curve DIR` wrote.
    #[arg(long, value_name = "DIR", requires = "model")]
    pub curve: Option<PathBuf>,
    /// The HTML file to write.
    #[arg(short, long, default_value = "report.html")]
    pub output: PathBuf,
    #[command(flatten)]
    pub data: DataArgs,
    /// Periods side by side in the metrics table (as `eval --period`: train, valid, test,
    /// all or START:END, comma-separated); the charts show the first.
    #[arg(long, default_value = "valid", value_delimiter = ',')]
    pub period: Vec<Period>,
    #[command(flatten)]
    pub metrics: super::config::MetricsSettings,
    /// Alpha definitions that `alpha:ID` may refer to (default: alpha_kb/seeds/alpha101.toml).
    #[arg(long)]
    pub alphas: Option<PathBuf>,
    /// The knowledge base: with a target, the one whose records it and `alpha:ID` may
    /// name; alone (`--kb`, or `--kb LOCATION`), the knowledge base's own page: its growth,
    /// families, best alphas on valid, and every accepted alpha on test beside valid with
    /// the multiple-testing bar (as `kb holdout`).
    #[arg(long, num_args = 0..=1, default_missing_value = "", value_name = "LOCATION")]
    pub kb: Option<String>,
    /// Print the page's numbers as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ReportArgs, cfg: &Config) -> Result<i32> {
    match args.output.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("html") || e.eq_ignore_ascii_case("htm") => {}
        _ => bail!("{}: a report is an HTML file; give a name ending in .html", args.output.display()),
    }
    if let Some(run) = &args.run {
        return run_report(&args, run, cfg);
    }
    if let Some(model) = &args.model {
        return model_report(&args, model);
    }
    let Some(target) = args.target.clone() else {
        return kb_report(&args, cfg);
    };
    let files = match &args.alphas {
        Some(p) => AlphaSet::from_defs(&seeds::load(p)?),
        None => seeds::default_set()?,
    };
    let loc = kb_flag(&args);
    let kb = super::kb::LazyKb::new(loc.as_deref(), cfg);
    let record = record_of(&target, &kb)?;
    let expr = match &record {
        Some(r) if r.kind != crate::kb::Kind::Expression => bail!("{} is a {:?} alpha: reports chart expressions", r.id, r.kind),
        Some(r) => r.code.clone(),
        None => target,
    };
    let data = load_data(&args.data, cfg, args.json)?;
    let splits = crate::data::Splits::resolve(cfg.splits.as_ref(), &data);
    let mcfg = cfg.with_metrics(&args.metrics).metrics();
    let alphas = Chain(vec![&files, &kb]);
    let report = crate::report::alpha::build(&expr, &data, &splits, &args.period, &mcfg, &alphas)?;
    let html = crate::report::alpha_page(&report, record.as_ref());
    std::fs::write(&args.output, html).with_context(|| format!("cannot write {}", args.output.display()))?;
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        if let (Some(r), Some(o)) = (&record, v.as_object_mut()) {
            o.insert("record".into(), crate::kb::record_json(r)?);
        }
        println!("{}", serde_json::to_string(&v)?);
    }
    super::wrote(&args.output, args.json);
    Ok(0)
}

/// The KB record `target` names (`alpha:ID` or a bare id), if the KB holds it; anything
/// else is an expression (`close`, or `alpha:ID` of a seed file, which evaluation resolves).
fn record_of(target: &str, kb: &super::kb::LazyKb) -> Result<Option<crate::kb::AlphaRecord>> {
    let id = target.strip_prefix("alpha:").unwrap_or(target);
    let word = !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !word || crate::data::STORED_FIELDS.contains(&id) {
        return Ok(None);
    }
    Ok(kb.get().ok().map(|k| k.get(id)).transpose()?.flatten())
}

/// The accepted alphas a run page correlates at most (the best by valid Rank IC).
const MAX_CORRELATED: usize = 40;

fn run_report(args: &ReportArgs, run: &str, cfg: &Config) -> Result<i32> {
    let (id, outcomes, plan, secs) = super::mine::recorded((!run.is_empty()).then(|| run.to_string()))?;
    let summary = super::mine::summary_json(&super::mine::RunSummary { id: &id, outcomes: &outcomes, new: outcomes.len(), stopped: "recorded", secs, kb: None, plan: plan.as_ref() });
    let mut acc: Vec<&crate::agent::Outcome> = outcomes.iter().filter(|o| o.status == "accepted").collect();
    acc.sort_by(|a, b| b.valid_rank_ic.unwrap_or(f64::NAN).total_cmp(&a.valid_rank_ic.unwrap_or(f64::NAN)));
    acc.truncate(MAX_CORRELATED);
    let mut corr = crate::report::run::Correlations::default();
    if acc.len() >= 2 {
        let data = load_data(&args.data, cfg, args.json)?;
        let splits = crate::data::Splits::resolve(cfg.splits.as_ref(), &data);
        let prep = crate::backtest::prepare(&data, &Period::Valid, &splits, cfg.with_metrics(&args.metrics).metrics())?;
        let (start, end) = prep.scorer.span();
        let files = seeds::default_set()?;
        let loc = kb_flag(args);
        let kb = super::kb::LazyKb::new(loc.as_deref(), cfg);
        let alphas = Chain(vec![&files, &kb]);
        let mut ranks = Vec::new();
        for o in &acc {
            let signal = crate::expr::eval_expr(&o.code, &prep.data, &alphas).map_err(|e| anyhow::anyhow!("accepted alpha {}: {}", o.record_id, e.render()))?;
            corr.ids.push(o.record_id.clone());
            ranks.push(crate::kb::ranks::rank_rows(&signal, start, end));
        }
        corr.matrix = ranks.iter().map(|a| ranks.iter().map(|b| crate::kb::ranks::pooled_corr(a, b, end - start).unwrap_or(f64::NAN)).collect()).collect();
    }
    let report = crate::report::run::RunReport::new(summary, corr);
    write(args, &crate::report::run::run_page(&report), &report)
}

/// The `--kb` location, else `ALPHALOOP_KB` (read here, not by clap, so that the variable
/// alone does not turn a bare `alphaloop report` into the KB page), else the default.
fn kb_flag(args: &ReportArgs) -> Option<String> {
    match args.kb.as_deref() {
        Some("") | None => std::env::var("ALPHALOOP_KB").ok().filter(|v| !v.is_empty()),
        Some(loc) => Some(loc.to_string()),
    }
}

/// The best accepted alphas the KB page lists by valid Rank IC.
const BEST: usize = 20;

fn kb_report(args: &ReportArgs, cfg: &Config) -> Result<i32> {
    let kb = super::kb::open(kb_flag(args).as_deref(), cfg, false)?;
    let accepted = crate::kb::Filter::new().is("status", "accepted");
    let best = kb.top("rank_ic", "valid", BEST, &accepted)?;
    let holdout = if best.is_empty() { None } else { Some(super::kb::holdout_view(&kb, &args.data, None, &cfg.with_metrics(&args.metrics), args.json)?) };
    let report = crate::report::kb::KbReport::new(kb.location(), kb.stats()?, kb.records(&crate::kb::Filter::new())?, best, holdout);
    write(args, &crate::report::kb::kb_page(&report), &report)
}

fn model_report(args: &ReportArgs, file: &std::path::Path) -> Result<i32> {
    let m = crate::model::SavedModel::load(file)?;
    let train = m.report.with_context(|| format!("{}: the model file keeps no training report (it was saved by an alphaloop before reports were kept); train it again to draw its page", file.display()))?;
    let curve = match &args.curve {
        None => Vec::new(),
        Some(dir) => {
            let path = dir.join("curve.csv");
            let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {} (`alphaloop train --curve {}` writes it)", path.display(), dir.display()))?;
            crate::report::model::read_curve(&text, &path.display().to_string())?
        }
    };
    let report = crate::report::model::ModelReport { file: file.display().to_string(), train, curve };
    write(args, &crate::report::model::model_page(&report), &report)
}

/// Writes the page and, with --json, prints the numbers it shows.
fn write(args: &ReportArgs, html: &str, numbers: &impl serde::Serialize) -> Result<i32> {
    std::fs::write(&args.output, html).with_context(|| format!("cannot write {}", args.output.display()))?;
    if args.json {
        println!("{}", serde_json::to_string(numbers)?);
    }
    super::wrote(&args.output, args.json);
    Ok(0)
}

//! `alphaloop report`: an alpha's tearsheet as one self-contained HTML file.

use super::{load_data, Config, DataArgs};
use crate::data::Period;
use crate::expr::Chain;
use crate::seeds::{self, AlphaSet};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// An alpha expression, or a knowledge-base record (`alpha:ID`, or its bare id).
    #[arg(allow_hyphen_values = true, required_unless_present = "run", conflicts_with = "run")]
    pub target: Option<String>,
    /// A mining run's page instead (`alphaloop runs` lists them; no id: the run written to
    /// last): its combination's growth, time split, accepted alphas and their correlations,
    /// and the reasons the rest were turned away.
    #[arg(long, num_args = 0..=1, default_missing_value = "")]
    pub run: Option<String>,
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
    /// The knowledge base whose records the target or `alpha:ID` may name.
    #[arg(long, env = "ALPHALOOP_KB")]
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
    let target = args.target.clone().unwrap_or_default();
    let files = match &args.alphas {
        Some(p) => AlphaSet::from_defs(&seeds::load(p)?),
        None => seeds::default_set()?,
    };
    let kb = super::kb::LazyKb::new(args.kb.as_deref(), cfg);
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
        let kb = super::kb::LazyKb::new(args.kb.as_deref(), cfg);
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
    std::fs::write(&args.output, crate::report::run::run_page(&report)).with_context(|| format!("cannot write {}", args.output.display()))?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    }
    super::wrote(&args.output, args.json);
    Ok(0)
}

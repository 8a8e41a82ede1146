//! `alphaloop train` and `alphaloop predict`: the combined XGBoost model over mined alphas.

use super::table::{num, render};
use super::{load_data, Config, DataArgs};
use crate::data::{Date, MarketData};
use crate::expr::{AlphaResolver, Chain, Compiler, ExprError, Schema};
use crate::kb::retrieve::cosine;
use crate::kb::{Filter, Kb};
use crate::model::{self, Feature, Report, StopOn, Target, TrainConfig, TrainResult, Transform};
use crate::seeds::{self, AlphaDef, AlphaSet};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct TrainArgs {
    /// Knowledge base the features come from (default: the config's, else alpha_kb/store).
    #[arg(long, env = "ALPHALOOP_KB")]
    pub kb: Option<String>,
    #[command(flatten)]
    pub metrics: super::config::MetricsSettings,
    #[command(flatten)]
    pub data: DataArgs,
    /// Use the N best accepted alphas (by --by on --split), decorrelated.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Metric that ranks the alphas for --top (rank_ic, ic, icir, sharpe, ...).
    #[arg(long, default_value = "rank_ic")]
    pub by: String,
    /// Split the selection looks at: train or valid (never test).
    #[arg(long, default_value = "valid")]
    pub split: String,
    /// Greedy decorrelation: skip an alpha whose |behaviour correlation| with one already
    /// chosen exceeds this.
    #[arg(long, default_value_t = 0.7)]
    pub max_corr: f64,
    /// Use exactly these KB alphas (comma-separated ids) instead of --top.
    #[arg(long, value_delimiter = ',')]
    pub ids: Vec<String>,
    /// Use the alphas of an alpha file as the features instead of KB alphas: without FILE
    /// the alpha101 seeds (alpha_kb/seeds/alpha101.toml); alpha_kb/seeds/alpha158.toml is
    /// Qlib's Alpha158.
    #[arg(long, conflicts_with = "ids", num_args = 0..=1, default_missing_value = "", value_name = "FILE")]
    pub seeds: Option<String>,
    /// The baseline trained through the same model beside the chosen features: an alpha
    /// file (default: the alpha101 seeds, unless --seeds made them the features;
    /// alpha_kb/seeds/alpha158.toml for Qlib's Alpha158).
    #[arg(long, value_name = "FILE", conflicts_with = "no_seed_baseline")]
    pub baseline: Option<PathBuf>,
    /// Skip the baseline (the alpha101 seeds or --baseline) through the same model.
    #[arg(long)]
    pub no_seed_baseline: bool,
    /// Per-date transform of the features.
    #[arg(long, value_enum, default_value = "rank")]
    pub transform: Transform,
    /// What the booster is fit to.
    #[arg(long, value_enum, default_value = "rank")]
    pub target: Target,
    /// Early-stopping criterion on the valid split.
    #[arg(long, value_enum, default_value = "rank-ic")]
    pub stop_on: StopOn,
    /// Most boosting rounds (trees).
    #[arg(long, default_value_t = 200)]
    pub max_rounds: u32,
    /// Stop after this many rounds without improvement on valid.
    #[arg(long, default_value_t = 20)]
    pub patience: u32,
    /// Learning rate.
    #[arg(long, default_value_t = 0.05)]
    pub eta: f64,
    /// Depth of each tree.
    #[arg(long, default_value_t = 4)]
    pub max_depth: u32,
    /// L2 regularisation.
    #[arg(long, default_value_t = 10.0)]
    pub lambda: f64,
    /// Least hessian weight in a leaf (rows, for squared error): keeps leaves from fitting a few stocks.
    #[arg(long, default_value_t = 200.0)]
    pub min_child_weight: f64,
    /// Also walk the model forward through test: refit it every N months on every label
    /// known by then (train, valid and the test dates already past), with the tree count
    /// chosen on valid, and report the refits' test metrics beside the fixed model's.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "curve")]
    pub refit_months: Option<u32>,
    /// Where to save the model (JSON: booster, features, settings, data fingerprint).
    #[arg(long, default_value = "alpha_kb/models/latest.json")]
    pub out: PathBuf,
    /// Instead of one model: retrain on the first k accepted alphas (KB order) for
    /// k = 5, 10, 20, ... and write curve.csv and curve.png into this directory.
    #[arg(long)]
    pub curve: Option<PathBuf>,
    /// With --curve: only the points from k = K on, K itself first. The points below K
    /// are the same for every KB that starts with the same K alphas, as a study's runs
    /// all do: computed once for the start, not again for each run.
    #[arg(long, requires = "curve", value_name = "K")]
    pub curve_from: Option<usize>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct PredictArgs {
    /// A model saved by `alphaloop train` (default: where train saves it).
    #[arg(long, default_value = "alpha_kb/models/latest.json")]
    pub model: PathBuf,
    /// The label the scores are for: a model fit to another is refused.
    #[command(flatten)]
    pub metrics: super::config::MetricsSettings,
    #[command(flatten)]
    pub data: DataArgs,
    /// Date to score (default: the last date of the data).
    #[arg(long)]
    pub date: Option<Date>,
    /// Write the scores to a .parquet or .csv file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the scores as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print only the N best and the N worst (the two legs of a book); --out and --json
    /// keep every stock.
    #[arg(short = 'n', long)]
    pub n: Option<usize>,
}

/// The alphas of an alpha file that compile on this data (of the seeds, the `cap` one does
/// not), and the file's definitions, which its `alpha:ID` names before those of `others`.
fn seed_features(data: &MarketData, others: &dyn AlphaResolver, file: &Path) -> Result<(Vec<Feature>, AlphaSet)> {
    let defs = seeds::load(file)?;
    let own = AlphaSet::from_defs(&defs);
    let (features, left_out) = compile_features(defs, data, &Chain(vec![&own, others]));
    for (id, e) in left_out {
        tracing::warn!("seed {id} left out: {e}");
    }
    Ok((features, own))
}

/// The combined model's features from alpha definitions, each compiled against `data`'s
/// fields and `alphas` first: those that compile, and the id and error of each that does
/// not (which would otherwise fail the training midway, unnamed).
pub fn compile_features(defs: Vec<AlphaDef>, data: &MarketData, alphas: &dyn AlphaResolver) -> (Vec<Feature>, Vec<(String, ExprError)>) {
    let mut c = Compiler::new(Schema::of(data), alphas);
    let (mut features, mut left_out) = (Vec::new(), Vec::new());
    for d in defs {
        match c.add(&d.formula) {
            Ok(_) => features.push(Feature { id: d.id, code: d.formula }),
            Err(e) => left_out.push((d.id, e)),
        }
    }
    (features, left_out)
}

/// Features from the KB: explicit ids, or the top N by a train/valid metric, greedily
/// decorrelated on behaviour vectors; each must have been scored at the model's label
/// `(horizon, gap)`.
fn kb_features(kb: &Kb, args: &TrainArgs, label: (usize, usize)) -> Result<Vec<Feature>> {
    let same = |recs: &[crate::kb::AlphaRecord]| crate::kb::AlphaRecord::same_label(recs, label.0, label.1, "this model").map_err(anyhow::Error::msg);
    if !args.ids.is_empty() {
        return args
            .ids
            .iter()
            .map(|id| {
                let r = kb.get(id)?.with_context(|| format!("no record '{id}' in {}", kb.location()))?;
                if r.kind != crate::kb::Kind::Expression {
                    bail!("'{id}' is a {:?} alpha; the combined model takes expressions", r.kind);
                }
                same(std::slice::from_ref(&r))?;
                Ok(Feature { id: r.id, code: r.code })
            })
            .collect();
    }
    let cands = kb.top(&args.by, &args.split, usize::MAX, &Filter::new().is("status", "accepted").is("kind", "expression"))?;
    same(&cands)?;
    let mut chosen: Vec<(Feature, Option<Vec<f32>>)> = Vec::new();
    for r in cands {
        if chosen.len() >= args.top {
            break;
        }
        let b = kb.get_with_behaviour(&r.id)?.and_then(|x| x.1);
        let too_close = b
            .as_ref()
            .is_some_and(|b| chosen.iter().any(|(_, c)| c.as_ref().is_some_and(|c| cosine(b, c).abs() > args.max_corr)));
        if !too_close {
            chosen.push((Feature { id: r.id, code: r.code }, b));
        }
    }
    if chosen.is_empty() {
        bail!("the knowledge base {} has no accepted expression alphas with {} on {}; run `alphaloop kb import alpha_kb/seeds/alpha101.toml` or a mining run first, or use --seeds", kb.location(), args.by, args.split);
    }
    Ok(chosen.into_iter().map(|c| c.0).collect())
}

fn config(args: &TrainArgs) -> TrainConfig {
    TrainConfig {
        transform: args.transform,
        target: args.target,
        stop_on: args.stop_on,
        max_rounds: args.max_rounds,
        patience: args.patience,
        eta: args.eta,
        max_depth: args.max_depth,
        lambda: args.lambda,
        min_child_weight: args.min_child_weight,
        refit_months: args.refit_months,
        ..TrainConfig::default()
    }
}

pub fn run_train(args: TrainArgs, cfg: &Config) -> Result<i32> {
    let cfg = &cfg.with_metrics(&args.metrics);
    // Checked first: it is the arguments' fault, whatever the data and the KB hold.
    if args.split == "test" && args.seeds.is_none() && args.ids.is_empty() && args.curve.is_none() {
        bail!("features are never chosen on the test split: use --split train or valid");
    }
    let data = load_data(&args.data, cfg, args.json)?;
    let splits = crate::data::Splits::resolve(cfg.splits.as_ref(), &data);
    let mcfg = cfg.metrics();
    // `--seeds` without a file: the shipped seeds.
    let seed_file = args.seeds.as_deref().map(|f| if f.is_empty() { seeds::default_file() } else { PathBuf::from(f) });
    // The baseline: the seeds (unless they are the features already) or --baseline.
    let baseline = match (&args.baseline, &seed_file) {
        _ if args.no_seed_baseline || args.curve.is_some() => None,
        (Some(file), _) => Some(file.clone()),
        (None, None) => Some(seeds::default_file()),
        (None, Some(_)) => None,
    };
    // The features of the model and of the baseline, each with the formulas its `alpha:ID`
    // name (a file's own alphas, then the seeds, then the KB's records), all read before
    // any training, when the KB closes: a mining run started meanwhile finds it free.
    let ((features, named), base) = {
        let (seeds, kb) = (seeds::default_set()?, super::kb::LazyKb::new(args.kb.as_deref(), cfg));
        let shared = Chain(vec![&seeds, &kb]);
        let with_named = |(features, own): (Vec<Feature>, AlphaSet)| {
            let named = crate::expr::named_alphas(features.iter().map(|f| f.code.as_str()), &Chain(vec![&own, &shared]));
            (features, named)
        };
        let features = match &seed_file {
            _ if args.curve.is_some() => {
                let recs = kb.get()?.records(&Filter::new().is("status", "accepted").is("kind", "expression"))?;
                (recs.into_iter().map(|r| Feature { id: r.id, code: r.code }).collect(), AlphaSet::default())
            }
            Some(file) => seed_features(&data, &shared, file)?,
            None => (kb_features(kb.get()?, &args, (mcfg.horizon, mcfg.gap))?, AlphaSet::default()),
        };
        let base = match &baseline {
            Some(file) => Some((baseline_name(file), with_named(seed_features(&data, &shared, file)?))),
            None => None,
        };
        (with_named(features), base)
    };
    let tcfg = config(&args);
    let pb = super::progress(0, args.json, "");
    pb.enable_steady_tick(std::time::Duration::from_millis(200));
    let say = |s: &str| pb.set_message(s.to_string());

    if let Some(dir) = &args.curve {
        let (n, from) = (features.len(), args.curve_from.unwrap_or(0));
        let mut ks: Vec<usize> = std::iter::successors(Some(5usize), |k| Some(k * 2)).take_while(|k| *k < n).filter(|k| *k > from).collect();
        if from > 0 && from < n {
            ks.insert(0, from);
        }
        ks.push(n);
        let mut rows = Vec::new();
        for k in ks {
            say(&format!("curve: k = {k}"));
            let r = model::train(&data, &splits, &features[..k], &named, &tcfg, &mcfg, |_| {})?;
            rows.push((k, r));
        }
        pb.finish_and_clear();
        return write_curve(dir, &rows, args.json);
    }

    let mut res = model::train(&data, &splits, &features, &named, &tcfg, &mcfg, say)?;
    let seed_model = match base {
        None => None,
        Some((name, (features, named))) => {
            say(&format!("baseline: {name} through the same model"));
            let fixed = TrainConfig { refit_months: None, ..tcfg.clone() };
            Some((name, model::train(&data, &splits, &features, &named, &fixed, &mcfg, |_| {})?))
        }
    };
    pb.finish_and_clear();
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let seeds = seed_model.as_ref().map(|(n, m)| (n.as_str(), m));
    let report = train_json(&res, seeds, Some(&args.out), &tcfg)?;
    let mut saved = std::mem::take(&mut res.saved);
    saved.report = Some(report.clone());
    saved.save(&args.out)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_train(&res, seeds, &args, &tcfg);
    }
    Ok(0)
}

/// How the report names a baseline file: the shipped seeds as "alpha101 seeds", any other
/// by its file name.
fn baseline_name(file: &Path) -> String {
    if file == seeds::default_file() {
        return "alpha101 seeds".into();
    }
    file.file_stem().map_or_else(|| file.display().to_string(), |s| s.to_string_lossy().into_owned())
}

fn report_json(r: &Report) -> serde_json::Value {
    serde_json::to_value(r).unwrap_or_default()
}

/// The numbers `train --json` prints, which the saved model keeps for `report --model`
/// (`model_file`: where it was saved, if it was).
pub fn train_json(res: &TrainResult, seeds: Option<(&str, &TrainResult)>, model_file: Option<&Path>, tcfg: &TrainConfig) -> Result<serde_json::Value> {
    let mut v = report_json(&res.model);
    v["features"] = serde_json::to_value(&res.features)?;
    v["trees"] = serde_json::json!(res.trees);
    v["label"] = serde_json::json!({"horizon": res.saved.label.0, "gap": res.saved.label.1});
    v["importance"] = serde_json::to_value(&res.importance)?;
    v["settings"] = serde_json::to_value(tcfg)?;
    v["model_file"] = serde_json::json!(model_file);
    if let Some(w) = &res.walk_forward {
        v["walk_forward"] = serde_json::to_value(w)?;
    }
    let mut b = serde_json::Map::new();
    if let Some((id, r)) = &res.best_single {
        b.insert("best_single".into(), serde_json::json!({"id": id, "report": report_json(r)}));
    }
    b.insert("equal_weight".into(), report_json(&res.equal_weight));
    if let Some((name, s)) = seeds {
        b.insert("seeds_model".into(), report_json(&s.model));
        b.insert("seeds_model_features".into(), serde_json::json!(name));
    }
    v["baselines"] = serde_json::Value::Object(b);
    Ok(v)
}

fn print_train(res: &TrainResult, seeds: Option<(&str, &TrainResult)>, args: &TrainArgs, tcfg: &TrainConfig) {
    println!(
        "combined model: {} features, {} trees (early-stopped on valid {}), target {:?}, features {:?}; saved to {}",
        res.features.len(),
        res.trees,
        match tcfg.stop_on {
            StopOn::Mse => "MSE",
            StopOn::RankIc => "Rank IC",
        },
        tcfg.target,
        tcfg.transform,
        args.out.display()
    );
    let mut rows = Vec::new();
    let mut add = |name: &str, r: &Report| {
        for split in ["train", "valid", "test"] {
            if let Some(s) = r.get(split) {
                rows.push(vec![
                    name.to_string(),
                    split.to_string(),
                    num(s.ic),
                    num(s.rank_ic),
                    num(s.icir),
                    if s.mse.is_finite() { format!("{:.6}", s.mse) } else { "-".into() },
                    num(s.sharpe),
                    num(s.max_drawdown),
                    num(s.turnover),
                ]);
            }
        }
    };
    add("model", &res.model);
    if let Some(w) = &res.walk_forward {
        let name = format!("model, refit every {} month(s) ({} refits)", w.months, w.refits.len());
        add(&name, &[("test".to_string(), w.test.clone())].into_iter().collect());
    }
    if let Some((id, r)) = &res.best_single {
        add(&format!("best single ({id})"), r);
    }
    add("equal-weight ranks", &res.equal_weight);
    if let Some((name, s)) = seeds {
        add(&format!("{name}, same model"), &s.model);
    }
    println!("{}", render(&["signal", "split", "ic", "rank_ic", "icir", "mse", "sharpe (net)", "max_dd", "turnover"], &rows));
    if let Some(w) = &res.walk_forward {
        let rows: Vec<Vec<String>> =
            w.refits.iter().map(|r| vec![r.from.clone(), r.to.clone(), r.rows.to_string(), r.last_label_end.clone()]).collect();
        println!("{}", render(&["refit predicts from", "to", "fit on rows", "labels ending by"], &rows));
    }
    let imp: Vec<Vec<String>> =
        res.importance.iter().take(15).map(|i| vec![i.id.clone(), format!("{:.4}", i.gain), i.splits.to_string()]).collect();
    println!("{}", render(&["feature", "gain", "splits"], &imp));
}

fn write_curve(dir: &Path, rows: &[(usize, TrainResult)], json: bool) -> Result<i32> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut csv = String::from("k,trees,test_ic,test_rank_ic,test_icir,test_mse,test_sharpe,valid_rank_ic,valid_mse\n");
    let mut table = Vec::new();
    for (k, r) in rows {
        let t = r.model.get("test").cloned().unwrap_or_default();
        let v = r.model.get("valid").cloned().unwrap_or_default();
        csv.push_str(&format!(
            "{k},{},{},{},{},{},{},{},{}\n",
            r.trees, t.ic, t.rank_ic, t.icir, t.mse, t.sharpe, v.rank_ic, v.mse
        ));
        table.push(vec![
            k.to_string(),
            r.trees.to_string(),
            num(t.ic),
            num(t.rank_ic),
            num(t.icir),
            format!("{:.6}", t.mse),
            num(t.sharpe),
            num(v.rank_ic),
        ]);
    }
    std::fs::write(dir.join("curve.csv"), &csv)?;
    let series = |name: &str, f: &dyn Fn(&TrainResult) -> f64| model::plot::Series::line(name, rows.iter().map(|(k, r)| (*k as f64, f(r))).collect());
    let get = |r: &TrainResult, s: &str| r.model.get(s).map(|x| x.rank_ic).unwrap_or(f64::NAN);
    model::plot::lines(
        &dir.join("curve.png"),
        "Combined model vs. number of KB alphas",
        "accepted alphas used (KB order)",
        "Rank IC",
        &[series("test Rank IC", &|r| get(r, "test")), series("valid Rank IC", &|r| get(r, "valid"))],
    )
    .map_err(anyhow::Error::msg)?;
    if json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|(k, r)| serde_json::json!({"k": k, "trees": r.trees, "test": r.model.get("test"), "valid": r.model.get("valid")}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{}", render(&["k", "trees", "test ic", "test rank_ic", "test icir", "test mse", "test sharpe", "valid rank_ic"], &table));
        println!("wrote {} and {}", dir.join("curve.csv").display(), dir.join("curve.png").display());
    }
    Ok(0)
}

pub fn run_predict(args: PredictArgs, cfg: &Config) -> Result<i32> {
    if let Some(out) = &args.out {
        super::table::FileFormat::of(out)?;
    }
    if !args.model.exists() {
        bail!("no model at {}: `alphaloop train` saves one there (its --out), or pass --model FILE", args.model.display());
    }
    let m = model::SavedModel::load(&args.model)?;
    let want = cfg.with_metrics(&args.metrics).metrics();
    if m.label != (want.horizon, want.gap) {
        bail!(
            "model {} was fit to the label at horizon {} (gap {}), and this prediction asks for horizon {} (gap {}): give --horizon {} --gap {}, or train a model at this label",
            args.model.display(),
            m.label.0,
            m.label.1,
            want.horizon,
            want.gap,
            m.label.0,
            m.label.1
        );
    }
    let data = load_data(&args.data, cfg, args.json)?;
    if m.data_fingerprint != data.fingerprint() {
        tracing::info!("predicting on other data than the model was trained on (fingerprint differs)");
    }
    let t = data.date_index(args.date)?;
    let scores = m.predict(&data, t, &seeds::default_set()?).with_context(|| format!("model {}", args.model.display()))?;
    if let Some(out) = &args.out {
        use polars::prelude::*;
        let mut df = DataFrame::new(
            scores.len(),
            vec![
                Column::new("date".into(), vec![data.dates[t].to_string(); scores.len()]),
                Column::new("symbol".into(), scores.iter().map(|s| s.0.clone()).collect::<Vec<_>>()),
                Column::new("score".into(), scores.iter().map(|s| s.1).collect::<Vec<_>>()),
            ],
        )?;
        super::table::write_table(&mut df, out)?;
    }
    if args.json {
        let v: Vec<serde_json::Value> = scores.iter().map(|(s, x)| serde_json::json!({"symbol": s, "score": x})).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("scores for {} ({} stocks, best first)", data.dates[t], scores.len());
        let row = |(s, x): &(String, f64)| vec![s.clone(), format!("{x:.6}")];
        let mut rows: Vec<Vec<String>> = Vec::new();
        match args.n {
            Some(n) if 2 * n < scores.len() => {
                rows.extend(scores[..n].iter().map(row));
                rows.push(vec!["...".into(), format!("{} more", scores.len() - 2 * n)]);
                rows.extend(scores[scores.len() - n..].iter().map(row));
            }
            _ => rows.extend(scores.iter().map(row)),
        }
        println!("{}", render(&["symbol", "score"], &rows));
    }
    Ok(0)
}

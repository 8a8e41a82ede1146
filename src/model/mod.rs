//! The combined forecasting model: XGBoost over the values of chosen alphas.
//!
//! Protocol (QuantAgent's combined model, made honest): features are alpha signals,
//! cross-sectionally ranked or z-scored per date (a missing value taken as the neutral
//! one); the target is the conventions' label (optionally ranked or demeaned per date); the
//! booster is fit on train rows, early-stopped on valid (MSE or valid Rank IC), and only
//! then scored on test. Rows of a split only carry labels that lie inside that split, so no
//! label crosses a split boundary. Nothing about the test period (features,
//! hyper-parameters, stopping) is chosen by looking at it.
//! Optionally the model is also walked forward through test ([`WalkForward`]): refit
//! every N months on the labels known by then, with the tree count chosen on valid.
//!
//! Baselines reported beside the model: the best single feature (chosen on valid, signed by
//! its train Rank IC) and the equal-weight average of the features' signed ranks.

pub mod plot;
pub mod xgb;

use crate::backtest::{Metrics, MetricsConfig, Scorer};
use crate::data::{MarketData, Panel, Period, Splits};
use crate::expr::kernels::cross;
use crate::expr::{evaluate, AlphaResolver, Chain, Compiler, Recording, Schema};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use xgb::{Booster, DMatrix};

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("xgboost: {0}")]
    Xgb(String),
    #[error("feature '{id}' ({code}): {msg}")]
    Feature { id: String, code: String, msg: String },
    #[error(transparent)]
    Data(#[from] crate::data::DataError),
    #[error("{path}: {msg}")]
    File { path: String, msg: String },
    #[error("{0}")]
    Invalid(String),
}

fn xe(e: impl std::fmt::Display) -> ModelError {
    ModelError::Xgb(e.to_string())
}

/// Per-date transform of the features.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum Transform {
    /// Each feature's percentile rank per date, in (0, 1].
    #[default]
    Rank,
    /// Each feature minus its per-date mean, over its per-date standard deviation.
    Zscore,
}

/// What the booster is fit to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// The label itself.
    Raw,
    /// The label's percentile rank per date, minus 0.5.
    #[default]
    Rank,
    /// The label minus its cross-sectional mean.
    Demean,
}

/// Early-stopping criterion on the valid split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, Default)]
#[serde(rename_all = "snake_case")]
pub enum StopOn {
    /// The squared error of the prediction.
    Mse,
    /// The mean daily rank IC of the prediction.
    #[default]
    RankIc,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainConfig {
    pub transform: Transform,
    pub target: Target,
    pub stop_on: StopOn,
    pub max_rounds: u32,
    pub patience: u32,
    pub eta: f64,
    pub max_depth: u32,
    pub lambda: f64,
    pub alpha: f64,
    pub subsample: f64,
    pub colsample: f64,
    pub min_child_weight: f64,
    pub seed: u64,
    /// Walk-forward over test: refit every this many months (see [`WalkForward`]).
    pub refit_months: Option<u32>,
    /// Test-only switches for the null tests: shuffle the train labels; add the label as a
    /// feature.
    #[serde(skip)]
    pub shuffle_train_labels: bool,
    #[serde(skip)]
    pub leak_label: bool,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            transform: Transform::Rank,
            target: Target::Rank,
            stop_on: StopOn::RankIc,
            max_rounds: 200,
            patience: 20,
            eta: 0.05,
            max_depth: 4,
            lambda: 10.0,
            alpha: 0.0,
            subsample: 0.8,
            colsample: 0.8,
            min_child_weight: 200.0,
            seed: 7,
            refit_months: None,
            shuffle_train_labels: false,
            leak_label: false,
        }
    }
}

/// One input alpha.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Feature {
    pub id: String,
    pub code: String,
}

/// Metrics of one signal on one split, plus the MSE against the training target.
#[derive(Clone, Debug, Serialize, Deserialize, Default)]
pub struct SplitReport {
    pub ic: f64,
    pub rank_ic: f64,
    pub icir: f64,
    pub mse: f64,
    pub sharpe: f64,
    pub max_drawdown: f64,
    pub turnover: f64,
    pub n_days: usize,
}

impl SplitReport {
    fn from(m: &Metrics, mse: f64) -> SplitReport {
        SplitReport {
            ic: m.ic,
            rank_ic: m.rank_ic,
            icir: m.icir,
            mse,
            sharpe: m.sharpe,
            max_drawdown: m.max_drawdown,
            turnover: m.turnover,
            n_days: m.n_days,
        }
    }
}

pub type Report = BTreeMap<String, SplitReport>;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Importance {
    pub id: String,
    /// Average gain of the splits on this feature (XGBoost's "gain"), 0 when unused.
    pub gain: f64,
    pub splits: usize,
}

/// The model walked forward through the test split: the test dates cut into windows of
/// `months` calendar months, and before each window the booster is fit again, from
/// scratch, on every row whose label is known by the window's first date (all of train
/// and valid, and the test dates whose label has ended), with the settings and the tree
/// count chosen on valid. Each window is predicted by its own refit only, so the test
/// report stays out of sample while the model sees the most recent data a user running it
/// live would have had.
#[derive(Clone, Debug, Serialize)]
pub struct WalkForward {
    pub months: u32,
    pub refits: Vec<Refit>,
    /// The refits' predictions scored on test (MSE against the training target).
    pub test: SplitReport,
}

/// One refit of a walk-forward run.
#[derive(Clone, Debug, Serialize)]
pub struct Refit {
    /// First and last date the refit predicts.
    pub from: String,
    pub to: String,
    /// Rows it was fit on.
    pub rows: usize,
    /// The date on which the latest label among those rows ends (on or before `from`).
    pub last_label_end: String,
}

/// Windows `[s, e)` of whole calendar months, `months` at a time, over date indices
/// `start..end`, the first beginning at `start`.
fn month_windows(dates: &[crate::data::Date], start: usize, end: usize, months: u32) -> Vec<(usize, usize)> {
    let month = |d: &crate::data::Date| {
        let (y, m, _) = d.ymd();
        i64::from(y) * 12 + i64::from(m)
    };
    let mut out = Vec::new();
    let mut s = start;
    while s < end {
        let stop = month(&dates[s]) + i64::from(months.max(1));
        let e = s + dates[s..end].partition_point(|d| month(d) < stop);
        out.push((s, e));
        s = e;
    }
    out
}

/// Everything `train` produces.
#[derive(Clone, Debug, Serialize)]
pub struct TrainResult {
    pub model: Report,
    /// With `refit_months`: the walk-forward run over test.
    pub walk_forward: Option<WalkForward>,
    pub best_single: Option<(String, Report)>,
    pub equal_weight: Report,
    pub trees: u32,
    pub importance: Vec<Importance>,
    pub features: Vec<Feature>,
    #[serde(skip)]
    pub saved: SavedModel,
}

fn one_one() -> (usize, usize) {
    (1, 1)
}

/// A model on disk: the booster with everything needed to reproduce its inputs.
#[derive(Clone, Debug, Serialize, Deserialize, Default)]
pub struct SavedModel {
    pub format: u32,
    pub features: Vec<Feature>,
    pub config: Option<TrainConfig>,
    pub splits: Option<Splits>,
    /// The label it was fit to: (horizon, gap); models saved before this was kept were
    /// fit at (1, 1).
    #[serde(default = "one_one")]
    pub label: (usize, usize),
    pub data_fingerprint: String,
    pub trees: u32,
    /// The booster in XGBoost's JSON format.
    pub booster: String,
    /// The formula of every `alpha:ID` the features name (directly or through another),
    /// so that predicting needs neither the knowledge base nor the alpha file they came
    /// from.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub alphas: BTreeMap<String, String>,
    /// Whether the booster was fit on missing features filled (`feature_value`); models
    /// saved before 2026-11-28 saw them missing, and are given them so.
    #[serde(default)]
    pub fills_missing: bool,
    /// What `train --json` reported when it was fit (the model and its baselines by split,
    /// feature importance, walk-forward windows), so that `alphaloop report --model` can
    /// draw it without fitting anything again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<serde_json::Value>,
}

/// Rows (date, asset) of one split with a finite label inside the split.
struct Rows {
    idx: Vec<(u32, u32)>,
    /// Raw labels.
    label: Vec<f64>,
    /// The training target.
    target: Vec<f32>,
}

fn label_of(close: &Panel, t: usize, a: usize, end: usize, h: usize) -> f64 {
    let (g, nd) = (1usize, close.n_dates());
    if t + g + h >= end || t + g + h >= nd {
        return f64::NAN;
    }
    close.get(t + g + h, a) / close.get(t + g, a) - 1.0
}

fn rows_for(data: &MarketData, start: usize, end: usize, target: Target, h: usize) -> Result<Rows, ModelError> {
    let close = data.field("close").ok_or_else(|| ModelError::Invalid("the data has no close".into()))?;
    let na = data.n_assets();
    let mut r = Rows { idx: Vec::new(), label: Vec::new(), target: Vec::new() };
    let (mut row, mut out) = (vec![f64::NAN; na], vec![f64::NAN; na]);
    let mut buf = cross::SortBuf::default();
    for t in start..end {
        for (a, v) in row.iter_mut().enumerate() {
            *v = label_of(close, t, a, end, h);
        }
        let fin: Vec<f64> = row.iter().copied().filter(|v| v.is_finite()).collect();
        if fin.len() < 2 {
            continue;
        }
        match target {
            Target::Raw => out.copy_from_slice(&row),
            Target::Rank => {
                cross::rank_row(&row, &mut out, &mut buf);
                out.iter_mut().for_each(|v| *v -= 0.5);
            }
            Target::Demean => {
                let m = fin.iter().sum::<f64>() / fin.len() as f64;
                for (o, v) in out.iter_mut().zip(&row) {
                    *o = v - m;
                }
            }
        }
        for a in 0..na {
            if row[a].is_finite() {
                r.idx.push((t as u32, a as u32));
                r.label.push(row[a]);
                r.target.push(out[a] as f32);
            }
        }
    }
    Ok(r)
}

/// Applies the per-date transform to a signal.
fn transform(p: &Panel, t: Transform) -> Panel {
    match t {
        Transform::Rank => cross::rank(p),
        Transform::Zscore => cross::zscore(p),
    }
}

/// A transformed feature's value as the booster sees it: a missing one (the alpha is not
/// defined for the stock that day) is the transform's neutral value, the middle rank or a
/// z-score of 0, as Qlib's `Fillna` does. Why not XGBoost's own missing values: one missing
/// cell in 23 (alpha101) made its binned matrices sparse, about 10 bytes a cell instead of
/// one: `train` on the seeds peaked at 4.0 GB instead of 1.9 GB, for a model that came out
/// nearly the same (the same tree count, valid Rank IC equal to four places).
fn feature_value(v: f64, t: Transform) -> f32 {
    match (v.is_nan(), t) {
        (false, _) => v as f32,
        (true, Transform::Rank) => 0.5,
        (true, Transform::Zscore) => 0.0,
    }
}

/// A tiny deterministic generator (xorshift) for the label-shuffling null test.
fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut s = seed | 1;
    for i in (1..v.len()).rev() {
        v.swap(i, (crate::xorshift(&mut s) % (i as u64 + 1)) as usize);
    }
}

fn panel_from_rows(rows: &Rows, values: &[f32], n_dates: usize, n_assets: usize) -> Panel {
    let mut p = Panel::nan(n_dates, n_assets);
    for (&(t, a), v) in rows.idx.iter().zip(values) {
        p.set(t as usize, a as usize, *v as f64);
    }
    p
}

fn mse(pred: &[f32], target: &[f32]) -> f64 {
    if pred.is_empty() {
        return f64::NAN;
    }
    pred.iter().zip(target).map(|(p, t)| ((*p - *t) as f64).powi(2)).sum::<f64>() / pred.len() as f64
}

const SPLITS: [&str; 3] = ["train", "valid", "test"];

/// Trains the combined model on `features` and reports it with its baselines.
pub fn train(
    data: &MarketData,
    splits: &Splits,
    features: &[Feature],
    resolver: &dyn AlphaResolver,
    cfg: &TrainConfig,
    mcfg: &MetricsConfig,
    mut progress: impl FnMut(&str),
) -> Result<TrainResult, ModelError> {
    if features.is_empty() {
        return Err(ModelError::Invalid("no features: the selection is empty".into()));
    }
    let (nd, na) = (data.n_dates(), data.n_assets());
    let h = mcfg.horizon.max(1);
    let periods = [Period::Train, Period::Valid, Period::Test];
    let mut rows = Vec::new();
    let mut scorers = Vec::new();
    for p in &periods {
        let (s, e) = p.indices(splits, data)?;
        let mut r = rows_for(data, s, e, cfg.target, h)?;
        if cfg.shuffle_train_labels && matches!(p, Period::Train) {
            shuffle(&mut r.target, cfg.seed);
        }
        rows.push(r);
        scorers.push(Scorer::new(data, s, e, mcfg.clone())?);
    }
    let nf = features.len() + usize::from(cfg.leak_label);
    // One row-major matrix for the three splits, train rows first, then valid, then test
    // (each in date order), so that a walk-forward refit's rows are one prefix of it.
    let at: Vec<usize> = rows.iter().scan(0, |n, r| {
        *n += r.idx.len();
        Some(*n - r.idx.len())
    }).collect();
    let n_rows = rows.iter().map(|r| r.idx.len()).sum::<usize>();
    let mut x_all = vec![f32::NAN; n_rows * nf];

    // Evaluate every feature once (one shared graph) and scatter it into the row matrices;
    // keep only what the baselines need (per-feature metrics and a running signed average).
    let resolver = Recording::new(resolver);
    let mut c = Compiler::new(Schema::of(data), &resolver);
    let mut roots = Vec::new();
    for f in features {
        let r = c
            .add(&f.code)
            .map_err(|e| ModelError::Feature { id: f.id.clone(), code: f.code.clone(), msg: e.to_string() })?;
        roots.push(r);
    }
    let alphas = resolver.seen();
    progress("evaluating features");
    let mut single: Vec<[Metrics; 3]> = vec![Default::default(); features.len()];
    let mut sum = vec![0f64; nd * na];
    let mut cnt = vec![0u32; nd * na];
    evaluate(&c.graph, &roots, data, |j, sig| {
        let tp = transform(&sig, cfg.transform);
        drop(sig);
        for (r, &at) in rows.iter().zip(&at) {
            for (i, &(t, a)) in r.idx.iter().enumerate() {
                x_all[(at + i) * nf + j] = feature_value(tp.get(t as usize, a as usize), cfg.transform);
            }
        }
        let ms = [scorers[0].score(&tp), scorers[1].score(&tp), scorers[2].score(&tp)];
        let sign = if ms[0].rank_ic.is_finite() && ms[0].rank_ic < 0.0 { -1.0 } else { 1.0 };
        let rk = cross::rank(&tp);
        for (k, v) in rk.to_asset_major().iter().enumerate() {
            if v.is_finite() {
                sum[k] += sign * (v - 0.5);
                cnt[k] += 1;
            }
        }
        single[j] = ms;
    });
    if cfg.leak_label {
        for (r, &at) in rows.iter().zip(&at) {
            for (i, l) in r.label.iter().enumerate() {
                x_all[(at + i) * nf + nf - 1] = *l as f32;
            }
        }
    }

    progress("training");
    // Valid and test are binned at train's edges (see `xgb`).
    let threads = rayon::current_num_threads();
    let mk = |k: usize, reference: Option<&DMatrix>| -> Result<DMatrix, ModelError> {
        let r = &rows[k];
        DMatrix::quantile(&x_all[at[k] * nf..(at[k] + r.idx.len()) * nf], r.idx.len(), &r.target, reference, threads).map_err(xe)
    };
    let dtrain = mk(0, None)?;
    let dvalid = mk(1, Some(&dtrain))?;
    let dtest = mk(2, Some(&dtrain))?;
    if cfg.refit_months.is_none() {
        // Only the refits read the rows again.
        x_all = Vec::new();
    }
    let mut booster = new_booster(cfg, &[&dtrain, &dvalid])?;
    let (mut best, mut best_round, mut since) = (f64::NEG_INFINITY, 0u32, 0u32);
    for round in 0..cfg.max_rounds {
        booster.update(&dtrain, round as i32).map_err(xe)?;
        let pv = booster.predict(&dvalid).map_err(xe)?;
        let score = match cfg.stop_on {
            StopOn::Mse => -mse(&pv, &rows[1].target),
            StopOn::RankIc => scorers[1].score(&panel_from_rows(&rows[1], &pv, nd, na)).rank_ic,
        };
        let score = if score.is_finite() { score } else { f64::NEG_INFINITY };
        if score > best {
            (best, best_round, since) = (score, round, 0);
        } else {
            since += 1;
            if since >= cfg.patience {
                break;
            }
        }
    }
    let trees = best_round + 1;
    // The first `trees` rounds; the full booster (and its caches of train and valid) goes.
    let booster = {
        let full = booster;
        full.slice(0, trees as i32).map_err(xe)?
    };

    let mut model = Report::new();
    for (k, d) in [&dtrain, &dvalid, &dtest].iter().enumerate() {
        let p = booster.predict(d).map_err(xe)?;
        let m = scorers[k].score(&panel_from_rows(&rows[k], &p, nd, na));
        model.insert(SPLITS[k].into(), SplitReport::from(&m, mse(&p, &rows[k].target)));
    }
    // Baselines.
    let best_single = (0..features.len())
        .filter(|&j| single[j][1].rank_ic.is_finite() && single[j][0].rank_ic.is_finite())
        .max_by(|&a, &b| {
            let s = |j: usize| single[j][1].rank_ic * single[j][0].rank_ic.signum();
            s(a).total_cmp(&s(b))
        })
        .map(|j| {
            let sign = single[j][0].rank_ic.signum();
            let rep = (0..3)
                .map(|k| {
                    let m = &single[j][k];
                    let flipped = Metrics {
                        ic: m.ic * sign,
                        rank_ic: m.rank_ic * sign,
                        icir: m.icir * sign,
                        ..m.clone()
                    };
                    // The long-short book of a flipped signal is not a sign flip (costs), so
                    // it is only reported for signals used as they are.
                    let mut r = SplitReport::from(&flipped, f64::NAN);
                    if sign < 0.0 {
                        r.sharpe = f64::NAN;
                        r.max_drawdown = f64::NAN;
                    }
                    (SPLITS[k].to_string(), r)
                })
                .collect();
            (features[j].id.clone(), rep)
        });
    let avg: Vec<f64> = sum.iter().zip(&cnt).map(|(s, &n)| if n > 0 { s / n as f64 } else { f64::NAN }).collect();
    let avg = Panel::from_asset_major(nd, na, avg);
    let equal_weight = (0..3).map(|k| (SPLITS[k].to_string(), SplitReport::from(&scorers[k].score(&avg), f64::NAN))).collect();

    let importance = importance(&booster, features, cfg.leak_label)?;
    let saved = SavedModel {
        format: 1,
        features: features.to_vec(),
        config: Some(cfg.clone()),
        splits: Some(splits.clone()),
        label: (mcfg.horizon, mcfg.gap),
        data_fingerprint: data.fingerprint(),
        trees,
        booster: booster.save_json().map_err(xe)?,
        alphas,
        fills_missing: true,
        report: None,
    };
    // The refits build their own matrices: what only the fixed model needed goes first.
    drop((booster, dtrain, dvalid, dtest));
    let walk_forward = match cfg.refit_months {
        Some(months) => Some(walk_forward(data, splits, months, trees, cfg, &x_all, nf, &rows, &scorers[2], h, &mut progress)?),
        None => None,
    };
    Ok(TrainResult { model, walk_forward, best_single, equal_weight, trees, importance, features: features.to_vec(), saved })
}

/// The [`WalkForward`] run: `x_all` holds the rows of train, valid and test in that order
/// (each in date order), so a refit's rows, those whose label has ended by its first date,
/// are a prefix.
#[allow(clippy::too_many_arguments)]
fn walk_forward(
    data: &MarketData,
    splits: &Splits,
    months: u32,
    trees: u32,
    cfg: &TrainConfig,
    x_all: &[f32],
    nf: usize,
    rows: &[Rows],
    scorer: &Scorer,
    h: usize,
    progress: &mut impl FnMut(&str),
) -> Result<WalkForward, ModelError> {
    let (nd, na) = (data.n_dates(), data.n_assets());
    let (ts, te) = Period::Test.indices(splits, data)?;
    // The label of the row of date t ends at the close of t + 1 + h.
    let ends = |t: u32| t as usize + 1 + h;
    let test = &rows[2];
    let before = rows[0].idx.len() + rows[1].idx.len();
    let targets: Vec<f32> = rows.iter().flat_map(|r| r.target.iter().copied()).collect();
    let windows = month_windows(&data.dates, ts, te, months);
    let mut pred = vec![f32::NAN; test.idx.len()];
    let mut refits = Vec::new();
    for (k, &(w0, w1)) in windows.iter().enumerate() {
        progress(&format!("walk-forward: refit {} of {}", k + 1, windows.len()));
        let n = before + test.idx.partition_point(|&(t, _)| ends(t) <= w0);
        // The refit's last row (the rows run in date order through the three splits).
        let Some(&(t_last, _)) = n.checked_sub(1).and_then(|i| rows.iter().flat_map(|r| &r.idx).nth(i)) else {
            return Err(ModelError::Invalid("walk-forward: no labelled rows before the test split".into()));
        };
        // Each refit sketches its own bin edges, so test is predicted from its raw rows.
        let d = DMatrix::quantile(&x_all[..n * nf], n, &targets[..n], None, rayon::current_num_threads()).map_err(xe)?;
        let mut b = new_booster(cfg, &[&d])?;
        for round in 0..trees {
            b.update(&d, round as i32).map_err(xe)?;
        }
        drop(d);
        let p = b.predict_dense(&x_all[before * nf..], test.idx.len()).map_err(xe)?;
        for ((out, &v), &(t, _)) in pred.iter_mut().zip(&p).zip(&test.idx) {
            if (w0..w1).contains(&(t as usize)) {
                *out = v;
            }
        }
        refits.push(Refit {
            from: data.dates[w0].to_string(),
            to: data.dates[w1 - 1].to_string(),
            rows: n,
            last_label_end: data.dates[ends(t_last).min(nd - 1)].to_string(),
        });
    }
    let m = scorer.score(&panel_from_rows(test, &pred, nd, na));
    Ok(WalkForward { months, refits, test: SplitReport::from(&m, mse(&pred, &test.target)) })
}

/// A booster with XGBoost's parameters for the settings, caching the given matrices.
fn new_booster(cfg: &TrainConfig, cache: &[&DMatrix]) -> Result<Booster, ModelError> {
    let mut b = Booster::new(cache).map_err(xe)?;
    let params: [(&str, String); 12] = [
        ("objective", "reg:squarederror".into()),
        ("tree_method", "hist".into()),
        ("eta", cfg.eta.to_string()),
        ("max_depth", cfg.max_depth.to_string()),
        ("lambda", cfg.lambda.to_string()),
        ("alpha", cfg.alpha.to_string()),
        ("subsample", cfg.subsample.to_string()),
        ("colsample_bytree", cfg.colsample.to_string()),
        ("min_child_weight", cfg.min_child_weight.to_string()),
        ("seed", cfg.seed.to_string()),
        ("nthread", rayon::current_num_threads().to_string()),
        ("base_score", "0".into()),
    ];
    for (k, v) in &params {
        b.set_param(k, v).map_err(xe)?;
    }
    Ok(b)
}

/// Average gain per feature, parsed from the booster's text dump (`[f12<0.5] ... gain=3.1`).
fn importance(b: &Booster, features: &[Feature], leak: bool) -> Result<Vec<Importance>, ModelError> {
    let n = features.len() + usize::from(leak);
    let (mut gain, mut count) = (vec![0f64; n], vec![0usize; n]);
    for tree in b.dump().map_err(xe)? {
        for line in tree.lines() {
            let (Some(fs), Some(gs)) = (line.find("[f"), line.find("gain=")) else { continue };
            let fnum: String = line[fs + 2..].chars().take_while(|c| c.is_ascii_digit()).collect();
            let g: String = line[gs + 5..].chars().take_while(|c| *c != ',' && !c.is_whitespace()).collect();
            if let (Ok(f), Ok(g)) = (fnum.parse::<usize>(), g.parse::<f64>()) {
                if f < n {
                    gain[f] += g;
                    count[f] += 1;
                }
            }
        }
    }
    let mut v: Vec<Importance> = (0..n)
        .map(|j| Importance {
            id: features.get(j).map(|f| f.id.clone()).unwrap_or_else(|| "label (leaked)".into()),
            gain: if count[j] > 0 { gain[j] / count[j] as f64 } else { 0.0 },
            splits: count[j],
        })
        .collect();
    v.sort_by(|a, b| b.gain.total_cmp(&a.gain));
    Ok(v)
}

impl SavedModel {
    pub fn save(&self, path: &std::path::Path) -> Result<(), ModelError> {
        let f = |msg: String| ModelError::File { path: path.display().to_string(), msg };
        let text = serde_json::to_string(self).map_err(|e| f(e.to_string()))?;
        let tmp = path.with_extension("part");
        std::fs::write(&tmp, text).map_err(|e| f(e.to_string()))?;
        std::fs::rename(&tmp, path).map_err(|e| f(e.to_string()))
    }

    pub fn load(path: &std::path::Path) -> Result<SavedModel, ModelError> {
        let f = |msg: String| ModelError::File { path: path.display().to_string(), msg };
        let text = std::fs::read_to_string(path).map_err(|e| f(format!("cannot read the model: {e}")))?;
        let m: SavedModel = serde_json::from_str(&text).map_err(|e| f(format!("not an alphaloop model: {e}")))?;
        if m.format != 1 {
            return Err(f(format!("model format {} is not supported by this alphaloop", m.format)));
        }
        Ok(m)
    }

    /// Scores per stock on date index `t` of `data`: (symbol, score), best first.
    /// `alpha:ID` resolves to the formulas saved with the model, else through `resolver`
    /// (a model saved before it kept them).
    pub fn predict(&self, data: &MarketData, t: usize, resolver: &dyn AlphaResolver) -> Result<Vec<(String, f64)>, ModelError> {
        let resolver = Chain(vec![&self.alphas, resolver]);
        let cfg = self.config.clone().unwrap_or_default();
        let booster = Booster::load_json(&self.booster).map_err(xe)?;
        // Signals at t only read data up to t: cut there so nothing later is even loaded.
        let data = data.truncate_dates(t + 1);
        let na = data.n_assets();
        let nf = self.features.len();
        let mut c = Compiler::new(Schema::of(&data), &resolver);
        let mut roots = Vec::new();
        for f in &self.features {
            roots.push(
                c.add(&f.code)
                    .map_err(|e| ModelError::Feature { id: f.id.clone(), code: f.code.clone(), msg: e.to_string() })?,
            );
        }
        let mut x = vec![f32::NAN; na * nf];
        evaluate(&c.graph, &roots, &data, |j, sig| {
            let tp = transform(&sig, cfg.transform);
            for a in 0..na {
                x[a * nf + j] = tp.get(t, a) as f32;
            }
        });
        // Stocks without any finite feature on the date get no score.
        let scored: Vec<bool> = x.chunks(nf.max(1)).map(|row| row.iter().any(|v| !v.is_nan())).collect();
        if self.fills_missing {
            x.iter_mut().for_each(|v| *v = feature_value(f64::from(*v), cfg.transform));
        }
        let p = booster.predict_dense(&x, na).map_err(xe)?;
        let mut out: Vec<(String, f64)> = data
            .symbols
            .iter()
            .zip(p)
            .zip(scored)
            .filter(|&((_, v), scored)| scored && v.is_finite())
            .map(|((s, v), _)| (s.clone(), f64::from(v)))
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(out)
    }
}

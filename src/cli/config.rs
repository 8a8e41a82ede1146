//! Settings from an optional `alphaloop.toml`, and where to find the data.

use crate::data::Splits;
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Optional settings file (`--config FILE`, `$ALPHALOOP_CONFIG`, or `./alphaloop.toml`).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Default data file.
    pub data: Option<PathBuf>,
    /// Default `symbol,group` file.
    pub groups: Option<PathBuf>,
    /// Split dates, e.g. `train = ["2000-01-01", "2012-12-31"]`.
    pub splits: Option<Splits>,
    /// Default cost in basis points (`[metrics] cost_bps` is the same; kept for older
    /// configs).
    pub cost_bps: Option<f64>,
    /// The label and the book every command scores with (`[metrics]`).
    #[serde(default)]
    pub metrics: MetricsSettings,
    /// Knowledge base: a directory or qdrant://host:port/collection.
    pub kb: Option<String>,
    /// Text embedder for the knowledge base: `minilm` (default, local) or `openai:MODEL`
    /// (any OpenAI-compatible `/v1/embeddings`; base URL from `embed_url` or
    /// `$OPENAI_BASE_URL`, key from `$OPENAI_API_KEY`).
    pub embedder: Option<String>,
    pub embed_url: Option<String>,
    /// Base URL for `--llm openai:MODEL` (default `$OPENAI_BASE_URL`, else OpenAI's), e.g.
    /// `http://127.0.0.1:8080/v1` for `alphaloop serve`.
    pub llm_url: Option<String>,
    /// Minutes a remote endpoint that has answered before (the `--llm openai:` model, the
    /// `openai:` embedder, a `qdrant://` knowledge base) may keep failing with transport errors, 429 or 5xx before the
    /// run stops (default 10; `--resume` continues a stopped run). Retries wait 1 s, 2 s,
    /// 4 s … up to 60 s, or what the server's Retry-After asks. An endpoint that has never
    /// answered is given up on after 30 s: that is usually a wrong URL or key.
    pub retry_minutes: Option<f64>,
    /// How `kb` and `mine` lay out a collection they create on a Qdrant server or cluster
    /// (`[qdrant] shards = 3, replication_factor = 2`); an existing one keeps its own.
    #[serde(default)]
    pub qdrant: crate::kb::server::Layout,
    /// Fields of your data the expression writer may use beside the standard ones (open,
    /// high, low, close, volume, returns, vwap, advN), e.g. `writer_fields = ["cap",
    /// "pe_ratio"]`: each must be a column of the data (as `alphaloop data info` lists it).
    #[serde(default)]
    pub writer_fields: Vec<String>,
    /// Model prices for cost accounting and `--budget-usd`, USD per million tokens, keyed
    /// by the `--llm` value: `[prices."openai:gpt-4o-mini"] prompt = 0.15, completion = 0.6`.
    /// A model not listed costs 0 (right for the local one).
    #[serde(default)]
    pub prices: std::collections::BTreeMap<String, crate::agent::Price>,
    /// The mining loop's bar and its effort per idea (`[mine]`).
    #[serde(default)]
    pub mine: MineSettings,
}

/// The label and the book (`[metrics]` in the config, `--horizon`, `--gap` and `--cost-bps`
/// on every command that scores): the label is the return from close(t + gap) to
/// close(t + gap + horizon); cost per unit of turnover in basis points. Records keep the
/// horizon and gap their metrics were computed at, and commands refuse to rank or combine
/// records of another.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, serde::Serialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct MetricsSettings {
    /// Label horizon h in days (1): the label is the return from close(t + gap) to
    /// close(t + gap + h).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=250))]
    pub horizon: Option<u64>,
    /// Days between the signal's close and the label's start (1: trade at the next close;
    /// 0 trades at the signal's own close, which the conventions avoid on purpose).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=250))]
    pub gap: Option<u64>,
    /// Cost per unit of turnover in basis points, 0 or more (5).
    #[arg(long, value_parser = cost_bps_arg)]
    pub cost_bps: Option<f64>,
}

/// `--cost-bps`, held to the config's rule ([`cost_bps`]).
fn cost_bps_arg(s: &str) -> Result<f64, String> {
    s.parse::<f64>().map_err(|e| e.to_string()).and_then(cost_bps)
}

/// The mining loop's settings a researcher tunes (`[mine]` in the config): what an alpha
/// must show to be accepted, and how hard the writer and the judge try per idea. Each one
/// left out keeps its default (`alphaloop mine` runs with the defaults below unless told).
/// A run records them in its `run.json`, and `--resume` refuses a config that has changed
/// them since: a run whose bar moved midway is no arm of a comparison.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct MineSettings {
    /// Writer/judge rounds per idea at most (3).
    pub rounds: Option<u32>,
    /// The rounds stop early once the judge scores at least this, 0–10 (7), a candidate
    /// that runs, is original and clears the train bar (the rest decide acceptance).
    pub judge_threshold: Option<f64>,
    /// How a candidate that clears the bars below is judged: `gain` (default), by what it
    /// adds to the combination of the accepted set on valid, or `standalone`, the bars alone.
    pub accept: Option<crate::agent::Accept>,
    /// `gain`: accepted at a gain t-statistic of at least this (2.5) ...
    pub min_gain_t: Option<f64>,
    /// ... and, when true, only if the combination's net Sharpe on valid does not fall (false).
    pub sharpe_must_not_fall: Option<bool>,
    /// The combination the gain is measured on: `signed-mean` (default), the mean of the
    /// alphas' per-date ranks each signed by its train Rank IC, or `ridge`, weights from a
    /// ridge regression of the label's per-date rank on theirs over train ...
    pub combiner: Option<crate::agent::accept::Combine>,
    /// ... whose penalty is this share of the Gram matrix's mean diagonal (0.1).
    pub ridge_lambda: Option<f64>,
    /// The set the gain is measured against: `seeds` (every accepted alpha, the imported
    /// seeds too; default) or `accepted` (only alphas mining accepted).
    pub base: Option<crate::agent::Base>,
    /// `--writer gp`: offspring scored on train per round, the best of them going on to
    /// the full checks (64; 1 sends each offspring to them).
    pub gp_batch: Option<usize>,
    /// The refiner: variants of the writer's formulas scored on train per idea, the best
    /// few going on to the full checks (200; 0 turns it off) ...
    pub refine_budget: Option<usize>,
    /// ... a sub-expression in more than this share of the accepted alphas (0.2) costing a
    /// variant this much of its train t-statistic (1).
    pub overused_share: Option<f64>,
    pub overuse_penalty: Option<f64>,
    /// Acceptance: Rank IC on train at least this (0.002) ...
    pub min_train_rank_ic: Option<f64>,
    /// ... and on valid at least this (0) ...
    pub min_valid_rank_ic: Option<f64>,
    /// ... a finite signal on at least this share of the labelled cells of train (0.5) ...
    pub min_coverage: Option<f64>,
    /// ... and novel: |correlation| of its signal with every accepted alpha's at most this
    /// (0.7) ...
    pub max_corr: Option<f64>,
    /// ... and at most this share of its expression found in one accepted alpha (0.8).
    pub max_ast_overlap: Option<f64>,
    /// A candidate expression may have this many nodes (40) and this depth (12) at most.
    pub max_nodes: Option<usize>,
    pub max_depth: Option<usize>,
    /// A candidate expression's windows (an operator's days, an `adv{d}` field's) are at
    /// most this many trading days (250); a longer one is refused before evaluation.
    pub max_window: Option<usize>,
    /// A candidate expression that adds, subtracts or compares unlike quantities (a return
    /// and a dollar volume, a price and a share count) fails the rule checks (true).
    pub check_units: Option<bool>,
    /// Accepted alphas, failures and lessons each shown to the writer per idea (2).
    pub retrieve_k: Option<usize>,
    /// Sampling temperature of the writer and the judge (0.7).
    pub temperature: Option<f64>,
}

impl MineSettings {
    /// `cfg` with the settings given here.
    pub fn apply(&self, mut cfg: crate::agent::MineConfig) -> crate::agent::MineConfig {
        let n = &mut cfg.novelty;
        set(&mut n.max_corr, self.max_corr);
        set(&mut n.max_ast_overlap, self.max_ast_overlap);
        set(&mut cfg.rounds, self.rounds);
        set(&mut cfg.accept, self.accept);
        set(&mut cfg.min_gain_t, self.min_gain_t);
        set(&mut cfg.sharpe_must_not_fall, self.sharpe_must_not_fall);
        set(&mut cfg.combine, self.combiner);
        set(&mut cfg.ridge_lambda, self.ridge_lambda);
        set(&mut cfg.gp_batch, self.gp_batch);
        set(&mut cfg.refine_budget, self.refine_budget);
        set(&mut cfg.overused_share, self.overused_share);
        set(&mut cfg.overuse_penalty, self.overuse_penalty);
        set(&mut cfg.base, self.base);
        set(&mut cfg.beta, self.judge_threshold);
        set(&mut cfg.min_train_rank_ic, self.min_train_rank_ic);
        set(&mut cfg.min_valid_rank_ic, self.min_valid_rank_ic);
        set(&mut cfg.min_coverage, self.min_coverage);
        set(&mut cfg.max_nodes, self.max_nodes);
        set(&mut cfg.max_depth, self.max_depth);
        set(&mut cfg.max_window, self.max_window);
        set(&mut cfg.check_units, self.check_units);
        set(&mut cfg.retrieve_k, self.retrieve_k);
        set(&mut cfg.temperature, self.temperature);
        cfg
    }

    /// Every setting, the defaults filled in: what a run mines with.
    pub fn resolved(&self) -> MineSettings {
        let c = self.apply(crate::agent::MineConfig::default());
        MineSettings {
            rounds: Some(c.rounds),
            judge_threshold: Some(c.beta),
            accept: Some(c.accept),
            min_gain_t: Some(c.min_gain_t),
            sharpe_must_not_fall: Some(c.sharpe_must_not_fall),
            combiner: Some(c.combine),
            ridge_lambda: Some(c.ridge_lambda),
            gp_batch: Some(c.gp_batch),
            refine_budget: Some(c.refine_budget),
            overused_share: Some(c.overused_share),
            overuse_penalty: Some(c.overuse_penalty),
            base: Some(c.base),
            min_train_rank_ic: Some(c.min_train_rank_ic),
            min_valid_rank_ic: Some(c.min_valid_rank_ic),
            min_coverage: Some(c.min_coverage),
            max_corr: Some(c.novelty.max_corr),
            max_ast_overlap: Some(c.novelty.max_ast_overlap),
            max_nodes: Some(c.max_nodes),
            max_depth: Some(c.max_depth),
            max_window: Some(c.max_window),
            check_units: Some(c.check_units),
            retrieve_k: Some(c.retrieve_k),
            temperature: Some(c.temperature),
        }
    }

    /// `name = value` for every setting that differs between two resolved sets, this one's
    /// value first.
    pub fn differences(&self, other: &MineSettings) -> Vec<(String, String, String)> {
        let (a, b) = (serde_json::to_value(self).unwrap_or_default(), serde_json::to_value(other).unwrap_or_default());
        let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else { return Vec::new() };
        a.iter().filter(|(k, v)| b.get(*k) != Some(v)).map(|(k, v)| (k.clone(), v.to_string(), b.get(k).map(|x| x.to_string()).unwrap_or_default())).collect()
    }

    /// The first setting out of its range, as `name = value; what to give`.
    fn check(&self) -> Result<(), String> {
        let frac = |name: &str, v: Option<f64>, lo_open: bool| match v {
            Some(x) if !(x.is_finite() && x <= 1.0 && if lo_open { x > 0.0 } else { x >= 0.0 }) => {
                Err(format!("{name} = {x}; give a share {}", if lo_open { "above 0 and at most 1" } else { "from 0 to 1" }))
            }
            _ => Ok(()),
        };
        let ic = |name: &str, v: Option<f64>| match v {
            Some(x) if !(x.is_finite() && (-1.0..=1.0).contains(&x)) => Err(format!("{name} = {x}; give a Rank IC from -1 to 1")),
            _ => Ok(()),
        };
        let at_least_1 = |name: &str, v: Option<usize>| match v {
            Some(0) => Err(format!("{name} = 0; give 1 or more")),
            _ => Ok(()),
        };
        at_least_1("rounds", self.rounds.map(|r| r as usize))?;
        if let Some(b) = self.judge_threshold.filter(|b| !(b.is_finite() && (0.0..=10.0).contains(b))) {
            return Err(format!("judge_threshold = {b}; give a judge score from 0 to 10"));
        }
        if let Some(t) = self.min_gain_t.filter(|t| !t.is_finite()) {
            return Err(format!("min_gain_t = {t}; give a t-statistic (a number)"));
        }
        if let Some(l) = self.ridge_lambda.filter(|l| !(l.is_finite() && *l >= 0.0)) {
            return Err(format!("ridge_lambda = {l}; give a penalty of 0 or more (a share of the Gram matrix's mean diagonal)"));
        }
        ic("min_train_rank_ic", self.min_train_rank_ic)?;
        ic("min_valid_rank_ic", self.min_valid_rank_ic)?;
        frac("min_coverage", self.min_coverage, false)?;
        frac("max_corr", self.max_corr, true)?;
        frac("max_ast_overlap", self.max_ast_overlap, true)?;
        at_least_1("max_nodes", self.max_nodes)?;
        at_least_1("max_depth", self.max_depth)?;
        at_least_1("max_window", self.max_window)?;
        at_least_1("gp_batch", self.gp_batch)?;
        frac("overused_share", self.overused_share, true)?;
        if let Some(p) = self.overuse_penalty.filter(|p| !(p.is_finite() && *p >= 0.0)) {
            return Err(format!("overuse_penalty = {p}; give 0 or more (a t-statistic)"));
        }
        if let Some(k) = self.retrieve_k.filter(|&k| k > 20) {
            return Err(format!("retrieve_k = {k}; give 0 to 20 (each record shown takes room in the writer's prompt)"));
        }
        if let Some(t) = self.temperature.filter(|t| !(t.is_finite() && (0.0..=2.0).contains(t))) {
            return Err(format!("temperature = {t}; give 0 to 2"));
        }
        Ok(())
    }
}

fn set<T>(field: &mut T, v: Option<T>) {
    if let Some(v) = v {
        *field = v;
    }
}

impl Config {
    /// The metric settings every command scores with: `[metrics]` (the top-level
    /// `cost_bps` of older configs too), defaults for the rest.
    pub fn metrics(&self) -> crate::backtest::MetricsConfig {
        let d = crate::backtest::MetricsConfig::default();
        let m = &self.metrics;
        crate::backtest::MetricsConfig {
            horizon: m.horizon.map_or(d.horizon, |h| h as usize),
            gap: m.gap.map_or(d.gap, |g| g as usize),
            cost_bps: m.cost_bps.or(self.cost_bps).unwrap_or(d.cost_bps),
            ..d
        }
    }

    /// This config with the metric flags a command was given on top.
    pub fn with_metrics(&self, flags: &MetricsSettings) -> Config {
        let mut c = self.clone();
        let m = &mut c.metrics;
        m.horizon = flags.horizon.or(m.horizon);
        m.gap = flags.gap.or(m.gap);
        m.cost_bps = flags.cost_bps.or(m.cost_bps);
        c
    }

    pub fn load(explicit: Option<&Path>) -> Result<Config> {
        let path = match explicit {
            Some(p) => Some(p.to_path_buf()),
            None => std::env::var_os("ALPHALOOP_CONFIG")
                .map(PathBuf::from)
                .or_else(|| Some(PathBuf::from("alphaloop.toml")).filter(|p| p.exists())),
        };
        let Some(path) = path else { return Ok(Config::default()) };
        let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read config {}", path.display()))?;
        let cfg: Config = toml::from_str(&text).with_context(|| format!("{}: invalid config", path.display()))?;
        if let Some(m) = cfg.retry_minutes.filter(|m| !(m.is_finite() && *m >= 0.0)) {
            bail!("{}: invalid config: retry_minutes = {m}; give a number of minutes, 0 or more", path.display());
        }
        for (k, v) in [("shards", cfg.qdrant.shards), ("replication_factor", cfg.qdrant.replication_factor)] {
            if v == Some(0) {
                bail!("{}: invalid config: [qdrant] {k} = 0; give 1 or more", path.display());
            }
        }
        cfg.mine.check().map_err(|e| anyhow::anyhow!("{}: invalid config: [mine] {e}", path.display()))?;
        if let Some(c) = cfg.cost_bps {
            cost_bps(c).map_err(|e| anyhow::anyhow!("{}: invalid config: cost_bps = {c}; {e}", path.display()))?;
        }
        let m = &cfg.metrics;
        if let Some(c) = m.cost_bps {
            cost_bps(c).map_err(|e| anyhow::anyhow!("{}: invalid config: [metrics] cost_bps = {c}; {e}", path.display()))?;
        }
        if let (Some(a), Some(b)) = (m.cost_bps, cfg.cost_bps) {
            if a != b {
                bail!("{}: invalid config: cost_bps = {b} and [metrics] cost_bps = {a}; give one", path.display());
            }
        }
        if let Some(h) = m.horizon.filter(|h| !(1..=250).contains(h)) {
            bail!("{}: invalid config: [metrics] horizon = {h}; give 1 to 250 days", path.display());
        }
        if let Some(g) = m.gap.filter(|g| *g > 250) {
            bail!("{}: invalid config: [metrics] gap = {g}; give 0 to 250 days", path.display());
        }
        Ok(cfg)
    }
}

/// A cost per unit of turnover in basis points, from the config or `--cost-bps`: finite
/// and 0 or more (a negative one would pay the book for trading).
pub fn cost_bps(c: f64) -> Result<f64, String> {
    if c.is_finite() && c >= 0.0 { Ok(c) } else { Err("give a cost in basis points, 0 or more".into()) }
}

/// The OpenAI-compatible endpoint an `openai:MODEL` model or embedder talks to (`url`
/// from the config, else `$OPENAI_BASE_URL`, else OpenAI's) and its key
/// (`$OPENAI_API_KEY`). OpenAI's own endpoint refuses every request without a key, so a
/// missing one is an error here, before any work, not after five failed attempts; a
/// local server (`alphaloop serve`, llama.cpp's, vLLM's) needs none.
pub fn openai_endpoint(url: Option<&str>) -> Result<(String, Option<String>)> {
    let base = url.map(str::to_string).or_else(|| std::env::var("OPENAI_BASE_URL").ok()).unwrap_or_else(|| "https://api.openai.com/v1".into());
    let key = std::env::var("OPENAI_API_KEY").ok().filter(|k| !k.trim().is_empty());
    if key.is_none() && base.contains("api.openai.com") {
        bail!(
            "OPENAI_API_KEY is not set, and {base} answers nothing without one: set it, or point $OPENAI_BASE_URL (or the config's llm_url / embed_url) at a server that needs none, such as `alphaloop serve`"
        );
    }
    Ok((base, key))
}

/// Places the shipped data is looked for, in order.
pub fn default_data_candidates() -> Vec<PathBuf> {
    let name = "sp500_daily.parquet";
    let mut v = vec![PathBuf::from("../shared/data").join(name)];
    if let Some(c) = crate::checkout_dir() {
        v.push(c.join("../shared/data").join(name));
    }
    if let Some(home) = std::env::var_os("HOME") {
        v.push(PathBuf::from(home).join(".cache/alphaloop/data").join(name));
    }
    v
}

/// The data file to use: `--data`/`$ALPHALOOP_DATA`, then the config, then the shipped
/// data. A clear error lists every place that was tried.
pub fn resolve_data(flag: Option<&Path>, cfg: &Config) -> Result<PathBuf> {
    if let Some(p) = flag.or(cfg.data.as_deref()) {
        if !p.exists() {
            let from = if flag.is_some() { "given on the command line or in $ALPHALOOP_DATA" } else { "the config's `data`" };
            bail!("data file not found: {} ({from})", p.display());
        }
        return Ok(p.to_path_buf());
    }
    let cands = default_data_candidates();
    if let Some(p) = cands.iter().find(|p| p.exists()) {
        return Ok(p.clone());
    }
    let tried: Vec<String> = cands.iter().map(|p| format!("  {}", p.display())).collect();
    bail!(
        "no data file given and the shipped data was not found; looked in:\n{}\npass --data FILE (long-format Parquet/CSV: date, symbol, open, high, low, close, adj_close, volume), set ALPHALOOP_DATA, or set `data` in alphaloop.toml",
        tried.join("\n")
    )
}

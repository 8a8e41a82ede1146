//! Settings from an optional `alphaloop.toml`, and where to find the data.

use crate::data::Splits;
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Optional settings file (`--config FILE`, `$ALPHALOOP_CONFIG`, or `./alphaloop.toml`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Default data file.
    pub data: Option<PathBuf>,
    /// Default `symbol,group` file.
    pub groups: Option<PathBuf>,
    /// Split dates, e.g. `train = ["2000-01-01", "2012-12-31"]`.
    pub splits: Option<Splits>,
    /// Default cost in basis points.
    pub cost_bps: Option<f64>,
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
}

impl Config {
    /// The metric settings every command scores with (the config's cost, 5 bps by
    /// default); `eval` overrides them from its flags.
    pub fn metrics(&self) -> crate::backtest::MetricsConfig {
        crate::backtest::MetricsConfig { cost_bps: self.cost_bps.unwrap_or(5.0), ..Default::default() }
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
        if let Some(c) = cfg.cost_bps {
            cost_bps(c).map_err(|e| anyhow::anyhow!("{}: invalid config: cost_bps = {c}; {e}", path.display()))?;
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

//! Scoring many variants of a formula cheaply, for a search around what the writer
//! proposed: the variants are compiled into one graph (what they share is one node), the
//! sub-expressions computed for earlier batches are read back from an [`EvalCache`], and
//! each variant gets only what a search ranks on, on train: the Rank IC and IC per date,
//! the Rank IC's t-statistic, turnover and coverage. The full metrics, the look-ahead
//! check and the exact novelty check are for the finalists ([`super::Miner`]).
//!
//! Train only, and cut there: the variants are evaluated on the data up to the end of
//! train, so a search never computes (let alone looks at) a value of valid.

use crate::backtest::{MetricsConfig, MiningView, Scorer};
use crate::data::{DataError, MarketData};
use crate::expr::{evaluate_cached, AlphaResolver, Compiler, EvalCache, Schema};
use std::time::Instant;

/// What a variant is ranked on, from train.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Score {
    pub text: String,
    pub rank_ic: f64,
    pub ic: f64,
    /// The daily Rank IC's mean over its standard error.
    pub rank_ic_t: f64,
    pub turnover: f64,
    pub coverage: f64,
    /// Dates with a Rank IC, and their share of the dates train can score.
    pub days: usize,
    pub day_share: f64,
    /// Why it has no score (it did not compile, or is past the window cap).
    pub error: Option<String>,
}

impl Score {
    /// Whether a search may rank by this score: it has one, its signal covers at least
    /// `min_coverage` of the labelled cells, and it has a Rank IC on at least half of the
    /// dates (a signal that varies on a handful of dates can show any Rank IC: a 0/1
    /// signal with spread on two dates of thirteen years scored 0.12).
    pub fn usable(&self, min_coverage: f64) -> bool {
        self.error.is_none() && self.rank_ic.is_finite() && self.rank_ic_t.is_finite() && self.coverage >= min_coverage && self.day_share >= MIN_DAY_SHARE
    }
}

/// The share of train's dates a usable score has a Rank IC on.
pub const MIN_DAY_SHARE: f64 = 0.5;

/// How much a call may spend: variants evaluated, and seconds.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub evaluations: usize,
    pub seconds: f64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget { evaluations: usize::MAX, seconds: f64::INFINITY }
    }
}

/// Variants evaluated together: enough to share their common parts, few enough that
/// their panels (16 MB each on the full panel) stay in a few hundred MB.
const CHUNK: usize = 25;

/// Train data and a train scorer without the extra horizons' ICs, and the cache of
/// sub-expressions shared between calls.
pub struct Searcher {
    data: MarketData,
    scorer: Scorer,
    cache: EvalCache,
    max_window: usize,
    /// Seconds spent computing the variants' signals, and scoring them.
    pub seconds: (f64, f64),
    /// Dates of train whose label lies inside it.
    scored_days: usize,
}

impl Searcher {
    /// A searcher over `view`'s train period, keeping up to `cache_bytes` of sub-expression
    /// panels between calls.
    pub fn new(view: &MiningView, cache_bytes: usize, max_window: usize) -> Result<Searcher, DataError> {
        let (ts, te) = view.train.span();
        let data = view.data.truncate_dates(te);
        let cfg = MetricsConfig { ic_horizons: Vec::new(), ..view.train.config().clone() };
        let scorer = Scorer::new(&data, ts, te, cfg)?;
        let scored_days = (te - ts).saturating_sub(view.train.config().gap + view.train.config().horizon);
        Ok(Searcher { data, scorer, cache: EvalCache::new(cache_bytes), max_window, seconds: (0.0, 0.0), scored_days })
    }

    /// Forgets the sub-expressions kept so far.
    pub fn clear_cache(&mut self) {
        self.cache = EvalCache::new(self.cache.budget());
    }

    pub fn cache(&self) -> &EvalCache {
        &self.cache
    }

    /// Scores `variants` in order until the budget is spent: the scores of those
    /// evaluated (each with its text; a variant that does not compile scores nothing and
    /// says why, at no cost to the budget).
    pub fn score_variants(&mut self, variants: &[String], alphas: &dyn AlphaResolver, budget: Budget) -> Vec<Score> {
        let t0 = Instant::now();
        let mut out = Vec::new();
        let mut evaluated = 0;
        let mut rest = variants.iter();
        loop {
            if evaluated >= budget.evaluations || t0.elapsed().as_secs_f64() >= budget.seconds {
                break;
            }
            let mut c = Compiler::new(Schema::of(&self.data), alphas).with_max_window(self.max_window);
            let mut roots = Vec::new();
            let mut slots = Vec::new();
            for text in rest.by_ref() {
                match c.add(text) {
                    Ok(root) => {
                        slots.push(out.len());
                        roots.push(root);
                        evaluated += 1;
                    }
                    Err(e) => {
                        out.push(Score { text: text.clone(), error: Some(e.to_string()), ..Score::default() });
                        continue;
                    }
                }
                out.push(Score { text: text.clone(), ..Score::default() });
                if roots.len() == CHUNK || evaluated >= budget.evaluations {
                    break;
                }
            }
            if roots.is_empty() {
                break;
            }
            let t = Instant::now();
            let mut panels = vec![None; roots.len()];
            evaluate_cached(&c.graph, &roots, &self.data, Some(&mut self.cache), |i, p| panels[i] = Some(p));
            let panels: Vec<_> = panels.into_iter().flatten().collect();
            let refs: Vec<&crate::data::Panel> = panels.iter().map(|p| &**p).collect();
            self.seconds.0 += t.elapsed().as_secs_f64();
            let t = Instant::now();
            let metrics = self.scorer.score_many(&refs);
            self.seconds.1 += t.elapsed().as_secs_f64();
            for (m, &slot) in metrics.into_iter().zip(&slots) {
                let s = &mut out[slot];
                s.rank_ic = m.rank_ic;
                s.ic = m.ic;
                s.rank_ic_t = m.rank_ic_t();
                s.turnover = m.turnover;
                s.coverage = m.coverage;
                s.days = m.n_days;
                s.day_share = m.n_days as f64 / self.scored_days.max(1) as f64;
            }
        }
        out
    }
}

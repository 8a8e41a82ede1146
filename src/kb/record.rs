//! What the knowledge base stores: one [`AlphaRecord`] per attempt (accepted, rejected or
//! failed: the paper's KB deliberately keeps both), and free-standing [`Lesson`]s.
//!
//! The schema is versioned (`schema`); a record written by a newer alphaloop is refused
//! with a clear error rather than half-read.

use crate::backtest::Metrics;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the record layout written by this build.
pub const SCHEMA_VERSION: u32 = 1;

/// The language of an alpha's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    #[default]
    Expression,
    Python,
    Wasm,
}

/// Outcome of an attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum Status {
    Accepted,
    Rejected { reason: String },
    Error { message: String },
}

impl Status {
    /// The keyword stored (and indexed) in the payload.
    pub fn keyword(&self) -> &'static str {
        match self {
            Status::Accepted => "accepted",
            Status::Rejected { .. } => "rejected",
            Status::Error { .. } => "error",
        }
    }

    /// Why it is not accepted: the rejection's reason or the error's message (empty when
    /// accepted).
    pub fn reason(&self) -> &str {
        match self {
            Status::Accepted => "",
            Status::Rejected { reason } => reason,
            Status::Error { message } => message,
        }
    }
}

/// `accepted`, `rejected: REASON` or `error: MESSAGE`, as prompts and notes show it.
impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::Accepted => f.write_str("accepted"),
            Status::Rejected { reason } => write!(f, "rejected: {reason}"),
            Status::Error { message } => write!(f, "error: {message}"),
        }
    }
}

/// One judge review (rule checks, quick backtest or an LLM review).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct Review {
    /// Inner-loop round (1-based).
    pub round: u32,
    /// Who reviewed: `rules`, `backtest`, or the model name.
    pub reviewer: String,
    /// 0–10.
    pub score: f64,
    pub advice: String,
}

/// Verdict of the novelty checks at acceptance time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct Novelty {
    /// Largest |signal correlation| with an accepted alpha, and which one.
    pub max_corr: Option<f64>,
    pub max_corr_with: Option<String>,
    /// Whether `max_corr` is the full train panel's rank correlation (else the behaviour
    /// sample's; records stored before the exact check have the sample's).
    #[serde(default)]
    pub max_corr_exact: bool,
    /// Largest common subtree with an accepted alpha, as a share of this alpha's nodes.
    pub ast_overlap: Option<f64>,
    pub ast_overlap_with: Option<String>,
}

/// What an alpha added, when it was judged, to a fixed combination of the accepted set on
/// valid (see `agent::accept`). NaN (JSON `null`) where undefined: the "before" figures of
/// an empty set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct Gain {
    /// The combiner (`signed-mean`).
    pub combiner: String,
    /// Alphas in the set, without this one.
    pub set_size: usize,
    /// Mean daily difference of the combination's Rank IC with and without this alpha ...
    #[serde(deserialize_with = "crate::backtest::nan_if_null")]
    pub mean: f64,
    /// ... its t-statistic (Newey-West over horizon − 1 lags) and the days it is over.
    #[serde(deserialize_with = "crate::backtest::nan_if_null")]
    pub t: f64,
    pub days: usize,
    #[serde(deserialize_with = "crate::backtest::nan_if_null")]
    pub rank_ic_before: f64,
    #[serde(deserialize_with = "crate::backtest::nan_if_null")]
    pub rank_ic_after: f64,
    /// The combination's net long-short Sharpe on valid without and with it.
    #[serde(deserialize_with = "crate::backtest::nan_if_null")]
    pub sharpe_before: f64,
    #[serde(deserialize_with = "crate::backtest::nan_if_null")]
    pub sharpe_after: f64,
}

/// One alpha attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlphaRecord {
    #[serde(default = "schema_version")]
    pub schema: u32,
    pub id: String,
    #[serde(default)]
    pub kind: Kind,
    pub code: String,
    #[serde(default)]
    pub name: String,
    /// The trading idea, and the hypothesis the alpha tests.
    #[serde(default)]
    pub idea: String,
    #[serde(default)]
    pub hypothesis: String,
    #[serde(default)]
    pub family: String,
    #[serde(default)]
    pub tags: Vec<String>,
    /// Lineage: the records this one was derived from.
    #[serde(default)]
    pub parents: Vec<String>,
    #[serde(default)]
    pub generation: u32,
    /// Metrics per split name (`train`, `valid`; `test` only in a final report).
    #[serde(default)]
    pub metrics: BTreeMap<String, Metrics>,
    /// The label horizon and gap `metrics` were computed at (records stored before these
    /// were kept were scored at 1 and 1, the only label there was).
    #[serde(default = "one")]
    pub horizon: usize,
    #[serde(default = "one")]
    pub gap: usize,
    /// Candidates whose valid metrics were computed on the way to this record (the inner
    /// loop's rounds): the count a multiple-testing bar needs. Records stored before it
    /// was kept count as one.
    #[serde(default = "one")]
    pub attempts: usize,
    #[serde(default)]
    pub reviews: Vec<Review>,
    /// Short reflections after evaluation: what worked, what failed, why.
    #[serde(default)]
    pub lessons: Vec<String>,
    pub status: Status,
    #[serde(default)]
    pub novelty: Option<Novelty>,
    /// What it added to the accepted set's combination (candidates that reached the
    /// combination-aware rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gain: Option<Gain>,
    /// An accepted alpha's marginal contribution to the current accepted set (leave-one-out:
    /// the gain of adding it back to the set without it), kept current as the set grows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contribution: Option<Gain>,
    /// What citing it has been worth to the writers that did (0 to 1; none is the neutral
    /// 0.5): raised when an alpha that cited it was accepted, lowered when one was not
    /// ([`AlphaRecord::cited`]); retrieval weighs it ([`crate::kb::retrieve`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub importance: Option<f64>,
    /// Look-ahead check verdict (`clean`, or what was read from the future).
    #[serde(default)]
    pub lookahead: Option<String>,
    #[serde(default)]
    pub run_id: String,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub tokens: u64,
    #[serde(default)]
    pub cost_usd: f64,
    /// Seconds since the Unix epoch.
    #[serde(default)]
    pub created_at: i64,
}

/// The importance of a record no writer has cited.
pub const NEUTRAL_IMPORTANCE: f64 = 0.5;

fn one() -> usize {
    1
}

fn schema_version() -> u32 {
    SCHEMA_VERSION
}

impl AlphaRecord {
    /// A new record with the current time and schema; callers fill in the rest.
    pub fn new(id: impl Into<String>, kind: Kind, code: impl Into<String>, status: Status) -> AlphaRecord {
        AlphaRecord {
            schema: SCHEMA_VERSION,
            id: id.into(),
            kind,
            code: code.into(),
            name: String::new(),
            idea: String::new(),
            hypothesis: String::new(),
            family: String::new(),
            tags: Vec::new(),
            parents: Vec::new(),
            generation: 0,
            metrics: BTreeMap::new(),
            horizon: 1,
            gap: 1,
            attempts: 1,
            reviews: Vec::new(),
            lessons: Vec::new(),
            status,
            novelty: None,
            gain: None,
            contribution: None,
            importance: None,
            lookahead: None,
            run_id: String::new(),
            model: String::new(),
            tokens: 0,
            cost_usd: 0.0,
            created_at: now(),
        }
    }

    /// Its importance after a writer cited it for an alpha that was then accepted or not:
    /// a fifth of the way up to 1 on an acceptance, a tenth of the way down to 0 otherwise
    /// (most attempts fail, so one acceptance outweighs two failures).
    pub fn cited(&mut self, accepted: bool) {
        let i = self.importance.unwrap_or(NEUTRAL_IMPORTANCE);
        self.importance = Some(if accepted { i + 0.2 * (1.0 - i) } else { i - 0.1 * i });
    }

    /// A metric by name on a split (`None` when absent or not finite).
    pub fn metric(&self, split: &str, name: &str) -> Option<f64> {
        if name == "contribution" {
            // Measured on valid, in Rank IC a day.
            return self.contribution.as_ref().filter(|_| split == "valid").map(|c| c.mean).filter(|v| v.is_finite());
        }
        let m = self.metrics.get(split)?;
        metric_of(m, name).filter(|v| v.is_finite())
    }

    /// Refuses records whose metrics were computed at another label than `horizon` and
    /// `gap`: their figures do not compare with this command's, nor combine with them.
    pub fn same_label<'a>(recs: impl IntoIterator<Item = &'a AlphaRecord>, horizon: usize, gap: usize, what: &str) -> Result<(), String> {
        match recs.into_iter().find(|r| (r.horizon, r.gap) != (horizon, gap)) {
            None => Ok(()),
            Some(r) => Err(format!(
                "record {} was scored at horizon {} (gap {}), and {what} is at horizon {horizon} (gap {gap}): records of two labels do not compare; give --horizon {} --gap {} to work at its label, or import its formula again at this one",
                r.id, r.horizon, r.gap, r.horizon, r.gap
            )),
        }
    }

    /// The text the `idea` vector embeds.
    pub fn idea_text(&self) -> String {
        let mut s = String::new();
        for part in [&self.name, &self.idea, &self.hypothesis] {
            if !part.is_empty() {
                if !s.is_empty() {
                    s.push_str(". ");
                }
                s.push_str(part);
            }
        }
        if s.is_empty() {
            s = self.code.clone();
        }
        s
    }
}

/// Metric names accepted by `--by` and by metric filters.
pub const METRIC_NAMES: &[&str] = &[
    "ic", "rank_ic", "icir", "rank_icir", "ic_tstat", "rank_ic_t", "ic_h5", "ic_h10", "ic_h20", "sharpe", "ann_return",
    "max_drawdown", "turnover", "coverage", "distinctness",
];

/// Reads a metric by name.
pub fn metric_of(m: &Metrics, name: &str) -> Option<f64> {
    Some(match name {
        "ic" => m.ic,
        "rank_ic" => m.rank_ic,
        "icir" => m.icir,
        "rank_icir" => m.rank_icir,
        "ic_tstat" => m.ic_tstat,
        "rank_ic_t" => m.rank_ic_t(),
        "ic_h5" => m.ic_h5,
        "ic_h10" => m.ic_h10,
        "ic_h20" => m.ic_h20,
        "sharpe" => m.sharpe,
        "ann_return" => m.ann_return,
        "max_drawdown" => m.max_drawdown,
        "turnover" => m.turnover,
        "coverage" => m.coverage,
        "distinctness" => m.distinctness,
        "n_days" => m.n_days as f64,
        _ => return None,
    })
}

/// A reflection not tied to one alpha (e.g. a generation summary).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lesson {
    pub id: String,
    pub text: String,
    #[serde(default)]
    pub run_id: String,
    #[serde(default)]
    pub generation: u32,
    /// Records the lesson was drawn from.
    #[serde(default)]
    pub sources: Vec<String>,
    #[serde(default)]
    pub created_at: i64,
}

/// Seconds since the Unix epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The numeric point id a record id maps to (64-bit FNV-1a; the string id is kept in the
/// payload and checked on read, so a collision is detected rather than silently merged).
pub fn point_id(id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.as_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

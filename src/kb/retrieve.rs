//! Retrieval for the writer and the judge (and `kb search`): text queries against the
//! `idea` vectors, ranked by one documented score, diversified per retrieval type.
//!
//! **Score** of a record for a query:
//!
//! ```text
//! score = 0.5 · relevance + 0.25 · performance + 0.1 · recency + 0.15 · importance
//! relevance   = max(0, cosine(query, idea vector))
//! performance = clamp(0.5 + 10 · valid Rank IC, 0, 1)    (0.5 when there is none;
//!               a Rank IC of +0.05 scores 1, −0.05 scores 0)
//! recency     = 0.5 ^ (hours older than the newest candidate / 24)   (half-life of one day)
//! importance  = 0.5 + (stored importance − 0.5) · 0.5 ^ (the same hours / 168)
//! ```
//!
//! Importance is what citing the record has been worth: a writer names the records it
//! built on (its `USES:` line), and each cited record moves up when the alpha is accepted
//! and down when it is not ([`AlphaRecord::cited`]); as memories are in FinMem and
//! InvestorBench, it fades back to neutral (0.5) with a half-life of a week, so a record
//! that helped once does not crowd the context for good.
//!
//! Age is counted from the newest of the candidates, not from the clock, so retrieval is a
//! function of the KB's contents and the query alone: the same KB retrieves the same a day
//! later, and a run repeated on a copy of a KB mines the same alphas.
//!
//! Failures are ranked without the performance term (their metrics are poor by
//! definition; what matters is how close the mistake is to the new idea); lessons by
//! relevance and recency only.
//!
//! **Diversity** (FinAgent's diversified retrieval): from the best `4·k` candidates of each
//! type, maximal marginal relevance picks `k`, each step taking the candidate with the best
//! `score − 0.5 · (max cosine to one already picked)`, so five rewordings of one idea do not
//! fill the context.

use super::store::{Doc, IDEA};
use super::{AlphaRecord, Filter, Hit, Kb, KbError, Lesson};
use serde::Serialize;
use serde_json::Value;

pub const W_RELEVANCE: f64 = 0.5;
pub const W_PERFORMANCE: f64 = 0.25;
pub const W_RECENCY: f64 = 0.1;
pub const W_IMPORTANCE: f64 = 0.15;
/// Hours over which a cited record's importance halves its distance from neutral.
const IMPORTANCE_HALF_LIFE_HOURS: f64 = 168.0;
const DIVERSITY: f64 = 0.5;

/// What the writer sees from the KB for one idea.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Context {
    pub successes: Vec<Hit>,
    pub failures: Vec<Hit>,
    pub lessons: Vec<LessonHit>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LessonHit {
    pub score: f64,
    pub lesson: Lesson,
}

fn performance(r: &AlphaRecord) -> f64 {
    r.metric("valid", "rank_ic").map(|v| (0.5 + 10.0 * v).clamp(0.0, 1.0)).unwrap_or(0.5)
}

fn hours(created_at: i64, newest: i64) -> f64 {
    (newest - created_at).max(0) as f64 / 3600.0
}

fn recency(created_at: i64, newest: i64) -> f64 {
    0.5f64.powf(hours(created_at, newest) / 24.0)
}

/// A record's importance as retrieval weighs it: faded towards neutral with its age.
pub fn importance(r: &AlphaRecord, newest: i64) -> f64 {
    let n = super::record::NEUTRAL_IMPORTANCE;
    n + (r.importance.unwrap_or(n) - n) * 0.5f64.powf(hours(r.created_at, newest) / IMPORTANCE_HALF_LIFE_HOURS)
}

/// The documented score of a record; `newest` is the creation time of the newest
/// candidate.
pub fn score(relevance: f64, r: &AlphaRecord, with_performance: bool, newest: i64) -> f64 {
    mix(relevance, recency(r.created_at, newest), with_performance.then(|| performance(r)), importance(r, newest))
}

/// The weighted sum; without a performance term (failures) the other weights are rescaled
/// to sum to 1.
fn mix(relevance: f64, recency: f64, performance: Option<f64>, importance: f64) -> f64 {
    let rel = relevance.max(0.0);
    let rest = W_RELEVANCE * rel + W_RECENCY * recency + W_IMPORTANCE * importance;
    match performance {
        Some(p) => rest + W_PERFORMANCE * p,
        None => rest / (W_RELEVANCE + W_RECENCY + W_IMPORTANCE),
    }
}

/// Cosine similarity (0 when either vector is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        ab += (*x as f64) * (*y as f64);
        aa += (*x as f64) * (*x as f64);
        bb += (*y as f64) * (*y as f64);
    }
    if aa == 0.0 || bb == 0.0 {
        0.0
    } else {
        ab / (aa.sqrt() * bb.sqrt())
    }
}

/// Greedy maximal marginal relevance over (score, vector, item).
fn mmr<T>(mut cands: Vec<(f64, Vec<f32>, T)>, k: usize) -> Vec<(f64, T)> {
    let mut picked: Vec<(f64, Vec<f32>, T)> = Vec::new();
    while picked.len() < k && !cands.is_empty() {
        let (mut best, mut best_val) = (0, f64::NEG_INFINITY);
        for (i, (s, v, _)) in cands.iter().enumerate() {
            let sim = picked.iter().map(|(_, pv, _)| cosine(v, pv)).fold(0.0, f64::max);
            let val = s - DIVERSITY * sim;
            if val > best_val {
                (best, best_val) = (i, val);
            }
        }
        picked.push(cands.swap_remove(best));
    }
    picked.into_iter().map(|(s, _, t)| (s, t)).collect()
}

fn idea_vec(d: &Doc) -> Vec<f32> {
    d.vectors.iter().find(|(n, _)| n == IDEA).map(|(_, v)| v.clone()).unwrap_or_default()
}

impl Kb {
    /// Records nearest to a text query (semantic search), scored and diversified.
    pub fn search_text(&self, query: &str, filter: &Filter, k: usize, with_performance: bool) -> Result<Vec<Hit>, KbError> {
        let q = self.embedder().embed(&[query.to_string()])?.pop().unwrap_or_default();
        self.search_vec(&q, filter, k, with_performance)
    }

    fn search_vec(&self, q: &[f32], filter: &Filter, k: usize, with_performance: bool) -> Result<Vec<Hit>, KbError> {
        if k == 0 {
            return Ok(Vec::new());
        }
        let docs = self.nearest(IDEA, q, filter, 4 * k, true)?;
        let recs = docs.iter().map(|(_, d)| self.decode_doc(d)).collect::<Result<Vec<_>, _>>()?;
        let newest = recs.iter().map(|r| r.created_at).max().unwrap_or(0);
        let mut cands = Vec::with_capacity(docs.len());
        for ((rel, d), r) in docs.into_iter().zip(recs) {
            let s = score(rel as f64, &r, with_performance, newest);
            cands.push((s, idea_vec(&d), (rel as f64, r)));
        }
        Ok(mmr(cands, k).into_iter().map(|(score, (relevance, record))| Hit { score, relevance, record }).collect())
    }

    /// Lessons nearest to a text query.
    pub fn search_lessons(&self, q: &[f32], k: usize) -> Result<Vec<LessonHit>, KbError> {
        let docs = self.store().search(IDEA, q, &Filter::new().is("type", "lesson"), 4 * k.max(1), true)?;
        let lessons: Vec<(f32, Vec<f32>, Lesson)> = docs
            .into_iter()
            .filter_map(|(rel, d)| d.payload.get("lesson").and_then(|l| serde_json::from_value::<Lesson>(l.clone()).ok()).map(|l| (rel, idea_vec(&d), l)))
            .collect();
        let newest = lessons.iter().map(|(_, _, l)| l.created_at).max().unwrap_or(0);
        let cands = lessons
            .into_iter()
            .map(|(rel, v, l)| (mix(rel as f64, recency(l.created_at, newest), None, super::record::NEUTRAL_IMPORTANCE), v, l))
            .collect();
        Ok(mmr(cands, k).into_iter().map(|(score, lesson)| LessonHit { score, lesson }).collect())
    }

    /// The writer's context for an idea: similar successes, similar failures and lessons,
    /// `k` of each, diversified.
    pub fn retrieve(&self, idea: &str, k: usize) -> Result<Context, KbError> {
        let q = self.embedder().embed(&[idea.to_string()])?.pop().unwrap_or_default();
        Ok(Context {
            successes: self.search_vec(&q, &Filter::new().is("status", "accepted"), k, true)?,
            failures: self.search_vec(&q, &Filter::new().is_in("status", &["rejected", "error"]), k, false)?,
            lessons: self.search_lessons(&q, k)?,
        })
    }

    /// The judge's own retrieval: the stored attempts (accepted or not) whose code is
    /// nearest to `code` by the code vector, nearest first, without `code` itself.
    pub fn similar_attempts(&self, code: &str, k: usize) -> Result<Vec<Hit>, KbError> {
        if k == 0 {
            return Ok(Vec::new());
        }
        let q = self.embedder().embed(&[code.to_string()])?.pop().unwrap_or_default();
        let mut out = Vec::new();
        for (s, d) in self.nearest(super::store::CODE, &q, &Filter::new(), k + 1, false)? {
            let r = self.decode_doc(&d)?;
            if r.code != code {
                out.push(Hit { score: s as f64, relevance: s as f64, record: r });
            }
        }
        out.truncate(k);
        Ok(out)
    }

    /// Records that behave like `id` (behaviour vector; the code vector when the record has
    /// no behaviour vector, e.g. code that failed to run).
    pub fn similar(&self, id: &str, k: usize) -> Result<Vec<Hit>, KbError> {
        let (rec, b) = self.get_with_behaviour(id)?.ok_or_else(|| KbError::NotFound(id.to_string()))?;
        let (name, q) = match b {
            Some(b) => (super::store::BEHAVIOUR, b),
            None => {
                let v = self.embedder().embed(std::slice::from_ref(&rec.code))?.pop().unwrap_or_default();
                (super::store::CODE, v)
            }
        };
        let hits = self.nearest(name, &q, &Filter::new(), k + 1, false)?;
        let mut out = Vec::new();
        for (s, d) in hits {
            if d.payload.get("id").and_then(Value::as_str) == Some(id) {
                continue;
            }
            let r = self.decode_doc(&d)?;
            out.push(Hit { score: s as f64, relevance: s as f64, record: r });
        }
        out.truncate(k);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmr_prefers_diverse_items() {
        let c = vec![(0.9, vec![1.0, 0.0], "a"), (0.89, vec![1.0, 0.0], "a2"), (0.8, vec![0.0, 1.0], "b")];
        let got: Vec<&str> = mmr(c, 2).into_iter().map(|x| x.1).collect();
        assert_eq!(got, vec!["a", "b"]);
    }

    #[test]
    fn recency_halves_each_day() {
        assert!((recency(0, 86_400) - 0.5).abs() < 1e-12);
        assert_eq!(recency(100, 100), 1.0);
    }
}

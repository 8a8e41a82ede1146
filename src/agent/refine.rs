//! The refiner: a hill climb over a formula's neighbourhood ([`super::variants`]) on train,
//! scored by the [`Searcher`]. The writer proposes a structure; the refiner tries its
//! windows, constants, signs, operator swaps and smoothing wrappers, moves to the best
//! neighbour while it improves, and hands the best few it saw to the full checks and the
//! acceptance rule on valid. It never reads valid or test: the searcher's data ends with
//! train.
//!
//! The objective is the train Rank IC's t-statistic, either sign (a finalist whose Rank IC
//! is negative is handed on negated, which negates its Rank IC exactly), less a penalty for
//! each sub-expression the accepted set already overuses, so that the search does not
//! drift into the shapes every accepted alpha shares.

use super::gp::{to_text, Rng};
use super::search::{Budget, Score, Searcher};
use super::variants::{neighbours, sample};
use crate::expr::ast::{Expr, ExprKind};
use crate::expr::{parse, AlphaResolver};
use std::collections::{HashMap, HashSet};
use std::time::Instant;
use super::{canonical, f2, f4, AgentError, Candidate, Miner};

/// How hard the refiner works on one structure.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct RefineConfig {
    /// Variants scored on train per structure at most (0: no refinement) ...
    pub budget: usize,
    /// ... and seconds.
    pub seconds: f64,
    /// The best this many go on to the full checks.
    pub finalists: usize,
    /// A sub-expression in more than this share of the accepted alphas is overused ...
    pub overused_share: f64,
    /// ... and costs a variant this much of its objective (a t-statistic) per occurrence.
    pub overuse_penalty: f64,
    /// A variant with less coverage than this on train is not considered.
    pub min_coverage: f64,
    pub max_window: usize,
}

impl Default for RefineConfig {
    fn default() -> Self {
        RefineConfig { budget: 200, seconds: 60.0, finalists: 3, overused_share: 0.2, overuse_penalty: 1.0, min_coverage: 0.5, max_window: 250 }
    }
}

/// Sub-expressions the accepted set overuses, by their text.
#[derive(Clone, Debug, Default)]
pub struct Overuse(HashSet<String>);

/// Sub-expressions of at least this many nodes count (a field or `rank(close)` alone is
/// everyone's building block, not a shape).
const MIN_SHAPE: usize = 3;

impl Overuse {
    /// The sub-expressions found in more than `share` of `accepted` (counted once per
    /// alpha); none for a set of fewer than five, where a share means little.
    pub fn of(accepted: &[String], share: f64) -> Overuse {
        let parsed: Vec<Expr> = accepted.iter().filter_map(|c| parse(c).ok()).collect();
        if parsed.len() < 5 {
            return Overuse::default();
        }
        let mut counts: HashMap<String, usize> = HashMap::new();
        for e in &parsed {
            let mut own = HashSet::new();
            shapes(e, &mut own);
            for s in own {
                *counts.entry(s).or_default() += 1;
            }
        }
        let bar = share * parsed.len() as f64;
        Overuse(counts.into_iter().filter(|(_, n)| *n as f64 > bar).map(|(s, _)| s).collect())
    }

    /// How many of `e`'s sub-expressions are overused.
    pub fn count(&self, e: &Expr) -> usize {
        if self.0.is_empty() {
            return 0;
        }
        let mut own = HashSet::new();
        shapes(e, &mut own);
        own.iter().filter(|s| self.0.contains(*s)).count()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The text of every sub-expression of `e` of at least [`MIN_SHAPE`] nodes.
fn shapes(e: &Expr, out: &mut HashSet<String>) {
    if e.size() >= MIN_SHAPE {
        out.insert(to_text(e));
    }
    match &e.kind {
        ExprKind::Call { args, .. } => args.iter().for_each(|a| shapes(a, out)),
        ExprKind::Neg(a) => shapes(a, out),
        ExprKind::Binary(_, a, b) => {
            shapes(a, out);
            shapes(b, out);
        }
        ExprKind::Ternary(c, a, b) => {
            shapes(c, out);
            shapes(a, out);
            shapes(b, out);
        }
        _ => {}
    }
}

/// One formula the refiner scored, with its objective.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Tried {
    pub score: Score,
    pub objective: f64,
}

/// What a refinement found: the finalists (best first, each oriented so that its train
/// Rank IC is positive), the variants scored, and the path the climb took.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Refined {
    pub finalists: Vec<Tried>,
    pub evaluations: usize,
    pub path: Vec<String>,
}

/// Climbs from `start` through its neighbourhood on train.
pub fn refine(searcher: &mut Searcher, start: &str, alphas: &dyn AlphaResolver, overuse: &Overuse, cfg: &RefineConfig, rng: &mut Rng) -> Refined {
    let t0 = Instant::now();
    let mut out = Refined::default();
    let Ok(parsed) = parse(start) else { return out };
    let canonical = to_text(&parsed);
    let objective = |s: &Score| -> f64 {
        if !s.usable(cfg.min_coverage) {
            return f64::NEG_INFINITY;
        }
        let penalty = parse(&s.text).map_or(0, |e| overuse.count(&e)) as f64 * cfg.overuse_penalty;
        s.rank_ic_t.abs() - penalty
    };
    let left = |out: &Refined| Budget { evaluations: cfg.budget.saturating_sub(out.evaluations), seconds: cfg.seconds - t0.elapsed().as_secs_f64() };
    let mut tried: Vec<Tried> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    // Scores the formulas not seen yet, within what is left of the budget.
    let mut score = |texts: Vec<String>, out: &mut Refined, seen: &mut HashSet<String>| -> Vec<Tried> {
        let texts: Vec<String> = texts.into_iter().filter(|t| seen.insert(t.clone())).collect();
        let got: Vec<Tried> = searcher.score_variants(&texts, alphas, left(out)).into_iter().map(|s| Tried { objective: objective(&s), score: s }).collect();
        out.evaluations += got.iter().filter(|t| t.score.error.is_none()).count();
        tried.extend(got.iter().cloned());
        got
    };
    if cfg.budget == 0 {
        return out;
    }
    let Some(mut here) = score(vec![canonical], &mut out, &mut seen).pop() else { return out };
    out.path.push(here.score.text.clone());
    loop {
        let budget = left(&out);
        if budget.evaluations == 0 || budget.seconds <= 0.0 {
            break;
        }
        let Ok(e) = parse(&here.score.text) else { break };
        let mut next: Vec<String> = neighbours(&e, cfg.max_window).into_iter().map(|v| v.text).filter(|t| !seen.contains(t)).collect();
        if next.len() > budget.evaluations {
            // More neighbours than the budget has left: a random share of them.
            next = sample(rng, &e, usize::MAX, cfg.max_window).into_iter().map(|v| v.text).filter(|t| !seen.contains(t)).take(budget.evaluations).collect();
        }
        if next.is_empty() {
            break;
        }
        let got = score(next, &mut out, &mut seen);
        match got.into_iter().max_by(|a, b| a.objective.total_cmp(&b.objective)) {
            Some(best) if best.objective > here.objective => {
                out.path.push(best.score.text.clone());
                here = best;
            }
            _ => break,
        }
    }
    drop(score);
    tried.retain(|t| t.objective.is_finite());
    tried.sort_by(|a, b| b.objective.total_cmp(&a.objective));
    tried.truncate(cfg.finalists);
    for t in &mut tried {
        if t.score.rank_ic < 0.0 {
            t.score.text = format!("-1 * ({})", t.score.text);
            (t.score.rank_ic, t.score.ic, t.score.rank_ic_t) = (-t.score.rank_ic, -t.score.ic, -t.score.rank_ic_t);
        }
    }
    out.finalists = tried;
    out
}

/// What refining one candidate gave: the better candidate if any (and a note saying
/// from what), variants scored on train, finalists given the full checks and how many of
/// them reached valid.
#[derive(Default)]
pub(super) struct Refinement {
    pub(super) better: Option<Candidate>,
    pub(super) note: String,
    pub(super) spent: usize,
    pub(super) finalists: usize,
    pub(super) attempts: usize,
}

impl Miner<'_> {
    /// The sub-expressions the accepted expressions overuse (see [`Overuse`]).
    pub(super) fn overuse(&self) -> Result<Overuse, AgentError> {
        let codes: Vec<String> = self.kb.records(&crate::kb::Filter::new().is("status", "accepted").is("kind", "expression"))?.into_iter().map(|r| r.code).collect();
        Ok(Overuse::of(&codes, self.cfg.overused_share))
    }

    /// Refines `cand` with up to `budget` variants on train, then gives the finalists the
    /// full checks: the best of them that passes and beats `cand`'s train Rank IC t, if one
    /// does.
    pub(super) fn refine_candidate(&self, id: &str, cand: &Candidate, overuse: &Overuse, budget: usize, seed: u64) -> Result<Refinement, AgentError> {
        let cfg = RefineConfig {
            budget,
            overused_share: self.cfg.overused_share,
            overuse_penalty: self.cfg.overuse_penalty,
            min_coverage: self.cfg.min_coverage,
            max_window: self.cfg.max_window,
            ..Default::default()
        };
        let r = refine(&mut self.searcher()?.lock().unwrap_or_else(|p| p.into_inner()), &cand.code, self.kb, overuse, &cfg, &mut Rng::new(seed));
        let train_t = |c: &Candidate| c.metrics.get("train").map_or(f64::NAN, |m| m.rank_ic_t());
        let ok = |c: &Candidate| c.error.is_none() && c.novelty.as_ref().is_none_or(|v| v.reject.is_none() && v.repeat.is_none());
        let mut out = Refinement { spent: r.evaluations, ..Default::default() };
        let mut best: Option<Candidate> = None;
        for f in r.finalists.iter().filter(|f| canonical(&f.score.text, false) != canonical(&cand.code, false)) {
            let full = self.evaluate(id, &f.score.text)?;
            out.finalists += 1;
            out.attempts += full.metrics.contains_key("valid") as usize;
            let beats = |b: &Candidate| train_t(&full) > train_t(b);
            if ok(&full) && best.as_ref().is_none_or(beats) && (!ok(cand) || beats(cand) || !(train_t(cand) > 0.0)) {
                best = Some(full);
            }
        }
        if let Some(b) = &best {
            out.note = format!(
                "refined from `{}` over {} variants on train: train Rank IC {} (t {}) -> {} (t {})",
                cand.code,
                r.evaluations,
                f4(cand.metrics.get("train").map_or(f64::NAN, |m| m.rank_ic)),
                f2(train_t(cand)),
                f4(b.metrics.get("train").map_or(f64::NAN, |m| m.rank_ic)),
                f2(train_t(b))
            );
        }
        out.better = best;
        Ok(out)
    }

}

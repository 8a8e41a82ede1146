//! `kb recheck`: the current acceptance rule applied again to a knowledge base's accepted
//! alphas, in the order they were accepted, so that a rule changed after a run (or a set
//! mined under the stand-alone bars) can be judged by what would stay.
//!
//! The imported alphas (no run) form the starting set under `base = "seeds"`; each mined
//! alpha, oldest first, is evaluated anew on the mining data and judged against the set
//! kept so far: the window cap (`max_window`), the exact rank correlation over train with
//! every kept alpha (`max_corr`),
//! the stand-alone bars on its recomputed metrics, then the gain. What it keeps joins the
//! set. (The AST-overlap check is left out: it compares formulas, which the correlation
//! already covers for copies, and it would need the store's subtree cache per step.)

use super::accept::Member;
use super::{train_sign, AgentError, Base, MineConfig};
use crate::backtest::{Metrics, MiningView};
use crate::kb::ranks::{pooled_corr, RankStore};
use crate::kb::{AlphaRecord, Gain, Kb, Kind};

/// What the rule decides for one mined alpha.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Rechecked {
    pub id: String,
    pub code: String,
    pub kept: bool,
    /// Why it would not stay (empty when kept).
    pub reason: String,
    pub gain: Option<Gain>,
    /// The kept alpha it correlates with most, and how much (train panel).
    pub max_corr: Option<(String, f64)>,
}

/// The outcome: each mined alpha's decision, and the set's combination on valid with every
/// accepted alpha as stored and with what the rule keeps.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Recheck {
    pub alphas: Vec<Rechecked>,
    pub base: usize,
    pub before: Metrics,
    pub after: Metrics,
}

/// Applies `cfg`'s rule to `kb`'s accepted alphas in acceptance order.
pub fn recheck(kb: &Kb, view: &MiningView, store: &RankStore, cfg: &MineConfig) -> Result<Recheck, AgentError> {
    let (ts, te) = view.train.span();
    let dates = te - ts;
    let mut accepted = kb.accepted_ranks(store, &view.data, |_| true)?;
    accepted.sort_by(|a, b| (a.0.created_at, &a.0.id).cmp(&(b.0.created_at, &b.0.id)));
    let member = |r: &AlphaRecord, ranks: &std::sync::Arc<crate::kb::ranks::Ranks>| {
        train_sign(r.metrics.get("train")).map(|sign| Member { id: r.id.clone(), sign, ranks: ranks.clone() })
    };
    let (seeds, mined): (Vec<_>, Vec<_>) = accepted.into_iter().partition(|(r, _)| r.run_id.is_empty());
    // The mined alphas' metrics recomputed on this data and these settings, as mining would
    // have them (an import may carry none, or another period's).
    let mined: Vec<(AlphaRecord, _)> = mined
        .into_iter()
        .map(|(mut r, k)| {
            if r.kind == Kind::Expression {
                if let Ok(s) = crate::expr::eval_expr(&r.code, &view.data, kb) {
                    r.metrics = view.score(&s);
                    (r.horizon, r.gap) = view.label();
                }
            }
            (r, k)
        })
        .collect();
    let mut set: Vec<Member> = if cfg.base == Base::Seeds { seeds.iter().filter_map(|(r, k)| member(r, k)).collect() } else { Vec::new() };
    let base = set.len();
    let everything: Vec<Member> = seeds.iter().chain(&mined).filter_map(|(r, k)| member(r, k)).collect();
    let combiner = cfg.combiner();
    let before = combiner.metrics(view, store, &everything);
    let mut alphas = Vec::new();
    for (r, ranks) in &mined {
        let mut out = Rechecked { id: r.id.clone(), code: r.code.clone(), kept: false, reason: String::new(), gain: None, max_corr: None };
        // The rule checks that come before any metric: today's window cap.
        if r.kind == Kind::Expression {
            let mut c = crate::expr::Compiler::new(crate::expr::Schema::of(&view.data), kb).with_max_window(cfg.max_window);
            if let Err(e) = c.add(&r.code) {
                out.reason = e.to_string();
                alphas.push(out);
                continue;
            }
        }
        out.max_corr = set
            .iter()
            .filter_map(|m| pooled_corr(ranks, &m.ranks, dates).map(|c| (m.id.clone(), c)))
            .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()).then_with(|| b.0.cmp(&a.0)));
        if let Some((w, c)) = out.max_corr.as_ref().filter(|(_, c)| c.abs() >= cfg.novelty.max_corr) {
            out.reason = format!("too correlated with kept alpha {w}: {c:.3}");
        } else if let Some(reason) = cfg.below_bars(&r.metrics) {
            out.reason = reason;
        } else {
            let sign = train_sign(r.metrics.get("train")).unwrap_or(1.0);
            let g = combiner.gain(view, store, &set, sign, ranks);
            match cfg.too_little(&g) {
                Some(reason) => out.reason = reason,
                None => {
                    out.kept = true;
                    set.push(Member { id: r.id.clone(), sign, ranks: ranks.clone() });
                }
            }
            out.gain = Some(g);
        }
        alphas.push(out);
    }
    let after = combiner.metrics(view, store, &set);
    Ok(Recheck { alphas, base, before, after })
}

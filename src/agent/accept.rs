//! Acceptance that asks what an alpha adds to the set already accepted.
//!
//! A stand-alone bar (train Rank IC ≥ 0.002, valid ≥ 0) lets noise through: a coin flip
//! clears a valid Rank IC of 0 half the time, and 38 alphas accepted that way, through the
//! combined model, did worse on test than the published alphas they started from. So the
//! stand-alone bars stay as a cheap prefilter, and a candidate that clears them is judged
//! by what it adds to a fixed, cheap combination of the accepted set on valid:
//!
//! * **the combiner**, `signed-mean`: each date, the mean over the set's alphas (those
//!   finite on that cell) of their per-date rank, centred, each signed by its train Rank
//!   IC. It needs no fitting, so the gain cannot be an artefact of a fit.
//! * **the gain**: the paired daily differences of the combination's valid Rank IC with
//!   and without the candidate; their mean, and its t-statistic. With a horizon h > 1 the
//!   labels of neighbouring dates overlap and the differences are autocorrelated (lag-1
//!   about 0.5 at h = 5, against 0.03 at h = 1), so the standard error is Newey-West's with
//!   h − 1 lags; a plain one would overstate t by half.
//! * **the rule**: accept when t ≥ `min_gain_t`. Beside it the change in the combination's
//!   net long-short Sharpe on valid is recorded (and can be required not to fall).

use crate::backtest::MiningView;
use crate::data::Panel;
use crate::kb::ranks::{RankStore, Ranks};
use crate::kb::Gain;
use std::sync::Arc;

/// One alpha of the set: its stored ranks (train, then valid) and its sign.
pub struct Member {
    pub id: String,
    pub sign: f64,
    pub ranks: Arc<Ranks>,
}

/// The signed mean's running sums over the valid cells: alphas go in and out in one pass
/// over their ranks each, so a leave-one-out needs no pass over the rest.
#[derive(Clone)]
struct Combination {
    sum: Vec<f64>,
    count: Vec<u32>,
    /// The valid cells' range in a store's rows (train, then valid).
    cells: std::ops::Range<usize>,
}

impl Combination {
    /// The signed mean of `members`.
    fn of(view: &MiningView, store: &RankStore, members: &[Member]) -> Combination {
        let na = store.n_assets();
        let (ts, _) = view.train.span();
        let (vs, ve) = view.valid.span();
        let cells = (vs - ts) * na..(ve - ts) * na;
        let mut c = Combination { sum: vec![0.0; cells.len()], count: vec![0; cells.len()], cells };
        for m in members {
            c.add(m.sign, &m.ranks, false);
        }
        c
    }

    /// Adds (`sign`) or removes (`-sign`, `out`) an alpha's centred ranks.
    fn add(&mut self, sign: f64, ranks: &Ranks, out: bool) {
        let (w, k) = if out { (-sign, u32::MAX) } else { (sign, 1) };
        for ((s, c), &r) in self.sum.iter_mut().zip(self.count.iter_mut()).zip(&ranks.values()[self.cells.clone()]) {
            if r.is_finite() {
                *s += w * (r as f64 - 0.5);
                // Wrapping: adding u32::MAX is subtracting one.
                *c = c.wrapping_add(k);
            }
        }
    }

    /// The mean as a panel of the mining data's shape (NaN outside valid, and where no
    /// alpha is finite).
    fn panel(&self, view: &MiningView, na: usize) -> Panel {
        let n_dates = view.data.n_dates();
        let (vs, ve) = view.valid.span();
        let mut rows = vec![f64::NAN; n_dates * na];
        for ((o, s), c) in rows[vs * na..ve * na].iter_mut().zip(&self.sum).zip(&self.count) {
            if *c > 0 {
                *o = s / *c as f64;
            }
        }
        Panel::from_date_major(n_dates, na, &rows)
    }
}

/// The gain of going from the combination scored as `before` to the one scored as
/// `after` (`before` is `None` for an empty set: every day's Rank IC is then 0).
fn compare(view: &MiningView, set_size: usize, before: Option<&(crate::backtest::Metrics, crate::backtest::Daily)>, after: &(crate::backtest::Metrics, crate::backtest::Daily)) -> Gain {
    let diffs: Vec<f64> = match before {
        Some((_, db)) => after.1.rank_ic.iter().zip(&db.rank_ic).map(|(a, b)| a - b).filter(|d| d.is_finite()).collect(),
        None => after.1.rank_ic.iter().copied().filter(|d| d.is_finite()).collect(),
    };
    let lags = view.valid.config().horizon.saturating_sub(1);
    let (mean, t) = mean_t(&diffs, lags);
    Gain {
        combiner: "signed-mean".into(),
        set_size,
        mean,
        t,
        days: diffs.len(),
        rank_ic_before: before.map_or(f64::NAN, |b| b.0.rank_ic),
        rank_ic_after: after.0.rank_ic,
        sharpe_before: before.map_or(f64::NAN, |b| b.0.sharpe),
        sharpe_after: after.0.sharpe,
    }
}

/// Mean of `d` and its t-statistic, with Newey-West's standard error over `lags` lags
/// (Bartlett weights); a plain t at `lags = 0`. NaN with fewer than three values or none
/// of spread.
pub fn mean_t(d: &[f64], lags: usize) -> (f64, f64) {
    let n = d.len();
    if n < 3 {
        return (f64::NAN, f64::NAN);
    }
    let mean = d.iter().sum::<f64>() / n as f64;
    let gamma = |l: usize| d[l..].iter().zip(d).map(|(a, b)| (a - mean) * (b - mean)).sum::<f64>() / n as f64;
    let mut var = gamma(0);
    for l in 1..=lags.min(n - 1) {
        var += 2.0 * (1.0 - l as f64 / (lags + 1) as f64) * gamma(l);
    }
    if !(var > 0.0) {
        return (mean, f64::NAN);
    }
    (mean, mean / (var / n as f64).sqrt())
}

/// What the candidate (its ranks, signed by `sign`) adds to `members`' combination on
/// valid.
pub fn gain(view: &MiningView, store: &RankStore, members: &[Member], sign: f64, cand: &Ranks) -> Gain {
    let na = store.n_assets();
    let mut c = Combination::of(view, store, members);
    let before = (!members.is_empty()).then(|| view.valid.score_daily(&c.panel(view, na)));
    c.add(sign, cand, false);
    let after = view.valid.score_daily(&c.panel(view, na));
    compare(view, members.len(), before.as_ref(), &after)
}

/// The valid metrics of `members`' combination (default metrics for an empty set).
pub fn combination_metrics(view: &MiningView, store: &RankStore, members: &[Member]) -> crate::backtest::Metrics {
    if members.is_empty() {
        return Default::default();
    }
    view.valid.score(&Combination::of(view, store, members).panel(view, store.n_assets()))
}

/// Each member's marginal contribution: the gain of adding it back to the set without it
/// (leave-one-out), in the order given.
pub fn contributions(view: &MiningView, store: &RankStore, members: &[Member]) -> Vec<Gain> {
    let na = store.n_assets();
    let c = Combination::of(view, store, members);
    let all = view.valid.score_daily(&c.panel(view, na));
    members
        .iter()
        .map(|m| {
            // Each leave-one-out is the full sums less that one member, on a copy: removing
            // and re-adding in place would carry rounding from member to member.
            let mut w = c.clone();
            w.add(m.sign, &m.ranks, true);
            let without = (members.len() > 1).then(|| view.valid.score_daily(&w.panel(view, na)));
            compare(view, members.len() - 1, without.as_ref(), &all)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newey_west_widens_the_error_of_autocorrelated_differences() {
        // A positively autocorrelated series (each value repeated five times): its plain t
        // overstates, and Newey-West over four lags brings it down.
        let mut s = 7u64;
        let base: Vec<f64> = (0..200).map(|_| (crate::xorshift(&mut s) % 1000) as f64 / 1000.0 - 0.45).collect();
        let d: Vec<f64> = base.iter().flat_map(|&x| [x; 5]).collect();
        let (m0, t0) = mean_t(&d, 0);
        let (m4, t4) = mean_t(&d, 4);
        assert_eq!(m0, m4);
        assert!(t4 < t0 * 0.6 && t4 > 0.0, "plain {t0}, Newey-West {t4}");
        // Plain t is mean / (sd / sqrt(n)) with the population variance.
        let n = d.len() as f64;
        let var = d.iter().map(|x| (x - m0) * (x - m0)).sum::<f64>() / n;
        assert!((t0 - m0 / (var / n).sqrt()).abs() < 1e-9);
        assert!(mean_t(&[1.0, 1.0, 1.0], 0).1.is_nan());
        assert!(mean_t(&[1.0, 2.0], 0).0.is_nan());
    }
}

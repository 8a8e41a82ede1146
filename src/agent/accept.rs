//! Acceptance that asks what an alpha adds to the set already accepted.
//!
//! A stand-alone bar (train Rank IC ≥ 0.002, valid ≥ 0) lets noise through: a coin flip
//! clears a valid Rank IC of 0 half the time, and 38 alphas accepted that way, through the
//! combined model, did worse on test than the published alphas they started from. So the
//! stand-alone bars stay as a cheap prefilter, and a candidate that clears them is judged
//! by what it adds to a fixed, cheap combination of the accepted set on valid:
//!
//! * **the combiner**, `signed-mean` by default: each date, the mean over the set's alphas
//!   (those finite on that cell) of their per-date rank, centred, each signed by its train
//!   Rank IC. It needs no fitting, so the gain cannot be an artefact of a fit. `ridge`
//!   instead weighs the alphas by a ridge regression of the label's per-date rank on
//!   theirs, fit on train: it can tell two alphas that say the same thing from two that
//!   add up, at the price of a fit (kept cheap by caching the set's Gram matrix).
//! * **the gain**: the paired daily differences of the combination's valid Rank IC with
//!   and without the candidate; their mean, and its t-statistic. With a horizon h > 1 the
//!   labels of neighbouring dates overlap and the differences are autocorrelated (lag-1
//!   about 0.5 at h = 5, against 0.03 at h = 1), so the standard error is Newey-West's with
//!   h − 1 lags; a plain one would overstate t by half.
//! * **the rule**: accept when t ≥ `min_gain_t`. Beside it the change in the combination's
//!   net long-short Sharpe on valid is recorded (and can be required not to fall).

use crate::backtest::{Daily, Metrics, MiningView};
use crate::data::Panel;
use crate::kb::ranks::{centred_dot, RankStore, Ranks};
use crate::kb::Gain;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// One alpha of the set: its stored ranks (train, then valid) and its sign.
#[derive(Clone)]
pub struct Member {
    /// Its knowledge-base id: the ridge combiner caches products under it, so a member's
    /// id names one formula (a record's code never changes).
    pub id: String,
    pub sign: f64,
    pub ranks: Arc<Ranks>,
}

/// The fixed combination of the set a gain is measured on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Combine {
    /// The mean of the alphas' centred per-date ranks, each signed by its train Rank IC.
    #[default]
    SignedMean,
    /// Their centred per-date ranks weighted by a ridge regression of the label's, on train.
    Ridge,
}

impl Combine {
    pub fn name(self) -> &'static str {
        match self {
            Combine::SignedMean => "signed-mean",
            Combine::Ridge => "ridge",
        }
    }
}

/// The ridge penalty by default, as a share of the Gram matrix's mean diagonal (see
/// `docs/mining.md` for how it was chosen).
pub const DEFAULT_RIDGE_LAMBDA: f64 = 0.1;

/// A combiner and what it keeps between judgements: for `ridge`, the train label's ranks
/// and the products of the set's alphas with each other and with the label (a new
/// candidate then costs one pass per member, not one per pair).
pub struct Combiner {
    pub how: Combine,
    /// `ridge`: the penalty, as a share of the Gram matrix's mean diagonal.
    pub lambda: f64,
    /// The train label's per-date percentile ranks.
    label: OnceLock<Ranks>,
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    /// Centred products over train, keyed by the members' ids (the smaller first); the
    /// label's under the empty id.
    products: HashMap<(String, String), f64>,
    /// The last set judged against, by its members' ids.
    set: Option<(Vec<String>, Arc<(Combination, Option<(Metrics, Daily)>)>)>,
}

impl Combiner {
    pub fn new(how: Combine, lambda: f64) -> Combiner {
        Combiner { how, lambda, label: OnceLock::new(), cache: Mutex::default() }
    }

    /// What the candidate (its ranks, signed by `sign`) adds to `members`' combination on
    /// valid.
    pub fn gain(&self, view: &MiningView, store: &RankStore, members: &[Member], sign: f64, cand: &Ranks) -> Gain {
        let set = self.set(view, store, members);
        let after = match self.how {
            // The set's sums, then the candidate added to them.
            Combine::SignedMean => {
                let mut c = set.0.clone();
                c.add(sign, cand, false, false);
                self.score(view, store, &c)
            }
            // Every weight changes with the candidate: a fit of its own.
            Combine::Ridge => self.score(view, store, &self.combination(view, store, members, Some(cand))),
        };
        self.compare(view, members.len(), set.1.as_ref(), &after)
    }

    /// `members`' combination and its score (none for an empty set), kept while the
    /// candidates judged come against the same set: in the loop, all but those after an
    /// acceptance.
    fn set(&self, view: &MiningView, store: &RankStore, members: &[Member]) -> Arc<(Combination, Option<(Metrics, Daily)>)> {
        let ids: Vec<String> = members.iter().map(|m| m.id.clone()).collect();
        if let Some((kept, set)) = self.cache.lock().unwrap_or_else(|p| p.into_inner()).set.as_ref() {
            if *kept == ids {
                return set.clone();
            }
        }
        let c = self.combination(view, store, members, None);
        let score = (!members.is_empty()).then(|| self.score(view, store, &c));
        let set = Arc::new((c, score));
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).set = Some((ids, set.clone()));
        set
    }

    /// The valid Rank IC of `members`' combination (NaN for an empty set), kept with the
    /// set as for [`gain`](Self::gain): asking again after a rejection costs nothing.
    pub fn rank_ic(&self, view: &MiningView, store: &RankStore, members: &[Member]) -> f64 {
        self.set(view, store, members).1.as_ref().map_or(f64::NAN, |(m, _)| m.rank_ic)
    }

    /// The valid metrics of `members`' combination (default metrics for an empty set).
    pub fn metrics(&self, view: &MiningView, store: &RankStore, members: &[Member]) -> Metrics {
        if members.is_empty() {
            return Default::default();
        }
        view.valid.score(&self.combination(view, store, members, None).panel(view, store.n_assets()))
    }

    /// Each member's marginal contribution: the gain of adding it back to the set without
    /// it (leave-one-out), in the order given.
    pub fn contributions(&self, view: &MiningView, store: &RankStore, members: &[Member]) -> Vec<Gain> {
        let c = self.combination(view, store, members, None);
        let all = self.score(view, store, &c);
        (0..members.len())
            .map(|i| {
                let without = (members.len() > 1).then(|| {
                    let w = match self.how {
                        // The full sums less that one member, on a copy: removing and
                        // re-adding in place would carry rounding from member to member.
                        Combine::SignedMean => {
                            let mut w = c.clone();
                            w.add(-members[i].sign, &members[i].ranks, false, true);
                            w
                        }
                        // Every weight changes with the set: fit again without it.
                        Combine::Ridge => {
                            let others: Vec<Member> = members.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, m)| m.clone()).collect();
                            self.combination(view, store, &others, None)
                        }
                    };
                    self.score(view, store, &w)
                });
                self.compare(view, members.len() - 1, without.as_ref(), &all)
            })
            .collect()
    }

    /// Each member's weight in the combination: its sign for the signed mean (before the
    /// mean), its regression coefficient for the ridge.
    pub fn weights(&self, view: &MiningView, members: &[Member]) -> Vec<f64> {
        match self.how {
            Combine::SignedMean => members.iter().map(|m| m.sign).collect(),
            Combine::Ridge => self.ridge_weights(view, members, None),
        }
    }

    fn score(&self, view: &MiningView, store: &RankStore, c: &Combination) -> (Metrics, Daily) {
        view.valid.score_daily(&c.panel(view, store.n_assets()))
    }

    /// The combination of `members` and, for the ridge, a candidate.
    fn combination(&self, view: &MiningView, store: &RankStore, members: &[Member], cand: Option<&Ranks>) -> Combination {
        let mut c = Combination::new(view, store, self.how == Combine::SignedMean);
        match self.how {
            Combine::SignedMean => {
                for m in members {
                    c.add(m.sign, &m.ranks, false, false);
                }
            }
            Combine::Ridge => {
                let w = self.ridge_weights(view, members, cand);
                for (w, r) in w.iter().zip(members.iter().map(|m| &*m.ranks).chain(cand)) {
                    c.add(*w, r, true, false);
                }
            }
        }
        c
    }

    /// The ridge regression's weights of `members` and the candidate, last, on train.
    fn ridge_weights(&self, view: &MiningView, members: &[Member], cand: Option<&Ranks>) -> Vec<f64> {
        let (ts, te) = view.train.span();
        let dates = te - ts;
        let label = self.label.get_or_init(|| {
            let values: Vec<f64> = view.train.label_ranks().into_iter().map(f64::from).collect();
            Ranks::encode(&values, view.data.n_assets())
        });
        let dot = |a: &Ranks, b: &Ranks| centred_dot(a, b, label, dates);
        let of = |i: usize| -> &Ranks { &members[i].ranks };
        let k = members.len() + cand.is_some() as usize;
        let mut g = vec![0.0; k * k];
        let mut b = vec![0.0; k];
        {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            let products = &mut cache.products;
            let key = |a: &str, b: &str| if a <= b { (a.to_string(), b.to_string()) } else { (b.to_string(), a.to_string()) };
            // The pairs (and the products with the label, under "") not seen yet, in parallel.
            let mut missing: Vec<(usize, Option<usize>)> = Vec::new();
            for i in 0..members.len() {
                if !products.contains_key(&key(&members[i].id, "")) {
                    missing.push((i, None));
                }
                for j in i..members.len() {
                    if !products.contains_key(&key(&members[i].id, &members[j].id)) {
                        missing.push((i, Some(j)));
                    }
                }
            }
            let found: Vec<f64> = missing.par_iter().map(|&(i, j)| dot(of(i), j.map_or(label, of))).collect();
            for (&(i, j), v) in missing.iter().zip(found) {
                products.insert(key(&members[i].id, j.map_or("", |j| &members[j].id)), v);
            }
            for i in 0..members.len() {
                b[i] = products[&key(&members[i].id, "")];
                for j in i..members.len() {
                    let v = products[&key(&members[i].id, &members[j].id)];
                    (g[i * k + j], g[j * k + i]) = (v, v);
                }
            }
        }
        if let Some(c) = cand {
            // The candidate's products are not kept: it has no id of its own yet.
            let row: Vec<f64> = (0..members.len()).into_par_iter().map(|i| dot(c, of(i))).chain([dot(c, c), dot(c, label)]).collect();
            let last = k - 1;
            for (i, v) in row[..members.len()].iter().enumerate() {
                (g[i * k + last], g[last * k + i]) = (*v, *v);
            }
            g[last * k + last] = row[members.len()];
            b[last] = row[members.len() + 1];
        }
        ridge(&g, &b, self.lambda)
    }

    /// The gain of going from the combination scored as `before` to the one scored as
    /// `after` (`before` is `None` for an empty set: every day's Rank IC is then 0).
    fn compare(&self, view: &MiningView, set_size: usize, before: Option<&(Metrics, Daily)>, after: &(Metrics, Daily)) -> Gain {
        let diffs: Vec<f64> = match before {
            Some((_, db)) => after.1.rank_ic.iter().zip(&db.rank_ic).map(|(a, b)| a - b).filter(|d| d.is_finite()).collect(),
            None => after.1.rank_ic.iter().copied().filter(|d| d.is_finite()).collect(),
        };
        let lags = view.valid.config().horizon.saturating_sub(1);
        let (mean, t) = mean_t(&diffs, lags);
        Gain {
            combiner: self.how.name().into(),
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
}

/// The ridge solution `(G + λ·mean(diag G)·I)⁻¹ b` for the `k × k` Gram matrix `g`
/// (row-major) by Cholesky's factorisation; zeros when the diagonal is (no alpha has a
/// finite train cell) or the factorisation fails.
pub fn ridge(g: &[f64], b: &[f64], lambda: f64) -> Vec<f64> {
    let k = b.len();
    let pen = lambda * (0..k).map(|i| g[i * k + i]).sum::<f64>() / k.max(1) as f64;
    let mut l = vec![0.0; k * k];
    for i in 0..k {
        for j in 0..=i {
            let mut s = g[i * k + j] + if i == j { pen } else { 0.0 };
            for p in 0..j {
                s -= l[i * k + p] * l[j * k + p];
            }
            if i == j {
                if !(s > 0.0) {
                    return vec![0.0; k];
                }
                l[i * k + i] = s.sqrt();
            } else {
                l[i * k + j] = s / l[j * k + j];
            }
        }
    }
    // L y = b, then Lᵀ w = y.
    let mut y = vec![0.0; k];
    for i in 0..k {
        y[i] = (b[i] - (0..i).map(|p| l[i * k + p] * y[p]).sum::<f64>()) / l[i * k + i];
    }
    let mut w = vec![0.0; k];
    for i in (0..k).rev() {
        w[i] = (y[i] - (i + 1..k).map(|p| l[p * k + i] * w[p]).sum::<f64>()) / l[i * k + i];
    }
    w
}

/// A weighted combination's running sums over the valid cells: alphas go in and out in
/// one pass over their ranks each, so a signed mean's leave-one-out needs no pass over the
/// rest.
#[derive(Clone)]
struct Combination {
    sum: Vec<f64>,
    count: Vec<u32>,
    /// The valid cells' range in a store's rows (train, then valid).
    cells: std::ops::Range<usize>,
    /// The mean of the weighted ranks on each cell (the signed mean), else their sum (a
    /// regression's prediction, a missing rank counting as the centre).
    mean: bool,
    na: usize,
}

impl Combination {
    fn new(view: &MiningView, store: &RankStore, mean: bool) -> Combination {
        let na = store.n_assets();
        let (ts, _) = view.train.span();
        let (vs, ve) = view.valid.span();
        let cells = (vs - ts) * na..(ve - ts) * na;
        Combination { sum: vec![0.0; cells.len()], count: vec![0; cells.len()], cells, mean, na: na.max(1) }
    }

    /// Adds (weight `w`) or removes (`-w`, `out`) an alpha's centred ranks: on 0.5, or
    /// (`on_mean`) on each date's mean rank (a regression's sum, centred as it was fit).
    fn add(&mut self, w: f64, ranks: &Ranks, on_mean: bool, out: bool) {
        let k = if out { u32::MAX } else { 1 };
        let first = self.cells.start / self.na;
        let rows = self.sum.chunks_mut(self.na).zip(self.count.chunks_mut(self.na));
        for (d, (sum, count)) in rows.enumerate() {
            let (codes, n) = ranks.row(first + d);
            let top = 2.0 * n as f64;
            // Ranks and centres rounded to f32 on their way in: their sums in f64 are then
            // exact, so a member taken out leaves exactly the others' sums, and cells that
            // tie stay tied (a last-bit difference would order them and move the Rank IC).
            let centre = if on_mean { ((n as f64 + 1.0) / top) as f32 as f64 } else { 0.5 };
            for ((s, c), &q) in sum.iter_mut().zip(count.iter_mut()).zip(codes) {
                if q != 0 {
                    *s += w * ((q as f64 / top) as f32 as f64 - centre);
                    // Wrapping: adding u32::MAX is subtracting one.
                    *c = c.wrapping_add(k);
                }
            }
        }
    }

    /// The combination as a panel of the mining data's shape (NaN outside valid, and where
    /// no alpha is finite).
    fn panel(&self, view: &MiningView, na: usize) -> Panel {
        let n_dates = view.data.n_dates();
        let (vs, ve) = view.valid.span();
        let mut rows = vec![f64::NAN; n_dates * na];
        for ((o, s), c) in rows[vs * na..ve * na].iter_mut().zip(&self.sum).zip(&self.count) {
            if *c > 0 {
                *o = if self.mean { s / *c as f64 } else { *s };
            }
        }
        Panel::from_date_major(n_dates, na, &rows)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ridge_solves_the_penalised_normal_equations() {
        // G = [[4, 2], [2, 3]], b = [2, 1]: without a penalty w = G⁻¹ b = [0.5, 0].
        let (g, b) = ([4.0, 2.0, 2.0, 3.0], [2.0, 1.0]);
        let w = ridge(&g, &b, 0.0);
        assert!((w[0] - 0.5).abs() < 1e-12 && w[1].abs() < 1e-12, "{w:?}");
        // λ = 0.2 adds 0.2 × mean(4, 3) = 0.7 to the diagonal: (G + 0.7 I) w = b.
        let w = ridge(&g, &b, 0.2);
        for (row, bi) in [[4.7, 2.0], [2.0, 3.7]].iter().zip(b) {
            assert!((row[0] * w[0] + row[1] * w[1] - bi).abs() < 1e-12, "{w:?}");
        }
        // Two identical columns are solved once there is a penalty, and split the weight.
        let w = ridge(&[1.0, 1.0, 1.0, 1.0], &[1.0, 1.0], 0.1);
        assert!((w[0] - w[1]).abs() < 1e-12 && (w[0] - 1.0 / 2.1).abs() < 1e-12, "{w:?}");
        assert_eq!(ridge(&[1.0, 1.0, 1.0, 1.0], &[1.0, 1.0], 0.0), vec![0.0, 0.0], "singular without one");
        assert_eq!(ridge(&[0.0], &[0.0], 0.1), vec![0.0]);
    }

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

//! The judge of the inner loop: what it is shown of a candidate, its review, and the
//! advice the writer's next round receives.
//!
//! It is shown the candidate's train metrics by horizon and by calendar year, what it adds
//! to the accepted set's combination on valid, its nearest accepted alpha, the weakest of
//! these ([`weakness`]), and its own retrieval from the KB: the stored attempts whose code
//! is most like the candidate's, successes and failures, with how each ended, its last
//! review and its lesson ([`crate::kb::Kb::similar_attempts`]). The writer's next round
//! gets the weakness by name with the review's advice, so that it works on one thing.

use super::{f4, AgentError, Candidate, Idea, Miner, Timings};
use crate::backtest::Metrics;
use crate::kb::{Gain, Novelty, Review};
use std::time::Instant;

/// Stored attempts shown to the judge.
const ATTEMPTS: usize = 3;

/// An accepted alpha this correlated with the candidate's train ranks is the weakness to
/// name before any other (below the novelty rejection, which stops a candidate outright).
const NAMED_CORRELATION: f64 = 0.5;

/// A share of losing train years (Rank IC against the sign of the whole period) this high
/// is a weakness ...
const LOSING_YEARS: f64 = 0.25;

/// ... and so is an IC at 5 days below this share of the 1-day IC (or of the other sign).
const KEPT_AT_5_DAYS: f64 = 0.5;

/// Daily turnover of the long-short book above this is a weakness (each day trades more
/// than half the book) ...
const HIGH_TURNOVER: f64 = 0.5;

/// ... and, above a fifth of the book, so is a year's cost larger than half the book's
/// gross return.
const SOME_TURNOVER: f64 = 0.2;

/// The weakest point of a candidate, in words the writer can act on: the first that
/// applies of a train Rank IC below the bar (or of the wrong sign), a named accepted alpha
/// it correlates with, losing years, decay over horizons, turnover, and a gain to the
/// accepted set below the acceptance bar.
pub fn weakness(train: &Metrics, years: &[(i32, f64)], novelty: Option<&Novelty>, gain: Option<&Gain>, bar: f64, min_gain_t: f64, cost_bps: f64) -> String {
    let ric = train.rank_ic;
    if !ric.is_finite() {
        return "no signal: the train Rank IC is undefined".into();
    }
    if ric <= -bar {
        return format!("the wrong sign: train Rank IC {} (negate it)", f4(ric));
    }
    if ric < bar {
        return format!("a weak signal: train Rank IC {} is below the bar {}", f4(ric), bar);
    }
    if let Some(n) = novelty {
        if let (Some(c), Some(with)) = (n.max_corr, &n.max_corr_with) {
            if c.abs() >= NAMED_CORRELATION {
                return format!("correlation with alpha:{with} (|corr| {:.2} on train ranks): change what it measures, not its windows", c.abs());
            }
        }
    }
    let scored: Vec<&(i32, f64)> = years.iter().filter(|(_, r)| r.is_finite()).collect();
    let losing: Vec<&&(i32, f64)> = scored.iter().filter(|(_, r)| r * ric.signum() < 0.0).collect();
    if !scored.is_empty() && losing.len() as f64 >= LOSING_YEARS * scored.len() as f64 {
        if let Some((y, r)) = losing.iter().min_by(|a, b| (a.1 * ric.signum()).total_cmp(&(b.1 * ric.signum()))) {
            return format!("losing years: {} of {} train years go against it, the worst {y} (Rank IC {})", losing.len(), scored.len(), f4(*r));
        }
    }
    if train.ic.is_finite() && train.ic_h5.is_finite() && train.ic_h5 * train.ic.signum() < KEPT_AT_5_DAYS * train.ic.abs() {
        return format!(
            "decay over horizons: IC {} at 1 day, {} at 5, {} at 10, {} at 20",
            f4(train.ic),
            f4(train.ic_h5),
            f4(train.ic_h10),
            f4(train.ic_h20)
        );
    }
    let drag = cost_bps / 1e4 * train.turnover * 252.0;
    let gross = train.ann_return + drag;
    if train.turnover > HIGH_TURNOVER || (train.turnover > SOME_TURNOVER && drag > 0.5 * gross.abs()) {
        return format!("turnover: {:.2} of the book a day, costs {:.1}% a year against a gross {:.1}%", train.turnover, 100.0 * drag, 100.0 * gross);
    }
    if let Some(g) = gain {
        if !(g.t >= min_gain_t) {
            return format!("little added to the accepted alphas: gain t {} on valid, below {}", super::f2(g.t), min_gain_t);
        }
    }
    "none stands out: it clears every check shown".into()
}

/// Mean daily Rank IC per calendar year of `daily` (dates as indices into `dates`).
pub fn by_year(dates: &[crate::data::Date], daily: &crate::backtest::Daily) -> Vec<(i32, f64)> {
    let mut out: Vec<(i32, f64, usize)> = Vec::new();
    for (&i, &r) in daily.date.iter().zip(&daily.rank_ic) {
        let y = dates[i].ymd().0;
        if out.last().is_none_or(|l| l.0 != y) {
            out.push((y, 0.0, 0));
        }
        if r.is_finite() {
            let l = out.last_mut().expect("pushed");
            (l.1, l.2) = (l.1 + r, l.2 + 1);
        }
    }
    out.into_iter().map(|(y, s, n)| (y, if n > 0 { s / n as f64 } else { f64::NAN })).collect()
}

/// What the judge said of one round: its score, the review to store, and the advice the
/// writer's next round is given.
pub(super) struct Verdict {
    pub score: f64,
    pub review: Review,
    pub advice: String,
}

impl Miner<'_> {
    /// The judge's review of `cand` (which runs): its prompt, the model's reply, and the
    /// weakness named in the advice passed on.
    pub(super) fn review(&self, idea: &Idea, cand: &Candidate, id: &str, round: u32, seed: u32, tokens: &mut (u64, u64), t: &mut Timings) -> Result<Verdict, AgentError> {
        let m = cand.metrics.get("train").cloned().unwrap_or_default();
        let units = if self.cfg.check_units && !self.cfg.python { "units agree, " } else { "" };
        let rules = format!("passed (parses, fields exist, {units}complexity within limits, coverage ok, operators are causal)");
        let novelty = match &cand.novelty {
            Some(v) => match (&v.reject, &v.repeat) {
                (Some(r), _) => format!("REJECTED: {r}"),
                (None, Some(p)) => format!("REPEAT: behaves like the earlier attempt {p}; a different expression is needed"),
                (None, None) => match (v.novelty.max_corr, &v.novelty.max_corr_with) {
                    (Some(c), Some(with)) => format!("ok (nearest accepted alpha: alpha:{with}, |corr| {:.2})", c.abs()),
                    _ => "ok (no accepted alpha to compare with)".into(),
                },
            },
            None => "not checked".into(),
        };
        let t_kb = Instant::now();
        let gain = if cand.ranks.is_some() && self.cfg.accept == super::Accept::Gain { Some(self.judge_gain(id, cand)?.0) } else { None };
        let attempts = if self.cfg.no_kb { Vec::new() } else { self.kb.similar_attempts(&cand.code, ATTEMPTS)? };
        t.kb += t_kb.elapsed().as_secs_f64();
        let attempts: Vec<minijinja::Value> = attempts
            .iter()
            .map(|h| {
                let r = &h.record;
                let review = r.reviews.iter().rev().find(|v| v.reviewer != "rules" && v.reviewer != "refiner").map(|v| short(&v.advice, 160));
                minijinja::context! {
                    code => r.code.clone(),
                    outcome => short(&r.status.to_string(), 120),
                    rank_ic => r.metric("valid", "rank_ic").map(f4),
                    review => review,
                    lesson => r.lessons.first().map(|l| short(l, 160)),
                }
            })
            .collect();
        let weakness = weakness(&m, &cand.years, cand.novelty.as_ref().map(|v| &v.novelty), gain.as_ref(), self.cfg.min_train_rank_ic, self.cfg.min_gain_t, self.view.train.config().cost_bps);
        let years: Vec<String> = cand.years.iter().map(|(y, r)| format!("{y} {}", f4(*r))).collect();
        let user = self.templates.render(
            "judge_user.md",
            minijinja::context! {
                family => idea.family.clone(), hypothesis => idea.hypothesis.clone(), code => cand.code.clone(), rules => rules,
                ic => f4(m.ic), rank_ic => f4(m.rank_ic), icir => f4(m.icir), ic_h5 => f4(m.ic_h5), ic_h10 => f4(m.ic_h10), ic_h20 => f4(m.ic_h20),
                turnover => f4(m.turnover), coverage => f4(m.coverage), novelty => novelty,
                years => years.join(", "),
                gain => gain.as_ref().map(|g| format!("Rank IC {} a day, t {} (the bar is {})", f4(g.mean), super::f2(g.t), self.cfg.min_gain_t)),
                weakness => weakness.clone(), attempts => attempts,
            },
        )?;
        let system = self.templates.render("judge_system.md", minijinja::context! { bar => self.cfg.min_train_rank_ic })?;
        let tj = Instant::now();
        let reply = self.ask(&system, user, self.grammars.as_ref().map(|g| &g.review), 120, seed, tokens)?;
        t.judge += tj.elapsed().as_secs_f64();
        let (mut score, advice) = super::parse_review(&reply);
        if cand.novelty.as_ref().is_some_and(|v| v.reject.is_some() || v.repeat.is_some()) {
            score = score.min(3.0);
        }
        let advice = format!("Weakest point: {weakness}. {advice}");
        Ok(Verdict { score, review: Review { round, reviewer: self.llm.name(), score, advice: advice.clone() }, advice })
    }
}

/// `s` cut to at most `n` characters at a character boundary, with an ellipsis when cut.
fn short(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(rank_ic: f64, ic: f64, ic_h5: f64, turnover: f64) -> Metrics {
        Metrics { rank_ic, ic, ic_h5, turnover, ann_return: 0.05, ..Metrics::default() }
    }

    #[test]
    fn the_weakness_named_is_the_first_that_applies() {
        let years = [(2010, 0.02), (2011, 0.01), (2012, 0.03), (2013, 0.02)];
        let w = |m: &Metrics, y: &[(i32, f64)], n: Option<&Novelty>, g: Option<&Gain>| weakness(m, y, n, g, 0.01, 3.0, 5.0);
        assert!(w(&metrics(0.005, 0.01, 0.01, 0.1), &years, None, None).starts_with("a weak signal"));
        assert!(w(&metrics(-0.02, -0.01, -0.01, 0.1), &years, None, None).starts_with("the wrong sign"));
        let near = Novelty { max_corr: Some(-0.7), max_corr_with: Some("s042".into()), ..Novelty::default() };
        assert!(w(&metrics(0.02, 0.01, 0.01, 0.1), &years, Some(&near), None).contains("alpha:s042 (|corr| 0.70"));
        let losing = [(2010, 0.02), (2011, -0.01), (2012, -0.03), (2013, 0.02)];
        assert_eq!(w(&metrics(0.02, 0.01, 0.01, 0.1), &losing, None, None), "losing years: 2 of 4 train years go against it, the worst 2012 (Rank IC -0.0300)");
        assert!(w(&metrics(0.02, 0.01, 0.004, 0.1), &years, None, None).starts_with("decay over horizons: IC 0.0100 at 1 day, 0.0040 at 5"));
        assert!(w(&metrics(0.02, 0.01, 0.01, 0.7), &years, None, None).starts_with("turnover: 0.70 of the book a day"));
        let small = Gain { t: 1.2, ..Gain::default() };
        assert!(w(&metrics(0.02, 0.01, 0.01, 0.1), &years, None, Some(&small)).starts_with("little added to the accepted alphas: gain t 1.20"));
        assert!(w(&metrics(0.02, 0.01, 0.01, 0.1), &years, None, None).starts_with("none stands out"));
    }

    #[test]
    fn years_average_their_finite_days() {
        let dates: Vec<crate::data::Date> = ["2010-12-30", "2010-12-31", "2011-01-03", "2011-01-04"].iter().map(|s| s.parse().expect("date")).collect();
        let daily = crate::backtest::Daily { date: vec![0, 1, 2, 3], rank_ic: vec![0.1, 0.3, f64::NAN, -0.2], ..Default::default() };
        let y = by_year(&dates, &daily);
        assert_eq!(y.len(), 2);
        assert_eq!(y[0].0, 2010);
        assert!((y[0].1 - 0.2).abs() < 1e-12);
        assert_eq!(y[1], (2011, -0.2));
    }
}

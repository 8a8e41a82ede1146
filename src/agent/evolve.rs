//! Actions beyond a new idea (the outer loop's evolution): *refine* an accepted alpha on
//! the weakness the judge would name, or *combine* two accepted alphas into one. Each
//! action becomes an [`Idea`] the inner loop mines like any other, its parents the alphas
//! it started from; the bandit ([`super::ideas::Bandit`]) chooses among the actions and the
//! idea families, each rewarded by what its idea added to the accepted set's combination
//! on valid ([`reward`]).

use super::{AgentError, Idea, Miner};
use crate::kb::{AlphaRecord, Filter};

/// The bandit's arm that refines an elite, and the one that combines two.
pub const REFINE: &str = "refine";
pub const COMBINE: &str = "combine";
pub const ACTIONS: [&str; 2] = [REFINE, COMBINE];

/// A rise of the combination's valid Rank IC this large is a full reward: about what one
/// alpha that clears the gain bar adds to a set of a hundred (the seeds' combination sits
/// near 0.015; accepted alphas added 0.0005 to 0.003 in the recorded runs).
pub const REWARD_SCALE: f64 = 0.002;

/// An idea's reward from the combination's valid Rank IC before and after it was decided:
/// the rise over [`REWARD_SCALE`], in [0, 1]; 0 when either is unknown.
pub fn reward(before: Option<f64>, after: Option<f64>) -> f64 {
    match (before, after) {
        (Some(b), Some(a)) if a.is_finite() && b.is_finite() => ((a - b) / REWARD_SCALE).clamp(0.0, 1.0),
        _ => 0.0,
    }
}

/// The bandit's state after a run's logged outcomes, in log order: each outcome's reward
/// again, from the combination before and after it (logs written before the combination
/// was kept reward an acceptance 1). A resumed run continues from here.
pub fn replay(bandit: &mut super::ideas::Bandit, outcomes: &[super::Outcome], start: Option<f64>) {
    let mut before = start;
    for o in outcomes {
        let r = if o.combination.is_some() { reward(before, o.combination) } else { f64::from(u8::from(o.status == "accepted")) };
        before = o.combination.or(before);
        bandit.update(&o.family, r);
        bandit.skip(&o.family);
    }
}

/// Picks an index with probability proportional to `weights` (non-negative), from a
/// uniform draw `u` in [0, 1).
fn weighted(weights: &[f64], u: f64) -> usize {
    let total: f64 = weights.iter().sum();
    let mut at = u * total;
    for (i, w) in weights.iter().enumerate() {
        if at < *w {
            return i;
        }
        at -= w;
    }
    weights.len().saturating_sub(1)
}

impl Miner<'_> {
    /// The accepted alphas an action may start from (the set a candidate is combined with),
    /// each weighted by its marginal contribution (a floor, so that alphas whose
    /// contribution is not yet measured can be drawn).
    fn elites(&self) -> Result<Vec<(AlphaRecord, f64)>, AgentError> {
        let base = self.cfg.base;
        let recs = self.kb.records(&Filter::new().is("status", "accepted"))?;
        Ok(recs
            .into_iter()
            .filter(|r| base == super::Base::Seeds || !r.run_id.is_empty())
            .filter(|r| r.kind == crate::kb::Kind::Expression)
            .map(|r| {
                let w = r.contribution.as_ref().map_or(0.0, |g| g.mean).max(0.0) + 1e-4;
                (r, w)
            })
            .collect())
    }

    /// The actions that have what they need (one accepted alpha to refine, two to
    /// combine), from one read of the accepted set.
    pub fn actions_open(&self) -> Result<Vec<&'static str>, AgentError> {
        if self.cfg.python {
            return Ok(Vec::new());
        }
        let n = self.elites()?.len();
        Ok(ACTIONS.into_iter().filter(|a| n >= if *a == COMBINE { 2 } else { 1 }).collect())
    }

    /// The idea of an action for idea number `seq`: which alphas it starts from is drawn
    /// by contribution with a generator seeded by `seq` (a run repeats its draws).
    pub fn action_idea(&self, action: &str, seq: usize) -> Result<Option<Idea>, AgentError> {
        let elites = self.elites()?;
        let mut rng = super::gp::Rng::new(0x5eed_0000 ^ seq as u64 ^ u64::from(self.seed_mix()) << 32);
        let weights: Vec<f64> = elites.iter().map(|e| e.1).collect();
        let idea_of = |r: &AlphaRecord| if r.hypothesis.is_empty() { r.name.clone() } else { r.hypothesis.clone() };
        let (hypothesis, parents) = match action {
            REFINE if !elites.is_empty() => {
                let e = &elites[weighted(&weights, rng.f64())].0;
                let train = e.metrics.get("train").cloned().unwrap_or_default();
                let weakness = super::judge::weakness(&train, &[], e.novelty.as_ref(), e.contribution.as_ref(), self.cfg.min_train_rank_ic, self.cfg.min_gain_t, self.view.train.config().cost_bps);
                let text = self.templates.render("refine_elite.md", minijinja::context! { code => e.code.clone(), weakness => weakness, idea => idea_of(e) })?;
                (text, vec![e.id.clone()])
            }
            COMBINE if elites.len() >= 2 => {
                let i = weighted(&weights, rng.f64());
                let mut rest = weights.clone();
                rest[i] = 0.0;
                let j = weighted(&rest, rng.f64());
                let (a, b) = (&elites[i].0, &elites[j].0);
                let text = self.templates.render("combine_two.md", minijinja::context! { a_code => a.code.clone(), a_idea => idea_of(a), b_code => b.code.clone(), b_idea => idea_of(b) })?;
                (text, vec![a.id.clone(), b.id.clone()])
            }
            _ => return Ok(None),
        };
        Ok(Some(Idea { id: format!("{action}-{seq:04}"), family: action.to_string(), hypothesis: hypothesis.trim().to_string(), parents }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewards_are_the_combinations_rise_scaled_and_clipped() {
        assert!((reward(Some(0.015), Some(0.016)) - 0.5).abs() < 1e-12);
        assert_eq!(reward(Some(0.015), Some(0.02)), 1.0);
        assert_eq!(reward(Some(0.015), Some(0.014)), 0.0);
        assert_eq!(reward(None, Some(0.014)), 0.0);
        assert_eq!(reward(Some(f64::NAN), Some(0.014)), 0.0);
    }

    /// A resumed run's bandit is the one that ran: replaying the log gives the same next
    /// choices as the updates made while mining.
    #[test]
    fn the_bandit_replayed_from_the_log_chooses_as_the_live_one() {
        use crate::agent::ideas::{Arm, Bandit};
        let ideas: Vec<Idea> = ["a", "b", "c"]
            .iter()
            .flat_map(|f| (0..4).map(move |i| Idea { id: format!("{f}{i}"), family: f.to_string(), hypothesis: format!("{f} {i}"), parents: Vec::new() }))
            .collect();
        let outcome = |family: &str, combination: Option<f64>| crate::agent::Outcome {
            idea: String::new(),
            family: family.into(),
            record_id: String::new(),
            status: "rejected".into(),
            reason: String::new(),
            code: String::new(),
            rounds: 1,
            attempts: None,
            evaluations: None,
            train_rank_ic: None,
            valid_rank_ic: None,
            prompt_tokens: 0,
            completion_tokens: 0,
            cost_usd: 0.0,
            timings: Default::default(),
            combination,
            at_seconds: None,
            generation: None,
        };
        let start = Some(0.015);
        let (mut live, mut log) = (Bandit::new(&ideas), Vec::new());
        let can = |a: &str| a == REFINE;
        let combos = [None, Some(0.0152), Some(0.0152), Some(0.0161), None, Some(0.0161), Some(0.0175), Some(0.0175)];
        for c in combos {
            let family = match live.pick_arm(can).expect("an arm") {
                Arm::Idea(i) => i.family,
                Arm::Action(a) => a,
            };
            let o = outcome(&family, c);
            // As the mining loop does: the reward against the combination so far.
            let so_far = log.iter().rev().find_map(|o: &crate::agent::Outcome| o.combination).or(start);
            live.update(&family, reward(so_far, o.combination));
            log.push(o);
        }
        let mut replayed = Bandit::new(&ideas);
        replay(&mut replayed, &log, start);
        for _ in 0..6 {
            assert_eq!(live.pick_arm(can), replayed.pick_arm(can));
        }
    }

    #[test]
    fn weighted_draws_follow_the_weights() {
        assert_eq!(weighted(&[1.0, 0.0, 3.0], 0.0), 0);
        assert_eq!(weighted(&[1.0, 0.0, 3.0], 0.24), 0);
        assert_eq!(weighted(&[1.0, 0.0, 3.0], 0.26), 2);
        assert_eq!(weighted(&[1.0, 0.0, 3.0], 0.999), 2);
        assert_eq!(weighted(&[0.0, 2.0], 0.5), 1);
    }
}

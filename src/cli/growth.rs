//! How a run's combination grew: the accepted set's valid Rank IC, accepted alphas,
//! attempts, tokens and cost at the end of each hour of mining and of each generation,
//! from the run's outcomes, for the progress line and `alphaloop runs show`.

use crate::agent::Outcome;
use serde::Serialize;

/// One step of growth: everything up to the end of an hour or a generation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    /// The hour (1 = the first hour of mining) or the generation (0-based).
    pub at: u32,
    /// Ideas decided, accepted alphas and candidates tried on valid, so far.
    pub ideas: usize,
    pub accepted: usize,
    pub attempts: usize,
    /// The combination's valid Rank IC at the step's end (the last known value; NaN
    /// before any was measured).
    pub combination: f64,
    pub tokens: u64,
    pub cost_usd: f64,
}

/// The combination's valid Rank IC after `outcomes` (the last one that recorded it), else
/// `start`.
pub fn current(outcomes: &[Outcome], start: Option<f64>) -> f64 {
    outcomes.iter().rev().find_map(|o| o.combination).or(start).unwrap_or(f64::NAN)
}

/// Steps by `key` (an outcome's hour or generation; outcomes without one are left out),
/// each the totals up to and including its last outcome, in log order.
fn steps(outcomes: &[Outcome], start: Option<f64>, key: impl Fn(&Outcome) -> Option<u32>) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    let mut s = Step { at: 0, ideas: 0, accepted: 0, attempts: 0, combination: start.unwrap_or(f64::NAN), tokens: 0, cost_usd: 0.0 };
    for o in outcomes {
        s.ideas += 1;
        s.accepted += usize::from(o.status == "accepted");
        s.attempts += o.attempts.unwrap_or(usize::from(o.valid_rank_ic.is_some()));
        s.combination = o.combination.unwrap_or(s.combination);
        s.tokens += o.prompt_tokens + o.completion_tokens;
        s.cost_usd += o.cost_usd;
        let Some(at) = key(o) else { continue };
        s.at = at;
        match out.last_mut() {
            Some(last) if last.at == at => *last = s.clone(),
            _ => out.push(s.clone()),
        }
    }
    out
}

/// At the end of each hour of mining (hour 1 is the first).
pub fn by_hour(outcomes: &[Outcome], start: Option<f64>) -> Vec<Step> {
    steps(outcomes, start, |o| o.at_seconds.map(|s| (s / 3600.0).floor() as u32 + 1))
}

/// At the end of each generation.
pub fn by_generation(outcomes: &[Outcome], start: Option<f64>) -> Vec<Step> {
    steps(outcomes, start, |o| o.generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: &str, combination: Option<f64>, at: f64, generation: u32) -> Outcome {
        Outcome {
            idea: "i".into(),
            family: "f".into(),
            record_id: "r".into(),
            status: status.into(),
            reason: String::new(),
            code: "c".into(),
            rounds: 1,
            attempts: Some(2),
            evaluations: None,
            train_rank_ic: None,
            valid_rank_ic: None,
            prompt_tokens: 10,
            completion_tokens: 5,
            cost_usd: 0.5,
            timings: Default::default(),
            combination,
            at_seconds: Some(at),
            generation: Some(generation),
        }
    }

    #[test]
    fn steps_carry_the_last_known_combination_and_running_totals() {
        let o = vec![
            outcome("rejected", None, 100.0, 0),
            outcome("accepted", Some(0.021), 3000.0, 0),
            outcome("rejected", Some(0.021), 4000.0, 1),
            outcome("accepted", Some(0.025), 9000.0, 1),
        ];
        let h = by_hour(&o, Some(0.02));
        assert_eq!(h.iter().map(|s| (s.at, s.ideas, s.accepted, s.attempts)).collect::<Vec<_>>(), [(1, 2, 1, 4), (2, 3, 1, 6), (3, 4, 2, 8)]);
        assert_eq!(h.iter().map(|s| s.combination).collect::<Vec<_>>(), [0.021, 0.021, 0.025]);
        let g = by_generation(&o[..1], Some(0.02));
        assert_eq!((g[0].combination, g[0].tokens, g[0].cost_usd), (0.02, 15, 0.5), "before any measure: the start");
        assert_eq!(by_generation(&o, None).len(), 2);
        assert_eq!(current(&o[..1], Some(0.02)), 0.02);
        assert_eq!(current(&o, Some(0.02)), 0.025);
        assert!(current(&[], None).is_nan());
    }
}

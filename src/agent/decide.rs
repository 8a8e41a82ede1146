//! The decision on a candidate: the stand-alone bars and novelty, then what it adds to
//! the accepted set's combination ([`super::accept`]); the members' contributions kept
//! current; and, for miners sharing a server, the check again after the write.

use super::{accept, train_sign, Accept, AgentError, Base, Candidate, Judged, Miner};
use crate::kb::{AlphaRecord, Kind, Status};

impl Miner<'_> {
    pub(super) fn rank_store(&self) -> &crate::kb::ranks::RankStore {
        self.ranks.get_or_init(|| self.kb.rank_store(&self.view.data, self.view.train.span().0, self.view.valid.span().1))
    }

    /// The accepted set a candidate `id` is combined with (`base`), with signs and ranks.
    pub(super) fn members(&self, id: &str) -> Result<Vec<(AlphaRecord, accept::Member)>, AgentError> {
        let base = self.cfg.base;
        let set = self.kb.accepted_ranks(self.rank_store(), &self.view.data, |r| r.id != id && (base == Base::Seeds || !r.run_id.is_empty()))?;
        Ok(set
            .into_iter()
            .filter_map(|(r, ranks)| {
                let sign = train_sign(r.metrics.get("train"))?;
                let m = accept::Member { sign, id: r.id.clone(), ranks };
                Some((r, m))
            })
            .collect())
    }

    /// The valid Rank IC of the accepted set's combination (NaN while it is empty).
    pub fn combination_rank_ic(&self) -> Result<f64, AgentError> {
        let members: Vec<accept::Member> = self.members("")?.into_iter().map(|(_, m)| m).collect();
        Ok(self.combiner.rank_ic(self.view, self.rank_store(), &members))
    }

    /// What `cand` adds to the accepted set's combination on valid, and the reason to
    /// reject it if that is too little.
    pub(super) fn judge_gain(&self, id: &str, cand: &Candidate) -> Result<(crate::kb::Gain, Option<String>), AgentError> {
        let ranks = cand.ranks.as_ref().ok_or_else(|| AgentError::Invalid("a candidate with metrics has ranks".into()))?;
        let members: Vec<accept::Member> = self.members(id)?.into_iter().map(|(_, m)| m).collect();
        let sign = train_sign(cand.metrics.get("train")).unwrap_or(1.0);
        let g = self.combiner.gain(self.view, self.rank_store(), &members, sign, ranks);
        let reason = self.cfg.too_little(&g);
        Ok((g, reason))
    }

    /// Once `rec` is accepted: every member's leave-one-out contribution to the set that
    /// now holds it, `rec`'s set on it and the others' rewritten in the store.
    pub(super) fn update_contributions(&self, rec: &mut AlphaRecord) -> Result<(), AgentError> {
        let Some(sign) = train_sign(rec.metrics.get("train")) else { return Ok(()) };
        let (mut others, mut members): (Vec<AlphaRecord>, Vec<accept::Member>) = self.members(&rec.id)?.into_iter().unzip();
        // Its ranks, as kept a moment ago.
        let Some(own) = self.rank_store().get_or_compute(&rec.id, &rec.code, || None)? else { return Ok(()) };
        members.push(accept::Member { id: rec.id.clone(), sign, ranks: own });
        let mut gains = self.combiner.contributions(self.view, self.rank_store(), &members);
        rec.contribution = gains.pop();
        for (r, g) in others.iter_mut().zip(gains) {
            r.contribution = Some(g);
        }
        self.kb.update(&others)?;
        Ok(())
    }

    /// Claim and verify, for miners sharing a server: an accepted record is written first
    /// and then checked again against every accepted alpha the KB now holds. One accepted
    /// by another miner since this one's check that it repeats (the novelty rules: rank
    /// correlation, shared subtree) is a conflict, and this record steps back. Of two
    /// miners accepting near-identical alphas at once, the later to read back sees the
    /// other and steps back (both, when each reads after the other's write): never do two
    /// such alphas both stay. The reason to step back, if any. An embedded store has one
    /// writer (a second process is refused), so there nothing can have changed since the
    /// check and it is not read again.
    pub(super) fn conflict(&self, rec: &AlphaRecord, best: &Candidate) -> Result<Option<String>, AgentError> {
        if rec.status != Status::Accepted || self.cfg.no_kb || !self.kb.shared() {
            return Ok(None);
        }
        let Some(ranks) = &best.ranks else { return Ok(None) };
        let v = self.novelty(&rec.id, rec.kind, &rec.code, best.behaviour.as_deref(), ranks)?;
        Ok(v.reject.map(|r| format!("{r}, accepted by another miner while this one was judged")))
    }

    /// Whether a candidate is accepted: its error, the novelty checks and the stand-alone
    /// bars first, then (the `gain` rule) what it adds to the accepted set's combination.
    pub(super) fn decide(&self, id: &str, best: &Candidate) -> Result<(Status, Option<crate::kb::Gain>), AgentError> {
        let status = if let Some(e) = &best.error {
            Status::Error { message: e.clone() }
        } else if let Some(r) = best.novelty.as_ref().and_then(|v| v.reject.clone()) {
            Status::Rejected { reason: r }
        } else if let Some(reason) = self.cfg.below_bars(&best.metrics) {
            Status::Rejected { reason }
        } else {
            Status::Accepted
        };
        if status != Status::Accepted || self.cfg.accept != Accept::Gain {
            return Ok((status, None));
        }
        let (g, reason) = self.judge_gain(id, best)?;
        Ok((reason.map_or(Status::Accepted, |reason| Status::Rejected { reason }), Some(g)))
    }

    /// What the loop would decide for expression `code` as candidate `id`, without storing
    /// anything: the rule checks, metrics, novelty and the acceptance rule.
    pub fn judge_expression(&self, id: &str, code: &str) -> Result<Judged, AgentError> {
        let cand = self.evaluate(id, code)?;
        let (status, gain) = self.decide(id, &cand)?;
        Ok(Judged { status, gain, novelty: cand.novelty.map(|v| v.novelty), metrics: cand.metrics })
    }

    /// [`judge_expression`](Self::judge_expression) for a signal computed elsewhere (a null
    /// model's shuffle, a program's output), with its gain measured whatever the decision
    /// (a null model reports the gain of every draw, not only of those the bars let by).
    pub fn judge_signal(&self, id: &str, code: &str, sig: &crate::data::Panel) -> Result<(Judged, crate::kb::Gain), AgentError> {
        let mut cand = Candidate::new(code);
        self.score_signal(&mut cand, id, Kind::Expression, sig)?;
        let (status, gain) = self.decide(id, &cand)?;
        let measured = match &gain {
            Some(g) => g.clone(),
            None => self.judge_gain(id, &cand)?.0,
        };
        Ok((Judged { status, gain, novelty: cand.novelty.map(|v| v.novelty), metrics: cand.metrics }, measured))
    }
}

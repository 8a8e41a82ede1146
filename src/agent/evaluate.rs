//! A candidate's evaluation: the rule checks (parse, complexity, constants, units), the
//! signal on the mining data and on its noised twin (the look-ahead check), its metrics on
//! train and valid, behaviour vector, novelty and per-date ranks; a Python factor through
//! the sandbox.

use super::{judge, AgentError, Candidate, Miner};
use crate::expr::{evaluate, Compiler, Schema};
use crate::kb::Kind;

impl Miner<'_> {
    /// Compiles, checks and backtests one expression on train (and valid, kept for the final
    /// answer only: the judge sees train).
    pub(super) fn evaluate(&self, id: &str, code: &str) -> Result<Candidate, AgentError> {
        if let Some(sb) = &self.sandbox {
            return self.evaluate_python(sb, id, code);
        }
        let mut cand = Candidate::new(code);
        let parsed = match crate::expr::parse(code) {
            Ok(e) => e,
            Err(e) => {
                cand.error = Some(e.to_string());
                return Ok(cand);
            }
        };
        if let Some(e) = self.cfg.too_complex(&parsed) {
            cand.error = Some(e);
            return Ok(cand);
        }
        if let Some(k) = parsed.constant_call() {
            let at = crate::expr::ExprError::at(code, k.span, "");
            cand.error = Some(format!("`{}` at {} reads no data: it is one number for every stock and date, so it ranks nothing, and a term made of it changes no ranking; drop it or give it a field", at.fragment(60), at.pos));
            return Ok(cand);
        }
        if let Some(id) = parsed.only_alpha() {
            cand.error = Some(format!("`alpha:{id}` alone restates that alpha up to sign and scale; build on it instead: combine it with another signal, or change what it measures"));
            return Ok(cand);
        }
        if self.cfg.check_units {
            if let Err(e) = crate::expr::units::check(&parsed, code) {
                // Quoted, since a model reads a position poorly.
                let hint = e.hint.as_deref().map(|h| format!("; {h}")).unwrap_or_default();
                cand.error = Some(format!("units: {} at {} (`{}`){hint}", e.msg, e.pos, e.fragment(60)));
                return Ok(cand);
            }
        }
        // `alpha:ID` builds on a record of the KB (the novelty check compares signals, so
        // `alpha:ID` of an accepted ID alone is a copy of it).
        let mut c = Compiler::new(Schema::of(&self.view.data), self.kb).with_max_window(self.cfg.max_window);
        let root = match c.add(code) {
            Ok(r) => r,
            Err(e) => {
                cand.error = Some(e.to_string());
                return Ok(cand);
            }
        };
        let mut sig = None;
        evaluate(&c.graph, &[root], &self.view.data, |_, p| sig = Some(p));
        let Some(sig) = sig else {
            cand.error = Some("the expression produced no value".into());
            return Ok(cand);
        };
        let mut noisy = None;
        let noised = self.noised.get_or_init(|| crate::sandbox::lookahead::noised(&self.view.data, self.cutoff, crate::sandbox::lookahead::SEED));
        evaluate(&c.graph, &[root], noised, |_, p| noisy = Some(p));
        if let Some(noisy) = noisy {
            let la = crate::sandbox::lookahead::compare(&self.view.data, &sig, &noisy, self.cutoff);
            if !la.is_clean() {
                cand.error = Some(la.to_string());
            }
            cand.lookahead = Some(la);
        }
        self.score_signal(&mut cand, id, Kind::Expression, &sig)?;
        Ok(cand)
    }

    /// What every candidate that produced a signal goes through, whatever wrote it: train
    /// and valid metrics, the behaviour vector, the coverage rule and the novelty checks.
    pub(super) fn score_signal(&self, cand: &mut Candidate, id: &str, kind: Kind, sig: &crate::data::Panel) -> Result<(), AgentError> {
        let ((train, daily), valid) = rayon::join(|| self.view.train.score_daily(sig), || self.view.valid.score(sig));
        cand.years = judge::by_year(&self.view.data.dates, &daily);
        cand.metrics = [("train".to_string(), train), ("valid".to_string(), valid)].into_iter().collect();
        cand.behaviour = self.sample.vector(&self.view.data, sig);
        if let Some(m) = cand.metrics.get("train") {
            if !(m.coverage >= self.cfg.min_coverage) {
                cand.error = Some(format!("coverage {:.2} on train is below {:.2}", m.coverage, self.cfg.min_coverage));
            }
        }
        let ranks = self.rank_store().rank(sig);
        if !self.cfg.no_kb {
            cand.novelty = Some(self.novelty(id, kind, &cand.code, cand.behaviour.as_deref(), &ranks)?);
        }
        cand.ranks = Some(ranks);
        Ok(())
    }

    /// The novelty checks of a candidate with these ranks against the accepted set as the
    /// KB holds it now, the rank correlation exact over the train panel.
    pub(super) fn novelty(&self, id: &str, kind: Kind, code: &str, behaviour: Option<&[f32]>, ranks: &crate::kb::ranks::Ranks) -> Result<crate::kb::novelty::Verdict, AgentError> {
        let (ts, te) = self.view.train.span();
        let exact = crate::kb::novelty::Exact { store: self.rank_store(), candidate: ranks, data: &self.view.data, dates: te - ts };
        Ok(self.kb.check_novelty(id, kind, code, behaviour, Some(&exact), &self.cfg.novelty)?)
    }

    /// A Python factor through the sandbox (which runs the look-ahead check); a refused
    /// program's verdict, with its trimmed traceback, becomes the candidate's error and so
    /// the writer's next advice.
    pub(super) fn evaluate_python(&self, sb: &std::sync::Mutex<crate::sandbox::PySandbox>, id: &str, code: &str) -> Result<Candidate, AgentError> {
        let mut cand = Candidate::new(code);
        if code.len() > 8_000 {
            cand.error = Some(format!("too long: {} characters (limit 8000)", code.len()));
            return Ok(cand);
        }
        let result = sb.lock().unwrap_or_else(|p| p.into_inner()).evaluate(code, None);
        match result {
            Ok(ev) => {
                cand.lookahead = Some(ev.lookahead);
                self.score_signal(&mut cand, id, Kind::Python, &ev.signal)?;
            }
            Err(v) if v.kind == "error" => cand.error = Some(v.message),
            Err(v) => cand.error = Some(v.to_string()),
        }
        Ok(cand)
    }
}

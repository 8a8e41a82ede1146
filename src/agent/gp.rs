//! The `--writer gp` baseline: genetic programming over the same expression language, with
//! no LLM, so the value of the LLM can be measured at an equal evaluation budget. Random
//! trees come from the operator catalogue; mutation replaces a random subtree with a new
//! random one; crossover swaps subtrees between two parents; parents are drawn by
//! tournament from a population seeded with the KB's accepted expressions.

use crate::expr::ast::{BinOp, Expr, ExprKind};
use crate::expr::ops::{Param, CATALOGUE};
use crate::expr::Span;
use super::{f4, search, AgentError, Candidate, Idea, Miner, Outcome, Review, Timings};
use std::time::Instant;

/// A small deterministic generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.f64() <= p
    }
    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

const FIELDS: &[&str] = &["open", "high", "low", "close", "volume", "returns", "vwap", "adv20"];
const WINDOWS: &[f64] = &[2.0, 3.0, 5.0, 10.0, 20.0, 40.0, 60.0];

fn node(kind: ExprKind) -> Expr {
    Expr { kind, span: Span::default() }
}

/// Operators GP may call (named, with series arguments first).
fn ops() -> Vec<&'static crate::expr::ops::OpDef> {
    CATALOGUE
        .iter()
        .filter(|o| !["min2", "max2", "add", "sub", "mul", "div", "neg", "pow", "signedpower"].contains(&o.name))
        .filter(|o| !o.params.is_empty() && o.name.chars().all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()))
        .filter(|o| !o.params.iter().any(|p| matches!(p, Param::Group)))
        .collect()
}

/// A random expression of at most `depth` levels, its leaves drawn from the standard
/// fields and `extra` ones.
pub fn random(rng: &mut Rng, depth: usize, extra: &[String]) -> Expr {
    if depth <= 1 || rng.chance(0.2) {
        let k = rng.below(FIELDS.len() + extra.len());
        return node(ExprKind::Ident(FIELDS.get(k).map_or_else(|| extra[k - FIELDS.len()].clone(), |f| f.to_string())));
    }
    if rng.chance(0.25) {
        let op = [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div][rng.below(4)];
        return node(ExprKind::Binary(op, Box::new(random(rng, depth - 1, extra)), Box::new(random(rng, depth - 1, extra))));
    }
    let all = ops();
    let op = all[rng.below(all.len())];
    let mut args = Vec::new();
    for p in op.params {
        match p {
            Param::Series => args.push(random(rng, depth - 1, extra)),
            Param::Window => args.push(node(ExprKind::Num(WINDOWS[rng.below(WINDOWS.len())]))),
            Param::Level => args.push(node(ExprKind::Num([0.2, 0.5, 0.8][rng.below(3)]))),
            Param::Optional(_) | Param::Group => {}
        }
    }
    node(ExprKind::Call { name: op.name.into(), name_span: Span::default(), args })
}

/// The expression as text that parses back to the same tree.
pub fn to_text(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Num(v) => {
            if *v < 0.0 {
                format!("({v})")
            } else {
                format!("{v}")
            }
        }
        ExprKind::Ident(s) => s.clone(),
        ExprKind::AlphaRef(s) => format!("alpha:{s}"),
        ExprKind::Call { name, args, .. } => format!("{name}({})", args.iter().map(to_text).collect::<Vec<_>>().join(", ")),
        ExprKind::Neg(a) => format!("-({})", to_text(a)),
        ExprKind::Binary(op, a, b) => format!("({} {} {})", to_text(a), op.symbol(), to_text(b)),
        ExprKind::Ternary(c, a, b) => format!("({} ? {} : {})", to_text(c), to_text(a), to_text(b)),
    }
}

/// Whether argument `i` of a call is a series (windows and groups are not replaced).
fn series_arg(name: &str, i: usize) -> bool {
    crate::expr::ops::lookup(name).is_none_or(|o| matches!(o.params.get(i), Some(Param::Series) | Some(Param::Optional(_)) | None))
}

/// Number of replaceable (series-valued) subtrees, in pre-order.
fn count(e: &Expr) -> usize {
    1 + match &e.kind {
        ExprKind::Call { name, args, .. } => args.iter().enumerate().filter(|(i, _)| series_arg(name, *i)).map(|(_, a)| count(a)).sum(),
        ExprKind::Neg(a) => count(a),
        ExprKind::Binary(_, a, b) => count(a) + count(b),
        ExprKind::Ternary(c, a, b) => count(c) + count(a) + count(b),
        _ => 0,
    }
}

/// The `k`-th replaceable subtree (pre-order), mutably.
fn nth_mut(e: &mut Expr, k: &mut usize) -> Option<*mut Expr> {
    if *k == 0 {
        return Some(e as *mut Expr);
    }
    *k -= 1;
    match &mut e.kind {
        ExprKind::Call { name, args, .. } => {
            let name = name.clone();
            for (i, a) in args.iter_mut().enumerate() {
                if series_arg(&name, i) {
                    if let Some(p) = nth_mut(a, k) {
                        return Some(p);
                    }
                }
            }
            None
        }
        ExprKind::Neg(a) => nth_mut(a, k),
        ExprKind::Binary(_, a, b) => nth_mut(a, k).or_else(|| nth_mut(b, k)),
        ExprKind::Ternary(c, a, b) => nth_mut(c, k).or_else(|| nth_mut(a, k)).or_else(|| nth_mut(b, k)),
        _ => None,
    }
}

fn replace_nth(e: &mut Expr, k: usize, with: Expr) {
    let mut k = k;
    if let Some(p) = nth_mut(e, &mut k) {
        // SAFETY: `p` points into `e`, which we borrow mutably for this whole call, and no
        // other reference into `e` is alive.
        unsafe { *p = with };
    }
}

fn nth(e: &Expr, k: usize) -> Expr {
    let mut c = e.clone();
    let mut kk = k;
    match nth_mut(&mut c, &mut kk) {
        // SAFETY: as in `replace_nth`; the pointee is cloned before `c` is dropped.
        Some(p) => unsafe { (*p).clone() },
        None => e.clone(),
    }
}

/// Replaces a random subtree with a fresh random one.
pub fn mutate(rng: &mut Rng, e: &Expr, extra: &[String]) -> Expr {
    let mut out = e.clone();
    let k = rng.below(count(&out));
    replace_nth(&mut out, k, random(rng, 3, extra));
    out
}

/// Puts a random subtree of `b` in place of a random subtree of `a`.
pub fn crossover(rng: &mut Rng, a: &Expr, b: &Expr) -> Expr {
    let mut out = a.clone();
    let donor = nth(b, rng.below(count(b)));
    let k = rng.below(count(&out));
    replace_nth(&mut out, k, donor);
    out
}

/// A population of scored expressions.
#[derive(Default)]
pub struct Population {
    pub members: Vec<(f64, Expr)>,
    /// Fields of the data offered beside the standard ones (`writer_fields`).
    pub extra_fields: Vec<String>,
}

impl Population {
    pub fn add(&mut self, fitness: f64, e: Expr) {
        self.members.push((if fitness.is_finite() { fitness } else { -1.0 }, e));
        // Keep the best 64.
        self.members.sort_by(|a, b| b.0.total_cmp(&a.0));
        self.members.truncate(64);
    }

    /// Marks `e` (every member equal to it) as a failure: the full checks refused it, and
    /// breeding from it would bring its near-copies back.
    pub fn demote(&mut self, e: &Expr) {
        for m in self.members.iter_mut().filter(|m| m.1 == *e) {
            m.0 = -1.0;
        }
        self.members.sort_by(|a, b| b.0.total_cmp(&a.0));
    }

    fn tournament(&self, rng: &mut Rng) -> Option<&Expr> {
        let n = self.members.len();
        if n == 0 {
            return None;
        }
        let (i, j) = (rng.below(n), rng.below(n));
        Some(&self.members[i.min(j)].1)
    }

    /// The next candidate: crossover or mutation of tournament winners, or a fresh tree.
    pub fn offspring(&self, rng: &mut Rng) -> Expr {
        match (self.tournament(rng), self.tournament(rng)) {
            (Some(a), Some(b)) if rng.chance(0.5) => crossover(rng, a, b),
            (Some(a), _) if rng.chance(0.8) => mutate(rng, a, &self.extra_fields),
            _ => random(rng, 4, &self.extra_fields),
        }
    }
}

/// Offspring of a GP search round given the full checks at most, best on train first.
const GP_FINALISTS: usize = 3;

/// Offspring bred at most for one whose units agree ([`Miner::gp_offspring`]).
const GP_UNIT_TRIES: usize = 100;

impl Miner<'_> {
    /// The `--writer gp` baseline for one idea: the same evaluation budget (T candidates),
    /// candidates bred from `pop` instead of written by an LLM; no LLM call at all.
    pub fn mine_idea_gp(&self, idea: &Idea, generation: u32, seq: usize, pop: &mut Population, rng: &mut Rng) -> Result<Outcome, AgentError> {
        let mut t = Timings::default();
        let id = format!("{}-{:04}", self.run_id, seq);
        let rounds = if self.cfg.no_inner_loop { 1 } else { self.cfg.rounds.max(1) };
        let mut best: Option<Candidate> = None;
        let mut reviews = Vec::new();
        let (mut attempts, mut evaluations) = (0, 0);
        for round in 1..=rounds {
            let te = Instant::now();
            let (codes, searched) = self.gp_search(pop, rng)?;
            evaluations += searched;
            // The best few on train get the full checks, best first, until one passes
            // them: the best on train is often a near-copy of an accepted alpha.
            let mut found: Option<Candidate> = None;
            for code in &codes {
                let c = self.evaluate(&id, code)?;
                evaluations += 1;
                attempts += c.metrics.contains_key("valid") as usize;
                let refused = c.error.is_some() || c.novelty.as_ref().is_some_and(|v| v.reject.is_some());
                if refused && searched > 0 {
                    // Bred from no more: it would be refused again.
                    if let Ok(e) = crate::expr::parse(code) {
                        pop.demote(&e);
                    }
                }
                if found.is_none() || !refused {
                    found = Some(c);
                }
                if !refused {
                    break;
                }
            }
            let mut cand = found.ok_or_else(|| AgentError::Invalid("no offspring".into()))?;
            let code = cand.code.clone();
            t.eval += te.elapsed().as_secs_f64();
            let fit = if cand.error.is_some() { -1.0 } else { cand.metrics.get("train").map(|m| m.rank_ic).unwrap_or(f64::NAN) };
            // (A searched candidate joined the population with its train score already.)
            if searched == 0 {
                if let Ok(e) = crate::expr::parse(&code) {
                    pop.add(fit, e);
                }
            }
            cand.score = fit;
            reviews.push(Review {
                round,
                reviewer: "gp".into(),
                score: 0.0,
                advice: cand.error.clone().unwrap_or_else(|| format!("fitness (train Rank IC) {}", f4(fit))),
            });
            let better = best.as_ref().is_none_or(|b| (b.error.is_some() && cand.error.is_none()) || (cand.error.is_none() == b.error.is_none() && fit > b.score));
            if better {
                best = Some(cand);
            }
        }
        let best = best.ok_or_else(|| AgentError::Invalid("no candidate".into()))?;
        let mut out = self.finish(idea, generation, id, best, reviews, Vec::new(), (0, 0), t, rounds, attempts, false)?;
        out.evaluations = Some(evaluations);
        Ok(out)
    }

    /// The `--writer random` null model: one expression drawn from the grammar (depth up to
    /// 4, within the complexity limits, units agreeing when they are checked), evaluated and
    /// put to the acceptance rule with no search and no selection. What it gets accepted is
    /// the rate at which the rule lets noise through.
    pub fn mine_idea_random(&self, idea: &Idea, generation: u32, seq: usize, rng: &mut Rng) -> Result<Outcome, AgentError> {
        let mut t = Timings::default();
        let id = format!("{}-{:04}", self.run_id, seq);
        let te = Instant::now();
        let mut code = to_text(&random(rng, 4, &self.cfg.extra_fields));
        for _ in 0..GP_UNIT_TRIES {
            let fits = crate::expr::parse(&code).is_ok_and(|e| self.cfg.too_complex(&e).is_none());
            if fits && !(self.cfg.check_units && crate::expr::units::mixed(&code).is_some()) {
                break;
            }
            code = to_text(&random(rng, 4, &self.cfg.extra_fields));
        }
        let cand = self.evaluate(&id, &code)?;
        t.eval += te.elapsed().as_secs_f64();
        let attempts = cand.metrics.contains_key("valid") as usize;
        let reviews = vec![Review { round: 1, reviewer: "random".into(), score: 0.0, advice: cand.error.clone().unwrap_or_else(|| "drawn at random, not selected".into()) }];
        let mut out = self.finish(idea, generation, id, cand, reviews, Vec::new(), (0, 0), t, 1, attempts, false)?;
        out.evaluations = Some(1);
        Ok(out)
    }

    /// The round's candidates: with `gp_batch` above 1, that many offspring scored on train
    /// ([`search::Searcher`]), each joining the population with its train Rank IC, and the
    /// best [`GP_FINALISTS`] of them, best first; else one offspring, unscored. Also how
    /// many were scored.
    fn gp_search(&self, pop: &mut Population, rng: &mut Rng) -> Result<(Vec<String>, usize), AgentError> {
        if self.cfg.gp_batch <= 1 {
            return Ok((vec![self.gp_offspring(pop, rng)], 0));
        }
        // Distinct offspring the rule checks would let through (an over-large tree scores
        // well on train and is then refused: bloat would win every search).
        let mut seen = std::collections::HashSet::new();
        let fits = |c: &String| crate::expr::parse(c).is_ok_and(|e| self.cfg.too_complex(&e).is_none());
        let codes: Vec<String> = (0..self.cfg.gp_batch * 4).map(|_| self.gp_offspring(pop, rng)).filter(|c| fits(c) && seen.insert(c.clone())).take(self.cfg.gp_batch).collect();
        if codes.is_empty() {
            return Ok((vec![self.gp_offspring(pop, rng)], 0));
        }
        let scores = self.searcher()?.lock().unwrap_or_else(|p| p.into_inner()).score_variants(&codes, self.kb, search::Budget::default());
        let mut top: Vec<(f64, &str)> = Vec::new();
        for s in &scores {
            // What the full checks would refuse scores as a failure: a signal on a sliver
            // of the stocks can show any Rank IC it likes.
            let fit = if s.usable(self.cfg.min_coverage) { s.rank_ic } else { -1.0 };
            if let Ok(e) = crate::expr::parse(&s.text) {
                pop.add(fit, e);
            }
            if fit > -1.0 {
                top.push((fit, &s.text));
            }
        }
        let scored = scores.iter().filter(|s| s.error.is_none()).count();
        top.sort_by(|a, b| b.0.total_cmp(&a.0));
        let best: Vec<String> = top.iter().take(GP_FINALISTS).map(|(_, c)| c.to_string()).collect();
        Ok((if best.is_empty() { vec![codes[0].clone()] } else { best }, scored))
    }

    /// An offspring of `pop` as text. With `check_units`, one whose units disagree is bred
    /// again (a parse-level check, up to [`GP_UNIT_TRIES`] times): the LLM writer is told
    /// the rule and GP cannot be, so its evaluations are not spent on sums the rule
    /// checks refuse (strongly typed GP, by rejection).
    fn gp_offspring(&self, pop: &Population, rng: &mut Rng) -> String {
        let mut code = to_text(&pop.offspring(rng));
        for _ in 0..GP_UNIT_TRIES {
            if !(self.cfg.check_units && crate::expr::units::mixed(&code).is_some()) {
                break;
            }
            code = to_text(&pop.offspring(rng));
        }
        code
    }

    /// A GP population seeded with the KB's accepted expressions, scored by train Rank IC.
    pub fn gp_population(&self) -> Result<Population, AgentError> {
        let mut pop = Population { extra_fields: self.cfg.extra_fields.clone(), ..Population::default() };
        if !self.cfg.no_kb {
            for r in self.kb.records(&crate::kb::Filter::new().is("status", "accepted").is("kind", "expression"))? {
                if let Ok(e) = crate::expr::parse(&r.code) {
                    pop.add(r.metric("train", "rank_ic").unwrap_or(0.0), e);
                }
            }
        }
        Ok(pop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_demoted_member_is_no_longer_a_parent() {
        let mut pop = Population::default();
        let (a, b) = (crate::expr::parse("rank(close)").expect("parses"), crate::expr::parse("rank(volume)").expect("parses"));
        pop.add(0.5, a.clone());
        pop.add(0.1, b.clone());
        pop.demote(&a);
        assert_eq!(pop.members, vec![(0.1, b), (-1.0, a)]);
    }

    #[test]
    fn random_mutated_and_crossed_trees_print_as_parseable_text() {
        let mut rng = Rng::new(3);
        let mut pop = Population { extra_fields: vec!["pe_ratio".into()], ..Population::default() };
        let mut leaves: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let e = random(&mut rng, 4, &pop.extra_fields);
            let text = to_text(&e);
            let back = crate::expr::parse(&text).unwrap_or_else(|err| panic!("{text}: {err}"));
            assert_eq!(to_text(&back), text);
            pop.add(rng.below(100) as f64, e);
        }
        for _ in 0..200 {
            let c = pop.offspring(&mut rng);
            let text = to_text(&c);
            crate::expr::parse(&text).unwrap_or_else(|err| panic!("{text}: {err}"));
            leaves.extend(FIELDS.iter().chain(&["pe_ratio"]).filter(|f| text.contains(*f)));
        }
        // Every leaf, the extra field too, turns up.
        assert_eq!(leaves.len(), FIELDS.len() + 1, "{leaves:?}");
    }
}

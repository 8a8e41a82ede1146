//! The `--writer gp` baseline: genetic programming over the same expression language, with
//! no LLM, so the value of the LLM can be measured at an equal evaluation budget. Random
//! trees come from the operator catalogue; mutation replaces a random subtree with a new
//! random one; crossover swaps subtrees between two parents; parents are drawn by
//! tournament from a population seeded with the KB's accepted expressions.

use crate::expr::ast::{BinOp, Expr, ExprKind};
use crate::expr::ops::{Param, CATALOGUE};
use crate::expr::Span;

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
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
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

#[cfg(test)]
mod tests {
    use super::*;

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

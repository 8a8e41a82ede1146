//! The neighbourhood of an expression: every formula one refiner move away from it. A
//! search around what the writer proposed tries these (scored cheaply, see
//! [`super::search`]) instead of asking the writer for each.
//!
//! The moves, each on one node:
//! * **window**: a window one step up or down a ladder of usual lengths (1, 2, 3, 5, 10,
//!   15, 20, 30, 40, 60, 120, 250 days), never past `max_window`;
//! * **constant**: a constant halved or doubled (not ±1, which are signs and identities), a
//!   quantile's level moved by 0.1;
//! * **sign**: the term after a `+` or `-` subtracted instead of added, or the reverse;
//! * **swap**: an operator replaced by one of its family that takes the same arguments
//!   (a smoother by another smoother, an extreme by another, `*` by `/`, ...);
//! * **wrap**: the whole formula put through a normalising or smoothing operator.
//!
//! Every variant parses back to the tree it prints; duplicates (and the parent) are
//! dropped, so the list is the distinct formulas only.

use super::gp::{to_text, Rng};
use crate::expr::ast::{BinOp, Expr, ExprKind};
use crate::expr::ops::{lookup, Param};
use crate::expr::Span;

/// Which kind of move made a variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Move {
    Window,
    Constant,
    Sign,
    Swap,
    Wrap,
}

/// One variant: the formula, as text that parses to it, and the move that made it.
#[derive(Clone, Debug, PartialEq)]
pub struct Variant {
    pub text: String,
    pub moved: Move,
}

/// Window lengths a window move steps between.
const LADDER: &[f64] = &[1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 120.0, 250.0];

/// Operators that take the same arguments and can stand in for one another.
const FAMILIES: &[&[&str]] = &[
    &["ts_mean", "decay_linear", "ts_sum"],
    &["ts_min", "ts_max"],
    &["ts_argmin", "ts_argmax"],
    &["ts_rank", "ts_zscore"],
    &["delta", "ts_slope"],
    &["ts_std", "ts_rsquare"],
    &["ts_corr", "ts_cov"],
    &["rank", "cs_zscore", "scale"],
];

/// Wrappers a wrap move applies (name and window, if it takes one).
const WRAPS: &[(&str, Option<f64>)] = &[("rank", None), ("decay_linear", Some(5.0)), ("ts_mean", Some(10.0)), ("ts_rank", Some(10.0)), ("ts_zscore", Some(20.0))];

/// What a node stands for in its parent's call.
#[derive(Clone, Copy, PartialEq)]
enum Slot {
    Series,
    Window,
    Level,
    Other,
}

fn node(kind: ExprKind) -> Expr {
    Expr { kind, span: Span::default() }
}

/// Every node of `e` in pre-order with its slot.
fn slots(e: &Expr, slot: Slot, out: &mut Vec<Slot>) {
    out.push(slot);
    match &e.kind {
        ExprKind::Call { name, args, .. } => {
            let params = lookup(name).map(|o| o.params).unwrap_or(&[]);
            for (i, a) in args.iter().enumerate() {
                let s = match params.get(i) {
                    Some(Param::Window) => Slot::Window,
                    Some(Param::Level) => Slot::Level,
                    Some(Param::Group) => Slot::Other,
                    _ => Slot::Series,
                };
                slots(a, s, out);
            }
        }
        ExprKind::Neg(a) => slots(a, Slot::Series, out),
        ExprKind::Binary(_, a, b) => {
            slots(a, Slot::Series, out);
            slots(b, Slot::Series, out);
        }
        ExprKind::Ternary(c, a, b) => {
            slots(c, Slot::Series, out);
            slots(a, Slot::Series, out);
            slots(b, Slot::Series, out);
        }
        _ => {}
    }
}

/// The `k`-th node of `e` in pre-order.
fn nth<'e>(e: &'e Expr, k: &mut usize) -> Option<&'e Expr> {
    if *k == 0 {
        return Some(e);
    }
    *k -= 1;
    match &e.kind {
        ExprKind::Call { args, .. } => args.iter().find_map(|a| nth(a, k)),
        ExprKind::Neg(a) => nth(a, k),
        ExprKind::Binary(_, a, b) => nth(a, k).or_else(|| nth(b, k)),
        ExprKind::Ternary(c, a, b) => nth(c, k).or_else(|| nth(a, k)).or_else(|| nth(b, k)),
        _ => None,
    }
}

/// `e` with its `k`-th node (pre-order) replaced by what `f` makes of it.
fn with_nth(e: &Expr, k: &mut usize, f: &dyn Fn(&Expr) -> Expr) -> Expr {
    if *k == 0 {
        *k = usize::MAX;
        return f(e);
    }
    *k -= 1;
    let mut go = |a: &Expr| if *k == usize::MAX { a.clone() } else { with_nth(a, k, f) };
    let kind = match &e.kind {
        ExprKind::Call { name, name_span, args } => ExprKind::Call { name: name.clone(), name_span: *name_span, args: args.iter().map(&mut go).collect() },
        ExprKind::Neg(a) => ExprKind::Neg(Box::new(go(a))),
        ExprKind::Binary(op, a, b) => {
            let a = go(a);
            ExprKind::Binary(*op, Box::new(a), Box::new(go(b)))
        }
        ExprKind::Ternary(c, a, b) => {
            let c = go(c);
            let a = go(a);
            ExprKind::Ternary(Box::new(c), Box::new(a), Box::new(go(b)))
        }
        other => other.clone(),
    };
    Expr { kind, span: e.span }
}

/// The replacements one move makes of a node in `slot`.
fn moves_at(e: &Expr, slot: Slot, max_window: usize) -> Vec<(Move, Expr)> {
    let mut out = Vec::new();
    match (&e.kind, slot) {
        (ExprKind::Num(v), Slot::Window) => {
            let v = v.floor();
            let down = LADDER.iter().rev().find(|&&w| w < v);
            let up = LADDER.iter().find(|&&w| w > v && w <= max_window as f64);
            for w in down.into_iter().chain(up) {
                out.push((Move::Window, node(ExprKind::Num(*w))));
            }
        }
        (ExprKind::Num(v), Slot::Level) => {
            for l in [v - 0.1, v + 0.1] {
                let l = (l * 10.0).round() / 10.0;
                if l > 0.0 && l < 1.0 {
                    out.push((Move::Constant, node(ExprKind::Num(l))));
                }
            }
        }
        (ExprKind::Num(v), Slot::Series) if *v != 0.0 && v.abs() != 1.0 && v.is_finite() => {
            for c in [v * 0.5, v * 2.0] {
                out.push((Move::Constant, node(ExprKind::Num(c))));
            }
        }
        (ExprKind::Binary(op, a, b), _) => {
            let other = match op {
                BinOp::Add => Some((Move::Sign, BinOp::Sub)),
                BinOp::Sub => Some((Move::Sign, BinOp::Add)),
                BinOp::Mul => Some((Move::Swap, BinOp::Div)),
                BinOp::Div => Some((Move::Swap, BinOp::Mul)),
                _ => None,
            };
            if let Some((m, op)) = other {
                out.push((m, node(ExprKind::Binary(op, a.clone(), b.clone()))));
            }
        }
        (ExprKind::Call { name, name_span, args }, _) => {
            let canonical = lookup(name).map_or(name.as_str(), |o| o.name);
            for fam in FAMILIES.iter().filter(|f| f.contains(&canonical)) {
                for other in fam.iter().filter(|&&o| o != canonical) {
                    out.push((Move::Swap, node(ExprKind::Call { name: other.to_string(), name_span: *name_span, args: args.clone() })));
                }
            }
        }
        _ => {}
    }
    out
}

/// Every distinct variant of `parent` one move away, in a fixed order: node by node in
/// pre-order, then the wraps. Windows stay at most `max_window` days.
pub fn neighbours(parent: &Expr, max_window: usize) -> Vec<Variant> {
    let mut at = Vec::new();
    slots(parent, Slot::Series, &mut at);
    let own = to_text(parent);
    let mut seen = std::collections::HashSet::from([own.clone()]);
    let mut out = Vec::new();
    let mut push = |text: String, moved: Move| {
        if seen.insert(text.clone()) {
            out.push(Variant { text, moved });
        }
    };
    for (k, &slot) in at.iter().enumerate() {
        let Some(n) = nth(parent, &mut { k }) else { continue };
        for (moved, with) in moves_at(n, slot, max_window) {
            push(to_text(&with_nth(parent, &mut { k }, &|_| with.clone())), moved);
        }
    }
    let root = match &parent.kind {
        ExprKind::Call { name, .. } => lookup(name).map_or(name.as_str(), |o| o.name),
        _ => "",
    };
    for &(name, window) in WRAPS.iter().filter(|w| w.0 != root) {
        let mut args = vec![parent.clone()];
        args.extend(window.map(|w| node(ExprKind::Num(w))));
        push(to_text(&node(ExprKind::Call { name: name.into(), name_span: Span::default(), args })), Move::Wrap);
    }
    out
}

/// The windows `e` uses (its operators' day counts), in pre-order.
pub fn windows(e: &Expr) -> Vec<f64> {
    let mut at = Vec::new();
    slots(e, Slot::Series, &mut at);
    at.iter()
        .enumerate()
        .filter(|(_, s)| **s == Slot::Window)
        .filter_map(|(k, _)| match nth(e, &mut { k }).map(|n| &n.kind) {
            Some(ExprKind::Num(v)) => Some(*v),
            _ => None,
        })
        .collect()
}

/// `n` of `parent`'s neighbours drawn without replacement (all of them if fewer), in the
/// order drawn.
pub fn sample(rng: &mut Rng, parent: &Expr, n: usize, max_window: usize) -> Vec<Variant> {
    let mut all = neighbours(parent, max_window);
    let mut out = Vec::with_capacity(n.min(all.len()));
    while out.len() < n && !all.is_empty() {
        out.push(all.swap_remove(rng.below(all.len())));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::parse;

    fn texts(f: &str) -> Vec<(Move, String)> {
        neighbours(&parse(f).expect("parses"), 250).into_iter().map(|v| (v.moved, v.text)).collect()
    }

    #[test]
    fn each_move_changes_one_node() {
        let got = texts("rank(ts_mean(close, 10)) - rank(volume * 2)");
        let has = |m: Move, t: &str| got.iter().any(|(mm, tt)| *mm == m && tt == t);
        assert!(has(Move::Window, "(rank(ts_mean(close, 5)) - rank((volume * 2)))"), "{got:#?}");
        assert!(has(Move::Window, "(rank(ts_mean(close, 15)) - rank((volume * 2)))"));
        assert!(has(Move::Sign, "(rank(ts_mean(close, 10)) + rank((volume * 2)))"));
        assert!(has(Move::Swap, "(rank(decay_linear(close, 10)) - rank((volume * 2)))"));
        assert!(has(Move::Swap, "(rank(ts_mean(close, 10)) - rank((volume / 2)))"));
        assert!(has(Move::Swap, "(cs_zscore(ts_mean(close, 10)) - rank((volume * 2)))"));
        assert!(has(Move::Constant, "(rank(ts_mean(close, 10)) - rank((volume * 4)))"));
        assert!(has(Move::Wrap, "rank((rank(ts_mean(close, 10)) - rank((volume * 2))))"));
        // Distinct, never the parent, and every one parses back to what it prints.
        let mut seen = std::collections::HashSet::new();
        for (_, t) in &got {
            assert!(seen.insert(t.clone()), "{t} twice");
            assert_eq!(to_text(&parse(t).expect("parses")), *t);
        }
        assert!(!seen.contains("(rank(ts_mean(close, 10)) - rank((volume * 2)))"));
    }

    #[test]
    fn windows_stay_within_the_cap_and_signs_are_left_alone() {
        let got = texts("-1 * ts_rank(close, 120)");
        assert!(got.iter().any(|(_, t)| t.contains("ts_rank(close, 60)")));
        assert!(got.iter().any(|(_, t)| t.contains("ts_rank(close, 250)")));
        assert!(!neighbours(&parse("ts_rank(close, 120)").expect("parses"), 200).iter().any(|v| v.text.contains("250")));
        // -1 is a sign, not a constant to scale.
        assert!(!got.iter().any(|(m, t)| *m == Move::Constant && (t.contains("-0.5") || t.contains("-2"))), "{got:?}");
    }

    #[test]
    fn sampling_draws_distinct_neighbours() {
        let p = parse("ts_corr(rank(close), rank(volume), 10)").expect("parses");
        let all = neighbours(&p, 250);
        let mut rng = Rng::new(1);
        let s = sample(&mut rng, &p, 5, 250);
        assert_eq!(s.len(), 5);
        assert!(s.iter().all(|v| all.contains(v)));
        assert_eq!(sample(&mut rng, &p, 1000, 250).len(), all.len());
    }
}

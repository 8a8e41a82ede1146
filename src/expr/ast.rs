//! The parsed (untyped) syntax tree, with spans for error messages.

use super::error::Span;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Lt,
    Gt,
    Le,
    Ge,
    Eq,
    Ne,
    And,
    Or,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Pow => "^",
            BinOp::Lt => "<",
            BinOp::Gt => ">",
            BinOp::Le => "<=",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }

    /// The catalogue name of the operator implementing this symbol.
    pub fn op_name(self) -> &'static str {
        match self {
            BinOp::Add => "add",
            BinOp::Sub => "sub",
            BinOp::Mul => "mul",
            BinOp::Div => "div",
            BinOp::Pow => "pow",
            BinOp::Lt => "lt",
            BinOp::Gt => "gt",
            BinOp::Le => "le",
            BinOp::Ge => "ge",
            BinOp::Eq => "eq",
            BinOp::Ne => "ne",
            BinOp::And => "and",
            BinOp::Or => "or",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Num(f64),
    /// A field (`close`), derived field (`adv20`) or group level (`IndClass.sector`).
    Ident(String),
    /// `alpha:ID`, another alpha's signal.
    AlphaRef(String),
    Call { name: String, name_span: Span, args: Vec<Expr> },
    Neg(Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Ternary(Box<Expr>, Box<Expr>, Box<Expr>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

impl Expr {
    /// Number of nodes in the tree (a complexity measure).
    pub fn size(&self) -> usize {
        1 + match &self.kind {
            ExprKind::Num(_) | ExprKind::Ident(_) | ExprKind::AlphaRef(_) => 0,
            ExprKind::Call { args, .. } => args.iter().map(Expr::size).sum(),
            ExprKind::Neg(a) => a.size(),
            ExprKind::Binary(_, a, b) => a.size() + b.size(),
            ExprKind::Ternary(a, b, c) => a.size() + b.size() + c.size(),
        }
    }

    /// The alphas it names (`alpha:ID`), in order, each as often as it is named.
    pub fn alpha_refs(&self) -> Vec<&str> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(e) = stack.pop() {
            match &e.kind {
                ExprKind::AlphaRef(id) => out.push(id.as_str()),
                ExprKind::Num(_) | ExprKind::Ident(_) => {}
                ExprKind::Call { args, .. } => stack.extend(args.iter().rev()),
                ExprKind::Neg(a) => stack.push(a),
                ExprKind::Binary(_, a, b) => stack.extend([b, a].map(|x| &**x)),
                ExprKind::Ternary(a, b, c) => stack.extend([c, b, a].map(|x| &**x)),
            }
        }
        out
    }

    /// Whether the tree reads no data (the compiler folds it to a constant).
    pub fn reads_no_data(&self) -> bool {
        match &self.kind {
            ExprKind::Num(_) => true,
            ExprKind::Ident(_) | ExprKind::AlphaRef(_) => false,
            ExprKind::Call { args, .. } => args.iter().all(Expr::reads_no_data),
            ExprKind::Neg(a) => a.reads_no_data(),
            ExprKind::Binary(_, a, b) => a.reads_no_data() && b.reads_no_data(),
            ExprKind::Ternary(a, b, c) => a.reads_no_data() && b.reads_no_data() && c.reads_no_data(),
        }
    }

    /// The first operator call (outermost, leftmost) that reads no data, such as
    /// `scale(19.9)`: one number for every stock and date, so it ranks nothing, and a term
    /// made of one changes no ranking. A constant in arithmetic (`-1 * x`, `x / 20`) is not
    /// a call.
    pub fn constant_call(&self) -> Option<&Expr> {
        match &self.kind {
            ExprKind::Num(_) | ExprKind::Ident(_) | ExprKind::AlphaRef(_) => None,
            ExprKind::Call { args, .. } => if self.reads_no_data() { Some(self) } else { args.iter().find_map(Expr::constant_call) },
            ExprKind::Neg(a) => a.constant_call(),
            ExprKind::Binary(_, a, b) => a.constant_call().or_else(|| b.constant_call()),
            ExprKind::Ternary(a, b, c) => a.constant_call().or_else(|| b.constant_call()).or_else(|| c.constant_call()),
        }
    }

    /// The alpha this tree only restates, if it is `alpha:ID` alone, negated or times a
    /// number (`-1 * alpha:ID`): the same signal up to sign and scale.
    pub fn only_alpha(&self) -> Option<&str> {
        match &self.kind {
            ExprKind::AlphaRef(id) => Some(id),
            ExprKind::Neg(a) => a.only_alpha(),
            ExprKind::Binary(BinOp::Mul | BinOp::Div, a, b) if b.reads_no_data() => a.only_alpha(),
            ExprKind::Binary(BinOp::Mul, a, b) if a.reads_no_data() => b.only_alpha(),
            _ => None,
        }
    }

    /// Depth of the tree.
    pub fn depth(&self) -> usize {
        1 + match &self.kind {
            ExprKind::Num(_) | ExprKind::Ident(_) | ExprKind::AlphaRef(_) => 0,
            ExprKind::Call { args, .. } => args.iter().map(Expr::depth).max().unwrap_or(0),
            ExprKind::Neg(a) => a.depth(),
            ExprKind::Binary(_, a, b) => a.depth().max(b.depth()),
            ExprKind::Ternary(a, b, c) => a.depth().max(b.depth()).max(c.depth()),
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ExprKind::Num(v) => write!(f, "{v}"),
            ExprKind::Ident(s) => write!(f, "{s}"),
            ExprKind::AlphaRef(s) => write!(f, "alpha:{s}"),
            ExprKind::Call { name, args, .. } => {
                write!(f, "{name}(")?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{a}")?;
                }
                write!(f, ")")
            }
            ExprKind::Neg(a) => write!(f, "(-{a})"),
            ExprKind::Binary(op, a, b) => write!(f, "({a} {} {b})", op.symbol()),
            ExprKind::Ternary(c, a, b) => write!(f, "({c} ? {a} : {b})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::expr::parse;

    #[test]
    fn constant_calls_and_restated_alphas_are_found() {
        let call = |s: &str| parse(s).expect("parses").constant_call().map(|e| e.to_string());
        assert_eq!(call("rank(close) - scale(19.9)").as_deref(), Some("scale(19.9)"));
        assert_eq!(call("ts_mean(rank(2 * 3), 5) + close").as_deref(), Some("ts_mean(rank((2 * 3)), 5)"));
        // Numbers in arithmetic and windows are not calls that read nothing.
        assert_eq!(call("-1 * rank(close / 20) + ts_mean(volume, 10)"), None);
        let only = |s: &str| parse(s).expect("parses").only_alpha().map(str::to_string);
        assert_eq!(only("(alpha:a1)").as_deref(), Some("a1"));
        assert_eq!(only("-1 * alpha:a1").as_deref(), Some("a1"));
        assert_eq!(only("-alpha:a1 / 2").as_deref(), Some("a1"));
        assert_eq!(only("rank(alpha:a1)"), None);
        assert_eq!(only("alpha:a1 * close"), None);
    }
}

//! Lowering parsed expressions into a shared DAG: names are resolved and checked against
//! the data, constants are folded, derived fields are expanded into their definitions, and
//! identical sub-expressions (within one alpha or across a whole batch) become one node.

use super::ast::{Expr, ExprKind};
use super::error::{did_you_mean, ExprError, Span};
use super::kernels::Value;
use super::ops::{self, Kind, OpCtx, OpDef, Param};
use super::parser::parse;
use crate::data::{MarketData, DERIVED_FIELDS};
use std::collections::{BTreeMap, HashMap};

/// Index of a node in a [`Graph`]. Children always have smaller ids than their parents.
pub type NodeId = usize;

/// One node of the evaluation DAG.
#[derive(Clone, Debug)]
pub enum Node {
    Const(f64),
    /// A stored field of the data (`close`, `volume`, extra columns).
    Field(String),
    Op { op: &'static OpDef, args: Vec<NodeId>, windows: Vec<usize> },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Const(u64),
    Field(String),
    Op(&'static str, Vec<NodeId>, Vec<usize>),
}

/// A DAG of operations with structural sharing.
#[derive(Default, Debug, Clone)]
pub struct Graph {
    pub nodes: Vec<Node>,
    index: HashMap<Key, NodeId>,
}

impl Graph {
    fn intern(&mut self, node: Node) -> NodeId {
        let key = match &node {
            Node::Const(v) => Key::Const(if *v == 0.0 { 0 } else { v.to_bits() }),
            Node::Field(f) => Key::Field(f.clone()),
            Node::Op { op, args, windows } => {
                // Operators whose result does not depend on the argument order, bit for bit
                // (IEEE addition and multiplication commute; the rolling correlation and
                // covariance treat both sides alike), are keyed on their sorted arguments,
                // so `correlation(x, y, d)` and `correlation(y, x, d)` are one node.
                // (`min2`/`max2` are not: which zero they return for −0 and +0 depends on
                // the order.)
                let mut a = args.clone();
                if matches!(op.name, "add" | "mul" | "ts_corr" | "ts_cov") {
                    a.sort_unstable();
                }
                Key::Op(op.name, a, windows.clone())
            }
        };
        if let Some(&id) = self.index.get(&key) {
            return id;
        }
        self.nodes.push(node);
        self.index.insert(key, self.nodes.len() - 1);
        self.nodes.len() - 1
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// Supplies the formula of another alpha for `alpha:ID` references.
pub trait AlphaResolver {
    fn formula(&self, id: &str) -> Option<String>;
    /// Known ids, for "did you mean" hints.
    fn ids(&self) -> Vec<String> {
        Vec::new()
    }
}

/// No alpha references available.
pub struct NoAlphas;

impl AlphaResolver for NoAlphas {
    fn formula(&self, _: &str) -> Option<String> {
        None
    }
}

impl AlphaResolver for HashMap<String, String> {
    fn formula(&self, id: &str) -> Option<String> {
        self.get(id).cloned()
    }
    fn ids(&self) -> Vec<String> {
        self.keys().cloned().collect()
    }
}

impl AlphaResolver for BTreeMap<String, String> {
    fn formula(&self, id: &str) -> Option<String> {
        self.get(id).cloned()
    }
    fn ids(&self) -> Vec<String> {
        self.keys().cloned().collect()
    }
}

/// Several resolvers asked in turn: the first that knows an id gives its formula (a
/// file's own alphas before the seeds, the seeds before the knowledge base).
pub struct Chain<'a>(pub Vec<&'a dyn AlphaResolver>);

impl AlphaResolver for Chain<'_> {
    fn formula(&self, id: &str) -> Option<String> {
        self.0.iter().find_map(|r| r.formula(id))
    }
    fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.0.iter().flat_map(|r| r.ids()).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// The alphas that `formulas` name as `alpha:ID`, directly or through one another, each
/// with its formula as `resolver` gives it (an id it does not know, or a formula that does
/// not parse, is left for the compiler to report): what those formulas need, read in one
/// go, so that their source (a knowledge base, which holds a lock) can be closed.
pub fn named_alphas<'f>(formulas: impl IntoIterator<Item = &'f str>, resolver: &dyn AlphaResolver) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut todo: Vec<String> = formulas.into_iter().map(str::to_string).collect();
    while let Some(f) = todo.pop() {
        let Ok(e) = parse(&f) else { continue };
        for id in e.alpha_refs() {
            if !out.contains_key(id) {
                if let Some(g) = resolver.formula(id) {
                    out.insert(id.to_string(), g.clone());
                    todo.push(g);
                }
            }
        }
    }
    out
}

/// A resolver that keeps every formula it hands out, so that what some expressions
/// referred to can be stored beside them (a saved model must not depend on the records
/// it was trained from staying in the knowledge base).
pub struct Recording<'a> {
    inner: &'a dyn AlphaResolver,
    seen: std::cell::RefCell<BTreeMap<String, String>>,
}

impl<'a> Recording<'a> {
    pub fn new(inner: &'a dyn AlphaResolver) -> Recording<'a> {
        Recording { inner, seen: Default::default() }
    }
    /// Every id resolved so far, with its formula.
    pub fn seen(&self) -> BTreeMap<String, String> {
        self.seen.borrow().clone()
    }
}

impl AlphaResolver for Recording<'_> {
    fn formula(&self, id: &str) -> Option<String> {
        let f = self.inner.formula(id)?;
        self.seen.borrow_mut().insert(id.to_string(), f.clone());
        Some(f)
    }
    fn ids(&self) -> Vec<String> {
        self.inner.ids()
    }
}

/// Group levels accepted in `IndClass.<level>`.
const GROUP_LEVELS: &[&str] = &["sector", "industry", "subindustry"];

/// What the compiler needs to know about the data.
pub struct Schema {
    pub fields: Vec<String>,
    pub n_dates: usize,
    /// The dates' span ("1999-11-01 to 2015-12-31"), so that a window longer than the data
    /// shows where the data ends: a period's data is cut at the period's end.
    pub span: String,
    pub has_groups: bool,
}

impl Schema {
    pub fn of(data: &MarketData) -> Schema {
        let span = match (data.dates.first(), data.dates.last()) {
            (Some(a), Some(b)) => format!("{a} to {b}"),
            _ => "no dates".into(),
        };
        Schema { fields: data.fields.keys().cloned().collect(), n_dates: data.n_dates(), span, has_groups: data.groups.is_some() }
    }
}

/// Compiles expressions into one shared [`Graph`].
pub struct Compiler<'a> {
    pub graph: Graph,
    schema: Schema,
    resolver: &'a dyn AlphaResolver,
    /// Alpha ids being expanded (for cycle detection).
    stack: Vec<String>,
    alpha_nodes: HashMap<String, NodeId>,
    /// The longest window allowed, when a caller limits it (mining's `max_window`).
    max_window: Option<usize>,
}

/// Lowered argument: a node, or a group level.
enum Arg {
    Node(NodeId),
    Group,
}

impl<'a> Compiler<'a> {
    pub fn new(schema: Schema, resolver: &'a dyn AlphaResolver) -> Compiler<'a> {
        Compiler { graph: Graph::default(), schema, resolver, stack: Vec::new(), alpha_nodes: HashMap::new(), max_window: None }
    }

    /// Refuses any window (an operator's, or an `adv{d}` field's) longer than `days`, with
    /// its position: mining caps windows at what its train period can support.
    pub fn with_max_window(mut self, days: usize) -> Compiler<'a> {
        self.max_window = Some(days);
        self
    }

    /// Parses and lowers one expression; returns its root node.
    pub fn add(&mut self, text: &str) -> Result<NodeId, ExprError> {
        let ast = parse(text)?;
        self.lower(&ast, text)
    }

    fn konst(&mut self, v: f64) -> NodeId {
        self.graph.intern(Node::Const(v))
    }

    fn field(&mut self, name: &str) -> NodeId {
        self.graph.intern(Node::Field(name.to_string()))
    }

    /// Adds an operator node, folding it to a constant when it is element-wise and all
    /// inputs are constants.
    fn op(&mut self, name: &str, args: Vec<NodeId>, windows: Vec<usize>) -> NodeId {
        let op = ops::lookup(name).expect("built-in operator exists");
        // rank is idempotent: ranking ranks keeps the order and the ties, so
        // rank(rank(x)) is bit-for-bit rank(x).
        if op.name == "rank" {
            if let Node::Op { op: inner, .. } = &self.graph.nodes[args[0]] {
                if inner.name == "rank" {
                    return args[0];
                }
            }
        }
        if op.kind == Kind::Elementwise {
            let consts: Option<Vec<Value>> = args
                .iter()
                .map(|a| match self.graph.nodes[*a] {
                    Node::Const(v) => Some(Value::Scalar(v)),
                    _ => None,
                })
                .collect();
            if let Some(vals) = consts {
                let ctx = OpCtx { n_dates: 0, n_assets: 0, windows: &[], groups: None, lazy: false };
                if let Value::Scalar(v) = (op.eval)(vals, &ctx) {
                    return self.konst(v);
                }
            }
        }
        self.graph.intern(Node::Op { op, args, windows })
    }

    fn window(&self, text: &str, span: Span, d: f64, what: &str) -> Result<usize, ExprError> {
        if !d.is_finite() || d.floor() < 1.0 {
            return Err(ExprError::at(text, span, format!("{what} must be a positive number of days, got {d}")));
        }
        let w = d.floor();
        if w > self.schema.n_dates as f64 {
            // 1e300 written out is 301 digits; past what a day count can be, the exponent.
            let days = if w < 1e9 { format!("{w}") } else { format!("{w:e}") };
            return Err(ExprError::at(
                text,
                span,
                format!("{what} of {days} days is longer than the data ({} dates, {})", self.schema.n_dates, self.schema.span),
            ));
        }
        if let Some(max) = self.max_window.filter(|&m| w > m as f64) {
            return Err(ExprError::at(text, span, format!("{what} of {w} days is longer than max_window, {max} days"))
                .with_hint(format!("use a window of at most {max} days")));
        }
        Ok(w as usize)
    }

    fn ident(&mut self, name: &str, span: Span, text: &str) -> Result<NodeId, ExprError> {
        let lname = name.to_ascii_lowercase();
        if self.schema.fields.contains(&lname) {
            return Ok(self.field(&lname));
        }
        match lname.as_str() {
            "returns" => {
                let c = self.ident("close", span, text)?;
                let d = self.op("delay", vec![c], vec![1]);
                let r = self.op("div", vec![c, d], vec![]);
                let one = self.konst(1.0);
                return Ok(self.op("sub", vec![r, one], vec![]));
            }
            "vwap" => {
                let h = self.ident("high", span, text)?;
                let l = self.ident("low", span, text)?;
                let c = self.ident("close", span, text)?;
                let hl = self.op("add", vec![h, l], vec![]);
                let hlc = self.op("add", vec![hl, c], vec![]);
                let three = self.konst(3.0);
                return Ok(self.op("div", vec![hlc, three], vec![]));
            }
            "cap" => {
                return Err(ExprError::at(text, span, "field 'cap' (market capitalisation) is not available in this data")
                    .with_hint("the data has no shares outstanding; rewrite the alpha without cap"))
            }
            _ => {}
        }
        if let Some(d) = lname.strip_prefix("adv").and_then(|d| d.parse::<f64>().ok()) {
            let d = self.window(text, span, d, &format!("'{name}'"))?;
            let c = self.ident("close", span, text)?;
            let v = self.ident("volume", span, text)?;
            let dollar = self.op("mul", vec![c, v], vec![]);
            return Ok(self.op("ts_mean", vec![dollar], vec![d]));
        }
        if lname.starts_with("indclass.") {
            return Err(ExprError::at(text, span, format!("'{name}' is a group, allowed only as the second argument of indneutralize")));
        }
        let mut known: Vec<&str> = self.schema.fields.iter().map(String::as_str).collect();
        known.extend(["returns", "vwap", "adv20"]);
        let mut err = ExprError::at(text, span, format!("unknown field '{name}'"));
        if let Some(h) = did_you_mean(&lname, known.iter().copied()) {
            err = err.with_hint(h);
        } else if ops::lookup(&lname).is_some() || lname == "min" || lname == "max" {
            err = err.with_hint(format!("'{name}' is an operator; call it as {name}(...)"));
        } else {
            err = err.with_hint(format!(
                "fields are {}, {}",
                self.schema.fields.join(", "),
                DERIVED_FIELDS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            ));
        }
        Err(err)
    }

    fn alpha_ref(&mut self, id: &str, span: Span, text: &str) -> Result<NodeId, ExprError> {
        if let Some(&n) = self.alpha_nodes.get(id) {
            return Ok(n);
        }
        if self.stack.iter().any(|s| s == id) {
            let mut chain = self.stack.clone();
            chain.push(id.to_string());
            return Err(ExprError::at(text, span, format!("alpha reference cycle: {}", chain.join(" -> "))));
        }
        let Some(formula) = self.resolver.formula(id) else {
            let ids = self.resolver.ids();
            let mut e = ExprError::at(text, span, format!("unknown alpha '{id}'"));
            if let Some(h) = did_you_mean(id, ids.iter().map(String::as_str)) {
                e = e.with_hint(h);
            }
            return Err(e);
        };
        self.stack.push(id.to_string());
        let res = parse(&formula).and_then(|ast| self.lower(&ast, &formula));
        self.stack.pop();
        let node = res.map_err(|mut e| {
            if e.context.is_none() {
                e.context = Some(format!("alpha:{id}"));
            }
            e
        })?;
        self.alpha_nodes.insert(id.to_string(), node);
        Ok(node)
    }

    fn lower(&mut self, e: &Expr, text: &str) -> Result<NodeId, ExprError> {
        match &e.kind {
            ExprKind::Num(v) => Ok(self.konst(*v)),
            ExprKind::Ident(name) => self.ident(name, e.span, text),
            ExprKind::AlphaRef(id) => self.alpha_ref(id, e.span, text),
            ExprKind::Neg(a) => {
                let a = self.lower(a, text)?;
                Ok(self.op("neg", vec![a], vec![]))
            }
            ExprKind::Binary(op, a, b) => {
                let (a, b) = (self.lower(a, text)?, self.lower(b, text)?);
                Ok(self.op(op.op_name(), vec![a, b], vec![]))
            }
            ExprKind::Ternary(c, a, b) => {
                let (c, a, b) = (self.lower(c, text)?, self.lower(a, text)?, self.lower(b, text)?);
                Ok(self.op("where", vec![c, a, b], vec![]))
            }
            ExprKind::Call { name, name_span, args } => self.call(name, *name_span, args, e.span, text),
        }
    }

    fn call(&mut self, name: &str, name_span: Span, args: &[Expr], span: Span, text: &str) -> Result<NodeId, ExprError> {
        let lname = name.to_ascii_lowercase();
        // min/max: a constant second argument means the time-series form.
        let resolved = if lname == "min" || lname == "max" {
            if args.len() != 2 {
                return Err(ExprError::at(text, span, format!("{name} takes 2 arguments (x, d) or (x, y), got {}", args.len())));
            }
            let second = self.lower(&args[1], text)?;
            let ts = matches!(self.graph.nodes[second], Node::Const(_));
            match (lname.as_str(), ts) {
                ("min", true) => "ts_min",
                ("min", false) => "min2",
                ("max", true) => "ts_max",
                _ => "max2",
            }
            .to_string()
        } else {
            lname.clone()
        };
        let Some(op) = ops::lookup(&resolved) else {
            let mut e = ExprError::at(text, name_span, format!("unknown function '{name}'"));
            if let Some(h) = did_you_mean(&lname, ops::callable_names()) {
                e = e.with_hint(h);
            }
            return Err(e);
        };
        if args.len() < op.min_args() || args.len() > op.params.len() {
            let arity = if op.min_args() == op.params.len() {
                format!("{}", op.params.len())
            } else {
                format!("{} to {}", op.min_args(), op.params.len())
            };
            return Err(ExprError::at(text, span, format!("{name} takes {arity} argument{}, got {}", if arity == "1" { "" } else { "s" }, args.len()))
                .with_hint(format!("usage: {}", op.doc)));
        }
        let mut nodes = Vec::new();
        let mut windows = Vec::new();
        for (i, p) in op.params.iter().enumerate() {
            let Some(a) = args.get(i) else {
                if let Param::Optional(default) = p {
                    nodes.push(self.konst(*default));
                }
                continue;
            };
            match (p, self.lower_arg(a, *p, text)?) {
                (Param::Window, Arg::Node(n)) => {
                    let Node::Const(d) = self.graph.nodes[n] else {
                        return Err(ExprError::at(text, a.span, format!("the window of {name} must be a constant number of days")));
                    };
                    windows.push(self.window(text, a.span, d, &format!("the window of {name}"))?);
                }
                (Param::Level, Arg::Node(n)) => match self.graph.nodes[n] {
                    Node::Const(q) if (0.0..=1.0).contains(&q) => nodes.push(n),
                    Node::Const(q) => return Err(ExprError::at(text, a.span, format!("the level of {name} must be between 0 and 1, got {q}"))),
                    _ => return Err(ExprError::at(text, a.span, format!("the level of {name} must be a constant between 0 and 1"))),
                },
                (Param::Group, Arg::Group) => {}
                (Param::Group, Arg::Node(_)) => {
                    return Err(ExprError::at(text, a.span, format!("the second argument of {name} must be IndClass.sector, IndClass.industry or IndClass.subindustry")))
                }
                (_, Arg::Node(n)) => nodes.push(n),
                (_, Arg::Group) => unreachable!("groups are lowered only for group parameters"),
            }
        }
        Ok(self.op(op.name, nodes, windows))
    }

    fn lower_arg(&mut self, a: &Expr, p: Param, text: &str) -> Result<Arg, ExprError> {
        if p != Param::Group {
            return self.lower(a, text).map(Arg::Node);
        }
        let ExprKind::Ident(g) = &a.kind else { return self.lower(a, text).map(Arg::Node) };
        let lg = g.to_ascii_lowercase();
        let Some(level) = lg.strip_prefix("indclass.") else { return self.lower(a, text).map(Arg::Node) };
        if !GROUP_LEVELS.contains(&level) {
            let mut e = ExprError::at(text, a.span, format!("unknown group level '{g}'"));
            if let Some(h) = did_you_mean(level, GROUP_LEVELS.iter().copied()) {
                e = e.with_hint(h);
            }
            return Err(e);
        }
        if !self.schema.has_groups {
            return Err(ExprError::at(text, a.span, "indneutralize needs a group file and none was loaded")
                .with_hint("pass --groups FILE (a symbol,group CSV such as sp500_constituents.csv)"));
        }
        Ok(Arg::Group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// References are followed through one another, a cycle ends the walk, and an id no
    /// resolver knows is left out; the first resolver of a chain that knows an id wins.
    #[test]
    fn named_alphas_follows_references_through_a_chain() {
        let file: BTreeMap<String, String> = [("a", "alpha:b + alpha:seed"), ("b", "rank(alpha:a) * alpha:kb1")].map(|(k, v)| (k.to_string(), v.to_string())).into();
        let seeds: HashMap<String, String> = [("seed", "close"), ("a", "volume")].map(|(k, v)| (k.to_string(), v.to_string())).into();
        let kb: BTreeMap<String, String> = [("kb1", "-alpha:seed")].map(|(k, v)| (k.to_string(), v.to_string())).into();
        let chain = Chain(vec![&file, &seeds, &kb]);
        let named = named_alphas(["alpha:a * 2", "alpha:missing"], &chain);
        assert_eq!(named.keys().collect::<Vec<_>>(), ["a", "b", "kb1", "seed"]);
        assert_eq!(named["a"], "alpha:b + alpha:seed", "the file's own alpha before the seed of that id");
        assert_eq!(chain.ids(), ["a", "b", "kb1", "seed"]);
        let rec = Recording::new(&chain);
        assert_eq!(rec.formula("kb1").as_deref(), Some("-alpha:seed"));
        assert!(rec.formula("missing").is_none());
        assert_eq!(rec.seen().into_iter().collect::<Vec<_>>(), [("kb1".to_string(), "-alpha:seed".to_string())]);
    }
}

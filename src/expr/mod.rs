//! The alpha expression language: parser, operator catalogue, compiler and evaluator.
//!
//! ```text
//! text --parse--> Expr (AST with spans) --Compiler--> Graph (shared DAG) --evaluate--> Panel
//! ```

pub mod ast;
mod cache;
mod compile;
mod error;
mod eval;
pub mod kernels;
pub mod ops;
mod parser;
pub mod units;

pub use compile::{named_alphas, AlphaResolver, Chain, Compiler, Graph, Node, NodeId, NoAlphas, Recording, Schema};
pub use error::{did_you_mean, ExprError, Span};
pub use cache::EvalCache;
pub use eval::{evaluate, evaluate_cached};
pub use parser::parse;

use crate::data::{MarketData, Panel};
use std::sync::Arc;

/// Compiles and evaluates one expression on `data`.
pub fn eval_expr(text: &str, data: &MarketData, alphas: &dyn AlphaResolver) -> Result<Arc<Panel>, ExprError> {
    let mut c = Compiler::new(Schema::of(data), alphas);
    let root = c.add(text)?;
    let mut out = None;
    evaluate(&c.graph, &[root], data, |_, p| out = Some(p));
    Ok(out.expect("the root is always evaluated"))
}

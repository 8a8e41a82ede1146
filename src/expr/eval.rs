//! Executing a compiled [`Graph`] against market data.
//!
//! Nodes run in id order (children first). Each node's value is kept only while a later
//! node still needs it; the last consumer receives the buffer itself, so element-wise
//! kernels overwrite it in place instead of allocating. Results are handed to a callback
//! as soon as they are ready and then dropped, which keeps the peak memory of a
//! 101-alpha batch to a few dozen panels.

use super::compile::{Graph, Node, NodeId};
use super::kernels::Value;
use super::ops::OpCtx;
use crate::data::{MarketData, Panel};
use std::sync::Arc;

/// Evaluates `roots` (any number, duplicates allowed) and calls `on_root(i, panel)` for
/// each root index as its value becomes ready.
pub fn evaluate(graph: &Graph, roots: &[NodeId], data: &MarketData, mut on_root: impl FnMut(usize, Arc<Panel>)) {
    let (nd, na) = (data.n_dates(), data.n_assets());
    let n = graph.nodes.len();
    // Which nodes are needed, and how many times each is consumed.
    let mut needed = vec![false; n];
    let mut uses = vec![0usize; n];
    let mut stack: Vec<NodeId> = roots.to_vec();
    while let Some(id) = stack.pop() {
        if needed[id] {
            continue;
        }
        needed[id] = true;
        if let Node::Op { args, .. } = &graph.nodes[id] {
            stack.extend(args.iter().copied());
        }
    }
    for id in 0..n {
        if let (true, Node::Op { args, .. }) = (needed[id], &graph.nodes[id]) {
            for a in args {
                uses[*a] += 1;
            }
        }
    }
    let mut roots_at: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, r) in roots.iter().enumerate() {
        uses[*r] += 1;
        roots_at[*r].push(i);
    }

    let mut values: Vec<Option<Value>> = vec![None; n];
    for id in 0..n {
        if !needed[id] {
            continue;
        }
        let v = match &graph.nodes[id] {
            Node::Const(c) => Value::Scalar(*c),
            Node::Field(f) => Value::Panel(Arc::clone(data.field(f).expect("fields checked at compile time"))),
            Node::Op { op, args, windows } => {
                let inputs: Vec<Value> = args
                    .iter()
                    .map(|a| {
                        uses[*a] -= 1;
                        if uses[*a] == 0 {
                            values[*a].take().expect("input computed before use")
                        } else {
                            values[*a].clone().expect("input computed before use")
                        }
                    })
                    .collect();
                let ctx = OpCtx { n_dates: nd, n_assets: na, windows, groups: data.groups.as_ref() };
                let _span = tracing::trace_span!("op", name = op.name).entered();
                (op.eval)(inputs, &ctx)
            }
        };
        values[id] = Some(v);
        for &r in &roots_at[id] {
            uses[id] -= 1;
            let v = if uses[id] == 0 { values[id].take() } else { values[id].clone() };
            if let Some(v) = v {
                on_root(r, v.into_panel(nd, na));
            }
        }
    }
}

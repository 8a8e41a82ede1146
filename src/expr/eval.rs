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
    // Time per operator, reported at debug level (`--log debug`).
    let profile = tracing::enabled!(tracing::Level::DEBUG);
    let mut op_time: std::collections::BTreeMap<&str, (u32, std::time::Duration)> = Default::default();
    let mut root_time = std::time::Duration::ZERO;
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
                let t0 = profile.then(std::time::Instant::now);
                let v = (op.eval)(inputs, &ctx);
                if let Some(t0) = t0 {
                    let e = op_time.entry(op.name).or_default();
                    e.0 += 1;
                    e.1 += t0.elapsed();
                }
                v
            }
        };
        values[id] = Some(v);
        for &r in &roots_at[id] {
            uses[id] -= 1;
            let v = if uses[id] == 0 { values[id].take() } else { values[id].clone() };
            if let Some(v) = v {
                let t0 = profile.then(std::time::Instant::now);
                on_root(r, v.into_panel(nd, na));
                if let Some(t0) = t0 {
                    root_time += t0.elapsed();
                }
            }
        }
    }
    crate::data::pool::trim();
    if profile {
        let mut rows: Vec<_> = op_time.into_iter().collect();
        rows.sort_by(|a, b| b.1 .1.cmp(&a.1 .1));
        for (name, (count, t)) in rows {
            tracing::debug!("op {name:<14} x{count:<5} {t:>10.2?}");
        }
        tracing::debug!("consumers of results (metrics): {root_time:.2?}");
    }
}

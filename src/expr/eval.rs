//! Executing a compiled [`Graph`] against market data.
//!
//! Nodes run root by root, children first, the roots in an order chosen to keep few
//! panels alive ([`schedule`]). Each node's value is kept only while a later node still
//! needs it; the last consumer receives the buffer itself, so element-wise
//! kernels overwrite it in place instead of allocating, and an element-wise result whose one
//! consumer is element-wise too is not computed on its own (see `kernels::elementwise`:
//! its time shows under its consumer in the `--log debug` profile). Results are handed to a callback
//! as soon as they are ready and then dropped, which keeps the peak memory of a
//! 101-alpha batch to a few dozen panels.

use super::cache::EvalCache;
use super::compile::{Graph, Node, NodeId};
use super::kernels::Value;
use super::ops::OpCtx;
use crate::data::{MarketData, Panel};
use std::sync::Arc;

/// Evaluates `roots` (any number, duplicates allowed) and calls `on_root(i, panel)` for
/// each root index as its value becomes ready.
pub fn evaluate(graph: &Graph, roots: &[NodeId], data: &MarketData, on_root: impl FnMut(usize, Arc<Panel>)) {
    evaluate_cached(graph, roots, data, None, on_root)
}

/// [`evaluate`], reading the sub-expressions `cache` holds instead of computing them (and
/// what they alone need), and keeping each panel it computes there. The values are the
/// same bits either way.
pub fn evaluate_cached(graph: &Graph, roots: &[NodeId], data: &MarketData, mut cache: Option<&mut EvalCache>, mut on_root: impl FnMut(usize, Arc<Panel>)) {
    let (nd, na) = (data.n_dates(), data.n_assets());
    let n = graph.nodes.len();
    let keys = match cache.as_deref_mut() {
        Some(c) => {
            c.bind(data);
            super::cache::keys(graph)
        }
        None => Vec::new(),
    };
    // Which nodes are needed, and how many times each is consumed; a node the cache holds
    // is read from it, and its arguments are not needed for it.
    let mut needed = vec![false; n];
    let mut hit: Vec<Option<Arc<Panel>>> = vec![None; n];
    let mut uses = vec![0usize; n];
    let mut stack: Vec<NodeId> = roots.to_vec();
    while let Some(id) = stack.pop() {
        if needed[id] {
            continue;
        }
        needed[id] = true;
        if let Node::Op { args, .. } = &graph.nodes[id] {
            if let Some(c) = cache.as_deref_mut() {
                hit[id] = c.get(keys[id]);
            }
            if hit[id].is_none() {
                stack.extend(args.iter().copied());
            }
        }
    }
    let computed: Vec<bool> = (0..n).map(|id| matches!(graph.nodes[id], Node::Op { .. }) && hit[id].is_none()).collect();
    // Uses by element-wise operators too: a node whose one use is by such an operator may
    // stay uncomputed until that operator reads it (a chain of element-wise maps makes one
    // pass, see `Lazy`).
    let mut ew_uses = vec![0usize; n];
    for (_, node) in graph.nodes.iter().enumerate().filter(|&(id, _)| needed[id] && computed[id]) {
        if let Node::Op { op, args, .. } = node {
            for a in args {
                uses[*a] += 1;
                ew_uses[*a] += usize::from(op.kind == super::ops::Kind::Elementwise);
            }
        }
    }
    let mut roots_at: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, r) in roots.iter().enumerate() {
        uses[*r] += 1;
        roots_at[*r].push(i);
    }

    let schedule = schedule(graph, roots, &needed, &uses, &|id| computed[id]);

    let mut values: Vec<Option<Value>> = vec![None; n];
    // Time per operator, reported at debug level (`--log debug`).
    let profile = tracing::enabled!(tracing::Level::DEBUG);
    let mut op_time: std::collections::BTreeMap<&str, (u32, std::time::Duration)> = Default::default();
    let mut root_time = std::time::Duration::ZERO;
    for &id in &schedule {
        let v = match &graph.nodes[id] {
            Node::Const(c) => Value::Scalar(*c),
            Node::Field(f) => Value::Panel(Arc::clone(data.field(f).expect("fields checked at compile time"))),
            Node::Op { .. } if hit[id].is_some() => Value::Panel(hit[id].take().expect("checked")),
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
                let lazy = uses[id] == 1 && ew_uses[id] == 1;
                let ctx = OpCtx { n_dates: nd, n_assets: na, windows, groups: data.groups.as_ref(), lazy };
                let t0 = profile.then(std::time::Instant::now);
                let v = (op.eval)(inputs, &ctx);
                if let Some(t0) = t0 {
                    let e = op_time.entry(op.name).or_default();
                    e.0 += 1;
                    e.1 += t0.elapsed();
                }
                if let (Some(c), Value::Panel(p)) = (cache.as_deref_mut(), &v) {
                    c.put(keys[id], p);
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
        rows.sort_by_key(|r| std::cmp::Reverse(r.1 .1));
        for (name, (count, t)) in rows {
            tracing::debug!("op {name:<14} x{count:<5} {t:>10.2?}");
        }
        tracing::debug!("consumers of results (metrics): {root_time:.2?}");
    }
}

/// The order in which to compute the needed nodes: root by root, each root's not yet
/// computed sub-expressions in id order (children first), the roots taken greedily so that
/// few panels stay alive. A node shared by several alphas (`adv20`, `rank(close)`) lives
/// from its first use to its last; evaluated in the batch's own order, 29 such panels were
/// alive at once in the alpha101 batch. The next root is the one that leaves the fewest
/// panels alive: the new shared nodes it computes (still needed by later roots) minus the
/// live nodes it consumes for the last time. Only the order changes, never a value.
///
/// [`WINDOW`]: the candidates considered at each step.
fn schedule(graph: &Graph, roots: &[NodeId], needed: &[bool], uses: &[usize], is_op: &dyn Fn(NodeId) -> bool) -> Vec<NodeId> {
    let n = graph.nodes.len();
    let mut sorted: Vec<NodeId> = roots.to_vec();
    sorted.sort_unstable();
    // Each distinct root and how many times it is listed (each listing is one use).
    let mut distinct: Vec<NodeId> = Vec::new();
    let mut mult: Vec<usize> = Vec::new();
    for &r in &sorted {
        if distinct.last() == Some(&r) {
            *mult.last_mut().expect("pushed with distinct") += 1;
        } else {
            distinct.push(r);
            mult.push(1);
        }
    }
    // Each distinct root's sub-expression (its needed op nodes), ascending ids.
    let mut seen = vec![usize::MAX; n];
    let subtrees: Vec<Vec<NodeId>> = distinct
        .iter()
        .enumerate()
        .map(|(r, &root)| {
            let mut stack = vec![root];
            let mut out = Vec::new();
            while let Some(id) = stack.pop() {
                if seen[id] == r || !is_op(id) {
                    continue;
                }
                seen[id] = r;
                out.push(id);
                if let Node::Op { args, .. } = &graph.nodes[id] {
                    stack.extend(args.iter().copied());
                }
            }
            out.sort_unstable();
            out
        })
        .collect();
    debug_assert!(subtrees.iter().flatten().all(|&id| needed[id]));
    // Remaining consumers of each node: its uses (by parents and as a root), counted per
    // parent and root as `evaluate` counts them.
    let mut left = uses.to_vec();
    let mut done = vec![false; n];
    let mut pending: Vec<usize> = (0..distinct.len()).collect();
    let mut order = Vec::with_capacity(n);
    // Consumers inside one root's sub-expression (for the greedy score), reused.
    let mut inside = vec![0usize; n];
    while !pending.is_empty() {
        let mut best = (i64::MAX, 0usize);
        // The next [`WINDOW`] roots in batch order are the candidates, which bounds the
        // cost for batches of thousands (a knowledge-base import).
        for (slot, &r) in pending.iter().enumerate().take(WINDOW) {
            let nodes = &subtrees[r];
            for &id in nodes.iter().filter(|&&id| !done[id]) {
                if let Node::Op { args, .. } = &graph.nodes[id] {
                    for &a in args {
                        inside[a] += 1;
                    }
                }
            }
            inside[distinct[r]] += mult[r];
            let mut score = 0i64;
            for &id in nodes {
                if done[id] {
                    // Live now; freed if this root holds all its remaining consumers.
                    score -= i64::from(left[id] > 0 && inside[id] == left[id]);
                } else {
                    // New; stays alive if consumers outside this root remain.
                    score += i64::from(inside[id] < left[id]);
                }
            }
            for &id in nodes.iter().filter(|&&id| !done[id]) {
                if let Node::Op { args, .. } = &graph.nodes[id] {
                    for &a in args {
                        inside[a] = 0;
                    }
                }
            }
            inside[distinct[r]] = 0;
            if score < best.0 {
                best = (score, slot);
            }
        }
        let r = pending.remove(best.1);
        for &id in &subtrees[r] {
            if !done[id] {
                done[id] = true;
                order.push(id);
                if let Node::Op { args, .. } = &graph.nodes[id] {
                    for &a in args {
                        left[a] -= 1;
                    }
                }
            }
        }
        left[distinct[r]] -= mult[r];
    }
    // Constants and fields first (they cost nothing to hold), then the ops in that order.
    let mut schedule: Vec<NodeId> = (0..n).filter(|&id| needed[id] && !is_op(id)).collect();
    schedule.extend(order);
    schedule
}

/// Roots considered at each step of [`schedule`].
const WINDOW: usize = 128;

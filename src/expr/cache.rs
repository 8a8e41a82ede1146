//! Sub-expression values kept between evaluations, so that a search trying variants of
//! one formula computes what they share once: `rank(ts_mean(close, 10))` evaluated for
//! the parent is read back, not recomputed, for every variant that keeps it.
//!
//! Keys are structural: a 128-bit hash of the operator, its windows and its arguments'
//! keys (a field's name, a constant's bits), so the same sub-expression compiled into
//! another graph finds the same entry. Values are the panels the evaluator computed, held
//! by reference count: a cached evaluation hands out the very bits an uncached one
//! computes. The cache belongs to one data set; given another, it empties itself (it
//! holds the data's fields, so their addresses, which identify it, cannot be reused).
//! It is bounded in bytes and evicts the least recently used entry first.

use super::compile::{Graph, Node};
use crate::data::{MarketData, Panel};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A structural key of a compiled node.
pub type Key = u128;

struct Entry {
    value: Arc<Panel>,
    bytes: usize,
    last: u64,
}

/// Computed sub-expression panels, least recently used evicted past a byte budget.
pub struct EvalCache {
    budget: usize,
    used: usize,
    tick: u64,
    entries: HashMap<Key, Entry>,
    /// The data the entries were computed on: its fields, held.
    data: Vec<Arc<Panel>>,
    /// Lookups that found a value, and that did not.
    pub hits: u64,
    pub misses: u64,
}

impl EvalCache {
    /// An empty cache that holds at most `budget` bytes of panels.
    pub fn new(budget: usize) -> EvalCache {
        EvalCache { budget, used: 0, tick: 0, entries: HashMap::new(), data: Vec::new(), hits: 0, misses: 0 }
    }

    /// The most bytes it holds.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Bytes of panels held now (never above the budget).
    pub fn bytes(&self) -> usize {
        self.used
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Empties the cache unless it was filled from `data`.
    pub(super) fn bind(&mut self, data: &MarketData) {
        let same = self.data.len() == data.fields.len() && self.data.iter().zip(data.fields.values()).all(|(a, b)| Arc::ptr_eq(a, b));
        if !same {
            self.entries.clear();
            self.used = 0;
            self.data = data.fields.values().cloned().collect();
        }
    }

    pub(super) fn get(&mut self, key: Key) -> Option<Arc<Panel>> {
        self.tick += 1;
        match self.entries.get_mut(&key) {
            Some(e) => {
                e.last = self.tick;
                self.hits += 1;
                Some(e.value.clone())
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// Keeps `value` under `key`, evicting the least recently used entries to stay within
    /// the budget (a panel larger than the whole budget is not kept).
    pub(super) fn put(&mut self, key: Key, value: &Arc<Panel>) {
        let bytes = value.n_dates() * value.n_assets() * std::mem::size_of::<f64>();
        if bytes > self.budget || self.entries.contains_key(&key) {
            return;
        }
        while self.used + bytes > self.budget {
            let Some((&old, _)) = self.entries.iter().min_by_key(|(_, e)| e.last) else { break };
            if let Some(e) = self.entries.remove(&old) {
                self.used -= e.bytes;
            }
        }
        self.tick += 1;
        self.used += bytes;
        self.entries.insert(key, Entry { value: value.clone(), bytes, last: self.tick });
    }
}

/// Every node's structural key (children come before parents in a graph).
pub(super) fn keys(graph: &Graph) -> Vec<Key> {
    let mut keys: Vec<Key> = Vec::with_capacity(graph.nodes.len());
    for node in &graph.nodes {
        let half = |salt: u64| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            salt.hash(&mut h);
            match node {
                Node::Const(v) => (0u8, if *v == 0.0 { 0 } else { v.to_bits() }).hash(&mut h),
                Node::Field(f) => (1u8, f).hash(&mut h),
                Node::Op { op, args, windows } => {
                    (2u8, op.name, windows).hash(&mut h);
                    for a in args {
                        keys[*a].hash(&mut h);
                    }
                }
            }
            h.finish()
        };
        keys.push((u128::from(half(0x9e37_79b9)) << 64) | u128::from(half(0x7f4a_7c15)));
    }
    keys
}

//! The storage interface both backends implement: points with named vectors and a JSON
//! payload, filtered vector search, scroll, count and delete. The knowledge-base logic
//! ([`super::Kb`]) is written once against it.

use super::KbError;
use serde_json::{Map, Value};

/// Named vectors of a point.
pub const IDEA: &str = "idea";
pub const CODE: &str = "code";
pub const BEHAVIOUR: &str = "behaviour";

/// Payload keys with an index (filters on them are fast).
pub const KEYWORD_INDEXES: &[&str] = &["type", "id", "status", "family", "kind", "run_id"];
pub const INTEGER_INDEXES: &[&str] = &["generation", "created_at"];
pub const FLOAT_INDEXES: &[&str] =
    &["valid_rank_ic", "valid_ic", "valid_sharpe", "valid_icir", "train_rank_ic", "train_ic", "train_sharpe", "train_icir"];

/// Dimensions of the named vectors of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Dims {
    pub text: usize,
    pub behaviour: usize,
}

/// One point to write.
#[derive(Clone, Debug)]
pub struct Point {
    /// Numeric id (see [`super::record::point_id`]).
    pub id: u64,
    pub vectors: Vec<(&'static str, Vec<f32>)>,
    pub payload: Map<String, Value>,
}

/// A stored point as read back.
#[derive(Clone, Debug)]
pub struct Doc {
    pub id: u64,
    pub payload: Map<String, Value>,
    pub vectors: Vec<(String, Vec<f32>)>,
}

/// A conjunction of conditions on payload keys.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    pub must: Vec<Cond>,
    pub must_not: Vec<Cond>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Cond {
    /// Keyword equality.
    Is(String, String),
    /// Keyword in a set.
    In(String, Vec<String>),
    /// Numeric range (inclusive; either end optional).
    Range(String, Option<f64>, Option<f64>),
}

impl Filter {
    pub fn new() -> Filter {
        Filter::default()
    }
    pub fn is(mut self, key: &str, value: &str) -> Filter {
        self.must.push(Cond::Is(key.into(), value.into()));
        self
    }
    pub fn is_in(mut self, key: &str, values: &[&str]) -> Filter {
        self.must.push(Cond::In(key.into(), values.iter().map(|s| s.to_string()).collect()));
        self
    }
    pub fn not(mut self, key: &str, value: &str) -> Filter {
        self.must_not.push(Cond::Is(key.into(), value.into()));
        self
    }
    pub fn range(mut self, key: &str, lo: Option<f64>, hi: Option<f64>) -> Filter {
        self.must.push(Cond::Range(key.into(), lo, hi));
        self
    }
}

/// A vector store: the embedded Qdrant Edge shard or a Qdrant server collection.
pub trait Store: Send + Sync {
    /// Writes points (insert or replace). Returns once they are durable.
    fn upsert(&self, points: Vec<Point>) -> Result<(), KbError>;
    /// Reads points by id (missing ids are skipped).
    fn get(&self, ids: &[u64], with_vectors: bool) -> Result<Vec<Doc>, KbError>;
    /// Deletes points by id.
    fn delete(&self, ids: &[u64]) -> Result<(), KbError>;
    /// Every point matching `filter`, in id order.
    fn scroll(&self, filter: &Filter, with_vectors: bool) -> Result<Vec<Doc>, KbError>;
    /// The `limit` nearest points to `query` on the named vector, with their cosine scores.
    fn search(
        &self,
        vector: &str,
        query: &[f32],
        filter: &Filter,
        limit: usize,
        with_vectors: bool,
    ) -> Result<Vec<(f32, Doc)>, KbError>;
    fn count(&self, filter: &Filter) -> Result<usize, KbError>;
    /// Builds indexes / merges segments where the engine leaves that to the caller.
    fn optimize(&self) -> Result<(), KbError> {
        Ok(())
    }
    /// The dimensions the store was created with.
    fn dims(&self) -> Dims;
    /// Where it lives (for messages).
    fn location(&self) -> String;
    /// Whether other processes may write it at the same time (a server collection; an
    /// embedded store refuses a second process).
    fn shared(&self) -> bool {
        false
    }
}

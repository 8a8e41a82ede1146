//! The alpha knowledge base: every attempt (accepted, rejected, failed) with its code, idea,
//! metrics, reviews and lessons, searchable by meaning (`idea`, `code` vectors), by
//! behaviour (`behaviour` vector) and by filters. It is what later generations read and what
//! users query the morning after a run.
//!
//! Storage is one [`Store`] trait with two real backends: the embedded Qdrant engine
//! ([`edge::EdgeStore`], default, a directory) and a Qdrant server ([`server::ServerStore`],
//! `--kb qdrant://host:port/collection`, for several miners sharing one KB).

pub mod behaviour;
pub mod copy;
pub mod edge;
pub mod embed;
pub mod novelty;
pub mod ranks;
pub mod record;
pub mod retrieve;
pub mod io;
pub mod server;
pub mod store;

pub use behaviour::BehaviourSample;
pub use record::{AlphaRecord, Gain, Kind, Lesson, Novelty, Review, Status};
pub use store::{Dims, Filter, Store};

/// A record and its stored behaviour vector (absent for records stored without one).
pub type WithBehaviour = (AlphaRecord, Option<Vec<f32>>);

use embed::Embedder;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use store::{Doc, Point, BEHAVIOUR, CODE, IDEA};

#[derive(Debug, thiserror::Error)]
pub enum KbError {
    #[error("knowledge base {path} is in use by another alphaloop process ({holder}); wait for it to finish, or use a Qdrant server (--kb qdrant://host:port/collection) for several miners")]
    InUse { path: PathBuf, holder: String },
    // `err`, not `source`: the message already carries it, and a source would print twice.
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("knowledge base {location}: {msg}")]
    Engine { location: String, msg: String },
    #[error("knowledge base {location} was created with vectors of {found:?}, but the embedder gives {wanted:?}; use the same embedding model or another --kb")]
    Dims { location: String, found: Dims, wanted: Dims },
    #[error("knowledge base {location}: record '{id}' has schema version {found}, newer than this alphaloop understands ({supported}); upgrade alphaloop")]
    Schema { location: String, id: String, found: u32, supported: u32 },
    #[error("knowledge base {location}: record {point} is unreadable: {msg}")]
    Corrupt { location: String, point: u64, msg: String },
    #[error("embeddings: {0}")]
    Embedder(String),
    #[error("no record '{0}' in the knowledge base")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
}

/// Where the knowledge base lives.
#[derive(Clone, Debug, PartialEq)]
pub enum Location {
    Dir(PathBuf),
    /// `qdrant://host:port/collection` (gRPC port, 6334 by default), or
    /// `qdrant://a:6334,b:6334/collection` for the nodes of a cluster, tried in turn.
    Server { urls: Vec<String>, collection: String },
}

impl std::str::FromStr for Location {
    type Err = String;
    fn from_str(s: &str) -> Result<Location, String> {
        if let Some(rest) = s.strip_prefix("qdrant://") {
            let (host, coll) = rest.split_once('/').unwrap_or((rest, "alphaloop"));
            if host.is_empty() {
                return Err(format!("'{s}': expected qdrant://host:port/collection"));
            }
            let mut urls = Vec::new();
            for h in host.split(',') {
                if h.is_empty() {
                    return Err(format!("'{s}': an empty host in the list; expected qdrant://host:port,host:port/collection"));
                }
                urls.push(if h.contains(':') { format!("http://{h}") } else { format!("http://{h}:6334") });
            }
            let coll = if coll.is_empty() { "alphaloop" } else { coll };
            return Ok(Location::Server { urls, collection: coll.to_string() });
        }
        Ok(Location::Dir(PathBuf::from(s)))
    }
}

impl Location {
    /// `alpha_kb/store` of the checkout ([`crate::checkout_dir`]), else
    /// `$ALPHALOOP_CACHE/kb`.
    pub fn default_dir() -> Location {
        Location::Dir(crate::checkout_dir().map_or_else(|| crate::cache_dir().join("kb"), |c| c.join("alpha_kb/store")))
    }
}

/// Store-wide settings kept inside the store (a payload-only point), so every session and
/// every miner sharing a server uses the same behaviour sample and embedder.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Meta {
    pub schema: u32,
    pub embedder: String,
    pub dims: Dims,
    pub behaviour: Option<BehaviourSample>,
    pub created_at: i64,
}

const META_ID: &str = "__alphaloop_meta__";

/// A record found by a query, with its score.
#[derive(Clone, Debug, Serialize)]
pub struct Hit {
    pub score: f64,
    /// Cosine similarity to the query (before mixing in performance and recency).
    pub relevance: f64,
    pub record: AlphaRecord,
}

/// The knowledge base: a store plus the embedder that fills its text vectors.
pub struct Kb {
    store: Box<dyn Store>,
    embedder: Arc<dyn Embedder>,
    meta: Meta,
    subtrees: novelty::SubtreeCache,
    /// Where ranked signals of accepted alphas are kept ([`ranks`]): `ranks/` inside an
    /// embedded store's directory, else under the cache directory by server and collection.
    ranks_base: PathBuf,
}

impl Kb {
    /// Opens (creating if needed) the knowledge base at `loc`; a server's transient
    /// failures are retried as [`Patience::default`] allows.
    pub fn open(loc: &Location, embedder: Arc<dyn Embedder>) -> Result<Kb, KbError> {
        Kb::open_with(loc, embedder, crate::llm::retry::Patience::default(), &server::Layout::default())
    }

    /// [`open`](Self::open), with a server's retries as `patience` allows (the config's
    /// `retry_minutes`), and a collection it creates laid out as `layout` says.
    pub fn open_with(loc: &Location, embedder: Arc<dyn Embedder>, patience: crate::llm::retry::Patience, layout: &server::Layout) -> Result<Kb, KbError> {
        let dims = Dims { text: embedder.dim(), behaviour: behaviour::DIM };
        let store: Box<dyn Store> = match loc {
            Location::Dir(d) => Box::new(edge::EdgeStore::open(d, dims)?),
            Location::Server { urls, collection } => Box::new(server::ServerStore::open(urls, collection, dims, patience, layout)?),
        };
        let mut kb = Kb::with_store(store, embedder)?;
        if let Location::Dir(d) = loc {
            kb.ranks_base = d.join("ranks");
        }
        Ok(kb)
    }

    pub fn with_store(store: Box<dyn Store>, embedder: Arc<dyn Embedder>) -> Result<Kb, KbError> {
        let meta_doc = store.get(&[record::point_id(META_ID)], false)?;
        let meta = match meta_doc.first().and_then(|d| d.payload.get("meta")) {
            Some(v) => serde_json::from_value::<Meta>(v.clone()).map_err(|e| KbError::Corrupt {
                location: store.location(),
                point: record::point_id(META_ID),
                msg: e.to_string(),
            })?,
            None => {
                let meta = Meta {
                    schema: record::SCHEMA_VERSION,
                    embedder: embedder.name(),
                    dims: store.dims(),
                    behaviour: None,
                    created_at: record::now(),
                };
                write_meta(store.as_ref(), &meta)?;
                meta
            }
        };
        if meta.embedder != embedder.name() {
            return Err(KbError::Invalid(format!(
                "knowledge base {} was built with the embedder {}, not {}; its text vectors would not be comparable",
                store.location(),
                meta.embedder,
                embedder.name()
            )));
        }
        let safe: String = store.location().chars().map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '_' }).collect();
        let ranks_base = crate::cache_dir().join("ranks").join(safe);
        Ok(Kb { store, embedder, meta, subtrees: Default::default(), ranks_base })
    }

    pub fn location(&self) -> String {
        self.store.location()
    }

    /// Whether other processes may write this KB at the same time (a server collection).
    pub fn shared(&self) -> bool {
        self.store.shared()
    }

    /// The ranked signals of dates `start..end` of `data`, kept beside this knowledge base.
    pub fn rank_store(&self, data: &crate::data::MarketData, start: usize, end: usize) -> ranks::RankStore {
        ranks::RankStore::new(&self.ranks_base, data, start, end)
    }

    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    pub fn embedder(&self) -> &dyn Embedder {
        self.embedder.as_ref()
    }

    /// The behaviour sample, chosen from `data` the first time one is needed.
    pub fn behaviour_sample(&mut self, data: &crate::data::MarketData, splits: &crate::data::Splits) -> Result<BehaviourSample, KbError> {
        if let Some(s) = &self.meta.behaviour {
            // Chosen on the data the store was created with; data of another era or
            // universe leaves behaviour vectors (`kb similar`, the repeat check) empty.
            let dates = s.dates.iter().filter(|d| data.dates.binary_search(d).is_ok()).count();
            let symbols = s.symbols.iter().filter(|x| data.symbols.contains(x)).count();
            if 2 * dates < s.dates.len() || 2 * symbols < s.symbols.len() {
                tracing::warn!(
                    "the knowledge base {} keeps a behaviour sample of {} dates ({}..{}) and {} stocks chosen when it was created, and {} has only {dates} of those dates and {symbols} of those stocks: behaviour vectors, `kb similar` and the repeat check will be empty or weak for records added now; use another store (--kb DIR) for this data",
                    self.location(),
                    s.dates.len(),
                    s.dates.first().map(|d| d.to_string()).unwrap_or_default(),
                    s.dates.last().map(|d| d.to_string()).unwrap_or_default(),
                    s.symbols.len(),
                    data.source.display()
                );
            }
            return Ok(s.clone());
        }
        let s = BehaviourSample::choose(data, splits).map_err(KbError::Invalid)?;
        self.meta.behaviour = Some(s.clone());
        write_meta(self.store.as_ref(), &self.meta)?;
        Ok(s)
    }

    /// Writes records (insert or replace by id). A record given without a behaviour vector
    /// keeps the one already stored under its id, if any.
    pub fn put(&self, items: Vec<(AlphaRecord, Option<Vec<f32>>)>) -> Result<(), KbError> {
        if items.is_empty() {
            return Ok(());
        }
        let mut texts = Vec::with_capacity(items.len() * 2);
        for (r, _) in &items {
            if r.id.is_empty() || r.id == META_ID {
                return Err(KbError::Invalid(format!("invalid record id '{}'", r.id)));
            }
            texts.push(r.idea_text());
            texts.push(r.code.clone());
        }
        let vecs = self.embedder.embed(&texts)?;
        let missing: Vec<u64> =
            items.iter().filter(|(_, b)| b.is_none()).map(|(r, _)| record::point_id(&r.id)).collect();
        let old: std::collections::HashMap<u64, Vec<f32>> = if missing.is_empty() {
            Default::default()
        } else {
            self.store
                .get(&missing, true)?
                .into_iter()
                .filter_map(|d| d.vectors.into_iter().find(|(n, _)| n == BEHAVIOUR).map(|(_, v)| (d.id, v)))
                .collect()
        };
        let mut vecs = vecs.into_iter();
        let mut points = Vec::with_capacity(items.len());
        for (r, b) in items {
            let id = record::point_id(&r.id);
            let (iv, cv) = (vecs.next().unwrap_or_default(), vecs.next().unwrap_or_default());
            let mut vectors = vec![(IDEA, iv), (CODE, cv)];
            if let Some(b) = b.or_else(|| old.get(&id).cloned()) {
                if b.len() != behaviour::DIM {
                    return Err(KbError::Invalid(format!("behaviour vector of '{}' has {} values, not {}", r.id, b.len(), behaviour::DIM)));
                }
                vectors.push((BEHAVIOUR, b));
            }
            points.push(Point { id, vectors, payload: alpha_payload(&r)? });
        }
        self.store.upsert(points)
    }

    /// Rewrites stored records' fields other than their text (metrics, contributions,
    /// status), keeping the vectors they have: nothing is embedded again. Records not in
    /// the store are refused.
    pub fn update(&self, recs: &[AlphaRecord]) -> Result<(), KbError> {
        let ids: Vec<u64> = recs.iter().map(|r| record::point_id(&r.id)).collect();
        let docs: std::collections::HashMap<u64, Doc> = self.store.get(&ids, true)?.into_iter().map(|d| (d.id, d)).collect();
        let mut points = Vec::with_capacity(recs.len());
        for (r, id) in recs.iter().zip(ids) {
            let d = docs.get(&id).ok_or_else(|| KbError::NotFound(r.id.clone()))?;
            let vectors = [IDEA, CODE, BEHAVIOUR].into_iter().filter_map(|n| d.vectors.iter().find(|(m, _)| m == n).map(|(_, v)| (n, v.clone()))).collect();
            points.push(Point { id, vectors, payload: alpha_payload(r)? });
        }
        self.store.upsert(points)
    }

    /// Stores a lesson (its text is embedded on the `idea` vector).
    pub fn put_lesson(&self, lesson: &Lesson) -> Result<(), KbError> {
        let v = self.embedder.embed(std::slice::from_ref(&lesson.text))?.pop().unwrap_or_default();
        let mut payload = Map::new();
        payload.insert("type".into(), json!("lesson"));
        payload.insert("id".into(), json!(lesson.id));
        payload.insert("run_id".into(), json!(lesson.run_id));
        payload.insert("generation".into(), json!(lesson.generation));
        payload.insert("created_at".into(), json!(lesson.created_at));
        payload.insert("lesson".into(), serde_json::to_value(lesson).map_err(|e| KbError::Invalid(e.to_string()))?);
        self.store.upsert(vec![Point { id: record::point_id(&lesson.id), vectors: vec![(IDEA, v)], payload }])
    }

    pub fn get(&self, id: &str) -> Result<Option<AlphaRecord>, KbError> {
        let docs = self.store.get(&[record::point_id(id)], false)?;
        match docs.into_iter().next() {
            Some(d) if d.payload.get("type").and_then(Value::as_str) == Some("alpha") => {
                let r = self.decode_doc(&d)?;
                Ok((r.id == id).then_some(r))
            }
            _ => Ok(None),
        }
    }

    /// The record and its stored behaviour vector.
    pub fn get_with_behaviour(&self, id: &str) -> Result<Option<WithBehaviour>, KbError> {
        let docs = self.store.get(&[record::point_id(id)], true)?;
        match docs.into_iter().next() {
            Some(d) if d.payload.get("type").and_then(Value::as_str) == Some("alpha") => {
                let r = self.decode_doc(&d)?;
                let b = d.vectors.into_iter().find(|(n, _)| n == BEHAVIOUR).map(|(_, v)| v);
                Ok((r.id == id).then_some((r, b)))
            }
            _ => Ok(None),
        }
    }

    /// Removes a record; false when there was none.
    pub fn remove(&self, id: &str) -> Result<bool, KbError> {
        if self.get(id)?.is_none() {
            return Ok(false);
        }
        self.store.delete(&[record::point_id(id)])?;
        Ok(true)
    }

    /// Every alpha record matching `filter`, oldest first.
    pub fn records(&self, filter: &Filter) -> Result<Vec<AlphaRecord>, KbError> {
        let mut f = filter.clone();
        f.must.push(store::Cond::Is("type".into(), "alpha".into()));
        let mut v: Vec<AlphaRecord> = self.store.scroll(&f, false)?.iter().map(|d| self.decode_doc(d)).collect::<Result<_, _>>()?;
        v.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        Ok(v)
    }

    pub fn lessons(&self) -> Result<Vec<Lesson>, KbError> {
        let docs = self.store.scroll(&Filter::new().is("type", "lesson"), false)?;
        let mut v: Vec<Lesson> = docs
            .iter()
            .filter_map(|d| d.payload.get("lesson").and_then(|l| serde_json::from_value(l.clone()).ok()))
            .collect();
        v.sort_by_key(|l| l.created_at);
        Ok(v)
    }

    pub fn count(&self, filter: &Filter) -> Result<usize, KbError> {
        let mut f = filter.clone();
        f.must.push(store::Cond::Is("type".into(), "alpha".into()));
        self.store.count(&f)
    }

    /// Records ranked by a metric on a split (best first; records without it are left out).
    pub fn top(&self, by: &str, split: &str, n: usize, filter: &Filter) -> Result<Vec<AlphaRecord>, KbError> {
        if !record::METRIC_NAMES.contains(&by) && by != "contribution" {
            return Err(KbError::Invalid(format!("unknown metric '{by}'; one of {}, contribution", record::METRIC_NAMES.join(", "))));
        }
        if split != "train" && split != "valid" {
            // Records hold train and valid metrics only: the test period is never scored
            // into the KB (`kb holdout` reports it).
            return Err(KbError::Invalid(format!("unknown split '{split}': train or valid (`kb holdout` reports the test period)")));
        }
        let mut v: Vec<(f64, AlphaRecord)> =
            self.records(filter)?.into_iter().filter_map(|r| r.metric(split, by).map(|m| (m, r))).collect();
        // Drawdown and turnover are better when smaller in magnitude.
        let sign = if by == "turnover" || by == "max_drawdown" { -1.0 } else { 1.0 };
        let key = |m: f64| if by == "max_drawdown" { -m.abs() * sign } else { m * sign };
        v.sort_by(|a, b| key(b.0).total_cmp(&key(a.0)).then_with(|| a.1.id.cmp(&b.1.id)));
        Ok(v.into_iter().take(n).map(|(_, r)| r).collect())
    }

    /// Candidates tried on valid, over every record (each counts its own `attempts`): the
    /// number a multiple-testing bar on valid must account for.
    pub fn attempts(&self) -> Result<usize, KbError> {
        Ok(self.records(&Filter::new())?.iter().map(|r| r.attempts).sum())
    }

    /// Nearest records on a named vector.
    pub fn nearest(&self, vector: &str, query: &[f32], filter: &Filter, limit: usize, with_vectors: bool) -> Result<Vec<(f32, Doc)>, KbError> {
        let mut f = filter.clone();
        f.must.push(store::Cond::Is("type".into(), "alpha".into()));
        self.store.search(vector, query, &f, limit, with_vectors)
    }

    /// Lets the engine build its vector indexes (HNSW) and merge small segments; worth it
    /// after a large import or at the end of a mining run.
    pub fn optimize(&self) -> Result<(), KbError> {
        self.store.optimize()
    }

    pub(crate) fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    pub(crate) fn decode_doc(&self, d: &Doc) -> Result<AlphaRecord, KbError> {
        let corrupt = |msg: String| KbError::Corrupt { location: self.store.location(), point: d.id, msg };
        let v = d.payload.get("record").ok_or_else(|| corrupt("no `record` in the payload".into()))?;
        let schema = v.get("schema").and_then(Value::as_u64).unwrap_or(1) as u32;
        if schema > record::SCHEMA_VERSION {
            return Err(KbError::Schema {
                location: self.store.location(),
                id: v.get("id").and_then(Value::as_str).unwrap_or("?").to_string(),
                found: schema,
                supported: record::SCHEMA_VERSION,
            });
        }
        serde_json::from_value(v.clone()).map_err(|e| corrupt(e.to_string()))
    }

    /// Summary counts for `kb stats`.
    pub fn stats(&self) -> Result<Stats, KbError> {
        let recs = self.records(&Filter::new())?;
        let mut s = Stats { total: recs.len(), lessons: self.store.count(&Filter::new().is("type", "lesson"))?, ..Default::default() };
        for r in &recs {
            *s.by_status.entry(r.status.keyword().to_string()).or_default() += 1;
            *s.by_family.entry(if r.family.is_empty() { "(none)".into() } else { r.family.clone() }).or_default() += 1;
            *s.by_generation.entry(r.generation).or_default() += 1;
            let day = chrono_day(r.created_at);
            let e = s.growth.entry(day).or_default();
            e.0 += 1;
            if r.status == Status::Accepted {
                e.1 += 1;
            }
            for m in ["rank_ic", "ic", "sharpe", "icir"] {
                if let Some(v) = r.metric("valid", m) {
                    let best = s.best_valid.entry(m.to_string()).or_insert((f64::NEG_INFINITY, String::new()));
                    if v > best.0 {
                        *best = (v, r.id.clone());
                    }
                }
            }
        }
        Ok(s)
    }

    /// The expression records that name `id` (`alpha:ID`) in their code: what deleting
    /// `id` would break.
    pub fn dependents(&self, id: &str) -> Result<Vec<String>, KbError> {
        let recs = self.records(&Filter::new().is("kind", "expression"))?;
        Ok(recs.into_iter().filter(|r| crate::expr::parse(&r.code).is_ok_and(|e| e.alpha_refs().contains(&id))).map(|r| r.id).collect())
    }
}

/// `alpha:ID` of the knowledge base's expression records, whatever their status (a
/// rejected alpha is still a formula another may build on). A store that cannot be read
/// resolves nothing, with a warning: the compiler then reports the id as unknown.
impl crate::expr::AlphaResolver for Kb {
    fn formula(&self, id: &str) -> Option<String> {
        match self.get(id) {
            Ok(r) => r.filter(|r| r.kind == Kind::Expression).map(|r| r.code),
            Err(e) => {
                tracing::warn!("alpha:{id}: cannot read the knowledge base {}: {e}", self.location());
                None
            }
        }
    }
    fn ids(&self) -> Vec<String> {
        self.records(&Filter::new().is("kind", "expression")).map(|v| v.into_iter().map(|r| r.id).collect()).unwrap_or_default()
    }
}

/// `YYYY-MM-DD` of a Unix time (UTC).
fn chrono_day(secs: i64) -> String {
    crate::data::Date(secs.div_euclid(86_400) as i32).to_string()
}

#[derive(Debug, Default, Serialize)]
pub struct Stats {
    pub total: usize,
    pub lessons: usize,
    pub by_status: std::collections::BTreeMap<String, usize>,
    pub by_family: std::collections::BTreeMap<String, usize>,
    pub by_generation: std::collections::BTreeMap<u32, usize>,
    /// Best valid value of each main metric, and which record has it.
    pub best_valid: std::collections::BTreeMap<String, (f64, String)>,
    /// Records (and accepted records) added per day.
    pub growth: std::collections::BTreeMap<String, (usize, usize)>,
}

fn write_meta(store: &dyn Store, meta: &Meta) -> Result<(), KbError> {
    let mut payload = Map::new();
    payload.insert("type".into(), json!("meta"));
    payload.insert("meta".into(), serde_json::to_value(meta).map_err(|e| KbError::Invalid(e.to_string()))?);
    store.upsert(vec![Point { id: record::point_id(META_ID), vectors: vec![], payload }])
}

/// The payload of a record: the full record plus the flat, indexed keys filters use.
pub fn alpha_payload(r: &AlphaRecord) -> Result<Map<String, Value>, KbError> {
    let mut p = Map::new();
    p.insert("type".into(), json!("alpha"));
    p.insert("id".into(), json!(r.id));
    p.insert("status".into(), json!(r.status.keyword()));
    p.insert("family".into(), json!(r.family));
    p.insert("kind".into(), serde_json::to_value(r.kind).map_err(|e| KbError::Invalid(e.to_string()))?);
    p.insert("run_id".into(), json!(r.run_id));
    p.insert("generation".into(), json!(r.generation));
    p.insert("created_at".into(), json!(r.created_at));
    for split in ["train", "valid"] {
        for m in ["rank_ic", "ic", "sharpe", "icir"] {
            if let Some(v) = r.metric(split, m) {
                p.insert(format!("{split}_{m}"), json!(v));
            }
        }
    }
    // NaN is not JSON: metrics that are NaN are stored as null and read back as NaN.
    p.insert("record".into(), record_json(r)?);
    Ok(p)
}

/// A record as JSON, with non-finite numbers as null.
pub fn record_json(r: &AlphaRecord) -> Result<Value, KbError> {
    serde_json::to_value(r).map_err(|e| KbError::Invalid(format!("record '{}': {e}", r.id)))
}

/// Opens the default embedder: all-MiniLM-L6-v2 from `dir` (default
/// [`embed::default_model_dir`]), cached.
pub fn default_embedder(dir: Option<&Path>) -> Result<Arc<dyn Embedder>, KbError> {
    let dir = dir.map(Path::to_path_buf).unwrap_or_else(embed::default_model_dir);
    Ok(Arc::new(embed::Cached::new(Box::new(embed::MiniLm::load(&dir)?))))
}

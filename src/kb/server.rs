//! The shared backend: a collection on a Qdrant server (`--kb qdrant://host:port/collection`),
//! for several miners writing one KB. Writes wait for the server's acknowledgement. Calls
//! that fail because the server is unreachable, overloaded or restarting are retried as
//! the config's `retry_minutes` allows ([`Patience`]); writes are upserts by id, so a
//! repeated one stores the same thing.
//! `qdrant://a:6334,b:6334/collection` names several nodes of one cluster: a call that
//! fails on one goes to the next, so a miner keeps going while the node it spoke to is
//! down (the collection's replicas on the other nodes hold its data).
//! Tested against a real server (Qdrant 1.18.3, started by the tests, or the one
//! `QDRANT_URL` names) with the same record and `kb` contract as the embedded store.

use super::store::{Cond, Dims, Doc, Filter, Point, Store, BEHAVIOUR, CODE, FLOAT_INDEXES, IDEA, INTEGER_INDEXES, KEYWORD_INDEXES};
use super::KbError;
use qdrant_client::qdrant::{
    point_id::PointIdOptions, vector_output, vectors_output::VectorsOptions, Condition, CountPointsBuilder,
    CreateCollectionBuilder, CreateFieldIndexCollectionBuilder, DeletePointsBuilder, Distance, FieldType,
    GetPointsBuilder, PointId, PointStruct, PointsIdsList, Range, ScrollPointsBuilder, SearchPointsBuilder,
    UpsertPointsBuilder, VectorParamsBuilder, VectorsConfigBuilder, VectorsOutput,
};
use crate::llm::retry::{Failure, GaveUp, Patience};
use qdrant_client::{Payload, Qdrant, QdrantError};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How a new collection is laid out over a cluster's nodes (`[qdrant]` in the config).
/// Unset, the server's defaults: one shard per node, one copy of each.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    /// Shards the collection is split into.
    pub shards: Option<u32>,
    /// Copies of each shard, on distinct nodes: with 2, any one node may go down and
    /// nothing acknowledged is lost.
    pub replication_factor: Option<u32>,
}

pub struct ServerStore {
    /// One client per node named in the location, tried in turn.
    clients: Vec<Qdrant>,
    /// The node the calls go to now (an index into `clients`, moved on by a failure).
    at: AtomicUsize,
    rt: tokio::runtime::Runtime,
    /// `http://host:port` of each node.
    urls: Vec<String>,
    collection: String,
    dims: Dims,
    patience: Patience,
}

impl ServerStore {
    /// Connects, creating the collection (with its vectors and payload indexes) if needed.
    pub fn open(urls: &[String], collection: &str, dims: Dims, patience: Patience, layout: &Layout) -> Result<ServerStore, KbError> {
        let failed = |e: &dyn std::fmt::Display| KbError::Engine { location: urls.join(","), msg: e.to_string() };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| failed(&e))?;
        let clients = urls
            .iter()
            .map(|u| Qdrant::from_url(u).timeout(std::time::Duration::from_secs(30)).build().map_err(|e| failed(&e)))
            .collect::<Result<Vec<_>, _>>()?;
        let s = ServerStore { clients, at: AtomicUsize::new(0), rt, urls: urls.to_vec(), collection: collection.into(), dims, patience };
        let exists = s.call(|c| c.collection_exists(collection))?;
        if !exists {
            let mut vc = VectorsConfigBuilder::default();
            vc.add_named_vector_params(IDEA, VectorParamsBuilder::new(dims.text as u64, Distance::Cosine));
            vc.add_named_vector_params(CODE, VectorParamsBuilder::new(dims.text as u64, Distance::Cosine));
            vc.add_named_vector_params(BEHAVIOUR, VectorParamsBuilder::new(dims.behaviour as u64, Distance::Cosine).on_disk(true));
            let mut create = CreateCollectionBuilder::new(collection).vectors_config(vc);
            if let Some(n) = layout.shards {
                create = create.shard_number(n);
            }
            if let Some(n) = layout.replication_factor {
                create = create.replication_factor(n);
            }
            if let Err(e) = s.call(|c| c.create_collection(create.clone())) {
                // Several miners started on a new collection at once: one of them made it
                // between this one's check and its create. (Making the indexes twice is
                // harmless: the server keeps one.)
                if !s.call(|c| c.collection_exists(collection))? {
                    return Err(e);
                }
            }
            let kinds = [(KEYWORD_INDEXES, FieldType::Keyword), (INTEGER_INDEXES, FieldType::Integer), (FLOAT_INDEXES, FieldType::Float)];
            for (keys, ty) in kinds {
                for k in keys {
                    s.call(|c| c.create_field_index(CreateFieldIndexCollectionBuilder::new(collection, *k, ty).wait(true)))?;
                }
            }
        }
        Ok(s)
    }

    fn err(&self, e: impl std::fmt::Display) -> KbError {
        KbError::Engine { location: self.location(), msg: e.to_string() }
    }

    /// Runs one request (built afresh for each attempt) on the current node, retrying
    /// transient failures, each retry on the next node named.
    fn call<'a, T, F: std::future::Future<Output = Result<T, QdrantError>>>(&'a self, request: impl Fn(&'a Qdrant) -> F) -> Result<T, KbError> {
        let attempt = || {
            let i = self.at.load(Ordering::Relaxed) % self.clients.len();
            self.rt.block_on(request(&self.clients[i])).map_err(|e| {
                let f = classify(e);
                if matches!(f, Failure::Transient { .. }) && self.clients.len() > 1 {
                    let next = (i + 1) % self.clients.len();
                    tracing::warn!("{}: {}; trying {}", self.urls[i], failure_text(&f), self.urls[next]);
                    self.at.store(next, Ordering::Relaxed);
                }
                f
            })
        };
        match self.patience.run(attempt) {
            Ok(v) => Ok(v),
            Err(GaveUp::Fatal(e)) => Err(self.err(e)),
            Err(GaveUp::Exhausted(x)) => Err(self.err(x)),
        }
    }
}

fn failure_text<E>(f: &Failure<E>) -> &str {
    match f {
        Failure::Transient { msg, .. } | Failure::Again(msg) => msg,
        Failure::Fatal(_) => "failed",
    }
}

/// Unreachable, overloaded, timed out or restarting: worth another attempt. Anything else
/// (a bad request, a missing collection, wrong dimensions) is not.
fn classify(e: QdrantError) -> Failure<QdrantError> {
    use tonic::Code;
    let after = match &e {
        QdrantError::ResourceExhaustedError { retry_after_seconds, .. } => Some(std::time::Duration::from_secs(*retry_after_seconds)),
        QdrantError::ResponseError { status } if matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded | Code::Aborted | Code::ResourceExhausted) => None,
        // A connection dropped mid-call (a node killed while it answered) comes as
        // `unknown` with tonic's transport error, or as `cancelled`.
        QdrantError::ResponseError { status } if status.code() == Code::Cancelled || (status.code() == Code::Unknown && status.message().contains("transport error")) => None,
        // qdrant-client reports a failed connection as `internal` with this message.
        QdrantError::ResponseError { status } if status.code() == Code::Internal && status.message().starts_with("Failed to connect") => None,
        QdrantError::Io(_) => None,
        _ => return Failure::Fatal(e),
    };
    Failure::Transient { msg: e.to_string(), after }
}

fn filter(f: &Filter) -> Option<qdrant_client::qdrant::Filter> {
    if f.must.is_empty() && f.must_not.is_empty() {
        return None;
    }
    let cond = |c: &Cond| match c {
        Cond::Is(k, v) => Condition::matches(k.as_str(), v.clone()),
        Cond::In(k, vs) => Condition::matches(k.as_str(), vs.clone()),
        Cond::Range(k, lo, hi) => Condition::range(k.as_str(), Range { gte: *lo, lte: *hi, ..Default::default() }),
    };
    let mut out = qdrant_client::qdrant::Filter::must(f.must.iter().map(cond));
    out.must_not = f.must_not.iter().map(cond).collect();
    Some(out)
}

fn num_id(id: Option<PointId>) -> u64 {
    match id.and_then(|p| p.point_id_options) {
        Some(PointIdOptions::Num(n)) => n,
        _ => 0,
    }
}

#[allow(deprecated)]
fn vectors(v: Option<VectorsOutput>) -> Vec<(String, Vec<f32>)> {
    match v.and_then(|v| v.vectors_options) {
        Some(VectorsOptions::Vectors(named)) => named
            .vectors
            .into_iter()
            .map(|(k, v)| {
                let data = match v.vector {
                    Some(vector_output::Vector::Dense(d)) => d.data,
                    _ => v.data,
                };
                (k, data)
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn payload(p: HashMap<String, qdrant_client::qdrant::Value>) -> Map<String, Value> {
    p.into_iter().map(|(k, v)| (k, v.into_json())).collect()
}

fn doc(id: Option<PointId>, p: HashMap<String, qdrant_client::qdrant::Value>, v: Option<VectorsOutput>) -> Doc {
    Doc { id: num_id(id), payload: payload(p), vectors: vectors(v) }
}

impl Store for ServerStore {
    fn upsert(&self, points: Vec<Point>) -> Result<(), KbError> {
        if points.is_empty() {
            return Ok(());
        }
        let pts: Vec<PointStruct> = points
            .into_iter()
            .map(|p| {
                let v: HashMap<String, Vec<f32>> = p.vectors.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
                PointStruct::new(p.id, v, Payload::from(p.payload))
            })
            .collect();
        self.call(|c| c.upsert_points(UpsertPointsBuilder::new(&self.collection, pts.clone()).wait(true)))?;
        Ok(())
    }

    fn get(&self, ids: &[u64], with_vectors: bool) -> Result<Vec<Doc>, KbError> {
        let ids: Vec<PointId> = ids.iter().map(|&i| i.into()).collect();
        let r = self.call(|c| {
            c
                .get_points(GetPointsBuilder::new(&self.collection, ids.clone()).with_payload(true).with_vectors(with_vectors))
        })?;
        Ok(r.result
            .into_iter()
            .map(|p| doc(p.id, p.payload, p.vectors))
            .collect())
    }

    fn delete(&self, ids: &[u64]) -> Result<(), KbError> {
        let ids: Vec<PointId> = ids.iter().map(|&i| i.into()).collect();
        self.call(|c| {
            c
                .delete_points(DeletePointsBuilder::new(&self.collection).points(PointsIdsList { ids: ids.clone() }).wait(true))
        })?;
        Ok(())
    }

    fn scroll(&self, f: &Filter, with_vectors: bool) -> Result<Vec<Doc>, KbError> {
        let mut out = Vec::new();
        let mut offset: Option<PointId> = None;
        loop {
            let mut b = ScrollPointsBuilder::new(&self.collection).limit(1000).with_payload(true).with_vectors(with_vectors);
            if let Some(flt) = filter(f) {
                b = b.filter(flt);
            }
            if let Some(o) = offset.take() {
                b = b.offset(o);
            }
            let r = self.call(|c| c.scroll(b.clone()))?;
            out.extend(
                r.result
                    .into_iter()
                    .map(|p| doc(p.id, p.payload, p.vectors)),
            );
            match r.next_page_offset {
                Some(n) => offset = Some(n),
                None => break,
            }
        }
        Ok(out)
    }

    fn search(&self, vector: &str, query: &[f32], f: &Filter, limit: usize, with_vectors: bool) -> Result<Vec<(f32, Doc)>, KbError> {
        let mut b = SearchPointsBuilder::new(&self.collection, query.to_vec(), limit.max(1) as u64)
            .vector_name(vector)
            .with_payload(true)
            .with_vectors(with_vectors);
        if let Some(flt) = filter(f) {
            b = b.filter(flt);
        }
        let r = self.call(|c| c.search_points(b.clone()))?;
        Ok(r.result
            .into_iter()
            .map(|p| (p.score, doc(p.id, p.payload, p.vectors)))
            .collect())
    }

    fn count(&self, f: &Filter) -> Result<usize, KbError> {
        let mut b = CountPointsBuilder::new(&self.collection).exact(true);
        if let Some(flt) = filter(f) {
            b = b.filter(flt);
        }
        let r = self.call(|c| c.count(b.clone()))?;
        Ok(r.result.map(|c| c.count as usize).unwrap_or(0))
    }

    fn dims(&self) -> Dims {
        self.dims
    }

    fn location(&self) -> String {
        let hosts: Vec<&str> = self.urls.iter().map(|u| u.trim_start_matches("http://")).collect();
        format!("qdrant://{}/{}", hosts.join(","), self.collection)
    }

    fn shared(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    //! Retries without a server (the backend itself is tested against a real server in
    //! tests/kb.rs).
    use super::*;
    use std::time::Duration;

    #[test]
    fn unreachable_and_overloaded_servers_are_retried_bad_requests_are_not() {
        let transient = |e| matches!(classify(e), Failure::Transient { .. });
        assert!(transient(QdrantError::ResponseError { status: tonic::Status::unavailable("connection refused") }));
        assert!(transient(QdrantError::ResponseError { status: tonic::Status::deadline_exceeded("slow") }));
        assert!(!transient(QdrantError::ResponseError { status: tonic::Status::invalid_argument("wrong vector size") }));
        assert!(!transient(QdrantError::ResponseError { status: tonic::Status::not_found("no collection") }));
        assert!(transient(QdrantError::ResponseError { status: tonic::Status::internal("Failed to connect to http://h:6334/: refused") }));
        assert!(!transient(QdrantError::ResponseError { status: tonic::Status::internal("service panicked") }));
        assert!(transient(QdrantError::ResponseError { status: tonic::Status::unknown("transport error") }));
        assert!(!transient(QdrantError::ResponseError { status: tonic::Status::unknown("bad payload") }));
        let busy = QdrantError::ResourceExhaustedError { status: tonic::Status::resource_exhausted("busy"), retry_after_seconds: 3 };
        assert!(matches!(classify(busy), Failure::Transient { after: Some(d), .. } if d == Duration::from_secs(3)));
    }

    #[test]
    fn a_server_that_is_not_there_is_retried_briefly_and_named() {
        // A port that was free a moment ago: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
        let mut p = Patience::new(Duration::from_secs(600));
        (p.first_contact, p.first_wait, p.max_wait) = (Duration::from_millis(300), Duration::from_millis(10), Duration::from_millis(40));
        let t0 = std::time::Instant::now();
        let url = format!("http://127.0.0.1:{port}");
        let msg = ServerStore::open(&[url], "c", Dims { text: 4, behaviour: 4 }, p, &Layout::default()).err().expect("nothing listens").to_string();
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
        assert!(msg.contains(&format!("qdrant://127.0.0.1:{port}/c")), "{msg}");
        assert!(msg.contains("gave up after") && msg.contains("has not answered once"), "{msg}");
    }
}

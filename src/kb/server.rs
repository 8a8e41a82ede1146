//! The shared backend: a collection on a Qdrant server (`--kb qdrant://host:port/collection`),
//! for several miners writing one KB. Writes wait for the server's acknowledgement. Calls
//! that fail because the server is unreachable, overloaded or restarting are retried as
//! the config's `retry_minutes` allows ([`Patience`]); writes are upserts by id, so a
//! repeated one stores the same thing.
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

pub struct ServerStore {
    client: Qdrant,
    rt: tokio::runtime::Runtime,
    url: String,
    collection: String,
    dims: Dims,
    patience: Patience,
}

impl ServerStore {
    /// Connects, creating the collection (with its vectors and payload indexes) if needed.
    pub fn open(url: &str, collection: &str, dims: Dims, patience: Patience) -> Result<ServerStore, KbError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| KbError::Engine { location: url.into(), msg: e.to_string() })?;
        let client = Qdrant::from_url(url)
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| KbError::Engine { location: url.into(), msg: e.to_string() })?;
        let s = ServerStore { client, rt, url: url.into(), collection: collection.into(), dims, patience };
        let exists = s.call(|| s.client.collection_exists(collection))?;
        if !exists {
            let mut vc = VectorsConfigBuilder::default();
            vc.add_named_vector_params(IDEA, VectorParamsBuilder::new(dims.text as u64, Distance::Cosine));
            vc.add_named_vector_params(CODE, VectorParamsBuilder::new(dims.text as u64, Distance::Cosine));
            vc.add_named_vector_params(BEHAVIOUR, VectorParamsBuilder::new(dims.behaviour as u64, Distance::Cosine).on_disk(true));
            if let Err(e) = s.call(|| s.client.create_collection(CreateCollectionBuilder::new(collection).vectors_config(vc.clone()))) {
                // Several miners started on a new collection at once: one of them made it
                // between this one's check and its create. (Making the indexes twice is
                // harmless: the server keeps one.)
                if !s.call(|| s.client.collection_exists(collection))? {
                    return Err(e);
                }
            }
            let kinds = [(KEYWORD_INDEXES, FieldType::Keyword), (INTEGER_INDEXES, FieldType::Integer), (FLOAT_INDEXES, FieldType::Float)];
            for (keys, ty) in kinds {
                for k in keys {
                    s.call(|| s.client.create_field_index(CreateFieldIndexCollectionBuilder::new(collection, *k, ty).wait(true)))?;
                }
            }
        }
        Ok(s)
    }

    fn err(&self, e: impl std::fmt::Display) -> KbError {
        KbError::Engine { location: self.location(), msg: e.to_string() }
    }

    /// Runs one request (built afresh for each attempt), retrying transient failures.
    fn call<T, F: std::future::Future<Output = Result<T, QdrantError>>>(&self, request: impl Fn() -> F) -> Result<T, KbError> {
        match self.patience.run(|| self.rt.block_on(request()).map_err(classify)) {
            Ok(v) => Ok(v),
            Err(GaveUp::Fatal(e)) => Err(self.err(e)),
            Err(GaveUp::Exhausted(x)) => Err(self.err(x)),
        }
    }
}

/// Unreachable, overloaded, timed out or restarting: worth another attempt. Anything else
/// (a bad request, a missing collection, wrong dimensions) is not.
fn classify(e: QdrantError) -> Failure<QdrantError> {
    use tonic::Code;
    let after = match &e {
        QdrantError::ResourceExhaustedError { retry_after_seconds, .. } => Some(std::time::Duration::from_secs(*retry_after_seconds)),
        QdrantError::ResponseError { status } if matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded | Code::Aborted | Code::ResourceExhausted) => None,
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
        self.call(|| self.client.upsert_points(UpsertPointsBuilder::new(&self.collection, pts.clone()).wait(true)))?;
        Ok(())
    }

    fn get(&self, ids: &[u64], with_vectors: bool) -> Result<Vec<Doc>, KbError> {
        let ids: Vec<PointId> = ids.iter().map(|&i| i.into()).collect();
        let r = self.call(|| {
            self.client
                .get_points(GetPointsBuilder::new(&self.collection, ids.clone()).with_payload(true).with_vectors(with_vectors))
        })?;
        Ok(r.result
            .into_iter()
            .map(|p| doc(p.id, p.payload, p.vectors))
            .collect())
    }

    fn delete(&self, ids: &[u64]) -> Result<(), KbError> {
        let ids: Vec<PointId> = ids.iter().map(|&i| i.into()).collect();
        self.call(|| {
            self.client
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
            let r = self.call(|| self.client.scroll(b.clone()))?;
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
        let r = self.call(|| self.client.search_points(b.clone()))?;
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
        let r = self.call(|| self.client.count(b.clone()))?;
        Ok(r.result.map(|c| c.count as usize).unwrap_or(0))
    }

    fn dims(&self) -> Dims {
        self.dims
    }

    fn location(&self) -> String {
        format!("{}/{}", self.url.replace("http://", "qdrant://"), self.collection)
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
        let msg = ServerStore::open(&url, "c", Dims { text: 4, behaviour: 4 }, p).err().expect("nothing listens").to_string();
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
        assert!(msg.contains(&format!("qdrant://127.0.0.1:{port}/c")), "{msg}");
        assert!(msg.contains("gave up after") && msg.contains("has not answered once"), "{msg}");
    }
}

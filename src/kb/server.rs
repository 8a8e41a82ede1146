//! The shared backend: a collection on a Qdrant server (`--kb qdrant://host:port/collection`),
//! for several miners writing one KB. Writes wait for the server's acknowledgement.
//! Integration tests run when `QDRANT_URL` is set (e.g. `qdrant://localhost:6334/test`).

use super::store::{Cond, Dims, Doc, Filter, Point, Store, BEHAVIOUR, CODE, FLOAT_INDEXES, IDEA, INTEGER_INDEXES, KEYWORD_INDEXES};
use super::KbError;
use qdrant_client::qdrant::{
    point_id::PointIdOptions, vector_output, vectors_output::VectorsOptions, Condition, CountPointsBuilder,
    CreateCollectionBuilder, CreateFieldIndexCollectionBuilder, DeletePointsBuilder, Distance, FieldType,
    GetPointsBuilder, PointId, PointStruct, PointsIdsList, Range, ScrollPointsBuilder, SearchPointsBuilder,
    UpsertPointsBuilder, VectorParamsBuilder, VectorsConfigBuilder, VectorsOutput,
};
use qdrant_client::{Payload, Qdrant};
use serde_json::{Map, Value};
use std::collections::HashMap;

pub struct ServerStore {
    client: Qdrant,
    rt: tokio::runtime::Runtime,
    url: String,
    collection: String,
    dims: Dims,
}

impl ServerStore {
    /// Connects, creating the collection (with its vectors and payload indexes) if needed.
    pub fn open(url: &str, collection: &str, dims: Dims) -> Result<ServerStore, KbError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| KbError::Engine { location: url.into(), msg: e.to_string() })?;
        let client = Qdrant::from_url(url)
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| KbError::Engine { location: url.into(), msg: e.to_string() })?;
        let s = ServerStore { client, rt, url: url.into(), collection: collection.into(), dims };
        let exists = s.rt.block_on(s.client.collection_exists(collection)).map_err(|e| s.err(e))?;
        if !exists {
            let mut vc = VectorsConfigBuilder::default();
            vc.add_named_vector_params(IDEA, VectorParamsBuilder::new(dims.text as u64, Distance::Cosine));
            vc.add_named_vector_params(CODE, VectorParamsBuilder::new(dims.text as u64, Distance::Cosine));
            vc.add_named_vector_params(BEHAVIOUR, VectorParamsBuilder::new(dims.behaviour as u64, Distance::Cosine).on_disk(true));
            s.rt.block_on(s.client.create_collection(CreateCollectionBuilder::new(collection).vectors_config(vc)))
                .map_err(|e| s.err(e))?;
            let kinds = [(KEYWORD_INDEXES, FieldType::Keyword), (INTEGER_INDEXES, FieldType::Integer), (FLOAT_INDEXES, FieldType::Float)];
            for (keys, ty) in kinds {
                for k in keys {
                    s.rt.block_on(
                        s.client.create_field_index(CreateFieldIndexCollectionBuilder::new(collection, *k, ty).wait(true)),
                    )
                    .map_err(|e| s.err(e))?;
                }
            }
        }
        Ok(s)
    }

    fn err(&self, e: impl std::fmt::Display) -> KbError {
        KbError::Engine { location: self.location(), msg: e.to_string() }
    }
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
        self.rt
            .block_on(self.client.upsert_points(UpsertPointsBuilder::new(&self.collection, pts).wait(true)))
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    fn get(&self, ids: &[u64], with_vectors: bool) -> Result<Vec<Doc>, KbError> {
        let ids: Vec<PointId> = ids.iter().map(|&i| i.into()).collect();
        let r = self
            .rt
            .block_on(
                self.client
                    .get_points(GetPointsBuilder::new(&self.collection, ids).with_payload(true).with_vectors(with_vectors)),
            )
            .map_err(|e| self.err(e))?;
        Ok(r.result
            .into_iter()
            .map(|p| doc(p.id, p.payload, p.vectors))
            .collect())
    }

    fn delete(&self, ids: &[u64]) -> Result<(), KbError> {
        let ids: Vec<PointId> = ids.iter().map(|&i| i.into()).collect();
        self.rt
            .block_on(
                self.client
                    .delete_points(DeletePointsBuilder::new(&self.collection).points(PointsIdsList { ids }).wait(true)),
            )
            .map_err(|e| self.err(e))?;
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
            let r = self.rt.block_on(self.client.scroll(b)).map_err(|e| self.err(e))?;
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
        let r = self.rt.block_on(self.client.search_points(b)).map_err(|e| self.err(e))?;
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
        let r = self.rt.block_on(self.client.count(b)).map_err(|e| self.err(e))?;
        Ok(r.result.map(|c| c.count as usize).unwrap_or(0))
    }

    fn dims(&self) -> Dims {
        self.dims
    }

    fn location(&self) -> String {
        format!("{}/{}", self.url.replace("http://", "qdrant://"), self.collection)
    }
}

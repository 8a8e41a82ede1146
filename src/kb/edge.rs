//! The default backend: the Qdrant engine in-process (`qdrant-edge`), persisted in a
//! directory (`alpha_kb/store/` unless `--kb DIR`). Nothing to start.
//!
//! Durability: every update is written to the shard's write-ahead log (a file-backed memory
//! map, so in the kernel's page cache) before it is applied and before [`EdgeStore::upsert`]
//! returns; an acknowledged write therefore survives a `kill -9` of this process, and the WAL
//! is replayed on the next open. The segments themselves are flushed (fsync, which also
//! acknowledges the WAL) at most every [`FLUSH_INTERVAL`], on `optimize` and on close, as the
//! Qdrant server does with its `flush_interval_sec`. Flushing on every call made inserts
//! slow down with the store's size (a full segment flush each time): at 40k records one
//! batch took seconds. Concurrency: an exclusive `flock` on
//! `<dir>/alphaloop.lock` turns a second process into a clear "in use" error instead of two
//! writers corrupting one shard.

use super::store::{Cond, Dims, Doc, Filter, Point, Store, BEHAVIOUR, CODE, FLOAT_INDEXES, IDEA, INTEGER_INDEXES, KEYWORD_INDEXES};
use super::KbError;
use qdrant_edge::{
    CreateIndex, Distance, EdgeConfigBuilder, Memory, EdgeShard, EdgeVectorParamsBuilder, FieldIndexOperations, NamedQuery,
    PayloadFieldSchema, PayloadSchemaType, PointId, PointInsertOperations, PointOperations, PointStruct, QueryEnum,
    RetrieveRequest, ScrollRequest, SearchRequest, UpdateOperation, VectorInternal, VectorStructInternal, Vectors,
    WithPayloadInterface, WithVector,
};
use serde_json::{json, Map, Value};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

const LOCK_FILE: &str = "alphaloop.lock";

/// How stale the segments may get behind the WAL (the Qdrant server's default is 5 s).
pub const FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

pub struct EdgeStore {
    // Field order matters: the shard is dropped (and flushed) before the lock is released.
    shard: EdgeShard,
    _lock: File,
    dir: PathBuf,
    dims: Dims,
    last_flush: std::sync::Mutex<std::time::Instant>,
}

fn engine(dir: &Path, e: impl std::fmt::Display) -> KbError {
    KbError::Engine { location: dir.display().to_string(), msg: e.to_string() }
}

/// Takes the store's exclusive lock, or says who holds it.
fn lock(dir: &Path) -> Result<File, KbError> {
    std::fs::create_dir_all(dir).map_err(|e| KbError::Io { path: dir.to_path_buf(), err: e })?;
    let path = dir.join(LOCK_FILE);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| KbError::Io { path: path.clone(), err: e })?;
    // A lock just released can look held for a moment: a process that another thread
    // of this one is spawning holds copies of every descriptor between its fork and its
    // exec (close-on-exec closes them only then), and with them the lock. So a refusal is
    // retried for up to a second before another holder is reported. (Seen once in CI: a
    // test reopening a store while a sibling test spawned the CLI.)
    let try_lock = || {
        // SAFETY: flock on a file descriptor we own; no memory is passed.
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    let mut locked = try_lock();
    while !locked && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        locked = try_lock();
    }
    if !locked {
        let holder = std::fs::read_to_string(&path).unwrap_or_default();
        return Err(KbError::InUse { path: dir.to_path_buf(), holder: holder.trim().to_string() });
    }
    use std::io::{Seek, Write};
    let _ = f.set_len(0);
    let _ = f.seek(std::io::SeekFrom::Start(0));
    let _ = write!(f, "pid {}", std::process::id());
    Ok(f)
}

impl EdgeStore {
    /// Opens the store in `dir`, creating it (with vectors of `dims`) if it is new.
    pub fn open(dir: &Path, dims: Dims) -> Result<EdgeStore, KbError> {
        let lock = lock(dir)?;
        let shard_dir = dir.join("shard");
        let fresh = !shard_dir.join("edge_config.json").exists();
        let shard = if fresh {
            let text = |n: usize| EdgeVectorParamsBuilder::new(n, Distance::Cosine).build();
            let config = EdgeConfigBuilder::new()
                .payload_memory(Memory::Pinned)
                .vector(IDEA, text(dims.text))
                .vector(CODE, text(dims.text))
                .vector(BEHAVIOUR, EdgeVectorParamsBuilder::new(dims.behaviour, Distance::Cosine).memory(Memory::Cached).build())
                .build();
            let shard = EdgeShard::new(&shard_dir, config).map_err(|e| engine(dir, e))?;
            create_indexes(&shard).map_err(|e| engine(dir, e))?;
            shard
        } else {
            EdgeShard::load(&shard_dir, None).map_err(|e| engine(dir, e))?
        };
        let found = stored_dims(&shard);
        if let Some(found) = found {
            if found != dims {
                return Err(KbError::Dims { location: dir.display().to_string(), found, wanted: dims });
            }
        }
        let last_flush = std::sync::Mutex::new(std::time::Instant::now());
        Ok(EdgeStore { shard, _lock: lock, dir: dir.to_path_buf(), dims, last_flush })
    }

    /// Applies one update (WAL first, inside the engine) and flushes the segments if the
    /// last flush is older than [`FLUSH_INTERVAL`].
    fn apply(&self, op: UpdateOperation) -> Result<(), KbError> {
        self.shard.update(op).map_err(|e| engine(&self.dir, e))?;
        let mut last = self.last_flush.lock().unwrap_or_else(|p| p.into_inner());
        if last.elapsed() >= FLUSH_INTERVAL {
            self.shard.flush().map_err(|e| engine(&self.dir, e))?;
            *last = std::time::Instant::now();
        }
        Ok(())
    }
}

fn stored_dims(shard: &EdgeShard) -> Option<Dims> {
    let cfg = shard.config();
    let text = cfg.vectors.get(IDEA)?.size;
    let behaviour = cfg.vectors.get(BEHAVIOUR)?.size;
    Some(Dims { text, behaviour })
}

fn create_indexes(shard: &EdgeShard) -> qdrant_edge::OperationResult<()> {
    let kinds = [
        (KEYWORD_INDEXES, PayloadSchemaType::Keyword),
        (INTEGER_INDEXES, PayloadSchemaType::Integer),
        (FLOAT_INDEXES, PayloadSchemaType::Float),
    ];
    for (keys, ty) in kinds {
        for key in keys {
            let field_name = key.parse().map_err(|_| qdrant_edge::OperationError::service_error(format!("bad key {key}")))?;
            shard.update(UpdateOperation::FieldIndexOperation(FieldIndexOperations::CreateIndex(CreateIndex {
                field_name,
                field_schema: Some(PayloadFieldSchema::FieldType(ty)),
            })))?;
        }
    }
    Ok(())
}

/// The filter as Qdrant's JSON filter (the REST shape, which both engines accept).
pub(crate) fn filter_json(f: &Filter) -> Value {
    let cond = |c: &Cond| match c {
        Cond::Is(k, v) => json!({"key": k, "match": {"value": v}}),
        Cond::In(k, vs) => json!({"key": k, "match": {"any": vs}}),
        Cond::Range(k, lo, hi) => {
            let mut r = Map::new();
            if let Some(lo) = lo {
                r.insert("gte".into(), json!(lo));
            }
            if let Some(hi) = hi {
                r.insert("lte".into(), json!(hi));
            }
            json!({"key": k, "range": r})
        }
    };
    json!({
        "must": f.must.iter().map(cond).collect::<Vec<_>>(),
        "must_not": f.must_not.iter().map(cond).collect::<Vec<_>>(),
    })
}

fn to_edge_filter(dir: &Path, f: &Filter) -> Result<Option<qdrant_edge::Filter>, KbError> {
    if f.must.is_empty() && f.must_not.is_empty() {
        return Ok(None);
    }
    serde_json::from_value(filter_json(f)).map(Some).map_err(|e| engine(dir, format!("filter: {e}")))
}

fn num_id(id: &PointId) -> u64 {
    match id {
        PointId::NumId(n) => *n,
        // Only numeric ids are written by alphaloop.
        PointId::Uuid(u) => u.as_u64_pair().0,
    }
}

fn vectors_of(v: Option<VectorStructInternal>) -> Vec<(String, Vec<f32>)> {
    match v {
        Some(VectorStructInternal::Named(m)) => m
            .into_iter()
            .filter_map(|(k, v)| match v {
                VectorInternal::Dense(d) => Some((k, d)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn payload_of(p: Option<qdrant_edge::Payload>) -> Map<String, Value> {
    p.map(|p| p.0).unwrap_or_default()
}

fn doc(id: &PointId, payload: Option<qdrant_edge::Payload>, vector: Option<VectorStructInternal>) -> Doc {
    Doc { id: num_id(id), payload: payload_of(payload), vectors: vectors_of(vector) }
}

fn with_vector(b: bool) -> WithVector {
    WithVector::Bool(b)
}

impl Store for EdgeStore {
    fn upsert(&self, points: Vec<Point>) -> Result<(), KbError> {
        if points.is_empty() {
            return Ok(());
        }
        let list = points
            .into_iter()
            .map(|p| PointStruct::new(p.id, Vectors::new_named(p.vectors), Value::Object(p.payload)).into())
            .collect();
        self.apply(UpdateOperation::PointOperation(PointOperations::UpsertPoints(PointInsertOperations::PointsList(list))))
    }

    fn get(&self, ids: &[u64], with_vectors: bool) -> Result<Vec<Doc>, KbError> {
        let mut req = RetrieveRequest::new(ids.iter().map(|&i| PointId::NumId(i)).collect());
        req.with_payload = Some(WithPayloadInterface::Bool(true));
        req.with_vector = Some(with_vector(with_vectors));
        let recs = self.shard.retrieve(req).map_err(|e| engine(&self.dir, e))?;
        Ok(recs
            .into_iter()
            .map(|r| doc(&r.id, r.payload, r.vector))
            .collect())
    }

    fn delete(&self, ids: &[u64]) -> Result<(), KbError> {
        self.apply(UpdateOperation::PointOperation(PointOperations::DeletePoints {
            ids: ids.iter().map(|&i| PointId::NumId(i)).collect(),
        }))
    }

    fn scroll(&self, filter: &Filter, with_vectors: bool) -> Result<Vec<Doc>, KbError> {
        let filter = to_edge_filter(&self.dir, filter)?;
        let mut out = Vec::new();
        let mut offset = None;
        loop {
            let mut req = ScrollRequest::new();
            req.offset = offset;
            req.limit = Some(1000);
            req.filter = filter.clone();
            req.with_payload = Some(WithPayloadInterface::Bool(true));
            req.with_vector = with_vector(with_vectors);
            let (recs, next) = self.shard.scroll(req).map_err(|e| engine(&self.dir, e))?;
            out.extend(
                recs.into_iter()
                    .map(|r| doc(&r.id, r.payload, r.vector)),
            );
            match next {
                Some(n) => offset = Some(n),
                None => break,
            }
        }
        Ok(out)
    }

    fn search(
        &self,
        vector: &str,
        query: &[f32],
        filter: &Filter,
        limit: usize,
        with_vectors: bool,
    ) -> Result<Vec<(f32, Doc)>, KbError> {
        let q = QueryEnum::Nearest(NamedQuery { query: VectorInternal::Dense(query.to_vec()), using: Some(vector.to_string()) });
        let mut req = SearchRequest::new(q, limit.max(1));
        req.filter = to_edge_filter(&self.dir, filter)?;
        req.with_payload = Some(WithPayloadInterface::Bool(true));
        req.with_vector = Some(with_vector(with_vectors));
        let hits = self.shard.search(req).map_err(|e| engine(&self.dir, e))?;
        Ok(hits
            .into_iter()
            .map(|h| (h.score, doc(&h.id, h.payload, h.vector)))
            .collect())
    }

    fn count(&self, filter: &Filter) -> Result<usize, KbError> {
        let mut req = qdrant_edge::CountRequest::new();
        req.filter = to_edge_filter(&self.dir, filter)?;
        req.exact = true;
        self.shard.count(req).map_err(|e| engine(&self.dir, e))
    }

    fn optimize(&self) -> Result<(), KbError> {
        self.shard.optimize().map_err(|e| engine(&self.dir, e))?;
        self.shard.flush().map_err(|e| engine(&self.dir, e))
    }

    fn dims(&self) -> Dims {
        self.dims
    }

    fn location(&self) -> String {
        self.dir.display().to_string()
    }
}

//! Moving a knowledge base between backends (an embedded store and a server collection,
//! either way): every point, records, lessons and the store's own settings, with its
//! vectors and payload unchanged, so ids, metrics, lineage and the behaviour sample arrive
//! as they were and nothing is re-embedded or re-evaluated.

use super::store::{Doc, Filter, Point, BEHAVIOUR, CODE, IDEA};
use super::{Kb, KbError};

/// What a copy moved: the points and a checksum of them (ids, payloads, vectors' bits),
/// the same read back from the target.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Copied {
    pub points: usize,
    pub records: usize,
    pub checksum: String,
}

/// Points written per request: a server's request stays well under its size limit.
const BATCH: usize = 256;

impl Kb {
    /// Copies every point of this KB into `to` (replacing points with the same ids there),
    /// then reads them back and checks that the target holds them unchanged.
    pub fn copy_to(&self, to: &Kb) -> Result<Copied, KbError> {
        let (from_dims, to_dims) = (self.store.dims(), to.store.dims());
        if from_dims != to_dims {
            return Err(KbError::Invalid(format!(
                "{} has vectors of {} and {} dimensions, {} of {} and {}: made with another embedder",
                self.location(),
                from_dims.text,
                from_dims.behaviour,
                to.location(),
                to_dims.text,
                to_dims.behaviour
            )));
        }
        let docs = self.store.scroll(&Filter::new(), true)?;
        for chunk in docs.chunks(BATCH) {
            to.store.upsert(chunk.iter().map(point).collect::<Result<_, _>>()?)?;
        }
        let ids: Vec<u64> = docs.iter().map(|d| d.id).collect();
        let mut back = Vec::with_capacity(docs.len());
        for chunk in ids.chunks(BATCH) {
            back.extend(to.store.get(chunk, true)?);
        }
        let (sent, got) = (checksum(&docs), checksum(&back));
        if back.len() != docs.len() || sent != got {
            return Err(KbError::Invalid(format!(
                "copying {} to {}: {} points sent (checksum {sent}), {} read back (checksum {got}){}",
                self.location(),
                to.location(),
                docs.len(),
                back.len(),
                first_difference(&docs, &back).map(|d| format!("; {d}")).unwrap_or_default()
            )));
        }
        let records = docs.iter().filter(|d| d.payload.get("type").and_then(|v| v.as_str()) == Some("alpha")).count();
        Ok(Copied { points: docs.len(), records, checksum: sent })
    }
}

/// A stored point as one to write.
fn point(d: &Doc) -> Result<Point, KbError> {
    let vectors = d
        .vectors
        .iter()
        .map(|(name, v)| {
            let name = [IDEA, CODE, BEHAVIOUR].into_iter().find(|n| n == name).ok_or_else(|| KbError::Invalid(format!("point {}: unknown vector '{name}'", d.id)))?;
            Ok((name, v.clone()))
        })
        .collect::<Result<_, KbError>>()?;
    Ok(Point { id: d.id, vectors, payload: d.payload.clone() })
}

/// Where `back` first differs from `sent`: a missing point, its payload, or a vector.
fn first_difference(sent: &[Doc], back: &[Doc]) -> Option<String> {
    for d in sent {
        let Some(b) = back.iter().find(|b| b.id == d.id) else { return Some(format!("point {} is missing", d.id)) };
        if b.payload != d.payload {
            let key = d.payload.iter().find(|(k, v)| b.payload.get(*k) != Some(v)).map_or("?", |(k, _)| k.as_str());
            return Some(format!("point {}: payload key '{key}' differs ({} against {})", d.id, d.payload.get(key).map_or("none".into(), |v| v.to_string()), b.payload.get(key).map_or("none".into(), |v| v.to_string())));
        }
        let names = |x: &Doc| x.vectors.iter().map(|(n, _)| n.clone()).collect::<std::collections::BTreeSet<_>>();
        if names(d) != names(b) {
            return Some(format!("point {}: vectors {:?} sent, {:?} read back", d.id, names(d), names(b)));
        }
        for (name, v) in &d.vectors {
            match b.vectors.iter().find(|(n, _)| n == name) {
                None => return Some(format!("point {}: vector '{name}' is missing", d.id)),
                Some((_, w)) if w.iter().map(|x| x.to_bits()).ne(v.iter().map(|x| x.to_bits())) => {
                    let i = v.iter().zip(w).position(|(a, b)| a.to_bits() != b.to_bits()).unwrap_or(0);
                    return Some(format!("point {}: vector '{name}' differs at {i} ({:?} against {:?}; {} against {} values)", d.id, v.get(i), w.get(i), v.len(), w.len()));
                }
                _ => {}
            }
        }
    }
    None
}

/// A checksum of points in id order: each id, its payload as JSON (keys sorted) and its
/// vectors by name, every value's bits.
pub fn checksum(docs: &[Doc]) -> String {
    let mut sorted: Vec<&Doc> = docs.iter().collect();
    sorted.sort_by_key(|d| d.id);
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut mix = |bytes: &[u8]| {
        for b in bytes {
            h = (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    };
    for d in sorted {
        mix(&d.id.to_le_bytes());
        let mut text = String::new();
        canonical(&serde_json::Value::Object(d.payload.clone()), &mut text);
        mix(text.as_bytes());
        let mut vs: Vec<&(String, Vec<f32>)> = d.vectors.iter().collect();
        vs.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, v) in vs {
            mix(name.as_bytes());
            v.iter().for_each(|x| mix(&x.to_bits().to_le_bytes()));
        }
    }
    format!("{h:016x}")
}

/// JSON text with every object's keys sorted: a payload read back from another backend
/// may list its keys in another order (serde_json keeps insertion order when a dependency
/// asks it to), which says nothing about its content.
fn canonical(v: &serde_json::Value, out: &mut String) {
    match v {
        serde_json::Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&m[k], out);
            }
            out.push('}');
        }
        serde_json::Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

//! Reply cache keyed by (model, request): a JSONL file of `{key, model, request, reply}`.
//!
//! * `Record`: call the model on a miss and append the reply (an interrupted run keeps
//!   every reply it got).
//! * `Replay`: never call the model; a miss is an error. A rerun with `--replay` therefore
//!   reproduces a run exactly, and the agent's tests run on recorded real replies.

use super::{ChatRequest, LanguageModel, LlmError, Reply};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Record,
    Replay,
}

#[derive(Serialize, Deserialize)]
struct Entry {
    key: String,
    model: String,
    request: ChatRequest,
    reply: Reply,
}

pub struct CachedModel<M> {
    inner: Option<M>,
    name: String,
    path: PathBuf,
    mode: Mode,
    map: Mutex<HashMap<String, Reply>>,
}

/// Content key of a request for a model: two independent 64-bit FNV-1a hashes of its JSON.
pub fn key(model: &str, req: &ChatRequest) -> String {
    let text = format!("{model}\u{0}{}", serde_json::to_string(req).unwrap_or_default());
    let fnv = |seed: u64| {
        let mut h = seed;
        for b in text.as_bytes() {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h
    };
    format!("{:016x}{:016x}", fnv(0xcbf2_9ce4_8422_2325), fnv(0x8422_2325_cbf2_9ce4))
}

impl<M: LanguageModel> CachedModel<M> {
    /// `inner` may be `None` only in replay mode; `name` is the model name recorded runs used.
    pub fn open(inner: Option<M>, name: &str, path: &Path, mode: Mode) -> Result<CachedModel<M>, LlmError> {
        let err = |msg: String| LlmError::Cache { path: path.display().to_string(), msg };
        if mode == Mode::Record && inner.is_none() {
            return Err(err("recording needs a model".into()));
        }
        let mut map = HashMap::new();
        if path.exists() {
            let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                match serde_json::from_str::<Entry>(line) {
                    Ok(e) => {
                        map.insert(e.key, e.reply);
                    }
                    // A line cut short by a crash is dropped; anything else is corruption.
                    Err(_) if i + 1 == text.lines().count() => tracing::warn!("{}: ignoring a truncated last line", path.display()),
                    Err(e) => return Err(err(format!("line {}: {e}", i + 1))),
                }
            }
        } else if mode == Mode::Replay {
            return Err(err("not found: nothing to replay".into()));
        }
        Ok(CachedModel { inner, name: name.to_string(), path: path.to_path_buf(), mode, map: Mutex::new(map) })
    }

    pub fn len(&self) -> usize {
        self.map.lock().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<M: LanguageModel> LanguageModel for CachedModel<M> {
    fn chat(&self, req: &ChatRequest) -> Result<Reply, LlmError> {
        let k = key(&self.name, req);
        if let Some(r) = self.map.lock().ok().and_then(|m| m.get(&k).cloned()) {
            return Ok(Reply { seconds: 0.0, ..r });
        }
        let inner = match (&self.inner, self.mode) {
            (Some(m), Mode::Record) => m,
            _ => {
                let last = req.messages.last().map(|m| m.content.as_str()).unwrap_or("");
                let tail: String = last.chars().rev().take(300).collect::<Vec<_>>().into_iter().rev().collect();
                return Err(LlmError::NotRecorded { path: self.path.display().to_string(), prompt_end: tail });
            }
        };
        let reply = inner.chat(req)?;
        let line = serde_json::to_string(&Entry { key: k.clone(), model: self.name.clone(), request: req.clone(), reply: reply.clone() })
            .map_err(|e| LlmError::Invalid(e.to_string()))?;
        let mut map = self.map.lock().map_err(|_| LlmError::Invalid("reply cache poisoned".into()))?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .and_then(|mut f| writeln!(f, "{line}").map(|_| f))
            .map_err(|e| LlmError::Cache { path: self.path.display().to_string(), msg: e.to_string() })?;
        let _ = f.flush();
        map.insert(k, reply.clone());
        Ok(reply)
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}

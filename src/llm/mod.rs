//! Language models behind one trait: the embedded llama.cpp model (default; needs no server
//! and no key) and any OpenAI-compatible chat endpoint, plus a reply cache that makes a
//! run replayable and tests of the agent logic run on recorded real replies.

pub mod cache;
pub mod grammar;
/// Context of one request (prompt and reply) for the CLI's local model: the agent's prompts
/// are under 2,000 tokens and its replies at most 400.
pub const LOCAL_CTX: u32 = 6144;

#[cfg(feature = "local-llm")]
pub mod local;
#[cfg(not(feature = "local-llm"))]
pub mod local {
    //! A build without the embedded model (the `local-llm` feature): [`LocalModel`] cannot
    //! be made, and asking for it says which build has it.
    use super::{ChatRequest, LanguageModel, LlmError, Reply};

    /// Uninhabited: no value of it exists in this build.
    pub enum LocalModel {}

    impl LocalModel {
        pub fn load(path: &std::path::Path, _n_ctx: u32, _threads: i32) -> Result<LocalModel, LlmError> {
            Err(LlmError::Model {
                path: path.display().to_string(),
                msg: "this build has no embedded model (built without the `local-llm` feature): use an OpenAI-compatible one, --llm openai:MODEL".into(),
            })
        }
    }

    impl LanguageModel for LocalModel {
        fn chat(&self, _: &ChatRequest) -> Result<Reply, LlmError> {
            match *self {}
        }
        fn name(&self) -> String {
            match *self {}
        }
    }
}
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

/// Qwen2.5-Coder 0.5B Instruct (assembled by `scripts/setup`): the tests' model, and
/// mining's when the larger one is absent (`--model small`).
pub fn small_gguf() -> std::path::PathBuf {
    crate::cache_dir().join("models/qwen2.5-coder-0.5b-instruct.gguf")
}

/// Qwen2.5-Coder 1.5B Instruct, Q4_K_M (assembled by `scripts/setup` unless
/// `ALPHALOOP_SKIP_MEDIUM_LLM=1`): mining's default when present (`--model medium`).
pub fn medium_gguf() -> std::path::PathBuf {
    crate::cache_dir().join("models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
}

/// The GGUF mining uses unless told: the 1.5B when it is present, else the 0.5B.
pub fn default_gguf() -> std::path::PathBuf {
    let m = medium_gguf();
    if m.exists() { m } else { small_gguf() }
}

/// A `--model` argument: `small` and `medium` name the models `scripts/setup` fetches,
/// anything else is a GGUF path; none is [`default_gguf`].
pub fn model_path(arg: Option<&std::path::Path>) -> std::path::PathBuf {
    match arg.and_then(|p| p.to_str()) {
        Some("small") => small_gguf(),
        Some("medium") => medium_gguf(),
        _ => arg.map_or_else(default_gguf, std::path::Path::to_path_buf),
    }
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn model_names_and_paths() {
        assert_eq!(super::model_path(Some(Path::new("small"))), super::small_gguf());
        assert_eq!(super::model_path(Some(Path::new("medium"))), super::medium_gguf());
        assert_eq!(super::model_path(Some(Path::new("/m/x.gguf"))), Path::new("/m/x.gguf"));
        let default = super::model_path(None);
        assert!(default == super::medium_gguf() || (default == super::small_gguf() && !super::medium_gguf().exists()));
    }
}

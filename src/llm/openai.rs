//! Any OpenAI-compatible `/v1/chat/completions` endpoint (OpenAI, DeepSeek, vLLM, Ollama,
//! llama.cpp server, LM Studio). Retries 429, 5xx and transport errors with backoff for as
//! long as its [`Patience`] allows (minutes once the server has answered, so an outage does
//! not end an overnight run); a concurrency limit; timeouts; and when a server rejects
//! `response_format` (no JSON mode, RD-Agent #433) the request is repeated at once without
//! it and the server is remembered as lacking it.

use super::retry::{excerpt, post_json, Failure, GaveUp, Patience};
use super::{ChatRequest, LanguageModel, LlmError, Reply};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

pub struct OpenAiModel {
    base_url: String,
    model: String,
    key: Option<String>,
    client: reqwest::blocking::Client,
    patience: Patience,
    no_json_mode: AtomicBool,
    slots: (Mutex<usize>, Condvar),
    max_concurrent: usize,
}

impl OpenAiModel {
    pub fn new(base_url: &str, model: &str, key: Option<String>, max_concurrent: usize, timeout: Duration) -> Result<OpenAiModel, LlmError> {
        let client = reqwest::blocking::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| LlmError::Http { url: base_url.into(), msg: e.to_string() })?;
        Ok(OpenAiModel {
            base_url: base_url.trim_end_matches('/').to_string(),
            model: model.to_string(),
            key,
            client,
            patience: Patience::default(),
            no_json_mode: AtomicBool::new(false),
            slots: (Mutex::new(0), Condvar::new()),
            max_concurrent: max_concurrent.max(1),
        })
    }

    /// How long transient failures are retried (default: [`Patience::default`]).
    pub fn with_patience(mut self, patience: Patience) -> OpenAiModel {
        self.patience = patience;
        self
    }

    fn body(&self, req: &ChatRequest, json_mode: bool) -> serde_json::Value {
        let mut messages = Vec::new();
        if !req.system.is_empty() {
            messages.push(serde_json::json!({"role": "system", "content": req.system}));
        }
        for m in &req.messages {
            messages.push(serde_json::json!({"role": m.role, "content": m.content}));
        }
        let mut b = serde_json::json!({
            "model": self.model,
            "messages": messages,
            "temperature": req.temperature,
            "max_tokens": req.max_tokens,
            "seed": req.seed,
        });
        if !req.stop.is_empty() {
            b["stop"] = serde_json::json!(req.stop);
        }
        if json_mode {
            b["response_format"] = serde_json::json!({"type": "json_object"});
        }
        b
    }

    fn acquire(&self) {
        let (m, cv) = &self.slots;
        let mut n = m.lock().unwrap_or_else(|e| e.into_inner());
        while *n >= self.max_concurrent {
            n = cv.wait(n).unwrap_or_else(|e| e.into_inner());
        }
        *n += 1;
    }

    fn release(&self) {
        let (m, cv) = &self.slots;
        let mut n = m.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(1);
        cv.notify_one();
    }

    fn once(&self, req: &ChatRequest) -> Result<Reply, Failure<LlmError>> {
        let url = format!("{}/chat/completions", self.base_url);
        let json_mode = req.json && !self.no_json_mode.load(Ordering::Relaxed);
        let (status, text) = post_json(&self.client, &url, self.key.as_deref(), &self.body(req, json_mode))?;
        if status.as_u16() == 400 && json_mode && text.contains("response_format") {
            tracing::warn!("{url} has no JSON mode; asking without response_format from now on");
            self.no_json_mode.store(true, Ordering::Relaxed);
            return Err(Failure::Again("no JSON mode".into()));
        }
        let fatal = |msg: String| Failure::Fatal(LlmError::Http { url: url.clone(), msg });
        if !status.is_success() {
            return Err(fatal(format!("HTTP {status}: {}", excerpt(&text))));
        }
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| fatal(format!("reply is not JSON: {e}")))?;
        let content = v["choices"][0]["message"]["content"]
            .as_str()
            .ok_or_else(|| fatal(format!("reply has no choices[0].message.content: {}", excerpt(&text))))?;
        Ok(Reply {
            text: content.to_string(),
            prompt_tokens: v["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
            completion_tokens: v["usage"]["completion_tokens"].as_u64().unwrap_or(0),
            cached_tokens: v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0),
            seconds: 0.0,
        })
    }
}

impl LanguageModel for OpenAiModel {
    fn chat(&self, req: &ChatRequest) -> Result<Reply, LlmError> {
        let t0 = std::time::Instant::now();
        self.acquire();
        let result = self.patience.run(|| self.once(req));
        self.release();
        match result {
            Ok(mut r) => {
                r.seconds = t0.elapsed().as_secs_f64();
                Ok(r)
            }
            Err(GaveUp::Fatal(e)) => Err(e),
            Err(GaveUp::Exhausted(x)) => Err(LlmError::Http { url: self.base_url.clone(), msg: x.to_string() }),
        }
    }

    fn name(&self) -> String {
        format!("openai:{}", self.model)
    }
}

#[cfg(test)]
mod tests {
    //! Failure handling against a scripted HTTP server (the happy path runs against the
    //! real `alphaloop serve` in tests/llm.rs).
    use super::*;
    use crate::llm::retry::scripted;

    const OK: &str = r#"{"choices":[{"message":{"content":"rank(close)"}}],"usage":{"prompt_tokens":9,"completion_tokens":2}}"#;

    #[test]
    fn retries_rate_limits_and_falls_back_when_the_server_has_no_json_mode() {
        let (url, h) = scripted(vec![(429, "slow down"), (400, r#"{"error":"unknown field response_format"}"#), (200, OK), (200, OK)]);
        let m = OpenAiModel::new(&url, "m", None, 1, Duration::from_secs(10)).expect("client");
        let mut req = ChatRequest::new("sys", "hi");
        req.json = true;
        let r = m.chat(&req).expect("third answer");
        assert_eq!((r.text.as_str(), r.prompt_tokens, r.completion_tokens), ("rank(close)", 9, 2));
        // Remembered: the next JSON request goes without response_format at once.
        m.chat(&req).expect("fourth answer");
        let seen = h.join().expect("server");
        assert!(seen[0].contains("response_format") && seen[1].contains("response_format"));
        assert!(!seen[2].contains("response_format") && !seen[3].contains("response_format"));
        assert!(seen[0].contains("\"system\"") && seen[0].contains("\"max_tokens\""));
    }

    /// Waits of milliseconds instead of seconds; the budgets as given.
    fn quick(outage: Duration) -> Patience {
        let mut p = Patience::new(outage);
        p.first_contact = Duration::from_millis(300);
        (p.first_wait, p.max_wait) = (Duration::from_millis(5), Duration::from_millis(20));
        p
    }

    #[test]
    fn an_outage_after_the_first_answer_is_waited_out() {
        // Eight failures in a row (three more than the five retries that used to end a
        // run), then the server is back.
        let mut replies = vec![(200, OK)];
        replies.extend([(503, "down"), (502, "bad gateway"), (429, "slow down"), (500, "oops")].repeat(2));
        replies.push((200, OK));
        let (url, h) = scripted(replies);
        let m = OpenAiModel::new(&url, "m", None, 1, Duration::from_secs(10)).expect("client").with_patience(quick(Duration::from_secs(60)));
        m.chat(&ChatRequest::new("", "first")).expect("first answer");
        let r = m.chat(&ChatRequest::new("", "second")).expect("answer after the outage");
        assert_eq!(r.text, "rank(close)");
        assert_eq!(h.join().expect("server").len(), 10);
    }

    #[test]
    fn a_server_that_never_answers_is_given_up_on_soon_and_the_message_says_so() {
        let (url, h) = scripted(vec![(503, "down"); 3]);
        let m = OpenAiModel::new(&url, "m", None, 1, Duration::from_secs(10)).expect("client").with_patience(quick(Duration::from_secs(600)));
        let t0 = std::time::Instant::now();
        let msg = m.chat(&ChatRequest::new("", "hi")).expect_err("never answers").to_string();
        // After the three 503s the port is closed: transport errors, retried the same way.
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert!(msg.contains(&url) && msg.contains("gave up after") && msg.contains("has not answered once"), "{msg}");
        assert_eq!(h.join().expect("server").len(), 3);
    }

    #[test]
    fn a_client_error_is_not_retried_and_names_the_url() {
        let (url, h) = scripted(vec![(401, "bad key")]);
        let m = OpenAiModel::new(&url, "m", Some("k".into()), 1, Duration::from_secs(10)).expect("client");
        let e = m.chat(&ChatRequest::new("", "hi")).expect_err("401");
        let msg = e.to_string();
        assert!(msg.contains(&url) && msg.contains("401") && msg.contains("bad key"), "{msg}");
        assert_eq!(h.join().expect("server").len(), 1);
    }
}

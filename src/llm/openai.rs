//! Any OpenAI-compatible `/v1/chat/completions` endpoint (OpenAI, DeepSeek, vLLM, Ollama,
//! llama.cpp server, LM Studio). Retries with exponential backoff on 429, 5xx and transport
//! errors; a concurrency limit; timeouts; and when a server rejects `response_format`
//! (no JSON mode, RD-Agent #433) the request is repeated without it and the server is
//! remembered as lacking it.

use super::{ChatRequest, LanguageModel, LlmError, Reply};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

pub struct OpenAiModel {
    base_url: String,
    model: String,
    key: Option<String>,
    client: reqwest::blocking::Client,
    max_retries: u32,
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
            max_retries: 5,
            no_json_mode: AtomicBool::new(false),
            slots: (Mutex::new(0), Condvar::new()),
            max_concurrent: max_concurrent.max(1),
        })
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

    fn once(&self, req: &ChatRequest) -> Result<Result<Reply, (bool, String)>, LlmError> {
        let url = format!("{}/chat/completions", self.base_url);
        let json_mode = req.json && !self.no_json_mode.load(Ordering::Relaxed);
        let mut r = self.client.post(&url).json(&self.body(req, json_mode));
        if let Some(k) = &self.key {
            r = r.bearer_auth(k);
        }
        let resp = match r.send() {
            Ok(x) => x,
            Err(e) => return Ok(Err((true, e.to_string()))),
        };
        let status = resp.status();
        let text = resp.text().unwrap_or_default();
        if status.as_u16() == 429 || status.is_server_error() {
            return Ok(Err((true, format!("HTTP {status}: {}", short(&text)))));
        }
        if status.as_u16() == 400 && json_mode && text.contains("response_format") {
            tracing::warn!("{url} has no JSON mode; asking without response_format from now on");
            self.no_json_mode.store(true, Ordering::Relaxed);
            return Ok(Err((true, "no JSON mode".into())));
        }
        if !status.is_success() {
            return Err(LlmError::Http { url, msg: format!("HTTP {status}: {}", short(&text)) });
        }
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| LlmError::Http { url: url.clone(), msg: format!("reply is not JSON: {e}") })?;
        let content = v["choices"][0]["message"]["content"]
            .as_str()
            .ok_or_else(|| LlmError::Http { url: url.clone(), msg: format!("reply has no choices[0].message.content: {}", short(&text)) })?;
        Ok(Ok(Reply {
            text: content.to_string(),
            prompt_tokens: v["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
            completion_tokens: v["usage"]["completion_tokens"].as_u64().unwrap_or(0),
            cached_tokens: v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0),
            seconds: 0.0,
        }))
    }
}

fn short(s: &str) -> String {
    s.chars().take(300).collect()
}

impl LanguageModel for OpenAiModel {
    fn chat(&self, req: &ChatRequest) -> Result<Reply, LlmError> {
        let t0 = std::time::Instant::now();
        self.acquire();
        let mut last = String::new();
        let mut result = None;
        for attempt in 0..=self.max_retries {
            match self.once(req) {
                Ok(Ok(mut r)) => {
                    r.seconds = t0.elapsed().as_secs_f64();
                    result = Some(Ok(r));
                    break;
                }
                Ok(Err((_, msg))) => {
                    last = msg;
                    if attempt < self.max_retries {
                        // 1, 2, 4, 8, 16 s, with a little jitter so parallel miners spread out.
                        let jitter = (std::process::id() as u64 * 37 + attempt as u64 * 101) % 250;
                        std::thread::sleep(Duration::from_millis((1000u64 << attempt) + jitter));
                    }
                }
                Err(e) => {
                    result = Some(Err(e));
                    break;
                }
            }
        }
        self.release();
        result.unwrap_or_else(|| {
            Err(LlmError::Http {
                url: self.base_url.clone(),
                msg: format!("gave up after {} retries: {last}", self.max_retries),
            })
        })
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
    use std::io::{BufReader, Write};

    /// Answers each request with the next (status, body); returns the request bodies seen.
    fn scripted(replies: Vec<(u16, &'static str)>) -> (String, std::thread::JoinHandle<Vec<String>>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/v1", l.local_addr().expect("addr"));
        let h = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for (status, body) in replies {
                let (conn, _) = l.accept().expect("accept");
                let mut r = BufReader::new(conn.try_clone().expect("clone"));
                let req = crate::llm::serve::read_request(&mut r).expect("read").expect("a request");
                seen.push(String::from_utf8(req.body).expect("utf8"));
                let mut w = conn;
                write!(w, "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).expect("write");
            }
            seen
        });
        (url, h)
    }

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

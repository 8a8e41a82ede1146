//! `alphaloop serve`: any [`LanguageModel`] (normally the embedded GGUF) behind an
//! OpenAI-compatible `/v1/chat/completions` endpoint, so several miners or other tools
//! can share one loaded model, and so the remote provider is tested against a real
//! server. Plain HTTP/1.1 with keep-alive on std sockets, one thread per connection;
//! the model serialises its own calls.
//!
//! Beyond the OpenAI fields it accepts llama.cpp server's `grammar` (GBNF) and `seed`.

use super::{ChatRequest, LanguageModel, LlmError, Message};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};

/// Largest request body accepted (prompts are a few KB).
const MAX_BODY: usize = 4 << 20;

/// Serves until the listener fails. Each connection gets its own thread.
pub fn serve(listener: TcpListener, model: &dyn LanguageModel) -> std::io::Result<()> {
    std::thread::scope(|s| {
        for conn in listener.incoming() {
            let conn = conn?;
            s.spawn(move || {
                if let Err(e) = connection(conn, model) {
                    tracing::debug!("connection closed: {e}");
                }
            });
        }
        Ok(())
    })
}

/// One HTTP/1.1 request as the server (and the test servers) need it.
pub(crate) struct Request {
    pub method: String,
    pub path: String,
    pub body: Vec<u8>,
    /// The client asked to close the connection after the reply.
    pub close: bool,
}

/// Reads the next request from a connection: `Ok(None)` at end of stream, `Err` with
/// `InvalidData` when the body is over [`MAX_BODY`] bytes.
pub(crate) fn read_request(reader: &mut impl BufRead) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
    let mut len = 0usize;
    let mut close = false;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            return Ok(None);
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => len = v.trim().parse().unwrap_or(usize::MAX),
                "connection" => close = v.trim().eq_ignore_ascii_case("close"),
                _ => {}
            }
        }
    }
    if len > MAX_BODY {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("body over {MAX_BODY} bytes")));
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body)?;
    Ok(Some(Request { method, path, body, close }))
}

fn connection(conn: TcpStream, model: &dyn LanguageModel) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut out = conn;
    loop {
        let req = match read_request(&mut reader) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return respond(&mut out, 413, &json!({"error": {"message": e.to_string()}}));
            }
            Err(e) => return Err(e),
        };
        let (status, reply) = route(&req.method, &req.path, &req.body, model);
        respond(&mut out, status, &reply)?;
        if req.close {
            return Ok(());
        }
    }
}

fn respond(out: &mut TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let text = body.to_string();
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        413 => "Payload Too Large",
        _ => "Internal Server Error",
    };
    write!(out, "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}", text.len())?;
    out.flush()
}

fn error(status: u16, msg: impl std::fmt::Display) -> (u16, Value) {
    (status, json!({"error": {"message": msg.to_string(), "type": if status == 400 { "invalid_request_error" } else { "server_error" }}}))
}

fn route(method: &str, path: &str, body: &[u8], model: &dyn LanguageModel) -> (u16, Value) {
    match (method, path.trim_end_matches('/')) {
        ("GET", "/v1/models") => (200, json!({"object": "list", "data": [{"id": model.name(), "object": "model", "owned_by": "alphaloop"}]})),
        ("POST", "/v1/chat/completions") => {
            let req = match serde_json::from_slice::<Value>(body).map_err(|e| e.to_string()).and_then(|v| request(&v)) {
                Ok(r) => r,
                Err(e) => return error(400, e),
            };
            match model.chat(&req) {
                Ok(r) => (
                    200,
                    json!({
                        "id": format!("chatcmpl-{}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)),
                        "object": "chat.completion",
                        "model": model.name(),
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": r.text}, "finish_reason": "stop"}],
                        "usage": {
                            "prompt_tokens": r.prompt_tokens,
                            "completion_tokens": r.completion_tokens,
                            "total_tokens": r.prompt_tokens + r.completion_tokens,
                            "prompt_tokens_details": {"cached_tokens": r.cached_tokens},
                        },
                    }),
                ),
                Err(e @ (LlmError::TooLong { .. } | LlmError::Invalid(_))) => error(400, e),
                Err(e) => error(500, e),
            }
        }
        _ => error(404, format!("no route {method} {path}; this server has POST /v1/chat/completions and GET /v1/models")),
    }
}

/// An OpenAI chat request as a [`ChatRequest`]: system messages become the system prompt.
fn request(v: &Value) -> Result<ChatRequest, String> {
    let msgs = v["messages"].as_array().ok_or("field 'messages' must be an array")?;
    let mut req = ChatRequest::new("", "");
    req.messages.clear();
    for (i, m) in msgs.iter().enumerate() {
        let role = m["role"].as_str().ok_or(format!("messages[{i}].role must be a string"))?;
        let content = m["content"].as_str().ok_or(format!("messages[{i}].content must be a string"))?;
        match role {
            "system" | "developer" => {
                if !req.system.is_empty() {
                    req.system.push('\n');
                }
                req.system.push_str(content);
            }
            "user" | "assistant" => req.messages.push(Message { role: role.into(), content: content.into() }),
            r => return Err(format!("messages[{i}].role '{r}' is not system, user or assistant")),
        }
    }
    if req.messages.is_empty() {
        return Err("field 'messages' holds no user message".into());
    }
    if let Some(t) = v.get("temperature").filter(|t| !t.is_null()) {
        req.temperature = t.as_f64().ok_or("field 'temperature' must be a number")? as f32;
    }
    if let Some(n) = v.get("max_tokens").or_else(|| v.get("max_completion_tokens")).filter(|t| !t.is_null()) {
        req.max_tokens = n.as_u64().ok_or("field 'max_tokens' must be a whole number")?.min(u32::MAX as u64) as u32;
    }
    req.stop = match &v["stop"] {
        Value::Null => Vec::new(),
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a.iter().map(|s| s.as_str().map(str::to_string).ok_or("field 'stop' must hold strings")).collect::<Result<_, _>>()?,
        _ => return Err("field 'stop' must be a string or an array of strings".into()),
    };
    req.grammar = v["grammar"].as_str().map(str::to_string);
    req.seed = v["seed"].as_u64().unwrap_or(0) as u32;
    req.json = v["response_format"]["type"].as_str() == Some("json_object");
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_requests_map_to_chat_requests_and_bad_ones_name_the_field() {
        let r = request(&json!({
            "model": "x",
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
            "temperature": 0.2, "max_tokens": 7, "stop": "\n", "seed": 3,
            "response_format": {"type": "json_object"},
        }))
        .expect("valid");
        assert_eq!(r.system, "be brief");
        assert_eq!(r.messages, vec![Message::user("hi")]);
        assert_eq!((r.max_tokens, r.seed, r.json), (7, 3, true));
        assert_eq!(r.stop, vec!["\n".to_string()]);
        assert!((r.temperature - 0.2).abs() < 1e-6);
        let e = request(&json!({"messages": [{"role": "user", "content": 5}]})).unwrap_err();
        assert!(e.contains("messages[0].content"), "{e}");
        let e = request(&json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1})).unwrap_err();
        assert!(e.contains("max_tokens"), "{e}");
        assert!(request(&json!({"messages": []})).is_err());
    }
}

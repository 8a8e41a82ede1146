//! Patience with a remote endpoint: an OpenAI-compatible chat or embeddings server, or a
//! Qdrant server holding the knowledge base (`kb::server`).
//!
//! Why: an overnight run against a hosted model meets rate limits, 5xx replies and the odd
//! outage of minutes; a fixed five retries (31 s in all) ended the whole run at the first
//! outage. An endpoint that has answered before is given [`Patience::outage`] (10 minutes
//! by default, `retry_minutes` in the config) of retries, waiting 1 s, 2 s, 4 s … up to
//! 60 s between them, or what the server's `Retry-After` asks. One that has never answered
//! gets [`Patience::first_contact`] (30 s): that is a wrong URL, port or key far more often
//! than an outage, and the user should hear so at once, not in ten minutes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One attempt's failure, as the caller classifies it.
#[derive(Debug)]
pub enum Failure<E> {
    /// Worth retrying after a wait (transport error, 429, 5xx); `after` is the server's
    /// `Retry-After`, if it sent one.
    Transient { msg: String, after: Option<Duration> },
    /// The request was changed (e.g. sent again without an option the server rejects):
    /// retry at once, at most [`AGAIN`] times in a row.
    Again(String),
    /// Not worth retrying (a client error such as a bad key or an unknown model).
    Fatal(E),
}

/// The end of [`Patience::run`] without a result.
#[derive(Debug)]
pub enum GaveUp<E> {
    Fatal(E),
    Exhausted(Exhausted),
}

/// Transient failures for longer than the budget.
#[derive(Debug)]
pub struct Exhausted {
    pub attempts: u32,
    pub waited: Duration,
    pub last: String,
    pub ever_answered: bool,
}

impl std::fmt::Display for Exhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hint = if self.ever_answered { "" } else { " (it has not answered once: check the URL, the key and that the server runs)" };
        write!(f, "gave up after {} attempts over {:.0} s{hint}: {}", self.attempts, self.waited.as_secs_f64(), self.last)
    }
}

/// Immediate retries allowed in a row for [`Failure::Again`].
pub const AGAIN: u32 = 2;

/// Retry budget and waits for one endpoint; remembers whether it has ever answered.
#[derive(Debug)]
pub struct Patience {
    /// Budget of an endpoint that has answered before.
    pub outage: Duration,
    /// Budget of one that has not.
    pub first_contact: Duration,
    /// The first wait; each later one doubles, up to `max_wait`.
    pub first_wait: Duration,
    pub max_wait: Duration,
    answered: AtomicBool,
}

impl Default for Patience {
    fn default() -> Patience {
        Patience::new(Duration::from_secs(600))
    }
}

impl Patience {
    /// Retries for up to `outage` once the endpoint has answered; the other settings at
    /// their defaults (30 s before the first answer, waits from 1 s to 60 s).
    pub fn new(outage: Duration) -> Patience {
        Patience {
            outage,
            first_contact: Duration::from_secs(30).min(outage),
            first_wait: Duration::from_secs(1),
            max_wait: Duration::from_secs(60),
            answered: AtomicBool::new(false),
        }
    }

    /// From the config's `retry_minutes` (default 10; the config refuses a negative one).
    pub fn from_minutes(minutes: Option<f64>) -> Patience {
        let m = minutes.filter(|m| m.is_finite() && *m >= 0.0).unwrap_or(10.0);
        Patience::new(Duration::from_secs_f64(m * 60.0))
    }

    /// Calls `attempt` until it succeeds, fails fatally, or the next wait would end past
    /// the budget (counted from the first attempt).
    pub fn run<T, E>(&self, mut attempt: impl FnMut() -> Result<T, Failure<E>>) -> Result<T, GaveUp<E>> {
        let start = Instant::now();
        let ever_answered = self.answered.load(Ordering::Relaxed);
        let budget = if ever_answered { self.outage } else { self.first_contact };
        let (mut wait, mut attempts, mut again) = (self.first_wait, 0u32, 0u32);
        loop {
            attempts += 1;
            let (msg, after) = match attempt() {
                Ok(v) => {
                    self.answered.store(true, Ordering::Relaxed);
                    return Ok(v);
                }
                Err(Failure::Fatal(e)) => return Err(GaveUp::Fatal(e)),
                Err(Failure::Again(msg)) if again < AGAIN => {
                    again += 1;
                    tracing::debug!("{msg}; asking again at once");
                    continue;
                }
                Err(Failure::Again(msg)) => (msg, None),
                Err(Failure::Transient { msg, after }) => (msg, after),
            };
            again = 0;
            // A little jitter so that parallel miners spread out.
            let jitter = Duration::from_millis((u64::from(std::process::id()) * 37 + u64::from(attempts) * 101) % 250);
            let pause = after.unwrap_or(wait) + jitter.min(wait / 4);
            if start.elapsed() + pause > budget {
                return Err(GaveUp::Exhausted(Exhausted { attempts, waited: start.elapsed(), last: msg, ever_answered }));
            }
            tracing::warn!("{msg}; retrying in {:.1} s (attempt {attempts})", pause.as_secs_f64());
            std::thread::sleep(pause);
            wait = (wait * 2).min(self.max_wait);
        }
    }
}

/// Posts `body` as JSON (with the bearer `key`, if any): the reply's status and text, or
/// a transient failure (a transport error, 429 or 5xx) for [`Patience::run`] to retry.
pub fn post_json<E>(client: &reqwest::blocking::Client, url: &str, key: Option<&str>, body: &serde_json::Value) -> Result<(reqwest::StatusCode, String), Failure<E>> {
    let mut req = client.post(url).json(body);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().map_err(|e| Failure::Transient { msg: e.to_string(), after: None })?;
    let status = resp.status();
    let after = retry_after(resp.headers());
    let text = resp.text().unwrap_or_default();
    if transient_status(status) {
        return Err(Failure::Transient { msg: format!("HTTP {status}: {}", excerpt(&text)), after });
    }
    Ok((status, text))
}

/// The wait a `Retry-After` header asks for, in seconds (the HTTP-date form is ignored).
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let s = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    s.trim().parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0).map(Duration::from_secs_f64)
}

/// Whether an HTTP status is worth retrying: rate limits and server errors.
fn transient_status(status: reqwest::StatusCode) -> bool {
    status.as_u16() == 429 || status.is_server_error()
}

/// The start of a reply body, for an error message.
pub fn excerpt(s: &str) -> String {
    s.chars().take(300).collect()
}

/// A scripted HTTP server for the clients' tests.
#[cfg(test)]
pub(crate) mod script {
    use std::io::{BufReader, Write};

    /// Answers each request with the next (status, body); returns the request bodies seen.
    pub(crate) fn scripted(replies: Vec<(u16, &'static str)>) -> (String, std::thread::JoinHandle<Vec<String>>) {
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
}
#[cfg(test)]
pub(crate) use script::scripted;

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn quick(outage_ms: u64, first_ms: u64) -> Patience {
        Patience {
            outage: Duration::from_millis(outage_ms),
            first_contact: Duration::from_millis(first_ms),
            first_wait: Duration::from_millis(4),
            max_wait: Duration::from_millis(8),
            answered: AtomicBool::new(false),
        }
    }

    fn transient<T>(msg: &str) -> Result<T, Failure<String>> {
        Err(Failure::Transient { msg: msg.into(), after: None })
    }

    #[test]
    fn an_endpoint_that_answered_before_gets_the_outage_budget() {
        let p = quick(2_000, 30);
        // Never answered: 30 ms of budget, waits of 4, 8, 8 … ms: gives up after a few.
        let n = Cell::new(0);
        let e = p.run(|| -> Result<(), _> {
            n.set(n.get() + 1);
            transient("HTTP 503")
        });
        match e {
            Err(GaveUp::Exhausted(Exhausted { attempts, last, ever_answered: false, .. })) => {
                assert!((2..=8).contains(&attempts), "{attempts}");
                assert_eq!(last, "HTTP 503");
            }
            other => panic!("{other:?}"),
        }
        p.run(|| Ok::<_, Failure<String>>(())).expect("answers");
        // Now twenty failures in a row (far past the first-contact budget) are waited out.
        n.set(0);
        let v = p.run(|| {
            n.set(n.get() + 1);
            if n.get() <= 20 {
                transient("connection reset")
            } else {
                Ok(n.get())
            }
        });
        assert_eq!(v.expect("outage waited out"), 21);
    }

    #[test]
    fn fatal_errors_and_long_retry_after_stop_at_once() {
        let p = quick(2_000, 2_000);
        let n = Cell::new(0);
        let e = p.run(|| -> Result<(), _> {
            n.set(n.get() + 1);
            Err(Failure::Fatal("HTTP 401".to_string()))
        });
        assert!(matches!(e, Err(GaveUp::Fatal(ref m)) if m == "HTTP 401"));
        assert_eq!(n.get(), 1);
        // The server asks for more than the budget left: no point sleeping it.
        let t0 = Instant::now();
        let e = p.run(|| -> Result<(), _> { Err(Failure::<String>::Transient { msg: "HTTP 429".into(), after: Some(Duration::from_secs(60)) }) });
        assert!(matches!(e, Err(GaveUp::Exhausted(Exhausted { attempts: 1, .. }))), "{e:?}");
        assert!(t0.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_changed_request_is_sent_again_without_waiting_but_not_forever() {
        let p = quick(0, 0);
        let n = Cell::new(0);
        let v = p.run(|| {
            n.set(n.get() + 1);
            if n.get() == 1 {
                Err(Failure::<String>::Again("no JSON mode".into()))
            } else {
                Ok(n.get())
            }
        });
        assert_eq!(v.expect("second try"), 2);
        // A server that keeps asking for changes is a failure like any other.
        n.set(0);
        let e = p.run(|| -> Result<(), _> {
            n.set(n.get() + 1);
            Err(Failure::<String>::Again("no JSON mode".into()))
        });
        assert!(matches!(e, Err(GaveUp::Exhausted(_))), "{e:?}");
        assert_eq!(n.get(), 1 + AGAIN);
    }

    #[test]
    fn retry_after_in_seconds() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(reqwest::header::RETRY_AFTER, "7".parse().expect("header"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert(reqwest::header::RETRY_AFTER, "Wed, 21 Oct 2026 07:28:00 GMT".parse().expect("header"));
        assert_eq!(retry_after(&h), None);
    }
}

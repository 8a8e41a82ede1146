//! Running untrusted signal code (LLM output) without letting it touch the host.
//!
//! * [`python`]: factor classes run by a worker process (`alphaloop sandbox-worker`) that
//!   embeds CPython; the parent limits it (rlimits, a network namespace, timeouts) and the
//!   worker locks itself down (Landlock, seccomp) before it runs any user code.
//! * [`wasm`]: WebAssembly modules under wasmtime, with no imports at all.
//! * [`lookahead`]: the detector every kind of signal goes through before it is accepted.

pub mod lookahead;
mod npy;
pub mod python;
pub mod wasm;
pub mod worker;

pub use lookahead::LookAhead;
pub use python::{PySandbox, SandboxConfig};

/// A program's signal with its look-ahead verdict (every kind of sandboxed program).
pub struct Evaluated {
    pub signal: crate::data::Panel,
    pub lookahead: LookAhead,
}

impl Evaluated {
    /// The program's `signal` if its run on the noised twin of `data` (`noisy`) left every
    /// value up to `cutoff` unchanged, else the `lookahead` verdict.
    pub fn checked(data: &crate::data::MarketData, signal: crate::data::Panel, noisy: &crate::data::Panel, cutoff: usize) -> Result<Evaluated, Verdict> {
        let la = lookahead::compare(data, &signal, noisy, cutoff);
        if !la.is_clean() {
            return Err(Verdict::new("lookahead", la.to_string()));
        }
        Ok(Evaluated { signal, lookahead: la })
    }
}

/// Why a program's signal was not accepted. `kind` is the short verdict printed and stored
/// (`timeout`, `memory`, `cpu`, `forbidden: network`, `lookahead`, `error`, ...); `message`
/// says what happened, for a Python error the traceback trimmed to the user's code.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Verdict {
    pub kind: String,
    pub message: String,
}

impl Verdict {
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> Verdict {
        Verdict { kind: kind.into(), message: message.into() }
    }
}

/// Failures of the sandbox itself (not of the program it runs).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("sandbox: {path}: {err}")]
    Io { path: std::path::PathBuf, err: std::io::Error },
    #[error("sandbox worker {exe}: {msg}")]
    Worker { exe: std::path::PathBuf, msg: String },
}

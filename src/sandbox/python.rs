//! The parent side of the Python sandbox: writes the panel once as memory-mapped `.npy`
//! files, starts a worker (`alphaloop sandbox-worker DIR`) under resource limits in its own
//! network namespace, sends it programs, enforces the wall-clock timeout, and replaces a
//! worker that died or was killed so a mining run goes on.

use super::lookahead;
use super::{npy, Evaluated, SandboxError, Verdict};
use crate::data::{MarketData, Panel};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

/// Limits for every program and every worker.
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// Wall-clock time one program may take; the worker is killed and replaced after it.
    pub timeout: Duration,
    /// CPU seconds a worker may use over its life (RLIMIT_CPU); it is then replaced.
    pub cpu_seconds: u64,
    /// Address space of a worker (RLIMIT_AS), bytes. The mapped panels count towards it.
    pub memory_bytes: u64,
    /// Largest file a program may write in its scratch dir (RLIMIT_FSIZE), bytes.
    pub file_bytes: u64,
    /// Smallest share of finite values an output may have.
    pub min_finite: f64,
    /// The `alphaloop` binary that runs the worker (default: this executable).
    pub worker_exe: PathBuf,
    /// Where each sandbox makes its directory (panels and scratch).
    pub scratch_root: PathBuf,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            timeout: Duration::from_secs(60),
            cpu_seconds: 900,
            memory_bytes: 4 << 30,
            file_bytes: 64 << 20,
            min_finite: 0.1,
            worker_exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("alphaloop")),
            scratch_root: crate::cache_dir().join("sandbox"),
        }
    }
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    rx: Receiver<Result<(Value, Vec<u8>), String>>,
}

/// One data set, one scratch directory, one worker at a time.
pub struct PySandbox {
    cfg: SandboxConfig,
    root: PathBuf,
    dates: MarketData,
    cutoff: usize,
    worker: Option<Worker>,
    /// Workers started so far (more than one means some died or were killed).
    pub workers_started: usize,
    /// What the last worker reported about its confinement (landlock, seccomp, netns).
    pub confinement: Value,
    /// Seconds the last successful program spent in its own code (`calc`), as measured
    /// inside the worker; the rest of a round trip is sandbox overhead.
    pub last_calc_seconds: f64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SandboxError + '_ {
    move |err| SandboxError::Io { path: path.to_path_buf(), err }
}

impl PySandbox {
    /// Writes `data` (and its look-ahead twin, noised after the cutoff) for the workers.
    pub fn start(data: &MarketData, cfg: SandboxConfig) -> Result<PySandbox, SandboxError> {
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root = cfg.scratch_root.join(format!("{}-{n}", std::process::id()));
        if root.exists() {
            std::fs::remove_dir_all(&root).map_err(io(&root))?;
        }
        let cutoff = lookahead::default_cutoff(data);
        let noised = with_derived(&lookahead::noised(data, cutoff, lookahead::SEED));
        let data = &with_derived(data);
        for (name, d) in [("real", data), ("noise", &noised)] {
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
            for (field, p) in &d.fields {
                let path = dir.join(format!("{field}.npy"));
                npy::write(&path, p).map_err(io(&path))?;
            }
        }
        let work = root.join("work");
        std::fs::create_dir_all(&work).map_err(io(&work))?;
        let meta = json!({
            "panels": ["real", "noise"],
            "fields": data.fields.keys().collect::<Vec<_>>(),
            "dates": data.dates.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
            "symbols": data.symbols,
        });
        let path = root.join("meta.json");
        std::fs::write(&path, meta.to_string()).map_err(io(&path))?;
        let dates = MarketData { fields: Default::default(), ..data.clone() };
        Ok(PySandbox { cfg, root, dates, cutoff, worker: None, workers_started: 0, confinement: Value::Null, last_calc_seconds: 0.0 })
    }

    /// The scratch directory programs may write in.
    pub fn work_dir(&self) -> PathBuf {
        self.root.join("work")
    }

    /// Runs a factor program on the real data, then on the noised twin, and returns its
    /// signal if it passed every check (output shape and values, look-ahead).
    pub fn evaluate(&mut self, code: &str, class: Option<&str>) -> Result<Evaluated, Verdict> {
        let signal = self.run(code, class, "real")?;
        let noisy = self.run(code, class, "noise")?;
        Evaluated::checked(&self.dates, signal, &noisy, self.cutoff)
    }

    /// Runs a program once on one panel ("real" or "noise").
    pub fn run(&mut self, code: &str, class: Option<&str>, panel: &str) -> Result<Panel, Verdict> {
        let sandbox = |e: SandboxError| Verdict::new("sandbox", e.to_string());
        if self.worker.is_none() {
            self.worker = Some(self.spawn().map_err(sandbox)?);
        }
        let w = self.worker.as_mut().ok_or_else(|| Verdict::new("sandbox", "no worker"))?;
        let req = json!({"code": code, "class": class, "panel": panel, "min_finite": self.cfg.min_finite});
        if writeln!(w.stdin, "{req}").and_then(|_| w.stdin.flush()).is_err() {
            return Err(self.died(false));
        }
        match w.rx.recv_timeout(self.cfg.timeout) {
            Ok(Ok((hdr, bytes))) => {
                if hdr["ok"].as_bool() == Some(true) {
                    let (rows, cols) = (hdr["rows"].as_u64().unwrap_or(0) as usize, hdr["cols"].as_u64().unwrap_or(0) as usize);
                    if (rows, cols) != (self.dates.n_dates(), self.dates.n_assets()) {
                        return Err(Verdict::new("wrong shape", format!("the worker returned {rows} x {cols}")));
                    }
                    self.last_calc_seconds = hdr["calc_seconds"].as_f64().unwrap_or(0.0);
                    let vals: Vec<f64> = bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8]))).collect();
                    Ok(Panel::from_asset_major(rows, cols, vals))
                } else {
                    Err(Verdict::new(
                        hdr["verdict"].as_str().unwrap_or("error"),
                        hdr["message"].as_str().unwrap_or("the worker gave no reason"),
                    ))
                }
            }
            Ok(Err(_)) | Err(RecvTimeoutError::Disconnected) => Err(self.died(false)),
            Err(RecvTimeoutError::Timeout) => Err(self.died(true)),
        }
    }

    /// Reaps the current worker (killing it first after a timeout) and says why it ended.
    fn died(&mut self, timed_out: bool) -> Verdict {
        let Some(mut w) = self.worker.take() else { return Verdict::new("sandbox", "no worker") };
        if timed_out {
            let _ = w.child.kill();
        }
        let status = w.child.wait().ok();
        let tail = self.log_tail();
        if timed_out {
            return Verdict::new("timeout", format!("the program ran longer than {:?} and was stopped", self.cfg.timeout));
        }
        match status.and_then(|s| s.signal()) {
            Some(libc::SIGXCPU) => Verdict::new("cpu", format!("the worker used its {} s of CPU time", self.cfg.cpu_seconds)),
            Some(libc::SIGKILL) => Verdict::new("memory", "the worker was killed (out of memory)"),
            Some(libc::SIGSYS) => Verdict::new("forbidden: syscall", "the worker made a system call the sandbox forbids"),
            Some(sig) => Verdict::new("crash", format!("the worker died of signal {sig}{tail}")),
            None => Verdict::new("crash", format!("the worker exited ({status:?}){tail}")),
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.root.join("work/output.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().rev().take(5).collect();
        if lines.is_empty() {
            String::new()
        } else {
            format!("; last output: {}", lines.into_iter().rev().collect::<Vec<_>>().join(" | "))
        }
    }

    fn spawn(&mut self) -> Result<Worker, SandboxError> {
        let exe = &self.cfg.worker_exe;
        let err = |msg: String| SandboxError::Worker { exe: exe.clone(), msg };
        let work = self.work_dir();
        let mut cmd = Command::new(exe);
        cmd.arg("sandbox-worker")
            .arg(&self.root)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &work)
            .env("TMPDIR", &work)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONNOUSERSITE", "1")
            .current_dir(&work)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // One thread for the numeric libraries: a program's signal is one thread of work,
        // and a worker should not compete with the miner for cores.
        let home = env!("ALPHALOOP_PYTHON_HOME");
        if !home.is_empty() {
            cmd.env("PYTHONHOME", home);
        }
        // pyarrow (which pandas loads) would start a jemalloc background thread.
        cmd.env("JE_ARROW_MALLOC_CONF", "background_thread:false");
        for v in ["OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS", "POLARS_MAX_THREADS"] {
            cmd.env(v, "1");
        }
        let (mem, cpu, fsize) = (self.cfg.memory_bytes, self.cfg.cpu_seconds, self.cfg.file_bytes);
        // SAFETY: only async-signal-safe calls (setrlimit, unshare, prctl) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let lim = |r, v: u64| {
                    let l = libc::rlimit { rlim_cur: v, rlim_max: v };
                    libc::setrlimit(r, &l);
                };
                lim(libc::RLIMIT_AS, mem);
                lim(libc::RLIMIT_CPU, cpu);
                lim(libc::RLIMIT_FSIZE, fsize);
                lim(libc::RLIMIT_CORE, 0);
                lim(libc::RLIMIT_NPROC, 64);
                // A fresh network namespace has only a down loopback: no route anywhere.
                // Where it is not permitted, seccomp still refuses to create sockets.
                libc::unshare(libc::CLONE_NEWNET);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| err(format!("cannot start: {e}")))?;
        let stdin = child.stdin.take().ok_or_else(|| err("no stdin".into()))?;
        let stdout = child.stdout.take().ok_or_else(|| err("no stdout".into()))?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || read_replies(stdout, tx));
        self.workers_started += 1;
        // The first message says the worker is confined and ready.
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(Ok((hdr, _))) if hdr["ready"].as_bool() == Some(true) => {
                self.confinement = hdr;
                Ok(Worker { child, stdin, rx })
            }
            other => {
                let _ = child.kill();
                let _ = child.wait();
                let why = match other {
                    Ok(Ok((hdr, _))) => hdr["message"].as_str().unwrap_or("").to_string(),
                    _ => "no ready message".into(),
                };
                Err(err(format!("did not start: {why}{}", self.log_tail())))
            }
        }
    }
}

/// Fields a factor may ask for: the data's columns plus the derived `returns` and `vwap`,
/// exactly as the expression language computes them (conventions.md).
pub const DERIVED: [&str; 2] = ["returns", "vwap"];

fn with_derived(data: &MarketData) -> MarketData {
    let mut out = data.clone();
    for name in DERIVED {
        if !out.fields.contains_key(name) {
            if let Ok(p) = crate::expr::eval_expr(name, data, &crate::expr::NoAlphas) {
                out.fields.insert(name.to_string(), p);
            }
        }
    }
    out
}

/// Frames from the worker: a JSON line, then `rows * cols * 8` bytes when it has `ok`.
fn read_replies(stdout: std::process::ChildStdout, tx: mpsc::Sender<Result<(Value, Vec<u8>), String>>) {
    let mut r = BufReader::with_capacity(1 << 20, stdout);
    loop {
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => {
                let _ = tx.send(Err("the worker closed its output".into()));
                return;
            }
            Ok(_) => {}
        }
        let hdr: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                let _ = tx.send(Err(format!("bad frame from the worker: {e}")));
                return;
            }
        };
        let mut bytes = Vec::new();
        if hdr["ok"].as_bool() == Some(true) {
            let n = hdr["rows"].as_u64().unwrap_or(0) * hdr["cols"].as_u64().unwrap_or(0) * 8;
            bytes.resize(n as usize, 0);
            if r.read_exact(&mut bytes).is_err() {
                let _ = tx.send(Err("the worker's output ended early".into()));
                return;
            }
        }
        if tx.send(Ok((hdr, bytes))).is_err() {
            return;
        }
    }
}

impl Drop for PySandbox {
    fn drop(&mut self) {
        if let Some(mut w) = self.worker.take() {
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

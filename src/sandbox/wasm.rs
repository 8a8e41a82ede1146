//! WebAssembly signals under wasmtime: code in any language that compiles to `wasm32`
//! (or WebAssembly text), run with no imports at all, so it has no way to reach files,
//! the network, the clock or the host's memory: everything it sees is what the host
//! copies into its linear memory. The ABI is in `sandbox/wasm/README.md`.
//!
//! Limits: a wall-clock deadline (epoch interruption, checked at every loop back-edge and
//! call), a cap on linear memory (growing past it traps), one instance. The output goes
//! through the same checks as a Python factor's (finite values, shape fixed by the ABI)
//! and through the look-ahead detector.

use super::{lookahead, Evaluated, Verdict};
use crate::data::{MarketData, Panel};
use std::time::Duration;
use wasmtime::{Config, Engine, Instance, Module, ResourceLimiter, Store, Trap};

/// The fields the host copies in, in this order (see the ABI).
pub const FIELDS: [&str; 5] = ["open", "high", "low", "close", "volume"];

/// Limits for every program.
#[derive(Clone, Debug)]
pub struct WasmConfig {
    /// Wall-clock time one run may take.
    pub timeout: Duration,
    /// Largest linear memory, bytes (the inputs and output count towards it).
    pub memory_bytes: usize,
    /// Smallest share of finite values an output may have.
    pub min_finite: f64,
}

impl Default for WasmConfig {
    fn default() -> Self {
        WasmConfig { timeout: Duration::from_secs(60), memory_bytes: 2 << 30, min_finite: 0.1 }
    }
}

/// A compiled program, ready to run on any data.
pub struct WasmProgram {
    engine: Engine,
    module: Module,
    cfg: WasmConfig,
}

impl WasmProgram {
    /// Compiles a module from its binary or text form. Refuses one that imports anything
    /// (`forbidden: import`) or lacks the ABI's exports (`error`).
    pub fn new(bytes: &[u8], cfg: WasmConfig) -> Result<WasmProgram, Verdict> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        let engine = Engine::new(&config).map_err(|e| Verdict::new("sandbox", format!("wasmtime: {e}")))?;
        let module = Module::new(&engine, bytes).map_err(|e| Verdict::new("error", format!("not a valid WebAssembly module: {e:#}")))?;
        if let Some(i) = module.imports().next() {
            return Err(Verdict::new(
                "forbidden: import",
                format!("the module imports {}::{}; signal modules may import nothing (no WASI, no host functions)", i.module(), i.name()),
            ));
        }
        for (name, what) in [("memory", "its linear memory"), ("alloc", "alloc(bytes: i32) -> i32"), ("signal", "signal(n_dates: i32, n_assets: i32, fields: i32, out: i32) -> i32")] {
            if module.get_export(name).is_none() {
                return Err(Verdict::new("error", format!("the module does not export `{name}` ({what}); see sandbox/wasm/README.md")));
            }
        }
        Ok(WasmProgram { engine, module, cfg })
    }

    /// Runs the program on the real data and on its noised twin; returns the signal if it
    /// passed every check (output values, look-ahead).
    pub fn evaluate(&self, data: &MarketData) -> Result<Evaluated, Verdict> {
        let cutoff = lookahead::default_cutoff(data);
        let signal = self.run(data)?;
        let noisy = self.run(&lookahead::noised(data, cutoff, lookahead::SEED))?;
        Evaluated::checked(data, signal, &noisy, cutoff)
    }

    /// Runs the program once: a fresh instance, the inputs copied in, the output checked.
    pub fn run(&self, data: &MarketData) -> Result<Panel, Verdict> {
        let (nd, na) = (data.n_dates(), data.n_assets());
        let cells = nd * na;
        let mut fields = Vec::with_capacity(FIELDS.len());
        for f in FIELDS {
            let p = data.field(f).ok_or_else(|| Verdict::new("sandbox", format!("the data has no `{f}` field, which the WASM ABI passes")))?;
            fields.push(p);
        }
        let in_bytes = FIELDS.len() * cells * 8;
        let total = in_bytes + cells * 8;
        let as_i32 = |v: usize, what: &str| {
            i32::try_from(v).map_err(|_| Verdict::new("memory", format!("{what} ({v}) does not fit a 32-bit WebAssembly address space")))
        };
        let (nd32, na32, total32) = (as_i32(nd, "the number of dates")?, as_i32(na, "the number of assets")?, as_i32(total, "the inputs and output, bytes")?);

        let mut store = Store::new(&self.engine, Limits { memory_bytes: self.cfg.memory_bytes, refused: None });
        store.limiter(|l| l);
        store.set_epoch_deadline(1);
        let _timer = Deadline::start(self.engine.clone(), self.cfg.timeout);

        let instance = Instance::new(&mut store, &self.module, &[]);
        let instance = instance.map_err(|e| self.verdict(e, store.data().refused))?;
        let memory = instance.get_memory(&mut store, "memory").ok_or_else(|| Verdict::new("error", "`memory` is not a memory"))?;
        let alloc = instance.get_typed_func::<i32, i32>(&mut store, "alloc").map_err(|e| Verdict::new("error", format!("`alloc`: {e}")))?;
        let signal = instance
            .get_typed_func::<(i32, i32, i32, i32), i32>(&mut store, "signal")
            .map_err(|e| Verdict::new("error", format!("`signal`: {e}")))?;

        let base = alloc.call(&mut store, total32);
        let base = base.map_err(|e| self.verdict(e, store.data().refused))?;
        let base = usize::try_from(base).map_err(|_| Verdict::new("error", format!("alloc returned a negative address ({base})")))?;
        if base % 8 != 0 || base.checked_add(total).is_none_or(|end| end > memory.data_size(&store)) {
            return Err(Verdict::new("error", format!("alloc({total}) returned {base}, not an 8-byte aligned block inside the memory")));
        }
        {
            let mem = &mut memory.data_mut(&mut store)[base..base + in_bytes];
            for (k, p) in fields.iter().enumerate() {
                for (dst, v) in mem[k * cells * 8..(k + 1) * cells * 8].chunks_exact_mut(8).zip(p.to_asset_major().iter()) {
                    dst.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        let out_at = base + in_bytes;
        let (fields32, out32) = (as_i32(base, "the input address")?, as_i32(out_at, "the output address")?);
        let rc = signal.call(&mut store, (nd32, na32, fields32, out32));
        let rc = rc.map_err(|e| self.verdict(e, store.data().refused))?;
        if rc != 0 {
            return Err(Verdict::new("error", format!("signal returned {rc} (0 means success)")));
        }
        let out: Vec<f64> = memory.data(&store)[out_at..out_at + cells * 8]
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .collect();
        check_output(&out, self.cfg.min_finite)?;
        Ok(Panel::from_asset_major(nd, na, out))
    }

    /// The verdict for a failed instantiation or call; `refused` is the memory size the
    /// limiter refused, if it did.
    fn verdict(&self, e: wasmtime::Error, refused: Option<usize>) -> Verdict {
        if let Some(bytes) = refused {
            return Verdict::new(
                "memory",
                format!("the program asked for {} MB of memory, over the limit of {} MB", bytes >> 20, self.cfg.memory_bytes >> 20),
            );
        }
        match e.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => Verdict::new("timeout", format!("the program ran longer than {:?} and was stopped", self.cfg.timeout)),
            Some(Trap::StackOverflow) => Verdict::new("error", "stack overflow (unbounded recursion?)"),
            Some(t) => Verdict::new("error", format!("the program trapped: {t}")),
            None => Verdict::new("error", format!("{e:#}")),
        }
    }
}

/// The store's limits: one instance, and linear memory up to `memory_bytes`; growing past
/// it traps (a `memory.grow` returning -1 would let a careless module go on writing
/// nothing) and is remembered, so that the trap reads as `memory`.
struct Limits {
    memory_bytes: usize,
    refused: Option<usize>,
}

impl ResourceLimiter for Limits {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.refused = Some(desired);
            wasmtime::bail!("memory limit: {desired} bytes asked, {} allowed", self.memory_bytes);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }

    fn instances(&self) -> usize {
        1
    }
}

/// The same value checks as a Python factor's output.
fn check_output(out: &[f64], min_finite: f64) -> Result<(), Verdict> {
    let n_inf = out.iter().filter(|v| v.is_infinite()).count();
    if n_inf > 0 {
        return Err(Verdict::new("invalid output", format!("invalid output: {n_inf} infinite values")));
    }
    let finite = if out.is_empty() { 0.0 } else { out.iter().filter(|v| v.is_finite()).count() as f64 / out.len() as f64 };
    if finite < min_finite {
        return Err(Verdict::new(
            "invalid output",
            format!("invalid output: only {:.1}% of values are finite (minimum {:.0}%)", finite * 100.0, min_finite * 100.0),
        ));
    }
    Ok(())
}

/// Interrupts the engine's running code once `timeout` has passed, unless dropped first.
struct Deadline {
    done: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Deadline {
    fn start(engine: Engine, timeout: Duration) -> Deadline {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(timeout) {
                engine.increment_epoch();
            }
        });
        Deadline { done: Some(tx), thread: Some(thread) }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

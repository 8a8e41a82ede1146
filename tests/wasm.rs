//! WebAssembly signals under the real wasmtime, on the real sample data: the example module
//! agrees with the expression engine bit for bit, and hostile modules get their verdicts
//! without reaching the host.

mod common;

use alphaloop::sandbox::wasm::{WasmConfig, WasmProgram};
use common::{bin, sample, shared};
use std::time::Duration;

fn cfg() -> WasmConfig {
    WasmConfig { timeout: Duration::from_secs(3), memory_bytes: 256 << 20, ..WasmConfig::default() }
}

/// A module with the ABI's `memory` and `alloc` (a bump allocator) around a `signal` body.
fn module(signal_body: &str) -> String {
    format!(
        r#"(module
  (memory (export "memory") 1)
  (global $next (mut i32) (i32.const 1024))
  (func (export "alloc") (param $bytes i32) (result i32)
    (local $at i32) (local $pages i32)
    (local.set $at (global.get $next))
    (global.set $next (i32.add (local.get $at) (local.get $bytes)))
    (local.set $pages (i32.sub (i32.shr_u (i32.add (global.get $next) (i32.const 65535)) (i32.const 16)) (memory.size)))
    (if (i32.gt_s (local.get $pages) (i32.const 0))
      (then (if (i32.eq (memory.grow (local.get $pages)) (i32.const -1)) (then unreachable))))
    (local.get $at))
  (func (export "signal") (param $nd i32) (param $na i32) (param $fields i32) (param $out i32) (result i32)
    (local $i i32) (local $cells i32)
    (local.set $cells (i32.mul (local.get $nd) (local.get $na)))
    {signal_body}))"#
    )
}

/// out[i] = close[i + shift] over every cell (reads `shift` cells ahead: the next day).
fn copy_close(shift: i32) -> String {
    module(&format!(
        r#"(block $done (loop $each
      (br_if $done (i32.ge_u (local.get $i) (i32.sub (local.get $cells) (i32.const {shift}))))
      (f64.store (i32.add (local.get $out) (i32.shl (local.get $i) (i32.const 3)))
        (f64.load (i32.add (i32.add (local.get $fields) (i32.mul (i32.const 24) (local.get $cells)))
          (i32.shl (i32.add (local.get $i) (i32.const {shift})) (i32.const 3)))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $each)))
    (i32.const 0)"#
    ))
}

/// The verdict's kind ("accepted" if none), and its message.
fn verdict(wat: &str) -> (String, String) {
    match WasmProgram::new(wat.as_bytes(), cfg()).and_then(|p| p.evaluate(sample())) {
        Ok(_) => ("accepted".into(), String::new()),
        Err(v) => (v.kind, v.message),
    }
}

#[test]
fn the_example_equals_the_expression_bit_for_bit() {
    let text = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/sandbox/wasm/examples/momentum.wat")).expect("example");
    let ev = WasmProgram::new(&text, cfg()).expect("compiles").evaluate(sample()).expect("accepted");
    assert!(ev.lookahead.is_clean());
    let want = alphaloop::expr::eval_expr("close / delay(close, 5) - 1", sample(), &alphaloop::expr::NoAlphas).expect("eval");
    let (got, want) = (ev.signal.to_asset_major(), want.to_asset_major());
    assert_eq!(got.len(), want.len());
    let same = got.iter().zip(want).filter(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())).count();
    assert_eq!(same, got.len(), "cells that differ: {}", got.len() - same);
    assert!(got.iter().filter(|v| v.is_finite()).count() > got.len() / 2);
}

#[test]
fn hostile_modules_get_their_verdicts() {
    let spin = module("(loop $forever (br $forever)) (i32.const 0)");
    let bomb = module("(loop $more (br_if $more (i32.ne (memory.grow (i32.const 1024)) (i32.const -1)))) (i32.const 0)");
    let wasi = r#"(module (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
        (memory (export "memory") 1) (func (export "alloc") (param i32) (result i32) (i32.const 0))
        (func (export "signal") (param i32 i32 i32 i32) (result i32) (i32.const 0)))"#;
    let out_of_bounds = module("(f64.store (i32.const -8) (f64.const 1)) (i32.const 0)");
    let writes_nothing = module("(i32.const 0)");
    let failing = module("(i32.const 7)");
    let cases: &[(&str, &str, String)] = &[
        ("spins forever", "timeout", spin),
        ("grows its memory without end", "memory", bomb),
        ("imports a WASI function", "forbidden: import", wasi.to_string()),
        ("writes outside its memory", "error", out_of_bounds),
        ("reads tomorrow's close", "lookahead", copy_close(1)),
        ("reports failure", "error", failing),
        ("lacks the exports", "error", "(module (memory (export \"memory\") 1))".to_string()),
        ("is not WebAssembly", "error", "print('hello')".to_string()),
    ];
    for (what, want, wat) in cases {
        let (kind, message) = verdict(wat);
        assert_eq!(kind, *want, "a module that {what}: {message}");
    }
    // Returning without writing leaves the fresh memory's zeros: finite, so accepted as a
    // (useless) constant signal; the value checks are for NaN and infinities.
    assert_eq!(verdict(&writes_nothing).0, "accepted");
    // Today's close is clean.
    assert_eq!(verdict(&copy_close(0)).0, "accepted");
}

#[test]
fn an_output_without_finite_values_is_invalid() {
    let nan = module(
        r#"(block $done (loop $each
      (br_if $done (i32.ge_u (local.get $i) (local.get $cells)))
      (f64.store (i32.add (local.get $out) (i32.shl (local.get $i) (i32.const 3))) (f64.const nan))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $each)))
    (i32.const 0)"#,
    );
    assert_eq!(verdict(&nan).0, "invalid output");
}

#[test]
fn eval_wasm_through_the_cli() {
    let data = shared("data/sp500_sample.parquet");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/sandbox/wasm/examples/momentum.wat");
    let out = bin().args(["eval", "--json", "--period", "all", "--data"]).arg(&data).args(["--wasm", example]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let expr = bin().args(["eval", "--json", "--period", "all", "--data"]).arg(&data).arg("close / delay(close, 5) - 1").output().expect("runs");
    let e: serde_json::Value = serde_json::from_slice(&expr.stdout).expect("json");
    assert_eq!(m["rank_ic"], e["rank_ic"]);
    assert_eq!(m["sharpe"], e["sharpe"]);

    let dir = tempfile::tempdir().expect("tmp");
    let bad = dir.path().join("bad.wat");
    std::fs::write(&bad, r#"(module (import "env" "now" (func)))"#).expect("write");
    let out = bin().args(["eval", "--json", "--period", "all", "--data"]).arg(&data).arg("--wasm").arg(&bad).output().expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["verdict"], "forbidden: import");

    // --timeout is for programs; with an expression it is an error, not silently ignored.
    let out = bin().args(["eval", "--timeout", "5", "--data"]).arg(&data).arg("close").output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--wasm"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `kb import` of a module's text: a record of kind `wasm` with the look-ahead verdict and
/// exactly the metrics of the expression it computes, imported beside it.
#[test]
fn kb_import_stores_a_module_with_the_expressions_metrics() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = dir.path().join("store");
    let cfg = common::sample_config(dir.path(), &shared("data/sp500_sample.parquet"), None);
    let kb = |args: &[&str]| common::kb_cli(&cfg, &store, args);
    let formula = dir.path().join("formula.toml");
    std::fs::write(&formula, "[[alpha]]\nid = \"momentum_expr\"\nformula = \"close / delay(close, 5) - 1\"\n").expect("write");
    kb(&["import", concat!(env!("CARGO_MANIFEST_DIR"), "/sandbox/wasm/examples/momentum.wat")]);
    kb(&["import", formula.to_str().expect("utf8")]);
    let show = |id: &str| -> serde_json::Value { serde_json::from_str(&kb(&["--json", "show", id])).expect("json") };
    let (w, e) = (show("momentum"), show("momentum_expr"));
    assert_eq!(w["kind"], "wasm");
    assert_eq!(w["status"]["state"], "accepted", "{w}");
    assert!(w["lookahead"].as_str().is_some_and(|l| l.starts_with("no look-ahead")), "{w}");
    assert!(w["metrics"]["valid"]["rank_ic"].is_number());
    assert_eq!(w["metrics"], e["metrics"]);
    assert!(w["metrics"].get("test").is_none(), "train and valid only");
    // The final report runs the module on test too, with the expression's numbers.
    let hold: serde_json::Value = serde_json::from_str(&kb(&["--json", "holdout"])).expect("json");
    let test_of = |id: &str| hold.as_array().expect("array").iter().find(|h| h["id"] == id).map(|h| h["test"].clone()).expect(id);
    assert!(test_of("momentum")["rank_ic"].is_number(), "{hold}");
    assert_eq!(test_of("momentum"), test_of("momentum_expr"));
}

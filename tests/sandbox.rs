//! The Python sandbox on the real sample data: the paper's factors give metrics; every
//! hostile program is stopped with its verdict and leaves the host untouched; the kernel
//! layer holds even with the audit hook disabled; a killed worker is replaced.

mod common;

use alphaloop::sandbox::{PySandbox, SandboxConfig};
use std::path::PathBuf;
use std::time::Duration;

fn sandbox(scratch: &std::path::Path) -> PySandbox {
    let cfg = SandboxConfig {
        timeout: Duration::from_secs(8),
        // Half the default address space: `memory_bomb` must reach the limit well inside
        // the 8 s timeout, and in this VM every fresh page costs a fault and a clearing
        // (4 GB of them took longer than 8 s on a busy hour, so the verdict read
        // "timeout"). The sample-data programs need far less.
        memory_bytes: 2 << 30,
        worker_exe: PathBuf::from(env!("CARGO_BIN_EXE_alphaloop")),
        scratch_root: scratch.to_path_buf(),
        ..SandboxConfig::default()
    };
    PySandbox::start(common::sample(), cfg).expect("sandbox starts")
}

fn program(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn paper_factors_run_and_score() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut sb = sandbox(tmp.path());
    let view = alphaloop::backtest::MiningView::new(common::sample(), &common::sample_splits(), Default::default()).expect("view");
    for (file, min_coverage) in [("sandbox/python/examples/volatility_breakout.py", 0.8), ("sandbox/python/examples/three_soldiers.py", 0.9)] {
        let ev = sb.evaluate(&program(file), None).unwrap_or_else(|v| panic!("{file}: {v}"));
        assert!(ev.lookahead.is_clean());
        assert_eq!(ev.signal.n_dates(), common::sample().n_dates());
        let m = view.train.score(&ev.signal.truncate_dates(view.data.n_dates()));
        assert!(m.coverage >= min_coverage, "{file}: coverage {}", m.coverage);
        assert!(m.rank_ic.is_finite() && m.n_days > 50, "{file}: {m:?}");
    }
    // The worker confined itself.
    assert_eq!(sb.confinement["seccomp"], true, "{}", sb.confinement);
    assert_eq!(sb.confinement["landlock"], "FullyEnforced", "{}", sb.confinement);
    assert_eq!(sb.workers_started, 1, "one worker served every request");
}

#[test]
fn python_signal_equals_the_same_expression() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut sb = sandbox(tmp.path());
    let code = "from alphaloop_factor import Factor\nclass F(Factor):\n    inputs = ['close']\n    def calc(self, data):\n        c = data['close']\n        return c / c.shift(5) - 1\n";
    let py = sb.evaluate(code, None).expect("runs").signal;
    let ex = alphaloop::expr::eval_expr("close / delay(close, 5) - 1", common::sample(), &alphaloop::seeds::AlphaSet::default()).expect("expr");
    let (a, b) = (py.to_asset_major(), ex.to_asset_major());
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-12 * y.abs().max(1.0), "{x} vs {y}");
    }
}

#[test]
fn numpy_and_polars_in_and_out() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut sb = sandbox(tmp.path());
    let np = "import numpy as np\nfrom alphaloop_factor import Factor\nclass F(Factor):\n    inputs = ['close']\n    input_type = 'numpy'\n    def calc(self, data):\n        c = data['close']\n        out = np.full_like(c, np.nan)\n        out[5:] = c[5:] / c[:-5] - 1\n        return out\n";
    let pl = "import polars as pl\nfrom alphaloop_factor import Factor\nclass F(Factor):\n    inputs = ['close']\n    input_type = 'polars'\n    def calc(self, data):\n        c = data['close']\n        syms = [s for s in c.columns if s != 'date']\n        return c.select([pl.col('date')] + [(pl.col(s) / pl.col(s).shift(5) - 1).alias(s) for s in syms])\n";
    let a = sb.evaluate(np, None).expect("numpy").signal;
    let b = sb.evaluate(pl, None).unwrap_or_else(|v| panic!("polars: {v}")).signal;
    let n = a.to_asset_major().iter().filter(|x| x.is_finite()).count();
    assert!(n > a.to_asset_major().len() / 2);
    for (x, y) in a.to_asset_major().iter().zip(b.to_asset_major().iter()) {
        assert!((x.is_nan() && y.is_nan()) || (x - y).abs() < 1e-12, "{x} vs {y}");
    }
}

#[test]
fn hostile_programs_are_stopped_and_the_host_is_untouched() {
    let tmp = tempfile::tempdir().expect("tmp");
    let victim = tmp.path().join("victim");
    std::fs::create_dir_all(&victim).expect("dir");
    std::fs::write(victim.join("keep.txt"), "keep").expect("victim");
    let mut sb = sandbox(&tmp.path().join("scratch"));
    let cases: &[(&str, &str)] = &[
        ("infinite_loop", "timeout"),
        ("memory_bomb", "memory"),
        ("fork_bomb", "forbidden: process"),
        ("socket", "forbidden: network"),
        ("read_passwd", "forbidden: file read"),
        ("read_repo", "forbidden: file read"),
        ("write_outside", "forbidden: file write"),
        ("os_system", "forbidden: process"),
        ("ctypes_libc", "forbidden: ctypes"),
        ("delete_files", "forbidden: file write"),
        // 400 times the panel (193 MB of zeros): refused by the worker's shape check, so
        // none of it reaches the host. Sized well inside the address-space limit: at
        // 2,500 times (1.2 GB) the verdict depended on how much room the worker's earlier
        // programs had left under the limit ("memory" once in four CI runs); running out
        // of memory is `memory_bomb`'s case.
        ("huge_output", "wrong shape"),
        ("nan_inf", "invalid output"),
        ("all_nan", "invalid output"),
        ("wrong_shape", "wrong shape"),
        ("peeks_tomorrow", "lookahead"),
        ("print_flood", "error"),
    ];
    for (name, want) in cases {
        let code = program(&format!("tests/data/hostile/{name}.py")).replace("/tmp/alphaloop_sandbox_victim", &victim.to_string_lossy());
        match sb.evaluate(&code, None) {
            Ok(_) => panic!("{name}: accepted"),
            Err(v) => assert_eq!(&v.kind, want, "{name}: {v}"),
        }
    }
    for f in ["/tmp/alphaloop_sandbox_escape.txt", "/tmp/alphaloop_sandbox_system.txt", "/tmp/alphaloop_sandbox_ctypes.txt"] {
        assert!(!std::path::Path::new(f).exists(), "{f} was written");
    }
    assert_eq!(std::fs::read_to_string(victim.join("keep.txt")).expect("victim survives"), "keep");
    // The timeout killed a worker and a new one took over; a good program still runs.
    assert!(sb.workers_started >= 2, "workers started: {}", sb.workers_started);
    let ok = sb.evaluate(&program("sandbox/python/examples/volatility_breakout.py"), None);
    assert!(ok.is_ok(), "{:?}", ok.err());
}

#[test]
fn kernel_layer_holds_without_the_audit_hook() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut sb = sandbox(tmp.path());
    let v = sb.evaluate(&program("tests/data/hostile/tamper_hook.py"), None).err().expect("rejected");
    assert_eq!(v.kind, "error", "{v}");
    for refused in ["read refused", "write refused", "socket refused", "fork refused"] {
        assert!(v.message.contains(refused), "{refused} missing: {}", v.message);
    }
    assert!(!std::path::Path::new("/tmp/alphaloop_sandbox_tamper.txt").exists());
}

#[test]
fn errors_come_back_trimmed_to_the_user_code() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut sb = sandbox(tmp.path());
    let v = sb.evaluate(&program("tests/data/hostile/syntax_error.py"), None).err().expect("rejected");
    assert_eq!(v.kind, "error");
    assert!(v.message.starts_with("factor.py line 5, in calc:"), "{}", v.message);
    assert!(v.message.contains("unknown field 'clsoe'"), "{}", v.message);
    assert!(!v.message.contains("alphaloop_worker"), "harness frames leak: {}", v.message);
    let v = sb.evaluate("from alphaloop_factor import Factor\nclass A(Factor): pass\nclass B(Factor): pass\n", None).err().expect("two classes");
    assert!(v.message.contains("exactly one Factor subclass (found: A, B)"), "{}", v.message);
}

#[test]
fn eval_python_cli() {
    let out = common::bin()
        .args(["eval", "--json", "--data"])
        .arg(common::shared("data/sp500_sample.parquet"))
        .args(["--python", "sandbox/python/examples/volatility_breakout.py"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    for k in ["ic", "rank_ic", "icir", "sharpe", "turnover", "coverage", "n_days"] {
        assert!(v.get(k).is_some(), "missing {k}: {v}");
    }
    let out = common::bin()
        .args(["eval", "--data"])
        .arg(common::shared("data/sp500_sample.parquet"))
        .args(["--python", "tests/data/hostile/peeks_tomorrow.py"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rejected: lookahead"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn python_factors_are_stored_in_the_kb() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cfg = common::sample_config(tmp.path(), &common::shared("data/sp500_sample.parquet"), None);
    let store = tmp.path().join("kb");
    let kb = |args: &[&str]| {
        let out = common::bin()
            .arg("--config")
            .arg(&cfg)
            .args(["kb", "--json", "--kb"])
            .arg(&store)
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("runs");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    kb(&["import", "sandbox/python/examples/volatility_breakout.py"]);
    kb(&["import", "tests/data/hostile/peeks_tomorrow.py"]);
    let good: serde_json::Value = serde_json::from_str(&kb(&["show", "volatility_breakout"])).expect("json");
    assert_eq!(good["kind"], "python", "{good}");
    assert_eq!(good["status"]["state"], "accepted", "{good}");
    assert!(good["metrics"]["train"]["rank_ic"].is_number() && good["metrics"]["valid"]["rank_ic"].is_number(), "{good}");
    assert!(good["metrics"].get("test").is_none());
    assert!(good["lookahead"].as_str().is_some_and(|l| l.starts_with("no look-ahead")), "{good}");
    let bad: serde_json::Value = serde_json::from_str(&kb(&["show", "peeks_tomorrow"])).expect("json");
    assert_eq!(bad["status"]["state"], "error", "{bad}");
    assert!(bad["lookahead"].as_str().is_some_and(|l| l.starts_with("lookahead:")), "{bad}");
    // The final report runs the accepted factor on test in the sandbox; the refused one
    // is not in it.
    let hold: serde_json::Value = serde_json::from_str(&kb(&["holdout"])).expect("json");
    let hold = hold.as_array().expect("array");
    assert_eq!(hold.len(), 1, "{hold:?}");
    assert_eq!(hold[0]["id"], "volatility_breakout");
    assert!(hold[0]["test"]["rank_ic"].as_f64().is_some_and(f64::is_finite) && hold[0]["error"].is_null(), "{hold:?}");
}

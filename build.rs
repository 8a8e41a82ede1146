//! Link settings that must not live in RUSTFLAGS (a RUSTFLAGS variable would replace the
//! `[build] rustflags` the embedded Qdrant engine needs, see .cargo/config.toml).
//!
//! XGBoost: the library comes from the PyPI wheel unpacked by `scripts/setup` into
//! `$XGBOOST_LIB_DIR`; an rpath to that directory lets the binary, tests and benches find
//! it at run time without LD_LIBRARY_PATH.
//!
//! Python (the sandbox worker embeds CPython through pyo3): an rpath to the `LIBDIR` of
//! the interpreter pyo3 built against (`python3` on PATH, or `PYO3_PYTHON`). Without it the
//! loader may pick another libpython of the same version (Debian's, which has no numpy).
fn main() {
    println!("cargo:rerun-if-env-changed=XGBOOST_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");
    println!("cargo:rerun-if-changed=build.rs");
    match std::env::var("XGBOOST_LIB_DIR") {
        Ok(dir) if !dir.is_empty() => println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}"),
        _ => println!(
            "cargo:warning=XGBOOST_LIB_DIR is not set: run scripts/setup and build through scripts/run or scripts/test \
             (or `. scripts/env.sh` first)"
        ),
    }
    let py = pyo3_build_config::get();
    match py.lib_dir() {
        Some(dir) => println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}"),
        None => println!("cargo:warning=pyo3 found no LIBDIR for {:?}: the sandbox worker may load another libpython", py.executable()),
    }
    // The same interpreter's home, so the embedded one finds its own site-packages (numpy,
    // pandas) whatever the worker's executable path is.
    let home = py.executable().and_then(|exe| {
        let out = std::process::Command::new(exe).args(["-c", "import sys; print(sys.base_prefix)"]).output().ok()?;
        Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
    });
    println!("cargo:rustc-env=ALPHALOOP_PYTHON_HOME={}", home.unwrap_or_default());
}

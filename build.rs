//! Link settings that must not live in RUSTFLAGS (a RUSTFLAGS variable would replace the
//! `[build] rustflags` the embedded Qdrant engine needs, see .cargo/config.toml).
//!
//! XGBoost: the library comes from the PyPI wheel unpacked by `scripts/setup` into
//! `$XGBOOST_LIB_DIR`; an rpath to that directory lets the binary, tests and benches find
//! it at run time without LD_LIBRARY_PATH.
fn main() {
    println!("cargo:rerun-if-env-changed=XGBOOST_LIB_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    match std::env::var("XGBOOST_LIB_DIR") {
        Ok(dir) if !dir.is_empty() => println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}"),
        _ => println!(
            "cargo:warning=XGBOOST_LIB_DIR is not set: run scripts/setup and build through scripts/run or scripts/test \
             (or `. scripts/env.sh` first)"
        ),
    }
}

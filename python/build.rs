//! XGBoost's C library comes from the PyPI wheel `scripts/setup` unpacks into
//! `$XGBOOST_LIB_DIR`: an rpath to it lets the extension module find it when Python loads
//! it (the main crate's build script sets the same for its own binaries only).
fn main() {
    println!("cargo:rerun-if-env-changed=XGBOOST_LIB_DIR");
    match std::env::var("XGBOOST_LIB_DIR") {
        Ok(dir) if !dir.is_empty() => println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}"),
        _ => println!("cargo:warning=XGBOOST_LIB_DIR is not set: run scripts/setup and `. scripts/env.sh` first"),
    }
}

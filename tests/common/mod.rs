//! Shared test helpers: the real data shipped in ../shared/data.
#![allow(dead_code)]

use alphaloop::data::{load, LoadOptions, MarketData};
use std::path::PathBuf;
use std::sync::OnceLock;

pub fn shared(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared").join(rel)
}

/// `sp500_sample.parquet` (60 stocks, 2015-2018), loaded once per test binary.
pub fn sample() -> &'static MarketData {
    static DATA: OnceLock<MarketData> = OnceLock::new();
    DATA.get_or_init(|| load(&shared("data/sp500_sample.parquet"), &LoadOptions::default()).expect("sample data loads"))
}

/// The alphaloop binary built for this test run.
pub fn bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_alphaloop"))
}

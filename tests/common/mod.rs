//! Shared test helpers: the real data shipped in ../shared/data.
#![allow(dead_code)]

pub mod qdrant;

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

/// The alphaloop binary built for this test run, on the small local model (the tests'
/// recorded replies are its; the larger default would only be slower).
pub fn bin() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_alphaloop"));
    c.env("ALPHALOOP_MODEL", "small");
    c
}

/// Splits that fit the sample (2015–2018): train 2015–16, valid 2017, test 2018.
pub fn sample_splits() -> alphaloop::data::Splits {
    let d = |s: &str| s.parse().expect("date");
    alphaloop::data::Splits {
        train: (d("2015-01-01"), d("2016-12-31")),
        valid: (d("2017-01-01"), d("2017-12-31")),
        test: (d("2018-01-01"), d("2018-12-31")),
    }
}

/// Writes `dir/alphaloop.toml` with `data`, the sample splits and optionally a KB.
pub fn sample_config(dir: &std::path::Path, data: &std::path::Path, kb: Option<&std::path::Path>) -> PathBuf {
    let p = dir.join("alphaloop.toml");
    let kb = kb.map(|k| format!("kb = {k:?}\n")).unwrap_or_default();
    std::fs::write(
        &p,
        format!("data = {data:?}\n{kb}[splits]\ntrain = [\"2015-01-01\", \"2016-12-31\"]\nvalid = [\"2017-01-01\", \"2017-12-31\"]\ntest = [\"2018-01-01\", \"2018-12-31\"]\n"),
    )
    .expect("config written");
    p
}

/// `alphaloop --config CFG kb --kb STORE ARGS...`: asserts that it succeeds, returns stdout.
pub fn kb_cli(cfg: &std::path::Path, store: &std::path::Path, args: &[&str]) -> String {
    let out = bin().arg("--config").arg(cfg).arg("kb").arg("--kb").arg(store).args(args).output().expect("runs");
    assert!(out.status.success(), "kb {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The sample with every date moved `days` on, written as Parquet into `dir`: real prices
/// of another era (e.g. 2922 days: 2023-2026, wholly outside the default splits).
pub fn moved_sample(dir: &std::path::Path, days: i32) -> PathBuf {
    use polars::prelude::*;
    let mut df = ParquetReader::new(std::fs::File::open(shared("data/sp500_sample.parquet")).expect("open")).finish().expect("read");
    let d = df.column("date").expect("date").cast(&DataType::Int32).expect("days");
    let moved = (d.as_materialized_series() + days).cast(&DataType::Date).expect("dates");
    df.with_column(Column::from(moved.with_name("date".into()))).expect("replace");
    let path = dir.join("moved.parquet");
    ParquetWriter::new(std::fs::File::create(&path).expect("create")).finish(&mut df).expect("write");
    path
}

/// The sample with gaps punched in: every `every`-th (date, symbol) row left out, written
/// as Parquet into `dir`. Real prices with the missing days a real file has (a stock's
/// signal is then finite on dates whose label is not).
pub fn gapped_sample(dir: &std::path::Path, every: usize) -> PathBuf {
    use polars::prelude::*;
    let df = ParquetReader::new(std::fs::File::open(shared("data/sp500_sample.parquet")).expect("open")).finish().expect("read");
    let keep: BooleanChunked = (0..df.height()).map(|i| i % every != every / 2).collect();
    let mut df = df.filter(&keep).expect("filter");
    let path = dir.join("gapped.parquet");
    ParquetWriter::new(std::fs::File::create(&path).expect("create")).finish(&mut df).expect("write");
    path
}

//! A corpus of broken inputs (`tests/data/broken/`, plus files too large or too binary to
//! keep there, built from the sample here): data files, config files, alpha files and KB
//! exports. Each gets its own named error (the file, and the row, column or key) and exit
//! code 2 from the command that reads it, never a panic; a KB import that fails part-way
//! leaves the KB exactly as it was.

mod common;

use std::path::{Path, PathBuf};

fn broken(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/broken").join(name)
}

/// Runs alphaloop from `dir` (so no config of the repository's is read) and returns its
/// exit code and stderr.
fn run(dir: &Path, args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    let out = common::bin().current_dir(dir).env_remove("ALPHALOOP_CONFIG").env_remove("ALPHALOOP_DATA").env_remove("ALPHALOOP_KB").args(args).output().expect("runs");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned(), String::from_utf8_lossy(&out.stdout).into_owned())
}

fn refused(dir: &Path, args: &[&std::ffi::OsStr], want: &[&str]) {
    let (code, err, _) = run(dir, args);
    assert_eq!(code, Some(2), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    for w in want {
        assert!(err.contains(w), "{args:?}: the error lacks '{w}':\n{err}");
    }
}

/// `data info FILE` on each broken data file: the file named, and where in it.
#[test]
fn broken_data_files_get_named_errors() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let cases: &[(&str, &[&str])] = &[
        ("ragged_row.csv", &["ragged_row.csv: cannot read: row 2 (line 3) has 9 fields, the header has 8"]),
        ("mixed_date_order.csv", &["mixed_date_order.csv: column 'date', row 3", "day-first (row 1) and month-first (row 3)"]),
        ("duplicate_pair.csv", &["duplicate_pair.csv: duplicate row for date 2015-01-02 and symbol 'AAA' (rows 1 and 3)"]),
        ("text_price.csv", &["text_price.csv: column 'close', row 2: 'ten' is not a number"]),
        ("negative_volume.csv", &["negative_volume.csv: column 'volume', row 2: -300 is negative"]),
        ("negative_price.csv", &["negative_price.csv: column 'close', row 2: -4 is negative"]),
        ("empty.csv", &["empty.csv: the file has no rows"]),
        ("header_only.csv", &["header_only.csv: the file has no rows"]),
    ];
    for (file, want) in cases {
        refused(d, &["data".as_ref(), "info".as_ref(), broken(file).as_os_str()], want);
    }

    // 10^5 columns: refused from the header, before anything is parsed.
    let wide = d.join("wide.csv");
    let mut text = String::from("date,symbol,open,high,low,close,adj_close,volume");
    for i in 0..100_000 {
        text.push_str(&format!(",x{i}"));
    }
    text.push_str("\n2015-01-02,AAA,1,1,1,1,1,1");
    text.push_str(&",0".repeat(100_000));
    text.push('\n');
    std::fs::write(&wide, text).expect("write");
    refused(d, &["data".as_ref(), "info".as_ref(), wide.as_os_str()], &["wide.csv: cannot read: 100008 columns, more than the 1000"]);

    // Parquet: a file cut short, and one whose first string declares 2 GB of text.
    let part = d.join("part.parquet");
    {
        use polars::prelude::*;
        let file = std::fs::File::open(common::shared("data/sp500_sample.parquet")).expect("open");
        let mut df = ParquetReader::new(file).finish().expect("read").head(Some(200));
        let out = std::fs::File::create(&part).expect("create");
        ParquetWriter::new(out).with_compression(ParquetCompression::Uncompressed).finish(&mut df).expect("write");
    }
    let bytes = std::fs::read(&part).expect("read");
    let truncated = d.join("truncated.parquet");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("write");
    refused(d, &["data".as_ref(), "info".as_ref(), truncated.as_os_str()], &["truncated.parquet: cannot read"]);
    // The first symbol's length prefix (a 4-byte little-endian count before its bytes,
    // as Parquet's plain encoding stores each string) set to 2^31 - 1.
    let sym = common::sample().symbols.iter().find(|s| s.len() >= 3).expect("a symbol").as_bytes().to_vec();
    let mut prefixed = (sym.len() as u32).to_le_bytes().to_vec();
    prefixed.extend_from_slice(&sym);
    let at = bytes.windows(prefixed.len()).position(|w| w == prefixed.as_slice()).expect("a plain-encoded symbol in the file");
    let mut huge = bytes.clone();
    huge[at..at + 4].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    let huge_file = d.join("huge_string.parquet");
    std::fs::write(&huge_file, huge).expect("write");
    refused(d, &["data".as_ref(), "info".as_ref(), huge_file.as_os_str()], &["huge_string.parquet: cannot read"]);

    // A byte-order mark, as spreadsheets write one, is not a fault: the file loads.
    let (code, err, out) = run(d, &["data".as_ref(), "info".as_ref(), "--json".as_ref(), broken("bom.csv").as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!((v["n_assets"].as_u64(), v["n_dates"].as_u64()), (Some(2), Some(2)), "{v}");
}

/// Config files: an unknown key (a typo) and a value of the wrong type are named with
/// their line; a key given twice too.
#[test]
fn broken_config_files_get_named_errors() {
    let dir = tempfile::tempdir().expect("tmp");
    let cases: &[(&str, &[&str])] = &[
        ("config_unknown_key.toml", &["config_unknown_key.toml: invalid config", "line 2", "unknown field `cost_bsp`"]),
        ("config_wrong_type.toml", &["config_wrong_type.toml: invalid config", "line 1", "cost_bps"]),
        ("config_duplicate_key.toml", &["config_duplicate_key.toml: invalid config", "line 3", "duplicate key"]),
    ];
    for (file, want) in cases {
        refused(dir.path(), &["--config".as_ref(), broken(file).as_os_str(), "ops".as_ref()], want);
    }
}

/// KB exports with a record missing a field, or from a newer alphaloop: the import is
/// refused whole, naming the record, and the KB is exactly as it was.
#[test]
fn broken_kb_exports_are_refused_whole() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let cfg = common::sample_config(d, &common::shared("data/sp500_sample.parquet"), None);
    let store = d.join("kb");
    common::kb_cli(&cfg, &store, &["import", "alpha_kb/seeds/alpha101.toml"]);
    let export = || common::kb_cli(&cfg, &store, &["--json", "export"]);
    let before = export();
    let cases: &[(&str, &[&str])] = &[
        ("kb_missing_field.json", &["kb_missing_field.json: record #2", "missing field `code`"]),
        ("kb_future_schema.json", &["kb_future_schema.json: record 'from_the_future' has schema 99, newer than this alphaloop (1)"]),
        ("alphas_missing_formula.toml", &["alphas_missing_formula.toml", "formula"]),
    ];
    for (file, want) in cases {
        let file_path = broken(file);
        let args = ["--config".as_ref(), cfg.as_os_str(), "kb".as_ref(), "--kb".as_ref(), store.as_os_str(), "import".as_ref(), file_path.as_os_str()];
        refused(Path::new(env!("CARGO_MANIFEST_DIR")), &args, want);
        assert_eq!(export(), before, "a refused import of {file} changed the KB");
    }
}

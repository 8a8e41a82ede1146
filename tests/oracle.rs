//! alphaloop against an independent implementation of conventions.md
//! (`tests/oracle/conventions.py`: numpy and pandas, written from the conventions and the
//! documented choices, never from this crate's code), on the real sample data, through the
//! CLI a user runs:
//! * every operator of the catalogue, cell by cell (NaN pattern exactly, values to 1e-9),
//!   also `alpha:ID` inputs and groups from a user's `symbol,group` file;
//! * every metric of four signals over the whole sample and over a START:END period, and
//!   of two of them with other label horizons, gaps and costs;
//! * all 100 evaluable alpha101 formulas, whole: each equal in every cell, or, where it is
//!   not, the difference must start at a rank, time-series rank, arg-extreme, sign,
//!   comparison or correlation whose inputs agree (values that tie in exact arithmetic,
//!   split by last-bit noise that two correct implementations round differently).

use std::path::Path;
use std::process::Command;

#[test]
fn alphaloop_agrees_with_an_independent_implementation_of_the_conventions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = root.join("../shared/data/sp500_sample.parquet");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .arg(root.join("tests/oracle/conventions.py"))
        .arg("--alphaloop")
        .arg(env!("CARGO_BIN_EXE_alphaloop"))
        .arg("--data")
        .arg(&data)
        .output()
        .unwrap_or_else(|e| panic!("running {python} (numpy, pandas and polars; scripts/setup installs them): {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "the oracle found differences:\n{stdout}\n{stderr}");
    // What was compared, so that a run that silently compared nothing cannot pass.
    let count = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or_else(|| panic!("no '{prefix}' line in:\n{stdout}"))
    };
    assert!(count("operators: ") >= 72, "{stdout}");
    assert_eq!(count("metrics: "), 14, "{stdout}");
    assert_eq!(count("formulas: "), 100, "{stdout}");
    // Measured: 80 of the 100 agree in every cell (79 when short correlations were
    // running sums, whose last bits depend on the history); the rest differ only at exact ties.
    assert!(count("FORMULAS_EQUAL ") >= 80, "{stdout}");
}

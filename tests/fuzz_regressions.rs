//! Every input a fuzz run found wanting (`tests/fuzz-regressions/TARGET/`) and the inputs
//! the fuzzers start from (the broken-input corpus, the Parquet seeds, the published
//! formulas), replayed through the fuzz targets' own checks in the ordinary test build;
//! `scripts/fuzz` runs the fuzzers themselves.

#[path = "../fuzz/fuzz_targets/checks.rs"]
mod checks;

use std::path::Path;

fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir).map(|d| d.filter_map(|e| Some(e.ok()?.path())).filter(|p| p.is_file()).collect()).unwrap_or_default();
    v.sort();
    v
}

#[test]
fn recorded_fuzz_inputs_and_seeds_pass_their_targets_checks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    let mut run = |target: &str, path: &Path| {
        let bytes = std::fs::read(path).expect("read");
        eprintln!("{target}: {}", path.display());
        checks::by_name(target)(&bytes);
        checked += 1;
    };
    for target in ["expr", "csv", "parquet", "config", "kb_import", "replies"] {
        for f in files(&root.join("tests/fuzz-regressions").join(target)) {
            run(target, &f);
        }
    }
    for f in files(&root.join("tests/data/broken")) {
        let target = match f.extension().and_then(|e| e.to_str()) {
            Some("csv") => "csv",
            Some("toml") => "config",
            Some("json") => "kb_import",
            Some("parquet") => "parquet",
            _ => continue,
        };
        run(target, &f);
    }
    for f in files(&root.join("fuzz/seeds/parquet")) {
        run("parquet", &f);
    }
    let seeds = std::fs::read_to_string(root.join("alpha_kb/seeds/alpha101.toml")).expect("seeds");
    for line in seeds.lines().filter_map(|l| l.trim().strip_prefix("formula = ")) {
        checks::expr(line.trim_matches('"').as_bytes());
        checked += 1;
    }
    assert!(checked > 110, "{checked} inputs checked");
}

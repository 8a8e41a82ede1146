//! What each fuzz target checks of one input, shared with `tests/fuzz_regressions.rs`,
//! which replays every input a fuzz run ever found wanting (and the seed corpora) through
//! the same checks in the ordinary test build.
#![allow(dead_code)]

use alphaloop::data::{load, LoadOptions, MarketData};
use alphaloop::expr::{eval_expr, parse, NoAlphas};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `../shared` beside the checkout, found from the fuzz crate or the main one.
fn shared(rel: &str) -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let up = if here.ends_with("fuzz") { here.join("../..") } else { here.join("..") };
    up.join("shared").join(rel)
}

/// The sample's first 40 dates: enough for every window to be exercised, small enough
/// that an evaluation takes well under a millisecond.
fn data() -> &'static MarketData {
    static D: OnceLock<MarketData> = OnceLock::new();
    D.get_or_init(|| load(&shared("data/sp500_sample.parquet"), &LoadOptions::default()).expect("the sample loads").truncate_dates(40))
}

/// A file of this process's own for inputs that are read from a path.
fn scratch(ext: &str, bytes: &[u8]) -> PathBuf {
    let path = std::env::temp_dir().join(format!("alphaloop-fuzz-{}-{:?}.{ext}", std::process::id(), std::thread::current().id()).replace(['(', ')'], ""));
    std::fs::write(&path, bytes).expect("write the input");
    path
}

/// Any text as an alpha expression: parsing never panics; an error points inside the
/// text; a parsed expression prints as one that parses to the same tree (printing is a
/// fixed point); one that compiles evaluates on a slice of the sample to a panel of its
/// shape.
pub fn expr(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else { return };
    match parse(text) {
        Ok(tree) => {
            let printed = tree.to_string();
            let again = parse(&printed).unwrap_or_else(|e| panic!("{text:?} prints as {printed:?}, which does not parse: {}", e.render()));
            assert_eq!(again.to_string(), printed, "{text:?}: printing it again changes it");
            if let Ok(signal) = eval_expr(text, data(), &NoAlphas) {
                assert_eq!((signal.n_dates(), signal.n_assets()), (data().n_dates(), data().n_assets()), "{text:?}");
            }
        }
        Err(e) => {
            let chars = text.chars().count();
            assert!(e.pos >= 1 && e.pos <= chars + 1, "{text:?}: error at {} of {chars} characters: {}", e.pos, e.msg);
        }
    }
}

/// Any bytes as a data file (`ext`: csv or parquet): loading never panics, a refusal names
/// the file, and a loaded file's panels all have its dates × symbols shape with sorted,
/// distinct dates.
pub fn data_file(ext: &str, bytes: &[u8]) {
    let path = scratch(ext, bytes);
    match load(&path, &LoadOptions::default()) {
        Ok(d) => {
            assert!(d.n_dates() >= 1 && d.n_assets() >= 1);
            assert!(d.dates.windows(2).all(|w| w[0] < w[1]), "dates sorted and distinct");
            for (name, p) in &d.fields {
                assert_eq!((p.n_dates(), p.n_assets()), (d.n_dates(), d.n_assets()), "field {name}");
            }
        }
        Err(e) => assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}"),
    }
}

/// Any text as `alphaloop.toml` and as an alpha file: reading never panics, and a refusal
/// names the file.
pub fn config(bytes: &[u8]) {
    let path = scratch("toml", bytes);
    let name = path.to_string_lossy().into_owned();
    if let Err(e) = alphaloop::cli::Config::load(Some(&path)) {
        assert!(format!("{e:#}").contains(&name), "{e:#}");
    }
    match alphaloop::seeds::load(&path) {
        Ok(defs) => assert!(defs.iter().all(|d| !d.id.is_empty())),
        Err(e) => assert!(e.to_string().contains(&name), "{e}"),
    }
}

/// Any bytes as a KB export (`kb export --format json`): reading never panics; a refusal
/// names the file; every record read has a schema this alphaloop knows.
pub fn kb_import(bytes: &[u8]) {
    let path = scratch("json", bytes);
    match alphaloop::kb::io::read_json_export(&path) {
        Ok(recs) => assert!(recs.iter().all(|r| r.schema <= alphaloop::kb::record::SCHEMA_VERSION)),
        Err(e) => assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}"),
    }
}

/// Any text as an LLM reply: the extractors never panic; an extracted expression either
/// parses or is the whole reply (nothing in it parsed); a review's score is within 0–10;
/// the `USES:` line yields only ids the prompt labelled, each once.
pub fn replies(bytes: &[u8]) {
    use alphaloop::agent::writer::Labels;
    use alphaloop::agent::{extract_expression, extract_python, parse_review};
    let Ok(reply) = std::str::from_utf8(bytes) else { return };
    let e = extract_expression(reply);
    assert!(parse(&e).is_ok() || e == reply.trim(), "{reply:?} gave {e:?}");
    let _ = extract_python(reply);
    let (score, _) = parse_review(reply);
    assert!((0.0..=10.0).contains(&score), "{reply:?}: score {score}");
    let labels = Labels { alphas: vec![("A1".into(), "run-0001".into())], failures: vec![("F1".into(), "run-0002".into())] };
    let cited = labels.cited(reply);
    assert!(cited.iter().all(|c| c == "run-0001" || c == "run-0002") && cited.len() <= 2, "{reply:?}: {cited:?}");
}

/// The check of a target by its name.
pub fn by_name(target: &str) -> fn(&[u8]) {
    match target {
        "expr" => expr,
        "csv" => |b| data_file("csv", b),
        "parquet" => |b| data_file("parquet", b),
        "config" => config,
        "kb_import" => kb_import,
        "replies" => replies,
        other => panic!("no fuzz target '{other}'"),
    }
}

//! Getting records into and out of the knowledge base: evaluating a file of formulas (seed
//! alphas) into records with metrics, reading another team's export, and writing exports.

use super::record::{AlphaRecord, Kind, Status, METRIC_NAMES};
use super::{BehaviourSample, Kb, KbError};
use crate::backtest::MiningView;
use crate::expr::{evaluate, AlphaResolver, Chain, Compiler, Schema};
use crate::seeds::{AlphaDef, AlphaSet};
use std::path::Path;

/// Records written per store call (one embedding batch, one WAL entry).
const BATCH: usize = 32;

/// Evaluates formulas on train and valid and returns records (accepted with metrics, or
/// `error` with the message for formulas that do not compile), each with its behaviour
/// vector. Signals are evaluated in one shared graph and dropped as soon as they are scored.
/// `alpha:ID` names one of `defs`, else what `others` resolves (the seeds, the KB).
pub fn evaluate_defs(
    defs: &[AlphaDef],
    others: &dyn AlphaResolver,
    view: &MiningView,
    sample: &BehaviourSample,
    family: &str,
    mut progress: impl FnMut(usize),
) -> Vec<(AlphaRecord, Option<Vec<f32>>)> {
    let own = AlphaSet::from_defs(defs);
    let resolver = Chain(vec![&own, others]);
    let mut c = Compiler::new(Schema::of(&view.data), &resolver);
    let mut out: Vec<(AlphaRecord, Option<Vec<f32>>)> = Vec::with_capacity(defs.len());
    let mut roots = Vec::new();
    let mut root_rec = Vec::new();
    for d in defs {
        let mut r = AlphaRecord::new(&d.id, Kind::Expression, &d.formula, Status::Accepted);
        r.name = d.name.clone().unwrap_or_default();
        r.idea = d.idea.clone().unwrap_or_default();
        r.family = d.family.clone().unwrap_or_else(|| family.to_string());
        if let Some(s) = &d.source {
            r.tags.push(format!("source:{s}"));
        }
        match c.add(&d.formula) {
            Ok(root) => {
                roots.push(root);
                root_rec.push(out.len());
            }
            Err(e) => r.status = Status::Error { message: e.to_string() },
        }
        out.push((r, None));
    }
    let mut done = 0;
    evaluate(&c.graph, &roots, &view.data, |i, signal| {
        let (rec, beh) = &mut out[root_rec[i]];
        rec.metrics = view.score(&signal);
        (rec.horizon, rec.gap) = view.label();
        *beh = sample.vector(&view.data, &signal);
        done += 1;
        progress(done);
    });
    out
}

/// Evaluates a sandboxed program (a Python factor or a WebAssembly module) on the mining
/// data (train and valid; the test period is not in it) and returns its record: accepted
/// with metrics, behaviour and the look-ahead verdict, or `error` with the sandbox's
/// verdict (kept: the KB holds failures too). `run` gives the program's signal after its
/// look-ahead check, or the verdict that refused it.
#[allow(clippy::too_many_arguments)]
pub fn evaluate_program(
    id: &str,
    kind: Kind,
    name: &str,
    code: &str,
    view: &MiningView,
    sample: &BehaviourSample,
    family: &str,
    run: impl FnOnce(&crate::data::MarketData) -> Result<crate::sandbox::Evaluated, crate::sandbox::Verdict>,
) -> (AlphaRecord, Option<Vec<f32>>) {
    let mut r = AlphaRecord::new(id, kind, code, Status::Accepted);
    r.family = family.to_string();
    r.name = name.to_string();
    match run(&view.data) {
        Ok(ev) => {
            r.metrics = view.score(&ev.signal);
            (r.horizon, r.gap) = view.label();
            r.lookahead = Some(ev.lookahead.to_string());
            let beh = sample.vector(&view.data, &ev.signal);
            (r, beh)
        }
        Err(v) => {
            if v.kind == "lookahead" {
                r.lookahead = Some(v.message.clone());
            }
            r.status = Status::Error { message: v.to_string() };
            (r, None)
        }
    }
}

/// [`evaluate_program`] for a Python factor, in a fresh sandbox.
pub fn evaluate_python(
    id: &str,
    code: &str,
    class: Option<&str>,
    view: &MiningView,
    sample: &BehaviourSample,
    family: &str,
    cfg: crate::sandbox::SandboxConfig,
) -> (AlphaRecord, Option<Vec<f32>>) {
    evaluate_program(id, Kind::Python, class.unwrap_or(id), code, view, sample, family, |data| {
        crate::sandbox::PySandbox::start(data, cfg)
            .map_err(|e| crate::sandbox::Verdict::new("sandbox", e.to_string()))
            .and_then(|mut sb| sb.evaluate(code, class))
    })
}

/// Writes records in batches; `on_stored` is called after each batch is durable.
pub fn store_all(
    kb: &Kb,
    items: Vec<(AlphaRecord, Option<Vec<f32>>)>,
    mut on_stored: impl FnMut(&[AlphaRecord]),
) -> Result<usize, KbError> {
    let mut n = 0;
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        let chunk: Vec<_> = items.by_ref().take(BATCH).collect();
        let recs: Vec<AlphaRecord> = chunk.iter().map(|(r, _)| r.clone()).collect();
        kb.put(chunk)?;
        n += recs.len();
        on_stored(&recs);
    }
    Ok(n)
}

/// Reads an export written by `kb export --format json` (an array of records).
pub fn read_json_export(path: &Path) -> Result<Vec<AlphaRecord>, KbError> {
    let text = std::fs::read_to_string(path).map_err(|e| KbError::Io { path: path.to_path_buf(), err: e })?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| KbError::Invalid(format!("{}: not JSON: {e}", path.display())))?;
    let arr = v
        .as_array()
        .ok_or_else(|| KbError::Invalid(format!("{}: expected a JSON array of records", path.display())))?;
    arr.iter()
        .enumerate()
        .map(|(i, r)| {
            serde_json::from_value::<AlphaRecord>(r.clone())
                .map_err(|e| KbError::Invalid(format!("{}: record #{}: {e}", path.display(), i + 1)))
                .and_then(|rec| {
                    if rec.schema > super::record::SCHEMA_VERSION {
                        Err(KbError::Invalid(format!(
                            "{}: record '{}' has schema {}, newer than this alphaloop ({})",
                            path.display(),
                            rec.id,
                            rec.schema,
                            super::record::SCHEMA_VERSION
                        )))
                    } else {
                        Ok(rec)
                    }
                })
        })
        .collect()
}

/// Export formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Json,
    Csv,
    Parquet,
    /// The expressions as an alpha file (`[[alpha]]` id, formula), which `eval --file`,
    /// `eval --alphas` (for `alpha:ID`) and `kb import` read: mined alphas taken to other
    /// data or another KB.
    Toml,
}

impl Format {
    /// The format a file's name says (`.json`, `.csv`, `.parquet` or `.pq`, `.toml`, any
    /// case).
    pub fn of_name(path: &Path) -> Option<Format> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "json" => Some(Format::Json),
            "csv" => Some(Format::Csv),
            "parquet" | "pq" => Some(Format::Parquet),
            "toml" => Some(Format::Toml),
            _ => None,
        }
    }
}

/// Flat columns of an export table: one row per record.
pub fn table_columns() -> Vec<String> {
    let mut cols: Vec<String> = [
        "id", "kind", "status", "reason", "family", "generation", "name", "code", "idea", "hypothesis", "parents", "lessons",
        "run_id", "model", "tokens", "cost_usd", "created_at",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for split in ["train", "valid"] {
        for m in METRIC_NAMES {
            cols.push(format!("{split}_{m}"));
        }
    }
    cols
}

/// The expression records as an alpha file (programs have no formula and are left out),
/// each with where it came from and how it did on valid.
pub fn alpha_file(records: &[AlphaRecord]) -> Result<String, KbError> {
    let defs: Vec<AlphaDef> = records
        .iter()
        .filter(|r| r.kind == Kind::Expression)
        .map(|r| {
            let mut source = format!("alphaloop knowledge base: {}, family {}", r.status.keyword(), r.family);
            if !r.run_id.is_empty() {
                source += &format!(", run {}", r.run_id);
            }
            if let Some(v) = r.metric("valid", "rank_ic") {
                source += &format!(", valid Rank IC {v:.4}");
            }
            let text = |t: &str| Some(t.to_string()).filter(|t| !t.is_empty());
            AlphaDef { id: r.id.clone(), formula: r.code.clone(), name: text(&r.name), idea: text(&r.hypothesis).or(text(&r.idea)), source: Some(source), family: text(&r.family) }
        })
        .collect();
    let body = crate::seeds::to_toml(&defs).map_err(|e| KbError::Invalid(format!("cannot write the alpha file: {e}")))?;
    Ok(format!("# {} alphas exported from an alphaloop knowledge base (`alphaloop eval --file` reads this file)\n\n{body}", defs.len()))
}

/// Writes records: JSON (full records, re-importable), a flat table (CSV, Parquet) or the
/// expressions as an alpha file (TOML).
pub fn write_export(records: &[AlphaRecord], format: Format, path: &Path) -> Result<(), KbError> {
    let io = |e| KbError::Io { path: path.to_path_buf(), err: e };
    let invalid = |e: &dyn std::fmt::Display| KbError::Invalid(format!("{}: {e}", path.display()));
    match format {
        Format::Toml => std::fs::write(path, alpha_file(records)?).map_err(io),
        Format::Json => {
            let f = std::fs::File::create(path).map_err(io)?;
            serde_json::to_writer_pretty(std::io::BufWriter::new(f), records).map_err(|e| invalid(&e))
        }
        Format::Csv | Format::Parquet => {
            use polars::prelude::{CsvWriter, ParquetWriter, SerWriter};
            let mut df = export_table(records)?;
            let f = std::fs::File::create(path).map_err(io)?;
            let res = if format == Format::Csv { CsvWriter::new(f).finish(&mut df) } else { ParquetWriter::new(f).finish(&mut df).map(|_| ()) };
            res.map_err(|e| invalid(&e))
        }
    }
}

/// The records as a flat table, one row per record ([`table_columns`]).
fn export_table(records: &[AlphaRecord]) -> Result<polars::prelude::DataFrame, KbError> {
    use polars::prelude::*;
    let s = |f: &dyn Fn(&AlphaRecord) -> String| records.iter().map(f).collect::<Vec<String>>();
    let reason = |r: &AlphaRecord| r.status.reason().to_string();
    let mut cols: Vec<Column> = vec![
        Column::new("id".into(), s(&|r| r.id.clone())),
        Column::new("kind".into(), s(&|r| format!("{:?}", r.kind).to_lowercase())),
        Column::new("status".into(), s(&|r| r.status.keyword().to_string())),
        Column::new("reason".into(), s(&reason)),
        Column::new("family".into(), s(&|r| r.family.clone())),
        Column::new("generation".into(), records.iter().map(|r| r.generation).collect::<Vec<u32>>()),
        Column::new("name".into(), s(&|r| r.name.clone())),
        Column::new("code".into(), s(&|r| r.code.clone())),
        Column::new("idea".into(), s(&|r| r.idea.clone())),
        Column::new("hypothesis".into(), s(&|r| r.hypothesis.clone())),
        Column::new("parents".into(), s(&|r| r.parents.join(";"))),
        Column::new("lessons".into(), s(&|r| r.lessons.join("\n"))),
        Column::new("run_id".into(), s(&|r| r.run_id.clone())),
        Column::new("model".into(), s(&|r| r.model.clone())),
        Column::new("tokens".into(), records.iter().map(|r| r.tokens).collect::<Vec<u64>>()),
        Column::new("cost_usd".into(), records.iter().map(|r| r.cost_usd).collect::<Vec<f64>>()),
        Column::new("created_at".into(), records.iter().map(|r| r.created_at).collect::<Vec<i64>>()),
    ];
    for split in ["train", "valid"] {
        for m in METRIC_NAMES {
            let v: Vec<Option<f64>> = records.iter().map(|r| r.metric(split, m)).collect();
            cols.push(Column::new(format!("{split}_{m}").into(), v));
        }
    }
    DataFrame::new(records.len(), cols).map_err(|e| KbError::Invalid(e.to_string()))
}

//! `alphaloop._native`: the engine behind `import alphaloop`. Thin on purpose: each function
//! hands its work to the same library code the CLI runs (so a metric here is the CLI's,
//! bit for bit), releases the GIL while that code runs, and returns JSON for the Python
//! layer to turn into dicts and frames, or flat byte buffers that numpy reads without a
//! copy (never a Python object per cell). `python/alphaloop/__init__.py` is the API users see.

use alphaloop::backtest::{prepare, MetricsConfig};
use alphaloop::cli::{batch::evaluate_batch, Config, MetricsSettings};
use alphaloop::data::{LoadOptions, MarketData, Period, Splits};
use alphaloop::expr::{eval_expr, ExprError};
use alphaloop::model::{SavedModel, TrainConfig};
use alphaloop::seeds::{self, AlphaDef, AlphaSet};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};
use std::path::PathBuf;
use std::sync::Arc;

create_exception!(alphaloop, AlphaloopError, PyException, "Base of every error alphaloop raises.");
create_exception!(
    alphaloop,
    ExpressionError,
    AlphaloopError,
    "An expression that does not parse or compile; `position` (1-based character), `length` and `expression` say where, and the message shows it with carets."
);
create_exception!(alphaloop, DataError, AlphaloopError, "Market data that cannot be loaded or a period it does not cover; the message names the file (or frame), column and row.");
create_exception!(alphaloop, KbError, AlphaloopError, "A knowledge base that cannot be opened, read or written.");

/// What can fail while the GIL is released; raised as the package's exceptions once it is
/// held again.
enum Fail {
    Expr(ExprError),
    Data(String),
    Kb(String),
    Other(String),
}

impl From<alphaloop::data::DataError> for Fail {
    fn from(e: alphaloop::data::DataError) -> Fail {
        Fail::Data(e.to_string())
    }
}

impl From<anyhow::Error> for Fail {
    fn from(e: anyhow::Error) -> Fail {
        Fail::Other(format!("{e:#}"))
    }
}

impl From<seeds::SeedError> for Fail {
    fn from(e: seeds::SeedError) -> Fail {
        Fail::Other(e.to_string())
    }
}

impl From<serde_json::Error> for Fail {
    fn from(e: serde_json::Error) -> Fail {
        Fail::Other(e.to_string())
    }
}

fn raise(py: Python<'_>, f: Fail) -> PyErr {
    match f {
        Fail::Expr(e) => {
            let err = ExpressionError::new_err(e.render());
            let v = err.value(py);
            // Attributes on a fresh exception instance: setting them cannot fail.
            let _ = v.setattr("position", e.pos);
            let _ = v.setattr("length", e.len);
            let _ = v.setattr("expression", e.text.clone());
            err
        }
        Fail::Data(m) => DataError::new_err(m),
        Fail::Kb(m) => KbError::new_err(m),
        Fail::Other(m) => AlphaloopError::new_err(m),
    }
}

/// Runs `f` with the GIL released, raising its failure.
fn released<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T, Fail> + Send) -> PyResult<T> {
    py.detach(f).map_err(|e| raise(py, e))
}

/// `alphaloop.toml` as the CLI finds it (`$ALPHALOOP_CONFIG`, else the working directory's).
fn config() -> PyResult<Config> {
    Config::load(None).map_err(|e| AlphaloopError::new_err(format!("{e:#}")))
}

/// The signal of one expression over `data`.
fn period_of(s: &str) -> PyResult<Period> {
    s.parse::<Period>().map_err(PyValueError::new_err)
}

/// A loaded data set: the trading calendar, the universe and one panel per field, with the
/// splits and label settings of the config it was loaded under.
#[pyclass(frozen, module = "alphaloop._native")]
struct Panel {
    data: Arc<MarketData>,
    cfg: Config,
    /// The published alphas, which `alpha:ID` names in any expression on this panel: read
    /// once here, not at every call.
    alphas: AlphaSet,
}

impl Panel {
    fn new(data: MarketData, cfg: Config) -> PyResult<Panel> {
        let alphas = seeds::default_set().map_err(|e| AlphaloopError::new_err(e.to_string()))?;
        Ok(Panel { data: Arc::new(data), cfg, alphas })
    }

    fn splits(&self) -> Splits {
        Splits::resolve(self.cfg.splits.as_ref(), &self.data)
    }

    /// The label and cost: the arguments given, else the config's, else 1, 1 and 5 bps.
    fn metrics(&self, horizon: Option<i64>, gap: Option<i64>, cost_bps: Option<f64>) -> PyResult<MetricsConfig> {
        if let Some(h) = horizon.filter(|h| !(1..=250).contains(h)) {
            return Err(PyValueError::new_err(format!("horizon {h}: give 1 to 250 days")));
        }
        if let Some(g) = gap.filter(|g| !(0..=250).contains(g)) {
            return Err(PyValueError::new_err(format!("gap {g}: give 0 to 250 days")));
        }
        let (horizon, gap) = (horizon.map(|h| h as u64), gap.map(|g| g as u64));
        let cost_bps = cost_bps.map(alphaloop::cli::cost_bps).transpose().map_err(PyValueError::new_err)?;
        Ok(self.cfg.with_metrics(&MetricsSettings { horizon, gap, cost_bps }).metrics())
    }
}

#[pymethods]
impl Panel {
    /// The file the data came from.
    #[getter]
    fn source(&self) -> String {
        self.data.source.display().to_string()
    }

    /// The trading dates as days since 1970-01-01 (int32, little-endian bytes).
    #[getter]
    fn _days<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let days: Vec<u8> = self.data.dates.iter().flat_map(|d| d.0.to_le_bytes()).collect();
        PyBytes::new(py, &days)
    }

    /// The symbols, sorted.
    #[getter]
    fn symbols(&self) -> Vec<String> {
        self.data.symbols.clone()
    }

    /// The fields an expression can read.
    #[getter]
    fn fields(&self) -> Vec<String> {
        self.data.fields.keys().cloned().collect()
    }

    /// The train, valid and test date ranges, inclusive, as ISO dates.
    #[getter]
    fn splits_iso(&self) -> Vec<(String, String, String)> {
        let s = self.splits();
        [("train", s.train), ("valid", s.valid), ("test", s.test)].into_iter().map(|(n, (a, b))| (n.to_string(), a.to_string(), b.to_string())).collect()
    }

    /// Whether `vwap` is the typical price (the data has no true VWAP).
    #[getter]
    fn vwap_is_typical(&self) -> bool {
        self.data.vwap_is_typical()
    }

    fn __len__(&self) -> usize {
        self.data.n_dates() * self.data.n_assets()
    }

    fn __repr__(&self) -> String {
        let d = &self.data;
        let span = match (d.dates.first(), d.dates.last()) {
            (Some(a), Some(b)) => format!("{a}..{b}"),
            _ => "no dates".into(),
        };
        format!("<alphaloop.Panel {} dates ({span}) × {} symbols, {} fields, from {}>", d.n_dates(), d.n_assets(), d.fields.len(), d.source.display())
    }

    /// Every metric of one expression over a period, as the JSON `eval --json` prints.
    #[pyo3(signature = (expr, period, horizon=None, gap=None, cost_bps=None))]
    fn _evaluate(&self, py: Python<'_>, expr: String, period: &str, horizon: Option<i64>, gap: Option<i64>, cost_bps: Option<f64>) -> PyResult<String> {
        let (period, mcfg) = (period_of(period)?, self.metrics(horizon, gap, cost_bps)?);
        released(py, || {
            let prep = prepare(&self.data, &period, &self.splits(), mcfg)?;
            let signal = eval_expr(&expr, &prep.data, &self.alphas).map_err(Fail::Expr)?;
            Ok(serde_json::to_string(&prep.scorer.score(&signal))?)
        })
    }

    /// Many alphas in one shared graph (`eval --file`): the rows `eval --file --json`
    /// prints. `file` (TOML or .txt) or the ids and formulas given.
    #[pyo3(signature = (ids, formulas, file, period, horizon=None, gap=None, cost_bps=None))]
    #[allow(clippy::too_many_arguments)]
    fn _evaluate_many(
        &self,
        py: Python<'_>,
        ids: Vec<String>,
        formulas: Vec<String>,
        file: Option<PathBuf>,
        period: &str,
        horizon: Option<i64>,
        gap: Option<i64>,
        cost_bps: Option<f64>,
    ) -> PyResult<String> {
        let (period, mcfg) = (period_of(period)?, self.metrics(horizon, gap, cost_bps)?);
        released(py, || {
            let defs = alpha_defs(ids, formulas, file.as_deref())?;
            let mut alphas = self.alphas.clone();
            alphas.extend(&defs);
            let prep = prepare(&self.data, &period, &self.splits(), mcfg)?;
            let rows = evaluate_batch(&defs, &prep.data, &alphas, &prep.scorer, false);
            Ok(serde_json::to_string(&rows)?)
        })
    }

    /// One expression's values over a period, computed as `eval --dump` computes them (on
    /// the data cut at the period's end): (days since 1970 as int32 bytes, the symbols,
    /// the values date-major as float64 bytes, NaN where not finite; a bytearray, so that
    /// the array numpy reads from it is writable without another copy).
    fn _values<'py>(&self, py: Python<'py>, expr: String, period: &str) -> PyResult<(Bound<'py, PyBytes>, Vec<String>, Bound<'py, PyByteArray>)> {
        let period = period_of(period)?;
        let (days, values) = released(py, || {
            let (start, end) = period.indices(&self.splits(), &self.data)?;
            let cut = if end == self.data.n_dates() { (*self.data).clone() } else { self.data.truncate_dates(end) };
            let signal = eval_expr(&expr, &cut, &self.alphas).map_err(Fail::Expr)?;
            let na = cut.n_assets();
            let mut values: Vec<u8> = Vec::with_capacity((end - start) * na * 8);
            for t in start..end {
                for a in 0..na {
                    let v = signal.get(t, a);
                    values.extend_from_slice(&(if v.is_finite() { v } else { f64::NAN }).to_le_bytes());
                }
            }
            let days: Vec<u8> = cut.dates[start..end].iter().flat_map(|d| d.0.to_le_bytes()).collect();
            Ok((days, values))
        })?;
        Ok((PyBytes::new(py, &days), self.data.symbols.clone(), PyByteArray::new(py, &values)))
    }
}

/// A knowledge base, opened read-write as the CLI opens it (an embedded store is locked
/// while open: `close()` lets a miner have it).
#[pyclass(frozen, module = "alphaloop._native")]
struct Kb {
    kb: std::sync::Mutex<Option<alphaloop::kb::Kb>>,
    location: String,
}

impl Kb {
    /// Runs `f` on the open store with the GIL released.
    fn with<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&alphaloop::kb::Kb) -> Result<T, Fail> + Send) -> PyResult<T> {
        released(py, || {
            let guard = self.kb.lock().map_err(|_| Fail::Kb("the knowledge base was poisoned by an earlier failure; open it again".into()))?;
            let kb = guard.as_ref().ok_or_else(|| Fail::Kb(format!("knowledge base {} is closed", self.location)))?;
            f(kb)
        })
    }
}

impl From<alphaloop::kb::KbError> for Fail {
    fn from(e: alphaloop::kb::KbError) -> Fail {
        Fail::Kb(e.to_string())
    }
}

#[pymethods]
impl Kb {
    /// Opens the KB at a directory (embedded), `qdrant://host:port/collection` or `None`
    /// (the config's `kb`, else alpha_kb/store), never creating one.
    #[new]
    #[pyo3(signature = (location=None))]
    fn new(py: Python<'_>, location: Option<String>) -> PyResult<Kb> {
        let cfg = config()?;
        let kb = released(py, || alphaloop::cli::open_kb(location.as_deref(), &cfg, false).map_err(|e| Fail::Kb(format!("{e:#}"))))?;
        let location = kb.location();
        Ok(Kb { kb: std::sync::Mutex::new(Some(kb)), location })
    }

    #[getter]
    fn location(&self) -> String {
        self.location.clone()
    }

    /// Releases the store (and an embedded store's lock).
    fn close(&self) {
        if let Ok(mut g) = self.kb.lock() {
            g.take();
        }
    }

    fn __repr__(&self) -> String {
        format!("<alphaloop.KB {}>", self.location)
    }

    /// `kb search --json`: hits in the order the writer retrieves them.
    #[pyo3(signature = (text, n, status, family=None))]
    fn _search(&self, py: Python<'_>, text: String, n: usize, status: &str, family: Option<String>) -> PyResult<String> {
        let f = alphaloop::cli::status_filter(status, family.as_deref()).map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
        self.with(py, |kb| Ok(serde_json::to_string(&kb.search_text(&text, &f, n, true)?)?))
    }

    /// `kb similar --json`: records whose signals behave like `id`'s.
    fn _similar(&self, py: Python<'_>, id: String, n: usize) -> PyResult<String> {
        self.with(py, |kb| Ok(serde_json::to_string(&kb.similar(&id, n)?)?))
    }

    /// `kb top --json`.
    #[pyo3(signature = (by, split, n, status, family=None))]
    fn _top(&self, py: Python<'_>, by: String, split: String, n: usize, status: &str, family: Option<String>) -> PyResult<String> {
        let f = alphaloop::cli::status_filter(status, family.as_deref()).map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
        self.with(py, |kb| Ok(serde_json::to_string(&kb.top(&by, &split, n, &f)?)?))
    }

    /// `kb show --json`, or None.
    fn _get(&self, py: Python<'_>, id: String) -> PyResult<Option<String>> {
        self.with(py, |kb| kb.get(&id)?.map(|r| Ok(serde_json::to_string(&r)?)).transpose())
    }

    /// `kb stats --json`.
    fn _stats(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, |kb| Ok(serde_json::to_string(&kb.stats()?)?))
    }

    /// `kb export --json --status STATUS`.
    #[pyo3(signature = (status, family=None))]
    fn _records(&self, py: Python<'_>, status: &str, family: Option<String>) -> PyResult<String> {
        let f = alphaloop::cli::status_filter(status, family.as_deref()).map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
        self.with(py, |kb| Ok(serde_json::to_string(&kb.records(&f)?)?))
    }
}

/// The alphas a call names: an alpha file, or ids with their formulas.
fn alpha_defs(ids: Vec<String>, formulas: Vec<String>, file: Option<&std::path::Path>) -> Result<Vec<AlphaDef>, Fail> {
    Ok(match file {
        Some(f) => seeds::load(f)?,
        None => ids.into_iter().zip(formulas).map(|(id, formula)| AlphaDef { id, formula, name: None, idea: None, source: None, family: None }).collect(),
    })
}

impl From<alphaloop::model::ModelError> for Fail {
    fn from(e: alphaloop::model::ModelError) -> Fail {
        Fail::Other(e.to_string())
    }
}

/// A combined model: the booster with its features, label and settings, and the report of
/// the training that made it (`train --json`).
#[pyclass(frozen, module = "alphaloop._native")]
struct Model {
    saved: SavedModel,
}

#[pymethods]
impl Model {
    /// A model `alphaloop train` (or `save`) wrote.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Model> {
        Ok(Model { saved: released(py, || Ok(SavedModel::load(&path)?))? })
    }

    /// Writes the model where `alphaloop predict --model` and `report --model` read it.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        released(py, || Ok(self.saved.save(&path)?))
    }

    /// (id, formula) of each feature, in the model's order.
    #[getter]
    fn features(&self) -> Vec<(String, String)> {
        self.saved.features.iter().map(|f| (f.id.clone(), f.code.clone())).collect()
    }

    /// (horizon, gap) of the label it was fit to.
    #[getter]
    fn label(&self) -> (usize, usize) {
        self.saved.label
    }

    #[getter]
    fn trees(&self) -> u32 {
        self.saved.trees
    }

    /// The training report as JSON (None for a model saved without one).
    #[getter]
    fn _report(&self) -> Option<String> {
        self.saved.report.as_ref().map(|r| r.to_string())
    }

    fn __repr__(&self) -> String {
        format!("<alphaloop.Model {} features, {} trees, label horizon {} gap {}>", self.saved.features.len(), self.saved.trees, self.saved.label.0, self.saved.label.1)
    }

    /// Scores per stock on one date (`None`: the panel's last): (the date, symbols, scores),
    /// best first, as `alphaloop predict` gives them.
    #[pyo3(signature = (panel, date=None))]
    fn _predict(&self, py: Python<'_>, panel: &Panel, date: Option<String>) -> PyResult<(String, Vec<String>, Vec<f64>)> {
        let data = &panel.data;
        let date = date.map(|d| d.parse::<alphaloop::data::Date>()).transpose().map_err(PyValueError::new_err)?;
        let t = data.date_index(date).map_err(|e| DataError::new_err(e.to_string()))?;
        let scores = released(py, || Ok(self.saved.predict(data, t, &panel.alphas)?))?;
        let (symbols, values) = scores.into_iter().unzip();
        Ok((data.dates[t].to_string(), symbols, values))
    }
}

/// Trains the combined model over alphas (as `alphaloop train --seeds FILE
/// --no-seed-baseline`): the report `train --json` prints and the model. `settings`: JSON
/// of the training settings to change (transform, target, stop_on, max_rounds, eta, ...).
#[pyfunction]
#[pyo3(signature = (panel, ids, formulas, file, settings, horizon=None, gap=None, cost_bps=None))]
#[allow(clippy::too_many_arguments)]
fn _train(
    py: Python<'_>,
    panel: &Panel,
    ids: Vec<String>,
    formulas: Vec<String>,
    file: Option<PathBuf>,
    settings: &str,
    horizon: Option<i64>,
    gap: Option<i64>,
    cost_bps: Option<f64>,
) -> PyResult<(String, Model)> {
    let mcfg = panel.metrics(horizon, gap, cost_bps)?;
    let tcfg = train_config(settings)?;
    released(py, || {
        let defs = alpha_defs(ids, formulas, file.as_deref())?;
        if defs.is_empty() {
            return Err(Fail::Other("no alphas to train on".into()));
        }
        let own = AlphaSet::from_defs(&defs);
        let resolver = alphaloop::expr::Chain(vec![&own, &panel.alphas]);
        let (features, left_out) = alphaloop::cli::compile_features(defs, &panel.data, &resolver);
        // The first alpha that does not compile is raised, named by its id and position.
        if let Some((id, mut e)) = left_out.into_iter().next() {
            e.context = Some(e.context.take().map_or_else(|| id.clone(), |c| format!("{id}: {c}")));
            return Err(Fail::Expr(e));
        }
        let named = alphaloop::expr::named_alphas(features.iter().map(|f| f.code.as_str()), &resolver);
        let mut res = alphaloop::model::train(&panel.data, &panel.splits(), &features, &named, &tcfg, &mcfg, |_| {})?;
        let report = alphaloop::cli::train_json(&res, None, None, &tcfg)?;
        let mut saved = std::mem::take(&mut res.saved);
        saved.report = Some(report.clone());
        Ok((report.to_string(), Model { saved }))
    })
}

/// The default training settings with those `settings` (a JSON object) changes; a key that
/// is no setting is refused by name.
fn train_config(settings: &str) -> PyResult<TrainConfig> {
    let bad = |m: String| PyValueError::new_err(m);
    let given: serde_json::Map<String, serde_json::Value> = serde_json::from_str(settings).map_err(|e| bad(format!("settings: {e}")))?;
    let mut v = serde_json::to_value(TrainConfig::default()).map_err(|e| bad(e.to_string()))?;
    let known = v.as_object_mut().ok_or_else(|| bad("settings: not an object".into()))?;
    for (k, x) in given {
        if !known.contains_key(&k) {
            let mut names: Vec<&String> = known.keys().collect();
            names.sort();
            return Err(bad(format!("unknown training setting '{k}'; the settings: {}", names.into_iter().map(String::as_str).collect::<Vec<_>>().join(", "))));
        }
        known.insert(k, x);
    }
    serde_json::from_value(v).map_err(|e| bad(format!("settings: {e}")))
}

/// Loads a long-format Parquet/CSV/TSV file (`None`: the data the CLI finds), with the
/// same checks and errors as the CLI.
#[pyfunction]
#[pyo3(signature = (path=None, groups=None))]
fn load(py: Python<'_>, path: Option<PathBuf>, groups: Option<PathBuf>) -> PyResult<Panel> {
    let cfg = config()?;
    let data = released(py, || {
        let path = alphaloop::cli::resolve_data(path.as_deref(), &cfg).map_err(|e| Fail::Data(format!("{e:#}")))?;
        let groups = groups.or_else(|| cfg.groups.clone());
        Ok(alphaloop::data::load(&path, &LoadOptions { groups })?)
    })?;
    Panel::new(data, cfg)
}

/// Loads a long-format frame handed over column by column (`alphaloop.load(frame)`), with
/// the checks and errors of a file, the frame standing for the file ("DataFrame: column
/// 'close', row 5: ..."). Each column: (name, kind, little-endian data, validity or None):
/// kind `f64` (NaN missing), `i64`, `date` (days since 1970, int32), or `str` (UTF-8,
/// values separated by NUL, empty missing).
#[pyfunction]
#[pyo3(signature = (rows, columns, groups=None))]
fn _load_columns(py: Python<'_>, rows: usize, columns: Vec<(String, String, Vec<u8>, Option<Vec<u8>>)>, groups: Option<PathBuf>) -> PyResult<Panel> {
    use polars::prelude::{Column, DataFrame, Int32Chunked, IntoColumn, NewChunkedArray};
    let cfg = config()?;
    let name = PathBuf::from("DataFrame");
    let data = released(py, || {
        let bad = |msg: String| Fail::Data(format!("DataFrame: {msg}"));
        let mut cols = Vec::with_capacity(columns.len());
        for (col, kind, bytes, valid) in columns {
            let width = match kind.as_str() {
                "f64" | "i64" => 8,
                "date" => 4,
                _ => 0,
            };
            if width > 0 && bytes.len() != rows * width {
                return Err(bad(format!("column '{col}' has {} values, the frame {rows} rows", bytes.len() / width)));
            }
            let ok = |r: usize| valid.as_ref().is_none_or(|v| v.get(r).is_some_and(|b| *b != 0));
            let c = match kind.as_str() {
                "f64" => Column::new(col.as_str().into(), bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap_or_default())).collect::<Vec<f64>>()),
                "i64" => Column::new(col.as_str().into(), bytes.chunks_exact(8).enumerate().map(|(r, b)| ok(r).then(|| i64::from_le_bytes(b.try_into().unwrap_or_default()))).collect::<Vec<Option<i64>>>()),
                "date" => {
                    let days: Vec<Option<i32>> = bytes.chunks_exact(4).enumerate().map(|(r, b)| ok(r).then(|| i32::from_le_bytes(b.try_into().unwrap_or_default()))).collect();
                    Int32Chunked::from_iter_options(col.as_str().into(), days.into_iter()).into_date().into_column()
                }
                "str" => {
                    let text = std::str::from_utf8(&bytes).map_err(|e| bad(format!("column '{col}' is not UTF-8: {e}")))?;
                    let values: Vec<Option<&str>> = if rows == 0 { Vec::new() } else { text.split('\0').map(|v| (!v.is_empty()).then_some(v)).collect() };
                    if values.len() != rows {
                        return Err(bad(format!("column '{col}' has {} values, the frame {rows} rows", values.len())));
                    }
                    Column::new(col.as_str().into(), values)
                }
                k => return Err(bad(format!("column '{col}': unknown kind '{k}'"))),
            };
            cols.push(c);
        }
        let df = DataFrame::new(rows, cols).map_err(|e| bad(e.to_string()))?;
        let groups = groups.or_else(|| cfg.groups.clone());
        Ok(alphaloop::data::load_frame(df, &name, &LoadOptions { groups })?)
    })?;
    Panel::new(data, cfg)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("AlphaloopError", py.get_type::<AlphaloopError>())?;
    m.add("ExpressionError", py.get_type::<ExpressionError>())?;
    m.add("DataError", py.get_type::<DataError>())?;
    m.add("KbError", py.get_type::<KbError>())?;
    m.add_class::<Panel>()?;
    m.add_class::<Kb>()?;
    m.add_class::<Model>()?;
    m.add_function(wrap_pyfunction!(_train, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(_load_columns, m)?)?;
    Ok(())
}

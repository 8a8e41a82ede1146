//! `alphaloop eval`: metrics of one expression or of a file of alphas.

use super::batch::{evaluate_batch, header, header_of, span, Row};
use super::table::{num, render};
use super::{load_data, Config, DataArgs};
use crate::backtest::{prepare, Metrics, MetricsConfig};
use crate::data::{MarketData, Panel, Period, Splits};
use crate::expr::{AlphaResolver, Chain, ExprError};
use crate::seeds::{self, AlphaDef, AlphaSet};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("program").args(["python", "wasm"])))]
pub struct EvalArgs {
    /// The alpha expression, e.g. "rank(delta(close, 5)) * -1".
    #[arg(allow_hyphen_values = true)]
    pub expr: Option<String>,
    /// Evaluate every alpha of a file instead: TOML (`[[alpha]]` with id and formula) or .txt (one formula per line).
    #[arg(long, conflicts_with = "expr")]
    pub file: Option<PathBuf>,
    /// Evaluate a Python factor file (a `Factor` subclass, see sandbox/python/README.md) in
    /// the sandbox instead; a rejected program prints its verdict and exits with 1.
    #[arg(long, conflicts_with_all = ["expr", "file"])]
    pub python: Option<PathBuf>,
    /// Evaluate a WebAssembly signal module (.wasm, or .wat text; the ABI is in
    /// sandbox/wasm/README.md) under wasmtime with no imports; a rejected module prints
    /// its verdict and exits with 1.
    #[arg(long, conflicts_with_all = ["expr", "file", "python"])]
    pub wasm: Option<PathBuf>,
    /// With --python: the class to run when the file defines several.
    #[arg(long = "class", requires = "python")]
    pub class: Option<String>,
    /// With --python or --wasm: wall-clock limit per run, seconds.
    #[arg(long, default_value_t = 60, requires = "program")]
    pub timeout: u64,
    #[command(flatten)]
    pub data: DataArgs,
    /// Scored dates: train, valid, test, all, or START:END (YYYY-MM-DD, either side may be
    /// empty). Several, comma-separated (`train,valid`), put one expression's metrics side
    /// by side, each period on data cut at its own end.
    #[arg(long, default_value = "valid", value_delimiter = ',')]
    pub period: Vec<Period>,
    #[command(flatten)]
    pub metrics: super::config::MetricsSettings,
    /// Alpha definitions that `alpha:ID` may refer to (default: alpha_kb/seeds/alpha101.toml);
    /// an id found in neither this nor --file is looked up in the knowledge base.
    #[arg(long)]
    pub alphas: Option<PathBuf>,
    /// The knowledge base whose records `alpha:ID` may name (default: the config's `kb`,
    /// else alpha_kb/store); opened only for an id that no alpha file defines.
    #[arg(long, env = "ALPHALOOP_KB")]
    pub kb: Option<String>,
    /// Write the signal (long format: date, symbol, value) over the period to a .parquet or .csv file.
    #[arg(long, conflicts_with = "file")]
    pub dump: Option<PathBuf>,
    /// Draw the long-short book's cumulative return over the period, before and after
    /// costs, into a PNG.
    #[arg(long, conflicts_with = "file")]
    pub plot: Option<PathBuf>,
    /// Also score each calendar year of the period on its own (is the edge steady, or one
    /// good year?); a year's labels end with it, as a period's do.
    #[arg(long, conflicts_with = "file")]
    pub by_year: bool,
    /// Print JSON (an object, or an array with `id` for --file).
    #[arg(long)]
    pub json: bool,
}


/// The alphas `alpha:ID` can refer to.
fn resolver(args: &EvalArgs, file_defs: &[AlphaDef]) -> Result<AlphaSet> {
    let mut set = match &args.alphas {
        Some(p) => AlphaSet::from_defs(&seeds::load(p)?),
        None => seeds::default_set()?,
    };
    set.extend(file_defs);
    Ok(set)
}

pub fn run(args: EvalArgs, cfg: &Config) -> Result<i32> {
    if let Some(out) = &args.dump {
        super::table::FileFormat::of(out)?;
    }
    if let Some(png) = &args.plot {
        crate::model::plot::check_png(png).map_err(anyhow::Error::msg)?;
    }
    let file_defs = match &args.file {
        Some(f) => seeds::load(f)?,
        None => Vec::new(),
    };
    let expr = match (&args.expr, &args.file, &args.python, &args.wasm) {
        (Some(e), None, None, None) => Some(e.clone()),
        (None, Some(_), None, None) | (None, None, Some(_), None) | (None, None, None, Some(_)) => None,
        _ => bail!("give an expression, --file FILE, --python FILE or --wasm FILE"),
    };
    let several = args.period.len() > 1;
    if several && (expr.is_none() || args.dump.is_some() || args.plot.is_some() || args.by_year) {
        let list = args.period.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",");
        bail!("several periods (--period {list}) go with one expression, without --dump, --plot or --by-year; give those one period");
    }
    let Some(period) = args.period.first() else { bail!("--period needs a period: train, valid, test, all or START:END") };
    let (files, kb) = (resolver(&args, &file_defs)?, super::kb::LazyKb::new(args.kb.as_deref(), cfg));
    let alphas = Chain(vec![&files, &kb]);
    let data = load_data(&args.data, cfg, args.json)?;
    let splits = crate::data::Splits::resolve(cfg.splits.as_ref(), &data);
    let mcfg = cfg.with_metrics(&args.metrics).metrics();
    if let (true, Some(e)) = (several, &expr) {
        return eval_periods(e, &args, &data, &splits, mcfg, &alphas);
    }
    let t0 = std::time::Instant::now();
    let prep = prepare(&data, period, &splits, mcfg)?;
    tracing::debug!("labels and their ranks for {} dates in {:.2?}", prep.data.n_dates(), t0.elapsed());

    if let Some(py) = &args.python {
        return eval_python(py, &args, &prep, &splits);
    }
    if let Some(w) = &args.wasm {
        let bytes = std::fs::read(w).with_context(|| format!("cannot read {}", w.display()))?;
        let cfg = crate::sandbox::wasm::WasmConfig { timeout: std::time::Duration::from_secs(args.timeout.max(1)), ..Default::default() };
        let verdict = crate::sandbox::wasm::WasmProgram::new(&bytes, cfg).and_then(|p| p.evaluate(&prep.data));
        return program_outcome(&w.display().to_string(), verdict, &args, &prep, &splits);
    }
    match expr {
        Some(e) => eval_one(&e, &args, &prep, &alphas, &splits),
        None => eval_file(&file_defs, &args, &prep, &alphas),
    }
}

fn print_expr_error(e: &ExprError) {
    eprintln!("error: {}", e.render());
}

/// One expression on several periods, side by side; each period is scored on the data cut
/// at its own end, as one period alone would be.
fn eval_periods(expr: &str, args: &EvalArgs, data: &MarketData, splits: &Splits, mcfg: MetricsConfig, alphas: &dyn AlphaResolver) -> Result<i32> {
    let mut done: Vec<(crate::backtest::Prepared, Metrics)> = Vec::new();
    for p in &args.period {
        let prep = prepare(data, p, splits, mcfg.clone())?;
        let Some(signal) = signal_of(expr, &prep.data, alphas)? else { return Ok(1) };
        let m = prep.scorer.score(&signal);
        done.push((prep, m));
    }
    if args.json {
        let by_period: serde_json::Map<String, serde_json::Value> = done.iter().map(|(p, m)| Ok((p.period.to_string(), serde_json::to_value(m)?))).collect::<Result<_>>()?;
        println!("{}", serde_json::to_string_pretty(&by_period)?);
        return Ok(0);
    }
    println!("alpha  {expr}");
    let spans: Vec<String> = done.iter().map(|(p, _)| span(p)).collect();
    println!("{}", header_of(&done[0].0, &format!("periods {}", spans.join(", "))));
    vwap_note([expr], data);
    let ms: Vec<&Metrics> = done.iter().map(|(_, m)| m).collect();
    let names: Vec<String> = done.iter().map(|(p, _)| p.period.to_string()).collect();
    let rows: Vec<Vec<String>> = metric_rows(&ms);
    let head: Vec<&str> = std::iter::once("metric").chain(names.iter().map(String::as_str)).collect();
    println!("{}", render(&head, &rows));
    for ((prep, m), name) in done.iter().zip(&names) {
        println!("quintile mean label, lowest to highest signal, {name}: {}", quintiles(m));
        println!("{}, {name}", market_line(prep));
        if let Some(why) = no_days(m, prep) {
            println!("note   {name}: {why}");
        }
    }
    units_note(expr);
    Ok(0)
}

/// Says where an expression mixes units (`returns - adv60`, `close > volume`): it runs,
/// but what it computes is rarely what was meant.
fn units_note(expr: &str) {
    if let Some(e) = crate::expr::units::mixed(expr) {
        println!("note   units: {}", e.render());
    }
}

/// Says so where an expression reads a vwap the data does not have.
fn vwap_note<'a>(exprs: impl IntoIterator<Item = &'a str>, data: &MarketData) {
    if exprs.into_iter().any(|e| e.to_ascii_lowercase().contains("vwap")) && data.vwap_is_typical() {
        println!("note   vwap is the typical price (high + low + close) / 3: the data has no true VWAP");
    }
}

/// The metrics table's rows: each metric's name, then its value in each of `ms`.
fn metric_rows(ms: &[&Metrics]) -> Vec<Vec<String>> {
    let row = |name: &str, f: &dyn Fn(&Metrics) -> String| std::iter::once(name.to_string()).chain(ms.iter().map(|m| f(m))).collect::<Vec<_>>();
    Metrics::TABLE.iter().map(|(name, _, f)| row(name, &|m| num(f(m)))).chain(std::iter::once(row("n_days", &|m| m.n_days.to_string()))).collect()
}

/// The quintiles' mean labels in basis points, lowest signal first.
fn quintiles(m: &Metrics) -> String {
    let q: Vec<String> = m.quintile_returns.iter().map(|v| if v.is_finite() { format!("{:+.2}bp", v * 1e4) } else { "-".into() }).collect();
    q.join("  ")
}

fn eval_one(expr: &str, args: &EvalArgs, prep: &crate::backtest::Prepared, alphas: &dyn AlphaResolver, splits: &Splits) -> Result<i32> {
    let Some(signal) = signal_of(expr, &prep.data, alphas)? else { return Ok(1) };
    report(expr, &signal, args, prep, splits)
}

/// The expression's signal on `data`; None once an error in the expression is printed.
fn signal_of(expr: &str, data: &MarketData, alphas: &dyn AlphaResolver) -> Result<Option<Arc<Panel>>> {
    match crate::expr::eval_expr(expr, data, alphas) {
        Ok(signal) => Ok(Some(signal)),
        Err(e) => {
            print_expr_error(&e);
            Ok(None)
        }
    }
}

/// A Python factor file through the sandbox (with its look-ahead check), then the same
/// metrics and output as an expression.
fn eval_python(path: &Path, args: &EvalArgs, prep: &crate::backtest::Prepared, splits: &Splits) -> Result<i32> {
    let code = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let cfg = crate::sandbox::SandboxConfig { timeout: std::time::Duration::from_secs(args.timeout.max(1)), ..Default::default() };
    let mut sb = crate::sandbox::PySandbox::start(&prep.data, cfg)?;
    program_outcome(&path.display().to_string(), sb.evaluate(&code, args.class.as_deref()), args, prep, splits)
}

/// A sandboxed program's signal gets the same metrics and output as an expression; a
/// rejected program prints its verdict (JSON with --json) and exits with 1.
fn program_outcome(
    name: &str,
    outcome: Result<crate::sandbox::Evaluated, crate::sandbox::Verdict>,
    args: &EvalArgs,
    prep: &crate::backtest::Prepared,
    splits: &Splits,
) -> Result<i32> {
    match outcome {
        Ok(ev) => report(name, &ev.signal, args, prep, splits),
        Err(v) => {
            if args.json {
                println!("{}", serde_json::to_string_pretty(&serde_json::json!({"verdict": v.kind, "message": v.message}))?);
            } else {
                eprintln!("rejected: {}\n{}", v.kind, v.message);
            }
            Ok(1)
        }
    }
}

fn report(expr: &str, signal: &Panel, args: &EvalArgs, prep: &crate::backtest::Prepared, splits: &Splits) -> Result<i32> {
    let (m, daily) = match &args.plot {
        Some(_) => {
            let (m, daily) = prep.scorer.score_daily(signal);
            (m, Some(daily))
        }
        None => (prep.scorer.score(signal), None),
    };
    if let Some(out) = &args.dump {
        let (start, end) = prep.period.indices(splits, &prep.data)?;
        dump(&prep.data, signal, start, end, out)?;
    }
    let years = if args.by_year { crate::backtest::by_year(signal, &prep.data, &prep.scorer)? } else { Vec::new() };
    if args.json {
        let mut v = serde_json::to_value(&m)?;
        if let (true, Some(o)) = (args.by_year, v.as_object_mut()) {
            let rows = years.iter().map(|(y, m)| Ok(serde_json::json!({"year": y, "metrics": serde_json::to_value(m)?}))).collect::<Result<Vec<_>>>()?;
            o.insert("by_year".into(), rows.into());
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_metrics(expr, &m, prep);
        if args.by_year {
            print_years(&years);
        }
    }
    // After the metrics, so that a plot that cannot be written does not hide them.
    if let (Some(path), Some(daily)) = (&args.plot, daily) {
        plot_book(path, expr, &prep.data, &daily)?;
        super::wrote(path, args.json);
    }
    Ok(0)
}

fn print_years(years: &[(i32, Metrics)]) {
    let rows: Vec<Vec<String>> = years
        .iter()
        .map(|(y, m)| {
            let v = [m.rank_ic, m.ic, m.rank_icir, m.sharpe, m.ann_return, m.max_drawdown, m.turnover, m.coverage];
            std::iter::once(y.to_string()).chain(v.iter().map(|x| num(*x))).chain(std::iter::once(m.n_days.to_string())).collect()
        })
        .collect();
    println!("{}", render(&["year", "rank_ic", "ic", "rank_icir", "sharpe", "ann_ret", "max_dd", "turnover", "coverage", "n_days"], &rows));
    let pos = years.iter().filter(|(_, m)| m.rank_ic > 0.0).count();
    let scored = years.iter().filter(|(_, m)| m.rank_ic.is_finite()).count();
    println!("Rank IC above 0 in {pos} of {scored} years (each year's labels end with it)");
}

/// The cumulative sums of the daily book returns, before and after costs (the sum whose
/// drawdown is `max_drawdown`), against the date as a fractional year; a skipped date
/// adds nothing.
fn plot_book(path: &Path, expr: &str, data: &MarketData, daily: &crate::backtest::Daily) -> Result<()> {
    let year = |t: usize| 1970.0 + f64::from(data.dates[t].0) / 365.2425;
    let cumulative = |name: &str, v: &[f64]| {
        crate::model::plot::Series::line(
            name,
            daily
                .date
                .iter()
                .zip(v)
                .scan(0.0, |acc, (&t, &x)| {
                    *acc += if x.is_finite() { x } else { 0.0 };
                    Some((year(t), *acc))
                })
                .collect(),
        )
    };
    let title: String = if expr.chars().count() > 70 { expr.chars().take(67).chain("...".chars()).collect() } else { expr.to_string() };
    crate::model::plot::lines(
        path,
        &title,
        "date",
        "long-short book, cumulative daily return",
        &[cumulative("before costs", &daily.gross), cumulative("after costs", &daily.net)],
    )
    .map_err(anyhow::Error::msg)
}

/// The equal-weight universe bought and held over the period, the baseline the book's
/// figures are read beside.
fn market_line(prep: &crate::backtest::Prepared) -> String {
    let (m, _) = prep.scorer.market();
    format!(
        "baseline: the universe bought and held (equal weight): annual return {}, Sharpe {}, volatility {}, max drawdown {}",
        num(m.ann_return),
        num(m.sharpe),
        num(m.volatility),
        num(m.max_drawdown)
    )
}

fn print_metrics(expr: &str, m: &Metrics, prep: &crate::backtest::Prepared) {
    println!("alpha  {expr}");
    println!("{}", header(prep));
    vwap_note([expr], &prep.data);
    println!("{}", render(&["metric", "value"], &metric_rows(&[m])));
    println!("quintile mean label, lowest to highest signal: {}", quintiles(m));
    println!("{}", market_line(prep));
    if let Some(why) = no_days(m, prep) {
        println!("note   {why}");
    }
    units_note(expr);
}

/// Why a signal has no scored date (None when it has some), so that a table of dashes is
/// not left unexplained. (A date is scored with `min_stocks` stocks whose signal and label
/// are finite and over which the signal varies; the averages below say which of those
/// failed.)
fn no_days(m: &Metrics, prep: &crate::backtest::Prepared) -> Option<String> {
    if m.n_days > 0 {
        return None;
    }
    let c = prep.scorer.config();
    let (min_stocks, label_days) = (c.min_stocks, c.gap + c.horizon);
    let per_date = m.coverage * prep.data.n_assets() as f64;
    Some(if m.coverage.is_nan() {
        format!("no date was scored: no date of the period has a label (each needs the {label_days} trading days after it inside the period, where the data is cut); widen the period")
    } else if !(m.coverage > 0.0) {
        "no date was scored: the signal is never finite where the label is (a division by zero, a window the period cannot fill, ...)".into()
    } else if per_date < min_stocks as f64 {
        let few = match per_date.round() {
            _ if per_date < 1.0 => "fewer than one labelled stock".to_string(),
            1.0 => "about one labelled stock".to_string(),
            n => format!("about {n} labelled stocks"),
        };
        format!("no date was scored: the signal is finite for {few} a date (coverage {}), and a date needs {min_stocks}", num(m.coverage))
    } else {
        format!(
            "no date was scored: no date had {min_stocks} stocks with a finite signal and label over which the signal varied (a constant signal, e.g. a comparison that always holds, ranks nothing; distinctness {})",
            num(m.distinctness)
        )
    })
}

fn eval_file(defs: &[AlphaDef], args: &EvalArgs, prep: &crate::backtest::Prepared, alphas: &dyn AlphaResolver) -> Result<i32> {
    let rows = evaluate_batch(defs, &prep.data, alphas, &prep.scorer, !args.json);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        // The failures are in the array, but a script that only reads the numbers would
        // miss them (e.g. every `indneutralize` alpha when no group file was found): say
        // so on stderr too, with the first reason (it is often every one's).
        if let Some(first) = rows.iter().find(|r| r.error.is_some()) {
            let n = rows.iter().filter(|r| r.error.is_some()).count();
            tracing::warn!(
                "{n} of {} alpha(s) could not be evaluated (see their \"error\" fields), e.g. {}: {}",
                rows.len(),
                first.id,
                first.error.as_deref().unwrap_or("")
            );
        }
        return Ok(0);
    }
    let mut ok: Vec<&Row> = rows.iter().filter(|r| r.metrics.is_some()).collect();
    ok.sort_by(|a, b| {
        let key = |r: &Row| r.metrics.as_ref().map(|m| m.rank_ic).filter(|v| v.is_finite()).unwrap_or(f64::NEG_INFINITY);
        key(b).total_cmp(&key(a))
    });
    println!("{}", header(prep));
    vwap_note(defs.iter().map(|d| d.formula.as_str()), &prep.data);
    let table: Vec<Vec<String>> = ok
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let m = r.metrics.as_ref().expect("filtered");
            vec![
                (i + 1).to_string(),
                r.id.clone(),
                num(m.rank_ic),
                num(m.ic),
                num(m.rank_icir),
                num(m.sharpe),
                num(m.ann_return),
                num(m.turnover),
                num(m.coverage),
            ]
        })
        .collect();
    println!("{}", render(&["#", "id", "rank_ic", "ic", "rank_icir", "sharpe", "ann_ret", "turnover", "coverage"], &table));
    let failed: Vec<&Row> = rows.iter().filter(|r| r.error.is_some()).collect();
    if !failed.is_empty() {
        println!("\n{} alpha(s) could not be evaluated:", failed.len());
        for r in failed {
            println!("  {}: {}", r.id, r.error.as_deref().unwrap_or(""));
        }
    }
    let mixed: Vec<String> = rows.iter().filter_map(|r| r.units.as_ref().map(|u| format!("{} ({u})", r.id))).collect();
    if !mixed.is_empty() {
        println!("note   units mixed (each runs, but adds, subtracts or compares unlike quantities) in {}", mixed.join("; "));
    }
    Ok(0)
}

/// Writes dates `[start, end)` of a signal in long format.
fn dump(data: &MarketData, signal: &Panel, start: usize, end: usize, out: &Path) -> Result<()> {
    use polars::prelude::*;
    let na = data.n_assets();
    let n = (end - start) * na;
    let (mut dates, mut syms, mut vals) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    for t in start..end {
        for (a, s) in data.symbols.iter().enumerate() {
            let v = signal.get(t, a);
            dates.push(data.dates[t].0);
            syms.push(s.as_str());
            vals.push(if v.is_finite() { Some(v) } else { None });
        }
    }
    let date = Int32Chunked::from_vec("date".into(), dates).into_date().into_column();
    let mut df = DataFrame::new_infer_height(vec![
        date,
        Column::new("symbol".into(), syms),
        Column::new("value".into(), vals),
    ])?;
    super::table::write_table(&mut df, out)
}

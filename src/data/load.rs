//! Reading long-format Parquet/CSV (polars) into adjusted dense panels.

use super::{DataError, Date, Groups, MarketData, Panel};
use polars::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Columns every data file must have (`adj_close` is optional: without it prices are
/// taken as already adjusted).
const REQUIRED: &[&str] = &["date", "symbol", "open", "high", "low", "close", "volume"];

/// Standard columns a file may have: the adjustment, a true VWAP (a price, adjusted like
/// close; without it `vwap` is the typical price) and the market capitalisation `cap`
/// (already in dollars, so not adjusted; without it `cap` is an error).
const OPTIONAL: &[&str] = &["adj_close", "vwap", "cap"];

/// How to load a data file.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// A `symbol,group` CSV (or `sp500_constituents.csv`). When `None`, a
    /// `sp500_constituents.csv` beside the data file is used if present.
    pub groups: Option<PathBuf>,
}

/// `path` cannot be read, for the reason `msg` gives.
fn refused(path: &Path, msg: impl ToString) -> DataError {
    DataError::Read { path: path.to_path_buf(), msg: msg.to_string() }
}

fn read_frame(path: &Path) -> Result<DataFrame, DataError> {
    if !path.exists() {
        return Err(DataError::NotFound(path.to_path_buf()));
    }
    let read_err = |e: PolarsError| refused(path, e);
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "parquet" | "pq" => {
            let io_err = |e: std::io::Error| refused(path, e);
            let mut f = std::fs::File::open(path).map_err(io_err)?;
            // polars-parquet panics or aborts on some malformed footers and page headers:
            // they are refused before it reads them.
            if let Err(fault) = super::parquet_check::check(&mut f).map_err(io_err)? {
                return Err(refused(path, format!("not a readable Parquet file: {fault}")));
            }
            contained(path, || ParquetReader::new(f).finish())?.map_err(read_err)
        }
        "csv" | "tsv" => {
            if std::fs::metadata(path).is_ok_and(|m| m.len() == 0) {
                return Err(DataError::Empty { path: path.to_path_buf() });
            }
            let sep = separator(path);
            let width = header_width(path, sep);
            if width > MAX_COLUMNS {
                return Err(too_wide(path, width));
            }
            // Polars pads a short row with nulls (a cut line would load as missing prices)
            // and refuses a long one without saying where; the scan names the row.
            if let Some(fault) = ragged_row(path, sep)? {
                return Err(refused(path, fault));
            }
            contained(path, || {
                CsvReadOptions::default()
                    .map_parse_options(|o| o.with_separator(sep))
                    .with_has_header(true)
                    .with_infer_schema_length(Some(10_000))
                    .try_into_reader_with_file_path(Some(path.to_path_buf()))
                    .and_then(|r| r.finish())
            })?
            .map(|df| {
                // Blank lines, or lines of bare separators as spreadsheets write them, at
                // the end of the file: empty rows, dropped.
                let empty = |i: usize| df.columns().iter().all(|c| c.get(i).is_ok_and(|v| v.is_null()));
                let keep = (0..df.height()).rev().find(|&i| !empty(i)).map_or(0, |i| i + 1);
                df.slice(0, keep)
            })
            .map_err(read_err)
        }
        _ => Err(DataError::Format { path: path.to_path_buf() }),
    }
}

/// Reads in progress inside [`contained`].
static CONTAINING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Runs a polars read of `path`, a panic inside polars becoming an error naming the file:
/// polars' Parquet page decoder asserts on some corrupt pages instead of returning an error
/// (a page and its chunk agreeing on more values than the page holds: it slices the
/// page's validity bitmap past its end). The panic's message and
/// backtrace are not printed, the error says it all; a panic anywhere else is reported by
/// the hook that was there before.
fn contained<T>(path: &Path, read: impl FnOnce() -> T) -> Result<T, DataError> {
    use std::sync::atomic::Ordering::SeqCst;
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let next = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_polars = info.location().is_some_and(|l| l.file().contains("polars-"));
            if !(in_polars && CONTAINING.load(SeqCst) > 0) {
                next(info);
            }
        }));
    });
    CONTAINING.fetch_add(1, SeqCst);
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(read));
    CONTAINING.fetch_sub(1, SeqCst);
    out.map_err(|_| refused(path, "the reader failed on it: not a well-formed file"))
}

/// The first data row whose number of fields is not the header's, a blank line before
/// the last row, or a quote left open: `row 57 (line 58) has 9 fields, the header has
/// 10`. Quoted fields may hold separators and line breaks (a doubled quote inside one is a
/// quote). Blank lines that end the file are not faults (polars reads them as empty
/// rows, which [`read_frame`] drops). Read in blocks of 64 bytes as bit masks (byte by
/// byte, a 147 MB file took 0.3 s more to load; this way 0.05 s): only blocks with a
/// quote, or inside one, go byte by byte.
fn ragged_row(path: &Path, sep: u8) -> Result<Option<String>, DataError> {
    use std::io::Read;
    let io = |e: std::io::Error| refused(path, e);
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut scan = Shape { sep, line: 1, starts: 1, fields: 1, ..Shape::default() };
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        let mut blocks = buf[..n].chunks_exact(64);
        for b in &mut blocks {
            let b: &[u8; 64] = b.try_into().expect("64 bytes");
            let (quotes, newlines) = (mask(b, b'"'), mask(b, b'\n'));
            if scan.quoted || quotes != 0 {
                b.iter().for_each(|&c| scan.byte(c));
            } else {
                scan.block(newlines, mask(b, sep), !(newlines | mask(b, b'\r')));
            }
        }
        blocks.remainder().iter().for_each(|&c| scan.byte(c));
        // (The first fault stays: later rows cannot replace it.)
        if scan.fault.is_some() {
            return Ok(scan.fault);
        }
    }
    if scan.quoted {
        return Ok(Some(format!("the quote opened on line {} is never closed", scan.opened)));
    }
    scan.byte(b'\n');
    Ok(scan.fault)
}

/// Bit j set where byte j is `c`: four 16-byte compares (SSE2, which every x86-64 has;
/// written as a loop, the compiler built the mask a bit at a time).
#[inline]
fn mask(b: &[u8; 64], c: u8) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of x86-64; the loads read 4 × 16 bytes of the 64-byte array.
        unsafe {
            let v = _mm_set1_epi8(c as i8);
            (0..4).fold(0u64, |m, q| {
                let x = _mm_loadu_si128(b.as_ptr().add(16 * q).cast());
                m | u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(x, v)) as u16) << (16 * q)
            })
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        b.iter().enumerate().fold(0u64, |m, (j, &x)| m | u64::from(x == c) << j)
    }
}

/// [`ragged_row`]'s state between bytes.
#[derive(Default)]
struct Shape {
    sep: u8,
    /// The current line, the line the current record started on and the line its open
    /// quote started on (1-based).
    line: usize,
    starts: usize,
    opened: usize,
    /// The current record's fields so far, and whether it has any content yet.
    fields: usize,
    content: bool,
    /// The first blank line outside quotes, if any.
    blank: Option<usize>,
    quoted: bool,
    header: Option<usize>,
    rows: usize,
    fault: Option<String>,
}

impl Shape {
    fn byte(&mut self, c: u8) {
        match c {
            b'\n' => self.newline(),
            b'\r' => {}
            b'"' => {
                self.quoted = !self.quoted;
                self.opened = if self.quoted { self.line } else { self.opened };
                self.content = true;
            }
            _ => {
                self.fields += usize::from(c == self.sep && !self.quoted);
                self.content = true;
            }
        }
    }

    /// 64 bytes outside any quote, as masks of their newlines, separators and content
    /// bytes (all but line ends).
    fn block(&mut self, mut newlines: u64, seps: u64, content: u64) {
        let mut rest = u64::MAX;
        while newlines != 0 {
            let k = newlines.trailing_zeros();
            let before = rest & ((1u64 << k) - 1);
            self.fields += (seps & before).count_ones() as usize;
            self.content |= content & before != 0;
            self.newline();
            rest &= !(before | 1u64 << k);
            newlines &= newlines - 1;
        }
        self.fields += (seps & rest).count_ones() as usize;
        self.content |= content & rest != 0;
    }

    fn newline(&mut self) {
        self.line += 1;
        if self.quoted {
            return;
        }
        if !self.content {
            self.blank = self.blank.or(Some(self.starts));
        } else if let (Some(b), None) = (self.blank, &self.fault) {
            self.fault = Some(format!("line {b} is blank; blank lines may only end the file"));
        } else if self.fault.is_none() {
            match self.header {
                None => self.header = Some(self.fields),
                Some(h) => {
                    self.rows += 1;
                    if self.fields != h {
                        let s = if self.fields == 1 { "" } else { "s" };
                        self.fault = Some(format!("row {} (line {}) has {} field{s}, the header has {h}", self.rows, self.starts, self.fields));
                    }
                }
            }
        }
        (self.fields, self.content, self.starts) = (1, false, self.line);
    }
}

/// More columns than a long-format file of daily bars could mean (one per field: `date`,
/// `symbol`, prices, volume and extra fields); a wide (dates × symbols) table, or a file
/// that is not data at all, is refused before it is parsed.
const MAX_COLUMNS: usize = 1000;

fn too_wide(path: &Path, width: usize) -> DataError {
    refused(path, format!("{width} columns, more than the {MAX_COLUMNS} a long-format file (one row per date and symbol, one column per field) can have"))
}

/// Fields in the header line (separators outside quotes, plus one).
fn header_width(path: &Path, sep: u8) -> usize {
    use std::io::BufRead;
    let mut header = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = std::io::BufReader::new(f).read_until(b'\n', &mut header);
    }
    let mut quoted = false;
    1 + header.iter().filter(|&&b| {
        quoted ^= b == b'"';
        b == sep && !quoted
    }).count()
}

/// The CSV's field separator: a comma, unless the header line has none and has semicolons
/// (spreadsheets in locales whose decimal mark is a comma) or tabs.
fn separator(path: &Path) -> u8 {
    use std::io::BufRead;
    let mut header = String::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = std::io::BufReader::new(f).read_line(&mut header);
    }
    [b',', b';', b'\t'].into_iter().find(|c| header.as_bytes().contains(c)).unwrap_or(b',')
}

/// Other names the standard columns go by in common exports (Yahoo Finance, vendor
/// dumps), compared after [`canonical`]: a file with `Date, Ticker, …, Adj Close` loads
/// as it is. A column with the standard name itself always wins over an alias.
const ALIASES: &[(&str, &[&str])] = &[
    ("date", &["datetime", "timestamp", "trade_date", "trading_date", "time"]),
    ("symbol", &["ticker", "code", "instrument", "asset", "stock", "sym"]),
    ("adj_close", &["adjclose", "adjusted_close", "adj_price", "close_adj"]),
    ("volume", &["vol"]),
    ("cap", &["market_cap", "marketcap", "mktcap", "mkt_cap", "market_value"]),
];

/// A column name as the language sees it: lower case, spaces and hyphens as underscores
/// (`Adj Close` → `adj_close`, `Market-Cap` → `market_cap`).
fn canonical(name: &str) -> String {
    // A byte-order mark (spreadsheets write one) sits before the first column's name.
    name.trim_start_matches('\u{feff}').trim().to_ascii_lowercase().replace([' ', '-'], "_")
}

/// Finds a standard column by its name (case, spaces and hyphens aside), else by one of
/// its [`ALIASES`].
fn find_col<'a>(df: &'a DataFrame, name: &str) -> Option<&'a Column> {
    let by = |n: &str| df.columns().iter().find(|c| canonical(c.name()) == n);
    by(name).or_else(|| ALIASES.iter().find(|(std, _)| *std == name)?.1.iter().find_map(|a| by(a)))
}

fn column_names(df: &DataFrame) -> String {
    df.columns().iter().map(|c| c.name().to_string()).collect::<Vec<_>>().join(", ")
}

/// A column as `f64` per row (NaN for null), with a clear error for text that is not a number.
fn numeric(path: &Path, col: &Column) -> Result<Vec<f64>, DataError> {
    let name = col.name().to_string();
    let bad = |row: usize, msg: String| DataError::BadValue { path: path.to_path_buf(), column: name.clone(), row, msg };
    match col.dtype() {
        DataType::String => {
            let s = col.str().map_err(|e| bad(0, e.to_string()))?;
            s.iter()
                .enumerate()
                .map(|(i, v)| match v {
                    None => Ok(f64::NAN),
                    Some(t) if t.trim().is_empty() || t.trim().eq_ignore_ascii_case("nan") => Ok(f64::NAN),
                    Some(t) => t.trim().parse::<f64>().map_err(|_| bad(i + 1, format!("'{t}' is not a number"))),
                })
                .collect()
        }
        dt if dt.is_primitive_numeric() || matches!(dt, DataType::Boolean) => {
            let c = col.cast(&DataType::Float64).map_err(|e| bad(0, e.to_string()))?;
            let f = c.f64().map_err(|e| bad(0, e.to_string()))?;
            // Chunk by chunk: a chunk without nulls is one slice copy (an `Option` per
            // value, through polars' validity iterator, was 7 % of loading).
            let mut out = Vec::with_capacity(f.len());
            for a in f.downcast_iter() {
                if a.validity().is_none_or(|v| v.unset_bits() == 0) {
                    out.extend_from_slice(a.values());
                } else {
                    out.extend(a.iter().map(|v| v.copied().unwrap_or(f64::NAN)));
                }
            }
            Ok(out)
        }
        dt => Err(bad(1, format!("has type {dt}, expected numbers"))),
    }
}

/// A price, volume or market-cap column: below zero cannot be right (a sign lost in an
/// export, a placeholder such as -1 or -999 for "unknown"), so it is refused by row rather
/// than scored; zero is left as data (a halted stock's volume).
fn not_negative(path: &Path, col: &Column) -> Result<Vec<f64>, DataError> {
    let values = numeric(path, col)?;
    match values.iter().position(|v| *v < 0.0) {
        Some(r) => Err(DataError::BadValue {
            path: path.to_path_buf(),
            column: col.name().to_string(),
            row: r + 1,
            msg: format!("{} is negative; prices, volumes and market caps cannot be (leave a cell empty where the value is unknown)", values[r]),
        }),
        None => Ok(values),
    }
}

fn dates(path: &Path, col: &Column) -> Result<Vec<Date>, DataError> {
    let bad = |row: usize, msg: String| DataError::BadValue { path: path.to_path_buf(), column: "date".into(), row, msg };
    match col.dtype() {
        DataType::Date | DataType::Datetime(_, _) => {
            // A timestamp keeps its calendar day.
            let c = col.cast(&DataType::Date).and_then(|c| c.cast(&DataType::Int32)).map_err(|e| bad(0, e.to_string()))?;
            let i = c.i32().map_err(|e| bad(0, e.to_string()))?;
            i.iter()
                .enumerate()
                .map(|(r, v)| v.map(Date).ok_or_else(|| bad(r + 1, "missing date".into())))
                .collect()
        }
        DataType::String => {
            let s = col.str().map_err(|e| bad(0, e.to_string()))?;
            super::date::parse_column(s.iter()).map_err(|(r, m)| bad(r, m))
        }
        dt if dt.is_integer() => {
            // YYYYMMDD integers.
            let c = col.cast(&DataType::Int64).map_err(|e| bad(0, e.to_string()))?;
            let i = c.i64().map_err(|e| bad(0, e.to_string()))?;
            i.iter()
                .enumerate()
                .map(|(r, v)| match v {
                    None => Err(bad(r + 1, "missing date".into())),
                    Some(n) => n.to_string().parse::<Date>().map_err(|m| bad(r + 1, m)),
                })
                .collect()
        }
        dt => Err(bad(1, format!("has type {dt}, expected a date"))),
    }
}

fn strings(path: &Path, col: &Column) -> Result<Vec<String>, DataError> {
    let name = col.name().to_string();
    let bad = |row: usize, msg: String| DataError::BadValue { path: path.to_path_buf(), column: name.clone(), row, msg };
    let c = col.cast(&DataType::String).map_err(|e| bad(0, e.to_string()))?;
    let s = c.str().map_err(|e| bad(0, e.to_string()))?;
    s.iter()
        .enumerate()
        .map(|(r, v)| match v {
            Some(t) if !t.trim().is_empty() => Ok(t.trim().to_string()),
            _ => Err(bad(r + 1, "missing value".into())),
        })
        .collect()
}

/// Loads a long-format file into adjusted panels (see the module docs).
///
/// Rows may come in any order; duplicate (date, symbol) pairs, missing columns and
/// non-numeric values are errors that name the file, column and row.
pub fn load(path: &Path, opts: &LoadOptions) -> Result<MarketData, DataError> {
    from_frame(read_frame(path)?, path, opts, true)
}

/// Loads a long-format frame already in memory (the Python package's pandas and polars
/// input) with the same checks as [`load`]; `name` stands for the file in its errors, and
/// groups come from `opts` alone.
pub fn load_frame(df: DataFrame, name: &Path, opts: &LoadOptions) -> Result<MarketData, DataError> {
    from_frame(df, name, opts, false)
}

/// `beside`: a `sp500_constituents.csv` next to the file gives the groups unless `opts` does.
fn from_frame(df: DataFrame, path: &Path, opts: &LoadOptions, beside: bool) -> Result<MarketData, DataError> {
    if df.height() == 0 {
        return Err(DataError::Empty { path: path.to_path_buf() });
    }
    // polars can hand back a column shorter than the frame from a malformed Parquet file
    // (a fuzzer's find: a column chunk declaring a negative number of values); every row
    // needs every field.
    if let Some(c) = df.columns().iter().find(|c| c.len() != df.height()) {
        return Err(refused(path, format!("column '{}' has {} values for {} rows", c.name(), c.len(), df.height())));
    }
    if df.width() > MAX_COLUMNS {
        return Err(too_wide(path, df.width()));
    }
    for c in REQUIRED {
        if find_col(&df, c).is_none() {
            let aliases = ALIASES.iter().find(|(std, _)| std == c).map(|(_, a)| format!("; nor {}", a.join(", "))).unwrap_or_default();
            return Err(DataError::MissingColumn {
                path: path.to_path_buf(),
                column: (*c).to_string(),
                found: format!("{}{aliases}", column_names(&df)),
            });
        }
    }
    let col = |n: &str| find_col(&df, n).expect("checked above");
    let row_dates = dates(path, col("date"))?;
    // Symbols are borrowed from the column: no per-row String (2 million on the full set).
    let sym_col = col("symbol").cast(&DataType::String).map_err(|e| refused(path, e))?;
    let sym_ca = sym_col.str().map_err(|e| refused(path, e))?;
    let mut row_syms: Vec<&str> = Vec::with_capacity(df.height());
    for (r, v) in sym_ca.iter().enumerate() {
        match v.map(str::trim) {
            Some(t) if !t.is_empty() => row_syms.push(t),
            _ => {
                return Err(DataError::BadValue { path: path.to_path_buf(), column: "symbol".into(), row: r + 1, msg: "missing value".into() })
            }
        }
    }

    // Calendar and universe, both sorted, and each row's date and asset index.
    let (cal, row_t) = calendar(&row_dates);
    let (uni, row_a) = universe(&row_syms);
    let nd = cal.len();
    let na = uni.len();
    // Cells are indexed with u32 below.
    if Panel::cells(nd, na) > u32::MAX as usize {
        return Err(refused(path, format!("{nd} dates × {na} symbols is too large a panel")));
    }

    // Cell index per row, and duplicate detection.
    let mut first_row = vec![u32::MAX; Panel::cells(nd, na)];
    let mut cell: Vec<u32> = Vec::with_capacity(row_dates.len());
    for (r, (&t, &a)) in row_t.iter().zip(&row_a).enumerate() {
        let c = Panel::cell(nd, t as usize, a as usize);
        if first_row[c] != u32::MAX {
            return Err(DataError::Duplicate {
                path: path.to_path_buf(),
                date: row_dates[r],
                symbol: row_syms[r].to_string(),
                first: first_row[c] as usize + 1,
                second: r + 1,
            });
        }
        first_row[c] = r as u32;
        cell.push(c as u32);
    }
    drop(first_row);
    drop((row_dates, row_t, row_a));
    let uni: Vec<String> = uni.iter().map(|s| s.to_string()).collect();
    drop(row_syms);

    let scatter = |values: &[f64]| {
        let mut data = vec![f64::NAN; Panel::cells(nd, na)];
        for (&c, &v) in cell.iter().zip(values) {
            data[c as usize] = if v.is_finite() { v } else { f64::NAN };
        }
        Panel::from_cells(nd, na, data)
    };

    let close_raw = not_negative(path, col("close"))?;
    let factor: Vec<f64> = match find_col(&df, "adj_close") {
        Some(adj) => {
            let adj = not_negative(path, adj)?;
            adj.iter().zip(&close_raw).map(|(a, c)| if *c != 0.0 { a / c } else { f64::NAN }).collect()
        }
        None => {
            tracing::warn!("{}: no adj_close column; prices are taken as already adjusted", path.display());
            vec![1.0; close_raw.len()]
        }
    };

    let mut fields = BTreeMap::new();
    let adjusted = |raw: Vec<f64>| -> Panel {
        let adj: Vec<f64> = raw.iter().zip(&factor).map(|(v, f)| v * f).collect();
        scatter(&adj)
    };
    for name in ["open", "high", "low"] {
        fields.insert(name.to_string(), Arc::new(adjusted(not_negative(path, col(name))?)));
    }
    if let Some(c) = find_col(&df, "vwap") {
        fields.insert("vwap".to_string(), Arc::new(adjusted(not_negative(path, c)?)));
    }
    if let Some(c) = find_col(&df, "cap") {
        fields.insert("cap".to_string(), Arc::new(scatter(&not_negative(path, c)?)));
    }
    fields.insert("close".to_string(), Arc::new(adjusted(close_raw)));
    let vol: Vec<f64> = not_negative(path, col("volume"))?
        .iter()
        .zip(&factor)
        .map(|(v, f)| if *f != 0.0 { v / f } else { f64::NAN })
        .collect();
    fields.insert("volume".to_string(), Arc::new(scatter(&vol)));

    // The columns read as standard ones, under whatever name they had.
    let found: Vec<(&str, &str)> = REQUIRED.iter().chain(OPTIONAL).filter_map(|n| Some((*n, find_col(&df, n)?.name().as_str()))).collect();
    let standard: Vec<&str> = found.iter().map(|(_, name)| *name).collect();
    let read_as: Vec<(String, String)> =
        found.iter().filter(|(n, name)| name.to_ascii_lowercase() != *n).map(|(n, name)| (name.to_string(), n.to_string())).collect();
    if !read_as.is_empty() {
        tracing::info!("{}: read {}", path.display(), super::describe_read_as(&read_as));
    }
    // Extra numeric columns become fields as they are (no adjustment), under their
    // canonical names.
    for c in df.columns() {
        let lname = canonical(c.name());
        if standard.contains(&c.name().as_str()) || REQUIRED.contains(&lname.as_str()) || OPTIONAL.contains(&lname.as_str()) {
            continue;
        }
        if c.dtype().is_primitive_numeric() {
            fields.insert(lname, Arc::new(scatter(&numeric(path, c)?)));
        } else {
            tracing::debug!("{}: column '{}' is not numeric; ignored", path.display(), c.name());
        }
    }

    let groups_path = opts.groups.clone().or_else(|| {
        let p = path.parent().filter(|_| beside)?.join("sp500_constituents.csv");
        p.exists().then_some(p)
    });
    let groups = match groups_path {
        Some(g) => Some(load_groups(&g, &uni, opts.groups.is_some())?),
        None => None,
    };

    Ok(MarketData { source: path.to_path_buf(), dates: cal, symbols: uni, fields, groups, read_as })
}

/// The sorted distinct dates of the rows, and each row's index among them. Dates are day
/// numbers: over a span of up to [`DAY_TABLE`] days (2,800 years) a table per day finds
/// them, else a sort and binary searches. (On the shipped file's 2.1 million rows, the
/// sort of every row's date, a binary search and two hashes of the symbol per row were a
/// fifth of loading's samples; with [`universe`], loading went from 440–500 to 320–380 ms.)
fn calendar(rows: &[Date]) -> (Vec<Date>, Vec<u32>) {
    let (Some(lo), Some(hi)) = (rows.iter().map(|d| d.0).min(), rows.iter().map(|d| d.0).max()) else { return (Vec::new(), Vec::new()) };
    let span = (i64::from(hi) - i64::from(lo) + 1) as usize;
    if span > DAY_TABLE {
        let mut cal = rows.to_vec();
        cal.sort_unstable();
        cal.dedup();
        let at = rows.iter().map(|d| cal.binary_search(d).expect("date is in the calendar") as u32).collect();
        return (cal, at);
    }
    let day = |d: &Date| (d.0 - lo) as usize;
    let mut index = vec![u32::MAX; span];
    for d in rows {
        index[day(d)] = 0;
    }
    let mut cal = Vec::new();
    for (k, i) in index.iter_mut().enumerate() {
        if *i == 0 {
            *i = cal.len() as u32;
            cal.push(Date(lo + k as i32));
        }
    }
    (cal, rows.iter().map(|d| index[day(d)]).collect())
}

/// Days a [`calendar`] table may span.
const DAY_TABLE: usize = 1 << 20;

/// The sorted distinct symbols of the rows, and each row's index among them. A long file
/// holds each symbol's rows together, so a symbol is looked up only where it changes from
/// the row before (every row's symbol was hashed twice, 6 % of loading).
fn universe<'a>(rows: &[&'a str]) -> (Vec<&'a str>, Vec<u32>) {
    let mut seen: HashMap<&str, u32> = HashMap::new();
    let mut first: Vec<&str> = Vec::new();
    let mut at = Vec::with_capacity(rows.len());
    let mut prev: Option<(&str, u32)> = None;
    for &s in rows {
        let id = match prev {
            Some((p, id)) if p == s => id,
            _ => *seen.entry(s).or_insert_with(|| {
                first.push(s);
                first.len() as u32 - 1
            }),
        };
        prev = Some((s, id));
        at.push(id);
    }
    // Ids in order of first appearance, renumbered in sorted order.
    let mut order: Vec<u32> = (0..first.len() as u32).collect();
    order.sort_unstable_by_key(|&i| first[i as usize]);
    let mut rank = vec![0u32; first.len()];
    for (r, &i) in order.iter().enumerate() {
        rank[i as usize] = r as u32;
    }
    at.iter_mut().for_each(|a| *a = rank[*a as usize]);
    (order.iter().map(|&i| first[i as usize]).collect(), at)
}

/// Reads a `symbol,group` CSV (any header; the symbol column is `symbol`, the group column
/// is `group`, `sector`, `gics sector`, or else the last column) for the given universe.
/// `named`: the user gave this file (a file that lists none of the symbols is then an
/// error, not a warning).
pub fn load_groups(path: &Path, symbols: &[String], named: bool) -> Result<Groups, DataError> {
    let df = read_frame(path)?;
    let sym = find_col(&df, "symbol").or_else(|| df.columns().first()).ok_or_else(|| DataError::MissingColumn {
        path: path.to_path_buf(),
        column: "symbol".into(),
        found: column_names(&df),
    })?;
    let grp = ["group", "sector", "gics_sector"]
        .iter()
        .find_map(|n| find_col(&df, n))
        .or_else(|| df.columns().last().filter(|c| c.name() != sym.name()))
        .ok_or_else(|| DataError::MissingColumn {
            path: path.to_path_buf(),
            column: "group".into(),
            found: column_names(&df),
        })?;
    let syms = strings(path, sym)?;
    let grps = strings(path, grp)?;
    let mut names: Vec<String> = grps.clone();
    names.sort_unstable();
    names.dedup();
    // A symbol listed twice must be listed in one group (row numbers are 1-based).
    let mut by_sym: HashMap<&str, (u32, usize)> = HashMap::with_capacity(syms.len());
    for (r, (s, g)) in syms.iter().zip(&grps).enumerate() {
        let id = names.binary_search(g).expect("name listed") as u32;
        if let Some(&(other, first)) = by_sym.get(s.as_str()).filter(|(other, _)| *other != id) {
            let msg = format!("'{s}' is in group '{g}' here and in '{}' on row {}", names[other as usize], first + 1);
            return Err(DataError::BadValue { path: path.to_path_buf(), column: sym.name().to_string(), row: r + 1, msg });
        }
        by_sym.entry(s.as_str()).or_insert((id, r));
    }
    let by_sym: HashMap<&str, u32> = by_sym.into_iter().map(|(s, (id, _))| (s, id)).collect();
    let ids: Vec<Option<u32>> = symbols.iter().map(|s| by_sym.get(s.as_str()).copied()).collect();
    let missing = ids.iter().filter(|g| g.is_none()).count();
    // A file the user named that lists none of the data's symbols is a mistake (the wrong
    // file, or its columns in another order); one found beside the data may be for other
    // data, and is only warned about.
    if named && missing > 0 && missing == symbols.len() {
        let more = if symbols.len() > 3 { ", ..." } else { "" };
        let first = symbols.iter().take(3).map(String::as_str).collect::<Vec<_>>().join(", ");
        let msg = format!("none of the data's {} symbols ({first}{more}) is listed; expected `symbol,group` rows", symbols.len());
        return Err(DataError::Groups { path: path.to_path_buf(), msg });
    }
    if missing > 0 {
        tracing::warn!("{}: {missing} symbols have no group; indneutralize gives NaN for them", path.display());
    }
    Ok(Groups { ids, names, source: path.to_path_buf() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calendar_is_the_same_by_table_and_by_sort() {
        let rows: Vec<Date> = [20, 3, 20, 7, 3, 11].into_iter().map(Date).collect();
        let (cal, at) = calendar(&rows);
        assert_eq!(cal, [3, 7, 11, 20].map(Date));
        assert_eq!(at, [3, 0, 3, 1, 0, 2]);
        // A span too long for the table (a date in year 1 beside one in 2020) takes the sort.
        let far: Vec<Date> = [737_000, -719_000, 737_000, 0].into_iter().map(Date).collect();
        assert!((737_000 + 719_000) as usize > DAY_TABLE);
        let (cal, at) = calendar(&far);
        assert_eq!(cal, [-719_000, 0, 737_000].map(Date));
        assert_eq!(at, [2, 0, 2, 1]);
        assert_eq!(calendar(&[]), (Vec::new(), Vec::new()));
    }

    #[test]
    fn the_universe_is_sorted_whatever_the_row_order() {
        let rows = ["MSFT", "MSFT", "AAPL", "MSFT", "ZION", "AAPL", "AAPL"];
        let (uni, at) = universe(&rows);
        assert_eq!(uni, ["AAPL", "MSFT", "ZION"]);
        assert_eq!(at, [1, 1, 0, 1, 2, 0, 0]);
    }
}

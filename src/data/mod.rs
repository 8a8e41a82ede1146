//! Market data: loading long-format files into dense panels, adjustment, groups and splits.
//!
//! Everything here follows `conventions.md` ("Data"): prices are split/dividend adjusted with
//! `f = adj_close / close`, volume is divided by `f`, missing cells stay NaN.

mod date;
mod load;
mod parquet_check;
mod panel;
mod split;

pub use date::Date;
pub use load::{load, load_frame, load_groups, LoadOptions};
pub use panel::{gather_date_block, pool, prefetch, prefetch_l2, scatter_date_block, transpose, with_avx512, Panel, LANES};
pub use split::{Period, Splits};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Errors from reading and validating market data. Each names the file and, where it
/// applies, the column, row or value at fault.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("data file not found: {0}")]
    NotFound(PathBuf),
    #[error("{path}: cannot read: {msg}")]
    Read { path: PathBuf, msg: String },
    #[error("{path}: unsupported file type (expected .parquet, .csv or .tsv)")]
    Format { path: PathBuf },
    #[error("{path}: missing column '{column}' (found: {found})")]
    MissingColumn { path: PathBuf, column: String, found: String },
    #[error("{path}: column '{column}', row {row}: {msg}")]
    BadValue { path: PathBuf, column: String, row: usize, msg: String },
    #[error("{path}: duplicate row for date {date} and symbol '{symbol}' (rows {first} and {second})")]
    Duplicate { path: PathBuf, date: Date, symbol: String, first: usize, second: usize },
    #[error("{path}: the file has no rows")]
    Empty { path: PathBuf },
    #[error("{path}: {msg}")]
    Groups { path: PathBuf, msg: String },
    #[error("{0}")]
    Period(String),
}

/// Group membership per asset (e.g. GICS sector), used by `indneutralize`.
#[derive(Clone, Debug, PartialEq)]
pub struct Groups {
    /// Group id per asset; `None` when the asset is not in the group file.
    pub ids: Vec<Option<u32>>,
    /// Group names, indexed by id.
    pub names: Vec<String>,
    /// Where the groups came from.
    pub source: PathBuf,
}

/// A loaded data set: the trading calendar, the universe and one panel per field.
#[derive(Clone, Debug)]
pub struct MarketData {
    pub source: PathBuf,
    pub dates: Vec<Date>,
    pub symbols: Vec<String>,
    /// Adjusted `open, high, low, close, volume` plus any extra numeric columns.
    pub fields: BTreeMap<String, Arc<Panel>>,
    pub groups: Option<Groups>,
    /// Standard columns the file had under another name: (its name, the standard one),
    /// e.g. ("Ticker", "symbol"), for `data info`.
    pub read_as: Vec<(String, String)>,
}

/// `'Ticker' as symbol, 'Adj Close' as adj_close`.
pub fn describe_read_as(read_as: &[(String, String)]) -> String {
    read_as.iter().map(|(from, to)| format!("'{from}' as {to}")).collect::<Vec<_>>().join(", ")
}

/// Fields every data file has (split/dividend adjusted; `alphaloop ops` lists them).
pub const STORED_FIELDS: [&str; 5] = ["open", "high", "low", "close", "volume"];

/// Fields that are computed from the stored ones, with their definition (for `data info`
/// and the operator catalogue).
pub const DERIVED_FIELDS: &[(&str, &str)] = &[
    ("returns", "close / delay(close, 1) - 1"),
    ("vwap", "(high + low + close) / 3  (the data has no true VWAP: typical price); a vwap column in the data is used instead"),
    ("adv{d}", "ts_mean(close * volume, d), e.g. adv20"),
];

impl MarketData {
    pub fn n_dates(&self) -> usize {
        self.dates.len()
    }

    /// The index of trading date `d`, or the last date's when `d` is `None`; a date that
    /// is not a trading date is refused with the nearest ones.
    pub fn date_index(&self, d: Option<Date>) -> Result<usize, DataError> {
        let Some(d) = d else {
            return self.n_dates().checked_sub(1).ok_or_else(|| DataError::Period(format!("{}: the data has no dates", self.source.display())));
        };
        self.dates.binary_search(&d).map_err(|i| {
            let near = match (i.checked_sub(1).map(|j| self.dates[j]), self.dates.get(i)) {
                (Some(a), Some(b)) => format!("the nearest are {a} and {b}"),
                (Some(a), None) => format!("the data ends on {a}"),
                (None, Some(b)) => format!("the data starts on {b}"),
                (None, None) => "the data has no dates".into(),
            };
            DataError::Period(format!("date {d} is not a trading date of {}: {near}", self.source.display()))
        })
    }

    pub fn n_assets(&self) -> usize {
        self.symbols.len()
    }

    pub fn field(&self, name: &str) -> Option<&Arc<Panel>> {
        self.fields.get(name)
    }

    /// The [`DERIVED_FIELDS`] this data computes (a column of the same name replaces one).
    pub fn derived_fields(&self) -> impl Iterator<Item = &'static (&'static str, &'static str)> + '_ {
        DERIVED_FIELDS.iter().filter(|(n, _)| !self.fields.contains_key(*n))
    }

    /// Whether `vwap` is the typical price (high + low + close) / 3, as for the shipped
    /// data, rather than a vwap column of the file.
    pub fn vwap_is_typical(&self) -> bool {
        !self.fields.contains_key("vwap")
    }

    /// Index of the first date `>= d`.
    pub fn date_index_ge(&self, d: Date) -> usize {
        self.dates.partition_point(|x| *x < d)
    }

    /// This data cut after `n` dates, so nothing later can be read.
    pub fn truncate_dates(&self, n: usize) -> MarketData {
        let n = n.min(self.n_dates());
        MarketData {
            source: self.source.clone(),
            dates: self.dates[..n].to_vec(),
            symbols: self.symbols.clone(),
            fields: self
                .fields
                .iter()
                .map(|(k, p)| (k.clone(), Arc::new(p.truncate_dates(n))))
                .collect(),
            groups: self.groups.clone(),
            read_as: self.read_as.clone(),
        }
    }

    /// A short content fingerprint (shape, calendar ends and a sample of closes), so a
    /// saved result can tell whether it was computed on the same data.
    pub fn fingerprint(&self) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.dates.hash(&mut h);
        self.symbols.hash(&mut h);
        if let Some(c) = self.fields.get("close") {
            // Every 97th cell in asset-major order (the order of earlier versions, so
            // that saved fingerprints still match).
            let nd = c.n_dates().max(1);
            for i in (0..c.n_dates() * c.n_assets()).step_by(97) {
                c.get(i % nd, i / nd).to_bits().hash(&mut h);
            }
        }
        format!("{:016x}", h.finish())
    }
}

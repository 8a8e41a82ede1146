//! Train / valid / test splits and scoring periods.

use super::{DataError, Date, MarketData};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Date ranges of the three splits (inclusive). Defaults follow `conventions.md`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Splits {
    pub train: (Date, Date),
    pub valid: (Date, Date),
    pub test: (Date, Date),
}

impl Default for Splits {
    fn default() -> Splits {
        let d = |s: &str| s.parse::<Date>().expect("valid built-in date");
        Splits {
            train: (d("2000-01-01"), d("2012-12-31")),
            valid: (d("2013-01-01"), d("2015-12-31")),
            test: (d("2016-01-01"), d("2018-12-31")),
        }
    }
}

impl Splits {
    /// The splits for `data`: `configured` if given, else the defaults, unless the data
    /// lies wholly outside them (data of another era than the shipped set), where every
    /// period would be empty: then its own dates, the first 60 % train, the next 20 %
    /// valid and the last 20 % test (said in a warning, with the dates).
    pub fn resolve(configured: Option<&Splits>, data: &MarketData) -> Splits {
        if let Some(s) = configured {
            return s.clone();
        }
        let d = Splits::default();
        let (Some(&first), Some(&last)) = (data.dates.first(), data.dates.last()) else { return d };
        if last >= d.train.0 && first <= d.test.1 {
            return d;
        }
        let s = Splits::proportional(&data.dates);
        tracing::warn!(
            "{} ({first}..{last}) lies outside the default splits ({}..{}) and no [splits] are configured: using train {}..{}, valid {}..{}, test {}..{} (60/20/20 of its dates); set [splits] in alphaloop.toml to choose",
            data.source.display(),
            d.train.0,
            d.test.1,
            s.train.0,
            s.train.1,
            s.valid.0,
            s.valid.1,
            s.test.0,
            s.test.1
        );
        s
    }

    /// The first 60 % of `dates` (sorted, at least 3) train, the next 20 % valid, the rest test.
    fn proportional(dates: &[Date]) -> Splits {
        let n = dates.len();
        let at = |k: usize| dates[k.min(n.saturating_sub(1))];
        let (a, b) = ((n * 3 / 5).max(1), (n * 4 / 5).max(2));
        Splits { train: (at(0), at(a - 1)), valid: (at(a), at(b - 1)), test: (at(b), at(n - 1)) }
    }
}

/// Which dates are scored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Period {
    Train,
    Valid,
    Test,
    /// Every date in the data.
    All,
    /// An explicit inclusive range.
    Range(Date, Date),
}

impl std::str::FromStr for Period {
    type Err = String;
    /// `train`, `valid`, `test`, `all`, or `START:END` (either side may be empty).
    fn from_str(s: &str) -> Result<Period, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "train" => Ok(Period::Train),
            "valid" | "validation" => Ok(Period::Valid),
            "test" => Ok(Period::Test),
            "all" => Ok(Period::All),
            other => {
                let (a, b) = other.split_once(':').ok_or_else(|| {
                    format!("period '{s}' is not train, valid, test, all or START:END")
                })?;
                let a = if a.is_empty() { Date(i32::MIN) } else { a.parse()? };
                let b = if b.is_empty() { Date(i32::MAX) } else { b.parse()? };
                if a > b {
                    return Err(format!("period '{s}' ends before it starts"));
                }
                Ok(Period::Range(a, b))
            }
        }
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Period::Train => write!(f, "train"),
            Period::Valid => write!(f, "valid"),
            Period::Test => write!(f, "test"),
            Period::All => write!(f, "all"),
            Period::Range(a, b) => {
                // Open ends are stored as the extreme dates; print them empty, as written.
                let side = |d: &Date, open: i32| if d.0 == open { String::new() } else { d.to_string() };
                write!(f, "{}:{}", side(a, i32::MIN), side(b, i32::MAX))
            }
        }
    }
}

impl Period {
    /// The inclusive date range this period covers under `splits`.
    pub fn range(&self, splits: &Splits) -> (Date, Date) {
        match self {
            Period::Train => splits.train,
            Period::Valid => splits.valid,
            Period::Test => splits.test,
            Period::All => (Date(i32::MIN), Date(i32::MAX)),
            Period::Range(a, b) => (*a, *b),
        }
    }

    /// Indices `[start, end)` of the data's dates inside this period; an error naming the
    /// period and the data's span when none fall inside.
    pub fn indices(&self, splits: &Splits, data: &MarketData) -> Result<(usize, usize), DataError> {
        let (a, b) = self.range(splits);
        let start = data.date_index_ge(a);
        let end = data.dates.partition_point(|d| *d <= b);
        if start >= end {
            let span = match (data.dates.first(), data.dates.last()) {
                (Some(f), Some(l)) => format!("{f}..{l}"),
                _ => "no dates".into(),
            };
            return Err(DataError::Period(format!(
                "period '{self}' has no dates in {} (data covers {span}); pass --period START:END or --period all",
                data.source.display()
            )));
        }
        Ok((start, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proportional_splits_cut_the_dates_60_20_20() {
        let dates: Vec<Date> = (0..100).map(|k| Date(20_000 + k)).collect();
        let s = Splits::proportional(&dates);
        assert_eq!(s.train, (Date(20_000), Date(20_059)));
        assert_eq!(s.valid, (Date(20_060), Date(20_079)));
        assert_eq!(s.test, (Date(20_080), Date(20_099)));
    }

    #[test]
    fn parses_periods() {
        assert_eq!("TRAIN".parse::<Period>(), Ok(Period::Train));
        let r: Period = "2016-01-01:2016-12-31".parse().expect("range");
        assert_eq!(r.to_string(), "2016-01-01:2016-12-31");
        assert_eq!(":2001-01-01".parse::<Period>().map(|p| p.to_string()), Ok(":2001-01-01".into()));
        assert_eq!("2001-01-01:".parse::<Period>().map(|p| p.to_string()), Ok("2001-01-01:".into()));
        assert!("2016-12-31:2016-01-01".parse::<Period>().is_err());
        assert!("nope".parse::<Period>().is_err());
    }
}

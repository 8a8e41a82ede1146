//! Calendar dates as days since 1970-01-01, with ISO `YYYY-MM-DD` parsing and printing.
//!
//! A tiny self-contained type: the engine only needs ordering, parsing and display, and
//! keeping it here avoids tying the public API to a date crate.

use std::fmt;
use std::str::FromStr;

/// A calendar date, stored as days since the Unix epoch (the same physical value as an
/// Arrow/Polars `Date`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Date(pub i32);

impl Date {
    /// Builds a date from year, month (1-12) and day (1-31); `None` if it does not exist.
    pub fn from_ymd(y: i32, m: u32, d: u32) -> Option<Date> {
        if !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
            return None;
        }
        // Howard Hinnant's days_from_civil.
        let y = if m <= 2 { y - 1 } else { y };
        let era = if y >= 0 { y } else { y - 399 } / 400;
        let yoe = (y - era * 400) as i64;
        let m = m as i64;
        let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        Some(Date((era as i64 * 146097 + doe - 719468) as i32))
    }

    /// Year, month, day.
    pub fn ymd(self) -> (i32, u32, u32) {
        let z = self.0 as i64 + 719468;
        let era = if z >= 0 { z } else { z - 146096 } / 146097;
        let doe = z - era * 146097;
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
        let y = yoe + era * 400;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        ((if m <= 2 { y + 1 } else { y }) as i32, m, d)
    }
}

fn days_in_month(y: i32, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, m, d) = self.ymd();
        write!(f, "{y:04}-{m:02}-{d:02}")
    }
}

impl FromStr for Date {
    type Err = String;
    /// Accepts `YYYY-MM-DD`, `YYYYMMDD`, and `YYYY-MM-DD` followed by a time part.
    fn from_str(s: &str) -> Result<Date, String> {
        let s = s.trim();
        let bad = || format!("'{s}' is not a date (expected YYYY-MM-DD)");
        let (y, m, d) = if s.len() == 8 && s.bytes().all(|b| b.is_ascii_digit()) {
            (&s[0..4], &s[4..6], &s[6..8])
        } else {
            let head = s.get(0..10).ok_or_else(bad)?;
            let mut it = head.split('-');
            match (it.next(), it.next(), it.next()) {
                (Some(y), Some(m), Some(d)) => (y, m, d),
                _ => return Err(bad()),
            }
        };
        let y: i32 = y.parse().map_err(|_| bad())?;
        let m: u32 = m.parse().map_err(|_| bad())?;
        let d: u32 = d.parse().map_err(|_| bad())?;
        Date::from_ymd(y, m, d).ok_or_else(bad)
    }
}

/// Parses a column of date texts: ISO `YYYY-MM-DD` (or `YYYY/MM/DD`, `YYYYMMDD`, with or
/// without a time part), or the `D/M/YYYY` and `M/D/YYYY` forms of spreadsheet exports.
/// Which of those two a column uses is read off the column itself (a first number above
/// 12 makes it day-first, a second one above 12 month-first); a column where neither
/// happens cannot be told apart and is an error, never a guess. Errors carry the 1-based
/// row.
pub fn parse_column<'a>(values: impl Iterator<Item = Option<&'a str>>) -> Result<Vec<Date>, (usize, String)> {
    // (first, second, year) of a slash form, or a date already.
    enum Cell {
        Iso(Date),
        Slash(u32, u32, i32, usize),
    }
    let mut cells = Vec::new();
    let (mut day_first, mut month_first) = (None, None);
    for (r, v) in values.enumerate() {
        let t = v.ok_or((r + 1, "missing date".to_string()))?.trim();
        // Only a separator within the first three characters can start D/M or M/D (an
        // ISO date has four digits first), so ISO rows skip the split.
        let parts: Vec<&str> = if t.bytes().take(3).any(|b| b == b'/' || b == b'.') { t.split(['/', '.']).collect() } else { Vec::new() };
        let slash = parts.len() == 3 && parts[0].len() <= 2 && parts[1].len() <= 2 && parts[2].get(0..4).is_some_and(|y| y.bytes().all(|b| b.is_ascii_digit()));
        if slash {
            let bad = || (r + 1, format!("'{t}' is not a date (expected YYYY-MM-DD, D/M/YYYY or M/D/YYYY)"));
            let a: u32 = parts[0].parse().map_err(|_| bad())?;
            let b: u32 = parts[1].parse().map_err(|_| bad())?;
            let y: i32 = parts[2][0..4].parse().map_err(|_| bad())?;
            if a > 12 {
                day_first.get_or_insert(r);
            }
            if b > 12 {
                month_first.get_or_insert(r);
            }
            cells.push(Cell::Slash(a, b, y, r));
        } else {
            let iso = if t.get(4..5) == Some("/") { t.replacen('/', "-", 2) } else { t.to_string() };
            cells.push(Cell::Iso(iso.parse::<Date>().map_err(|m| (r + 1, m))?));
        }
    }
    let has_slash = cells.iter().any(|c| matches!(c, Cell::Slash(..)));
    let dmy = match (day_first, month_first) {
        (Some(d), Some(m)) => {
            return Err((d.max(m) + 1, format!("day-first (row {}) and month-first (row {}) dates in one column", d + 1, m + 1)));
        }
        (Some(_), None) => true,
        (None, Some(_)) => false,
        (None, None) if has_slash => {
            return Err((1, "day and month cannot be told apart in this column (no number above 12 in either place); write the dates as YYYY-MM-DD".into()));
        }
        (None, None) => false,
    };
    cells
        .into_iter()
        .map(|c| match c {
            Cell::Iso(d) => Ok(d),
            Cell::Slash(a, b, y, r) => {
                let (m, d) = if dmy { (b, a) } else { (a, b) };
                Date::from_ymd(y, m, d).ok_or((r + 1, format!("{a}/{b}/{y} is not a date")))
            }
        })
        .collect()
}

impl TryFrom<String> for Date {
    type Error = String;
    fn try_from(s: String) -> Result<Date, String> {
        s.parse()
    }
}

impl From<Date> for String {
    fn from(d: Date) -> String {
        d.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_columns_in_spreadsheet_forms_are_read_by_their_own_evidence() {
        let col = |v: &[&str]| parse_column(v.iter().map(|s| Some(*s)));
        let ymd = |y, m, d| Date::from_ymd(y, m, d).expect("date");
        // Month-first: 1/13 shows it; day-first: 13/1 does.
        assert_eq!(col(&["01/02/2015", "1/13/2015"]), Ok(vec![ymd(2015, 1, 2), ymd(2015, 1, 13)]));
        assert_eq!(col(&["01/02/2015", "13/1/2015"]), Ok(vec![ymd(2015, 2, 1), ymd(2015, 1, 13)]));
        assert_eq!(col(&["02.01.2015", "31.12.2015"]), Ok(vec![ymd(2015, 1, 2), ymd(2015, 12, 31)]));
        assert_eq!(col(&["2015/01/02", "2015-01-05 00:00:00", "20150106"]), Ok(vec![ymd(2015, 1, 2), ymd(2015, 1, 5), ymd(2015, 1, 6)]));
        // Nothing tells them apart, or both orders occur: an error, not a guess.
        assert!(col(&["01/02/2015", "03/04/2015"]).is_err_and(|(_, m)| m.contains("cannot be told apart")));
        assert_eq!(col(&["13/01/2015", "01/13/2015"]).map_err(|(r, _)| r), Err(2));
        assert_eq!(col(&["2015-01-02", "2015-02-30"]).map_err(|(r, _)| r), Err(2));
        assert_eq!(col(&["1/2/15"]).map_err(|(r, _)| r), Err(1));
    }

    #[test]
    fn round_trips_and_matches_epoch() {
        assert_eq!(Date::from_ymd(1970, 1, 1), Some(Date(0)));
        assert_eq!("2000-03-01".parse::<Date>().map(|d| d.to_string()), Ok("2000-03-01".into()));
        for days in [-1000, 0, 10957, 11016, 17896, 20000] {
            let d = Date(days);
            assert_eq!(d.to_string().parse::<Date>(), Ok(d));
        }
        assert_eq!("20181231".parse::<Date>().map(|d| d.to_string()), Ok("2018-12-31".into()));
        assert!("2018-02-30".parse::<Date>().is_err());
        assert!("yesterday".parse::<Date>().is_err());
    }
}

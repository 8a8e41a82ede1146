//! The look-ahead detector, the same for every kind of signal (expression, Python, WASM):
//! recompute the signal on a copy of the data where every value after a cutoff date is
//! replaced by noise. A signal that reads only the past gives bit-for-bit the same values
//! at and before the cutoff; any change there means it read the future.

use crate::data::{MarketData, Panel};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The detector's finding, recorded with every candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum LookAhead {
    /// No value at or before the cutoff changed.
    Clean { cutoff: String },
    /// `changed` values at or before the cutoff changed; the first on `first_date`.
    ReadsFuture { cutoff: String, first_date: String, changed: usize },
}

impl LookAhead {
    pub fn is_clean(&self) -> bool {
        matches!(self, LookAhead::Clean { .. })
    }
}

impl std::fmt::Display for LookAhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LookAhead::Clean { cutoff } => write!(f, "no look-ahead (values up to {cutoff} unchanged when later data is noise)"),
            LookAhead::ReadsFuture { cutoff, first_date, changed } => write!(
                f,
                "lookahead: {changed} values at or before {cutoff} changed when only later data was replaced by noise \
                 (first on {first_date}): the signal reads the future"
            ),
        }
    }
}

/// The noise every caller uses, so that a signal's verdict does not depend on who checked it.
pub const SEED: u64 = 0x5EED;

/// The default cutoff: three quarters into the data, so long windows have history before
/// it and there is a future after it.
pub fn default_cutoff(data: &MarketData) -> usize {
    (data.n_dates() * 3 / 4).min(data.n_dates().saturating_sub(2))
}

/// `data` with every field value on dates after index `cutoff` multiplied by a random
/// factor in [e^-0.17, e^0.17) (zeros become small random values), which keeps signs,
/// scale and missing values and changes everything else.
pub fn noised(data: &MarketData, cutoff: usize, seed: u64) -> MarketData {
    let mut out = data.clone();
    let mut state = seed | 1;
    for (k, (_, p)) in out.fields.iter_mut().enumerate() {
        state ^= (k as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut q = (**p).clone();
        let n = q.n_dates();
        // Asset by asset, date by date: the order of the random draws.
        for a in 0..q.n_assets() {
            for t in (cutoff + 1).min(n)..n {
                let u = (crate::xorshift(&mut state) >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0; // uniform in [-1, 1)
                let v = q.get(t, a);
                q.set(t, a, if v == 0.0 { 0.01 * u } else { v * (0.17 * u).exp() });
            }
        }
        *p = Arc::new(q);
    }
    out
}

/// Compares a signal computed on the real data with the one computed on [`noised`] data.
pub fn compare(data: &MarketData, clean: &Panel, noised: &Panel, cutoff: usize) -> LookAhead {
    let n = clean.n_dates().min(noised.n_dates());
    let last = cutoff.min(n.saturating_sub(1));
    let mut changed = 0usize;
    let mut first = usize::MAX;
    for a in 0..clean.n_assets().min(noised.n_assets()) {
        let (x, y) = (clean.series(a), noised.series(a));
        for t in 0..=last {
            let same = x[t].to_bits() == y[t].to_bits() || (x[t].is_nan() && y[t].is_nan());
            if !same {
                changed += 1;
                first = first.min(t);
            }
        }
    }
    let date = |i: usize| data.dates.get(i).map(|d| d.to_string()).unwrap_or_default();
    if changed == 0 {
        LookAhead::Clean { cutoff: date(last) }
    } else {
        LookAhead::ReadsFuture { cutoff: date(last), first_date: date(first), changed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> MarketData {
        let n = 40;
        let close = Panel::from_asset_major(n, 2, (0..2 * n).map(|i| 100.0 + i as f64).collect());
        MarketData {
            source: "t".into(),
            dates: (0..n as i32).map(|i| crate::data::Date(18000 + i)).collect(),
            symbols: vec!["A".into(), "B".into()],
            fields: [("close".to_string(), Arc::new(close))].into_iter().collect(),
            groups: None,
            read_as: Vec::new(),
        }
    }

    fn shifted(data: &MarketData, k: isize) -> Panel {
        let c = data.field("close").expect("close");
        let n = c.n_dates();
        let mut out = Panel::nan(n, c.n_assets());
        for a in 0..c.n_assets() {
            for t in 0..n {
                let s = t as isize - k;
                if s >= 0 && (s as usize) < n {
                    out.set(t, a, c.get(s as usize, a));
                }
            }
        }
        out
    }

    /// The detector as every caller runs it: the signal on the data and on its noised twin.
    fn detect(d: &MarketData, k: isize) -> LookAhead {
        let cutoff = default_cutoff(d);
        compare(d, &shifted(d, k), &shifted(&noised(d, cutoff, SEED), k), cutoff)
    }

    #[test]
    fn past_is_clean_future_is_caught() {
        let d = data();
        assert!(detect(&d, 1).is_clean());
        match detect(&d, -1) {
            LookAhead::ReadsFuture { changed, .. } => assert_eq!(changed, 2, "one date (the cutoff) per asset"),
            other => panic!("not caught: {other:?}"),
        }
    }
}

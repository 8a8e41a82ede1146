//! The `behaviour` vector: an alpha's cross-sectional ranks on a fixed sample of train dates
//! and stocks, z-scored per date. The cosine of two such vectors is the average (over the
//! sample dates) of the rank correlations of the two signals, so "find alphas that behave
//! like this one" is a nearest-neighbour query, whatever the code looks like.
//!
//! The sample is chosen once per store (from the data it was created with) and kept in the
//! store's metadata, so vectors written in different sessions stay comparable.

use crate::data::{Date, MarketData, Panel, Splits};
use crate::expr::kernels::cross::{rank_row, SortBuf};
use serde::{Deserialize, Serialize};

pub const SAMPLE_DATES: usize = 32;
pub const SAMPLE_SYMBOLS: usize = 32;
pub const DIM: usize = SAMPLE_DATES * SAMPLE_SYMBOLS;

/// Fewer finite sampled values than this per date and the date contributes zeros.
const MIN_PER_DATE: usize = 5;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BehaviourSample {
    pub dates: Vec<Date>,
    pub symbols: Vec<String>,
}

impl BehaviourSample {
    /// Evenly spaced dates from the last three quarters of the train split (so that long
    /// windows have filled), and evenly spaced stocks among those with a close on all of them.
    pub fn choose(data: &MarketData, splits: &Splits) -> Result<BehaviourSample, String> {
        let (lo, hi) = splits.train;
        let idx: Vec<usize> = (0..data.n_dates()).filter(|&t| data.dates[t] >= lo && data.dates[t] <= hi).collect();
        if idx.len() < SAMPLE_DATES * 2 {
            return Err(format!(
                "the train split {lo}..{hi} has {} dates in {}; the behaviour sample needs at least {}",
                idx.len(),
                data.source.display(),
                SAMPLE_DATES * 2
            ));
        }
        let tail = &idx[idx.len() / 4..];
        let dates: Vec<usize> = (0..SAMPLE_DATES).map(|i| tail[i * (tail.len() - 1) / (SAMPLE_DATES - 1)]).collect();
        let close = data.field("close").ok_or("the data has no close")?;
        let full: Vec<usize> = (0..data.n_assets()).filter(|&a| dates.iter().all(|&t| close.get(t, a).is_finite())).collect();
        if full.len() < SAMPLE_SYMBOLS {
            return Err(format!(
                "only {} stocks have a close on every sampled train date; the behaviour sample needs {SAMPLE_SYMBOLS}",
                full.len()
            ));
        }
        let symbols = (0..SAMPLE_SYMBOLS)
            .map(|i| data.symbols[full[i * (full.len() - 1) / (SAMPLE_SYMBOLS - 1)]].clone())
            .collect();
        Ok(BehaviourSample { dates: dates.iter().map(|&t| data.dates[t]).collect(), symbols })
    }

    /// The behaviour vector of `signal` (a panel over `data`), unit length; `None` when the
    /// signal has no usable values on the sample.
    pub fn vector(&self, data: &MarketData, signal: &Panel) -> Option<Vec<f32>> {
        let assets: Vec<Option<usize>> = self.symbols.iter().map(|s| data.symbols.iter().position(|x| x == s)).collect();
        let na = data.n_assets();
        let (mut row, mut ranks) = (vec![f64::NAN; na], vec![f64::NAN; na]);
        let mut buf = SortBuf::default();
        let mut out = vec![0f32; DIM];
        let mut any = false;
        for (k, d) in self.dates.iter().enumerate() {
            let Ok(t) = data.dates.binary_search(d) else { continue };
            if t >= signal.n_dates() {
                continue;
            }
            for (a, r) in row.iter_mut().enumerate() {
                *r = signal.get(t, a);
            }
            rank_row(&row, &mut ranks, &mut buf);
            let vals: Vec<f64> = assets.iter().map(|a| a.map(|a| ranks[a]).unwrap_or(f64::NAN)).collect();
            let fin: Vec<f64> = vals.iter().copied().filter(|v| v.is_finite()).collect();
            if fin.len() < MIN_PER_DATE {
                continue;
            }
            let (mean, sd) = crate::backtest::mean_std(&fin);
            if !(sd > 0.0) {
                continue;
            }
            for (j, v) in vals.iter().enumerate() {
                if v.is_finite() {
                    out[k * SAMPLE_SYMBOLS + j] = ((v - mean) / sd) as f32;
                    any = true;
                }
            }
        }
        let norm = out.iter().map(|x| x * x).sum::<f32>().sqrt();
        if !any || norm == 0.0 {
            return None;
        }
        out.iter_mut().for_each(|x| *x /= norm);
        Some(out)
    }
}

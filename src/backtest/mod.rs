//! Factor metrics, exactly as `conventions.md` ("Label and metrics") defines them.
//!
//! A [`Scorer`] is built once per (data, period): it holds the labels at every horizon
//! and the ranks of the main label, date-major, so that scoring many alphas only costs a
//! transpose and one sort per date of each signal.
//!
//! Choices where the conventions are silent (following Qlib/pandas), documented here and
//! summarised in docs/expressions.md:
//! * The stocks scored on a date are those with both a finite signal and a finite label
//!   (Qlib's `dropna`); dates with fewer than `min_stocks` (20) of them are skipped by
//!   every metric, including the long-short book.
//! * Long-short legs hold `N = floor(n / 5)` stocks each (Qlib's `int(len * 0.2)`): the
//!   N largest and the N smallest signals, ties going to the earlier symbol (pandas
//!   `nlargest`/`nsmallest` with `keep="first"`).
//! * Quintile q (1 = lowest) holds positions `floor((q-1)·n/5) .. floor(q·n/5)` of the
//!   signal sorted ascending (ties by symbol order).
//! * Turnover on the first scored date is measured against an empty book (1.0 for a full
//!   long-short entry); a skipped date leaves the book unchanged.
//! * Max drawdown is `min_t (cum_t − max_{s≤t} cum_s)` on the cumulative sum of net daily
//!   returns (≤ 0, Qlib's sign).
//! * Distinctness counts the finite signal values of each scored date (whether or not
//!   the label is finite).

pub mod stats;
mod ties;

pub use stats::{finite_bits, mean_std, pearson4, pearson_finite, pearson_k, pearson_many};

use crate::data::{DataError, MarketData, Panel, Period, Splits};
use crate::expr::kernels::cross::{neighbour_bits, tie_runs, SortBuf};
use ties::TieBits;
use rayon::prelude::*;
use std::sync::Arc;
use serde::{Deserialize, Serialize};

/// Settings of the label and the long-short book.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricsConfig {
    /// Label horizon h in days.
    pub horizon: usize,
    /// Days between the signal's close and the label's start (1: trade at the next close).
    pub gap: usize,
    /// Cost per unit of turnover, in basis points.
    pub cost_bps: f64,
    /// Dates with fewer stocks (finite signal and label) are skipped.
    pub min_stocks: usize,
    /// Extra horizons whose Pearson IC is reported (`ic_h5`, ...).
    pub ic_horizons: Vec<usize>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig { horizon: 1, gap: 1, cost_bps: 5.0, min_stocks: 20, ic_horizons: vec![5, 10, 20] }
    }
}

/// Every metric of one signal over one period. NaN (JSON `null`) where undefined.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    #[serde(deserialize_with = "nan_if_null")]
    pub ic: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub rank_ic: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub icir: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub rank_icir: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub ic_tstat: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub ic_h5: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub ic_h10: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub ic_h20: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub sharpe: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub ann_return: f64,
    /// The book's annualised volatility after costs: std × sqrt(252 / h), beside which
    /// its Sharpe reads (records stored before it was kept read it as NaN).
    #[serde(default = "nan", deserialize_with = "nan_if_null")]
    pub volatility: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub max_drawdown: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub turnover: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub coverage: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub distinctness: f64,
    /// Dates with a valid IC.
    pub n_days: usize,
    /// Mean label of each signal quintile, lowest first.
    #[serde(deserialize_with = "nans_if_null")]
    pub quintile_returns: [f64; 5],
}

/// A metric's field name (as JSON has it), its name for a reader, and its value.
pub type MetricRow = (&'static str, &'static str, fn(&Metrics) -> f64);

impl Metrics {
    /// The metrics a table of one alpha shows, in the order it shows them.
    pub const TABLE: [MetricRow; 15] = [
        ("ic", "IC", |m| m.ic),
        ("rank_ic", "Rank IC", |m| m.rank_ic),
        ("icir", "ICIR", |m| m.icir),
        ("rank_icir", "Rank ICIR", |m| m.rank_icir),
        ("ic_tstat", "IC t-stat", |m| m.ic_tstat),
        ("ic_h5", "IC, 5 days", |m| m.ic_h5),
        ("ic_h10", "IC, 10 days", |m| m.ic_h10),
        ("ic_h20", "IC, 20 days", |m| m.ic_h20),
        ("sharpe (net)", "Sharpe (net)", |m| m.sharpe),
        ("ann_return (net)", "annual return (net)", |m| m.ann_return),
        ("volatility (net)", "volatility (net)", |m| m.volatility),
        ("max_drawdown", "max drawdown", |m| m.max_drawdown),
        ("turnover", "turnover", |m| m.turnover),
        ("coverage", "coverage", |m| m.coverage),
        ("distinctness", "distinctness", |m| m.distinctness),
    ];

    /// The Rank IC's t-statistic: its mean over its standard deviation, times the square
    /// root of the days (a date has a Rank IC exactly when it has an IC: values with spread
    /// have ranks with spread).
    pub fn rank_ic_t(&self) -> f64 {
        self.rank_icir * (self.n_days as f64).sqrt()
    }
}

/// A daily return series' figures as conventions.md annualises a book's: annual return
/// mean × 252 / h, Sharpe mean / std × sqrt(252 / h), volatility std × sqrt(252 / h), max
/// drawdown on the cumulative sum (NaN, as the sum, for an empty series).
struct Book {
    ann_return: f64,
    sharpe: f64,
    volatility: f64,
    max_drawdown: f64,
    cumulative: f64,
}

impl Book {
    fn of(returns: &[f64], horizon: usize) -> Book {
        let h = horizon as f64;
        let (mu, sd) = stats::mean_std(returns);
        let (mut cum, mut peak, mut mdd) = (0.0f64, f64::NEG_INFINITY, 0.0f64);
        for r in returns {
            cum += r;
            peak = peak.max(cum);
            mdd = mdd.min(cum - peak);
        }
        let empty = returns.is_empty();
        Book {
            ann_return: mu * 252.0 / h,
            sharpe: mu / sd * (252.0 / h).sqrt(),
            volatility: sd * (252.0 / h).sqrt(),
            max_drawdown: if empty { f64::NAN } else { mdd },
            cumulative: if empty { f64::NAN } else { cum },
        }
    }
}

fn nan() -> f64 {
    f64::NAN
}

/// The equal-weight universe bought and held over a period: each date's mean label over
/// the stocks that have one (dates with fewer than `min_stocks` skipped, as the book skips
/// them), with the book's annualisation. The baseline a long-short book is read beside: a
/// book that earns less than the market with more volatility is no edge.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Market {
    #[serde(deserialize_with = "nan_if_null")]
    pub ann_return: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub sharpe: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub volatility: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub max_drawdown: f64,
    /// The sum of the daily returns (the book's cumulative return is a sum too).
    #[serde(deserialize_with = "nan_if_null")]
    pub cumulative: f64,
    pub n_days: usize,
}

/// JSON has no NaN: serde_json writes it as `null`, and this reads `null` back as NaN.
pub fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn nans_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<[f64; 5], D::Error> {
    let v = <[Option<f64>; 5]>::deserialize(d)?;
    Ok(v.map(|x| x.unwrap_or(f64::NAN)))
}

/// Precomputed labels for scoring many signals on one period.
pub struct Scorer {
    cfg: MetricsConfig,
    /// First scored date index (in the data the scorer was built on).
    start: usize,
    /// One past the last date of the period.
    end: usize,
    n_assets: usize,
    /// The label at the main horizon, then at each of `cfg.ic_horizons`: per date,
    /// [`lanes`](Self::lanes) rows of one value per asset (NaN rows past the last
    /// horizon), so that the ICs at four horizons read four contiguous rows ([`pearson4`]).
    labels: Vec<f64>,
    /// Rows per date in `labels`: the horizons rounded up to a multiple of 4.
    lanes: usize,
    /// Finite main labels per date.
    n_labelled: Vec<u32>,
    /// Average ranks (1-based) of the main label among its finite values, per date
    /// (multiples of 1/2 below 2^23, so `f32` holds them exactly at half the traffic).
    main_ranks: Vec<f32>,
    /// Per date, Σ (rank − mean rank)² of the main label over its finite values (exact:
    /// centred ranks are multiples of 1/2): the rank IC's label-side sum whenever the
    /// signal covers every labelled stock.
    main_syy: Vec<f64>,
    /// Per date (stride `n_assets`, the first `counts` entries used), the assets with a
    /// finite main label in ascending label order, ties by asset.
    main_order: Vec<u32>,
    /// The runs of two or more equal main labels (equal returns, mostly unchanged prices),
    /// as ranges of [`main_order`](Self::main_order)'s entries of their date; date i's
    /// are `main_groups[main_group_at[i]..main_group_at[i + 1]]`.
    main_groups: Vec<[u32; 2]>,
    main_group_at: Vec<u32>,
    /// Per date and row of [`labels`](Self::labels) (stride [`words`]`(n_assets)`), a bit
    /// per asset: whether that label is finite. The scorer tests signal stocks against the
    /// main label's in sorted (random) order, where 64 bytes stay in L1 and the 4 KB label
    /// row would not, and the Pearson passes test eight cells' bits at once.
    label_ok: Vec<u64>,
}


/// 64-bit words of a per-date bitset over `n_assets` assets.
fn words(n_assets: usize) -> usize {
    n_assets.div_ceil(64)
}

/// The labels of dates `[start, end)` at each horizon of `horizons` (the main one first):
/// per date, `lanes` rows of one value per asset, `close(t + gap + h) / close(t + gap) − 1`
/// where finite and `t + gap + h` lies inside the period, else NaN (so are the rows past
/// the horizons); each row's finite cells as a bitset ([`words`] per row, `finite_bits`);
/// and per date the count of finite labels at the first horizon.
///
/// Computed row by row from a date-major copy of the closes, each row's bits while it is
/// in cache: walking each asset's series and writing one cell per date row (a cache line
/// each), then the bits in a pass of their own, took 150 ms for the full panel's four
/// horizons, most of the scorer's set-up.
fn label_rows(close: &Panel, start: usize, end: usize, gap: usize, horizons: &[usize], lanes: usize) -> (Vec<f64>, Vec<u64>, Vec<u32>) {
    let na = close.n_assets();
    let (nd, w) = (end - start, words(na));
    let mut rows = vec![f64::NAN; nd * lanes * na];
    let mut ok = vec![0u64; nd * lanes * w];
    let mut counts = vec![0u32; nd];
    // Closes from the first base date on: row r is date `first + r`.
    let first = (start + gap).min(end);
    let mut c = Vec::new();
    close.to_date_major(first, end, &mut c);
    let row = |t: usize| &c[(t - first) * na..(t - first + 1) * na];
    // (Chunks of at least one cell: with no assets there are no rows, and nothing to do.)
    let dates = rows.par_chunks_mut((lanes * na).max(1)).zip(ok.par_chunks_mut((lanes * w).max(1))).zip(counts.par_iter_mut());
    dates.enumerate().for_each(|(i, ((out, bits), count))| {
        let base = start + i + gap;
        for (k, &h) in horizons.iter().enumerate() {
            // The label needs close(t + gap + h), which must lie inside the period.
            if base + h >= end {
                continue;
            }
            let (now, later, out) = (row(base), row(base + h), &mut out[k * na..(k + 1) * na]);
            crate::data::with_avx512(#[inline(always)] || {
                for ((o, &b), &l) in out.iter_mut().zip(now).zip(later) {
                    let v = l / b - 1.0;
                    *o = if v.is_finite() { v } else { f64::NAN };
                }
            });
            let bits = &mut bits[k * w..(k + 1) * w];
            finite_bits(out, bits);
            if k == 0 {
                *count = bits.iter().map(|b| b.count_ones()).sum();
            }
        }
    });
    (rows, ok, counts)
}

impl Scorer {
    /// Builds the labels for dates `[start, end)` of `data` (which should already be cut at
    /// `end`, see [`prepare`]).
    pub fn new(data: &MarketData, start: usize, end: usize, cfg: MetricsConfig) -> Result<Scorer, DataError> {
        let close = data.field("close").ok_or_else(|| DataError::Period("the data has no close prices".into()))?;
        if data.n_assets() < cfg.min_stocks {
            return Err(DataError::Period(format!(
                "{}: the universe has {} stock(s); cross-sectional metrics need at least {} per date",
                data.source.display(),
                data.n_assets(),
                cfg.min_stocks
            )));
        }
        let na = data.n_assets();
        let horizons: Vec<usize> = std::iter::once(cfg.horizon).chain(cfg.ic_horizons.iter().copied()).collect();
        let lanes = horizons.len().div_ceil(4) * 4;
        let (labels, label_ok, n_labelled) = label_rows(close, start, end, cfg.gap, &horizons, lanes);
        let mut main_ranks = vec![f32::NAN; (end - start) * na];
        let mut main_order = vec![0u32; (end - start) * na];
        let mut main_syy = vec![0.0; end - start];
        let mut groups: Vec<Vec<[u32; 2]>> = vec![Vec::new(); end - start];
        main_ranks
            .par_chunks_mut(na)
            .zip(main_order.par_chunks_mut(na))
            .zip(labels.par_chunks((lanes * na).max(1)).map(|r| &r[..na]))
            .zip(main_syy.par_iter_mut().zip(groups.par_iter_mut()))
            .for_each_init(SortBuf::default, |buf, (((o, ord), r), (syy, groups))| {
                let sorted = buf.sort_finite(r);
                let mid = (sorted.len() as f64 + 1.0) / 2.0;
                tie_runs(sorted.len(), |j| sorted[j].0 == sorted[j - 1].0, |i, j, rk| {
                    for (p, &(_, a)) in sorted.iter().enumerate().take(j).skip(i) {
                        o[a as usize] = rk as f32;
                        ord[p] = a;
                    }
                    *syy += (j - i) as f64 * (rk - mid) * (rk - mid);
                    if j - i > 1 {
                        groups.push([i as u32, j as u32]);
                    }
                });
            });
        let mut main_group_at = vec![0u32];
        main_group_at.extend(groups.iter().scan(0u32, |at, g| {
            *at += g.len() as u32;
            Some(*at)
        }));
        let main_groups = groups.concat();
        Ok(Scorer { cfg, start, end, n_assets: na, labels, lanes, n_labelled, main_ranks, main_syy, main_order, main_groups, main_group_at, label_ok })
    }

    pub fn config(&self) -> &MetricsConfig {
        &self.cfg
    }

    /// The main label's per-date percentile ranks (rank / count, ties averaged, as
    /// `rank()` ranks a signal), date-major over the period; NaN where it is not finite.
    pub fn label_ranks(&self) -> Vec<f32> {
        let na = self.n_assets;
        let mut out = self.main_ranks.clone();
        for (row, &n) in out.chunks_mut(na.max(1)).zip(&self.n_labelled) {
            for r in row {
                *r = (*r as f64 / n as f64) as f32;
            }
        }
        out
    }

    /// Indices `[start, end)` of the period's dates in the data.
    pub fn span(&self) -> (usize, usize) {
        (self.start, self.end)
    }

    /// The equal-weight universe bought and held over the period ([`Market`]), and its
    /// daily return per date of the period (NaN on a skipped date).
    pub fn market(&self) -> (Market, Vec<f64>) {
        let (na, lanes) = (self.n_assets, self.lanes);
        let daily: Vec<f64> = (0..self.n_labelled.len())
            .map(|i| {
                if (self.n_labelled[i] as usize) < self.cfg.min_stocks.max(1) {
                    return f64::NAN;
                }
                let row = &self.labels[i * na * lanes..i * na * lanes + na];
                let (sum, n) = row.iter().filter(|v| v.is_finite()).fold((0.0, 0usize), |a, v| (a.0 + v, a.1 + 1));
                sum / n as f64
            })
            .collect();
        let days: Vec<f64> = daily.iter().copied().filter(|v| v.is_finite()).collect();
        let b = Book::of(&days, self.cfg.horizon);
        let m = Market { ann_return: b.ann_return, sharpe: b.sharpe, volatility: b.volatility, max_drawdown: b.max_drawdown, cumulative: b.cumulative, n_days: days.len() };
        (m, daily)
    }

    /// Scores one signal (a panel over the same data the scorer was built on).
    pub fn score(&self, signal: &Panel) -> Metrics {
        self.score_many(&[signal]).pop().unwrap_or_default()
    }

    /// Scores several signals in one sweep over the dates: each date's labels (about
    /// 24 KB for 500 stocks) are read from memory once for all of them instead of once per
    /// signal, which is most of what scoring one signal waits for. Same results as
    /// [`score`](Self::score) on each, bit for bit.
    pub fn score_many(&self, signals: &[&Panel]) -> Vec<Metrics> {
        let days = self.days_of(signals);
        // One signal's book is a walk in date order; the signals of a group walk in parallel.
        days.par_iter().map(|d| crate::data::with_avx512(#[inline(always)] || self.summarise(d, None))).collect()
    }

    /// [`score`](Self::score), with the signal's daily book (for plots).
    pub fn score_daily(&self, signal: &Panel) -> (Metrics, Daily) {
        let Some(days) = self.days_of(&[signal]).pop() else { return (Metrics::default(), Daily::default()) };
        let n = days.iter().map(|b| b.days.len()).sum();
        let mut daily = Daily {
            date: (self.start..self.start + n).collect(),
            gross: vec![f64::NAN; n],
            net: vec![f64::NAN; n],
            rank_ic: days.iter().flat_map(|b| &b.days).map(|d| d.rank_ic.unwrap_or(f64::NAN)).collect(),
            ic: days.iter().flat_map(|b| &b.days).map(|d| d.ic.unwrap_or(f64::NAN)).collect(),
            turnover: vec![f64::NAN; n],
            quintiles: days.iter().flat_map(|b| &b.days).map(|d| d.quintiles.unwrap_or([f64::NAN; 5])).collect(),
            coverage: days.iter().flat_map(|b| &b.days).map(|d| if d.n_label > 0 { f64::from(d.n_joint) / f64::from(d.n_label) } else { f64::NAN }).collect(),
        };
        let m = self.summarise(&days, Some(&mut daily));
        (m, daily)
    }

    /// Every scored date of each signal, in date order: per signal, its blocks of
    /// [`SCORE_BLOCK`] dates (kept apart: joining them was a copy of every leg's members).
    fn days_of(&self, signals: &[&Panel]) -> Vec<Vec<Days>> {
        let na = self.n_assets;
        // Scored dates are those whose label lies inside the period.
        let last = self.end.saturating_sub(self.cfg.gap + self.cfg.horizon).max(self.start);
        let min = self.cfg.min_stocks;
        // Blocks of dates gathered into cache-sized date-major buffers, one per signal, in
        // parallel over blocks; within a block, every signal is scored on a date before
        // the next date.
        let blocks: Vec<usize> = (self.start..last).step_by(SCORE_BLOCK).collect();
        let per_block: Vec<Vec<Days>> = blocks
            .par_iter()
            .map_init(Scratch::default, |sc, &t0| {
                let t1 = (t0 + SCORE_BLOCK).min(last);
                let mut rows = std::mem::take(&mut sc.rows);
                rows.resize_with(signals.len(), Vec::new);
                for (r, s) in rows.iter_mut().zip(signals) {
                    s.to_date_major(t0, t1, r);
                }
                let extra = self.cfg.ic_horizons.len();
                let mut out: Vec<Days> = signals.iter().map(|_| Days::with_capacity(t1 - t0, extra, na)).collect();
                sc.sorts.resize_with(signals.len(), SortBuf::default);
                // Compiled for AVX-512 where the CPU has it (`day` is inlined here).
                crate::data::with_avx512(#[inline(always)] || {
                    for j in 0..t1 - t0 {
                        for (k, (o, r)) in out.iter_mut().zip(&rows).enumerate() {
                            self.day(t0 - self.start + j, &r[j * na..(j + 1) * na], k, sc, min, o);
                        }
                    }
                });
                sc.rows = rows;
                out
            })
            .collect();
        let mut days: Vec<Vec<Days>> = signals.iter().map(|_| Vec::with_capacity(per_block.len())).collect();
        for block in per_block {
            for (d, b) in days.iter_mut().zip(block) {
                d.push(b);
            }
        }
        days
    }

    /// The metrics of a signal from its scored dates, in date order; also fills `daily`'s
    /// book returns where given.
    #[inline(always)]
    fn summarise(&self, blocks: &[Days], mut daily: Option<&mut Daily>) -> Metrics {
        let na = self.n_assets;
        let days = || blocks.iter().flat_map(|b| &b.days);
        let extra = self.cfg.ic_horizons.len();
        let mut m = Metrics::default();
        let ics: Vec<f64> = days().filter_map(|d| d.ic).collect();
        let rics: Vec<f64> = days().filter_map(|d| d.rank_ic).collect();
        let (ic, ic_sd) = mean_std(&ics);
        let (ric, ric_sd) = mean_std(&rics);
        m.ic = ic;
        m.rank_ic = ric;
        m.icir = ic / ic_sd;
        m.rank_icir = ric / ric_sd;
        m.ic_tstat = ic / ic_sd * (ics.len() as f64).sqrt();
        m.n_days = ics.len();
        // Pearson IC at another horizon; NaN when that horizon is not configured.
        let ic_at = |h: usize| match self.cfg.ic_horizons.iter().position(|&x| x == h) {
            // Every date has `extra` values, so each block starts a date's.
            Some(k) => mean_std(&blocks.iter().flat_map(|b| b.ic_extra.iter().skip(k).step_by(extra)).copied().filter(|v| !v.is_nan()).collect::<Vec<_>>()).0,
            None => f64::NAN,
        };
        (m.ic_h5, m.ic_h10, m.ic_h20) = (ic_at(5), ic_at(10), ic_at(20));

        // Long-short book, in date order.
        let cost = self.cfg.cost_bps / 1e4;
        let mut w_prev = vec![0.0f64; na];
        let mut w = vec![0.0f64; na];
        let (mut net, mut turns) = (Vec::new(), Vec::new());
        let dated = blocks.iter().flat_map(|b| {
            let mut members = b.members.as_slice();
            b.days.iter().map(move |d| {
                // (`legs` is 0 on a date without a book.)
                let (legs, rest) = members.split_at(2 * d.legs as usize);
                members = rest;
                (d, legs)
            })
        });
        for (i, (d, legs)) in dated.enumerate() {
            let Some(ls) = d.ls else { continue };
            w.iter_mut().for_each(|x| *x = 0.0);
            let (long, short) = legs.split_at(d.legs as usize);
            let n = d.legs as f64;
            for &i in long {
                w[i as usize] += 1.0 / n;
            }
            for &i in short {
                w[i as usize] -= 1.0 / n;
            }
            let turnover = 0.5 * sum_abs_diff(&w, &w_prev);
            let r = ls - cost * turnover;
            net.push(r);
            if let Some(dl) = daily.as_deref_mut() {
                (dl.gross[i], dl.net[i], dl.turnover[i]) = (ls, r, turnover);
            }
            turns.push(turnover);
            std::mem::swap(&mut w, &mut w_prev);
        }
        let b = Book::of(&net, self.cfg.horizon);
        (m.ann_return, m.sharpe, m.volatility, m.max_drawdown) = (b.ann_return, b.sharpe, b.volatility, b.max_drawdown);
        m.turnover = mean_std(&turns).0;
        for q in 0..5 {
            m.quintile_returns[q] = mean_std(&days().filter_map(|d| d.quintiles.map(|x| x[q])).collect::<Vec<_>>()).0;
        }
        let (labelled, covered) = days().fold((0u64, 0u64), |(a, b), d| (a + d.n_label as u64, b + d.n_joint as u64));
        m.coverage = if labelled > 0 { covered as f64 / labelled as f64 } else { f64::NAN };
        m.distinctness = mean_std(&days().filter_map(|d| d.distinct).collect::<Vec<_>>()).0;
        m
    }

    /// Scores one date of signal number `signal` of the group: appends it to `out`.
    #[inline(always)]
    fn day(&self, i: usize, sig: &[f64], signal: usize, sc: &mut Scratch, min: usize, out: &mut Days) {
        let na = self.n_assets;
        let row = i * na..(i + 1) * na;
        let lanes = self.lanes;
        let labels = &self.labels[i * na * lanes..(i + 1) * na * lanes];
        // The main label of asset k.
        let lab = |k: u32| labels[k as usize];
        let mut day = Day { n_label: self.n_labelled[i], ..Day::default() };
        // The label rows below are read in the signal's sorted order, i.e. at random. The
        // next date's, read by every signal of the group after this date's, are asked for
        // now (into L2; measured: −2 % of the metrics' time): each signal asks for its
        // share, so that the requests do not queue up at once.
        let next = &self.labels[((i + 1) * na * lanes).min(self.labels.len())..];
        let len = (na * lanes).min(next.len());
        let share = len.div_ceil(sc.sorts.len().max(1) * 8) * 8;
        let from = (signal * share).min(len);
        crate::data::prefetch_l2(next[from..].as_ptr(), share.min(len - from));
        let w = words(na);
        // The main label's row of bits, then each extra horizon's.
        let ok_rows = &self.label_ok[i * lanes * w..(i + 1) * lanes * w];
        let bits = &ok_rows[..w];
        let labelled = |k: u32| (bits[k as usize / 64] >> (k % 64)) & 1 == 1;

        // One stable sort of the finite signal values serves every metric below: their
        // indices in ascending order, and their ties.
        let ties = &mut sc.ties;
        let sort = &mut sc.sorts[signal];
        let mut all: &[u32] = &[];
        ties.fill(sig.len(), |words| {
            let (order, repeats) = sort.sort_finite_order(sig, words);
            all = order;
            (order.len(), repeats)
        });
        let all_len = all.len();
        if all_len > 0 {
            day.distinct = Some((all_len - ties.repeats()) as f64 / all_len as f64);
        }

        // Pearson IC at the main horizon and every extra one, four horizons per sweep; not
        // finite (undefined) is NaN. The first sweep also counts the joint set (finite
        // signal and main label).
        let horizons = 1 + self.cfg.ic_horizons.len();
        let (mut ic, mut n) = (f64::NAN, 0);
        for c in (0..horizons).step_by(4) {
            let rows: [&[f64]; 4] = std::array::from_fn(|j| &labels[(c + j) * na..(c + j + 1) * na]);
            let ok: [&[u64]; 4] = std::array::from_fn(|j| &ok_rows[(c + j) * w..(c + j + 1) * w]);
            let (r, counts) = if horizons - c == 1 {
                let (r, n) = pearson_k(sig, [rows[0]], [ok[0]], min);
                ([r[0], f64::NAN, f64::NAN, f64::NAN], [n[0], 0, 0, 0])
            } else {
                pearson4(sig, rows, ok, min)
            };
            for (k, v) in r.into_iter().enumerate().take(horizons - c) {
                let v = if v.is_finite() { v } else { f64::NAN };
                if c + k == 0 {
                    (ic, n) = (v, counts[0]);
                } else {
                    out.ic_extra.push(v);
                }
            }
        }
        // The joint set, still sorted by (signal, symbol): the sorted row itself unless
        // some of its stocks have no label (about 1 % of dates).
        let joint: &[u32] = if n == all_len {
            all
        } else {
            sc.joint.clear();
            sc.joint.extend(all.iter().filter(|&&k| labelled(k)));
            // (`n < min` returns below; the ties are only needed past it.)
            if n >= min {
                let joint = &sc.joint;
                ties.fill(joint.len(), |words| (joint.len(), neighbour_bits(words, joint.len(), |j| sig[joint[j] as usize] == sig[joint[j - 1] as usize])));
            }
            &sc.joint
        };

        day.n_joint = n as u32;
        if n < min {
            out.days.push(day);
            return;
        }
        day.ic = Some(ic).filter(|v| !v.is_nan());

        // Rank IC: Pearson of the average ranks within the joint set on both sides. Both
        // sides' ranks have the exact mean (n + 1) / 2 and centred ranks are multiples of
        // 1/2, so every sum below is exact: its terms may be added in any order (split
        // over independent accumulators, or grouped) and give the same bits.
        let mid = (n as f64 + 1.0) / 2.0;
        let (sxy, sxx, syy) = if n as u32 == self.n_labelled[i] {
            // The signal covers every labelled stock: the label's ranks and Σ (rank −
            // mid)² were precomputed for this date. The signal's ranks are walked in
            // sorted order; without ties position p has rank p + 1 and Σ (p + 1 − mid)²
            // is n(n² − 1)/12. A run of ties then moves each member from rank p + 1 to
            // the run's average rank: the difference times its label rank is added per
            // member of a run (few), and Σ (rank − mid)² drops by the run's `run_less`.
            let label_ranks = &self.main_ranks[row];
            let v = |k: u32| f64::from(label_ranks[k as usize]) - mid;
            let mut acc = [0.0; 4];
            let mut chunks = joint.chunks_exact(4);
            let mut p = 1.0 - mid;
            for c in &mut chunks {
                for (l, &k) in c.iter().enumerate() {
                    acc[l] += (p + l as f64) * v(k);
                }
                p += 4.0;
            }
            for (l, &k) in chunks.remainder().iter().enumerate() {
                acc[l] += (p + l as f64) * v(k);
            }
            let (mut in_runs, mut less) = (0.0, 0u64);
            ties.runs(|a, b| {
                let r = (a + 1 + b) as f64 / 2.0;
                for (p, &k) in (a + 1..).zip(&joint[a..b]) {
                    in_runs += (r - p as f64) * v(k);
                }
                less += run_less(b - a);
            });
            ((acc[0] + acc[1]) + (acc[2] + acc[3]) + in_runs, untied_sum_sq(n) - less as f64 / 12.0, self.main_syy[i])
        } else {
            // The signal misses some labelled stocks (most dates of most alphas): the
            // signal's ranks go to `sr` by stock (0 for a stock outside the joint set;
            // ranks start at 1), then one walk of the label's precomputed order,
            // restricted to the joint set, ranks the label within it: the kept entries
            // rank 1, 2, ... except in a run of equal labels, whose m kept members share
            // their average rank. Such a run adds (its rank − mid) · Σ (their signal ranks
            // − mid) to sxy and lowers Σ (rank − mid)² by (m³ − m)/12 from the untied
            // n(n² − 1)/12. Runs are few, so the walk between them stays branch-free
            // (four accumulators). Every value here is a small multiple of 1/2, so the sums
            // are exact and the position is counted in an f64 (`pm`, position + 1 − mid):
            // converting an integer count on every step was most of the walk's time.
            sc.sr.clear();
            sc.sr.resize(na, 0.0);
            let sr = &mut sc.sr[..na];
            // Ranks 1, 2, ... read from a table (converting the count on every step was a
            // third of this loop).
            if sc.ranks.len() < n {
                sc.ranks.extend((sc.ranks.len() + 1..=n).map(|r| r as f32));
            }
            'scatter: {
                #[cfg(target_arch = "x86_64")]
                if crate::expr::kernels::simd::avx512_popcnt() {
                    // SAFETY: the CPU has AVX-512F (checked), the ranks are sliced to the joint
                    // set's length, and the joint set holds stock indices, each below
                    // `sr.len()`, the number of stocks.
                    unsafe { crate::expr::kernels::simd::scatter_f32(joint, &sc.ranks[..joint.len()], sr) };
                    break 'scatter;
                }
                for (&r, &k) in sc.ranks.iter().zip(joint) {
                    sr[k as usize] = r;
                }
            }
            // Each run of ties shares its average rank (exact in an f32: a multiple of 1/2
            // below 2^23).
            let mut less = 0u64;
            ties.runs(|a, b| {
                let r = (a + 1 + b) as f32 / 2.0;
                for &k in &joint[a..b] {
                    sr[k as usize] = r;
                }
                less += run_less(b - a);
            });
            let sxx = untied_sum_sq(n) - less as f64 / 12.0;
            let order = &self.main_order[i * na..i * na + self.n_labelled[i] as usize];
            let groups = &self.main_groups[self.main_group_at[i] as usize..self.main_group_at[i + 1] as usize];
            let sr = &sc.sr[..na];
            let walk = |seg: &[u32], pm: &mut f64| {
                #[cfg(target_arch = "x86_64")]
                if crate::expr::kernels::simd::avx512_popcnt() {
                    // SAFETY: the CPU has what the kernel needs (checked above), and `seg`
                    // holds stock indices, each below `sr.len()` = the number of stocks.
                    return unsafe { kept_ranks_avx512(seg, sr, mid, pm) };
                }
                kept_ranks(seg, sr, mid, pm)
            };
            let (mut pm, mut acc) = (1.0 - mid, 0.0);
            let (mut from, mut less) = (0usize, 0u64);
            for &[s, e] in groups {
                acc += walk(&order[from..s as usize], &mut pm);
                let (mut m, mut sum) = (0usize, 0.0);
                for &k in &order[s as usize..e as usize] {
                    let r = sr[k as usize];
                    m += usize::from(r != 0.0);
                    sum += if r != 0.0 { f64::from(r) - mid } else { 0.0 };
                }
                // The run's average rank less mid: positions pm + mid .. pm + mid + m − 1
                // (exact, as everything here).
                acc += (pm + (m as f64 - 1.0) / 2.0) * sum;
                less += run_less(m);
                pm += m as f64;
                from = e as usize;
            }
            acc += walk(&order[from..], &mut pm);
            (acc, sxx, untied_sum_sq(n) - less as f64 / 12.0)
        };
        day.rank_ic = (sxx > 0.0 && syy > 0.0).then(|| (sxy / (sxx.sqrt() * syy.sqrt())).clamp(-1.0, 1.0));

        // The long-short legs: `legs` stocks each. The long leg is the top `legs` by
        // signal, ties to the earlier symbol: everything above the threshold value, then
        // the lowest-index members of the threshold's tie group.
        let legs = n / 5;
        let (tie_start, tie_end) = ties.run_at(n - legs);
        let above = n - tie_end;
        let first = out.members.len();
        out.members.extend(joint[tie_end..].iter().chain(&joint[tie_start..tie_start + legs - above]));
        let long_leg = &out.members[first..];
        // Quintile means and the long leg's mean: six independent sums run side by side,
        // each in its own order (these sums are not exact, so the order is kept).
        let bounds: [usize; 6] = std::array::from_fn(|b| b * n / 5);
        // From −0.0, as `f64::sum` starts.
        let (mut q, mut long) = ([-0.0; 5], -0.0);
        // Every quintile holds `legs` = floor(n/5) stocks or one more: the first `legs` of
        // each are summed side by side (slices and zips, so no index is checked inside
        // the loop), then each extra one, last in its sum as in order.
        let quint = |b: usize| &joint[bounds[b]..bounds[b] + legs];
        let (j0, j1, j2, j3, j4) = (quint(0), quint(1), quint(2), quint(3), quint(4));
        for (((((e0, e1), e2), e3), e4), &k) in j0.iter().zip(j1).zip(j2).zip(j3).zip(j4).zip(&long_leg[..legs]) {
            q[0] += lab(*e0);
            q[1] += lab(*e1);
            q[2] += lab(*e2);
            q[3] += lab(*e3);
            q[4] += lab(*e4);
            long += lab(k);
        }
        for (b, qv) in q.iter_mut().enumerate() {
            if bounds[b] + legs < bounds[b + 1] {
                *qv += lab(joint[bounds[b] + legs]);
            }
        }
        for (b, qv) in q.iter_mut().enumerate() {
            *qv /= (bounds[b + 1] - bounds[b]) as f64;
        }
        day.quintiles = Some(q);
        let long = long / legs as f64;
        // The short leg is the lowest quintile, positions 0..n/5: its mean is q[0].
        out.members.extend(&joint[..legs]);
        day.legs = legs as u32;
        day.ls = Some(long - q[0]);
        out.days.push(day);
    }
}

/// The rank IC's walk of the label's order between two of its tie groups: Σ (pm + j) ·
/// (r_k − mid) over the stocks k of `seg` kept in the joint set (signal rank `r_k = sr[k]`
/// not 0), j counting them from 0; moves `pm` past them. Every term and partial sum is a
/// small multiple of 1/4, so exact: any order of adding gives the same bits.
///
/// Each stock is at pm plus the kept ones before it in its quad, and pm moves once a quad:
/// stepped one stock at a time, pm's adds made a chain of one add's latency per stock.
fn kept_ranks(seg: &[u32], sr: &[f32], mid: f64, pm: &mut f64) -> f64 {
    let mut acc = [0.0; 4];
    let mut quads = seg.chunks_exact(4);
    for q in &mut quads {
        let r: [f32; 4] = std::array::from_fn(|l| sr[q[l] as usize]);
        let one = r.map(|r| if r != 0.0 { 1.0 } else { 0.0 });
        let before = [0.0, one[0], one[0] + one[1], one[0] + one[1] + one[2]];
        for l in 0..4 {
            let t = (*pm + before[l]) * (f64::from(r[l]) - mid);
            acc[l] += if r[l] != 0.0 { t } else { 0.0 };
        }
        *pm += before[3] + one[3];
    }
    for &k in quads.remainder() {
        let r = sr[k as usize];
        if r != 0.0 {
            acc[0] += *pm * (f64::from(r) - mid);
            *pm += 1.0;
        }
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// [`kept_ranks`] eight stocks at a time: their ranks gathered, the kept ones compressed to
/// the front of a vector, where lane j stands at pm + j (half the time of the quad walk,
/// measured stand-alone on rows like the shipped data's).
///
/// # Safety
/// The CPU must support AVX-512F and POPCNT, and every index in `seg` must be below
/// `sr.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,popcnt")]
unsafe fn kept_ranks_avx512(seg: &[u32], sr: &[f32], mid: f64, pm: &mut f64) -> f64 {
    use std::arch::x86_64::*;
    let step = _mm512_setr_pd(0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0);
    let vmid = _mm512_set1_pd(mid);
    let mut acc = _mm512_setzero_pd();
    for q in 0..seg.len().div_ceil(8) {
        let lanes = crate::expr::kernels::simd::tail8(seg.len(), q);
        // SAFETY: only lanes inside `seg` are read, and each gathers a cell of `sr`
        // (passed on from the caller).
        let r = unsafe {
            let idx = _mm512_maskz_loadu_epi32(lanes.into(), seg.as_ptr().add(8 * q).cast());
            _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), lanes.into(), idx, sr.as_ptr())))
        };
        let kept = _mm512_cmp_pd_mask::<_CMP_NEQ_OQ>(r, _mm512_setzero_pd());
        let v = _mm512_sub_pd(_mm512_maskz_compress_pd(kept, r), vmid);
        let pos = _mm512_add_pd(_mm512_set1_pd(*pm), step);
        let count = kept.count_ones();
        acc = _mm512_mask_add_pd(acc, ((1u32 << count) - 1) as __mmask8, acc, _mm512_mul_pd(pos, v));
        *pm += f64::from(count);
    }
    _mm512_reduce_add_pd(acc)
}

/// Σ |a − b| over equally long slices, in eight independent sums (the book's turnover:
/// one serial chain of adds over every stock was most of the summary's time).
fn sum_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0.0f64; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    for (l, (x, y)) in ca.remainder().iter().zip(cb.remainder()).enumerate() {
        acc[l] = (x - y).abs();
    }
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += (x[l] - y[l]).abs();
        }
    }
    acc.iter().sum()
}

/// Twelve times how much a run of `m` tied ranks (each the run's average) lowers
/// Σ (r − mid)² below the untied [`untied_sum_sq`]: m³ − m. Summed as integers and divided
/// by 12 once (a multiple of 6 over 12, so exact): a division and a dependent add per run,
/// most runs being one stock long, were the scorer's slowest instructions. (Every term of
/// these sums is a multiple of 1/4, so the per-stock sums they replace were exact too:
/// the same value.)
fn run_less(m: usize) -> u64 {
    (m * m * m - m) as u64
}

/// Σ (r − (n + 1)/2)² over the ranks r = 1..=n (no ties): n(n² − 1)/12, exactly (the
/// terms are multiples of 1/4, and so is the sum).
fn untied_sum_sq(n: usize) -> f64 {
    let n = n as f64;
    n * (n * n - 1.0) / 12.0
}

/// Dates per block when scoring: the labels of a date and one row per signal stay in L1
/// while every signal is scored on it, and a block of every signal's rows (32 dates ×
/// 500 stocks × 8 bytes × [`SCORE_GROUP`] signals, 512 KB) fits in L2. Measured against
/// 16 (interleaved, alpha101 batch): metrics −2 % (the transpose reads four cache lines
/// of each asset per block instead of two); 48 to 128 gave the same as 32.
const SCORE_BLOCK: usize = 32;

/// Signals [`Scorer::score_many`] is best given at once: each more shares the label reads
/// but holds another panel (19 MB for the shipped data) until the group is scored.
pub const SCORE_GROUP: usize = 4;

#[derive(Default)]
struct Scratch {
    /// Date-major rows of each signal for one block of dates.
    rows: Vec<Vec<f64>>,
    /// One per signal of the group: each keeps what it learnt of its signal's rows (see
    /// `SortBuf::few`).
    sorts: Vec<SortBuf>,
    joint: Vec<u32>,
    /// The ties of the sorted row, then of the joint set where that differs.
    ties: TieBits,
    /// The signal's ranks within the joint set, by stock.
    sr: Vec<f32>,
    /// 1, 2, 3, ...: untied ranks, as many as the largest joint set so far.
    ranks: Vec<f32>,
}

/// Scores a stream of signals in groups of [`SCORE_GROUP`] with
/// [`Scorer::score_many`]; `K` tells the caller which signal a result belongs to.
pub struct Grouped<'a, K> {
    scorer: &'a Scorer,
    pending: Vec<(K, Arc<Panel>)>,
}

impl<'a, K> Grouped<'a, K> {
    pub fn new(scorer: &'a Scorer) -> Self {
        Grouped { scorer, pending: Vec::with_capacity(SCORE_GROUP) }
    }

    /// Adds a signal; once a group is full, scores it and returns its results.
    pub fn push(&mut self, key: K, signal: Arc<Panel>) -> Vec<(K, Metrics)> {
        self.pending.push((key, signal));
        if self.pending.len() >= SCORE_GROUP {
            self.flush()
        } else {
            Vec::new()
        }
    }

    /// Scores the signals still waiting (call it after the last [`push`](Self::push)).
    pub fn flush(&mut self) -> Vec<(K, Metrics)> {
        let panels: Vec<&Panel> = self.pending.iter().map(|(_, p)| p.as_ref()).collect();
        let metrics = self.scorer.score_many(&panels);
        self.pending.drain(..).map(|(k, _)| k).zip(metrics).collect()
    }
}

/// A signal's long-short book on each scored date ([`Scorer::score_daily`]).
#[derive(Clone, Debug, Default)]
pub struct Daily {
    /// Date index (in the data the scorer was built on) of each scored date.
    pub date: Vec<usize>,
    /// The book's return before costs; NaN on a skipped date (fewer than `min_stocks`).
    pub gross: Vec<f64>,
    /// The same after costs (`cost_bps` × turnover): the series behind `sharpe`,
    /// `ann_return` and `max_drawdown`.
    pub net: Vec<f64>,
    /// The date's Rank IC; NaN where undefined (the series behind `rank_ic`).
    pub rank_ic: Vec<f64>,
    /// The date's Pearson IC; NaN where undefined (the series behind `ic`).
    pub ic: Vec<f64>,
    /// The book's turnover into the date; NaN on a skipped date (behind `turnover`).
    pub turnover: Vec<f64>,
    /// The mean label of each signal quintile, lowest first; NaN on a skipped date.
    pub quintiles: Vec<[f64; 5]>,
    /// The share of the date's labelled stocks with a finite signal (behind `coverage`).
    pub coverage: Vec<f64>,
}

/// One scored date of a signal.
#[derive(Default)]
struct Day {
    ic: Option<f64>,
    rank_ic: Option<f64>,
    ls: Option<f64>,
    /// Stocks in each long-short leg (their indices are in [`Days::members`]).
    legs: u32,
    quintiles: Option<[f64; 5]>,
    n_label: u32,
    n_joint: u32,
    distinct: Option<f64>,
}

/// The scored dates of one signal, in date order, with what varies in length stored flat
/// (no allocation per date).
#[derive(Default)]
struct Days {
    days: Vec<Day>,
    /// Per date, the Pearson IC at each of `ic_horizons` (NaN where undefined).
    ic_extra: Vec<f64>,
    /// Per date with a book, its long leg then its short leg (`legs` stocks each).
    members: Vec<u32>,
}

impl Days {
    /// Room for `n` dates of `extra` horizons and legs of at most a fifth of `na` stocks
    /// each, so that scoring never regrows them.
    fn with_capacity(n: usize, extra: usize, na: usize) -> Days {
        Days { days: Vec::with_capacity(n), ic_extra: Vec::with_capacity(n * extra), members: Vec::with_capacity(n * 2 * (na / 5)) }
    }
}

/// A data set cut at a period's end, ready to evaluate and score signals on that period.
pub struct Prepared {
    pub data: MarketData,
    pub scorer: Scorer,
    pub period: Period,
}

/// Cuts `data` at the end of `period` (so no later value can be read by a signal or a
/// label) and builds its scorer.
pub fn prepare(data: &MarketData, period: &Period, splits: &Splits, cfg: MetricsConfig) -> Result<Prepared, DataError> {
    let (start, end) = period.indices(splits, data)?;
    let cut = if end == data.n_dates() { data.clone() } else { data.truncate_dates(end) };
    let scorer = Scorer::new(&cut, start, end, cfg)?;
    Ok(Prepared { data: cut, scorer, period: period.clone() })
}

/// `signal` scored on each calendar year of `scorer`'s dates alone (a year's labels end
/// with it, as a period's do). The signal was computed on `data` cut at the period's end,
/// and no operator reads a later date, so each year's values are those it would have on
/// data cut at the year's end.
pub fn by_year(signal: &Panel, data: &MarketData, scorer: &Scorer) -> Result<Vec<(i32, Metrics)>, DataError> {
    let (start, end) = scorer.span();
    let dates = &data.dates[start..end];
    let mut out = Vec::new();
    let mut i = 0;
    while i < dates.len() {
        let year = dates[i].ymd().0;
        let n = dates[i..].iter().take_while(|d| d.ymd().0 == year).count();
        out.push((year, Scorer::new(data, start + i, start + i + n, scorer.config().clone())?.score(signal)));
        i += n;
    }
    Ok(out)
}

/// What mining sees: the data cut at the end of the valid split (the test period is never
/// loaded into it), with scorers for train and valid. Signals are evaluated once on the cut
/// data and scored on both splits.
pub struct MiningView {
    pub data: MarketData,
    pub train: Scorer,
    pub valid: Scorer,
}

impl MiningView {
    pub fn new(data: &MarketData, splits: &Splits, cfg: MetricsConfig) -> Result<MiningView, DataError> {
        let (ts, te) = Period::Train.indices(splits, data)?;
        let (vs, ve) = Period::Valid.indices(splits, data)?;
        let cut = if ve == data.n_dates() { data.clone() } else { data.truncate_dates(ve) };
        let train = Scorer::new(&cut, ts, te, cfg.clone())?;
        let valid = Scorer::new(&cut, vs, ve, cfg)?;
        Ok(MiningView { data: cut, train, valid })
    }

    /// The label its metrics are computed at: (horizon, gap).
    pub fn label(&self) -> (usize, usize) {
        let c = self.train.config();
        (c.horizon, c.gap)
    }

    /// Metrics of a signal on train and valid, keyed by split name.
    pub fn score(&self, signal: &Panel) -> std::collections::BTreeMap<String, Metrics> {
        let (t, v) = rayon::join(|| self.train.score(signal), || self.valid.score(signal));
        [("train".to_string(), t), ("valid".to_string(), v)].into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both walks of the rank IC between label ties against stepping one stock at a time,
    /// bit for bit, on segments of every length mod 8 with stocks kept and dropped.
    #[test]
    fn kept_ranks_walks_agree_with_a_plain_loop() {
        let mut s = 5u64;
        for len in [0usize, 1, 3, 4, 7, 8, 9, 15, 16, 17, 63, 440, 496] {
            let na = 512;
            let mut stocks: Vec<u32> = (0..na as u32).collect();
            for i in (1..na).rev() {
                stocks.swap(i, (crate::xorshift(&mut s) % (i as u64 + 1)) as usize);
            }
            let seg = &stocks[..len];
            let mut sr = vec![0f32; na];
            let mut rank = 1.0;
            for &k in seg {
                if !crate::xorshift(&mut s).is_multiple_of(5) {
                    sr[k as usize] = rank;
                    rank += if crate::xorshift(&mut s).is_multiple_of(7) { 0.5 } else { 1.0 };
                }
            }
            let mid = (rank as f64 + 1.0) / 2.0;
            let (mut want, mut pm0) = (0.0, 1.0 - mid);
            for &k in seg {
                let r = sr[k as usize];
                if r != 0.0 {
                    want += pm0 * (f64::from(r) - mid);
                    pm0 += 1.0;
                }
            }
            let mut pm = 1.0 - mid;
            assert_eq!(kept_ranks(seg, &sr, mid, &mut pm).to_bits(), want.to_bits(), "length {len}");
            assert_eq!(pm, pm0);
            #[cfg(target_arch = "x86_64")]
            if crate::expr::kernels::simd::avx512_popcnt() {
                let mut pm = 1.0 - mid;
                // SAFETY: the CPU has the features (checked), and every index is below 512.
                assert_eq!(unsafe { kept_ranks_avx512(seg, &sr, mid, &mut pm) }.to_bits(), want.to_bits(), "length {len}");
                assert_eq!(pm, pm0);
            }
        }
    }
}

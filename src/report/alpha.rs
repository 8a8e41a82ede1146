//! An alpha's tearsheet: what alphalens shows a factor researcher (IC over time, decay,
//! quintiles, the long-short book with and without costs, turnover, sectors, coverage),
//! computed with the same scorer as `eval`, so every number equals `eval --json`'s.

use crate::backtest::{by_year, prepare, Daily, Market, Metrics, MetricsConfig, Scorer};
use crate::data::{MarketData, Panel, Period, Splits};
use crate::expr::AlphaResolver;
use serde::Serialize;

/// Horizons of the IC decay chart.
pub const DECAY_HORIZONS: std::ops::RangeInclusive<usize> = 1..=20;
/// Dates in the rolling mean of the daily Rank IC (a quarter).
pub const ROLLING: usize = 63;
/// Stocks a sector needs on a date for it to be scored (the full book's bar, 20, would
/// leave most sectors of a 500-stock universe, and all of a small one, unscored).
pub const SECTOR_MIN_STOCKS: usize = 5;

#[derive(Serialize, Debug)]
pub struct AlphaReport {
    pub expression: String,
    pub horizon: usize,
    pub gap: usize,
    pub cost_bps: f64,
    /// Every period asked for, side by side (each scored on the data cut at its own end).
    pub periods: Vec<PeriodMetrics>,
    /// The period the charts show: the first one.
    pub detail: String,
    pub by_year: Vec<YearMetrics>,
    pub daily: DailySeries,
    pub decay: Vec<Decay>,
    pub sectors: Vec<Sector>,
}

#[derive(Serialize, Debug)]
pub struct PeriodMetrics {
    pub period: String,
    pub first: String,
    pub last: String,
    pub metrics: Metrics,
    /// The equal-weight universe bought and held over the same dates: the baseline.
    pub market: Market,
}

#[derive(Serialize, Debug)]
pub struct YearMetrics {
    pub year: i32,
    pub metrics: Metrics,
}

/// The detail period's scored dates, one value per date in each series.
#[derive(Serialize, Debug, Default)]
pub struct DailySeries {
    pub date: Vec<String>,
    pub ic: Vec<f64>,
    pub rank_ic: Vec<f64>,
    /// The mean Rank IC of the last [`ROLLING`] dates (at least a third of them defined).
    pub rank_ic_rolling: Vec<f64>,
    /// Cumulative sums of the long-short book's daily returns (the sum whose drawdown is
    /// `max_drawdown`), before and after costs.
    pub gross_cumulative: Vec<f64>,
    pub net_cumulative: Vec<f64>,
    /// The equal-weight universe bought and held, summed the same way.
    pub market_cumulative: Vec<f64>,
    /// The net sum's distance below its running peak.
    pub drawdown: Vec<f64>,
    pub turnover: Vec<f64>,
    /// Correlation of the signal's cross-sectional ranks with the previous date's.
    pub rank_autocorr: Vec<f64>,
    pub coverage: Vec<f64>,
    /// Cumulative sum of each quintile's mean label, lowest signal first.
    pub quintile_cumulative: Vec<[f64; 5]>,
}

#[derive(Serialize, Debug)]
pub struct Decay {
    pub horizon: usize,
    pub ic: f64,
    pub rank_ic: f64,
}

#[derive(Serialize, Debug)]
pub struct Sector {
    pub group: String,
    pub stocks: usize,
    pub rank_ic: f64,
    /// Top quintile's mean label less the bottom one's.
    pub spread: f64,
    pub n_days: usize,
}

/// The report of `expr` on `periods` (at least one), the first in detail.
pub fn build(expr: &str, data: &MarketData, splits: &Splits, periods: &[Period], cfg: &MetricsConfig, alphas: &dyn AlphaResolver) -> Result<AlphaReport, super::ReportError> {
    let Some(first) = periods.first() else { return Err(super::ReportError::Input("no period to report".into())) };
    let mut out = AlphaReport {
        expression: expr.to_string(),
        horizon: cfg.horizon,
        gap: cfg.gap,
        cost_bps: cfg.cost_bps,
        periods: Vec::new(),
        detail: first.to_string(),
        by_year: Vec::new(),
        daily: DailySeries::default(),
        decay: Vec::new(),
        sectors: Vec::new(),
    };
    for p in periods {
        let prep = prepare(data, p, splits, cfg.clone())?;
        let signal = crate::expr::eval_expr(expr, &prep.data, alphas)?;
        let (start, end) = prep.scorer.span();
        let name = |i: usize| prep.data.dates.get(i).map(|d| d.to_string()).unwrap_or_default();
        let (market, market_daily) = prep.scorer.market();
        if out.periods.is_empty() {
            let (m, daily) = prep.scorer.score_daily(&signal);
            out.daily = series(&prep.data, &signal, &daily);
            // The scorer's dates are the period's, in order: the book's i-th is the market's.
            out.daily.market_cumulative = cumulative((0..daily.date.len()).map(|i| market_daily.get(i).copied().unwrap_or(f64::NAN)));
            out.by_year = by_year(&signal, &prep.data, &prep.scorer)?.into_iter().map(|(year, metrics)| YearMetrics { year, metrics }).collect();
            out.decay = decay(&prep.data, &signal, start, end, cfg)?;
            out.sectors = sectors(&prep.data, &signal, start, end, cfg)?;
            out.periods.push(PeriodMetrics { period: p.to_string(), first: name(start), last: name(end.saturating_sub(1)), metrics: m, market });
        } else {
            let m = prep.scorer.score(&signal);
            out.periods.push(PeriodMetrics { period: p.to_string(), first: name(start), last: name(end.saturating_sub(1)), metrics: m, market });
        }
    }
    Ok(out)
}

fn cumulative(v: impl Iterator<Item = f64>) -> Vec<f64> {
    v.scan(0.0, |acc, x| {
        *acc += if x.is_finite() { x } else { 0.0 };
        Some(*acc)
    })
    .collect()
}

fn series(data: &MarketData, signal: &Panel, daily: &Daily) -> DailySeries {
    let n = daily.date.len();
    let net_cumulative = cumulative(daily.net.iter().copied());
    let mut peak = f64::NEG_INFINITY;
    let drawdown = net_cumulative
        .iter()
        .map(|&c| {
            peak = peak.max(c);
            c - peak
        })
        .collect();
    let rank_ic_rolling = (0..n)
        .map(|i| {
            let w: Vec<f64> = daily.rank_ic[i.saturating_sub(ROLLING - 1)..=i].iter().copied().filter(|v| v.is_finite()).collect();
            if w.len() * 3 >= ROLLING { w.iter().sum::<f64>() / w.len() as f64 } else { f64::NAN }
        })
        .collect();
    let mut q = [0.0f64; 5];
    let quintile_cumulative = daily
        .quintiles
        .iter()
        .map(|d| {
            for k in 0..5 {
                q[k] += if d[k].is_finite() { d[k] } else { 0.0 };
            }
            q
        })
        .collect();
    let start = daily.date.first().copied().unwrap_or(0);
    let ranks = crate::kb::ranks::rank_rows(signal, start, start + n).decode(n);
    let na = signal.n_assets();
    let rank_autocorr = (0..n)
        .map(|i| {
            if i == 0 {
                return f64::NAN;
            }
            let (a, b) = (&ranks[(i - 1) * na..i * na], &ranks[i * na..(i + 1) * na]);
            let (x, y): (Vec<f64>, Vec<f64>) = a.iter().zip(b).filter(|(p, q)| p.is_finite() && q.is_finite()).map(|(p, q)| (f64::from(*p), f64::from(*q))).unzip();
            crate::backtest::stats::pearson_finite(&x, &y, 3)
        })
        .collect();
    DailySeries {
        date: daily.date.iter().map(|&t| data.dates[t].to_string()).collect(),
        ic: daily.ic.clone(),
        rank_ic: daily.rank_ic.clone(),
        rank_ic_rolling,
        gross_cumulative: cumulative(daily.gross.iter().copied()),
        net_cumulative,
        drawdown,
        turnover: daily.turnover.clone(),
        rank_autocorr,
        coverage: daily.coverage.clone(),
        quintile_cumulative,
        market_cumulative: Vec::new(),
    }
}

/// IC and Rank IC of the same signal against labels of each horizon in [`DECAY_HORIZONS`]
/// (each label inside the period, as the main one is).
fn decay(data: &MarketData, signal: &Panel, start: usize, end: usize, cfg: &MetricsConfig) -> Result<Vec<Decay>, super::ReportError> {
    DECAY_HORIZONS
        .map(|h| {
            let c = MetricsConfig { horizon: h, ic_horizons: Vec::new(), ..cfg.clone() };
            let m = Scorer::new(data, start, end, c)?.score(signal);
            Ok(Decay { horizon: h, ic: m.ic, rank_ic: m.rank_ic })
        })
        .collect()
}

/// The signal within each sector of the groups file alone (other stocks masked out).
fn sectors(data: &MarketData, signal: &Panel, start: usize, end: usize, cfg: &MetricsConfig) -> Result<Vec<Sector>, super::ReportError> {
    let Some(groups) = &data.groups else { return Ok(Vec::new()) };
    let c = MetricsConfig { min_stocks: SECTOR_MIN_STOCKS, ic_horizons: Vec::new(), ..cfg.clone() };
    let scorer = Scorer::new(data, start, end, c)?;
    let mut out = Vec::new();
    for (g, name) in groups.names.iter().enumerate() {
        let members: Vec<bool> = groups.ids.iter().map(|id| *id == Some(g as u32)).collect();
        let stocks = members.iter().filter(|m| **m).count();
        if stocks < SECTOR_MIN_STOCKS {
            continue;
        }
        let mut masked = Panel::nan(signal.n_dates(), signal.n_assets());
        for (a, _) in members.iter().enumerate().filter(|(_, keep)| **keep) {
            for d in 0..signal.n_dates() {
                masked.set(d, a, signal.get(d, a));
            }
        }
        let m = scorer.score(&masked);
        out.push(Sector { group: name.clone(), stocks, rank_ic: m.rank_ic, spread: m.quintile_returns[4] - m.quintile_returns[0], n_days: m.n_days });
    }
    Ok(out)
}

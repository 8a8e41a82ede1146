//! `alphaloop report`: one self-contained HTML file (inline SVG charts, inline CSS, no
//! script and nothing fetched, so it opens offline and from an e-mail attachment), with
//! the same numbers as JSON beside it.

pub mod alpha;
pub mod kb;
pub mod model;
pub mod run;
pub mod svg;

use crate::backtest::Metrics;
use crate::data::Date;
use crate::kb::AlphaRecord;
use std::fmt::Write;
use svg::{esc, Chart, X};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Data(#[from] crate::data::DataError),
    #[error("{}", .0.render())]
    Expr(#[from] crate::expr::ExprError),
}

const STYLE: &str = "
body { font: 15px/1.45 system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; color: #1a1a1a; max-width: 780px; margin: 1.5em auto; padding: 0 12px; }
h1 { font-size: 1.45em; margin-bottom: .2em; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
code, pre { font: 13px/1.4 ui-monospace, Menlo, Consolas, monospace; } pre { background: #f6f6f6; padding: .6em; white-space: pre-wrap; word-break: break-word; }
table { border-collapse: collapse; font-size: 13px; margin: .5em 0; } th, td { padding: 2px 8px; text-align: right; border-bottom: 1px solid #eee; }
th:first-child, td:first-child, td.t { text-align: left; } .wide { overflow-x: auto; }
figure { margin: 1em 0; break-inside: avoid; } figcaption { font-size: 13px; color: #444; }
svg.chart { width: 100%; height: auto; font-family: system-ui, sans-serif; }
.meta { color: #555; font-size: 13px; }
@media print { body { max-width: none; margin: 0; } h2 { break-after: avoid; } }
@page { size: A4; margin: 14mm; }
";

/// A page being written: sections of headings, paragraphs, tables and charts.
pub struct Page {
    title: String,
    body: String,
}

impl Page {
    pub fn new(title: &str) -> Page {
        Page { title: title.into(), body: String::new() }
    }

    pub fn h2(&mut self, text: &str) {
        let _ = write!(self.body, "<h2>{}</h2>\n", esc(text));
    }

    pub fn p(&mut self, text: &str) {
        let _ = write!(self.body, "<p>{}</p>\n", esc(text));
    }

    pub fn meta(&mut self, text: &str) {
        let _ = write!(self.body, "<p class=\"meta\">{}</p>\n", esc(text));
    }

    pub fn code(&mut self, text: &str) {
        let _ = write!(self.body, "<pre><code>{}</code></pre>\n", esc(text));
    }

    pub fn table(&mut self, head: &[&str], rows: &[Vec<String>]) {
        self.body.push_str("<div class=\"wide\"><table><thead><tr>");
        for h in head {
            let _ = write!(self.body, "<th>{}</th>", esc(h));
        }
        self.body.push_str("</tr></thead><tbody>");
        for r in rows {
            self.body.push_str("<tr>");
            for c in r {
                // Numbers line up on the right, text (ids, code, reasons) on the left.
                let number = c == "-" || c.parse::<f64>().is_ok();
                let _ = write!(self.body, "<td{}>{}</td>", if number { "" } else { " class=\"t\"" }, esc(c));
            }
            self.body.push_str("</tr>");
        }
        self.body.push_str("</tbody></table></div>\n");
    }

    /// A chart with the sentence that says what it shows; a chart with no data is
    /// replaced by a sentence saying so.
    pub fn chart(&mut self, chart: &Chart, caption: &str) {
        if chart.has_data() {
            let _ = write!(self.body, "<figure>{}<figcaption>{}</figcaption></figure>\n", chart.svg(), esc(caption));
        } else {
            let _ = write!(self.body, "<p class=\"meta\">No data for this chart: {}</p>\n", esc(caption));
        }
    }

    pub fn raw_figure(&mut self, svg: &str, caption: &str) {
        let _ = write!(self.body, "<figure>{svg}<figcaption>{}</figcaption></figure>\n", esc(caption));
    }

    pub fn finish(self) -> String {
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{}</title><style>{STYLE}</style></head>\n<body>\n<h1>{}</h1>\n{}<p class=\"meta\">Made by alphaloop {}.</p>\n</body></html>\n",
            esc(&self.title),
            esc(&self.title),
            self.body,
            env!("CARGO_PKG_VERSION")
        )
    }
}

/// A number for a table: four significant decimals, `-` where undefined.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    if x != 0.0 && x.abs() < 1e-3 {
        format!("{x:.2e}")
    } else {
        format!("{x:.4}")
    }
}

fn day_number(s: &str) -> f64 {
    s.parse::<Date>().map_or(f64::NAN, |d| f64::from(d.0))
}

/// The tearsheet of one alpha (and of its KB record, when it has one).
pub fn alpha_page(r: &alpha::AlphaReport, record: Option<&AlphaRecord>) -> String {
    let title = match record {
        Some(rec) => format!("Alpha {}", rec.id),
        None => "Alpha tearsheet".to_string(),
    };
    let mut page = Page::new(&title);
    page.code(&r.expression);
    page.meta(&format!(
        "Label: the return from close(t + {}) to close(t + {}); long-short book of the top and bottom fifths, equal weights, {} bp per unit of turnover. Charts: the {} period.",
        r.gap,
        r.gap + r.horizon,
        r.cost_bps,
        r.detail
    ));
    if let Some(rec) = record {
        record_section(&mut page, rec);
    }

    page.h2("Metrics by period");
    let head: Vec<String> = std::iter::once("metric".to_string()).chain(r.periods.iter().map(|p| format!("{} ({} to {})", p.period, p.first, p.last))).collect();
    let mut rows: Vec<Vec<String>> = Metrics::TABLE.iter().map(|(_, n, f)| std::iter::once(n.to_string()).chain(r.periods.iter().map(|p| num(f(&p.metrics)))).collect()).collect();
    rows.push(std::iter::once("scored days".to_string()).chain(r.periods.iter().map(|p| p.metrics.n_days.to_string())).collect());
    page.table(&head.iter().map(String::as_str).collect::<Vec<_>>(), &rows);

    page.h2("By calendar year");
    let rows: Vec<Vec<String>> = r
        .by_year
        .iter()
        .map(|y| {
            let m = &y.metrics;
            let v = [m.rank_ic, m.ic, m.rank_icir, m.sharpe, m.ann_return, m.max_drawdown, m.turnover];
            std::iter::once(y.year.to_string()).chain(v.iter().map(|x| num(*x))).chain(std::iter::once(m.n_days.to_string())).collect()
        })
        .collect();
    page.table(&["year", "Rank IC", "IC", "Rank ICIR", "Sharpe (net)", "annual return", "max drawdown", "turnover", "days"], &rows);
    let pos = r.by_year.iter().filter(|y| y.metrics.rank_ic > 0.0).count();
    page.meta(&format!("Rank IC above 0 in {pos} of {} years; each year scored alone, its labels ending with it.", r.by_year.len()));

    let d = &r.daily;
    let x: Vec<f64> = d.date.iter().map(|s| day_number(s)).collect();
    let pts = |v: &[f64]| x.iter().copied().zip(v.iter().copied()).collect::<Vec<_>>();
    page.h2("Information coefficient");
    page.chart(
        &Chart::new(X::Dates, "date", "Rank IC").bars("daily Rank IC", pts(&d.rank_ic)).line(&format!("{}-day mean", alpha::ROLLING), pts(&d.rank_ic_rolling)),
        &format!("Each date's Rank IC (the rank correlation of the signal with the label across stocks) and its mean over the last {} dates. A steady edge keeps the mean above zero.", alpha::ROLLING),
    );
    let dh: Vec<(f64, f64)> = r.decay.iter().map(|x| (x.horizon as f64, x.ic)).collect();
    let dr: Vec<(f64, f64)> = r.decay.iter().map(|x| (x.horizon as f64, x.rank_ic)).collect();
    page.chart(
        &Chart::new(X::Numbers, "label horizon (trading days)", "mean IC").line("IC", dh).line("Rank IC", dr),
        "IC decay: the same signal against labels of 1 to 20 days. A signal whose IC holds up over longer horizons can be traded more slowly.",
    );

    page.h2("Quintiles");
    if let Some(p) = r.periods.first() {
        let cats: Vec<String> = (1..=5).map(|q| format!("Q{q}")).collect();
        let bp: Vec<(f64, f64)> = p.metrics.quintile_returns.iter().enumerate().map(|(i, v)| (i as f64, v * 1e4)).collect();
        page.chart(
            &Chart::new(X::Categories(cats), "signal quintile (Q1 lowest)", "mean label (bp)").bars("mean label", bp),
            "The mean label of each fifth of stocks by signal, per date, averaged. A monotone staircase means the whole ranking carries information, not one tail.",
        );
    }
    let mut qc = Chart::new(X::Dates, "date", "cumulative mean label");
    for k in 0..5 {
        qc = qc.line(&format!("Q{}", k + 1), x.iter().copied().zip(d.quintile_cumulative.iter().map(|q| q[k])).collect());
    }
    page.chart(&qc, "The cumulative sum of each quintile's daily mean label: the quintiles should fan out in order.");

    page.h2("Long-short book");
    page.chart(
        &Chart::new(X::Dates, "date", "cumulative return")
            .line("before costs", pts(&d.gross_cumulative))
            .line("after costs", pts(&d.net_cumulative))
            .line("universe, bought and held", pts(&d.market_cumulative)),
        &format!("The cumulative sum of the book's daily returns before and after {} bp per unit of turnover, beside the equal-weight universe bought and held (the baseline: the book is market-neutral, the universe is not).", r.cost_bps),
    );
    let rows: Vec<Vec<String>> = r
        .periods
        .iter()
        .flat_map(|p| {
            let b = &p.metrics;
            let m = &p.market;
            [
                vec![format!("book after costs, {}", p.period), num(b.ann_return), num(b.sharpe), num(b.volatility), num(b.max_drawdown)],
                vec![format!("universe bought and held, {}", p.period), num(m.ann_return), num(m.sharpe), num(m.volatility), num(m.max_drawdown)],
            ]
        })
        .collect();
    page.table(&["", "annual return", "Sharpe", "volatility", "max drawdown"], &rows);
    page.chart(&Chart::new(X::Dates, "date", "drawdown").height(180.0).line("drawdown after costs", pts(&d.drawdown)), "How far the net cumulative return is below its running peak (its lowest point is the max drawdown).");

    page.h2("Turnover and stability");
    page.chart(
        &Chart::new(X::Dates, "date", "share of the book").line("daily turnover", pts(&d.turnover)).line("rank autocorrelation", pts(&d.rank_autocorr)),
        "Turnover: the share of the book traded into each date. Rank autocorrelation: how much today's ranking of stocks repeats yesterday's; high means cheap to hold.",
    );
    page.chart(&Chart::new(X::Dates, "date", "coverage").height(180.0).line("coverage", pts(&d.coverage)), "The share of each date's labelled stocks with a signal value.");

    page.h2("By sector");
    if r.sectors.is_empty() {
        page.meta("No groups file: give one (`groups` in alphaloop.toml or --groups) for the sector view.");
    } else {
        let cats: Vec<String> = r.sectors.iter().map(|s| s.group.clone()).collect();
        page.chart(
            &Chart::new(X::Categories(cats.clone()), "sector", "Rank IC").bars("Rank IC within the sector", r.sectors.iter().enumerate().map(|(i, s)| (i as f64, s.rank_ic)).collect()),
            &format!("The signal ranked within each sector alone (dates with at least {} of its stocks). An alpha that works in one sector only is a sector bet.", alpha::SECTOR_MIN_STOCKS),
        );
        let rows: Vec<Vec<String>> = r.sectors.iter().map(|s| vec![s.group.clone(), s.stocks.to_string(), num(s.rank_ic), format!("{:+.2}", s.spread * 1e4), s.n_days.to_string()]).collect();
        page.table(&["sector", "stocks", "Rank IC", "Q5 - Q1 (bp)", "days"], &rows);
    }
    page.finish()
}

fn record_section(page: &mut Page, rec: &AlphaRecord) {
    page.h2("Record");
    let mut rows = vec![
        vec!["status".to_string(), format!("{} {}", rec.status.keyword(), rec.status.reason())],
        vec!["family".into(), rec.family.clone()],
        vec!["run".into(), rec.run_id.clone()],
        vec!["generation".into(), rec.generation.to_string()],
        vec!["parents".into(), rec.parents.join(", ")],
        vec!["model".into(), rec.model.clone()],
    ];
    rows.retain(|r| !r[1].trim().is_empty());
    page.table(&["field", "value"], &rows);
    for (label, text) in [("Idea", &rec.idea), ("Hypothesis", &rec.hypothesis)] {
        if !text.is_empty() {
            page.p(&format!("{label}: {text}"));
        }
    }
    if !rec.reviews.is_empty() {
        let rows: Vec<Vec<String>> = rec.reviews.iter().map(|v| vec![v.round.to_string(), v.reviewer.clone(), format!("{:.1}", v.score), v.advice.clone()]).collect();
        page.table(&["round", "reviewer", "score", "advice"], &rows);
    }
    for l in &rec.lessons {
        page.p(&format!("Lesson: {l}"));
    }
}

//! Evaluating many alphas at once and the header every metrics table starts with: what
//! `eval --file` and `kb import` share.

use crate::backtest::{Grouped, Metrics, Prepared, Scorer};
use crate::data::{MarketData, Panel};
use crate::expr::{evaluate, AlphaResolver, Compiler, Schema};
use crate::seeds::AlphaDef;
use std::sync::Arc;

pub fn header(prep: &Prepared) -> String {
    header_of(prep, &format!("period {}", span(prep)))
}

/// The period and its first and last scored dates: `valid (2013-01-02..2015-12-31)`.
pub fn span(prep: &Prepared) -> String {
    let d = &prep.data;
    let (s, e) = prep.scorer.span();
    match (d.dates.get(s), e.checked_sub(1).and_then(|l| d.dates.get(l))) {
        (Some(a), Some(b)) => format!("{} ({a}..{b})", prep.period),
        _ => prep.period.to_string(),
    }
}

/// The data, the periods (as given), the label and the cost a table was scored with.
pub fn header_of(prep: &Prepared, periods: &str) -> String {
    let c = prep.scorer.config();
    let d = &prep.data;
    // The shipped S&P 500 files are today's constituents; a user's own data may not be.
    let shipped = d.source.file_name().and_then(|f| f.to_str()).is_some_and(|f| f.starts_with("sp500_"));
    let bias = if shipped { "; constituents as of 2021: survivorship bias" } else { "" };
    format!(
        "data {} ({} stocks{bias}), {periods}, label close(t+{})->close(t+{}), cost {} bps",
        d.source.display(),
        d.n_assets(),
        c.gap,
        c.gap + c.horizon,
        c.cost_bps
    )
}

/// One row of a batch result.
#[derive(serde::Serialize)]
pub struct Row {
    pub id: String,
    #[serde(flatten)]
    pub metrics: Option<Metrics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Where the formula mixes units (`expr::units`), as `what at position`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub units: Option<String>,
}

/// Compiles every alpha into one shared graph and evaluates them together (common
/// sub-expressions such as `adv20` or `rank(volume)` run once), scoring each as soon as
/// it is ready. Returns rows in input order.
pub fn evaluate_batch(
    defs: &[AlphaDef],
    data: &MarketData,
    alphas: &dyn AlphaResolver,
    scorer: &Scorer,
    progress: bool,
) -> Vec<Row> {
    let mut c = Compiler::new(Schema::of(data), alphas);
    let mut rows: Vec<Row> = Vec::with_capacity(defs.len());
    let mut roots = Vec::new();
    let mut root_row = Vec::new();
    for d in defs {
        match c.add(&d.formula) {
            Ok(r) => {
                roots.push(r);
                root_row.push(rows.len());
                let units = crate::expr::units::mixed(&d.formula).map(|e| format!("{} at {}", e.msg, e.pos));
                rows.push(Row { id: d.id.clone(), metrics: None, error: None, units });
            }
            Err(e) => rows.push(Row { id: d.id.clone(), metrics: None, error: Some(e.to_string()), units: None }),
        }
    }
    let pb = if progress { indicatif::ProgressBar::new(roots.len() as u64) } else { indicatif::ProgressBar::hidden() };
    pb.set_style(
        indicatif::ProgressStyle::with_template("{spinner} evaluating {pos}/{len} alphas [{elapsed}] {wide_bar} eta {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    // Signals are scored a few at a time, which shares the label reads between them.
    let mut group = Grouped::new(scorer);
    let mut done = |scored: Vec<(usize, Metrics)>| {
        pb.inc(scored.len() as u64);
        for (i, m) in scored {
            rows[root_row[i]].metrics = Some(m);
        }
    };
    evaluate(&c.graph, &roots, data, |i, p: Arc<Panel>| done(group.push(i, p)));
    done(group.flush());
    pb.finish_and_clear();
    rows
}

//! The knowledge base's page: how it grew, its families and generations, its best alphas
//! by valid metrics, and the holdout view (each accepted alpha's test Rank IC beside its
//! valid one, with the bar a valid t-statistic must clear for the number of attempts).

use super::svg::{Chart, X};
use super::{num, Page};
use crate::backtest::Metrics;
use crate::cli::table::short;
use crate::kb::{AlphaRecord, Stats, Status};
use serde::Serialize;

/// One accepted alpha on test beside its stored train and valid metrics.
#[derive(Serialize, Debug)]
pub struct HoldoutRow {
    pub id: String,
    pub code: String,
    pub train: Option<Metrics>,
    pub valid: Option<Metrics>,
    pub test: Option<Metrics>,
    pub error: Option<String>,
    /// The Rank IC's t-statistic on valid and on test.
    pub valid_t: Option<f64>,
    pub test_t: Option<f64>,
}

/// The accepted alphas on test, best on valid first.
#[derive(Serialize, Debug)]
pub struct Holdout {
    /// The data, period and label the test figures were computed on.
    pub header: String,
    pub rows: Vec<HoldoutRow>,
    /// Candidates tried on valid in the whole KB, and Bonferroni's bar for that many (5 %,
    /// two-sided): the |t| a valid figure must reach to stand out from the search.
    pub attempts: usize,
    pub bar_t: f64,
}

/// The accepted alphas that have a test figure and a valid Rank IC, in summary.
#[derive(Debug, Clone, Copy)]
pub struct HoldoutSummary {
    pub alphas: usize,
    /// Mean Rank IC on train, valid and test.
    pub train: f64,
    pub valid: f64,
    pub test: f64,
    /// How many kept valid's sign on test.
    pub kept_sign: usize,
}

impl Holdout {
    /// None when no accepted alpha has both a valid and a test Rank IC.
    pub fn summary(&self) -> Option<HoldoutSummary> {
        let ric = |m: &Option<Metrics>| metric(m, |m| m.rank_ic);
        let tested: Vec<&HoldoutRow> = self.rows.iter().filter(|x| ric(&x.valid).is_finite() && ric(&x.test).is_finite()).collect();
        if tested.is_empty() {
            return None;
        }
        let k = tested.len() as f64;
        let mean = |g: &dyn Fn(&HoldoutRow) -> f64| tested.iter().map(|x| g(x)).filter(|v| v.is_finite()).sum::<f64>() / k;
        Some(HoldoutSummary {
            alphas: tested.len(),
            train: mean(&|x| ric(&x.train)),
            valid: mean(&|x| ric(&x.valid)),
            test: mean(&|x| ric(&x.test)),
            kept_sign: tested.iter().filter(|x| ric(&x.valid).signum() == ric(&x.test).signum()).count(),
        })
    }

    /// How many clear the bar on valid.
    pub fn clears(&self) -> usize {
        self.rows.iter().filter(|r| r.valid_t.is_some_and(|t| t.abs() >= self.bar_t)).count()
    }
}

#[derive(Serialize, Debug)]
pub struct Family {
    pub name: String,
    pub records: usize,
    pub accepted: usize,
    pub best_valid_rank_ic: Option<f64>,
}

#[derive(Serialize, Debug)]
pub struct KbReport {
    pub location: String,
    pub stats: Stats,
    /// Accepted records against records stored, in the order they were stored (at most
    /// [`GROWTH_POINTS`] points).
    pub growth: Vec<(usize, usize)>,
    pub families: Vec<Family>,
    /// The best accepted alphas by valid Rank IC.
    pub best: Vec<AlphaRecord>,
    /// None when nothing is accepted.
    pub holdout: Option<Holdout>,
}

const GROWTH_POINTS: usize = 200;

impl KbReport {
    /// `records`: every record of the KB; `best`: the accepted ones the table shows.
    pub fn new(location: String, stats: Stats, mut records: Vec<AlphaRecord>, best: Vec<AlphaRecord>, holdout: Option<Holdout>) -> KbReport {
        records.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        let n = records.len();
        let every = n.div_ceil(GROWTH_POINTS).max(1);
        let mut growth = Vec::new();
        let mut accepted = 0;
        for (i, r) in records.iter().enumerate() {
            accepted += usize::from(r.status == Status::Accepted);
            if (i + 1) % every == 0 || i + 1 == n {
                growth.push((i + 1, accepted));
            }
        }
        let mut by: std::collections::BTreeMap<String, Family> = Default::default();
        for r in &records {
            let name = if r.family.is_empty() { "(none)".to_string() } else { r.family.clone() };
            let f = by.entry(name.clone()).or_insert(Family { name, records: 0, accepted: 0, best_valid_rank_ic: None });
            f.records += 1;
            if r.status == Status::Accepted {
                f.accepted += 1;
                if let Some(v) = r.metric("valid", "rank_ic").filter(|v| v.is_finite()) {
                    f.best_valid_rank_ic = Some(f.best_valid_rank_ic.map_or(v, |b: f64| b.max(v)));
                }
            }
        }
        let mut families: Vec<Family> = by.into_values().collect();
        families.sort_by(|a, b| b.records.cmp(&a.records).then_with(|| a.name.cmp(&b.name)));
        KbReport { location, stats, growth, families, best, holdout }
    }
}

fn metric(m: &Option<Metrics>, f: fn(&Metrics) -> f64) -> f64 {
    m.as_ref().map_or(f64::NAN, f)
}

fn t2(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite()).map_or("-".into(), |v| format!("{v:.2}"))
}

/// The families chart shows this many; the table lists them all.
const FAMILY_BARS: usize = 24;

pub fn kb_page(r: &KbReport) -> String {
    let mut page = Page::new(&format!("Knowledge base {}", r.location));
    let s = &r.stats;
    let status: Vec<String> = s.by_status.iter().map(|(k, v)| format!("{v} {k}")).collect();
    page.meta(&format!("{} records ({}), {} lessons, {} families, generations 0 to {}.", s.total, status.join(", "), s.lessons, r.families.len(), s.by_generation.keys().max().copied().unwrap_or(0)));

    page.h2("Growth");
    let growth = |f: fn(&(usize, usize)) -> usize| r.growth.iter().map(|g| (g.0 as f64, f(g) as f64)).collect::<Vec<_>>();
    page.chart(
        &Chart::new(X::Numbers, "records stored (in the order they were stored)", "records").line("accepted", growth(|g| g.1)),
        "Accepted alphas against records stored: the slope is the share of what was tried that the acceptance rule kept (seeds imported at once count as stored and accepted).",
    );
    let days: Vec<Vec<String>> = s.growth.iter().map(|(d, (n, a))| vec![d.clone(), n.to_string(), a.to_string()]).collect();
    page.table(&["day", "records added", "of them accepted"], &days);

    page.h2("Families and generations");
    let shown = &r.families[..r.families.len().min(FAMILY_BARS)];
    let cats: Vec<String> = shown.iter().map(|f| f.name.clone()).collect();
    let bars = |f: fn(&Family) -> usize| shown.iter().enumerate().map(|(i, x)| (i as f64, f(x) as f64)).collect::<Vec<_>>();
    page.chart(
        &Chart::new(X::Categories(cats), "family", "records").height(300.0).bars("stored", bars(|f| f.records)).bars("accepted", bars(|f| f.accepted)),
        &format!("Records and accepted alphas by idea family{}.", if r.families.len() > FAMILY_BARS { format!(" (the {FAMILY_BARS} largest; the table lists all {})", r.families.len()) } else { String::new() }),
    );
    let fam: Vec<Vec<String>> = r.families.iter().map(|f| vec![f.name.clone(), f.records.to_string(), f.accepted.to_string(), num(f.best_valid_rank_ic.unwrap_or(f64::NAN))]).collect();
    page.table(&["family", "records", "accepted", "best valid Rank IC"], &fam);
    let gens: Vec<(f64, f64)> = s.by_generation.values().enumerate().map(|(i, n)| (i as f64, *n as f64)).collect();
    page.chart(
        &Chart::new(X::Categories(s.by_generation.keys().map(u32::to_string).collect()), "generation (0: seeds and new ideas; each refinement or combination one more)", "records").height(220.0).bars("records", gens),
        "Records by generation: how far evolution has built on earlier alphas.",
    );

    page.h2("Best alphas on valid");
    if r.best.is_empty() {
        page.meta("No accepted alpha has a valid Rank IC yet.");
    } else {
        let rows: Vec<Vec<String>> = r
            .best
            .iter()
            .map(|a| {
                let v = |m: &str| num(a.metric("valid", m).unwrap_or(f64::NAN));
                vec![a.id.clone(), a.family.clone(), num(a.metric("train", "rank_ic").unwrap_or(f64::NAN)), v("rank_ic"), v("icir"), v("sharpe"), v("turnover"), short(&a.code, 60)]
            })
            .collect();
        page.table(&["record", "family", "train Rank IC", "valid Rank IC", "valid ICIR", "valid Sharpe (net)", "valid turnover", "code"], &rows);
        page.meta(&format!("The {} best accepted alphas by valid Rank IC. Valid was looked at while choosing them; the holdout below is the unbiased view.", r.best.len()));
    }

    page.h2("Holdout: valid against test");
    match &r.holdout {
        None => page.meta("Nothing accepted to hold out."),
        Some(h) => {
            page.meta(&h.header);
            let pts: Vec<(f64, f64)> = h.rows.iter().filter_map(|x| Some((x.valid_t?, x.test_t?))).collect();
            page.chart(
                &Chart::new(X::Numbers, "valid t-statistic of the Rank IC", "test t-statistic").height(320.0).dots("one accepted alpha", pts).vrule(-h.bar_t, "").vrule(h.bar_t, "multiple-testing bar").rule(1.96, "test 5 %"),
                &format!(
                    "Each accepted alpha's Rank IC t-statistic on test (never used to choose) against valid (chosen on). With {} candidates tried on valid, a valid t must pass {:.2} (Bonferroni, 5 %, two-sided) to stand out from the search; {} of {} do. Points above 1.96 held up on test.",
                    h.attempts,
                    h.bar_t,
                    h.clears(),
                    h.rows.len()
                ),
            );
            if let Some(m) = h.summary() {
                page.p(&format!(
                    "Mean Rank IC of the {} accepted alphas: train {}, valid {}, test {}; test kept valid's sign for {} of them.",
                    m.alphas,
                    num(m.train),
                    num(m.valid),
                    num(m.test),
                    m.kept_sign
                ));
            }
            let ric = |m: &Option<Metrics>| metric(m, |m| m.rank_ic);
            let rows: Vec<Vec<String>> = h
                .rows
                .iter()
                .map(|x| {
                    let t = |f: fn(&Metrics) -> f64| num(metric(&x.test, f));
                    vec![x.id.clone(), num(ric(&x.train)), num(ric(&x.valid)), t2(x.valid_t), t(|m| m.rank_ic), t2(x.test_t), t(|m| m.sharpe), t(|m| m.turnover), x.error.clone().unwrap_or_else(|| short(&x.code, 50))]
                })
                .collect();
            page.table(&["record", "train Rank IC", "valid Rank IC", "valid t", "test Rank IC", "test t", "test Sharpe (net)", "test turnover", "code (or error)"], &rows);
        }
    }
    page.finish()
}

//! A mining run's page: how the accepted set's combination grew (by hour and by
//! generation), where the time and the tokens went, the accepted alphas and how alike they
//! are, and why the rest were turned away. Built on the summary `runs show --json` prints.

use super::svg::{heatmap, Chart, X};
use super::{num, Page};
use crate::cli::table::short;
use serde::Serialize;
use serde_json::Value;

/// How alike the accepted alphas are: their signals' rank correlation over valid.
#[derive(Serialize, Debug, Default)]
pub struct Correlations {
    pub ids: Vec<String>,
    pub matrix: Vec<Vec<f64>>,
}

#[derive(Serialize, Debug)]
pub struct RunReport {
    /// The run's summary, as `runs show --json` prints it.
    pub summary: Value,
    /// Why ideas were turned away: each kind of reason with its count, most frequent first.
    pub rejections: Vec<(String, usize)>,
    pub correlations: Correlations,
}

/// A reason's kind: its text before any detail (a colon), without the numbers and ids in
/// it ("too correlated with accepted alpha gp-0013: …" → "too correlated with accepted
/// alpha").
pub fn reason_kind(reason: &str) -> String {
    let head = reason.split(':').next().unwrap_or("");
    let words: Vec<&str> = head.split_whitespace().filter(|w| !w.chars().any(|c| c.is_ascii_digit())).collect();
    if words.is_empty() { "(no reason recorded)".into() } else { words.join(" ") }
}

impl RunReport {
    pub fn new(summary: Value, correlations: Correlations) -> RunReport {
        let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
        for o in summary["outcomes"].as_array().into_iter().flatten().filter(|o| o["status"] != "accepted") {
            *counts.entry(reason_kind(o["reason"].as_str().unwrap_or(""))).or_default() += 1;
        }
        let mut rejections: Vec<(String, usize)> = counts.into_iter().collect();
        rejections.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        RunReport { summary, rejections, correlations }
    }
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

pub fn run_page(r: &RunReport) -> String {
    let s = &r.summary;
    let id = s["run_id"].as_str().unwrap_or("");
    let mut page = Page::new(&format!("Mining run {id}"));
    page.meta(&format!(
        "{}; {} ideas, {} candidates evaluated, {} tried on valid, {} accepted; {} tokens, ${:.2}; {:.1} hours of work.",
        s["settings"].as_str().unwrap_or("settings not recorded"),
        s["ideas"],
        s["evaluations"],
        s["attempts"],
        s["accepted"],
        s["tokens"],
        f(&s["cost_usd"]),
        f(&s["seconds"]) / 3600.0
    ));
    if let Some(p) = s["protocol"].as_object() {
        let sp = |k: &str| format!("{} to {}", p["splits"][k][0].as_str().unwrap_or("?"), p["splits"][k][1].as_str().unwrap_or("?"));
        page.meta(&format!(
            "Protocol: {} ({}); train {}, valid {}; the test period ({}) was never loaded. Label {} day(s) after a gap of {}, costs {} bp. {} candidates were tried on valid, so a valid t-statistic must exceed {:.2} to stand out (Bonferroni, 5 %).",
            p["data"].as_str().unwrap_or("?"),
            p["fingerprint"].as_str().unwrap_or("?"),
            sp("train"),
            sp("valid"),
            sp("test"),
            p["horizon"],
            p["gap"],
            p["cost_bps"],
            s["multiple_testing"]["candidates_on_valid"],
            f(&s["multiple_testing"]["bonferroni_t_5pct"])
        ));
    }

    page.h2("The accepted set's combination");
    let c = &s["combination"];
    page.p(&format!("Valid Rank IC of the combination of every accepted alpha: {} at the start, {} now.", num(f(&c["start"])), num(f(&c["now"]))));
    for (key, what) in [("by_hour", "hour"), ("by_generation", "generation")] {
        let steps = c[key].as_array().cloned().unwrap_or_default();
        let at = |k: &str| steps.iter().map(|x| (f(&x["at"]), f(&x[k]))).collect::<Vec<_>>();
        page.chart(
            &Chart::new(X::Numbers, what, "valid Rank IC").line("combination", at("combination")),
            &format!("The combination's valid Rank IC at the end of each {what}: it rises only when an accepted alpha adds to it."),
        );
        page.chart(
            &Chart::new(X::Numbers, what, "alphas accepted").height(200.0).line("accepted so far", at("accepted")),
            &format!("Alphas accepted by the end of each {what} (a running total; the run's {} candidates tried on valid are the multiple-testing count above).", s["attempts"]),
        );
    }

    page.h2("Where the time went");
    let t = &s["time_split"];
    let parts = ["writer", "judge", "eval", "kb"];
    let hours: Vec<(f64, f64)> = parts.iter().enumerate().map(|(i, k)| (i as f64, f(&t[*k]) / 3600.0)).collect();
    page.chart(
        &Chart::new(X::Categories(["writer (LLM)", "judge (LLM)", "evaluation", "knowledge base"].map(String::from).to_vec()), "stage", "hours").height(220.0).bars("time", hours),
        &format!("Hours spent in each stage over the run's ideas; {:.1} candidates evaluated per second of evaluation.", f(&s["evaluations_per_second"])),
    );

    page.h2("Accepted alphas");
    let acc: Vec<&Value> = s["outcomes"].as_array().into_iter().flatten().filter(|o| o["status"] == "accepted").collect();
    if acc.is_empty() {
        page.meta("None accepted.");
    } else {
        let rows: Vec<Vec<String>> = acc.iter().map(|o| vec![o["record_id"].as_str().unwrap_or("").into(), o["family"].as_str().unwrap_or("").into(), num(f(&o["train_rank_ic"])), num(f(&o["valid_rank_ic"])), o["code"].as_str().unwrap_or("").into()]).collect();
        page.table(&["record", "family", "train Rank IC", "valid Rank IC", "code"], &rows);
    }
    if r.correlations.ids.len() >= 2 {
        page.raw_figure(
            &heatmap(&r.correlations.ids, &r.correlations.matrix),
            "The rank correlation of each pair of accepted alphas' signals over valid (red positive, blue negative): a set worth combining is mostly pale.",
        );
    }

    page.h2("Why the rest were turned away");
    if r.rejections.is_empty() {
        page.meta("Nothing was turned away.");
    } else {
        let cats: Vec<String> = r.rejections.iter().map(|(k, _)| k.clone()).collect();
        page.chart(
            &Chart::new(X::Categories(cats.iter().map(|c| short(c, 22)).collect()), "reason", "ideas").height(240.0).bars("ideas", r.rejections.iter().enumerate().map(|(i, (_, n))| (i as f64, *n as f64)).collect()),
            "Ideas not accepted, by the reason of their last candidate (the table names each reason in full).",
        );
        page.table(&["reason", "ideas"], &r.rejections.iter().map(|(k, n)| vec![k.clone(), n.to_string()]).collect::<Vec<_>>());
    }
    page.finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reasons_are_grouped_without_their_numbers_and_ids() {
        use super::reason_kind;
        assert_eq!(reason_kind("too correlated with accepted alpha gp-0013: rank correlation 0.8"), "too correlated with accepted alpha");
        assert_eq!(reason_kind("train Rank IC -0.0007 is below 0.002"), "train Rank IC is below");
        assert_eq!(reason_kind(""), "(no reason recorded)");
    }
}

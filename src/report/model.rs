//! The combined model's page: the model against its baselines by split, its features'
//! importance, the walk-forward windows when it was walked forward, and the
//! self-improvement curve (the model retrained on more and more mined alphas) when one is
//! given. Built on the report `train --json` printed, which the model file keeps.

use super::svg::{Chart, X};
use super::{num, Page};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One point of `train --curve`: the model over the first `k` accepted alphas.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CurvePoint {
    pub k: usize,
    pub trees: u32,
    pub test_ic: f64,
    pub test_rank_ic: f64,
    pub test_icir: f64,
    pub test_mse: f64,
    pub test_sharpe: f64,
    pub valid_rank_ic: f64,
    pub valid_mse: f64,
}

/// The points of a `curve.csv` that `train --curve` wrote; `source` names it in errors.
pub fn read_curve(text: &str, source: &str) -> Result<Vec<CurvePoint>, super::ReportError> {
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let col = |name: &str| head.iter().position(|h| h.trim() == name).ok_or_else(|| super::ReportError::Input(format!("{source}: no column '{name}' (a curve.csv that `alphaloop train --curve DIR` wrote has it)")));
    let cols = ["k", "trees", "test_ic", "test_rank_ic", "test_icir", "test_mse", "test_sharpe", "valid_rank_ic", "valid_mse"].map(col);
    let mut at = [0usize; 9];
    for (a, c) in at.iter_mut().zip(cols) {
        *a = c?;
    }
    let mut out = Vec::new();
    for (i, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let cells: Vec<&str> = line.split(',').collect();
        let cell = |j: usize| -> Result<f64, super::ReportError> {
            let c = cells.get(at[j]).map(|c| c.trim()).unwrap_or("");
            c.parse::<f64>().map_err(|_| super::ReportError::Input(format!("{source}, row {}: '{c}' in column '{}' is not a number", i + 2, head[at[j]].trim())))
        };
        out.push(CurvePoint {
            k: cell(0)? as usize,
            trees: cell(1)? as u32,
            test_ic: cell(2)?,
            test_rank_ic: cell(3)?,
            test_icir: cell(4)?,
            test_mse: cell(5)?,
            test_sharpe: cell(6)?,
            valid_rank_ic: cell(7)?,
            valid_mse: cell(8)?,
        });
    }
    Ok(out)
}

#[derive(Serialize, Debug)]
pub struct ModelReport {
    pub file: String,
    /// What `train --json` printed when the model was fit.
    pub train: Value,
    pub curve: Vec<CurvePoint>,
}

const SPLITS: [&str; 3] = ["train", "valid", "test"];

impl ModelReport {
    /// The signals the page compares, each with its report by split: the model, its
    /// walk-forward run on test, the best single feature, the equal-weight combination and
    /// the baseline set through the same model.
    pub fn signals(&self) -> Vec<(String, Value)> {
        let t = &self.train;
        let b = &t["baselines"];
        let mut out = vec![("model".to_string(), t.clone())];
        if let Some(w) = t.get("walk_forward") {
            out.push((format!("model refit every {} month(s)", w["months"]), serde_json::json!({ "test": w["test"] })));
        }
        if let Some(s) = b.get("best_single") {
            out.push((format!("best single ({})", s["id"].as_str().unwrap_or("?")), s["report"].clone()));
        }
        if let Some(e) = b.get("equal_weight") {
            out.push(("equal-weight ranks".into(), e.clone()));
        }
        if let Some(s) = b.get("seeds_model") {
            out.push((format!("{}, same model", b["seeds_model_features"].as_str().unwrap_or("baseline")), s.clone()));
        }
        out
    }
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// Importance bars shown at most; the table lists this many too.
const TOP_FEATURES: usize = 25;

pub fn model_page(r: &ModelReport) -> String {
    let t = &r.train;
    let mut page = Page::new(&format!("Combined model {}", r.file));
    let s = &t["settings"];
    page.meta(&format!(
        "{} features, {} trees (early-stopped on valid); label: the return over {} day(s) after a gap of {}; features transformed by {}, fit to the {} target, eta {}, depth {}.",
        t["features"].as_array().map_or(0, Vec::len),
        t["trees"],
        t["label"]["horizon"],
        t["label"]["gap"],
        s["transform"].as_str().unwrap_or("?"),
        s["target"].as_str().unwrap_or("?"),
        s["eta"],
        s["max_depth"],
    ));

    page.h2("Against its baselines");
    let signals = r.signals();
    let mut rows = Vec::new();
    for (name, rep) in &signals {
        for split in SPLITS {
            let x = &rep[split];
            if x.is_object() {
                rows.push(vec![name.clone(), split.to_string(), num(f(&x["ic"])), num(f(&x["rank_ic"])), num(f(&x["icir"])), num(f(&x["sharpe"])), num(f(&x["max_drawdown"])), num(f(&x["turnover"]))]);
            }
        }
    }
    page.table(&["signal", "split", "IC", "Rank IC", "ICIR", "Sharpe (net)", "max drawdown", "turnover"], &rows);
    let cats: Vec<String> = signals.iter().map(|(n, _)| n.clone()).collect();
    for (key, what) in [("rank_ic", "Rank IC"), ("sharpe", "long-short Sharpe (net)")] {
        let mut chart = Chart::new(X::Categories(cats.clone()), "signal", what).height(260.0);
        for split in SPLITS {
            chart = chart.bars(split, signals.iter().enumerate().map(|(i, (_, rep))| (i as f64, f(&rep[split][key]))).collect());
        }
        page.chart(&chart, &format!("{what} of the model and its baselines on each split. The tree count was chosen on valid; test was never used to choose anything, so it is the figure to compare."));
    }

    page.h2("Feature importance");
    let imp: Vec<&Value> = t["importance"].as_array().map(|v| v.iter().take(TOP_FEATURES).collect()).unwrap_or_default();
    if imp.is_empty() {
        page.meta("The model file records no importance.");
    } else {
        let ids: Vec<String> = imp.iter().map(|i| i["id"].as_str().unwrap_or("?").to_string()).collect();
        page.chart(
            &Chart::new(X::Categories(ids), "feature", "mean gain per split").height(300.0).bars("gain", imp.iter().enumerate().map(|(i, x)| (i as f64, f(&x["gain"]))).collect()),
            &format!("XGBoost's gain: how much the splits on each feature improved the fit, on average. The {} features used most, by gain.", imp.len()),
        );
        let features: std::collections::HashMap<&str, &str> =
            t["features"].as_array().into_iter().flatten().filter_map(|x| Some((x["id"].as_str()?, x["code"].as_str()?))).collect();
        let rows: Vec<Vec<String>> = imp
            .iter()
            .map(|x| {
                let id = x["id"].as_str().unwrap_or("?");
                vec![id.to_string(), num(f(&x["gain"])), x["splits"].to_string(), crate::cli::table::short(features.get(id).copied().unwrap_or(""), 60)]
            })
            .collect();
        page.table(&["feature", "gain", "splits", "code"], &rows);
    }

    if let Some(w) = t.get("walk_forward") {
        page.h2("Walked forward through test");
        page.p(&format!(
            "Refit every {} month(s) on every label known by then, with the tree count chosen on valid; each window predicted by its own refit only. Test Rank IC {} against {} for the model fit once, Sharpe (net) {} against {}.",
            w["months"],
            num(f(&w["test"]["rank_ic"])),
            num(f(&t["test"]["rank_ic"])),
            num(f(&w["test"]["sharpe"])),
            num(f(&t["test"]["sharpe"]))
        ));
        let rows: Vec<Vec<String>> = w["refits"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|x| vec![x["from"].as_str().unwrap_or("").into(), x["to"].as_str().unwrap_or("").into(), x["rows"].to_string(), x["last_label_end"].as_str().unwrap_or("").into()])
            .collect();
        page.table(&["refit predicts from", "to", "fit on rows", "latest label ends"], &rows);
    }

    if !r.curve.is_empty() {
        page.h2("The self-improvement curve");
        let pts = |g: fn(&CurvePoint) -> f64| r.curve.iter().map(|c| (c.k as f64, g(c))).collect::<Vec<_>>();
        page.chart(
            &Chart::new(X::Numbers, "accepted alphas used (in the order they were accepted)", "Rank IC").line("test", pts(|c| c.test_rank_ic)).line("valid", pts(|c| c.valid_rank_ic)),
            "The model retrained on the first k accepted alphas: a knowledge base that improves itself lifts test as k grows.",
        );
        let rows: Vec<Vec<String>> = r.curve.iter().map(|c| vec![c.k.to_string(), c.trees.to_string(), num(c.valid_rank_ic), num(c.test_rank_ic), num(c.test_icir), num(c.test_sharpe)]).collect();
        page.table(&["alphas", "trees", "valid Rank IC", "test Rank IC", "test ICIR", "test Sharpe (net)"], &rows);
    }
    page.finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_curve_file_reads_back_and_a_bad_cell_is_named() {
        let text = "k,trees,test_ic,test_rank_ic,test_icir,test_mse,test_sharpe,valid_rank_ic,valid_mse\n5,12,0.01,0.02,0.1,0.5,0.7,0.03,0.4\n";
        let c = super::read_curve(text, "curve.csv").expect("curve");
        assert_eq!((c.len(), c[0].k, c[0].trees, c[0].valid_rank_ic), (1, 5, 12, 0.03));
        let err = super::read_curve(&text.replace("0.7", "x"), "d/curve.csv").expect_err("bad cell").to_string();
        assert!(err.contains("d/curve.csv, row 2") && err.contains("'test_sharpe'"), "{err}");
        let err = super::read_curve("k,trees\n", "c.csv").expect_err("missing column").to_string();
        assert!(err.contains("no column 'test_ic'"), "{err}");
    }
}

//! The combined model on the real sample data with the alpha101 seeds: train, save, reload,
//! predict identically; and the two null tests (shuffled labels → no test IC; the label
//! leaked as a feature → test IC near 1) that show the pipeline can tell both apart.

mod common;

use alphaloop::backtest::MetricsConfig;
use alphaloop::model::{self, Feature, SavedModel, TrainConfig};
use alphaloop::seeds::{self, AlphaSet};
use common::sample;
use std::path::Path;

fn seeds_and_resolver() -> (Vec<Feature>, AlphaSet) {
    let defs = seeds::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("alpha_kb/seeds/alpha101.toml")).expect("seeds");
    let set = AlphaSet::from_defs(&defs);
    // Alpha 056 needs `cap`, which the data does not have.
    let feats = defs.into_iter().filter(|d| !d.formula.contains("cap")).map(|d| Feature { id: d.id, code: d.formula }).collect();
    (feats, set)
}

fn quick() -> TrainConfig {
    TrainConfig { max_rounds: 60, patience: 10, min_child_weight: 50.0, ..TrainConfig::default() }
}

#[test]
fn trains_saves_reloads_and_predicts_identically() {
    let (feats, set) = seeds_and_resolver();
    let res = model::train(sample(), &common::sample_splits(), &feats, &set, &quick(), &MetricsConfig::default(), |_| {}).expect("trains");
    assert!(res.trees >= 1);
    for s in ["train", "valid", "test"] {
        let r = &res.model[s];
        assert!(r.n_days > 100, "{s}: {} days", r.n_days);
        assert!(r.ic.is_finite() && r.rank_ic.is_finite() && r.mse.is_finite(), "{s}: {r:?}");
    }
    assert_eq!(res.importance.len(), feats.len());
    assert!(res.importance[0].gain > 0.0);
    assert!(res.best_single.is_some());
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("m.json");
    res.saved.save(&path).expect("save");
    let loaded = SavedModel::load(&path).expect("load");
    assert_eq!(loaded.features, feats);
    assert_eq!(loaded.data_fingerprint, sample().fingerprint());
    let t = sample().n_dates() - 1;
    let a = res.saved.predict(sample(), t, &set).expect("predict");
    let b = loaded.predict(sample(), t, &set).expect("predict");
    assert!(a.len() > 40, "{} scored stocks", a.len());
    assert_eq!(a, b, "predictions change after a reload");
    // A model saved before missing features were filled (no `fills_missing`) is given them
    // missing, as it was fit: on an early date (a year in, where windows over longer
    // windows are still undefined) that changes its scores.
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    assert_eq!(json.as_object_mut().expect("object").remove("fills_missing"), Some(serde_json::Value::Bool(true)));
    std::fs::write(&path, json.to_string()).expect("write");
    let older = SavedModel::load(&path).expect("load");
    assert!(!older.fills_missing);
    let early = 255;
    assert_ne!(older.predict(sample(), early, &set).expect("predict"), loaded.predict(sample(), early, &set).expect("predict"));
    res.saved.save(&path).expect("save");
    // The CLI reads the same file.
    let out = common::bin()
        .args(["predict", "--json", "--model"])
        .arg(&path)
        .arg("--data")
        .arg(common::shared("data/sp500_sample.parquet"))
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v.as_array().expect("array").len(), a.len());
    assert_eq!(v[0]["symbol"], a[0].0.as_str());
    assert!((v[0]["score"].as_f64().expect("score") - a[0].1).abs() < 1e-6);
    // `-n 2`: the two best and the two worst, the rest counted.
    let out = common::bin().args(["predict", "-n", "2", "--model"]).arg(&path).arg("--data").arg(common::shared("data/sp500_sample.parquet")).output().expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let symbols: Vec<&str> = text.lines().skip(3).filter_map(|l| l.split_whitespace().next()).collect();
    let (first, last) = (a[0].0.as_str(), a[a.len() - 1].0.as_str());
    assert_eq!((symbols.len(), symbols[0], symbols[2], symbols[4]), (5, first, "...", last), "{text}");
    assert!(text.contains(&format!("{} more", a.len() - 4)), "{text}");
    // A day without trading names the trading days around it; a missing model is named.
    let predict = |model: &std::path::Path, date: &str| {
        let out = common::bin().arg("predict").arg("--model").arg(model).args(["--date", date, "--data"]).arg(common::shared("data/sp500_sample.parquet")).output().expect("runs");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = predict(&path, "2018-12-29");
    assert!(err.contains("date 2018-12-29 is not a trading date of ") && err.contains(": the nearest are 2018-12-28 and 2018-12-31"), "{err}");
    assert!(predict(&path, "2030-01-01").contains("the data ends on 2018-12-31"));
    let err = predict(std::path::Path::new("/nonexistent/model.json"), "2018-12-28");
    assert!(err.contains("no model at /nonexistent/model.json: `alphaloop train` saves one there"), "{err}");
    // A model whose booster is damaged is named, with XGBoost's reason but not its stack.
    let bad = dir.path().join("bad.json");
    let mut broken: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    broken["booster"] = "{not json".into();
    std::fs::write(&bad, broken.to_string()).expect("write");
    let err = predict(&bad, "2018-12-28");
    assert!(err.contains(&format!("model {}: xgboost: ", bad.display())) && err.contains("{not json") && !err.contains("Stack trace"), "{err}");
    // Without --model, predict reads where train saves by default (relative to the
    // working directory, as train's --out).
    let work = tempfile::tempdir().expect("tmp");
    let predict_here = || common::bin().current_dir(work.path()).args(["predict", "--json", "--data"]).arg(common::shared("data/sp500_sample.parquet")).output().expect("runs");
    let err = String::from_utf8_lossy(&predict_here().stderr).into_owned();
    assert!(err.contains("no model at alpha_kb/models/latest.json: `alphaloop train` saves one there"), "{err}");
    std::fs::create_dir_all(work.path().join("alpha_kb/models")).expect("mkdir");
    std::fs::copy(&path, work.path().join("alpha_kb/models/latest.json")).expect("copy");
    let here = predict_here();
    assert!(here.status.success(), "{}", String::from_utf8_lossy(&here.stderr));
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&here.stdout).expect("json"), v, "the default model is the one given");
}

#[test]
fn shuffled_labels_give_no_test_ic() {
    let (feats, set) = seeds_and_resolver();
    let cfg = TrainConfig { shuffle_train_labels: true, ..quick() };
    let res = model::train(sample(), &common::sample_splits(), &feats, &set, &cfg, &MetricsConfig::default(), |_| {}).expect("trains");
    let t = &res.model["test"];
    // t-statistic of the mean daily IC: icir * sqrt(days).
    let tstat = t.icir * (t.n_days as f64).sqrt();
    assert!(tstat.abs() < 2.0, "test IC {} with t = {tstat}", t.ic);
}

#[test]
fn a_leaked_label_is_detected() {
    let (feats, set) = seeds_and_resolver();
    let cfg = TrainConfig { leak_label: true, refit_months: Some(6), ..quick() };
    let res = model::train(sample(), &common::sample_splits(), &feats[..10], &set, &cfg, &MetricsConfig::default(), |_| {}).expect("trains");
    assert!(res.model["test"].rank_ic > 0.9, "{:?}", res.model["test"]);
    assert_eq!(res.importance[0].id, "label (leaked)");
    // The walk-forward refits predict every test date with a model that sees the feature.
    let w = res.walk_forward.expect("walk-forward");
    assert!(w.test.rank_ic > 0.9, "{:?}", w.test);
}

/// Walk-forward over the sample's test year in quarters: every test date is predicted by
/// exactly one refit, each refit is fit only on labels that ended by its first date, on
/// more rows than the one before, and the refits' report covers the same dates as the
/// fixed model's.
#[test]
fn walk_forward_refits_only_on_labels_known_before_each_window() {
    let (feats, set) = seeds_and_resolver();
    let cfg = TrainConfig { refit_months: Some(3), ..quick() };
    let splits = common::sample_splits();
    let res = model::train(sample(), &splits, &feats[..20], &set, &cfg, &MetricsConfig::default(), |_| {}).expect("trains");
    let w = res.walk_forward.expect("walk-forward");
    let dates: Vec<String> = sample().dates.iter().filter(|d| **d >= splits.test.0 && **d <= splits.test.1).map(|d| d.to_string()).collect();
    let quarters: Vec<(&str, &str)> = w.refits.iter().map(|r| (r.from.as_str(), r.to.as_str())).collect();
    assert_eq!(quarters.len(), 4, "{quarters:?}");
    assert_eq!(quarters[0].0, dates[0]);
    assert_eq!(quarters[3].1, dates[dates.len() - 1]);
    for (k, r) in w.refits.iter().enumerate() {
        // Contiguous windows of whole months: each starts the trading day after the last.
        if k > 0 {
            let prev = dates.iter().position(|d| *d == w.refits[k - 1].to).expect("a test date");
            assert_eq!(r.from, dates[prev + 1]);
            assert!(r.rows > w.refits[k - 1].rows, "refit {k} fit on {} rows, the one before on {}", r.rows, w.refits[k - 1].rows);
        }
        assert_eq!(&r.from[5..7], ["01", "04", "07", "10"][k]);
        // ISO dates compare as strings.
        assert!(r.last_label_end <= r.from, "refit {k}: a label ending {} used for dates from {}", r.last_label_end, r.from);
    }
    assert_eq!(w.test.n_days, res.model["test"].n_days);
    assert!(w.test.rank_ic.is_finite() && w.test.mse.is_finite(), "{:?}", w.test);
    assert_ne!(w.test.rank_ic, res.model["test"].rank_ic, "the refits predicted exactly what the fixed model did");
}

#[test]
fn train_cli_json_has_the_documented_keys() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = common::sample_config(dir.path(), &common::shared("data/sp500_sample.parquet"), None);
    let out_model = dir.path().join("m.json");
    let out = common::bin()
        .arg("--config")
        .arg(&cfg)
        .args(["train", "--seeds", "--json", "--max-rounds", "20", "--refit-months", "6", "--out"])
        .arg(&out_model)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    for split in ["train", "valid", "test"] {
        for k in ["ic", "rank_ic", "icir", "mse", "sharpe", "max_drawdown", "turnover"] {
            assert!(v[split].get(k).is_some(), "{split}.{k} missing");
        }
    }
    assert_eq!(v["features"].as_array().expect("features").len(), 100);
    assert!(v["baselines"]["best_single"]["id"].is_string());
    assert_eq!(v["walk_forward"]["refits"].as_array().expect("refits").len(), 2);
    assert!(v["walk_forward"]["test"]["rank_ic"].is_number());
    assert!(out_model.exists());
    // Features are never chosen on test.
    let out = common::bin().arg("--config").arg(&cfg).args(["train", "--split", "test", "--kb"]).arg(dir.path().join("kb")).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("never chosen on the test split"));
    // The curve reports fixed models only: asking it for refits is refused, not ignored.
    let out = common::bin().arg("--config").arg(&cfg).args(["train", "--refit-months", "3", "--curve"]).arg(dir.path().join("curve")).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}

/// `--seeds FILE` trains on any alpha file (here Qlib's Alpha158, shipped) and `--baseline
/// FILE` puts another through the same model, named after its file in the report.
#[test]
fn train_takes_any_alpha_file_as_features_or_baseline() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = common::sample_config(dir.path(), &common::shared("data/sp500_sample.parquet"), None);
    let base = dir.path().join("mine.txt");
    std::fs::write(&base, "-1 * rank(delta(close, 5))\nrank(volume / adv20)\nts_rank(returns, 10)\n").expect("write");
    let alpha158 = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("alpha_kb/seeds/alpha158.toml");
    let train = |extra: &[&str]| {
        common::bin().arg("--config").arg(&cfg).args(["train", "--json", "--max-rounds", "10", "--out"]).arg(dir.path().join("m.json")).args(extra).output().expect("runs")
    };
    let out = train(&["--seeds", alpha158.to_str().expect("utf-8 path"), "--baseline", base.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let features = v["features"].as_array().expect("features");
    assert_eq!(features.len(), 158);
    assert!(features.iter().any(|f| f["id"] == "alpha158_kmid"), "{features:?}");
    assert_eq!(v["baselines"]["seeds_model_features"], "mine");
    assert!(v["baselines"]["seeds_model"]["valid"]["rank_ic"].is_number());
    // The table names the baseline by its file too.
    let out = common::bin().arg("--config").arg(&cfg).args(["train", "--max-rounds", "5", "--seeds"]).arg(&base).arg("--baseline").arg(&alpha158).arg("--out").arg(dir.path().join("m2.json")).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("alpha158, same model"), "{}", String::from_utf8_lossy(&out.stdout));
    // A missing file is named.
    let out = train(&["--seeds", "nowhere.toml"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nowhere.toml"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Valid and test are binned at train's bin edges, so a booster predicts on their quantile
/// matrices exactly what it predicts on their raw rows; a matrix binned at edges of its own
/// does not (which shows the check can tell the two apart).
#[test]
fn matrices_binned_at_train_edges_predict_as_the_raw_rows() {
    use alphaloop::expr::{eval_expr, NoAlphas};
    use alphaloop::model::xgb::{Booster, DMatrix};
    let data = sample();
    // Raw values, not ranks: a sample day's ranks take so few values that any edges keep
    // them apart.
    let exprs = ["returns", "delta(close, 5) / close", "volume / adv20", "correlation(close, volume, 10)"];
    let feats: Vec<_> = exprs.iter().map(|e| eval_expr(e, data, &NoAlphas).expect("evaluates")).collect();
    let returns = eval_expr("returns", data, &NoAlphas).expect("returns");
    let (nd, na) = (data.n_dates(), data.n_assets());
    let cut = nd * 2 / 3;
    // Rows (features with their missing values kept, the return two days later) of the
    // dates before `cut` and from it.
    let rows = |from: usize, to: usize| {
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for t in from..to {
            for a in 0..na {
                let label = returns.get(t + 2, a);
                if label.is_finite() {
                    x.extend(feats.iter().map(|f| f.get(t, a) as f32));
                    y.push(label as f32);
                }
            }
        }
        (x, y)
    };
    let (x_train, y_train) = rows(0, cut - 2);
    let (x_test, y_test) = rows(cut, nd - 2);
    assert!(x_train.iter().any(|v| v.is_nan()), "no missing feature in the train rows");
    let dtrain = DMatrix::quantile(&x_train, y_train.len(), &y_train, None, 2).expect("train matrix");
    let dtest = DMatrix::quantile(&x_test, y_test.len(), &y_test, Some(&dtrain), 2).expect("test matrix");
    let own = DMatrix::quantile(&x_test, y_test.len(), &y_test, None, 2).expect("test matrix with its own edges");
    let mut b = Booster::new(&[&dtrain]).expect("booster");
    for (k, v) in [("objective", "reg:squarederror"), ("tree_method", "hist"), ("max_depth", "4"), ("seed", "1")] {
        b.set_param(k, v).expect("parameter");
    }
    for round in 0..20 {
        b.update(&dtrain, round).expect("round");
    }
    let raw = b.predict_dense(&x_test, y_test.len()).expect("raw rows");
    assert_eq!(raw.len(), y_test.len());
    assert_eq!(b.predict(&dtest).expect("binned rows"), raw);
    assert_ne!(b.predict(&own).expect("own edges"), raw);
    // A reloaded booster predicts the same; the dump names features by number.
    let again = Booster::load_json(&b.save_json().expect("saves")).expect("loads");
    assert_eq!(again.predict_dense(&x_test, y_test.len()).expect("reloaded"), raw);
    assert!(b.dump().expect("dump").iter().any(|t| t.contains("[f3<")), "feature 3 never split on");
    // Bad shapes are errors, not reads past the rows.
    let err = DMatrix::quantile(&x_test, y_test.len(), &y_test[1..], None, 2).err().expect("labels do not match");
    assert!(err.to_string().contains("labels for"), "{err}");
    assert!(b.predict_dense(&x_test[1..], y_test.len()).is_err());
}

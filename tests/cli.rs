//! The `alphaloop` binary as a user runs it, on the real sample data.

mod common;

use common::{bin, sample, shared};
use polars::prelude::*;

fn sample_arg() -> String {
    shared("data/sp500_sample.parquet").display().to_string()
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = bin().args(args).output().expect("runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn eval_json_has_the_documented_keys() {
    let data = sample_arg();
    let (code, out, err) = run(&["eval", "--data", &data, "--period", "2016-01-01:2017-12-31", "--json", "-1 * rank(delta(close, 5))"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json object");
    for k in ["ic", "rank_ic", "icir", "ic_tstat", "sharpe", "ann_return", "max_drawdown", "turnover", "coverage", "distinctness", "n_days", "ic_h5", "ic_h10", "ic_h20"] {
        assert!(v.get(k).is_some(), "missing key {k}");
    }
    assert!(v["n_days"].as_u64().is_some_and(|n| n > 400 && n < 504), "{}", v["n_days"]);
    assert!(v["coverage"].as_f64().is_some_and(|c| c > 0.99));
}

/// `ops --json`: the catalogue for scripts. Every operator it lists can be called by its name
/// with its listed arguments, and the text listing says the same.
#[test]
fn ops_json_lists_every_operator_callable_as_listed() {
    let (code, out, err) = run(&["ops", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let ops = v["operators"].as_array().expect("operators");
    let (_, text, _) = run(&["ops"]);
    let data = sample_arg();
    for o in ops {
        let name = o["name"].as_str().expect("name");
        assert!(text.contains(o["doc"].as_str().expect("doc")), "{name}'s meaning is not in `ops`");
        // A call with the listed arguments: series `close`, windows 5, level 0.5, group sector.
        let args: Vec<&str> = o["params"].as_array().expect("params").iter().map(|p| match p.as_str().expect("param") {
            "window" => "5",
            "level" => "0.5",
            "group" => "IndClass.sector",
            _ => "close",
        }).collect();
        let call = format!("{name}({})", args.join(", "));
        let (code, _, err) = run(&["eval", "--data", &data, "--period", "all", "--json", &call]);
        assert_eq!(code, 0, "{call}: {err}");
    }
    assert!(ops.iter().any(|o| o["name"] == "ts_quantile" && o["params"] == serde_json::json!(["series", "window", "level"])));
    assert!(ops.iter().any(|o| o["name"] == "max" && o["aliases"] == serde_json::json!(["greater"])));
    let fields: Vec<&str> = v["fields"].as_array().expect("fields").iter().filter_map(|f| f["name"].as_str()).collect();
    assert!(fields.contains(&"close") && fields.contains(&"vwap") && fields.contains(&"adv{d}"), "{fields:?}");
    // Each operator's and field's unit of measure, as the units check reads them.
    let unit_of = |name: &str, key: &str, list: &str| v[list].as_array().expect("list").iter().find(|o| o["name"] == name).map(|o| o[key].clone());
    assert_eq!(unit_of("rank", "units", "operators"), Some("a pure number".into()));
    assert_eq!(unit_of("ts_cov", "units", "operators"), Some("the product of the arguments' units".into()));
    assert_eq!(unit_of("adv{d}", "unit", "fields"), Some("a dollar amount".into()));
    assert_eq!(unit_of("volume", "unit", "fields"), Some("a volume in shares".into()));
    assert!(text.contains("  ts_product     the argument's unit to the power d"), "{text}");
}

/// `--period train,valid` (or `--period` twice) puts one expression's metrics side by side,
/// each the same as that period alone gives; several periods with a file are refused.
#[test]
fn several_periods_side_by_side() {
    let data = sample_arg();
    let e = "-1 * rank(delta(close, 5))";
    let (a, b) = ("2015-06-01:2016-12-31", "2018-01-01:");
    let (code, out, err) = run(&["eval", "--data", &data, "--period", &format!("{a},{b}"), "--json", e]);
    assert_eq!(code, 0, "{err}");
    let both: serde_json::Value = serde_json::from_str(&out).expect("json object");
    for period in [a, b] {
        let (code, out, err) = run(&["eval", "--data", &data, "--period", period, "--json", e]);
        assert_eq!(code, 0, "{err}");
        let alone: serde_json::Value = serde_json::from_str(&out).expect("json object");
        assert_eq!(both[period], alone, "{period}");
    }
    let (code, out, err) = run(&["eval", "--data", &data, "--period", a, "--period", "2017-01-01:2017-12-31", e]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("periods 2015-06-01:2016-12-31 (2015-06-01..2016-12-30), 2017-01-01:2017-12-31 (2017-01-03..2017-12-29)"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("metric") && l.ends_with("2015-06-01:2016-12-31  2017-01-01:2017-12-31")), "{out}");
    assert!(out.contains("quintile mean label, lowest to highest signal, 2017-01-01:2017-12-31: "), "{out}");
    // A period too short for any label is explained under its own name, the other not.
    let (code, out, err) = run(&["eval", "--data", &data, "--period", &format!("{a},2018-12-28:2018-12-31"), e]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches("no date was scored").count(), 1, "{out}");
    assert!(out.contains("note   2018-12-28:2018-12-31: no date was scored: no date of the period has a label"), "{out}");
    let (code, _, err) = run(&["eval", "--data", &data, "--period", "train,valid", "--file", "alpha_kb/seeds/alpha101.toml"]);
    assert!(code == 2 && err.contains("several periods (--period train,valid) go with one expression"), "{code} {err}");
}

/// `--by-year` scores each calendar year of the period alone: a year's metrics are those of
/// that year given as the period.
#[test]
fn by_year_scores_each_year_as_its_own_period() {
    let data = sample_arg();
    let e = "rank(volume / adv20)";
    let (code, out, err) = run(&["eval", "--data", &data, "--period", "all", "--by-year", "--json", e]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json object");
    let years = v["by_year"].as_array().expect("by_year");
    assert_eq!(years.iter().map(|y| y["year"].as_i64().expect("year")).collect::<Vec<_>>(), [2015, 2016, 2017, 2018]);
    let (code, out, err) = run(&["eval", "--data", &data, "--period", "2016-01-01:2016-12-31", "--json", e]);
    assert_eq!(code, 0, "{err}");
    let alone: serde_json::Value = serde_json::from_str(&out).expect("json object");
    assert_eq!(years[1]["metrics"], alone);
    let (code, out, err) = run(&["eval", "--data", &data, "--period", "all", "--by-year", e]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().any(|l| l.starts_with("2017 ")) && out.contains("years (each year's labels end with it)"), "{out}");
}

/// A signal with no scored date gets a line saying why, not only a table of dashes.
#[test]
fn a_signal_without_scored_dates_is_explained() {
    let data = sample_arg();
    let (code, out, err) = run(&["eval", "--data", &data, "--period", "all", "close / 0"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("note   no date was scored: the signal is never finite where the label is"), "{out}");
    assert!(out.contains("lowest to highest signal: -  -  -  -  -"), "{out}");
    let (code, out, err) = run(&["eval", "--data", &data, "--period", "all", "rank(close > 0)"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("no date had 20 stocks with a finite signal and label over which the signal varied"), "{out}");
    let (_, out, _) = run(&["eval", "--data", &data, "--period", "all", "close ^ close ^ close"]);
    assert!(out.contains("no date was scored: the signal is finite for fewer than one labelled stock a date (coverage 0.00"), "{out}");
    let (_, out, _) = run(&["eval", "--data", &data, "--period", "2016-01-02:2016-01-05", "rank(close)"]);
    assert!(out.contains("no date was scored: no date of the period has a label (each needs the 2 trading days after it"), "{out}");
    let (_, out, _) = run(&["eval", "--data", &data, "--period", "all", "rank(close)"]);
    assert!(!out.contains("no date was scored") && !out.contains("NaN"), "{out}");
}

#[test]
fn eval_reports_expression_errors_with_a_caret() {
    let (code, _, err) = run(&["eval", "--data", &sample_arg(), "--period", "all", "rank(delta(clsoe, 5))"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown field 'clsoe' at 12; did you mean 'close'?"), "{err}");
    assert!(err.contains("\n             ^^^^^"), "{err}");
}

/// An expression that mixes units runs, and the table ends with a note that says where;
/// a file's table names the alphas that do.
#[test]
fn eval_notes_where_an_expression_mixes_units() {
    let (code, out, err) = run(&["eval", "--data", &sample_arg(), "--period", "all", "rank(returns - adv20)"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("rank_ic") && out.contains("note   units: subtracts a dollar amount from a pure number at 6"), "{out}");
    assert!(out.contains("\n  rank(returns - adv20)\n       ^^^^^^^^^^^^^^^"), "{out}");
    let (_, out, _) = run(&["eval", "--data", &sample_arg(), "--period", "all", "rank(returns) - rank(adv20)"]);
    assert!(!out.contains("units"), "{out}");
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("alphas.txt");
    std::fs::write(&f, "close > volume\nrank(close)\n").expect("write");
    let (code, out, _) = run(&["eval", "--data", &sample_arg(), "--period", "all", "--file", &f.display().to_string()]);
    assert_eq!(code, 0);
    assert!(out.contains("note   units mixed (each runs, but adds, subtracts or compares unlike quantities) in "), "{out}");
    assert!(out.contains("(compares a price with a volume in shares at 1)"), "{out}");
    let (_, out, _) = run(&["eval", "--data", &sample_arg(), "--period", "all", "--json", "--file", &f.display().to_string()]);
    let rows: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(rows[0]["units"], "compares a price with a volume in shares at 1", "{rows}");
    assert!(rows[1].get("units").is_none() && rows[1]["rank_ic"].is_number(), "{rows}");
}

/// The label's horizon and gap are settings (conventions.md); a horizon of 0 days or a
/// gap past a year are refused by name, not clamped.
#[test]
fn label_horizon_and_gap_are_settings() {
    let data = sample_arg();
    let ic = |flags: &[&str]| {
        let args = [&["eval", "--data", &data, "--period", "all", "--json"], flags, &["-1 * delta(close, 5)"]].concat();
        let (code, out, err) = run(&args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).expect("json")["ic"].as_f64().expect("ic")
    };
    let base = ic(&[]);
    assert_eq!(base, ic(&["--gap", "1", "--horizon", "1"]), "the defaults are gap 1, horizon 1");
    // A 5-day reversal signal scored from the same close (gap 0) sees its own last day.
    let (same_close, two_days) = (ic(&["--gap", "0"]), ic(&["--gap", "2"]));
    assert!(same_close != base && two_days != base && same_close != two_days, "{same_close} {base} {two_days}");
    for (flag, value) in [("--horizon", "0"), ("--gap", "251"), ("--gap", "-1"), ("--cost-bps", "-5"), ("--cost-bps", "nan")] {
        let (code, _, err) = run(&["eval", "--data", &data, flag, value, "close"]);
        assert_eq!(code, 2, "{flag} {value}: {err}");
        assert!(err.contains(flag), "{flag} {value}: {err}");
    }
}

#[test]
fn a_window_longer_than_the_period_s_data_shows_where_it_ends() {
    // The data is cut at the period's end, so the error gives the span the window met.
    let data = sample_arg();
    let (code, _, err) = run(&["eval", "--data", &data, "--period", "2016-01-01:2016-12-31", "ts_mean(close, 600)"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is longer than the data (504 dates, 2015-01-02 to 2016-12-30) at 16"), "{err}");
}

#[test]
fn openai_without_a_key_fails_before_any_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runs = dir.path().join("runs");
    let no_key = |args: &[&str]| {
        let out = bin().args(args).env_remove("OPENAI_API_KEY").env_remove("OPENAI_BASE_URL").env("ALPHALOOP_RUNS", &runs).output().expect("runs");
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let kb = dir.path().join("kb");
    let (code, err) = no_key(&["mine", "--llm", "openai:gpt-4o-mini", "--ideas", "1", "--kb", kb.to_str().expect("utf8")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("OPENAI_API_KEY is not set, and https://api.openai.com/v1 answers nothing without one"), "{err}");
    assert!(!runs.exists() && !kb.exists(), "no run directory or KB made");
    // The same for the KB's embedder named in a config.
    let cfg = dir.path().join("alphaloop.toml");
    std::fs::write(&cfg, "embedder = \"openai:text-embedding-3-small\"\n").expect("write config");
    let (code, err) = no_key(&["--config", cfg.to_str().expect("utf8"), "kb", "--kb", kb.to_str().expect("utf8"), "import", "alpha_kb/seeds/alpha101.toml"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("OPENAI_API_KEY is not set"), "{err}");
    assert!(!kb.exists(), "no KB made");
}

#[test]
fn missing_data_is_explained() {
    let (code, _, err) = run(&["eval", "--data", "/no/such/file.parquet", "close"]);
    assert_eq!(code, 2);
    assert!(err.contains("data file not found: /no/such/file.parquet (given on the command line"), "{err}");
    // The same path from a config file says so.
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("alphaloop.toml");
    std::fs::write(&cfg, "data = \"/no/such/file.parquet\"\n").expect("write config");
    let (code, _, err) = run(&["--config", cfg.to_str().expect("utf8"), "eval", "close"]);
    assert_eq!(code, 2);
    assert!(err.contains("data file not found: /no/such/file.parquet (the config's `data`)"), "{err}");
}

#[test]
fn eval_file_ranks_many_alphas_and_reports_failures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("alphas.toml");
    std::fs::write(
        &f,
        "[[alpha]]\nid = \"rev5\"\nformula = \"-1 * delta(close, 5)\"\n\n[[alpha]]\nid = \"capped\"\nformula = \"rank(cap)\"\n\n[[alpha]]\nid = \"ref\"\nformula = \"rank(alpha:rev5) + alpha:alpha101_101\"\n",
    )
    .expect("write");
    let (code, out, err) = run(&["eval", "--data", &sample_arg(), "--period", "all", "--json", "--file", &f.display().to_string()]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json array");
    let rows = v.as_array().expect("array");
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["id"], "rev5");
    assert!(rows[0]["rank_ic"].is_number());
    assert!(rows[1]["error"].as_str().is_some_and(|e| e.contains("'cap'")));
    assert!(rows[2]["rank_ic"].is_number(), "alpha: references resolve to the file and the seeds");
    assert!(err.contains("1 of 3 alpha(s) could not be evaluated") && err.contains("capped: "), "the JSON run says so on stderr too: {err}");
    let (code, out, _) = run(&["eval", "--data", &sample_arg(), "--period", "all", "--file", &f.display().to_string()]);
    assert_eq!(code, 0);
    assert!(out.contains("rank_ic") && out.contains("1 alpha(s) could not be evaluated") && out.contains("capped:"), "{out}");
}

#[test]
fn dump_writes_the_signal_in_long_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("sig.parquet");
    let (code, _, err) = run(&["eval", "--data", &sample_arg(), "--period", "2018-01-01:2018-12-31", "--dump", &out.display().to_string(), "rank(volume)"]);
    assert_eq!(code, 0, "{err}");
    let df = ParquetReader::new(std::fs::File::open(&out).expect("open")).finish().expect("read dump");
    let names: Vec<String> = df.get_column_names().iter().map(|s| s.to_string()).collect();
    assert_eq!(names, ["date", "symbol", "value"]);
    let d = sample();
    let first = d.date_index_ge("2018-01-01".parse().expect("date"));
    assert_eq!(df.height(), (d.n_dates() - first) * d.n_assets());
    let sig = alphaloop::expr::eval_expr("rank(volume)", d, &alphaloop::expr::NoAlphas).expect("eval");
    let v = df.column("value").expect("value").f64().expect("f64").get(3).expect("finite");
    assert_eq!(v, sig.get(first, 3));
}

#[test]
fn a_dump_or_plot_to_an_unknown_format_fails_first_and_leaves_the_file_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sheet = dir.path().join("results.xlsx");
    std::fs::write(&sheet, b"a spreadsheet").expect("write");
    let s = sheet.display().to_string();
    let (code, out, err) = run(&["eval", "--data", &sample_arg(), "--dump", &s, "rank(volume)"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot write '.xlsx' files; use .parquet or .csv") && out.is_empty(), "{err}");
    assert_eq!(std::fs::read(&sheet).expect("read"), b"a spreadsheet");
    // `predict --out` shares the writer and the check.
    let (code, _, err) = run(&["predict", "--model", "/no/such/model.json", "--out", &s]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot write '.xlsx' files"), "{err}");
    assert_eq!(std::fs::read(&sheet).expect("read"), b"a spreadsheet");
    // A plot is a PNG: another name fails before the evaluation, with a plain message.
    let (code, out, err) = run(&["eval", "--data", &sample_arg(), "--plot", &s, "rank(volume)"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("plots are written as PNG; give a file name ending in .png") && out.is_empty(), "{err}");
    assert_eq!(std::fs::read(&sheet).expect("read"), b"a spreadsheet");
}

#[test]
fn plot_draws_the_book_into_a_png() {
    let dir = tempfile::tempdir().expect("tempdir");
    let png = dir.path().join("book.png");
    let p = png.display().to_string();
    let (code, out, err) = run(&["eval", "--data", &sample_arg(), "--period", "all", "--plot", &p, "rank(delta(close, 5)) * -1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sharpe") && out.trim_end().ends_with(&format!("wrote {p}")), "{out}");
    let bytes = std::fs::read(&png).expect("the plot was written");
    assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 1_000, "{} bytes", bytes.len());
    // With --json, stdout stays one JSON document and the note goes to stderr.
    std::fs::remove_file(&png).expect("remove");
    let (code, out, err) = run(&["eval", "--data", &sample_arg(), "--json", "--plot", &p, "rank(volume)"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<serde_json::Value>(&out).expect("stdout is JSON");
    assert!(err.contains("wrote") && png.exists(), "{err}");
    // A plot that cannot be written is an error naming the file, after the metrics.
    let bad = dir.path().join("no/such/dir/book.png").display().to_string();
    let (code, out, err) = run(&["eval", "--data", &sample_arg(), "--plot", &bad, "rank(volume)"]);
    assert_ne!(code, 0);
    assert!(out.contains("sharpe") && err.contains(&bad), "{out}\n{err}");
    // A plot is of one alpha.
    let (code, _, err) = run(&["eval", "--data", &sample_arg(), "--file", "alpha_kb/seeds/alpha101.toml", "--plot", &p]);
    assert_ne!(code, 0);
    assert!(err.contains("--plot") && err.contains("--file"), "{err}");
}

/// Output into a pipe its reader has closed (`alphaloop eval ... | true`) ends the process
/// quietly with the shell's code for it (141), not a panic; sockets still see SIGPIPE
/// ignored (tests/team.rs kills servers under running miners).
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    use std::process::Stdio;
    let mut child = bin()
        .args(["eval", "--data", &sample_arg(), "--period", ":2016-06-30", "rank(returns)"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take()); // the reader goes away before anything is written
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(err.is_empty(), "{err}");
}

#[test]
fn data_info_json() {
    let (code, out, err) = run(&["data", "info", &sample_arg(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["n_assets"], 60);
    assert_eq!(v["n_dates"], 1006);
    assert_eq!(v["first_date"], "2015-01-02");
    assert_eq!(v["groups"]["n_groups"], 11);
    assert_eq!(v["suspect"], serde_json::json!([]), "the sample's prices pass every check");
    // Values no price series has are loaded (the conventions drop nothing) and reported.
    let dir = tempfile::tempdir().expect("tmp");
    let csv = dir.path().join("odd.csv");
    let rows = "date,symbol,open,high,low,close,adj_close,volume
2015-01-02,AAA,10,11,9,10,10,100
2015-01-02,BBB,20,21,19,20,20,5
2015-01-05,AAA,10,9,11,10,10,100
2015-01-05,BBB,20,21,19,22,22,200
2015-01-06,AAA,10,11,9,10,10,100
2015-01-06,BBB,20,21,0,20,20,7
";
    std::fs::write(&csv, rows).expect("write");
    let (code, out, err) = run(&["data", "info", csv.to_str().expect("utf8"), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let checks: Vec<(&str, u64, &str, &str)> = v["suspect"]
        .as_array()
        .expect("array")
        .iter()
        .map(|c| (c["check"].as_str().unwrap_or(""), c["cells"].as_u64().unwrap_or(0), c["first"]["symbol"].as_str().unwrap_or(""), c["first"]["date"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        checks,
        vec![
            ("a zero price", 1, "BBB", "2015-01-06"),
            ("high below low", 1, "AAA", "2015-01-05"),
            ("open or close outside low..high", 2, "AAA", "2015-01-05")
        ]
    );
    let (_, text, _) = run(&["data", "info", csv.to_str().expect("utf8")]);
    assert!(text.contains("suspect   1 (date, asset) cells with a zero price, first BBB on 2015-01-06"), "{text}");
}

/// Every clone builds into the one target directory, and cargo does not rebuild for a
/// second clone with the same sources, so a clone may run a binary another clone built (a
/// CI clone, deleted afterwards). Seeds, ideas, templates, the default store and run logs
/// must come from the checkout the command runs in, found from the working directory, and
/// from the build's checkout only outside any.
#[test]
fn the_checkout_is_found_from_the_working_directory() {
    let resume_error = |cwd: &std::path::Path| {
        let out = bin().current_dir(cwd).env_remove("ALPHALOOP_RUNS").args(["mine", "--resume", "nosuch"]).output().expect("runs");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let checkout = tempfile::tempdir().expect("tmp");
    for d in ["alpha_kb", "templates", "sub/deeper"] {
        std::fs::create_dir_all(checkout.path().join(d)).expect("mkdir");
    }
    let root = checkout.path().canonicalize().expect("canonical");
    let err = resume_error(&checkout.path().join("sub/deeper"));
    assert!(err.contains(&format!("no run 'nosuch' in {}", root.join("alpha_kb/runs").display())), "{err}");
    // `--resume` without an id, where no run has been made.
    let out = bin().current_dir(checkout.path()).env_remove("ALPHALOOP_RUNS").args(["mine", "--resume"]).output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(&format!("no runs in {} to resume", root.join("alpha_kb/runs").display())), "{err}");

    let elsewhere = tempfile::tempdir().expect("tmp");
    let err = resume_error(elsewhere.path());
    let built = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("alpha_kb/runs");
    assert!(err.contains(&format!("no run 'nosuch' in {}", built.display())), "{err}");
}

#[test]
fn a_bad_config_names_the_file_and_the_setting() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (text, want) in [
        ("retry_minute = 5\n", "unknown field `retry_minute`"),
        ("retry_minutes = -1\n", "retry_minutes = -1; give a number of minutes, 0 or more"),
        ("retry_minutes = \"x\"\n", "invalid type: string \"x\""),
        ("cost_bps = -5.0\n", "cost_bps = -5; give a cost in basis points, 0 or more"),
    ] {
        let cfg = dir.path().join("alphaloop.toml");
        std::fs::write(&cfg, text).expect("write config");
        let (code, _, err) = run(&["--config", cfg.to_str().expect("utf8"), "eval", "rank(close)"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(&format!("{}: invalid config", cfg.display())) && err.contains(want), "{text}: {err}");
    }
}

#[test]
fn eval_file_takes_a_plain_list_of_formulas() {
    let dir = tempfile::tempdir().expect("tempdir");
    let list = dir.path().join("mine.txt");
    std::fs::write(&list, "# my alphas\nrank(delta(close, 5))\n\n-1 * ts_rank(volume, 10)\nrank(clsoe)\n").expect("write list");
    let (code, out, err) = run(&["eval", "--data", &sample_arg(), "--period", "all", "--json", "--file", list.to_str().expect("utf8")]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let ids: std::collections::BTreeSet<&str> = v.as_array().expect("array").iter().filter_map(|a| a["id"].as_str()).collect();
    // Named after the file and the line; the misspelt one is reported, not dropped.
    assert_eq!(ids, ["mine_002", "mine_004", "mine_005"].into_iter().collect());
    let bad = v.as_array().expect("array").iter().find(|a| a["id"] == "mine_005").expect("line 5");
    assert!(bad["error"].as_str().is_some_and(|e| e.contains("unknown field 'clsoe'")), "{bad}");
    let ok = v.as_array().expect("array").iter().find(|a| a["id"] == "mine_002").expect("line 2");
    assert!(ok["rank_ic"].as_f64().is_some_and(f64::is_finite), "{ok}");
}

/// The label is a setting of every command that scores (`[metrics]` or `--horizon`/`--gap`),
/// records keep the label they were scored at, and a command that would rank or combine
/// records of another label refuses, naming both.
#[test]
fn records_keep_their_label_and_commands_refuse_to_mix_labels() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = common::sample_config(dir.path(), &shared("data/sp500_sample.parquet"), None);
    let store = dir.path().join("kb");
    std::fs::write(dir.path().join("h1.txt"), "rank(delta(close, 5))\n").expect("write");
    std::fs::write(dir.path().join("h5.txt"), "rank(ts_std(returns, 20))\n").expect("write");
    common::kb_cli(&cfg, &store, &["import", dir.path().join("h1.txt").to_str().expect("utf-8")]);
    common::kb_cli(&cfg, &store, &["--horizon", "5", "import", dir.path().join("h5.txt").to_str().expect("utf-8")]);
    let shown: serde_json::Value = serde_json::from_str(&common::kb_cli(&cfg, &store, &["--json", "show", "h5_001"])).expect("json");
    assert_eq!((shown["horizon"].as_u64(), shown["gap"].as_u64()), (Some(5), Some(1)), "{shown}");
    let kb = |args: &[&str]| {
        let out = bin().arg("--config").arg(&cfg).arg("kb").arg("--kb").arg(&store).args(args).output().expect("runs");
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, err) = kb(&["top", "--by", "rank_ic", "--split", "valid"]);
    assert!(!ok && err.contains("record h5_001 was scored at horizon 5 (gap 1), and this ranking is at horizon 1 (gap 1)"), "{err}");
    let (ok, err) = kb(&["--horizon", "5", "top", "--by", "rank_ic", "--split", "valid"]);
    assert!(!ok && err.contains("record h1_001 was scored at horizon 1 (gap 1), and this ranking is at horizon 5 (gap 1)"), "{err}");
    // A record mined at horizon 5 is no feature of a horizon-1 model.
    let out = bin().arg("--config").arg(&cfg).args(["train", "--kb"]).arg(&store).args(["--ids", "h5_001", "--no-seed-baseline"]).output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("record h5_001 was scored at horizon 5 (gap 1), and this model is at horizon 1 (gap 1)"), "{err}");
    // The config's [metrics] sets the label eval scores with, as the flags do.
    let text = std::fs::read_to_string(&cfg).expect("config");
    std::fs::write(&cfg, format!("{text}\n[metrics]\nhorizon = 5\n")).expect("config");
    let eval = |extra: &[&str]| {
        let out = bin().arg("--config").arg(&cfg).args(["eval", "--json", "--period", "valid"]).args(extra).arg("rank(delta(close, 5))").output().expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")
    };
    let (from_config, from_flag) = (eval(&[]), eval(&["--horizon", "5"]));
    assert_eq!(from_config, from_flag);
    assert_ne!(from_config, eval(&["--horizon", "1"]));
}

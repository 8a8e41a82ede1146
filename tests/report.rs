//! `alphaloop report` on the sample: a self-contained page whose charts all have data and
//! whose numbers are `eval --json`'s.

mod common;

use std::path::Path;

fn report(dir: &Path, args: &[&str]) -> (serde_json::Value, String) {
    let cfg = common::sample_config(dir, &common::shared("data/sp500_sample.parquet"), Some(&dir.join("kb")));
    let out_file = dir.join("page.html");
    let out = common::bin().arg("--config").arg(&cfg).arg("report").args(args).arg("-o").arg(&out_file).arg("--json").output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    (v, std::fs::read_to_string(&out_file).expect("the page"))
}

/// Each chart's SVG: (its caption, whether it drew data: a line with points or a bar).
fn figures(html: &str) -> Vec<(String, bool)> {
    html.split("<figure>")
        .skip(1)
        .map(|f| {
            let caption = f.split("<figcaption>").nth(1).and_then(|c| c.split("</figcaption>").next()).unwrap_or("").to_string();
            let line = f.split(r#"class="series line" d=""#).skip(1).any(|d| d.starts_with('M') && d.split('"').next().is_some_and(|p| p.contains(" L")));
            let bar = f.split(r#"class="series bars""#).skip(1).any(|b| b.split("</g>").next().is_some_and(|g| g.contains("<rect")));
            let dot = f.contains(r#"class="series dot""#) || f.split(r#"class="series dots""#).nth(1).is_some_and(|g| g.split("</g>").next().is_some_and(|g| g.contains("<circle")));
            let cells = f.contains(r#"class="chart heatmap""#) && f.contains("<title>");
            (caption, line || bar || dot || cells)
        })
        .collect()
}

#[test]
fn an_alpha_report_charts_everything_with_evals_numbers_and_fetches_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let expr = "rank(delta(close, 5)) * -1";
    let (v, html) = report(dir.path(), &[expr, "--period", "valid,test"]);

    // Every chart is there and drew data, with its axis labels and its sentence.
    let figs = figures(&html);
    assert_eq!(figs.len(), 9, "{figs:?}");
    for (caption, drawn) in &figs {
        assert!(*drawn && caption.len() > 40, "an empty chart or a missing sentence: {caption}");
    }
    for label in ["Rank IC", "label horizon (trading days)", "mean label (bp)", "cumulative return", "drawdown", "share of the book", "coverage", "sector"] {
        assert!(html.contains(&format!(r#"class="axis-label""#)) && html.contains(&format!(">{label}<")), "axis label {label}");
    }
    // Self-contained: no script, nothing fetched.
    for bad in ["http://", "https://", "<script", "<link", "@import", "src="] {
        assert!(!html.contains(bad), "the page holds {bad}");
    }

    // The numbers are eval's, period by period.
    let cfg = dir.path().join("alphaloop.toml");
    let out = common::bin().arg("--config").arg(&cfg).args(["eval", "--period", "valid,test", "--json", expr]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let periods = v["periods"].as_array().expect("periods");
    assert_eq!(periods.len(), 2);
    for p in periods {
        let name = p["period"].as_str().expect("name");
        assert_eq!(p["metrics"], e[name], "{name}");
        let ric = p["metrics"]["rank_ic"].as_f64().expect("rank_ic");
        let shown = alphaloop::report::num(ric);
        assert!(html.contains(&format!("<td>{shown}</td>")), "{name}'s Rank IC {shown} is not on the page");
        // The baseline beside the book: the universe bought and held over the same dates.
        let market = p["market"]["sharpe"].as_f64().expect("the market's Sharpe");
        assert!(p["market"]["n_days"].as_u64().is_some_and(|n| n > 200), "{}", p["market"]);
        assert!(html.contains(&format!("<td>{}</td>", alphaloop::report::num(market))), "{name}'s market Sharpe is not on the page");
    }
    // The daily series are the charted period's, one value per scored date, and add up to
    // its metrics.
    let d = &v["daily"];
    let n = d["date"].as_array().expect("dates").len();
    assert!(n > 200, "{n} dates");
    for k in ["ic", "rank_ic", "rank_ic_rolling", "gross_cumulative", "net_cumulative", "market_cumulative", "drawdown", "turnover", "rank_autocorr", "coverage", "quintile_cumulative"] {
        assert_eq!(d[k].as_array().map(Vec::len), Some(n), "{k}");
    }
    let valid = &periods[0]["metrics"];
    let rics: Vec<f64> = d["rank_ic"].as_array().expect("rank ic").iter().filter_map(|x| x.as_f64()).collect();
    let mean = rics.iter().sum::<f64>() / rics.len() as f64;
    assert!((mean - valid["rank_ic"].as_f64().expect("rank_ic")).abs() < 1e-12);
    let dd = d["drawdown"].as_array().expect("dd").iter().filter_map(|x| x.as_f64()).fold(0.0, f64::min);
    assert!((dd - valid["max_drawdown"].as_f64().expect("mdd")).abs() < 1e-12, "{dd}");
    // The decay's first horizon is the label's own.
    let decay = v["decay"].as_array().expect("decay");
    assert_eq!(decay.len(), 20);
    assert_eq!(decay[0]["rank_ic"], valid["rank_ic"]);
    // The sectors of the groups file with enough stocks.
    assert!(!v["sectors"].as_array().expect("sectors").is_empty());
    assert_eq!(v["by_year"].as_array().map(Vec::len), Some(1), "valid is 2017 on the sample");
}

/// A KB record's report adds its record (status, family, idea); a bare id names it.
#[test]
fn a_record_report_shows_the_record() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = common::sample_config(dir.path(), &common::shared("data/sp500_sample.parquet"), Some(&dir.path().join("kb")));
    common::kb_cli(&cfg, &dir.path().join("kb"), &["import", "alpha_kb/seeds/alpha101.toml"]);
    let (v, html) = report(dir.path(), &["alpha101_012"]);
    assert_eq!(v["record"]["id"], "alpha101_012");
    assert!(html.contains("<h1>Alpha alpha101_012</h1>") && html.contains("<h2>Record</h2>"));
    assert_eq!(v["expression"], v["record"]["code"]);
}

/// Bad input is named: an expression's error with its position, an output that is not
/// HTML, a record that is not there.
#[test]
fn bad_input_is_named() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = common::sample_config(dir.path(), &common::shared("data/sp500_sample.parquet"), Some(&dir.path().join("kb")));
    let run = |args: &[&str]| {
        let out = common::bin().arg("--config").arg(&cfg).arg("report").args(args).output().expect("runs");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run(&["rank(clsoe)", "-o", "x.html"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("clsoe") && err.contains('^'), "{err}");
    let (code, err) = run(&["rank(close)", "-o", "x.pdf"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("x.pdf") && err.contains(".html"), "{err}");
    let (code, err) = run(&["alpha:nothing_here", "-o", "x.html"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("nothing_here"), "{err}");
    assert!(!dir.path().join("x.html").exists() && !Path::new("x.html").exists());
}

/// Loads a page in a real browser, headless Chromium (Debian's package; `scripts/test`
/// installs it), and saves a screenshot under the target directory for a person to look
/// at. The page logs nothing to the console (it has no script, so any message is the
/// browser's complaint about it) and the screenshot is not blank.
fn screenshot(page: &Path, name: &str) {
    let browser = ["chromium", "/usr/bin/chromium", "chromium-browser"]
        .into_iter()
        .find(|b| std::process::Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()))
        .expect("Chromium is needed to check reports in a browser: scripts/test installs Debian's `chromium`");
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-screenshots");
    std::fs::create_dir_all(&shots).expect("screenshot folder");
    let png = shots.join(format!("{name}.png"));
    let _ = std::fs::remove_file(&png);
    let out = std::process::Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=900,3000", "--enable-logging=stderr", "--v=0"])
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "the page logged to the console: {console:?}");
    let decoder = png::Decoder::new(std::fs::File::open(&png).expect("the screenshot"));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let px = info.color_type.samples();
    let pixels = &buf[..info.buffer_size()];
    let n = pixels.len() / px;
    let inked = pixels.chunks(px).filter(|p| p[..3].iter().any(|&c| c < 200)).count();
    let share = inked as f64 / n as f64;
    assert!(share > 0.03, "{:.1} % of the screenshot is not white: blank? ({})", share * 100.0, png.display());
    eprintln!("screenshot {}: {}x{}, {:.1} % inked", png.display(), info.width, info.height, share * 100.0);
}

#[test]
fn an_alpha_report_renders_in_a_real_browser() {
    let dir = tempfile::tempdir().expect("tmp");
    let (_, html) = report(dir.path(), &["rank(delta(close, 5)) * -1", "--period", "valid,test"]);
    assert!(html.len() > 10_000);
    screenshot(&dir.path().join("page.html"), "alpha");
}

/// No script, nothing fetched, and every chart drew data.
fn self_contained_and_drawn(html: &str, at_least: usize) {
    for bad in ["http://", "https://", "<script", "<link", "@import", "src="] {
        assert!(!html.contains(bad), "the page holds {bad}");
    }
    let figs = figures(html);
    assert!(figs.len() >= at_least, "{figs:?}");
    for (caption, drawn) in &figs {
        assert!(*drawn && caption.len() > 40, "an empty chart or a missing sentence: {caption}");
    }
}

/// The knowledge base's page (growth, families, best alphas on valid, and the holdout view
/// with the numbers `kb stats` and `kb holdout` print), then the combined model's page
/// (the numbers `train --json` printed, kept in the model file, and the curve
/// `train --curve` wrote); both in a real browser.
#[test]
fn kb_and_model_reports_carry_holdout_and_train_numbers() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let cfg = common::sample_config(d, &common::shared("data/sp500_sample.parquet"), Some(&d.join("kb")));
    common::kb_cli(&cfg, &d.join("kb"), &["import", "alpha_kb/seeds/alpha101.toml"]);
    let cli = |args: &[&str]| -> serde_json::Value {
        let out = common::bin().arg("--config").arg(&cfg).args(args).output().expect("runs");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("json")
    };
    let num = alphaloop::report::num;

    let (v, html) = report(d, &["--kb"]);
    self_contained_and_drawn(&html, 4);
    assert_eq!(v["stats"], cli(&["kb", "--json", "stats"]));
    let hold = cli(&["kb", "--json", "holdout"]);
    let rows = v["holdout"]["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), hold.as_array().expect("holdout").len());
    assert!(rows.len() > 50, "the seeds that compile are accepted: {}", rows.len());
    for (r, h) in rows.iter().zip(hold.as_array().expect("holdout")) {
        assert_eq!((&r["id"], &r["test"], &r["valid_t"], &r["test_t"]), (&h["id"], &h["test"], &h["valid_t"], &h["test_t"]));
        assert_eq!((&v["holdout"]["bar_t"], &v["holdout"]["attempts"]), (&h["bar_t"], &h["attempts"]));
    }
    let first = rows[0]["test"]["rank_ic"].as_f64().expect("test rank ic");
    assert!(html.contains(&format!("<td>{}</td>", num(first))), "the best alpha's test Rank IC {} is not on the page", num(first));
    assert!(html.contains(">multiple-testing bar<") && html.contains("<h1>Knowledge base "));
    assert_eq!(v["best"].as_array().map(Vec::len), Some(20));
    let families: u64 = v["families"].as_array().expect("families").iter().map(|f| f["records"].as_u64().expect("records")).sum();
    assert_eq!(families, v["stats"]["total"].as_u64().expect("total"));
    screenshot(&d.join("page.html"), "kb");

    // The model: five KB alphas walked forward, the seeds through the same model beside it.
    let model = d.join("m.json");
    let mut train = cli(&["train", "--json", "--top", "5", "--max-rounds", "10", "--refit-months", "6", "--out", model.to_str().expect("utf8")]);
    let curve = d.join("curve");
    let points = cli(&["train", "--json", "--max-rounds", "5", "--curve", curve.to_str().expect("utf8")]);
    let (v, html) = report(d, &["--model", model.to_str().expect("utf8"), "--curve", curve.to_str().expect("utf8")]);
    self_contained_and_drawn(&html, 4);
    assert_eq!(v["train"], train, "the page's numbers are train's");
    let ks: Vec<u64> = v["curve"].as_array().expect("curve").iter().map(|c| c["k"].as_u64().expect("k")).collect();
    let want: Vec<u64> = points.as_array().expect("points").iter().map(|c| c["k"].as_u64().expect("k")).collect();
    assert_eq!(ks, want);
    let test_ric = train["test"]["rank_ic"].as_f64().expect("test rank ic");
    assert!(html.contains(&format!("<td>{}</td>", num(test_ric))), "the model's test Rank IC {} is not on the page", num(test_ric));
    for part in ["alpha101 seeds, same model", "model refit every 6 month(s)", "equal-weight ranks", "<h2>Feature importance</h2>", "<h2>The self-improvement curve</h2>"] {
        assert!(html.contains(part), "the page lacks {part}");
    }
    screenshot(&d.join("page.html"), "model");

    // A model file without the report (saved before reports were kept) is named, not drawn.
    train = serde_json::from_str(&std::fs::read_to_string(&model).expect("model")).expect("json");
    train.as_object_mut().expect("object").remove("report");
    std::fs::write(&model, train.to_string()).expect("write");
    let out = common::bin().arg("--config").arg(&cfg).args(["report", "--model"]).arg(&model).args(["-o"]).arg(d.join("old.html")).output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("m.json") && err.contains("train it again"), "{err}");
    assert!(!d.join("old.html").exists());
}

/// A mining run's page: the summary `runs show --json` prints, charted (the combination's
/// growth, time, accepted alphas, their correlations, the reasons for the rest).
#[test]
fn a_run_report_shows_the_runs_summary() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = common::sample_config(dir.path(), &common::shared("data/sp500_sample.parquet"), Some(&dir.path().join("kb")));
    let base = std::fs::read_to_string(&cfg).expect("config");
    // Bars lowered so that the sample's genetic candidates get in.
    std::fs::write(&cfg, format!("{base}\n[mine]\nmin_gain_t = -100\nmin_train_rank_ic = -1\nmin_valid_rank_ic = -1\n")).expect("config");
    let runs = dir.path().join("runs");
    let cli = || {
        let mut c = common::bin();
        c.env("ALPHALOOP_RUNS", &runs).arg("--config").arg(&cfg);
        c
    };
    let out = cli().args(["mine", "--writer", "gp", "--ideas", "6", "--seed", "7", "--run-id", "g", "--json"]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = dir.path().join("run.html");
    let out = cli().args(["report", "--run", "g", "--json", "-o"]).arg(&page).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let out = cli().args(["runs", "show", "g", "--json"]).output().expect("runs");
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["summary"], shown, "the page's summary is runs show's");
    let html = std::fs::read_to_string(&page).expect("page");
    let figs = figures(&html);
    assert!(figs.len() >= 5, "{figs:?}");
    for (caption, drawn) in &figs {
        assert!(*drawn, "an empty chart: {caption}");
    }
    let accepted = shown["accepted"].as_u64().expect("accepted") as usize;
    let ids = v["correlations"]["ids"].as_array().expect("ids");
    assert_eq!(ids.len(), if accepted >= 2 { accepted } else { 0 });
    for (i, row) in v["correlations"]["matrix"].as_array().expect("matrix").iter().enumerate() {
        assert!((row[i].as_f64().expect("diagonal") - 1.0).abs() < 1e-6, "an alpha correlates 1 with itself");
    }
    let turned_away: u64 = v["rejections"].as_array().expect("rejections").iter().map(|r| r[1].as_u64().expect("count")).sum();
    assert_eq!(turned_away as usize, 6 - accepted);
    assert!(html.contains("<h1>Mining run g</h1>") && html.contains("Bonferroni"));
    for bad in ["http://", "https://", "<script"] {
        assert!(!html.contains(bad), "the page holds {bad}");
    }
}

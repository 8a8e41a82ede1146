//! Loading real data, adjustment, and every kind of bad input getting a clear error.

mod common;

use alphaloop::backtest::{prepare, MetricsConfig};
use alphaloop::data::{load, DataError, LoadOptions, Period, Splits};
use common::{sample, shared};
use polars::prelude::*;
use std::path::Path;

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write fixture");
    p
}

const HEADER: &str = "date,symbol,open,high,low,close,adj_close,volume\n";

#[test]
fn sample_loads_with_adjustment_as_specified() {
    let d = sample();
    assert_eq!((d.n_dates(), d.n_assets()), (1006, 60));
    assert_eq!(d.dates[0].to_string(), "2015-01-02");
    assert!(d.fields.contains_key("dividend") && d.fields.contains_key("split"), "extra columns become fields");
    // Adjusted close equals adj_close; volume is divided by the factor.
    let raw = ParquetReader::new(std::fs::File::open(shared("data/sp500_sample.parquet")).expect("open")).finish().expect("read");
    let sym = raw.column("symbol").expect("symbol").str().expect("str").get(0).expect("value").to_string();
    let a = d.symbols.iter().position(|s| *s == sym).expect("symbol in universe");
    let get = |c: &str| raw.column(c).expect("col").f64().expect("f64").get(0).expect("value");
    let f = get("adj_close") / get("close");
    assert!((d.fields["close"].get(0, a) - get("close") * f).abs() < 1e-12);
    assert!((d.fields["open"].get(0, a) - get("open") * f).abs() < 1e-12);
    assert!((d.fields["volume"].get(0, a) - get("volume") / f).abs() < 1e-6);
    assert_eq!(d.groups.as_ref().map(|g| g.ids.iter().filter(|x| x.is_none()).count()), Some(0));
}

#[test]
fn unsorted_csv_gives_the_same_panels_as_sorted_parquet() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut df = ParquetReader::new(std::fs::File::open(shared("data/sp500_sample.parquet")).expect("open")).finish().expect("read");
    let mut rev = df.reverse();
    let path = dir.path().join("reversed.csv");
    CsvWriter::new(std::fs::File::create(&path).expect("create")).finish(&mut rev).expect("write csv");
    let _ = &mut df;
    let opts = LoadOptions { groups: Some(shared("data/sp500_constituents.csv")) };
    let csv = load(&path, &opts).expect("csv loads");
    let pq = sample();
    assert_eq!(csv.dates, pq.dates);
    assert_eq!(csv.symbols, pq.symbols);
    for (k, p) in &pq.fields {
        let q = &csv.fields[k];
        assert!(p.to_asset_major().iter().zip(q.to_asset_major().iter()).all(|(a, b)| (a - b).abs() <= 1e-9 * a.abs().max(1.0) || (a.is_nan() && b.is_nan())), "field {k}");
    }
}

/// Spreadsheets in comma-decimal locales save CSV with semicolons; tab-separated exports
/// are common too. The header line tells which; each loads as the comma CSV does.
#[test]
fn semicolon_and_tab_separated_files_load_like_commas() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rows = ["date,symbol,open,high,low,close,adj_close,volume", "2015-01-02,AAA,10,11,9,10.5,10.5,100", "2015-01-02,BBB,20,21,19,20,20,200", "2015-01-05,AAA,10,11,9,10,10,100", "2015-01-05,BBB,20,21,19,20.25,20.25,300"];
    let comma = load(&write(dir.path(), "c.csv", &rows.join("\n")), &LoadOptions::default()).expect("comma");
    for (name, sep) in [("s.csv", ";"), ("t.tsv", "\t")] {
        let text = rows.iter().map(|r| r.replace(',', sep)).collect::<Vec<_>>().join("\n");
        let d = load(&write(dir.path(), name, &text), &LoadOptions::default()).expect(name);
        assert_eq!((&d.dates, &d.symbols), (&comma.dates, &comma.symbols), "{name}");
        assert!(comma.fields.iter().all(|(k, p)| d.fields[k].as_ref() == p.as_ref()), "{name}");
    }
}

#[test]
fn datetime_date_columns_load_as_days() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut df = ParquetReader::new(std::fs::File::open(shared("data/sp500_sample.parquet")).expect("open")).finish().expect("read");
    let ts = df.column("date").expect("date").cast(&DataType::Datetime(TimeUnit::Milliseconds, None)).expect("cast");
    df.with_column(ts).expect("replace");
    let path = dir.path().join("ts.parquet");
    ParquetWriter::new(std::fs::File::create(&path).expect("create")).finish(&mut df).expect("write");
    let d = load(&path, &LoadOptions::default()).expect("datetime dates load");
    assert_eq!(d.dates, sample().dates);
}

#[test]
fn bad_files_get_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let o = LoadOptions::default();
    let msg = |p: &Path| load(p, &o).expect_err("must fail").to_string();

    let missing = d.join("nope.parquet");
    assert_eq!(msg(&missing), format!("data file not found: {}", missing.display()));

    let p = write(d, "nocol.csv", "date,symbol,open,high,low,close,adj_close\n2015-01-02,AAA,1,1,1,1,1\n");
    let m = msg(&p);
    assert!(m.contains("nocol.csv") && m.contains("missing column 'volume'") && m.contains("found: date, symbol"), "{m}");
    // The other names a missing column was looked for under are listed.
    let p = write(d, "nosym.csv", "date,name,open,high,low,close,volume\n2015-01-02,AAA,1,1,1,1,10\n");
    let m = msg(&p);
    assert!(m.ends_with("missing column 'symbol' (found: date, name, open, high, low, close, volume; nor ticker, code, instrument, asset, stock, sym)"), "{m}");

    let p = write(d, "dup.csv", &format!("{HEADER}2015-01-02,AAA,1,1,1,1,1,10\n2015-01-02,BBB,1,1,1,1,1,10\n2015-01-02,AAA,2,2,2,2,2,20\n"));
    assert!(msg(&p).ends_with("dup.csv: duplicate row for date 2015-01-02 and symbol 'AAA' (rows 1 and 3)"), "{}", msg(&p));

    let p = write(d, "text.csv", &format!("{HEADER}2015-01-02,AAA,1,1,1,1,1,10\n2015-01-05,AAA,1,1,1,abc,1,10\n"));
    let m = msg(&p);
    assert!(m.contains("text.csv: column 'close', row 2: 'abc' is not a number"), "{m}");

    let p = write(d, "baddate.csv", &format!("{HEADER}2015-01-02,AAA,1,1,1,1,1,10\n2015-13-05,AAA,1,1,1,1,1,10\n"));
    let m = msg(&p);
    assert!(m.contains("column 'date', row 2") && m.contains("2015-13-05"), "{m}");

    // Rows with more or fewer fields than the header (polars padded a short one with
    // missing values), a blank line before the last row and a quote left open are named
    // by row and line.
    let p = write(d, "long.csv", &format!("{HEADER}2015-01-02,AAA,1,1,1,1,1,10\n2015-01-05,AAA,1,1,1,1,1,10,7\n"));
    assert!(msg(&p).ends_with("long.csv: cannot read: row 2 (line 3) has 9 fields, the header has 8"), "{}", msg(&p));
    let p = write(d, "short.csv", &format!("{HEADER}2015-01-02,AAA,1,1,1,1,1,10\n2015-01-05,AAA,1,1,1,1,1\n2015-01-06,AAA,1,1,1,1,1,10\n"));
    assert!(msg(&p).ends_with("short.csv: cannot read: row 2 (line 3) has 7 fields, the header has 8"), "{}", msg(&p));
    let p = write(d, "gap.csv", &format!("{HEADER}2015-01-02,AAA,1,1,1,1,1,10\n\n2015-01-05,AAA,1,1,1,1,1,10\n"));
    assert!(msg(&p).ends_with("gap.csv: cannot read: line 3 is blank; blank lines may only end the file"), "{}", msg(&p));
    let p = write(d, "quote.csv", &format!("{HEADER}2015-01-02,\"AAA,1,1,1,1,1,10\n2015-01-05,AAA,1,1,1,1,1,10\n"));
    assert!(msg(&p).ends_with("quote.csv: cannot read: the quote opened on line 2 is never closed"), "{}", msg(&p));
    // Not faults: quoted fields (one holding a separator), CRLF line ends, and blank lines
    // or bare separators (as spreadsheets write them) at the end; rows long enough to
    // span the scan's 64-byte blocks.
    let row = |date: &str, sym: &str| format!("{date},{sym},100.000000001,100.000000002,100.000000003,100.000000004,100.000000005,1000000000\r\n");
    let text = format!("{}\r\n{}{}{},,,,,,,\r\n\r\n", HEADER.trim_end(), row("2015-01-02", "\"A,B\""), row("2015-01-02", "CCC"), row("2015-01-05", "CCC"));
    let ok = load(&write(d, "fine.csv", &text), &o).expect("quoted fields, CRLF and trailing blank lines load");
    assert_eq!((ok.n_dates(), ok.symbols.clone()), (2, vec!["A,B".to_string(), "CCC".to_string()]));
    assert!((ok.fields["volume"].get(1, 1) - 1e9).abs() < 0.1, "the last row is read whole");

    let p = write(d, "empty.csv", HEADER);
    assert!(msg(&p).contains("has no rows") || msg(&p).contains("cannot read"), "{}", msg(&p));

    let p = write(d, "prices.txt", "x");
    assert!(msg(&p).contains("unsupported file type"), "{}", msg(&p));

    let p = write(d, "garbage.parquet", "this is not parquet");
    assert!(msg(&p).contains("garbage.parquet: cannot read"), "{}", msg(&p));
}

#[test]
fn a_one_stock_universe_loads_but_cannot_be_scored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rows = String::from(HEADER);
    for (i, day) in ["2015-01-02", "2015-01-05", "2015-01-06", "2015-01-07"].iter().enumerate() {
        rows.push_str(&format!("{day},AAA,{0},{0},{0},{0},{0},100\n", 10 + i));
    }
    let p = write(dir.path(), "one.csv", &rows);
    let data = load(&p, &LoadOptions::default()).expect("loads");
    assert_eq!(data.n_assets(), 1);
    assert!(!data.fields.contains_key("dividend"));
    let e = prepare(&data, &Period::All, &Splits::default(), MetricsConfig::default()).err().expect("cannot score");
    assert!(e.to_string().contains("the universe has 1 stock(s); cross-sectional metrics need at least 20"), "{e}");
}

#[test]
fn periods_outside_the_data_are_explained() {
    let e = Period::Train.indices(&Splits::default(), sample()).expect_err("sample starts in 2015");
    let m = e.to_string();
    assert!(matches!(e, DataError::Period(_)));
    assert!(m.contains("period 'train' has no dates") && m.contains("2015-01-02..2018-12-31"), "{m}");
}

#[test]
fn yahoo_style_column_names_load_as_the_standard_ones() {
    // Date, Ticker, Open, High, Low, Close, Adj Close, Volume: a Yahoo Finance export.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut df = ParquetReader::new(std::fs::File::open(shared("data/sp500_sample.parquet")).expect("open")).finish().expect("read");
    for (from, to) in [("date", "Date"), ("symbol", "Ticker"), ("open", "Open"), ("high", "High"), ("low", "Low"), ("close", "Close"), ("adj_close", "Adj Close"), ("volume", "Volume"), ("dividend", "Cash Dividend")] {
        df.rename(from, to.into()).expect("rename");
    }
    let path = dir.path().join("yahoo.csv");
    CsvWriter::new(std::fs::File::create(&path).expect("create")).finish(&mut df).expect("write csv");
    let opts = LoadOptions { groups: Some(shared("data/sp500_constituents.csv")) };
    let y = load(&path, &opts).expect("yahoo-style csv loads");
    let pq = sample();
    assert_eq!((&y.dates, &y.symbols), (&pq.dates, &pq.symbols));
    // Adjusted by 'Adj Close' exactly as by adj_close; the extra column under a name an
    // expression can use.
    for k in ["open", "high", "low", "close", "volume"] {
        let (p, q) = (&pq.fields[k], &y.fields[k]);
        assert!(p.to_asset_major().iter().zip(q.to_asset_major().iter()).all(|(a, b)| (a - b).abs() <= 1e-9 * a.abs().max(1.0) || (a.is_nan() && b.is_nan())), "field {k}");
    }
    assert_eq!(y.fields["cash_dividend"].to_asset_major(), pq.fields["dividend"].to_asset_major());
    assert!(!y.fields.contains_key("adj close") && !y.fields.contains_key("adj_close") && !y.fields.contains_key("ticker"));
    // What `data info` reports (case alone is not worth a line).
    let read_as: Vec<(&str, &str)> = y.read_as.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(read_as, [("Ticker", "symbol"), ("Adj Close", "adj_close")]);
    assert!(pq.read_as.is_empty());

    // A column with the standard name wins over an alias: here `symbol` is the real one
    // and `ticker` a numeric extra.
    let p = write(dir.path(), "both.csv", "date,symbol,ticker,open,high,low,close,volume\n2015-01-02,AAA,7,1,1,1,1,10\n2015-01-02,BBB,8,1,1,1,1,10\n");
    let d = load(&p, &LoadOptions::default()).expect("loads");
    assert_eq!(d.symbols, ["AAA", "BBB"]);
    assert_eq!(d.fields["ticker"].to_asset_major(), &[7.0, 8.0]);
}

#[test]
fn a_true_vwap_and_a_market_cap_column_are_used() {
    // The shipped data has neither, so `vwap` is the typical price and `cap` an error; a
    // file that has them gets them, vwap adjusted like the other prices.
    let dir = tempfile::tempdir().expect("tempdir");
    let df = ParquetReader::new(std::fs::File::open(shared("data/sp500_sample.parquet")).expect("open")).finish().expect("read");
    let raw_vwap = (df.column("high").expect("high").as_materialized_series() * 0.25 + df.column("low").expect("low").as_materialized_series() * 0.75).expect("vwap");
    let cap = df.column("close").expect("close").as_materialized_series() * 1e6;
    let mut df = df.hstack(&[raw_vwap.with_name("VWAP".into()).into(), cap.with_name("Market Cap".into()).into()]).expect("hstack");
    let path = dir.path().join("with_vwap.csv");
    CsvWriter::new(std::fs::File::create(&path).expect("create")).finish(&mut df).expect("write csv");
    let d = load(&path, &LoadOptions { groups: Some(shared("data/sp500_constituents.csv")) }).expect("loads");
    assert!(!d.vwap_is_typical() && d.derived_fields().all(|(n, _)| *n != "vwap"));
    assert!(!d.fields.contains_key("market_cap"));
    let none = &alphaloop::expr::NoAlphas;
    let vwap = alphaloop::expr::eval_expr("vwap", &d, none).expect("vwap");
    let want = alphaloop::expr::eval_expr("high * 0.25 + low * 0.75", &d, none).expect("adjusted prices");
    assert!(vwap.to_asset_major().iter().zip(want.to_asset_major().iter()).all(|(a, b)| (a - b).abs() <= 1e-9 * a.abs() || (a.is_nan() && b.is_nan())));
    // cap is in dollars: not adjusted.
    let cap = alphaloop::expr::eval_expr("cap", &d, none).expect("cap");
    // The file's first row is the first date of its symbol.
    let close_raw = df.column("close").expect("close").f64().expect("f64").get(0).expect("first close");
    let first_symbol = df.column("symbol").expect("symbol").str().expect("str").get(0).expect("first symbol");
    let a = d.symbols.iter().position(|s| s == first_symbol).expect("symbol");
    assert!((cap.get(0, a) - close_raw * 1e6).abs() < 1e-3, "{}", cap.get(0, a));
    // Alpha 56 evaluates here; on the shipped data it names the missing field.
    let a56 = "(0 - (1 * (rank((sum(returns, 10) / sum(sum(returns, 2), 3))) * rank((returns * cap)))))";
    assert!(alphaloop::expr::eval_expr(a56, &d, none).expect("alpha 56").to_asset_major().iter().any(|v| v.is_finite()));
    let e = alphaloop::expr::eval_expr(a56, sample(), none).expect_err("no cap in the sample").to_string();
    assert!(e.contains("field 'cap'"), "{e}");
    assert!(sample().vwap_is_typical());
}

#[test]
fn data_of_another_era_gets_splits_of_its_own_dates() {
    // The sample moved eight years on (2023-2026): every default split would be empty.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = common::moved_sample(dir.path(), 2922);
    let d = load(&path, &LoadOptions::default()).expect("loads");
    let s = Splits::resolve(None, &d);
    // 1006 dates: 603 train, 201 valid, 202 test, in order and covering every date.
    let count = |(a, b): (alphaloop::data::Date, alphaloop::data::Date)| d.dates.iter().filter(|x| **x >= a && **x <= b).count();
    assert_eq!((count(s.train), count(s.valid), count(s.test)), (603, 201, 202));
    assert!(s.train.1 < s.valid.0 && s.valid.1 < s.test.0);
    assert_eq!((s.train.0, s.test.1), (d.dates[0], d.dates[1005]));
    // Configured splits are kept as they are, and data that overlaps the defaults keeps them.
    assert_eq!(Splits::resolve(Some(&common::sample_splits()), &d), common::sample_splits());
    assert_eq!(Splits::resolve(None, sample()), Splits::default());

    // Through the CLI: the header names the period's dates; no survivorship note for data
    // that is not the shipped S&P 500 set.
    let out = common::bin().args(["eval", "--data"]).arg(&path).arg("rank(returns)").output().expect("runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let want = format!("period valid ({}..{})", s.valid.0, s.valid.1);
    assert!(stdout.contains(&want) && !stdout.contains("survivorship"), "{stdout}");
    assert!(stderr.contains("lies outside the default splits") && stderr.contains("60/20/20"), "{stderr}");
}

#[test]
fn spreadsheet_dates_load_when_the_column_shows_its_order() {
    // The sample with its dates as a US export writes them (M/D/YYYY): days above 12 show
    // the order, so it loads to the same calendar.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut df = ParquetReader::new(std::fs::File::open(shared("data/sp500_sample.parquet")).expect("open")).finish().expect("read");
    let days = df.column("date").expect("date").cast(&DataType::Int32).expect("days");
    let us: Vec<String> = days
        .i32()
        .expect("i32")
        .into_no_null_iter()
        .map(|d| {
            let iso = alphaloop::data::Date(d).to_string();
            format!("{}/{}/{}", &iso[5..7], &iso[8..10], &iso[0..4])
        })
        .collect();
    df.with_column(Column::new("date".into(), us)).expect("replace");
    let path = dir.path().join("us.csv");
    CsvWriter::new(std::fs::File::create(&path).expect("create")).finish(&mut df).expect("write csv");
    let d = load(&path, &LoadOptions::default()).expect("US dates load");
    assert_eq!(d.dates, sample().dates);

    // Only days 1-12 (January 2015 up to the 12th): no way to tell, so an error naming it.
    let p = write(dir.path(), "ambiguous.csv", &format!("{HEADER}01/02/2015,AAA,1,1,1,1,1,10\n01/05/2015,AAA,1,1,1,1,1,10\n"));
    let m = load(&p, &LoadOptions::default()).expect_err("ambiguous").to_string();
    assert!(m.contains("ambiguous.csv: column 'date'") && m.contains("cannot be told apart"), "{m}");
}

#[test]
fn empty_cells_load_as_missing_values_and_the_rest_as_given() {
    // Rows out of order, symbols interleaved, and empty cells (nulls in the read frame):
    // the loader's fast paths (a slice copy for a column without nulls, a symbol looked up
    // only where it changes, a table of days) must place every value where it belongs.
    let dir = tempfile::tempdir().expect("tempdir");
    let rows = format!(
        "{HEADER}2015-01-05,BBB,20,21,19,,20,200\n2015-01-02,AAA,10,11,9,10,5,100\n2015-01-05,AAA,12,13,11,12,6,\n2015-01-02,BBB,22,23,21,22,22,300\n"
    );
    let p = write(dir.path(), "gaps.csv", &rows);
    let data = load(&p, &LoadOptions::default()).expect("loads");
    assert_eq!(data.symbols, ["AAA", "BBB"]);
    assert_eq!(data.dates.len(), 2);
    let (close, volume, open) = (&data.fields["close"], &data.fields["volume"], &data.fields["open"]);
    // AAA: adjustment factor adj_close / close = 0.5 on both days.
    assert_eq!(close.series(0), [5.0, 6.0]);
    assert_eq!(open.series(0), [5.0, 6.0]);
    assert_eq!(volume.series(0)[0], 200.0);
    assert!(volume.series(0)[1].is_nan(), "an empty volume is missing");
    // BBB on 2015-01-05 has no close: its adjustment factor and so every price are missing.
    assert_eq!(close.series(1)[0], 22.0);
    assert!(close.series(1)[1].is_nan() && open.series(1)[1].is_nan());
    assert_eq!(open.series(1)[0], 22.0);
}

/// A group file that contradicts itself, or that lists none of the data's symbols, is an
/// error naming it; a symbol listed twice in the same group is not.
#[test]
fn group_files_that_cannot_be_right_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let data = write(d, "prices.csv", &format!("{HEADER}2015-01-02,AAA,1,1,1,1,1,10\n2015-01-02,BBB,1,1,1,1,1,10\n"));
    let with = |name: &str, text: &str| load(&data, &LoadOptions { groups: Some(write(d, name, text)) });
    let e = with("twice.csv", "symbol,group\nAAA,Energy\nBBB,Energy\nAAA,Utilities\n").expect_err("AAA in two groups");
    assert!(e.to_string().ends_with("twice.csv: column 'symbol', row 3: 'AAA' is in group 'Utilities' here and in 'Energy' on row 1"), "{e}");
    let e = with("other.csv", "ticker,sector\nXOM,Energy\n").expect_err("no symbol listed");
    assert!(e.to_string().ends_with("other.csv: none of the data's 2 symbols (AAA, BBB) is listed; expected `symbol,group` rows"), "{e}");
    let ok = with("repeat.csv", "symbol,group\nAAA,Energy\nAAA,Energy\nBBB,Utilities\n").expect("a repeated row loads");
    let g = ok.groups.expect("groups");
    assert_eq!((g.ids.clone(), g.names.clone()), (vec![Some(0), Some(1)], vec!["Energy".to_string(), "Utilities".to_string()]));
}

/// Files are user input: hundreds of copies of a real CSV with cells replaced by junk
/// (text, quotes, line breaks, numbers out of range), fields dropped or added, rows
/// overwritten by others, some with CRLF ends, each loaded without a panic, and each
/// refusal naming the file.
#[test]
fn damaged_csv_files_never_panic_and_every_refusal_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut df = ParquetReader::new(std::fs::File::open(shared("data/sp500_sample.parquet")).expect("open")).finish().expect("read").head(Some(120));
    let mut base = Vec::new();
    CsvWriter::new(&mut base).finish(&mut df).expect("write csv");
    let base = String::from_utf8(base).expect("utf-8");
    let junk = ["", ",", "\"a,b\"", "\"x\ny\"", "\"", "nan", "inf", "1e400", "-1", "abc", "2015-13-45", "é", "\n\n", "null", "9999999999999999999999", "2015/01/02"];
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut draw = |n: usize| (alphaloop::xorshift(&mut s) % n as u64) as usize;
    let (mut loaded, mut refused) = (0, 0);
    for i in 0..400 {
        let mut lines: Vec<String> = base.lines().map(String::from).collect();
        for _ in 0..1 + draw(2) {
            let li = draw(lines.len());
            let mut cells: Vec<String> = lines[li].split(',').map(String::from).collect();
            match draw(9) {
                0..=4 => {
                    let (c, j) = (draw(cells.len()), draw(junk.len()));
                    cells[c] = junk[j].into();
                }
                5 => drop(cells.pop()),
                6 => cells.push("7".into()),
                7 => {
                    let other = draw(lines.len());
                    cells = lines[other].split(',').map(String::from).collect();
                }
                _ => {
                    let c = draw(cells.len());
                    cells.remove(c);
                }
            }
            lines[li] = cells.join(",");
        }
        let end = if i % 5 == 0 { "\r\n" } else { "\n" };
        let p = write(dir.path(), &format!("damaged{i}.csv"), &lines.join(end));
        match std::panic::catch_unwind(|| load(&p, &LoadOptions::default()).map(|_| ())) {
            Err(_) => panic!("panicked on {}", p.display()),
            Ok(Ok(())) => loaded += 1,
            Ok(Err(e)) => {
                assert!(e.to_string().starts_with(&p.display().to_string()), "{e}");
                refused += 1;
            }
        }
    }
    // Both outcomes were exercised.
    assert!(loaded > 20 && refused > 200, "{loaded} loaded, {refused} refused");
}

/// A fuzzer's find: a footer whose `Statistics.is_max_value_exact` is not sent as a
/// boolean, on which polars-parquet's decoder panics. The footer check refuses it before
/// polars reads it, naming the file and the field.
#[test]
fn a_parquet_footer_that_panics_the_reader_is_refused_before_it_is_read() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions/parquet/bool-field-sent-as-another-type.parquet");
    let e = load(&p, &LoadOptions::default()).expect_err("refused");
    assert!(matches!(e, DataError::Read { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("bool-field-sent-as-another-type.parquet: cannot read: not a readable Parquet file: in its footer, field 7 of Statistics is sent as i32 where the format has bool"), "{msg}");
}

/// Fuzzers' finds, refused by the page check before polars reads them: a data page header
/// whose value count is negative, which polars takes as a `usize` and reserves 2.3e18 bytes
/// for (the process aborted), one whose count is above its chunk's (polars' decoder sliced
/// the page's validity bitmap past its end, a panic), and a column chunk declaring a
/// negative number of values (polars returned a column shorter than the frame, and the
/// file loaded as a panel of no symbols). The CLI exits 2 naming the file, the column and
/// the page.
#[test]
fn parquet_chunks_and_pages_that_would_fail_the_reader_are_refused_before_it_reads_them() {
    let cases = [
        ("page-value-count-reserved-unchecked.parquet", "in row group 0, column `close`, the page header at byte 4523: a value count of -123"),
        ("page-validity-sliced-past-its-end.parquet", "in row group 0, column `low`, the page at byte 3490 holds 4152 values, its chunk 120"),
        ("symbol-chunk-declaring-negative-values.parquet", "in row group 0, column `symbol`, the chunk declares -47 values for its row group's 20 rows"),
    ];
    for (file, want) in cases {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions/parquet").join(file);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_alphaloop")).args(["data", "info"]).arg(&p).output().expect("run alphaloop");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(&format!("{file}: cannot read: not a readable Parquet file: {want}")), "{err}");
    }
}

/// A page that passes the page check and still trips an `assert!` inside polars: 120 rows
/// written by polars, then the `low` column's page and chunk both made to declare 4,152
/// values (so the counts agree) where the page holds 120; polars' decoder slices its
/// validity bitmap past its end. The CLI refuses the file by name with exit code 2, and
/// prints no panic or backtrace.
#[test]
fn a_parquet_page_that_panics_the_decoder_is_refused_quietly() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/broken/page_values_past_its_data.parquet");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_alphaloop"))
        .args(["data", "info"])
        .arg(&p)
        .env("POLARS_MAX_THREADS", "1")
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run alphaloop");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("page_values_past_its_data.parquet: cannot read: the reader failed on it: not a well-formed file"), "{err}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");
}

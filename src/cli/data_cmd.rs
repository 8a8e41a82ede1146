//! `alphaloop data ...`

use super::{load_data, Config, DataArgs};
use anyhow::Result;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum DataCmd {
    /// Assets, dates, fields and missing share of a data file.
    Info {
        /// The file (default: the shipped data).
        file: Option<PathBuf>,
        /// `symbol,group` CSV for indneutralize (default: sp500_constituents.csv beside the data).
        #[arg(long)]
        groups: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: DataCmd, cfg: &Config) -> Result<i32> {
    match cmd {
        DataCmd::Info { file, groups, json } => {
            let data = load_data(&DataArgs { data: file, groups }, cfg, json)?;
            let fields: Vec<serde_json::Value> = data
                .fields
                .iter()
                .map(|(k, p)| serde_json::json!({"name": k, "missing_share": p.missing_share()}))
                .collect();
            let first = data.dates.first().map(|d| d.to_string()).unwrap_or_default();
            let last = data.dates.last().map(|d| d.to_string()).unwrap_or_default();
            let missing = data.fields.get("close").map(|p| p.missing_share()).unwrap_or(f64::NAN);
            let groups = data.groups.as_ref().map(|g| {
                serde_json::json!({"source": g.source, "n_groups": g.names.len(),
                    "unassigned": g.ids.iter().filter(|x| x.is_none()).count()})
            });
            let suspect = suspect_cells(&data);
            if json {
                let v = serde_json::json!({
                    "file": data.source, "n_assets": data.n_assets(), "n_dates": data.n_dates(),
                    "first_date": first, "last_date": last, "missing_share": missing,
                    "fields": fields, "derived_fields": data.derived_fields().map(|(n, _)| *n).collect::<Vec<_>>(),
                    "groups": groups, "fingerprint": data.fingerprint(),
                    "suspect": suspect.iter().map(|c| serde_json::json!({"check": c.what, "cells": c.cells, "first": {"symbol": c.first.0, "date": c.first.1}})).collect::<Vec<_>>(),
                    "read_as": data.read_as.iter().map(|(f, t)| serde_json::json!({"column": f, "as": t})).collect::<Vec<_>>(),
                });
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("file      {}", data.source.display());
                println!("assets    {}", data.n_assets());
                println!("dates     {} ({first} .. {last})", data.n_dates());
                println!("missing   {:.2}% of (date, asset) cells have no close", missing * 100.0);
                if !data.read_as.is_empty() {
                    println!("columns   read {}", crate::data::describe_read_as(&data.read_as));
                }
                if suspect.is_empty() {
                    println!("checks    no zero price, high below low, or open or close outside low..high");
                } else {
                    for c in &suspect {
                        println!("suspect   {} (date, asset) cells with {}, first {} on {}", c.cells, c.what, c.first.0, c.first.1);
                    }
                    println!("          (checked after adjustment: a non-positive close or adj_close turns the row's other values too)");
                }
                println!("fields    (missing share)");
                for (k, p) in &data.fields {
                    println!("  {k:<10} {:>6.2}%", p.missing_share() * 100.0);
                }
                println!("derived   {}", data.derived_fields().map(|(n, d)| format!("{n} = {d}")).collect::<Vec<_>>().join("\n          "));
                match &data.groups {
                    Some(g) => println!("groups    {} groups from {} ({} assets unassigned)", g.names.len(), g.source.display(), g.ids.iter().filter(|x| x.is_none()).count()),
                    None => println!("groups    none (indneutralize unavailable; pass --groups FILE)"),
                }
            }
            Ok(0)
        }
    }
}

/// Cells that no real price series has, found by one of the checks below.
struct Suspect {
    what: &'static str,
    cells: usize,
    /// The earliest such cell: symbol and date.
    first: (String, String),
}

/// Counts the (date, asset) cells that fail each sanity check of a price series. They are
/// loaded as they are (conventions.md does not drop rows), so `data info` is where a user
/// learns of them; negative prices and volumes are refused when the file is read.
/// Adjustment multiplies a row's prices by one positive factor, which keeps their order, so
/// the adjusted panels answer for the raw file (a zero `adj_close` shows up as a zero
/// price).
fn suspect_cells(data: &crate::data::MarketData) -> Vec<Suspect> {
    let f = |name: &str| data.fields.get(name).map(|p| p.as_ref());
    let (open, high, low, close) = (f("open"), f("high"), f("low"), f("close"));
    type Check<'a> = (&'static str, Box<dyn Fn(usize, usize) -> bool + 'a>);
    let mut checks: Vec<Check> = Vec::new();
    let prices: Vec<_> = [open, high, low, close].into_iter().flatten().collect();
    checks.push(("a zero price", Box::new(move |t, a| prices.iter().any(|p| p.get(t, a) == 0.0))));
    if let (Some(h), Some(l)) = (high, low) {
        checks.push(("high below low", Box::new(move |t, a| h.get(t, a) < l.get(t, a))));
        let inside = [open, close].into_iter().flatten().collect::<Vec<_>>();
        checks.push((
            "open or close outside low..high",
            Box::new(move |t, a| inside.iter().any(|p| p.get(t, a) < l.get(t, a) || h.get(t, a) < p.get(t, a))),
        ));
    }
    checks
        .into_iter()
        .filter_map(|(what, bad)| {
            let mut cells = 0;
            let mut first: Option<(usize, usize)> = None;
            for t in 0..data.n_dates() {
                for a in 0..data.n_assets() {
                    if bad(t, a) {
                        cells += 1;
                        first.get_or_insert((t, a));
                    }
                }
            }
            first.map(|(t, a)| Suspect { what, cells, first: (data.symbols[a].clone(), data.dates[t].to_string()) })
        })
        .collect()
}

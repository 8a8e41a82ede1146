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
            if json {
                let v = serde_json::json!({
                    "file": data.source, "n_assets": data.n_assets(), "n_dates": data.n_dates(),
                    "first_date": first, "last_date": last, "missing_share": missing,
                    "fields": fields, "derived_fields": data.derived_fields().map(|(n, _)| *n).collect::<Vec<_>>(),
                    "groups": groups, "fingerprint": data.fingerprint(),
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

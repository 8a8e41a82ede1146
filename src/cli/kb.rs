//! `alphaloop kb`: query and maintain the alpha knowledge base.

use super::table::{num, render, short};
use super::{load_data, Config, DataArgs};
use crate::backtest::MiningView;
use crate::kb::io::{self, Format};
use crate::kb::{AlphaRecord, Filter, Hit, Kb, Kind, Location, Status};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct KbArgs {
    /// Knowledge base: a directory (embedded Qdrant) or qdrant://host:port/collection
    /// (default: the config's `kb`, else alpha_kb/store).
    #[arg(long, global = true, env = "ALPHALOOP_KB")]
    pub kb: Option<String>,
    /// Print JSON.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(flatten)]
    pub metrics: super::config::MetricsSettings,
    #[command(subcommand)]
    pub cmd: KbCmd,
}

#[derive(clap::Subcommand, Debug)]
pub enum KbCmd {
    /// Totals, counts by status/family/generation, best metrics and growth over time.
    Stats,
    /// Best records by a metric.
    Top {
        /// The metric to rank by (rank_ic, ic, icir, sharpe, ...; an unknown name lists
        /// them). Smaller is better for turnover and max_drawdown.
        #[arg(long, default_value = "rank_ic")]
        by: String,
        /// The split whose metric ranks: train or valid (the test period is `kb holdout`'s).
        #[arg(long, default_value = "valid")]
        split: String,
        /// How many records to print.
        #[arg(short = 'n', long, default_value_t = 20)]
        n: usize,
        /// Only records with this status (accepted, rejected, error, or all).
        #[arg(long, default_value = "accepted")]
        status: String,
        /// Only records of this idea family (momentum, reversal, volume, ...).
        #[arg(long)]
        family: Option<String>,
    },
    /// Semantic search over ideas ("volume breakout on down days"), in the order the
    /// writer retrieves them: score = 0.5 · relevance (cosine to the idea) + 0.25 ·
    /// performance (valid Rank IC) + 0.1 · recency + 0.15 · importance (what citing the
    /// record has been worth, fading with age), then diversified (each pick
    /// penalised by its similarity to those already picked), so neither column is sorted.
    Search {
        /// The idea to look for, in words.
        query: String,
        /// How many records to print.
        #[arg(short = 'n', long, default_value_t = 10)]
        n: usize,
        /// Only records with this status (accepted, rejected, error, or all).
        #[arg(long, default_value = "all")]
        status: String,
        /// Only records of this idea family (momentum, reversal, volume, ...).
        #[arg(long)]
        family: Option<String>,
        /// Only records whose valid Rank IC is at least this.
        #[arg(long, allow_hyphen_values = true)]
        min_rank_ic: Option<f64>,
    },
    /// Records whose signals behave like ID's (behaviour vector).
    Similar {
        /// The record whose signal to compare with (`kb top` or `kb search` show ids).
        id: String,
        /// How many records to print.
        #[arg(short = 'n', long, default_value_t = 10)]
        n: usize,
    },
    /// One record in full: code, idea, metrics, reviews, lessons, lineage.
    Show {
        /// The record's id.
        id: String,
    },
    /// Write the records to a file (or stdout without --out): JSON, a CSV or Parquet table,
    /// or the expressions as a TOML alpha file.
    Export {
        /// The file format (default: the --out file's extension, else json; parquet needs
        /// --out). toml writes the expressions as an alpha file for `eval --file`.
        #[arg(long, value_enum)]
        format: Option<Format>,
        /// Only records with this status (accepted, rejected, error, or all).
        #[arg(long, default_value = "all")]
        status: String,
        /// Only records of this idea family (momentum, reversal, volume, ...).
        #[arg(long)]
        family: Option<String>,
        /// The file to write.
        #[arg(short, long)]
        out: Option<PathBuf>,
    },
    /// Add records: a JSON export, a file of formulas (.toml, or .txt with one per line), a Python factor file (.py, run
    /// in the sandbox) or a WebAssembly module in text form (.wat, under wasmtime);
    /// formulas and programs are evaluated on --data (train and valid).
    Import {
        /// The file to add (.json, .toml, .txt, .py or .wat).
        file: PathBuf,
        /// For a .py file: the Factor class to run when it defines several.
        #[arg(long = "class")]
        class: Option<String>,
        #[command(flatten)]
        data: DataArgs,
        /// Family recorded for formulas of a TOML or text file that name none (an alpha file
        /// `kb export` wrote names each one's).
        #[arg(long, default_value = "seed")]
        family: String,
    },
    /// The final report: the accepted alphas (expressions and programs) on the test period, which mining
    /// never sees, beside their train and valid Rank IC, in the order valid ranked them, with
    /// the Rank IC's t-statistic on valid and test and the bar a valid t must clear for the
    /// number of attempts in the KB (Bonferroni, 5 %).
    /// Nothing is written back: selection and lessons stay on train and valid.
    Holdout {
        #[command(flatten)]
        data: DataArgs,
        /// Only the N best by valid Rank IC.
        #[arg(short = 'n', long)]
        n: Option<usize>,
        /// Also draw each alpha's test Rank IC against its valid one into a PNG (points below
        /// the diagonal did worse out of sample).
        #[arg(long)]
        plot: Option<PathBuf>,
    },
    /// What mining would decide for expressions, against this knowledge base and the
    /// `[mine]` settings, without storing anything: rule checks, exact novelty, the
    /// stand-alone bars and the gain to the accepted set's combination on valid.
    Judge {
        /// The expression.
        #[arg(allow_hyphen_values = true)]
        expr: String,
        #[command(flatten)]
        data: DataArgs,
        /// A null model: also judge N within-date shuffles of each expression's signal (the
        /// same values, dealt to other stocks each date: no information) and report the share
        /// of them the rule accepts, and their gain t-statistics.
        #[arg(long, value_name = "N")]
        null: Option<usize>,
        /// Seed of the shuffles.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// The idea-relevance leaderboard: an LLM judge compares pairs of mined alphas ("which
    /// formula better expresses its own idea?"), each pair in both orders; win rates across
    /// the quartiles of the KB's mining order, or across the KBs given with --arm.
    Leaderboard {
        /// Compare KBs instead of quartiles: NAME=LOCATION, two or more.
        #[arg(long = "arm", value_name = "NAME=KB")]
        arms: Vec<String>,
        #[command(flatten)]
        judge: super::leaderboard::JudgeArgs,
        /// Where leaderboard.json, pairs.jsonl, the judge's replies.jsonl and heatmap.png go.
        #[arg(long, default_value = "leaderboard")]
        out: PathBuf,
    },
    /// Applies the current acceptance rule (`[mine]` settings) to the accepted alphas again,
    /// in the order they were accepted: which mined alphas would stay, and the combination's
    /// valid metrics with all of them and with those. Changes nothing unless `--apply`.
    Recheck {
        #[command(flatten)]
        data: DataArgs,
        /// Mark the alphas that would not stay as rejected (with the reason), keeping
        /// everything else about them.
        #[arg(long)]
        apply: bool,
    },
    /// Copy every record, lesson and setting, vectors and all, into another store or
    /// server collection (`qdrant://host:port/collection`), checked by reading it back.
    Copy {
        /// The KB to copy (default: `--kb`, the config's, or the checkout's).
        #[arg(long)]
        from: Option<String>,
        /// Where to: a directory (made if missing) or `qdrant://host:port/collection`.
        #[arg(long)]
        to: String,
    },
    /// Delete a record (refused while other records name it as `alpha:ID`).
    Rm {
        /// The record's id.
        id: String,
        /// Delete it even though other records build on it (they will no longer evaluate).
        #[arg(long)]
        force: bool,
    },
}

/// Opens the knowledge base named by the flag, the config or the default.
///
/// Only `create` (an import, a mining run) makes a new embedded store: a command that reads
/// one given a mistyped directory would otherwise make an empty store there and report
/// that it holds nothing.
pub fn open(flag: Option<&str>, cfg: &Config, create: bool) -> Result<Kb> {
    let loc = match flag.or(cfg.kb.as_deref()) {
        Some(s) => s.parse::<Location>().map_err(anyhow::Error::msg)?,
        None => Location::default_dir(),
    };
    if let Location::Dir(dir) = &loc {
        if !create && !dir.exists() {
            bail!("no knowledge base at {}: `alphaloop kb import FILE` or `alphaloop mine` makes one", dir.display());
        }
        if dir.exists() && !dir.is_dir() {
            bail!("{} is a file, not a knowledge base (an embedded one is a directory)", dir.display());
        }
    }
    Ok(Kb::open_with(&loc, embedder(cfg)?, crate::llm::retry::Patience::from_minutes(cfg.retry_minutes), &cfg.qdrant)?)
}

/// The knowledge base as an `alpha:ID` resolver, opened at the first id that nothing
/// asked before it knows: a plain expression needs no KB, and a mining run may hold the
/// store's lock.
pub struct LazyKb<'a> {
    flag: Option<&'a str>,
    cfg: &'a Config,
    kb: std::cell::OnceCell<Result<Kb, String>>,
    warned: std::cell::Cell<bool>,
}

impl<'a> LazyKb<'a> {
    /// The KB named by the flag, the config or the default (never created here).
    pub fn new(flag: Option<&'a str>, cfg: &'a Config) -> LazyKb<'a> {
        LazyKb { flag, cfg, kb: Default::default(), warned: Default::default() }
    }

    /// The store, opened on first use.
    pub fn get(&self) -> Result<&Kb> {
        self.kb.get_or_init(|| open(self.flag, self.cfg, false).map_err(|e| format!("{e:#}"))).as_ref().map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The store, or None with a warning (once) saying why `alpha:ID` cannot reach it.
    fn reach(&self) -> Option<&Kb> {
        let kb = self.get();
        if let Err(e) = &kb {
            if !self.warned.replace(true) {
                tracing::warn!("alpha:ID cannot look in the knowledge base: {e}");
            }
        }
        kb.ok()
    }
}

impl crate::expr::AlphaResolver for LazyKb<'_> {
    fn formula(&self, id: &str) -> Option<String> {
        self.reach()?.formula(id)
    }
    fn ids(&self) -> Vec<String> {
        self.reach().map(|kb| kb.ids()).unwrap_or_default()
    }
}

/// The embedder the config names (default: the local all-MiniLM-L6-v2).
pub fn embedder(cfg: &Config) -> Result<std::sync::Arc<dyn crate::kb::embed::Embedder>> {
    match cfg.embedder.as_deref() {
        None | Some("minilm") => Ok(crate::kb::default_embedder(None)?),
        Some(s) if s.starts_with("openai:") => {
            let (base, key) = super::config::openai_endpoint(cfg.embed_url.as_deref())?;
            let e = crate::kb::embed::OpenAiEmbedder::new(&base, &s["openai:".len()..], key, crate::llm::retry::Patience::from_minutes(cfg.retry_minutes))?;
            Ok(std::sync::Arc::new(crate::kb::embed::Cached::new(Box::new(e))))
        }
        Some(s) => bail!("unknown embedder '{s}' in the config: minilm or openai:MODEL"),
    }
}

/// The records a `--status` (and `--family`) flag keeps.
pub fn status_filter(status: &str, family: Option<&str>) -> Result<Filter> {
    let mut f = Filter::new();
    match status {
        "all" => {}
        "accepted" | "rejected" | "error" => f = f.is("status", status),
        s => bail!("unknown status '{s}': accepted, rejected, error or all"),
    }
    if let Some(fam) = family {
        f = f.is("family", fam);
    }
    Ok(f)
}

/// Fails when `family` names no record's family, listing those the KB has: an empty
/// table after a misspelt family would read as "no such alphas".
fn known_family(kb: &Kb, family: Option<&str>) -> Result<()> {
    let Some(fam) = family else { return Ok(()) };
    let known = kb.stats()?.by_family;
    if known.contains_key(fam) {
        return Ok(());
    }
    let list: Vec<&str> = known.keys().map(String::as_str).collect();
    bail!("no record of family '{fam}' in {}; its families: {}", kb.location(), if list.is_empty() { "none (the KB is empty)".to_string() } else { list.join(", ") })
}

pub fn run(args: KbArgs, cfg: &Config) -> Result<i32> {
    let cfg = &cfg.with_metrics(&args.metrics);
    let label = (cfg.metrics().horizon, cfg.metrics().gap);
    let same_label = |recs: &[AlphaRecord], what: &str| AlphaRecord::same_label(recs, label.0, label.1, what).map_err(anyhow::Error::msg);
    let json = args.json;
    if let KbCmd::Copy { from, to } = &args.cmd {
        let (src, dst) = (open(from.as_deref().or(args.kb.as_deref()), cfg, false)?, open(Some(to), cfg, true)?);
        let c = src.copy_to(&dst)?;
        if json {
            println!("{}", serde_json::json!({"from": src.location(), "to": dst.location(), "points": c.points, "records": c.records, "checksum": c.checksum}));
        } else {
            println!("copied {} records ({} points in all) from {} to {}; checksum {} read back alike", c.records, c.points, src.location(), dst.location(), c.checksum);
        }
        return Ok(0);
    }
    if let KbCmd::Leaderboard { arms, judge, out } = &args.cmd {
        let groups = if arms.is_empty() {
            let kb = open(args.kb.as_deref(), cfg, false)?;
            crate::agent::relevance::quantiles(crate::agent::relevance::mined(kb.records(&Filter::new())?), 4)
        } else {
            let mut groups = Vec::new();
            for a in arms {
                let (name, loc) = a.split_once('=').with_context(|| format!("--arm {a}: give NAME=KB"))?;
                let kb = open(Some(loc), cfg, false)?;
                groups.push(crate::agent::relevance::Group { name: name.to_string(), alphas: crate::agent::relevance::mined(kb.records(&Filter::new())?) });
            }
            groups
        };
        let board = super::leaderboard::run(&groups, judge, cfg, out, json)?;
        super::leaderboard::show(&board, out, json)?;
        return Ok(0);
    }
    let mut kb = open(args.kb.as_deref(), cfg, matches!(args.cmd, KbCmd::Import { .. }))?;
    match args.cmd {
        KbCmd::Stats => {
            let s = kb.stats()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
                return Ok(0);
            }
            println!("knowledge base {}: {} records, {} lessons", kb.location(), s.total, s.lessons);
            let kv = |m: &std::collections::BTreeMap<String, usize>| {
                m.iter().map(|(k, v)| vec![k.clone(), v.to_string()]).collect::<Vec<_>>()
            };
            println!("{}", render(&["status", "records"], &kv(&s.by_status)));
            println!("{}", render(&["family", "records"], &kv(&s.by_family)));
            let gens: Vec<Vec<String>> = s.by_generation.iter().map(|(k, v)| vec![k.to_string(), v.to_string()]).collect();
            println!("{}", render(&["generation", "records"], &gens));
            let best: Vec<Vec<String>> = s.best_valid.iter().map(|(k, (v, id))| vec![k.clone(), num(*v), id.clone()]).collect();
            println!("{}", render(&["best valid", "value", "record"], &best));
            let growth: Vec<Vec<String>> =
                s.growth.iter().map(|(d, (n, a))| vec![d.clone(), n.to_string(), a.to_string()]).collect();
            println!("{}", render(&["day", "added", "accepted"], &growth));
        }
        KbCmd::Top { by, split, n, status, family } => {
            let recs = kb.top(&by, &split, n, &status_filter(&status, family.as_deref())?)?;
            same_label(&recs, "this ranking")?;
            if recs.is_empty() {
                known_family(&kb, family.as_deref())?;
            }
            print_records(&recs, &split, json)?;
        }
        KbCmd::Search { query, n, status, family, min_rank_ic } => {
            let mut f = status_filter(&status, family.as_deref())?;
            if min_rank_ic.is_some() {
                f = f.range("valid_rank_ic", min_rank_ic, None);
            }
            let hits = kb.search_text(&query, &f, n, true)?;
            if hits.is_empty() {
                known_family(&kb, family.as_deref())?;
            }
            print_hits(&hits, json)?;
        }
        KbCmd::Similar { id, n } => print_hits(&kb.similar(&id, n)?, json)?,
        KbCmd::Holdout { data, n, plot } => holdout(&kb, &data, n, plot.as_deref(), cfg, json)?,
        KbCmd::Show { id } => {
            let r = kb.get(&id)?.with_context(|| format!("no record '{id}' in {}", kb.location()))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                show(&r);
            }
        }
        KbCmd::Export { format, out, status, family } => {
            let format = match (format, &out) {
                (Some(f), _) => f,
                (None, None) => Format::Json,
                // `-o kb.csv` alone wrote JSON into kb.csv: the name says what is wanted.
                (None, Some(p)) => Format::of_name(p).with_context(|| {
                    format!("cannot tell the format of {} from its name: end it in .json, .csv, .parquet or .toml, or pass --format", p.display())
                })?,
            };
            let mut recs = kb.records(&status_filter(&status, family.as_deref())?)?;
            if recs.is_empty() {
                known_family(&kb, family.as_deref())?;
            }
            if format == Format::Toml {
                // An alpha file stands alone: the records the chosen ones name go with them.
                let named = named_records(&kb, &recs)?;
                if !named.is_empty() {
                    eprintln!("added {} record(s) that the exported ones name as alpha:ID: {}", named.len(), named.iter().map(|r| r.id.as_str()).collect::<Vec<_>>().join(", "));
                    recs.extend(named);
                }
            }
            let programs = recs.iter().filter(|r| r.kind != Kind::Expression).count();
            if format == Format::Toml && programs > 0 {
                eprintln!("left out {programs} program(s) (Python or WebAssembly): an alpha file holds expressions; the JSON export keeps them");
            }
            match (&out, format) {
                (Some(p), f) => {
                    io::write_export(&recs, f, p)?;
                    let n = if f == Format::Toml { recs.len() - programs } else { recs.len() };
                    eprintln!("exported {n} records to {}", p.display());
                }
                (None, Format::Json) => println!("{}", serde_json::to_string_pretty(&recs)?),
                (None, Format::Csv) => {
                    let tmp = tempfile_path("csv");
                    io::write_export(&recs, Format::Csv, &tmp)?;
                    print!("{}", std::fs::read_to_string(&tmp)?);
                    let _ = std::fs::remove_file(&tmp);
                }
                (None, Format::Parquet) => bail!("parquet needs --out FILE"),
                (None, Format::Toml) => print!("{}", io::alpha_file(&recs)?),
            }
        }
        KbCmd::Import { file, class, data, family } => import(&mut kb, &file, class.as_deref(), &data, &family, cfg, json)?,
        KbCmd::Recheck { data, apply } => {
            same_label(&kb.records(&Filter::new().is("status", "accepted"))?, "this recheck")?;
            recheck(&mut kb, &data, apply, cfg, json)?
        }
        KbCmd::Judge { expr, data, null, seed } => {
            same_label(&kb.records(&Filter::new().is("status", "accepted"))?, "this judgement")?;
            judge(&mut kb, &expr, &data, null, seed, cfg, json)?
        }
        // Done above, before this KB was opened.
        KbCmd::Copy { .. } | KbCmd::Leaderboard { .. } => {}
        KbCmd::Rm { id, force } => {
            if kb.get(&id)?.is_none() {
                bail!("no record '{id}' in {}", kb.location());
            }
            let users: Vec<String> = kb.dependents(&id)?.into_iter().filter(|u| *u != id).collect();
            if !users.is_empty() && !force {
                bail!("alpha:{id} is named in the code of {}, which would no longer evaluate without it; delete those first, or pass --force", users.join(", "));
            }
            kb.remove(&id)?;
            if json {
                println!("{}", serde_json::json!({"removed": id}));
            } else {
                println!("removed {id}");
            }
        }
    }
    Ok(0)
}

/// The KB's records that `recs` name as `alpha:ID`, directly or through one another, and
/// that are not among them; an id the KB does not hold (a seed) is left to the seed file.
fn named_records(kb: &Kb, recs: &[AlphaRecord]) -> Result<Vec<AlphaRecord>> {
    let have: std::collections::HashSet<&str> = recs.iter().map(|r| r.id.as_str()).collect();
    let named = crate::expr::named_alphas(recs.iter().map(|r| r.code.as_str()), kb);
    Ok(named.keys().filter(|id| !have.contains(id.as_str())).map(|id| kb.get(id)).collect::<Result<Vec<_>, _>>()?.into_iter().flatten().collect())
}

fn tempfile_path(ext: &str) -> PathBuf {
    std::env::temp_dir().join(format!("alphaloop-export-{}.{ext}", std::process::id()))
}

fn import(kb: &mut Kb, file: &std::path::Path, class: Option<&str>, data: &DataArgs, family: &str, cfg: &Config, json: bool) -> Result<()> {
    // A list of formulas: TOML, or plain text with one per line.
    let is_toml = file.extension().is_some_and(|e| e == "toml" || e == "txt");
    // Programs, run in their sandboxes: a Python factor, or a WebAssembly module's text.
    if let Some(table @ (Format::Csv | Format::Parquet)) = Format::of_name(file) {
        bail!(
            "{}: `kb import` reads a JSON export (`kb export -o kb.json`); the {} export is a flat table for other tools (no reviews or look-ahead verdicts)",
            file.display(),
            if table == Format::Csv { "CSV" } else { "Parquet" }
        );
    }
    let program = match file.extension().and_then(|e| e.to_str()) {
        Some("py") => Some((Kind::Python, "python")),
        Some("wat") => Some((Kind::Wasm, "wasm")),
        Some("wasm") => bail!("{}: records keep their code as text; import the module's text form (.wat, e.g. from `wasm-tools print`)", file.display()),
        _ => None,
    };
    // Formulas and factors are evaluated on train and valid, as mining sees the data.
    let mining = |kb: &mut Kb| mining_view(kb, data, cfg, json);
    let items = if let Some((kind, kind_family)) = program {
        let code = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
        let (view, sample) = mining(kb)?;
        let id = file.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_else(|| "program".into());
        let fam = if family == "seed" { kind_family } else { family };
        vec![match kind {
            Kind::Python => io::evaluate_python(&id, &code, class, &view, &sample, fam, Default::default()),
            // Kind::Wasm, the only other kind `program` gives.
            _ => io::evaluate_program(&id, kind, &id, &code, &view, &sample, fam, |data| {
                crate::sandbox::wasm::WasmProgram::new(code.as_bytes(), Default::default()).and_then(|p| p.evaluate(data))
            }),
        }]
    } else if is_toml {
        let defs = crate::seeds::load(file)?;
        let (view, sample) = mining(kb)?;
        let pb = super::progress(defs.len() as u64, json, "evaluating");
        let seeds = crate::seeds::default_set()?;
        let items = io::evaluate_defs(&defs, &crate::expr::Chain(vec![&seeds, &*kb]), &view, &sample, family, |_| pb.inc(1));
        pb.finish_and_clear();
        items
    } else {
        io::read_json_export(file)?.into_iter().map(|r| (r, None)).collect()
    };
    let total = items.len();
    // Those that failed are stored too (with their error, so a fixed version is a new
    // attempt, not a repeat), but a count of records alone would hide them.
    let failed: Vec<String> = items
        .iter()
        .filter_map(|(r, _)| match &r.status {
            Status::Error { message } => Some(format!("{}: {message}", r.id)),
            _ => None,
        })
        .collect();
    let pb = super::progress(total as u64, json, "storing");
    let n = io::store_all(kb, items, |recs| {
        pb.inc(recs.len() as u64);
        if json {
            // One line per durable record, so a caller can count what was acknowledged.
            for r in recs {
                println!("{}", serde_json::json!({"stored": r.id, "status": r.status.keyword()}));
            }
        }
    })?;
    pb.finish_and_clear();
    kb.optimize()?;
    if !json {
        println!("imported {n} records from {} into {}", file.display(), kb.location());
        if !failed.is_empty() {
            println!("\n{} of them could not be evaluated (stored with status error):", failed.len());
            for f in &failed {
                println!("  {f}");
            }
        }
    }
    Ok(())
}

/// The accepted alphas on the test period beside their train and valid figures: what
/// `kb holdout` prints and the KB report draws.
pub(super) fn holdout_view(kb: &Kb, data: &DataArgs, n: Option<usize>, cfg: &Config, quiet: bool) -> Result<crate::report::kb::Holdout> {
    let recs = kb.top("rank_ic", "valid", n.unwrap_or(usize::MAX), &Filter::new().is("status", "accepted"))?;
    if recs.is_empty() {
        bail!("the knowledge base {} has no accepted alphas with a valid Rank IC; run `alphaloop mine` first", kb.location());
    }
    let mcfg = cfg.metrics();
    AlphaRecord::same_label(&recs, mcfg.horizon, mcfg.gap, "this report").map_err(anyhow::Error::msg)?;
    let md = load_data(data, cfg, quiet)?;
    let splits = crate::data::Splits::resolve(cfg.splits.as_ref(), &md);
    let prep = crate::backtest::prepare(&md, &crate::data::Period::Test, &splits, mcfg)?;
    // `alpha:ID` may name a seed or any expression record.
    let seeds = crate::seeds::default_set()?;
    let alphas = crate::expr::Chain(vec![&seeds, kb]);
    let def = |r: &AlphaRecord| crate::seeds::AlphaDef { id: r.id.clone(), formula: r.code.clone(), name: None, idea: None, source: None, family: None };
    // Expressions in one shared graph; programs one by one in their sandboxes (with the
    // look-ahead check, as when they were stored).
    let exprs: Vec<crate::seeds::AlphaDef> = recs.iter().filter(|r| r.kind == Kind::Expression).map(def).collect();
    let mut by_id: std::collections::HashMap<String, super::batch::Row> =
        super::batch::evaluate_batch(&exprs, &prep.data, &alphas, &prep.scorer, !quiet).into_iter().map(|r| (r.id.clone(), r)).collect();
    let mut py: Option<crate::sandbox::PySandbox> = None;
    for r in recs.iter().filter(|r| r.kind != Kind::Expression) {
        let outcome = match r.kind {
            Kind::Python => {
                if py.is_none() {
                    py = Some(crate::sandbox::PySandbox::start(&prep.data, Default::default())?);
                }
                let sb = py.as_mut().context("the Python sandbox")?;
                // The record's name is its class where the import was given one.
                sb.evaluate(&r.code, None).or_else(|v| if r.name != r.id { sb.evaluate(&r.code, Some(&r.name)) } else { Err(v) })
            }
            Kind::Wasm => crate::sandbox::wasm::WasmProgram::new(r.code.as_bytes(), Default::default()).and_then(|p| p.evaluate(&prep.data)),
            Kind::Expression => continue,
        };
        let row = match outcome {
            Ok(ev) => super::batch::Row { id: r.id.clone(), metrics: Some(prep.scorer.score(&ev.signal)), error: None, units: None },
            Err(v) => super::batch::Row { id: r.id.clone(), metrics: None, error: Some(v.to_string()), units: None },
        };
        by_id.insert(r.id.clone(), row);
    }
    // Each alpha here was chosen among every attempt the KB holds, so a t-statistic on
    // valid means something only past Bonferroni's bar for that many (at 5 %, two-sided);
    // test, never chosen on, needs no correction.
    let attempts = kb.attempts()?;
    let rows = recs
        .into_iter()
        .map(|r| {
            let row = by_id.remove(&r.id);
            let (test, error) = match row {
                Some(row) => (row.metrics, row.error),
                None => (None, Some("not evaluated".into())),
            };
            crate::report::kb::HoldoutRow {
                test_t: test.as_ref().map(crate::backtest::Metrics::rank_ic_t).filter(|t| t.is_finite()),
                valid_t: r.metric("valid", "rank_ic_t"),
                train: r.metrics.get("train").cloned(),
                valid: r.metrics.get("valid").cloned(),
                test,
                error,
                id: r.id,
                code: r.code,
            }
        })
        .collect();
    Ok(crate::report::kb::Holdout { header: super::batch::header(&prep), rows, attempts, bar_t: crate::backtest::stats::bonferroni_t(0.05, attempts) })
}

/// See [`KbCmd::Holdout`].
fn holdout(kb: &Kb, data: &DataArgs, n: Option<usize>, plot: Option<&std::path::Path>, cfg: &Config, json: bool) -> Result<()> {
    if let Some(png) = plot {
        crate::model::plot::check_png(png).map_err(anyhow::Error::msg)?;
    }
    let h = holdout_view(kb, data, n, cfg, json)?;
    let (attempts, bar) = (h.attempts, h.bar_t);
    let rank_ic = |m: &Option<crate::backtest::Metrics>| m.as_ref().map_or(f64::NAN, |m| m.rank_ic);
    if let Some(path) = plot {
        use crate::model::plot::{lines, Series};
        let pts: Vec<(f64, f64)> = h.rows.iter().filter_map(|r| Some((rank_ic(&r.valid), r.test.as_ref()?.rank_ic))).collect();
        let (lo, hi) = pts.iter().flat_map(|p| [p.0, p.1]).filter(|v| v.is_finite()).fold((0.0f64, 0.0f64), |a, v| (a.0.min(v), a.1.max(v)));
        let series = [Series::dots("one alpha", pts), Series::line("test = valid", vec![(lo, lo), (hi, hi)])];
        lines(path, "test against valid Rank IC", "valid Rank IC", "test Rank IC", &series).map_err(anyhow::Error::msg)?;
    }
    if json {
        let out: Vec<serde_json::Value> = h
            .rows
            .iter()
            .map(|r| {
                serde_json::json!({"id": r.id, "train": r.train, "valid": r.valid, "test": r.test, "error": r.error,
                    "valid_t": r.valid_t, "test_t": r.test_t, "attempts": attempts, "bar_t": bar})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        if let Some(p) = plot {
            super::wrote(p, json);
        }
        return Ok(());
    }
    println!("{}", h.header);
    let t2 = |v: Option<f64>| v.filter(|v| v.is_finite()).map_or("-".into(), |v| format!("{v:.2}"));
    let table: Vec<Vec<String>> = h
        .rows
        .iter()
        .map(|r| {
            let f = |g: fn(&crate::backtest::Metrics) -> f64| num(r.test.as_ref().map_or(f64::NAN, g));
            vec![r.id.clone(), num(rank_ic(&r.train)), num(rank_ic(&r.valid)), t2(r.valid_t), f(|x| x.rank_ic), t2(r.test_t), f(|x| x.sharpe), f(|x| x.turnover), short(&r.code, 50)]
        })
        .collect();
    println!("{}", render(&["id", "train rank_ic", "valid rank_ic", "valid t", "test rank_ic", "test t", "test sharpe", "test turnover", "code"], &table));
    if let Some(m) = h.summary() {
        println!(
            "{} alphas: mean Rank IC train {}, valid {}, test {}; the test kept valid's sign for {} of {}",
            m.alphas,
            num(m.train),
            num(m.valid),
            num(m.test),
            m.kept_sign,
            m.alphas
        );
        // How wide the selection was: the best of many attempts on valid is flattered
        // there by chance (the more attempts, the more); test is the unbiased figure.
        println!("chosen on train and valid among {attempts} candidates tried in the knowledge base (every status, each inner-loop round counted); their valid Rank IC is flattered by that choice, the test one is not");
        println!(
            "t is the Rank IC's t-statistic; for {attempts} attempts Bonferroni's bar (5 %, two-sided) is |t| >= {bar:.2}: {} of {} clear it on valid",
            h.clears(),
            h.rows.len()
        );
    }
    for r in h.rows.iter().filter(|r| r.error.is_some()) {
        println!("{}: {}", r.id, r.error.as_deref().unwrap_or(""));
    }
    if let Some(p) = plot {
        super::wrote(p, json);
    }
    Ok(())
}

fn status_text(r: &AlphaRecord) -> String {
    match &r.status {
        Status::Accepted => "accepted".into(),
        Status::Rejected { reason } => format!("rejected: {reason}"),
        Status::Error { message } => format!("error: {}", message.lines().next().unwrap_or("")),
    }
}

fn print_records(recs: &[AlphaRecord], split: &str, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(recs)?);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = recs
        .iter()
        .map(|r| {
            let m = |k: &str| r.metric(split, k).map(num).unwrap_or_else(|| "-".into());
            vec![r.id.clone(), m("rank_ic"), m("ic"), m("icir"), m("sharpe"), m("turnover"), short(&r.code, 60)]
        })
        .collect();
    println!("{}", render(&["id", &format!("{split} rank_ic"), "ic", "icir", "sharpe", "turnover", "code"], &rows));
    Ok(())
}

fn print_hits(hits: &[Hit], json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(hits)?);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = hits
        .iter()
        .map(|h| {
            let r = &h.record;
            vec![
                format!("{:.3}", h.score),
                format!("{:.3}", h.relevance),
                r.id.clone(),
                r.status.keyword().into(),
                r.metric("valid", "rank_ic").map(num).unwrap_or_else(|| "-".into()),
                short(if r.idea.is_empty() { &r.code } else { &r.idea }, 60),
            ]
        })
        .collect();
    println!("{}", render(&["score", "relevance", "id", "status", "valid rank_ic", "idea / code"], &rows));
    Ok(())
}

fn show(r: &AlphaRecord) {
    println!("id          {}", r.id);
    println!("kind        {:?}", r.kind);
    println!("status      {}", status_text(r));
    if !r.name.is_empty() {
        println!("name        {}", r.name);
    }
    if !r.family.is_empty() {
        println!("family      {}", r.family);
    }
    println!("generation  {}", r.generation);
    if !r.parents.is_empty() {
        println!("parents     {}", r.parents.join(", "));
    }
    if !r.idea.is_empty() {
        println!("idea        {}", r.idea);
    }
    if !r.hypothesis.is_empty() {
        println!("hypothesis  {}", r.hypothesis);
    }
    println!("code\n    {}", r.code.replace('\n', "\n    "));
    if !r.metrics.is_empty() {
        let names = ["ic", "rank_ic", "icir", "rank_icir", "rank_ic_t", "ic_h5", "ic_h10", "ic_h20", "sharpe", "max_drawdown", "turnover", "coverage"];
        let rows: Vec<Vec<String>> = r
            .metrics
            .keys()
            .map(|split| {
                std::iter::once(split.clone())
                    .chain(names.iter().map(|m| r.metric(split, m).map(num).unwrap_or_else(|| "-".into())))
                    .collect()
            })
            .collect();
        let mut head = vec!["split"];
        head.extend(names);
        println!("{}", render(&head, &rows));
    }
    if let Some(n) = &r.novelty {
        if let (Some(c), Some(w)) = (n.max_corr, &n.max_corr_with) {
            let over = if n.max_corr_exact { "train panel" } else { "behaviour sample" };
            println!("novelty     max |corr| {c:.3} with {w} ({over})");
        }
        if let (Some(o), Some(w)) = (n.ast_overlap, &n.ast_overlap_with) {
            println!("            AST overlap {:.0}% with {w}", o * 100.0);
        }
    }
    if let Some(g) = &r.gain {
        println!(
            "gain        {} Rank IC a day on valid, t {:.2} over {} days, to the {} of {} alphas (Rank IC {} -> {}, net Sharpe {} -> {})",
            num(g.mean),
            g.t,
            g.days,
            g.combiner,
            g.set_size,
            num(g.rank_ic_before),
            num(g.rank_ic_after),
            num(g.sharpe_before),
            num(g.sharpe_after)
        );
    }
    if let Some(c) = &r.contribution {
        println!("contribution {} Rank IC a day on valid, t {:.2}: what the {} of {} others loses without it", num(c.mean), c.t, c.combiner, c.set_size);
    }
    if let Some(i) = r.importance {
        println!("importance  {i:.3} (0.5 neutral): what citing it has been worth to the writers that did");
    }
    if let Some(l) = &r.lookahead {
        println!("look-ahead  {l}");
    }
    for rv in &r.reviews {
        println!("review      round {} by {}: {:.1}/10 {}", rv.round, rv.reviewer, rv.score, rv.advice);
    }
    for l in &r.lessons {
        println!("lesson      {l}");
    }
    if !r.run_id.is_empty() {
        println!("run         {} (model {}, {} tokens, ${:.4})", r.run_id, r.model, r.tokens, r.cost_usd);
    }
}

/// What mining sees of the data (cut at the end of valid) at the config's label, and the
/// knowledge base's behaviour sample for it.
fn mining_view(kb: &mut Kb, data: &DataArgs, cfg: &Config, json: bool) -> Result<(MiningView, crate::kb::BehaviourSample)> {
    let md = load_data(data, cfg, json)?;
    let splits = crate::data::Splits::resolve(cfg.splits.as_ref(), &md);
    let view = MiningView::new(&md, &splits, cfg.metrics())?;
    let sample = kb.behaviour_sample(&md, &splits)?;
    Ok((view, sample))
}

/// `signal` with each date's values dealt to the stocks in a random order (Fisher-Yates
/// per date): the same cross-section of values, no information about which stock gets one.
fn shuffled_within_dates(signal: &crate::data::Panel, rng: &mut u64) -> crate::data::Panel {
    let (nd, na) = (signal.n_dates(), signal.n_assets());
    let mut rows = Vec::new();
    signal.to_date_major(0, nd, &mut rows);
    for row in rows.chunks_mut(na.max(1)) {
        for i in (1..row.len()).rev() {
            row.swap(i, (crate::xorshift(rng) % (i as u64 + 1)) as usize);
        }
    }
    crate::data::Panel::from_date_major(nd, na, &rows)
}

/// `kb judge`: what mining would decide, and with `--null N` how often the rule accepts
/// shuffles of the same signal.
fn judge(kb: &mut Kb, e: &str, data: &DataArgs, null: Option<usize>, seed: u64, cfg: &Config, json: bool) -> Result<()> {
    use crate::agent::{MineConfig, Miner, Templates};
    let (view, sample) = mining_view(kb, data, cfg, json)?;
    let mcfg = cfg.mine.apply(MineConfig::default());
    let kb = &*kb;
    let miner = Miner::new(&crate::llm::NoModel, kb, &view, sample, mcfg.clone(), Templates::load(&Templates::default_dir())?, "judge".into(), false)?;
    let j = miner.judge_expression("judge", e)?;
    let mut nulls: Vec<(bool, f64)> = Vec::new();
    // Each draw's train IC and Rank IC: a shuffle within dates has no edge, so their means
    // must sit within two standard errors of zero, or the scoring itself gives noise an edge.
    let mut null_ics: Vec<(f64, f64)> = Vec::new();
    if let Some(n) = null {
        let sig = crate::expr::eval_expr(e, &view.data, kb).map_err(|err| anyhow::anyhow!("{}", err.render()))?;
        let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let pb = super::progress(n as u64, json, "null draws");
        for k in 0..n {
            let (jn, g) = miner.judge_signal(&format!("null-{k}"), &format!("null draw {k} of {e}"), &shuffled_within_dates(&sig, &mut rng))?;
            nulls.push((jn.status == crate::kb::Status::Accepted, g.t));
            if let Some(m) = jn.metrics.get("train") {
                null_ics.push((m.ic, m.rank_ic));
            }
            pb.inc(1);
        }
        pb.finish_and_clear();
    }
    let accepted = nulls.iter().filter(|n| n.0).count();
    let centred = |v: Vec<f64>| {
        let v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
        let (mean, sd) = crate::backtest::stats::mean_std(&v);
        let se = sd / (v.len() as f64).sqrt();
        (mean, se, mean.abs() <= 2.0 * se)
    };
    let (ic, rank_ic) = (centred(null_ics.iter().map(|x| x.0).collect()), centred(null_ics.iter().map(|x| x.1).collect()));
    let at_least = |t: f64| nulls.iter().filter(|n| n.1 >= t).count();
    if json {
        let null_json = null.map(|n| {
            serde_json::json!({
                "draws": n, "accepted": accepted, "accepted_per_1000": accepted as f64 * 1000.0 / n.max(1) as f64, "gain_t": nulls.iter().map(|x| x.1).collect::<Vec<_>>(),
                "train_ic": {"mean": ic.0, "se": ic.1, "centred": ic.2}, "train_rank_ic": {"mean": rank_ic.0, "se": rank_ic.1, "centred": rank_ic.2},
                "t_at_least": {"1.5": at_least(1.5), "2": at_least(2.0), "2.5": at_least(2.5), "3": at_least(3.0)},
            })
        });
        let v = serde_json::json!({
            "expr": e, "status": j.status.keyword(), "reason": j.status.reason(), "gain": j.gain, "novelty": j.novelty, "metrics": j.metrics,
            "null": null_json,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("{}", j.status);
    if let Some(g) = &j.gain {
        println!("gain {:.5} Rank IC a day on valid, t {:.2} over {} days, to the {} of {} alphas", g.mean, g.t, g.days, g.combiner, g.set_size);
    }
    if let Some(n) = null {
        let mut ts: Vec<f64> = nulls.iter().map(|x| x.1).filter(|t| t.is_finite()).collect();
        ts.sort_by(f64::total_cmp);
        let q = |p: f64| ts.get(((ts.len() as f64 - 1.0) * p).round() as usize).map_or("-".to_string(), |t| format!("{t:.2}"));
        println!(
            "null model: {accepted} of {n} shuffles accepted (min_gain_t {}); gain t median {}, 95th percentile {}; t >= 1.5: {}, 2: {}, 2.5: {}, 3: {}",
            mcfg.min_gain_t,
            q(0.5),
            q(0.95),
            at_least(1.5),
            at_least(2.0),
            at_least(2.5),
            at_least(3.0)
        );
        let say = |name: &str, (mean, se, ok): (f64, f64, bool)| {
            format!("{name} {mean:.5} ± {se:.5}{}", if ok { "" } else { " (NOT within two standard errors of 0: the scoring gives noise an edge)" })
        };
        println!("null model on train: mean {}, {}; {:.1} of every 1,000 pure-noise candidates accepted", say("IC", ic), say("Rank IC", rank_ic), accepted as f64 * 1000.0 / n.max(1) as f64);
    }
    Ok(())
}

/// `kb recheck`: the current rule over the accepted alphas, in acceptance order.
fn recheck(kb: &mut Kb, data: &DataArgs, apply: bool, cfg: &Config, json: bool) -> Result<()> {
    let (view, _) = mining_view(kb, data, cfg, json)?;
    let mcfg = cfg.mine.apply(crate::agent::MineConfig::default());
    let store = kb.rank_store(&view.data, view.train.span().0, view.valid.span().1);
    let r = crate::agent::recheck::recheck(kb, &view, &store, &mcfg)?;
    let dropped: Vec<&crate::agent::recheck::Rechecked> = r.alphas.iter().filter(|a| !a.kept).collect();
    if apply {
        let mut recs = Vec::new();
        for a in &dropped {
            if let Some(mut rec) = kb.get(&a.id)? {
                rec.status = Status::Rejected { reason: format!("recheck: {}", a.reason) };
                rec.gain = a.gain.clone().or(rec.gain);
                recs.push(rec);
            }
        }
        kb.update(&recs)?;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({"recheck": r, "applied": apply, "min_gain_t": mcfg.min_gain_t}))?);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = r
        .alphas
        .iter()
        .map(|a| {
            vec![
                a.id.clone(),
                if a.kept { "stays".into() } else { "goes".into() },
                a.gain.as_ref().map(|g| format!("{:.2}", g.t)).unwrap_or_else(|| "-".into()),
                a.max_corr.as_ref().map(|(w, c)| format!("{c:.2} {w}")).unwrap_or_else(|| "-".into()),
                if a.kept { String::new() } else { a.reason.clone() },
            ]
        })
        .collect();
    println!("{}", render(&["alpha", "rule", "gain t", "max corr", "why not"], &rows));
    let kept = r.alphas.len() - dropped.len();
    println!(
        "{kept} of {} mined alphas stay under accept = {:?}, min_gain_t {} against a starting set of {} (base {:?})",
        r.alphas.len(),
        mcfg.accept,
        mcfg.min_gain_t,
        r.base,
        mcfg.base
    );
    println!(
        "the {} combination on valid: Rank IC {} with every accepted alpha, {} with those that stay (net Sharpe {} and {})",
        mcfg.combine.name(),
        num(r.before.rank_ic),
        num(r.after.rank_ic),
        num(r.before.sharpe),
        num(r.after.sharpe)
    );
    if !apply && !dropped.is_empty() {
        println!("nothing changed: `--apply` marks the {} that go as rejected", dropped.len());
    }
    Ok(())
}

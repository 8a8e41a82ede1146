//! The `alphaloop` command line.

pub mod batch;
mod config;
mod data_cmd;
mod eval;
mod growth;
mod kb;
mod leaderboard;
mod mine;
mod report;
mod study;
mod train;
pub mod table;

pub use config::{cost_bps, resolve_data, Config, MetricsSettings};
pub use kb::{open as open_kb, status_filter};
pub use train::{compile_features, train_json};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(name = "alphaloop", version, about = "Self-improving alpha mining: evaluate, mine and combine formulaic alphas")]
pub struct Cli {
    /// Settings file (default: $ALPHALOOP_CONFIG or ./alphaloop.toml if present).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Log level (error, warn, info, debug, trace); also RUST_LOG.
    #[arg(long, global = true, default_value = "warn")]
    pub log: String,
    #[command(subcommand)]
    pub cmd: Command,
}

/// Where the data comes from (shared by every command that reads it).
#[derive(clap::Args, Debug, Clone)]
pub struct DataArgs {
    /// Long-format Parquet/CSV (default: the shipped ../shared/data/sp500_daily.parquet).
    #[arg(long, env = "ALPHALOOP_DATA")]
    pub data: Option<PathBuf>,
    /// `symbol,group` CSV for indneutralize (default: sp500_constituents.csv beside the data).
    #[arg(long)]
    pub groups: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Evaluate an alpha expression (or a file of alphas) and print its metrics.
    Eval(eval::EvalArgs),
    /// Inspect market data files.
    Data {
        #[command(subcommand)]
        cmd: data_cmd::DataCmd,
    },
    /// List every operator of the expression language with its exact meaning.
    Ops {
        /// Print the catalogue as JSON (name, aliases, kind, arguments, meaning; the fields).
        #[arg(long)]
        json: bool,
    },
    /// Mine alphas: the LLM writer/judge loops over an idea library, into the knowledge base.
    ///
    /// What an alpha must show to be accepted (train and valid Rank IC, coverage, novelty)
    /// and how many writer/judge rounds an idea gets are `[mine]` settings of the config
    /// file (docs/configuration.md); a run keeps them in its run.json.
    Mine(mine::MineArgs),
    /// Arms × seeds × a budget per run, each run from its own copy of a starting KB, and
    /// one summary per arm (mean ± RSD and median over the seeds): how one way of mining
    /// compares with another (docs/study.md).
    Study(study::StudyArgs),
    /// Mining runs and their summaries.
    Runs {
        #[command(subcommand)]
        cmd: Option<mine::RunsCmd>,
        /// Print JSON
        #[arg(long, global = true)]
        json: bool,
    },
    /// Query and maintain the alpha knowledge base.
    Kb(kb::KbArgs),
    /// An alpha's tearsheet (IC over time, decay, quintiles, the book with and without
    /// costs, turnover, sectors) as one self-contained HTML file.
    Report(report::ReportArgs),
    /// Train the combined XGBoost model over KB alphas (or the seeds) and report it.
    Train(train::TrainArgs),
    /// Score stocks on a date with a trained model.
    Predict(train::PredictArgs),
    /// Serve the local model on an OpenAI-compatible endpoint (`/v1/chat/completions`), so
    /// several miners (`--llm openai:local` with OPENAI_BASE_URL) or other tools share it.
    Serve {
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// 0 picks a free port (printed on the first line of output).
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// `small` (Qwen2.5-Coder 0.5B), `medium` (1.5B) or a GGUF path (default: the 1.5B when scripts/setup fetched it, else the 0.5B).
        #[arg(long, env = "ALPHALOOP_MODEL")]
        model: Option<std::path::PathBuf>,
        /// Threads for the model (0: all cores).
        #[arg(long, default_value_t = 0)]
        llm_threads: i32,
    },
    /// (internal) The Python sandbox worker; started by alphaloop itself.
    #[command(hide = true)]
    SandboxWorker { dir: std::path::PathBuf },
}

/// Runs the CLI; returns the process exit code.
pub fn run(cli: Cli) -> Result<i32> {
    let cfg = Config::load(cli.config.as_deref())?;
    match cli.cmd {
        Command::Eval(a) => eval::run(a, &cfg),
        Command::Data { cmd } => data_cmd::run(cmd, &cfg),
        Command::Kb(a) => kb::run(a, &cfg),
        Command::Mine(a) => mine::run(a, &cfg),
        Command::Study(a) => study::run(a, &cfg, cli.config.as_deref(), &cli.log),
        Command::Runs { cmd, json } => mine::runs(cmd, json),
        Command::Report(a) => report::run(a, &cfg),
        Command::Train(a) => train::run_train(a, &cfg),
        Command::Predict(a) => train::run_predict(a, &cfg),
        Command::Serve { host, port, model, llm_threads } => {
            let path = crate::llm::model_path(model.as_deref());
            let m = crate::llm::local::LocalModel::load(&path, crate::llm::LOCAL_CTX, llm_threads)?;
            let listener = std::net::TcpListener::bind((host.as_str(), port)).with_context(|| format!("cannot listen on {host}:{port}"))?;
            let addr = listener.local_addr()?;
            {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                writeln!(out, "serving {} on http://{addr}/v1", crate::llm::LanguageModel::name(&m))?;
                out.flush()?;
            }
            crate::llm::serve::serve(listener, &m)?;
            Ok(0)
        }
        Command::SandboxWorker { dir } => Ok(crate::sandbox::worker::main(&dir)),
        Command::Ops { json: true } => {
            println!("{}", serde_json::to_string_pretty(&crate::expr::ops::catalogue_json())?);
            Ok(0)
        }
        Command::Ops { json: false } => {
            print!("{}", crate::expr::ops::describe());
            println!("Fields: {} (split/dividend adjusted), extra numeric columns of the data,", crate::data::STORED_FIELDS.join(", "));
            for (n, d) in crate::data::DERIVED_FIELDS {
                println!("  {n} = {d}");
            }
            // Not in the catalogue's text above, which is also the writer's prompt.
            println!("Units (what `eval` notes and mining's `check_units` checks): a price is dollars per share, volume shares, adv{{d}} and cap dollars, returns a pure number; constants and other columns take any unit. Each operator's result:");
            for o in crate::expr::ops::CATALOGUE {
                println!("  {:<14} {}", o.name, o.units.describe());
            }
            Ok(0)
        }
    }
}

/// Loads the data named by `args` (or the defaults), with a spinner for the big file.
pub fn load_data(args: &DataArgs, cfg: &Config, quiet: bool) -> Result<crate::data::MarketData> {
    let path = resolve_data(args.data.as_deref(), cfg)?;
    let groups = args.groups.clone().or_else(|| cfg.groups.clone());
    let pb = if quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new_spinner() };
    pb.set_message(format!("loading {}", path.display()));
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    let t = std::time::Instant::now();
    let data = crate::data::load(&path, &crate::data::LoadOptions { groups })?;
    pb.finish_and_clear();
    tracing::info!("loaded {} in {:.2?}", path.display(), t.elapsed());
    Ok(data)
}

/// Says where a written file (a plot) went: on stdout, or on stderr with `--json`, so that
/// stdout stays one JSON document.
pub fn wrote(path: &std::path::Path, json: bool) {
    if json {
        eprintln!("wrote {}", path.display());
    } else {
        println!("wrote {}", path.display());
    }
}

/// A progress bar (hidden for --json output or when stderr is not a terminal).
pub fn progress(len: u64, quiet: bool, what: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if quiet || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template("{msg} {bar:30} {pos}/{len} [{elapsed} / eta {eta}]") {
        pb.set_style(style);
    }
    pb.set_message(what.to_string());
    pb
}

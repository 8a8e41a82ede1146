use clap::Parser;

/// Rust ignores SIGPIPE, and sockets need it so: with the default disposition a Qdrant
/// server or model endpoint that went away mid-write killed a miner outright (exit 141, no
/// message) instead of giving the error its retries wait out. A closed stdout pipe
/// (`alphaloop ... | head`) then makes printing panic; this ends the process quietly
/// instead, with the code a shell gives a process the pipe ended, as other tools do.
fn quiet_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let p = info.payload();
        let msg = p.downcast_ref::<String>().map(String::as_str).or_else(|| p.downcast_ref::<&str>().copied()).unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info)
    }));
}

#[global_allocator]
static ALLOCATOR: alphaloop::data::pool::LineAligned = alphaloop::data::pool::LineAligned;

fn main() {
    quiet_on_closed_pipe();
    alphaloop::data::pool::keep_freed_memory();
    let cli = alphaloop::cli::Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("alphaloop={}", cli.log)));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    match alphaloop::cli::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(2);
        }
    }
}

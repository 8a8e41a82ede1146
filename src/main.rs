use clap::Parser;

/// Rust ignores SIGPIPE, so `alphaloop ... | head` would panic on a closed pipe; restore
/// the default so the process simply ends, as other command-line tools do.
fn quiet_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: resetting a signal disposition to its default before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
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

use clap::Parser;

fn main() {
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

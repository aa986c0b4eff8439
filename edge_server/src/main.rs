//! `lop_edge --config FILE [--print-config]`: the LOP edge server (see the `edge_server` crate).

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(name = "lop_edge", version, about = "The LOP edge server: serves split inferences to many robots over Zenoh")]
struct Args {
    /// The YAML configuration (see config/edge.yaml).
    #[arg(long)]
    config: PathBuf,
    /// Print the resolved configuration (defaults filled in, paths absolute) and exit.
    #[arg(long)]
    print_config: bool,
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("error: {}", lop::error::report(&*e));
        std::process::exit(1);
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let cfg = edge_server::EdgeConfig::load(&args.config).with_context(|| format!("configuration {}", args.config.display()))?;
    if args.print_config {
        print!("{}", cfg.to_yaml()?);
        return Ok(());
    }
    let filter = tracing_subscriber::EnvFilter::try_from_env("LOP_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cfg.log));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    lop_runtime::alloc::retain_freed_memory();
    // A libtorch other than the one tch binds would fail at its first missing operator.
    lop::libtorch::check_loaded()?;
    edge_server::run(cfg).context("lop_edge")?;
    Ok(())
}

//! `lop`: inspect, verify, run and benchmark models on the local-operator parallelism engine.

use clap::Parser;

fn main() {
    let args = lop_cli::Args::parse();
    // Every command runs inference repeatedly; keep freed activation memory for reuse.
    lop_runtime::alloc::retain_freed_memory();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("LOP_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    // A libtorch other than the one tch binds would fail at its first missing operator.
    if let Err(e) = lop::libtorch::check_loaded() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
    match lop_cli::run(args) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {}", lop::error::report(&*e));
            std::process::exit(2);
        }
    }
}

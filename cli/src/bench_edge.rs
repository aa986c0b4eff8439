//! `lop bench-edge --config FILE` (hidden): the edge process of `lop bench --netns`, started by
//! the benchmark inside the edge's network namespace. It serves the benchmark's model over a Zenoh
//! router on the configured endpoint, prints [`lop_runtime::bench::EDGE_READY`] once it listens,
//! and exits when its stdin closes (the benchmark closing it, or the benchmark dying).

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use lop_runtime::bench::EdgeProcessConfig;

/// Arguments of `lop bench-edge`.
#[derive(Debug, clap::Args)]
pub struct BenchEdgeArgs {
    /// The [`EdgeProcessConfig`] as JSON.
    #[arg(long)]
    pub config: PathBuf,
}

/// Serves until stdin closes.
///
/// # Errors
/// An unreadable configuration; the edge failing to start.
pub fn run(args: &BenchEdgeArgs) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(&args.config).with_context(|| format!("reading {}", args.config.display()))?;
    let cfg: EdgeProcessConfig = serde_json::from_str(&text).with_context(|| format!("parsing {}", args.config.display()))?;
    tch::set_num_threads(cfg.threads.unwrap_or(1).max(1));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("stdin-watch".into())
        .spawn(move || {
            let mut buf = [0u8; 256];
            let mut stdin = std::io::stdin().lock();
            while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
            let _ = stop_tx.send(());
        })
        .context("spawning the stdin watcher")?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting tokio")?;
    let counts = rt.block_on(lop_runtime::bench::serve_edge_process(
        &cfg,
        async {
            let _ = stop_rx.await;
        },
        || {
            if let Err(e) = lop_runtime::bench::print_ready() {
                tracing::warn!(error = %e, "cannot signal readiness");
            }
        },
    ))?;
    tracing::info!(?counts, "bench edge done");
    Ok(0)
}

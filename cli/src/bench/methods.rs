//! Running the methods: the tokio runtime, the link chosen (in-process, Zenoh over loopback, or
//! Zenoh between network namespaces), what the run reports besides the methods, the progress
//! lines of `--verbose`, and the check of the outputs against the unsplit model.

use std::time::Duration;

use anyhow::Context;
use lop_runtime::bench::{BenchConfig, MethodReport, NetnsBenchOptions, NetnsSummary};
use lop_runtime::edge::EdgeCounts;

use super::args::{BenchArgs, Transport};
use crate::scenario;

/// The tokio runtime the benchmark's robot and in-process edge run on.
pub(super) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting tokio")
}

/// Runs every method over the link (`run` says which, and gets its description and what the
/// link reports); returns the methods' reports.
pub(super) fn run_methods(
    args: &BenchArgs,
    cfg: &BenchConfig,
    transport: Transport,
    threads: Option<i32>,
    run: &mut Run,
) -> anyhow::Result<std::collections::BTreeMap<String, MethodReport>> {
    let latency_ms = run.latency_ms;
    let progress = progress_printer(args);
    let reports = if args.netns {
        run.transport = "zenoh-netns";
        run.link = format!(
            "Zenoh over a veth pair between two network namespaces, both directions shaped by tc tbf from the trace every 0.5 s; {}",
            if latency_ms > 0.0 {
                format!("a delay line in a third namespace adds {latency_ms} ms one way")
            } else {
                "no latency added (veth only)".into()
            }
        );
        eprintln!("link: {}", run.link);
        let opts = NetnsBenchOptions {
            prefix: lop_runtime::netns::process_prefix("lopb"),
            latency: Duration::from_secs_f64(latency_ms / 1e3),
            port: args.edge_port,
            edge_program: std::env::current_exe().context("locating the lop executable")?,
            edge_args: vec!["bench-edge".into(), "--config".into()],
            edge_threads: Some(threads.unwrap_or(1)),
            ready_timeout: Duration::from_secs(600),
            interrupted: Some(lop_runtime::netns::interrupt_flag()?),
        };
        let (reports, summary) = lop_runtime::bench::run_netns(cfg, &opts, progress).context("benchmark in network namespaces")?;
        run.netns = Some(summary);
        reports
    } else if transport == Transport::Zenoh {
        run.transport = "zenoh";
        run.link = "Zenoh over loopback (127.0.0.1), UNSHAPED: the trace only selects the plans".into();
        eprintln!("link: {}", run.link);
        let (reports, counts) = runtime()?.block_on(lop_runtime::bench::run_zenoh_loopback(cfg, progress))?;
        run.edge = Some(counts);
        reports
    } else {
        run.link = format!("in-process link shaped by the trace, {latency_ms} ms one way");
        runtime()?.block_on(lop_runtime::bench::run_in_process(cfg, progress))?
    };
    Ok(reports)
}

/// With `--verbose`, a line on stderr per inference: its time, bucket, bytes, each side's
/// compute and what its result holds.
fn progress_printer(args: &BenchArgs) -> impl Fn(&str, usize, &lop_runtime::client::InferenceStats, &[tch::Tensor]) {
    let verbose = args.verbose;
    let task = args.model.task.clone();
    move |m: &str, i: usize, s: &lop_runtime::client::InferenceStats, outputs: &[tch::Tensor]| {
        if verbose {
            // What the frame's result holds (detections, voxels), when the model has a task.
            let result = match (&task, outputs) {
                (Some(t), [out]) => t.summary(out, 3).map(|s| format!("  {s}")).unwrap_or_default(),
                _ => String::new(),
            };
            // Where the time went: each side's compute (the server's as the edge reports it).
            let server = s.server_compute_s.map(|c| format!("  server {:6.1} ms", c * 1e3)).unwrap_or_default();
            eprintln!(
                "{m:>15} #{i:<3} {:8.1} ms  bucket {:>4.1}  up {:>8} B  down {:>8} B  robot {:6.1} ms{server}{}{result}",
                s.total_s * 1e3,
                s.bucket_mb_s,
                s.bytes_up,
                s.bytes_down,
                s.robot_compute_s * 1e3,
                if s.fallback { "  FALLBACK" } else { "" }
            );
        }
    }
}

/// Reports the detection rows that agreed at another position, and refuses outputs that differ
/// from the unsplit model's.
pub(super) fn check_outputs(reports: &std::collections::BTreeMap<String, MethodReport>) -> anyhow::Result<()> {
    let worst = reports.values().map(|r| r.max_rel_err).fold(0.0, f64::max);
    let reordered: usize = reports.values().map(|r| r.reordered_rows).sum();
    if reordered > 0 {
        eprintln!("{reordered} detection rows agreed with the unsplit model's at another position (near-tied scores)");
    }
    anyhow::ensure!(
        reports.values().all(|r| r.outputs_agree),
        "outputs differ from the unsplit model: relative error {worst:e} (tolerance {})",
        lop::exec::Tolerance::OTHER_RUNTIME.describe()
    );
    Ok(())
}

/// How a run went besides the methods' reports.
pub(super) struct Run {
    pub(super) transport: &'static str,
    pub(super) link: String,
    pub(super) latency_ms: f64,
    pub(super) netns: Option<NetnsSummary>,
    pub(super) edge: Option<EdgeCounts>,
    /// Which deployment the run emulated.
    pub(super) scenario: scenario::Scenario,
    /// [`scenario::Scenario::describe`] of it.
    pub(super) scenario_line: String,
}

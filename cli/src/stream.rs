//! `lop stream`: one robot streaming frames into a running edge at a camera's rate, a JSON line
//! per frame on stdout. An operator's load generator (how does my edge serve N robots at 30 fps?)
//! and the robot process of the edge's stall test (`edge_server/tests/stall.rs`), which stops one
//! such process with SIGSTOP beside others and reads their lines.
//!
//! Frames are captured on the camera's clock. A frame whose capture time has passed while the
//! robot was busy (or stopped) is skipped and counted, as a camera driver's one-frame mailbox
//! replaces an unread frame: the robot then answers the newest frame, never a backlog. Every
//! frame taken is answered, split with the edge or, marked, by the robot alone, and compared with
//! the unsplit model's output under the one comparison rule ([`lop::exec::Tolerance::SPLIT`]).

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use lop::planner::table::ScheduleTable;
use lop_runtime::client::{ClientOptions, RobotClient};
use lop_runtime::exec::Worker;
use lop_runtime::zenoh_link::ZenohConfig;
use lop_runtime::zenoh_service::ZenohConnector;
use serde::Serialize;

use crate::ModelArgs;

/// Arguments of `lop stream`.
#[derive(Debug, clap::Args)]
pub struct StreamArgs {
    /// The model, as the edge serves it (its content hash must match).
    #[command(flatten)]
    pub model: ModelArgs,
    /// The edge's Zenoh endpoint, e.g. `tcp/127.0.0.1:7447`.
    #[arg(long)]
    pub connect: String,
    /// This robot's id (each streaming robot its own).
    #[arg(long)]
    pub robot_id: String,
    /// The model's id in the edge's configuration (`models[].id`).
    #[arg(long)]
    pub model_id: String,
    /// The schedule table the edge serves for this robot (`lop plan --out`, or the edge's table
    /// cache).
    #[arg(long)]
    pub table: PathBuf,
    /// Frames per second.
    #[arg(long, default_value_t = 30.0)]
    pub fps: f64,
    /// Frames captured, then the command ends (answered or skipped, each counted).
    #[arg(long, default_value_t = 300)]
    pub frames: u32,
    /// The link bandwidth the robot assumes, MB/s: picks the table's bucket.
    #[arg(long, default_value_t = 30.0)]
    pub bandwidth: f64,
    /// `lop` or a baseline method of the table.
    #[arg(long, default_value = "lop")]
    pub method: String,
    /// Seed of the synthetic frame.
    #[arg(long, default_value_t = 13)]
    pub seed: u64,
    /// How long to wait for the edge's Welcome, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub hello_timeout: f64,
}

/// One answered frame, as printed.
#[derive(Debug, Serialize)]
struct FrameLine<'a> {
    frame: u32,
    /// Seconds from the stream's start to the frame's capture.
    captured_s: f64,
    latency_ms: f64,
    split: bool,
    exact: bool,
    fallback_reason: Option<&'a str>,
    /// Frames skipped just before this one (their capture time passed while the robot was busy).
    skipped_before: u32,
}

/// The closing line.
#[derive(Debug, Serialize)]
struct Summary {
    summary: bool,
    answered: u32,
    split: u32,
    inexact: u32,
    skipped: u32,
    /// Frames skipped after the last answered one: no frame line carries them, so that
    /// `skipped` is the lines' `skipped_before` plus this.
    skipped_at_end: u32,
}

/// Streams, then prints the summary. Exit code 0, or 1 if an answer was not exact.
///
/// # Errors
/// A bad model, table, endpoint or rate; engine failures.
pub fn run(args: &StreamArgs) -> anyhow::Result<i32> {
    anyhow::ensure!((0.01..=1000.0).contains(&args.fps), "--fps {}: must be in [0.01, 1000]", args.fps);
    anyhow::ensure!((0.001..=3600.0).contains(&args.hello_timeout), "--hello-timeout {}: must be in [0.001, 3600] s", args.hello_timeout);
    let table = ScheduleTable::load(&args.table).with_context(|| format!("reading the schedule table {}", args.table.display()))?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting tokio")?;
    rt.block_on(stream(args, table))
}

async fn stream(args: &StreamArgs, table: ScheduleTable) -> anyhow::Result<i32> {
    let graph = args.model.load()?;
    let inputs = lop::exec::synthetic_inputs(&graph, args.seed).context("making the synthetic frame")?;
    let whole = lop::exec::run_whole(&graph, &inputs).context("running the unsplit model for the reference")?.outputs;
    let (worker, loaded) =
        Worker::spawn(&format!("{}-model", args.robot_id), move || Ok(graph)).await.context("starting the model's thread")?;
    let session = ZenohConfig::client(vec![args.connect.clone()])
        .open()
        .await
        .with_context(|| format!("opening a Zenoh client to {}", args.connect))?;
    let mut opts = ClientOptions::new(&args.robot_id, &args.model_id);
    opts.method.clone_from(&args.method);
    opts.hello_timeout = Duration::from_secs_f64(args.hello_timeout);
    opts.retry_interval = Duration::from_millis(100);
    let connector = ZenohConnector::new(session.clone(), &args.robot_id);
    let mut client =
        RobotClient::new(connector, opts, worker, loaded.meta, &loaded.hash, table).await.context("preparing the robot client")?;
    if !client.connected() {
        tracing::warn!(error = ?client.last_connect_error(), "not connected to the edge at start: answering alone until it is");
    }
    let period = Duration::from_secs_f64(1.0 / args.fps);
    let start = Instant::now();
    let (mut summary, mut skipped_before) =
        (Summary { summary: true, answered: 0, split: 0, inexact: 0, skipped: 0, skipped_at_end: 0 }, 0u32);
    let mut out = std::io::stdout().lock();
    let mut k = 0u32;
    while k < args.frames {
        let captured = start + period * k;
        // A frame whose successor is already due was replaced before the robot could take it.
        if Instant::now() >= captured + period {
            (k, skipped_before, summary.skipped) = (k + 1, skipped_before + 1, summary.skipped + 1);
            continue;
        }
        tokio::time::sleep_until(captured.into()).await;
        let r = client.infer(inputs.iter().map(tch::Tensor::shallow_clone).collect(), args.bandwidth).await.context("inference")?;
        let agreement = lop::exec::agree_all(&r.outputs, &whole, lop::exec::Tolerance::SPLIT).context("comparing with the unsplit run")?;
        let line = FrameLine {
            frame: k,
            captured_s: captured.duration_since(start).as_secs_f64(),
            latency_ms: captured.elapsed().as_secs_f64() * 1e3,
            split: !r.stats.fallback,
            exact: agreement.within,
            fallback_reason: r.stats.fallback_reason.as_deref(),
            skipped_before,
        };
        summary.answered += 1;
        summary.split += u32::from(line.split);
        summary.inexact += u32::from(!line.exact);
        skipped_before = 0;
        writeln!(out, "{}", serde_json::to_string(&line)?).and_then(|()| out.flush()).context("writing to stdout")?;
        k += 1;
    }
    summary.skipped_at_end = skipped_before;
    writeln!(out, "{}", serde_json::to_string(&summary)?).and_then(|()| out.flush()).context("writing to stdout")?;
    drop(client);
    session.close().await.map_err(|e| anyhow::anyhow!("closing the Zenoh session: {e}"))?;
    Ok(i32::from(summary.inexact > 0))
}

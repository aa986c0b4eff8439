//! Every method of a benchmark in turn, whatever the transport: the robot's worker, samples and
//! table are prepared once, then each method gets a fresh connector and robot client, its
//! warm-up, its timed requests and its report. The transports' runs (in-process, Zenoh
//! loopback, netns) differ only in the connectors they hand to [`run_methods`].

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::config::{BenchConfig, Progress, robot_id};
use super::report::{MethodReport, modelled_energy};
use super::samples::{Sample, robot_worker};
use super::steady::calibration_ms;
use super::tally::Tally;
use super::yardsticks::{BucketYardsticks, table};
use crate::client::{ClientOptions, Connector, RobotClient};
use crate::error::{Error, Result};

/// Runs every method through connectors made by `connect(method)` (one fresh link per method, so
/// that each replays the trace from its start).
///
/// # Errors
/// As [`run_in_process`](super::run_in_process).
pub async fn run_with<C: Connector>(
    cfg: &BenchConfig,
    connect: impl Fn(&str) -> C,
    progress: &mut Progress<'_>,
) -> Result<BTreeMap<String, MethodReport>> {
    run_methods(cfg, &mut |m| Ok(connect(m)), progress).await
}

/// The robot client's options for `method` (its own robot id, the emulated robot's dilation
/// and pacing, the plan its bucket's simulation priced).
pub(super) fn client_options(cfg: &BenchConfig, method: &str) -> ClientOptions {
    let mut opts = ClientOptions::new(&robot_id(method), &cfg.model_id);
    opts.method = method.to_string();
    opts.dilation = cfg.dilation;
    opts.paced = cfg.paced && cfg.dilation > 1.0;
    opts.robot_profile = Some(cfg.robot.clone());
    opts.input_wire = cfg.input_wire;
    opts.hello_timeout = Duration::from_secs(120);
    opts.deadline_slack = cfg.deadline_slack;
    // Each bucket runs the plan its simulation priced.
    opts.follow_frame_ratio = false;
    opts
}

/// Every method in turn: a fresh connector and client per method, `cfg.requests` inferences,
/// the bandwidth estimate read from the trace at the time since the method started.
pub(super) async fn run_methods<C: Connector>(
    cfg: &BenchConfig,
    connect: &mut dyn FnMut(&str) -> Result<C>,
    progress: &mut Progress<'_>,
) -> Result<BTreeMap<String, MethodReport>> {
    if cfg.requests == 0 {
        return Err(Error::InvalidConfig { what: "requests must be at least 1".into() });
    }
    let (mut worker, loaded, samples) = robot_worker(cfg).await?;
    let (table, marks) = table(cfg, &worker).await?;
    let mut out = BTreeMap::new();
    for method in &cfg.methods {
        let opts = client_options(cfg, method);
        let mut client = RobotClient::new(connect(method)?, opts, worker, loaded.meta.clone(), &loaded.hash, table.clone()).await?;
        if !client.connected() && method != "robot-only" {
            tracing::warn!(%method, "the edge did not answer; this method will run on the robot alone");
        }
        let report = run_method(cfg, method, &mut client, (&samples, &marks), progress).await?;
        out.insert(method.clone(), report);
        worker = client.into_worker();
    }
    Ok(out)
}

/// One method on its client: untimed warm-up requests, the calibration kernel, `cfg.requests`
/// timed requests over the trace (each on the next sample, in the trace's bucket at the time
/// since the method started), the calibration kernel again.
async fn run_method<C: Connector>(
    cfg: &BenchConfig,
    method: &str,
    client: &mut RobotClient<C>,
    (samples, marks): (&[Sample], &[BucketYardsticks]),
    progress: &mut Progress<'_>,
) -> Result<MethodReport> {
    // Untimed: first runs of each plan allocate and prepare kernels (in the trace's first
    // bucket, where the timed requests start).
    let first_bucket = cfg.trace.rate_mbps(Duration::ZERO) / 8.0 / cfg.spec.bandwidth_scale;
    for w in 0..cfg.warmup {
        let sample = &samples[w % samples.len()];
        client.infer_camera(sample.inputs(), sample.camera.clone(), first_bucket).await?;
    }
    // A warm-up that missed its deadline while kernels were prepared does not make the timed
    // requests run alone.
    client.forget_silence();
    let before_ms = calibration_ms(client.worker()).await?;
    let epoch = Instant::now();
    let mut tally = Tally::new();
    for i in 0..cfg.requests {
        let rate = cfg.trace.rate_mbps(epoch.elapsed());
        let bucket_units = rate / 8.0 / cfg.spec.bandwidth_scale;
        let sample = &samples[i % samples.len()];
        let r = client.infer_camera(sample.inputs(), sample.camera.clone(), bucket_units).await?;
        tally.err.check(&r.outputs, sample.reference(r.stats.frame_coded))?;
        progress(method, i, &r.stats, &r.outputs);
        let e = modelled_energy(&cfg.power, &r.stats, rate);
        tally.add(method, marks, r.stats, e);
        if !cfg.gap.is_zero() {
            tokio::time::sleep(cfg.gap).await;
        }
    }
    let after_ms = calibration_ms(client.worker()).await?;
    let dropped = client.dropped().total();
    Ok(tally.report(cfg, method, (before_ms, after_ms), dropped))
}

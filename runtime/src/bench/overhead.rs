//! The runtime's own cost ([`run_overhead`], [`OverheadReport`]): on unshaped loopback Zenoh, a
//! bare forward of the whole model, a raw ping-pong of the input and output bytes
//! ([`PingPong`]), and server-only through the runtime, interleaved; the ratio says what the
//! runtime adds to the forward and the transfer.

use std::time::Instant;

use lop::model::LoadOptions;
use tch::Tensor;

use super::config::{BenchConfig, robot_id};
use super::edge_side::{ZenohEdge, free_port, start_edge};
use super::methods::client_options;
use super::ping_pong::PingPong;
use super::report::{Outputs, median};
use super::samples::robot_worker;
use super::yardsticks::table;
use crate::client::RobotClient;
use crate::error::{Error, Result};
use crate::exec::{InputWire, Worker};
use crate::zenoh_link::ZenohConfig;
use crate::zenoh_service::ZenohConnector;

/// The runtime's own cost on unshaped loopback Zenoh (see [`run_overhead`]).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct OverheadReport {
    /// Timed repetitions of each measurement.
    pub requests: usize,
    /// (a) A bare libtorch forward of the whole model (`lop::exec::run_whole`), median, ms.
    pub forward_ms: f64,
    /// (b) Sending the raw input bytes one way and the output bytes back over the same Zenoh
    /// sessions (a ping-pong), median, ms.
    pub transfer_ms: f64,
    /// Raw input bytes (as they cross the link: uint8 or float32).
    pub input_bytes: usize,
    /// Raw output bytes.
    pub output_bytes: usize,
    /// (c) Server-only through the runtime (robot client, Zenoh, edge service), mean, ms.
    pub runtime_mean_ms: f64,
    /// (c), median, ms.
    pub runtime_p50_ms: f64,
    /// The edge's compute time inside (c) (from its Done frames), median, ms; `None` when no
    /// inference of (c) had it (a Done that trails the last band is waited for only a moment
    /// after the robot has its outputs).
    pub server_compute_ms: Option<f64>,
    /// How many of (c)'s inferences reported the edge's compute time.
    pub server_compute_reported: usize,
    /// `runtime_p50_ms / (forward_ms + transfer_ms)`.
    pub ratio: f64,
    /// `runtime_mean_ms / (forward_ms + transfer_ms)`.
    pub ratio_mean: f64,
    /// Inferences of (c) the robot finished alone (should be 0).
    pub fallbacks: usize,
    /// Worst relative error of (c)'s outputs against the unsplit model.
    pub max_rel_err: f64,
    /// Whether every output agreed with the unsplit model's
    /// ([`MethodReport::outputs_agree`](super::MethodReport::outputs_agree)).
    pub outputs_agree: bool,
}

/// Measures the runtime's own cost with the link unshaped (Zenoh over loopback, edge in this
/// process): (a) a bare forward of the whole model, (b) a ping-pong of the raw input and output
/// bytes over the same Zenoh sessions, (c) server-only through the runtime; `cfg.requests`
/// timed repetitions of each, interleaved so that drifting machine load hits all three alike,
/// after two untimed warm-up rounds.
///
/// # Errors
/// As [`run_zenoh_loopback`](super::run_zenoh_loopback).
pub async fn run_overhead(cfg: &BenchConfig) -> Result<OverheadReport> {
    if cfg.requests == 0 {
        return Err(Error::InvalidConfig { what: "requests must be at least 1".into() });
    }
    let endpoint = format!("tcp/127.0.0.1:{}", free_port()?);
    let edge = ZenohEdge::start(start_edge(cfg).await?, &endpoint).await?;
    let robot = ZenohConfig::client(vec![endpoint]).open().await?;
    let (worker, loaded, samples) = robot_worker(cfg).await?;
    let (inputs, whole) = (samples[0].inputs(), samples[0].reference(false).iter().map(|t| t.shallow_clone()).collect::<Vec<_>>());
    let (table, _) = table(cfg, &worker).await?;
    // (a) runs on its own model copy, like the edge's replica.
    let (source, load) = (cfg.source.clone(), LoadOptions { layout: cfg.server.layout, ..cfg.load.clone() });
    let (bare, _) = Worker::spawn("bare", move || lop::model::load(&source, &load)).await?;
    let input_bytes: usize =
        inputs.iter().map(|t| t.numel() * if cfg.input_wire == InputWire::F32 { 4 } else { t.kind().elt_size_in_bytes() }).sum();
    let output_bytes: usize = whole.iter().map(|t| t.numel() * t.kind().elt_size_in_bytes()).sum();
    let pp = PingPong::new(&robot, &edge.session, input_bytes, output_bytes).await?;
    let mut client = RobotClient::new(
        ZenohConnector::new(robot.clone(), &robot_id("server-only")),
        client_options(cfg, "server-only"),
        worker,
        loaded.meta,
        &loaded.hash,
        table,
    )
    .await?;
    if !client.connected() {
        return Err(Error::Protocol("the edge did not answer over loopback Zenoh".into()));
    }
    let timings = measure(cfg.requests, (&bare, &pp, &mut client), (&inputs, &whole)).await?;
    drop(client);
    drop(pp);
    if let Err(e) = robot.close().await {
        tracing::debug!(error = %e, "closing the robot's Zenoh session");
    }
    edge.close().await;
    Ok(timings.report(cfg.requests, (input_bytes, output_bytes)))
}

/// The timed repetitions of the three measurements, ms, and what (c) returned.
struct Timings {
    fwd: Vec<f64>,
    xfer: Vec<f64>,
    rt: Vec<f64>,
    server: Vec<f64>,
    fallbacks: usize,
    err: Outputs,
}

impl Timings {
    /// The report of `requests` repetitions of inputs and outputs of these raw sizes.
    fn report(self, requests: usize, (input_bytes, output_bytes): (usize, usize)) -> OverheadReport {
        let (forward_ms, transfer_ms) = (median(self.fwd), median(self.xfer));
        let runtime_mean_ms = self.rt.iter().sum::<f64>() / self.rt.len().max(1) as f64;
        let runtime_p50_ms = median(self.rt);
        let server = self.server;
        OverheadReport {
            requests,
            forward_ms,
            transfer_ms,
            input_bytes,
            output_bytes,
            runtime_mean_ms,
            runtime_p50_ms,
            server_compute_reported: server.len(),
            server_compute_ms: (!server.is_empty()).then(|| median(server)),
            ratio: runtime_p50_ms / (forward_ms + transfer_ms),
            ratio_mean: runtime_mean_ms / (forward_ms + transfer_ms),
            fallbacks: self.fallbacks,
            max_rel_err: self.err.max_rel_err,
            outputs_agree: self.err.agree,
        }
    }
}

/// `requests` timed rounds of (a) a bare forward on `bare`, (b) a ping-pong on `pp` and (c) an
/// inference through `client`, after two untimed ones; (c)'s outputs are checked against `whole`
/// in every round.
async fn measure(
    requests: usize,
    (bare, pp, client): (&Worker, &PingPong, &mut RobotClient<ZenohConnector>),
    (inputs, whole): (&[Tensor], &[Tensor]),
) -> Result<Timings> {
    let mut t = Timings { fwd: Vec::new(), xfer: Vec::new(), rt: Vec::new(), server: Vec::new(), fallbacks: 0, err: Outputs::new() };
    for i in 0..requests + 2 {
        let a = bare_forward(bare, inputs).await?;
        let b = pp.round_trip().await?;
        let r = client.infer(inputs.iter().map(|t| t.shallow_clone()).collect(), f64::MAX).await?;
        t.err.check(&r.outputs, whole)?;
        if i < 2 {
            continue;
        }
        t.fallbacks += usize::from(r.stats.fallback);
        t.fwd.push(a * 1e3);
        t.xfer.push(b * 1e3);
        t.rt.push(r.stats.total_s * 1e3);
        if let Some(s) = r.stats.server_compute_s {
            t.server.push(s * 1e3);
        }
    }
    Ok(t)
}

/// Seconds of one forward of the whole model on `bare`'s thread.
async fn bare_forward(bare: &Worker, inputs: &[Tensor]) -> Result<f64> {
    let x: Vec<Tensor> = inputs.iter().map(|t| t.shallow_clone()).collect();
    let s = bare
        .call(move |g| -> lop::Result<f64> {
            let t = Instant::now();
            let out = lop::exec::run_whole(g, &x)?;
            let s = t.elapsed().as_secs_f64();
            drop(out);
            Ok(s)
        })
        .await??;
    Ok(s)
}

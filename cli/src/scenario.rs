//! Which deployment `lop bench` emulates on this machine: how the trace's link and its latency
//! are scaled against this CPU's compute (issue 59).
//!
//! - **auto** (the default): the link is scaled so that the raw input, as float32 at the trace's
//!   mean rate, takes 0.44x the robot-only compute (the paper's VGG19 indoor regime). On this
//!   CPU a detector takes about 130 ms where a server GPU takes a few, so a JPEG's upload then
//!   stands for a Wi-Fi of several hundred Mbit/s beside a GPU.
//! - **a fixed scale** (`--bandwidth-scale F`): the trace times F.
//! - **realistic** (`--server-real-ms MS`): the user states the server GPU's real time for the
//!   model. This machine plays the server at its own speed, `dilation` = (this CPU's time for the
//!   model) / MS times slower than the real one, so the whole deployment runs slowed by that
//!   factor: the trace is read as real Wi-Fi and divided by it, the stated latency is multiplied
//!   by it, and the robot stays `--dilation` times slower than the server (5x for a Jetson and a
//!   server both on TensorRT, 20x for a Jetson on PyTorch). Frame coding runs at this CPU's speed
//!   on both sides, not slowed: the scenario says so, and it favours no method over another,
//!   since every method codes the same frames.

use lop::Plan;
use lop::profile::Profile;
use lop::sim::{SimConfig, Simulator};
use lop_runtime::trace::Trace;

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScenarioRequest {
    /// `--bandwidth-scale auto`.
    Auto,
    /// `--bandwidth-scale F`.
    Scale(f64),
    /// `--server-real-ms MS`.
    Realistic {
        /// The server GPU's real time for the model, milliseconds.
        server_real_ms: f64,
    },
}

/// The scaling a run uses, and how to say it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Scenario {
    /// `auto`, `scale` or `realistic`.
    pub kind: &'static str,
    /// The trace is multiplied by this.
    pub bandwidth_scale: f64,
    /// One-way latency on the emulated link, milliseconds.
    pub latency_ms: f64,
    /// Realistic only: the server's real time as stated, this CPU's, and their ratio.
    pub server_real_ms: Option<f64>,
    /// Realistic only: this CPU's time for the whole model on the server profile, milliseconds.
    pub server_cpu_ms: Option<f64>,
    /// Realistic only: how much slower than real the emulation runs.
    pub time_dilation: Option<f64>,
    /// The robot's slowdown relative to the server.
    pub robot_vs_server: f64,
}

/// The robot-only plan's simulated time, seconds: what `auto` scales the link against.
fn robot_only_s(graph: &lop::Graph, robot: &Profile, server: &Profile) -> anyhow::Result<f64> {
    let sim = Simulator::new(graph, robot, server, SimConfig::default())?;
    Ok(sim.cost(&Plan::robot_only(graph, 8))?.makespan_s)
}

/// Resolves `request` against the profiles and the trace. `latency_ms` is the run's one-way
/// latency as given (read as real in the realistic scenario); `robot_dilation` is `--dilation`.
///
/// # Errors
/// A model whose compute or input cannot set a scale, or a stated time that is not positive.
pub fn resolve(
    request: ScenarioRequest,
    graph: &lop::Graph,
    robot: &Profile,
    server: &Profile,
    trace: &Trace,
    latency_ms: f64,
    robot_dilation: f64,
) -> anyhow::Result<Scenario> {
    let base = Scenario {
        kind: "scale",
        bandwidth_scale: 1.0,
        latency_ms,
        server_real_ms: None,
        server_cpu_ms: None,
        time_dilation: None,
        robot_vs_server: robot_dilation,
    };
    match request {
        ScenarioRequest::Scale(f) => Ok(Scenario { bandwidth_scale: f, ..base }),
        ScenarioRequest::Auto => {
            let t = robot_only_s(graph, robot, server)?;
            let bytes: usize = graph.inputs().iter().map(|&i| graph.nodes[i].info.numel() * 4).sum();
            anyhow::ensure!(t > 0.0 && bytes > 0 && trace.mean_mbps() > 0.0, "cannot pick a bandwidth scale");
            Ok(Scenario { kind: "auto", bandwidth_scale: bytes as f64 * 8.0 / (trace.mean_mbps() * 1e6 * 0.44 * t), ..base })
        }
        ScenarioRequest::Realistic { server_real_ms } => {
            anyhow::ensure!(server_real_ms.is_finite() && server_real_ms > 0.0, "--server-real-ms {server_real_ms} must be positive");
            let cpu_ms = server.whole_model_s() * 1e3;
            anyhow::ensure!(cpu_ms > 0.0, "the server profile prices the model at no time: cannot dilate");
            let dilation = cpu_ms / server_real_ms;
            Ok(Scenario {
                kind: "realistic",
                bandwidth_scale: 1.0 / dilation,
                latency_ms: latency_ms * dilation,
                server_real_ms: Some(server_real_ms),
                server_cpu_ms: Some(cpu_ms),
                time_dilation: Some(dilation),
                ..base
            })
        }
    }
}

impl Scenario {
    /// One line for stderr: which scenario ran and what it did to the trace.
    pub fn describe(&self, trace: &Trace) -> String {
        let link = format!("trace mean {:.1} Mbit/s -> {:.2} Mbit/s", trace.mean_mbps(), trace.mean_mbps() * self.bandwidth_scale);
        match (self.time_dilation, self.server_real_ms, self.server_cpu_ms) {
            (Some(d), Some(real), Some(cpu)) => format!(
                "scenario realistic: the server takes {real} ms on its GPU and {cpu:.1} ms here, so the deployment runs {d:.1}x slowed: \
                 the trace as real Wi-Fi over {d:.1} ({link}), latency {:.2} ms real -> {:.1} ms, the robot {}x slower than the server; \
                 frame coding runs at this CPU's speed, not slowed",
                self.latency_ms / d,
                self.latency_ms,
                self.robot_vs_server
            ),
            _ => format!(
                "scenario {}: bandwidth scale {:.4} ({link}), the robot {}x slower than this machine",
                self.kind, self.bandwidth_scale, self.robot_vs_server
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_realistic_scenario_slows_the_link_and_stretches_latency_by_the_servers_dilation() {
        let graph = lop::zoo::build(lop::zoo::names()[0]).expect("zoo model");
        let (robot, server) = lop::profile::SYNTHETIC.pair(&graph).expect("synthetic");
        let trace = Trace::constant(80.0).expect("trace");
        let cpu_ms = server.whole_model_s() * 1e3;
        let real = cpu_ms / 25.0;
        let s = resolve(ScenarioRequest::Realistic { server_real_ms: real }, &graph, &robot, &server, &trace, 2.0, 5.0).expect("resolves");
        let d = s.time_dilation.expect("dilation");
        assert!((d - 25.0).abs() < 1e-9, "{d}");
        assert!((s.bandwidth_scale - 1.0 / 25.0).abs() < 1e-12);
        assert!((s.latency_ms - 50.0).abs() < 1e-9);
        assert_eq!(s.robot_vs_server, 5.0);
        assert!(s.describe(&trace).contains("realistic"));
        // The other scenarios leave latency alone.
        let fixed = resolve(ScenarioRequest::Scale(0.5), &graph, &robot, &server, &trace, 2.0, 5.0).expect("fixed");
        assert_eq!((fixed.bandwidth_scale, fixed.latency_ms, fixed.kind), (0.5, 2.0, "scale"));
        assert!(resolve(ScenarioRequest::Realistic { server_real_ms: 0.0 }, &graph, &robot, &server, &trace, 2.0, 5.0).is_err());
    }
}

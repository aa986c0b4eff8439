//! What one inference of a model costs in a fleet, summarised from measured profiles: the few
//! numbers a router and the fleet simulator need, instead of the whole graph.

use crate::baseline;
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::plan::Side;
use crate::profile::Profile;
use crate::sim::{SimConfig, Simulator};

/// One model's price list, on the profiled robot and the profiled server ("speed 1").
///
/// The offloaded inference is priced as the server pipelining bands while the frame arrives
/// (DESIGN.md section 1): it ends no earlier than the whole frame's upload plus the server's
/// [`tail_s`](ModelCost::tail_s), and no earlier than the server's whole work
/// [`server_s`](ModelCost::server_s) after the server is free for it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelCost {
    /// The model's name (what robots ask for).
    pub name: String,
    /// Bytes of one input frame on the wire.
    pub input_bytes: f64,
    /// Bytes of the result that returns (after post-processing when the model has a task).
    pub output_bytes: f64,
    /// Seconds the profiled server computes for one whole inference: its busy time.
    pub server_s: f64,
    /// Server seconds of the rows that depend on the frame's last row: the part of its work
    /// that cannot overlap the upload.
    pub tail_s: f64,
    /// Seconds the profiled robot takes for the whole model alone.
    pub robot_s: f64,
}

impl ModelCost {
    /// Summarises `graph` under the two profiles (`config` gives the wire's input pricing).
    ///
    /// # Errors
    /// The simulator's errors (profiles that do not fit the graph); [`Error::Input`] for a
    /// graph with more than one input or whose rows do not pipeline (no tail is defined).
    pub fn derive(name: &str, graph: &Graph, robot: &Profile, server: &Profile, config: SimConfig) -> Result<ModelCost> {
        let sim = Simulator::new(graph, robot, server, config)?;
        let terms = sim.server_pipeline_terms().ok_or_else(|| {
            Error::Input(format!("{name}: no pipelining tail (a graph with one input and row-suffix dependencies is needed)"))
        })?;
        let server_s = (0..graph.nodes.len())
            .filter(|&id| graph.is_op(id) && sim.is_live(id))
            .map(|id| sim.op_time(Side::Server, id, graph.nodes[id].info.rows().max(1)))
            .sum();
        let robot_s =
            baseline::robot_only(&sim, 1)?.cost.ok_or_else(|| Error::Input(format!("{name}: robot-only is infeasible")))?.makespan_s;
        let cost = ModelCost {
            name: name.to_string(),
            input_bytes: terms.input_bytes,
            output_bytes: terms.output_bytes,
            server_s,
            tail_s: terms.tail_s,
            robot_s,
        };
        cost.check()?;
        Ok(cost)
    }

    /// Checks that every figure is finite and non-negative, the tail is within the whole work,
    /// and the name is a model id (the rules of `lop_msgs::validate_id`).
    ///
    /// # Errors
    /// [`Error::Input`] naming the model and the bad figure.
    pub fn check(&self) -> Result<()> {
        let bad = |what: &str, v: f64| Err(Error::Input(format!("model cost '{}': {what} = {v} must be finite and >= 0", self.name)));
        let id_ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.');
        if self.name.is_empty() || self.name.len() > 64 || !self.name.bytes().all(id_ok) {
            return Err(Error::Input(format!(
                "model cost name '{}' must be 1 to 64 ASCII letters, digits, '_', '-' or '.' (a model id)",
                self.name.chars().take(80).collect::<String>()
            )));
        }
        for (what, v) in [
            ("input_bytes", self.input_bytes),
            ("output_bytes", self.output_bytes),
            ("server_s", self.server_s),
            ("tail_s", self.tail_s),
            ("robot_s", self.robot_s),
        ] {
            if !v.is_finite() || v < 0.0 {
                return bad(what, v);
            }
        }
        if self.server_s <= 0.0 || self.robot_s <= 0.0 {
            return Err(Error::Input(format!("model cost '{}': server_s and robot_s must be > 0", self.name)));
        }
        if self.tail_s > self.server_s * (1.0 + 1e-9) {
            return Err(Error::Input(format!(
                "model cost '{}': tail_s {} exceeds the whole work server_s {}",
                self.name, self.tail_s, self.server_s
            )));
        }
        Ok(())
    }

    /// Seconds the uplink holds one frame at `bytes_per_s`.
    pub fn upload_s(&self, bytes_per_s: f64) -> f64 {
        self.input_bytes / bytes_per_s.max(1e-9)
    }

    /// Seconds the downlink holds one result at `bytes_per_s`.
    pub fn download_s(&self, bytes_per_s: f64) -> f64 {
        self.output_bytes / bytes_per_s.max(1e-9)
    }
}

/// When an offloaded inference that starts at `t0` is back on the robot, given when the server
/// can take it up (`server_free`), its speed, the link and the one-way latency. Also returns the
/// server's next free time.
///
/// The server works through its queue one kernel at a time, but it does not sit idle while a
/// frame's bands arrive: it interleaves the bands of every robot it serves. So a request holds
/// the server for its work only (`server_s / speed`, from when the server is free and the first
/// bands have crossed), and it cannot finish before its last row has arrived plus the tail. The
/// result then crosses back.
pub fn offload_finish(cost: &ModelCost, t0: f64, server_free: f64, speed: f64, bytes_per_s: f64, latency_s: f64) -> (f64, f64) {
    let start = server_free.max(t0 + latency_s);
    let free = start + cost.server_s / speed;
    let done = free.max(t0 + latency_s + cost.upload_s(bytes_per_s) + cost.tail_s / speed);
    (done + cost.download_s(bytes_per_s) + latency_s, free)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};
    use crate::ops::{Op, Pool};
    use crate::profile::Fit;
    use crate::sim::Link;

    fn cost() -> ModelCost {
        ModelCost { name: "m".into(), input_bytes: 1e6, output_bytes: 1e3, server_s: 0.010, tail_s: 0.002, robot_s: 0.2 }
    }

    #[test]
    fn an_idle_server_is_bound_by_the_upload_and_the_tail() {
        // 1 MB at 10 MB/s is 100 ms; the 10 ms of work hides behind it except the 2 ms tail.
        let (back, free) = offload_finish(&cost(), 1.0, 0.0, 1.0, 1e7, 0.001);
        let done = 1.0 + 0.001 + 0.1 + 0.002;
        assert!((back - (done + 1e-4 + 0.001)).abs() < 1e-12, "{back}");
        // The server is held for its 10 ms of work only, not while the bands arrive.
        assert!((free - 1.011).abs() < 1e-12, "{free}");
    }

    #[test]
    fn a_busy_server_is_bound_by_its_queue_and_slower_servers_take_longer() {
        // Free only at t = 2: the whole 10 ms of work starts then.
        let (back, free) = offload_finish(&cost(), 1.0, 2.0, 1.0, 1e7, 0.001);
        assert!((free - 2.010).abs() < 1e-12, "{free}");
        assert!((back - (2.010 + 1e-4 + 0.001)).abs() < 1e-12, "{back}");
        let (_, slow) = offload_finish(&cost(), 1.0, 2.0, 0.25, 1e7, 0.001);
        assert!((slow - 2.040).abs() < 1e-12, "{slow}");
    }

    #[test]
    fn derive_sums_the_profiles_and_checks_the_figures() {
        let mut b = GraphBuilder::new("chain");
        let x = b.input("x", vec![1, 1, 16, 4], DType::U8);
        let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.0], std: vec![1.0] }, &[x]).expect("norm");
        let p = b.add("pool", Op::MaxPool(Pool::same_3x3()), &[n]).expect("pool");
        b.output(p);
        let g = b.build().expect("graph");
        let robot = Profile::synthetic(&g, Side::Robot, |_| Fit::new(1e-3, 1e-3)).expect("robot");
        let server = Profile::synthetic(&g, Side::Server, |_| Fit::new(1e-4, 1e-4)).expect("server");
        let config = SimConfig { link: Link::mbytes(1.0, 0.001), ..SimConfig::default() };
        let c = ModelCost::derive("chain", &g, &robot, &server, config).expect("derive");
        // 64 bytes of rows and one band header.
        assert_eq!(c.input_bytes, 64.0 + crate::sim::band_header_bytes(4) as f64);
        // Two ops of 16 rows each on the server.
        assert!((c.server_s - 2.0 * (1e-4 + 16.0 * 1e-4)).abs() < 1e-12, "{}", c.server_s);
        // norm's last row and pool's last 2 rows depend on the input's last row.
        assert!((c.tail_s - ((1e-4 + 1e-4) + (1e-4 + 2e-4))).abs() < 1e-12, "{}", c.tail_s);
        assert!(c.robot_s >= 2.0 * (1e-3 + 16.0 * 1e-3) - 1e-12);
        let mut broken = c.clone();
        broken.tail_s = 1.0;
        assert!(broken.check().expect_err("refused").to_string().contains("exceeds the whole work"));
        broken.tail_s = f64::NAN;
        assert!(broken.check().expect_err("refused").to_string().contains("tail_s"));
    }
}

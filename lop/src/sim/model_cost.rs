//! A model's price list for fleets ([`ModelCost`], `lop_core::cost`), derived from the
//! simulator under measured profiles: the few numbers a router and the fleet simulator need
//! instead of the whole graph.

use lop_core::ModelCost;

use super::{SimConfig, Simulator};
use crate::baseline;
use crate::error::{Error, Result};
use crate::plan::Side;
use crate::profile::Profile;
use lop_core::structure::Structure;

/// `graph`'s price list for fleets ([`ModelCost`]) under the two profiles (`config` gives the
/// wire's input pricing), named `name`.
///
/// # Errors
/// The simulator's errors (profiles that do not fit the graph); [`Error::Input`] for a
/// graph with more than one input or whose rows do not pipeline (no tail is defined).
pub fn model_cost(name: &str, graph: &dyn Structure, robot: &Profile, server: &Profile, config: SimConfig) -> Result<ModelCost> {
    let sim = Simulator::new(graph, robot, server, config)?;
    let terms = sim.server_pipeline_terms().ok_or_else(|| {
        Error::Input(format!("{name}: no pipelining tail (a graph with one input and row-suffix dependencies is needed)"))
    })?;
    let server_s = (0..graph.node_count())
        .filter(|&id| graph.node_is_op(id) && sim.is_live(id))
        .map(|id| sim.op_time(Side::Server, id, graph.node_info(id).rows().max(1)))
        .sum();
    let robot_s = baseline::robot_only(&sim, 1)?.cost.ok_or_else(|| Error::Input(format!("{name}: robot-only is infeasible")))?.makespan_s;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};
    use crate::ops::{Op, Pool};
    use crate::profile::Fit;
    use crate::sim::Link;

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
        let c = model_cost("chain", &g, &robot, &server, config).expect("derive");
        // 64 bytes of rows and one band header.
        assert_eq!(c.input_bytes, 64.0 + super::super::band_header_bytes(4) as f64);
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

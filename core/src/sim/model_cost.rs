//! A model's price list for fleets ([`ModelCost`], `lop_core::cost`), derived from the
//! simulator under measured profiles: the few numbers a router and the fleet simulator need
//! instead of the whole graph.

use crate::ModelCost;

use super::{SimConfig, Simulator};
use crate::baseline;
use crate::error::{Error, Result};
use crate::plan::Side;
use crate::profile::Profile;
use crate::structure::Structure;

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

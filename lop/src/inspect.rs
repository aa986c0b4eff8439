//! Locality statistics of a graph (the paper's Table I).

use crate::graph::Graph;
use crate::ops::OpClass;
use std::collections::BTreeMap;

/// Op counts of a model by locality.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Inspection {
    /// Model name.
    pub model: String,
    /// Computing ops (inputs and constants excluded).
    pub ops: usize,
    /// Ops that can be split into row bands.
    pub local: usize,
    /// Barriers.
    pub global: usize,
    /// Count per locality class.
    pub classes: BTreeMap<OpClass, usize>,
    /// Count per op kind.
    pub kinds: BTreeMap<String, usize>,
    /// Input shapes.
    pub input_shapes: Vec<Vec<usize>>,
    /// Output shapes.
    pub output_shapes: Vec<Vec<usize>>,
    /// Number of weight scalars.
    pub parameters: usize,
}

/// Counts `graph`'s ops by locality class and kind.
pub fn inspect(graph: &Graph) -> Inspection {
    let mut classes = BTreeMap::new();
    let mut kinds = BTreeMap::new();
    let (mut ops, mut local, mut global) = (0, 0, 0);
    for id in 0..graph.nodes.len() {
        if !graph.is_op(id) {
            continue;
        }
        let class = graph.locality(id);
        ops += 1;
        if class.is_local() {
            local += 1;
        } else {
            global += 1;
        }
        *classes.entry(class).or_insert(0) += 1;
        *kinds.entry(graph.nodes[id].op.kind_name().to_string()).or_insert(0) += 1;
    }
    let parameters = graph.nodes.iter().flat_map(|n| n.op.weights()).map(|t| t.numel()).sum();
    Inspection {
        model: graph.name.clone(),
        ops,
        local,
        global,
        classes,
        kinds,
        input_shapes: graph.inputs().iter().map(|&i| graph.nodes[i].info.shape.clone()).collect(),
        output_shapes: graph.outputs.iter().map(|&o| graph.nodes[o].info.shape.clone()).collect(),
        parameters,
    }
}

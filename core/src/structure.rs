//! What plans (and, in time, the simulator and the planner) read of a model: its nodes in
//! topological order, each with a name, its output value and its locality class, without the
//! operators' weights. The engine's graph (`lop::Graph`, whose ops hold libtorch tensors)
//! implements [`Structure`]; so can anything else that knows a model's shape.

use crate::value::ValueInfo;

/// Index of a node in topological order; a node's output value has the same index.
pub type NodeId = usize;

/// Locality class of a node (DESIGN.md section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpClass {
    /// Graph inputs and constants: no computation.
    Source,
    /// Output row i depends on input row i only.
    ElementWise,
    /// Output rows depend on a window of input rows (conv, pools, resize, strided slice).
    BlockWise,
    /// Per-pixel ops over non-row axes (layer norm, linear, softmax over channels, permutes).
    RowWise,
    /// Every output row depends on every input row: a barrier computed on one side.
    Global,
}

/// Locality of one node: its class and whether it can be split.
pub type Locality = OpClass;

impl OpClass {
    /// Whether nodes of this class can be cut into row bands.
    pub fn is_local(self) -> bool {
        matches!(self, OpClass::ElementWise | OpClass::BlockWise | OpClass::RowWise)
    }
}

/// A model's nodes as plans see them. Ids run from 0 to [`Structure::node_count`] - 1 in
/// topological order; every method may panic on an id outside that range.
pub trait Structure {
    /// How many nodes the model has.
    fn node_count(&self) -> usize;
    /// Node `id`'s name (unique within the model).
    fn node_name(&self, id: NodeId) -> &str;
    /// Node `id`'s output value.
    fn node_info(&self, id: NodeId) -> &ValueInfo;
    /// Whether node `id` can be cut into row bands, and of which class.
    fn node_locality(&self, id: NodeId) -> OpClass;
    /// Whether node `id` computes (not a graph input or a constant).
    fn node_is_op(&self, id: NodeId) -> bool;
}

/// A model's structure written out node by node: for tests, and for reading a plan against a
/// model without its weights.
#[derive(Debug, Clone, Default)]
pub struct Listed {
    /// Per node: name, output value, locality class, whether it computes.
    pub nodes: Vec<(String, ValueInfo, OpClass, bool)>,
}

impl Structure for Listed {
    fn node_count(&self) -> usize {
        self.nodes.len()
    }
    fn node_name(&self, id: NodeId) -> &str {
        &self.nodes[id].0
    }
    fn node_info(&self, id: NodeId) -> &ValueInfo {
        &self.nodes[id].1
    }
    fn node_locality(&self, id: NodeId) -> OpClass {
        self.nodes[id].2
    }
    fn node_is_op(&self, id: NodeId) -> bool {
        self.nodes[id].3
    }
}

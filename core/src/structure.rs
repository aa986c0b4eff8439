//! What plans, the simulator, the baselines and the planner read of a model: its nodes in
//! topological order, each with a name, its output value, its inputs, what it is (input,
//! constant, operator, post-processing), its locality class and its footprints (which input rows
//! an output row band reads), and the model's outputs; never the operators' weights. The
//! engine's graph (`lop::Graph`, whose ops hold libtorch tensors) implements [`Structure`]; so
//! can anything else that knows a model's shape ([`Listed`], for tests).

use crate::rows::{Footprint, Rows};
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

/// What a node is, as plans and the simulator tell nodes apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// A graph input: the robot holds it whole before anything is computed.
    Input,
    /// A constant: both sides hold it; never computed, never sent.
    Constant,
    /// An operator of the model.
    Op,
    /// The post-processing stage a task appends (decoding detections, for example).
    Post,
}

impl NodeKind {
    /// Whether nodes of this kind compute (an operator or the post-processing stage).
    pub fn computes(self) -> bool {
        matches!(self, NodeKind::Op | NodeKind::Post)
    }
}

/// A model's nodes as plans, the simulator and the planner see them. Ids run from 0 to
/// [`Structure::node_count`] - 1 in topological order (a node's inputs come before it); every
/// method may panic on an id outside that range.
pub trait Structure: std::fmt::Debug {
    /// How many nodes the model has.
    fn node_count(&self) -> usize;
    /// Node `id`'s name (unique within the model).
    fn node_name(&self, id: NodeId) -> &str;
    /// Node `id`'s output value.
    fn node_info(&self, id: NodeId) -> &ValueInfo;
    /// Node `id`'s inputs, in the operator's order.
    fn node_inputs(&self, id: NodeId) -> &[NodeId];
    /// What node `id` is.
    fn node_kind(&self, id: NodeId) -> NodeKind;
    /// Whether node `id` can be cut into row bands, and of which class.
    fn node_locality(&self, id: NodeId) -> OpClass;
    /// Which rows of node `id`'s input `k` its output rows `rows` need.
    fn footprint(&self, id: NodeId, k: usize, rows: &Rows) -> Footprint;
    /// The model's outputs, in order.
    fn outputs(&self) -> &[NodeId];

    /// Whether node `id` computes (not a graph input or a constant).
    fn node_is_op(&self, id: NodeId) -> bool {
        self.node_kind(id).computes()
    }

    /// Whether node `id` is the post-processing stage.
    fn node_is_post(&self, id: NodeId) -> bool {
        self.node_kind(id) == NodeKind::Post
    }

    /// Node `id`'s name, value, inputs and kind at once.
    fn node(&self, id: NodeId) -> NodeRef<'_> {
        NodeRef { name: self.node_name(id), info: self.node_info(id), inputs: self.node_inputs(id), kind: self.node_kind(id) }
    }

    /// Whether node `id` is a graph input.
    fn node_is_input(&self, id: NodeId) -> bool {
        self.node_kind(id) == NodeKind::Input
    }

    /// For every node, the nodes that consume it (in topological order, without duplicates).
    fn consumers(&self) -> Vec<Vec<NodeId>> {
        let mut out = vec![Vec::new(); self.node_count()];
        for id in 0..self.node_count() {
            for &i in self.node_inputs(id) {
                if out[i].last() != Some(&id) {
                    out[i].push(id);
                }
            }
        }
        out
    }
}

/// One node of a structure, borrowed ([`Structure::node`]).
#[derive(Debug, Clone, Copy)]
pub struct NodeRef<'a> {
    /// The node's name.
    pub name: &'a str,
    /// Its output value.
    pub info: &'a ValueInfo,
    /// Its inputs.
    pub inputs: &'a [NodeId],
    /// What it is.
    pub kind: NodeKind,
}

/// One node of a [`Listed`] structure.
#[derive(Debug, Clone)]
pub struct ListedNode {
    /// The node's name.
    pub name: String,
    /// Its output value.
    pub info: ValueInfo,
    /// Its inputs.
    pub inputs: Vec<NodeId>,
    /// What it is.
    pub kind: NodeKind,
    /// Its locality class.
    pub class: OpClass,
}

/// A model's structure written out node by node, for tests and for reading a plan against a
/// model without its weights. Footprints follow the class alone: a source's input is
/// broadcast, a global node reads its inputs whole, and a local node reads the same rows of its
/// input (clamped to the input's rows), as an element-wise operator does.
#[derive(Debug, Clone, Default)]
pub struct Listed {
    /// The nodes, in topological order.
    pub nodes: Vec<ListedNode>,
    /// The model's outputs.
    pub outputs: Vec<NodeId>,
}

impl Structure for Listed {
    fn node_count(&self) -> usize {
        self.nodes.len()
    }
    fn node_name(&self, id: NodeId) -> &str {
        &self.nodes[id].name
    }
    fn node_info(&self, id: NodeId) -> &ValueInfo {
        &self.nodes[id].info
    }
    fn node_inputs(&self, id: NodeId) -> &[NodeId] {
        &self.nodes[id].inputs
    }
    fn node_kind(&self, id: NodeId) -> NodeKind {
        self.nodes[id].kind
    }
    fn node_locality(&self, id: NodeId) -> OpClass {
        self.nodes[id].class
    }
    fn footprint(&self, id: NodeId, k: usize, rows: &Rows) -> Footprint {
        match self.nodes[id].class {
            OpClass::Source => Footprint::Broadcast,
            OpClass::Global => Footprint::Whole,
            _ => {
                let n = self.nodes[self.nodes[id].inputs[k]].info.rows();
                Footprint::Rows(rows.start.min(n)..rows.end.min(n))
            }
        }
    }
    fn outputs(&self) -> &[NodeId] {
        &self.outputs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::DType;

    /// input `x` [1, 1, 8, 2] -> `a` (local) and `m` (global), both read by `s` (local): a
    /// diamond whose `x` has two consumers and `s` reads two producers.
    fn diamond() -> Listed {
        let info = |rows| ValueInfo::new(vec![1, 1, rows, 2], DType::F32);
        let node =
            |name: &str, rows, inputs: Vec<NodeId>, kind, class| ListedNode { name: name.into(), info: info(rows), inputs, kind, class };
        Listed {
            nodes: vec![
                node("x", 8, vec![], NodeKind::Input, OpClass::Source),
                node("a", 8, vec![0], NodeKind::Op, OpClass::ElementWise),
                node("m", 4, vec![0], NodeKind::Op, OpClass::Global),
                node("s", 4, vec![1, 2], NodeKind::Post, OpClass::ElementWise),
            ],
            outputs: vec![3],
        }
    }

    #[test]
    fn consumers_list_each_reader_once_in_topological_order() {
        let g = diamond();
        assert_eq!(g.consumers(), vec![vec![1, 2], vec![3], vec![3], vec![]]);
        let twice = Listed { nodes: vec![g.nodes[0].clone(), ListedNode { inputs: vec![0, 0], ..g.nodes[1].clone() }], outputs: vec![1] };
        assert_eq!(twice.consumers(), vec![vec![1], vec![]], "a node reading one value twice is one consumer");
    }

    #[test]
    fn kinds_tell_inputs_operators_and_the_post_stage_apart() {
        let g = diamond();
        let computes: Vec<bool> = (0..g.node_count()).map(|id| g.node_is_op(id)).collect();
        assert_eq!(computes, [false, true, true, true]);
        assert!(g.node_is_input(0) && !g.node_is_input(1));
        assert!(g.node_is_post(3) && !g.node_is_post(2));
        let n = g.node(3);
        assert_eq!((n.name, n.inputs, n.kind, n.info.rows()), ("s", &[1, 2][..], NodeKind::Post, 4));
    }

    #[test]
    fn listed_footprints_follow_the_class_and_clamp_to_the_input() {
        let g = diamond();
        assert_eq!(g.footprint(1, 0, &(2..5)), Footprint::Rows(2..5));
        assert_eq!(g.footprint(2, 0, &(0..1)), Footprint::Whole, "a global node reads its input whole");
        assert_eq!(g.footprint(3, 0, &(3..4)), Footprint::Rows(3..4));
        let short = ListedNode { info: ValueInfo::new(vec![1, 1, 4, 2], DType::F32), ..g.nodes[0].clone() };
        let wide = Listed { nodes: vec![short, g.nodes[1].clone()], outputs: vec![1] };
        assert_eq!(wide.footprint(1, 0, &(2..8)), Footprint::Rows(2..4), "rows past a 4-row input are clamped");
    }
}

//! The graph IR: a topologically ordered list of nodes, each producing one tensor.

use crate::error::{Error, Result};
use crate::ops::{Locality, Op};
use crate::rows::Footprint;
use crate::value::LayoutTensor;
use sha2::{Digest, Sha256};
use tch::Device;

pub use crate::value::{DType, Layout, ValueInfo};

/// Index of a node in [`Graph::nodes`]; a node's output value has the same index.
pub use lop_core::structure::{NodeId, NodeKind};

/// One node: an op applied to earlier nodes' outputs.
#[derive(Debug)]
pub struct Node {
    /// Unique, human-readable name (from ONNX or the zoo builder).
    pub name: String,
    /// What it computes.
    pub op: Op,
    /// Producers of its inputs, all earlier in the graph.
    pub inputs: Vec<NodeId>,
    /// Its output value.
    pub info: ValueInfo,
}

/// A model as a topologically ordered DAG. Weights live inside the ops as libtorch tensors.
#[derive(Debug)]
pub struct Graph {
    /// Model name (zoo name or file stem).
    pub name: String,
    /// Nodes in topological order.
    pub nodes: Vec<Node>,
    /// The graph outputs, in order.
    pub outputs: Vec<NodeId>,
}

/// What plans, the simulator and the planner read of the graph (`lop_core::structure`): the
/// nodes' names, values, inputs, kinds, locality classes and footprints, without the weights.
impl lop_core::structure::Structure for Graph {
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
        match self.nodes[id].op {
            Op::Input => NodeKind::Input,
            Op::Constant(_) => NodeKind::Constant,
            Op::Post(_) => NodeKind::Post,
            _ => NodeKind::Op,
        }
    }
    fn node_locality(&self, id: NodeId) -> Locality {
        self.locality(id)
    }
    fn footprint(&self, id: NodeId, k: usize, rows: &crate::rows::Rows) -> Footprint {
        Graph::footprint(self, id, k, rows)
    }
    fn outputs(&self) -> &[NodeId] {
        &self.outputs
    }
}

impl Graph {
    /// The graph's input nodes, in order.
    pub fn inputs(&self) -> Vec<NodeId> {
        self.nodes.iter().enumerate().filter(|(_, n)| matches!(n.op, Op::Input)).map(|(i, _)| i).collect()
    }

    /// Footprint of node `id`'s input `k` for output rows `rows`.
    pub fn footprint(&self, id: NodeId, k: usize, rows: &crate::rows::Rows) -> Footprint {
        let node = &self.nodes[id];
        node.op.footprint(k, rows, &self.nodes[node.inputs[k]].info, &node.info)
    }

    /// Whether node `id` is local (splittable into row bands) and of which class.
    pub fn locality(&self, id: NodeId) -> Locality {
        let node = &self.nodes[id];
        let ins: Vec<&ValueInfo> = node.inputs.iter().map(|&i| &self.nodes[i].info).collect();
        node.op.locality(&ins, &node.info)
    }

    /// Whether a node is a computing op (not an input or a constant).
    pub fn is_op(&self, id: NodeId) -> bool {
        !matches!(self.nodes[id].op, Op::Input | Op::Constant(_))
    }

    /// Whether the graph ends in a post-processing stage ([`Op::Post`], from a `--task`).
    pub fn has_postprocess(&self) -> bool {
        self.nodes.iter().any(|n| matches!(n.op, Op::Post(_)))
    }

    /// Moves every weight to `device`, keeping the graph's [`Layout`].
    ///
    /// # Errors
    /// When libtorch cannot copy a weight (e.g. no CUDA device).
    pub fn to_device(&mut self, device: Device) -> Result<()> {
        let layout = self.layout();
        for n in &mut self.nodes {
            n.op.move_to(device).map_err(|source| Error::Torch { node: n.name.clone(), op: n.op.kind_name(), source })?;
        }
        // The copy keeps strides, but the layout must not depend on it.
        if layout != Layout::Nchw {
            self.set_layout(layout)?;
        }
        Ok(())
    }

    /// Lays every convolution weight out as `layout` says (see [`Layout`]); returns whether the
    /// graph has any weight it applies to (a 2-d or 3-d convolution).
    ///
    /// # Errors
    /// When libtorch cannot copy a weight.
    /// In channels-last, a 2-d float convolution on the CPU also gets its weight prepacked for
    /// oneDNN ([`crate::ops::Conv::packed`]), for inputs of the node's own input shape.
    pub fn set_layout(&mut self, layout: Layout) -> Result<bool> {
        let mut any = false;
        let input_shapes: Vec<Vec<usize>> =
            self.nodes.iter().map(|n| n.inputs.first().map(|&i| self.nodes[i].info.shape.clone()).unwrap_or_default()).collect();
        for (n, input) in self.nodes.iter_mut().zip(&input_shapes) {
            if let Op::Conv(c) = &mut n.op
                && (c.weight.dim() == 4 || c.weight.dim() == 5)
            {
                let torch = |source| Error::Torch { node: n.name.clone(), op: "Conv", source };
                c.weight = layout.apply(&c.weight).map_err(torch)?;
                c.packed = match layout {
                    Layout::ChannelsLast => c.pack(input).map_err(torch)?,
                    Layout::Nchw => None,
                };
                any = true;
            }
        }
        Ok(any)
    }

    /// A copy of the graph whose weights share storage with this one's ([`Op::share`]): another
    /// thread can run it (a tensor is `Send`, not `Sync`, so one graph serves one thread at a
    /// time) while the weights, their packed copies and oneDNN primitives stay in memory once.
    /// It has this graph's content hash and layout.
    pub fn share(&self) -> Graph {
        let nodes = self
            .nodes
            .iter()
            .map(|n| Node { name: n.name.clone(), op: n.op.share(), inputs: n.inputs.clone(), info: n.info.clone() })
            .collect();
        Graph { name: self.name.clone(), nodes, outputs: self.outputs.clone() }
    }

    /// The prepacked convolutions' packing figures summed over the graph ([`crate::ops::PackingStats`]):
    /// shapes met, packed copies kept, and calls that fell to libtorch's plain path (a chunked
    /// run meeting more band shapes or formats than the caps). Zero without packing.
    pub fn packing_stats(&self) -> crate::ops::PackingStats {
        let mut sum = crate::ops::PackingStats::default();
        for st in self.nodes.iter().filter_map(|n| match &n.op {
            Op::Conv(c) => c.packed.as_ref().map(crate::ops::PreparedConv::stats),
            _ => None,
        }) {
            sum.shapes += st.shapes;
            sum.formats += st.formats;
            sum.plain_calls += st.plain_calls;
        }
        sum
    }

    /// The layout of the graph's convolution weights: channels-last when any of them reads as
    /// channels-last ([`Layout::of`]), NCHW otherwise (none does, or there is no convolution).
    pub fn layout(&self) -> Layout {
        self.nodes
            .iter()
            .filter_map(|n| match &n.op {
                Op::Conv(c) => Some(&c.weight),
                _ => None,
            })
            .map(Layout::of)
            .find(|&l| l == Layout::ChannelsLast)
            .unwrap_or_default()
    }

    /// Content hash (sha256, hex) over the structure, attributes and weights: two graphs with the
    /// same hash compute the same function.
    ///
    /// # Errors
    /// When a weight cannot be read back from libtorch.
    pub fn content_hash(&self) -> Result<String> {
        let mut h = Sha256::new();
        for n in &self.nodes {
            h.update(n.op.kind_name().as_bytes());
            h.update(format!("{:?}|{:?}|{:?}|{:?}", n.inputs, n.info.shape, n.info.dtype, n.info.row_axis).as_bytes());
            n.op.hash_into(&mut h).map_err(|source| Error::Torch { node: n.name.clone(), op: n.op.kind_name(), source })?;
        }
        h.update(format!("{:?}", self.outputs).as_bytes());
        Ok(hex::encode(h.finalize()))
    }

    /// Index of the node named `name`.
    pub fn find(&self, name: &str) -> Option<NodeId> {
        self.nodes.iter().position(|n| n.name == name)
    }
}

impl Graph {
    /// This graph with its input `input` replaced by a front end: `front` adds the new input
    /// and its ops to the builder and returns the value that takes the old input's place (a
    /// model's preprocess stage, or the fitting of a camera frame to its input). The other
    /// nodes keep their order, names and ops.
    ///
    /// # Errors
    /// What `front` returns, or a node that no longer infers on the front's value.
    pub fn with_front(self, input: NodeId, front: impl FnOnce(&mut GraphBuilder) -> Result<NodeId>) -> Result<Graph> {
        let mut b = GraphBuilder::new(self.name.clone());
        let first = front(&mut b)?;
        let mut ids: Vec<NodeId> = Vec::with_capacity(self.nodes.len());
        for (i, node) in self.nodes.into_iter().enumerate() {
            if i == input {
                ids.push(first);
                continue;
            }
            let inputs: Vec<NodeId> = node.inputs.iter().map(|&k| ids[k]).collect();
            ids.push(b.add(node.name, node.op, &inputs)?);
        }
        for o in self.outputs {
            b.output(ids[o]);
        }
        b.build()
    }
}

/// Builds a [`Graph`] node by node, inferring and checking every output shape as it goes.
#[derive(Debug)]
pub struct GraphBuilder {
    graph: Graph,
}

impl GraphBuilder {
    /// An empty graph named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        GraphBuilder { graph: Graph { name: name.into(), nodes: Vec::new(), outputs: Vec::new() } }
    }

    /// Adds a graph input of the given shape and dtype.
    pub fn input(&mut self, name: impl Into<String>, shape: Vec<usize>, dtype: DType) -> NodeId {
        let info = ValueInfo::new(shape, dtype);
        self.graph.nodes.push(Node { name: name.into(), op: Op::Input, inputs: vec![], info });
        self.graph.nodes.len() - 1
    }

    /// Adds a node, inferring its output.
    ///
    /// # Errors
    /// When an input id is out of range or the op rejects the input shapes.
    pub fn add(&mut self, name: impl Into<String>, op: Op, inputs: &[NodeId]) -> Result<NodeId> {
        let name = name.into();
        let n = self.graph.nodes.len();
        if let Some(&bad) = inputs.iter().find(|&&i| i >= n) {
            return Err(Error::shape(&name, op.kind_name(), format!("input id {bad} does not exist yet ({n} nodes)")));
        }
        let ins: Vec<&ValueInfo> = inputs.iter().map(|&i| &self.graph.nodes[i].info).collect();
        let info = op.infer(&name, &ins)?;
        self.graph.nodes.push(Node { name, op, inputs: inputs.to_vec(), info });
        Ok(n)
    }

    /// Info of an existing node.
    pub fn info(&self, id: NodeId) -> &ValueInfo {
        &self.graph.nodes[id].info
    }

    /// Number of nodes so far.
    pub fn len(&self) -> usize {
        self.graph.nodes.len()
    }

    /// Whether no node was added.
    pub fn is_empty(&self) -> bool {
        self.graph.nodes.is_empty()
    }

    /// Access to the nodes built so far.
    pub fn nodes(&self) -> &[Node] {
        &self.graph.nodes
    }

    /// Marks a node as a graph output.
    pub fn output(&mut self, id: NodeId) {
        self.graph.outputs.push(id);
    }

    /// Finishes the graph.
    ///
    /// # Errors
    /// When it has no output.
    pub fn build(self) -> Result<Graph> {
        if self.graph.outputs.is_empty() {
            return Err(Error::Malformed(format!("graph '{}' has no output", self.graph.name)));
        }
        if self.graph.inputs().is_empty() {
            return Err(Error::Malformed(format!("graph '{}' has no input", self.graph.name)));
        }
        Ok(self.graph)
    }
}

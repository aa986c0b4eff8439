//! The graph IR: a topologically ordered list of nodes, each producing one tensor.

use crate::error::{Error, Result};
use crate::ops::{Locality, Op};
use crate::rows::Footprint;
use sha2::{Digest, Sha256};
use tch::{Device, Kind};

/// Index of a node in [`Graph::nodes`]; a node's output value has the same index.
pub type NodeId = usize;

/// Element type of a value as it crosses the graph (and the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// Raw camera bytes.
    U8,
    /// Activations.
    F32,
    /// Integer indices (shape arithmetic, folded away at import).
    I64,
}

impl DType {
    /// The libtorch kind.
    pub fn kind(self) -> Kind {
        match self {
            DType::U8 => Kind::Uint8,
            DType::F32 => Kind::Float,
            DType::I64 => Kind::Int64,
        }
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::F32 => 4,
            DType::I64 => 8,
        }
    }
    /// The dtype of a libtorch kind, if the engine carries it.
    pub fn from_kind(kind: Kind) -> Option<DType> {
        match kind {
            Kind::Uint8 => Some(DType::U8),
            Kind::Float => Some(DType::F32),
            Kind::Int64 => Some(DType::I64),
            _ => None,
        }
    }
}

/// Static description of a value: shape, dtype and which axis is the row axis.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ValueInfo {
    /// Full static shape.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
    /// The axis along which bands are cut, if the value has one. `None` means the value is a
    /// single block (a flattened vector): it always moves and is computed whole.
    pub row_axis: Option<usize>,
}

impl ValueInfo {
    /// A value with the conventional row axis: axis 2 (H of NCHW, D of NCDHW) for rank >= 3.
    pub fn new(shape: Vec<usize>, dtype: DType) -> Self {
        let row_axis = if shape.len() >= 3 { Some(2) } else { None };
        ValueInfo { shape, dtype, row_axis }
    }
    /// Number of rows: the extent of the row axis, or 1 for values without one.
    pub fn rows(&self) -> usize {
        self.row_axis.map_or(1, |a| self.shape[a])
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// Bytes of `rows` rows of this value.
    pub fn bytes_of_rows(&self, rows: usize) -> usize {
        let total = self.rows().max(1);
        self.numel() / total * rows * self.dtype.size()
    }
    /// Bytes of the whole value.
    pub fn bytes(&self) -> usize {
        self.numel() * self.dtype.size()
    }
}

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

impl Graph {
    /// The graph's input nodes, in order.
    pub fn inputs(&self) -> Vec<NodeId> {
        self.nodes.iter().enumerate().filter(|(_, n)| matches!(n.op, Op::Input)).map(|(i, _)| i).collect()
    }

    /// Footprint of node `id`'s input `k` for output rows `rows`.
    pub fn footprint(&self, id: NodeId, k: usize, rows: &crate::rows::Rows) -> Footprint {
        let node = &self.nodes[id];
        let ins: Vec<&ValueInfo> = node.inputs.iter().map(|&i| &self.nodes[i].info).collect();
        node.op.footprint(k, rows, &ins, &node.info)
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

    /// For every node, the nodes that consume it (in topological order, without duplicates).
    pub fn consumers(&self) -> Vec<Vec<NodeId>> {
        let mut out = vec![Vec::new(); self.nodes.len()];
        for (id, n) in self.nodes.iter().enumerate() {
            for &i in &n.inputs {
                if out[i].last() != Some(&id) {
                    out[i].push(id);
                }
            }
        }
        out
    }

    /// Moves every weight to `device`.
    ///
    /// # Errors
    /// When libtorch cannot copy a weight (e.g. no CUDA device).
    pub fn to_device(&mut self, device: Device) -> Result<()> {
        for n in &mut self.nodes {
            n.op.move_to(device).map_err(|source| Error::Torch { node: n.name.clone(), op: n.op.kind_name(), source })?;
        }
        Ok(())
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

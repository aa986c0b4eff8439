//! The import state: ONNX value names bound to IR nodes or to constants, the IR being built, and
//! what the walk ([`super::dispatch`]) needs to know of the ONNX graph (liveness, consumers,
//! nodes already fused).

use super::node::Ctx;
use super::proto::{GraphProto, NodeProto};
use super::tensor;
use crate::error::{Error, Result};
use crate::graph::{DType, GraphBuilder, NodeId, ValueInfo};
use crate::ops::{BandIn, Op};
use crate::value::DTypeKind;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use tch::{Kind, Tensor};

/// What an ONNX value name stands for.
#[derive(Debug)]
pub(super) enum Val {
    /// A computed IR value.
    Node(NodeId),
    /// A tensor known at import time (contiguous, on the CPU).
    Const(Tensor),
}

impl Val {
    /// A cheap copy (tensors are shared).
    pub fn dup(&self) -> Val {
        match self {
            Val::Node(id) => Val::Node(*id),
            Val::Const(t) => Val::Const(t.shallow_clone()),
        }
    }
    /// The constant, if it is one.
    pub fn as_const(&self) -> Option<&Tensor> {
        match self {
            Val::Const(t) => Some(t),
            Val::Node(_) => None,
        }
    }
}

/// A zero-constant `Pad` waiting to be merged into the pads of its only consumer.
#[derive(Debug)]
pub(super) struct PendingPad {
    /// The unpadded value.
    pub src: Val,
    /// Leading pads of the spatial axes.
    pub begin: Vec<usize>,
    /// Trailing pads of the spatial axes.
    pub end: Vec<usize>,
}

/// The state of one import.
pub(super) struct Importer<'m> {
    /// The IR being built.
    pub b: GraphBuilder,
    /// The ONNX graph.
    pub graph: &'m GraphProto,
    /// Opset of the default domain.
    pub opset: i64,
    /// Where external data files live.
    pub base_dir: Option<&'m Path>,
    vals: HashMap<String, Val>,
    /// Materialised constants by (data pointer, shape, kind), holding the tensor alive so that the
    /// pointer cannot be reused by another constant.
    const_nodes: HashMap<(usize, Vec<i64>, Kind), (Tensor, NodeId)>,
    names: HashSet<String>,
    consumers: HashMap<&'m str, Vec<usize>>,
    graph_outputs: HashSet<&'m str>,
    live: Vec<bool>,
    skip: HashSet<usize>,
    /// Pads folded into their consumer, keyed by the Pad's output name.
    pub pending_pads: HashMap<String, PendingPad>,
    /// The model's name, for errors about the whole model.
    model: String,
}

impl<'m> Importer<'m> {
    /// A fresh import of `graph`.
    pub fn new(name: &str, graph: &'m GraphProto, opset: i64, base_dir: Option<&'m Path>) -> Self {
        let graph_outputs: HashSet<&str> = graph.output.iter().filter_map(|o| o.name.as_deref()).collect();
        // Liveness: a node is needed when one of its outputs reaches a graph output.
        let mut producer: HashMap<&str, usize> = HashMap::new();
        for (i, n) in graph.node.iter().enumerate() {
            for o in n.output.iter().filter(|o| !o.is_empty()) {
                producer.insert(o.as_str(), i);
            }
        }
        let mut live = vec![false; graph.node.len()];
        let mut stack: Vec<&str> = graph_outputs.iter().copied().collect();
        while let Some(v) = stack.pop() {
            if let Some(&i) = producer.get(v)
                && !live[i]
            {
                live[i] = true;
                stack.extend(graph.node[i].input.iter().map(String::as_str).filter(|s| !s.is_empty()));
            }
        }
        let mut consumers: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, n) in graph.node.iter().enumerate().filter(|(i, _)| live[*i]) {
            for inp in n.input.iter().filter(|s| !s.is_empty()) {
                let e = consumers.entry(inp.as_str()).or_default();
                if e.last() != Some(&i) {
                    e.push(i);
                }
            }
        }
        Importer {
            b: GraphBuilder::new(name),
            graph,
            opset,
            base_dir,
            vals: HashMap::new(),
            const_nodes: HashMap::new(),
            names: HashSet::new(),
            consumers,
            graph_outputs,
            live,
            skip: HashSet::new(),
            pending_pads: HashMap::new(),
            model: name.to_string(),
        }
    }

    /// The model's name.
    pub fn model_name(&self) -> &str {
        &self.model
    }

    /// A unique IR node name based on `base`.
    pub fn unique(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut k = 1;
        while self.names.contains(&name) {
            name = format!("{base}_{k}");
            k += 1;
        }
        self.names.insert(name.clone());
        name
    }

    /// Binds an ONNX value name.
    pub fn bind(&mut self, name: &str, val: Val) -> Result<()> {
        let val = match val {
            Val::Const(t) => Val::Const(t.f_contiguous().map_err(Error::torch(format!("storing constant '{name}'")))?),
            v => v,
        };
        if self.vals.insert(name.to_string(), val).is_some() {
            return Err(Error::Malformed(format!("value '{name}' is defined twice")));
        }
        Ok(())
    }

    /// The value bound to `name`.
    pub fn get(&self, name: &str) -> Option<&Val> {
        self.vals.get(name)
    }

    /// The nodes (indices) that consume value `name`.
    pub fn consumers_of(&self, name: &str) -> &[usize] {
        self.consumers.get(name).map_or(&[], Vec::as_slice)
    }

    /// Whether `name` is a graph output.
    pub fn is_graph_output(&self, name: &str) -> bool {
        self.graph_outputs.contains(name)
    }

    /// Whether value `name` is used by any live node or as a graph output.
    pub fn is_used(&self, name: &str) -> bool {
        !name.is_empty() && (self.is_graph_output(name) || !self.consumers_of(name).is_empty())
    }

    /// Marks ONNX node `i` as already handled (fused into an earlier node).
    pub fn skip(&mut self, i: usize) {
        self.skip.insert(i);
    }

    /// Static shape of a value.
    pub fn shape(&self, v: &Val) -> Vec<usize> {
        match v {
            Val::Node(id) => self.b.info(*id).shape.clone(),
            Val::Const(t) => tensor::dims(t),
        }
    }

    /// The IR node of a value, adding a `Constant` node for constants (once per tensor).
    pub fn node_of(&mut self, cx: &Ctx, v: &Val) -> Result<NodeId> {
        let t = match v {
            Val::Node(id) => return Ok(*id),
            Val::Const(t) => t,
        };
        let key = (t.data_ptr() as usize, t.size(), t.kind());
        let cacheable = t.is_contiguous();
        if let (true, Some((_, id))) = (cacheable, self.const_nodes.get(&key)) {
            return Ok(*id);
        }
        let t = ir_tensor(t).map_err(cx.torch())?;
        let name = self.unique(&format!("{}/const", cx.name));
        let id = self.b.add(name, Op::Constant(t.shallow_clone()), &[]).map_err(|e| cx.annotate(e))?;
        if let (true, Val::Const(orig)) = (cacheable, v) {
            self.const_nodes.insert(key, (orig.shallow_clone(), id));
        }
        Ok(id)
    }

    /// Adds IR node `op` over `inputs` named after the ONNX node (plus `suffix`), or evaluates it
    /// at import time when every input is a constant.
    pub fn emit(&mut self, cx: &Ctx, suffix: &str, op: Op, inputs: &[Val]) -> Result<Val> {
        if inputs.iter().all(|v| v.as_const().is_some()) && !inputs.is_empty() {
            return evaluate(cx, &op, inputs).map(Val::Const);
        }
        let mut ids = Vec::with_capacity(inputs.len());
        for v in inputs {
            ids.push(self.node_of(cx, v)?);
        }
        let base = if suffix.is_empty() { cx.name.clone() } else { format!("{}/{suffix}", cx.name) };
        let name = self.unique(&base);
        self.b.add(name, op, &ids).map(Val::Node).map_err(|e| cx.annotate(e))
    }

    /// Whether ONNX node `i` reaches a graph output.
    pub fn is_live(&self, i: usize) -> bool {
        self.live[i]
    }

    /// Whether ONNX node `i` was fused into an earlier node.
    pub fn is_skipped(&self, i: usize) -> bool {
        self.skip.contains(&i)
    }

    /// Whether an IR node is already called `name`.
    pub fn is_name_taken(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// Adds the graph inputs (those without an initializer).
    pub fn add_input(&mut self, name: &str, shape: Vec<usize>, dtype: DType) -> Result<()> {
        let node = self.unique(name);
        let id = self.b.input(node, shape, dtype);
        self.bind(name, Val::Node(id))
    }

    /// Marks the graph outputs.
    pub fn finish_outputs(&mut self) -> Result<()> {
        let graph = self.graph;
        for o in &graph.output {
            let name = o.name.as_deref().unwrap_or("");
            let v = self.get(name).ok_or_else(|| Error::Malformed(format!("graph output '{name}' is never computed")))?.dup();
            let id = match v {
                Val::Node(id) => id,
                Val::Const(_) => {
                    let cx = output_ctx(graph, name, self.opset);
                    self.node_of(&cx, &v)?
                }
            };
            self.b.output(id);
        }
        Ok(())
    }
}

fn output_ctx<'a>(graph: &'a GraphProto, name: &str, opset: i64) -> Ctx<'a> {
    static EMPTY: std::sync::OnceLock<NodeProto> = std::sync::OnceLock::new();
    let node = graph.node.iter().find(|n| n.output.iter().any(|o| o == name)).unwrap_or_else(|| EMPTY.get_or_init(NodeProto::default));
    Ctx { node, name: name.to_string(), op: node.op_type.as_deref().unwrap_or("Constant"), opset }
}

/// A constant in a kind the IR carries (`Float`, `Uint8`, `Int64`).
pub(super) fn ir_tensor(t: &Tensor) -> Result<Tensor, tch::TchError> {
    match t.kind() {
        Kind::Float | Kind::Uint8 | Kind::Int64 | Kind::Bool => Ok(t.shallow_clone()),
        Kind::Double | Kind::Half | Kind::BFloat16 => t.f_to_kind(Kind::Float),
        Kind::Int8 | Kind::Int16 | Kind::Int => t.f_to_kind(Kind::Int64),
        k => Err(tch::TchError::Kind(format!("constants of kind {k:?} are not supported"))),
    }
}

/// Evaluates an IR op on constant inputs with the op's own band computation.
fn evaluate(cx: &Ctx, op: &Op, inputs: &[Val]) -> Result<Tensor> {
    let mut ts = Vec::with_capacity(inputs.len());
    let mut infos = Vec::with_capacity(inputs.len());
    for v in inputs {
        let t = ir_tensor(v.as_const().ok_or_else(|| cx.malformed("non-constant input in constant evaluation"))?).map_err(cx.torch())?;
        let dtype = DType::from_kind(t.kind()).ok_or_else(|| cx.malformed(format!("constant of kind {:?}", t.kind())))?;
        infos.push(ValueInfo::new(tensor::dims(&t), dtype));
        ts.push(t);
    }
    let refs: Vec<&ValueInfo> = infos.iter().collect();
    let out = op.infer(&cx.name, &refs).map_err(|e| cx.annotate(e))?;
    let bands: Vec<BandIn> = ts.iter().zip(&infos).map(|(tensor, info)| BandIn { tensor, start: 0, info }).collect();
    let _guard = tch::no_grad_guard();
    op.compute(&bands, &out, &(0..out.rows())).and_then(|t| t.f_contiguous()).map_err(cx.torch())
}

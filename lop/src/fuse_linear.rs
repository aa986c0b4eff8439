//! Folding into linear layers, after [`crate::fuse`]'s convolutions:
//! - the exact GELU as ONNX exporters write it below opset 20, `x / √2 → Erf → + 1 → · x → · ½`
//!   (the halving first or last), becomes one GELU op: five passes over memory and four values
//!   become one;
//! - a constant vector added to a linear layer's output becomes the layer's bias (PyTorch exports
//!   `nn.Linear` on a 4-d tensor as `MatMul` and `Add`);
//! - an activation read only from a linear layer becomes its post-op ([`Op::Linear`]'s `act`),
//!   which oneDNN applies in the layer's own pass ([`crate::ops::linear`]).
//!
//! ConvNeXt's blocks are `Linear → Add → GELU → Linear → Add`: each becomes two nodes. Values
//! change only by rounding: libtorch's GELU is the same function as the written-out one (its
//! error function is a different approximation), and oneDNN adds the bias inside the product.

use crate::graph::{Graph, NodeId};
use crate::ops::{BinaryOp, Op, UnaryOp, linear_post_op};
use crate::value::DType;
use lop_core::structure::Structure;

/// One pattern of nodes folded into one node, as `lop inspect` reports it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Rewritten {
    /// The node the pattern starts at (the linear layer, or the GELU's `Erf`).
    pub node: String,
    /// What it became: `Gelu`, `Linear+bias`, `Linear+Gelu` or `Linear+Activation`.
    pub into: String,
    /// The nodes folded away.
    pub removed: Vec<String>,
}

/// What happens to a node when a pattern is folded.
pub(crate) enum Edit {
    /// Removed; only nodes of the same pattern read it, or they read `NodeId` instead.
    Fold(NodeId),
    /// A constant no reader is left for.
    Drop,
    /// Computes a new op over new inputs (ids of the graph before the edit).
    Set(Box<Op>, Vec<NodeId>),
}

/// A pattern finder: at a node, fills the edits of the pattern starting there and returns what
/// it became, or `None` (touching nothing).
type Finder = fn(&Graph, &[Vec<NodeId>], NodeId, &mut [Option<Edit>]) -> Option<&'static str>;

/// `graph` with the three folds above applied in turn, and what each folded.
pub(crate) fn fuse_linear_layers(graph: Graph) -> (Graph, Vec<Rewritten>) {
    let mut report = Vec::new();
    let graph = fold(graph, &mut report, gelu);
    let graph = fold(graph, &mut report, linear_bias);
    (fold(graph, &mut report, linear_act), report)
}

/// Runs `find` at every node and applies what it finds; `find` fills the edits of one pattern
/// and returns what to report, or `None` (touching nothing) where the node starts none.
/// Constants that only removed nodes read go with them.
fn fold(graph: Graph, report: &mut Vec<Rewritten>, find: Finder) -> Graph {
    let consumers = graph.consumers();
    let mut edits: Vec<Option<Edit>> = (0..graph.nodes.len()).map(|_| None).collect();
    for id in 0..graph.nodes.len() {
        if edits[id].is_some() {
            continue;
        }
        let before: Vec<bool> = edits.iter().map(Option::is_some).collect();
        if let Some(into) = find(&graph, &consumers, id, &mut edits) {
            let removed = (0..edits.len())
                .filter(|&r| !before[r] && matches!(edits[r], Some(Edit::Fold(_))))
                .map(|r| graph.nodes[r].name.clone())
                .collect();
            report.push(Rewritten { node: graph.nodes[id].name.clone(), into: into.to_string(), removed });
        }
    }
    drop_unread_constants(&graph, &consumers, &mut edits);
    apply(graph, edits)
}

/// Marks for dropping each constant that removed nodes read and no node left reads.
fn drop_unread_constants(graph: &Graph, consumers: &[Vec<NodeId>], edits: &mut [Option<Edit>]) {
    let removed = |id: NodeId, edits: &[Option<Edit>]| matches!(edits[id], Some(Edit::Fold(_)));
    let mut read_after = vec![false; graph.nodes.len()];
    for (id, node) in graph.nodes.iter().enumerate() {
        let inputs = match &edits[id] {
            Some(Edit::Fold(_) | Edit::Drop) => continue,
            Some(Edit::Set(_, inputs)) => inputs,
            None => &node.inputs,
        };
        inputs.iter().for_each(|&i| read_after[i] = true);
    }
    for c in 0..graph.nodes.len() {
        let constant = matches!(graph.nodes[c].op, Op::Constant(_)) && edits[c].is_none();
        let lost_readers = consumers[c].iter().any(|&r| removed(r, edits) || matches!(edits[r], Some(Edit::Set(..))));
        if constant && lost_readers && !read_after[c] && !graph.outputs.contains(&c) {
            edits[c] = Some(Edit::Drop);
        }
    }
}

/// The graph after `edits` (one per node). A folded graph output gives its name to the node it
/// folds into.
pub(crate) fn apply(graph: Graph, mut edits: Vec<Option<Edit>>) -> Graph {
    let n = graph.nodes.len();
    let mut takes_name: Vec<Option<String>> = vec![None; n];
    for (id, e) in edits.iter().enumerate() {
        if let Some(Edit::Fold(into)) = e
            && graph.outputs.contains(&id)
        {
            takes_name[*into] = Some(graph.nodes[id].name.clone());
        }
    }
    let mut new_id = vec![usize::MAX; n];
    let mut nodes = Vec::with_capacity(n);
    for (id, mut node) in graph.nodes.into_iter().enumerate() {
        match edits[id].take() {
            Some(Edit::Fold(into)) => {
                new_id[id] = new_id[into];
                continue;
            }
            Some(Edit::Drop) => continue,
            Some(Edit::Set(op, inputs)) => {
                node.op = *op;
                node.inputs = inputs;
            }
            None => {}
        }
        node.inputs = node.inputs.iter().map(|&i| new_id[i]).collect();
        debug_assert!(node.inputs.iter().all(|&i| i != usize::MAX), "{} reads a removed node", node.name);
        if let Some(name) = takes_name[id].take() {
            node.name = name;
        }
        new_id[id] = nodes.len();
        nodes.push(node);
    }
    let outputs = graph.outputs.iter().map(|&o| new_id[o]).collect();
    Graph { name: graph.name, nodes, outputs }
}

/// The value of a constant node holding one float, if `id` is one.
fn scalar(graph: &Graph, id: NodeId) -> Option<f64> {
    match &graph.nodes[id].op {
        Op::Constant(t) if t.numel() == 1 => t.f_view([-1]).and_then(|v| v.f_double_value(&[0])).ok(),
        _ => None,
    }
}

/// The other operand of binary `op` node `id` when one of its two inputs is `x`.
fn other(graph: &Graph, id: NodeId, op: BinaryOp, x: NodeId) -> Option<NodeId> {
    let n = &graph.nodes[id];
    match n.inputs[..] {
        [a, b] if matches!(&n.op, Op::Binary(o) if *o == op) => (a == x).then_some(b).or((b == x).then_some(a)),
        _ => None,
    }
}

/// `id`'s only reader, when it is not a graph output.
fn only_reader(graph: &Graph, consumers: &[Vec<NodeId>], id: NodeId) -> Option<NodeId> {
    match consumers[id][..] {
        [r] if !graph.outputs.contains(&id) => Some(r),
        _ => None,
    }
}

/// The constant scalar operand of binary `op` node `id` beside `x`, if it is exactly `want`.
fn by_constant(graph: &Graph, id: NodeId, op: BinaryOp, x: NodeId, want: f64) -> Option<NodeId> {
    let c = other(graph, id, op, x)?;
    scalar(graph, c).filter(|&v| v == want).map(|_| c)
}

/// The exact GELU starting at Erf node `erf`, folded into its last multiplication.
fn gelu(graph: &Graph, consumers: &[Vec<NodeId>], erf: NodeId, edits: &mut [Option<Edit>]) -> Option<&'static str> {
    if !matches!(graph.nodes[erf].op, Op::Unary(UnaryOp::Erf)) {
        return None;
    }
    let scaled = graph.nodes[erf].inputs[0];
    let root2 = std::f64::consts::SQRT_2;
    let near = |k: NodeId, want: f64| scalar(graph, k).is_some_and(|v| (v - want).abs() <= 1e-6);
    let x = match (&graph.nodes[scaled].op, &graph.nodes[scaled].inputs[..]) {
        (Op::Binary(BinaryOp::Div), &[x, k]) if near(k, root2) => x,
        (Op::Binary(BinaryOp::Mul), &[x, k]) if near(k, 1.0 / root2) => x,
        (Op::Binary(BinaryOp::Mul), &[k, x]) if near(k, 1.0 / root2) => x,
        _ => return None,
    };
    if only_reader(graph, consumers, scaled)? != erf {
        return None;
    }
    let plus = only_reader(graph, consumers, erf)?;
    by_constant(graph, plus, BinaryOp::Add, erf, 1.0)?;
    let after_plus = only_reader(graph, consumers, plus)?;
    // The halving last: (x · (1 + erf)) · ½; or first: (x · ½) · (1 + erf).
    let (times_x, last) = if other(graph, after_plus, BinaryOp::Mul, plus) == Some(x) {
        let last = only_reader(graph, consumers, after_plus)?;
        by_constant(graph, last, BinaryOp::Mul, after_plus, 0.5)?;
        (after_plus, last)
    } else {
        let halved = other(graph, after_plus, BinaryOp::Mul, plus)?;
        by_constant(graph, halved, BinaryOp::Mul, x, 0.5)?;
        (only_reader(graph, consumers, halved).filter(|&r| r == after_plus).map(|_| halved)?, after_plus)
    };
    let (xi, li) = (&graph.nodes[x].info, &graph.nodes[last].info);
    if xi.dtype != DType::F32 || xi != li {
        return None;
    }
    for r in [scaled, erf, plus, times_x] {
        edits[r] = Some(Edit::Fold(last));
    }
    edits[last] = Some(Edit::Set(Box::new(Op::Unary(UnaryOp::Gelu { tanh: false })), vec![x]));
    Some("Gelu")
}

/// A constant vector added to linear layer `lin`'s output (its only reader), folded into it.
fn linear_bias(graph: &Graph, consumers: &[Vec<NodeId>], lin: NodeId, edits: &mut [Option<Edit>]) -> Option<&'static str> {
    let Op::Linear { weight, bias: None, act: None } = &graph.nodes[lin].op else { return None };
    let add = only_reader(graph, consumers, lin)?;
    let c = other(graph, add, BinaryOp::Add, lin)?;
    let Op::Constant(b) = &graph.nodes[c].op else { return None };
    let n = weight.size()[0];
    let dims = b.size();
    let per_feature = dims.last() == Some(&n) && dims.iter().rev().skip(1).all(|&d| d == 1);
    if !per_feature || b.kind() != tch::Kind::Float || graph.nodes[add].info != graph.nodes[lin].info {
        return None;
    }
    let bias = b.f_reshape([n]).and_then(|b| b.f_contiguous()).ok()?;
    let op = Op::Linear { weight: weight.shallow_clone(), bias: Some(bias), act: None };
    edits[lin] = Some(Edit::Set(Box::new(op), graph.nodes[lin].inputs.clone()));
    edits[add] = Some(Edit::Fold(lin));
    Some("Linear+bias")
}

/// An activation read only from linear layer `lin`, folded into it as its post-op.
fn linear_act(graph: &Graph, consumers: &[Vec<NodeId>], lin: NodeId, edits: &mut [Option<Edit>]) -> Option<&'static str> {
    let Op::Linear { weight, bias, act: None } = &graph.nodes[lin].op else { return None };
    let reader = only_reader(graph, consumers, lin)?;
    let Op::Unary(u) = &graph.nodes[reader].op else { return None };
    linear_post_op(Some(u))?;
    if graph.nodes[lin].info.dtype != DType::F32 {
        return None;
    }
    let op = Op::Linear { weight: weight.shallow_clone(), bias: bias.as_ref().map(|b| b.shallow_clone()), act: Some(u.clone()) };
    edits[lin] = Some(Edit::Set(Box::new(op), graph.nodes[lin].inputs.clone()));
    edits[reader] = Some(Edit::Fold(lin));
    Some(if matches!(u, UnaryOp::Gelu { .. }) { "Linear+Gelu" } else { "Linear+Activation" })
}

#[cfg(test)]
#[path = "fuse_linear_tests.rs"]
mod tests;

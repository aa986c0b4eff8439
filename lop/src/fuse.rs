//! Folding activations into the convolutions that feed them: a ReLU, LeakyReLU, clip (ReLU6),
//! sigmoid, hard sigmoid, hard swish or SiLU (`Silu`, or ONNX's `x * Sigmoid(x)`) whose input only a convolution computes
//! and only the activation reads becomes that convolution's post-op ([`crate::ops::Conv::act`]). oneDNN then applies it in the
//! convolution's own pass over its output, so the activation costs neither a call per band nor
//! a pass over memory, and the activation's value is the convolution's: the graph has one node
//! fewer (two for `x * Sigmoid(x)`), and nothing a plan sends changes meaning.
//!
//! [`crate::model::load`] fuses every model it loads unless told not to
//! ([`crate::model::LoadOptions::unfused`], `LOP_FUSE=off`). Both sides of a split load alike,
//! and the content hash differs between a fused graph and an unfused one, so two sides that
//! disagree are refused at the handshake rather than computing different values.

use crate::fuse_linear::{Edit, apply};
use crate::graph::{Graph, NodeId};
use crate::ops::{BinaryOp, Op, UnaryOp};
use crate::value::DType;
use lop_core::structure::Structure;

/// What [`fuse_activations`] did, for `lop inspect`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Fusion {
    /// Convolutions that took an activation.
    pub fused: Vec<FusedConv>,
    /// Activations after a convolution that stayed separate ops, with the reason.
    pub unfused: Vec<Unfused>,
    /// Linear layers that took a bias or an activation, and GELUs written out as five ops that
    /// became one ([`crate::fuse_linear`]).
    pub rewritten: Vec<Rewritten>,
}

pub use crate::fuse_linear::Rewritten;

/// One convolution that took an activation.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FusedConv {
    /// The convolution's node name.
    pub conv: String,
    /// The activation it now applies.
    pub act: String,
    /// The nodes folded into it.
    pub removed: Vec<String>,
}

/// An activation reading a convolution that stayed a separate op.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Unfused {
    /// The activation's node name.
    pub node: String,
    /// Its op kind.
    pub kind: String,
    /// Why it was not folded.
    pub why: String,
}

/// A convolution's activation and the nodes that computed it, as found in the graph.
struct Found {
    act: UnaryOp,
    /// The nodes folded into the convolution; the last one's value is the fused node's.
    removed: Vec<NodeId>,
}

/// `graph` with every activation folded into the convolution that feeds it where that is exact
/// and changes no other reader's input; the rest stays as it was, and the report says why. Then
/// linear layers take their bias and activation, and written-out GELUs become one op
/// ([`crate::fuse_linear`]).
pub fn fuse_activations(graph: Graph) -> (Graph, Fusion) {
    let mut report = Fusion::default();
    let mut found: Vec<Option<Found>> = (0..graph.nodes.len()).map(|_| None).collect();
    let consumers = graph.consumers();
    for (id, slot) in found.iter_mut().enumerate() {
        if !matches!(&graph.nodes[id].op, Op::Conv(c) if c.act.is_none()) {
            continue;
        }
        match find(&graph, &consumers, id) {
            Ok(Some(f)) => {
                report.fused.push(FusedConv {
                    conv: graph.nodes[id].name.clone(),
                    act: f.act.name().to_string(),
                    removed: f.removed.iter().map(|&r| graph.nodes[r].name.clone()).collect(),
                });
                *slot = Some(f);
            }
            Ok(None) => {}
            Err((node, why)) => report.unfused.push(Unfused {
                node: graph.nodes[node].name.clone(),
                kind: graph.nodes[node].op.kind_name().to_string(),
                why,
            }),
        }
    }
    let (graph, rewritten) = crate::fuse_linear::fuse_linear_layers(rebuild(graph, found));
    report.rewritten = rewritten;
    (graph, report)
}

/// The activation that only convolution `conv` feeds, if any; `Err` names an activation that
/// reads it but cannot be folded, and why.
fn find(graph: &Graph, consumers: &[Vec<NodeId>], conv: NodeId) -> Result<Option<Found>, (NodeId, String)> {
    let readers = &consumers[conv];
    let Some(&act_node) = readers.iter().find(|&&r| is_activation(&graph.nodes[r].op)) else {
        return Ok(None);
    };
    let refuse = |why: String| Err((act_node, why));
    if graph.nodes[conv].info.dtype != DType::F32 {
        return refuse(format!("the convolution computes {:?}, not f32", graph.nodes[conv].info.dtype));
    }
    if graph.outputs.contains(&conv) {
        return refuse("the convolution's value is a graph output".into());
    }
    let unary = |id: NodeId| match &graph.nodes[id].op {
        Op::Unary(u) => Some(u.clone()),
        _ => None,
    };
    match *readers.as_slice() {
        [one] => match unary(one) {
            Some(u) if foldable(&u) => Ok(Some(Found { act: u, removed: vec![one] })),
            _ => refuse(format!(
                "{} has no fused form (ReLU, LeakyReLU, Clip, Sigmoid, HardSigmoid, HardSwish and SiLU have)",
                graph.nodes[one].op.kind_name()
            )),
        },
        [a, b] => match silu_pair(graph, consumers, conv, a, b).or_else(|| silu_pair(graph, consumers, conv, b, a)) {
            Some(found) => Ok(Some(found)),
            None => refuse(format!("the convolution's value is read by {} ops, not by the activation alone", readers.len())),
        },
        _ => refuse(format!("the convolution's value is read by {} ops, not by the activation alone", readers.len())),
    }
}

/// Activations a convolution can apply in its own pass (oneDNN has a post-op for each).
fn foldable(u: &UnaryOp) -> bool {
    crate::ops::post_op(Some(u)).is_some()
}

/// `x * Sigmoid(x)` on convolution `conv`'s value `x`: `sigmoid` its only other reader than
/// `mul`, read only by `mul`, whose inputs are exactly the two.
fn silu_pair(graph: &Graph, consumers: &[Vec<NodeId>], conv: NodeId, sigmoid: NodeId, mul: NodeId) -> Option<Found> {
    let (s, m) = (&graph.nodes[sigmoid], &graph.nodes[mul]);
    let shape_kept = m.info == graph.nodes[conv].info;
    let inputs_are_pair = m.inputs.len() == 2 && m.inputs.contains(&conv) && m.inputs.contains(&sigmoid);
    (matches!(s.op, Op::Unary(UnaryOp::Sigmoid))
        && matches!(m.op, Op::Binary(BinaryOp::Mul))
        && consumers[sigmoid] == [mul]
        && !graph.outputs.contains(&sigmoid)
        && inputs_are_pair
        && shape_kept)
        .then(|| Found { act: UnaryOp::Silu, removed: vec![sigmoid, mul] })
}

/// Activations a reader might expect folded: worth a line in the report when one is not.
fn is_activation(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary(
            UnaryOp::Relu
                | UnaryOp::Silu
                | UnaryOp::Sigmoid
                | UnaryOp::LeakyRelu(_)
                | UnaryOp::Clip { .. }
                | UnaryOp::HardSwish
                | UnaryOp::HardSigmoid { .. }
                | UnaryOp::Gelu { .. }
                | UnaryOp::Tanh
        )
    )
}

/// The graph without the folded nodes: their readers read the convolution instead, which takes
/// a folded graph output's name (the value, and so the name a caller asks for, is its).
fn rebuild(graph: Graph, found: Vec<Option<Found>>) -> Graph {
    let mut edits: Vec<Option<Edit>> = (0..graph.nodes.len()).map(|_| None).collect();
    for (conv, f) in found.into_iter().enumerate() {
        let (Some(f), Op::Conv(c)) = (f, &graph.nodes[conv].op) else { continue };
        let mut fused = c.share();
        fused.act = Some(f.act);
        edits[conv] = Some(Edit::Set(Box::new(Op::Conv(fused)), graph.nodes[conv].inputs.clone()));
        for r in f.removed {
            edits[r] = Some(Edit::Fold(conv));
        }
    }
    apply(graph, edits)
}

#[cfg(test)]
#[path = "fuse_tests.rs"]
mod tests;

//! The walk over the ONNX nodes: each node is folded to a constant when every input is known at
//! import time, or else dispatched to the converter of its op family. This is the one file that
//! knows every converter; converters know only the import state ([`super::importer`]) and the
//! input and attribute readers ([`super::args`]).

use super::args::data;
use super::importer::{Importer, Val};
use super::node::Ctx;
use super::{conv, fold, layout, math, pool, resize, select, slice, tensor};
use crate::error::{Error, MissingOp, Result};
use std::collections::HashSet;

/// Walks the ONNX nodes in order, converting every live node not fused into an earlier one.
/// First, every op type that cannot run is named at once ([`missing_ops`]).
pub(super) fn run(imp: &mut Importer) -> Result<()> {
    let graph = imp.graph;
    let missing = missing_ops(imp);
    if !missing.is_empty() {
        return Err(Error::UnsupportedOps { model: imp.model_name().to_string(), opset: imp.opset, ops: missing });
    }
    for (i, node) in graph.node.iter().enumerate() {
        if !imp.is_live(i) || imp.is_skipped(i) {
            continue;
        }
        let op = node.op_type.as_deref().unwrap_or("");
        let base = [node.name.as_deref().unwrap_or(""), node.output.first().map_or("", String::as_str)]
            .into_iter()
            .find(|s| !s.is_empty())
            .map_or_else(|| format!("{op}_{i}"), str::to_string);
        let name = if imp.is_name_taken(&base) { format!("{base}_{i}") } else { base };
        let cx = Ctx { node, name, op, opset: imp.opset };
        convert_one(imp, &cx)?;
    }
    Ok(())
}

/// Folds or converts one node and binds its outputs.
fn convert_one(imp: &mut Importer, cx: &Ctx) -> Result<()> {
    let domain = cx.node.domain.as_deref().unwrap_or("");
    if !domain.is_empty() && domain != "ai.onnx" {
        return Err(cx.unsupported(format!("operators of domain '{domain}' are not supported")));
    }
    let mut ins = Vec::with_capacity(cx.n_inputs());
    for k in 0..cx.n_inputs() {
        ins.push(match cx.input(k) {
            None => None,
            Some(n) => Some(imp.get(n).ok_or_else(|| cx.malformed(format!("input '{n}' is not defined before the node")))?.dup()),
        });
    }
    let outs = match fold::fold(imp, cx, &ins)? {
        Some(ts) => ts.into_iter().map(Val::Const).collect(),
        None => convert(imp, cx, &ins)?,
    };
    for (k, name) in cx.node.output.iter().enumerate() {
        if name.is_empty() {
            continue;
        }
        match outs.get(k) {
            Some(v) => imp.bind(name, v.dup())?,
            None if imp.is_used(name) => return Err(cx.unsupported(format!("output {k} ('{name}') is not supported"))),
            None => {}
        }
    }
    Ok(())
}

/// Every live op type that neither folds to a constant (all its inputs known at import time) nor
/// has a converter, with the nodes that use it: a pass over the node list before conversion,
/// so that one error names all of them instead of the first.
fn missing_ops(imp: &Importer) -> Vec<MissingOp> {
    let graph = imp.graph;
    let mut known: HashSet<&str> = graph.initializer.iter().filter_map(|t| t.name.as_deref()).collect();
    let mut missing: Vec<MissingOp> = Vec::new();
    for (i, node) in graph.node.iter().enumerate() {
        if !imp.is_live(i) || imp.is_skipped(i) {
            continue;
        }
        let op = node.op_type.as_deref().unwrap_or("");
        let domain = node.domain.as_deref().unwrap_or("");
        let inputs_known = node.input.iter().filter(|n| !n.is_empty()).all(|n| known.contains(n.as_str()));
        let default_domain = domain.is_empty() || domain == "ai.onnx";
        let folds = default_domain && (matches!(op, "Constant" | "Shape" | "Size") || (fold::FOLDABLE.contains(&op) && inputs_known));
        if folds {
            known.extend(node.output.iter().map(String::as_str));
            continue;
        }
        if default_domain && converter(op).is_some() {
            continue;
        }
        let op_type = if default_domain { op.to_string() } else { format!("{domain}.{op}") };
        let name = [node.name.as_deref().unwrap_or(""), node.output.first().map_or("", String::as_str)]
            .into_iter()
            .find(|s| !s.is_empty())
            .map_or_else(|| format!("{op}_{i}"), str::to_string);
        match missing.iter_mut().find(|m| m.op_type == op_type) {
            Some(m) => m.nodes.push(name),
            None => missing.push(MissingOp { op_type, nodes: vec![name] }),
        }
    }
    missing
}

/// A converter: one ONNX node into IR nodes, one value per ONNX output (fewer when trailing
/// outputs are not produced).
type Converter = fn(&mut Importer, &Ctx, &[Option<Val>]) -> Result<Vec<Val>>;

/// Converts one node into IR nodes.
fn convert(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    match converter(cx.op) {
        Some(f) => f(imp, cx, ins),
        None if fold::FOLDABLE.contains(&cx.op) => Err(cx.unsupported("supported only when all inputs are known at import time")),
        None => Err(cx.unsupported("this op type is not supported")),
    }
}

/// The converter of an op type: the one list of what the importer can run.
fn converter(op: &str) -> Option<Converter> {
    Some(match op {
        "Identity" => |_, cx, ins| Ok(vec![data(cx, ins, 0)?]),
        "Dropout" => |_, cx, ins| dropout(cx, ins),
        "Conv" => conv::conv,
        "ConvTranspose" => conv::conv_transpose,
        "BatchNormalization" => conv::batch_norm,
        "MaxPool" | "AveragePool" => pool::pool,
        "GlobalAveragePool" | "GlobalMaxPool" => pool::global_pool,
        "Pad" => pool::pad,
        "Relu" | "LeakyRelu" | "Sigmoid" | "HardSigmoid" | "HardSwish" | "Erf" | "Tanh" | "Exp" | "Sqrt" | "Reciprocal" | "Neg" | "Abs"
        | "Gelu" | "Clip" | "Not" | "Sin" | "Cos" | "Log" | "Floor" | "Ceil" => math::unary,
        "PRelu" => math::prelu,
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Max" | "Min" | "Sum" | "Mean" | "Mod" | "Equal" | "Less" | "Greater" | "LessOrEqual"
        | "GreaterOrEqual" | "And" | "Or" | "Xor" => math::binary,
        "Where" => select::where_,
        "TopK" => select::top_k,
        "GatherElements" => select::gather_elements,
        "GridSample" => select::grid_sample,
        "Softmax" => math::softmax,
        "LayerNormalization" => math::layer_norm,
        "MatMul" => math::matmul,
        "Gemm" => math::gemm,
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" => math::reduce,
        "Cast" | "CastLike" => math::cast,
        "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => layout::reshape_like,
        "Transpose" => layout::transpose,
        "Concat" => layout::concat,
        "Slice" => slice::slice,
        "Split" => slice::split,
        "Gather" => layout::gather,
        "Expand" => layout::expand,
        "Resize" | "Upsample" => resize::resize,
        _ => return None,
    })
}

/// Dropout in inference: the identity (a requested mask output is not supported).
fn dropout(cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    if let Some(Val::Const(t)) = ins.get(2).and_then(Option::as_ref)
        && tensor::ints(t).map_err(cx.torch())?.first().is_some_and(|&x| x != 0)
    {
        return Err(cx.unsupported("training_mode = true"));
    }
    Ok(vec![data(cx, ins, 0)?])
}

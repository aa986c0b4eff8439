//! The walk over the ONNX nodes: each node is folded to a constant when every input is known at
//! import time, or else dispatched to the converter of its op family. This is the one file that
//! knows every converter; converters know only the import state ([`super::importer`]) and the
//! input and attribute readers ([`super::args`]).

use super::args::data;
use super::importer::{Importer, Val};
use super::node::Ctx;
use super::{conv, fold, layout, math, pool, resize, slice, tensor};
use crate::error::Result;

/// Walks the ONNX nodes in order, converting every live node not fused into an earlier one.
pub(super) fn run(imp: &mut Importer) -> Result<()> {
    let graph = imp.graph;
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

/// Converts one node into IR nodes; returns one value per ONNX output (fewer when trailing
/// outputs are not produced).
fn convert(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    match cx.op {
        "Identity" => Ok(vec![data(cx, ins, 0)?]),
        "Dropout" => dropout(cx, ins),
        "Conv" => conv::conv(imp, cx, ins),
        "ConvTranspose" => conv::conv_transpose(imp, cx, ins),
        "BatchNormalization" => conv::batch_norm(imp, cx, ins),
        "MaxPool" | "AveragePool" => pool::pool(imp, cx, ins),
        "GlobalAveragePool" | "GlobalMaxPool" => pool::global_pool(imp, cx, ins),
        "Pad" => pool::pad(imp, cx, ins),
        "Relu" | "LeakyRelu" | "Sigmoid" | "HardSigmoid" | "HardSwish" | "Erf" | "Tanh" | "Exp" | "Sqrt" | "Reciprocal" | "Neg" | "Abs"
        | "Gelu" | "Clip" => math::unary(imp, cx, ins),
        "PRelu" => math::prelu(imp, cx, ins),
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Max" | "Min" | "Sum" | "Mean" => math::binary(imp, cx, ins),
        "Softmax" => math::softmax(imp, cx, ins),
        "LayerNormalization" => math::layer_norm(imp, cx, ins),
        "MatMul" => math::matmul(imp, cx, ins),
        "Gemm" => math::gemm(imp, cx, ins),
        "ReduceMean" => math::reduce_mean(imp, cx, ins),
        "Cast" | "CastLike" => math::cast(imp, cx, ins),
        "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => layout::reshape_like(imp, cx, ins),
        "Transpose" => layout::transpose(imp, cx, ins),
        "Concat" => layout::concat(imp, cx, ins),
        "Slice" => slice::slice(imp, cx, ins),
        "Split" => slice::split(imp, cx, ins),
        "Gather" => layout::gather(imp, cx, ins),
        "Expand" => layout::expand(imp, cx, ins),
        "Resize" | "Upsample" => resize::resize(imp, cx, ins),
        op if fold::FOLDABLE.contains(&op) => Err(cx.unsupported("supported only when all inputs are known at import time")),
        _ => Err(cx.unsupported("this op type is not supported")),
    }
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

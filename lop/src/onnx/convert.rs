//! Dispatch of one ONNX node (with at least one computed input) to its converter, and the
//! helpers converters share for reading inputs.

use super::importer::{Importer, Val};
use super::node::Ctx;
use super::{conv, fold, layout, math, pool, resize, slice, tensor};
use crate::error::Result;
use tch::Tensor;

/// Converts one node into IR nodes; returns one value per ONNX output (fewer when trailing
/// outputs are not produced).
pub(super) fn convert(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
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

/// Required input `k`.
pub(super) fn data(cx: &Ctx, ins: &[Option<Val>], k: usize) -> Result<Val> {
    ins.get(k).and_then(Option::as_ref).map(Val::dup).ok_or_else(|| cx.malformed(format!("missing input {k}")))
}

/// Optional input `k`, which must be known at import time.
pub(super) fn const_input(cx: &Ctx, ins: &[Option<Val>], k: usize, what: &str) -> Result<Option<Tensor>> {
    match ins.get(k).and_then(Option::as_ref) {
        None => Ok(None),
        Some(Val::Const(t)) => Ok(Some(t.shallow_clone())),
        Some(Val::Node(_)) => Err(cx.unsupported(format!("input {k} ({what}) must be known at import time"))),
    }
}

/// Required input `k`, which must be known at import time.
pub(super) fn weight(cx: &Ctx, ins: &[Option<Val>], k: usize, what: &str) -> Result<Tensor> {
    const_input(cx, ins, k, what)?.ok_or_else(|| cx.malformed(format!("missing input {k} ({what})")))
}

/// An integer list given as attribute `attr` (old opsets) or as constant input `k` (new ones).
pub(super) fn ints_param(cx: &Ctx, ins: &[Option<Val>], attr: &str, k: usize) -> Result<Option<Vec<i64>>> {
    if let Some(v) = cx.attr_ints(attr)? {
        return Ok(Some(v));
    }
    match const_input(cx, ins, k, attr)? {
        None => Ok(None),
        Some(t) => tensor::ints(&t).map(Some).map_err(cx.torch()),
    }
}

//! Constants that folding creates rather than transforms: `Constant` nodes, `Shape` and
//! `Size`, `ConstantOfShape`, `Range`; and the size limits that keep a hostile model from
//! making folding allocate without bound.

use super::importer::Importer;
use super::node::Ctx;
use super::tensor::{self, ints};
use crate::error::Result;
use tch::{Kind, Tensor};

/// Largest tensor folding may create (elements), so a hostile model cannot exhaust memory.
pub(super) const MAX_FOLD_ELEMENTS: i64 = 1 << 28;

/// Refuses element-wise ops whose broadcast result, and Tiles whose result, would be too large
/// (checked before libtorch allocates it).
pub(super) fn check_result_size(cx: &Ctx, c: &[Option<&Tensor>]) -> Result<()> {
    let too_big = |n: Option<i64>| n.is_none_or(|n| n > MAX_FOLD_ELEMENTS);
    let numel = |s: &[i64]| s.iter().try_fold(1i64, |a, &d| a.checked_mul(d));
    if cx.op == "Tile" {
        if let (Some(Some(x)), Some(Some(r))) = (c.first(), c.get(1)) {
            let reps = ints(r).map_err(cx.torch())?;
            if reps.iter().any(|&r| r < 0) || too_big(numel(&reps).and_then(|r| r.checked_mul(x.numel() as i64))) {
                return Err(cx.unsupported(format!("constant folding of a Tile by {reps:?}")));
            }
        }
        return Ok(());
    }
    const ELEMENTWISE: &[&str] = &[
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Mod",
        "Pow",
        "Max",
        "Min",
        "Sum",
        "Equal",
        "Less",
        "Greater",
        "LessOrEqual",
        "GreaterOrEqual",
        "And",
        "Or",
        "Xor",
        "Where",
    ];
    if !ELEMENTWISE.contains(&cx.op) {
        return Ok(());
    }
    let mut shape: Vec<i64> = vec![];
    for t in c.iter().flatten() {
        match broadcast(&shape, &t.size()) {
            Some(s) => shape = s,
            None => return Ok(()),
        }
    }
    if too_big(numel(&shape)) {
        return Err(cx.unsupported(format!("constant folding would create a tensor of shape {shape:?}")));
    }
    Ok(())
}

pub(super) fn constant(imp: &Importer, cx: &Ctx) -> Result<Tensor> {
    if let Some(t) = cx.attr_t("value")? {
        return tensor::to_tensor(t, imp.base_dir);
    }
    let scalar = |t: Tensor| t.f_reshape([0i64; 0]).map_err(cx.torch());
    if cx.has("value_float") {
        return scalar(Tensor::from_slice(&[cx.attr_f("value_float", 0.0)?]));
    }
    if cx.has("value_int") {
        return scalar(Tensor::from_slice(&[cx.attr_i("value_int", 0)?]));
    }
    if let Some(v) = cx.attr_floats("value_floats")? {
        return Ok(Tensor::from_slice(&v));
    }
    if let Some(v) = cx.attr_ints("value_ints")? {
        return Ok(Tensor::from_slice(&v));
    }
    Err(cx.unsupported("only tensor, float and int constants are supported (not sparse or string ones)"))
}

pub(super) fn shape_of(cx: &Ctx, shape: &[i64]) -> Result<Vec<Tensor>> {
    if cx.op == "Size" {
        let n: i64 = shape.iter().product();
        return Ok(vec![Tensor::from_slice(&[n]).f_reshape([0i64; 0]).map_err(cx.torch())?]);
    }
    let r = shape.len() as i64;
    let norm = |x: i64| (if x < 0 { x + r } else { x }).clamp(0, r) as usize;
    let start = norm(cx.attr_i("start", 0)?);
    let end = norm(cx.attr_i("end", r)?).max(start);
    Ok(vec![Tensor::from_slice(&shape[start..end])])
}

/// ConstantOfShape: the `value` attribute (default float 0) repeated over the shape.
pub(super) fn constant_of_shape(cx: &Ctx, shape: &Tensor) -> Result<Tensor> {
    let dims = ints(shape).map_err(cx.torch())?;
    if dims.iter().any(|&d| d < 0) || dims.iter().try_fold(1i64, |a, &d| a.checked_mul(d)).is_none_or(|n| n > MAX_FOLD_ELEMENTS) {
        return Err(cx.malformed(format!("invalid shape {dims:?}")));
    }
    let value = match cx.attr_t("value")? {
        Some(v) => tensor::to_tensor(v, None)?,
        None => Tensor::from_slice(&[0f32]),
    };
    value.f_reshape([0i64; 0]).and_then(|v| v.f_expand(dims.as_slice(), false)).map_err(cx.torch())
}

/// Range with ONNX's element count `max(ceil((limit - start) / delta), 0)`.
pub(super) fn range(cx: &Ctx, start: &Tensor, limit: &Tensor, delta: &Tensor) -> Result<Tensor> {
    let t = cx.torch();
    let f = |x: &Tensor| x.f_to_kind(Kind::Double).map(|x| x.double_value(&[]));
    let (s, l, d) = (f(start).map_err(&t)?, f(limit).map_err(&t)?, f(delta).map_err(&t)?);
    let n = ((l - s) / d).ceil().max(0.0);
    if d == 0.0 || !n.is_finite() || n > MAX_FOLD_ELEMENTS as f64 {
        return Err(cx.malformed(format!("range({s}, {l}, {d})")));
    }
    let kind = start.kind();
    let out = if is_int(kind) {
        let (s, d) = (ints(start).map_err(&t)?, ints(delta).map_err(&t)?);
        let (s, d) = (s.first().copied().unwrap_or(0), d.first().copied().unwrap_or(1));
        Tensor::from_slice(&(0..n as i64).map(|i| s + i * d).collect::<Vec<i64>>())
    } else {
        Tensor::from_slice(&(0..n as i64).map(|i| s + i as f64 * d).collect::<Vec<f64>>())
    };
    out.f_to_kind(kind).map_err(t)
}

/// Numpy broadcast of two shapes.
pub(super) fn broadcast(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let n = a.len().max(b.len());
    let at = |s: &[i64], i: usize| if i + s.len() >= n { s[i + s.len() - n] } else { 1 };
    (0..n)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// Whether a kind is an integer kind.
pub(super) fn is_int(k: Kind) -> bool {
    matches!(k, Kind::Uint8 | Kind::Int8 | Kind::Int16 | Kind::Int | Kind::Int64)
}

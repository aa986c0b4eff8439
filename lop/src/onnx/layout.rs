//! Layout ops: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Expand, and Gather of
//! one index. The shape rules here are shared with constant folding.

use super::args::{axes, axis, data, ints_param};
use super::importer::{Importer, Val};
use super::node::Ctx;
use crate::error::Result;
use crate::ops::{Op, SliceAxis};
use crate::value::DTypeKind;

/// Output shape of Unsqueeze (`axes` index the output).
pub(super) fn unsqueeze_shape(cx: &Ctx, shape: &[usize], ax: &[i64]) -> Result<Vec<usize>> {
    let ax = axes(cx, ax, shape.len() + ax.len())?;
    let mut rest = shape.iter();
    Ok((0..shape.len() + ax.len()).map(|i| if ax.contains(&i) { 1 } else { rest.next().copied().unwrap_or(1) }).collect())
}

/// Output shape of Squeeze (all extent-1 axes when `ax` is `None`).
pub(super) fn squeeze_shape(cx: &Ctx, shape: &[usize], ax: Option<&[i64]>) -> Result<Vec<usize>> {
    let drop = match ax {
        None => (0..shape.len()).filter(|&i| shape[i] == 1).collect(),
        Some(v) => axes(cx, v, shape.len())?,
    };
    if let Some(&bad) = drop.iter().find(|&&i| shape[i] != 1) {
        return Err(cx.malformed(format!("cannot squeeze axis {bad} of shape {shape:?}")));
    }
    Ok(shape.iter().enumerate().filter(|(i, _)| !drop.contains(i)).map(|(_, &d)| d).collect())
}

/// Output shape of Reshape: `0` copies the input dimension (unless `allowzero`), `-1` is inferred.
pub(super) fn reshape_target(cx: &Ctx, shape: &[usize], spec: &[i64], allowzero: bool) -> Result<Vec<usize>> {
    let numel: usize = shape.iter().product();
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &s) in spec.iter().enumerate() {
        match s {
            -1 if infer.is_none() => {
                infer = Some(i);
                out.push(1);
            }
            0 if !allowzero => {
                out.push(*shape.get(i).ok_or_else(|| cx.malformed(format!("reshape {spec:?} copies axis {i} of {shape:?}")))?)
            }
            s if s >= 0 && s as usize <= super::node::MAX_EXTENT => out.push(s as usize),
            _ => return Err(cx.malformed(format!("invalid reshape target {spec:?}"))),
        }
    }
    let known =
        out.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or_else(|| cx.malformed(format!("reshape target {spec:?} overflows")))?;
    if let Some(i) = infer {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(cx.malformed(format!("cannot reshape {shape:?} to {spec:?}")));
        }
        out[i] = numel / known;
    }
    if out.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) != Some(numel) {
        return Err(cx.malformed(format!("cannot reshape {shape:?} ({numel} elements) to {spec:?}")));
    }
    Ok(out)
}

/// Output shape of Flatten.
pub(super) fn flatten_shape(cx: &Ctx, shape: &[usize], ax: i64) -> Result<Vec<usize>> {
    let a = if ax == shape.len() as i64 { shape.len() } else { axis(cx, ax, shape.len())? };
    Ok(vec![shape[..a].iter().product(), shape[a..].iter().product()])
}

/// Reshape to `shape`, or the value itself when the shape does not change.
fn reshape_to(imp: &mut Importer, cx: &Ctx, x: Val, shape: Vec<usize>, suffix: &str) -> Result<Val> {
    if imp.shape(&x) == shape {
        return Ok(x);
    }
    imp.emit(cx, suffix, Op::Reshape { shape }, &[x])
}

/// Reshape, Flatten, Squeeze and Unsqueeze of computed tensors.
pub(super) fn reshape_like(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let shape = imp.shape(&x);
    let target = match cx.op {
        "Reshape" => {
            let spec = ints_param(cx, ins, "shape", 1)?.ok_or_else(|| cx.malformed("missing target shape"))?;
            reshape_target(cx, &shape, &spec, cx.attr_i("allowzero", 0)? != 0)?
        }
        "Flatten" => flatten_shape(cx, &shape, cx.attr_i("axis", 1)?)?,
        "Squeeze" => squeeze_shape(cx, &shape, ints_param(cx, ins, "axes", 1)?.as_deref())?,
        _ => {
            let ax = ints_param(cx, ins, "axes", 1)?.ok_or_else(|| cx.malformed("missing axes"))?;
            unsqueeze_shape(cx, &shape, &ax)?
        }
    };
    Ok(vec![reshape_to(imp, cx, x, target, "")?])
}

/// Transpose (default: reverse the axes).
pub(super) fn transpose(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let rank = imp.shape(&x).len();
    let perm = match cx.attr_ints("perm")? {
        Some(p) => p.iter().map(|&a| axis(cx, a, rank)).collect::<Result<Vec<_>>>()?,
        None => (0..rank).rev().collect(),
    };
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(vec![x]);
    }
    Ok(vec![imp.emit(cx, "", Op::Transpose { perm }, &[x])?])
}

/// Concat (inputs with no elements are dropped).
pub(super) fn concat(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let xs: Vec<Val> = ins.iter().flatten().map(Val::dup).collect();
    let first = xs.first().ok_or_else(|| cx.malformed("no inputs"))?;
    let a = axis(cx, cx.attr_i("axis", 0)?, imp.shape(first).len())?;
    let xs: Vec<Val> = xs.iter().filter(|v| imp.shape(v).iter().product::<usize>() > 0).map(Val::dup).collect();
    match xs.len() {
        0 => Err(cx.unsupported("concatenation of empty tensors")),
        1 => Ok(xs),
        _ => Ok(vec![imp.emit(cx, "", Op::Concat { axis: a }, &xs)?]),
    }
}

/// Gather of a computed tensor at one constant index: a one-row slice (and a reshape dropping
/// the axis for a scalar index).
pub(super) fn gather(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let idx = data(cx, ins, 1)?;
    let shape = imp.shape(&x);
    let a = axis(cx, cx.attr_i("axis", 0)?, shape.len())?;
    // Indices computed at run time, or several of them: a barrier picking whole entries.
    let one = match &idx {
        Val::Const(t) if t.dim() <= 1 => super::tensor::ints(t).map_err(cx.torch())?.first().copied().filter(|_| t.numel() == 1),
        _ => None,
    };
    let Some(i) = one else {
        let idx = match idx {
            Val::Const(t) => Val::Const(t.f_to_kind(tch::Kind::Int64).map_err(cx.torch())?),
            v => v,
        };
        return Ok(vec![imp.emit(cx, "", Op::Whole(crate::ops::WholeOp::Gather { axis: a }), &[x, idx])?]);
    };
    let Val::Const(idx) = idx else { return Err(cx.malformed("constant indices expected")) };
    let i = axis(cx, i, shape[a])?;
    let sliced =
        if shape[a] == 1 { x } else { imp.emit(cx, "slice", Op::Slice(vec![SliceAxis { axis: a, start: i, end: i + 1, step: 1 }]), &[x])? };
    if idx.dim() == 0 {
        let mut target = shape.clone();
        target.remove(a);
        return Ok(vec![reshape_to(imp, cx, sliced, target, "")?]);
    }
    Ok(vec![sliced])
}

/// Expand of a computed tensor: an exact multiplication by ones spanning the broadcast axes.
pub(super) fn expand(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let target = ints_param(cx, ins, "shape", 1)?.ok_or_else(|| cx.malformed("missing shape"))?;
    let xs: Vec<i64> = imp.shape(&x).iter().map(|&d| d as i64).collect();
    let out = super::sources::broadcast(&xs, &target).ok_or_else(|| cx.malformed(format!("cannot expand {xs:?} to {target:?}")))?;
    if out == xs {
        return Ok(vec![x]);
    }
    let n = out.len();
    let ones: Vec<i64> = (0..n).map(|i| if i + xs.len() >= n && xs[i + xs.len() - n] != 1 { 1 } else { out[i] }).collect();
    let kind = match &x {
        Val::Node(id) => imp.b.info(*id).dtype.kind(),
        Val::Const(t) => t.kind(),
    };
    let ones = tch::Tensor::f_ones(ones.as_slice(), (kind, tch::Device::Cpu)).map_err(cx.torch())?;
    Ok(vec![imp.emit(cx, "", Op::Binary(crate::ops::BinaryOp::Mul), &[x, Val::Const(ones)])?])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::error::Result;
    use tch::Tensor;

    #[test]
    fn transpose_flatten_squeeze_unsqueeze_gather() -> Result<()> {
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 3, 4, 5]);
        m.init_i64("ax", &[1], &[0]);
        m.init_i64("idx", &[], &[2]);
        m.node("Transpose", &["x"], &["t"], vec![ais("perm", &[0, 2, 3, 1])]);
        m.node("Flatten", &["t"], &["f"], vec![ai("axis", 2)]);
        m.node("Unsqueeze", &["f", "ax"], &["u"], vec![]);
        m.node("Squeeze", &["u", "ax"], &["s"], vec![]);
        m.node("Gather", &["s", "idx"], &["y"], vec![ai("axis", 1)]);
        m.output("y");
        let g = m.import()?;
        let x = randn(&[1, 3, 4, 5], 3);
        // Flatten always gives a matrix: [1*4, 5*3].
        let want: Tensor = x.permute([0, 2, 3, 1]).reshape([4, 15]).select(1, 2);
        let y = run(&g, &x)?;
        assert_eq!(y[0].size(), vec![4]);
        assert_eq!(max_diff(&y[0], &want), 0.0);
        Ok(())
    }

    #[test]
    fn expand_of_a_computed_tensor_and_reversed_constant_slice() -> Result<()> {
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 3, 1, 1]);
        m.init_i64("shape", &[4], &[1, 1, 4, 5]);
        m.init_i64("v", &[4], &[10, 20, 30, 40]);
        m.init_i64("st", &[1], &[-1]);
        m.init_i64("en", &[1], &[i64::MIN]);
        m.init_i64("ax", &[1], &[0]);
        m.init_i64("sp", &[1], &[-2]);
        m.node("Expand", &["x", "shape"], &["y"], vec![]);
        m.node("Slice", &["v", "st", "en", "ax", "sp"], &["r"], vec![]);
        m.output("y");
        m.output("r");
        let g = m.import()?;
        let x = randn(&[1, 3, 1, 1], 4);
        let ys = run(&g, &x)?;
        assert_eq!(max_diff(&ys[0], &x.expand([1, 3, 4, 5], false)), 0.0);
        assert_eq!(super::super::tensor::ints(&ys[1]).unwrap_or_default(), vec![40, 20]);
        Ok(())
    }
}

//! Arithmetic ops: element-wise unary and binary maps, PRelu, Softmax, LayerNormalization,
//! MatMul, Gemm, ReduceMean and Cast.

use super::args::{axes, axis, const_input, data, ints_param, weight};
use super::importer::{Importer, Val};
use super::node::Ctx;
use super::tensor::{floats, kind_of};
use crate::error::Result;
use crate::graph::DType;
use crate::ops::{BinaryOp, Op, ReduceKind, UnaryOp};
use crate::value::DTypeKind;
use tch::{Kind, Tensor};

fn scalar(v: f32) -> Val {
    Val::Const(Tensor::from_slice(&[v]).view([0i64; 0]))
}

/// Bound of Clip from attribute `attr` (old opsets) or input `k`.
fn clip_bound(cx: &Ctx, ins: &[Option<Val>], attr: &str, k: usize, default: f32) -> Result<f32> {
    if cx.has(attr) {
        return cx.attr_f(attr, default);
    }
    match const_input(cx, ins, k, attr)? {
        Some(t) => floats(&t).map_err(cx.torch())?.first().copied().ok_or_else(|| cx.malformed(format!("empty {attr}"))),
        None => Ok(default),
    }
}

/// One-input element-wise ops.
pub(super) fn unary(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let u = match cx.op {
        "Relu" => UnaryOp::Relu,
        "LeakyRelu" => UnaryOp::LeakyRelu(cx.attr_f("alpha", 0.01)?),
        "Sigmoid" => UnaryOp::Sigmoid,
        "HardSigmoid" => UnaryOp::HardSigmoid { alpha: cx.attr_f("alpha", 0.2)?, beta: cx.attr_f("beta", 0.5)? },
        "HardSwish" => UnaryOp::HardSwish,
        "Erf" => UnaryOp::Erf,
        "Tanh" => UnaryOp::Tanh,
        "Exp" => UnaryOp::Exp,
        "Sqrt" => UnaryOp::Sqrt,
        "Reciprocal" => UnaryOp::Reciprocal,
        "Neg" => UnaryOp::Neg,
        "Abs" => UnaryOp::Abs,
        "Not" => UnaryOp::Not,
        "Sin" => UnaryOp::Sin,
        "Cos" => UnaryOp::Cos,
        "Log" => UnaryOp::Log,
        "Floor" => UnaryOp::Floor,
        "Ceil" => UnaryOp::Ceil,
        "Gelu" => match cx.attr_s("approximate", "none")?.as_str() {
            "none" => UnaryOp::Gelu { tanh: false },
            "tanh" => UnaryOp::Gelu { tanh: true },
            other => return Err(cx.unsupported(format!("approximate = '{other}'"))),
        },
        _ => UnaryOp::Clip { min: clip_bound(cx, ins, "min", 1, f32::NEG_INFINITY)?, max: clip_bound(cx, ins, "max", 2, f32::INFINITY)? },
    };
    Ok(vec![imp.emit(cx, "", Op::Unary(u), &[x])?])
}

/// PRelu as `relu(x) + slope * min(x, 0)`, which is exact in floating point.
pub(super) fn prelu(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let slope = Val::Const(weight(cx, ins, 1, "slope")?.f_to_kind(Kind::Float).map_err(cx.torch())?);
    let pos = imp.emit(cx, "relu", Op::Unary(UnaryOp::Relu), &[x.dup()])?;
    let neg = imp.emit(cx, "neg", Op::Binary(BinaryOp::Min), &[x, scalar(0.0)])?;
    let scaled = imp.emit(cx, "scaled", Op::Binary(BinaryOp::Mul), &[neg, slope])?;
    Ok(vec![imp.emit(cx, "", Op::Binary(BinaryOp::Add), &[pos, scaled])?])
}

/// Binary arithmetic (variadic Max, Min, Sum and Mean chain pairwise). Constant operands become
/// `Constant` nodes, in float when the other operand is float.
pub(super) fn binary(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let mut xs: Vec<Val> = ins.iter().flatten().map(Val::dup).collect();
    let any_float = xs.iter().any(|v| match v {
        Val::Node(id) => imp.b.info(*id).dtype == DType::F32,
        Val::Const(t) => t.is_floating_point(),
    });
    if any_float {
        for v in &mut xs {
            if let Val::Const(t) = v {
                *t = t.f_to_kind(Kind::Float).map_err(cx.torch())?;
            }
        }
    }
    let b = match cx.op {
        "Mod" => BinaryOp::Mod { fmod: cx.attr_i("fmod", 0)? != 0 },
        "Equal" => BinaryOp::Equal,
        "Less" => BinaryOp::Less,
        "Greater" => BinaryOp::Greater,
        "LessOrEqual" => BinaryOp::LessOrEqual,
        "GreaterOrEqual" => BinaryOp::GreaterOrEqual,
        "And" => BinaryOp::And,
        "Or" => BinaryOp::Or,
        "Xor" => BinaryOp::Xor,
        "Add" | "Sum" | "Mean" => BinaryOp::Add,
        "Sub" => BinaryOp::Sub,
        "Mul" => BinaryOp::Mul,
        "Div" => BinaryOp::Div,
        "Pow" => BinaryOp::Pow,
        "Max" => BinaryOp::Max,
        _ => BinaryOp::Min,
    };
    let variadic = matches!(cx.op, "Sum" | "Mean" | "Max" | "Min");
    if xs.is_empty() || (!variadic && xs.len() != 2) {
        return Err(cx.malformed(format!("{} inputs", xs.len())));
    }
    let n = xs.len();
    let mut it = xs.into_iter();
    let mut acc = it.next().ok_or_else(|| cx.malformed("no inputs"))?;
    for (k, v) in it.enumerate() {
        let last = k + 2 == n && cx.op != "Mean";
        acc = imp.emit(cx, if last { "" } else { "acc" }, Op::Binary(b), &[acc, v])?;
    }
    if cx.op == "Mean" && n > 1 {
        acc = imp.emit(cx, "", Op::Binary(BinaryOp::Div), &[acc, scalar(n as f32)])?;
    }
    Ok(vec![acc])
}

/// Softmax. Before opset 13 it normalises over all axes from `axis` on; that is one axis when
/// the others have extent 1, and otherwise a reshape to 2-d, a softmax and a reshape back.
pub(super) fn softmax(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let shape = imp.shape(&x);
    if cx.opset >= 13 {
        let a = axis(cx, cx.attr_i("axis", -1)?, shape.len())?;
        return Ok(vec![imp.emit(cx, "", Op::Softmax { axis: a }, &[x])?]);
    }
    let a = axis(cx, cx.attr_i("axis", 1)?, shape.len())?;
    let real: Vec<usize> = (a..shape.len()).filter(|&i| shape[i] != 1).collect();
    if real.len() <= 1 {
        let one = real.first().copied().unwrap_or(a);
        return Ok(vec![imp.emit(cx, "", Op::Softmax { axis: one }, &[x])?]);
    }
    let flat = vec![shape[..a].iter().product(), shape[a..].iter().product()];
    let r = imp.emit(cx, "flatten", Op::Reshape { shape: flat }, &[x])?;
    let s = imp.emit(cx, "softmax", Op::Softmax { axis: 1 }, &[r])?;
    Ok(vec![imp.emit(cx, "", Op::Reshape { shape }, &[s])?])
}

/// Reshapes (or broadcasts) a scale or bias to the normalised shape.
fn fit(cx: &Ctx, t: &Tensor, shape: &[i64]) -> Result<Tensor> {
    let t = t.f_to_kind(Kind::Float).map_err(cx.torch())?;
    if t.numel() as i64 == shape.iter().product::<i64>() {
        return t.f_reshape(shape).map_err(cx.torch());
    }
    t.f_broadcast_to(shape)
        .and_then(|b| b.f_contiguous())
        .map_err(|_| cx.malformed(format!("scale/bias {:?} for normalised shape {shape:?}", t.size())))
}

/// LayerNormalization over axes `[axis, rank)`.
pub(super) fn layer_norm(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let shape = imp.shape(&x);
    let a = axis(cx, cx.attr_i("axis", -1)?, shape.len())?;
    let norm: Vec<i64> = shape[a..].iter().map(|&d| d as i64).collect();
    let w = fit(cx, &weight(cx, ins, 1, "scale")?, &norm)?;
    let b = const_input(cx, ins, 2, "bias")?.map(|b| fit(cx, &b, &norm)).transpose()?;
    let eps = f64::from(cx.attr_f("epsilon", 1e-5)?);
    Ok(vec![imp.emit(cx, "", Op::LayerNorm { axis: a, weight: Some(w), bias: b, eps }, &[x])?])
}

/// MatMul: a linear map when the right operand is a constant matrix.
pub(super) fn matmul(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let a = data(cx, ins, 0)?;
    let b = data(cx, ins, 1)?;
    if let (Val::Node(_), Val::Const(w)) = (&a, &b)
        && w.dim() == 2
    {
        let weight = w.f_to_kind(Kind::Float).and_then(|w| w.f_transpose(0, 1)).and_then(|w| w.f_contiguous()).map_err(cx.torch())?;
        return Ok(vec![imp.emit(cx, "", Op::Linear { weight, bias: None, act: None }, &[a])?]);
    }
    Ok(vec![imp.emit(cx, "", Op::MatMul, &[a, b])?])
}

/// Gemm on a computed 2-d input with constant B (and C): `alpha * A B' + beta * C`.
pub(super) fn gemm(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let a = data(cx, ins, 0)?;
    if cx.attr_i("transA", 0)? != 0 {
        return Err(cx.unsupported("transA = 1"));
    }
    let t = cx.torch();
    let b = weight(cx, ins, 1, "B")?.f_to_kind(Kind::Float).map_err(&t)?;
    let (alpha, beta) = (f64::from(cx.attr_f("alpha", 1.0)?), f64::from(cx.attr_f("beta", 1.0)?));
    let shape = imp.shape(&a);
    if shape.len() != 2 || b.dim() != 2 {
        return Err(cx.malformed(format!("A {shape:?} and B {:?} must be matrices", b.size())));
    }
    let mut w = if cx.attr_i("transB", 0)? != 0 { b } else { b.f_transpose(0, 1).and_then(|w| w.f_contiguous()).map_err(&t)? };
    if alpha != 1.0 {
        w = w.f_mul_scalar(alpha).map_err(&t)?;
    }
    let n = w.size()[0];
    let c = match const_input(cx, ins, 2, "C")? {
        Some(c) if beta != 0.0 => Some(c.f_to_kind(Kind::Float).and_then(|c| c.f_mul_scalar(beta)).map_err(&t)?),
        _ => None,
    };
    let per_column = c.as_ref().is_none_or(|c| c.numel() == 1 || (c.numel() as i64 == n && c.size().last() == Some(&n)));
    if per_column {
        let bias =
            c.map(|c| c.f_reshape([-1]).and_then(|c| c.f_expand([n], false)).and_then(|c| c.f_contiguous())).transpose().map_err(&t)?;
        return Ok(vec![imp.emit(cx, "", Op::Linear { weight: w, bias, act: None }, &[a])?]);
    }
    let y = imp.emit(cx, "linear", Op::Linear { weight: w, bias: None, act: None }, &[a])?;
    let c = c.ok_or_else(|| cx.malformed("missing C"))?;
    Ok(vec![imp.emit(cx, "", Op::Binary(BinaryOp::Add), &[y, Val::Const(c)])?])
}

/// ReduceMean (axes as attribute or input, keepdims, noop_with_empty_axes).
pub(super) fn reduce(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let rank = imp.shape(&x).len();
    let keepdims = cx.attr_i("keepdims", 1)? != 0;
    let ax = match ints_param(cx, ins, "axes", 1)? {
        Some(v) if !v.is_empty() => axes(cx, &v, rank)?,
        _ if cx.attr_i("noop_with_empty_axes", 0)? != 0 => return Ok(vec![x]),
        _ => (0..rank).collect(),
    };
    let op = match cx.op {
        "ReduceSum" => Op::Reduce { kind: ReduceKind::Sum, axes: ax, keepdims },
        "ReduceMax" => Op::Reduce { kind: ReduceKind::Max, axes: ax, keepdims },
        "ReduceMin" => Op::Reduce { kind: ReduceKind::Min, axes: ax, keepdims },
        _ => Op::ReduceMean { axes: ax, keepdims },
    };
    Ok(vec![imp.emit(cx, "", op, &[x])?])
}

/// Cast of a computed tensor: the identity between float types; integers to float through an
/// exact multiplication by 1.
pub(super) fn cast(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let target = match cx.op {
        "CastLike" => match data(cx, ins, 1)? {
            Val::Const(t) => t.kind(),
            Val::Node(id) => imp.b.info(id).dtype.kind(),
        },
        _ => {
            let to = cx.attr_i("to", 0)?;
            kind_of(to).ok_or_else(|| cx.unsupported(format!("cast to data type {to}")))?
        }
    };
    let Val::Node(id) = x else { return Err(cx.malformed("constant input was not folded")) };
    let from = imp.b.info(id).dtype;
    match (from, target) {
        (DType::F32, Kind::Float | Kind::Double) | (DType::U8, Kind::Uint8) | (DType::I64, Kind::Int64) => Ok(vec![x]),
        (DType::U8 | DType::I64, Kind::Float | Kind::Double) => Ok(vec![imp.emit(cx, "", Op::Binary(BinaryOp::Mul), &[x, scalar(1.0)])?]),
        (DType::Bool, Kind::Bool) => Ok(vec![x]),
        (_, Kind::Float | Kind::Double | Kind::Int64 | Kind::Uint8 | Kind::Bool) => {
            let to = DType::from_kind(if target == Kind::Double { Kind::Float } else { target })
                .ok_or_else(|| cx.unsupported(format!("cast from {from:?} to {target:?} at run time")))?;
            Ok(vec![imp.emit(cx, "", Op::Unary(UnaryOp::Cast(to)), &[x])?])
        }
        _ => Err(cx.unsupported(format!("cast from {from:?} to {target:?} at run time"))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::proto::tensor_proto::DataType;
    use super::super::testutil::*;
    use crate::error::Result;
    use crate::graph::DType;
    use tch::{Kind, Tensor};

    #[test]
    fn softmax_before_and_after_opset_13() -> Result<()> {
        let x = randn(&[1, 3, 2, 2], 1);
        let mut m = ModelBuilder::new(11);
        m.input("x", &[1, 3, 2, 2]);
        m.node("Softmax", &["x"], &["y"], vec![ai("axis", 1)]);
        m.output("y");
        let g = m.import()?;
        assert_eq!(count(&g, "Reshape"), 2);
        let want = x.reshape([1, 12]).softmax(1, Kind::Float).reshape([1, 3, 2, 2]);
        assert!(max_diff(&run(&g, &x)?[0], &want) < 1e-6);

        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 3, 2, 2]);
        m.node("Softmax", &["x"], &["y"], vec![ai("axis", 1)]);
        m.output("y");
        let g = m.import()?;
        assert_eq!(count(&g, "Reshape"), 0);
        assert!(max_diff(&run(&g, &x)?[0], &x.softmax(1, Kind::Float)) < 1e-6);

        // Opset 11 over a [1, C, 1, 1] tensor is a plain softmax over C.
        let mut m = ModelBuilder::new(11);
        m.input("x", &[1, 10, 1, 1]);
        m.node("Softmax", &["x"], &["y"], vec![]);
        m.output("y");
        let g = m.import()?;
        assert_eq!((count(&g, "Reshape"), count(&g, "Softmax")), (0, 1));
        Ok(())
    }

    #[test]
    fn gemm_and_matmul_become_linear() -> Result<()> {
        let (b, c, w2) = (values(5 * 12, 1), values(5, 2), values(12 * 4, 3));
        let mut m = ModelBuilder::new(13);
        m.input("x", &[2, 3, 2, 2]);
        m.init_f32("B", &[5, 12], &b);
        m.init_f32("C", &[5], &c);
        m.init_f32("W", &[12, 4], &w2);
        m.node("Flatten", &["x"], &["f"], vec![]);
        m.node("Gemm", &["f", "B", "C"], &["y"], vec![ai("transB", 1), af("alpha", 1.0), af("beta", 1.0)]);
        m.node("MatMul", &["f", "W"], &["z"], vec![]);
        m.output("y");
        m.output("z");
        let g = m.import()?;
        assert_eq!((count(&g, "Linear"), count(&g, "MatMul")), (2, 0));
        let x = randn(&[2, 3, 2, 2], 4);
        let ys = run(&g, &x)?;
        let f = x.reshape([2, 12]);
        let want_y = f.matmul(&Tensor::from_slice(&b).view([5, 12]).tr()) + Tensor::from_slice(&c);
        let want_z = f.matmul(&Tensor::from_slice(&w2).view([12, 4]));
        assert!(max_diff(&ys[0], &want_y) < 1e-5);
        assert!(max_diff(&ys[1], &want_z) < 1e-5);

        let mut m = ModelBuilder::new(13);
        m.input("x", &[2, 12]);
        m.init_f32("B", &[12, 5], &b);
        m.node("Gemm", &["x", "B"], &["y"], vec![ai("transA", 1)]);
        m.output("y");
        assert!(matches!(m.import(), Err(crate::Error::Unsupported { .. })));
        Ok(())
    }

    #[test]
    fn clip_bounds_from_attributes_or_inputs() -> Result<()> {
        let x = randn(&[1, 2, 4, 4], 5) * 4.0;
        let mut m = ModelBuilder::new(9);
        m.input("x", &[1, 2, 4, 4]);
        m.node("Clip", &["x"], &["y"], vec![af("min", 0.0), af("max", 6.0)]);
        m.output("y");
        assert_eq!(max_diff(&run(&m.import()?, &x)?[0], &x.clamp(0.0, 6.0)), 0.0);
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 2, 4, 4]);
        m.init_f32("lo", &[], &[-1.0]);
        m.node("Clip", &["x", "lo"], &["y"], vec![]);
        m.output("y");
        assert_eq!(max_diff(&run(&m.import()?, &x)?[0], &x.clamp_min(-1.0)), 0.0);
        Ok(())
    }

    #[test]
    fn prelu_layernorm_reducemean_and_uint8_cast() -> Result<()> {
        let slope = values(3, 6);
        let (gamma, beta) = (values(4, 7), values(4, 8));
        let mut m = ModelBuilder::new(18);
        m.input_typed("img", DataType::Uint8, &[1, 3, 4, 4]);
        m.init_f32("slope", &[3, 1, 1], &slope);
        m.init_f32("k", &[], &[1.0 / 64.0]);
        m.init_f32("half", &[], &[0.5]);
        m.init_f32("gamma", &[4], &gamma);
        m.init_f32("beta", &[4], &beta);
        m.init_i64("axes", &[1], &[1]);
        m.node("Cast", &["img"], &["f"], vec![ai("to", DataType::Float as i64)]);
        m.node("Mul", &["f", "k"], &["s"], vec![]);
        m.node("Sub", &["s", "half"], &["c"], vec![]);
        m.node("PRelu", &["c", "slope"], &["p"], vec![]);
        m.node("LayerNormalization", &["p", "gamma", "beta"], &["ln"], vec![af("epsilon", 1e-5)]);
        m.node("ReduceMean", &["ln", "axes"], &["y"], vec![ai("keepdims", 1)]);
        m.output("y");
        let g = m.import()?;
        assert_eq!(g.nodes[g.inputs()[0]].info.dtype, DType::U8);
        let img = Tensor::from_slice(&(0..48).map(|i| (i * 5) as u8).collect::<Vec<u8>>()).view([1, 3, 4, 4]);
        let y = crate::exec::run_whole(&g, &[img.shallow_clone()])?.outputs.remove(0);
        let c = img.to_kind(Kind::Float) * (1.0 / 64.0) - 0.5;
        let p = c.prelu(&Tensor::from_slice(&slope));
        let ln = p.layer_norm([4i64].as_slice(), Some(&Tensor::from_slice(&gamma)), Some(&Tensor::from_slice(&beta)), 1e-5, false);
        let want = ln.mean_dim([1i64].as_slice(), true, Kind::Float);
        assert!(max_diff(&y, &want) < 1e-5, "{}", max_diff(&y, &want));
        Ok(())
    }
}

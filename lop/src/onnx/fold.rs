//! Constant folding: `Constant` nodes, `Shape`/`Size` of any value (shapes are static), and
//! shape-arithmetic ops whose inputs are all known at import time. Integer arithmetic follows
//! ONNX (integer division truncates); libtorch on the CPU evaluates it exactly.

use super::args::{self, ints_param};
use super::importer::{Importer, Val};
use super::layout;
use super::node::Ctx;
use super::sources::{self, is_int};
use super::tensor::{self, ints, kind_of};
use crate::error::Result;
use tch::{Kind, Tensor};

/// Op types folded when all their inputs are constants.
pub(super) const FOLDABLE: &[&str] = &[
    "Identity",
    "Shape",
    "Size",
    "Gather",
    "Unsqueeze",
    "Squeeze",
    "Concat",
    "Cast",
    "CastLike",
    "Slice",
    "Reshape",
    "Flatten",
    "Transpose",
    "Expand",
    "ConstantOfShape",
    "Range",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "Not",
    "And",
    "Or",
    "Xor",
    "Where",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Mod",
    "Pow",
    "Max",
    "Min",
    "Sum",
    "Neg",
    "Abs",
    "Floor",
    "Ceil",
    "Round",
    "Sqrt",
    "Reciprocal",
    "Sign",
    "ReduceProd",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceMean",
    "Tile",
    "Pad",
    "Dropout",
];

/// Folds the node if possible: `Some(outputs)`, or `None` when it must be converted instead.
pub(super) fn fold(imp: &Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Option<Vec<Tensor>>> {
    match cx.op {
        "Constant" => return sources::constant(imp, cx).map(|t| Some(vec![t])),
        "Shape" | "Size" => {
            let x = ins.first().and_then(Option::as_ref).ok_or_else(|| cx.malformed("missing input"))?;
            let shape: Vec<i64> = imp.shape(x).iter().map(|&d| d as i64).collect();
            return sources::shape_of(cx, &shape).map(Some);
        }
        op if !FOLDABLE.contains(&op) => return Ok(None),
        _ => {}
    }
    if ins.iter().flatten().any(|v| v.as_const().is_none()) {
        return Ok(None);
    }
    let c: Vec<Option<&Tensor>> = ins.iter().map(|v| v.as_ref().and_then(Val::as_const)).collect();
    sources::check_result_size(cx, &c)?;
    let out = eval(cx, ins, &c)?;
    if out.numel() as i64 > sources::MAX_FOLD_ELEMENTS {
        return Err(cx.unsupported(format!("constant folding would create {} elements", out.numel())));
    }
    Ok(Some(vec![out]))
}

fn arg<'t>(cx: &Ctx, c: &[Option<&'t Tensor>], k: usize) -> Result<&'t Tensor> {
    c.get(k).copied().flatten().ok_or_else(|| cx.malformed(format!("missing input {k}")))
}

fn eval(cx: &Ctx, ins: &[Option<Val>], c: &[Option<&Tensor>]) -> Result<Tensor> {
    let t = cx.torch();
    let x = || arg(cx, c, 0);
    let y = || arg(cx, c, 1);
    let shape = |x: &Tensor| tensor::dims(x);
    let i64s = |v: Vec<usize>| v.into_iter().map(|d| d as i64).collect::<Vec<i64>>();
    Ok(match cx.op {
        "Identity" | "Dropout" => x()?.shallow_clone(),
        "Cast" => {
            let to = cx.attr_i("to", 0)?;
            let kind = kind_of(to).ok_or_else(|| cx.unsupported(format!("cast to data type {to}")))?;
            x()?.f_to_kind(kind).map_err(t)?
        }
        "CastLike" => x()?.f_to_kind(y()?.kind()).map_err(t)?,
        "Gather" => {
            let (x, idx) = (x()?, y()?);
            let a = args::axis(cx, cx.attr_i("axis", 0)?, x.dim())?;
            let d = x.size()[a];
            let v = ints(idx).map_err(&t)?;
            let v = v
                .iter()
                .map(|&i| if (-d..d).contains(&i) { Ok((i + d) % d) } else { Err(cx.malformed(format!("index {i} out of range {d}"))) });
            let idx_flat = Tensor::from_slice(&v.collect::<Result<Vec<_>>>()?);
            let mut out_shape: Vec<i64> = x.size()[..a].to_vec();
            out_shape.extend(idx.size());
            out_shape.extend(&x.size()[a + 1..]);
            x.f_index_select(a as i64, &idx_flat).and_then(|g| g.f_reshape(out_shape.as_slice())).map_err(t)?
        }
        "Unsqueeze" | "Squeeze" | "Reshape" | "Flatten" => {
            let x = x()?;
            let s = shape(x);
            let target = match cx.op {
                "Unsqueeze" => {
                    layout::unsqueeze_shape(cx, &s, &ints_param(cx, ins, "axes", 1)?.ok_or_else(|| cx.malformed("missing axes"))?)?
                }
                "Squeeze" => layout::squeeze_shape(cx, &s, ints_param(cx, ins, "axes", 1)?.as_deref())?,
                "Flatten" => layout::flatten_shape(cx, &s, cx.attr_i("axis", 1)?)?,
                _ => layout::reshape_target(cx, &s, &ints(y()?).map_err(&t)?, cx.attr_i("allowzero", 0)? != 0)?,
            };
            x.f_reshape(i64s(target).as_slice()).map_err(t)?
        }
        "Concat" => {
            let xs: Vec<&Tensor> = c.iter().flatten().copied().collect();
            let rank = xs.first().map_or(0, |x| x.dim());
            let a = args::axis(cx, cx.attr_i("axis", 0)?, rank)?;
            Tensor::f_cat(&xs, a as i64).map_err(t)?
        }
        "Slice" => {
            let mut x = x()?.shallow_clone();
            for s in super::slice::slice_params(cx, ins, &shape(&x))? {
                let idx = Tensor::from_slice(&s.indices());
                x = x.f_index_select(s.axis as i64, &idx).map_err(&t)?;
            }
            x
        }
        "Transpose" => {
            let x = x()?;
            let perm = match cx.attr_ints("perm")? {
                Some(p) => p,
                None => (0..x.dim() as i64).rev().collect(),
            };
            x.f_permute(perm.as_slice()).map_err(t)?
        }
        "Expand" => {
            let x = x()?;
            let target = sources::broadcast(&x.size(), &ints(y()?).map_err(&t)?).ok_or_else(|| cx.malformed("shapes do not broadcast"))?;
            x.f_expand(target.as_slice(), false).map_err(t)?
        }
        "Tile" => x()?.f_repeat(ints(y()?).map_err(&t)?.as_slice()).map_err(t)?,
        "ConstantOfShape" => sources::constant_of_shape(cx, x()?)?,
        "Range" => sources::range(cx, x()?, y()?, arg(cx, c, 2)?)?,
        "Equal" => x()?.f_eq_tensor(y()?).map_err(t)?,
        "Less" => x()?.f_lt_tensor(y()?).map_err(t)?,
        "Greater" => x()?.f_gt_tensor(y()?).map_err(t)?,
        "LessOrEqual" => x()?.f_le_tensor(y()?).map_err(t)?,
        "GreaterOrEqual" => x()?.f_ge_tensor(y()?).map_err(t)?,
        "Not" => x()?.f_logical_not().map_err(t)?,
        "And" => x()?.f_logical_and(y()?).map_err(t)?,
        "Or" => x()?.f_logical_or(y()?).map_err(t)?,
        "Xor" => x()?.f_logical_xor(y()?).map_err(t)?,
        "Where" => {
            let cond = x()?.f_to_kind(Kind::Bool).map_err(&t)?;
            y()?.f_where_self(&cond, arg(cx, c, 2)?).map_err(t)?
        }
        "Add" | "Sub" | "Mul" | "Div" | "Mod" | "Pow" | "Max" | "Min" | "Sum" => {
            let mut acc = x()?.shallow_clone();
            for b in c.iter().skip(1).flatten() {
                acc = binary(cx, &acc, b)?;
            }
            acc
        }
        "Neg" => x()?.f_neg().map_err(t)?,
        "Abs" => x()?.f_abs().map_err(t)?,
        "Sign" => x()?.f_sign().map_err(t)?,
        "Floor" | "Ceil" | "Round" | "Sqrt" | "Reciprocal" if is_int(x()?.kind()) => {
            return Err(cx.malformed(format!("{} of an integer tensor", cx.op)));
        }
        "Floor" => x()?.f_floor().map_err(t)?,
        "Ceil" => x()?.f_ceil().map_err(t)?,
        "Round" => x()?.f_round().map_err(t)?,
        "Sqrt" => x()?.f_sqrt().map_err(t)?,
        "Reciprocal" => x()?.f_reciprocal().map_err(t)?,
        "Pad" => super::pool::fold_pad(cx, ins, x()?)?,
        _ => reduce(cx, ins, x()?)?,
    })
}

fn binary(cx: &Ctx, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let ints = is_int(a.kind()) && is_int(b.kind());
    match cx.op {
        "Add" | "Sum" => a.f_add(b),
        "Sub" => a.f_sub(b),
        "Mul" => a.f_mul(b),
        "Div" if ints => a.f_div_tensor_mode(b, "trunc"),
        "Div" => a.f_div(b),
        "Mod" if cx.attr_i("fmod", 0)? != 0 => a.f_fmod_tensor(b),
        "Mod" => a.f_remainder_tensor(b),
        "Pow" => a.f_pow(b),
        "Max" => a.f_maximum(b),
        _ => a.f_minimum(b),
    }
    .map_err(cx.torch())
}

fn reduce(cx: &Ctx, ins: &[Option<Val>], x: &Tensor) -> Result<Tensor> {
    let t = cx.torch();
    let keep = cx.attr_i("keepdims", 1)? != 0;
    let ax = match ints_param(cx, ins, "axes", 1)? {
        Some(v) if !v.is_empty() => args::axes(cx, &v, x.dim())?,
        _ if cx.attr_i("noop_with_empty_axes", 0)? != 0 => return Ok(x.shallow_clone()),
        _ => (0..x.dim()).collect(),
    };
    let dims: Vec<i64> = ax.iter().map(|&a| a as i64).collect();
    match cx.op {
        "ReduceSum" => x.f_sum_dim_intlist(dims.as_slice(), keep, None::<Kind>),
        "ReduceMean" => x.f_mean_dim(dims.as_slice(), keep, None::<Kind>),
        "ReduceMax" => x.f_amax(dims.as_slice(), keep),
        "ReduceMin" => x.f_amin(dims.as_slice(), keep),
        _ => dims.iter().rev().try_fold(x.shallow_clone(), |acc, &a| acc.f_prod_dim_int(a, keep, None::<Kind>)),
    }
    .map_err(t)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::error::Result;
    use crate::graph::{DType, Graph};
    use crate::ops::Op;
    use tch::Tensor;

    /// `Reshape(relu(x), Concat(Unsqueeze(Gather(Shape(x), 0)), [-1]))`.
    fn shape_model(opset: i64) -> ModelBuilder {
        let mut m = ModelBuilder::new(opset);
        m.input("x", &[1, 4, 6, 6]);
        m.init_i64("zero", &[], &[0]);
        m.init_i64("minus1", &[1], &[-1]);
        m.node("Relu", &["x"], &["r"], vec![]);
        m.node("Shape", &["r"], &["s"], vec![]);
        m.node("Gather", &["s", "zero"], &["n"], vec![ai("axis", 0)]);
        if opset >= 13 {
            m.init_i64("axes0", &[1], &[0]);
            m.node("Unsqueeze", &["n", "axes0"], &["u"], vec![]);
        } else {
            m.node("Unsqueeze", &["n"], &["u"], vec![ais("axes", &[0])]);
        }
        m.node("Concat", &["u", "minus1"], &["target"], vec![ai("axis", 0)]);
        m.node("Reshape", &["r", "target"], &["y"], vec![]);
        m.output("y");
        m
    }

    #[test]
    fn shape_subgraph_folds_to_a_static_reshape() -> Result<()> {
        for opset in [11, 13, 18] {
            let g = shape_model(opset).import()?;
            let kinds: Vec<&str> = g.nodes.iter().map(|n| n.op.kind_name()).collect();
            assert_eq!(kinds, ["Input", "Relu", "Reshape"], "opset {opset}");
            assert!(g.nodes.iter().all(|n| n.info.dtype == DType::F32));
            let Op::Reshape { shape } = &g.nodes[2].op else { panic!("not a reshape") };
            assert_eq!(shape, &[1, 144]);
            let x = randn(&[1, 4, 6, 6], 1);
            assert_eq!(max_diff(&run(&g, &x)?[0], &x.relu().reshape([1, 144])), 0.0);
        }
        Ok(())
    }

    /// Imports a model whose single output is a folded constant and returns it.
    fn folded(m: &mut ModelBuilder) -> Result<(Graph, Tensor)> {
        m.input("x", &[1, 1, 2, 2]);
        m.output("out");
        let g = m.import()?;
        let y = run(&g, &randn(&[1, 1, 2, 2], 2))?.remove(0);
        Ok((g, y))
    }

    fn i64s(t: &Tensor) -> Vec<i64> {
        super::ints(t).unwrap_or_default()
    }

    #[test]
    fn integer_division_truncates_like_onnx() -> Result<()> {
        let mut m = ModelBuilder::new(13);
        m.init_i64("a", &[4], &[-7, 7, 9, -1]);
        m.init_i64("b", &[1], &[2]);
        m.node("Div", &["a", "b"], &["out"], vec![]);
        let (_, y) = folded(&mut m)?;
        assert_eq!(i64s(&y), vec![-3, 3, 4, 0]);
        Ok(())
    }

    #[test]
    fn range_where_expand_constant_of_shape_fold() -> Result<()> {
        let mut m = ModelBuilder::new(13);
        m.init_i64("start", &[], &[0]);
        m.init_i64("limit", &[], &[3]);
        m.init_i64("delta", &[], &[1]);
        m.init_i64("one", &[1], &[1]);
        m.init_i64("ten", &[], &[10]);
        m.init_i64("shape3", &[1], &[3]);
        m.init_i64("shape23", &[2], &[2, 3]);
        m.node("Range", &["start", "limit", "delta"], &["r"], vec![]);
        m.node("Equal", &["r", "one"], &["eq"], vec![]);
        m.node("Where", &["eq", "ten", "r"], &["w"], vec![]);
        m.node("ConstantOfShape", &["shape3"], &["ones"], vec![atensor("value", ti64("v", &[1], &[5]))]);
        m.node("Add", &["w", "ones"], &["s"], vec![]);
        m.node("Expand", &["s", "shape23"], &["out"], vec![]);
        let (g, y) = folded(&mut m)?;
        assert_eq!(y.size(), vec![2, 3]);
        assert_eq!(i64s(&y), vec![5, 15, 7, 5, 15, 7]);
        assert_eq!(count(&g, "Constant"), 1);
        Ok(())
    }

    #[test]
    fn constant_nodes_and_shape_attributes() -> Result<()> {
        let mut m = ModelBuilder::new(15);
        m.node("Constant", &[], &["c"], vec![ais("value_ints", &[4, 5])]);
        m.node("Shape", &["x"], &["s"], vec![ai("start", 1), ai("end", -1)]);
        m.node("Concat", &["c", "s"], &["cat"], vec![ai("axis", 0)]);
        m.node("ReduceProd", &["cat"], &["out"], vec![ai("keepdims", 0)]);
        let (_, y) = folded(&mut m)?;
        assert_eq!(i64s(&y), vec![4 * 5 * 2]);
        Ok(())
    }

    #[test]
    fn constant_pad_and_cast_fold() -> Result<()> {
        let mut m = ModelBuilder::new(13);
        m.init_i64("v", &[2], &[1, 2]);
        m.init_i64("pads", &[2], &[1, 2]);
        m.init_i64("nine", &[], &[9]);
        m.node("Pad", &["v", "pads", "nine"], &["p"], vec![]);
        m.node("Cast", &["p"], &["f"], vec![ai("to", 1)]);
        m.node("Cast", &["f"], &["out"], vec![ai("to", 7)]);
        let (_, y) = folded(&mut m)?;
        assert_eq!(i64s(&y), vec![9, 1, 2, 9, 9]);
        Ok(())
    }
}

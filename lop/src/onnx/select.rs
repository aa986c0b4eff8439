//! Selection ops of transformer detectors: TopK, GatherElements, GridSample and Where.

use super::args::{axis, data, ints_param};
use super::importer::{Importer, Val};
use super::node::Ctx;
use crate::error::Result;
use crate::ops::{Op, SampleMode, SamplePadding, WholeOp};
use crate::value::DTypeKind;

/// TopK: two IR nodes, the values and the indices, each computing the same stable sort.
pub(super) fn top_k(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let shape = imp.shape(&x);
    let k = match ints_param(cx, ins, "k", 1)? {
        Some(v) if v.len() == 1 => v[0],
        Some(v) => return Err(cx.malformed(format!("k must be one integer, got {v:?}"))),
        None => return Err(cx.malformed("missing k")),
    };
    let a = axis(cx, cx.attr_i("axis", -1)?, shape.len())?;
    if k < 0 || k as usize > shape[a] {
        return Err(
            cx.unsupported(format!("k = {k} but axis {a} has extent {} (input {shape:?}); k must be between 0 and {}", shape[a], shape[a]))
        );
    }
    let largest = cx.attr_i("largest", 1)? != 0;
    let op = |indices| Op::Whole(WholeOp::TopK { k: k as usize, axis: a, largest, indices });
    let values = imp.emit(cx, "values", op(false), &[x.dup()])?;
    let mut outs = vec![values];
    if cx.n_outputs() > 1 && !cx.output(1).is_empty() {
        outs.push(imp.emit(cx, "indices", op(true), &[x])?);
    }
    Ok(outs)
}

/// GatherElements.
pub(super) fn gather_elements(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let idx = data(cx, ins, 1)?;
    let a = axis(cx, cx.attr_i("axis", 0)?, imp.shape(&x).len())?;
    let idx = match idx {
        Val::Const(t) => Val::Const(t.f_to_kind(tch::Kind::Int64).map_err(cx.torch())?),
        v => v,
    };
    Ok(vec![imp.emit(cx, "", Op::Whole(WholeOp::GatherElements { axis: a }), &[x, idx])?])
}

/// GridSample (opset 16 names and opset 20's `linear` and `cubic`), 4-d inputs.
pub(super) fn grid_sample(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let grid = data(cx, ins, 1)?;
    let mode = match cx.attr_s("mode", if cx.opset >= 20 { "linear" } else { "bilinear" })?.as_str() {
        "bilinear" | "linear" => SampleMode::Bilinear,
        "nearest" => SampleMode::Nearest,
        "bicubic" | "cubic" => SampleMode::Bicubic,
        other => {
            return Err(cx.unsupported(format!("GridSample mode '{other}' (bilinear/linear, nearest and bicubic/cubic are supported)")));
        }
    };
    let padding = match cx.attr_s("padding_mode", "zeros")?.as_str() {
        "zeros" => SamplePadding::Zeros,
        "border" => SamplePadding::Border,
        "reflection" => SamplePadding::Reflection,
        other => return Err(cx.unsupported(format!("GridSample padding_mode '{other}' (zeros, border and reflection are supported)"))),
    };
    let rank = imp.shape(&x).len();
    if rank != 4 {
        return Err(cx.unsupported(format!("a {rank}-d GridSample input (4-d inputs [N, C, H, W] are supported)")));
    }
    let align_corners = cx.attr_i("align_corners", 0)? != 0;
    Ok(vec![imp.emit(cx, "", Op::Whole(WholeOp::GridSample { mode, padding, align_corners }), &[x, grid])?])
}

/// Where: a constant condition or value stays a constant input of the element-wise op.
pub(super) fn where_(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let c = data(cx, ins, 0)?;
    let mut x = data(cx, ins, 1)?;
    let mut y = data(cx, ins, 2)?;
    // A constant operand takes the other's element type (exporters write 0 as a double or int).
    let kind_of = |imp: &Importer, v: &Val| match v {
        Val::Node(id) => Some(imp.b.info(*id).dtype.kind()),
        Val::Const(_) => None,
    };
    let target = kind_of(imp, &x).or_else(|| kind_of(imp, &y));
    if let Some(k) = target {
        for v in [&mut x, &mut y] {
            if let Val::Const(t) = v
                && t.kind() != k
            {
                *t = t.f_to_kind(k).map_err(cx.torch())?;
            }
        }
    }
    Ok(vec![imp.emit(cx, "", Op::Where, &[c, x, y])?])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::error::Error;

    fn err(m: &ModelBuilder) -> String {
        match m.import() {
            Ok(_) => panic!("the model imported"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn every_missing_op_type_is_named_at_once_with_its_nodes() {
        let mut m = ModelBuilder::new(17);
        m.input("x", &[1, 2, 8, 8]);
        m.named("a", "Einsum", &["x"], &["a"], vec![astr("equation", "ij->ji")]);
        m.named("b", "Relu", &["a"], &["b"], vec![]);
        m.named("c", "NonMaxSuppression", &["b"], &["c"], vec![]);
        m.named("d", "Einsum", &["c"], &["d"], vec![astr("equation", "ij->ji")]);
        m.output("d");
        let e = m.import().expect_err("two op types are missing");
        match &e {
            Error::UnsupportedOps { ops, opset, .. } => {
                assert_eq!(*opset, 17);
                let got: Vec<(&str, Vec<&str>)> =
                    ops.iter().map(|o| (o.op_type.as_str(), o.nodes.iter().map(String::as_str).collect())).collect();
                assert_eq!(got, vec![("Einsum", vec!["a", "d"]), ("NonMaxSuppression", vec!["c"])]);
            }
            other => panic!("expected every missing op at once, got {other}"),
        }
        let text = e.to_string();
        assert!(text.contains("Einsum at 2 nodes ('a', 'd'); NonMaxSuppression at 1 node ('c')"), "{text}");
    }

    #[test]
    fn a_foldable_op_on_computed_values_is_missing_but_on_constants_is_not() {
        // Range folds when its inputs are known; on a computed value it cannot run.
        let mut m = ModelBuilder::new(17);
        m.input("x", &[1, 2, 4, 4]);
        m.init_i64("start", &[], &[0]);
        m.init_i64("delta", &[], &[1]);
        m.node("ReduceMax", &["x"], &["limit_f"], vec![ais("axes", &[0, 1, 2, 3]), ai("keepdims", 0)]);
        m.node("Cast", &["limit_f"], &["limit"], vec![ai("to", 7)]);
        m.named("range", "Range", &["start", "limit", "delta"], &["r"], vec![]);
        m.output("r");
        assert!(err(&m).contains("Range at 1 node ('range')"), "{}", err(&m));
    }

    #[test]
    fn bad_attribute_values_get_one_clear_error_each() {
        let grid = |mode: &str, padding: &str| {
            let mut m = ModelBuilder::new(17);
            m.input("x", &[1, 2, 4, 4]);
            m.input("g", &[1, 3, 3, 2]);
            m.node("GridSample", &["x", "g"], &["y"], vec![astr("mode", mode), astr("padding_mode", padding)]);
            m.output("y");
            m
        };
        assert!(grid("bilinear", "zeros").import().is_ok());
        let e = err(&grid("area", "zeros"));
        assert!(e.contains("GridSample mode 'area'") && e.contains("bilinear/linear, nearest and bicubic/cubic"), "{e}");
        let e = err(&grid("nearest", "wrap"));
        assert!(e.contains("padding_mode 'wrap'") && e.contains("zeros, border and reflection"), "{e}");

        let mut m = ModelBuilder::new(17);
        m.input("x", &[1, 300]);
        m.init_i64("k", &[1], &[500]);
        m.node("TopK", &["x", "k"], &["v", "i"], vec![]);
        m.output("v");
        let e = err(&m);
        assert!(e.contains("k = 500 but axis 1 has extent 300") && e.contains("between 0 and 300"), "{e}");

        let pad = |pads: &[i64], mode: &str| {
            let mut m = ModelBuilder::new(17);
            m.input("x", &[1, 2, 4, 4]);
            m.init_i64("p", &[8], pads);
            m.node("Pad", &["x", "p"], &["y"], vec![astr("mode", mode)]);
            m.node("Relu", &["y"], &["z"], vec![]);
            m.output("z");
            m
        };
        let e = err(&pad(&[0, 0, -3, 0, 0, 0, -2, 0], "constant"));
        assert!(e.contains("pads (-3, -2) on axis 2 of extent 4 would leave -1 elements"), "{e}");
        let e = err(&pad(&[0, 0, 1, 0, 0, 0, 1, 0], "wrap"));
        assert!(e.contains("Pad mode 'wrap'") && e.contains("constant, reflect and edge"), "{e}");
        let e = err(&pad(&[0, 0, 4, 0, 0, 0, 0, 0], "reflect"));
        assert!(e.contains("reflect pads (4, 0) on axis 2 of extent 4"), "{e}");
        assert!(pad(&[0, 0, 3, 1, 0, 0, 2, 0], "reflect").import().is_ok());
    }

    #[test]
    fn a_pad_feeding_two_ops_is_a_local_op_and_splits_exactly() {
        let mut m = ModelBuilder::new(17);
        m.input("x", &[1, 2, 12, 9]);
        m.init_i64("p", &[8], &[0, 0, 1, 0, 0, 0, 1, 1]);
        m.init_f32("w", &[2, 2, 2, 2], &values(16, 3));
        m.node("Pad", &["x", "p"], &["y"], vec![]);
        m.node("Conv", &["y", "w"], &["c"], vec![]);
        m.node("MaxPool", &["y"], &["q"], vec![ais("kernel_shape", &[2, 2]), ais("strides", &[1, 1])]);
        m.node("Add", &["c", "q"], &["z"], vec![]);
        m.output("z");
        let g = m.import().expect("a Pad with two consumers imports");
        assert_eq!(count(&g, "Pad"), 1);
        let pad = g.nodes.iter().position(|n| n.op.kind_name() == "Pad").expect("pad node");
        assert_eq!(g.locality(pad), crate::ops::OpClass::BlockWise);
        let x = randn(&[1, 2, 12, 9], 4);
        let whole = run(&g, &x).expect("runs");
        for seed in 0..6 {
            let plan = crate::plan::Plan::random(&g, 5, seed);
            let split = crate::exec::run_split(&g, &plan, std::slice::from_ref(&x)).expect("split runs");
            // A split convolution sums in another order than the whole one on some CPUs (oneDNN
            // picks its kernel by shape and instruction set): the one comparison rule, not bits.
            let a = crate::exec::agree(&split.outputs[0], &whole[0], crate::exec::Tolerance::SPLIT).expect("same shape");
            assert!(a.within, "seed {seed}: {a:?}");
        }
    }
}

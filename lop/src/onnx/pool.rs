//! Pooling ops (MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool) and constant Pads,
//! which are folded into the Conv or pooling op that alone consumes them.

use super::args::{const_input, data, ints_param};
use super::conv::{add, padded_input, pads, spatial};
use super::importer::{Importer, PendingPad, Val};
use super::node::Ctx;
use super::tensor::floats;
use crate::error::Result;
use crate::ops::{Op, Pool};
use tch::Tensor;

/// MaxPool and AveragePool.
pub(super) fn pool(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let kernel = cx.attr_sizes("kernel_shape", vec![])?;
    let nsp = kernel.len();
    if !(2..=3).contains(&nsp) {
        return Err(cx.unsupported(format!("{nsp}-d pooling (2-d and 3-d pooling are supported)")));
    }
    let (x, xb, xe) = padded_input(imp, cx, ins, nsp)?;
    let sp = spatial(cx, &imp.shape(&x), nsp, &xb, &xe)?;
    let strides = cx.attr_sizes("strides", vec![1; nsp])?;
    let dilations = cx.attr_sizes("dilations", vec![1; nsp])?;
    if strides.len() != nsp || dilations.len() != nsp {
        return Err(cx.malformed("strides or dilations do not match kernel_shape"));
    }
    let max = cx.op == "MaxPool";
    if !max && dilations.iter().any(|&d| d != 1) {
        return Err(cx.unsupported("dilated average pooling"));
    }
    if max && cx.attr_i("storage_order", 0)? != 0 && imp.is_used(cx.output(1)) {
        return Err(cx.unsupported("storage_order = 1"));
    }
    let extents: Vec<usize> = (0..nsp).map(|d| (kernel[d].max(1) - 1) * dilations[d] + 1).collect();
    let (mut pads_begin, mut pads_end) = pads(cx, &sp, &extents, &strides)?;
    add(&mut pads_begin, &xb);
    add(&mut pads_end, &xe);
    let p = Pool {
        kernel,
        strides,
        pads_begin,
        pads_end,
        dilations,
        ceil_mode: cx.attr_i("ceil_mode", 0)? != 0,
        count_include_pad: cx.attr_i("count_include_pad", 0)? != 0,
    };
    Ok(vec![imp.emit(cx, "", if max { Op::MaxPool(p) } else { Op::AvgPool(p) }, &[x])?])
}

/// GlobalAveragePool (a mean over the spatial axes) and GlobalMaxPool (a max pool whose window
/// is the whole plane).
pub(super) fn global_pool(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let shape = imp.shape(&x);
    if shape.len() < 3 {
        return Err(cx.malformed(format!("input of shape {shape:?}")));
    }
    let op = if cx.op == "GlobalAveragePool" {
        Op::ReduceMean { axes: (2..shape.len()).collect(), keepdims: true }
    } else {
        let nsp = shape.len() - 2;
        if !(2..=3).contains(&nsp) {
            return Err(cx.unsupported(format!("{nsp}-d global max pooling")));
        }
        Op::MaxPool(Pool {
            kernel: shape[2..].to_vec(),
            strides: vec![1; nsp],
            pads_begin: vec![0; nsp],
            pads_end: vec![0; nsp],
            dilations: vec![1; nsp],
            ceil_mode: false,
            count_include_pad: false,
        })
    };
    Ok(vec![imp.emit(cx, "", op, &[x])?])
}

/// Pad amounts per axis (`pads` as attribute or input, optional `axes` input) and the fill
/// value. Negative pads (cropping) are not supported.
pub(super) fn pad_params(cx: &Ctx, ins: &[Option<Val>], rank: usize) -> Result<(Vec<usize>, Vec<usize>, f32)> {
    let p = ints_param(cx, ins, "pads", 1)?.ok_or_else(|| cx.malformed("missing pads"))?;
    let value = match const_input(cx, ins, 2, "constant_value")? {
        Some(v) => floats(&v).map_err(cx.torch())?.first().copied().unwrap_or(0.0),
        None => cx.attr_f("value", 0.0)?,
    };
    let ax = match ints_param(cx, ins, "axes", 3)? {
        Some(a) => a.iter().map(|&a| super::args::axis(cx, a, rank)).collect::<Result<Vec<_>>>()?,
        None => (0..rank).collect(),
    };
    if p.len() != 2 * ax.len() {
        return Err(cx.malformed(format!("{} pads for {} axes", p.len(), ax.len())));
    }
    let (mut begin, mut end) = (vec![0; rank], vec![0; rank]);
    for (i, &a) in ax.iter().enumerate() {
        let (b, e) = (p[i], p[i + ax.len()]);
        if b < 0 || e < 0 {
            return Err(cx.unsupported(format!("negative pads {p:?}")));
        }
        if b as usize > super::node::MAX_EXTENT || e as usize > super::node::MAX_EXTENT {
            return Err(cx.malformed(format!("pads {p:?} out of range")));
        }
        (begin[a], end[a]) = (b as usize, e as usize);
    }
    Ok((begin, end, value))
}

/// Pad of a constant (constant mode only).
pub(super) fn fold_pad(cx: &Ctx, ins: &[Option<Val>], x: &Tensor) -> Result<Tensor> {
    if cx.attr_s("mode", "constant")? != "constant" {
        return Err(cx.unsupported("only constant padding is supported"));
    }
    let (begin, end, value) = pad_params(cx, ins, x.dim())?;
    let pads: Vec<i64> = (0..x.dim()).rev().flat_map(|a| [begin[a] as i64, end[a] as i64]).collect();
    x.f_pad(pads.as_slice(), "constant", f64::from(value)).map_err(cx.torch())
}

/// Pad of a computed tensor: folded into the Conv, MaxPool or AveragePool that alone consumes
/// it when the fill value is what that op pads with.
pub(super) fn pad(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let rank = imp.shape(&x).len();
    if cx.attr_s("mode", "constant")? != "constant" {
        return Err(cx.unsupported("only constant padding is supported"));
    }
    let (begin, end, value) = pad_params(cx, ins, rank)?;
    if begin.iter().chain(&end).all(|&p| p == 0) {
        return Ok(vec![x]);
    }
    if rank < 3 || begin[..2].iter().chain(&end[..2]).any(|&p| p != 0) {
        return Err(cx.unsupported("padding of batch or channel axes"));
    }
    let out = cx.output(0);
    let graph = imp.graph;
    let consumer = match imp.consumers_of(out) {
        &[j] if !imp.is_graph_output(out) => Some(&graph.node[j]),
        _ => None,
    };
    let fits = consumer.is_some_and(|c| {
        let ccx = Ctx { node: c, name: String::new(), op: c.op_type.as_deref().unwrap_or(""), opset: cx.opset };
        let only_data = c.input.first().is_some_and(|i| i == out) && !c.input.iter().skip(1).any(|i| i == out);
        let attr = |n: &str, d: i64| ccx.attr_i(n, d).unwrap_or(-1);
        only_data
            && match ccx.op {
                "Conv" => value == 0.0,
                "MaxPool" => value == f32::NEG_INFINITY,
                "AveragePool" => value == 0.0 && attr("count_include_pad", 0) == 1 && attr("ceil_mode", 0) == 0,
                _ => false,
            }
    });
    if !fits {
        return Err(cx.unsupported(
            "a Pad is supported only when it alone feeds a Conv (value 0), a MaxPool (value -inf) or an AveragePool \
             (value 0, count_include_pad = 1, ceil_mode = 0), into which it is folded",
        ));
    }
    imp.pending_pads.insert(out.to_string(), PendingPad { src: x.dup(), begin: begin[2..].to_vec(), end: end[2..].to_vec() });
    // The placeholder binding is never read: the only consumer takes the pending pad instead.
    Ok(vec![x])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::error::Result;
    use tch::{Kind, Tensor};

    #[test]
    fn zero_pad_folds_into_conv_and_neg_inf_pad_into_maxpool() -> Result<()> {
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 2, 6, 6]);
        let w = values(2 * 2 * 9, 5);
        m.init_f32("w", &[2, 2, 3, 3], &w);
        m.init_i64("pads", &[8], &[0, 0, 1, 2, 0, 0, 3, 1]);
        m.init_i64("pads2", &[8], &[0, 0, 1, 0, 0, 0, 0, 1]);
        m.init_f32("ninf", &[], &[f32::NEG_INFINITY]);
        m.node("Pad", &["x", "pads"], &["p"], vec![]);
        m.node("Conv", &["p", "w"], &["c"], vec![]);
        m.node("Pad", &["c", "pads2", "ninf"], &["q"], vec![]);
        m.node("MaxPool", &["q"], &["y"], vec![ais("kernel_shape", &[2, 2]), ais("strides", &[2, 2])]);
        m.output("y");
        let g = m.import()?;
        assert_eq!(g.nodes.len(), 3, "{:?}", g.nodes.iter().map(|n| n.op.kind_name()).collect::<Vec<_>>());
        let x = randn(&[1, 2, 6, 6], 9);
        let wt = Tensor::from_slice(&w).view([2, 2, 3, 3]);
        let c = x.constant_pad_nd([2, 1, 1, 3]).conv2d(&wt, None::<&Tensor>, [1, 1], [0, 0], [1, 1], 1);
        let q = c.pad([0, 1, 1, 0], "constant", f64::NEG_INFINITY);
        let want = q.max_pool2d([2, 2], [2, 2], [0, 0], [1, 1], false);
        assert!(max_diff(&run(&g, &x)?[0], &want) < 1e-5);

        // A Pad that feeds two consumers cannot be folded.
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 2, 6, 6]);
        m.init_i64("pads", &[8], &[0, 0, 1, 1, 0, 0, 1, 1]);
        m.node("Pad", &["x", "pads"], &["p"], vec![]);
        m.node("Relu", &["p"], &["y"], vec![]);
        m.output("y");
        assert!(matches!(m.import(), Err(crate::Error::Unsupported { .. })));
        Ok(())
    }

    #[test]
    fn pools_match_libtorch() -> Result<()> {
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 2, 9, 9]);
        let pool = vec![ais("kernel_shape", &[3, 3]), ais("strides", &[2, 2]), ais("pads", &[1, 1, 1, 1]), ai("ceil_mode", 1)];
        m.node("MaxPool", &["x"], &["a"], pool.clone());
        m.node("AveragePool", &["x"], &["b"], pool);
        m.node("GlobalAveragePool", &["x"], &["c"], vec![]);
        m.node("GlobalMaxPool", &["x"], &["d"], vec![]);
        for o in ["a", "b", "c", "d"] {
            m.output(o);
        }
        let g = m.import()?;
        let x = randn(&[1, 2, 9, 9], 4);
        let y = run(&g, &x)?;
        assert!(max_diff(&y[0], &x.max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], true)) < 1e-6);
        assert!(max_diff(&y[1], &x.avg_pool2d([3, 3], [2, 2], [1, 1], true, false, None::<i64>)) < 1e-5);
        assert!(max_diff(&y[2], &x.mean_dim([2i64, 3].as_slice(), true, Kind::Float)) < 1e-5);
        assert!(max_diff(&y[3], &x.amax([2i64, 3].as_slice(), true)) < 1e-6);
        Ok(())
    }
}

//! Pooling ops (MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool) and Pads: a constant
//! pad is folded into the Conv or pooling op that alone consumes it, any other is a standalone
//! [`Op::Pad`].

use super::args::{const_input, data, ints_param};
use super::conv::{add, padded_input, pads, spatial};
use super::importer::{Importer, PendingPad, Val};
use super::node::Ctx;
use super::tensor::floats;
use crate::error::Result;
use crate::ops::{Op, Pad, PadMode, Pool, SliceAxis};
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
/// Pads as the node gives them: leading and trailing per axis (negative values crop), and the
/// constant fill.
fn signed_pad_params(cx: &Ctx, ins: &[Option<Val>], rank: usize) -> Result<(Vec<i64>, Vec<i64>, f32)> {
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
        if b.unsigned_abs() as usize > super::node::MAX_EXTENT || e.unsigned_abs() as usize > super::node::MAX_EXTENT {
            return Err(cx.malformed(format!("pads {p:?} out of range")));
        }
        (begin[a], end[a]) = (b, e);
    }
    Ok((begin, end, value))
}

/// The pad mode of the node.
fn pad_mode(cx: &Ctx, value: f32) -> Result<PadMode> {
    match cx.attr_s("mode", "constant")?.as_str() {
        "constant" => Ok(PadMode::Constant(value)),
        "reflect" => Ok(PadMode::Reflect),
        "edge" => Ok(PadMode::Edge),
        other => Err(cx.unsupported(format!("Pad mode '{other}' (constant, reflect and edge are supported)"))),
    }
}

pub(super) fn pad_params(cx: &Ctx, ins: &[Option<Val>], rank: usize) -> Result<(Vec<usize>, Vec<usize>, f32)> {
    let (begin, end, value) = signed_pad_params(cx, ins, rank)?;
    if begin.iter().chain(&end).any(|&p| p < 0) {
        return Err(cx.unsupported(format!("negative pads {begin:?}, {end:?} of a constant")));
    }
    let unsigned = |v: Vec<i64>| v.into_iter().map(|p| p as usize).collect();
    Ok((unsigned(begin), unsigned(end), value))
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
/// it when the fill value is what that op pads with; otherwise a standalone [`Op::Pad`] (any
/// mode, any axes), after a [`Op::Slice`] for negative pads (crops).
pub(super) fn pad(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let shape = imp.shape(&x);
    let rank = shape.len();
    let (sbegin, send, value) = signed_pad_params(cx, ins, rank)?;
    let mode = pad_mode(cx, value)?;
    for a in 0..rank {
        let size = shape[a] as i64 + sbegin[a] + send[a];
        if size <= 0 {
            return Err(cx.unsupported(format!(
                "pads ({}, {}) on axis {a} of extent {} would leave {size} elements; an axis keeps at least one, so the crop \
                 (the negative pads) must be smaller than the extent",
                sbegin[a], send[a], shape[a]
            )));
        }
    }
    if sbegin.iter().chain(&send).all(|&p| p == 0) {
        return Ok(vec![x]);
    }
    let crops: Vec<SliceAxis> = (0..rank)
        .filter(|&a| sbegin[a] < 0 || send[a] < 0)
        .map(|a| {
            let start = (-sbegin[a]).max(0) as usize;
            SliceAxis { axis: a, start, end: shape[a] - (-send[a]).max(0) as usize, step: 1 }
        })
        .collect();
    let begin: Vec<usize> = sbegin.iter().map(|&p| p.max(0) as usize).collect();
    let end: Vec<usize> = send.iter().map(|&p| p.max(0) as usize).collect();
    if !crops.is_empty() || !matches!(mode, PadMode::Constant(_)) || !folds_into_consumer(imp, cx, value, rank, &begin, &end) {
        let cropped = if crops.is_empty() { x } else { imp.emit(cx, "crop", Op::Slice(crops), &[x])? };
        if begin.iter().chain(&end).all(|&p| p == 0) {
            return Ok(vec![cropped]);
        }
        return Ok(vec![imp.emit(cx, "", Op::Pad(Pad { begin, end, mode }), &[cropped])?]);
    }
    let out = cx.output(0);
    imp.pending_pads.insert(out.to_string(), PendingPad { src: x.dup(), begin: begin[2..].to_vec(), end: end[2..].to_vec() });
    // The placeholder binding is never read: the only consumer takes the pending pad instead.
    Ok(vec![x])
}

/// Whether a constant pad of the spatial axes can be merged into the pads of the Conv, MaxPool
/// or AveragePool that alone consumes it (the fill must be what that op pads with).
fn folds_into_consumer(imp: &Importer, cx: &Ctx, value: f32, rank: usize, begin: &[usize], end: &[usize]) -> bool {
    if rank < 3 || begin[..2].iter().chain(&end[..2]).any(|&p| p != 0) {
        return false;
    }
    let out = cx.output(0);
    let graph = imp.graph;
    let consumer = match imp.consumers_of(out) {
        &[j] if !imp.is_graph_output(out) => Some(&graph.node[j]),
        _ => None,
    };
    consumer.is_some_and(|c| {
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
    })
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

        // A Pad that feeds anything else is not folded: it is a standalone Pad.
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 2, 6, 6]);
        m.init_i64("pads", &[8], &[0, 0, 1, 1, 0, 0, 1, 1]);
        m.node("Pad", &["x", "pads"], &["p"], vec![]);
        m.node("Relu", &["p"], &["y"], vec![]);
        m.output("y");
        let g = m.import()?;
        assert_eq!(count(&g, "Pad"), 1);
        assert!(max_diff(&run(&g, &x)?[0], &x.constant_pad_nd([1, 1, 1, 1]).relu()) == 0.0);
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

//! Convolutions: Conv (with the batch norm after it folded in), ConvTranspose, and
//! BatchNormalization that cannot be folded; the padding rules shared with pooling.

use super::args::{const_input, data, weight};
use super::importer::{Importer, Val};
use super::node::Ctx;
use crate::error::Result;
use crate::ops::{Conv, Op};
use tch::{Kind, Tensor};

/// Leading and trailing pads from `auto_pad` and `pads` for spatial extents `ins`.
pub(super) fn pads(cx: &Ctx, ins: &[usize], extents: &[usize], strides: &[usize]) -> Result<(Vec<usize>, Vec<usize>)> {
    let nsp = ins.len();
    match cx.attr_s("auto_pad", "NOTSET")?.as_str() {
        "NOTSET" | "" => {
            let p = cx.attr_sizes("pads", vec![0; 2 * nsp])?;
            if p.len() != 2 * nsp {
                return Err(cx.malformed(format!("pads {p:?} for {nsp} spatial dims")));
            }
            Ok((p[..nsp].to_vec(), p[nsp..].to_vec()))
        }
        "VALID" => Ok((vec![0; nsp], vec![0; nsp])),
        mode @ ("SAME_UPPER" | "SAME_LOWER") => {
            let (mut b, mut e) = (vec![0; nsp], vec![0; nsp]);
            for d in 0..nsp {
                let out = ins[d].div_ceil(strides[d]);
                let total = ((out.max(1) - 1) * strides[d] + extents[d]).saturating_sub(ins[d]);
                let (small, big) = (total / 2, total - total / 2);
                (b[d], e[d]) = if mode == "SAME_UPPER" { (small, big) } else { (big, small) };
            }
            Ok((b, e))
        }
        other => Err(cx.malformed(format!("auto_pad '{other}'"))),
    }
}

/// Input 0, unwrapping a zero Pad that was folded into this node.
pub(super) fn padded_input(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>], nsp: usize) -> Result<(Val, Vec<usize>, Vec<usize>)> {
    if let Some(p) = cx.input(0).and_then(|n| imp.pending_pads.remove(n)) {
        return Ok((p.src, p.begin, p.end));
    }
    Ok((data(cx, ins, 0)?, vec![0; nsp], vec![0; nsp]))
}

pub(super) fn spatial(cx: &Ctx, shape: &[usize], nsp: usize, pb: &[usize], pe: &[usize]) -> Result<Vec<usize>> {
    if shape.len() != nsp + 2 {
        return Err(cx.malformed(format!("input of shape {shape:?} for {nsp} spatial dims")));
    }
    Ok((0..nsp).map(|d| shape[2 + d] + pb[d] + pe[d]).collect())
}

pub(super) fn add(a: &mut [usize], b: &[usize]) {
    a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
}

/// Conv, with a following BatchNormalization folded into its weight and bias.
pub(super) fn conv(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let w = weight(cx, ins, 1, "weight")?.f_to_kind(Kind::Float).map_err(cx.torch())?;
    let bias = const_input(cx, ins, 2, "bias")?.map(|b| b.f_to_kind(Kind::Float)).transpose().map_err(cx.torch())?;
    let nsp = w.dim().saturating_sub(2);
    if !(1..=3).contains(&nsp) {
        return Err(cx.unsupported(format!("weight of rank {} (1-d, 2-d and 3-d convolutions are supported)", w.dim())));
    }
    let (x, xb, xe) = padded_input(imp, cx, ins, nsp)?;
    let sp = spatial(cx, &imp.shape(&x), nsp, &xb, &xe)?;
    let kernel: Vec<usize> = w.size()[2..].iter().map(|&k| k as usize).collect();
    if cx.attr_sizes("kernel_shape", kernel.clone())? != kernel {
        return Err(cx.malformed(format!("kernel_shape does not match weight {:?}", w.size())));
    }
    let strides = cx.attr_sizes("strides", vec![1; nsp])?;
    let dilations = cx.attr_sizes("dilations", vec![1; nsp])?;
    if strides.len() != nsp || dilations.len() != nsp {
        return Err(cx.malformed(format!("strides {strides:?} / dilations {dilations:?} for {nsp} spatial dims")));
    }
    let extents: Vec<usize> = (0..nsp).map(|d| (kernel[d].max(1) - 1) * dilations[d] + 1).collect();
    let (mut pads_begin, mut pads_end) = pads(cx, &sp, &extents, &strides)?;
    add(&mut pads_begin, &xb);
    add(&mut pads_end, &xe);
    let groups = usize::try_from(cx.attr_i("group", 1)?).map_err(|_| cx.malformed("negative group"))?;
    let (weight, bias, bn) = match fusable_bn(imp, cx)? {
        Some((j, out, scale, shift)) => {
            let t = cx.torch();
            if scale.numel() as i64 != w.size()[0] {
                return Err(cx.malformed(format!("batch norm of {} channels after a conv of {}", scale.numel(), w.size()[0])));
            }
            let mut v = vec![1i64; w.dim()];
            v[0] = -1;
            let s = scale.f_view(v.as_slice()).map_err(&t)?;
            let w2 = w.f_to_kind(Kind::Double).and_then(|w| w.f_mul(&s)).and_then(|w| w.f_to_kind(Kind::Float)).map_err(&t)?;
            let b0 = match &bias {
                Some(b) => b.f_to_kind(Kind::Double).map_err(&t)?,
                None => scale.f_zeros_like().map_err(&t)?,
            };
            let b2 = b0.f_mul(&scale).and_then(|b| b.f_add(&shift)).and_then(|b| b.f_to_kind(Kind::Float)).map_err(&t)?;
            (w2, Some(b2), Some((j, out)))
        }
        None => (w, bias, None),
    };
    let c = Conv { weight, bias, strides, pads_begin, pads_end, dilations, output_padding: vec![0; nsp], groups, packed: None, act: None };
    let y = imp.emit(cx, "", Op::Conv(c), &[x])?;
    if let Some((j, out)) = bn {
        imp.skip(j);
        imp.bind(&out, y.dup())?;
    }
    Ok(vec![y])
}

/// The BatchNormalization that consumes this node's output alone, if it can be folded:
/// its index, output name, and per-channel scale and shift (f64).
fn fusable_bn(imp: &Importer, cx: &Ctx) -> Result<Option<(usize, String, Tensor, Tensor)>> {
    let out = cx.output(0);
    if out.is_empty() || imp.is_graph_output(out) {
        return Ok(None);
    }
    let &[j] = imp.consumers_of(out) else { return Ok(None) };
    let graph = imp.graph;
    let bn = &graph.node[j];
    let bcx = Ctx { node: bn, name: bn.name.clone().unwrap_or_default(), op: "BatchNormalization", opset: cx.opset };
    if bn.op_type.as_deref() != Some("BatchNormalization")
        || !matches!(bn.domain.as_deref(), None | Some("") | Some("ai.onnx"))
        || bn.input.len() < 5
        || bn.input[0] != out
        || bn.input[1..].iter().any(|i| i == out)
        || bn.output.iter().skip(1).any(|o| imp.is_used(o))
        || bcx.attr_i("training_mode", 0)? != 0
        || bcx.attr_i("spatial", 1)? != 1
    {
        return Ok(None);
    }
    let mut params = Vec::with_capacity(4);
    for name in &bn.input[1..5] {
        match imp.get(name) {
            Some(Val::Const(t)) => params.push(t.shallow_clone()),
            _ => return Ok(None),
        }
    }
    let Some(bn_out) = bn.output.first() else { return Ok(None) };
    let (scale, shift) = bn_affine(&bcx, &params)?;
    Ok(Some((j, bn_out.clone(), scale, shift)))
}

/// `scale / sqrt(var + eps)` and `bias - mean * that`, in f64.
fn bn_affine(cx: &Ctx, p: &[Tensor]) -> Result<(Tensor, Tensor)> {
    let eps = f64::from(cx.attr_f("epsilon", 1e-5)?);
    let t = cx.torch();
    let d = |x: &Tensor| x.f_to_kind(Kind::Double).and_then(|x| x.f_view([-1]));
    let (gamma, beta, mean, var) = (d(&p[0]).map_err(&t)?, d(&p[1]).map_err(&t)?, d(&p[2]).map_err(&t)?, d(&p[3]).map_err(&t)?);
    let c = gamma.numel();
    if [&beta, &mean, &var].iter().any(|x| x.numel() != c) {
        return Err(cx.malformed("scale, bias, mean and variance differ in length"));
    }
    let scale = var.f_add_scalar(eps).and_then(|v| v.f_sqrt()).and_then(|s| gamma.f_div(&s)).map_err(&t)?;
    let shift = mean.f_mul(&scale).and_then(|m| beta.f_sub(&m)).map_err(&t)?;
    Ok((scale, shift))
}

/// BatchNormalization that could not be folded: a per-channel affine map.
pub(super) fn batch_norm(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    if cx.attr_i("training_mode", 0)? != 0 {
        return Err(cx.unsupported("training_mode = 1"));
    }
    if cx.attr_i("spatial", 1)? != 1 {
        return Err(cx.unsupported("spatial = 0"));
    }
    let x = data(cx, ins, 0)?;
    let params = (1..5).map(|k| weight(cx, ins, k, "batch norm parameter")).collect::<Result<Vec<_>>>()?;
    let (scale, shift) = bn_affine(cx, &params)?;
    let f = |x: Tensor| x.f_to_kind(Kind::Float).map_err(cx.torch());
    Ok(vec![imp.emit(cx, "", Op::ChannelAffine { scale: f(scale)?, shift: f(shift)? }, &[x])?])
}

/// ConvTranspose (pads from `pads`, `auto_pad` or `output_shape`).
pub(super) fn conv_transpose(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let w = weight(cx, ins, 1, "weight")?.f_to_kind(Kind::Float).map_err(cx.torch())?;
    let bias = const_input(cx, ins, 2, "bias")?.map(|b| b.f_to_kind(Kind::Float)).transpose().map_err(cx.torch())?;
    let nsp = w.dim().saturating_sub(2);
    if !(1..=3).contains(&nsp) {
        return Err(cx.unsupported(format!("weight of rank {}", w.dim())));
    }
    let sp = spatial(cx, &imp.shape(&x), nsp, &vec![0; nsp], &vec![0; nsp])?;
    let kernel: Vec<usize> = w.size()[2..].iter().map(|&k| k as usize).collect();
    let strides = cx.attr_sizes("strides", vec![1; nsp])?;
    let dilations = cx.attr_sizes("dilations", vec![1; nsp])?;
    let output_padding = cx.attr_sizes("output_padding", vec![0; nsp])?;
    if strides.len() != nsp || dilations.len() != nsp || output_padding.len() != nsp {
        return Err(cx.malformed("strides, dilations or output_padding do not match the spatial dims"));
    }
    let full: Vec<usize> =
        (0..nsp).map(|d| strides[d] * (sp[d].max(1) - 1) + output_padding[d] + (kernel[d].max(1) - 1) * dilations[d] + 1).collect();
    let auto = cx.attr_s("auto_pad", "NOTSET")?;
    let target = match cx.attr_sizes("output_shape", vec![])? {
        v if v.len() >= nsp => Some(v[v.len() - nsp..].to_vec()),
        v if !v.is_empty() => return Err(cx.malformed(format!("output_shape {v:?}"))),
        _ if auto.starts_with("SAME") => Some((0..nsp).map(|d| sp[d] * strides[d]).collect()),
        _ => None,
    };
    let (pads_begin, pads_end) = match (target, auto.as_str()) {
        (_, "VALID") => (vec![0; nsp], vec![0; nsp]),
        (Some(t), _) => {
            let mut b = vec![0; nsp];
            let mut e = vec![0; nsp];
            for d in 0..nsp {
                let total = full[d]
                    .checked_sub(t[d])
                    .ok_or_else(|| cx.unsupported(format!("output_shape {t:?} larger than the full output {full:?}")))?;
                (b[d], e[d]) = if auto == "SAME_UPPER" { (total / 2, total - total / 2) } else { (total - total / 2, total / 2) };
            }
            (b, e)
        }
        (None, _) => pads(cx, &sp, &[], &[])?,
    };
    let groups = usize::try_from(cx.attr_i("group", 1)?).map_err(|_| cx.malformed("negative group"))?;
    let c = Conv { weight: w, bias, strides, pads_begin, pads_end, dilations, output_padding, groups, packed: None, act: None };
    Ok(vec![imp.emit(cx, "", Op::ConvTranspose(c), &[x])?])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::error::Result;
    use tch::Tensor;

    struct Bn {
        w: Vec<f32>,
        b: Vec<f32>,
        gamma: Vec<f32>,
        beta: Vec<f32>,
        mean: Vec<f32>,
        var: Vec<f32>,
    }

    fn bn_params() -> Bn {
        let c = 4;
        Bn {
            w: values(c * 3 * 9, 1),
            b: values(c, 2),
            gamma: values(c, 3),
            beta: values(c, 4),
            mean: values(c, 5),
            var: values(c, 6).iter().map(|v| v.abs() + 0.1).collect(),
        }
    }

    fn conv_bn_model(p: &Bn, conv_is_output: bool) -> ModelBuilder {
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 3, 8, 8]);
        m.init_f32("w", &[4, 3, 3, 3], &p.w);
        m.init_f32("b", &[4], &p.b);
        m.init_f32("gamma", &[4], &p.gamma);
        m.init_f32("beta", &[4], &p.beta);
        m.init_f32("mean", &[4], &p.mean);
        m.init_f32("var", &[4], &p.var);
        m.named("conv1", "Conv", &["x", "w", "b"], &["c"], vec![ais("pads", &[1, 1, 1, 1]), ais("kernel_shape", &[3, 3])]);
        m.named("bn1", "BatchNormalization", &["c", "gamma", "beta", "mean", "var"], &["n"], vec![af("epsilon", 1e-3)]);
        m.named("relu1", "Relu", &["n"], &["y"], vec![]);
        m.output("y");
        if conv_is_output {
            m.output("c");
        }
        m
    }

    fn hand(p: &Bn, x: &Tensor) -> (Tensor, Tensor) {
        let v = |d: &[f32]| Tensor::from_slice(d).view([1, -1, 1, 1]);
        let w = Tensor::from_slice(&p.w).view([4, 3, 3, 3]);
        let c = x.conv2d(&w, Some(&Tensor::from_slice(&p.b)), [1, 1], [1, 1], [1, 1], 1);
        let n = (&c - v(&p.mean)) / (v(&p.var) + 1e-3).sqrt() * v(&p.gamma) + v(&p.beta);
        (n.relu(), c)
    }

    #[test]
    fn conv_bn_relu_folds_and_matches_hand_computation() -> Result<()> {
        let p = bn_params();
        let g = conv_bn_model(&p, false).import()?;
        assert_eq!(count(&g, "BatchNorm"), 0, "batch norm was not folded");
        assert_eq!((count(&g, "Conv"), count(&g, "Relu"), g.nodes.len()), (1, 1, 3));
        let x = randn(&[1, 3, 8, 8], 7);
        let y = run(&g, &x)?;
        let (want, _) = hand(&p, &x);
        assert!(max_diff(&y[0], &want) < 1e-5, "diff {}", max_diff(&y[0], &want));
        Ok(())
    }

    #[test]
    fn bn_stays_an_affine_when_the_conv_output_is_used_elsewhere() -> Result<()> {
        let p = bn_params();
        let g = conv_bn_model(&p, true).import()?;
        assert_eq!(count(&g, "BatchNorm"), 1);
        let x = randn(&[1, 3, 8, 8], 8);
        let y = run(&g, &x)?;
        let (want, conv) = hand(&p, &x);
        assert!(max_diff(&y[0], &want) < 1e-5);
        assert!(max_diff(&y[1], &conv) < 1e-5);
        Ok(())
    }

    fn single_conv(attrs: Vec<crate::onnx::proto::AttributeProto>, shape: &[i64], k: i64) -> Result<(crate::graph::Graph, Tensor)> {
        let mut m = ModelBuilder::new(13);
        m.input("x", shape);
        let w = values((2 * shape[1] * k * k) as usize, 11);
        m.init_f32("w", &[2, shape[1], k, k], &w);
        m.node("Conv", &["x", "w"], &["y"], attrs);
        m.output("y");
        Ok((m.import()?, Tensor::from_slice(&w).view([2, shape[1], k, k])))
    }

    #[test]
    fn conv_asymmetric_and_auto_pads() -> Result<()> {
        let x = randn(&[1, 2, 7, 7], 3);
        let none: Option<&Tensor> = None;
        // pads [h_begin, w_begin, h_end, w_end] = [0, 1, 2, 0], stride 2.
        let (g, w) = single_conv(vec![ais("pads", &[0, 1, 2, 0]), ais("strides", &[2, 2])], &[1, 2, 7, 7], 3)?;
        let want = x.constant_pad_nd([1, 0, 0, 2]).conv2d(&w, none, [2, 2], [0, 0], [1, 1], 1);
        assert!(max_diff(&run(&g, &x)?[0], &want) < 1e-5);
        // SAME_UPPER, stride 2, kernel 3 on 7: out 4, total pad 2 -> (1, 1).
        let (g, w) = single_conv(vec![astr("auto_pad", "SAME_UPPER"), ais("strides", &[2, 2])], &[1, 2, 7, 7], 3)?;
        let want = x.conv2d(&w, none, [2, 2], [1, 1], [1, 1], 1);
        assert!(max_diff(&run(&g, &x)?[0], &want) < 1e-5);
        // SAME_LOWER, kernel 4 on 7, stride 1: total pad 3 -> begin 2, end 1.
        let (g, w) = single_conv(vec![astr("auto_pad", "SAME_LOWER")], &[1, 2, 7, 7], 4)?;
        let want = x.constant_pad_nd([2, 1, 2, 1]).conv2d(&w, none, [1, 1], [0, 0], [1, 1], 1);
        let y = run(&g, &x)?;
        assert_eq!(y[0].size(), vec![1, 2, 7, 7]);
        assert!(max_diff(&y[0], &want) < 1e-5);
        Ok(())
    }

    #[test]
    fn conv_transpose_with_output_shape() -> Result<()> {
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 2, 5, 4]);
        let w = values(2 * 3 * 9, 12);
        m.init_f32("w", &[2, 3, 3, 3], &w);
        m.node("ConvTranspose", &["x", "w"], &["y"], vec![ais("strides", &[2, 2]), ais("output_shape", &[10, 8])]);
        m.output("y");
        let g = m.import()?;
        let x = randn(&[1, 2, 5, 4], 13);
        let wt = Tensor::from_slice(&w).view([2, 3, 3, 3]);
        // Full output 11 x 9; total padding 1 per axis goes to the beginning.
        let want = x.conv_transpose2d(&wt, None::<&Tensor>, [2, 2], [1, 1], [1, 1], 1, [1, 1]);
        let y = run(&g, &x)?;
        assert_eq!(y[0].size(), vec![1, 3, 10, 8]);
        assert!(max_diff(&y[0], &want) < 1e-5);
        Ok(())
    }
}

//! Exactness tests: for every op, any split of the output rows into bands reassembles the
//! whole output, and the whole output matches libtorch's own kernel for the same semantics.

use super::*;
use crate::exec::{Tolerance, run_split, run_whole};
use crate::graph::{Graph, GraphBuilder, NodeId};
use crate::plan::Plan;
use crate::rng::Rng;
use crate::value::DType;
use tch::{Kind, Tensor};

fn randn(shape: &[i64], seed: u64) -> Tensor {
    let mut rng = Rng::new(seed);
    let n: i64 = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.normal() as f32).collect();
    Tensor::from_slice(&v).view(shape)
}

fn max_rel(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size(), "shapes differ");
    let diff = (a - b).abs().max().double_value(&[]);
    let scale = b.abs().max().double_value(&[]).max(1e-12);
    diff / scale
}

/// Builds `x -> op -> out` for one f32 input of `shape`.
fn single(shape: &[usize], op: Op) -> Graph {
    let mut b = GraphBuilder::new("t");
    let x = b.input("x", shape.to_vec(), DType::F32);
    let y = b.add("op", op, &[x]).expect("op fits");
    b.output(y);
    b.build().expect("graph")
}

/// How a split run must agree with the whole one.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Agree {
    /// Bit for bit: the op's arithmetic does not depend on where a band starts (copies,
    /// maxima, element-wise maps computed by one formula per element).
    Bitwise,
    /// The one comparison rule ([`Tolerance::SPLIT`]): sums whose order the kernel picks by shape
    /// and instruction set (convolutions, averages, norms, vectorised transcendental maps), which
    /// differ by a few ulps from one CPU to another.
    Rule,
}

/// Runs `graph` whole and under many random layouts and asserts that every split agrees with
/// the whole run as `agree` says.
fn assert_splits_exact(graph: &Graph, inputs: &[Tensor], agree: Agree) -> Tensor {
    let whole = run_whole(graph, inputs).expect("whole run");
    for units in [2, 3, 8, 64] {
        for seed in 0..12 {
            let plan = Plan::random(graph, units, seed);
            let split = run_split(graph, &plan, inputs).expect("split run");
            for (s, w) in split.outputs.iter().zip(&whole.outputs) {
                let a = crate::exec::agree(s, w, Tolerance::SPLIT).expect("same shape");
                match agree {
                    Agree::Bitwise => assert!(a.max_abs_diff == 0.0, "units {units} seed {seed}: not bitwise: {a:?}"),
                    Agree::Rule => assert!(a.within, "units {units} seed {seed}: {a:?}"),
                }
            }
        }
    }
    whole.outputs[0].shallow_clone()
}

fn conv(weight: Tensor, bias: Option<Tensor>, s: usize, pb: [usize; 2], pe: [usize; 2], d: usize, g: usize) -> Conv {
    Conv {
        weight,
        bias,
        strides: vec![s, s],
        pads_begin: pb.to_vec(),
        pads_end: pe.to_vec(),
        dilations: vec![d, d],
        output_padding: vec![0, 0],
        groups: g,
        packed: None,
        act: None,
    }
}

#[test]
fn conv_bands_match_whole_and_libtorch() {
    let x = randn(&[1, 4, 23, 17], 1);
    for (s, p, d, g) in [(1, 1, 1, 1), (2, 1, 1, 1), (2, 2, 2, 2), (3, 0, 1, 4), (1, 3, 3, 1)] {
        let w = randn(&[8, 4 / g as i64, 3, 3], 2);
        let bias = randn(&[8], 3);
        let graph = single(&[1, 4, 23, 17], Op::Conv(conv(w.shallow_clone(), Some(bias.shallow_clone()), s, [p, p], [p, p], d, g)));
        let out = assert_splits_exact(&graph, &[x.shallow_clone()], Agree::Rule);
        let reference = x.convolution(&w, Some(&bias), [s as i64; 2], [p as i64; 2], [d as i64; 2], false, [0i64; 2], g as i64);
        assert!(max_rel(&out, &reference) < 1e-6, "conv s{s} p{p} d{d} g{g} differs from libtorch");
    }
}

#[test]
fn conv_with_asymmetric_pads_matches_explicit_padding() {
    let x = randn(&[1, 3, 20, 20], 4);
    let w = randn(&[5, 3, 3, 3], 5);
    let graph = single(&[1, 3, 20, 20], Op::Conv(conv(w.shallow_clone(), None, 2, [0, 0], [1, 1], 1, 1)));
    let out = assert_splits_exact(&graph, &[x.shallow_clone()], Agree::Rule);
    let padded = x.constant_pad_nd([0, 1, 0, 1]);
    let reference = padded.convolution(&w, None::<&Tensor>, [2, 2], [0, 0], [1, 1], false, [0, 0], 1);
    assert!(max_rel(&out, &reference) < 1e-6);
}

#[test]
fn conv_transpose_bands_match_whole_and_libtorch() {
    let x = randn(&[1, 4, 9, 7], 6);
    for (s, p, op, k) in [(2, 1, 1, 3), (2, 0, 0, 2), (3, 1, 0, 4), (1, 1, 0, 3)] {
        let w = randn(&[4, 3, k, k], 7);
        let bias = randn(&[3], 8);
        let c = Conv {
            weight: w.shallow_clone(),
            bias: Some(bias.shallow_clone()),
            strides: vec![s, s],
            pads_begin: vec![p, p],
            pads_end: vec![p, p],
            dilations: vec![1, 1],
            output_padding: vec![op, op],
            groups: 1,
            packed: None,
            act: None,
        };
        let graph = single(&[1, 4, 9, 7], Op::ConvTranspose(c));
        let out = assert_splits_exact(&graph, &[x.shallow_clone()], Agree::Rule);
        let reference = x.conv_transpose2d(&w, Some(&bias), [s as i64; 2], [p as i64; 2], [op as i64; 2], 1, [1, 1]);
        assert!(max_rel(&out, &reference) < 1e-6, "conv_transpose s{s} p{p} op{op} k{k}");
    }
}

fn pool(k: usize, s: usize, p: usize, ceil: bool, cip: bool) -> Pool {
    Pool {
        kernel: vec![k, k],
        strides: vec![s, s],
        pads_begin: vec![p, p],
        pads_end: vec![p, p],
        dilations: vec![1, 1],
        ceil_mode: ceil,
        count_include_pad: cip,
    }
}

#[test]
fn max_pool_bands_match_libtorch_including_ceil_mode() {
    let x = randn(&[1, 3, 22, 19], 9);
    for (k, s, p, ceil) in [(3, 2, 1, false), (3, 2, 1, true), (2, 2, 0, true), (3, 1, 1, false), (3, 3, 0, true)] {
        let graph = single(&[1, 3, 22, 19], Op::MaxPool(pool(k, s, p, ceil, false)));
        let out = assert_splits_exact(&graph, &[x.shallow_clone()], Agree::Bitwise);
        let reference = x.max_pool2d([k as i64; 2], [s as i64; 2], [p as i64; 2], [1, 1], ceil);
        assert_eq!(out.size(), reference.size(), "k{k} s{s} p{p} ceil {ceil}");
        assert!(max_rel(&out, &reference) == 0.0, "maxpool k{k} s{s} p{p} ceil {ceil}");
    }
}

#[test]
fn avg_pool_bands_match_libtorch_for_every_padding_mode() {
    let x = randn(&[1, 3, 21, 18], 10);
    for (k, s, p, ceil, cip) in
        [(3, 2, 1, false, true), (3, 2, 1, false, false), (3, 2, 1, true, true), (3, 2, 1, true, false), (2, 2, 0, false, true)]
    {
        let graph = single(&[1, 3, 21, 18], Op::AvgPool(pool(k, s, p, ceil, cip)));
        let out = assert_splits_exact(&graph, &[x.shallow_clone()], Agree::Rule);
        let reference = x.avg_pool2d([k as i64; 2], [s as i64; 2], [p as i64; 2], ceil, cip, None);
        assert_eq!(out.size(), reference.size());
        assert!(max_rel(&out, &reference) < 1e-6, "avgpool k{k} s{s} p{p} ceil {ceil} cip {cip}");
    }
}

#[test]
fn pools_and_convs_in_3d_split_exactly() {
    let x = randn(&[1, 2, 12, 10, 6], 11);
    let w = randn(&[3, 2, 3, 3, 3], 12);
    let mut b = GraphBuilder::new("t3");
    let i = b.input("x", vec![1, 2, 12, 10, 6], DType::F32);
    let c = Conv {
        weight: w,
        bias: None,
        strides: vec![1; 3],
        pads_begin: vec![1; 3],
        pads_end: vec![1; 3],
        dilations: vec![1; 3],
        output_padding: vec![0; 3],
        groups: 1,
        packed: None,
        act: None,
    };
    let c = b.add("conv", Op::Conv(c), &[i]).expect("conv");
    let p = Pool {
        kernel: vec![2; 3],
        strides: vec![2; 3],
        pads_begin: vec![0; 3],
        pads_end: vec![0; 3],
        dilations: vec![1; 3],
        ceil_mode: false,
        count_include_pad: true,
    };
    let p = b.add("pool", Op::MaxPool(p), &[c]).expect("pool");
    b.output(p);
    let g = b.build().expect("graph");
    let out = assert_splits_exact(&g, &[x], Agree::Rule);
    assert_eq!(out.size(), [1, 3, 6, 5, 3]);
}

/// 3-d convolutions go to oneDNN directly on the CPU (`window::mkldnn_3d`): strided, padded,
/// dilated and grouped, with a bias, split or whole, they equal libtorch's own `convolution`,
/// which picks its kernel itself (an argument in the wrong place would differ).
#[test]
fn convs_in_3d_through_onednn_match_libtorch() {
    let x = randn(&[1, 4, 14, 10, 6], 21);
    assert_eq!(window::mkldnn_3d(&x), tch::utils::has_mkldnn(), "a 3-d float CPU input takes oneDNN where libtorch has it");
    assert!(!window::mkldnn_3d(&randn(&[1, 4, 14, 10], 22)), "2-d stays with libtorch's choice");
    for (stride, pad, dil, groups) in
        [([1, 1, 1], [1, 1, 1], [1, 1, 1], 1), ([2, 1, 2], [2, 1, 0], [2, 1, 1], 2), ([1, 2, 1], [0, 3, 1], [1, 3, 1], 4)]
    {
        let w = randn(&[4, 4 / groups, 3, 3, 3], 23);
        let bias = randn(&[4], 24);
        let c = Conv {
            weight: w.shallow_clone(),
            bias: Some(bias.shallow_clone()),
            strides: stride.to_vec(),
            pads_begin: pad.to_vec(),
            pads_end: pad.to_vec(),
            dilations: dil.to_vec(),
            output_padding: vec![0; 3],
            groups: groups as usize,
            packed: None,
            act: None,
        };
        let out = assert_splits_exact(&single(&[1, 4, 14, 10, 6], Op::Conv(c)), &[x.shallow_clone()], Agree::Rule);
        let i = |v: [usize; 3]| v.map(|d| d as i64);
        let reference = x.convolution(&w, Some(&bias), i(stride), i(pad), i(dil), false, [0i64; 3], groups);
        assert!(max_rel(&out, &reference) < 1e-5, "stride {stride:?} pad {pad:?} dilation {dil:?} groups {groups}");
    }
}

fn resize(mode: ResizeMode, coord: CoordMode, out: [usize; 4], scale: f32) -> Resize {
    Resize { mode, coord, out_shape: out.to_vec(), scales: vec![1.0, 1.0, scale, scale] }
}

#[test]
fn resize_matches_libtorch_upsampling() {
    let x = randn(&[1, 2, 7, 9], 13);
    let near = resize(ResizeMode::Nearest(NearestMode::Floor), CoordMode::Asymmetric, [1, 2, 14, 18], 2.0);
    let out = assert_splits_exact(&single(&[1, 2, 7, 9], Op::Resize(near)), &[x.shallow_clone()], Agree::Bitwise);
    let reference = x.upsample_nearest2d([14, 18], Some(2.0), Some(2.0));
    assert!(max_rel(&out, &reference) == 0.0);

    let lin = resize(ResizeMode::Linear, CoordMode::HalfPixel, [1, 2, 14, 18], 2.0);
    let out = assert_splits_exact(&single(&[1, 2, 7, 9], Op::Resize(lin)), &[x.shallow_clone()], Agree::Bitwise);
    let reference = x.upsample_bilinear2d([14, 18], false, Some(2.0), Some(2.0));
    assert!(max_rel(&out, &reference) < 1e-6, "bilinear half_pixel");

    let lin = Resize {
        mode: ResizeMode::Linear,
        coord: CoordMode::AlignCorners,
        out_shape: vec![1, 2, 20, 11],
        scales: vec![1.0, 1.0, 20.0 / 7.0, 11.0 / 9.0],
    };
    let out = assert_splits_exact(&single(&[1, 2, 7, 9], Op::Resize(lin)), &[x.shallow_clone()], Agree::Bitwise);
    let reference = x.upsample_bilinear2d([20, 11], true, None, None);
    assert!(max_rel(&out, &reference) < 1e-6, "bilinear align_corners");
}

#[test]
fn strided_slices_split_exactly() {
    // Space-to-depth (YOLOX Focus): four strided slices concatenated on channels.
    let x = randn(&[1, 3, 16, 12], 14);
    let mut b = GraphBuilder::new("focus");
    let i = b.input("x", vec![1, 3, 16, 12], DType::F32);
    let mut parts = vec![];
    for (r, c) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
        let s = vec![SliceAxis { axis: 2, start: r, end: 16, step: 2 }, SliceAxis { axis: 3, start: c, end: 12, step: 2 }];
        parts.push(b.add(format!("s{r}{c}"), Op::Slice(s), &[i]).expect("slice"));
    }
    let cat = b.add("cat", Op::Concat { axis: 1 }, &parts).expect("cat");
    let off = b.add("off", Op::Slice(vec![SliceAxis { axis: 2, start: 3, end: 7, step: 1 }]), &[cat]).expect("slice");
    b.output(off);
    let g = b.build().expect("graph");
    let out = assert_splits_exact(&g, &[x.shallow_clone()], Agree::Bitwise);
    let reference = Tensor::cat(
        &[
            x.slice(2, 0, 16, 2).slice(3, 0, 12, 2),
            x.slice(2, 1, 16, 2).slice(3, 0, 12, 2),
            x.slice(2, 0, 16, 2).slice(3, 1, 12, 2),
            x.slice(2, 1, 16, 2).slice(3, 1, 12, 2),
        ],
        1,
    )
    .slice(2, 3, 7, 1);
    assert!(max_rel(&out, &reference) == 0.0);
}

#[test]
fn elementwise_ops_are_bitwise_exact_under_any_split() {
    let x = randn(&[1, 4, 13, 5], 15);
    let unaries = [
        UnaryOp::Relu,
        UnaryOp::LeakyRelu(0.1),
        UnaryOp::Clip { min: 0.0, max: 6.0 },
        UnaryOp::Sigmoid,
        UnaryOp::HardSigmoid { alpha: 0.2, beta: 0.5 },
        UnaryOp::HardSwish,
        UnaryOp::Silu,
        UnaryOp::Gelu { tanh: false },
        UnaryOp::Gelu { tanh: true },
        UnaryOp::Erf,
        UnaryOp::Tanh,
        UnaryOp::Exp,
        UnaryOp::Abs,
        UnaryOp::Neg,
    ];
    for u in unaries {
        let g = single(&[1, 4, 13, 5], Op::Unary(u.clone()));
        // Piecewise-linear maps are bitwise exact. Transcendental ones go through libtorch's
        // vectorised kernels, whose scalar tail loop can differ from the SIMD body by an ulp
        // depending on where a band starts, so they get a few ulps of slack.
        let exact = matches!(u, UnaryOp::Relu | UnaryOp::LeakyRelu(_) | UnaryOp::Clip { .. } | UnaryOp::Abs | UnaryOp::Neg);
        let out = assert_splits_exact(&g, &[x.shallow_clone()], if exact { Agree::Bitwise } else { Agree::Rule });
        assert_eq!(out.size(), x.size(), "{}", u.name());
    }
    let rl = run_whole(&single(&[1, 4, 13, 5], Op::Unary(UnaryOp::LeakyRelu(0.1))), &[x.shallow_clone()]).expect("run");
    assert!(max_rel(&rl.outputs[0], &x.leaky_relu()) > 0.0, "slope 0.1 differs from libtorch's default 0.01");
    assert!(max_rel(&rl.outputs[0], &x.maximum(&(&x * 0.1))) == 0.0);
}

#[test]
fn broadcasting_binary_ops_split_exactly() {
    let x = randn(&[1, 4, 11, 6], 16);
    let y = randn(&[1, 4, 11, 6], 17);
    let mut b = GraphBuilder::new("bin");
    let i = b.input("x", vec![1, 4, 11, 6], DType::F32);
    let j = b.input("y", vec![1, 4, 11, 6], DType::F32);
    let scale = b.add("scale", Op::Constant(randn(&[4, 1, 1], 18)), &[]).expect("const");
    let rowc = b.add("rowc", Op::Constant(randn(&[1, 1, 11, 6], 19)), &[]).expect("const");
    let gap = b.add("gap", Op::ReduceMean { axes: vec![2, 3], keepdims: true }, &[j]).expect("gap");
    let a = b.add("add", Op::Binary(BinaryOp::Add), &[i, j]).expect("add");
    let m = b.add("mul", Op::Binary(BinaryOp::Mul), &[a, scale]).expect("mul");
    let d = b.add("div", Op::Binary(BinaryOp::Sub), &[m, rowc]).expect("sub");
    let se = b.add("se", Op::Binary(BinaryOp::Mul), &[d, gap]).expect("se");
    b.output(se);
    let g = b.build().expect("graph");
    assert_eq!(g.locality(gap), OpClass::Global);
    assert_eq!(g.locality(se), OpClass::ElementWise);
    let _ = assert_splits_exact(&g, &[x, y], Agree::Bitwise);
}

#[test]
fn channels_last_block_splits_exactly() {
    // ConvNeXt-style: permute to NHWC, layer norm, linear, GELU, linear, permute back.
    let x = randn(&[1, 8, 10, 6], 20);
    let mut b = GraphBuilder::new("cl");
    let i = b.input("x", vec![1, 8, 10, 6], DType::F32);
    let t = b.add("to_nhwc", Op::Transpose { perm: vec![0, 2, 3, 1] }, &[i]).expect("t");
    assert_eq!(b.info(t).row_axis, Some(1));
    let ln =
        b.add("ln", Op::LayerNorm { axis: 3, weight: Some(randn(&[8], 21)), bias: Some(randn(&[8], 22)), eps: 1e-6 }, &[t]).expect("ln");
    let l1 = b.add("fc1", Op::Linear { weight: randn(&[32, 8], 23) * 0.3, bias: Some(randn(&[32], 24)), act: None }, &[ln]).expect("fc1");
    let ge = b.add("gelu", Op::Unary(UnaryOp::Gelu { tanh: false }), &[l1]).expect("gelu");
    let l2 = b.add("fc2", Op::Linear { weight: randn(&[8, 32], 25) * 0.2, bias: None, act: None }, &[ge]).expect("fc2");
    let sm = b.add("softmax", Op::Softmax { axis: 3 }, &[l2]).expect("sm");
    let back = b.add("to_nchw", Op::Transpose { perm: vec![0, 3, 1, 2] }, &[sm]).expect("back");
    let r = b.add("reshape", Op::Reshape { shape: vec![1, 2, 4, 10, 6] }, &[back]).expect("reshape");
    assert_eq!(b.info(r).row_axis, Some(3));
    b.output(r);
    let g = b.build().expect("graph");
    for id in [t, ln, l1, ge, l2, sm, back, r] {
        assert!(g.locality(id).is_local(), "node {} should be local", g.nodes[id].name);
    }
    let _ = assert_splits_exact(&g, &[x], Agree::Rule);
}

#[test]
fn global_ops_are_classified_and_run_on_one_side() {
    let x = randn(&[1, 4, 8, 8], 26);
    let mut b = GraphBuilder::new("head");
    let i = b.input("x", vec![1, 4, 8, 8], DType::F32);
    let sm = b.add("softmax_rows", Op::Softmax { axis: 2 }, &[i]).expect("sm");
    let gap = b.add("gap", Op::ReduceMean { axes: vec![2, 3], keepdims: true }, &[sm]).expect("gap");
    let flat = b.add("flatten", Op::Reshape { shape: vec![1, 4] }, &[gap]).expect("flat");
    let fc = b.add("fc", Op::Linear { weight: randn(&[3, 4], 27), bias: None, act: None }, &[flat]).expect("fc");
    let flat2 = b.add("flatten_rows", Op::Reshape { shape: vec![1, 256] }, &[sm]).expect("flat2");
    b.output(fc);
    b.output(flat2);
    let g = b.build().expect("graph");
    for id in [sm, gap, flat, fc, flat2] {
        assert_eq!(g.locality(id), OpClass::Global, "{}", g.nodes[id].name);
    }
    let _ = assert_splits_exact(&g, &[x], Agree::Rule);
}

/// A YOLOv8-style head: features flattened to anchors, DFL bins (reshape, transpose, softmax
/// over bins, a 1x1 convolution over them), arithmetic against a constant anchor grid. Once the
/// spatial rows are flattened no value has image rows any more: every head op is a barrier, the
/// convolution over bins included (it once treated the 4 box sides as rows), and split runs
/// equal the whole run, which equals the same ops done by hand.
#[test]
fn flattened_anchor_heads_are_barriers_and_split_exactly() {
    let (bins, h, w) = (4usize, 6usize, 5usize);
    let a = h * w;
    let x = randn(&[1, 4 * bins as i64, h as i64, w as i64], 40);
    let mut b = GraphBuilder::new("dfl");
    let i = b.input("x", vec![1, 4 * bins, h, w], DType::F32);
    let feat = b.add("relu", Op::Unary(UnaryOp::Relu), &[i]).expect("relu");
    let flat = b.add("flatten", Op::Reshape { shape: vec![1, 4 * bins, a] }, &[feat]).expect("flatten");
    assert_eq!(b.info(flat).row_axis, None, "flattened anchors are not image rows");
    let split = b.add("bins", Op::Reshape { shape: vec![1, 4, bins, a] }, &[flat]).expect("bins");
    let t = b.add("transpose", Op::Transpose { perm: vec![0, 2, 1, 3] }, &[split]).expect("t");
    let sm = b.add("softmax", Op::Softmax { axis: 1 }, &[t]).expect("softmax");
    let weight = Tensor::arange(bins as i64, (Kind::Float, tch::Device::Cpu)).view([1, bins as i64, 1, 1]);
    let dfl = b.add("dfl", Op::Conv(conv(weight.shallow_clone(), None, 1, [0, 0], [0, 0], 1, 1)), &[sm]).expect("dfl");
    assert_eq!(b.info(dfl).shape, vec![1, 1, 4, a]);
    let dist = b.add("dist", Op::Reshape { shape: vec![1, 4, a] }, &[dfl]).expect("dist");
    let grid = randn(&[1, 4, a as i64], 41);
    let anchors = b.add("anchors", Op::Constant(grid.shallow_clone()), &[]).expect("anchors");
    let boxes = b.add("boxes", Op::Binary(BinaryOp::Add), &[dist, anchors]).expect("boxes");
    b.output(boxes);
    let g = b.build().expect("graph");
    assert!(g.locality(feat).is_local());
    for id in [flat, split, t, sm, dfl, dist, boxes] {
        assert_eq!(g.locality(id), OpClass::Global, "{}", g.nodes[id].name);
        assert_eq!(g.nodes[id].info.row_axis, None, "{}", g.nodes[id].name);
    }
    let whole = assert_splits_exact(&g, &[x.shallow_clone()], Agree::Bitwise);
    let by_hand = x
        .relu()
        .view([1, 4, bins as i64, a as i64])
        .transpose(1, 2)
        .softmax(1, Kind::Float)
        .conv2d(&weight, None::<Tensor>, [1, 1], [0, 0], [1, 1], 1)
        .view([1, 4, a as i64])
        + grid;
    assert!(max_rel(&whole, &by_hand) < 1e-6, "{}", max_rel(&whole, &by_hand));
}

#[test]
fn normalize_u8_input_splits_exactly_and_sends_bytes() {
    let mut rng = Rng::new(28);
    let v: Vec<u8> = (0..3 * 16 * 16).map(|_| rng.below(256) as u8).collect();
    let x = Tensor::from_slice(&v).view([1, 3, 16, 16]);
    let mut b = GraphBuilder::new("norm");
    let i = b.input("image", vec![1, 3, 16, 16], DType::U8);
    let n = b.add("normalize", Op::NormalizeU8 { mean: vec![0.485, 0.456, 0.406], std: vec![0.229, 0.224, 0.225] }, &[i]).expect("norm");
    b.output(n);
    let g = b.build().expect("graph");
    let out = assert_splits_exact(&g, &[x.shallow_clone()], Agree::Bitwise);
    let reference = (x.to_kind(Kind::Float) / 255.0 - Tensor::from_slice(&[0.485f32, 0.456, 0.406]).view([1, 3, 1, 1]))
        / Tensor::from_slice(&[0.229f32, 0.224, 0.225]).view([1, 3, 1, 1]);
    assert!(max_rel(&out, &reference) == 0.0);
    // Server-only: the raw input crosses the link as uint8.
    let run = run_split(&g, &Plan::server_only(&g, 8), &[x]).expect("split");
    assert_eq!(run.bytes_up, 3 * 16 * 16);
    assert_eq!(run.bytes_down, 3 * 16 * 16 * 4);
}

#[test]
fn split_run_rejects_bad_plans_and_inputs() {
    let g = single(&[1, 2, 8, 8], Op::Unary(UnaryOp::Relu));
    let x = randn(&[1, 2, 8, 8], 29);
    let mut plan = Plan::robot_only(&g, 4);
    plan.splits[1].robot_end = 1;
    plan.splits[1].server_start = 3;
    let err = run_split(&g, &plan, &[x.shallow_clone()]).expect_err("gap in coverage");
    assert!(matches!(err, crate::Error::Plan(_)), "{err}");
    let err = run_whole(&g, &[randn(&[1, 2, 8, 7], 30)]).expect_err("bad shape");
    assert!(err.to_string().contains("[1, 2, 8, 8]"), "{err}");
    let err = run_whole(&g, &[x.to_kind(Kind::Double)]).expect_err("bad dtype");
    assert!(matches!(err, crate::Error::Input(_)), "{err}");
}

#[test]
fn footprints_of_a_strided_conv() {
    let w = randn(&[2, 2, 3, 3], 31);
    let g = single(&[1, 2, 10, 10], Op::Conv(conv(w, None, 2, [1, 1], [1, 1], 1, 1)));
    let id: NodeId = 1;
    assert_eq!(g.footprint(id, 0, &(0..1)), crate::rows::Footprint::Rows(0..2));
    assert_eq!(g.footprint(id, 0, &(2..5)), crate::rows::Footprint::Rows(3..10));
}

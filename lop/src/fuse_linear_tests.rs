//! The linear layers' folds ([`super::fuse_linear_layers`]): what they fold, what they leave,
//! and that the folded graph computes what the written-out one does, whole and split.

use crate::exec::{Tolerance, agree, run_split, run_whole};
use crate::fuse::fuse_activations;
use crate::graph::{Graph, GraphBuilder, Layout, NodeId};
use crate::ops::{BinaryOp, Op, UnaryOp};
use crate::plan::Plan;
use crate::value::DType;
use tch::Tensor;

/// Seeded values from the crate's own generator: a draw from libtorch's global one, seeded here,
/// would race with other tests' draws, and `sample` must build the same weights every time.
fn randn(shape: &[i64], seed: u64) -> Tensor {
    crate::onnx::testutil::randn(shape, seed)
}

fn scalar(b: &mut GraphBuilder, name: &str, v: f64) -> NodeId {
    b.add(name, Op::Constant(Tensor::from_slice(&[v as f32])), &[]).expect(name)
}

fn binary(b: &mut GraphBuilder, name: &str, op: BinaryOp, x: NodeId, y: NodeId) -> NodeId {
    b.add(name, Op::Binary(op), &[x, y]).expect(name)
}

fn linear(b: &mut GraphBuilder, name: &str, x: NodeId, cin: i64, cout: i64, seed: u64) -> NodeId {
    let op = Op::Linear { weight: randn(&[cout, cin], seed) * 0.3, bias: None, act: None };
    b.add(name, op, &[x]).expect(name)
}

/// GELU as PyTorch exports it below opset 20: `(x · (1 + erf(x / √2))) · ½`, named `p.*`.
fn gelu_halving_last(b: &mut GraphBuilder, p: &str, x: NodeId, root2: f64) -> NodeId {
    let k = scalar(b, &format!("{p}.root2"), root2);
    let d = binary(b, &format!("{p}.div"), BinaryOp::Div, x, k);
    let e = b.add(format!("{p}.erf"), Op::Unary(UnaryOp::Erf), &[d]).expect("erf");
    let one = scalar(b, &format!("{p}.one"), 1.0);
    let a = binary(b, &format!("{p}.add"), BinaryOp::Add, e, one);
    let m = binary(b, &format!("{p}.mul"), BinaryOp::Mul, x, a);
    let half = scalar(b, &format!("{p}.half"), 0.5);
    binary(b, &format!("{p}.mul1"), BinaryOp::Mul, m, half)
}

/// The other order: `(x · ½) · (1 + erf(1/√2 · x))`, the scaling constant first.
fn gelu_halving_first(b: &mut GraphBuilder, p: &str, x: NodeId) -> NodeId {
    let k = scalar(b, &format!("{p}.inv_root2"), std::f64::consts::FRAC_1_SQRT_2);
    let d = binary(b, &format!("{p}.scale"), BinaryOp::Mul, k, x);
    let e = b.add(format!("{p}.erf"), Op::Unary(UnaryOp::Erf), &[d]).expect("erf");
    let one = scalar(b, &format!("{p}.one"), 1.0);
    let a = binary(b, &format!("{p}.add"), BinaryOp::Add, one, e);
    let half = scalar(b, &format!("{p}.half"), 0.5);
    let h = binary(b, &format!("{p}.halve"), BinaryOp::Mul, x, half);
    binary(b, &format!("{p}.mul"), BinaryOp::Mul, h, a)
}

/// A ConvNeXt-style MLP on `[1, 9, 7, 8]` (rows on axis 1): `fc1 → + b1 → GELU → fc2 → + b2`,
/// then a second GELU in the other order with a ReLU layer after it (`fc3`, whose value is also
/// read by `keep`: not folded), and a near-GELU that divides by 2 instead of √2 (not folded).
fn sample() -> Graph {
    let mut b = GraphBuilder::new("mlp");
    let x = b.input("x", vec![1, 9, 7, 8], DType::F32);
    let fc1 = linear(&mut b, "fc1", x, 8, 16, 1);
    let b1 = b.add("b1", Op::Constant(randn(&[16], 2)), &[]).expect("b1");
    let h1 = binary(&mut b, "fc1.bias", BinaryOp::Add, b1, fc1);
    let g1 = gelu_halving_last(&mut b, "g1", h1, std::f64::consts::SQRT_2 as f32 as f64);
    let fc2 = linear(&mut b, "fc2", g1, 16, 8, 3);
    let b2 = b.add("b2", Op::Constant(randn(&[1, 1, 1, 8], 4)), &[]).expect("b2");
    let h2 = binary(&mut b, "fc2.bias", BinaryOp::Add, fc2, b2);
    let g2 = gelu_halving_first(&mut b, "g2", h2);
    let fc3 = linear(&mut b, "fc3", g2, 8, 8, 5);
    let r3 = b.add("relu3", Op::Unary(UnaryOp::Relu), &[fc3]).expect("relu3");
    let keep = binary(&mut b, "keep", BinaryOp::Add, r3, fc3);
    let fc4 = linear(&mut b, "fc4", keep, 8, 8, 6);
    let near = gelu_halving_last(&mut b, "near", fc4, 2.0);
    let fc5 = linear(&mut b, "fc5", near, 8, 4, 7);
    let r5 = b.add("relu5", Op::Unary(UnaryOp::Relu), &[fc5]).expect("relu5");
    b.output(r5);
    b.build().expect("graph")
}

#[test]
fn folds_biases_gelus_and_activations_and_leaves_the_rest() {
    let before = sample();
    let nodes = before.nodes.len();
    let (g, report) = fuse_activations(before);
    let got: Vec<(&str, &str)> = report.rewritten.iter().map(|r| (r.node.as_str(), r.into.as_str())).collect();
    let want = [
        ("g1.erf", "Gelu"),
        ("g2.erf", "Gelu"),
        ("fc1", "Linear+bias"),
        ("fc2", "Linear+bias"),
        ("fc1", "Linear+Gelu"),
        ("fc2", "Linear+Gelu"),
        ("fc5", "Linear+Activation"),
    ];
    assert_eq!(got, want);
    assert_eq!(report.rewritten[0].removed, ["g1.div", "g1.erf", "g1.add", "g1.mul"]);
    assert_eq!(report.rewritten[1].removed, ["g2.scale", "g2.erf", "g2.add", "g2.halve"]);
    assert_eq!(report.rewritten[2].removed, ["fc1.bias"]);
    // The GELUs' and biases' constants went with them; `near`'s stayed.
    for gone in ["g1.root2", "g1.one", "g1.half", "g2.inv_root2", "g2.one", "g2.half", "b1", "b2", "g1.mul1", "g2.mul"] {
        assert!(g.find(gone).is_none(), "{gone} is still in the graph");
    }
    for kept in ["near.root2", "near.erf", "near.mul1", "relu3", "keep"] {
        assert!(g.find(kept).is_some(), "{kept} was folded");
    }
    let kind = |name: &str| g.nodes[g.find(name).expect(name)].op.kind_name();
    assert_eq!((kind("fc1"), kind("fc2"), kind("fc3"), kind("fc4")), ("Linear+Gelu", "Linear+Gelu", "Linear", "Linear"));
    // 4 + 4 GELU nodes, 2 bias adds, 2 + 1 activations, 6 + 2 constants.
    assert_eq!(nodes - g.nodes.len(), 4 + 4 + 2 + 2 + 1 + 6 + 2);
    // The output was relu5's value; it is fc5's now, under relu5's name.
    assert_eq!((g.nodes[g.outputs[0]].name.as_str(), g.nodes[g.outputs[0]].op.kind_name()), ("relu5", "Linear+Activation"));
    for (id, n) in g.nodes.iter().enumerate() {
        assert!(n.inputs.iter().all(|&i| i < id), "{} reads a later node", n.name);
    }
}

/// The folded graph computes what the written-out one does, whole and split over random plans,
/// in both layouts (oneDNN's post-ops on the CPU where libtorch has them).
#[test]
fn folded_runs_agree_with_written_out_ones_whole_and_split() {
    let unfused = sample();
    let x = [randn(&[1, 9, 7, 8], 11)];
    let want = run_whole(&unfused, &x).expect("unfused").outputs.remove(0);
    for layout in [Layout::Nchw, Layout::ChannelsLast] {
        let (mut g, report) = fuse_activations(sample());
        assert_eq!(report.rewritten.len(), 7);
        g.set_layout(layout).expect("layout");
        let whole = run_whole(&g, &x).expect("fused").outputs.remove(0);
        let a = agree(&whole, &want, Tolerance::SPLIT).expect("same shape");
        assert!(a.within, "{layout:?} whole: {a:?}");
        for seed in [1, 2, 3] {
            let split = run_split(&g, &Plan::random(&g, 3, seed), &x).expect("split").outputs.remove(0);
            let a = agree(&split, &want, Tolerance::SPLIT).expect("same shape");
            assert!(a.within, "{layout:?} split seed {seed}: {a:?}");
        }
    }
}

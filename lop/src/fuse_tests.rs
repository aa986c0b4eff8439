//! The fusion pass ([`super::fuse_activations`]): what it folds, what it leaves and why, and
//! that a fused graph computes what the unfused one does, whole and split, on both routes.

use super::*;
use crate::exec::{Tolerance, agree, run_split, run_whole};
use crate::graph::{GraphBuilder, Layout};
use crate::ops::Conv;
use crate::plan::Plan;
use tch::{Device, Kind, Tensor};

fn conv(b: &mut GraphBuilder, name: &str, x: NodeId, cin: i64, cout: i64) -> NodeId {
    let mut c = Conv::same2d(Tensor::randn([cout, cin, 3, 3], (Kind::Float, Device::Cpu)));
    c.bias = Some(Tensor::randn([cout], (Kind::Float, Device::Cpu)));
    b.add(name, Op::Conv(c), &[x]).expect(name)
}

fn unary(b: &mut GraphBuilder, name: &str, x: NodeId, u: UnaryOp) -> NodeId {
    b.add(name, Op::Unary(u), &[x]).expect(name)
}

/// Seven convolutions, each followed by an activation in one of the shapes the pass meets: ReLU;
/// SiLU as one op; `x * Sigmoid(x)` with the product's inputs both ways round; a ReLU beside a
/// residual add (the convolution's value has two readers: left alone); a Tanh (no fused form:
/// left alone); a clip (ReLU6) and a LeakyReLU; and a ReLU that is the graph's output.
fn sample() -> Graph {
    let mut b = GraphBuilder::new("fusable");
    let x = b.input("x", vec![1, 3, 21, 13], DType::F32);
    let c1 = conv(&mut b, "c1", x, 3, 8);
    let r1 = unary(&mut b, "relu1", c1, UnaryOp::Relu);
    let c2 = conv(&mut b, "c2", r1, 8, 8);
    let s2 = unary(&mut b, "silu2", c2, UnaryOp::Silu);
    let c3 = conv(&mut b, "c3", s2, 8, 8);
    let g3 = unary(&mut b, "sig3", c3, UnaryOp::Sigmoid);
    let m3 = b.add("mul3", Op::Binary(BinaryOp::Mul), &[c3, g3]).expect("mul3");
    let c4 = conv(&mut b, "c4", m3, 8, 8);
    let g4 = unary(&mut b, "sig4", c4, UnaryOp::Sigmoid);
    let m4 = b.add("mul4", Op::Binary(BinaryOp::Mul), &[g4, c4]).expect("mul4");
    let c5 = conv(&mut b, "c5", m4, 8, 8);
    let r5 = unary(&mut b, "relu5", c5, UnaryOp::Relu);
    let a5 = b.add("add5", Op::Binary(BinaryOp::Add), &[c5, r5]).expect("add5");
    let c6 = conv(&mut b, "c6", a5, 8, 8);
    let t6 = unary(&mut b, "tanh6", c6, UnaryOp::Tanh);
    let c8 = conv(&mut b, "c8", t6, 8, 8);
    let k8 = unary(&mut b, "clip8", c8, UnaryOp::Clip { min: 0.0, max: 6.0 });
    let c9 = conv(&mut b, "c9", k8, 8, 8);
    let l9 = unary(&mut b, "leaky9", c9, UnaryOp::LeakyRelu(0.1));
    let c7 = conv(&mut b, "c7", l9, 8, 4);
    let r7 = unary(&mut b, "relu7", c7, UnaryOp::Relu);
    b.output(r7);
    b.build().expect("graph")
}

#[test]
fn folds_what_only_a_convolution_feeds_and_says_why_not_elsewhere() {
    let before = sample();
    let nodes = before.nodes.len();
    let (g, report) = fuse_activations(before);
    let fused: Vec<(&str, &str)> = report.fused.iter().map(|f| (f.conv.as_str(), f.act.as_str())).collect();
    let want = [("c1", "Relu"), ("c2", "SiLU"), ("c3", "SiLU"), ("c4", "SiLU"), ("c8", "Clip"), ("c9", "LeakyRelu"), ("c7", "Relu")];
    assert_eq!(fused, want);
    assert_eq!(report.fused[2].removed, ["sig3", "mul3"]);
    let unfused: Vec<(&str, &str)> = report.unfused.iter().map(|u| (u.node.as_str(), u.kind.as_str())).collect();
    assert_eq!(unfused, [("relu5", "Relu"), ("tanh6", "Tanh")]);
    assert!(report.unfused[0].why.contains("read by 2 ops"), "{:?}", report.unfused[0]);
    assert!(report.unfused[1].why.contains("no fused form"), "{:?}", report.unfused[1]);
    let removed: usize = report.fused.iter().map(|f| f.removed.len()).sum();
    assert_eq!(g.nodes.len(), nodes - removed);
    // The output's value is the fused convolution's now, under the output's name.
    let out = &g.nodes[g.outputs[0]];
    assert_eq!((out.name.as_str(), out.op.kind_name()), ("relu7", "Conv+Relu"));
    for (id, n) in g.nodes.iter().enumerate() {
        assert!(n.inputs.iter().all(|&i| i < id), "{} reads a later node", n.name);
    }
}

/// Fused and unfused graphs compute the same values: whole and split (random plans), in NCHW
/// (libtorch's convolution, then the activation in place) and channels-last (oneDNN's post-op).
#[test]
fn fused_runs_agree_with_unfused_ones_whole_and_split() {
    let unfused = sample();
    let x = [Tensor::randn([1, 3, 21, 13], (Kind::Float, Device::Cpu))];
    let want = run_whole(&unfused, &x).expect("unfused").outputs.remove(0);
    for layout in [Layout::Nchw, Layout::ChannelsLast] {
        let (mut g, _) = fuse_activations(sample());
        // Same seeds are not the same weights: copy the reference's weights across.
        copy_weights(&unfused, &mut g);
        g.set_layout(layout).expect("layout");
        let whole = run_whole(&g, &x).expect("fused").outputs.remove(0);
        let a = agree(&whole, &want, Tolerance::SPLIT).expect("same shape");
        assert!(a.within, "{layout:?} whole: {a:?}");
        for seed in [1, 2, 3] {
            let split = run_split(&g, &Plan::random(&g, 4, seed), &x).expect("split").outputs.remove(0);
            let a = agree(&split, &want, Tolerance::SPLIT).expect("same shape");
            assert!(a.within, "{layout:?} split seed {seed}: {a:?}");
        }
    }
}

/// Gives `to`'s convolutions the weights of `from`'s same-named ones.
fn copy_weights(from: &Graph, to: &mut Graph) {
    for n in &mut to.nodes {
        let Op::Conv(c) = &mut n.op else { continue };
        // The fused output took its activation's name (relu7 for c7).
        let name = n.name.replacen("relu", "c", 1);
        let id = from.find(&name).expect("the conv");
        let Op::Conv(src) = &from.nodes[id].op else { panic!("{} is not a conv", n.name) };
        c.weight = src.weight.copy();
        c.bias = src.bias.as_ref().map(Tensor::copy);
    }
}

/// A graph with nothing to fold keeps its content hash (plans and profiles stay valid); a
/// fused graph's hash differs from its unfused form's, so two sides loading differently are
/// refused at the handshake.
#[test]
fn hashes_change_only_where_something_was_folded() {
    let mut b = GraphBuilder::new("plain");
    let x = b.input("x", vec![1, 3, 8, 8], DType::F32);
    let c = conv(&mut b, "c", x, 3, 4);
    let t = unary(&mut b, "tanh", c, UnaryOp::Tanh);
    b.output(t);
    let plain = b.build().expect("graph");
    let hash = plain.content_hash().expect("hash");
    let (same, report) = fuse_activations(plain);
    assert!(report.fused.is_empty());
    assert_eq!(same.content_hash().expect("hash"), hash);

    let g = sample();
    let hash = g.content_hash().expect("hash");
    let (fused, _) = fuse_activations(g);
    assert_ne!(fused.content_hash().expect("hash"), hash);
}

/// Every zoo model (at a small size where its architecture allows one) loads fused and unfused,
/// and the two compute the same outputs whole, in NCHW (libtorch's convolutions, activations in
/// place) and in channels-last (oneDNN's post-ops). The zoo's detectors fold their SiLUs and its
/// ResNets their ReLUs, so the comparison is not vacuous.
#[test]
fn fused_and_unfused_agree_on_every_zoo_model() {
    let mut folded = std::collections::BTreeMap::new();
    for name in crate::zoo::names() {
        let sized = match *name {
            "vgg16" | "vgg19" | "lidar_bev" => name.to_string(),
            "occupancy3d" => "occupancy3d@64x32x64".to_string(),
            _ => format!("{name}@64x64"),
        };
        // Built once (VGG's weights alone take a second to draw); each variant is a copy sharing
        // its weights, fused and laid out as `model::load` does it: fusion first, then layout.
        let base = crate::model::load(&format!("zoo:{sized}"), &crate::model::LoadOptions { unfused: true, ..Default::default() })
            .expect("zoo model");
        for layout in [Layout::Nchw, Layout::ChannelsLast] {
            let (mut fused, mut unfused) = (fuse_activations(base.share()).0, base.share());
            fused.set_layout(layout).expect("fused layout");
            unfused.set_layout(layout).expect("unfused layout");
            let x = crate::exec::synthetic_inputs(&unfused, 7).expect("inputs");
            let want = run_whole(&unfused, &x).expect("unfused run").outputs;
            let got = run_whole(&fused, &x).expect("fused run").outputs;
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                let a = agree(g, w, Tolerance::SPLIT).expect("same shape");
                assert!(a.within, "{sized} {layout:?} output {k}: {a:?}");
            }
            folded.insert(*name, unfused.nodes.len() - fused.nodes.len());
        }
    }
    for name in ["resnet18", "resnet50", "vgg16", "yolo_det", "pose_hr"] {
        assert!(folded[name] > 0, "{name} folded nothing: {folded:?}");
    }
}

//! Zoo tests: every model builds with torchvision's parameter count, runs whole to finite
//! activations of order one, is deterministic, and splits exactly.

use super::*;
use crate::exec::{run_split, run_whole};
use crate::graph::NodeId;
use crate::plan::Plan;
use crate::value::LayoutTensor;
use std::collections::HashSet;
use tch::{Kind, Tensor};

/// torchvision's `sum(p.numel() for p in model.parameters())`, from its model documentation.
fn torchvision_params(name: &str) -> Option<usize> {
    Some(match name {
        "vgg16" => 138_357_544,
        "vgg19" => 143_667_240,
        "resnet18" => 11_689_512,
        "resnet50" => 25_557_032,
        "resnet152" => 60_192_808,
        "densenet121" => 7_978_856,
        "convnext_tiny" => 28_589_128,
        "mobilenet_v2" => 3_504_872,
        "regnet_x_400mf" => 5_495_976,
        _ => return None,
    })
}

fn rms(t: &Tensor) -> f64 {
    t.to_kind(Kind::Double).square().mean(Kind::Double).sqrt().double_value(&[])
}

fn all_finite(t: &Tensor) -> bool {
    t.to_kind(Kind::Float).isfinite().all().int64_value(&[]) == 1
}

/// Builds `name`, checks its structure and parameter count, runs it whole on a sample input with
/// about 24 intermediate values exposed as extra outputs, and checks every one is finite with an
/// RMS in [1e-2, 1e2].
fn check_model(name: &str, out_shape: &[usize]) {
    let (mut g, folded) = build_counted(name).expect("model builds");
    let unique: HashSet<&str> = g.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(unique.len(), g.nodes.len(), "{name}: node names are not unique");
    assert_eq!(g.outputs.len(), 1);
    assert_eq!(g.nodes[g.outputs[0]].info.shape, out_shape, "{name}: output shape");
    let params = param_count(&g);
    let ops = (0..g.nodes.len()).filter(|&i| g.is_op(i)).count();
    eprintln!("{name}: {} nodes, {ops} ops, {params} params (+{folded} folded BN = {})", g.nodes.len(), params + folded);
    if let Some(tv) = torchvision_params(name) {
        assert_eq!(params + folded, tv, "{name}: parameters + folded BN channels vs torchvision");
    }
    let op_ids: Vec<NodeId> = (0..g.nodes.len()).filter(|&i| g.is_op(i)).collect();
    let step = (op_ids.len() / 24).max(1);
    let out = g.outputs[0];
    let probes: Vec<NodeId> = op_ids.iter().step_by(step).copied().filter(|&i| i != out).collect();
    g.outputs.extend(probes);
    let inputs = crate::exec::synthetic_inputs(&g, 7).expect("sample input");
    let t0 = std::time::Instant::now();
    let run = run_whole(&g, &inputs).expect("whole run");
    let elapsed = t0.elapsed();
    for (k, (&id, t)) in g.outputs.iter().zip(&run.outputs).enumerate() {
        let node = &g.nodes[id].name;
        assert!(all_finite(t), "{name}: '{node}' has non-finite values");
        let r = rms(t);
        if k == 0 {
            eprintln!("{name}: output '{node}' {:?} rms {r:.4} (whole run with probes {elapsed:.2?})", t.size());
        }
        // Detectors decode boxes and keypoints to input pixels: their output may reach the
        // image's size.
        let hi = if k == 0 && ["yolo_det", "pose_hr"].contains(&name) { 1e3 } else { 1e2 };
        assert!((1e-2..=hi).contains(&r), "{name}: '{node}' rms {r} outside [1e-2, {hi}]");
    }
    let probe_rms: Vec<String> =
        g.outputs[1..].iter().zip(&run.outputs[1..]).map(|(&id, t)| format!("{}={:.2}", g.nodes[id].name, rms(t))).collect();
    eprintln!("{name}: probes {}", probe_rms.join(" "));
}

macro_rules! model_tests {
    ($($test:ident: $name:literal => $shape:expr;)*) => {$(
        #[test]
        fn $test() {
            check_model($name, &$shape);
        }
    )*};
}

model_tests! {
    zoo_vgg16: "vgg16" => [1, 1000];
    zoo_vgg19: "vgg19" => [1, 1000];
    zoo_resnet18: "resnet18" => [1, 1000];
    zoo_resnet50: "resnet50" => [1, 1000];
    zoo_resnet152: "resnet152" => [1, 1000];
    zoo_densenet121: "densenet121" => [1, 1000];
    zoo_convnext_tiny: "convnext_tiny" => [1, 1000];
    zoo_mobilenet_v2: "mobilenet_v2" => [1, 1000];
    zoo_regnet_x_400mf: "regnet_x_400mf" => [1, 1000];
    zoo_lidar_bev: "lidar_bev" => [1, 11, 64, 64];
    zoo_occupancy3d: "occupancy3d" => [1, 2, 256, 32, 256];
    zoo_yolo_det: "yolo_det" => [1, 84, 8400];
    zoo_pose_hr: "pose_hr" => [1, 56, 12600];
}

#[test]
fn zoo_registry_matches_names() {
    let registered: Vec<&str> = MODELS.iter().map(|e| e.name).collect();
    assert_eq!(registered, names());
    assert!(matches!(build("resnet19"), Err(Error::UnknownModel { .. })));
}

/// `zoo:NAME@HxW` builds an image model at another size, and every size that cannot work is an
/// error naming the constraint.
#[test]
fn zoo_size_overrides_and_their_constraints() {
    let g = build("resnet18@480x640").expect("a multiple of 32");
    assert_eq!(g.nodes[g.inputs()[0]].info.shape, vec![1, 3, 480, 640]);
    assert_eq!(g.nodes[g.outputs[0]].info.shape, vec![1, 1000]);
    assert_eq!(g.name, "resnet18@480x640");
    let g = build("yolo_det@320x480").expect("a multiple of 32");
    assert_eq!(g.nodes[g.outputs[0]].info.shape, vec![1, 84, 40 * 60 + 20 * 30 + 10 * 15]);
    let g = build("occupancy3d@64x32x64").expect("multiples of 4");
    assert_eq!(g.nodes[g.outputs[0]].info.shape, vec![1, 2, 64, 32, 64]);
    assert_eq!(build("yolo_det@640x640").expect("the default").name, "yolo_det", "the default size keeps the plain name");
    for (spec, says) in [
        ("vgg16@480x640", "224x224 only"),
        ("yolo_det@500x640", "500 is not a multiple of 32"),
        ("occupancy3d@64x30x64", "30 is not a multiple of 4"),
        ("yolo_det@640", "2 dimensions"),
        ("resnet18@axb", "not a size"),
        ("resnet18@0x224", "not a size"),
        ("lidar_bev@128x128", "256x256 only"),
    ] {
        let e = build(spec).expect_err(spec).to_string();
        assert!(e.contains(says), "{spec}: {e}");
    }
}

#[test]
fn zoo_weights_are_deterministic() {
    let mut hashes = HashSet::new();
    for name in ["resnet18", "mobilenet_v2", "lidar_bev", "occupancy3d"] {
        let a = build(name).expect("build").content_hash().expect("hash");
        let b = build(name).expect("build").content_hash().expect("hash");
        assert_eq!(a, b, "{name}: two builds differ");
        assert!(hashes.insert(a), "{name}: same hash as another model");
    }
}

/// Runs `name` split by random plans and compares with the whole run.
fn check_split(name: &str, seeds: &[u64]) {
    check_split_in(name, seeds, crate::graph::Layout::Nchw);
}

/// As [`check_split`], the split runs in `layout`, the whole run (the reference) in NCHW.
fn check_split_in(name: &str, seeds: &[u64], layout: crate::graph::Layout) {
    let mut g = build(name).expect("build");
    let inputs = crate::exec::synthetic_inputs(&g, 3).expect("sample input");
    let whole = run_whole(&g, &inputs).expect("whole run");
    assert!(g.set_layout(layout).expect("layout"), "{name} has convolutions");
    assert_eq!(g.layout(), layout, "{name}: layout applied");
    for &seed in seeds {
        let plan = Plan::random(&g, 8, seed);
        let split = run_split(&g, &plan, &inputs).expect("split run");
        for (a, b) in split.outputs.iter().zip(&whole.outputs) {
            assert_eq!(a.size(), b.size());
            let diff = (a - b).abs().max().double_value(&[]);
            let scale = b.abs().max().double_value(&[]);
            eprintln!(
                "{name} seed {seed}: max|split-whole|/max|whole| = {:.3e}, {} B up, {} B down",
                diff / scale,
                split.bytes_up,
                split.bytes_down
            );
            assert!(diff <= 1e-5 * scale, "{name} seed {seed}: split differs from whole by {diff} (scale {scale})");
        }
    }
}

#[test]
fn zoo_split_resnet18_matches_whole() {
    check_split("resnet18", &[1, 2]);
}

#[test]
fn zoo_split_occupancy3d_matches_whole() {
    check_split("occupancy3d", &[1, 2]);
}

/// Channels-last weights (so channels-last activations and bands) compute the NCHW model: the
/// convolution kinds of the zoo (depthwise, grouped, strided, 1x1, 3-d: the occupancy grid at a
/// reduced size, the same layers), upsampling and concatenation, each split by a random plan
/// against the NCHW whole run.
#[test]
fn zoo_split_channels_last_matches_nchw_whole() {
    for name in [
        "resnet18",
        "mobilenet_v2",
        "convnext_tiny",
        "densenet121",
        "regnet_x_400mf",
        "lidar_bev",
        "yolo_det@320x320",
        "occupancy3d@64x32x64",
    ] {
        check_split_in(name, &[5], crate::graph::Layout::ChannelsLast);
    }
}

/// `lop::model::load` lays a model out as its options say, and moving it keeps the layout.
#[test]
fn load_applies_the_layout_and_moving_keeps_it() {
    use crate::graph::Layout;
    use crate::model::{LoadOptions, load};
    assert_eq!(load("zoo:resnet18@64x64", &LoadOptions::default()).expect("load").layout(), Layout::Nchw);
    let mut g = load("zoo:resnet18@64x64", &LoadOptions { layout: Layout::ChannelsLast, ..LoadOptions::default() }).expect("load");
    assert_eq!(g.layout(), Layout::ChannelsLast);
    g.to_device(tch::Device::Cpu).expect("move");
    assert_eq!(g.layout(), Layout::ChannelsLast);
    // Activations follow the weights: a convolution's output is channels-last too.
    let x = Tensor::randn([1, 3, 64, 64], (Kind::Float, tch::Device::Cpu));
    let c = g
        .nodes
        .iter()
        .find_map(|n| match &n.op {
            crate::Op::Conv(c) => Some(c),
            _ => None,
        })
        .expect("a convolution");
    let y = x.conv2d(&c.weight, c.bias.as_ref(), [2, 2], [3, 3], [1, 1], 1);
    assert_eq!(Layout::of(&y), Layout::ChannelsLast);
}

/// Every model split by one random plan (about a minute in a debug build, much less in the
/// release build the test command uses).
/// Every zoo model but the occupancy grid, whose full-size 3-d run (the slowest of the zoo) has a
/// test of its own above with two seeds.
#[test]
fn zoo_split_all_models_match_whole() {
    for name in names().iter().filter(|&&n| n != "occupancy3d") {
        check_split(name, &[5]);
    }
}

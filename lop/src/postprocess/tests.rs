//! The back-end stages inside graphs: spec parsing, split runs equal to whole runs (the stage
//! computed from a split head equals the stage computed from the unsplit head), placement as a
//! barrier or as local rows, and errors for heads that do not fit.

use super::*;
use crate::exec::{run_split, run_whole, synthetic_inputs};
use crate::graph::GraphBuilder;
use crate::ops::{Conv, Op, OpClass};
use crate::plan::Plan;
use crate::value::DType;
use tch::{Device, Kind};

#[test]
fn specs_parse_round_trip_and_name_what_is_wrong() {
    assert_eq!(Postprocess::parse("raw").expect("raw"), Postprocess::Raw);
    let Postprocess::Detect(d) = Postprocess::parse("detect; score=0.3 ;max=50;format=yolox").expect("detect") else {
        panic!("not detect")
    };
    assert_eq!((d.score, d.iou, d.max, d.format, d.keypoints), (0.3, 0.45, 50, HeadFormat::Yolox, 0));
    let Postprocess::Pose(p) = Postprocess::parse("pose").expect("pose") else { panic!("not pose") };
    assert_eq!(p.keypoints, 17);
    for spec in ["raw", "detect", "pose;keypoints=5;iou=0.5", "segment", "occupancy;threshold=0.7;class=2", "occupancy"] {
        let p = Postprocess::parse(spec).expect(spec);
        assert_eq!(Postprocess::parse(&p.spec()).expect("spec parses"), p, "{spec} -> {}", p.spec());
    }
    for (bad, says) in [
        ("", "no task"),
        ("boxes", "unknown task 'boxes'"),
        ("detect;score=1.5", "score=1.5 is not a number in 0..1"),
        ("detect;iou=-0.1", "iou=-0.1"),
        ("detect;max=0", "max=0 is not a whole number in 1..=10000"),
        ("detect;keypoints=3", "takes no option 'keypoints'"),
        ("detect;format=ssd", "unknown format 'ssd'"),
        ("occupancy;threshold", "not key=value"),
        ("pose;format=yolox", "YOLOv8-pose heads only"),
    ] {
        let e = Postprocess::parse(bad).expect_err(bad).to_string();
        assert!(e.contains(says) && e.contains("expected 'raw', 'detect'"), "{bad}: {e}");
    }
}

/// `zoo:yolo_det` at 128x128 with the detect stage (its seeded weights score every class near
/// 0.52, so the threshold sits just below the best scores): one output `[1, 300, 6]`, the stage a global
/// op whose input is the raw head, and every band layout (the stage on either side) gives the
/// rows computed from the unsplit head.
#[test]
fn detect_stage_on_a_split_head_equals_the_stage_on_the_whole_head() {
    let raw = crate::zoo::build("yolo_det@128x128").expect("zoo");
    let head_shape = raw.nodes[raw.outputs[0]].info.shape.clone();
    let spec = Postprocess::parse("detect;score=0.523;max=40").expect("spec");
    let g = spec.apply(crate::zoo::build("yolo_det@128x128").expect("zoo")).expect("applies");
    let out = g.outputs[0];
    assert_eq!(g.nodes[out].info.shape, vec![1, 40, 6]);
    assert_eq!(g.locality(out), OpClass::Global);
    assert_eq!(g.nodes[g.nodes[out].inputs[0]].info.shape, head_shape);
    assert_ne!(g.content_hash().expect("hash"), raw.content_hash().expect("hash"), "the stage is part of the model");

    let inputs = synthetic_inputs(&g, 3).expect("input");
    let head = run_whole(&raw, &inputs).expect("raw").outputs.remove(0);
    let Op::Post(PostOp::Detect(det)) = &g.nodes[out].op else { panic!("the last op is the stage") };
    let from_head = det.compute(&head).expect("stage on the head");
    let whole = run_whole(&g, &inputs).expect("whole").outputs.remove(0);
    assert!(whole.equal(&from_head), "the graph's stage differs from the stage on its head");
    let rows = Vec::<f32>::try_from(whole.view([-1])).expect("floats");
    let found = detections(&rows, 6);
    assert!(!found.is_empty() && found.len() <= 40, "{} detections", found.len());
    assert!(found.windows(2).all(|w| w[0].score >= w[1].score), "sorted by score");
    assert!(found.iter().all(|d| d.score > 0.523 && d.class < 80 && d.bbox[0] <= d.bbox[2] && d.bbox[1] <= d.bbox[3]));

    for seed in 0..4 {
        let plan = Plan::random(&g, 4, seed);
        let split = run_split(&g, &plan, &inputs).expect("split").outputs.remove(0);
        let got = detections(&Vec::<f32>::try_from(split.view([-1])).expect("floats"), 6);
        assert_eq!(got.len(), found.len(), "seed {seed}");
        for (a, b) in got.iter().zip(&found) {
            assert_eq!(a.class, b.class, "seed {seed}");
            assert!(
                (a.score - b.score).abs() <= 1e-5 && a.bbox.iter().zip(b.bbox).all(|(x, y)| (x - y).abs() <= 1e-3),
                "seed {seed}: {a:?} vs {b:?}"
            );
        }
    }
}

/// A pose head keeps each kept box's keypoints; a classifier's output is refused with the shape
/// the task needs.
#[test]
fn pose_rows_carry_keypoints_and_unfit_heads_are_refused() {
    let g = Postprocess::parse("pose;score=0.3;max=20")
        .expect("spec")
        .apply(crate::zoo::build("pose_hr@64x96").expect("zoo"))
        .expect("applies");
    assert_eq!(g.nodes[g.outputs[0]].info.shape, vec![1, 20, 6 + 51]);
    let inputs = synthetic_inputs(&g, 5).expect("input");
    let out = run_whole(&g, &inputs).expect("whole").outputs.remove(0);
    let found = detections(&Vec::<f32>::try_from(out.view([-1])).expect("floats"), 57);
    assert!(found.iter().all(|d| d.keypoints.len() == 17 && d.class == 0), "{found:?}");

    let classifier = crate::zoo::build("resnet18@64x64").expect("zoo");
    let e = Postprocess::parse("detect").expect("spec").apply(classifier).expect_err("no head").to_string();
    assert!(e.contains("task detect on 'resnet18") && e.contains("[1, 1000]") && e.contains("[1, channels, anchors]"), "{e}");
    let e = Postprocess::parse("occupancy")
        .expect("spec")
        .apply(crate::zoo::build("yolo_det@64x64").expect("zoo"))
        .expect_err("2-d")
        .to_string();
    assert!(e.contains("[1, C, D, H, W]"), "{e}");
}

/// Occupancy bits: local rows (each side packs its own band), equal to numpy's `packbits` of
/// `softmax(x)[class] > threshold`, and identical under every band layout.
#[test]
fn occupancy_bits_are_local_and_match_a_reference() {
    let raw = crate::zoo::build("occupancy3d@16x8x20").expect("zoo");
    let g = Postprocess::parse("occupancy;threshold=0.5")
        .expect("spec")
        .apply(crate::zoo::build("occupancy3d@16x8x20").expect("zoo"))
        .expect("applies");
    let out = g.outputs[0];
    assert_eq!(g.nodes[out].info.shape, vec![1, 1, 16, 8, 3]);
    assert_eq!(g.nodes[out].info.dtype, DType::U8);
    assert_eq!(g.locality(out), OpClass::ElementWise);
    let inputs = synthetic_inputs(&g, 9).expect("input");
    let head = run_whole(&raw, &inputs).expect("raw").outputs.remove(0);
    let bits = run_whole(&g, &inputs).expect("whole").outputs.remove(0);
    let bytes = Vec::<u8>::try_from(bits.view([-1])).expect("bytes");
    let p = Vec::<f32>::try_from(head.softmax(1, Kind::Float).select(1, 1).contiguous().view([-1])).expect("floats");
    let want: Vec<(usize, usize, usize)> = (0..p.len()).filter(|&i| p[i] > 0.5).map(|i| (i / (8 * 20), (i / 20) % 8, i % 20)).collect();
    assert!(!want.is_empty() && want.len() < p.len(), "a threshold that separates");
    assert_eq!(occupied_voxels(&bytes, 16, 8, 20), want);
    for seed in 0..6 {
        let split = run_split(&g, &Plan::random(&g, 4, seed), &inputs).expect("split").outputs.remove(0);
        assert!(split.equal(&bits), "seed {seed}");
    }
}

/// Class maps: the first best class per pixel, local rows, exact under every band layout.
#[test]
fn class_map_takes_the_first_best_class_per_pixel() {
    // Integer weights and inputs make exact ties between classes common.
    let weight = Tensor::randint_low(-1, 2, [5, 3, 3, 3], (Kind::Float, Device::Cpu));
    let scores = |weight: &Tensor| {
        let mut b = GraphBuilder::new("seg");
        let x = b.input("x", vec![1, 3, 12, 10], DType::F32);
        let conv = Conv::same2d(weight.shallow_clone());
        let y = b.add("conv", Op::Conv(conv), &[x]).expect("conv");
        b.output(y);
        b.build().expect("graph")
    };
    let g = Postprocess::Segment.apply(scores(&weight)).expect("applies");
    assert_eq!(g.nodes[g.outputs[0]].info.shape, vec![1, 1, 12, 10]);
    assert_eq!(g.locality(g.outputs[0]), OpClass::ElementWise);
    let inputs = vec![Tensor::randint_low(-2, 3, [1, 3, 12, 10], (Kind::Float, Device::Cpu))];
    let map = run_whole(&g, &inputs).expect("whole").outputs.remove(0);
    let head = run_whole(&scores(&weight), &inputs).expect("head").outputs.remove(0);
    let h = Vec::<f32>::try_from(head.contiguous().view([-1])).expect("floats");
    let m = Vec::<u8>::try_from(map.view([-1])).expect("bytes");
    let mut ties = 0;
    for px in 0..120 {
        let col: Vec<f32> = (0..5).map(|c| h[c * 120 + px]).collect();
        let best = col.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let first = col.iter().position(|&v| v == best).expect("a max");
        ties += usize::from(col.iter().filter(|&&v| v == best).count() > 1);
        assert_eq!(usize::from(m[px]), first, "pixel {px}: {col:?}");
    }
    assert!(ties > 0, "the input makes ties");
    for seed in 0..6 {
        let split = run_split(&g, &Plan::random(&g, 4, seed), &inputs).expect("split").outputs.remove(0);
        assert!(split.equal(&map), "seed {seed}");
    }
}

/// The one-line summaries `lop run` and `lop bench --verbose` print per result.
#[test]
fn summaries_say_what_a_result_holds() {
    let rows = Tensor::from_slice(&[
        10f32, 20.0, 30.0, 40.0, 0.9, 2.0, //
        0.0, 0.0, 5.0, 5.0, 0.4, 0.0, //
        0.0, 0.0, 0.0, 0.0, 0.0, -1.0,
    ])
    .view([1, 3, 6]);
    let detect = Postprocess::parse("detect").expect("spec");
    assert_eq!(detect.summary(&rows, 1).as_deref(), Some("2 detections: 2 0.90 [10 20 30 40], +1"));
    assert_eq!(detect.summary(&rows.narrow(1, 2, 1), 3).as_deref(), Some("0 detections"));
    let bits = Tensor::from_slice(&[0b1010_0000u8, 0b0000_0001]).view([1, 1, 1, 1, 2]);
    assert_eq!(Postprocess::parse("occupancy").expect("spec").summary(&bits, 3).as_deref(), Some("3 occupied voxels"));
    let map = Tensor::from_slice(&[0u8, 3, 3, 7]).view([1, 1, 2, 2]);
    assert_eq!(Postprocess::Segment.summary(&map, 3).as_deref(), Some("classes present: 0 3 7"));
    assert_eq!(Postprocess::Raw.summary(&rows, 3), None);
}

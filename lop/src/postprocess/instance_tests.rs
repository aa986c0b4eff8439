//! `segment-instance`: instance maps computed by hand from a synthetic head and prototypes, the
//! stage inside a graph (two outputs, both barriers, split runs equal to the whole run), and the
//! errors for heads whose channel arithmetic does not fit.

use super::*;
use crate::exec::{run_split, run_whole};
use crate::graph::{Graph, GraphBuilder};
use crate::ops::{Conv, Op, OpClass};
use crate::plan::Plan;
use crate::value::DType;
use tch::{Device, Kind};

const SIDE: usize = 16;

/// A YOLOv8-seg head `[1, 4 + 2 + 2, anchors]` from per-anchor rows `cx, cy, w, h, s0, s1, k0, k1`
/// and prototypes `[1, 2, 4, 4]`: channel 0 is 1 everywhere, channel 1 is +10 in column 3 and
/// -10 elsewhere.
fn synthetic(anchors: &[[f32; 8]]) -> (Vec<f32>, ValueInfo, Vec<f32>, ValueInfo) {
    let n = anchors.len();
    let mut head = vec![0f32; 8 * n];
    for (a, row) in anchors.iter().enumerate() {
        for (c, v) in row.iter().enumerate() {
            head[c * n + a] = *v;
        }
    }
    let mut protos = vec![1f32; 16];
    protos.extend((0..16).map(|i| if i % 4 == 3 { 10.0 } else { -10.0 }));
    let info = |shape: Vec<usize>| ValueInfo { shape, dtype: DType::F32, row_axis: None };
    (head, info(vec![1, 8, n]), protos, info(vec![1, 2, 4, 4]))
}

/// The expected map: rectangles `x0..x1, y0..y1` painted with ids 1, 2, ... in order, a pixel
/// keeping the first id that covers it.
fn painted(rects: &[(usize, [usize; 4])]) -> Vec<u8> {
    let mut map = vec![0u8; SIDE * SIDE];
    for &(id, [x0, x1, y0, y1]) in rects {
        for y in y0..y1 {
            for x in x0..x1 {
                if map[y * SIDE + x] == 0 {
                    map[y * SIDE + x] = id as u8;
                }
            }
        }
    }
    map
}

fn spec(score: f32, max: usize) -> DetectSpec {
    DetectSpec { score, iou: 0.45, max, format: HeadFormat::Yolov8, keypoints: 0 }
}

/// Boxes on the 4-pixel grid of 4x upsampled prototypes, coefficients that saturate the
/// sigmoid: with `align_corners = False` an output pixel `x` reads prototype columns
/// `floor((x + 0.5) / 4 - 0.5)` and the next, weights 0.625 / 0.375 at the first and last pixel
/// of a cell's span, so at mask 0.5 a mask is its crop but for corners (0.625 x 0.625), and at
/// 0.7 it loses one pixel at each cropped edge.
#[test]
fn instance_map_follows_crop_upsampling_threshold_and_score_order() {
    let (head, head_info, protos, protos_info) = synthetic(&[
        // A: box 0..8 x 0..8, class 0 (0.9), mask all on inside its crop.
        [4.0, 4.0, 8.0, 8.0, 0.9, 0.1, 10.0, 0.0],
        // B: box 4..16 x 4..16, class 1 (0.8): under A where they overlap.
        [10.0, 10.0, 12.0, 12.0, 0.1, 0.8, 10.0, 0.0],
        // C: box 8..16 x 0..4, class 1 (0.7), mask all off: a row without pixels.
        [12.0, 2.0, 8.0, 4.0, 0.2, 0.7, -10.0, 0.0],
        // D: the whole image, class 0 (0.6, IoU 0.25 with A), prototype column 3 only.
        [8.0, 8.0, 16.0, 16.0, 0.6, 0.0, 0.0, 1.0],
        // E: below the score threshold.
        [8.0, 8.0, 16.0, 16.0, 0.1, 0.2, 10.0, 0.0],
    ]);
    let packed: Vec<f32> = head.iter().chain(&protos).copied().collect();
    let stage = |mask: f32, max: usize| {
        let d = Detect::with_coefficients(&spec(0.25, max), &head_info, 2).expect("fits");
        assert_eq!((d.classes(), d.coefficients(), d.width()), (2, 2, 6));
        Instances::new(d, &head_info, &protos_info, (SIDE, SIDE), mask).expect("fits")
    };

    // The detection rows: A, B, C, D by score, without the coefficients.
    let d = Detect::with_coefficients(&spec(0.25, 6), &head_info, 2).expect("fits");
    let rows = d.compute(&Tensor::from_slice(&head).view([1, 8, 5])).expect("rows");
    let found = detections(&Vec::<f32>::try_from(rows.view([-1])).expect("floats"), 6);
    let summary: Vec<(usize, f32, [f32; 4])> = found.iter().map(|f| (f.class, f.score, f.bbox)).collect();
    assert_eq!(
        summary,
        vec![
            (0, 0.9, [0.0, 0.0, 8.0, 8.0]),
            (1, 0.8, [4.0, 4.0, 16.0, 16.0]),
            (1, 0.7, [8.0, 0.0, 16.0, 4.0]),
            (0, 0.6, [0.0, 0.0, 16.0, 16.0])
        ]
    );

    // At a crop's corner both axes weigh the cell 0.625: 0.39 < 0.5, so A's pixel (7, 7) is off
    // and goes to B, whose mask is on there; its own corner (4, 4) lies under A. At 0.7 the
    // corners one pixel in weigh 0.875 x 0.875 = 0.77: on.
    let mut want = painted(&[(1, [0, 8, 0, 8]), (2, [4, 16, 4, 16]), (4, [12, 16, 0, 16])]);
    want[7 * SIDE + 7] = 2;
    let half = stage(0.5, 6).map(&packed);
    assert_eq!(half, want);
    let strict = stage(0.7, 6).map(&packed);
    assert_eq!(strict, painted(&[(1, [0, 7, 0, 7]), (2, [5, 16, 5, 16]), (4, [13, 16, 0, 16])]));
    // At most `max` detections, so only A and B paint.
    let mut want_two = painted(&[(1, [0, 8, 0, 8]), (2, [4, 16, 4, 16])]);
    want_two[7 * SIDE + 7] = 2;
    assert_eq!(stage(0.5, 2).map(&packed), want_two);
    // The op's tensor form: [1, 1, H, W] bytes.
    let t = stage(0.5, 6).compute(&Tensor::from_slice(&packed).view([1, -1])).expect("compute");
    assert_eq!((t.size(), t.kind()), (vec![1, 1, SIDE as i64, SIDE as i64], Kind::Uint8));
    assert_eq!(Vec::<u8>::try_from(t.view([-1])).expect("bytes"), half);
}

/// A box crossing prototype cells: the crop keeps columns `c` with `x1 / 4 <= c < x2 / 4`.
#[test]
fn crop_keeps_prototype_cells_from_the_scaled_box() {
    // Box x 2..9 (cells 1 and 2: 0.5 <= c < 2.25), y 0..16: mask on in those cells only.
    let (head, head_info, protos, protos_info) = synthetic(&[[5.5, 8.0, 7.0, 16.0, 0.9, 0.0, 10.0, 0.0]]);
    let packed: Vec<f32> = head.iter().chain(&protos).copied().collect();
    let d = Detect::with_coefficients(&spec(0.25, 4), &head_info, 2).expect("fits");
    let map = Instances::new(d, &head_info, &protos_info, (SIDE, SIDE), 0.5).expect("fits").map(&packed);
    // Cells 1..3 of 4 pixels: pixels 4..12 (cropped edges at 0.5 keep the cell's span).
    assert_eq!(map, painted(&[(1, [4, 12, 0, 16])]));
}

/// Integer weights and inputs make the head and prototypes exact in f32, so every band layout
/// gives bitwise the values of the whole run, and the stage's outputs must be equal bitwise.
fn seg_graph(seed: i64) -> Graph {
    tch::manual_seed(seed);
    let conv = |out: i64, scale: &[f32], shift: &[f32]| {
        let weight = Tensor::randint_low(-1, 2, [out, 3, 4, 4], (Kind::Float, Device::Cpu));
        let bias = Tensor::from_slice(shift);
        let weight = weight * Tensor::from_slice(scale).view([-1, 1, 1, 1]);
        Conv {
            weight,
            bias: Some(bias),
            strides: vec![4, 4],
            pads_begin: vec![0, 0],
            pads_end: vec![0, 0],
            dilations: vec![1, 1],
            output_padding: vec![0, 0],
            groups: 1,
            packed: None,
            act: None,
        }
    };
    let mut b = GraphBuilder::new("seg");
    let x = b.input("images", vec![1, 3, SIDE, SIDE], DType::F32);
    // Head channels: cx, cy (pixels), w, h, two class scores, two coefficients.
    let head = conv(8, &[0.5, 0.5, 0.5, 0.5, 0.0625, 0.0625, 0.5, 0.5], &[8.0, 8.0, 10.0, 10.0, 0.5, 0.5, 0.0, 0.0]);
    let h = b.add("head_conv", Op::Conv(head), &[x]).expect("conv");
    let h = b.add("head", Op::Reshape { shape: vec![1, 8, 16] }, &[h]).expect("reshape");
    let p = b.add("protos", Op::Conv(conv(2, &[0.25, 0.25], &[0.0, 0.0])), &[x]).expect("conv");
    b.output(h);
    b.output(p);
    b.build().expect("graph")
}

#[test]
fn segment_instance_graph_has_two_barrier_outputs_equal_whole_and_split() {
    let task = Postprocess::parse("segment-instance;score=0.5;iou=0.5;max=12").expect("spec");
    let g = task.apply(seg_graph(7)).expect("applies");
    let [rows, map] = g.outputs[..] else { panic!("two outputs: {:?}", g.outputs) };
    assert_eq!((g.nodes[rows].info.shape.clone(), g.nodes[rows].info.dtype), (vec![1, 12, 6], DType::F32));
    assert_eq!((g.nodes[map].info.shape.clone(), g.nodes[map].info.dtype), (vec![1, 1, SIDE, SIDE], DType::U8));
    assert_eq!((g.locality(rows), g.locality(map)), (OpClass::Global, OpClass::Global));
    assert!(g.has_postprocess());

    let raw = seg_graph(7);
    let inputs = vec![Tensor::randint_low(-2, 3, [1, 3, SIDE as i64, SIDE as i64], (Kind::Float, Device::Cpu))];
    let heads = run_whole(&raw, &inputs).expect("raw").outputs;
    let whole = run_whole(&g, &inputs).expect("whole").outputs;
    let Op::Post(PostOp::Instances(stage)) = &g.nodes[map].op else { panic!("the map is the instance op") };
    let packed = Tensor::cat(&[heads[0].view([1, -1]), heads[1].view([1, -1])], 1);
    assert!(whole[1].equal(&stage.compute(&packed).expect("stage")), "the graph's map differs from the stage on its heads");
    let found = detections(&Vec::<f32>::try_from(whole[0].view([-1])).expect("floats"), 6);
    let ids = Vec::<u8>::try_from(whole[1].view([-1])).expect("bytes");
    assert!(!found.is_empty() && ids.iter().any(|&i| i > 0), "the input gives detections with pixels: {found:?}");
    // Every pixel of id i + 1 lies within detection i's box, give or take the half prototype
    // cell (2 pixels) the bilinear upsampling spreads a crop by and, past the right and bottom
    // edges, the cell (4 pixels) the crop keeps when it starts before the edge.
    for (p, &id) in ids.iter().enumerate() {
        if id == 0 {
            continue;
        }
        let d = found.get(usize::from(id) - 1).unwrap_or_else(|| panic!("id {id} without a detection row"));
        let (x, y) = ((p % SIDE) as f32 + 0.5, (p / SIDE) as f32 + 0.5);
        assert!(x > d.bbox[0] - 2.5 && x < d.bbox[2] + 6.5 && y > d.bbox[1] - 2.5 && y < d.bbox[3] + 6.5, "pixel {p} id {id}: {d:?}");
    }
    for seed in 0..8 {
        let split = run_split(&g, &Plan::random(&g, 4, seed), &inputs).expect("split").outputs;
        assert!(split[0].equal(&whole[0]) && split[1].equal(&whole[1]), "seed {seed}: split differs from whole");
    }
}

#[test]
fn segment_instance_specs_and_heads_that_do_not_fit() {
    let Postprocess::SegmentInstance(s) = Postprocess::parse("segment-instance").expect("default") else { panic!("not seg") };
    assert_eq!((s.detect.score, s.detect.iou, s.detect.max, s.mask), (0.25, 0.45, 100, 0.5));
    let p = Postprocess::parse("segment-instance;score=0.3;iou=0.6;max=255;mask=0.4").expect("spec");
    assert_eq!(Postprocess::parse(&p.spec()).expect("round trip"), p);
    assert_eq!(p.task_name(), "segment-instance");
    for (bad, says) in [
        ("segment-instance;max=256", "max=256 is not a whole number in 1..=255"),
        ("segment-instance;mask=2", "mask=2 is not a number in 0..1"),
        ("segment-instance;format=yolox", "takes no option 'format'"),
        ("segment-instance;keypoints=3", "takes no option 'keypoints'"),
        ("detect;mask=0.5", "takes no option 'mask'"),
    ] {
        let e = Postprocess::parse(bad).expect_err(bad).to_string();
        assert!(e.contains(says) && e.contains("'segment-instance'"), "{bad}: {e}");
    }

    // Channel arithmetic: 36 head channels with 32 prototypes leave no class.
    let f = |shape: Vec<usize>| ValueInfo { shape, dtype: DType::F32, row_axis: None };
    let e = Detect::with_coefficients(&spec(0.25, 10), &f(vec![1, 36, 100]), 32).expect_err("no class");
    assert!(e.contains("36 channels leave 0 classes") && e.contains("at least 37") && e.contains("at most 31"), "{e}");
    assert!(Detect::with_coefficients(&spec(0.25, 10), &f(vec![1, 116, 100]), 32).is_ok_and(|d| d.classes() == 80));

    // In a graph: prototypes with more channels than the head has room for.
    let mut b = GraphBuilder::new("bad_seg");
    let x = b.input("images", vec![1, 3, 16, 16], DType::F32);
    let w = |out: i64| Conv::same2d(Tensor::ones([out, 3, 1, 1], (Kind::Float, Device::Cpu)));
    let h = b.add("h", Op::Conv(w(6)), &[x]).expect("conv");
    let h = b.add("head", Op::Reshape { shape: vec![1, 6, 256] }, &[h]).expect("reshape");
    let p = b.add("protos", Op::Conv(w(4)), &[x]).expect("conv");
    b.output(h);
    b.output(p);
    let e = Postprocess::parse("segment-instance").expect("spec").apply(b.build().expect("graph")).expect_err("arithmetic").to_string();
    assert!(
        e.contains("task segment-instance on 'bad_seg'")
            && e.contains("4 mask coefficients")
            && e.contains("6 channels leave -2 classes")
            && e.contains("prototypes of at most 1 channels"),
        "{e}"
    );

    // One output (a detector) is refused with what the task reads.
    let e = Postprocess::parse("segment-instance")
        .expect("spec")
        .apply(crate::zoo::build("yolo_det@64x64").expect("zoo"))
        .expect_err("one output")
        .to_string();
    assert!(e.contains("reads two outputs") && e.contains("has 1") && e.contains("[1, nm, H / 4, W / 4]"), "{e}");
}

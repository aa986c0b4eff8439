use super::*;
use crate::exec::{run_split, run_whole};
use crate::plan::Plan;
use tch::{Device, Kind};

/// A model that takes `[1, 3, h, w]` bytes and returns them as floats (so its output is the
/// fitted frame itself).
fn byte_model(h: usize, w: usize) -> Graph {
    let mut b = GraphBuilder::new("bytes");
    let x = b.input("images", vec![1, 3, h, w], DType::U8);
    let one = b.add("one", Op::Constant(Tensor::from(1.0f32)), &[]).expect("one");
    let y = b.add("float", Op::Binary(BinaryOp::Mul), &[x, one]).expect("mul");
    b.output(y);
    b.build().expect("graph")
}

fn frame(h: i64, w: i64, seed: i64) -> Tensor {
    tch::manual_seed(seed);
    Tensor::randint(256, [1, 3, h, w], (Kind::Uint8, Device::Cpu))
}

#[test]
fn placement_centres_the_frame_and_keeps_its_aspect() {
    let lb = Fit::Letterbox { pad: 114 };
    assert_eq!(placement(lb, 640, 480, 640, 640), Placement { left: 0, top: 80, width: 640, height: 480 });
    assert_eq!(placement(lb, 1280, 720, 640, 640), Placement { left: 0, top: 140, width: 640, height: 360 });
    assert_eq!(placement(lb, 480, 640, 640, 640), Placement { left: 80, top: 0, width: 480, height: 640 });
    assert_eq!(placement(Fit::Resize, 1280, 720, 320, 320), Placement { left: 0, top: 0, width: 320, height: 320 });
}

#[test]
fn specs_parse_and_read_back_and_bad_ones_say_what_is_accepted() {
    let f = FrameFit::parse("letterbox@640x480").expect("parses");
    assert_eq!(f, FrameFit { fit: Fit::Letterbox { pad: DEFAULT_PAD }, width: 640, height: 480 });
    for spec in ["letterbox:0@16x9", "resize@1280x720", "letterbox:255@1x1"] {
        let f = FrameFit::parse(spec).expect(spec);
        assert_eq!(FrameFit::parse(&f.spec()).expect("reads back"), f, "{spec}");
    }
    for bad in ["letterbox", "letterbox@640", "letterbox:300@640x480", "crop@640x480", "resize@0x480", "resize@70000x480"] {
        let e = FrameFit::parse(bad).expect_err(bad).to_string();
        assert!(e.contains("expected 'letterbox@WxH'"), "{bad}: {e}");
    }
}

/// A 640x480-like frame in a square input: the margins are the pad value, the frame's rows are
/// its own bytes unchanged (no resampling at scale 1), and every split gives the whole result.
#[test]
fn a_letterbox_at_scale_one_pads_the_camera_rows_unchanged_under_any_split() {
    let g = FrameFit::parse("letterbox:114@16x12").expect("fit").apply(byte_model(16, 16)).expect("applies");
    assert_eq!(g.nodes[g.inputs()[0]].info.shape, vec![1, 3, 12, 16]);
    assert!(!g.nodes.iter().any(|n| matches!(n.op, Op::Resize(_))), "no resize at scale 1");
    assert_eq!(fitted_shape(&g), vec![1, 3, 16, 16], "the model's own input");
    let x = frame(12, 16, 1);
    let whole = run_whole(&g, std::slice::from_ref(&x)).expect("whole").outputs.remove(0);
    assert!(whole.narrow(2, 2, 12).equal(&x.to_kind(Kind::Float)), "the camera's rows, unchanged");
    for rows in [whole.narrow(2, 0, 2), whole.narrow(2, 14, 2)] {
        assert!(rows.eq(114.0).all().int64_value(&[]) == 1, "margins are the pad value");
    }
    for seed in 0..6 {
        let split = run_split(&g, &Plan::random(&g, 3, seed), std::slice::from_ref(&x)).expect("split");
        assert!(split.outputs[0].equal(&whole), "seed {seed}");
    }
}

/// A frame of another size is resampled: a constant frame stays constant, the result is bytes
/// within the frame's range, it matches libtorch's own bilinear interpolation (half-pixel
/// centres) to the rounding, and every split gives the whole result.
#[test]
fn a_resized_frame_is_bilinear_rounded_to_bytes_and_splits_exactly() {
    for spec in ["letterbox:0@24x10", "resize@7x5"] {
        let g = FrameFit::parse(spec).expect("fit").apply(byte_model(16, 16)).expect("applies");
        let f = FrameFit::parse(spec).expect("fit");
        let x = frame(f.height as i64, f.width as i64, 2);
        let whole = run_whole(&g, std::slice::from_ref(&x)).expect("whole").outputs.remove(0);
        assert!(whole.equal(&whole.round()), "{spec}: bytes");
        assert_eq!(fitted_shape(&g), vec![1, 3, 16, 16], "{spec}: the model's own input");
        let p = placement(f.fit, f.width as u32, f.height as u32, 16, 16);
        let inside = whole.narrow(2, i64::from(p.top), i64::from(p.height)).narrow(3, i64::from(p.left), i64::from(p.width));
        let reference = x.to_kind(Kind::Float).upsample_bilinear2d([i64::from(p.height), i64::from(p.width)], false, None, None);
        let gap = (inside - reference).abs().max().double_value(&[]);
        assert!(gap <= 0.5 + 1e-3, "{spec}: {gap} from libtorch's bilinear");
        for seed in 0..6 {
            let split = run_split(&g, &Plan::random(&g, 4, seed), std::slice::from_ref(&x)).expect("split");
            assert!(split.outputs[0].equal(&whole), "{spec} seed {seed}");
        }
        let grey = Tensor::full([1, 3, f.height as i64, f.width as i64], 77, (Kind::Uint8, Device::Cpu));
        let out = run_whole(&g, &[grey]).expect("grey").outputs.remove(0);
        let inside = out.narrow(2, i64::from(p.top), i64::from(p.height)).narrow(3, i64::from(p.left), i64::from(p.width));
        assert!(inside.eq(77.0).all().int64_value(&[]) == 1, "{spec}: a constant frame stays constant");
    }
}

#[test]
fn a_fit_refuses_models_it_cannot_front_and_leaves_a_same_size_stretch_alone() {
    let same = FrameFit::parse("resize@16x16").expect("fit").apply(byte_model(16, 16)).expect("applies");
    assert_eq!(same.nodes.len(), byte_model(16, 16).nodes.len(), "nothing to fit");
    let mut b = GraphBuilder::new("float");
    let x = b.input("x", vec![1, 3, 8, 8], DType::F32);
    let y = b.add("relu", Op::Unary(UnaryOp::Relu), &[x]).expect("relu");
    b.output(y);
    let e = FrameFit::parse("letterbox@8x6").expect("fit").apply(b.build().expect("graph")).expect_err("float").to_string();
    assert!(e.contains("uint8") && e.contains("preprocess"), "{e}");
}

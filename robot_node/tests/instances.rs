//! Instance masks as users receive them: a small YOLOv8-seg-style graph (head and prototypes from
//! strided convolutions) with the `segment-instance` stage, run whole, its two outputs turned into
//! the `Detection2DArray` and the `mono8` instance image `lop_robot` publishes (the letterbox
//! undone), the image serialised to CDR and decoded by the independent Python peer (rosbags).

use std::path::PathBuf;
use std::process::Command;

use hiroz::msg::ZMessage;
use hiroz_msgs::ros::builtin_interfaces::Time;
use hiroz_msgs::std_msgs::Header;
use lop::graph::{DType, GraphBuilder};
use lop::ops::{Conv, Op};
use lop::postprocess::{Postprocess, detections};
use robot_node::convert::{ChannelOrder, Fit, ImageTarget};
use robot_node::results::{OutputView, Source, instances_in_frame, task_messages_for};
use tch::{Device, Kind, Tensor};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `images [1, 3, 64, 64]` to a head `[1, 4 + 2 + 4, 256]` and prototypes `[1, 4, 16, 16]`
/// (4x4 stride-4 convolutions with seeded weights; boxes around their cells' centres).
fn seg_graph() -> lop::Graph {
    tch::manual_seed(5);
    let conv = |out: i64, scale: &[f32], shift: &[f32]| Conv {
        weight: Tensor::randn([out, 3, 4, 4], (Kind::Float, Device::Cpu)) * Tensor::from_slice(scale).view([-1, 1, 1, 1]),
        bias: Some(Tensor::from_slice(shift)),
        strides: vec![4, 4],
        pads_begin: vec![0, 0],
        pads_end: vec![0, 0],
        dilations: vec![1, 1],
        output_padding: vec![0, 0],
        groups: 1,
        packed: None,
        act: None,
    };
    let mut b = GraphBuilder::new("seg");
    let x = b.input("images", vec![1, 3, 64, 64], DType::F32);
    let head = conv(10, &[4.0, 4.0, 2.0, 2.0, 0.1, 0.1, 1.0, 1.0, 1.0, 1.0], &[32.0, 32.0, 24.0, 24.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0]);
    let h = b.add("head_conv", Op::Conv(head), &[x]).expect("conv");
    let h = b.add("head", Op::Reshape { shape: vec![1, 10, 256] }, &[h]).expect("reshape");
    let p = b.add("protos", Op::Conv(conv(4, &[1.0; 4], &[0.0; 4])), &[x]).expect("conv");
    b.output(h);
    b.output(p);
    b.build().expect("graph")
}

#[test]
fn instance_image_is_the_frame_sized_map_and_decodes_in_an_independent_peer() {
    let task = Postprocess::parse("segment-instance;score=0.6;max=20").expect("spec");
    let g = task.apply(seg_graph()).expect("applies");
    let input = Tensor::randn([1, 3, 64, 64], (Kind::Float, Device::Cpu));
    let outs = lop::exec::run_whole(&g, &[input]).expect("run").outputs;
    let [rows, map] = &outs[..] else { panic!("two outputs") };
    let values = |t: &Tensor| Vec::<f32>::try_from(t.to_kind(Kind::Float).flatten(0, -1)).expect("floats");
    let shape = |t: &Tensor| t.size().iter().map(|&d| d as usize).collect::<Vec<_>>();
    let (rows_v, map_v, rows_s, map_s) = (values(rows), values(map), shape(rows), shape(map));
    let found = detections(&rows_v, 6);
    assert!(!found.is_empty() && map_v.iter().any(|&v| v > 0.0), "detections with pixels: {found:?}");

    // A 200x100 frame letterboxed into 64x64: scale 0.32, placed as 64x32 at row 16.
    let target = ImageTarget { height: 64, width: 64, channels: 3, order: ChannelOrder::Rgb, fit: Fit::Letterbox { pad: 0 } };
    let source = Source::Frame { width: 200, height: 100, target };
    let header = Header { stamp: Time { sec: 1_700_000_321, nanosec: 9 }, frame_id: "camera_optical".into() };
    let outputs = [OutputView { values: &rows_v, shape: &rows_s }, OutputView { values: &map_v, shape: &map_s }];
    let msgs = task_messages_for(&task, &outputs, &header, &source, &[]).expect("messages");
    let boxes = msgs.detections.expect("detections");
    assert_eq!(boxes.detections.len(), found.len());
    assert!(boxes.detections.iter().enumerate().all(|(i, d)| d.id == (i + 1).to_string()), "ids from 1");
    let image = msgs.instances.expect("instance image");
    let ids: Vec<u8> = map_v.iter().map(|&v| v as u8).collect();
    let (_, _, want) = instances_in_frame(&ids, (64, 64), &source).expect("map");
    assert!(want.iter().all(|&v| usize::from(v) <= found.len()), "every id names a detection");
    // Each id's frame pixels sit inside its detection's frame box, give or take (in model
    // pixels, 0.32 frame pixels each) the nearest pixel (1), half a prototype cell the
    // upsampling spreads a crop by (2) and, past the right and bottom edges, the prototype cell
    // (4) the crop keeps when it starts before the edge.
    let (before, after) = (3.0 / 0.32, 7.0 / 0.32);
    for (p, &v) in want.iter().enumerate() {
        if v == 0 {
            continue;
        }
        let b = &boxes.detections[usize::from(v) - 1].bbox;
        let (x, y) = ((p % 200) as f64 + 0.5, (p / 200) as f64 + 0.5);
        let (x1, x2) = (b.center.position.x - b.size_x / 2.0, b.center.position.x + b.size_x / 2.0);
        let (y1, y2) = (b.center.position.y - b.size_y / 2.0, b.center.position.y + b.size_y / 2.0);
        assert!(x > x1 - before && x < x2 + after && y > y1 - before && y < y2 + after, "frame pixel {p} of id {v} outside {b:?}");
    }

    let dir = std::env::temp_dir().join(format!("lop-instances-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("instances.cdr");
    std::fs::write(&file, image.serialize()).expect("write");
    let status = Command::new("bash").arg(root().join("scripts/setup.sh")).arg("--test-deps").current_dir(root()).status();
    assert!(status.is_ok_and(|s| s.success()), "scripts/setup.sh --test-deps failed");
    let out = Command::new(root().join(".venv/bin/python"))
        .arg(root().join("tests/interop/decode.py"))
        .arg("sensor_msgs/msg/Image")
        .arg(&file)
        .output()
        .expect("python");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "decode.py: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let m = &v["message"];
    assert_eq!((m["width"].as_u64(), m["height"].as_u64(), m["step"].as_u64()), (Some(200), Some(100), Some(200)));
    assert_eq!(m["encoding"], "mono8");
    assert_eq!(m["header"]["frame_id"], "camera_optical");
    assert_eq!(m["header"]["stamp"]["sec"], 1_700_000_321);
    let data: Vec<u8> = m["data"].as_array().expect("data").iter().map(|b| b.as_u64().expect("byte") as u8).collect();
    assert_eq!(data, want, "the decoded image is the frame-sized map");
}

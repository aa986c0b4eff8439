//! Detections as users receive them: a YOLOv8-style detector with the detect stage, run whole,
//! its rows turned into `vision_msgs/Detection2DArray` by the code `lop_robot` publishes with
//! (boxes mapped back through the letterbox into the frame's pixels), serialised to CDR, and
//! decoded by the independent Python peer (rosbags, types from the `.msg` files), whose type hash
//! must be the real vision_msgs one.

use std::path::PathBuf;
use std::process::Command;

use hiroz::msg::ZMessage;
use hiroz_msgs::ros::builtin_interfaces::Time;
use hiroz_msgs::std_msgs::Header;
use lop::model::LoadOptions;
use lop::postprocess::{Postprocess, detections};
use lop_msgs::ros::vision::Detection2DArray;
use robot_node::convert::{ChannelOrder, Fit, ImageTarget};
use robot_node::results::{Source, task_messages};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The project venv's Python with the test peers installed (`scripts/setup.sh --test-deps`).
fn python() -> PathBuf {
    let root = root();
    let status = Command::new("bash").arg(root.join("scripts/setup.sh")).arg("--test-deps").current_dir(&root).status();
    assert!(status.is_ok_and(|s| s.success()), "scripts/setup.sh --test-deps failed");
    root.join(".venv/bin/python")
}

#[test]
fn detections_decode_in_an_independent_peer_with_frame_pixel_boxes() {
    let task = Postprocess::parse("detect;score=0.52;max=25").expect("spec");
    let load = LoadOptions { postprocess: Some(task.clone()), ..LoadOptions::default() };
    let g = lop::model::load("zoo:yolo_det@128x160", &load).expect("model");
    let inputs = lop::exec::synthetic_inputs(&g, 11).expect("input");
    let out = lop::exec::run_whole(&g, &inputs).expect("run").outputs.remove(0);
    let shape: Vec<usize> = out.size().iter().map(|&d| d as usize).collect();
    let rows = Vec::<f32>::try_from(out.to_kind(tch::Kind::Float).view([-1])).expect("floats");
    let found = detections(&rows, 6);
    assert!(!found.is_empty(), "the threshold keeps some boxes");

    // A 320x200 frame letterboxed into 160x128: scale 0.5, 14 rows of margin on top.
    let target = ImageTarget { height: 128, width: 160, channels: 3, order: ChannelOrder::Rgb, fit: Fit::Letterbox { pad: 0 } };
    let source = Source::Frame { width: 320, height: 200, target };
    let header = Header { stamp: Time { sec: 1_700_000_123, nanosec: 456 }, frame_id: "camera_optical".into() };
    let names: Vec<String> = (0..80).map(|i| format!("class{i}")).collect();
    let msgs = task_messages(&task, &rows, &shape, &header, &source, &names).expect("messages");
    let array: Detection2DArray = msgs.detections.expect("detections");
    let cdr = array.serialize();

    let dir = std::env::temp_dir().join(format!("lop-detections-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("detections.cdr");
    std::fs::write(&file, &cdr).expect("write");
    let root = root();
    let out = Command::new(python())
        .arg(root.join("tests/interop/decode.py"))
        .arg("vision_msgs/msg/Detection2DArray")
        .arg(&file)
        .arg("--msg-dir")
        .arg(root.join("msgs/vision_msgs/msg"))
        .arg("vision_msgs")
        .output()
        .expect("python");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "decode.py: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["hash"], Detection2DArray::ROS_TYPE.hash, "the peer's hash of vision_msgs/msg/Detection2DArray");
    assert_eq!(Detection2DArray::ROS_TYPE.hash, "RIHS01_214274120007f4a683866481336b70310268cfa107aebe9d594a6acf75bda968");
    let m = &v["message"];
    assert_eq!(m["header"]["frame_id"], "camera_optical");
    assert_eq!(m["header"]["stamp"]["sec"], 1_700_000_123);
    let decoded = m["detections"].as_array().expect("detections");
    assert_eq!(decoded.len(), found.len());
    for (d, want) in decoded.iter().zip(&found) {
        let hyp = &d["results"][0]["hypothesis"];
        assert_eq!(hyp["class_id"], format!("class{}", want.class));
        assert!((hyp["score"].as_f64().expect("score") - f64::from(want.score)).abs() < 1e-6);
        // Model pixels to frame pixels: x / 0.5, (y - 14) / 0.5, clamped to the frame.
        let fx = |x: f32| (f64::from(x) * 2.0).clamp(0.0, 320.0);
        let fy = |y: f32| ((f64::from(y) - 14.0) * 2.0).clamp(0.0, 200.0);
        let (x1, y1, x2, y2) = (fx(want.bbox[0]), fy(want.bbox[1]), fx(want.bbox[2]), fy(want.bbox[3]));
        let b = &d["bbox"];
        let got = [
            b["center"]["position"]["x"].as_f64().expect("x"),
            b["center"]["position"]["y"].as_f64().expect("y"),
            b["size_x"].as_f64().expect("w"),
            b["size_y"].as_f64().expect("h"),
        ];
        let wanted = [(x1 + x2) / 2.0, (y1 + y2) / 2.0, x2 - x1, y2 - y1];
        assert!(got.iter().zip(wanted).all(|(a, b)| (a - b).abs() < 1e-3), "{got:?} vs {wanted:?}");
        assert_eq!(d["header"]["frame_id"], "camera_optical");
    }
}

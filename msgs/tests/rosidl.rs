//! The interface packages built by real ROS 2 tooling: `scripts/ros.sh` installs ROS 2 Jazzy from
//! its PyPI wheels and builds `msgs/` (lop_msgs) and `msgs/vision_msgs/` with rosidl. The type
//! hashes rosidl records equal the ones lop publishes (hiroz-codegen), and CDR crosses between
//! lop's Rust types and rclpy's real type support both ways, field for field.
#![cfg(feature = "ros")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use hiroz::msg::ZMessage;
use hiroz_msgs::ros::builtin_interfaces::Time;
use hiroz_msgs::ros::std_msgs::Header;
use lop_msgs::ros::msg::{Bandwidth, ClassScore, InferenceResult, OutputTensor};
use lop_msgs::ros::vision::{BoundingBox2D, Detection2D, Detection2DArray, ObjectHypothesis, ObjectHypothesisWithPose, Point2D, Pose2D};
use lop_msgs::ros::{ALL_TYPES, VISION_TYPES};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `scripts/ros.sh`, once per test process (a second or less when everything is built); the
/// install prefix of the built packages.
fn ros_install() -> &'static Path {
    static ONCE: OnceLock<PathBuf> = OnceLock::new();
    ONCE.get_or_init(|| {
        let root = repo_root();
        let out = Command::new("bash").arg(root.join("scripts/ros.sh")).current_dir(&root).output().expect("running bash");
        assert!(
            out.status.success(),
            "scripts/ros.sh failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        root.join(".ros/install")
    })
}

/// `python3 tests/interop/rclpy_cdr.py ARGS` in the ROS environment (`. scripts/ros-env.sh`).
fn rclpy(args: &[&str]) -> String {
    let _ = ros_install();
    let root = repo_root();
    let out = Command::new("bash")
        .arg("-c")
        .arg(". scripts/ros-env.sh && exec python3 tests/interop/rclpy_cdr.py \"$@\"")
        .arg("rclpy_cdr")
        .args(args)
        .current_dir(&root)
        .output()
        .expect("running bash");
    assert!(out.status.success(), "rclpy_cdr.py {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn temp_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lop-rosidl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

#[test]
fn rosidl_records_the_type_hashes_lop_publishes() {
    let install = ros_install();
    let mut checked = 0;
    for t in ALL_TYPES.iter().chain(VISION_TYPES) {
        let (pkg, rest) = t.name.split_once('/').expect("pkg/msg/Name");
        let file = install.join("share").join(pkg).join(format!("{rest}.json"));
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let v: serde_json::Value = serde_json::from_str(&text).expect("type description json");
        let first = &v["type_hashes"][0];
        assert_eq!(first["type_name"], t.name, "{}", file.display());
        assert_eq!(first["hash_string"], t.hash, "{}: rosidl vs hiroz-codegen", t.name);
        checked += 1;
    }
    assert_eq!(checked, ALL_TYPES.len() + VISION_TYPES.len());
}

fn sample_result() -> InferenceResult {
    InferenceResult {
        header: Header { stamp: Time { sec: 1_700_000_000, nanosec: 5 }, frame_id: "camera".into() },
        inference_id: 42,
        model_name: "zoo:resnet18".into(),
        model_sha256: "ab".repeat(32),
        input_kind: InferenceResult::INPUT_CAMERA,
        latency_s: 0.125,
        bytes_up: 150_528,
        bandwidth_bucket: 7,
        method: "lop".into(),
        fallback: true,
        fallback_reason: "deadline".into(),
        outputs: vec![OutputTensor { name: "logits".into(), shape: vec![1, 3], data: vec![0.5, -1.25, f32::MIN_POSITIVE] }],
        top_k: vec![ClassScore { class_id: 2, score: 3.0, label: "tabby".into() }],
        ..Default::default()
    }
}

fn sample_detections() -> Detection2DArray {
    let header = Header { stamp: Time { sec: 7, nanosec: 8 }, frame_id: "camera_optical".into() };
    let mut hypothesis =
        ObjectHypothesisWithPose { hypothesis: ObjectHypothesis { class_id: "person".into(), score: 0.875 }, ..Default::default() };
    hypothesis.pose.pose.orientation.w = 1.0;
    hypothesis.pose.covariance[35] = 0.5;
    Detection2DArray {
        header: header.clone(),
        detections: vec![Detection2D {
            header,
            results: vec![hypothesis],
            bbox: BoundingBox2D { center: Pose2D { position: Point2D { x: 320.5, y: 240.25 }, theta: 0.0 }, size_x: 64.0, size_y: 128.0 },
            id: "0".into(),
        }],
    }
}

/// What lop_robot publishes, read by rclpy's real type support: every field equal.
#[test]
fn rclpy_reads_the_messages_lop_publishes() {
    let cases: [(&str, Vec<u8>, serde_json::Value); 2] = [
        ("lop_msgs/msg/InferenceResult", sample_result().serialize(), serde_json::to_value(sample_result()).expect("json")),
        ("vision_msgs/msg/Detection2DArray", sample_detections().serialize(), serde_json::to_value(sample_detections()).expect("json")),
    ];
    for (type_name, cdr, want) in cases {
        let file = temp_file(&format!("{}.cdr", type_name.replace('/', "_")));
        std::fs::write(&file, &cdr).expect("write");
        let got: serde_json::Value = serde_json::from_str(&rclpy(&["decode", type_name, file.to_str().expect("utf-8")])).expect("json");
        assert_eq!(got, want, "{type_name}: rclpy's reading of lop's CDR");
    }
}

/// What lop_robot subscribes to, written by rclpy: read back by lop's types.
#[test]
fn lop_reads_what_rclpy_publishes() {
    let file = temp_file("bandwidth.cdr");
    rclpy(&["encode-bandwidth", file.to_str().expect("utf-8")]);
    let bytes = std::fs::read(&file).expect("read");
    let m = Bandwidth::deserialize(&bytes).expect("lop reads rclpy's CDR");
    assert_eq!((m.stamp.sec, m.stamp.nanosec), (1_700_000_001, 42));
    assert_eq!((m.estimate_mbps, m.prediction_mbps, m.samples, m.bucket), (87.5, 61.25, 12, 7));
    assert_eq!(m.predictor, "ewma");
    assert_eq!(m.serialize(), bytes, "the same bytes back");
}

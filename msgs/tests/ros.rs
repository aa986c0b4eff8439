//! The ROS 2 message types (feature `ros`): REP-2011 hashes against the independent Python
//! implementation `tests/interop/rep2011.py`, hiroz-msgs' sensor types against the Jazzy values,
//! and CDR serialisation through hiroz' serdes.
#![cfg(feature = "ros")]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use hiroz::MessageTypeInfo;
use hiroz::msg::ZMessage;
use hiroz_msgs::ros::builtin_interfaces::Time;
use hiroz_msgs::ros::std_msgs::Header;
use lop_msgs::ros::msg::{
    Bandwidth, ClassScore, InferenceEnergy, InferenceResult, Keypoint, Keypoints, KeypointsArray, OutputTensor, PowerSample, RailEnergy,
};
use lop_msgs::ros::{ALL_TYPES, RosType};

/// The Jazzy hashes DESIGN.md section 8 fixes.
const IMAGE_HASH: &str = "RIHS01_d31d41a9a4c4bc8eae9be757b0beed306564f7526c88ea6a4588fb9582527d47";
const POINTCLOUD2_HASH: &str = "RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5";
/// `sensor_msgs/msg/CompressedImage` in Jazzy (rosidl's `CompressedImage.json`).
const COMPRESSED_IMAGE_HASH: &str = "RIHS01_15640771531571185e2efc8a100baf923961a4d15d5569652e6cb6691e8e371a";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `python3 tests/interop/rep2011.py ARGS` at the repository root, with the bundled Jazzy
/// packages hiroz-codegen ships as the include directory; returns stdout.
fn rep2011(args: &[&str]) -> String {
    let root = repo_root();
    let out = Command::new("python3")
        .current_dir(&root)
        .arg(root.join("tests/interop/rep2011.py"))
        .args(["--include", env!("LOP_MSGS_ROS_ASSETS")])
        .args(args)
        .output()
        .expect("python3 must be installed to run tests/interop/rep2011.py");
    assert!(out.status.success(), "rep2011.py {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("rep2011.py prints UTF-8")
}

fn python_hashes(args: &[&str]) -> BTreeMap<String, String> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&rep2011(&all)).expect("rep2011.py --json prints a JSON object of strings")
}

fn rust_info<T: MessageTypeInfo>() -> (String, String) {
    (T::type_name().to_string(), T::type_hash().to_rihs_string())
}

#[test]
fn every_lop_type_hash_matches_the_python_implementation() {
    let python = python_hashes(&["--msg-dir", "msgs/msg", "--all"]);
    let table: BTreeMap<String, String> = ALL_TYPES.iter().map(|t| (t.name.to_string(), t.hash.to_string())).collect();
    assert_eq!(table, python, "ALL_TYPES (hiroz-codegen) vs rep2011.py");
    assert_eq!(python.len(), 10, "one entry per msg/*.msg file: {python:?}");
}

/// The REP-2011 hashes real ROS 2 Jazzy gives vision_msgs 4.1's types, as its installed type
/// descriptions (`share/vision_msgs/msg/*.json`, key `type_hashes`) record them: read from a
/// Jazzy workspace's generated type descriptions (github.com/Benjamin-Hedeby/Dai_ws,
/// `build/depthai_ros_msgs/rosidl_generator_type_description/.../TrackDetection2DArray.json`,
/// built against /opt/ros/jazzy) for the nested types, and from a vision_msgs 4.1.0 build's own
/// `Detection2DArray.json` (github.com/borednuna/ipm-ws, `install/vision_msgs/share/...`) for
/// Detection2D and Detection2DArray, whose nested descriptions are byte for byte the Jazzy ones.
const VISION_JAZZY: [(&str, &str); 8] = [
    ("vision_msgs/msg/Detection2DArray", "RIHS01_214274120007f4a683866481336b70310268cfa107aebe9d594a6acf75bda968"),
    ("vision_msgs/msg/Detection2D", "RIHS01_0d12b69df5c593b3455b7346fac8205437a7d4bcb09b9e0e0b2dde787ded38ea"),
    ("vision_msgs/msg/ObjectHypothesisWithPose", "RIHS01_41c12344c0396c48b81df12467c192d99b2a0eb1463c5c37194e4223251c80bc"),
    ("vision_msgs/msg/ObjectHypothesis", "RIHS01_51da43cec11c01957a64d1e05a24acd18aae7745ec30b74348ad5f6d634f7f90"),
    ("vision_msgs/msg/BoundingBox2D", "RIHS01_008eacbb0cf8f26e83795547bed013eec3675485ef386ec056d80eaaf1c1ce2f"),
    ("vision_msgs/msg/Pose2D", "RIHS01_b0b5d1d7b4c20dd4fcde3ed1d4b289a919290572007d67a97043814db25d3648"),
    ("vision_msgs/msg/Point2D", "RIHS01_eab0e83f44ab4de92ceaf76dd7d0e7638f2bdd1d16ffbe16c7a136c48e407247"),
    ("geometry_msgs/msg/PoseWithCovariance", "RIHS01_9a7c0fd234b7f45c6098745ecccd773ca1085670e64107135397aee31c02e1bb"),
];

/// Our vision_msgs definitions hash as the real package's in Jazzy, nested types included, by
/// hiroz-codegen (what hiroz publishes) and by the independent Python implementation; so users'
/// vision_msgs subscribers match `/lop/detections`.
#[test]
fn vision_msgs_types_have_the_real_jazzy_hashes() {
    use lop_msgs::ros::VISION_TYPES;
    use lop_msgs::ros::vision::{Detection2D, Detection2DArray};
    let real: BTreeMap<String, String> = VISION_JAZZY.iter().map(|(n, h)| (n.to_string(), h.to_string())).collect();
    let table: BTreeMap<String, String> = VISION_TYPES.iter().map(|t| (t.name.to_string(), t.hash.to_string())).collect();
    assert_eq!(table.len(), 7);
    for (name, hash) in &table {
        assert_eq!(Some(hash), real.get(name), "{name}: hiroz-codegen vs real Jazzy");
    }
    let python = python_hashes(&["--msg-dir", "msgs/vision_msgs/msg", "--all", "--type", "geometry_msgs/msg/PoseWithCovariance"]);
    assert_eq!(python, real, "rep2011.py vs real Jazzy");
    assert_eq!(
        rust_info::<Detection2DArray>(),
        ("vision_msgs::msg::dds_::Detection2DArray_".to_string(), real["vision_msgs/msg/Detection2DArray"].clone())
    );
    assert_eq!(rust_info::<Detection2D>().1, real["vision_msgs/msg/Detection2D"]);
}

#[test]
fn message_type_info_agrees_with_the_table() {
    let infos: Vec<(RosType, (String, String))> = vec![
        (InferenceResult::ROS_TYPE, rust_info::<InferenceResult>()),
        (OutputTensor::ROS_TYPE, rust_info::<OutputTensor>()),
        (ClassScore::ROS_TYPE, rust_info::<ClassScore>()),
        (Bandwidth::ROS_TYPE, rust_info::<Bandwidth>()),
        (InferenceEnergy::ROS_TYPE, rust_info::<InferenceEnergy>()),
        (RailEnergy::ROS_TYPE, rust_info::<RailEnergy>()),
        (PowerSample::ROS_TYPE, rust_info::<PowerSample>()),
        (Keypoint::ROS_TYPE, rust_info::<Keypoint>()),
        (Keypoints::ROS_TYPE, rust_info::<Keypoints>()),
        (KeypointsArray::ROS_TYPE, rust_info::<KeypointsArray>()),
    ];
    assert_eq!(infos.len(), ALL_TYPES.len());
    for (ros, (dds, hash)) in infos {
        let short = ros.name.rsplit('/').next().expect("a type name has slashes");
        assert_eq!(ros.name, format!("lop_msgs/msg/{short}"));
        assert_eq!(ros.dds_name, format!("lop_msgs::msg::dds_::{short}_"));
        assert_eq!(dds, ros.dds_name, "MessageTypeInfo::type_name of {}", ros.name);
        assert_eq!(hash, ros.hash, "MessageTypeInfo::type_hash of {}", ros.name);
        assert_eq!(RosType::by_name(ros.name), Some(&ros));
    }
    assert_eq!(
        InferenceResult::ROS_TYPE.key_expr(0, "/lop/inference"),
        format!("0/lop/inference/lop_msgs::msg::dds_::InferenceResult_/{}", InferenceResult::ROS_TYPE.hash)
    );
}

#[test]
fn python_hash_changes_when_a_field_changes() {
    // The cross-check can fail: a renamed field must change the hash.
    let dir = std::env::temp_dir().join(format!("lop_msgs_rep2011_{}", std::process::id()));
    let msg_dir = dir.join("lop_msgs").join("msg");
    std::fs::create_dir_all(&msg_dir).expect("create temp msg dir");
    let original = std::fs::read_to_string(repo_root().join("msgs/msg/Bandwidth.msg")).expect("read Bandwidth.msg");
    std::fs::write(msg_dir.join("Bandwidth.msg"), original.replace("uint32 bucket", "uint32 bucket_index")).expect("write");
    let changed = rep2011(&["--include", dir.to_str().expect("utf-8 temp dir"), "--type", "lop_msgs/msg/Bandwidth"]);
    std::fs::remove_dir_all(&dir).expect("remove temp dir");
    assert_eq!(changed.trim().len(), 7 + 64);
    assert_ne!(changed.trim(), Bandwidth::ROS_TYPE.hash);
}

#[test]
fn hiroz_msgs_types_robot_node_uses_have_the_jazzy_hashes() {
    use hiroz_msgs::ros::diagnostic_msgs::DiagnosticArray;
    use hiroz_msgs::ros::sensor_msgs::{CompressedImage, Image, PointCloud2};

    let python = python_hashes(&[
        "--type",
        "sensor_msgs/msg/Image",
        "--type",
        "sensor_msgs/msg/PointCloud2",
        "--type",
        "sensor_msgs/msg/CompressedImage",
        "--type",
        "diagnostic_msgs/msg/DiagnosticArray",
        "--type",
        "std_msgs/msg/Header",
    ]);
    assert_eq!(rust_info::<Image>(), ("sensor_msgs::msg::dds_::Image_".to_string(), IMAGE_HASH.to_string()));
    assert_eq!(rust_info::<PointCloud2>(), ("sensor_msgs::msg::dds_::PointCloud2_".to_string(), POINTCLOUD2_HASH.to_string()));
    assert_eq!(python["sensor_msgs/msg/Image"], IMAGE_HASH);
    assert_eq!(python["sensor_msgs/msg/PointCloud2"], POINTCLOUD2_HASH);
    assert_eq!(rust_info::<CompressedImage>(), ("sensor_msgs::msg::dds_::CompressedImage_".to_string(), COMPRESSED_IMAGE_HASH.to_string()));
    assert_eq!(python["sensor_msgs/msg/CompressedImage"], COMPRESSED_IMAGE_HASH);
    assert_eq!(python["diagnostic_msgs/msg/DiagnosticArray"], rust_info::<DiagnosticArray>().1);
    assert_eq!(python["std_msgs/msg/Header"], rust_info::<Header>().1);
    assert_eq!(rep2011(&["--self-test"]).lines().filter(|l| l.starts_with("ok ")).count(), 6);
}

fn sample_result() -> InferenceResult {
    InferenceResult {
        header: Header { stamp: Time { sec: 1_700_000_000, nanosec: 123_456_789 }, frame_id: "camera_optical".into() },
        inference_id: 42,
        started: Time { sec: 1_700_000_000, nanosec: 5 },
        finished: Time { sec: 1_700_000_000, nanosec: 125_000_005 },
        model_name: "zoo:resnet18".into(),
        model_sha256: "ab".repeat(32),
        input_kind: InferenceResult::INPUT_LIDAR,
        latency_s: 0.125,
        robot_compute_s: 0.05,
        server_compute_s: 0.02,
        waiting_s: 0.03,
        transfer_s: 0.025,
        bytes_up: 150_528,
        bytes_down: 4_000,
        bandwidth_bucket: 7,
        bandwidth_mbps: 61.5,
        plan_hash: "cd".repeat(32),
        method: "lop".into(),
        fallback: true,
        fallback_reason: "deadline".into(),
        outputs: vec![
            OutputTensor { name: "logits".into(), shape: vec![1, 4], data: vec![0.5, -1.25, 3.0, f32::MIN_POSITIVE] },
            OutputTensor { name: "empty".into(), shape: vec![0], data: vec![] },
        ],
        top_k: vec![
            ClassScore { class_id: 2, score: 3.0, label: "tabby".into() },
            ClassScore { class_id: 0, score: 0.5, label: String::new() },
        ],
    }
}

#[test]
fn inference_result_round_trips_through_hiroz_cdr() {
    let msg = sample_result();
    let bytes = msg.serialize();
    assert_eq!(&bytes[..4], &[0x00, 0x01, 0x00, 0x00], "CDR little-endian encapsulation");
    let back = InferenceResult::deserialize(&bytes).expect("deserialize what we serialised");
    // Compare through serde's data model (the generated types derive Serialize, not PartialEq).
    assert_eq!(serde_json::to_value(&back).expect("json"), serde_json::to_value(&msg).expect("json"));
    assert_eq!(back.input_kind, InferenceResult::INPUT_LIDAR);
    assert_eq!(back.outputs[0].data[3], f32::MIN_POSITIVE);
    // The zero-copy path produces the same bytes.
    let zbuf = msg.serialize_to_zbuf();
    let contiguous: Vec<u8> = zbuf.zslices().flat_map(|s| s.as_slice().to_vec()).collect();
    assert_eq!(contiguous, bytes);
    // Truncated input is an error, not a panic.
    for cut in [4, bytes.len() / 2, bytes.len() - 1] {
        assert!(InferenceResult::deserialize(&bytes[..cut]).is_err(), "cut at {cut}");
    }
}

/// CDR (XCDR1, little endian) of a Bandwidth written by hand: what any ROS 2 peer sends.
#[test]
fn bandwidth_cdr_layout_matches_a_hand_encoding() {
    let msg = Bandwidth {
        stamp: Time { sec: -2, nanosec: 500 },
        estimate_mbps: 12.5,
        prediction_mbps: 10.0,
        samples: 9,
        bucket: 1,
        predictor: "hm".into(),
    };
    let mut want = vec![0x00, 0x01, 0x00, 0x00];
    want.extend_from_slice(&(-2i32).to_le_bytes());
    want.extend_from_slice(&500u32.to_le_bytes());
    want.extend_from_slice(&12.5f64.to_le_bytes()); // offset 8: already 8-aligned
    want.extend_from_slice(&10.0f64.to_le_bytes());
    want.extend_from_slice(&9u32.to_le_bytes());
    want.extend_from_slice(&1u32.to_le_bytes());
    want.extend_from_slice(&3u32.to_le_bytes()); // string length including the NUL
    want.extend_from_slice(b"hm\0");
    assert_eq!(msg.serialize(), want);
    let back = Bandwidth::deserialize(&want).expect("deserialize the hand encoding");
    assert_eq!((back.stamp.sec, back.stamp.nanosec, back.samples, back.bucket), (-2, 500, 9, 1));
    assert_eq!(back.predictor, "hm");
}

#[test]
fn energy_and_power_round_trip() {
    let energy = InferenceEnergy {
        inference_id: 3,
        start_stamp: Time { sec: 10, nanosec: 1 },
        end_stamp: Time { sec: 10, nanosec: 500_000_001 },
        energy_j: 2.5,
        average_w: 5.0,
        rails: vec![RailEnergy { name: "VDD_IN".into(), energy_j: 2.5, average_w: 5.0 }],
        source: "model".into(),
        modelled: true,
        samples: 50,
    };
    let back = InferenceEnergy::deserialize(&energy.serialize()).expect("energy");
    assert_eq!(serde_json::to_value(&back).expect("json"), serde_json::to_value(&energy).expect("json"));

    let power = PowerSample {
        stamp: Time { sec: 1, nanosec: 2 },
        rail_names: vec!["VDD_CPU".into(), "VDD_GPU".into()],
        rail_watts: vec![1.5, 2.25],
        total_w: 3.75,
        source: "jetson-hwmon".into(),
        modelled: false,
    };
    let back = PowerSample::deserialize(&power.serialize()).expect("power");
    assert_eq!(serde_json::to_value(&back).expect("json"), serde_json::to_value(&power).expect("json"));
}

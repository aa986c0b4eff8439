//! `lop replay` end to end: a rosbag2 recording written by an independent writer (Python
//! `rosbags`, cli/tests/data/write_bag.py) of six photographs as raw `sensor_msgs/Image`s is
//! played into the real `lop_robot` process (against an edge in this process, on a ROS router in
//! this process), as fast as it answers and then at the recorded rate. Every frame gets exactly
//! one JSON line, in the recording's order, answered, its stamp the frame's and its result the
//! node's; at the recorded rate the frames go out at the recording's pace. A missing topic, a
//! topic of another type, a topic nobody takes and a robot that never answers each get one clear
//! error.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::common;

use common::{Node, free_port, lop_bin};
use hiroz_msgs::sensor_msgs::Image;
use robot_node::backend::hiroz::{EmbeddedRouter, HirozRos};
use serde_json::{Value, json};

const MODEL: &str = "zoo:resnet18@64x64";
/// The recording's frames: the photographs, twice over.
const FRAMES: usize = 6;
/// Their spacing in the recording (header stamps and log times alike).
const PERIOD: Duration = Duration::from_millis(400);
/// The first frame's stamp (write_bag.py's).
const T0_NS: i64 = 1_700_000_000_000_000_000;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The venv's Python with rosbags and Pillow (`scripts/setup.sh --test-deps`, once).
fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let root = root();
        let status = Command::new("bash").arg(root.join("scripts/setup.sh")).arg("--test-deps").current_dir(&root).status();
        assert!(status.is_ok_and(|s| s.success()), "scripts/setup.sh --test-deps failed");
        root.join(".venv/bin/python")
    })
}

/// The recording: the project's photographs (`scripts/photos.sh`) as rgb8 `Image`s on
/// /camera/image_raw, and a `std_msgs/String` topic.
fn recording(dir: &Path) -> PathBuf {
    let photos = Command::new("bash").arg(root().join("scripts/photos.sh")).output().unwrap();
    assert!(photos.status.success(), "scripts/photos.sh: {}", String::from_utf8_lossy(&photos.stderr));
    let photos = PathBuf::from(String::from_utf8_lossy(&photos.stdout).trim());
    let files: Vec<PathBuf> = ["astronaut.png", "chelsea.png", "coffee.png"].iter().cycle().take(FRAMES).map(|f| photos.join(f)).collect();
    let out = dir.join("recording");
    let topics = json!([
        {"topic": "/camera/image_raw", "kind": "rgb8", "files": files},
        {"topic": "/chatter", "kind": "string", "count": 2},
    ]);
    let spec = dir.join("recording.json");
    std::fs::write(&spec, json!({"out": out, "compression": "zstd", "period_ns": PERIOD.as_nanos() as u64, "topics": topics}).to_string())
        .unwrap();
    let written = Command::new(python()).arg(root().join("cli/tests/data/write_bag.py")).arg(&spec).output().unwrap();
    assert!(written.status.success(), "write_bag.py: {}", String::from_utf8_lossy(&written.stderr));
    out
}

/// `lop replay` with `args`, ended after 120 s at most.
fn replay(args: &[&str]) -> Output {
    let mut child = Command::new(lop_bin())
        .arg("replay")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The JSON lines of a replay that succeeded.
fn lines(out: &Output, file: &Path, node: &Node) -> Vec<Value> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "lop replay failed: {stderr}\nlop_robot:\n{}", node.log());
    eprintln!("{stderr}");
    std::fs::read_to_string(file).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Each frame has one line, in order, answered by the node: its stamp and frame id the
/// frame's, a result of the model with increasing inference ids.
fn one_answer_per_frame(lines: &[Value]) {
    assert_eq!(lines.len(), FRAMES, "{lines:#?}");
    let mut last_id = 0;
    for (i, l) in lines.iter().enumerate() {
        let stamp = T0_NS + i as i64 * PERIOD.as_nanos() as i64;
        assert_eq!(
            (l["frame"].as_u64(), l["stamp_ns"].as_i64(), l["topic"].as_str()),
            (Some(i as u64), Some(stamp), Some("/camera/image_raw"))
        );
        assert_eq!(l["stamp"], json!({"sec": stamp / 1_000_000_000, "nanosec": stamp % 1_000_000_000}), "{l}");
        assert_eq!(l["answered"], true, "frame {i}: {l}");
        let r = &l["result"];
        assert_eq!(
            (r["frame_id"].as_str(), r["method"].as_str(), r["fallback"].as_bool()),
            (Some("camera"), Some("lop"), Some(false)),
            "{l}"
        );
        assert_eq!(r["outputs"][0]["shape"], json!([1, 1000]), "{l}");
        assert!(r["outputs"][0].get("data").is_none() && r["top_k"].as_array().is_some_and(|k| k.len() == 5), "{l}");
        let id = r["inference_id"].as_u64().unwrap();
        assert!(id > last_id && r["latency_s"].as_f64().is_some_and(|s| s > 0.0), "{l}");
        last_id = id;
    }
}

/// A replay that fails, and its error.
fn error_of(out: &Output) -> String {
    assert!(!out.status.success(), "lop replay succeeded: {}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("no error line: {stderr}")).to_string()
}

/// `lop_robot`'s parameters: on the router at `ros_ep`, the edge at `edge_ep`, its cache in `dir`;
/// a long deadline slack (a loaded machine must not turn inferences into fallbacks).
fn robot_yaml(ros_ep: &str, edge_ep: &str, dir: &Path) -> String {
    format!(
        "lop_robot:\n  ros__parameters:\n    robot_id: replay-robot\n    domain_id: 0\n    router_endpoint: \"{ros_ep}\"\n    embedded_router: false\n    \
         edge:\n      endpoint: \"{edge_ep}\"\n    model:\n      source: \"{MODEL}\"\n      id: resnet18\n    \
         table:\n      buckets: \"0,2,8,30\"\n    image:\n      fit: letterbox\n    \
         cache_dir: \"{}\"\n    deadline_slack_ms: 60000.0\n",
        dir.display()
    )
}

/// The replays of the recording at `bag` into the node on the router at `ros_ep`, their lines
/// written under `work`: as fast as answered, at the recorded rate, to a topic nobody takes, and
/// to one whose subscriber never answers.
fn replays(bag: &str, ros_ep: &str, work: &Path, node: &Node) {
    let common = ["--topic", "/camera/image_raw", "--router", ros_ep, "--domain-id", "0", "--wait", "90"];
    // As fast as answered (the first frames wait for a cold node: a long timeout).
    let fast = work.join("fast.jsonl");
    let out = replay(&[&[bag], &common[..], &["--as-fast-as-answered", "--timeout", "60", "--out", fast.to_str().unwrap()]].concat());
    one_answer_per_frame(&lines(&out, &fast, node));

    // At the recorded rate: the frames go out at the recording's pace.
    let paced = work.join("paced.jsonl");
    let out = replay(&[&[bag], &common[..], &["--timeout", "30", "--out", paced.to_str().unwrap()]].concat());
    let paced = lines(&out, &paced, node);
    one_answer_per_frame(&paced);
    for (i, l) in paced.iter().enumerate() {
        let (at, due) = (l["published_s"].as_f64().unwrap(), i as f64 * PERIOD.as_secs_f64());
        // Never early; late only by what a loaded machine's scheduling takes.
        assert!(at >= due - 0.002 && at <= due + 0.3, "frame {i} published at {at:.3} s, due at {due:.3} s");
    }

    // Nobody takes the topic; somebody takes it and never answers.
    let nobody = error_of(&replay(&[bag, "--to", "/camera/nobody", "--router", ros_ep, "--domain-id", "0", "--wait", "1"]));
    assert!(nobody.contains("no node subscribes to /camera/nobody") && nobody.contains("waited 1.0 s"), "{nobody}");
    let args = [bag, "--to", "/camera/silent", "--router", ros_ep, "--domain-id", "0", "--wait", "30", "--timeout", "1"];
    let never = error_of(&replay(&args));
    assert!(
        never.contains("lop_robot never answered: no result on /lop/inference within 1.0 s of frame 0 (stamp 1700000000.000000000) published on /camera/silent"),
        "{never}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_recording_replayed_into_lop_robot_gets_one_answer_per_frame_in_order() {
    let _heavy = crate::HEAVY.lock().await;
    let dir = lop_runtime::scratch::scratch_dir("lop-replay-test", "e2e");
    let bag_path = recording(&dir).to_str().unwrap().to_string();
    let bag = bag_path.as_str();

    // The recording's own faults, said before anything is published (no router needed).
    let missing = error_of(&replay(&[bag, "--topic", "/camera/missing", "--router", "tcp/127.0.0.1:1"]));
    assert!(
        missing.contains("no topic '/camera/missing'") && missing.contains("/camera/image_raw (sensor_msgs/msg/Image, 6 messages)"),
        "{missing}"
    );
    let typed = error_of(&replay(&[bag, "--topic", "/chatter", "--router", "tcp/127.0.0.1:1"]));
    assert!(typed.contains("topic '/chatter' carries std_msgs/msg/String, not sensor_msgs/msg/Image"), "{typed}");

    // The ROS router, the edge and the node.
    let (ros_ep, edge_ep) = (format!("tcp/127.0.0.1:{}", free_port()), format!("tcp/127.0.0.1:{}", free_port()));
    let router = std::sync::Arc::new(EmbeddedRouter::start(&ros_ep).unwrap());
    let yaml = robot_yaml(&ros_ep, &edge_ep, &dir);
    let (config, cfg) = common::robot_config(&dir, &yaml);
    let (_svc, _edge) = common::start_synthetic_edge(&edge_ep, MODEL, &cfg.table, &dir).await;
    let node = Node::start(&config);
    // A subscriber that never answers, on a topic of its own.
    let mut peer = cfg.ros.clone();
    peer.embedded_router = false;
    let silent =
        tokio::task::spawn_blocking(move || HirozRos::open(&peer, "silent_camera", &[], &[], Some(router))).await.unwrap().unwrap();
    let _silent_sub = silent.node().create_sub::<Image>("/camera/silent").build_with_callback(|_| {}).unwrap();

    let work = dir.clone();
    let node = tokio::task::spawn_blocking(move || {
        replays(&bag_path, &ros_ep, &work, &node);
        node
    })
    .await
    .unwrap();
    drop((node, silent));
    let _ = std::fs::remove_dir_all(&dir);
}

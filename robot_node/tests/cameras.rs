//! Two cameras on one `lop_robot` (`cameras: [front, rear]`), in one process with hiroz only:
//! the node's library `run` with its embedded router, an edge service on its own router, a hiroz
//! node playing both cameras and listening to /lop/inference, /diagnostics and the front
//! camera's debug image.
//!
//! Each camera's frames come back exact (the unsplit model on the frame converted with that
//! camera's own fit), named after the camera in `header.frame_id`; frames of both cameras
//! published together are both answered (each camera has its own mailbox); a bad frame of one
//! camera is counted on its own /diagnostics status while the other's frames go on; the edge
//! holds one session per camera (`<robot_id>`, `<robot_id>.lane1`); the debug image comes out
//! under the camera's namespace.
#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common;

use common::{assert_outputs_equal, free_port, image, image_bytes};
use hiroz::Builder as _;
use hiroz_msgs::diagnostic_msgs::DiagnosticArray;
use hiroz_msgs::sensor_msgs::Image;
use lop_msgs::ros::msg::InferenceResult;
use robot_node::config::RobotConfig;
use robot_node::convert::{ChannelOrder, Fit, ImageTarget, ImageView, image_to_chw};
use robot_node::params::Params;

const MODEL: &str = "zoo:resnet18";

/// A camera publisher.
type CameraPub = hiroz::pubsub::ZPub<Image, <Image as hiroz::msg::ZMessage>::Serdes>;

/// The unsplit model's outputs on `img` converted at `fit`, as the node converts it.
fn reference(g: &lop::graph::Graph, img: &Image, fit: Fit) -> Vec<tch::Tensor> {
    let data = image_bytes(img);
    let view =
        ImageView { width: img.width, height: img.height, encoding: &img.encoding, is_bigendian: false, step: img.step, data: &data };
    let target = ImageTarget { height: 224, width: 224, channels: 3, order: ChannelOrder::Rgb, fit };
    let input = tch::Tensor::from_slice(&image_to_chw(&view, &target).unwrap()).reshape([1, 3, 224, 224]);
    lop::exec::run_whole(g, &[input]).unwrap().outputs
}

/// `img` with its frame id set to `frame_id`.
fn framed(mut img: Image, frame_id: &str) -> Image {
    img.header.frame_id = frame_id.to_string();
    img
}

/// Publishes every `(camera, frame)` (again every 300 ms, until the node has subscribed) until
/// a result for each frame's stamp arrived; returns them by stamp.
fn answered_all(
    frames: &[(&CameraPub, &Image)],
    results: &mpsc::Receiver<InferenceResult>,
    deadline: Instant,
) -> HashMap<i32, InferenceResult> {
    let mut got = HashMap::new();
    let mut last_send = None::<Instant>;
    while got.len() < frames.len() {
        assert!(Instant::now() < deadline, "frames unanswered: {:?}", frames.iter().map(|f| f.1.header.stamp.sec).collect::<Vec<_>>());
        if last_send.is_none_or(|t| t.elapsed() > Duration::from_millis(300)) {
            for (camera, img) in frames.iter().filter(|(_, img)| !got.contains_key(&img.header.stamp.sec)) {
                camera.publish(img).unwrap();
            }
            last_send = Some(Instant::now());
        }
        if let Ok(r) = results.recv_timeout(Duration::from_millis(50))
            && frames.iter().any(|(_, img)| img.header.stamp.sec == r.header.stamp.sec)
        {
            got.insert(r.header.stamp.sec, r);
        }
    }
    got
}

/// The values of each /diagnostics status, by status name.
fn statuses(d: &DiagnosticArray) -> HashMap<String, HashMap<String, String>> {
    d.status.iter().map(|s| (s.name.clone(), s.values.iter().map(|kv| (kv.key.clone(), kv.value.clone())).collect())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_cameras_on_one_model_each_answered_exactly_under_its_own_name() {
    let _heavy = crate::HEAVY.lock().await;
    let _ = tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).with_test_writer().try_init();
    let deadline = Instant::now() + Duration::from_secs(90);
    let dir = std::env::temp_dir().join(format!("lop-robot-cameras-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ros_ep, edge_ep) = (format!("tcp/127.0.0.1:{}", free_port()), format!("tcp/127.0.0.1:{}", free_port()));
    // The front camera letterboxes (image.fit); the rear one resizes and names its frames.
    let yaml = format!(
        "lop_robot:\n  ros__parameters:\n    domain_id: 0\n    router_endpoint: \"{ros_ep}\"\n    embedded_router: true\n    \
         edge:\n      endpoint: \"{edge_ep}\"\n    robot_id: cams\n    model:\n      source: \"{MODEL}\"\n      id: resnet18\n    \
         table:\n      buckets: \"0,2,8,30\"\n    image:\n      fit: letterbox\n    cache_dir: \"{}\"\n    diagnostics_period_s: 0.2\n    \
         deadline_slack_ms: 20000.0\n    debug_image:\n      max_rate_hz: 0.0\n    cameras: [front, rear]\n    \
         camera:\n      rear:\n        fit: resize\n        frame_id: rear_optical\n",
        dir.display()
    );
    let mut params = Params::from_yaml_str("lop_robot", &yaml, "test").unwrap();
    let cfg = RobotConfig::from_params(&mut params).unwrap();
    assert!(params.unknown().is_empty(), "{:?}", params.unknown());
    let (svc, _edge) = common::start_synthetic_edge(&edge_ep, MODEL, &cfg.table, &dir).await;

    let robot = common::InProcess::start(&cfg, params.declared().to_vec(), "cameras_peer").await;
    let n = robot.peer.node();
    let front = n.create_pub::<Image>("/front/image_raw").build().unwrap();
    let rear = n.create_pub::<Image>("/rear/image_raw").build().unwrap();
    let (res_tx, results) = mpsc::channel();
    let _rs = n.create_sub::<InferenceResult>("/lop/inference").build_with_callback(move |r| drop(res_tx.send(r))).unwrap();
    let (diag_tx, diags) = mpsc::channel();
    let _ds = n.create_sub::<DiagnosticArray>("/diagnostics").build_with_callback(move |d| drop(diag_tx.send(d))).unwrap();
    let (dbg_tx, debug_images) = mpsc::channel();
    let _dbg = n.create_sub::<Image>("/front/lop/debug_image").build_with_callback(move |i| drop(dbg_tx.send(i))).unwrap();

    let blocking = tokio::task::spawn_blocking(move || {
        let model = lop::model::load(MODEL, &Default::default()).unwrap();
        let letterbox = Fit::Letterbox { pad: 0 };
        // One frame each, one at a time: exact at each camera's own fit, named after it.
        let f1 = framed(image(640, 480, 640 * 3, 100, 1), "");
        let r = answered_all(&[(&front, &f1)], &results, deadline).remove(&100).unwrap();
        assert_eq!(r.header.frame_id, "front", "a frame without a frame id is named after its camera");
        assert_outputs_equal(&r, &reference(&model, &f1, letterbox));
        let r1 = framed(image(640, 480, 640 * 3, 101, 2), "rear_driver_frame");
        let r = answered_all(&[(&rear, &r1)], &results, deadline).remove(&101).unwrap();
        assert_eq!(r.header.frame_id, "rear_optical", "camera.rear.frame_id names its results");
        assert_outputs_equal(&r, &reference(&model, &r1, Fit::Resize));
        // Both cameras at once, several times: neither camera's frame replaces the other's.
        for k in 0..3 {
            let (a, b) =
                (framed(image(320, 240, 320 * 3, 110 + 2 * k, 3), "front_optical"), framed(image(320, 240, 320 * 3, 111 + 2 * k, 4), ""));
            let got = answered_all(&[(&front, &a), (&rear, &b)], &results, deadline);
            assert_eq!(got[&a.header.stamp.sec].header.frame_id, "front_optical", "the frame's own frame id is kept");
            assert_eq!(got[&b.header.stamp.sec].header.frame_id, "rear_optical");
            assert_outputs_equal(&got[&a.header.stamp.sec], &reference(&model, &a, letterbox));
            assert_outputs_equal(&got[&b.header.stamp.sec], &reference(&model, &b, Fit::Resize));
        }
        // A bad rear frame: counted on the rear camera's status only; the front camera goes on.
        let mut bad = image(64, 48, 64 * 3, 130, 5);
        bad.step = 10;
        rear.publish(&bad).unwrap();
        let f2 = framed(image(224, 224, 224 * 3, 131, 6), "");
        let r = answered_all(&[(&front, &f2)], &results, deadline).remove(&131).unwrap();
        assert_outputs_equal(&r, &reference(&model, &f2, letterbox));
        let (front_name, rear_name) = ("lop_robot: inference (front)", "lop_robot: inference (rear)");
        let mut seen = HashMap::new();
        let count = |seen: &HashMap<String, HashMap<String, String>>, name: &str, key: &str| -> u64 {
            seen.get(name).and_then(|v| v.get(key)).and_then(|v| v.parse().ok()).unwrap_or(0)
        };
        // Until both statuses have caught up with the frames above.
        while count(&seen, rear_name, "frames_unconvertible") < 1 || count(&seen, front_name, "frames_answered") < 5 {
            assert!(Instant::now() < deadline, "the rear camera's bad frame is not counted on its status: {seen:?}");
            if let Ok(d) = diags.recv_timeout(Duration::from_millis(100)) {
                seen.extend(statuses(&d));
            }
        }
        let (fs, rs) = (&seen[front_name], &seen[rear_name]);
        assert_eq!((fs["camera_topic"].as_str(), rs["camera_topic"].as_str()), ("/front/image_raw", "/rear/image_raw"));
        assert_eq!((fs["edge_session_id"].as_str(), rs["edge_session_id"].as_str()), ("cams", "cams.lane1"));
        assert_eq!(fs["frames_unconvertible"], "0", "{fs:?}");
        assert!(fs["frames_answered"].parse::<u64>().unwrap() >= 5, "{fs:?}");
        assert!(rs["frames_answered"].parse::<u64>().unwrap() >= 4, "{rs:?}");
        // The front camera's debug image, under its namespace, names it too.
        let debug =
            debug_images.recv_timeout(deadline.saturating_duration_since(Instant::now())).expect("a debug image on /front/lop/debug_image");
        let names: HashSet<String> =
            std::iter::once(debug.header.frame_id).chain(debug_images.try_iter().map(|i| i.header.frame_id)).collect();
        assert!(names.iter().all(|n| n == "front" || n == "front_optical"), "the front camera's debug images: {names:?}");
    });
    blocking.await.unwrap();
    assert_eq!(svc.open_sessions(), 2, "one edge session per camera");
    let summary = robot.stop(Duration::from_secs(20)).await;
    assert!(summary.answered >= 9 && summary.bad_input >= 1 && summary.fallbacks == 0, "{summary:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A camera list naming one topic twice is one clear error at start: `lop_robot` exits with it
/// before subscribing anything.
#[test]
fn a_topic_named_twice_is_one_error_at_start() {
    let dir = std::env::temp_dir().join(format!("lop-robot-cameras-twice-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("robot.yaml");
    let yaml = "lop_robot:\n  ros__parameters:\n    cameras: [front, rear]\n    camera:\n      rear:\n        topic: /front/image_raw\n";
    std::fs::write(&path, yaml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lop_robot")).arg("--config").arg(&path).env("NO_COLOR", "1").output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{text}");
    let says = "'front' and 'rear' both subscribe /front/image_raw";
    assert_eq!(text.matches(says).count(), 1, "one error naming the topic and both cameras:\n{text}");
    assert!(!text.contains("ready"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

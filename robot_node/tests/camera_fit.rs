//! A camera's JPEG at its own size through `lop_robot` under `passthrough` (issue 59): a 640x480
//! camera, a 640x640 detector that letterboxes the frame itself (`image.camera_size`, the edge's
//! `camera_fits`). The JPEG crosses unchanged (its bytes plus a band header), and the result
//! equals the unfitted model's on the decoded frame letterboxed by hand, so the fit inside the
//! model is checked against an independent letterbox. A frame of another size is refused and
//! counted; the node answers the next frame.
#![allow(clippy::unwrap_used)]

use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common;

use common::{assert_outputs_equal, free_port};
use hiroz::Builder as _;
use hiroz_msgs::diagnostic_msgs::DiagnosticArray;
use hiroz_msgs::ros::builtin_interfaces::Time;
use hiroz_msgs::sensor_msgs::CompressedImage;
use hiroz_msgs::std_msgs::Header;
use lop::codec::{FrameCodec, Image};
use lop::fit::FrameFit;
use lop::model::LoadOptions;
use lop::plan::Side;
use lop_msgs::ros::msg::InferenceResult;
use lop_runtime::edge::EdgeModel;
use robot_node::config::{ProfileSource, RobotConfig};
use robot_node::params::{ParamValue, Params};

const MODEL: &str = "zoo:yolo_det@640x640";
const TASK: &str = "detect;score=0.2";

/// A camera's JPEG of a photograph-like frame, `w x h`, 4:2:0 at quality 90 (as drivers write).
fn camera_jpeg(w: usize, h: usize) -> Vec<u8> {
    let image = Image { channels: 3, width: w, height: h };
    lop::codec::jpeg::encode_as_a_camera_does(&image, &lop::codec::sample_frame(&image), h, 90).unwrap()
}

fn message(jpeg: &[u8], sec: i32) -> CompressedImage {
    CompressedImage {
        header: Header { stamp: Time { sec, nanosec: 7 }, frame_id: format!("cam{sec}") },
        format: "jpeg".into(),
        data: jpeg.to_vec().into(),
    }
}

/// The unfitted detector's outputs on `jpeg` decoded and letterboxed here: 80 rows of 114 above
/// and below the 640x480 frame.
fn reference(jpeg: &[u8]) -> Vec<tch::Tensor> {
    let task = lop::postprocess::Postprocess::parse(TASK).unwrap();
    let g = lop::model::load(MODEL, &LoadOptions { postprocess: Some(task), ..LoadOptions::default() }).unwrap();
    let image = Image { channels: 3, width: 640, height: 480 };
    let planar = lop::codec::decode(FrameCodec::Passthrough, &image, jpeg, 480).unwrap();
    let frame = tch::Tensor::from_slice(&planar).reshape([1, 3, 480, 640]);
    let pad = tch::Tensor::full([1, 3, 80, 640], 114, (tch::Kind::Uint8, tch::Device::Cpu));
    let input = tch::Tensor::cat(&[&pad, &frame, &pad], 2);
    lop::exec::run_whole(&g, &[input]).unwrap().outputs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_camera_jpeg_at_its_own_size_crosses_unchanged_and_matches_the_letterboxed_model() {
    let _heavy = crate::HEAVY.lock().await;
    let _ = tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).with_test_writer().try_init();
    let deadline = Instant::now() + Duration::from_secs(120);
    let dir = std::env::temp_dir().join(format!("lop-camera-fit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ros_ep, edge_ep) = (format!("tcp/127.0.0.1:{}", free_port()), format!("tcp/127.0.0.1:{}", free_port()));
    // The robot's profile, with the camera JPEG's price measured once, as a file both sides
    // read (the robot sends it in Hello; measured twice, the edge would plan again).
    let fit = FrameFit::parse("letterbox:114@640x480").unwrap();
    let task = lop::postprocess::Postprocess::parse(TASK).unwrap();
    let g = lop::model::load(MODEL, &LoadOptions { fit: Some(fit), postprocess: Some(task), ..LoadOptions::default() }).unwrap();
    let robot =
        lop::profile::with_codec_measured(ProfileSource::Synthetic.load(&g, Side::Robot).unwrap(), FrameCodec::Passthrough, &g).unwrap();
    let robot_file = dir.join("robot-profile.json");
    robot.save(&robot_file).unwrap();
    let yaml = format!(
        "lop_robot:\n  ros__parameters:\n    domain_id: 0\n    router_endpoint: \"{ros_ep}\"\n    embedded_router: true\n    \
         edge:\n      endpoint: \"{edge_ep}\"\n    model:\n      source: \"{MODEL}\"\n      id: det\n      task: \"{TASK}\"\n      robot_profile: \"{}\"\n    \
         method: server-only\n    table:\n      buckets: \"0,2,8,30\"\n      frame_codec: passthrough\n    \
         image:\n      camera_size: 640x480\n      fit: letterbox\n      pad: 114\n      transport: compressed\n    \
         cache_dir: \"{}\"\n    diagnostics_period_s: 0.2\n    deadline_slack_ms: 60000.0\n",
        robot_file.display(),
        dir.display()
    );
    let mut params = Params::from_yaml_str("lop_robot", &yaml, "test").unwrap();
    params.set("robot_id", ParamValue::Str("fit-robot".into()));
    let cfg = RobotConfig::from_params(&mut params).unwrap();
    assert!(params.unknown().is_empty(), "{:?}", params.unknown());
    assert_eq!(cfg.model_load.fit, Some(fit), "image.camera_size puts the fit in the model");

    // The edge serves the same fitted model (`camera_fits`).
    assert_eq!(g.content_hash().unwrap(), lop::model::load(MODEL, &cfg.model_load).unwrap().content_hash().unwrap());
    assert_eq!(g.nodes[g.inputs()[0]].info.shape, vec![1, 3, 480, 640], "the model takes the camera's frame");
    let server = ProfileSource::Synthetic.load(&g, Side::Server).unwrap();
    let spec = cfg.table.spec(&g, &robot, &server).unwrap();
    let model = EdgeModel { id: "det".into(), source: MODEL.into(), load: cfg.model_load.clone(), server_profile: server };
    let (svc, _edge) = common::start_edge(&edge_ep, vec![model], vec![robot], spec, &dir).await;

    let robot = common::InProcess::start(&cfg, params.declared().to_vec(), "fit_camera").await;
    let n = robot.peer.node();
    let camera = n.create_pub::<CompressedImage>("/camera/image_raw/compressed").build().unwrap();
    let (res_tx, results) = mpsc::channel();
    let _rs = n.create_sub::<InferenceResult>("/lop/inference").build_with_callback(move |r| drop(res_tx.send(r))).unwrap();
    let (diag_tx, diags) = mpsc::channel();
    let _ds = n.create_sub::<DiagnosticArray>("/diagnostics").build_with_callback(move |d| drop(diag_tx.send(d))).unwrap();

    let blocking = tokio::task::spawn_blocking(move || {
        let jpeg = camera_jpeg(640, 480);
        let r = common::roundtrip_compressed(&camera, &results, &message(&jpeg, 100), deadline);
        assert!(!r.fallback, "the frame fell back: {}", r.fallback_reason);
        assert_eq!(r.method, "server-only");
        let n = jpeg.len() as u64;
        // The camera's JPEG crossed unchanged: its bytes and one band header, not a fitted frame.
        assert!(r.bytes_up >= n && r.bytes_up < n + 512, "{} B up for a {n} B camera JPEG", r.bytes_up);
        assert_outputs_equal(&r, &reference(&jpeg));
        // A frame of another size: refused (counted), then the next frame is answered.
        camera.publish(&message(&camera_jpeg(320, 240), 101)).unwrap();
        let refused = loop {
            assert!(Instant::now() < deadline, "the 320x240 frame was not counted as unconvertible");
            if let Ok(d) = diags.recv_timeout(Duration::from_millis(100)) {
                let v =
                    d.status.iter().flat_map(|s| s.values.iter()).find(|kv| kv.key == "frames_unconvertible").map(|kv| kv.value.clone());
                if v.is_some_and(|v| v != "0") {
                    break true;
                }
            }
        };
        let again = common::roundtrip_compressed(&camera, &results, &message(&jpeg, 102), deadline);
        assert!(!again.fallback, "{}", again.fallback_reason);
        assert_outputs_equal(&again, &reference(&jpeg));
        (refused, r.bytes_up, n)
    });
    let mut robot = robot;
    let (refused, up, n) = tokio::select! {
        r = blocking => r.unwrap(),
        early = &mut robot.node => panic!("lop_robot stopped before the frames were answered: {early:?}"),
    };
    assert!(refused);
    let summary = robot.stop(Duration::from_secs(20)).await;
    assert!(summary.answered >= 2 && summary.bad_input == 1 && summary.fallbacks == 0, "{summary:?}");
    assert_eq!(svc.counts().input_mismatches, 0);
    eprintln!("camera fit: {up} B up for a {n} B camera JPEG ({:.4}x)", up as f64 / n as f64);
    let _ = std::fs::remove_dir_all(&dir);
}

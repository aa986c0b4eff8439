//! Several cameras on one `lop_robot` whose inferences run at the same time (issue 58): each
//! camera's inference runs on a worker of its own whose copy of the model shares the weights, so
//! the cameras' frames published together are at the edge together, and an edge that batches
//! runs them as one batch, as it batches robots'; and several cameras in fleet mode, each a fleet
//! client of its own. In one process with hiroz only, as `cameras.rs`.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common;

use common::{assert_outputs_equal, free_port, image, image_bytes};
use hiroz::Builder as _;
use hiroz_msgs::sensor_msgs::Image;
use lop_msgs::key::SessionKeys;
use lop_msgs::ros::msg::InferenceResult;
use lop_runtime::edge::{Batching, EdgeService};
use lop_runtime::fleet::{REPORT_PERIOD, start_reporter};
use lop_runtime::zenoh_link::{EdgeAcceptor, ZenohConfig};
use lop_runtime::zenoh_service::serve_zenoh;
use robot_node::config::RobotConfig;
use robot_node::convert::{ChannelOrder, Fit, ImageTarget, ImageView, image_to_chw};
use robot_node::params::Params;

const MODEL: &str = "zoo:resnet18";

/// A camera publisher.
type CameraPub = hiroz::pubsub::ZPub<Image, <Image as hiroz::msg::ZMessage>::Serdes>;

/// The unsplit model's outputs on `img` (224x224: the model's own size, any fit is the identity).
fn reference(g: &lop::graph::Graph, img: &Image) -> Vec<tch::Tensor> {
    let data = image_bytes(img);
    let view =
        ImageView { width: img.width, height: img.height, encoding: &img.encoding, is_bigendian: false, step: img.step, data: &data };
    let target = ImageTarget { height: 224, width: 224, channels: 3, order: ChannelOrder::Rgb, fit: Fit::Letterbox { pad: 0 } };
    let input = tch::Tensor::from_slice(&image_to_chw(&view, &target).unwrap()).reshape([1, 3, 224, 224]);
    lop::exec::run_whole(g, &[input]).unwrap().outputs
}

/// `lop_robot`'s parameters: `cameras` on robot `robot_id`, the edge at `edge_ep` (`extra`: more
/// `edge.*` lines), every frame's plan `method`.
fn robot_yaml(ros_ep: &str, edge_ep: &str, extra: &str, robot_id: &str, method: &str, cameras: &[&str], dir: &std::path::Path) -> String {
    format!(
        "lop_robot:\n  ros__parameters:\n    domain_id: 0\n    router_endpoint: \"{ros_ep}\"\n    embedded_router: true\n    \
         edge:\n      endpoint: \"{edge_ep}\"\n{extra}    robot_id: {robot_id}\n    method: {method}\n    \
         model:\n      source: \"{MODEL}\"\n      id: resnet18\n    \
         table:\n      buckets: \"0,2,8,30\"\n    cache_dir: \"{}\"\n    deadline_slack_ms: 30000.0\n    \
         debug_image:\n      max_rate_hz: 0.0\n    cameras: [{}]\n",
        dir.display(),
        cameras.join(", ")
    )
}

/// Publishes one frame on each camera at once (again after `resend`, while unanswered: until the
/// node has subscribed), stamped from `sec` on, until every one is answered; checks each against
/// the unsplit model and returns the results by stamp.
fn round(
    cameras: &[&CameraPub],
    sec: i32,
    resend: Duration,
    results: &mpsc::Receiver<InferenceResult>,
    model: &lop::graph::Graph,
    deadline: Instant,
) -> HashMap<i32, InferenceResult> {
    let frames: Vec<Image> = (0..cameras.len()).map(|k| image(224, 224, 224 * 3, sec + k as i32, (sec as u32) * 7 + k as u32)).collect();
    let mut got: HashMap<i32, InferenceResult> = HashMap::new();
    let mut sent = None::<Instant>;
    while got.len() < frames.len() {
        assert!(Instant::now() < deadline, "frames from {sec} unanswered; answered: {:?}", got.keys().collect::<Vec<_>>());
        if sent.is_none_or(|t| t.elapsed() > resend) {
            for (c, f) in cameras.iter().zip(&frames).filter(|(_, f)| !got.contains_key(&f.header.stamp.sec)) {
                c.publish(f).unwrap();
            }
            sent = Some(Instant::now());
        }
        if let Ok(r) = results.recv_timeout(Duration::from_millis(50)) {
            let k = r.header.stamp.sec - sec;
            if (0..frames.len() as i32).contains(&k) {
                assert_outputs_equal(&r, &reference(model, &frames[k as usize]));
                got.insert(r.header.stamp.sec, r);
            }
        }
    }
    got
}

/// Starts `lop_robot` with `yaml` and a publisher for each of `cameras` (their default topics);
/// returns the node, the publishers and the receiver of /lop/inference.
async fn start_robot(yaml: &str, cameras: &[&str]) -> (common::InProcess, Vec<CameraPub>, mpsc::Receiver<InferenceResult>, impl Sized) {
    let mut params = Params::from_yaml_str("lop_robot", yaml, "test").unwrap();
    let cfg = RobotConfig::from_params(&mut params).unwrap();
    assert!(params.unknown().is_empty(), "{:?}", params.unknown());
    let robot = common::InProcess::start(&cfg, params.declared().to_vec(), "cameras_together_peer").await;
    let n = robot.peer.node();
    let pubs = cameras.iter().map(|c| n.create_pub::<Image>(&format!("/{c}/image_raw")).build().unwrap()).collect();
    let (tx, results) = mpsc::channel();
    let sub = n.create_sub::<InferenceResult>("/lop/inference").build_with_callback(move |r| drop(tx.send(r))).unwrap();
    (robot, pubs, results, sub)
}

/// Three cameras' frames published together reach a slowed edge that batches while one of them
/// holds its replica: the other two wait there together and run as one batch (on a robot whose
/// cameras took turns on one worker, each frame's inference, its wait for the edge included, ran
/// alone and the edge never had two to batch). Every camera's answer is its own frame's, exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cameras_frames_sent_together_are_batched_at_the_edge() {
    let _heavy = crate::HEAVY.lock().await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let dir = std::env::temp_dir().join(format!("lop-robot-cameras-batched-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ros_ep, edge_ep) = (format!("tcp/127.0.0.1:{}", free_port()), format!("tcp/127.0.0.1:{}", free_port()));
    let cameras = ["a", "b", "c"];
    // Server-only: every frame's plan is the same one, all of it the edge's.
    let yaml = robot_yaml(&ros_ep, &edge_ep, "", "cams", "server-only", &cameras, &dir);
    let cfg = RobotConfig::from_params(&mut Params::from_yaml_str("lop_robot", &yaml, "test").unwrap()).unwrap();
    // 10x slower than this machine (waiting, not computing): one frame holds the replica a while.
    let (svc, _edge) = common::start_synthetic_edge_with(&edge_ep, MODEL, &cfg.table, &dir, |o| {
        o.dilation = 10.0;
        o.batching = Batching { max: 4, straggler_wait: Duration::from_secs(10) };
    })
    .await;
    let (robot, pubs, results, _sub) = start_robot(&yaml, &cameras).await;
    let edge = svc.clone();
    tokio::task::spawn_blocking(move || {
        let model = lop::model::load(MODEL, &Default::default()).unwrap();
        let pubs: Vec<&CameraPub> = pubs.iter().collect();
        // Until the node has subscribed every camera.
        round(&pubs, 100, Duration::from_millis(300), &results, &model, deadline);
        // Until the edge has ended the first round's frames sent again while unanswered.
        while edge.counts().inferences > edge.counts().done + edge.counts().aborted {
            assert!(Instant::now() < deadline, "the edge did not end the first round: {:?}", edge.counts());
            std::thread::sleep(Duration::from_millis(50));
        }
        while results.try_recv().is_ok() {}
        let before = edge.counts();
        for k in 0..2 {
            round(&pubs, 200 + 10 * k, Duration::from_secs(60), &results, &model, deadline);
        }
        let after = edge.counts();
        assert!(
            after.batches > before.batches && after.batched >= before.batched + 2,
            "the cameras' frames were not batched at the edge: before {before:?}, after {after:?}"
        );
        assert_eq!(after.aborted, before.aborted, "{after:?}");
    })
    .await
    .unwrap();
    assert_eq!(svc.open_sessions(), 3, "one edge session per camera");
    let summary = robot.stop(Duration::from_secs(20)).await;
    assert!(summary.answered >= 9 && summary.fallbacks == 0, "{summary:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two cameras in fleet mode (`edge.mode: fleet`): each camera a fleet client of its own with its
/// own session at the edge it finds by its load reports (`<robot_id>`, `<robot_id>.lane1`), every
/// frame answered exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_cameras_in_fleet_mode_each_answered_exactly() {
    let _heavy = crate::HEAVY.lock().await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let dir = std::env::temp_dir().join(format!("lop-robot-cameras-fleet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ros_ep, site_ep) = (format!("tcp/127.0.0.1:{}", free_port()), format!("tcp/127.0.0.1:{}", free_port()));
    let cameras = ["front", "rear"];
    let fleet = "      mode: fleet\n      deadline_ms: 30000.0\n";
    let yaml = robot_yaml(&ros_ep, &site_ep, fleet, "fleetcams", "server-only", &cameras, &dir);
    let cfg = RobotConfig::from_params(&mut Params::from_yaml_str("lop_robot", &yaml, "test").unwrap()).unwrap();
    // The site: a router and one edge on it in its own key space, found by its reports.
    let _router = ZenohConfig::router(vec![site_ep.clone()]).open().await.unwrap();
    let session = ZenohConfig::client(vec![site_ep.clone()]).open().await.unwrap();
    let (models, robot_profile, spec) = common::synthetic_edge_model(MODEL, &cfg.table);
    let svc = EdgeService::start(common::edge_options(models, vec![robot_profile], spec, &dir)).await.unwrap();
    let _serving = serve_zenoh(svc.clone(), EdgeAcceptor::on(&session, SessionKeys::fleet("edge-a").unwrap()).await.unwrap());
    let _reports = start_reporter(&session, "edge-a", svc.clone(), REPORT_PERIOD, Box::new(|| None)).await.unwrap();

    let (robot, pubs, results, _sub) = start_robot(&yaml, &cameras).await;
    let edge = svc.clone();
    tokio::task::spawn_blocking(move || {
        let model = lop::model::load(MODEL, &Default::default()).unwrap();
        let pubs: Vec<&CameraPub> = pubs.iter().collect();
        for k in 0..4 {
            let got = round(&pubs, 100 + 10 * k, Duration::from_millis(300), &results, &model, deadline);
            assert!(got.values().all(|r| !r.fallback), "{:?}", got.values().map(|r| &r.fallback_reason).collect::<Vec<_>>());
        }
        assert!(edge.counts().inferences >= 2, "the edge served the cameras' frames: {:?}", edge.counts());
    })
    .await
    .unwrap();
    assert_eq!(svc.open_sessions(), 2, "one fleet session per camera");
    let summary = robot.stop(Duration::from_secs(20)).await;
    assert!(summary.answered >= 8 && summary.fallbacks == 0, "{summary:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

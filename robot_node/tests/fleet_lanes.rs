//! `lop_robot` in fleet mode with lanes (`edge.lanes: 3`), in one process with hiroz: two edges
//! found only by their load reports, each slowed so that one frame holds it a while; a camera
//! bursts frames faster than one edge answers. The node keeps several frames in flight, each
//! lane with sessions of its own (`<robot_id>.lane<k>`), and publishes every answered frame in
//! frame order with the unsplit model's outputs.
#![allow(clippy::unwrap_used)]

use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;

use common::{assert_outputs_equal, free_port, image, image_bytes};
use hiroz::Builder as _;
use hiroz_msgs::sensor_msgs::Image;
use lop::plan::Side;
use lop_msgs::key::SessionKeys;
use lop_msgs::ros::msg::InferenceResult;
use lop_runtime::edge::{EdgeModel, EdgeOptions, EdgeService};
use lop_runtime::fleet::{REPORT_PERIOD, start_reporter};
use lop_runtime::zenoh_link::{EdgeAcceptor, ZenohConfig};
use lop_runtime::zenoh_service::serve_zenoh;
use robot_node::backend::hiroz::HirozRos;
use robot_node::config::{ProfileSource, RobotConfig};
use robot_node::convert::{ChannelOrder, Fit, ImageTarget, ImageView, image_to_chw};
use robot_node::params::{ParamValue, Params};

const MODEL: &str = "zoo:resnet18";

/// The unsplit model's outputs on `img` converted as the node converts it (224x224, letterbox).
fn reference(g: &lop::graph::Graph, img: &Image) -> Vec<tch::Tensor> {
    let data = image_bytes(img);
    let view =
        ImageView { width: img.width, height: img.height, encoding: &img.encoding, is_bigendian: false, step: img.step, data: &data };
    let target = ImageTarget { height: 224, width: 224, channels: 3, order: ChannelOrder::Rgb, fit: Fit::Letterbox { pad: 0 } };
    let chw = image_to_chw(&view, &target).unwrap();
    let input = tch::Tensor::from_slice(&chw).reshape([1, 3, 224, 224]);
    lop::exec::run_whole(g, &[input]).unwrap().outputs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lanes_keep_frames_in_flight_over_two_edges_and_publish_in_order() {
    let dir = std::env::temp_dir().join(format!("lop-robot-lanes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ros_ep, site_ep) = (format!("tcp/127.0.0.1:{}", free_port()), format!("tcp/127.0.0.1:{}", free_port()));
    let yaml = format!(
        "lop_robot:\n  ros__parameters:\n    domain_id: 0\n    router_endpoint: \"{ros_ep}\"\n    embedded_router: true\n    \
         edge:\n      endpoint: \"{site_ep}\"\n      mode: fleet\n      lanes: 3\n      deadline_ms: 20000.0\n    \
         model:\n      source: \"{MODEL}\"\n      id: resnet18\n    method: server-only\n    \
         table:\n      buckets: \"0,2,8,30\"\n    image:\n      fit: letterbox\n    cache_dir: \"{}\"\n    diagnostics_period_s: 0.2\n    deadline_slack_ms: 20000.0\n",
        dir.display()
    );
    let mut params = Params::from_yaml_str("lop_robot", &yaml, "test").unwrap();
    params.set("robot_id", ParamValue::Str("lanes-robot".into()));
    let cfg = RobotConfig::from_params(&mut params).unwrap();
    assert_eq!(cfg.fleet_lanes, 3);

    // The site: a router, two edges on it in their own key spaces, found by their reports. Each
    // is 10x slower than this machine (waiting, not computing): one frame holds it a while.
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let robot = ProfileSource::Synthetic.load(&g, Side::Robot).unwrap();
    let server = ProfileSource::Synthetic.load(&g, Side::Server).unwrap();
    let spec = cfg.table.spec(&g, &robot, &server).unwrap();
    let _router = ZenohConfig::router(vec![site_ep.clone()]).open().await.unwrap();
    let mut edges = Vec::new();
    for id in ["edge-a", "edge-b"] {
        let session = ZenohConfig::client(vec![site_ep.clone()]).open().await.unwrap();
        let model = EdgeModel { id: "resnet18".into(), source: MODEL.into(), load: Default::default(), server_profile: server.clone() };
        let svc = EdgeService::start(EdgeOptions {
            models: vec![model],
            robot_profiles: vec![robot.clone()],
            profiles_dir: None,
            spec: spec.clone(),
            cache_dir: dir.clone(),
            replicas: 1,
            device: tch::Device::Cpu,
            limits: Default::default(),
            hello_timeout: Duration::from_secs(10),
            table_wait: Duration::from_secs(60),
            dilation: 10.0,
            memory_budget: None,
        })
        .await
        .unwrap();
        let task = serve_zenoh(svc.clone(), EdgeAcceptor::on(&session, SessionKeys::fleet(id).unwrap()).await.unwrap());
        let reports = start_reporter(&session, id, svc.clone(), REPORT_PERIOD, Box::new(|| None)).await.unwrap();
        edges.push((svc, task, reports, session));
    }

    let (settings, declared) = (cfg.ros.clone(), params.declared().to_vec());
    let ros = tokio::task::spawn_blocking(move || HirozRos::open(&settings, "lop_robot", &[], &declared, None)).await.unwrap().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let node = tokio::spawn(robot_node::robot::run(cfg.clone(), std::sync::Arc::new(ros), async move {
        let _ = stop_rx.await;
    }));
    let mut peer = cfg.ros.clone();
    peer.embedded_router = false;
    let test_node = tokio::task::spawn_blocking(move || HirozRos::open(&peer, "lanes_camera", &[], &[], None)).await.unwrap().unwrap();
    let n = test_node.node();
    let camera = n.create_pub::<Image>("/camera/image_raw").build().unwrap();
    let (res_tx, results) = mpsc::channel();
    let _rs = n.create_sub::<InferenceResult>("/lop/inference").build_with_callback(move |r| drop(res_tx.send(r))).unwrap();

    let svcs: Vec<EdgeService> = edges.iter().map(|e| e.0.clone()).collect();
    let blocking = tokio::task::spawn_blocking(move || {
        let model = lop::model::load(MODEL, &Default::default()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        // Until every lane has a session with both edges (a lane's first frame opens them):
        // three frames at once, so that each lane takes one, each answered exactly.
        let mut sec = 100;
        while svcs.iter().map(|s| s.counts().sessions).sum::<u64>() < 6 && Instant::now() < deadline {
            let imgs: Vec<Image> = (0..3).map(|i| image(224, 224, 224 * 3, sec + i, (sec + i) as u32)).collect();
            for img in &imgs {
                camera.publish(img).unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
            while let Ok(r) = results.recv_timeout(Duration::from_secs(3)) {
                let k = usize::try_from(r.header.stamp.sec - sec).unwrap_or(usize::MAX);
                if let Some(img) = imgs.get(k) {
                    assert_outputs_equal(&r, &reference(&model, img));
                }
            }
            sec += 3;
        }
        let sessions: Vec<u64> = svcs.iter().map(|s| s.counts().sessions).collect();
        assert!(sessions.iter().sum::<u64>() >= 6, "three lanes, each with a session at both edges: {sessions:?}");
        while results.try_recv().is_ok() {}
        // A burst: 9 frames 40 ms apart, faster than one edge answers.
        let burst: Vec<Image> = (0..9).map(|i| image(224, 224, 224 * 3, 1000 + i, 7 * i as u32)).collect();
        for img in &burst {
            camera.publish(img).unwrap();
            std::thread::sleep(Duration::from_millis(40));
        }
        let mut got = Vec::new();
        while Instant::now() < deadline {
            match results.recv_timeout(Duration::from_secs(3)) {
                Ok(r) if r.header.stamp.sec >= 1000 => got.push(r),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let stamps: Vec<i32> = got.iter().map(|r| r.header.stamp.sec).collect();
        assert!(stamps.windows(2).all(|w| w[0] < w[1]), "results leave in frame order: {stamps:?}");
        for r in &got {
            let img = &burst[(r.header.stamp.sec - 1000) as usize];
            assert_outputs_equal(r, &reference(&model, img));
            assert!(!r.fallback, "{}", r.fallback_reason);
        }
        stamps
    });
    let stamps = blocking.await.unwrap();
    let _ = stop_tx.send(());
    let summary = tokio::time::timeout(Duration::from_secs(20), node).await.unwrap().unwrap().unwrap();
    let served: Vec<u64> = edges.iter().map(|e| e.0.counts().inferences).collect();
    eprintln!("lop_robot lanes: burst of 9 frames, {} answered {stamps:?}, edges served {served:?}; {summary:?}", stamps.len());
    // One lane would answer the first frame and the newest at most (the mailbox holds one);
    // with three lanes frames overlap on both edges.
    assert!(stamps.len() >= 4, "with three lanes more of the burst is answered: {stamps:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

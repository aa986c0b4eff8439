//! Placement under a memory budget (EPARA's placement) over Zenoh on loopback: an edge whose
//! budget holds one of its two models preloads the first and reports the second cold; a fleet
//! robot asking for the cold one runs alone, has the edge load it (unloading the idle one), and
//! is then served split and exactly. A model larger than the whole budget is a start-up error.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{MODEL, Setup, assert_exact, free_port, setup_model, tempdir};
use lop::fleet::ModelCost;
use lop_msgs::key::SessionKeys;
use lop_runtime::client::ClientOptions;
use lop_runtime::edge::{EdgeModel, EdgeOptions, EdgeService};
use lop_runtime::fleet::{AloneWhy, FleetClient, REPORT_PERIOD, Routed, STALE_AFTER, start_reporter};
use lop_runtime::zenoh_link::{EdgeAcceptor, ZenohConfig};
use lop_runtime::zenoh_service::serve_zenoh;

const SMALL: &str = "zoo:mobilenet_v2";

fn options(big: &Setup, small: &Setup, cache: &std::path::Path, budget: u64) -> EdgeOptions {
    let model = |id: &str, source: &str, s: &Setup| EdgeModel {
        id: id.into(),
        source: source.into(),
        load: Default::default(),
        server_profile: s.server.clone(),
    };
    EdgeOptions {
        models: vec![model("resnet18", MODEL, big), model("mobilenet_v2", SMALL, small)],
        robot_profiles: vec![big.robot.clone(), small.robot.clone()],
        profiles_dir: None,
        spec: big.spec.clone(),
        cache_dir: cache.to_path_buf(),
        replicas: 1,
        device: tch::Device::Cpu,
        limits: Default::default(),
        hello_timeout: Duration::from_secs(5),
        table_wait: Duration::from_secs(60),
        dilation: 1.0,
        memory_budget: Some(budget),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_model_is_loaded_when_robots_ask_and_the_idle_one_makes_room() {
    let (big, small) = (setup_model(MODEL), setup_model(SMALL));
    let dir = tempdir();
    // resnet18 holds 46.8 MB of weights, mobilenet_v2 14.0 MB: 50 MB holds either, not both.
    let mb = 1_000_000;
    let too_small = EdgeService::start(options(&big, &small, &dir, 20 * mb)).await.unwrap_err().to_string();
    assert!(too_small.contains("resnet18") && too_small.contains("more than the memory budget"), "{too_small}");
    let svc = EdgeService::start(options(&big, &small, &dir, 50 * mb)).await.unwrap();
    let warm = |svc: &EdgeService| svc.model_loads().iter().map(|m| (m.id.clone(), m.warm)).collect::<Vec<_>>();
    assert_eq!(warm(&svc), [("resnet18".to_string(), true), ("mobilenet_v2".to_string(), false)], "preloaded in order");

    let endpoint = format!("tcp/127.0.0.1:{}", free_port());
    let _router = ZenohConfig::router(vec![endpoint.clone()]).open().await.unwrap();
    let session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let _task = serve_zenoh(svc.clone(), EdgeAcceptor::on(&session, SessionKeys::fleet("edge-a").unwrap()).await.unwrap());
    let _reports = start_reporter(&session, "edge-a", svc.clone(), REPORT_PERIOD, Box::new(|| None)).await.unwrap();

    let g = lop::model::load(SMALL, &Default::default()).unwrap();
    let cost = ModelCost::derive("mobilenet_v2", &g, &small.robot, &small.server, Default::default()).unwrap();
    let robot_session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let mut opts = ClientOptions::new("placement-robot", "mobilenet_v2");
    opts.hello_timeout = Duration::from_secs(5);
    opts.retry_interval = Duration::from_millis(100);
    opts.deadline_slack = Duration::from_secs(3);
    let loader = Arc::new(|| lop::model::load(SMALL, &Default::default()));
    let mut robot = FleetClient::new(robot_session, opts, small.table.clone(), cost, loader, STALE_AFTER).await.unwrap();
    let t0 = Instant::now();
    while robot.view().edges().is_empty() && t0.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(robot.view().edges().len(), 1);

    // Frames run on the robot, exactly, until the edge has loaded the model; then split there.
    let inputs = || small.inputs.iter().map(|t| t.shallow_clone()).collect::<Vec<_>>();
    let deadline = Duration::from_secs(10);
    let asked = Instant::now();
    let (mut alone, mut served) = (0, None);
    while asked.elapsed() < Duration::from_secs(30) {
        let r = robot.infer(inputs(), 30.0, deadline).await.unwrap();
        assert_exact(&r.inference.outputs, &small.whole, &format!("frame routed {:?}", r.routed));
        match r.routed {
            Routed::Robot(why) => {
                // Cold on the only edge, then warm but its session not yet welcomed.
                assert!(matches!(why, AloneWhy::NoEdgeServes | AloneWhy::NotConnected), "{why:?}");
                alone += 1;
            }
            Routed::Edge(e) => {
                assert_eq!(e, "edge-a");
                assert!(!r.inference.stats.fallback, "{:?}", r.inference.stats.fallback_reason);
                served = Some(asked.elapsed());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let served = served.unwrap_or_else(|| panic!("never served at the edge; warm: {:?}", warm(&svc)));
    eprintln!("placement: split at the edge {:.2} s after the first request ({alone} frames ran alone meanwhile)", served.as_secs_f64());
    assert!(alone >= 1, "the first frame cannot have been split: the model was cold");
    assert_eq!(warm(&svc), [("resnet18".to_string(), false), ("mobilenet_v2".to_string(), true)], "the idle model made room");
    assert!(svc.counts().rejected >= 1, "{:?}", svc.counts());
}

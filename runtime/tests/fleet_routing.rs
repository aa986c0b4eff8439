//! A fleet robot over Zenoh on loopback: two edges behind a site router, each in its own key
//! space; a robot that knows only the router routes every inference by EPARA's rule, gets the
//! unsplit model's outputs from whichever edge (or from itself when no edge meets the deadline),
//! and when the edge it uses dies, loses no frame and is served by the other within a second.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{MODEL, assert_exact, edge, free_port, setup, tempdir};
use lop_msgs::key::SessionKeys;
use lop_runtime::client::ClientOptions;
use lop_runtime::fleet::{AloneWhy, FleetClient, REPORT_PERIOD, Routed, STALE_AFTER, start_reporter};
use lop_runtime::zenoh_link::{EdgeAcceptor, ZenohConfig};
use lop_runtime::zenoh_service::serve_zenoh;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_robot_routes_every_frame_exactly_and_survives_an_edge() {
    // Alone on the two cores, as when this file was its own test binary (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let s = setup();
    let dir = tempdir();
    let endpoint = format!("tcp/127.0.0.1:{}", free_port());
    let router = ZenohConfig::router(vec![endpoint.clone()]).open().await.unwrap();
    let mut edges = HashMap::new();
    for id in ["edge-a", "edge-b"] {
        let session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
        let svc = edge(&s, &dir).await;
        let acceptor = EdgeAcceptor::on(&session, SessionKeys::fleet(id).unwrap()).await.unwrap();
        let task = serve_zenoh(svc.clone(), acceptor);
        let reports = start_reporter(&session, id, svc.clone(), REPORT_PERIOD, Box::new(|| None)).await.unwrap();
        edges.insert(id, (session, svc, task, reports));
    }

    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let cost = lop::sim::model_cost("resnet18", &g, &s.robot, &s.server, Default::default()).unwrap();
    let robot_session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let mut opts = ClientOptions::new("fleet-robot", "resnet18");
    opts.hello_timeout = Duration::from_secs(10);
    opts.retry_interval = Duration::from_millis(100);
    opts.deadline_slack = Duration::from_secs(3);
    let loader = Arc::new(|| lop::model::load(MODEL, &Default::default()));
    let mut robot = FleetClient::new(robot_session.clone(), opts, s.table.clone(), cost, loader, STALE_AFTER).await.unwrap();
    let t0 = Instant::now();
    while robot.view().edges().len() < 2 && t0.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(robot.view().edges().len(), 2, "{:?}", robot.view().counts());

    let inputs = || s.inputs.iter().map(|t| t.shallow_clone()).collect::<Vec<_>>();
    let deadline = Duration::from_secs(10);
    let mut used = HashMap::<String, u64>::new();
    for _ in 0..6 {
        let r = robot.infer(inputs(), 30.0, deadline).await.unwrap();
        let Routed::Edge(e) = &r.routed else { panic!("routed to the robot with two idle edges: {:?}", r.routed) };
        assert!(!r.inference.stats.fallback, "{:?}", r.inference.stats.fallback_reason);
        assert_exact(&r.inference.outputs, &s.whole, &format!("routed to {e}"));
        *used.entry(e.clone()).or_default() += 1;
    }
    // Each edge heard only the frames routed to it (separate key spaces).
    for (id, (_, svc, _, _)) in &edges {
        assert_eq!(svc.counts().inferences, used.get(*id).copied().unwrap_or(0), "{id}: {used:?}");
    }

    // With no bandwidth no edge can have the frame back in time: the robot runs it, exactly.
    let r = robot.infer(inputs(), 0.0, deadline).await.unwrap();
    assert_eq!(r.routed, Routed::Robot(AloneWhy::Deadline));
    assert_eq!(r.inference.stats.method, "robot-only");
    assert_exact(&r.inference.outputs, &s.whole, "on the robot");

    // A robot asking for a model no edge holds runs it itself, told why.
    let mut opts = ClientOptions::new("fleet-robot-2", "vgg_nowhere");
    opts.hello_timeout = Duration::from_secs(2);
    let loader = Arc::new(|| lop::model::load(MODEL, &Default::default()));
    let cost = lop::sim::model_cost("vgg_nowhere", &g, &s.robot, &s.server, Default::default()).unwrap();
    let mut stranger = FleetClient::new(robot_session.clone(), opts, s.table.clone(), cost, loader, STALE_AFTER).await.unwrap();
    let t0 = Instant::now();
    while stranger.view().edges().len() < 2 && t0.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = stranger.infer(inputs(), 30.0, deadline).await.unwrap();
    assert_eq!(r.routed, Routed::Robot(AloneWhy::NoEdgeServes));
    assert_exact(&r.inference.outputs, &s.whole, "a model no edge holds, on the robot");
    drop(stranger);

    // The edge in use dies (its Zenoh session closes): no frame is lost, and within a second
    // the robot is served by the other edge.
    let last = used.iter().max_by_key(|(_, n)| **n).map(|(e, _)| e.clone()).unwrap();
    let other = if last == "edge-a" { "edge-b" } else { "edge-a" };
    let (session, _svc, task, reports) = edges.remove(last.as_str()).unwrap();
    drop(reports);
    task.abort();
    session.close().await.unwrap();
    let killed = Instant::now();
    let mut served_by_other_at = None;
    while killed.elapsed() < Duration::from_secs(3) {
        let r = robot.infer(inputs(), 30.0, deadline).await.unwrap();
        assert_exact(&r.inference.outputs, &s.whole, &format!("after {last} died ({:?})", r.routed));
        if r.routed == Routed::Edge(other.to_string()) && !r.inference.stats.fallback {
            served_by_other_at.get_or_insert(killed.elapsed());
        }
    }
    let at = served_by_other_at.expect("the other edge never served after the first died");
    eprintln!("fleet: served by {other} {at:?} after {last} died");
    assert!(at < Duration::from_secs(1), "re-routed after {at:?}");

    for (_, (session, _, task, reports)) in edges {
        drop(reports);
        task.abort();
        session.close().await.unwrap();
    }
    robot_session.close().await.unwrap();
    router.close().await.unwrap();
}

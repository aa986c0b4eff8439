//! End to end over Zenoh on loopback: the edge in router mode, a robot in client mode; every
//! method gives the unsplit output; the edge's Zenoh session closed under a stream of inferences
//! (each finished by the robot) and a new edge taking over (the robot reconnects).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::{MODEL, assert_exact, edge, free_port, setup, tempdir};
use lop_runtime::client::{ClientOptions, RobotClient};
use lop_runtime::exec::Worker;
use lop_runtime::zenoh_link::{EdgeAcceptor, ZenohConfig};
use lop_runtime::zenoh_service::{ZenohConnector, serve_zenoh};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_zenoh_exact_outputs_fallback_and_reconnect() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let s = setup();
    let dir = tempdir();
    let endpoint = format!("tcp/127.0.0.1:{}", free_port());
    let start_edge = async || {
        let session = ZenohConfig::router(vec![endpoint.clone()]).open().await.unwrap();
        let acceptor = EdgeAcceptor::new(&session).await.unwrap();
        let svc = edge(&s, &dir).await;
        (session, serve_zenoh(svc.clone(), acceptor), svc)
    };
    let (edge_session, edge_task, svc) = start_edge().await;

    let robot_session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let (worker, loaded) = Worker::spawn("robot", || lop::model::load(MODEL, &Default::default())).await.unwrap();
    let mut opts = ClientOptions::new("zenoh-robot", "resnet18");
    opts.retry_interval = Duration::from_millis(100);
    opts.hello_timeout = Duration::from_secs(10);
    // Exactness must not hinge on timing under CI load (see inprocess.rs).
    opts.deadline_slack = Duration::from_secs(3);
    let mut c = RobotClient::new(
        ZenohConnector::new(robot_session.clone(), "zenoh-robot"),
        opts,
        worker,
        loaded.meta,
        &loaded.hash,
        s.table.clone(),
    )
    .await
    .unwrap();
    assert!(c.connected(), "the robot reaches the edge over Zenoh");
    for method in ["lop", "server-only", "layer-partition"] {
        c.set_method(method);
        for bw in [2.0, 30.0] {
            let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), bw).await.unwrap();
            assert!(!r.stats.fallback, "{method} at {bw}: {:?}", r.stats.fallback_reason);
            assert_exact(&r.outputs, &s.whole, &format!("{method} at {bw} MB/s over Zenoh"));
        }
    }
    assert_eq!(svc.counts().dropped.total(), 0, "{:?}", svc.counts());

    // The edge goes away: the robot finishes every inference itself, exactly.
    c.set_method("server-only");
    edge_task.abort();
    edge_session.close().await.unwrap();
    drop(edge_session);
    for i in 0..4 {
        let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), 30.0).await.unwrap();
        assert!(r.stats.fallback, "inference {i} without an edge");
        assert_exact(&r.outputs, &s.whole, "fallback");
    }

    // A new edge on the same endpoint: the robot's client session reconnects to the router and
    // its next inferences use the edge again. Zenoh's client retries the router with backoff
    // (about 8 s measured here), so allow up to 30 s.
    let (_edge_session, _edge_task, _svc) = start_edge().await;
    let mut remote = 0;
    for _ in 0..120 {
        let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), 30.0).await.unwrap();
        assert_exact(&r.outputs, &s.whole, "after the restart");
        if !r.stats.fallback {
            remote += 1;
            if remote == 3 {
                break;
            }
        } else {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    assert_eq!(remote, 3, "the robot used the restarted edge");
}

/// An edge of another protocol version (played by a raw Zenoh session that answers every Hello
/// with a frame of version 2): the robot is not served, says which versions the two ends speak,
/// and runs every inference itself, exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_of_another_protocol_version_is_named_and_the_robot_runs_alone() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    use lop_msgs::Frame;
    use lop_msgs::key::SessionKeys;
    use lop_msgs::protocol::{PROTOCOL_VERSION, Reject, RejectReason};

    let s = setup();
    let endpoint = format!("tcp/127.0.0.1:{}", free_port());
    let edge_session = ZenohConfig::router(vec![endpoint.clone()]).open().await.unwrap();
    let keys = SessionKeys::single();
    let _token = edge_session.liveliness().declare_token(keys.token()).await.unwrap();
    let hellos = edge_session.declare_subscriber(keys.all_hello()).await.unwrap();
    let answering = edge_session.clone();
    let fake_edge = tokio::spawn(async move {
        let keys = SessionKeys::single();
        while let Ok(sample) = hellos.recv_async().await {
            let Some(robot) = keys.robot_of_hello(sample.key_expr().as_str()) else { continue };
            let text = "protocol version 1 refused".to_string();
            let mut reject =
                Frame::Reject(Reject { reason: RejectReason::UnsupportedVersion, text, server_profile: Vec::new() }).encode().unwrap();
            reject[4..6].copy_from_slice(&(PROTOCOL_VERSION + 1).to_le_bytes());
            answering.put(keys.down(robot).unwrap(), reject).await.unwrap();
        }
    });

    let robot_session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let (worker, loaded) = Worker::spawn("robot", || lop::model::load(MODEL, &Default::default())).await.unwrap();
    let mut opts = ClientOptions::new("old-robot", "resnet18");
    opts.hello_timeout = Duration::from_secs(10);
    let mut c =
        RobotClient::new(ZenohConnector::new(robot_session.clone(), "old-robot"), opts, worker, loaded.meta, &loaded.hash, s.table.clone())
            .await
            .unwrap();
    assert!(!c.connected(), "served by an edge of another protocol version");
    let why = c.last_connect_error().unwrap_or_default().to_string();
    let (theirs, ours) = (PROTOCOL_VERSION + 1, PROTOCOL_VERSION);
    assert!(
        why.contains(&format!("the edge speaks protocol version {theirs}, this robot speaks {ours}")),
        "the robot does not say why it runs alone: {why:?}"
    );
    c.set_method("lop");
    let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), 30.0).await.unwrap();
    assert!(r.stats.fallback, "an inference was split with an edge of another version");
    assert_exact(&r.outputs, &s.whole, "alone beside an edge of another version");
    fake_edge.abort();
    robot_session.close().await.unwrap();
    edge_session.close().await.unwrap();
}

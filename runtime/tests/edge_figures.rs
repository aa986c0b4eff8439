//! The edge's figures for an inference (its compute time and the upload as it saw it, from its
//! Done) reach the robot with the inference, also where the robot has nothing left to compute
//! after the edge's last band (server-only: that band is the output, and the Done trails it).
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{MODEL, assert_exact, edge, setup, tempdir};

use std::collections::HashMap;
use std::time::Duration;

use lop_runtime::client::{ClientOptions, RobotClient};
use lop_runtime::exec::Worker;
use lop_runtime::local::Switchboard;
use lop_runtime::{ShapedConfig, Trace};

/// Every inference the edge answered, server-only and LOP plans alike, carries the edge's compute
/// time as the edge measured it (the same nanoseconds as its own report of the inference) and
/// the upload as it saw it; an inference that did not use the link carries none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_inference_the_edge_answered_carries_its_compute_figure() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let s = setup();
    let dir = tempdir();
    let board = Switchboard::new();
    let edge = board.plug(edge(&s, &dir).await);
    let mut served = edge.service().served();
    let link = ShapedConfig::symmetric(Trace::constant(200.0).unwrap()).with_latency(Duration::from_millis(1));
    let mut opts = ClientOptions::new("robot-1", "resnet18");
    opts.hello_timeout = Duration::from_secs(5);
    // A loaded machine must not turn a slow inference into a fallback (which has no figure).
    opts.deadline_slack = Duration::from_secs(20);
    let (worker, loaded) = Worker::spawn("robot", || lop::model::load(MODEL, &Default::default())).await.unwrap();
    let mut c = RobotClient::new(board.connector(link), opts, worker, loaded.meta, &loaded.hash, s.table.clone()).await.unwrap();
    assert!(c.connected(), "precondition: the robot reached the edge: {:?}", c.last_connect_error());
    let mut answered = HashMap::new();
    for method in ["server-only", "lop"] {
        c.set_method(method);
        for bw in [2.0, 8.0, 30.0, 30.0] {
            let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), bw).await.unwrap();
            let what = format!("{method} at {bw} MB/s, inference {}", r.stats.id);
            assert!(!r.stats.fallback, "{what}: {:?}", r.stats.fallback_reason);
            assert_exact(&r.outputs, &s.whole, &what);
            if r.stats.bytes_up == 0 {
                assert_eq!(r.stats.server_compute_s, None, "{what}: not sent, yet a figure: {:?}", r.stats);
                continue;
            }
            let compute = r.stats.server_compute_s.unwrap_or_else(|| panic!("{what}: no edge compute figure: {:?}", r.stats));
            assert!(compute > 0.0 && r.stats.upload_s.is_some_and(|u| u > 0.0), "{what}: {:?}", r.stats);
            answered.insert(r.stats.id, (what, compute));
        }
    }
    // Server-only sends the frame in every bucket: at least its four used the edge.
    assert!(answered.len() >= 4, "{} inferences used the edge", answered.len());
    // The edge's own report of each (sent right after its Done), bounded in count and time.
    for _ in 0..answered.len() * 4 {
        if answered.is_empty() {
            break;
        }
        let e = tokio::time::timeout(Duration::from_secs(10), served.recv()).await.expect("the edge reports each inference").unwrap();
        if let Some((what, compute)) = answered.remove(&e.inference_id) {
            // The Done carries whole nanoseconds.
            assert!(
                (compute - e.server_compute_s).abs() <= 1e-9,
                "{what}: the robot has {compute} s, the edge measured {} s",
                e.server_compute_s
            );
        }
    }
    assert!(answered.is_empty(), "the edge never reported {answered:?}");
}

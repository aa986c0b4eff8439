//! A stream spread over two edges: one lane is held to one edge's pace; three lanes keep frames
//! in flight on both, published in frame order with every output exact.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{MODEL, assert_exact, edge_slowed, free_port, setup, tempdir};
use lop_msgs::key::SessionKeys;
use lop_runtime::client::ClientOptions;
use lop_runtime::fleet::{FleetClient, FleetStream, REPORT_PERIOD, Routed, STALE_AFTER, start_reporter};
use lop_runtime::zenoh_link::{EdgeAcceptor, ZenohConfig};
use lop_runtime::zenoh_service::serve_zenoh;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_lanes_spread_a_stream_over_two_edges_in_frame_order() {
    // Alone on the two cores, as when this file was its own test binary (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let s = setup();
    let dir = tempdir();
    let endpoint = format!("tcp/127.0.0.1:{}", free_port());
    let router = ZenohConfig::router(vec![endpoint.clone()]).open().await.unwrap();
    let mut edges = Vec::new();
    for id in ["edge-a", "edge-b"] {
        let session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
        // Eight times slower than this machine (mostly waiting, so the two edges do not compete
        // for its cores): one edge's pace is what limits a lane.
        let svc = edge_slowed(&s, &dir, vec![s.robot.clone()], Duration::from_secs(60), 8.0).await;
        let task = serve_zenoh(svc.clone(), EdgeAcceptor::on(&session, SessionKeys::fleet(id).unwrap()).await.unwrap());
        let reports = start_reporter(&session, id, svc, REPORT_PERIOD, Box::new(|| None)).await.unwrap();
        edges.push((session, task, reports));
    }
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let mut cost = lop::sim::model_cost("resnet18", &g, &s.robot, &s.server, Default::default()).unwrap();
    // The synthetic robot profile knows nothing of this machine: the robot's own time per frame
    // is measured (20x, as the lanes are dilated), as a real robot's profile would say.
    let t0 = Instant::now();
    lop::exec::run_whole(&g, &s.inputs).unwrap();
    cost.robot_s = t0.elapsed().as_secs_f64() * 20.0;
    let robot_session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let lane = async |k: usize| {
        let mut opts = ClientOptions::new(&format!("camera-lane-{k}"), "resnet18");
        opts.hello_timeout = Duration::from_secs(10);
        opts.deadline_slack = Duration::from_secs(5);
        opts.method = "server-only".into();
        // A robot slower than the edges: what spreads is the edges' work, not the robot's.
        opts.dilation = 20.0;
        let loader = Arc::new(|| lop::model::load(MODEL, &Default::default()));
        let c = FleetClient::new(robot_session.clone(), opts, s.table.clone(), cost.clone(), loader, STALE_AFTER).await.unwrap();
        let t0 = Instant::now();
        while c.view().edges().len() < 2 && t0.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        c
    };
    let inputs = || s.inputs.iter().map(|t| t.shallow_clone()).collect::<Vec<_>>();
    // A deadline a little over one inference at an idle edge: a second frame on a busy edge
    // would miss it, so lanes spread.
    let deadline = Duration::from_millis(700);
    let run = async |stream: &mut FleetStream, frames: u64| {
        let t0 = Instant::now();
        let mut published = Vec::new();
        for seq in 0..frames {
            published.extend(stream.submit(seq, inputs(), 30.0, deadline).await.unwrap());
        }
        published.extend(stream.drain().await.unwrap());
        (published, t0.elapsed())
    };
    let check = |published: &[lop_runtime::fleet::StreamResult], frames: u64| {
        assert_eq!(published.len() as u64, frames, "every frame is published once");
        let mut used = HashMap::<String, usize>::new();
        let mut last_on_time = None;
        for r in published {
            let inf = r.result.as_ref().unwrap();
            assert_exact(&inf.inference.outputs, &s.whole, &format!("frame {}", r.seq));
            if let Routed::Edge(e) = &inf.routed {
                *used.entry(e.clone()).or_default() += 1;
            }
            if !r.late {
                assert!(last_on_time.is_none_or(|l| r.seq > l), "frames on time leave in order: {} after {last_on_time:?}", r.seq);
                last_on_time = Some(r.seq);
            }
        }
        used
    };
    // Warm up both lanes' sessions with each edge.
    let mut warm = FleetStream::new(vec![lane(9).await]).unwrap();
    run(&mut warm, 2).await;
    let frames = 16;
    let mut one = FleetStream::new(vec![lane(0).await]).unwrap();
    run(&mut one, 2).await;
    let (published, one_took) = run(&mut one, frames).await;
    check(&published, frames);
    let mut three = FleetStream::new(vec![lane(1).await, lane(2).await, lane(3).await]).unwrap();
    run(&mut three, 4).await;
    let (published, three_took) = run(&mut three, frames).await;
    let used = check(&published, frames);
    let fallbacks = published.iter().filter(|r| r.result.as_ref().is_ok_and(|i| i.inference.stats.fallback)).count();
    let late = published.iter().filter(|r| r.late).count();
    let (r1, r3) = (frames as f64 / one_took.as_secs_f64(), frames as f64 / three_took.as_secs_f64());
    eprintln!(
        "fleet stream: one lane {r1:.1} frames/s, three lanes {r3:.1} frames/s ({:.2}x), edges used {used:?}, fallbacks {fallbacks}, late {late}",
        r3 / r1
    );
    assert!(used.len() == 2, "the stream used both edges: {used:?}");
    // Measured alone 1.3x to 1.8x, and 1.19x once in CI beside other work (the figure is printed
    // above). Three lanes held to one edge's pace would run at most 1.0x: the bound only catches
    // a stream that does not spread at all.
    assert!(r3 >= 1.1 * r1, "three lanes {r3:.1}/s against one lane {r1:.1}/s");

    for (session, task, reports) in edges {
        drop(reports);
        task.abort();
        session.close().await.unwrap();
    }
    robot_session.close().await.unwrap();
    router.close().await.unwrap();
}

//! A large site's hearing over Zenoh on loopback (DESIGN.md section 10): six edges report at
//! 10 Hz; the site's aggregator republishes them as digests of capacity-balanced shards of two;
//! a robot hearing one shard sees exactly its shard's edges at one message per period (a sixth
//! of what a direct view receives), a robot hearing every shard sees the whole site, and an edge
//! that stops reporting leaves both within a second.
#![allow(clippy::unwrap_used)]

use crate::common::{free_port, within};

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lop::fleet::shard::{partition, robot_hash, robot_shards};
use lop_msgs::key::{edge_load, edge_token};
use lop_msgs::load::{EdgeLoad, ModelLoad};
use lop_runtime::fleet::{FleetView, REPORT_PERIOD, STALE_AFTER, start_aggregator};
use lop_runtime::zenoh_link::ZenohConfig;

fn ids(view: &FleetView) -> BTreeSet<String> {
    view.edges().into_iter().map(|e| e.load.edge).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_hear_their_shards_digest_at_one_message_a_period() {
    let _heavy = crate::HEAVY.lock().await;
    let endpoint = format!("tcp/127.0.0.1:{}", free_port());
    let router = ZenohConfig::router(vec![endpoint.clone()]).open().await.unwrap();
    // Six edges, server times 4, 4, 8, 8, 16, 16 ms: capacities 250, 250, 125, 125, 62.5, 62.5.
    let server_s = [0.004f32, 0.004, 0.008, 0.008, 0.016, 0.016];
    let edges: Vec<String> = (0..6).map(|k| format!("gpu-{k}")).collect();
    let session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let mut running = Vec::new();
    for (k, id) in edges.iter().enumerate() {
        let token = session.liveliness().declare_token(edge_token(id).unwrap()).await.unwrap();
        let on = Arc::new(AtomicBool::new(true));
        let (s, id, on2) = (session.clone(), id.clone(), on.clone());
        let task = tokio::spawn(async move {
            let key = edge_load(&id).unwrap();
            for seq in 1u64.. {
                if on2.load(Ordering::Relaxed) {
                    let m =
                        ModelLoad { model: "m".into(), queued_s: 0.0, idle_goodput: 10.0, server_s: server_s[k], in_flight: 0, warm: true };
                    let load = EdgeLoad { edge: id.clone(), seq, utilisation: 0.1, gpu_free_bytes: None, models: vec![m] };
                    s.put(&key, load.encode().unwrap()).await.unwrap();
                }
                tokio::time::sleep(REPORT_PERIOD).await;
            }
        });
        running.push((token, on, task));
    }
    let aggregator_session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let _aggregator = start_aggregator(&aggregator_session, 2, REPORT_PERIOD, STALE_AFTER).await.unwrap();

    // The shards the aggregator draws: three of two, each of one capacity total.
    let caps: Vec<f64> = server_s.iter().map(|s| 1.0 / f64::from(*s)).collect();
    let shards = partition(&caps, 2);
    assert_eq!(shards.len(), 3);
    let robot_session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let direct = FleetView::new(&robot_session, STALE_AFTER).await.unwrap();
    let one = FleetView::site(&robot_session, "robot-7", 1, STALE_AFTER).await.unwrap();
    let all = FleetView::site(&robot_session, "robot-8", 3, STALE_AFTER).await.unwrap();
    let mine: BTreeSet<String> = shards[robot_shards(robot_hash("robot-7"), 3, 1)[0]].iter().map(|&j| edges[j].clone()).collect();
    let every: BTreeSet<String> = edges.iter().cloned().collect();
    assert!(
        within(Duration::from_secs(10), || ids(&one) == mine && ids(&all) == every).await.is_some(),
        "one {:?} (its shard {mine:?}), all {:?}",
        ids(&one),
        ids(&all)
    );
    assert_eq!(one.shards_heard().len(), 1);
    // The best split into pairs: a fast edge with a slow one twice (312.5), the middle two.
    let mut totals: Vec<f64> = shards.iter().map(|s| s.iter().map(|&j| caps[j]).sum::<f64>().round()).collect();
    totals.sort_by(f64::total_cmp);
    assert_eq!(totals, [250.0, 312.0, 312.0], "{shards:?}");

    // What each hears in two seconds: a direct view every edge's 10 Hz, the site view one
    // digest of its shard per period.
    let (d0, o0, a0) = (direct.counts().reports, one.counts().digests, all.counts().digests);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (d, o, a) = (direct.counts().reports - d0, one.counts().digests - o0, all.counts().digests - a0);
    eprintln!("fleet site: in 2 s a direct view took {d} reports, a one-shard view {o} digests, a three-shard view {a}");
    assert!((90..=150).contains(&d), "direct: {d} reports from six edges at 10 Hz");
    assert!((14..=26).contains(&o), "one shard: {o} digests at 10 Hz");
    assert!((45..=75).contains(&a), "three shards: {a} digests");
    for e in one.edges() {
        assert!(e.age < Duration::from_millis(400), "{} is {:?} old", e.load.edge, e.age);
    }

    // An edge of the one-shard robot's shard stops reporting (killed, say): it leaves both site
    // views within a second, and the other edges stay.
    let gone = mine.iter().next().unwrap().clone();
    let k = edges.iter().position(|e| *e == gone).unwrap();
    running[k].1.store(false, Ordering::Relaxed);
    let took = within(Duration::from_secs(2), || !ids(&one).contains(&gone) && !ids(&all).contains(&gone)).await;
    assert!(took.is_some_and(|t| t < Duration::from_secs(1)), "{gone} left after {took:?}");
    let mut rest = every.clone();
    rest.remove(&gone);
    assert!(within(Duration::from_secs(2), || ids(&all) == rest).await.is_some(), "the rest stay: {:?}", ids(&all));

    for (_, _, task) in running {
        task.abort();
    }
    for s in [session, aggregator_session, robot_session, router] {
        s.close().await.unwrap();
    }
}

//! A large site's hearing over Zenoh on loopback (DESIGN.md section 10): six edges report at
//! 10 Hz; the site's aggregator republishes them as digests of capacity-balanced shards of two;
//! a robot hearing one shard sees exactly its shard's edges at one message per period (a sixth
//! of what a direct view receives), a robot hearing every shard sees the whole site, and an edge
//! that stops reporting leaves both within a second.
#![allow(clippy::unwrap_used)]

use crate::common::{free_port, within};

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use lop_fleet::shard::{partition, robot_hash, robot_shards};
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
    // Reports the edges put, counted as they are put: under load they come slower than 10 Hz,
    // and the window below is judged against what was sent, not against the clock.
    let sent = Arc::new(AtomicU64::new(0));
    for (k, id) in edges.iter().enumerate() {
        let token = session.liveliness().declare_token(edge_token(id).unwrap()).await.unwrap();
        let on = Arc::new(AtomicBool::new(true));
        let (s, id, on2, sent) = (session.clone(), id.clone(), on.clone(), sent.clone());
        let task = tokio::spawn(async move {
            let key = edge_load(&id).unwrap();
            for seq in 1u64.. {
                if on2.load(Ordering::Relaxed) {
                    let m =
                        ModelLoad { model: "m".into(), queued_s: 0.0, idle_goodput: 10.0, server_s: server_s[k], in_flight: 0, warm: true };
                    let load = EdgeLoad { edge: id.clone(), seq, utilisation: 0.1, gpu_free_bytes: None, models: vec![m] };
                    s.put(&key, load.encode().unwrap()).await.unwrap();
                    sent.fetch_add(1, Ordering::Relaxed);
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

    // What each hears while the edges put 120 reports (two seconds at 10 Hz; longer on a loaded
    // machine, at most 20 s): a direct view every report, a site view one digest of each shard
    // it hears per aggregator period, whatever the number of reports in that period. The
    // digests published are counted here too, on their own subscriber, with the period number
    // each carries.
    let published = Arc::new(std::sync::Mutex::new(Vec::<(u16, u64)>::new()));
    let log = published.clone();
    let _digests = robot_session
        .declare_subscriber(format!("{}/**", lop_msgs::key::site_digest(0).trim_end_matches("/0")))
        .callback(move |sample| {
            if let Ok(d) = lop_msgs::site::LoadDigest::decode(&sample.payload().to_bytes()) {
                log.lock().unwrap().push((d.shard, d.seq));
            }
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s0, p0) = (sent.load(Ordering::Relaxed), published.lock().unwrap().len());
    let (d0, o0, a0) = (direct.counts().reports, one.counts().digests, all.counts().digests);
    let t0 = std::time::Instant::now();
    while sent.load(Ordering::Relaxed) - s0 < 120 && t0.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Read together: what was put and published, and what was taken, at one moment (reports
    // and digests in flight then are the tolerance below).
    let (d, o, a) = (direct.counts().reports - d0, one.counts().digests - o0, all.counts().digests - a0);
    let (sent_n, window) = (sent.load(Ordering::Relaxed) - s0, t0.elapsed());
    let window_digests: Vec<(u16, u64)> = published.lock().unwrap()[p0..].to_vec();
    let my_shard = robot_shards(robot_hash("robot-7"), 3, 1)[0] as u16;
    let mine_published = window_digests.iter().filter(|(s, _)| *s == my_shard).count() as u64;
    let seqs: BTreeSet<u64> = window_digests.iter().map(|(_, q)| *q).collect();
    eprintln!(
        "fleet site: while the edges put {sent_n} reports ({:.1} s), a direct view took {d} reports, a one-shard view {o} \
         digests, a three-shard view {a}; the aggregator published {} digests over {} periods",
        window.as_secs_f64(),
        window_digests.len(),
        seqs.len()
    );
    assert!(sent_n >= 120, "the edges put only {sent_n} reports in 20 s");
    // Every report put is heard, up to those in flight at either end of the window.
    assert!(d + 12 >= sent_n && d <= sent_n + 12, "direct: {d} reports taken of {sent_n} put");
    // One digest per shard per period, not one per report: the one-shard view takes its
    // shard's digests and nothing else, the three-shard view all three shards'.
    assert!(o + 2 >= mine_published && o <= mine_published + 2, "one shard: {o} digests taken of {mine_published} published");
    assert!(a + 6 >= window_digests.len() as u64 && a <= window_digests.len() as u64 + 6, "three shards: {a} of {}", window_digests.len());
    assert!(window_digests.len() as u64 <= 3 * seqs.len() as u64, "more than one digest per shard per period");
    assert!(o * 3 < d, "a one-shard view hears a fraction of the reports: {o} digests for {d} reports");
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

//! Soak: eight robots stream 30 fps each into one `lop_edge` process for `LOP_SOAK_SECONDS`
//! (60 in the test command; `scripts/soak.sh` runs 600). Every frame is answered with the
//! unsplit model's output; the resident memory of the edge process and of the robots' process
//! stays bounded from the end of the warm-up to the end of the run: it reaches a new high (by a
//! MiB) in at most a few of its once-a-second readings (a steady leak keeps setting them; an
//! allocator arena or a buffer reaching its high-water mark sets one) and grows by at most 10%
//! in all; the edge serves every robot alike (the most-served robot at most 1.2x the
//! least-served). Bounded in frames and time.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{Edge, OneModelEdge, free_port, rss_bytes};

use lop_runtime::client::{ClientOptions, RobotClient};
use lop_runtime::exec::Worker;
use lop_runtime::zenoh_link::ZenohConfig;
use lop_runtime::zenoh_service::ZenohConnector;

const ROBOTS: usize = 8;
const FPS: u32 = 30;
const MODEL: &str = "zoo:resnet18@32x32";
/// Streaming before the first memory reading: sessions, tables and allocator pools settle.
const WARM_UP: Duration = Duration::from_secs(5);
/// The link every robot assumes (MB/s): a bucket whose plan splits the model with the edge.
const BANDWIDTH_MB_S: f64 = 30.0;
/// Most once-a-second readings in which a process's memory may reach a new high, by more than
/// [`HIGH_STEP`] over the last one counted. The edge rose once by 9.4 MiB, at a time that varied
/// from run to run between 5 and 26 s after the warm-up (a one-time allocation such as a thread's
/// own allocator arena), and to +5.7% beside other tests; a leak of 0.1 MiB/s sets a new high
/// every 10 s, 6 in a minute.
const MOST_NEW_HIGHS: usize = 5;
/// How far a reading must clear the last counted high to count as a new one: the test process
/// keeps every latency it measures (115 KiB over a minute), which must not count.
const HIGH_STEP: u64 = 1 << 20;
/// Most growth of a process's memory over the run, after the warm-up.
const MOST_GROWTH: f64 = 0.10;

/// What one robot saw over the run.
#[derive(Debug, Default, Clone)]
struct Tally {
    /// Frames answered (split with the edge or, marked, by the robot alone).
    answered: usize,
    /// Of those, answered by the split with the edge (not a fallback).
    served: usize,
    /// Camera frames replaced by a newer one before the robot was free (as lop_robot's mailbox
    /// replaces an unread frame): never sent, so never lost in flight.
    replaced: usize,
    latencies_ms: Vec<f64>,
}

fn percentile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1))).copied().unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_robots_at_30_fps_keep_memory_flat_and_are_served_alike() {
    // Alone on the two cores, as when this file was its own test binary (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let seconds: u64 = std::env::var("LOP_SOAK_SECONDS").map_or(60, |s| {
        s.parse().ok().filter(|&n| n > 0).unwrap_or_else(|| panic!("LOP_SOAK_SECONDS must be a positive whole number, not {s:?}"))
    });
    let endpoint = format!("tcp/127.0.0.1:{}", free_port());
    let OneModelEdge { dir, config, table, inputs, whole } =
        OneModelEdge::prepare("soak", MODEL, &endpoint, "", "replicas: 2\nthreads: 1\n", 11);

    let mut edge = Edge::start(&config);
    let edge_pid = edge.child.id().to_string();
    let mut robots = Vec::new();
    for i in 0..ROBOTS {
        let name = format!("soak-robot-{i}");
        let session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
        let (worker, loaded) = Worker::spawn(&name, || lop::model::load(MODEL, &Default::default())).await.unwrap();
        let mut opts = ClientOptions::new(&name, "resnet18");
        opts.hello_timeout = Duration::from_secs(60);
        let connector = ZenohConnector::new(session.clone(), &name);
        let mut client = RobotClient::new(connector, opts, worker, loaded.meta, &loaded.hash, table.clone()).await.unwrap();
        assert!(client.connected(), "{name} reached lop_edge:\n{}", edge.log_now());
        client.set_method("lop");
        robots.push((session, client));
    }
    let rss_loaded = (rss_bytes(&edge_pid), rss_bytes("self"));

    // The streams: robot i captures a frame every 1/30 s; a frame that finds the robot still busy
    // with the previous one replaces the frame waiting before it (counted), as a camera mailbox.
    let period = Duration::from_secs(1) / FPS;
    let start = Instant::now() + Duration::from_millis(100);
    let end = start + WARM_UP + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for (i, (session, mut client)) in robots.drain(..).enumerate() {
        let (inputs, whole) =
            (inputs.iter().map(|t| t.shallow_clone()).collect::<Vec<_>>(), whole.iter().map(|t| t.shallow_clone()).collect::<Vec<_>>());
        // Cameras are not in phase: robot i starts i/8 of a period after robot 0.
        let first = start + period * i as u32 / ROBOTS as u32;
        tasks.push(tokio::spawn(async move {
            let (mut warm, mut run) = (Tally::default(), Tally::default());
            let mut k = 0u32;
            loop {
                let capture = first + period * k;
                if capture >= end {
                    break;
                }
                tokio::time::sleep_until(capture.into()).await;
                let r = client.infer(inputs.iter().map(|t| t.shallow_clone()).collect(), BANDWIDTH_MB_S).await.unwrap();
                let done = Instant::now();
                let err = lop::exec::max_rel_err_all(&r.outputs, &whole).unwrap();
                assert!(err <= 1e-5, "robot {i} frame {k}: relative error {err} ({:?})", r.stats.fallback_reason);
                let t = if capture < start + WARM_UP { &mut warm } else { &mut run };
                t.answered += 1;
                t.served += usize::from(!r.stats.fallback);
                t.latencies_ms.push(done.duration_since(capture).as_secs_f64() * 1e3);
                // The next frame is the newest one captured by now; those before it were replaced.
                let next = (done.saturating_duration_since(first).as_nanos() / period.as_nanos()) as u32;
                let next = next.max(k + 1);
                if first + period * next < end {
                    t.replaced += (next - k - 1) as usize;
                }
                k = next;
            }
            (session, client, warm, run)
        }));
    }
    // Memory is read once a second; the first reading after the warm-up is the baseline.
    tokio::time::sleep_until((start + WARM_UP).into()).await;
    let rss_start = (rss_bytes(&edge_pid), rss_bytes("self"));
    let mut rss_peak = rss_start;
    let mut new_highs = (0usize, 0usize);
    let mut high = rss_start;
    let mut readings = 0usize;
    while Instant::now() + Duration::from_secs(1) < end {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = (rss_bytes(&edge_pid), rss_bytes("self"));
        // A new high counts once it clears the last counted one by a step.
        if now.0 > high.0 + HIGH_STEP {
            (new_highs.0, high.0) = (new_highs.0 + 1, now.0);
        }
        if now.1 > high.1 + HIGH_STEP {
            (new_highs.1, high.1) = (new_highs.1 + 1, now.1);
        }
        readings += 1;
        rss_peak = (rss_peak.0.max(now.0), rss_peak.1.max(now.1));
    }
    let mut tallies = Vec::new();
    let mut sessions = Vec::new();
    for t in tasks {
        let (session, client, _warm, run) = t.await.unwrap();
        tallies.push(run);
        sessions.push((session, client));
    }
    let rss_end = (rss_bytes(&edge_pid), rss_bytes("self"));
    for (session, client) in sessions {
        drop(client);
        session.close().await.unwrap();
    }

    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let growth = |a: u64, b: u64| b as f64 / a as f64 - 1.0;
    eprintln!("soak: {ROBOTS} robots x {FPS} fps for {seconds} s after a {} s warm-up, {MODEL}", WARM_UP.as_secs());
    eprintln!("soak: robot  answered  served  replaced  p50 ms  p99 ms");
    for (i, t) in tallies.iter().enumerate() {
        eprintln!(
            "soak: {i:5}  {:8}  {:6}  {:8}  {:6.1}  {:6.1}",
            t.answered,
            t.served,
            t.replaced,
            percentile(&t.latencies_ms, 0.5),
            percentile(&t.latencies_ms, 0.99)
        );
    }
    let rss = [
        ("lop_edge", rss_loaded.0, rss_start.0, rss_peak.0, rss_end.0, new_highs.0),
        ("robots", rss_loaded.1, rss_start.1, rss_peak.1, rss_end.1, new_highs.1),
    ];
    for (who, loaded, s, peak, e, highs) in rss {
        eprintln!(
            "soak: RSS {who:8} loaded {:7.1} MiB, after warm-up {:7.1} MiB, peak {:7.1} MiB, end {:7.1} MiB: growth {:+.2}%, \
             new highs in {highs} of {readings} readings",
            mib(loaded),
            mib(s),
            mib(peak),
            mib(e),
            100.0 * growth(s, e)
        );
    }
    let served: Vec<usize> = tallies.iter().map(|t| t.served).collect();
    let (most, least) = (*served.iter().max().unwrap(), *served.iter().min().unwrap());
    let fairness = most as f64 / least.max(1) as f64;
    let answered: usize = tallies.iter().map(|t| t.answered).sum();
    let replaced: usize = tallies.iter().map(|t| t.replaced).sum();
    let offered = ROBOTS as f64 * f64::from(FPS) * seconds as f64;
    eprintln!(
        "soak: {answered} frames answered ({:.1}/s of {:.0}/s offered, {replaced} replaced by newer), served max/min {fairness:.3}",
        answered as f64 / seconds as f64,
        offered / seconds as f64
    );

    let log = edge.log_now();
    assert!(edge.child.try_wait().unwrap().is_none(), "lop_edge died during the soak:\n{log}");
    assert!(least > 0, "a robot was never served: {served:?}");
    assert!(fairness <= 1.2, "served per robot {served:?}: max/min {fairness:.3} > 1.2");
    assert!(readings >= 10, "only {readings} memory readings");
    for (who, _, s, peak, _, highs) in rss {
        assert!(highs <= MOST_NEW_HIGHS, "{who}'s RSS reached a new high in {highs} of {readings} readings: growing steadily");
        assert!(growth(s, peak) <= MOST_GROWTH, "{who}'s RSS grew {:.1}% ({:.1} -> {:.1} MiB)", 100.0 * growth(s, peak), mib(s), mib(peak));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

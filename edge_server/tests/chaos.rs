//! Chaos under load (issue 20, part 2, on loopback): a robot streams 30 fps into a `lop_edge`
//! process; the edge is killed with SIGKILL mid-stream and started again on the same endpoint
//! 3 s later.
//! Every frame is answered with the unsplit model's output (split with the edge, or by the robot
//! alone and marked as a fallback), none is lost, and the robot is back on split inference within
//! 2 s of the new edge being ready. Bounded in frames and time.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{Edge, OneModelEdge, free_port};

use lop_runtime::client::{ClientOptions, RobotClient};
use lop_runtime::exec::Worker;
use lop_runtime::zenoh_link::ZenohConfig;
use lop_runtime::zenoh_service::ZenohConnector;

const MODEL: &str = "zoo:resnet18@32x32";
const FPS: u32 = 30;
/// Stream length: killed at 2 s, started again at once (ready within seconds), then streamed on.
const FRAMES: u32 = 12 * FPS;
const KILL_AT: Duration = Duration::from_secs(2);
/// How long the edge stays down before it is started again (then its start-up adds about a
/// second): longer than a robot's attempt that started in the outage once waited for the edge's
/// token before sending its Hello into the void, which then kept it alone for a whole hello
/// timeout after the edge was back (a CI run saw it when the restart took 2.2 s).
const DOWN_FOR: Duration = Duration::from_secs(3);

/// One answered frame.
struct Answer {
    captured: Instant,
    done: Instant,
    split: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_killed_and_restarted_under_a_30_fps_stream_loses_no_frame() {
    // Alone on the two cores, as when this file was its own test binary (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let endpoint = format!("tcp/127.0.0.1:{}", free_port());
    let OneModelEdge { dir, config, table, inputs, whole } = OneModelEdge::prepare("chaos", MODEL, &endpoint, "", "threads: 1\n", 13);

    let edge = Edge::start(&config);
    let session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let (worker, loaded) = Worker::spawn("chaos-robot", || lop::model::load(MODEL, &Default::default())).await.unwrap();
    let mut opts = ClientOptions::new("chaos-robot", "resnet18");
    opts.hello_timeout = Duration::from_secs(10);
    opts.retry_interval = Duration::from_millis(100);
    let connector = ZenohConnector::new(session.clone(), "chaos-robot");
    let mut client = RobotClient::new(connector, opts, worker, loaded.meta, &loaded.hash, table).await.unwrap();
    assert!(client.connected(), "the robot reached lop_edge");
    client.set_method("lop");

    // The killer: SIGKILL at KILL_AT, then a new lop_edge on the same endpoint (blocking: it
    // waits for "lop_edge ready"), returning when it was ready.
    let start = Instant::now() + Duration::from_millis(100);
    let killer = {
        let config = config.clone();
        let mut edge = edge;
        tokio::task::spawn_blocking(move || {
            std::thread::sleep((start + KILL_AT).saturating_duration_since(Instant::now()));
            let pid = i32::try_from(edge.child.id()).unwrap();
            // SAFETY: kill(2) on our own child's pid with a valid signal number.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
            let killed = Instant::now();
            let _ = edge.child.wait();
            std::thread::sleep(DOWN_FOR);
            let restarted = Edge::start(&config);
            (killed, Instant::now(), restarted)
        })
    };

    let period = Duration::from_secs(1) / FPS;
    let mut answers = Vec::new();
    for k in 0..FRAMES {
        let captured = start + period * k;
        tokio::time::sleep_until(captured.into()).await;
        let r = client.infer(inputs.iter().map(|t| t.shallow_clone()).collect(), 30.0).await.unwrap();
        let err = lop::exec::max_rel_err_all(&r.outputs, &whole).unwrap();
        assert!(err <= 1e-5, "frame {k}: relative error {err} ({:?})", r.stats.fallback_reason);
        answers.push(Answer { captured, done: Instant::now(), split: !r.stats.fallback });
    }
    let (killed, ready, restarted) = killer.await.unwrap();

    let first_split_after = answers.iter().find(|a| a.captured >= ready && a.split).map(|a| a.done.duration_since(ready));
    let fallbacks = answers.iter().filter(|a| !a.split).count();
    let during_outage = answers.iter().filter(|a| a.captured >= killed && a.captured < ready).count();
    let worst_ms = answers.iter().map(|a| a.done.duration_since(a.captured).as_secs_f64() * 1e3).fold(0.0, f64::max);
    eprintln!(
        "chaos: {} frames at {FPS} fps, all answered exactly; edge down for {:.2} s (SIGKILL to ready), {during_outage} frames \
         captured meanwhile; {fallbacks} answered by the robot alone (marked); first split frame {:?} after the new edge was \
         ready; slowest answer {worst_ms:.0} ms",
        answers.len(),
        ready.duration_since(killed).as_secs_f64(),
        first_split_after
    );
    assert_eq!(answers.len(), FRAMES as usize, "a frame was lost");
    assert!(answers[..(KILL_AT.as_secs() as usize * FPS as usize) - FPS as usize].iter().all(|a| a.split), "fell back before the kill");
    assert!(fallbacks >= during_outage.min(1), "no frame fell back while the edge was down");
    let back = first_split_after.expect("never split with the restarted edge");
    assert!(back <= Duration::from_secs(2), "back on split inference {back:?} after the edge was ready");
    drop(client);
    session.close().await.unwrap();
    drop(restarted);
    let _ = std::fs::remove_dir_all(&dir);
}

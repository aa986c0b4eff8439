//! The measured fleet (DESIGN.md section 10): three `lop_edge` processes on one Zenoh network
//! (the third slowed 4x), twelve robots at 10 fps with two models, no edge address among them.
//! Every frame is answered with the unsplit model's output, in order; EPARA's routing is compared
//! with static nearest-edge assignment on the same robots in the same run; then one edge is
//! killed with SIGKILL mid-stream: no frame is lost and its robots are served elsewhere within a
//! second. Every phase is bounded in frames and time.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use common::{Edge, free_port};

use lop::plan::Side;
use lop_fleet::Policy;
use lop_runtime::client::ClientOptions;
use lop_runtime::fleet::{FleetClient, Routed, STALE_AFTER};
use lop_runtime::zenoh_link::ZenohConfig;

const MODELS: [(&str, &str); 2] = [("resnet18", "zoo:resnet18@32x32"), ("mobilenet", "zoo:mobilenet_v2@32x32")];
const ROBOTS: usize = 12;
const PERIOD: Duration = Duration::from_millis(100);
const DEADLINE: Duration = Duration::from_millis(60);

/// One robot: its client, its model, its nearest edge.
struct Robot {
    client: FleetClient,
    model: usize,
    home: String,
}

#[derive(Debug, Default)]
struct Phase {
    frames: usize,
    good: usize,
    fallbacks: usize,
    on_robot: usize,
    /// Frames an edge forwarded to another.
    forwarded: usize,
    routed: HashMap<String, usize>,
    /// Frames captured more than a second after the kill and still routed to the killed edge.
    late_to_dead: usize,
    /// Capture-to-answer times, ms.
    latencies_ms: Vec<f64>,
    /// Why frames fell back, and how often.
    reasons: HashMap<String, usize>,
}

impl Phase {
    fn percentile(&self, q: f64) -> f64 {
        let mut v = self.latencies_ms.clone();
        v.sort_by(f64::total_cmp);
        v.get(((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1))).copied().unwrap_or(0.0)
    }
}

struct Reference {
    inputs: Vec<tch::Tensor>,
    whole: Vec<tch::Tensor>,
}

/// Runs every robot at 10 fps for `frames` frames each; frame k is due `DEADLINE` after its
/// capture at start + k x PERIOD. Checks every output against the unsplit model's and the
/// order of the answers. `dead` (an edge, and when it was killed once it is) counts frames
/// still sent to it a second after its kill.
async fn phase(robots: &mut Vec<Robot>, refs: &[Reference], frames: usize, dead: Option<(&str, Arc<OnceLock<Instant>>)>) -> Phase {
    let start = Instant::now() + Duration::from_millis(50);
    let mut tasks = Vec::new();
    for (i, mut robot) in robots.drain(..).enumerate() {
        let shallow = |v: &[tch::Tensor]| v.iter().map(|t| t.shallow_clone()).collect::<Vec<_>>();
        let (inputs, whole) = (shallow(&refs[robot.model].inputs), shallow(&refs[robot.model].whole));
        let dead = dead.as_ref().map(|(e, t)| (e.to_string(), t.clone()));
        // Robots start a few ms apart, as real cameras would.
        let start = start + Duration::from_millis(7 * i as u64);
        tasks.push(tokio::spawn(async move {
            let mut p = Phase::default();
            for k in 0..frames {
                let capture = start + PERIOD * k as u32;
                tokio::time::sleep_until(capture.into()).await;
                let due = capture + DEADLINE;
                let left = due.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
                let r = robot.client.infer(shallow(&inputs), 30.0, left).await.unwrap();
                let done = Instant::now();
                let err = lop::exec::max_rel_err_all(&r.inference.outputs, &whole).unwrap();
                assert!(err <= 1e-5, "robot {i} frame {k} ({:?}): relative error {err}", r.routed);
                p.frames += 1;
                p.good += usize::from(done <= due);
                p.latencies_ms.push(done.saturating_duration_since(capture).as_secs_f64() * 1e3);
                p.fallbacks += usize::from(r.inference.stats.fallback);
                if let Some(why) = &r.inference.stats.fallback_reason {
                    *p.reasons.entry(why.chars().take(40).collect()).or_default() += 1;
                }
                p.forwarded += usize::from(!r.path.is_empty());
                match &r.routed {
                    Routed::Edge(e) => {
                        *p.routed.entry(e.clone()).or_default() += 1;
                        if let Some((d, t)) = &dead
                            && t.get().is_some_and(|t| capture > *t + Duration::from_secs(1))
                            && e == d
                        {
                            p.late_to_dead += 1;
                        }
                    }
                    Routed::Robot(_) => p.on_robot += 1,
                }
            }
            (robot, p)
        }));
    }
    let mut total = Phase::default();
    for t in tasks {
        let (robot, p) = t.await.unwrap();
        robots.push(robot);
        total.frames += p.frames;
        total.good += p.good;
        total.fallbacks += p.fallbacks;
        total.on_robot += p.on_robot;
        total.forwarded += p.forwarded;
        total.late_to_dead += p.late_to_dead;
        for (why, n) in p.reasons {
            *total.reasons.entry(why).or_default() += n;
        }
        total.latencies_ms.extend(p.latencies_ms);
        for (e, n) in p.routed {
            *total.routed.entry(e).or_default() += n;
        }
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_robots_three_edges_routed_exactly_against_nearest_and_through_a_kill() {
    // Alone on the two cores, as when this file was its own test binary (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let dir = std::env::temp_dir().join(format!("lop-fleet-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("robots")).unwrap();
    let ep1 = format!("tcp/127.0.0.1:{}", free_port());
    let models_yaml: String =
        MODELS.iter().map(|(id, src)| format!("  - id: {id}\n    source: \"{src}\"\n    server_profile: synthetic\n")).collect();
    // Three edges; gpu-3 four times slower than the others (all are stretched, and the robots
    // 20x, so that this machine's two cores are not what limits the fleet).
    // Forwarding between the edges as lop_edge's default (2); LOP_FLEET_MAX_FORWARDS=0 measures
    // the routing policies without it.
    let max_forwards: usize = std::env::var("LOP_FLEET_MAX_FORWARDS").map_or(2, |v| v.parse().expect("LOP_FLEET_MAX_FORWARDS: a count"));
    // Batching across robots as lop_edge's default (4); LOP_FLEET_MAX_BATCH=1 measures without.
    let max_batch: usize = std::env::var("LOP_FLEET_MAX_BATCH").map_or(4, |v| v.parse().expect("LOP_FLEET_MAX_BATCH: a count"));
    // The deadline binds (lop_robot's default: edges forward by it, robots race the edge past
    // it); LOP_FLEET_BINDING=0 lets it only route frames.
    let binding = std::env::var("LOP_FLEET_BINDING").map_or(true, |v| v != "0");
    let mut configs = Vec::new();
    for (id, dilation) in [("gpu-1", 2.0), ("gpu-2", 2.0), ("gpu-3", 8.0)] {
        let listen = if id == "gpu-1" { ep1.clone() } else { format!("tcp/127.0.0.1:{}", free_port()) };
        let connect = if id == "gpu-1" { String::new() } else { format!("\"{ep1}\"") };
        let config = dir.join(format!("{id}.yaml"));
        std::fs::write(
            &config,
            format!(
                "id: {id}\nserve_unaddressed: false\nmax_forwards: {max_forwards}\nmax_batch: {max_batch}\ndilation: {dilation}\nthreads: 1\nreplicas: 2\nzenoh:\n  listen: [\"{listen}\"]\n  connect: [{connect}]\n\
                 models:\n{models_yaml}robot_profiles: robots\ntable_cache: tables\nprofile_cache: profiles\n\
                 table:\n  buckets: [0, 8, 30]\nhello_timeout_s: 60\ntable_wait_s: 60\nlog: \"warn,edge_server=info\"\n"
            ),
        )
        .unwrap();
        configs.push((id, config));
    }
    // The robots' side: per model the tables (built once into the edges' shared cache), the
    // robot profile where the edges find it, the routing price list, the reference outputs.
    let cfg = edge_server::EdgeConfig::load(&configs[0].1).unwrap();
    let spec = cfg.table_spec().unwrap();
    let mut tables = Vec::new();
    let mut costs = Vec::new();
    let mut refs = Vec::new();
    for (id, src) in MODELS {
        let g = lop::model::load(src, &Default::default()).unwrap();
        let robot = edge_server::synthetic_profile(&g, Side::Robot).unwrap();
        let server = edge_server::synthetic_profile(&g, Side::Server).unwrap();
        robot.save(&dir.join(format!("robots/{id}.json"))).unwrap();
        let (table, _, _) = lop::planner::table::load_or_build(&cfg.table_cache, &g, &robot, &server, &spec, 1).unwrap();
        let mut cost = lop::sim::model_cost(id, &g, &robot, &server, Default::default()).unwrap();
        tables.push(table);
        let inputs = lop::exec::synthetic_inputs(&g, 5).unwrap();
        let t0 = Instant::now();
        let whole = lop::exec::run_whole(&g, &inputs).unwrap().outputs;
        // The synthetic robot profile knows nothing of this machine: the robot's own time per
        // frame is measured, 20x as the robots are dilated, as a real robot's profile would say.
        cost.robot_s = t0.elapsed().as_secs_f64() * 20.0;
        costs.push(cost);
        refs.push(Reference { inputs, whole });
    }
    let mut edges: HashMap<&str, Edge> = configs.iter().map(|(id, c)| (*id, Edge::start(c))).collect();

    let session = ZenohConfig::client(vec![ep1.clone()]).open().await.unwrap();
    let mut robots = Vec::new();
    for i in 0..ROBOTS {
        let model = i % MODELS.len();
        let (id, src) = MODELS[model];
        let mut opts = ClientOptions::new(&format!("robot-{i:02}"), id);
        opts.hello_timeout = Duration::from_secs(30);
        opts.retry_interval = Duration::from_millis(200);
        opts.dilation = 20.0;
        let loader = Arc::new(move || lop::model::load(src, &Default::default()));
        let mut client =
            FleetClient::new(session.clone(), opts, tables[model].clone(), costs[model].clone(), loader, STALE_AFTER).await.unwrap();
        client.set_deadline_binding(binding);
        robots.push(Robot { client, model, home: format!("gpu-{}", i % 3 + 1) });
    }
    let t0 = Instant::now();
    while robots.iter().any(|r| r.client.view().edges().len() < 3) && t0.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(robots.iter().all(|r| r.client.view().edges().len() == 3), "every robot sees the three edges");
    // Sessions with every edge (the first frames of each robot open them).
    for r in &mut robots {
        r.client.set_policy(Policy::RoundRobin, None);
    }
    let warm = phase(&mut robots, &refs, 6, None).await;
    assert_eq!(warm.frames, ROBOTS * 6);

    let frames = 60; // 6 s at 10 fps
    for r in &mut robots {
        r.client.set_policy(Policy::Lop, None);
    }
    let ours = phase(&mut robots, &refs, frames, None).await;
    for r in &mut robots {
        let home = r.home.clone();
        r.client.set_policy(Policy::Nearest, Some(&home));
    }
    let nearest = phase(&mut robots, &refs, frames, None).await;
    let seconds = frames as f64 * PERIOD.as_secs_f64();
    let (g_ours, g_near) = (ours.good as f64 / seconds, nearest.good as f64 / seconds);
    for (name, p) in [("lop", &ours), ("nearest", &nearest)] {
        eprintln!(
            "fleet: {name:8} good {} of {}, p50 {:.1} ms, p90 {:.1} ms, fallbacks {} {:?}, on the robot {}, forwarded {}, routed {:?}",
            p.good,
            p.frames,
            p.percentile(0.5),
            p.percentile(0.9),
            p.fallbacks,
            p.reasons,
            p.on_robot,
            p.forwarded,
            p.routed
        );
    }
    eprintln!(
        "fleet: max_forwards {max_forwards}, max_batch {max_batch}, binding {binding}: goodput lop {g_ours:.1}/s, nearest {g_near:.1}/s of {:.0}/s offered: {:.2}x",
        (ROBOTS * frames) as f64 / seconds,
        g_ours / g_near.max(1e-9)
    );
    assert_eq!(ours.frames, ROBOTS * frames);
    assert_eq!(nearest.frames, ROBOTS * frames);
    // The goodput ratio is a measurement, printed above (the target is 1.3x; 1.38 to
    // 1.49x measured alone on 2 cores, less when the machine is busy): a timing figure is not
    // asserted here. What must hold whatever the timing: the slow edge gets the least.
    assert!(
        ours.routed.get("gpu-3").copied().unwrap_or(0) < ours.routed.get("gpu-1").copied().unwrap_or(0),
        "the slow edge got as much: {:?}",
        ours.routed
    );

    // gpu-2 is killed two seconds into a stream: every frame is still answered exactly (the
    // robots finish its frames alone), and from a second after the kill none goes to it.
    for r in &mut robots {
        r.client.set_policy(Policy::Lop, None);
    }
    // The frames sent to it are judged from the moment it was killed, as the killer records it
    // (its wake-up may come late on a loaded machine).
    let killed = Arc::new(OnceLock::new());
    let stream_end = Instant::now() + PERIOD * 50;
    let killer = {
        let pid = i32::try_from(edges["gpu-2"].child.id()).unwrap();
        let killed = killed.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            // SAFETY: kill(2) on our own child's pid with a valid signal number.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
            let _ = killed.set(Instant::now());
        })
    };
    let after = phase(&mut robots, &refs, 50, Some(("gpu-2", killed.clone()))).await;
    killer.await.unwrap();
    let killed_at = *killed.get().expect("the killer ran");
    assert!(
        killed_at + Duration::from_millis(1500) < stream_end,
        "the kill came {:?} before the stream's end: too late to judge the frames after it",
        stream_end.saturating_duration_since(killed_at)
    );
    eprintln!(
        "fleet: through the kill: {} frames, good {}, fallbacks {}, on the robot {}, routed {:?}",
        after.frames, after.good, after.fallbacks, after.on_robot, after.routed
    );
    assert_eq!(after.frames, ROBOTS * 50, "a frame was lost");
    assert_eq!(after.late_to_dead, 0, "{} frames still went to the killed edge a second after", after.late_to_dead);
    drop(edges.remove("gpu-2"));

    drop(robots);
    session.close().await.unwrap();
    drop(edges);
    let _ = std::fs::remove_dir_all(&dir);
}

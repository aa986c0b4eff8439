//! What a second camera costs `lop_robot` in memory, and what it gives in throughput: the
//! resident size (VmRSS) and its peak (VmHWM) of a `lop_robot` process with one camera (the
//! single-input parameters, `topics.image`) and of one with two cameras (`cameras: [front,
//! rear]`), each after answering the same number of frames per camera through an edge, and the
//! ratio of the two (issue 58's target: at most 1.1); and the frames answered per second, all
//! cameras together, while driving them. The weights are loaded once either way; a second camera
//! adds a mailbox, a frame loop, its publishers, an edge session and a worker thread whose copy
//! of the model shares the weights' storage, so its inferences run beside the first camera's and
//! the edge (which batches up to 4 inferences of one plan) can batch them.
//!
//! Each `lop_robot` is a process of its own (`target/release/lop_robot`, the hiroz backend with
//! its embedded router); the edge service (synthetic profiles, `lop` method) and the hiroz node
//! playing the cameras run in this process. Both cameras' frames are published together and
//! both answers awaited before the next pair.
//!
//! ```sh
//! . scripts/env.sh && cargo build --release --workspace --all-targets
//! target/release/examples/cameras_memory [frames per camera=40] [model=zoo:resnet18] [WxH=640x480]
//! ```
#![allow(clippy::unwrap_used)]

#[path = "shared/frame.rs"]
mod frame;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use hiroz::Builder as _;
use hiroz_msgs::sensor_msgs::Image;
use lop::plan::Side;
use lop_msgs::ros::msg::InferenceResult;
use lop_runtime::edge::{EdgeModel, EdgeOptions, EdgeService, ServerDevice};
use lop_runtime::zenoh_link::{EdgeAcceptor, ZenohConfig};
use robot_node::backend::hiroz::HirozRos;
use robot_node::config::{ProfileSource, RobotConfig, RosSettings};
use robot_node::params::Params;

use frame::frame;

/// `lop_robot`'s parameters: one camera the single-input way, or the cameras named.
fn robot_yaml(cameras: &[&str], ros_port: u16, edge_port: u16, model: &str, cache: &Path) -> String {
    let list = if cameras.is_empty() { String::new() } else { format!("    cameras: [{}]\n", cameras.join(", ")) };
    format!(
        "lop_robot:\n  ros__parameters:\n    domain_id: 0\n    router_endpoint: \"tcp/127.0.0.1:{ros_port}\"\n    embedded_router: true\n    \
         edge:\n      endpoint: \"tcp/127.0.0.1:{edge_port}\"\n    model:\n      source: \"{model}\"\n      id: model\n    \
         table:\n      buckets: \"0,2,8,30\"\n    cache_dir: \"{}\"\n    deadline_slack_ms: 20000.0\n    topics:\n      image: /front/image_raw\n{list}",
        cache.display()
    )
}

/// The edge service on its own router at `port`, serving `model` under the id `model` with
/// synthetic profiles and the table of the robot's `cfg`; the returned values keep it serving.
async fn start_edge(port: u16, model: &str, cfg: &RobotConfig, cache: PathBuf) -> Result<impl Sized + use<>> {
    let g = lop::model::load(model, &Default::default())?;
    let (robot, server) = (ProfileSource::Synthetic.load(&g, Side::Robot)?, ProfileSource::Synthetic.load(&g, Side::Server)?);
    let spec = cfg.table.spec(&g, &robot, &server)?;
    let session = ZenohConfig::router(vec![format!("tcp/127.0.0.1:{port}")]).open().await?;
    let acceptor = EdgeAcceptor::new(&session).await?;
    let svc = EdgeService::start(EdgeOptions {
        models: vec![EdgeModel { id: "model".into(), source: model.into(), load: Default::default(), server_profile: server }],
        robot_profiles: vec![robot],
        profiles_dir: None,
        spec,
        cache_dir: cache,
        replicas: 1,
        devices: vec![ServerDevice::only(tch::Device::Cpu)],
        limits: Default::default(),
        hello_timeout: Duration::from_secs(30),
        table_wait: Duration::from_secs(120),
        dilation: 1.0,
        memory_budget: None,
        // As an edge serving several robots would: inferences of one plan that wait together
        // run as one batch (the cameras' included).
        batching: lop_runtime::edge::Batching { max: 4, ..Default::default() },
    })
    .await?;
    let serving = lop_runtime::zenoh_service::serve_zenoh(svc.clone(), acceptor);
    Ok((svc, serving, session))
}

/// A `lop_robot` process, killed when dropped.
struct Robot(Child);

impl Drop for Robot {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Robot {
    /// Starts `bin --config config` and waits for its `ready` line.
    fn start(bin: &Path, config: &Path) -> Result<Robot> {
        let mut child = Command::new(bin)
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "info,zenoh=warn,hiroz=warn")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let out = child.stdout.take().context("its stdout")?;
        let robot = Robot(child);
        let (tx, ready) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(std::result::Result::ok) {
                if line.contains("robot_node::robot: ready") {
                    let _ = tx.send(line);
                }
            }
        });
        let line = ready.recv_timeout(Duration::from_secs(180)).context("lop_robot did not become ready in 180 s")?;
        if !line.contains("connected=true") {
            bail!("lop_robot is ready but not connected to the edge: {line}");
        }
        Ok(robot)
    }

    /// `field` of its /proc status (`VmRSS`, `VmHWM`), MiB.
    fn status_mib(&self, field: &str) -> Result<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id()))?;
        let line = status.lines().find(|l| l.starts_with(&format!("{field}:"))).with_context(|| format!("no {field}"))?;
        let kib: f64 = line.split_whitespace().nth(1).context("a value")?.parse()?;
        Ok(kib / 1024.0)
    }
}

/// How a round of frames is driven: how many per camera, their first stamp (seconds), and how
/// long a frame waits for its answer before it is published again (the first round's frames are
/// published again soon, until the node has subscribed; a timed round's are never, in effect,
/// so that no frame is computed twice).
struct Round {
    frames: usize,
    first_sec: i32,
    resend: Duration,
}

/// Publishes one frame to each camera of `topics` at a time, `round.frames` times, each pair
/// answered before the next (republished every `round.resend` until answered).
fn drive(peer: &HirozRos, topics: &[&str], round: &Round, size: (u32, u32)) -> Result<()> {
    let n = peer.node();
    let pubs = topics.iter().map(|t| n.create_pub::<Image>(t).build().map_err(|e| anyhow::anyhow!("{e}"))).collect::<Result<Vec<_>>>()?;
    let (tx, results) = mpsc::channel::<InferenceResult>();
    let _sub = n
        .create_sub::<InferenceResult>("/lop/inference")
        .build_with_callback(move |r| drop(tx.send(r)))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut sec = round.first_sec;
    for _ in 0..round.frames {
        let batch: Vec<Image> = (0..pubs.len()).map(|k| frame(size, sec + k as i32)).collect();
        sec += pubs.len() as i32;
        let mut left: Vec<i32> = batch.iter().map(|f| f.header.stamp.sec).collect();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut sent = None::<Instant>;
        while !left.is_empty() {
            if Instant::now() > deadline {
                bail!("frames {left:?} unanswered in 120 s");
            }
            if sent.is_none_or(|t| t.elapsed() > round.resend) {
                for (p, f) in pubs.iter().zip(&batch).filter(|(_, f)| left.contains(&f.header.stamp.sec)) {
                    p.publish(f).map_err(|e| anyhow::anyhow!("{e}"))?;
                }
                sent = Some(Instant::now());
            }
            if let Ok(r) = results.recv_timeout(Duration::from_millis(50)) {
                left.retain(|&s| s != r.header.stamp.sec);
            }
        }
    }
    Ok(())
}

/// What one run measured: the robot's VmRSS and VmHWM (MiB), and the frames answered per
/// second, all cameras together.
struct Measured {
    rss: f64,
    hwm: f64,
    fps: f64,
}

/// One run: `lop_robot` with `cameras`, `frames` frames per camera.
async fn run(cameras: &[&str], frames: usize, model: &str, size: (u32, u32), dir: &Path) -> Result<Measured> {
    let (ros_port, edge_port) = (lop_runtime::ports::free_loopback_port(), lop_runtime::ports::free_loopback_port());
    let yaml = robot_yaml(cameras, ros_port, edge_port, model, &dir.join("tables"));
    let config = dir.join(format!("robot-{}.yaml", cameras.len()));
    std::fs::write(&config, &yaml)?;
    let cfg = RobotConfig::from_params(&mut Params::from_yaml_str("lop_robot", &yaml, "cameras_memory")?)?;
    let _edge = start_edge(edge_port, model, &cfg, dir.join("edge-tables")).await?;
    let bin = std::env::current_exe()?.parent().and_then(Path::parent).map(|d| d.join("lop_robot")).context("target/release")?;
    let robot = Robot::start(&bin, &config)?;
    let peer_settings = RosSettings { embedded_router: false, ..cfg.ros.clone() };
    let peer = tokio::task::spawn_blocking(move || HirozRos::open(&peer_settings, "memory_cameras", &[], &[], None)).await??;
    let topics: Vec<String> = cfg.inputs.iter().map(|c| c.input_topic()).collect();
    // A first round (subscriptions settling, first-shape packings) is not timed.
    let t = topics.clone();
    let first = Round { frames: 2, first_sec: 1, resend: Duration::from_millis(300) };
    let peer =
        tokio::task::spawn_blocking(move || drive(&peer, &t.iter().map(String::as_str).collect::<Vec<_>>(), &first, size).map(|()| peer))
            .await??;
    let timed = Round { frames, first_sec: 1000, resend: Duration::from_secs(60) };
    let t0 = Instant::now();
    tokio::task::spawn_blocking(move || drive(&peer, &topics.iter().map(String::as_str).collect::<Vec<_>>(), &timed, size)).await??;
    let fps = (frames * cfg.inputs.len()) as f64 / t0.elapsed().as_secs_f64();
    Ok(Measured { rss: robot.status_mib("VmRSS")?, hwm: robot.status_mib("VmHWM")?, fps })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let frames: usize = a.first().map_or(Ok(40), |s| s.parse()).context("frames per camera")?;
    let model = a.get(1).cloned().unwrap_or_else(|| "zoo:resnet18".into());
    let (w, h) = a.get(2).map_or("640x480", String::as_str).split_once('x').context("WxH")?;
    let size = (w.parse()?, h.parse()?);
    let dir: PathBuf = std::env::temp_dir().join(format!("lop-cameras-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let one = run(&[], frames, &model, size, &dir).await?;
    let two = run(&["front", "rear"], frames, &model, size, &dir).await?;
    let _ = std::fs::remove_dir_all(&dir);
    println!("{model}, {frames} frames of {w}x{h} per camera, through an edge (lop method):");
    println!("one camera:  VmRSS {:.1} MiB, VmHWM {:.1} MiB, {:.2} frames/s", one.rss, one.hwm, one.fps);
    println!("two cameras: VmRSS {:.1} MiB, VmHWM {:.1} MiB, {:.2} frames/s (both cameras together)", two.rss, two.hwm, two.fps);
    println!("two over one: VmRSS {:.3}x, VmHWM {:.3}x (target: at most 1.1x)", two.rss / one.rss, two.hwm / one.hwm);
    println!("two over one: {:.2}x the frames per second", two.fps / one.fps);
    Ok(())
}

//! What the annotated debug image costs `lop_robot`: the mean inference latency
//! (`InferenceResult.latency_s`) and the camera-to-result time of frames answered while nobody
//! subscribes to `/lop/debug_image` and while a subscriber takes every debug image, in
//! alternating blocks (so that drift on a shared machine falls on both alike), and the time one
//! debug image takes to draw and encode on its own.
//!
//! One process: the node's library `run` (hiroz, its embedded router, no edge: `robot-only`), a
//! hiroz node playing the camera (one frame at a time, the next once the last is answered) and
//! the debug image's subscriber. Prints one line per block and a summary.
//!
//! ```sh
//! . scripts/env.sh && cargo build --release --workspace --all-targets
//! target/release/examples/debug_image_cost [frames per block=20] [blocks=12] [model=zoo:yolo_det@320x320] [WxH=640x480] [raw|compressed] [max_rate_hz=5]
//! ```
#![allow(clippy::unwrap_used)]

#[path = "shared/frame.rs"]
mod frame;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use hiroz::Builder as _;
use hiroz_msgs::sensor_msgs::{CompressedImage, Image};
use lop_msgs::ros::msg::InferenceResult;
use robot_node::annotate::{Annotations, Canvas, Labelled, annotate, caption};
use robot_node::backend::hiroz::HirozRos;
use robot_node::config::RobotConfig;
use robot_node::convert::ImageView;
use robot_node::params::Params;

use frame::frame;

/// The run's settings, from the command line.
struct Args {
    frames: usize,
    blocks: usize,
    model: String,
    size: (u32, u32),
    /// The topic the subscribed blocks take: `/lop/debug_image` or its `/compressed` form.
    topic: String,
    /// `debug_image.max_rate_hz`.
    rate_hz: f64,
}

fn args() -> Result<Args> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: usize| a.get(i).map_or(Ok(d), |s| s.parse().context("a count"));
    let size = a.get(3).map_or("640x480", String::as_str);
    let (w, h) = size.split_once('x').context("WxH")?;
    Ok(Args {
        frames: num(0, 20)?,
        blocks: num(1, 12)?,
        model: a.get(2).cloned().unwrap_or_else(|| "zoo:yolo_det@320x320".into()),
        size: (w.parse()?, h.parse()?),
        topic: match a.get(4).map_or("raw", String::as_str) {
            "raw" => "/lop/debug_image".into(),
            "compressed" => "/lop/debug_image/compressed".into(),
            other => anyhow::bail!("the form is raw or compressed, not {other}"),
        },
        rate_hz: a.get(5).map_or(Ok(5.0), |s| s.parse()).context("a rate in Hz")?,
    })
}

/// Mean of `v`, ms.
fn mean_ms(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64 * 1e3
}

/// Draws and encodes one debug image of a `w x h` frame with 20 boxes, 200 times; the mean, ms.
fn draw_cost((w, h): (u32, u32)) -> Result<f64> {
    let f = frame((w, h), 1);
    let bytes: Vec<u8> = f.data.0.zslices().flat_map(|s| s.as_slice().to_vec()).collect();
    let view = ImageView { width: w, height: h, encoding: "rgb8", is_bigendian: false, step: w * 3, data: &bytes };
    let boxes = (0..20)
        .map(|i| {
            let x = f64::from(i * 29 % w.max(1));
            Labelled { bounds: [x, 40.0, x + 80.0, 200.0], class: format!("class{i}"), score: 0.5, id: i.to_string() }
        })
        .collect();
    let a = Annotations { boxes, caption: caption("lop", 8.0, 0.05, false), ..Default::default() };
    let t = Instant::now();
    let n = 200;
    for _ in 0..n {
        let mut c = Canvas::from_view(&view)?;
        annotate(&mut c, &a);
        let jpeg = c.to_jpeg(80)?;
        std::hint::black_box((c, jpeg));
    }
    Ok(t.elapsed().as_secs_f64() / f64::from(n) * 1e3)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = args()?;
    let dir = std::env::temp_dir().join(format!("lop-debug-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let port = lop_runtime::ports::free_loopback_port();
    let edge = lop_runtime::ports::free_loopback_port();
    let yaml = format!(
        "lop_robot:\n  ros__parameters:\n    domain_id: 0\n    router_endpoint: \"tcp/127.0.0.1:{port}\"\n    embedded_router: true\n    \
         edge:\n      endpoint: \"tcp/127.0.0.1:{edge}\"\n    model:\n      source: \"{}\"\n      id: det\n      task: \"detect;score=0.3;max=50\"\n    \
         method: robot-only\n    table:\n      buckets: \"0,8\"\n    hello_timeout_ms: 300.0\n    cache_dir: \"{}\"\n    \
         debug_image:\n      max_rate_hz: {}\n",
        args.model,
        dir.display(),
        args.rate_hz
    );
    let mut params = Params::from_yaml_str("lop_robot", &yaml, "debug_image_cost")?;
    let cfg = RobotConfig::from_params(&mut params)?;
    let (settings, declared) = (cfg.ros.clone(), params.declared().to_vec());
    let ros = tokio::task::spawn_blocking(move || HirozRos::open(&settings, "lop_robot", &[], &declared, None)).await??;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let node = tokio::spawn(robot_node::robot::run(cfg.clone(), Arc::new(ros), async move {
        let _ = stop_rx.await;
    }));
    let mut peer = cfg.ros.clone();
    peer.embedded_router = false;
    let camera_node = tokio::task::spawn_blocking(move || HirozRos::open(&peer, "cost_camera", &[], &[], None)).await??;
    let size = args.size;
    let report = tokio::task::spawn_blocking(move || {
        let check = check_cost(&camera_node)?;
        measure(&camera_node, &args)
            .map(|r| format!("{r}\nasking whether /lop/debug_image has a subscriber (hiroz graph): {check:.0} ns a frame"))
    })
    .await??;
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(20), node).await;
    let _ = std::fs::remove_dir_all(&dir);
    println!("{report}");
    println!("one debug image alone (canvas, 20 boxes and labels, caption, JPEG q80): {:.2} ms at {}x{}", draw_cost(size)?, size.0, size.1);
    Ok(())
}

/// Latencies of one condition: `InferenceResult.latency_s` and camera-to-result, seconds.
#[derive(Default)]
struct Times {
    latency: Vec<f64>,
    round_trip: Vec<f64>,
    /// The whole process's CPU time per frame of each block, seconds (node, router, camera and
    /// subscriber together: less sensitive than latency to a shared machine's load).
    cpu: Vec<f64>,
    /// The drawing thread's CPU time over the condition's blocks, seconds.
    drawer: f64,
}

/// The CPU time the node's debug image thread (`lop-debug-image`) has run so far, seconds, from
/// the kernel's per-thread scheduler statistics; `None` where there is no such thread or file.
fn drawer_cpu_s() -> Option<f64> {
    std::fs::read_dir("/proc/self/task").ok()?.flatten().find_map(|task| {
        let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
        (comm.trim() == "lop-debug-image").then_some(())?;
        let stat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
        stat.split_whitespace().next()?.parse::<f64>().ok().map(|ns| ns * 1e-9)
    })
}

/// CPU time this process has used so far (user and system, all threads), seconds.
fn cpu_s() -> f64 {
    // SAFETY: getrusage writes one rusage into the zeroed struct we own and reads nothing else.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is a valid target.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return f64::NAN;
    }
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 * 1e-6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// Runs the blocks (even: no subscriber, odd: a debug image subscriber) and returns the report.
fn measure(camera_node: &HirozRos, args: &Args) -> Result<String> {
    let n = camera_node.node();
    let camera = n.create_pub::<Image>("/camera/image_raw").build().map_err(|e| anyhow::anyhow!("{e}"))?;
    let (tx, results) = mpsc::channel::<InferenceResult>();
    let _rs = n
        .create_sub::<InferenceResult>("/lop/inference")
        .build_with_callback(move |r| drop(tx.send(r)))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut sec = 1;
    // Warm up (the model's first runs, the subscriptions matched).
    for _ in 0..5 {
        answer(&camera, &results, &frame(args.size, sec))?;
        sec += 1;
    }
    let (mut off, mut on, mut lines) = (Times::default(), Times::default(), Vec::new());
    for block in 0..args.blocks {
        let subscribed = block % 2 == 1;
        let (dtx, debug) = mpsc::channel::<()>();
        let sub = if subscribed { Some(subscribe(n, &args.topic, dtx)?) } else { None };
        // Let the node's graph follow the subscriber's arrival or departure.
        std::thread::sleep(Duration::from_millis(500));
        let times = if subscribed { &mut on } else { &mut off };
        let (first, t0, c0, d0) = (times.latency.len(), Instant::now(), cpu_s(), drawer_cpu_s());
        for _ in 0..args.frames {
            let (latency, round_trip) = answer(&camera, &results, &frame(args.size, sec))?;
            sec += 1;
            times.latency.push(latency);
            times.round_trip.push(round_trip);
        }
        times.cpu.push((cpu_s() - c0) / args.frames.max(1) as f64);
        // The last frames' debug images may still be on their way.
        std::thread::sleep(Duration::from_millis(300));
        let drawn = debug.try_iter().count();
        times.drawer += drawer_cpu_s().zip(d0).map_or(f64::NAN, |(b, a)| b - a);
        drop(sub);
        lines.push(format!(
            "block {block}: {:<13} {} frames in {:.1} s, latency_s mean {:.2} ms, camera-to-result mean {:.2} ms, debug images received {drawn}",
            if subscribed { "subscribed" } else { "no subscriber" },
            args.frames,
            t0.elapsed().as_secs_f64(),
            mean_ms(&times.latency[first..]),
            mean_ms(&times.round_trip[first..])
        ));
    }
    lines.push(paired(&off, &on, args.frames));
    let (e, f) = (mean_ms(&off.cpu), mean_ms(&on.cpu));
    lines.push(format!("process CPU time per frame: {e:.2} ms without a subscriber, {f:.2} ms with one ({:+.2} ms)", f - e));
    let (a, b) = (mean_ms(&off.latency), mean_ms(&on.latency));
    lines.push(drawer_bound(&on, b));
    let (c, d) = (mean_ms(&off.round_trip), mean_ms(&on.round_trip));
    lines.push(format!(
        "model {} frames {}x{}, subscribed to {} (max_rate_hz {}): latency_s mean {a:.2} ms without a subscriber, {b:.2} ms with one ({:+.2}%); camera-to-result {c:.2} ms, {d:.2} ms ({:+.2}%)",
        args.model,
        args.size.0,
        args.size.1,
        args.topic,
        args.rate_hz,
        (b / a - 1.0) * 100.0,
        (d / c - 1.0) * 100.0
    ));
    Ok(lines.join("\n"))
}

/// The drawing thread's CPU time per subscribed frame, and that over the mean latency `mean_ms`:
/// the most the debug image can add to a frame's latency if every moment it ran had delayed a
/// result by as much (it runs at nice 19 after the result is out, so it delays less).
fn drawer_bound(on: &Times, mean_ms: f64) -> String {
    let per_frame_ms = on.drawer / on.latency.len().max(1) as f64 * 1e3;
    format!(
        "debug image thread CPU time: {per_frame_ms:.3} ms per subscribed frame ({:.2}% of the mean latency: the bound on what it adds)",
        per_frame_ms / mean_ms * 100.0
    )
}

/// A subscriber of the debug image's `topic` (either form) that signals each message on `tx`.
fn subscribe(n: &hiroz::node::ZNode, topic: &str, tx: mpsc::Sender<()>) -> Result<Box<dyn std::any::Any>> {
    let signal = move || {
        let _ = tx.send(());
    };
    let sub: Box<dyn std::any::Any> = if topic.ends_with("/compressed") {
        Box::new(n.create_sub::<CompressedImage>(topic).build_with_callback(move |_m| signal()).map_err(|e| anyhow::anyhow!("{e}"))?)
    } else {
        Box::new(n.create_sub::<Image>(topic).build_with_callback(move |_m| signal()).map_err(|e| anyhow::anyhow!("{e}"))?)
    };
    Ok(sub)
}

/// The median and mean over pairs of neighbouring blocks (no subscriber, then subscribed) of the
/// subscribed block's mean latency over the other's: robust to a shared machine's load changing
/// between pairs.
fn paired(off: &Times, on: &Times, frames: usize) -> String {
    let means = |t: &Times| t.latency.chunks(frames.max(1)).map(mean_ms).collect::<Vec<_>>();
    let mut ratios: Vec<f64> = means(off).iter().zip(means(on)).map(|(a, b)| (b / a - 1.0) * 100.0).collect();
    ratios.sort_by(f64::total_cmp);
    let median = ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN);
    let n = ratios.len() as f64;
    let mean = ratios.iter().sum::<f64>() / n;
    let spread = (ratios.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    // Two standard errors: about a 95% interval over this many pairs.
    let half = 2.0 * spread / n.sqrt();
    format!(
        "paired blocks: latency_s change with a subscriber, median {median:+.2}%, mean {mean:+.2}% (95% interval {:+.2}% to {:+.2}%) over {} pairs",
        mean - half,
        mean + half,
        ratios.len()
    )
}

/// What the frame loop pays per frame without a subscriber: asking the backend whether the
/// debug image's topic has one (hiroz: a lookup in the node's graph). Mean over 100000 asks, ns.
fn check_cost(ros: &HirozRos) -> Result<f64> {
    use robot_node::backend::Ros as _;
    let publisher = ros.image_publisher("/lop/debug_image_check_cost")?;
    let n = 100_000;
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(publisher.subscribers());
    }
    Ok(t.elapsed().as_secs_f64() / f64::from(n) * 1e9)
}

/// Publishes `f` and waits for its result: (`latency_s`, camera-to-result seconds).
fn answer(
    camera: &hiroz::pubsub::ZPub<Image, <Image as hiroz::msg::ZMessage>::Serdes>,
    results: &mpsc::Receiver<InferenceResult>,
    f: &Image,
) -> Result<(f64, f64)> {
    let t = Instant::now();
    let deadline = t + Duration::from_secs(60);
    let mut sent = None::<Instant>;
    while Instant::now() < deadline {
        // Again after a second: the first may have gone out before the node subscribed.
        if sent.is_none_or(|s| s.elapsed() > Duration::from_secs(1)) {
            camera.publish(f).map_err(|e| anyhow::anyhow!("{e}"))?;
            sent = Some(Instant::now());
        }
        if let Ok(r) = results.recv_timeout(Duration::from_millis(20))
            && r.header.stamp.sec == f.header.stamp.sec
        {
            return Ok((r.latency_s, sent.map_or(0.0, |s| s.elapsed().as_secs_f64())));
        }
    }
    anyhow::bail!("no result for frame {}", f.header.stamp.sec)
}

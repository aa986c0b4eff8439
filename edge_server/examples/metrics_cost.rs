//! What the edge's metrics cost a served inference, as a robot sees it: the same edge (zoo
//! resnet18, one replica, in this process, over Zenoh on loopback) with `metrics.enabled` off,
//! then on with `/metrics` scraped every second as Prometheus would, in alternating rounds, one
//! robot sending frames one after the other. Prints each mode's p50 and the ratio on / off.
//!
//! ```sh
//! cargo run --release -p edge_server --example metrics_cost -- [--frames 40] [--rounds 4] [--json]
//! ```

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use edge_server::{http, metrics};
use lop_runtime::client::{ClientOptions, RobotClient};
use lop_runtime::exec::Worker;
use lop_runtime::ports::free_loopback_port;
use lop_runtime::zenoh_link::ZenohConfig;
use lop_runtime::zenoh_service::ZenohConnector;

// The robot's side, built as the single-edge tests build theirs.
#[path = "../tests/common/fixture.rs"]
mod fixture;
use fixture::{RobotSide, robot_side};

struct Args {
    frames: usize,
    rounds: usize,
    json: bool,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args { frames: 40, rounds: 4, json: false };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut num = |what: &str| -> anyhow::Result<usize> {
            it.next().with_context(|| format!("{what} needs a count"))?.parse().with_context(|| format!("{what}: not a count"))
        };
        match k.as_str() {
            "--frames" => a.frames = num("--frames")?.max(1),
            "--rounds" => a.rounds = num("--rounds")?.max(1),
            "--json" => a.json = true,
            other => anyhow::bail!("unknown argument '{other}' (--frames N, --rounds N, --json)"),
        }
    }
    Ok(a)
}

/// Scrapes `port`'s `/metrics` once, as Prometheus would; the bytes read.
fn scrape(port: u16) -> std::io::Result<usize> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/openmetrics-text\r\nConnection: close\r\n\r\n")?;
    let mut body = Vec::new();
    s.read_to_end(&mut body)?;
    Ok(body.len())
}

fn p50(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One round: an edge with metrics `on` or off, `frames` timed inferences (after 3 untimed);
/// their latencies in ms, and the scrapes made.
async fn round(dir: &std::path::Path, on: bool, frames: usize) -> anyhow::Result<(Vec<f64>, usize)> {
    let endpoint = format!("tcp/127.0.0.1:{}", free_loopback_port());
    let metrics_port = free_loopback_port();
    let config = dir.join(format!("edge-{}.yaml", if on { "on" } else { "off" }));
    std::fs::write(
        &config,
        format!(
            "zenoh:\n  listen: [\"{endpoint}\"]\n\
             models:\n  - id: resnet18\n    source: zoo:resnet18\n    server_profile: synthetic\n\
             robot_profiles: robots\ntable_cache: tables\nprofile_cache: profiles\n\
             table:\n  buckets: [0, 2, 8, 30]\n  latency_ms: 1.0\n\
             metrics:\n  enabled: {on}\n  listen: 127.0.0.1:{metrics_port}\n\
             hello_timeout_s: 60\nshutdown_grace_s: 2\nlog: warn\n"
        ),
    )?;
    let RobotSide { cfg, table, inputs, .. } = robot_side(&config, "zoo:resnet18", Some(&dir.join("robot-tables")), 3, false)?;
    let opts = {
        let cfg = cfg.clone();
        tokio::task::spawn_blocking(move || edge_server::prepare(&cfg)).await??
    };
    let ops = Arc::new(http::OpsState::new(if on { metrics::Metrics::new() } else { metrics::Metrics::off() }));
    let endpoints = if on {
        let listener = http::bind(format!("127.0.0.1:{metrics_port}").parse()?).await?;
        Some(tokio::spawn(http::serve(listener, ops.clone())))
    } else {
        None
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let edge = tokio::spawn(edge_server::serve(cfg, opts, ops, async move {
        let _ = stop_rx.await;
    }));
    // Prometheus's part: a scrape every second, off the executor.
    let scraping = Arc::new(std::sync::atomic::AtomicBool::new(on));
    let scraper = {
        let scraping = scraping.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            while scraping.load(std::sync::atomic::Ordering::Relaxed) {
                if scrape(metrics_port).is_ok() {
                    n += 1;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            n
        })
    };
    // The edge opens its router as it starts serving: retried until it listens.
    let t0 = Instant::now();
    let session = loop {
        match ZenohConfig::client(vec![endpoint.clone()]).open().await {
            Ok(s) => break s,
            Err(e) if t0.elapsed() > Duration::from_secs(60) => return Err(e).context("the edge did not listen within 60 s"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let (worker, loaded) = Worker::spawn("metrics-cost-robot", || lop::model::load("zoo:resnet18", &Default::default())).await?;
    let mut o = ClientOptions::new("robot", "resnet18");
    o.hello_timeout = Duration::from_secs(60);
    o.deadline_slack = Duration::from_secs(20);
    o.method = "server-only".into();
    let mut client = RobotClient::new(ZenohConnector::new(session.clone(), "robot"), o, worker, loaded.meta, &loaded.hash, table).await?;
    let t0 = Instant::now();
    while !client.connected() && t0.elapsed() < Duration::from_secs(60) {
        client.poll_connection().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::ensure!(client.connected(), "the robot did not connect to the edge within 60 s");
    let mut ms = Vec::with_capacity(frames);
    for k in 0..frames + 3 {
        let t = Instant::now();
        let r = client.infer(inputs.iter().map(|t| t.shallow_clone()).collect(), 30.0).await?;
        anyhow::ensure!(!r.stats.fallback, "frame {k} fell back: {:?}", r.stats.fallback_reason);
        if k >= 3 {
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    drop(client);
    scraping.store(false, std::sync::atomic::Ordering::Relaxed);
    let scrapes = scraper.join().unwrap_or(0);
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(20), edge).await;
    if let Some(e) = endpoints {
        e.abort();
    }
    let _ = session.close().await;
    Ok((ms, scrapes))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    tch::set_num_threads(1);
    let dir = std::env::temp_dir().join(format!("lop-metrics-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (mut off, mut on, mut scrapes) = (Vec::new(), Vec::new(), 0);
    for r in 0..a.rounds {
        // Alternating, so that a drift of the machine's speed falls on both.
        for metrics_on in [r % 2 == 1, r % 2 == 0] {
            eprintln!("metrics_cost: round {}/{}, metrics {}", r + 1, a.rounds, if metrics_on { "on" } else { "off" });
            let (ms, n) = round(&dir, metrics_on, a.frames).await?;
            if metrics_on {
                on.extend(ms);
                scrapes += n;
            } else {
                off.extend(ms);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let (frames_on, frames_off) = (on.len(), off.len());
    let (p_on, p_off) = (p50(&mut on), p50(&mut off));
    if a.json {
        println!(
            "{}",
            serde_json::json!({"frames_per_mode": frames_on, "p50_on_ms": p_on, "p50_off_ms": p_off, "ratio": p_on / p_off, "scrapes": scrapes})
        );
    } else {
        println!("metrics off: p50 {p_off:.2} ms over {frames_off} frames");
        println!("metrics on:  p50 {p_on:.2} ms over {frames_on} frames, {scrapes} scrapes of /metrics");
        println!("on / off: {:.4}", p_on / p_off);
    }
    Ok(())
}

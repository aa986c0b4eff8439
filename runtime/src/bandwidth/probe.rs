//! Active bandwidth probes between a robot and its edge (DESIGN.md section 7): when the link
//! has been idle, the robot's bandwidth monitor times one upload (a query carrying `bytes`) and
//! one download (a reply carrying `bytes`) against the edge's responder, after a small round
//! trip that measures the fixed latency to subtract.
//!
//! The responder only echoes sizes; it never interprets payload contents. A probe is a few
//! bytes that ask for up to [`MAX_PROBE_BYTES`], so the responder rations what it sends
//! ([`super::probe_limit`]): per peer (the robot id a probe names in its key, `PROBE_KEY/<id>`)
//! and for all peers together, refusing past either budget with an error reply, counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use zenoh::query::QueryTarget;

use super::probe_limit::{Limiter, ProbeCounts, ProbeLimits};
use crate::error::{Error, Result};

/// Key of the edge's probe responder; a robot probes `PROBE_KEY/<robot id>`.
pub const PROBE_KEY: &str = "lop/v1/edge/probe";

pub use super::probe_limit::MAX_PROBE_BYTES;

/// What one probe measured.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ProbeResult {
    /// Upload rate, Mbit/s.
    pub up_mbps: f64,
    /// Download rate, Mbit/s.
    pub down_mbps: f64,
    /// Round trip of an empty query, seconds.
    pub rtt_s: f64,
}

/// The edge's responder; dropping it (or [`ProbeResponder::stop`]) undeclares it.
#[derive(Debug)]
pub struct ProbeResponder {
    task: JoinHandle<()>,
}

impl ProbeResponder {
    /// Stops answering probes.
    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for ProbeResponder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn zenoh_err(what: &str) -> impl Fn(zenoh::Error) -> Error + '_ {
    move |e| Error::Zenoh(format!("{what}: {e}"))
}

/// Starts answering probes on `session`: a query with `down=N` gets a reply of `N` bytes
/// (clamped to [`MAX_PROBE_BYTES`]) while its peer and all peers are within `limits`, and an
/// error reply past them; `counts` counts both.
///
/// # Errors
/// [`Error::Zenoh`] when the queryable cannot be declared.
pub async fn serve_probes(session: &zenoh::Session, limits: ProbeLimits, counts: Arc<ProbeCounts>) -> Result<ProbeResponder> {
    let key = format!("{PROBE_KEY}/**");
    let queryable = session.declare_queryable(&key).await.map_err(zenoh_err("declaring the probe responder"))?;
    let task = tokio::spawn(async move {
        let mut limiter = Limiter::new(limits);
        while let Ok(query) = queryable.recv_async().await {
            let n = query.parameters().get("down").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0).min(MAX_PROBE_BYTES);
            let peer = query.key_expr().as_str().strip_prefix(PROBE_KEY).unwrap_or("").trim_start_matches('/').to_string();
            let sent = match limiter.admit(&peer, n, Instant::now()) {
                Ok(()) => {
                    counts.answered(n);
                    query.reply(query.key_expr().clone(), vec![0u8; n]).await
                }
                Err(refusal) => {
                    counts.limited();
                    if refusal.first {
                        tracing::warn!(peer = %peer, bytes = n, "probe refused: {} (counted in lop_edge_probes_refused_total)", refusal.why);
                    } else {
                        tracing::debug!(peer = %peer, bytes = n, "probe refused: {}", refusal.why);
                    }
                    query.reply_err(format!("probe refused: {}", refusal.why)).await
                }
            };
            if let Err(e) = sent {
                tracing::debug!(error = %e, "probe reply failed");
            }
        }
    });
    Ok(ProbeResponder { task })
}

async fn timed_query(session: &zenoh::Session, peer: &str, up: usize, down: usize, timeout: Duration) -> Result<(f64, usize)> {
    let selector = format!("{PROBE_KEY}/{peer}?down={down}");
    let start = Instant::now();
    let mut get = session.get(selector.as_str()).target(QueryTarget::BestMatching).timeout(timeout);
    if up > 0 {
        get = get.payload(vec![0u8; up]);
    }
    let replies = get.await.map_err(zenoh_err("sending a probe"))?;
    let reply = tokio::time::timeout(timeout, replies.recv_async())
        .await
        .map_err(|_| Error::Zenoh(format!("probe timed out after {timeout:?}")))?
        .map_err(|_| Error::Zenoh("no edge answered the probe".into()))?;
    let elapsed = start.elapsed().as_secs_f64();
    let sample = reply.result().map_err(|e| {
        let why = e.payload().try_to_string().map_or_else(|_| format!("{e:?}"), |s| s.into_owned());
        Error::Zenoh(format!("the edge answered the probe with an error: {why}"))
    })?;
    Ok((elapsed, sample.payload().len()))
}

/// Measures the link to the edge with `bytes` each way (after an empty round trip), as robot
/// `peer` (the edge rations probes per robot id). Rates are
/// `bytes / (time - empty round trip)`, so the result is meaningful only when `bytes` takes
/// clearly longer than the round trip to send.
///
/// # Errors
/// [`Error::Zenoh`] when no responder answers within `timeout`, or [`Error::InvalidConfig`]
/// for a zero or oversized `bytes`.
pub async fn probe(session: &zenoh::Session, peer: &str, bytes: usize, timeout: Duration) -> Result<ProbeResult> {
    if bytes == 0 || bytes > MAX_PROBE_BYTES {
        return Err(Error::InvalidConfig { what: format!("probe size must be 1..={MAX_PROBE_BYTES} bytes, got {bytes}") });
    }
    let (rtt, _) = timed_query(session, peer, 0, 0, timeout).await?;
    let (t_up, _) = timed_query(session, peer, bytes, 0, timeout).await?;
    let (t_down, got) = timed_query(session, peer, 0, bytes, timeout).await?;
    if got != bytes {
        return Err(Error::Zenoh(format!("probe download returned {got} bytes, expected {bytes}")));
    }
    let rate = |t: f64| bytes as f64 * 8.0 / 1e6 / (t - rtt).max(1e-6);
    Ok(ProbeResult { up_mbps: rate(t_up), down_mbps: rate(t_down), rtt_s: rtt })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::zenoh_link::ZenohConfig;

    use crate::ports::free_loopback_port as free_port;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn probes_measure_through_a_router_and_fail_cleanly_without_one() {
        let endpoint = format!("tcp/127.0.0.1:{}", free_port());
        let edge = ZenohConfig::router(vec![endpoint.clone()]).open().await.unwrap();
        let robot = ZenohConfig::client(vec![endpoint]).open().await.unwrap();
        let counts = Arc::new(ProbeCounts::default());
        let limits = ProbeLimits { peer_burst_bytes: 3.0 * f64::from(1 << 20), ..ProbeLimits::default() };
        let responder = serve_probes(&edge, limits, counts.clone()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let r = probe(&robot, "r1", 1 << 20, Duration::from_secs(5)).await.unwrap();
        assert!(r.up_mbps > 0.0 && r.down_mbps > 0.0 && r.rtt_s > 0.0, "{r:?}");
        // Loopback moves 1 MiB in well under a second.
        assert!(r.up_mbps > 8.0 && r.down_mbps > 8.0, "{r:?}");
        assert!(probe(&robot, "r1", 0, Duration::from_secs(1)).await.is_err());
        // Past its budget (3 MiB at once, 1 MiB/s), r1's probes are refused with a reply, at
        // once, while another robot is still answered.
        let mut refused = None;
        for _ in 0..4 {
            if let Err(e) = probe(&robot, "r1", 2 << 20, Duration::from_secs(5)).await {
                refused = Some(e.to_string());
                break;
            }
        }
        let refused = refused.expect("a robot past its probe budget is refused");
        assert!(refused.contains("probe budget"), "{refused}");
        assert!(probe(&robot, "r2", 1 << 20, Duration::from_secs(5)).await.is_ok());
        let (answered, limited, bytes) = counts.snapshot();
        assert!(limited >= 1 && answered >= 6 && bytes >= 2 << 20, "{:?}", counts.snapshot());
        responder.stop();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let err = probe(&robot, "r1", 1024, Duration::from_millis(500)).await;
        assert!(err.is_err(), "answered without a responder: {err:?}");
    }
}

//! Active bandwidth probes between a robot and its edge (DESIGN.md section 7): when the link
//! has been idle, the robot's bandwidth monitor times one upload (a query carrying `bytes`) and
//! one download (a reply carrying `bytes`) against the edge's responder, after a small round
//! trip that measures the fixed latency to subtract.
//!
//! The responder only echoes sizes; it never interprets payload contents.

use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use zenoh::query::QueryTarget;

use crate::error::{Error, Result};

/// Key of the edge's probe responder.
pub const PROBE_KEY: &str = "lop/v1/edge/probe";

/// Largest download a probe may ask for (bytes); bigger requests are clamped.
pub const MAX_PROBE_BYTES: usize = 8 << 20;

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
/// (clamped to [`MAX_PROBE_BYTES`]); any other query gets an empty reply.
///
/// # Errors
/// [`Error::Zenoh`] when the queryable cannot be declared.
pub async fn serve_probes(session: &zenoh::Session) -> Result<ProbeResponder> {
    let queryable = session.declare_queryable(PROBE_KEY).await.map_err(zenoh_err("declaring the probe responder"))?;
    let task = tokio::spawn(async move {
        while let Ok(query) = queryable.recv_async().await {
            let n = query.parameters().get("down").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0).min(MAX_PROBE_BYTES);
            if let Err(e) = query.reply(PROBE_KEY, vec![0u8; n]).await {
                tracing::debug!(error = %e, "probe reply failed");
            }
        }
    });
    Ok(ProbeResponder { task })
}

async fn timed_query(session: &zenoh::Session, up: usize, down: usize, timeout: Duration) -> Result<(f64, usize)> {
    let selector = format!("{PROBE_KEY}?down={down}");
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
    let sample = reply.result().map_err(|e| Error::Zenoh(format!("probe answered with an error: {e:?}")))?;
    Ok((elapsed, sample.payload().len()))
}

/// Measures the link to the edge with `bytes` each way (after an empty round trip). Rates are
/// `bytes / (time - empty round trip)`, so the result is meaningful only when `bytes` takes
/// clearly longer than the round trip to send.
///
/// # Errors
/// [`Error::Zenoh`] when no responder answers within `timeout`, or [`Error::InvalidConfig`]
/// for a zero or oversized `bytes`.
pub async fn probe(session: &zenoh::Session, bytes: usize, timeout: Duration) -> Result<ProbeResult> {
    if bytes == 0 || bytes > MAX_PROBE_BYTES {
        return Err(Error::InvalidConfig { what: format!("probe size must be 1..={MAX_PROBE_BYTES} bytes, got {bytes}") });
    }
    let (rtt, _) = timed_query(session, 0, 0, timeout).await?;
    let (t_up, _) = timed_query(session, bytes, 0, timeout).await?;
    let (t_down, got) = timed_query(session, 0, bytes, timeout).await?;
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
        let responder = serve_probes(&edge).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let r = probe(&robot, 1 << 20, Duration::from_secs(5)).await.unwrap();
        assert!(r.up_mbps > 0.0 && r.down_mbps > 0.0 && r.rtt_s > 0.0, "{r:?}");
        // Loopback moves 1 MiB in well under a second.
        assert!(r.up_mbps > 8.0 && r.down_mbps > 8.0, "{r:?}");
        assert!(probe(&robot, 0, Duration::from_secs(1)).await.is_err());
        responder.stop();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let err = probe(&robot, 1024, Duration::from_millis(500)).await;
        assert!(err.is_err(), "answered without a responder: {err:?}");
    }
}

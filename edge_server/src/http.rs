//! The edge's HTTP endpoints for operators, on `metrics.listen` (loopback by default):
//!
//! - `GET /metrics`: the Prometheus exposition ([`crate::metrics`]): OpenMetrics text when the
//!   request accepts it (Prometheus does), else Prometheus' text format;
//! - `GET /health/live`: 200 while the serving runtime's heartbeat is fresh, else 503;
//! - `GET /health/ready`: 200 once every model is loaded and the tables of the robot profiles
//!   it was given are planned, 503 before and from shutdown on.
//!
//! HTTP/1.1, one request per connection, GET and HEAD only, requests up to 8 KiB read with a
//! 5 s limit: a scrape endpoint, not a web server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::metrics::Metrics;

/// How stale the heartbeat may be before the process counts as hung.
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(5);

/// What the endpoints answer from.
#[derive(Debug)]
pub struct OpsState {
    /// The registry.
    pub metrics: Metrics,
    /// Whether the edge is ready (models loaded, tables planned, not shutting down).
    pub ready: AtomicBool,
    /// Milliseconds since `born` of the serving runtime's last heartbeat.
    beat_ms: AtomicU64,
    born: Instant,
}

impl OpsState {
    /// A state with `metrics`, not ready, beating now.
    pub fn new(metrics: Metrics) -> OpsState {
        OpsState { metrics, ready: AtomicBool::new(false), beat_ms: AtomicU64::new(0), born: Instant::now() }
    }

    /// Records a heartbeat of the serving runtime.
    pub fn beat(&self) {
        self.beat_ms.store(self.born.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Whether the last heartbeat is within [`HEARTBEAT_STALE`].
    pub fn alive(&self) -> bool {
        let last = Duration::from_millis(self.beat_ms.load(Ordering::Relaxed));
        self.born.elapsed().saturating_sub(last) <= HEARTBEAT_STALE
    }
}

/// Binds `addr` for the endpoints.
///
/// # Errors
/// The address in use or not bindable, naming `metrics.listen`.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("metrics.listen {addr}: {e} (another process on the port? set metrics.listen)")))
}

/// Answers requests on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, state: Arc<OpsState>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            if let Err(e) = tokio::time::timeout(Duration::from_secs(5), answer(stream, &state)).await.unwrap_or(Ok(())) {
                tracing::debug!(error = %e, "metrics request");
            }
        });
    }
}

/// A request's method, path and whether it accepts OpenMetrics.
type Head = (String, String, bool);

/// The method and path of the request head in `buf` and whether its `Accept` names
/// OpenMetrics, once the head is complete.
fn request_line(buf: &[u8]) -> Option<Result<Head, String>> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(_)) => {
            let open = req.headers.iter().any(|h| {
                h.name.eq_ignore_ascii_case("accept") && String::from_utf8_lossy(h.value).contains("application/openmetrics-text")
            });
            Some(Ok((req.method.unwrap_or("").to_string(), req.path.unwrap_or("").to_string(), open)))
        }
        Ok(httparse::Status::Partial) => None,
        Err(e) => Some(Err(e.to_string())),
    }
}

async fn answer(mut stream: TcpStream, state: &OpsState) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let head = loop {
        let mut chunk = [0u8; 1024];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(r) = request_line(&buf) {
            break r;
        }
        if buf.len() > 8192 {
            break Err("request head over 8 KiB".into());
        }
    };
    let (status, kind, body) = match head {
        Err(e) => ("400 Bad Request", "text/plain", format!("bad request: {e}\n")),
        Ok((method, _, _)) if method != "GET" && method != "HEAD" => ("405 Method Not Allowed", "text/plain", "GET only\n".into()),
        Ok((method, path, open)) => {
            let (status, kind, body) = route(state, path.split('?').next().unwrap_or(""), open);
            (status, kind, if method == "HEAD" { String::new() } else { body })
        }
    };
    let response =
        format!("HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// OpenMetrics' content type, which Prometheus asks for and parses.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Prometheus' text format, for everything else.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

fn route(state: &OpsState, path: &str, openmetrics: bool) -> (&'static str, &'static str, String) {
    match path {
        "/metrics" => match if openmetrics { state.metrics.encode() } else { state.metrics.encode_text() } {
            Ok(text) => ("200 OK", if openmetrics { OPENMETRICS } else { PROMETHEUS_TEXT }, text),
            Err(e) => ("500 Internal Server Error", "text/plain", format!("encoding the metrics: {e}\n")),
        },
        "/health/live" if state.alive() => ("200 OK", "text/plain", "live\n".into()),
        "/health/live" => ("503 Service Unavailable", "text/plain", "the serving runtime's heartbeat is stale\n".into()),
        "/health/ready" if state.ready.load(Ordering::SeqCst) && state.alive() => ("200 OK", "text/plain", "ready\n".into()),
        "/health/ready" => ("503 Service Unavailable", "text/plain", "not ready (starting, planning tables, or shutting down)\n".into()),
        _ => ("404 Not Found", "text/plain", "not found: /metrics, /health/live, /health/ready\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn endpoints_answer_as_the_state_says() {
        let state = Arc::new(OpsState::new(Metrics::new()));
        let listener = bind("127.0.0.1:0".parse().expect("addr")).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(serve(listener, state.clone()));
        let get = |path: &'static str| async move {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.expect("write");
            let mut out = String::new();
            s.read_to_string(&mut out).await.expect("read");
            out
        };
        state.beat();
        assert!(get("/health/live").await.starts_with("HTTP/1.1 200"));
        assert!(get("/health/ready").await.starts_with("HTTP/1.1 503"), "not ready until told");
        state.ready.store(true, Ordering::SeqCst);
        assert!(get("/health/ready").await.starts_with("HTTP/1.1 200"));
        let m = get("/metrics").await;
        assert!(m.starts_with("HTTP/1.1 200") && m.contains("version=0.0.4") && !m.contains("# EOF"), "{m}");
        assert!(get("/nope").await.starts_with("HTTP/1.1 404"));
        // A second bind of the same port names the field.
        let e = bind(addr).await.expect_err("in use");
        assert!(e.to_string().contains("metrics.listen"), "{e}");
        server.abort();
    }

    #[test]
    fn a_stale_heartbeat_is_not_alive() {
        let state = OpsState { born: Instant::now() - Duration::from_secs(60), ..OpsState::new(Metrics::new()) };
        assert!(!state.alive(), "no beat for a minute");
        state.beat();
        assert!(state.alive());
    }
}

//! How an inference's route in the session ends, and what the link then says of it
//! ([`LinkReport`]): the edge's figures from its Done, its Forward, the upload rate.
//!
//! The edge sends its Done once its replica's job has ended, just after its last band. A robot
//! with nothing left to compute after that band (server-only: the band is the output) has its
//! outputs before the Done arrives; it waits for it a short, bounded while
//! ([`DONE_WAIT`]), woken by the reader as the Done is taken in, so that the inference keeps the
//! edge's compute figure. The inference's time is stamped before that wait.

use std::time::Duration;

use super::connection::lock;
use super::{Connector, RobotClient};
use crate::bandwidth::upload;
use lop_msgs::protocol::Forward;

/// How long an inference the edge answered (no fallback) waits, after the robot has its outputs,
/// for the edge's Done when it has not come yet. It trails the last band by the edge's job
/// ending and one message on the link: a few milliseconds, more on a loaded machine. The wait
/// ends as soon as the Done is in, so the bound costs time only when the Done never comes (an
/// edge that died after its last band). Past it the inference ends without the edge's figures
/// (a Done that comes later still gives its upload rate).
pub(super) const DONE_WAIT: Duration = Duration::from_millis(200);

/// What the link says of an inference once it ended: the edge's figures from its Done (when
/// it came in time), its Forward, and how long the robot took to hand its bands to the link.
#[derive(Debug, Default)]
pub(super) struct LinkReport {
    pub(super) server_compute_s: Option<f64>,
    pub(super) upload_s: Option<f64>,
    pub(super) forward: Option<Forward>,
    pub(super) send_span_s: Option<f64>,
}

impl<C: Connector> RobotClient<C> {
    /// Waits up to [`DONE_WAIT`] for the edge's Done of inference `id`, while its route is still
    /// open (so the reader keeps it), unless it is there already or the session is gone. Bounded
    /// in time; each turn of the loop is one Done taken in by the reader (or the link's end).
    pub(super) async fn await_done(&self, id: u64) {
        let Some(conn) = &self.conn else { return };
        let until = tokio::time::Instant::now() + DONE_WAIT;
        loop {
            // Registered before the state is read: a Done taken in between still wakes it.
            let notified = conn.done_seen.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let here = lock(&conn.shared).done.as_ref().is_some_and(|(d, _)| *d == id);
            if here || conn.gone.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            if tokio::time::timeout_at(until, notified).await.is_err() {
                tracing::debug!(inference = id, wait_ms = DONE_WAIT.as_millis(), "the edge's Done did not come in time; no server figures");
                return;
            }
        }
    }

    /// Ends inference `id`'s route in the session and reads what the edge said of it: its Done
    /// (the upload rate measured now, or once a Done that trails it comes) and its Forward.
    pub(super) fn end_route(&self, id: u64, bytes_sent: u64, send_span_s: Option<f64>) -> LinkReport {
        let mut link = LinkReport { send_span_s, ..LinkReport::default() };
        if let Some(conn) = &self.conn {
            let mut sh = lock(&conn.shared);
            sh.route = None;
            sh.last_ended = id;
            link.forward = sh.forward.take().filter(|f| f.inference_id == id);
            sh.sent = None;
            if let Some((d, st)) = sh.done.take()
                && d == id
            {
                link.server_compute_s = Some(st.server_compute_ns as f64 * 1e-9);
                link.upload_s = (st.upload_ns > 0).then_some(st.upload_ns as f64 * 1e-9);
            }
            match (link.upload_s, send_span_s) {
                (Some(up), Some(span)) => sh.upload_mbps = upload::upload_mbps(bytes_sent, up, span).or(sh.upload_mbps),
                // The Done (and the edge's view of the upload) may trail the last band.
                (None, Some(span)) => sh.sent = Some((id, bytes_sent, span)),
                _ => {}
            }
        }
        link
    }
}

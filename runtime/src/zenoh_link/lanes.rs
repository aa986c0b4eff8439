//! The sender threads behind a [`ZenohTx`](super::ZenohTx): two lanes per link, control frames
//! at a higher Zenoh priority than bands, each published by a thread of its own so that
//! publishing (which can block inside Zenoh) never blocks `send`; the bulk lane holds a band
//! until every control frame sent before it is in Zenoh's queues (module docs of
//! [`zenoh_link`](super), "Priorities").

use std::sync::{Arc, Condvar, Mutex, PoisonError, mpsc as std_mpsc};

use lop_msgs::FrameKind;
use lop_msgs::protocol::{FRAME_MAGIC, HEADER_LEN};
use zenoh::Wait;
use zenoh::liveliness::LivelinessToken;
use zenoh::pubsub::Publisher;
use zenoh::qos::{CongestionControl, Priority as ZPriority};

use super::admission::QueueShare;
use super::peer::lock;
use crate::error::{Error, Result};

/// Zenoh priority of control frames.
pub(super) const CONTROL_PRIORITY: ZPriority = ZPriority::InteractiveHigh;
/// Zenoh priority of bands and anything that is not a control frame.
pub(super) const BULK_PRIORITY: ZPriority = ZPriority::DataLow;

/// Whether `bytes` is a Hello frame (the robot's control lane publishes those on its hello key).
fn is_hello(bytes: &[u8]) -> bool {
    bytes.len() >= HEADER_LEN && bytes[..4] == FRAME_MAGIC && FrameKind::from_u8(bytes[6]) == Some(FrameKind::Hello)
}

/// State shared by a [`ZenohTx`](super::ZenohTx) and its two sender threads.
#[derive(Debug, Default)]
pub(super) struct Lanes {
    pub(super) state: Mutex<LaneState>,
    /// Signalled when `control_done` grows.
    control_progress: Condvar,
}

#[derive(Debug, Default)]
pub(super) struct LaneState {
    /// The first publication failure.
    pub(super) failure: Option<String>,
    /// Control frames accepted by `send` so far.
    pub(super) control_issued: u64,
    /// Control frames handed to Zenoh so far (`u64::MAX` once the control thread ended).
    control_done: u64,
}

impl Lanes {
    fn fail(&self, lane: &str, what: String) {
        tracing::warn!(%lane, "{what}");
        lock(&self.state).failure.get_or_insert(what);
    }

    /// Counts control frames handed to Zenoh (`u64::MAX`: the control thread ended).
    fn control_done(&self, done: u64) {
        lock(&self.state).control_done = done;
        self.control_progress.notify_all();
    }

    /// Waits until the first `n` control frames have been handed to Zenoh.
    fn wait_control(&self, n: u64) {
        let mut state = lock(&self.state);
        while state.control_done < n {
            state = self.control_progress.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Publishers of one sender thread.
pub(super) struct LanePublishers {
    /// Where messages go.
    pub(super) main: Publisher<'static>,
    /// Where Hello frames go instead, if anywhere else (robot control lane only).
    pub(super) hello: Option<Publisher<'static>>,
}

/// Which lane a sender thread serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LaneKind {
    Control,
    Bulk,
}

/// A message for a sender thread: for the bulk lane, the number of control frames that were
/// accepted before it (and must be handed to Zenoh before it).
pub(super) type LaneMsg = (u64, Vec<u8>);

/// Spawns a sender thread that publishes what it receives, in order, until every sender of the
/// channel is gone and the channel is empty. `keep` is dropped when the thread ends.
///
/// Zenoh keeps order within a priority only. So that a band never overtakes a control frame sent
/// before it, the bulk thread waits until the control thread has handed every earlier control
/// frame to Zenoh (whose higher-priority queue then goes first). The control thread never waits
/// for bands.
pub(super) fn spawn_lane(
    kind: LaneKind,
    name: String,
    publishers: LanePublishers,
    (lanes, queued): (Arc<Lanes>, QueueShare),
    keep: Option<Arc<LivelinessToken>>,
) -> Result<std_mpsc::Sender<LaneMsg>> {
    let (tx, rx) = std_mpsc::channel::<LaneMsg>();
    let lane = name.clone();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let _keep = keep;
            let mut done = 0_u64;
            while let Ok((after_control, bytes)) = rx.recv() {
                if kind == LaneKind::Bulk {
                    lanes.wait_control(after_control);
                }
                let publisher = match &publishers.hello {
                    Some(hello) if is_hello(&bytes) => hello,
                    _ => &publishers.main,
                };
                let n = bytes.len();
                if let Err(e) = publisher.put(bytes).wait() {
                    lanes.fail(&lane, format!("publishing on {}: {e}", publisher.key_expr()));
                }
                queued.release(n);
                if kind == LaneKind::Control {
                    done += 1;
                    lanes.control_done(done);
                }
            }
            if kind == LaneKind::Control {
                lanes.control_done(u64::MAX);
            }
            tracing::trace!(%lane, "zenoh sender thread ends");
        })
        .map_err(|e| Error::Zenoh(format!("spawning sender thread {name}: {e}")))?;
    Ok(tx)
}

pub(super) async fn declare_publisher(session: &zenoh::Session, key: &str, priority: ZPriority) -> Result<Publisher<'static>> {
    session
        .declare_publisher(key.to_string())
        .priority(priority)
        .congestion_control(CongestionControl::Block)
        .express(true)
        .await
        .map_err(|e| Error::Zenoh(format!("declaring a publisher on {key}: {e}")))
}

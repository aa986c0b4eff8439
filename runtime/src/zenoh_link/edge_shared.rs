//! What the edge's subscriber callbacks share ([`EdgeShared`]) and do: a Hello starts a robot's
//! session (rate-limited, validated, admitted past the caps of [`admission`] or refused with a
//! Reject), an uplink frame goes to its robot's session, and a robot's liveliness ends it. The
//! sessions they start wait as [`Pending`] for the acceptor, which sits on top of this file.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lop_msgs::Frame;
use lop_msgs::key::SessionKeys;
use tokio::sync::mpsc;
use zenoh::sample::{Sample, SampleKind};

use super::admission::{self, QueueShare, RobotEntry, Slot};
use super::peer::{PeerState, lock};

/// Shortest time between two Hellos of one robot id that the edge acts on; Hellos closer than
/// this are dropped and counted (a flood: each Hello restarts the robot's session and may carry
/// a 4 MiB profile to parse). A robot repeats its Hello every 500 ms at most.
pub const HELLO_MIN_INTERVAL: Duration = Duration::from_millis(100);

/// A session started by a Hello, waiting for [`EdgeAcceptor::accept`](super::EdgeAcceptor::accept).
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) robot_id: String,
    pub(super) inbox: mpsc::UnboundedReceiver<Vec<u8>>,
    pub(super) peer: Arc<PeerState>,
    pub(super) queued: QueueShare,
}

/// State shared by the acceptor and its subscriber callbacks.
#[derive(Debug)]
pub(super) struct EdgeShared {
    pub(super) keys: SessionKeys,
    pub(super) robots: Mutex<HashMap<String, RobotEntry>>,
    pub(super) pending: mpsc::UnboundedSender<Pending>,
    pub(super) dropped: Arc<AtomicU64>,
    /// Rejects to publish (downlink key, frame): Hellos of another protocol version, or past a
    /// cap ([`admission`]).
    pub(super) refusals: mpsc::Sender<(String, Vec<u8>)>,
    /// Bytes all sessions hold received and not yet taken.
    pub(super) queued_total: Arc<AtomicUsize>,
    /// Hellos refused past a cap ([`admission`]).
    pub(super) sessions_refused: Arc<AtomicU64>,
}

impl EdgeShared {
    fn drop_one(&self, what: &str, key: &str, bytes: usize) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(key, bytes, "dropped: {what}");
    }

    pub(super) fn on_hello(&self, sample: &Sample) {
        let key = sample.key_expr().as_str();
        if sample.kind() != SampleKind::Put {
            return self.drop_one("delete on the hello key", key, 0);
        }
        // Rate first, before anything is decoded.
        if let Some(robot) = self.keys.robot_of_hello(key)
            && lock(&self.robots).get(robot).and_then(|e| e.last_hello).is_some_and(|t| t.elapsed() < HELLO_MIN_INTERVAL)
        {
            return self.drop_one("hello sooner than HELLO_MIN_INTERVAL after the last one", key, sample.payload().len());
        }
        let bytes = sample.payload().to_bytes().into_owned();
        let robot_id = match lop_msgs::protocol::decode(&bytes) {
            Ok(Frame::Hello(hello)) => hello.robot_id,
            Ok(other) => return self.drop_one(&format!("{:?} frame on the hello key", other.kind()), key, bytes.len()),
            Err(lop_msgs::Error::UnsupportedVersion { found, supported }) => return self.refuse_version(key, found, supported),
            Err(e) => return self.drop_one(&format!("malformed hello: {e}"), key, bytes.len()),
        };
        if let Err(e) = lop_msgs::validate_robot_id(&robot_id) {
            return self.drop_one(&format!("hello with a bad robot id: {e}"), key, bytes.len());
        }
        if self.keys.robot_of_hello(key) != Some(robot_id.as_str()) {
            // A robot speaking for another one: it would end that robot's session. Access control
            // confines an authenticated robot to its own keys, so the key names the sender.
            tracing::warn!(key, claimed = %robot_id, "hello refused: its robot id is not its key's");
            return self.drop_one("hello whose robot id is not its key's", key, bytes.len());
        }
        let (inbox_tx, inbox) = mpsc::unbounded_channel();
        let peer = Arc::new(PeerState::default());
        let queued = QueueShare::of(&self.queued_total);
        {
            let mut robots = lock(&self.robots);
            if let Err(cap) = admission::admit(&mut robots, &robot_id).and_then(|()| queued.charge(bytes.len())) {
                // Its next Hello is rate-limited too, if its id is remembered (never past the cap).
                if robots.contains_key(&robot_id) || robots.len() < admission::MAX_ROBOT_IDS {
                    robots.entry(robot_id.clone()).or_default().last_hello = Some(std::time::Instant::now());
                }
                drop(robots);
                return self.refuse_busy(&robot_id, cap);
            }
            // The Hello is the first message of the new session; the channel is open, so this
            // cannot fail.
            let _ = inbox_tx.send(bytes);
            let entry = robots.entry(robot_id.clone()).or_default();
            entry.last_hello = Some(std::time::Instant::now());
            if let Some(old) = entry.session.replace(Slot { inbox: inbox_tx, peer: peer.clone(), queued: queued.clone() }) {
                tracing::info!(robot = %robot_id, "new hello ends the robot's previous session");
                old.end();
            }
        }
        tracing::debug!(robot = %robot_id, "hello: new session");
        if self.pending.send(Pending { robot_id, inbox, peer, queued }).is_err() {
            tracing::debug!("hello after the acceptor was dropped");
        }
    }

    /// A Hello in another protocol version: refused, logged, and answered with a Reject on the
    /// robot's downlink, so that both ends say why instead of the robot timing out. The frame
    /// header (magic, version) is the same in every version, so a robot of any version can tell
    /// which one the edge speaks. Rate-limited like Hellos (the key's robot's last Hello).
    fn refuse_version(&self, key: &str, found: u16, supported: u16) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        let Some(robot) = self.keys.robot_of_hello(key) else { return };
        lock(&self.robots).entry(robot.to_string()).or_default().last_hello = Some(std::time::Instant::now());
        tracing::warn!(
            robot,
            found,
            supported,
            "hello refused: the robot speaks protocol version {found}, this edge speaks {supported}; run the same lop release on both"
        );
        let text = format!(
            "protocol version {found} refused: this edge speaks protocol version {supported}; run the same lop release on robot and edge"
        );
        self.send_reject(robot, lop_msgs::protocol::RejectReason::UnsupportedVersion, text);
    }

    /// A Hello past a cap ([`admission`]): no session is made; the robot is told why (`Busy`,
    /// it runs alone and retries), and the refusal is logged and counted.
    fn refuse_busy(&self, robot: &str, cap: String) {
        let n = self.sessions_refused.fetch_add(1, Ordering::Relaxed) + 1;
        // A flood of Hellos past the cap is rate-limited per id already; warn at powers of two.
        if n.is_power_of_two() {
            tracing::warn!(robot, refused = n, "hello refused: {cap}");
        } else {
            tracing::debug!(robot, "hello refused: {cap}");
        }
        self.send_reject(robot, lop_msgs::protocol::RejectReason::Busy, cap);
    }

    /// Publishes a Reject on `robot`'s downlink (from a task: callbacks must not block).
    fn send_reject(&self, robot: &str, reason: lop_msgs::protocol::RejectReason, text: String) {
        let reject = Frame::Reject(lop_msgs::protocol::Reject { reason, text, server_profile: Vec::new() });
        match (self.keys.down(robot), reject.encode()) {
            (Ok(down), Ok(bytes)) => {
                // Full only under a flood of refusals, which the Hello rate limit already bounds.
                let _ = self.refusals.try_send((down, bytes));
            }
            (Err(e), _) | (_, Err(e)) => tracing::debug!(robot, "no refusal sent: {e}"),
        }
    }

    pub(super) fn on_up(&self, sample: &Sample) {
        let key = sample.key_expr().as_str();
        let robot = match self.keys.robot_of_up(key) {
            Some(robot) => robot.to_string(),
            None => return self.drop_one("unexpected key", key, 0),
        };
        if sample.kind() != SampleKind::Put {
            return self.drop_one("delete on an up key", key, 0);
        }
        let bytes = sample.payload().to_bytes().into_owned();
        let n = bytes.len();
        let delivered = match lock(&self.robots).get(&robot).and_then(|e| e.session.as_ref()) {
            Some(slot) => match slot.queued.charge(n) {
                Err(full) => return self.drop_one(&full, key, n),
                // A send error means the session's rx was dropped: the frame is as good as dropped.
                Ok(()) => {
                    let sent = slot.inbox.send(bytes).is_ok();
                    if !sent {
                        slot.queued.release(n);
                    }
                    sent
                }
            },
            None => false,
        };
        if !delivered {
            self.drop_one("frame from a robot without a session", key, n);
        }
    }

    pub(super) fn on_robot_liveliness(&self, sample: &Sample) {
        let key = sample.key_expr().as_str();
        let Some(robot) = lop_msgs::key::alive_robot(key) else {
            return; // The edge's own token (or a stranger's key) matches no robot.
        };
        let mut robots = lock(&self.robots);
        let entry = robots.entry(robot.to_string()).or_default();
        let none_left = entry.tokens.apply(sample.kind());
        tracing::debug!(robot, kind = ?sample.kind(), alive = entry.tokens.alive, "robot liveliness");
        if none_left {
            if let Some(slot) = entry.session.take() {
                tracing::info!(robot, "robot gone (its liveliness token disappeared): session ends");
                slot.end();
            }
            robots.remove(robot);
        }
    }
}

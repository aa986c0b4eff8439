//! What the edge's acceptor admits (issue 56): how many robot sessions may be open at once, how
//! many bytes they may hold received and not yet taken, in each session and in all together,
//! and how many robot ids it remembers. A Hello past a cap is refused on the spot (a `Busy`
//! Reject naming the cap, counted), so no session, thread or queue is made for it.
//!
//! The records those caps bound live here too, below the callbacks that fill them: what the
//! edge knows about one robot id (`RobotEntry`) and its open session (`Slot`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::mpsc;

use super::peer::{PeerState, TokenCount};

/// Robot sessions open at once on one acceptor; a Hello from another robot past it is refused
/// as `Busy` (each session holds two sender threads and up to [`SESSION_QUEUE_BYTES`]).
pub const MAX_SESSIONS: usize = 256;

/// Bytes one robot session may have received and not yet taken (its edge session task drains
/// continuously; a robot that sends faster than the edge can take is cut off here, its frames
/// dropped and counted, so that memory stays bounded): 128 MiB.
pub const SESSION_QUEUE_BYTES: usize = 128 << 20;

/// Bytes all sessions of one acceptor may hold received and not yet taken: 1 GiB. Past it, a
/// frame is dropped (counted, its inference finished by the robot alone) and a new Hello refused.
pub const TOTAL_QUEUE_BYTES: usize = 1 << 30;

/// Robot ids remembered at once (their Hello times and liveliness); past it, those without a
/// session or a live token are forgotten, and if none can be, a new id's Hello is refused.
pub const MAX_ROBOT_IDS: usize = 4 * MAX_SESSIONS;

/// Bytes one session's sending half may hold accepted and not yet handed to Zenoh (a robot
/// that stops reading backs them up there): 128 MiB, twice the longest frame. Past it, a band is
/// refused ([`crate::Error::QueueFull`]); control frames, a few bytes each, always pass.
pub const SESSION_OUT_BYTES: usize = 128 << 20;

/// Bytes all sessions of one acceptor may hold queued to send: 1 GiB, as received.
pub const TOTAL_OUT_BYTES: usize = 1 << 30;

/// Bytes a robot's sending half may hold accepted and not yet handed to Zenoh: 256 MiB, room
/// for several inferences' bands on a slow link. Past it (the edge has stopped reading) a band
/// is refused, and the robot finishes its inference alone.
pub const ROBOT_OUT_BYTES: usize = 256 << 20;

/// One session's share of a queue budget: its own bytes and the acceptor's total, each with its
/// cap (received bytes: [`SESSION_QUEUE_BYTES`] and [`TOTAL_QUEUE_BYTES`]; bytes to send:
/// [`SESSION_OUT_BYTES`] and [`TOTAL_OUT_BYTES`]).
#[derive(Debug, Clone)]
pub(crate) struct QueueShare {
    own: Arc<AtomicUsize>,
    total: Arc<AtomicUsize>,
    own_cap: usize,
    total_cap: usize,
    /// The caps' names, for the refusal's text.
    names: (&'static str, &'static str),
}

impl Default for QueueShare {
    /// A received queue's share of a total of its own.
    fn default() -> QueueShare {
        QueueShare::of(&Arc::default())
    }
}

impl QueueShare {
    /// A new session's share of `total`, the bytes received and not yet taken.
    pub(super) fn of(total: &Arc<AtomicUsize>) -> QueueShare {
        QueueShare::with_caps(total, SESSION_QUEUE_BYTES, TOTAL_QUEUE_BYTES, ("SESSION_QUEUE_BYTES", "TOTAL_QUEUE_BYTES"))
    }

    /// A new session's share of `total`, the bytes queued to send.
    pub(crate) fn outbound(total: &Arc<AtomicUsize>) -> QueueShare {
        QueueShare::with_caps(total, SESSION_OUT_BYTES, TOTAL_OUT_BYTES, ("SESSION_OUT_BYTES", "TOTAL_OUT_BYTES"))
    }

    /// A share of `total` with these caps, named `names` in refusals.
    pub(crate) fn with_caps(total: &Arc<AtomicUsize>, own_cap: usize, total_cap: usize, names: (&'static str, &'static str)) -> QueueShare {
        QueueShare { own: Arc::default(), total: total.clone(), own_cap, total_cap, names }
    }

    /// Bytes this share holds now.
    pub(crate) fn held(&self) -> usize {
        self.own.load(Ordering::Relaxed)
    }

    /// Charges `n` bytes, or says which budget they would pass (charging nothing).
    pub(crate) fn charge(&self, n: usize) -> Result<(), String> {
        if self.own.load(Ordering::Relaxed) + n > self.own_cap {
            return Err(format!("session queue full ({} = {} bytes, {} held)", self.names.0, self.own_cap, self.held()));
        }
        if self.total.fetch_add(n, Ordering::Relaxed) + n > self.total_cap {
            self.total.fetch_sub(n, Ordering::Relaxed);
            return Err(format!("all sessions' queues full ({} = {} bytes)", self.names.1, self.total_cap));
        }
        self.own.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// Charges `n` bytes whatever the caps (a control frame: it must pass, and is small).
    pub(crate) fn charge_always(&self, n: usize) {
        self.own.fetch_add(n, Ordering::Relaxed);
        self.total.fetch_add(n, Ordering::Relaxed);
    }

    /// Releases `n` bytes charged before (taken by the session, or not delivered after all).
    pub(crate) fn release(&self, n: usize) {
        self.own.fetch_sub(n, Ordering::Relaxed);
        self.total.fetch_sub(n, Ordering::Relaxed);
    }

    /// Releases everything this share still holds (its session is gone with its queue).
    pub(super) fn release_all(&self) {
        let n = self.own.swap(0, Ordering::Relaxed);
        self.total.fetch_sub(n, Ordering::Relaxed);
    }
}

/// What the edge knows about one robot id.
#[derive(Debug, Default)]
pub(super) struct RobotEntry {
    pub(super) tokens: TokenCount,
    pub(super) session: Option<Slot>,
    /// When its last Hello was acted on.
    pub(super) last_hello: Option<std::time::Instant>,
}

/// The current session of one robot, as the callbacks see it.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) inbox: mpsc::UnboundedSender<Vec<u8>>,
    pub(super) peer: Arc<PeerState>,
    /// Bytes in `inbox` not yet received by the session (at most [`SESSION_QUEUE_BYTES`], and
    /// all sessions together at most [`TOTAL_QUEUE_BYTES`]).
    pub(super) queued: QueueShare,
}

impl Slot {
    pub(super) fn end(self) {
        self.peer.set_gone();
        // Dropping `inbox` lets the rx drain and then return `Ok(None)`.
    }
}

/// Sessions whose receiving half is still there.
fn live_sessions(robots: &HashMap<String, RobotEntry>) -> usize {
    robots.values().filter(|e| e.session.as_ref().is_some_and(|s| !s.inbox.is_closed())).count()
}

/// Whether a Hello of `robot_id` may open a session: a robot replacing its own session always
/// may; another needs a free session and, when the ids are many, a forgettable one.
///
/// # Errors
/// The cap it would pass, in words (sent in the `Busy` Reject and logged).
pub(super) fn admit(robots: &mut HashMap<String, RobotEntry>, robot_id: &str) -> Result<(), String> {
    if robots.get(robot_id).is_some_and(|e| e.session.as_ref().is_some_and(|s| !s.inbox.is_closed())) {
        return Ok(());
    }
    let open = live_sessions(robots);
    if open >= MAX_SESSIONS {
        return Err(format!("the edge has {open} robot sessions open, its cap (MAX_SESSIONS = {MAX_SESSIONS}): retry later"));
    }
    if !robots.contains_key(robot_id) && robots.len() >= MAX_ROBOT_IDS {
        // Ids without a session or a live token only hold their last Hello's time.
        robots.retain(|_, e| e.tokens.alive > 0 || e.session.as_ref().is_some_and(|s| !s.inbox.is_closed()));
        if robots.len() >= MAX_ROBOT_IDS {
            return Err(format!("the edge tracks {} robot ids, its cap (MAX_ROBOT_IDS = {MAX_ROBOT_IDS}): retry later", robots.len()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::peer::PeerState;
    use super::*;

    /// A map of `n` robots with open sessions, and the receivers that keep them open.
    fn open(n: usize) -> (HashMap<String, RobotEntry>, Vec<mpsc::UnboundedReceiver<Vec<u8>>>) {
        let (mut robots, mut keep) = (HashMap::new(), Vec::new());
        for i in 0..n {
            let (tx, rx) = mpsc::unbounded_channel();
            let slot = Slot { inbox: tx, peer: Arc::new(PeerState::default()), queued: QueueShare::default() };
            robots.insert(format!("r{i}"), RobotEntry { session: Some(slot), ..Default::default() });
            keep.push(rx);
        }
        (robots, keep)
    }

    #[test]
    fn sessions_past_the_cap_are_refused_naming_it_but_a_robot_may_replace_its_own() {
        let (mut robots, mut keep) = open(MAX_SESSIONS);
        let why = admit(&mut robots, "new").expect_err("past the cap");
        assert!(why.contains("MAX_SESSIONS = 256"), "{why}");
        assert!(admit(&mut robots, "r7").is_ok(), "a robot replacing its own session");
        // A session whose receiving half is gone frees its place.
        drop(keep.remove(0));
        assert!(admit(&mut robots, "new").is_ok());
    }

    #[test]
    fn robot_ids_past_the_cap_are_forgotten_when_idle_and_refused_when_not() {
        let mut robots: HashMap<String, RobotEntry> = (0..MAX_ROBOT_IDS).map(|i| (format!("idle{i}"), RobotEntry::default())).collect();
        assert!(admit(&mut robots, "new").is_ok());
        assert_eq!(robots.len(), 0, "ids without a session or a token are forgotten");
        let mut alive = RobotEntry::default();
        alive.tokens.alive = 1;
        let mut robots: HashMap<String, RobotEntry> =
            (0..MAX_ROBOT_IDS).map(|i| (format!("alive{i}"), RobotEntry { tokens: alive.tokens, ..Default::default() })).collect();
        let why = admit(&mut robots, "new").expect_err("every id holds a token");
        assert!(why.contains("MAX_ROBOT_IDS"), "{why}");
    }

    #[test]
    fn queues_are_bounded_per_session_and_in_total() {
        let total = Arc::new(AtomicUsize::new(0));
        let shares: Vec<QueueShare> = (0..TOTAL_QUEUE_BYTES / SESSION_QUEUE_BYTES + 1).map(|_| QueueShare::of(&total)).collect();
        assert!(shares[0].charge(SESSION_QUEUE_BYTES).is_ok());
        assert!(shares[0].charge(1).expect_err("its own queue is full").contains("session queue"));
        for s in &shares[1..shares.len() - 1] {
            assert!(s.charge(SESSION_QUEUE_BYTES).is_ok());
        }
        let last = shares.last().expect("shares");
        assert!(last.charge(1).expect_err("all queues together are full").contains("TOTAL_QUEUE_BYTES"));
        assert_eq!(total.load(Ordering::Relaxed), TOTAL_QUEUE_BYTES, "a refused charge takes nothing");
        shares[0].release(SESSION_QUEUE_BYTES / 2);
        shares[1].release_all();
        assert!(last.charge(SESSION_QUEUE_BYTES).is_ok());
        assert_eq!(total.load(Ordering::Relaxed), TOTAL_QUEUE_BYTES - SESSION_QUEUE_BYTES / 2);
    }
}

//! The Zenoh link (DESIGN.md section 6): [`LinkTx`] / [`LinkRx`] halves over Zenoh 1.x pub/sub.
//!
//! # Sessions and keys
//!
//! [`ZenohConfig::open`] opens a Zenoh session. The edge usually runs a router listening on TCP,
//! robots run clients connecting to it (or peers). Multicast scouting is off unless asked for, so
//! a session only meets the endpoints it was told about.
//!
//! | key (see [`lop_msgs::key`]) | who publishes       | what                                      |
//! |-----------------------------|---------------------|-------------------------------------------|
//! | `lop/v1/<robot>/hello`      | robot ([`robot_link`]) | Hello frames (the only thing sent there) |
//! | `lop/v1/<robot>/up`         | robot               | every other frame of the robot            |
//! | `lop/v1/<robot>/down`       | edge ([`EdgeConn`]) | every frame towards that robot            |
//! | `lop/v1/edge/alive`         | edge (liveliness)   | token held while the [`EdgeAcceptor`] lives |
//! | `lop/v1/<robot>/alive`      | robot (liveliness)  | token held while the robot's [`ZenohTx`] lives |
//!
//! That is the single edge's key space. A fleet edge ([`EdgeAcceptor::on`],
//! [`robot_link_on`] with [`SessionKeys::fleet`]) adds its id, so that several edges share one
//! Zenoh network and each hears only the robots that address it: `lop/v1/<robot>/<edge>/hello`,
//! `lop/v1/<robot>/<edge>/up`, `lop/v1/<robot>/<edge>/down`, token `lop/v1/edge/<edge>/alive`.
//!
//! # Priorities
//!
//! Every message is published reliable, express (not batched) and with
//! [`CongestionControl::Block`] (Zenoh never drops it for congestion; a full queue blocks the
//! sender). The Zenoh priority follows [`Priority::of_frame_bytes`]: control frames go at
//! [`ZPriority::InteractiveHigh`], bands (and non-frames) at [`ZPriority::DataLow`]. Zenoh keeps
//! one queue per priority and always drains the higher one first, so a control frame never waits
//! behind queued bands. As in [`shaped`](crate::shaped), order is kept within a priority, a
//! control frame may overtake bands sent before it, and a band never overtakes a control frame
//! sent before it (a Start always arrives before its bands).
//!
//! Publishing can block inside Zenoh (congestion control `Block`), so [`ZenohTx::send`] never
//! calls Zenoh itself: it hands the message to one of two sender threads per link (one per
//! priority, so a blocked band never holds back a control frame) and returns. The bulk thread
//! publishes a band only once every control frame sent before it is in Zenoh's queues. A message
//! accepted by `send` is published even if the `ZenohTx` is dropped right after. A failed
//! publication is logged and makes later sends fail with [`Error::Zenoh`]. Zenoh closes a
//! transport whose queue stays blocked for 5 s (`wait_before_close`), e.g. when the link rate
//! stays at 0.
//!
//! # Liveliness: when [`recv`](LinkRx::recv) returns `Ok(None)`
//!
//! Zenoh has no connection per robot, so the end of a peer is read from liveliness tokens. Zenoh
//! removes a token when its owner drops it, closes its session, or loses its transport (a killed
//! process's TCP connection closes at once; a silent network loss is detected after the Zenoh
//! lease, 10 s by default).
//!
//! - Robot side: the [`ZenohRx`] of [`robot_link`] watches `lop/v1/edge/alive`. The edge is
//!   *gone* once it has been seen alive (a token appeared) and then no edge token is left. A robot
//!   that starts before the edge is therefore not told "gone" while it waits. Once gone, the rx
//!   delivers what it already received, then `Ok(None)`, and stays closed (a restarted edge needs a
//!   new [`robot_link`]); the paired [`ZenohTx`] then fails with [`Error::Closed`].
//! - Edge side: a session of a robot ends when a new Hello of the same robot id starts another one,
//!   when no token `lop/v1/<robot>/alive` is left after a removal (robot gone), or when the
//!   [`EdgeAcceptor`] is dropped. Its rx then delivers what it holds and returns `Ok(None)`; its tx
//!   fails with [`Error::Closed`].
//!
//! Tokens are counted per key (appearances minus removals), so a robot that restarts under the
//! same id before Zenoh noticed its old process is gone is not cut off by the late removal.
//! Token changes travel at Zenoh's control priority, ahead of queued data: when a robot drops its
//! link, bands still in Zenoh's queues may arrive after the edge ended that session, and are then
//! dropped and counted. Liveliness signals a peer that is gone, not an end of stream.
//!
//! # Runtime
//!
//! Zenoh runs its own tokio runtimes. Some Zenoh calls panic on tokio's current-thread scheduler
//! (blocking waits), so use a multi-thread runtime (`flavor = "multi_thread"` in tests).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, mpsc as std_mpsc};
use std::time::Duration;

use lop_msgs::key::{ALL_ALIVE, SessionKeys};
use lop_msgs::protocol::{FRAME_MAGIC, HEADER_LEN};
use lop_msgs::{Frame, FrameKind};
use tokio::sync::mpsc;
use zenoh::Wait;
use zenoh::liveliness::LivelinessToken;
use zenoh::pubsub::{Publisher, Subscriber};
use zenoh::qos::{CongestionControl, Priority as ZPriority};
use zenoh::sample::{Sample, SampleKind};

use crate::error::{Error, Result};
use crate::link::{Counters, LinkRx, LinkTx, Priority, Traffic};
use crate::security::Security;

/// Zenoh priority of control frames.
const CONTROL_PRIORITY: ZPriority = ZPriority::InteractiveHigh;
/// Zenoh priority of bands and anything that is not a control frame.
const BULK_PRIORITY: ZPriority = ZPriority::DataLow;

/// The role of a Zenoh session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ZenohMode {
    /// A peer: connects to and accepts other peers.
    Peer,
    /// A client: connects to one router (or peer) and routes nothing.
    Client,
    /// A router: accepts clients and peers and routes between them (the edge).
    Router,
}

impl ZenohMode {
    fn as_str(self) -> &'static str {
        match self {
            ZenohMode::Peer => "peer",
            ZenohMode::Client => "client",
            ZenohMode::Router => "router",
        }
    }
}

/// What [`open`](ZenohConfig::open) configures of a Zenoh session; everything else keeps Zenoh's
/// defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZenohConfig {
    /// The session's role.
    pub mode: ZenohMode,
    /// Endpoints to listen on, e.g. `tcp/0.0.0.0:7447`. Empty: a router keeps Zenoh's default
    /// (`tcp/[::]:7447`, every interface: the edge is a server); a peer or a client listens
    /// nowhere and only dials out (Zenoh's own peer default, `tcp/[::]:0`, would accept
    /// connections from anyone on the site's network).
    pub listen: Vec<String>,
    /// Endpoints to connect to, e.g. `tcp/192.168.1.10:7447`.
    pub connect: Vec<String>,
    /// Whether to discover other Zenoh nodes by UDP multicast (off in the constructors).
    pub multicast_scouting: bool,
    /// TLS, authentication and access control (none in the constructors).
    pub security: Security,
    /// Longest message Zenoh reassembles, bytes (`None`: Zenoh's 1 GiB). The edge sets its
    /// longest frame, so that an oversized message is dropped by Zenoh before it is held whole.
    pub max_message_bytes: Option<usize>,
}

impl ZenohConfig {
    /// A router listening on `listen` (the edge).
    pub fn router(listen: Vec<String>) -> ZenohConfig {
        ZenohConfig {
            mode: ZenohMode::Router,
            listen,
            connect: Vec::new(),
            multicast_scouting: false,
            security: Security::default(),
            max_message_bytes: None,
        }
    }

    /// A client connecting to `connect` (a robot).
    pub fn client(connect: Vec<String>) -> ZenohConfig {
        ZenohConfig {
            mode: ZenohMode::Client,
            listen: Vec::new(),
            connect,
            multicast_scouting: false,
            security: Security::default(),
            max_message_bytes: None,
        }
    }

    /// A peer listening on `listen` and connecting to `connect`.
    pub fn peer(listen: Vec<String>, connect: Vec<String>) -> ZenohConfig {
        ZenohConfig {
            mode: ZenohMode::Peer,
            listen,
            connect,
            multicast_scouting: false,
            security: Security::default(),
            max_message_bytes: None,
        }
    }

    /// Sets multicast scouting.
    pub fn with_multicast_scouting(mut self, on: bool) -> ZenohConfig {
        self.multicast_scouting = on;
        self
    }

    /// Sets the security settings.
    pub fn with_security(mut self, security: Security) -> ZenohConfig {
        self.security = security;
        self
    }

    /// The Zenoh configuration this describes.
    ///
    /// # Errors
    ///
    /// [`Error::Zenoh`] when Zenoh refuses a value (e.g. a malformed endpoint);
    /// [`Error::InvalidConfig`] for an unreadable TLS file or an invalid access policy.
    pub fn to_zenoh(&self) -> Result<zenoh::Config> {
        let mut config = zenoh::Config::default();
        let mut set = |key: &str, value: String| {
            config.insert_json5(key, &value).map_err(|e| {
                let shown = if key.contains("password") { "<hidden>" } else { value.as_str() };
                Error::Zenoh(format!("config {key} = {shown}: {e}"))
            })
        };
        set("mode", json_string(self.mode.as_str()))?;
        if !self.listen.is_empty() || self.mode != ZenohMode::Router {
            set("listen/endpoints", json_strings(&self.listen))?;
        }
        if !self.connect.is_empty() {
            set("connect/endpoints", json_strings(&self.connect))?;
            // A robot whose edge restarts must be back on split inference within seconds; Zenoh's
            // default retry backs off to 4 s between attempts. A refused TCP connect costs little.
            set(
                "connect/retry",
                format!(
                    r#"{{"period_init_ms": {CONNECT_RETRY_INIT_MS}, "period_max_ms": {CONNECT_RETRY_MAX_MS}, "period_increase_factor": 2.0}}"#
                ),
            )?;
        }
        set("scouting/multicast/enabled", self.multicast_scouting.to_string())?;
        // hiroz builds Zenoh with shared memory, which would carry large payloads between a robot
        // and an edge on one host through memory instead of the link (and past any tc shaping).
        // The robot-edge link is a network link: never shortcut it.
        set("transport/shared_memory/enabled", "false".into())?;
        if let Some(n) = self.max_message_bytes {
            set("transport/link/rx/max_message_size", n.to_string())?;
        }
        self.security.apply(&mut set)?;
        Ok(config)
    }

    /// Opens a session.
    ///
    /// # Errors
    ///
    /// [`Error::Zenoh`] when the configuration is refused or the session cannot start (e.g. the
    /// listen port is taken, or a client finds no router).
    pub async fn open(&self) -> Result<zenoh::Session> {
        let config = self.to_zenoh()?;
        zenoh::open(config).await.map_err(|e| Error::Zenoh(format!("opening a {} session ({self:?}): {e}", self.mode.as_str())))
    }
}

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

fn json_strings(v: &[String]) -> String {
    serde_json::Value::Array(v.iter().map(|s| serde_json::Value::String(s.clone())).collect()).to_string()
}

/// Whether the other end of a link is gone, shared by the two halves of one end.
#[derive(Debug, Default)]
struct PeerState {
    gone: AtomicBool,
}

impl PeerState {
    fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    fn set_gone(&self) {
        self.gone.store(true, Ordering::Release);
    }
}

/// Locks a mutex that is never held across a panic-prone section, so poisoning is harmless.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn is_hello(bytes: &[u8]) -> bool {
    bytes.len() >= HEADER_LEN && bytes[..4] == FRAME_MAGIC && FrameKind::from_u8(bytes[6]) == Some(FrameKind::Hello)
}

/// State shared by a [`ZenohTx`] and its two sender threads.
#[derive(Debug, Default)]
struct Lanes {
    state: Mutex<LaneState>,
    /// Signalled when `control_done` grows.
    control_progress: Condvar,
}

#[derive(Debug, Default)]
struct LaneState {
    /// The first publication failure.
    failure: Option<String>,
    /// Control frames accepted by `send` so far.
    control_issued: u64,
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
struct LanePublishers {
    /// Where messages go.
    main: Publisher<'static>,
    /// Where Hello frames go instead, if anywhere else (robot control lane only).
    hello: Option<Publisher<'static>>,
}

/// Which lane a sender thread serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LaneKind {
    Control,
    Bulk,
}

/// A message for a sender thread: for the bulk lane, the number of control frames that were
/// accepted before it (and must be handed to Zenoh before it).
type LaneMsg = (u64, Vec<u8>);

/// Spawns a sender thread that publishes what it receives, in order, until every sender of the
/// channel is gone and the channel is empty. `keep` is dropped when the thread ends.
///
/// Zenoh keeps order within a priority only. So that a band never overtakes a control frame sent
/// before it, the bulk thread waits until the control thread has handed every earlier control
/// frame to Zenoh (whose higher-priority queue then goes first). The control thread never waits
/// for bands.
fn spawn_lane(
    kind: LaneKind,
    name: String,
    publishers: LanePublishers,
    (lanes, queued): (Arc<Lanes>, admission::QueueShare),
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

async fn declare_publisher(session: &zenoh::Session, key: &str, priority: ZPriority) -> Result<Publisher<'static>> {
    session
        .declare_publisher(key.to_string())
        .priority(priority)
        .congestion_control(CongestionControl::Block)
        .express(true)
        .await
        .map_err(|e| Error::Zenoh(format!("declaring a publisher on {key}: {e}")))
}

/// Sending half of a Zenoh link: publishes on the peer's key (see the module docs).
pub struct ZenohTx {
    /// What this half publishes on, for logs and `Debug`.
    key: String,
    control: std_mpsc::Sender<LaneMsg>,
    bulk: std_mpsc::Sender<LaneMsg>,
    lanes: Arc<Lanes>,
    peer: Arc<PeerState>,
    counters: Counters,
    /// Bytes accepted and not yet handed to Zenoh, within their caps.
    queued: admission::QueueShare,
}

impl fmt::Debug for ZenohTx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZenohTx").field("key", &self.key).field("peer_gone", &self.peer.is_gone()).field("sent", &self.sent()).finish()
    }
}

impl ZenohTx {
    /// Declares the publishers (`hello` receives Hello frames, if given) and starts the sender
    /// threads; `token` lives until both threads have published everything. What waits in the
    /// lanes is charged to `queued`, whose caps bound the bands it accepts.
    async fn new(
        session: &zenoh::Session,
        (key, hello): (&str, Option<&str>),
        peer: Arc<PeerState>,
        token: Option<LivelinessToken>,
        queued: admission::QueueShare,
    ) -> Result<ZenohTx> {
        let control_main = declare_publisher(session, key, CONTROL_PRIORITY).await?;
        let hello = match hello {
            Some(h) => Some(declare_publisher(session, h, CONTROL_PRIORITY).await?),
            None => None,
        };
        let bulk_main = declare_publisher(session, key, BULK_PRIORITY).await?;
        let lanes = Arc::new(Lanes::default());
        let token = token.map(Arc::new);
        let control = spawn_lane(
            LaneKind::Control,
            format!("zenoh-tx-ctl {key}"),
            LanePublishers { main: control_main, hello },
            (lanes.clone(), queued.clone()),
            token.clone(),
        )?;
        let bulk = spawn_lane(
            LaneKind::Bulk,
            format!("zenoh-tx-bulk {key}"),
            LanePublishers { main: bulk_main, hello: None },
            (lanes.clone(), queued.clone()),
            token,
        )?;
        Ok(ZenohTx { key: key.to_string(), control, bulk, lanes, peer, counters: Counters::default(), queued })
    }

    /// The key this half publishes on (Hello frames of a robot go to `lop/v1/<robot>/hello` instead).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Whether the peer is known to be gone (then [`send`](LinkTx::send) fails with
    /// [`Error::Closed`]).
    pub fn peer_gone(&self) -> bool {
        self.peer.is_gone()
    }

    fn enqueue(&self, bytes: Vec<u8>) -> Result<()> {
        if self.peer.is_gone() {
            return Err(Error::Closed);
        }
        let n = bytes.len();
        let priority = Priority::of_frame_bytes(&bytes);
        let sent = {
            // Held while queueing, so that a band queued after a control frame counts it.
            let mut state = lock(&self.lanes.state);
            if let Some(what) = &state.failure {
                return Err(Error::Zenoh(what.clone()));
            }
            match priority {
                Priority::Control => {
                    self.queued.charge_always(n);
                    state.control_issued += 1;
                    self.control.send((0, bytes))
                }
                Priority::Bulk => {
                    self.queued.charge(n).map_err(|why| Error::QueueFull(format!("{}: {why}", self.key)))?;
                    self.bulk.send((state.control_issued, bytes))
                }
            }
        };
        if sent.is_err() {
            // The thread is gone with the frame: nothing will release it.
            self.queued.release(n);
            return Err(Error::Zenoh(format!("sender thread of {} stopped", self.key)));
        }
        self.counters.add(n);
        Ok(())
    }
}

impl LinkTx for ZenohTx {
    async fn send(&self, bytes: Vec<u8>) -> Result<()> {
        self.enqueue(bytes)
    }

    fn sent(&self) -> Traffic {
        self.counters.snapshot()
    }
}

/// Receiving half of a Zenoh link: messages from a subscriber, through a channel.
pub struct ZenohRx {
    /// What this half receives from, for logs and `Debug`.
    key: String,
    inbox: mpsc::UnboundedReceiver<Vec<u8>>,
    peer: Arc<PeerState>,
    counters: Counters,
    /// Robot side: the data and liveliness subscribers, undeclared when the rx is dropped.
    _subscribers: Vec<Subscriber<()>>,
    /// Robot side: what the subscribers saw of the edge's liveliness.
    edge: Option<Arc<RobotInbox>>,
    /// The bytes queued for this rx, released as they are received.
    queued: Option<admission::QueueShare>,
}

impl Drop for ZenohRx {
    /// What is still queued goes with the inbox, so its bytes leave the budgets.
    fn drop(&mut self) {
        if let Some(q) = &self.queued {
            // Closed first, so that no frame arrives between the release and the drop.
            self.inbox.close();
            q.release_all();
        }
    }
}

impl fmt::Debug for ZenohRx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZenohRx")
            .field("key", &self.key)
            .field("peer_gone", &self.peer.is_gone())
            .field("received", &self.received())
            .finish()
    }
}

impl ZenohRx {
    /// The key this half receives from (an edge session's rx also yields its Hello, received on
    /// `lop/v1/<robot>/hello`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Whether the peer is known to be gone (messages received before may still be waiting).
    pub fn peer_gone(&self) -> bool {
        self.peer.is_gone()
    }

    /// Robot side: whether the edge's liveliness token has been seen (its subscriptions are
    /// then known to this session, so a Hello sent now reaches it). Always true on the edge side.
    pub fn edge_seen(&self) -> bool {
        self.edge.as_ref().is_none_or(|e| lock(&e.edge).seen)
    }

    /// Waits up to `limit` until [`edge_seen`](Self::edge_seen); whether it was.
    pub async fn wait_edge_seen(&self, limit: Duration) -> bool {
        let t0 = tokio::time::Instant::now();
        while !self.edge_seen() {
            if t0.elapsed() >= limit || self.peer_gone() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }
}

impl LinkRx for ZenohRx {
    /// The next message, or `Ok(None)` once the peer is gone (module docs) and everything received
    /// before has been delivered. Cancel-safe (a tokio channel). Never `Err`.
    async fn recv(&mut self) -> Result<Option<Vec<u8>>> {
        Ok(self.inbox.recv().await.inspect(|bytes| {
            self.counters.add(bytes.len());
            if let Some(q) = &self.queued {
                q.release(bytes.len());
            }
        }))
    }

    fn received(&self) -> Traffic {
        self.counters.snapshot()
    }
}

/// Liveliness tokens seen on one key: appearances minus removals, and whether any appeared.
#[derive(Debug, Default, Clone, Copy)]
struct TokenCount {
    alive: u32,
    seen: bool,
}

impl TokenCount {
    /// Applies a liveliness sample; true when this removal left no token.
    fn apply(&mut self, kind: SampleKind) -> bool {
        match kind {
            SampleKind::Put => {
                self.alive = self.alive.saturating_add(1);
                self.seen = true;
                false
            }
            SampleKind::Delete => {
                self.alive = self.alive.saturating_sub(1);
                self.alive == 0
            }
        }
    }
}

/// Bytes a robot's receiving half may hold received and not yet taken: 128 MiB, as an edge
/// session's. Past it (the robot's inference loop stalled, or a flood on its downlink key) a
/// frame is dropped and counted; the inference missing it finishes on the robot, marked.
pub const ROBOT_INBOX_BYTES: usize = SESSION_QUEUE_BYTES;

/// State of a robot's rx shared with its subscriber callbacks.
#[derive(Debug)]
struct RobotInbox {
    /// `None` once the edge is gone.
    inbox: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>>,
    edge: Mutex<TokenCount>,
    peer: Arc<PeerState>,
    robot_id: String,
    /// Bytes in `inbox` not yet received (at most [`ROBOT_INBOX_BYTES`]).
    queued: admission::QueueShare,
    /// Frames dropped past that budget.
    dropped: AtomicU64,
}

impl RobotInbox {
    fn on_data(&self, sample: &Sample) {
        if sample.kind() != SampleKind::Put {
            return;
        }
        let bytes = sample.payload().to_bytes().into_owned();
        let n = bytes.len();
        match lock(&self.inbox).as_ref() {
            Some(inbox) => match self.queued.charge(n) {
                Ok(()) => {
                    if inbox.send(bytes).is_err() {
                        // The rx is gone; nothing to deliver to.
                        self.queued.release(n);
                    }
                }
                Err(why) => {
                    if self.dropped.fetch_add(1, Ordering::Relaxed).is_multiple_of(100) {
                        tracing::warn!(robot = %self.robot_id, bytes = n, "frame from the edge dropped: {why}");
                    }
                }
            },
            None => tracing::debug!(robot = %self.robot_id, bytes = n, "frame from a gone edge dropped"),
        }
    }

    fn on_edge_liveliness(&self, sample: &Sample) {
        let mut edge = lock(&self.edge);
        let gone = edge.apply(sample.kind()) && edge.seen;
        tracing::debug!(robot = %self.robot_id, kind = ?sample.kind(), alive = edge.alive, "edge liveliness");
        if gone {
            drop(edge);
            tracing::info!(robot = %self.robot_id, "edge gone (its liveliness token disappeared)");
            self.peer.set_gone();
            lock(&self.inbox).take();
        }
    }
}

/// Opens the robot's end of a link on `session`: the tx publishes Hello frames on
/// `lop/v1/<robot_id>/hello` and everything else on `lop/v1/<robot_id>/up`; the rx receives
/// `lop/v1/<robot_id>/down` and watches the edge's liveliness (module docs). Declares the robot's
/// liveliness token `lop/v1/<robot_id>/alive`, held until the tx and everything it accepted is
/// published.
///
/// Nothing waits for the edge: a Hello sent before the edge is up is lost, so the caller repeats
/// its Hello until it gets an answer.
///
/// # Errors
///
/// [`Error::InvalidConfig`] for an invalid robot id; [`Error::Zenoh`] when a declaration fails.
pub async fn robot_link(session: &zenoh::Session, robot_id: &str) -> Result<(ZenohTx, ZenohRx)> {
    robot_link_on(session, robot_id, &SessionKeys::single()).await
}

/// [`robot_link`] in the key space `keys`: the single edge's, or one fleet edge's (its Hello,
/// uplink, downlink and liveliness token carry its id).
///
/// # Errors
///
/// As [`robot_link`].
pub async fn robot_link_on(session: &zenoh::Session, robot_id: &str, keys: &SessionKeys) -> Result<(ZenohTx, ZenohRx)> {
    lop_msgs::validate_robot_id(robot_id).map_err(|e| Error::InvalidConfig { what: format!("robot id: {e}") })?;
    let up = keys.up(robot_id)?;
    let down = keys.down(robot_id)?;
    let (hello_key, edge_token) = (keys.hello(robot_id)?, keys.token());
    let alive = lop_msgs::key::robot_alive(robot_id)?;

    let peer = Arc::new(PeerState::default());
    let (inbox_tx, inbox) = mpsc::unbounded_channel();
    let names = ("ROBOT_INBOX_BYTES", "ROBOT_INBOX_BYTES");
    let inbox_queued = admission::QueueShare::with_caps(&Arc::default(), ROBOT_INBOX_BYTES, ROBOT_INBOX_BYTES, names);
    let shared = Arc::new(RobotInbox {
        inbox: Mutex::new(Some(inbox_tx)),
        edge: Mutex::new(TokenCount::default()),
        peer: peer.clone(),
        robot_id: robot_id.to_string(),
        queued: inbox_queued.clone(),
        dropped: AtomicU64::new(0),
    });
    let on_data = shared.clone();
    let data_sub = session
        .declare_subscriber(down.clone())
        .callback(move |sample| on_data.on_data(&sample))
        .await
        .map_err(|e| Error::Zenoh(format!("subscribing {down}: {e}")))?;
    let edge_seen = shared.clone();
    let on_live = shared;
    let live_sub = session
        .liveliness()
        .declare_subscriber(edge_token.clone())
        .history(true)
        .callback(move |sample| on_live.on_edge_liveliness(&sample))
        .await
        .map_err(|e| Error::Zenoh(format!("subscribing liveliness {edge_token}: {e}")))?;
    let token = session
        .liveliness()
        .declare_token(alive.clone())
        .await
        .map_err(|e| Error::Zenoh(format!("declaring liveliness token {alive}: {e}")))?;
    // The robot's sending half has budgets of its own: an edge that stops reading is its only
    // reader.
    let cap = admission::ROBOT_OUT_BYTES;
    let queued = admission::QueueShare::with_caps(&Arc::default(), cap, cap, ("ROBOT_OUT_BYTES", "ROBOT_OUT_BYTES"));
    let tx = ZenohTx::new(session, (&up, Some(&hello_key)), peer.clone(), Some(token), queued).await?;
    let rx = ZenohRx {
        key: down,
        inbox,
        peer,
        counters: Counters::default(),
        _subscribers: vec![data_sub, live_sub],
        edge: Some(edge_seen),
        queued: Some(inbox_queued),
    };
    tracing::debug!(robot = %robot_id, "zenoh robot link declared");
    Ok((tx, rx))
}

/// One robot session accepted by an [`EdgeAcceptor`].
#[derive(Debug)]
pub struct EdgeConn {
    /// The robot id from the Hello.
    pub robot_id: String,
    /// Publishes on `lop/v1/<robot_id>/down`.
    pub tx: ZenohTx,
    /// The session's Hello frame first, then the frames of `lop/v1/<robot_id>/up`; `Ok(None)` once
    /// the session ended (module docs).
    pub rx: ZenohRx,
}

/// The current session of one robot, as the callbacks see it.
#[derive(Debug)]
struct Slot {
    inbox: mpsc::UnboundedSender<Vec<u8>>,
    peer: Arc<PeerState>,
    /// Bytes in `inbox` not yet received by the session (at most [`SESSION_QUEUE_BYTES`], and
    /// all sessions together at most [`admission::TOTAL_QUEUE_BYTES`]).
    queued: admission::QueueShare,
}

impl Slot {
    fn end(self) {
        self.peer.set_gone();
        // Dropping `inbox` lets the rx drain and then return `Ok(None)`.
    }
}

/// Shortest time between two Hellos of one robot id that the edge acts on; Hellos closer than
/// this are dropped and counted (a flood: each Hello restarts the robot's session and may carry
/// a 4 MiB profile to parse). A robot repeats its Hello every 500 ms at most.
pub const HELLO_MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Bytes one robot session may have received and not yet taken (its edge session task drains
/// continuously; a robot that sends faster than the edge can take is cut off here, its frames
/// dropped and counted, so that memory stays bounded): 128 MiB.
pub const SESSION_QUEUE_BYTES: usize = 128 << 20;

/// First wait before connecting again to a router that went away (Zenoh's default: 1 s).
pub const CONNECT_RETRY_INIT_MS: u64 = 100;
/// Longest wait between attempts to reach a router that went away (Zenoh's default: 4 s).
pub const CONNECT_RETRY_MAX_MS: u64 = 500;

/// Version refusals waiting to be published; more are dropped (each is one Reject frame).
const REFUSALS_QUEUED: usize = 16;

/// What the edge knows about one robot id.
#[derive(Debug, Default)]
struct RobotEntry {
    tokens: TokenCount,
    session: Option<Slot>,
    /// When its last Hello was acted on.
    last_hello: Option<std::time::Instant>,
}

/// A session started by a Hello, waiting for [`EdgeAcceptor::accept`].
#[derive(Debug)]
struct Pending {
    robot_id: String,
    inbox: mpsc::UnboundedReceiver<Vec<u8>>,
    peer: Arc<PeerState>,
    queued: admission::QueueShare,
}

/// State shared by the acceptor and its subscriber callbacks.
#[derive(Debug)]
struct EdgeShared {
    keys: SessionKeys,
    robots: Mutex<HashMap<String, RobotEntry>>,
    pending: mpsc::UnboundedSender<Pending>,
    dropped: Arc<AtomicU64>,
    /// Rejects to publish (downlink key, frame): Hellos of another protocol version, or past a
    /// cap ([`admission`]).
    refusals: mpsc::Sender<(String, Vec<u8>)>,
    /// Bytes all sessions hold received and not yet taken.
    queued_total: Arc<AtomicUsize>,
    /// Hellos refused past a cap ([`admission`]).
    sessions_refused: Arc<AtomicU64>,
}

impl EdgeShared {
    fn drop_one(&self, what: &str, key: &str, bytes: usize) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(key, bytes, "dropped: {what}");
    }

    fn on_hello(&self, sample: &Sample) {
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
        let queued = admission::QueueShare::of(&self.queued_total);
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

    fn on_up(&self, sample: &Sample) {
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

    fn on_robot_liveliness(&self, sample: &Sample) {
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

/// The edge's side of the Zenoh link: declares the edge's liveliness token, subscribes Hello
/// frames, every robot's uplink and every robot's liveliness, and turns each Hello into an
/// [`EdgeConn`] (module docs). Dropping it undeclares everything and ends every session.
pub struct EdgeAcceptor {
    session: zenoh::Session,
    keys: SessionKeys,
    /// Only the callbacks hold the [`EdgeShared`], so that when Zenoh drops them (session closed)
    /// the pending channel closes and [`accept`](EdgeAcceptor::accept) returns `None`.
    dropped: Arc<AtomicU64>,
    /// Hellos refused past a cap ([`admission`]).
    sessions_refused: Arc<AtomicU64>,
    pending: mpsc::UnboundedReceiver<Pending>,
    /// Bytes all sessions' sending halves hold (at most [`admission::TOTAL_OUT_BYTES`]).
    out_total: Arc<AtomicUsize>,
    _subscribers: Vec<Subscriber<()>>,
    _token: LivelinessToken,
}

impl fmt::Debug for EdgeAcceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EdgeAcceptor").field("zid", &self.session.zid()).field("dropped", &self.dropped()).finish()
    }
}

impl EdgeAcceptor {
    /// Declares the subscribers, then the edge's liveliness token `lop/v1/edge/alive` (so a robot
    /// that sees the edge alive finds its subscribers in place).
    ///
    /// # Errors
    ///
    /// [`Error::Zenoh`] when a declaration fails.
    pub async fn new(session: &zenoh::Session) -> Result<EdgeAcceptor> {
        EdgeAcceptor::on(session, SessionKeys::single()).await
    }

    /// [`EdgeAcceptor::new`] in the key space `keys` (a fleet edge's: only robots that address
    /// this edge by its id reach it).
    ///
    /// # Errors
    ///
    /// [`Error::Zenoh`] when a declaration fails.
    pub async fn on(session: &zenoh::Session, keys: SessionKeys) -> Result<EdgeAcceptor> {
        let (pending_tx, pending) = mpsc::unbounded_channel();
        let dropped = Arc::new(AtomicU64::new(0));
        let (all_up, hello_key, token_key) = (keys.all_up(), keys.all_hello(), keys.token());
        let (refusals, mut to_refuse) = mpsc::channel::<(String, Vec<u8>)>(REFUSALS_QUEUED);
        let sessions_refused = Arc::new(AtomicU64::new(0));
        let shared = Arc::new(EdgeShared {
            keys: keys.clone(),
            robots: Mutex::new(HashMap::new()),
            pending: pending_tx,
            dropped: dropped.clone(),
            refusals,
            queued_total: Arc::default(),
            sessions_refused: sessions_refused.clone(),
        });
        // Subscriber callbacks must not block: the refusals go out from a task of their own, which
        // ends with the acceptor (its sender is in the subscribers' callbacks).
        let publisher = session.clone();
        tokio::spawn(async move {
            while let Some((down, bytes)) = to_refuse.recv().await {
                if let Err(e) = publisher.put(&down, bytes).await {
                    tracing::debug!(key = %down, "refusal not sent: {e}");
                }
            }
        });
        let s = shared.clone();
        let live = session
            .liveliness()
            .declare_subscriber(ALL_ALIVE)
            .history(true)
            .callback(move |sample| s.on_robot_liveliness(&sample))
            .await
            .map_err(|e| Error::Zenoh(format!("subscribing liveliness {ALL_ALIVE}: {e}")))?;
        let s = shared.clone();
        let up = session
            .declare_subscriber(all_up.clone())
            .callback(move |sample| s.on_up(&sample))
            .await
            .map_err(|e| Error::Zenoh(format!("subscribing {all_up}: {e}")))?;
        let s = shared;
        let hello = session
            .declare_subscriber(hello_key.clone())
            .callback(move |sample| s.on_hello(&sample))
            .await
            .map_err(|e| Error::Zenoh(format!("subscribing {hello_key}: {e}")))?;
        let token = session
            .liveliness()
            .declare_token(token_key.clone())
            .await
            .map_err(|e| Error::Zenoh(format!("declaring liveliness token {token_key}: {e}")))?;
        tracing::debug!(zid = %session.zid(), edge = ?keys.edge(), "zenoh edge acceptor declared");
        Ok(EdgeAcceptor {
            session: session.clone(),
            keys,
            dropped,
            sessions_refused,
            pending,
            out_total: Arc::default(),
            _subscribers: vec![live, up, hello],
            _token: token,
        })
    }

    /// The next robot session, started by a valid Hello; its rx yields that Hello first. `None`
    /// once the Zenoh session is closed. Cancel-safe: a session not yet returned stays queued.
    ///
    /// A session may already have ended when it is returned (a newer Hello of the same robot came
    /// first): its rx then yields its Hello and `Ok(None)`.
    pub async fn accept(&mut self) -> Option<EdgeConn> {
        loop {
            let p = self.pending.recv().await?;
            let down = match self.keys.down(&p.robot_id) {
                Ok(k) => k,
                Err(e) => {
                    // The id was validated with the Hello; this is unreachable in practice.
                    tracing::warn!(robot = %p.robot_id, "no downlink key: {e}");
                    continue;
                }
            };
            match ZenohTx::new(&self.session, (&down, None), p.peer.clone(), None, admission::QueueShare::outbound(&self.out_total)).await {
                Ok(tx) => {
                    let up = self.keys.up(&p.robot_id).unwrap_or_default();
                    let rx = ZenohRx {
                        key: up,
                        inbox: p.inbox,
                        peer: p.peer,
                        counters: Counters::default(),
                        _subscribers: Vec::new(),
                        edge: None,
                        queued: Some(p.queued),
                    };
                    return Some(EdgeConn { robot_id: p.robot_id, tx, rx });
                }
                Err(e) => {
                    // The session is closing (or Zenoh refuses publishers): nothing can be served.
                    tracing::warn!(robot = %p.robot_id, "cannot serve the session: {e}");
                    if self.session.is_closed() {
                        return None;
                    }
                }
            }
        }
    }

    /// Messages dropped so far: garbage on the hello key and frames from robots without a session.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Where Hellos refused past a cap ([`admission`]) are counted, for the edge's counts.
    pub fn refusal_counter(&self) -> Arc<AtomicU64> {
        self.sessions_refused.clone()
    }
}

pub mod admission;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

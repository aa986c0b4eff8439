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
//! # Liveliness: when [`recv`](crate::LinkRx::recv) returns `Ok(None)`
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
//!
//! # Files
//!
//! One concept per file, from the leaves up (a file imports only the ones listed before it):
//!
//! - `peer.rs`: whether the peer is gone, liveliness token counts, the mutex helper.
//! - `config.rs`: [`ZenohConfig`] and [`ZenohMode`]: how a session opens.
//! - `admission.rs`: the acceptor's caps and queue budgets, and the per-robot records they bound.
//! - `robot_inbox.rs`: the robot's receiving state, fed by its subscriber callbacks.
//! - `lanes.rs`: the two sender threads (control, bulk) behind a sending half.
//! - `tx.rs`, `rx.rs`: the halves, [`ZenohTx`] and [`ZenohRx`].
//! - `robot.rs`: the robot's end, [`robot_link`] and [`robot_link_on`].
//! - `edge_shared.rs`: the edge's subscriber callbacks (Hello, uplink, robot liveliness).
//! - `acceptor.rs`: the edge's end, [`EdgeAcceptor`] and its [`EdgeConn`]s.
//!
//! [`LinkTx`]: crate::LinkTx
//! [`LinkRx`]: crate::LinkRx
//! [`SessionKeys::fleet`]: lop_msgs::key::SessionKeys::fleet
//! [`CongestionControl::Block`]: zenoh::qos::CongestionControl::Block
//! [`Priority::of_frame_bytes`]: crate::Priority::of_frame_bytes
//! [`ZPriority::InteractiveHigh`]: zenoh::qos::Priority::InteractiveHigh
//! [`ZPriority::DataLow`]: zenoh::qos::Priority::DataLow
//! [`ZenohTx::send`]: crate::LinkTx::send
//! [`Error::Zenoh`]: crate::Error::Zenoh
//! [`Error::Closed`]: crate::Error::Closed

mod acceptor;
pub mod admission;
mod config;
mod edge_shared;
mod lanes;
mod peer;
mod robot;
mod robot_inbox;
mod rx;
mod tx;

pub use acceptor::{EdgeAcceptor, EdgeConn};
pub use admission::SESSION_QUEUE_BYTES;
pub use config::{CONNECT_RETRY_INIT_MS, CONNECT_RETRY_MAX_MS, ZenohConfig, ZenohMode};
pub use edge_shared::HELLO_MIN_INTERVAL;
pub use robot::{robot_link, robot_link_on};
pub use robot_inbox::ROBOT_INBOX_BYTES;
pub use rx::ZenohRx;
pub use tx::ZenohTx;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

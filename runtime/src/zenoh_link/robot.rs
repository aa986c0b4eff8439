//! The robot's end of a Zenoh link ([`robot_link`], [`robot_link_on`]): declares its data and
//! edge-liveliness subscribers (into a [`RobotInbox`]), its own liveliness token and its sending
//! half, and pairs them as a [`ZenohTx`] / [`ZenohRx`].

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use lop_msgs::key::SessionKeys;
use tokio::sync::mpsc;

use super::admission::{QueueShare, ROBOT_OUT_BYTES};
use super::peer::{PeerState, TokenCount};
use super::robot_inbox::{ROBOT_INBOX_BYTES, RobotInbox};
use super::rx::ZenohRx;
use super::tx::ZenohTx;
use crate::error::{Error, Result};
use crate::link::Counters;

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
    let inbox_queued = QueueShare::with_caps(&Arc::default(), ROBOT_INBOX_BYTES, ROBOT_INBOX_BYTES, names);
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
    let cap = ROBOT_OUT_BYTES;
    let queued = QueueShare::with_caps(&Arc::default(), cap, cap, ("ROBOT_OUT_BYTES", "ROBOT_OUT_BYTES"));
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

//! The edge service and the robot client over Zenoh: the edge accepts sessions from an
//! [`EdgeAcceptor`] (one per robot, isolated), robots connect with [`ZenohConnector`].

use std::time::Duration;

use tokio::task::{JoinHandle, JoinSet};

use crate::client::Connector;
use crate::edge::EdgeService;
use crate::error::{Error, Result};
use crate::zenoh_link::{EdgeAcceptor, ZenohRx, ZenohTx, robot_link_on};
use lop_msgs::key::SessionKeys;

/// Serves every robot session the acceptor yields until its Zenoh session closes (or the task
/// is aborted, which ends every session).
pub fn serve_zenoh(service: EdgeService, mut acceptor: EdgeAcceptor) -> JoinHandle<()> {
    service.track_link_refusals(acceptor.refusal_counter());
    tokio::spawn(async move {
        let mut sessions = JoinSet::new();
        while let Some(conn) = acceptor.accept().await {
            tracing::debug!(robot = %conn.robot_id, "new session");
            let svc = service.clone();
            sessions.spawn(async move { svc.serve(conn.tx, conn.rx).await });
            while sessions.try_join_next().is_some() {}
        }
        while sessions.join_next().await.is_some() {}
    })
}

/// Connects a robot to the edge through a Zenoh session (each connection: a fresh key set
/// subscription and liveliness token for `robot_id`).
#[derive(Debug, Clone)]
pub struct ZenohConnector {
    session: zenoh::Session,
    robot_id: String,
    keys: SessionKeys,
}

impl ZenohConnector {
    /// A connector for `robot_id` on `session`, to the single edge.
    pub fn new(session: zenoh::Session, robot_id: &str) -> ZenohConnector {
        ZenohConnector { session, robot_id: robot_id.to_string(), keys: SessionKeys::single() }
    }

    /// A connector for `robot_id` on `session`, to the fleet edge `keys` names.
    pub fn to_edge(session: zenoh::Session, robot_id: &str, keys: SessionKeys) -> ZenohConnector {
        ZenohConnector { session, robot_id: robot_id.to_string(), keys }
    }
}

impl Connector for ZenohConnector {
    type Tx = ZenohTx;
    type Rx = ZenohRx;

    /// Opens the link and waits until the edge's liveliness token is seen, so that the Hello
    /// that follows finds the edge's subscription: a Hello published before this session knows
    /// of it is dropped by Zenoh, and the robot would only learn that when its Hello timed out.
    /// The caller bounds the wait (the client's hello timeout). An edge restarted within that
    /// time is greeted as soon as its token arrives: a link returned after a shorter wait, its
    /// Hello sent into the void, kept the robot alone for a whole hello timeout after the edge
    /// was back (the chaos test's "never split with the restarted edge").
    ///
    /// # Errors
    /// [`Error::Closed`] when the edge's token went away again before it was seen.
    async fn connect(&self) -> Result<(ZenohTx, ZenohRx)> {
        let (tx, rx) = robot_link_on(&self.session, &self.robot_id, &self.keys).await?;
        if !rx.wait_edge_seen(Duration::MAX).await {
            return Err(Error::Closed);
        }
        Ok((tx, rx))
    }
}

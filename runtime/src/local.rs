//! An edge and its robots in one process over shaped in-process links: what tests, the demo
//! and `lop bench` without Zenoh use. The edge can be killed and restarted under running robots.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use crate::client::Connector;
use crate::edge::EdgeService;
use crate::error::{Error, Result};
use crate::shaped::{ShapedConfig, ShapedEnd, ShapedRx, ShapedTx, shaped_pair};

/// A running in-process edge: its accept loop and every session. Dropping (or
/// [`kill`](LocalEdge::kill)ing) it ends them all at once, as a crash would: robots see their
/// links close.
#[derive(Debug)]
pub struct LocalEdge {
    service: EdgeService,
    task: JoinHandle<()>,
}

impl LocalEdge {
    /// The service (counters, shutdown).
    pub fn service(&self) -> &EdgeService {
        &self.service
    }

    /// Ends the edge and every session now.
    pub fn kill(self) {
        self.task.abort();
    }
}

impl Drop for LocalEdge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Where robots' [`LocalConnector`]s deliver new links: the edge currently plugged in, if any.
#[derive(Debug, Clone, Default)]
pub struct Switchboard {
    edge: Arc<Mutex<Option<mpsc::UnboundedSender<ShapedEnd>>>>,
}

impl Switchboard {
    /// A switchboard with no edge.
    pub fn new() -> Switchboard {
        Switchboard::default()
    }

    /// Starts serving `service` on this switchboard (replacing any edge plugged in before).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn plug(&self, service: EdgeService) -> LocalEdge {
        let (tx, mut rx) = mpsc::unbounded_channel::<ShapedEnd>();
        *self.edge.lock().unwrap_or_else(PoisonError::into_inner) = Some(tx);
        let svc = service.clone();
        let task = tokio::spawn(async move {
            let mut sessions = JoinSet::new();
            while let Some(end) = rx.recv().await {
                let svc = svc.clone();
                let (tx, rx) = end.into_split();
                sessions.spawn(async move { svc.serve(tx, rx).await });
                while sessions.try_join_next().is_some() {}
            }
        });
        LocalEdge { service, task }
    }

    /// A connector that links a robot to whatever edge is plugged in when it connects, through
    /// a link shaped by `config` (trace time starts at each connection).
    pub fn connector(&self, config: ShapedConfig) -> LocalConnector {
        LocalConnector { board: self.clone(), config }
    }
}

/// Opens in-process shaped links to the edge plugged into a [`Switchboard`].
#[derive(Debug, Clone)]
pub struct LocalConnector {
    board: Switchboard,
    config: ShapedConfig,
}

impl Connector for LocalConnector {
    type Tx = ShapedTx;
    type Rx = ShapedRx;

    async fn connect(&self) -> Result<(ShapedTx, ShapedRx)> {
        let edge = self.board.edge.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let Some(edge) = edge else { return Err(Error::Closed) };
        let (robot, edge_end) = shaped_pair(self.config.clone());
        edge.send(edge_end).map_err(|_| Error::Closed)?;
        Ok(robot.into_split())
    }
}

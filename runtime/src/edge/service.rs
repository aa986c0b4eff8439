//! The service's top level, which no other room uses: starting it (options checked, models
//! loaded, the shared state made, placement started), serving one robot's link as a session,
//! the reports of the inferences served, and shutting down and draining.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::broadcast;

use super::model::load_models;
use super::options::{EdgeOptions, check_options};
use super::placement::placement_loop;
use super::served::Served;
use super::session::Session;
use super::state::{EdgeService, Inner};
use crate::error::Result;
use crate::link::{LinkRx, LinkTx};
use crate::outbox::{Outbox, write_session};
use crate::session::{Inbound, classify};

impl EdgeService {
    /// Loads every model on its replicas (each replica a thread with its own copy, `replicas`
    /// on each of `opts.devices`) and checks each server profile against its model.
    ///
    /// # Errors
    /// A model that does not load, a profile for another model, a bad option.
    pub async fn start(opts: EdgeOptions) -> Result<EdgeService> {
        check_options(&opts)?;
        let models = load_models(&opts).await?;
        let svc = EdgeService { inner: Arc::new(Inner::new(opts, models)) };
        if svc.inner.opts.memory_budget.is_some() {
            tokio::spawn(placement_loop(Arc::downgrade(&svc.inner)));
        }
        Ok(svc)
    }

    /// Takes the service's locks in turn and lets go: a serving loop that deadlocked on one
    /// would hang here, so the edge's heartbeat (and systemd's watchdog) stops.
    pub fn heartbeat(&self) {
        drop(self.inner.books.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        drop(self.inner.robot_profiles.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for m in &self.inner.models {
            drop(m.replicas());
        }
    }

    /// Stops accepting sessions and inferences (Hello gets Reject "shutting down", Start gets
    /// Error); inferences already running finish.
    pub fn shutdown(&self) {
        self.inner.shutting_down.store(true, Ordering::SeqCst);
    }

    /// Whether [`EdgeService::shutdown`] was called.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutting_down.load(Ordering::SeqCst)
    }

    /// Waits until no inference is in flight, checking every 10 ms, for at most `grace`.
    /// Returns whether none was left. Call after [`EdgeService::shutdown`] so that no new one
    /// starts meanwhile.
    pub async fn drain(&self, grace: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            if self.in_flight() == 0 {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The ids of the models served, in configuration order.
    pub fn model_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = Vec::new();
        for m in &self.inner.models {
            if !ids.contains(&m.id) {
                ids.push(m.id.clone());
            }
        }
        ids
    }

    /// A receiver of every inference served from now on (one [`Served`] as each ends, whatever
    /// its outcome). Receivers that lag more than
    /// [`SERVED_CHANNEL_CAPACITY`](super::SERVED_CHANNEL_CAPACITY) reports behind lose the oldest
    /// ones; with no receiver, reports are discarded.
    pub fn served(&self) -> broadcast::Receiver<Served> {
        self.inner.served.subscribe()
    }

    /// Serves one robot session over a link until the robot closes it or the link breaks.
    pub async fn serve<T: LinkTx + 'static, R: LinkRx>(&self, tx: T, mut rx: R) {
        self.inner.open_sessions.fetch_add(1, Ordering::Relaxed);
        let _open = OpenSession(&self.inner.open_sessions);
        let (out, out_rx) = Outbox::new();
        let writer = tokio::spawn(write_session(tx, out_rx, out.given_up(), self.inner.outbound_refused.clone()));
        let mut s = Session::new(self.inner.clone(), out);
        let hello_deadline = tokio::time::Instant::now() + self.inner.opts.hello_timeout;
        loop {
            let next = if s.book.is_none() { tokio::time::timeout_at(hello_deadline, rx.recv()).await } else { Ok(rx.recv().await) };
            let bytes = match next {
                Ok(Ok(Some(b))) => b,
                Ok(Ok(None)) => break,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "session link broke");
                    break;
                }
                Err(_) => {
                    tracing::warn!("no Hello in time; closing the session");
                    break;
                }
            };
            match classify(&self.inner.opts.limits, bytes, &self.inner.stats) {
                None => {}
                Some(Inbound::Control(f)) => s.control(f).await,
                Some(Inbound::Band(id, frame)) => s.band(id, frame),
            }
            if s.refused {
                // A refused Hello ends its session at once (its Reject still goes out): a robot
                // retries with a new Hello, which makes a new session, so a refused one would
                // only hold its threads and queue until `hello_timeout`.
                break;
            }
        }
        s.abort_current("the session ended");
        drop(s);
        let _ = writer.await;
    }
}

/// Counts an open session until dropped.
struct OpenSession<'a>(&'a AtomicU64);

impl Drop for OpenSession<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

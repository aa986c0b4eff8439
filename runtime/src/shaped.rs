//! An in-process link shaped by bandwidth traces, for tests and the demo (DESIGN.md section 9).
//!
//! [`shaped_pair`] returns two connected [`ShapedEnd`]s, the robot's and the edge's. Each
//! direction (up = robot → edge, down = edge → robot) has its own [`Trace`]
//! ([`ShapedConfig::symmetric`] uses one trace for both, each direction replaying it
//! independently, as two halves of a full-duplex link do) and its own transmitter task:
//!
//! - A message of `n` bytes occupies its direction for `overhead + n·8 / (rate·1e6)` seconds,
//!   where the rate follows the trace from the moment the bits start; a message spanning a trace
//!   step uses the new rate for its remainder ([`Trace::transfer_end`]). Trace time 0 is the
//!   moment the pair was created.
//! - One message is on the wire at a time per direction. The next is the oldest queued control
//!   frame if any, else the oldest queued band ([`Priority`]); a message on the wire is never
//!   interrupted.
//! - A message is delivered `latency` after its last bit left.
//! - At rate 0 nothing moves until the rate becomes positive; if it never does, the message never
//!   arrives. Nothing here times out: deadlines belong to the protocol layer.
//! - Queues are unbounded: the executor bounds what it keeps in flight.
//!
//! Time is tokio's clock, so tests use `#[tokio::test(start_paused = true)]` and exact times.
//!
//! Closing: dropping a [`ShapedTx`] is a clean close. Whatever it sent before is still
//! delivered, then the peer's [`recv`](LinkRx::recv) returns `Ok(None)`. Dropping a [`ShapedRx`]
//! discards what is in flight towards it, and the peer's next send fails with
//! [`Error::Closed`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::time::{Instant, sleep_until};

use crate::error::{Error, Result};
use crate::link::{Counters, LinkRx, LinkTx, Priority, Traffic};
use crate::trace::Trace;

/// Shaping of both directions.
#[derive(Debug, Clone)]
pub struct ShapedConfig {
    /// Rate of robot → edge.
    pub up: Trace,
    /// Rate of edge → robot.
    pub down: Trace,
    /// One-way propagation latency, added after the last bit of each message.
    pub latency: Duration,
    /// Fixed time each message occupies its direction besides its bits (framing, syscalls).
    pub overhead: Duration,
}

impl ShapedConfig {
    /// The same trace both ways, no latency or overhead.
    pub fn symmetric(trace: Trace) -> ShapedConfig {
        ShapedConfig { up: trace.clone(), down: trace, latency: Duration::ZERO, overhead: Duration::ZERO }
    }

    /// Sets the one-way latency.
    pub fn with_latency(mut self, latency: Duration) -> ShapedConfig {
        self.latency = latency;
        self
    }

    /// Sets the per-message overhead.
    pub fn with_overhead(mut self, overhead: Duration) -> ShapedConfig {
        self.overhead = overhead;
        self
    }
}

/// One end of a shaped link: the halves it sends and receives with.
#[derive(Debug)]
pub struct ShapedEnd {
    /// Sends towards the other end.
    pub tx: ShapedTx,
    /// Receives from the other end.
    pub rx: ShapedRx,
}

impl ShapedEnd {
    /// The two halves, to move them to different tasks.
    pub fn into_split(self) -> (ShapedTx, ShapedRx) {
        (self.tx, self.rx)
    }
}

/// Creates a connected `(robot, edge)` pair and spawns one transmitter task per direction.
///
/// # Panics
///
/// Outside a tokio runtime (it spawns tasks), as `tokio::spawn` does.
pub fn shaped_pair(config: ShapedConfig) -> (ShapedEnd, ShapedEnd) {
    let epoch = Instant::now();
    let (up_tx, up_rx) = direction(config.up, config.latency, config.overhead, epoch);
    let (down_tx, down_rx) = direction(config.down, config.latency, config.overhead, epoch);
    (ShapedEnd { tx: up_tx, rx: down_rx }, ShapedEnd { tx: down_tx, rx: up_rx })
}

/// Messages waiting for the wire, by priority, and whether the sender is gone.
#[derive(Debug, Default)]
struct Queue {
    /// `(when it was sent, bytes)`.
    control: VecDeque<(Instant, Vec<u8>)>,
    /// `(when it was sent, bytes)`.
    bulk: VecDeque<(Instant, Vec<u8>)>,
    sender_closed: bool,
}

impl Queue {
    /// The next message for a wire that is free from `wire_free`. The wire takes its next message
    /// at `max(wire_free, oldest send time)`; a control frame goes first if it had been sent by
    /// then, else the oldest band has already started (in link time, even if the transmitter
    /// wakes late) and keeps its turn.
    fn pop(&mut self, wire_free: Instant) -> Option<(Instant, Vec<u8>)> {
        let take_control = match (self.control.front(), self.bulk.front()) {
            (Some(c), Some(b)) => c.0 <= wire_free.max(b.0.min(c.0)),
            (Some(_), None) => true,
            (None, _) => false,
        };
        if take_control { self.control.pop_front() } else { self.bulk.pop_front() }
    }
}

/// State shared by a direction's sender and its transmitter task.
#[derive(Debug, Default)]
struct Shared {
    // A std Mutex: it is held only to push or pop, never across an `.await`.
    queue: Mutex<Queue>,
    wake: Notify,
    receiver_closed: AtomicBool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // Nothing panics while holding the lock, so a poisoned queue is still consistent.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn direction(trace: Trace, latency: Duration, overhead: Duration, epoch: Instant) -> (ShapedTx, ShapedRx) {
    let shared = Arc::new(Shared::default());
    let (out, delivered) = mpsc::unbounded_channel();
    tokio::spawn(transmit(shared.clone(), out, Wire { trace, latency, overhead, epoch }));
    let tx = ShapedTx { shared: shared.clone(), counters: Counters::default() };
    let rx = ShapedRx { delivered, pending: None, shared, counters: Counters::default() };
    (tx, rx)
}

/// Timing of one direction.
struct Wire {
    trace: Trace,
    latency: Duration,
    overhead: Duration,
    epoch: Instant,
}

impl Wire {
    /// When a message of `bytes` bytes put on the wire at `start` is delivered, if ever.
    fn delivery(&self, start: Instant, bytes: usize) -> Option<Instant> {
        let bits_start = start.checked_duration_since(self.epoch).unwrap_or_default() + self.overhead;
        let end = self.trace.transfer_end(bits_start, bytes)?;
        Some(self.epoch + end + self.latency)
    }
}

/// The transmitter of one direction: takes messages in priority order, holds each for its
/// transmission time, then hands it to the receiver with its delivery time. Ends when the sender
/// is closed and the queue is empty, or when the receiver is gone.
///
/// Start times are computed, not read from the clock after a sleep: a message starts when it was
/// sent or when the wire became free, whichever is later. Timers fire up to a millisecond late,
/// and reading `Instant::now()` would add that error to every message of a back-to-back stream.
async fn transmit(shared: Arc<Shared>, out: mpsc::UnboundedSender<(Instant, Vec<u8>)>, wire: Wire) {
    let mut wire_free = wire.epoch;
    loop {
        let (sent_at, msg) = loop {
            {
                let mut q = shared.lock();
                if let Some(m) = q.pop(wire_free) {
                    break m;
                }
                if q.sender_closed {
                    return;
                }
            }
            // `notify_one` stores a permit when nobody waits, so a send between the unlock above
            // and this await is not missed.
            tokio::select! {
                _ = shared.wake.notified() => {}
                _ = out.closed() => return,
            }
        };
        let start = sent_at.max(wire_free);
        let Some(at) = wire.delivery(start, msg.len()) else {
            tracing::debug!(bytes = msg.len(), "shaped link rate is 0 forever; message stalls");
            out.closed().await;
            return;
        };
        // The wire is busy until the last bit left, `latency` before delivery.
        wire_free = at.checked_sub(wire.latency).unwrap_or(at);
        tokio::select! {
            _ = sleep_until(wire_free) => {}
            _ = out.closed() => return,
        }
        if out.send((at, msg)).is_err() {
            return;
        }
    }
}

/// Sending half of a shaped link direction.
#[derive(Debug)]
pub struct ShapedTx {
    shared: Arc<Shared>,
    counters: Counters,
}

impl ShapedTx {
    fn enqueue(&self, bytes: Vec<u8>) -> Result<()> {
        if self.shared.receiver_closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let n = bytes.len();
        let now = Instant::now();
        {
            let mut q = self.shared.lock();
            match Priority::of_frame_bytes(&bytes) {
                Priority::Control => q.control.push_back((now, bytes)),
                Priority::Bulk => q.bulk.push_back((now, bytes)),
            }
        }
        self.shared.wake.notify_one();
        self.counters.add(n);
        Ok(())
    }
}

impl LinkTx for ShapedTx {
    async fn send(&self, bytes: Vec<u8>) -> Result<()> {
        self.enqueue(bytes)
    }

    fn sent(&self) -> Traffic {
        self.counters.snapshot()
    }
}

impl Drop for ShapedTx {
    fn drop(&mut self) {
        self.shared.lock().sender_closed = true;
        self.shared.wake.notify_one();
    }
}

/// Receiving half of a shaped link direction.
#[derive(Debug)]
pub struct ShapedRx {
    delivered: mpsc::UnboundedReceiver<(Instant, Vec<u8>)>,
    /// A message taken from the channel whose delivery time has not come yet; kept here so that
    /// a cancelled `recv` loses nothing.
    pending: Option<(Instant, Vec<u8>)>,
    shared: Arc<Shared>,
    counters: Counters,
}

impl LinkRx for ShapedRx {
    async fn recv(&mut self) -> Result<Option<Vec<u8>>> {
        if self.pending.is_none() {
            match self.delivered.recv().await {
                Some(p) => self.pending = Some(p),
                None => return Ok(None),
            }
        }
        if let Some((at, _)) = &self.pending {
            sleep_until(*at).await;
        }
        Ok(self.pending.take().map(|(_, bytes)| {
            self.counters.add(bytes.len());
            bytes
        }))
    }

    fn received(&self) -> Traffic {
        self.counters.snapshot()
    }
}

impl Drop for ShapedRx {
    fn drop(&mut self) {
        self.shared.receiver_closed.store(true, Ordering::Release);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

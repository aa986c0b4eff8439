//! Replaying bandwidth traces on a [`NetnsLink`]: a thread that applies the traces' rates to the
//! two directions every [`SHAPING_STEP`], its statistics, and the handle that stops it.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::inner::Inner;
use super::link::NetnsLink;
use super::side::Direction;
use crate::error::{Error, Result};
use crate::trace::Trace;

/// How often [`NetnsLink::start_shaping`] re-reads the traces: the step of the shared traces.
pub const SHAPING_STEP: Duration = Duration::from_millis(500);

impl NetnsLink {
    /// Replays two traces, `up` (robot -> edge) and `down` (edge -> robot), on a thread: the rates
    /// at trace time 0 are applied before this returns, then the rates at every multiple of
    /// [`SHAPING_STEP`] (0.5 s, the shared traces' step; a finer trace is sampled) on the
    /// monotonic clock from this call, until the handle is stopped or dropped. Only changed
    /// rates run `tc`. Failures at a step are counted and logged, never fatal; the last rates
    /// applied stay in place after the stop.
    ///
    /// # Errors
    ///
    /// [`Error::Command`] if the first rates cannot be applied; [`Error::Netns`] if the thread
    /// cannot be spawned.
    pub fn start_shaping(&self, up: Trace, down: Trace) -> Result<ShapingHandle> {
        let stats = Arc::new(Mutex::new(ShapingStats::default()));
        let mut shaper = Shaper { inner: Arc::clone(&self.inner), up, down, last: [None, None], stats: Arc::clone(&stats) };
        shaper.step(Duration::ZERO, true)?;
        let start = Instant::now();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("{}-shaper", self.inner.ns_robot))
            .spawn(move || shaper.run(start, &stop_rx))
            .map_err(|source| Error::Netns { what: "spawning the shaping thread".to_string(), source })?;
        Ok(ShapingHandle { stop: Some(stop_tx), thread: Some(thread), stats, _inner: Arc::clone(&self.inner) })
    }
}

/// What a [`ShapingHandle`] has done so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShapingStats {
    /// Steps evaluated (including the one at trace time 0).
    pub steps: u64,
    /// Rate changes applied with `tc` (one per direction whose rate changed at a step).
    pub updates: u64,
    /// `tc` changes that failed.
    pub failures: u64,
    /// The message of the last failure.
    pub last_error: Option<String>,
    /// The last rate applied robot -> edge, Mbit/s as read from the trace (before clamping).
    pub up_mbit: Option<f64>,
    /// The last rate applied edge -> robot, Mbit/s as read from the trace (before clamping).
    pub down_mbit: Option<f64>,
}

/// The trace replay thread's state.
struct Shaper {
    inner: Arc<Inner>,
    up: Trace,
    down: Trace,
    /// Last applied rates (Mbit/s), up and down.
    last: [Option<f64>; 2],
    stats: Arc<Mutex<ShapingStats>>,
}

impl Shaper {
    /// Applies the rates at trace time `t`; with `strict`, the first failure is returned.
    fn step(&mut self, t: Duration, strict: bool) -> Result<()> {
        let mut stats = ShapingStats::default();
        for (k, direction) in [Direction::Up, Direction::Down].into_iter().enumerate() {
            let trace = if direction == Direction::Up { &self.up } else { &self.down };
            let mbit = trace.rate_mbps(t);
            if self.last[k] == Some(mbit) {
                continue;
            }
            match self.inner.set_rate(direction, mbit) {
                Ok(_) => {
                    self.last[k] = Some(mbit);
                    stats.updates += 1;
                }
                Err(e) if strict => return Err(e),
                Err(e) => {
                    tracing::warn!(%direction, mbit, t_s = t.as_secs_f64(), error = %e, "netns shaping step failed");
                    stats.failures += 1;
                    stats.last_error = Some(e.to_string());
                }
            }
        }
        let mut shared = self.stats.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        shared.steps += 1;
        shared.updates += stats.updates;
        shared.failures += stats.failures;
        if stats.last_error.is_some() {
            shared.last_error = stats.last_error;
        }
        shared.up_mbit = self.last[0];
        shared.down_mbit = self.last[1];
        Ok(())
    }

    fn run(mut self, start: Instant, stop: &mpsc::Receiver<()>) {
        let step_ns = SHAPING_STEP.as_nanos();
        let mut k: u128 = 1;
        loop {
            let due = start + Duration::from_nanos(u64::try_from(k * step_ns).unwrap_or(u64::MAX));
            let wait = due.saturating_duration_since(Instant::now());
            match stop.recv_timeout(wait) {
                Err(RecvTimeoutError::Timeout) => {}
                // A message or a dropped sender both mean stop.
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
            let _ = self.step(Duration::from_nanos(u64::try_from(k * step_ns).unwrap_or(u64::MAX)), false);
            // If `tc` was slow and steps were missed, jump to the next one due (no bursts of
            // stale updates).
            let elapsed = start.elapsed().as_nanos();
            k = (k + 1).max(elapsed / step_ns + 1);
        }
    }
}

/// A running trace replay from [`NetnsLink::start_shaping`]; stops when dropped.
#[derive(Debug)]
pub struct ShapingHandle {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<Mutex<ShapingStats>>,
    /// Keeps the namespaces alive while the thread may still run `tc` in them.
    _inner: Arc<Inner>,
}

impl ShapingHandle {
    /// A snapshot of what the replay has done so far.
    pub fn stats(&self) -> ShapingStats {
        self.stats.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Stops the replay (waiting for the thread) and returns the final statistics.
    pub fn stop(mut self) -> ShapingStats {
        self.halt();
        self.stats()
    }

    fn halt(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::warn!("the netns shaping thread panicked");
        }
    }
}

impl Drop for ShapingHandle {
    fn drop(&mut self) {
        self.halt();
    }
}

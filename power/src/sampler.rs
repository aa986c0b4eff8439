//! The sampling loop: reads a source at a requested rate on a std thread until told to stop.
//!
//! Ticks are scheduled on an absolute grid (`start + k * period`); a late tick is taken at once
//! and the grid moves on, with no catch-up burst. A failed read is logged and skipped (a gap in
//! the ring, never an invented value); `max_consecutive_errors` failures in a row end the loop
//! with the last error. A reading whose values are identical to the previous one is not a new
//! sample of the sensor: when fewer than [`FRESH_FRACTION`] of the reads in a window are fresh,
//! the sensor refreshes slower than the requested rate, and the loop warns once (the readings are
//! kept: they are what the sensor said at that time).

use super::ring::Ring;
use super::{BoxedSource, PowerReading, PowerSource};
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Below this fraction of fresh reads in a window, the sensor is too slow for the rate.
pub const FRESH_FRACTION: f64 = 0.9;

/// The longest single sleep, so that a stop request is seen promptly at low rates.
const MAX_NAP: Duration = Duration::from_millis(20);

/// How to sample.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    /// Reads per second.
    pub rate_hz: f64,
    /// Consecutive failed reads that end the loop.
    pub max_consecutive_errors: u32,
    /// The window over which the refresh rate is judged.
    pub refresh_window: Duration,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig { rate_hz: 100.0, max_consecutive_errors: 10, refresh_window: Duration::from_secs(1) }
    }
}

impl SamplerConfig {
    /// Checks the rate: positive, finite, at most 10 kHz.
    ///
    /// # Errors
    /// [`Error::Input`] naming the bad value.
    pub fn validate(&self) -> Result<()> {
        if !(self.rate_hz.is_finite() && self.rate_hz > 0.0 && self.rate_hz <= 10_000.0) {
            return Err(Error::Input(format!("sampling rate {} Hz is not in (0, 10000]", self.rate_hz)));
        }
        if self.max_consecutive_errors == 0 {
            return Err(Error::Input("max_consecutive_errors must be at least 1".into()));
        }
        Ok(())
    }
    fn period(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.rate_hz)
    }
}

/// What a sampling run did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SamplerStats {
    /// Successful reads.
    pub reads: u64,
    /// Reads whose values differed from the previous read.
    pub fresh: u64,
    /// Failed reads.
    pub errors: u64,
    /// Time from the first to the last successful read.
    pub span: Duration,
    /// Whether the slow-refresh warning fired.
    pub slow_refresh: bool,
}

impl SamplerStats {
    /// Achieved reads per second (between the first and the last read).
    pub fn achieved_hz(&self) -> f64 {
        Self::rate(self.reads, self.span)
    }
    /// Fresh values per second: what the sensor actually delivered.
    pub fn refresh_hz(&self) -> f64 {
        Self::rate(self.fresh, self.span)
    }
    fn rate(n: u64, span: Duration) -> f64 {
        if n < 2 || span.is_zero() { 0.0 } else { (n - 1) as f64 / span.as_secs_f64() }
    }
}

/// Samples `source` until `stop` is set or `deadline` passes, handing each reading and whether
/// it is fresh to `on_sample`.
///
/// # Errors
/// A bad config, or the last error after `max_consecutive_errors` failed reads in a row.
pub fn run(
    source: &mut dyn PowerSource,
    cfg: &SamplerConfig,
    stop: &AtomicBool,
    deadline: Option<Instant>,
    on_sample: &mut dyn FnMut(PowerReading, bool),
) -> Result<SamplerStats> {
    cfg.validate()?;
    let period = cfg.period();
    let mut stats = SamplerStats::default();
    let mut prev: Option<PowerReading> = None;
    let mut first_at: Option<Instant> = None;
    let mut consecutive = 0u32;
    let (mut win_start, mut win_reads, mut win_fresh) = (Instant::now(), 0u64, 0u64);
    let mut next = Instant::now();
    let over = |now: Instant| stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| now >= d);
    while !over(Instant::now()) {
        match source.read() {
            Ok(r) => {
                consecutive = 0;
                let fresh = prev.as_ref().is_none_or(|p| !p.same_values(&r));
                stats.reads += 1;
                stats.fresh += u64::from(fresh);
                win_reads += 1;
                win_fresh += u64::from(fresh);
                let at = r.at;
                stats.span = at.saturating_duration_since(*first_at.get_or_insert(at));
                prev = Some(r.clone());
                on_sample(r, fresh);
            }
            Err(e) => {
                stats.errors += 1;
                consecutive += 1;
                tracing::warn!(source = source.name(), error = %e, consecutive, "power read failed");
                if consecutive >= cfg.max_consecutive_errors {
                    return Err(e);
                }
            }
        }
        let now = Instant::now();
        if now.saturating_duration_since(win_start) >= cfg.refresh_window {
            let window_s = now.saturating_duration_since(win_start).as_secs_f64();
            if !stats.slow_refresh && win_reads >= 5 && (win_fresh as f64) < FRESH_FRACTION * win_reads as f64 {
                stats.slow_refresh = true;
                tracing::warn!(
                    source = source.name(),
                    requested_hz = cfg.rate_hz,
                    refresh_hz = win_fresh as f64 / window_s,
                    "the sensor refreshes slower than the requested rate; repeated values are not new samples"
                );
            }
            if (win_reads as f64) < 0.8 * cfg.rate_hz * window_s {
                tracing::debug!(achieved_hz = win_reads as f64 / window_s, requested_hz = cfg.rate_hz, "sampler behind");
            }
            (win_start, win_reads, win_fresh) = (now, 0, 0);
        }
        next += period;
        if next < now {
            next = now;
        }
        nap_until(next, stop, deadline);
    }
    if !stats.slow_refresh && win_reads >= 5 && (win_fresh as f64) < FRESH_FRACTION * win_reads as f64 {
        stats.slow_refresh = true;
        tracing::warn!(
            source = source.name(),
            requested_hz = cfg.rate_hz,
            fresh = win_fresh,
            reads = win_reads,
            "the sensor refreshes slower than the requested rate; repeated values are not new samples"
        );
    }
    Ok(stats)
}

/// Sleeps until `until`, waking to check `stop` and never past `deadline`.
fn nap_until(until: Instant, stop: &AtomicBool, deadline: Option<Instant>) {
    let until = deadline.map_or(until, |d| until.min(d));
    loop {
        let now = Instant::now();
        if now >= until || stop.load(Ordering::Relaxed) {
            return;
        }
        std::thread::sleep((until - now).min(MAX_NAP));
    }
}

/// A sampler running on its own thread.
#[derive(Debug)]
pub struct SamplerHandle {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<SamplerStats>>,
}

impl SamplerHandle {
    /// Asks the loop to stop (it finishes the read in progress).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
    /// Whether the thread has ended (stopped, or failed).
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }
    /// Stops the loop and waits for it.
    ///
    /// # Errors
    /// The loop's error, or [`Error::Power`] if the thread panicked.
    pub fn join(self) -> Result<SamplerStats> {
        self.stop();
        self.thread.join().map_err(|_| Error::power("sampler", "the sampling thread panicked"))?
    }
}

/// Starts sampling `source` into `ring` on a new thread. Readings the ring rejects (see
/// [`Ring::push`]) are logged and dropped.
///
/// # Errors
/// A bad config, or a thread that cannot be started.
pub fn spawn(mut source: BoxedSource, cfg: SamplerConfig, ring: Arc<Mutex<Ring>>) -> Result<SamplerHandle> {
    cfg.validate()?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name(format!("lop-power-{}", source.name()))
        .spawn(move || {
            let mut push = |r: PowerReading, _fresh: bool| {
                // A poisoned lock only means another thread panicked while holding it; the ring's
                // own invariants hold after every push, so keep going.
                let mut guard = match ring.lock() {
                    Ok(g) => g,
                    Err(poisoned) => poisoned.into_inner(),
                };
                if let Err(e) = guard.push(r) {
                    tracing::warn!(error = %e, "power reading rejected");
                }
            };
            run(source.as_mut(), &cfg, &flag, None, &mut push)
        })
        .map_err(|e| Error::power("sampler", format!("cannot start the sampling thread: {e}")))?;
    Ok(SamplerHandle { stop, thread })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ModelSource, PowerModel, State};

    /// A source that fails on chosen reads and otherwise repeats a value `repeat` times.
    struct Scripted {
        n: u64,
        fail: fn(u64) -> bool,
        repeat: u64,
        rails: Vec<String>,
    }
    impl PowerSource for Scripted {
        fn name(&self) -> &str {
            "scripted"
        }
        fn rails(&self) -> &[String] {
            &self.rails
        }
        fn total(&self) -> &str {
            "X"
        }
        fn read(&mut self) -> Result<PowerReading> {
            self.n += 1;
            if (self.fail)(self.n) {
                return Err(Error::power("scripted", format!("read {} fails", self.n)));
            }
            let w = (self.n / self.repeat) as f64;
            Ok(PowerReading { at: Instant::now(), rails_w: vec![w], total_w: w, energy_j: None, modelled: false })
        }
    }
    fn scripted(fail: fn(u64) -> bool, repeat: u64) -> Scripted {
        Scripted { n: 0, fail, repeat, rails: vec!["X".into()] }
    }

    #[test]
    fn power_sampler_rate_stop_and_ring() {
        let ring = Arc::new(Mutex::new(Ring::new(1000).expect("ring")));
        let model = ModelSource::new(PowerModel::default(), State::Computing).expect("model");
        let cfg = SamplerConfig { rate_hz: 200.0, ..SamplerConfig::default() };
        let h = spawn(Box::new(model), cfg, Arc::clone(&ring)).expect("spawn");
        std::thread::sleep(Duration::from_millis(300));
        let asked = Instant::now();
        let stats = h.join().expect("clean stop");
        assert!(asked.elapsed() < Duration::from_secs(2), "stop is prompt");
        let ring = ring.lock().expect("lock");
        assert_eq!(ring.len() as u64, stats.reads);
        // Loose bounds: a loaded 2-core machine may deliver fewer ticks, never more.
        assert!(stats.reads >= 10 && stats.achieved_hz() <= 200.0 * 1.1, "{stats:?}");
        assert!(ring.iter().all(|r| r.modelled && r.total_w == 13.35));
        assert_eq!(stats.fresh, stats.reads, "the model's counter moves on every read");
    }

    #[test]
    fn power_sampler_counts_repeats_as_not_fresh() {
        let mut src = scripted(|_| false, 4);
        let stop = AtomicBool::new(false);
        let cfg = SamplerConfig { rate_hz: 400.0, refresh_window: Duration::from_millis(50), ..Default::default() };
        let mut n = 0;
        let deadline = Instant::now() + Duration::from_millis(200);
        let stats = run(&mut src, &cfg, &stop, Some(deadline), &mut |_, _| n += 1).expect("runs");
        assert_eq!(n, stats.reads);
        assert!(stats.fresh * 3 < stats.reads * 2, "one read in four is fresh: {stats:?}");
        assert!(stats.slow_refresh, "{stats:?}");
        assert!(stats.refresh_hz() < stats.achieved_hz());
    }

    #[test]
    fn power_sampler_skips_bad_reads_and_gives_up_on_persistent_ones() {
        let mut src = scripted(|n| n % 3 == 0, 1);
        let stop = AtomicBool::new(false);
        let cfg = SamplerConfig { rate_hz: 500.0, ..Default::default() };
        let deadline = Instant::now() + Duration::from_millis(300);
        let stats = run(&mut src, &cfg, &stop, Some(deadline), &mut |_, _| {}).expect("intermittent errors are skipped");
        assert!(stats.errors >= 1 && stats.reads >= 2 * stats.errors - 1, "{stats:?}");

        let mut broken = scripted(|_| true, 1);
        let cfg = SamplerConfig { rate_hz: 1000.0, max_consecutive_errors: 5, ..Default::default() };
        let e = run(&mut broken, &cfg, &stop, None, &mut |_, _| {}).expect_err("gives up");
        assert!(e.to_string().contains("read 5 fails"), "{e}");

        assert!(run(&mut broken, &SamplerConfig { rate_hz: 0.0, ..Default::default() }, &stop, None, &mut |_, _| {}).is_err());
        let stopped = AtomicBool::new(true);
        let stats = run(&mut broken, &SamplerConfig::default(), &stopped, None, &mut |_, _| {}).expect("stopped");
        assert_eq!(stats.reads, 0);
    }
}

//! [`EnergyAccountant`]: readings kept in a bounded ring (filled by its own sampler thread or by
//! the caller) and the energy of wall-clock intervals answered from them.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use lop_power::{BoxedSource, EnergyOptions, EnergyOutcome, PowerReading, Ring, SamplerConfig, SamplerHandle, SamplerStats};

use super::error::PowerNodeError;
use super::report::{EnergyReport, unix_s};

fn lock(ring: &Mutex<Ring>) -> MutexGuard<'_, Ring> {
    // The ring's invariants hold after every push, so a panic elsewhere cannot corrupt it.
    ring.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Readings of one source in a bounded ring, and the energy of wall-clock intervals.
#[derive(Debug)]
pub struct EnergyAccountant {
    ring: Arc<Mutex<Ring>>,
    source: String,
    rails: Vec<String>,
    anchor: (Instant, SystemTime),
    opts: EnergyOptions,
    sampler: Option<SamplerHandle>,
}

impl EnergyAccountant {
    /// An accountant fed by the caller ([`EnergyAccountant::push`]) with readings of `source`
    /// whose rails are `rails`, keeping at most `capacity` readings.
    ///
    /// # Errors
    /// A capacity below 2.
    pub fn fed(source: impl Into<String>, rails: Vec<String>, capacity: usize) -> Result<EnergyAccountant, PowerNodeError> {
        Ok(EnergyAccountant {
            ring: Arc::new(Mutex::new(Ring::new(capacity)?)),
            source: source.into(),
            rails,
            anchor: (Instant::now(), SystemTime::now()),
            opts: EnergyOptions::default(),
            sampler: None,
        })
    }

    /// An accountant that samples `source` on its own thread (see [`lop_power::sampler`]),
    /// keeping at most `capacity` readings (e.g. 6000: a minute at 100 Hz). The thread stops when
    /// the accountant is dropped or [`EnergyAccountant::stop`]ped.
    ///
    /// # Errors
    /// A capacity below 2, a bad sampling config, a thread that cannot start.
    pub fn sampled(source: BoxedSource, cfg: SamplerConfig, capacity: usize) -> Result<EnergyAccountant, PowerNodeError> {
        let mut acc = EnergyAccountant::fed(source.name().to_string(), source.rails().to_vec(), capacity)?;
        tracing::info!(source = %acc.source, rails = ?acc.rails, rate_hz = cfg.rate_hz, capacity, "power sampling started");
        acc.sampler = Some(lop_power::sampler::spawn(source, cfg, Arc::clone(&acc.ring))?);
        Ok(acc)
    }

    /// Replaces the integration options (the longest gap interpolated across, counter use).
    pub fn with_options(mut self, opts: EnergyOptions) -> EnergyAccountant {
        self.opts = opts;
        self
    }

    /// Adds a reading.
    ///
    /// # Errors
    /// [`PowerNodeError::Engine`] when the ring rejects it (not after the newest reading, invalid
    /// power, a different rail count); the ring is unchanged.
    pub fn push(&self, r: PowerReading) -> Result<(), PowerNodeError> {
        lock(&self.ring).push(r).map_err(PowerNodeError::from)
    }

    /// The monotonic instant of a wall-clock time (see the module docs on the anchor).
    ///
    /// # Errors
    /// [`PowerNodeError::Clock`] when not representable.
    pub fn instant_of(&self, t: SystemTime) -> Result<Instant, PowerNodeError> {
        let (ai, asys) = self.anchor;
        let r = match t.duration_since(asys) {
            Ok(d) => ai.checked_add(d),
            Err(e) => ai.checked_sub(e.duration()),
        };
        r.ok_or_else(|| PowerNodeError::Clock(format!("{:.3} s since the epoch is out of the monotonic clock's range", unix_s(t))))
    }

    /// The wall-clock time of a monotonic instant.
    pub fn system_time_of(&self, t: Instant) -> SystemTime {
        let (ai, asys) = self.anchor;
        if t >= ai { asys + (t - ai) } else { asys.checked_sub(ai - t).unwrap_or(UNIX_EPOCH) }
    }

    /// The energy of inference `id` over `[start, end]`.
    ///
    /// # Errors
    /// [`PowerNodeError::Interval`] when `end < start`; [`PowerNodeError::NoData`] when the buffer
    /// is empty or does not cover the interval ([`PowerNodeError::is_retryable`] when it only
    /// ends after the newest reading); [`PowerNodeError::Clock`] for unmappable times.
    pub fn energy(&self, id: u64, start: SystemTime, end: SystemTime) -> Result<EnergyReport, PowerNodeError> {
        if end < start {
            return Err(PowerNodeError::Interval { start, end });
        }
        let (a, b) = (self.instant_of(start)?, self.instant_of(end)?);
        let outcome = lop_power::energy::energy(&lock(&self.ring), a, b, &self.opts)?;
        match outcome {
            EnergyOutcome::NoData(why) => {
                tracing::debug!(id, why = %why, "no energy figure");
                Err(PowerNodeError::NoData(why))
            }
            EnergyOutcome::Energy(e) => {
                let rails_j = self.rails.iter().cloned().zip(e.rails_j.iter().copied()).collect();
                Ok(EnergyReport {
                    id,
                    start,
                    end,
                    joules: e.joules,
                    avg_w: e.mean_w,
                    rails_j,
                    samples: e.samples,
                    source: self.source.clone(),
                    modelled: e.modelled,
                    method: e.method.as_str(),
                })
            }
        }
    }

    /// Readings newer than `after` (all when `None`), oldest first: for publishing and the
    /// per-sample log.
    pub fn readings_after(&self, after: Option<Instant>) -> Vec<PowerReading> {
        let ring = lock(&self.ring);
        ring.iter().filter(|r| after.is_none_or(|t| r.at > t)).cloned().collect()
    }

    /// The newest reading.
    pub fn latest(&self) -> Option<PowerReading> {
        let ring = lock(&self.ring);
        ring.len().checked_sub(1).and_then(|i| ring.get(i).cloned())
    }

    /// Readings held.
    pub fn len(&self) -> usize {
        lock(&self.ring).len()
    }

    /// Whether no reading is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The source's name.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The source's rails.
    pub fn rails(&self) -> &[String] {
        &self.rails
    }

    /// Whether the sampler thread has ended (it stops on persistent read errors); `false` for a
    /// fed accountant.
    pub fn sampler_finished(&self) -> bool {
        self.sampler.as_ref().is_some_and(SamplerHandle::is_finished)
    }

    /// Stops the sampler thread, if any, and returns its statistics.
    ///
    /// # Errors
    /// The sampler's error (e.g. persistent read failures).
    pub fn stop(&mut self) -> Result<Option<SamplerStats>, PowerNodeError> {
        match self.sampler.take() {
            Some(h) => Ok(Some(h.join()?)),
            None => Ok(None),
        }
    }
}

impl Drop for EnergyAccountant {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!(error = %e, "power sampler ended with an error");
        }
    }
}

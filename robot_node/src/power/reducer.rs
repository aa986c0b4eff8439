//! [`RateReducer`]: readings averaged down to at most a given rate for the `/lop/power` stream.

use std::time::{Duration, Instant};

use lop_power::PowerReading;

use super::error::PowerNodeError;

/// Readings averaged down for `/lop/power`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReducedSample {
    /// The newest reading's time.
    pub at: Instant,
    /// Mean total watts over the readings.
    pub total_w: f64,
    /// Mean watts per rail.
    pub rails_w: Vec<f64>,
    /// How many readings were averaged.
    pub readings: u32,
    /// Whether any was modelled.
    pub modelled: bool,
}

/// Averages readings and emits at most `max_hz` times a second: the first reading is emitted
/// alone; afterwards an average is emitted with the first reading at or past the next slot of a
/// fixed grid (`first + k / max_hz`), covering every reading since the previous emission. After
/// a gap longer than a slot the grid restarts at the late reading.
#[derive(Debug, Clone)]
pub struct RateReducer {
    period: Duration,
    due: Option<Instant>,
    total: f64,
    rails: Vec<f64>,
    n: u32,
    modelled: bool,
}

impl RateReducer {
    /// At most `max_hz` emissions a second (`f64::INFINITY`: every reading).
    ///
    /// # Errors
    /// [`PowerNodeError::Config`] unless `max_hz > 0`.
    pub fn new(max_hz: f64) -> Result<RateReducer, PowerNodeError> {
        if max_hz.is_nan() || max_hz <= 0.0 {
            return Err(PowerNodeError::Config(format!("publish rate {max_hz} Hz must be positive")));
        }
        let period = if max_hz.is_finite() { Duration::from_secs_f64(1.0 / max_hz) } else { Duration::ZERO };
        Ok(RateReducer { period, due: None, total: 0.0, rails: Vec::new(), n: 0, modelled: false })
    }

    /// Adds a reading; returns the average to publish when a slot is due.
    pub fn push(&mut self, r: &PowerReading) -> Option<ReducedSample> {
        if self.n == 0 || self.rails.len() != r.rails_w.len() {
            self.rails = vec![0.0; r.rails_w.len()];
            self.total = 0.0;
            self.n = 0;
            self.modelled = false;
        }
        self.total += r.total_w;
        for (s, w) in self.rails.iter_mut().zip(&r.rails_w) {
            *s += w;
        }
        self.n += 1;
        self.modelled |= r.modelled;
        let due = *self.due.get_or_insert(r.at);
        if r.at < due {
            return None;
        }
        let next = due + self.period;
        // On the grid while readings keep up; after a gap (or with no period) restart from here.
        self.due = Some(if next > r.at { next } else { r.at + self.period });
        let n = f64::from(self.n);
        let out = ReducedSample {
            at: r.at,
            total_w: self.total / n,
            rails_w: self.rails.iter().map(|s| s / n).collect(),
            readings: self.n,
            modelled: self.modelled,
        };
        self.n = 0;
        Some(out)
    }
}

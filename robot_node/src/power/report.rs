//! The energy of one inference as the node reports it ([`EnergyReport`]), and wall-clock
//! times as seconds since the Unix epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// The energy of one inference.
#[derive(Debug, Clone, PartialEq)]
pub struct EnergyReport {
    /// The inference id.
    pub id: u64,
    /// Start (wall clock).
    pub start: SystemTime,
    /// End (wall clock).
    pub end: SystemTime,
    /// Joules of the total rail.
    pub joules: f64,
    /// `joules / duration` (the power at `start` for an empty interval).
    pub avg_w: f64,
    /// Joules per rail, in the source's rail order.
    pub rails_j: Vec<(String, f64)>,
    /// Readings strictly inside the interval.
    pub samples: usize,
    /// The power source's name.
    pub source: String,
    /// Whether the figure comes from the power model (never reported as measured).
    pub modelled: bool,
    /// `trapezoid` or `counter`.
    pub method: &'static str,
}

impl EnergyReport {
    /// `end - start`, seconds.
    pub fn duration_s(&self) -> f64 {
        self.end.duration_since(self.start).map_or(0.0, |d| d.as_secs_f64())
    }
}

/// Seconds since the Unix epoch (negative before it).
pub fn unix_s(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

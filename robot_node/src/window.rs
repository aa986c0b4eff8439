//! Recent per-frame times for `/diagnostics`: a bounded window of the last inferences' latencies
//! and ROS-layer times, read as percentiles, and the rates of frames in and results out between
//! two reports.

use std::collections::VecDeque;
use std::time::Instant;

/// How many recent frames the percentiles cover.
pub const WINDOW: usize = 256;

/// The last [`WINDOW`] values of one time, seconds.
#[derive(Debug, Clone, Default)]
pub struct Recent {
    values: VecDeque<f64>,
}

impl Recent {
    /// Adds a value, forgetting the oldest beyond [`WINDOW`].
    pub fn push(&mut self, v: f64) {
        if self.values.len() == WINDOW {
            self.values.pop_front();
        }
        self.values.push_back(v);
    }

    /// Values held.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no value is held.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The `q` quantile (0..=1, nearest rank) of the values held; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let mut v: Vec<f64> = self.values.iter().copied().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let rank = (q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize;
        v.get(rank.saturating_sub(1)).copied()
    }
}

/// Rate of a counter between two reads.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    last: Option<(Instant, u64)>,
}

impl Rate {
    /// No read yet.
    pub fn new() -> Rate {
        Rate { last: None }
    }

    /// Events per second since the previous read (0 on the first).
    pub fn per_second(&mut self, now: Instant, count: u64) -> f64 {
        let r = match self.last {
            Some((t, c)) if now > t => count.saturating_sub(c) as f64 / now.duration_since(t).as_secs_f64(),
            _ => 0.0,
        };
        self.last = Some((now, count));
        r
    }
}

impl Default for Rate {
    fn default() -> Rate {
        Rate::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn quantiles_use_the_nearest_rank_over_the_last_window() {
        let mut r = Recent::default();
        assert_eq!(r.quantile(0.5), None);
        for v in 1..=100 {
            r.push(f64::from(v));
        }
        assert_eq!(r.quantile(0.5), Some(50.0));
        assert_eq!(r.quantile(0.99), Some(99.0));
        assert_eq!(r.quantile(1.0), Some(100.0));
        assert_eq!(r.quantile(0.0), Some(1.0));
        for _ in 0..WINDOW {
            r.push(7.0);
        }
        assert_eq!(r.len(), WINDOW, "the window is bounded");
        assert_eq!(r.quantile(1.0), Some(7.0), "older values are forgotten");
    }

    #[test]
    fn rates_count_events_between_reads() {
        let t0 = Instant::now();
        let mut r = Rate::new();
        assert_eq!(r.per_second(t0, 10), 0.0);
        let got = r.per_second(t0 + Duration::from_millis(500), 25);
        assert!((got - 30.0).abs() < 1e-9, "{got}");
    }
}

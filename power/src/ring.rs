//! A bounded ring buffer of readings, oldest first.
//!
//! Pushing checks what [`super::energy`] relies on: timestamps strictly increase, powers are
//! finite and non-negative, the number of rails never changes. A reading that fails is rejected
//! with an error and the buffer is left as it was, so a bad sample can cost a gap but never a
//! wrong joule figure.

use super::PowerReading;
use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::time::Instant;

/// At most `capacity` readings; the oldest goes when a new one arrives at capacity.
#[derive(Debug, Clone)]
pub struct Ring {
    buf: VecDeque<PowerReading>,
    capacity: usize,
}

impl Ring {
    /// An empty ring of `capacity` readings.
    ///
    /// # Errors
    /// A capacity below 2 (an interval needs two readings).
    pub fn new(capacity: usize) -> Result<Ring> {
        if capacity < 2 {
            return Err(Error::Input(format!("ring capacity {capacity} is below 2")));
        }
        Ok(Ring { buf: VecDeque::with_capacity(capacity.min(1 << 16)), capacity })
    }

    /// Adds a reading, dropping the oldest at capacity.
    ///
    /// # Errors
    /// [`Error::Power`] when the reading is not after the newest one (a clock that jumped back or
    /// stood still), has a non-finite or negative power, a non-finite counter, or a different
    /// number of rails; the ring is unchanged.
    pub fn push(&mut self, r: PowerReading) -> Result<()> {
        let bad = |msg: String| Err(Error::power("ring", msg));
        if !r.total_w.is_finite() || r.total_w < 0.0 || r.rails_w.iter().any(|w| !w.is_finite() || *w < 0.0) {
            return bad(format!("reading with invalid power (total {} W, rails {:?})", r.total_w, r.rails_w));
        }
        if r.energy_j.is_some_and(|e| !e.is_finite()) {
            return bad(format!("reading with invalid energy counter {:?}", r.energy_j));
        }
        if let Some(last) = self.buf.back() {
            if r.at <= last.at {
                return bad(format!(
                    "reading at {:?} is not after the newest one (clock went back {:?})",
                    r.at,
                    last.at.saturating_duration_since(r.at)
                ));
            }
            if r.rails_w.len() != last.rails_w.len() {
                return bad(format!("reading has {} rails, the ring holds {}", r.rails_w.len(), last.rails_w.len()));
            }
        }
        if self.buf.len() == self.capacity {
            self.buf.pop_front();
        }
        self.buf.push_back(r);
        Ok(())
    }

    /// Number of readings held.
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    /// Whether the ring is empty.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// The most readings it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// The `i`-th oldest reading.
    pub fn get(&self, i: usize) -> Option<&PowerReading> {
        self.buf.get(i)
    }
    /// Readings, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &PowerReading> {
        self.buf.iter()
    }
    /// The oldest and newest timestamps.
    pub fn span(&self) -> Option<(Instant, Instant)> {
        Some((self.buf.front()?.at, self.buf.back()?.at))
    }
    /// Drops readings older than `before`, keeping the last one before it so that an interval
    /// starting at `before` can still be interpolated.
    pub fn drop_before(&mut self, before: Instant) {
        while self.buf.len() > 1 && self.buf.get(1).is_some_and(|r| r.at <= before) {
            self.buf.pop_front();
        }
    }
    /// Empties the ring.
    pub fn clear(&mut self) {
        self.buf.clear();
    }
    /// Index of the first reading at or after `t` (`len` if none).
    pub(crate) fn first_at_or_after(&self, t: Instant) -> usize {
        self.buf.partition_point(|r| r.at < t)
    }
    /// Index of the first reading strictly after `t` (`len` if none).
    pub(crate) fn first_after(&self, t: Instant) -> usize {
        self.buf.partition_point(|r| r.at <= t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn reading(at: Instant, w: f64) -> PowerReading {
        PowerReading { at, rails_w: vec![w], total_w: w, energy_j: None, modelled: false }
    }

    #[test]
    fn power_ring_bounded_and_validated() {
        let t = Instant::now();
        let ms = |n: u64| t + Duration::from_millis(n);
        assert!(Ring::new(1).is_err());
        let mut ring = Ring::new(3).expect("valid");
        for k in 0..5 {
            ring.push(reading(ms(10 * k), k as f64)).expect("push");
        }
        assert_eq!(ring.len(), 3);
        assert_eq!(ring.span(), Some((ms(20), ms(40))));
        let e = ring.push(reading(ms(40), 1.0)).expect_err("same time");
        assert!(e.to_string().contains("not after"), "{e}");
        assert!(ring.push(reading(ms(30), 1.0)).is_err(), "clock went back");
        assert!(ring.push(reading(ms(50), -1.0)).is_err(), "negative");
        assert!(ring.push(reading(ms(50), f64::NAN)).is_err(), "nan");
        let mut two = reading(ms(50), 1.0);
        two.rails_w.push(1.0);
        assert!(ring.push(two).is_err(), "rail count changed");
        let mut inf = reading(ms(50), 1.0);
        inf.energy_j = Some(f64::INFINITY);
        assert!(ring.push(inf).is_err(), "counter");
        assert_eq!(ring.span(), Some((ms(20), ms(40))), "rejected readings leave the ring as it was");
        ring.drop_before(ms(35));
        assert_eq!(ring.span(), Some((ms(30), ms(40))));
        assert_eq!(ring.first_at_or_after(ms(30)), 0);
        assert_eq!(ring.first_after(ms(30)), 1);
    }
}

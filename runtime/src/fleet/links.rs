//! A fleet robot's link to each edge: the upload rates its own inferences there measured
//! ([`crate::bandwidth::upload`]), so that routing prices each edge's path. The robot's one link
//! estimate (its Wi-Fi) bounds every path; an edge behind a slower segment of the site network
//! shows here, and only here.
//!
//! An edge's estimate expires with its samples: routing that avoids a slow edge measures it no
//! more, so after [`LINK_MAX_AGE`] the robot prices it by its own estimate again and one frame
//! there measures it anew (a path that has recovered is used again).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::bandwidth::Predictor;
use crate::bandwidth::predict::HarmonicMean;

/// Samples per edge in the harmonic mean (the monitor's default window).
pub const LINK_WINDOW: usize = 5;
/// An edge whose newest sample is older than this has no estimate.
pub const LINK_MAX_AGE: Duration = Duration::from_secs(10);

/// Per-edge upload rates.
#[derive(Default)]
pub struct EdgeLinks {
    links: HashMap<String, (HarmonicMean, Instant)>,
}

impl std::fmt::Debug for EdgeLinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.links.iter().map(|(e, (p, _))| (e, p.predict()))).finish()
    }
}

impl EdgeLinks {
    /// No edge measured yet.
    pub fn new() -> EdgeLinks {
        EdgeLinks::default()
    }

    /// One upload to `edge` measured `mbps` Mbit/s at `now`.
    pub fn record(&mut self, edge: &str, now: Instant, mbps: f64) {
        if !mbps.is_finite() || mbps < 0.0 {
            return;
        }
        let link = self.links.entry(edge.to_string()).or_insert_with(|| (HarmonicMean::new(LINK_WINDOW), now));
        if now.saturating_duration_since(link.1) > LINK_MAX_AGE {
            link.0.reset();
        }
        link.0.observe(0.0, mbps);
        link.1 = now;
    }

    /// The upload rate to `edge`, Mbit/s: the harmonic mean of its last [`LINK_WINDOW`] samples,
    /// `None` if it has none or the newest is older than [`LINK_MAX_AGE`].
    pub fn mbps(&self, edge: &str, now: Instant) -> Option<f64> {
        let (p, last) = self.links.get(edge)?;
        (now.saturating_duration_since(*last) <= LINK_MAX_AGE).then(|| p.predict()).flatten()
    }

    /// The link to price `edge` by, in the schedule table's MB/s: the robot's own estimate
    /// `robot_mb_s`, or the edge's measured rate where that is lower (`scale`: the table's
    /// bandwidth scale, bucket `b` standing for `b * scale` MB/s on the real link).
    pub fn table_mb_s(&self, edge: &str, now: Instant, robot_mb_s: f64, scale: f64) -> f64 {
        match self.mbps(edge, now) {
            Some(m) if scale > 0.0 => robot_mb_s.min(m / 8.0 / scale),
            _ => robot_mb_s,
        }
    }

    /// Every edge with an estimate at `now`, Mbit/s, sorted by edge.
    pub fn estimates(&self, now: Instant) -> Vec<(String, f64)> {
        let mut v: Vec<(String, f64)> = self.links.keys().filter_map(|e| Some((e.clone(), self.mbps(e, now)?))).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_edge_is_priced_by_the_slower_of_the_robots_link_and_its_own() {
        let t0 = Instant::now();
        let mut links = EdgeLinks::new();
        assert_eq!(links.table_mb_s("a", t0, 30.0, 1.0), 30.0, "unmeasured: the robot's estimate");
        // Harmonic mean of 16 and 4 Mbit/s: 6.4 Mbit/s = 0.8 MB/s.
        links.record("a", t0, 16.0);
        links.record("a", t0 + Duration::from_secs(1), 4.0);
        let m = links.mbps("a", t0 + Duration::from_secs(1)).unwrap();
        assert!((m - 6.4).abs() < 1e-9, "{m}");
        let mb_s = links.table_mb_s("a", t0 + Duration::from_secs(1), 30.0, 1.0);
        assert!((mb_s - 0.8).abs() < 1e-9, "{mb_s}");
        // In table units with a bandwidth scale of 0.1: 8 buckets.
        assert!((links.table_mb_s("a", t0, 30.0, 0.1) - 8.0).abs() < 1e-9);
        // A faster path than the robot's own link does not raise it.
        links.record("b", t0, 1000.0);
        assert_eq!(links.table_mb_s("b", t0, 30.0, 1.0), 30.0);
        assert_eq!(links.table_mb_s("c", t0, 30.0, 1.0), 30.0, "another edge is not this one");
    }

    #[test]
    fn an_estimate_expires_and_a_new_sample_starts_afresh() {
        let t0 = Instant::now();
        let mut links = EdgeLinks::new();
        links.record("a", t0, 2.0);
        assert_eq!(links.mbps("a", t0 + LINK_MAX_AGE), Some(2.0));
        let later = t0 + LINK_MAX_AGE + Duration::from_millis(1);
        assert_eq!(links.mbps("a", later), None, "expired");
        assert_eq!(links.table_mb_s("a", later, 30.0, 1.0), 30.0);
        // The old sample does not drag the new one down.
        links.record("a", later, 80.0);
        assert_eq!(links.mbps("a", later), Some(80.0));
        links.record("a", later, f64::NAN);
        assert_eq!(links.mbps("a", later), Some(80.0), "a bad sample is ignored");
        links.record("b", later, 5.0);
        assert_eq!(links.estimates(later), vec![("a".to_string(), 80.0), ("b".to_string(), 5.0)]);
        assert_eq!(links.estimates(later + LINK_MAX_AGE * 2), vec![], "all expired");
    }
}

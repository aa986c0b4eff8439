//! How much the edge's probe responder may send: token buckets of reply bytes, one per peer and
//! one for all peers together (issue 56). A probe is a query of a few bytes that asks for up to
//! [`MAX_PROBE_BYTES`]; without a budget, one peer could make the edge flood its
//! own Wi-Fi. The peer is the robot id a probe names in its key: with authentication and access
//! control a robot can only use its own, and without them the total budget still bounds what
//! made-up ids can draw.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Largest download a probe may ask for (bytes); bigger requests are clamped.
pub const MAX_PROBE_BYTES: usize = 8 << 20;

/// Budgets of the probe responder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeLimits {
    /// Reply bytes per second one peer may draw on average.
    pub peer_bytes_per_s: f64,
    /// Reply bytes one peer may draw at once (at least one largest probe).
    pub peer_burst_bytes: f64,
    /// Reply bytes per second all peers together may draw on average.
    pub total_bytes_per_s: f64,
    /// Reply bytes all peers together may draw at once.
    pub total_burst_bytes: f64,
    /// Peers tracked at once; past it, new peers share one bucket.
    pub max_peers: usize,
}

impl Default for ProbeLimits {
    /// A robot's default probe is 256 KiB at most every 2 s (128 KiB/s); these allow 8 times that
    /// per robot, bursts of one largest probe, and 8 MiB/s (64 Mbit/s) for all robots together.
    fn default() -> Self {
        ProbeLimits {
            peer_bytes_per_s: 1024.0 * 1024.0,
            peer_burst_bytes: (MAX_PROBE_BYTES * 2) as f64,
            total_bytes_per_s: 8.0 * 1024.0 * 1024.0,
            total_burst_bytes: (MAX_PROBE_BYTES * 4) as f64,
            max_peers: 1024,
        }
    }
}

/// Every probe costs at least this many bytes of budget, so a flood of empty probes is rationed
/// too.
const MIN_COST: f64 = 1024.0;

/// A token bucket of bytes.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
    /// Refused since the last admission (the first refusal is logged as a warning).
    refusing: bool,
}

impl Bucket {
    fn full(burst: f64, now: Instant) -> Bucket {
        Bucket { tokens: burst, at: now, refusing: false }
    }

    fn refill(&mut self, rate: f64, burst: f64, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * rate).min(burst);
        self.at = now;
    }
}

/// Why a probe was refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// Which budget, in words.
    pub why: String,
    /// The first refusal of this peer since it was last answered (worth a warning).
    pub first: bool,
}

/// The budgets' state: [`Limiter::admit`] per probe.
#[derive(Debug)]
pub struct Limiter {
    limits: ProbeLimits,
    total: Bucket,
    peers: HashMap<String, Bucket>,
    /// Shared by the peers past `max_peers`.
    overflow: Bucket,
}

impl Limiter {
    /// Full buckets.
    pub fn new(limits: ProbeLimits) -> Limiter {
        let now = Instant::now();
        Limiter {
            limits,
            total: Bucket::full(limits.total_burst_bytes, now),
            peers: HashMap::new(),
            overflow: Bucket::full(limits.peer_burst_bytes, now),
        }
    }

    /// Takes `bytes` of reply from `peer`'s budget and the total, or refuses (taking nothing).
    ///
    /// # Errors
    /// [`Refusal`] naming the budget that is spent.
    pub fn admit(&mut self, peer: &str, bytes: usize, now: Instant) -> Result<(), Refusal> {
        let l = self.limits;
        let cost = (bytes as f64).max(MIN_COST);
        self.total.refill(l.total_bytes_per_s, l.total_burst_bytes, now);
        if !self.peers.contains_key(peer) && self.peers.len() >= l.max_peers {
            // Forget peers whose buckets have refilled: they are as good as new.
            self.peers.retain(|_, b| {
                b.refill(l.peer_bytes_per_s, l.peer_burst_bytes, now);
                b.tokens < l.peer_burst_bytes
            });
        }
        let bucket = if self.peers.contains_key(peer) || self.peers.len() < l.max_peers {
            self.peers.entry(peer.to_string()).or_insert_with(|| Bucket::full(l.peer_burst_bytes, now))
        } else {
            &mut self.overflow
        };
        bucket.refill(l.peer_bytes_per_s, l.peer_burst_bytes, now);
        let why = if bucket.tokens < cost {
            Some(format!("peer '{peer}' is over its {:.0} KiB/s probe budget", l.peer_bytes_per_s / 1024.0))
        } else if self.total.tokens < cost {
            Some(format!("all peers are over the edge's {:.0} KiB/s probe budget", l.total_bytes_per_s / 1024.0))
        } else {
            None
        };
        match why {
            Some(why) => {
                let first = !bucket.refusing;
                bucket.refusing = true;
                Err(Refusal { why, first })
            }
            None => {
                bucket.tokens -= cost;
                bucket.refusing = false;
                self.total.tokens -= cost;
                Ok(())
            }
        }
    }

    /// Peers tracked now.
    pub fn peers(&self) -> usize {
        self.peers.len()
    }
}

/// Probes answered and refused, and bytes sent: read by the edge's metrics.
#[derive(Debug, Default)]
pub struct ProbeCounts {
    answered: AtomicU64,
    limited: AtomicU64,
    bytes: AtomicU64,
}

impl ProbeCounts {
    /// Counts an answered probe of `bytes`.
    pub fn answered(&self, bytes: usize) {
        self.answered.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Counts a refused probe.
    pub fn limited(&self) {
        self.limited.fetch_add(1, Ordering::Relaxed);
    }

    /// (answered, refused, reply bytes sent) so far.
    pub fn snapshot(&self) -> (u64, u64, u64) {
        (self.answered.load(Ordering::Relaxed), self.limited.load(Ordering::Relaxed), self.bytes.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits() -> ProbeLimits {
        ProbeLimits {
            peer_bytes_per_s: 1000.0,
            peer_burst_bytes: 4000.0,
            total_bytes_per_s: 3000.0,
            total_burst_bytes: 6000.0,
            max_peers: 2,
        }
    }

    #[test]
    fn a_peer_past_its_budget_is_refused_until_it_refills_and_others_are_not() {
        let mut l = Limiter::new(limits());
        let t0 = Instant::now();
        assert!(l.admit("a", 4000, t0).is_ok());
        let r = l.admit("a", 1000, t0).expect_err("a's burst is spent");
        assert!(r.first && r.why.contains("'a'"), "{r:?}");
        assert!(!l.admit("a", 1000, t0).expect_err("still spent").first, "only the first refusal is first");
        // Another peer has its own budget (the total still holds 2000).
        assert!(l.admit("b", 2000, t0).is_ok());
        // Two seconds refill 2000 bytes of a's budget, and 6000 of the total.
        assert!(l.admit("a", 1000, t0 + Duration::from_secs(2)).is_ok());
    }

    #[test]
    fn made_up_peers_share_the_total_and_the_overflow_bucket() {
        let mut l = Limiter::new(limits());
        let t0 = Instant::now();
        assert!(l.admit("a", 3000, t0).is_ok());
        assert!(l.admit("b", 3000, t0).is_ok());
        // The total (6000) is spent: a fresh id is refused by it.
        let r = l.admit("c", 1000, t0).expect_err("total spent");
        assert!(r.why.contains("all peers"), "{r:?}");
        // Past max_peers, new ids share one bucket while the tracked peers are busy.
        let mut l = Limiter::new(ProbeLimits { total_burst_bytes: 1e9, ..limits() });
        assert!(l.admit("a", 3500, t0).is_ok() && l.admit("b", 3500, t0).is_ok());
        assert!(l.admit("c", 2500, t0).is_ok());
        assert_eq!(l.peers(), 2);
        assert!(l.admit("d", 2500, t0).expect_err("the overflow bucket is spent by c").why.contains("'d'"));
        // Peers whose buckets have refilled are forgotten to make room.
        assert!(l.admit("e", 2500, t0 + Duration::from_secs(10)).is_ok());
        assert_eq!(l.peers(), 1);
        // An empty probe costs the minimum, not nothing.
        let mut l = Limiter::new(ProbeLimits { peer_burst_bytes: 2.5 * MIN_COST, ..limits() });
        assert!(l.admit("e", 0, t0).is_ok() && l.admit("e", 0, t0).is_ok());
        assert!(l.admit("e", 0, t0).is_err());
    }
}

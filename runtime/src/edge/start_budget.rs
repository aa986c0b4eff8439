//! A session's Start budget: a token bucket of Start frames against floods
//! ([`MAX_STARTS_PER_S`], bursts of [`START_BURST`]), where a Start that replaces an inference
//! that got no band pays [`EMPTY_START_PENALTY`] more.

/// Start frames a session may send per second, sustained (a camera at 30 fps sends 30; the
/// robot infers at most as fast as it computes).
pub const MAX_STARTS_PER_S: f64 = 100.0;

/// Start frames a session may send at once above the sustained rate.
pub const START_BURST: f64 = 20.0;

/// Extra Start tokens a session pays when it starts an inference while its previous one has
/// received no band at all: a Start with nothing to compute holds a replica until it is
/// replaced, so a session that keeps doing so is slowed to a few Starts a second.
pub const EMPTY_START_PENALTY: f64 = 10.0;

/// A token bucket of Start frames: [`MAX_STARTS_PER_S`], bursts of [`START_BURST`].
#[derive(Debug)]
pub(super) struct StartBudget {
    tokens: f64,
    at: tokio::time::Instant,
}

impl StartBudget {
    /// A full bucket (one burst) at `now`.
    pub(super) fn new(now: tokio::time::Instant) -> StartBudget {
        StartBudget { tokens: START_BURST, at: now }
    }

    /// Charges `tokens` more (down to one burst in debt).
    pub(super) fn charge(&mut self, tokens: f64) {
        self.tokens = (self.tokens - tokens).max(-START_BURST);
    }

    /// Takes one Start's token; false when the session is over its rate.
    pub(super) fn take(&mut self, now: tokio::time::Instant) -> bool {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * MAX_STARTS_PER_S;
        self.tokens = (self.tokens + refill).min(START_BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The Start budget: a burst, then the sustained rate; an empty inference costs its penalty,
    /// and the debt is bounded, so a session that stops flooding recovers.
    #[test]
    fn start_budget_is_a_bounded_token_bucket() {
        let t0 = tokio::time::Instant::now();
        let mut b = StartBudget::new(t0);
        let burst = START_BURST as usize;
        assert_eq!((0..burst + 5).filter(|_| b.take(t0)).count(), burst, "a burst, then nothing at the same instant");
        // 100 ms refill: MAX_STARTS_PER_S / 10 tokens (never more than a burst).
        let t1 = t0 + Duration::from_millis(100);
        let refilled = (MAX_STARTS_PER_S / 10.0).min(START_BURST) as usize;
        assert_eq!((0..burst).filter(|_| b.take(t1)).count(), refilled);
        // Charged into debt, bounded by one burst: after a burst's worth of time it is whole.
        for _ in 0..100 {
            b.charge(EMPTY_START_PENALTY);
        }
        assert!(b.tokens >= -START_BURST);
        let t2 = t1 + Duration::from_secs_f64(2.0 * START_BURST / MAX_STARTS_PER_S);
        assert!(b.take(t2), "recovered after the flood stops");
        assert!(b.tokens >= START_BURST - 1.0 - 1e-9, "{}", b.tokens);
    }
}

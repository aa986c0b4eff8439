//! What both ends of the Zenoh link keep about the other one: whether the peer is gone
//! ([`PeerState`], shared by the two halves of one end) and how many of its liveliness tokens
//! are alive ([`TokenCount`]), plus the poison-tolerant [`lock`] every file here uses. A leaf:
//! the halves, the robot's inbox and the edge's callbacks all build on it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use zenoh::sample::SampleKind;

/// Whether the other end of a link is gone, shared by the two halves of one end.
#[derive(Debug, Default)]
pub(super) struct PeerState {
    gone: AtomicBool,
}

impl PeerState {
    pub(super) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    pub(super) fn set_gone(&self) {
        self.gone.store(true, Ordering::Release);
    }
}

/// Locks a mutex that is never held across a panic-prone section, so poisoning is harmless.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Liveliness tokens seen on one key: appearances minus removals, and whether any appeared.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct TokenCount {
    pub(super) alive: u32,
    pub(super) seen: bool,
}

impl TokenCount {
    /// Applies a liveliness sample; true when this removal left no token.
    pub(super) fn apply(&mut self, kind: SampleKind) -> bool {
        match kind {
            SampleKind::Put => {
                self.alive = self.alive.saturating_add(1);
                self.seen = true;
                false
            }
            SampleKind::Delete => {
                self.alive = self.alive.saturating_sub(1);
                self.alive == 0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_count_rule() {
        let mut c = TokenCount::default();
        // A removal before any appearance (edge not there yet) leaves `seen` false: not "gone".
        assert!(c.apply(SampleKind::Delete));
        assert!(!c.seen);
        assert!(!c.apply(SampleKind::Put));
        assert!(!c.apply(SampleKind::Put));
        assert!(!c.apply(SampleKind::Delete)); // one token left
        assert!(c.apply(SampleKind::Delete));
        assert!(c.seen);
    }
}

//! Whose new robot profile an edge plans next, when Hellos with new profiles arrive faster than
//! it builds schedule tables ([`crate::edge::MAX_RECEIVED_BUILDS`] at a time).
//!
//! Without turns, a free build slot goes to whichever new profile's Hello arrives first. A peer
//! that sends a Hello a millisecond with a made-up profile each time then wins every slot, and a
//! legitimate robot, which retries every `retry_interval` (500 ms by default), is refused for as
//! long as the flood lasts. So the edge counts each refused profile's Hellos: a robot that was
//! refused and asks again has waited, a made-up profile sent once has not. A free slot goes to a
//! profile refused at least as often as any other waiting one, so a profile asking for the first
//! time while others wait is refused too, to retry. A robot that arrives during a flood is thus
//! planned at its first retry after a build ends. The waiting list is bounded: at most [`MAX_WAITING`] profiles, those asked for least
//! (then longest ago) forgotten first, and each forgotten [`WAITING_TTL`] after its last ask.
//!
//! A peer that repeats each made-up profile as often as a robot retries competes as an equal;
//! with authentication on, access control confines each peer to its own robot id
//! (docs/security.md), and a received profile costs its robot id's share only
//! ([`crate::received_profiles`]).

use std::time::{Duration, Instant};

/// Refused profiles remembered at once, waiting for a turn (about 120 bytes each): a robot's
/// first refusal is remembered through this many later made-up Hellos, seconds at the rate one
/// peer on a site's Wi-Fi can send them.
pub const MAX_WAITING: usize = 4096;

/// How long a waiting profile is remembered after its last Hello (a robot retries every 500 ms
/// by default; one that has stopped asking has stopped waiting).
pub const WAITING_TTL: Duration = Duration::from_secs(30);

/// One profile waiting for a build slot.
#[derive(Debug)]
struct Waiting {
    hash: String,
    asks: u32,
    last: Instant,
}

/// The waiting list of new profiles refused for want of a build slot.
#[derive(Debug)]
pub struct BuildTurns {
    waiting: Vec<Waiting>,
    cap: usize,
    ttl: Duration,
}

impl Default for BuildTurns {
    fn default() -> Self {
        BuildTurns::new(MAX_WAITING, WAITING_TTL)
    }
}

impl BuildTurns {
    /// An empty list keeping at most `cap` (at least 1) profiles, each for `ttl` after its last ask.
    pub fn new(cap: usize, ttl: Duration) -> Self {
        BuildTurns { waiting: Vec::new(), cap: cap.max(1), ttl }
    }

    /// A Hello asks for a table for profile `hash` at `now`, with a build slot free or not.
    /// Returns true if the profile may be planned now: a slot is free and no other waiting
    /// profile was asked for more often. The profile then leaves the list; otherwise it waits
    /// (its ask counted) and the Hello is to be refused, to retry.
    pub fn ask(&mut self, hash: &str, slot_free: bool, now: Instant) -> bool {
        self.expire(now);
        // Refusals so far: a profile that has waited goes before one asking for the first time,
        // and among those that have waited, the one refused most often goes first.
        let waited = self.waiting.iter().find(|w| w.hash == hash).map_or(0, |w| w.asks);
        let most_of_others = self.waiting.iter().filter(|w| w.hash != hash).map(|w| w.asks).max().unwrap_or(0);
        if slot_free && waited >= most_of_others {
            self.waiting.retain(|w| w.hash != hash);
            return true;
        }
        self.count(hash, now);
        false
    }

    /// Profiles waiting now.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Counts one ask for `hash` (adding it, making room if full) and returns its asks so far.
    fn count(&mut self, hash: &str, now: Instant) -> u32 {
        if let Some(w) = self.waiting.iter_mut().find(|w| w.hash == hash) {
            w.asks = w.asks.saturating_add(1);
            w.last = now;
            return w.asks;
        }
        while self.waiting.len() >= self.cap {
            // The least asked for, then the one asked for longest ago, makes room.
            let Some(i) = (0..self.waiting.len()).min_by_key(|&i| (self.waiting[i].asks, self.waiting[i].last)) else { break };
            self.waiting.swap_remove(i);
        }
        self.waiting.push(Waiting { hash: hash.to_owned(), asks: 1, last: now });
        1
    }

    /// Forgets the profiles not asked for within the TTL.
    fn expire(&mut self, now: Instant) {
        let ttl = self.ttl;
        self.waiting.retain(|w| now.saturating_duration_since(w.last) < ttl);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_slot_goes_to_a_first_hello_when_nobody_waits() {
        let mut t = BuildTurns::default();
        assert!(t.ask("a", true, Instant::now()));
        assert_eq!(t.waiting(), 0);
    }

    #[test]
    fn a_robot_that_retries_wins_the_slot_over_profiles_sent_once() {
        let mut t = BuildTurns::default();
        let t0 = Instant::now();
        // A made-up profile's build runs; the robot is refused and made-up profiles keep coming.
        assert!(!t.ask("robot", false, t0));
        for k in 0..200 {
            assert!(!t.ask(&format!("fake{k}"), false, t0 + Duration::from_millis(k)));
        }
        // The slot frees: newcomers are refused while others wait; the robot's retry is planned.
        for k in 200..300 {
            assert!(!t.ask(&format!("fake{k}"), true, t0 + Duration::from_millis(600)), "fake{k} took the slot");
        }
        assert!(t.ask("robot", true, t0 + Duration::from_millis(1000)));
        assert_eq!(t.waiting(), 300);
        // A later robot, refused once while made-up profiles wait, is planned at its retry.
        assert!(!t.ask("late robot", true, t0 + Duration::from_millis(1100)));
        assert!(t.ask("late robot", true, t0 + Duration::from_millis(1600)));
    }

    #[test]
    fn with_nobody_waiting_the_first_hello_takes_the_slot_again() {
        let mut t = BuildTurns::default();
        let t0 = Instant::now();
        assert!(!t.ask("a", false, t0));
        assert!(t.ask("a", true, t0));
        assert!(t.ask("b", true, t0), "a newcomer was refused with nobody waiting");
    }

    #[test]
    fn the_list_is_bounded_and_keeps_the_most_refused() {
        let mut t = BuildTurns::new(4, WAITING_TTL);
        let t0 = Instant::now();
        t.ask("robot", false, t0);
        t.ask("robot", false, t0);
        for k in 0..100 {
            t.ask(&format!("fake{k}"), false, t0 + Duration::from_millis(k));
        }
        assert_eq!(t.waiting(), 4);
        assert!(!t.ask("fake99", true, t0), "a profile refused once took the slot from one refused twice");
        assert!(t.ask("robot", true, t0));
    }

    #[test]
    fn a_profile_no_longer_asked_for_is_forgotten() {
        let mut t = BuildTurns::new(8, Duration::from_secs(30));
        let t0 = Instant::now();
        t.ask("robot", false, t0);
        assert!(!t.ask("other", true, t0 + Duration::from_secs(29)));
        assert!(t.ask("other", true, t0 + Duration::from_secs(31)), "an expired waiter still held the slot");
    }
}

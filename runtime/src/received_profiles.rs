//! Robot profiles an edge received in Hellos (not those of its configuration): remembered per
//! robot id, bounded per robot and in total, forgotten after an hour unused, and evicted least
//! recently used first when full.
//!
//! So a peer that sends Hellos with made-up profiles never locks another robot out: a new
//! profile always finds a place, taking that of the profile unused longest, and memory for
//! profiles stays bounded. (An edge used to count received profiles forever and refuse every
//! new one past 32: thirty-two made-up profiles refused every new robot until a restart.) What a
//! received profile costs beyond its memory, the table planned for it, is bounded where tables
//! are built ([`crate::edge`]).

use std::time::{Duration, Instant};

use lop::profile::Profile;

/// Profiles received in Hellos that an edge keeps at once, every robot's together.
pub const MAX_RECEIVED_PROFILES: usize = 32;

/// Profiles received from one robot id that an edge keeps at once (a robot sends one per model
/// and device; a second covers a robot re-profiled while its old profile is in use).
pub const MAX_PROFILES_PER_ROBOT: usize = 2;

/// How long a received profile unused by any Hello is kept.
pub const RECEIVED_PROFILE_TTL: Duration = Duration::from_secs(3600);

/// One remembered profile.
#[derive(Debug)]
struct Entry {
    robot: String,
    hash: String,
    profile: Profile,
    last_used: Instant,
}

/// The received profiles, with their caps ([`ReceivedProfiles::new`] takes the edge's).
#[derive(Debug)]
pub struct ReceivedProfiles {
    entries: Vec<Entry>,
    total_cap: usize,
    per_robot_cap: usize,
    ttl: Duration,
    evicted: u64,
}

impl Default for ReceivedProfiles {
    fn default() -> Self {
        ReceivedProfiles::new(MAX_RECEIVED_PROFILES, MAX_PROFILES_PER_ROBOT, RECEIVED_PROFILE_TTL)
    }
}

impl ReceivedProfiles {
    /// An empty store keeping at most `total_cap` profiles, `per_robot_cap` per robot id (each at
    /// least 1), each for `ttl` after its last use.
    pub fn new(total_cap: usize, per_robot_cap: usize, ttl: Duration) -> Self {
        ReceivedProfiles { entries: Vec::new(), total_cap: total_cap.max(1), per_robot_cap: per_robot_cap.max(1), ttl, evicted: 0 }
    }

    /// The profile with content hash `hash`, if kept (and not expired at `now`); marks it used.
    pub fn get(&mut self, hash: &str, now: Instant) -> Option<Profile> {
        self.expire(now);
        let e = self.entries.iter_mut().find(|e| e.hash == hash)?;
        e.last_used = now;
        Some(e.profile.clone())
    }

    /// Keeps `profile`, received from `robot` at `now`: first forgets expired ones, then, to make
    /// room, the robot's own least recently used past [`MAX_PROFILES_PER_ROBOT`], then anyone's
    /// least recently used past [`MAX_RECEIVED_PROFILES`]. Returns the hashes forgotten (their
    /// tables may go too). A profile kept already is only marked used.
    pub fn insert(&mut self, robot: &str, profile: Profile, now: Instant) -> Vec<String> {
        let mut gone = self.expire(now);
        let hash = profile.hash();
        if let Some(e) = self.entries.iter_mut().find(|e| e.hash == hash) {
            e.last_used = now;
            return gone;
        }
        while self.entries.iter().filter(|e| e.robot == robot).count() >= self.per_robot_cap {
            gone.extend(self.evict_oldest(|e| e.robot == robot));
        }
        while self.entries.len() >= self.total_cap {
            gone.extend(self.evict_oldest(|_| true));
        }
        self.entries.push(Entry { robot: robot.to_string(), hash, profile, last_used: now });
        gone
    }

    /// Whether `hash` is kept (expired or not).
    pub fn contains(&self, hash: &str) -> bool {
        self.entries.iter().any(|e| e.hash == hash)
    }

    /// Profiles kept now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Profiles forgotten so far to make room or because they expired.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    fn expire(&mut self, now: Instant) -> Vec<String> {
        let ttl = self.ttl;
        let (old, keep): (Vec<Entry>, Vec<Entry>) =
            std::mem::take(&mut self.entries).into_iter().partition(|e| now.saturating_duration_since(e.last_used) > ttl);
        self.entries = keep;
        self.evicted += old.len() as u64;
        old.into_iter().map(|e| e.hash).collect()
    }

    fn evict_oldest(&mut self, which: impl Fn(&Entry) -> bool) -> Option<String> {
        let i = self.entries.iter().enumerate().filter(|(_, e)| which(e)).min_by_key(|(_, e)| e.last_used).map(|(i, _)| i)?;
        self.evicted += 1;
        Some(self.entries.swap_remove(i).hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lop::profile::synthetic_profile;

    /// Distinct profiles of one small graph: the synthetic robot profile with its first op's
    /// slope nudged by `k` (another content hash each).
    fn profiles(n: usize) -> Vec<Profile> {
        let g = lop::zoo::build("resnet18@32x32").expect("zoo");
        let base = synthetic_profile(&g, lop::plan::Side::Robot).expect("profile");
        (0..n)
            .map(|k| {
                let mut p = base.clone();
                p.ops[0].fit.b_s_per_row += 1e-9 * (k as f64 + 1.0);
                p
            })
            .collect()
    }

    #[test]
    fn a_flood_of_new_profiles_never_refuses_a_robot_and_stays_bounded() {
        let ps = profiles(60);
        let mut store = ReceivedProfiles::default();
        let t0 = Instant::now();
        let victim = ps[0].clone();
        store.insert("victim", victim.clone(), t0);
        // Fifty made-up robots, one profile each, after the victim's.
        for (k, p) in ps[1..51].iter().enumerate() {
            store.insert(&format!("fake{k}"), p.clone(), t0 + Duration::from_millis(k as u64 + 1));
            assert!(store.len() <= MAX_RECEIVED_PROFILES);
        }
        assert_eq!(store.len(), MAX_RECEIVED_PROFILES);
        // The victim's, unused longest, made room; sent again it is kept again, at once.
        assert!(!store.contains(&victim.hash()));
        let later = t0 + Duration::from_secs(1);
        let gone = store.insert("victim", victim.clone(), later);
        assert_eq!(gone.len(), 1, "one fake made room: {gone:?}");
        assert_eq!(store.get(&victim.hash(), later).map(|p| p.hash()), Some(victim.hash()));
        assert_eq!(store.evicted(), 50 + 1 - MAX_RECEIVED_PROFILES as u64 + 1);
    }

    #[test]
    fn one_robot_keeps_at_most_its_share_and_unused_profiles_expire() {
        let ps = profiles(5);
        let mut store = ReceivedProfiles::new(8, 2, Duration::from_secs(60));
        let t0 = Instant::now();
        store.insert("other", ps[4].clone(), t0);
        for (k, p) in ps[..4].iter().enumerate() {
            store.insert("greedy", p.clone(), t0 + Duration::from_secs(k as u64));
        }
        // The greedy robot kept its two newest; the other robot's stayed.
        assert_eq!(store.len(), 3);
        assert!(store.contains(&ps[2].hash()) && store.contains(&ps[3].hash()) && store.contains(&ps[4].hash()));
        // Used, a profile lives on; unused past the TTL, it goes.
        assert!(store.get(&ps[4].hash(), t0 + Duration::from_secs(50)).is_some());
        assert!(store.get(&ps[2].hash(), t0 + Duration::from_secs(70)).is_none(), "expired");
        assert!(!store.contains(&ps[3].hash()), "unused for 67 s: expired with it");
        assert!(store.get(&ps[4].hash(), t0 + Duration::from_secs(100)).is_some(), "used at 50 s");
        assert_eq!((store.len(), store.evicted()), (1, 4));
    }
}

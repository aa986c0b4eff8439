//! Robot profiles, which a robot's schedule table is planned from: configured, found in the
//! profiles folder, or received in a Hello (checked as data, never code, and kept bounded by
//! [`ReceivedProfiles`](crate::received_profiles::ReceivedProfiles)); and whether a new
//! profile's table may be planned now ([`BuildTurns`](crate::build_turns::BuildTurns)).

use std::time::Instant;

use lop::plan::Side;
use lop::profile::Profile;
use lop_msgs::protocol::Hello;

use super::state::{BookSlot, Inner};

/// Schedule tables being built (any profile's) past which a Hello with a new robot profile is
/// refused as `Planning`, to retry: each table is planned on the model's first replica, so a
/// flood of made-up profiles would otherwise queue plannings ahead of every inference there.
pub const MAX_RECEIVED_BUILDS: usize = 1;

/// The robot profile a Hello carries, checked as data: JSON of a profile (never code) whose own
/// contents are sane, of a robot, of this model, with the hash the Hello names. Whether every
/// op of the model has an entry is checked when the table is built.
pub(super) fn received_profile(h: &Hello, model_hash: &str) -> std::result::Result<Profile, String> {
    let p: Profile = serde_json::from_slice(&h.robot_profile).map_err(|e| format!("not a profile: {e}"))?;
    p.check().map_err(|e| e.to_string())?;
    if p.role != Side::Robot {
        return Err(format!("a {:?} profile, not a robot's", p.role));
    }
    if p.model_hash != model_hash {
        return Err(format!("a profile of model {} ({}), not of this model ({model_hash})", p.model, p.model_hash));
    }
    let (named, got) = (h.robot_profile_hash.to_hex(), p.hash());
    if named != got {
        return Err(format!("its content hash is {got}, the Hello names {named}"));
    }
    Ok(p)
}

impl Inner {
    /// The robot profile with content hash `hash`: configured, received in a Hello and kept, or
    /// found in the profiles folder (then kept with the configured ones); `None` when none is.
    pub(super) fn robot_profile(&self, hash: &str) -> Option<Profile> {
        let cached = self.robot_profiles.lock().ok()?.iter().find(|p| p.hash() == hash).cloned();
        if cached.is_some() {
            return cached;
        }
        let received = self.received.lock().ok()?.get(hash, Instant::now());
        if received.is_some() {
            return received;
        }
        let dir = self.opts.profiles_dir.as_ref()?;
        for e in std::fs::read_dir(dir).ok()?.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "json")
                && let Ok(p) = Profile::load(&path)
                && p.role == Side::Robot
                && p.hash() == hash
            {
                if let Ok(mut v) = self.robot_profiles.lock() {
                    v.push(p.clone());
                }
                return Some(p);
            }
        }
        None
    }

    /// Keeps a robot profile received in a Hello from `robot` (in memory, bounded; the table
    /// cache keeps its tables across restarts, and the robot sends it again), and drops the
    /// plan books of the profiles it made room for.
    pub(super) fn remember_profile(&self, robot: &str, p: Profile) {
        let gone = self.received.lock().map(|mut r| r.insert(robot, p, Instant::now())).unwrap_or_default();
        if gone.is_empty() {
            return;
        }
        tracing::info!(profiles = gone.len(), "received robot profiles forgotten (unused longest, or unused for an hour)");
        let mut books = self.books.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        books.retain(|(_, hash, _), slot| !(gone.contains(hash) && matches!(slot, BookSlot::Ready(_))));
    }

    /// Whether a robot profile is still one this edge plans for: configured, found in its
    /// profiles folder, or received and not forgotten.
    pub(super) fn knows_profile(&self, hash: &str) -> bool {
        self.robot_profiles.lock().is_ok_and(|v| v.iter().any(|p| p.hash() == hash)) || self.received.lock().is_ok_and(|r| r.contains(hash))
    }

    /// Whether a Hello with the new robot profile `hash` may have its table planned now: a build
    /// slot is free and no other refused profile has waited longer
    /// ([`BuildTurns`](crate::build_turns::BuildTurns)).
    pub(super) fn build_turn(&self, hash: &str) -> bool {
        let slot_free = self.builds_in_progress() < MAX_RECEIVED_BUILDS;
        let mut turns = self.turns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        turns.ask(hash, slot_free, Instant::now())
    }
}

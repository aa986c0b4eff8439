//! What both ends of a session share: counters of dropped frames, and turning received bytes
//! into either a control frame or a band matched to the plan in force.

use std::sync::atomic::{AtomicU64, Ordering};

use lop_msgs::Frame;
use lop_msgs::protocol::{FrameKind, Limits};

use crate::exec::ReceivedBand;
use crate::plans::Prepared;

/// Counts of frames dropped, by reason. Nothing dropped ever stops a session.
#[derive(Debug, Default)]
pub struct FrameStats {
    malformed: AtomicU64,
    oversized: AtomicU64,
    stale: AtomicU64,
    duplicate: AtomicU64,
    out_of_plan: AtomicU64,
    unexpected: AtomicU64,
}

/// A snapshot of [`FrameStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FrameCounts {
    /// Bytes that do not decode as a frame (bad magic, truncated, bad fields).
    pub malformed: u64,
    /// Frames whose header announces more than the limit.
    pub oversized: u64,
    /// Bands or control frames of an inference that is over or not the current one.
    pub stale: u64,
    /// Bands received twice.
    pub duplicate: u64,
    /// Bands the plan in force does not send (unknown tensor, rows, dtype or shape).
    pub out_of_plan: u64,
    /// Frames of a kind this end never receives, or out of order (e.g. Start before Hello).
    pub unexpected: u64,
}

impl FrameCounts {
    /// All dropped frames.
    pub fn total(&self) -> u64 {
        self.malformed + self.oversized + self.stale + self.duplicate + self.out_of_plan + self.unexpected
    }
}

/// Why a frame was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drop {
    /// See [`FrameCounts::malformed`].
    Malformed,
    /// See [`FrameCounts::oversized`].
    Oversized,
    /// See [`FrameCounts::stale`].
    Stale,
    /// See [`FrameCounts::duplicate`].
    Duplicate,
    /// See [`FrameCounts::out_of_plan`].
    OutOfPlan,
    /// See [`FrameCounts::unexpected`].
    Unexpected,
}

impl FrameStats {
    /// Counts one dropped frame.
    pub fn count(&self, why: Drop) {
        let c = match why {
            Drop::Malformed => &self.malformed,
            Drop::Oversized => &self.oversized,
            Drop::Stale => &self.stale,
            Drop::Duplicate => &self.duplicate,
            Drop::OutOfPlan => &self.out_of_plan,
            Drop::Unexpected => &self.unexpected,
        };
        c.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(?why, "dropped a frame");
    }

    /// The counts so far.
    pub fn snapshot(&self) -> FrameCounts {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        FrameCounts {
            malformed: l(&self.malformed),
            oversized: l(&self.oversized),
            stale: l(&self.stale),
            duplicate: l(&self.duplicate),
            out_of_plan: l(&self.out_of_plan),
            unexpected: l(&self.unexpected),
        }
    }
}

/// Received bytes, classified.
#[derive(Debug)]
pub enum Inbound {
    /// A decoded control frame.
    Control(Frame),
    /// A band: its inference id, and the raw frame (matched later against the plan in force).
    Band(u64, Vec<u8>),
}

/// Classifies received bytes: control frames are decoded whole, bands only by header (their
/// payload is not copied). Undecodable bytes are counted and `None`.
pub fn classify(limits: &Limits, bytes: Vec<u8>, stats: &FrameStats) -> Option<Inbound> {
    let header = match limits.header(&bytes) {
        Ok(h) => h,
        Err(lop_msgs::Error::TooLarge { .. }) => {
            stats.count(Drop::Oversized);
            return None;
        }
        Err(_) => {
            stats.count(Drop::Malformed);
            return None;
        }
    };
    if header.kind == FrameKind::Band {
        return match limits.decode_band(&bytes) {
            Ok((h, _)) => Some(Inbound::Band(h.inference_id, bytes)),
            Err(_) => {
                stats.count(Drop::Malformed);
                None
            }
        };
    }
    match limits.decode(&bytes) {
        Ok(f) => Some(Inbound::Control(f)),
        Err(_) => {
            stats.count(Drop::Malformed);
            None
        }
    }
}

/// Matches a band frame (already known to decode) to a transfer of `plan` towards the side
/// that receives in direction `up`, checking its dtype and shape; `received` marks the
/// transfers already taken (duplicates are dropped). Counts and returns `None` otherwise.
pub fn match_band(
    limits: &Limits,
    plan: &Prepared,
    up: bool,
    frame: Vec<u8>,
    received: &mut [bool],
    stats: &FrameStats,
) -> Option<ReceivedBand> {
    let Ok((h, payload)) = limits.decode_band(&frame) else {
        stats.count(Drop::Malformed);
        return None;
    };
    let Some(e) = plan.expect.get(&(up, h.tensor_id, h.row_start, h.row_end)) else {
        stats.count(Drop::OutOfPlan);
        return None;
    };
    if e.dtype != h.dtype || e.shape != h.shape || !e.accepts(h.coding) {
        stats.count(Drop::OutOfPlan);
        return None;
    }
    let ti = e.transfer as usize;
    if received.get(ti).copied().unwrap_or(true) {
        stats.count(Drop::Duplicate);
        return None;
    }
    received[ti] = true;
    let start = frame.len() - payload.len();
    let end = frame.len();
    Some(ReceivedBand { transfer: e.transfer, payload: start..end, dtype: h.dtype, shape: h.shape, coding: h.coding, frame })
}

//! The report of each inference the edge served ([`Served`]: who, which replica and device,
//! its times and bytes, how it ended), broadcast as each ends to whoever listens (the edge
//! server's metrics and energy accounting).

use std::time::{Duration, Instant};

/// How a served inference ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServedOutcome {
    /// The server finished its part and sent Done.
    Done,
    /// The deadline passed before the server finished its part.
    DeadlineExceeded,
    /// Aborted (a newer inference, the session ended, the link broke), with the reason.
    Aborted(String),
    /// The engine or the replica failed, with the error.
    Failed(String),
}

impl ServedOutcome {
    /// `done`, `deadline`, `aborted` or `failed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ServedOutcome::Done => "done",
            ServedOutcome::DeadlineExceeded => "deadline",
            ServedOutcome::Aborted(_) => "aborted",
            ServedOutcome::Failed(_) => "failed",
        }
    }
}

/// One inference the edge served (its server part), as reported by
/// [`EdgeService::served`](super::EdgeService::served).
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    /// The robot's inference id.
    pub inference_id: u64,
    /// The robot (its Hello's robot id).
    pub robot_id: String,
    /// The model's id.
    pub model_id: String,
    /// Which warm replica of the model ran it.
    pub replica: usize,
    /// When the server part was queued on the replica (monotonic clock).
    pub start: Instant,
    /// When it ended.
    pub end: Instant,
    /// `start` on the wall clock.
    pub start_wall: std::time::SystemTime,
    /// Seconds the server spent computing chunks (0 when it failed before reporting).
    pub server_compute_s: f64,
    /// Bytes of bands the server received for it.
    pub bytes_received: u64,
    /// Bytes of bands the server sent for it.
    pub bytes_sent: u64,
    /// Seconds from its Start's arrival to its last band's, as the edge saw the upload (0
    /// before any band).
    pub upload_s: f64,
    /// Seconds it was on the edge but neither computing nor waiting for bands: its wait for
    /// the replica (queue) and the edge's own overhead.
    pub queue_s: f64,
    /// Inferences computed together in the batch it ran in (1: alone; 0: it never ran).
    pub batch: u32,
    /// Seconds from its first result band out to its end: its download as the edge sees it
    /// (0 when it sent none).
    pub download_s: f64,
    /// The device it ran on (its name in [`EdgeOptions::devices`](super::EdgeOptions::devices); empty when it never ran).
    pub device: String,
    /// How it ended.
    pub outcome: ServedOutcome,
}

impl Served {
    /// `end - start`.
    pub fn duration(&self) -> Duration {
        self.end.saturating_duration_since(self.start)
    }
}

/// Capacity of the [`EdgeService::served`](super::EdgeService::served) channel: a receiver that
/// falls further behind loses the oldest reports (and is told how many).
pub const SERVED_CHANNEL_CAPACITY: usize = 1024;

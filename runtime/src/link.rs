//! The link abstraction: two halves that move encoded `lop_msgs` frames as bytes.
//!
//! A link carries whole messages (one encoded [`Frame`] each), in order per priority. There are
//! two priorities ([`Priority`]): control frames (Hello, Welcome, Reject, Start, Done, Error) never
//! wait behind bulk Band frames. A control frame is transmitted before every queued band that has
//! not started transmitting; a band already on the wire is not interrupted. Senders do not choose
//! the priority: it follows from the frame kind in the bytes ([`Priority::of_frame_bytes`]), so a
//! caller cannot get it wrong. Bytes that are not a frame (garbage in bad-input tests) go as bulk.
//!
//! The traits use `impl Future` returns (Rust 2024) rather than `async-trait`, so implementations
//! are concrete types and the futures are `Send` without boxing. Receiving follows mini-redis:
//! `Ok(None)` is a clean close by the peer, `Err` is a broken link.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use lop_msgs::protocol::{FRAME_MAGIC, HEADER_LEN};
use lop_msgs::{Frame, FrameKind};

use crate::error::Result;

/// Transmission priority of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Priority {
    /// Session and per-inference control frames: go ahead of queued bulk.
    Control,
    /// Band frames (and anything not recognised as a control frame).
    Bulk,
}

impl Priority {
    /// The priority of a frame kind: [`FrameKind::Band`] (and any kind added later) is bulk.
    pub fn of_kind(kind: FrameKind) -> Priority {
        match kind {
            FrameKind::Hello
            | FrameKind::Welcome
            | FrameKind::Reject
            | FrameKind::Start
            | FrameKind::Done
            | FrameKind::Error
            | FrameKind::Cancel => Priority::Control,
            _ => Priority::Bulk,
        }
    }

    /// The priority of encoded frame bytes, from the magic and the kind byte of the header only;
    /// bytes that do not start like a frame are [`Priority::Bulk`].
    pub fn of_frame_bytes(bytes: &[u8]) -> Priority {
        if bytes.len() < HEADER_LEN || bytes[..4] != FRAME_MAGIC {
            return Priority::Bulk;
        }
        FrameKind::from_u8(bytes[6]).map_or(Priority::Bulk, Priority::of_kind)
    }
}

/// A snapshot of one direction's traffic as seen by one half: messages and bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Traffic {
    /// Whole messages.
    pub messages: u64,
    /// Bytes of those messages (whole frames, headers included).
    pub bytes: u64,
}

/// Thread-safe traffic counters behind [`Traffic`] snapshots, for link implementations.
#[derive(Debug, Default)]
pub struct Counters {
    messages: AtomicU64,
    bytes: AtomicU64,
}

impl Counters {
    /// Counts one message of `bytes` bytes.
    pub fn add(&self, bytes: usize) {
        // Relaxed: the counters are statistics, read as a snapshot, and order nothing else.
        self.messages.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn snapshot(&self) -> Traffic {
        Traffic { messages: self.messages.load(Ordering::Relaxed), bytes: self.bytes.load(Ordering::Relaxed) }
    }
}

/// The sending half of a link.
pub trait LinkTx: Send + Sync {
    /// Queues one encoded frame; its priority follows from its kind
    /// ([`Priority::of_frame_bytes`]). Returns once the link has accepted the message, not when it
    /// is delivered.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`](crate::Error::Closed) if the peer's receiving half is gone.
    fn send(&self, bytes: Vec<u8>) -> impl Future<Output = Result<()>> + Send;

    /// Messages and bytes accepted by [`send`](LinkTx::send) so far.
    fn sent(&self) -> Traffic;

    /// Encodes `frame` and sends it.
    ///
    /// # Errors
    ///
    /// [`Error::Frame`](crate::Error::Frame) if the frame does not encode, else as
    /// [`send`](LinkTx::send).
    fn send_frame(&self, frame: &Frame) -> impl Future<Output = Result<()>> + Send {
        // Encode before the future so that it does not borrow `frame`.
        let bytes = frame.encode();
        async move { self.send(bytes?).await }
    }
}

/// The receiving half of a link.
pub trait LinkRx: Send {
    /// The next message: `Ok(Some(bytes))`, or `Ok(None)` once the peer has closed its sending half
    /// and everything it sent before closing has been delivered. Cancel-safe: a message is never
    /// lost when the future is dropped (e.g. in `select!`).
    ///
    /// # Errors
    ///
    /// A broken link (implementation-specific; the in-process link has none).
    fn recv(&mut self) -> impl Future<Output = Result<Option<Vec<u8>>>> + Send;

    /// Messages and bytes delivered by [`recv`](LinkRx::recv) so far.
    fn received(&self) -> Traffic;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use lop_msgs::Digest;
    use lop_msgs::protocol::{Band, BandHeader, DType, Start};

    use super::*;

    #[test]
    fn priority_follows_the_frame_kind() {
        let start = Frame::Start(Start {
            inference_id: 1,
            bucket: 0,
            plan_hash: Digest([0; 32]),
            input_stamp_ns: 0,
            deadline_ns: 1,
            due_ns: 0,
            path: Vec::new(),
        });
        let header = BandHeader {
            inference_id: 1,
            tensor_id: 3,
            row_start: 0,
            row_end: 1,
            row_axis: 0,
            dtype: DType::U8,
            shape: vec![1, 2],
            coding: Default::default(),
        };
        let band = Frame::Band(Band { header, payload: vec![0, 0] });
        assert_eq!(Priority::of_frame_bytes(&start.encode().unwrap()), Priority::Control);
        assert_eq!(Priority::of_frame_bytes(&band.encode().unwrap()), Priority::Bulk);
        assert_eq!(Priority::of_frame_bytes(b"garbage that is long"), Priority::Bulk);
        assert_eq!(Priority::of_frame_bytes(b"LOPF"), Priority::Bulk);
        for kind in [FrameKind::Hello, FrameKind::Welcome, FrameKind::Reject, FrameKind::Done, FrameKind::Error, FrameKind::Cancel] {
            assert_eq!(Priority::of_kind(kind), Priority::Control);
        }
    }

    /// The simulator prices every band message with the header bytes this encoding adds.
    #[test]
    fn band_headers_cost_what_the_simulator_prices() {
        for shape in [vec![1, 3, 2, 224], vec![1, 1, 2, 32, 256], vec![1, 5, 2]] {
            let payload = vec![0u8; shape.iter().product::<u32>() as usize];
            let header = BandHeader {
                inference_id: 7,
                tensor_id: 1,
                row_start: 0,
                row_end: 2,
                row_axis: 2,
                dtype: DType::U8,
                shape: shape.clone(),
                coding: Default::default(),
            };
            let encoded = Frame::Band(Band { header, payload: payload.clone() }).encode().expect("band");
            assert_eq!(encoded.len(), payload.len() + lop::sim::band_header_bytes(shape.len()), "shape {shape:?}");
        }
    }

    #[test]
    fn counters_count() {
        let c = Counters::default();
        c.add(10);
        c.add(5);
        assert_eq!(c.snapshot(), Traffic { messages: 2, bytes: 15 });
    }
}

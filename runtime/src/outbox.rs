//! An edge session's way out (issue 56): every frame to one robot goes through a channel to the
//! session's writer task, which hands it to the link. The link's sending half holds what it has
//! not yet put on the wire within byte budgets (`zenoh_link::admission`: per session and for all
//! sessions); a band past them is refused. The writer then gives up the inference that band
//! belongs to, as a whole: its later bands are dropped, its replica stops at its next band (the
//! [`Outbox::send_band`] of its worker says the link is gone), and its robot is answered with
//! an `Overloaded` error instead of Done, so that it finishes the frame alone at once, marked as
//! a fallback. Control frames always pass. Each inference given up is counted once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lop_msgs::protocol::{ErrorCode, ErrorFrame, HEADER_LEN};
use lop_msgs::{Frame, FrameKind};
use tokio::sync::mpsc as tmpsc;

use crate::error::Error;
use crate::link::LinkTx;

/// The sending end of one session's frames, cloned into its jobs and replicas.
#[derive(Debug, Clone)]
pub(crate) struct Outbox {
    frames: tmpsc::UnboundedSender<Vec<u8>>,
    /// One more than the id of the inference last given up (0: none yet).
    given_up: Arc<AtomicU64>,
}

impl Outbox {
    /// A session's outbox, and the receiver its writer ([`write_session`]) drains.
    pub(crate) fn new() -> (Outbox, tmpsc::UnboundedReceiver<Vec<u8>>) {
        let (frames, rx) = tmpsc::unbounded_channel();
        (Outbox { frames, given_up: Arc::default() }, rx)
    }

    /// Queues a frame; false once the writer is gone.
    pub(crate) fn send(&self, bytes: Vec<u8>) -> bool {
        self.frames.send(bytes).is_ok()
    }

    /// Queues a band of inference `id`; false once the writer is gone or the link refused a band
    /// of that inference (the replica then stops it).
    pub(crate) fn send_band(&self, id: u64, bytes: Vec<u8>) -> bool {
        !self.gave_up(id) && self.send(bytes)
    }

    fn gave_up(&self, id: u64) -> bool {
        gave_up(&self.given_up, id)
    }

    /// The flag its writer sets when it gives an inference up.
    pub(crate) fn given_up(&self) -> Arc<AtomicU64> {
        self.given_up.clone()
    }
}

fn gave_up(flag: &AtomicU64, id: u64) -> bool {
    flag.load(Ordering::Relaxed) == id.wrapping_add(1)
}

/// The frame's kind and inference id, for the kinds that carry one first in their body.
fn inference_of(bytes: &[u8]) -> Option<(FrameKind, u64)> {
    let kind = FrameKind::from_u8(*bytes.get(6)?)?;
    let id = u64::from_le_bytes(bytes.get(HEADER_LEN..HEADER_LEN + 8)?.try_into().ok()?);
    matches!(kind, FrameKind::Band | FrameKind::Done).then_some((kind, id))
}

/// Hands an outbox's `frames` to `tx` in order until every [`Outbox`] is dropped or the link
/// breaks; a band the link refuses for its queue gives up its inference (module docs), marked in
/// `given_up` (the outbox's [`Outbox::given_up`]) and counted in `refused`.
pub(crate) async fn write_session<T: LinkTx>(
    tx: T,
    mut frames: tmpsc::UnboundedReceiver<Vec<u8>>,
    given_up: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
) {
    while let Some(mut bytes) = frames.recv().await {
        let of = inference_of(&bytes);
        match of {
            Some((FrameKind::Band, id)) if gave_up(&given_up, id) => continue,
            Some((FrameKind::Done, id)) if gave_up(&given_up, id) => {
                let text = "a result band did not fit this robot's send queue: the edge gave the inference up".into();
                match Frame::Error(ErrorFrame { inference_id: id, code: ErrorCode::Overloaded, text }).encode() {
                    Ok(b) => bytes = b,
                    Err(_) => continue,
                }
            }
            _ => {}
        }
        match tx.send(bytes).await {
            Ok(()) => {}
            Err(Error::QueueFull(why)) => {
                if let Some((_, id)) = of {
                    given_up.store(id.wrapping_add(1), Ordering::Relaxed);
                    refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(inference = id, "giving the inference up: {why}");
                }
            }
            Err(_) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::link::Traffic;
    use lop_msgs::protocol::{Band, BandHeader, DType, Done, DoneStats, decode};
    use std::sync::Mutex;

    /// A link that takes every frame but refuses, as a full queue does, the `refuse`-th band
    /// it is handed (counting from 0).
    struct Full {
        taken: Arc<Mutex<Vec<Vec<u8>>>>,
        bands_seen: Mutex<usize>,
        refuse: usize,
    }

    impl LinkTx for Full {
        async fn send(&self, bytes: Vec<u8>) -> crate::error::Result<()> {
            if inference_of(&bytes).is_some_and(|(k, _)| k == FrameKind::Band) {
                let mut seen = self.bands_seen.lock().unwrap();
                *seen += 1;
                if *seen - 1 == self.refuse {
                    return Err(Error::QueueFull("test: full".into()));
                }
            }
            self.taken.lock().unwrap().push(bytes);
            Ok(())
        }

        fn sent(&self) -> Traffic {
            Traffic::default()
        }
    }

    fn band(id: u64, row: u32) -> Vec<u8> {
        let header = BandHeader {
            inference_id: id,
            tensor_id: 1,
            row_start: row,
            row_end: row + 1,
            row_axis: 0,
            dtype: DType::U8,
            shape: vec![1, 4],
            coding: Default::default(),
        };
        Frame::Band(Band { header, payload: vec![7; 4] }).encode().unwrap()
    }

    fn done(id: u64) -> Vec<u8> {
        Frame::Done(Done { inference_id: id, stats: DoneStats::default() }).encode().unwrap()
    }

    /// A band refused for the queue gives its whole inference up: its other bands are dropped,
    /// its replica is told to stop, its Done becomes an `Overloaded` error, and it is counted
    /// once; the next inference goes through whole.
    #[tokio::test]
    async fn a_refused_band_gives_up_its_whole_inference() {
        let taken = Arc::new(Mutex::new(Vec::new()));
        let link = Full { taken: taken.clone(), bands_seen: Mutex::new(0), refuse: 1 };
        let (outbox, rx) = Outbox::new();
        let refused = Arc::new(AtomicU64::new(0));
        let writer = tokio::spawn(write_session(link, rx, outbox.given_up(), refused.clone()));
        assert!(outbox.send_band(5, band(5, 0)));
        assert!(outbox.send_band(5, band(5, 1)), "queued before the writer saw the refusal");
        // Wait until the writer has handed both over.
        let t0 = std::time::Instant::now();
        while !outbox.gave_up(5) {
            assert!(t0.elapsed() < std::time::Duration::from_secs(10), "the refusal was not seen");
            tokio::task::yield_now().await;
        }
        assert!(!outbox.send_band(5, band(5, 2)), "the replica is told to stop");
        assert!(outbox.send(band(5, 3)), "a band queued by other means is dropped by the writer");
        assert!(outbox.send(done(5)));
        assert!(outbox.send_band(6, band(6, 0)));
        assert!(outbox.send(done(6)));
        drop(outbox);
        writer.await.unwrap();
        let frames: Vec<Frame> = taken.lock().unwrap().iter().map(|b| decode(b).unwrap()).collect();
        assert_eq!(frames.len(), 4, "{frames:?}");
        assert!(matches!(&frames[0], Frame::Band(b) if b.header.inference_id == 5 && b.header.row_start == 0));
        assert!(matches!(&frames[1], Frame::Error(e) if e.inference_id == 5 && e.code == ErrorCode::Overloaded), "{:?}", frames[1]);
        assert!(matches!(&frames[2], Frame::Band(b) if b.header.inference_id == 6));
        assert!(matches!(&frames[3], Frame::Done(d) if d.inference_id == 6));
        assert_eq!(refused.load(Ordering::Relaxed), 1);
    }
}

//! The frame loop ([`Frames`], one for each input): takes the mailbox's frame, converts it, picks its bucket, runs
//! its inference over the edges and hands what is answered to the outlet (with lanes, in frame
//! order).

use std::collections::HashMap;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Instant;

use lop_runtime::bandwidth::BucketSelector;
use lop_runtime::client::Inference;
use tokio::sync::watch;

use super::conversion::to_tensor;
use super::edges::{Answered, Edges};
use super::frame::{Converted, Frame, FrameMeta, Kept};
use super::outlet::Outlet;
use super::shared::Shared;
use super::target::Target;
use crate::config::{RobotConfig, Sensor};
use crate::lifecycle::Pending;
use crate::results::Source;

/// Where the node's task takes the lifecycle transitions begun for it.
pub(super) type Requests = tokio::sync::mpsc::UnboundedReceiver<Pending>;

/// What the frame loops are told: go on, end after answering the frames in flight (a
/// lifecycle transition), or end now (the node stops).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    Running,
    Drain,
    Stop,
}

/// One input's frame loop: its edges, the bucket in force, the method, and (with lanes) the frames in
/// flight.
pub(super) struct Frames<'a> {
    cfg: &'a RobotConfig,
    shared: &'a Shared,
    out: &'a Outlet<'a>,
    /// The input (camera) whose frames these are.
    sensor: &'a Sensor,
    client: Edges,
    target: Target,
    /// The model's input shape.
    shape: Vec<i64>,
    selector: BucketSelector,
    /// The hash of the table whose buckets the selector has.
    table_hash: String,
    method: String,
    /// The last frame's number.
    seq: u64,
    /// Frames in flight on the stream's lanes (fleet mode with edge.lanes > 1), by number.
    waiting: HashMap<u64, FrameMeta>,
}

impl<'a> Frames<'a> {
    /// The loop of `sensor`'s frames over `client`'s edges, `selector` at the buckets of their
    /// table; no frame yet.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        cfg: &'a RobotConfig,
        shared: &'a Shared,
        out: &'a Outlet<'a>,
        sensor: &'a Sensor,
        client: Edges,
        target: Target,
        shape: Vec<i64>,
        selector: BucketSelector,
    ) -> Frames<'a> {
        let table_hash = client.table_hash();
        Frames {
            cfg,
            shared,
            out,
            sensor,
            client,
            target,
            shape,
            selector,
            table_hash,
            method: cfg.method.clone(),
            seq: 0,
            waiting: HashMap::new(),
        }
    }

    /// Answers this input's frames until `end` says otherwise: takes the mailbox's frame when a
    /// lane is free, and (with lanes) publishes the frames released meanwhile. `end` is looked
    /// at only between frames, so the frame being answered is answered first; with
    /// [`End::Drain`] (a lifecycle transition) frames still in flight on lanes are answered
    /// before returning.
    pub(super) async fn answer(&mut self, mut end: watch::Receiver<End>) {
        let last = loop {
            let now = *end.borrow_and_update();
            if now != End::Running {
                break now;
            }
            // With every lane busy the next frame waits in the mailbox (replaced by a newer one).
            let (lane_free, in_flight) = (self.client.lane_free(), self.client.in_flight());
            let frame = tokio::select! {
                changed = end.changed() => match changed {
                    Ok(()) => continue,
                    Err(_) => break End::Stop,
                },
                f = self.shared.mailbox.take(), if lane_free => f,
                done = self.client.next_done(&self.shared.counters), if in_flight > 0 => {
                    self.publish_released(done).await;
                    continue;
                }
            };
            self.step(frame).await;
        };
        while last == End::Drain && self.client.in_flight() > 0 {
            let done = self.client.next_done(&self.shared.counters).await;
            self.publish_released(done).await;
        }
    }

    /// One frame: skipped when `enabled` went false while it waited; else (the method
    /// following the parameter) converted, inferred and published.
    async fn step(&mut self, frame: Frame) {
        let live = &self.shared.live;
        if !live.enabled() {
            // Waiting when `enabled` went false.
            self.shared.counters.skipped_disabled.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if live.method() != self.method {
            self.method = live.method().to_string();
            self.client.set_method(&self.method);
        }
        let Some((input, meta)) = self.convert(frame).await else { return };
        self.infer(input, meta).await;
    }

    /// Converts the frame to the model's input on the blocking pool and picks its bucket from
    /// the latest bandwidth; `None` when it does not convert (counted, logged).
    async fn convert(&mut self, frame: Frame) -> Option<(Converted, FrameMeta)> {
        let counters = &self.shared.counters;
        let started = std::time::SystemTime::now();
        let (received, mut header, kind) = match &frame {
            Frame::Image(m, t) => (*t, m.header.clone(), 0u8),
            Frame::Compressed(m, t) => (*t, m.header.clone(), 0u8),
            Frame::Cloud(c, t) => (*t, c.header.clone(), 1u8),
        };
        // Every result and message of a camera names it.
        header.frame_id = self.sensor.frame_id_for(&header.frame_id);
        let mut source = match (&frame, &self.target) {
            (Frame::Image(m, _), Target::Image(t) | Target::Camera { model: t, .. }) => {
                Source::Frame { width: m.width, height: m.height, target: *t }
            }
            (Frame::Cloud(..), Target::Voxels(g)) => Source::Voxels(g.clone()),
            _ => Source::Other,
        };
        let (tgt, shp) = (self.target.clone(), self.shape.clone());
        let passthrough = self.cfg.table.frame_codec == lop::codec::FrameCodec::Passthrough;
        let max_pixels = match &self.target {
            Target::Image(t) | Target::Camera { frame: t, .. } => self.cfg.image.max_pixels_for(t.width, t.height),
            _ => lop::codec::photo::MAX_PIXELS,
        };
        // The frame outlives its conversion only when its debug image is wanted.
        let keep = self.out.debug_wanted();
        let t_convert = Instant::now();
        let converted = tokio::task::spawn_blocking(move || {
            let input = to_tensor(&frame, &tgt, &shp, passthrough, max_pixels);
            (input, keep.then_some(Kept { frame, max_pixels }))
        })
        .await;
        let (input, debug) = match converted {
            Ok((Ok(t), kept)) => (t, kept),
            Ok((Err(e), _)) => {
                counters.bad_input.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, camera = %self.sensor.name, stamp = ?header.stamp, frame = %header.frame_id, "bad input frame dropped");
                return None;
            }
            Err(e) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "conversion task failed");
                return None;
            }
        };
        let convert_s = t_convert.elapsed().as_secs_f64();
        if let (Some((width, height)), Target::Image(t) | Target::Camera { model: t, .. }) = (input.size, &self.target) {
            source = Source::Frame { width, height, target: *t };
        }
        let mbps = self.shared.latest_mbps.lock().unwrap_or_else(PoisonError::into_inner).unwrap_or(self.cfg.initial_bandwidth_mbps);
        let bucket = self.selector.update(Instant::now(), mbps);
        counters.bucket_bits.store(bucket.to_bits(), Ordering::Relaxed);
        Some((input, FrameMeta { header, received, kind, source, started, mbps, bucket, convert_s, debug }))
    }

    /// Runs the frame's inference at its bucket, follows a table planned again for the edge
    /// (its buckets and scale), and publishes what is answered now (with lanes: what the
    /// lanes released, the frame waiting its turn).
    async fn infer(&mut self, input: Converted, meta: FrameMeta) {
        let counters = &self.shared.counters;
        self.seq += 1;
        let Converted { input, camera, .. } = input;
        let answered = match self.client.infer(self.seq, (vec![input], camera), meta.bucket, self.cfg.fleet_deadline, counters).await {
            Ok(a) => a,
            Err(e) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, camera = %self.sensor.name, "inference failed");
                return;
            }
        };
        counters.connected.store(self.client.connected(), Ordering::Relaxed);
        if self.client.table_hash() != self.table_hash {
            // Planned again for the edge: its buckets and scale are the table's.
            let (buckets, scale) = self.client.buckets();
            self.selector = BucketSelector::new(buckets, scale, self.cfg.hysteresis);
            self.table_hash = self.client.table_hash();
        }
        counters.edge_frames_dropped.fetch_max(self.client.dropped_total(), Ordering::Relaxed);
        let ratio = match &answered {
            Answered::Now(r) => r.stats.frame_ratio,
            Answered::Stream(done) => done.iter().rev().find_map(|(_, r)| r.as_ref().ok().and_then(|i| i.stats.frame_ratio)),
        };
        if let Some(ratio) = ratio {
            counters.frame_ratio_bits.store(ratio.to_bits(), Ordering::Relaxed);
        }
        match answered {
            Answered::Now(r) => self.out.publish(meta, *r).await,
            Answered::Stream(done) => {
                self.waiting.insert(self.seq, meta);
                self.publish_released(done).await;
            }
        }
    }

    /// Publishes what the lanes released, in the order given; a failed frame is counted.
    async fn publish_released(&mut self, done: Vec<(u64, lop_runtime::Result<Inference>)>) {
        for (s, r) in done {
            let Some(meta) = self.waiting.remove(&s) else { continue };
            match r {
                Ok(r) => self.out.publish(meta, r).await,
                Err(e) => {
                    self.shared.counters.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(error = %e, "inference failed");
                }
            }
        }
    }
}

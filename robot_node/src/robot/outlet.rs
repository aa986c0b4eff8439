//! Where answered frames go out ([`Outlet`]): the outputs read, the task's messages
//! (detections, keypoints, occupancy, class and instance maps) on their topics, the
//! `InferenceResult`, the annotated debug image (while subscribed, [`DebugOutlet`]), and the
//! counts and recent times kept for /diagnostics.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use lop::postprocess::Postprocess;
use lop_msgs::ros::msg::{ClassScore, OutputTensor};
use lop_runtime::client::{Inference, InferenceStats};
use tch::Tensor;

use super::debug::DebugOutlet;
use super::frame::FrameMeta;
use super::frame::Kept;
use super::messages::{outputs_msg, result_msg};
use super::shared::Shared;
use crate::annotate::{Annotations, caption};
use crate::backend::{InferenceResult, Pub, SharedRos, to_time};
use crate::config::{RobotConfig, Sensor};
use crate::error::Result;
use crate::results::{OutputView, Source, TaskMessages, task_messages_for};

/// Where answered frames go out, and what building their messages takes.
pub(super) struct Outlet<'a> {
    cfg: &'a RobotConfig,
    shared: &'a Shared,
    // Dropped in field order: the task's publishers, then the result's.
    task_pubs: TaskPublishers,
    task: Postprocess,
    /// The result's publisher, one for every input (a result names its camera in its frame id).
    publisher: Arc<Pub<InferenceResult>>,
    /// The debug image's publishers (`None`: `debug_image.enabled` false, or LiDAR input).
    debug: Option<DebugOutlet>,
    /// The model's output names.
    names: Vec<String>,
    model_hash: String,
}

impl<'a> Outlet<'a> {
    /// The outlet of input `sensor`: the result's `publisher` (declared once for every input),
    /// then declares the configured task's publishers and the debug image's, under the input's
    /// namespace. They are declared once (at configure) and kept while the node is deactivated
    /// and activated again, so that subscribers stay matched (a DDS reader matches a new writer
    /// only after discovery, and would miss the first results of each activation); the model's
    /// output names and hash come with each activation ([`Outlet::set_model`]).
    ///
    /// # Errors
    /// A topic the backend refuses.
    pub(super) fn new(
        cfg: &'a RobotConfig,
        ros: &SharedRos,
        shared: &'a Shared,
        sensor: &Sensor,
        publisher: Arc<Pub<InferenceResult>>,
    ) -> Result<Outlet<'a>> {
        let task = cfg.model_load.postprocess.clone().unwrap_or(Postprocess::Raw);
        let task_pubs = TaskPublishers::new(ros, &task, &cfg.topics, sensor)?;
        let debug = DebugOutlet::new(cfg, ros, shared.counters.clone(), &sensor.output_topic(&cfg.topics.debug_image))?;
        Ok(Outlet { cfg, shared, task_pubs, task, publisher, debug, names: Vec::new(), model_hash: String::new() })
    }

    /// The loaded model's output names and hash, which every result carries.
    pub(super) fn set_model(&mut self, names: Vec<String>, model_hash: String) {
        (self.names, self.model_hash) = (names, model_hash);
    }

    /// Whether the next frame should be kept for its debug image (a form of it is subscribed,
    /// and none is being drawn).
    pub(super) fn debug_wanted(&self) -> bool {
        self.debug.as_ref().is_some_and(DebugOutlet::wanted)
    }

    /// Publishes one answered frame: its outputs decoded, the task's messages, the result, the
    /// window of recent latencies, and (the frame kept for it) the debug image, drawn after the
    /// result went out.
    pub(super) async fn publish(&self, mut meta: FrameMeta, r: Inference) {
        let kept = meta.debug.take().map(|k| (k, meta.header.clone()));
        let finished = std::time::SystemTime::now();
        let t_out = Instant::now();
        let Some(decoded) = self.decode(r.outputs).await else { return };
        let out_s = t_out.elapsed().as_secs_f64();
        let t_pub = Instant::now();
        let header = meta.header;
        let task_msgs = if decoded.0.is_empty() { None } else { self.publish_task(&decoded.0, &header, &meta.source) };
        let received = meta.received;
        let msg = result_msg(
            &r.stats,
            header,
            (meta.started, finished),
            meta.kind,
            &self.cfg.model_source,
            &self.model_hash,
            meta.mbps,
            received.elapsed(),
            decoded,
        );
        if let Err(e) = self.publisher.publish(&msg) {
            tracing::warn!(error = %e, "publishing the result failed");
            return;
        }
        let pub_s = t_pub.elapsed().as_secs_f64();
        let ros_s = (received.elapsed().as_secs_f64() - r.stats.total_s).max(0.0);
        self.count(&r.stats, ros_s);
        if let Some((kept, header)) = kept {
            self.submit_debug(kept, &header, &r.stats, meta.bucket, task_msgs.as_ref());
        }
        tracing::debug!(
            id = r.stats.id,
            total_ms = r.stats.total_s * 1e3,
            ros_ms = ros_s * 1e3,
            convert_ms = meta.convert_s * 1e3,
            outputs_ms = out_s * 1e3,
            publish_ms = pub_s * 1e3,
            bucket = meta.bucket,
            fallback = r.stats.fallback,
            "inference published"
        );
    }

    /// Hands the frame kept for its debug image to the debug outlet, with what to draw: the
    /// task's messages (if any) and the caption (method, bucket, latency).
    fn submit_debug(&self, kept: Kept, header: &crate::backend::Header, stats: &InferenceStats, bucket: f64, task: Option<&TaskMessages>) {
        let Some(debug) = &self.debug else { return };
        let line = caption(&stats.method, bucket, stats.total_s, stats.fallback);
        let a = match task {
            Some(m) => Annotations::from_task(m, line),
            None => Annotations { caption: line, ..Default::default() },
        };
        debug.submit(kept, header, a);
    }

    /// The outputs as messages and their top-k, read on the blocking pool; `None` (counted as
    /// an inference error) when they cannot be read.
    async fn decode(&self, outs: Vec<Tensor>) -> Option<(Vec<OutputTensor>, Vec<ClassScore>)> {
        let (names, top_k) = (self.names.clone(), self.cfg.top_k);
        match tokio::task::spawn_blocking(move || outputs_msg(&outs, &names, top_k)).await {
            Ok(Ok(d)) => Some(d),
            Ok(Err(e)) => {
                self.shared.counters.errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "reading the outputs failed");
                None
            }
            Err(e) => {
                self.shared.counters.errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "output task failed");
                None
            }
        }
    }

    /// Publishes the task's messages (detections, keypoints, occupancy, class map, instance map)
    /// made from the outputs (the first, or `segment-instance`'s two), and returns them (for the
    /// debug image); a failure is counted in `task_message_errors`.
    fn publish_task(&self, outputs: &[OutputTensor], header: &crate::backend::Header, source: &Source) -> Option<TaskMessages> {
        let ros_header = hiroz_msgs::std_msgs::Header { stamp: to_time(header.stamp), frame_id: header.frame_id.clone() };
        let shapes: Vec<Vec<usize>> = outputs.iter().map(|o| o.shape.iter().map(|&d| d as usize).collect()).collect();
        let views: Vec<OutputView<'_>> = outputs.iter().zip(&shapes).map(|(o, shape)| OutputView { values: &o.data, shape }).collect();
        let (failed, messages) = match task_messages_for(&self.task, &views, &ros_header, source, &self.cfg.class_names) {
            Ok(m) => (!self.task_pubs.publish(&m), Some(m)),
            Err(e) => {
                tracing::error!(error = %e, task = self.task.task_name(), "building the task's messages failed");
                (true, None)
            }
        };
        if failed {
            self.shared.counters.task_message_errors.fetch_add(1, Ordering::Relaxed);
        }
        messages
    }

    /// Counts a published result and keeps its latency and ROS-layer time for /diagnostics.
    fn count(&self, stats: &InferenceStats, ros_s: f64) {
        let counters = &self.shared.counters;
        let ros_ns = (ros_s * 1e9) as u64;
        counters.answered.fetch_add(1, Ordering::Relaxed);
        if stats.fallback {
            counters.fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut w = self.shared.recent.lock().unwrap_or_else(PoisonError::into_inner);
            w.0.push(stats.total_s);
            w.1.push(ros_s);
            w.2.clone_from(&stats.plan_hash);
        }
        counters.ros_ns_last.store(ros_ns, Ordering::Relaxed);
        counters.ros_ns_max.fetch_max(ros_ns, Ordering::Relaxed);
        counters.ros_ns_sum.fetch_add(ros_ns, Ordering::Relaxed);
    }
}

/// The publishers of the configured task's messages.
struct TaskPublishers {
    detections: Option<crate::backend::Pub<crate::backend::Detection2DArray>>,
    keypoints: Option<crate::backend::Pub<crate::backend::KeypointsArray>>,
    occupancy: Option<crate::backend::Pub<crate::backend::PointCloud2>>,
    segmentation: Option<crate::backend::Pub<crate::backend::Image>>,
    instances: Option<crate::backend::Pub<crate::backend::Image>>,
}

impl TaskPublishers {
    /// Declares the publishers the task needs (none for `raw`), under `sensor`'s namespace.
    fn new(ros: &SharedRos, task: &Postprocess, topics: &crate::config::RobotTopics, sensor: &Sensor) -> Result<TaskPublishers> {
        let boxes = matches!(task, Postprocess::Detect(_) | Postprocess::Pose(_) | Postprocess::SegmentInstance(_));
        let at = |base: &String| sensor.output_topic(base);
        Ok(TaskPublishers {
            detections: boxes.then(|| ros.detections_publisher(&at(&topics.detections))).transpose()?,
            keypoints: matches!(task, Postprocess::Pose(_)).then(|| ros.keypoints_publisher(&at(&topics.keypoints))).transpose()?,
            occupancy: matches!(task, Postprocess::Occupancy(_)).then(|| ros.cloud_publisher(&at(&topics.occupancy))).transpose()?,
            segmentation: matches!(task, Postprocess::Segment).then(|| ros.image_publisher(&at(&topics.segmentation))).transpose()?,
            instances: matches!(task, Postprocess::SegmentInstance(_)).then(|| ros.image_publisher(&at(&topics.instances))).transpose()?,
        })
    }

    /// Publishes what `m` holds; a failure is logged, the others still go out. False when one
    /// failed.
    fn publish(&self, m: &TaskMessages) -> bool {
        fn one<T>(p: &Option<crate::backend::Pub<T>>, msg: Option<&T>, what: &str) -> bool {
            let (Some(p), Some(msg)) = (p, msg) else { return true };
            p.publish(msg).inspect_err(|e| tracing::warn!(error = %e, what, "publishing failed")).is_ok()
        }
        [
            one(&self.detections, m.detections.as_ref(), "detections"),
            one(&self.keypoints, m.keypoints.as_ref(), "keypoints"),
            one(&self.occupancy, m.occupancy.as_ref(), "occupancy"),
            one(&self.segmentation, m.segmentation.as_ref(), "segmentation"),
            one(&self.instances, m.instances.as_ref(), "instances"),
        ]
        .iter()
        .all(|&ok| ok)
    }
}

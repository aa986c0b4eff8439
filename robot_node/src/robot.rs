//! `lop_robot`: camera frames or LiDAR sweeps in, exact LOP inference results out.
//!
//! Subscription callbacks only stamp the arrival and put the message in a one-slot
//! [`Mailbox`] (the newest frame replaces an unread one, counted as dropped-busy). One task takes
//! frames from it: converts (on the blocking pool), runs the inference through the
//! [`RobotClient`] (libtorch on the model's worker thread), and publishes the result with the
//! input's stamp and frame. A bandwidth subscription feeds the [`BucketSelector`]; a diagnostics
//! task publishes the counters, rates and latency percentiles about once a second. `enabled`,
//! `method` and `drop_policy` follow the parameter services while the node runs
//! ([`LiveSettings`]). Bad input is counted and reported, never fatal.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lop::ValueInfo;
use lop::fleet::ModelCost;
use lop::graph::DType;
use lop::model::LoadOptions;
use lop::plan::Side;
use lop::planner::table::ScheduleTable;
use lop::profile::Profile;
use lop_msgs::ros::msg::{ClassScore, OutputTensor};
use lop_runtime::client::{ClientOptions, Inference, InferenceStats, Replanner, RobotClient};
use lop_runtime::exec::worker::Loaded;
use lop_runtime::exec::{CameraJpeg, Worker};
use lop_runtime::fleet::{FleetClient, FleetInference, FleetStream, StreamResult};
use lop_runtime::zenoh_service::ZenohConnector;
use tch::{Kind, Tensor};
use tokio::sync::watch;

use crate::backend::{
    CloudIn, CompressedIn, Diagnostics, ImageIn, InferenceResult, InputFaultCounts, Level, Pub, Qos, SharedRos, Stamp, Subscription,
    to_time,
};
use crate::config::{CloudGrid, InputKind, RobotConfig, Transport};
use crate::convert::{self, BevGrid, ConvertError, Fit, ImageTarget, VoxelGrid};
use crate::error::{Error, Result};
use crate::input_shape::{self, Resolved, ShapeOrigin};
use crate::live::{DropPolicy, LiveSettings};
use crate::mailbox::Mailbox;
use crate::results::{OutputView, Source, TaskMessages, task_messages_for};
use crate::window::{Rate, Recent};
use lop::postprocess::{PostOp, Postprocess};
use lop_runtime::bandwidth::BucketSelector;

/// A frame waiting for the model, with its arrival time.
enum Frame {
    Image(ImageIn, Instant),
    Compressed(CompressedIn, Instant),
    Cloud(CloudIn, Instant),
}

/// A frame as the model's input: the tensor, the camera frame's own size (a compressed frame's
/// is known once decoded), and under `passthrough` the camera's JPEG it is the decoding of.
struct Converted {
    input: Tensor,
    size: Option<(u32, u32)>,
    camera: Option<CameraJpeg>,
}

/// Counters of `lop_robot` (also published on /diagnostics).
#[derive(Debug, Default)]
pub struct RobotCounters {
    /// Frames the subscriptions delivered.
    pub received: AtomicU64,
    /// Results published.
    pub answered: AtomicU64,
    /// Frames dropped while the model was busy: replaced by a newer one (`drop_policy: newest`)
    /// or refused because one was waiting (`oldest`).
    pub dropped_busy: AtomicU64,
    /// Frames dropped unread while `enabled` was false.
    pub skipped_disabled: AtomicU64,
    /// Frames that could not be converted (encoding, step, size, empty or non-finite clouds).
    /// Messages of the wrong type and undecodable ones are the backend's
    /// ([`crate::backend::Ros::input_faults`]); /diagnostics' `frames_bad` is the sum.
    pub bad_input: AtomicU64,
    /// Results the robot finished alone.
    pub fallbacks: AtomicU64,
    /// Inferences that failed (engine errors).
    pub errors: AtomicU64,
    /// Answered frames whose task messages (detections, keypoints, occupancy, class map) could
    /// not be built or published; the frame's `InferenceResult` still went out.
    pub task_message_errors: AtomicU64,
    /// Whether the edge session is up (after the last inference).
    pub connected: AtomicBool,
    /// ROS-layer time of the last frame (arrival to publication minus the inference), ns.
    pub ros_ns_last: AtomicU64,
    /// Largest ROS-layer time, ns.
    pub ros_ns_max: AtomicU64,
    /// Sum of ROS-layer times, ns (mean = sum / answered).
    pub ros_ns_sum: AtomicU64,
    /// Bucket in force (table MB/s, as f64 bits).
    pub bucket_bits: AtomicU64,
    /// Coded frames: the running estimate of their size over raw (f64 bits; 0 until one went
    /// up), which moves where the table is read when it departs from the table's price.
    pub frame_ratio_bits: AtomicU64,
    /// Frames from the edge dropped by the client (malformed, stale, ...).
    pub edge_frames_dropped: AtomicU64,
    /// Fleet mode: edges up in the robot's view at the last frame.
    pub fleet_edges_up: AtomicU64,
    /// Fleet mode: frames the router kept on the robot (no edge serves the model, none
    /// connected yet, or none could meet the deadline).
    pub fleet_on_robot: AtomicU64,
    /// Fleet mode with lanes: frames published after their deadline (a frame past its deadline
    /// does not hold the frames behind it; it is published when done).
    pub fleet_late: AtomicU64,
    /// Fleet mode: the upload rate measured to each edge, "edge=Mbit/s" comma-separated
    /// (edges measured in the last 10 s; an edge whose path is slower than the robot's own
    /// link is priced and planned at its own rate).
    pub fleet_link_mbps: std::sync::Mutex<String>,
}

impl RobotCounters {
    /// Bad input in all: frames that did not convert plus the backend's input faults.
    fn bad_total(&self, faults: InputFaultCounts) -> u64 {
        self.bad_input.load(Ordering::Relaxed).saturating_add(faults.total())
    }

    /// Fleet mode: the per-edge upload rates for /diagnostics.
    fn set_links(&self, links: &[(String, f64)]) {
        let text = links.iter().map(|(e, m)| format!("{e}={m:.1}")).collect::<Vec<_>>().join(",");
        *self.fleet_link_mbps.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = text;
    }

    fn values(&self, faults: InputFaultCounts) -> Vec<(String, String)> {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let answered = g(&self.answered);
        let ms = |ns: u64| format!("{:.3}", ns as f64 * 1e-6);
        vec![
            ("frames_received".into(), g(&self.received).to_string()),
            ("frames_answered".into(), answered.to_string()),
            ("frames_dropped_busy".into(), g(&self.dropped_busy).to_string()),
            ("frames_skipped_disabled".into(), g(&self.skipped_disabled).to_string()),
            ("frames_bad".into(), self.bad_total(faults).to_string()),
            ("frames_unconvertible".into(), g(&self.bad_input).to_string()),
            ("wrong_type".into(), faults.wrong_type.to_string()),
            ("undecodable".into(), faults.undecodable.to_string()),
            ("fallbacks".into(), g(&self.fallbacks).to_string()),
            ("inference_errors".into(), g(&self.errors).to_string()),
            ("task_message_errors".into(), g(&self.task_message_errors).to_string()),
            ("edge_connected".into(), self.connected.load(Ordering::Relaxed).to_string()),
            ("edge_frames_dropped".into(), g(&self.edge_frames_dropped).to_string()),
            ("fleet_edges_up".into(), g(&self.fleet_edges_up).to_string()),
            ("fleet_frames_on_robot".into(), g(&self.fleet_on_robot).to_string()),
            ("fleet_frames_late".into(), g(&self.fleet_late).to_string()),
            ("fleet_link_mbps".into(), self.fleet_link_mbps.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()),
            ("bucket_mb_s".into(), f64::from_bits(g(&self.bucket_bits)).to_string()),
            ("frame_ratio".into(), format!("{:.4}", f64::from_bits(g(&self.frame_ratio_bits)))),
            ("ros_latency_ms_last".into(), ms(g(&self.ros_ns_last))),
            ("ros_latency_ms_max".into(), ms(g(&self.ros_ns_max))),
            ("ros_latency_ms_mean".into(), ms(g(&self.ros_ns_sum).checked_div(answered).unwrap_or(0))),
        ]
    }
}

/// What the model takes, resolved from its input shape and the configuration.
#[derive(Debug, Clone)]
enum Target {
    Image(ImageTarget),
    /// The model fits frames itself (`image.camera_size`): frames must be `frame`'s size and are
    /// copied as they are; results map back through `model` (the model's own input and fit).
    Camera {
        frame: ImageTarget,
        model: ImageTarget,
    },
    Bev(BevGrid),
    Voxels(VoxelGrid),
}

fn resolve_target(cfg: &RobotConfig, shape: &[usize], dtype: DType, dense_outputs: bool) -> Result<Target> {
    let dim = |i: usize| shape.get(i).and_then(|&d| u32::try_from(d).ok()).unwrap_or(0);
    let pick = |configured: u32, model: u32| if configured == 0 { model } else { configured };
    match cfg.input {
        InputKind::Camera => {
            if shape.len() != 4 || dtype != DType::U8 {
                let hint = if dtype == DType::F32 && shape.len() == 4 {
                    format!(
                        " (a float model takes camera bytes behind a preprocess stage: model.preprocess, {})",
                        lop::preprocess::SPEC_HELP
                    )
                } else {
                    String::new()
                };
                return Err(Error::Config {
                    what: format!("input camera needs a model taking a [1, C, H, W] uint8 image; this one takes {shape:?} {dtype:?}{hint}"),
                });
            }
            let auto = if dense_outputs { Fit::Letterbox { pad: cfg.image.pad } } else { Fit::Resize };
            Ok(Target::Image(ImageTarget {
                height: pick(cfg.image.height, dim(2)),
                width: pick(cfg.image.width, dim(3)),
                channels: dim(1),
                order: cfg.image.order,
                fit: cfg.image.fit.unwrap_or(auto),
            }))
        }
        InputKind::Lidar => match &cfg.cloud {
            CloudGrid::Bev(g) => {
                if shape.len() != 4 || usize::try_from(dim(1)).ok() != Some(g.channels.count()) {
                    return Err(Error::Config {
                        what: format!("the BEV grid has {} channels; the model takes {shape:?}", g.channels.count()),
                    });
                }
                Ok(Target::Bev(BevGrid { rows: pick(g.rows, dim(2)), cols: pick(g.cols, dim(3)), ..g.clone() }))
            }
            CloudGrid::Voxels(g) => {
                if shape.len() != 5 || dim(1) != 1 {
                    return Err(Error::Config {
                        what: format!("a voxel grid needs a model taking [1, 1, D, H, W]; this one takes {shape:?}"),
                    });
                }
                Ok(Target::Voxels(VoxelGrid {
                    depth: pick(g.depth, dim(2)),
                    rows: pick(g.rows, dim(3)),
                    cols: pick(g.cols, dim(4)),
                    ..g.clone()
                }))
            }
        },
    }
}

/// The camera's JPEG as the model's input, unchanged (`passthrough`): when it decodes, by the
/// decoder the edge uses, to exactly the model's input (its size; RGB or grey as the model
/// takes). `None` otherwise: the frame is then converted as usual and crosses lossless.
fn passthrough_input(m: &CompressedIn, t: &ImageTarget) -> Option<(Vec<u8>, CameraJpeg)> {
    let data = (*m.data).as_ref();
    let colour_ok = t.channels == 1 || (t.channels == 3 && t.order == convert::ChannelOrder::Rgb);
    let jpeg = Some(lop::codec::photo::Format::Jpeg);
    if !colour_ok || convert::compressed::parse_format(&m.format).ok() != jpeg || lop::codec::photo::Format::sniff(data) != jpeg {
        return None;
    }
    let image = lop::codec::Image { channels: t.channels as usize, width: t.width as usize, height: t.height as usize };
    let pixels = lop::codec::decode(lop::codec::FrameCodec::Passthrough, &image, data, image.height).ok()?;
    Some((pixels, CameraJpeg(Arc::from(data))))
}

/// Converts a frame to the model's input tensor (blocking work: call it on the blocking pool);
/// under `passthrough` a compressed frame at the model's size is kept as the camera's JPEG.
fn to_tensor(
    frame: &Frame,
    target: &Target,
    shape: &[i64],
    passthrough: bool,
    max_pixels: usize,
) -> std::result::Result<Converted, ConvertError> {
    let tensor = |r: std::result::Result<Tensor, tch::TchError>| r.map_err(|e| ConvertError::BadTarget { msg: e.to_string() });
    let plain = |input| Converted { input, size: None, camera: None };
    let frame_target;
    let target = match target {
        Target::Camera { frame: t, .. } => {
            check_camera_size(frame, t)?;
            frame_target = Target::Image(*t);
            &frame_target
        }
        t => t,
    };
    match (frame, target) {
        (Frame::Image(m, _), Target::Image(t)) => {
            let view = m.view();
            let chw = convert::image_to_chw(&view, t)?;
            tensor(Tensor::f_from_slice(&chw).and_then(|t| t.f_reshape(shape))).map(plain)
        }
        (Frame::Compressed(m, _), Target::Image(t)) => {
            let data = (*m.data).as_ref();
            let _ = convert::compressed::parse_format(&m.format)?;
            if passthrough && let Some((pixels, camera)) = passthrough_input(m, t) {
                let input = tensor(Tensor::f_from_slice(&pixels).and_then(|t| t.f_reshape(shape)))?;
                return Ok(Converted { input, size: Some((t.width, t.height)), camera: Some(camera) });
            }
            let picture = convert::compressed::decode(&m.format, data, max_pixels)?;
            let view = convert::compressed::view(&picture);
            let chw = convert::image_to_chw(&view, t)?;
            let input = tensor(Tensor::f_from_slice(&chw).and_then(|t| t.f_reshape(shape)))?;
            Ok(Converted { input, size: Some((view.width, view.height)), camera: None })
        }
        (Frame::Cloud(c, _), Target::Bev(_) | Target::Voxels(_)) => {
            let fields = c.field_views();
            let view = c.view(&fields);
            let (grid, stats) = match target {
                Target::Bev(g) => convert::cloud_to_bev_with_stats(&view, g)?,
                Target::Voxels(g) => convert::cloud_to_voxels_with_stats(&view, g)?,
                Target::Image(_) | Target::Camera { .. } => {
                    return Err(ConvertError::BadTarget { msg: "a point cloud for a camera model".into() });
                }
            };
            if stats.used == 0 {
                return Err(ConvertError::ZeroSize {
                    what: format!(
                        "no usable point ({} points, {} non-finite, {} out of range)",
                        stats.points, stats.nonfinite, stats.out_of_range
                    ),
                });
            }
            tensor(Tensor::f_from_slice(&grid).and_then(|t| t.f_reshape(shape))).map(plain)
        }
        (Frame::Image(..) | Frame::Compressed(..), _) => Err(ConvertError::BadTarget { msg: "an image for a LiDAR model".into() }),
        (Frame::Cloud(..), Target::Image(_) | Target::Camera { .. }) => {
            Err(ConvertError::BadTarget { msg: "a point cloud for a camera model".into() })
        }
    }
}

/// Refuses a camera frame of another size than `image.camera_size` (`t`'s), naming both: the
/// model was built to fit frames of that size (a compressed frame's size is read from its
/// headers, before anything is decoded).
fn check_camera_size(frame: &Frame, t: &ImageTarget) -> std::result::Result<(), ConvertError> {
    let size = match frame {
        Frame::Image(m, _) => (m.width, m.height),
        Frame::Compressed(m, _) => {
            let (w, h) = lop::codec::photo::dimensions((*m.data).as_ref()).map_err(|e| ConvertError::Compressed { msg: e.to_string() })?;
            (u32::try_from(w).unwrap_or(u32::MAX), u32::try_from(h).unwrap_or(u32::MAX))
        }
        Frame::Cloud(..) => return Ok(()),
    };
    if size == (t.width, t.height) {
        return Ok(());
    }
    Err(ConvertError::BadTarget {
        msg: format!(
            "a {}x{} frame from a camera configured as {}x{} (image.camera_size): the model fits frames of that size; set image.camera_size to the camera's",
            size.0, size.1, t.width, t.height
        ),
    })
}

/// Output tensors as messages, and the top-k of the first one (classifiers).
fn outputs_msg(
    outputs: &[Tensor],
    names: &[String],
    top_k: usize,
) -> std::result::Result<(Vec<OutputTensor>, Vec<ClassScore>), tch::TchError> {
    let mut out = Vec::with_capacity(outputs.len());
    for (i, t) in outputs.iter().enumerate() {
        let t = t.f_to_device(tch::Device::Cpu)?.f_to_kind(Kind::Float)?.f_contiguous()?;
        let n = t.numel();
        let mut data = vec![0f32; n];
        t.f_copy_data(&mut data, n)?;
        let shape = t.size().iter().map(|&d| u32::try_from(d).unwrap_or(u32::MAX)).collect();
        out.push(OutputTensor { name: names.get(i).cloned().unwrap_or_else(|| format!("output{i}")), shape, data });
    }
    let mut top = Vec::new();
    if let Some(first) = out.first()
        && top_k > 0
        && first.data.len() > 1
        && first.shape.iter().filter(|&&d| d > 1).count() == 1
    {
        let mut idx: Vec<usize> = (0..first.data.len()).collect();
        idx.sort_by(|&a, &b| first.data[b].total_cmp(&first.data[a]));
        top = idx
            .into_iter()
            .take(top_k)
            .map(|i| ClassScore { class_id: u32::try_from(i).unwrap_or(u32::MAX), score: first.data[i], label: String::new() })
            .collect();
    }
    Ok((out, top))
}

/// What a finished `run` reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RobotSummary {
    /// Frames received.
    pub received: u64,
    /// Results published.
    pub answered: u64,
    /// Frames replaced while busy.
    pub dropped_busy: u64,
    /// Bad input in all: unconvertible frames, messages of the wrong type, undecodable ones.
    pub bad_input: u64,
    /// Messages of another type on the input topic (included in `bad_input`).
    pub wrong_type: u64,
    /// Input messages that failed to decode (included in `bad_input`).
    pub undecodable: u64,
    /// Fallbacks.
    pub fallbacks: u64,
    /// Mean ROS-layer time per answered frame, seconds.
    pub ros_mean_s: f64,
    /// Largest ROS-layer time, seconds.
    pub ros_max_s: f64,
}

/// The robot's way to the edges: the one edge configured (`edge.mode` client or peer), the
/// site's fleet (`edge.mode: fleet`), each frame routed to an edge that can meet its deadline,
/// or the fleet with several frames in flight (`edge.lanes` > 1), results in frame order.
enum Edges {
    One(Box<RobotClient<ZenohConnector>>),
    Fleet(Box<FleetClient>),
    Stream {
        stream: Box<FleetStream>,
        /// The lanes' table (the robot's own, the same for every lane).
        table: Box<ScheduleTable>,
        /// Whether a lane had a session up when last seen free.
        connected: bool,
    },
}

/// What an inference call gives back: the answer, or (with lanes) the frames that can be
/// published now, by number, in publication order.
enum Answered {
    Now(Box<Inference>),
    Stream(Vec<(u64, lop_runtime::Result<Inference>)>),
}

/// A frame's facts kept until its result is published.
struct FrameMeta {
    header: crate::backend::Header,
    received: Instant,
    kind: u8,
    source: Source,
    started: std::time::SystemTime,
    mbps: f64,
    bucket: f64,
    convert_s: f64,
}

/// Counts where a fleet frame ran and returns its inference.
fn routed(r: FleetInference, counters: &RobotCounters) -> Inference {
    tracing::debug!(routed = ?r.routed, path = ?r.path, id = r.inference.stats.id, "fleet: frame routed");
    if matches!(r.routed, lop_runtime::fleet::Routed::Robot(_)) {
        counters.fleet_on_robot.fetch_add(1, Ordering::Relaxed);
    }
    r.inference
}

impl Edges {
    fn connected(&mut self) -> bool {
        match self {
            Edges::One(c) => c.connected(),
            Edges::Fleet(f) => f.connected(),
            Edges::Stream { stream, connected, .. } => {
                let free: Vec<bool> = stream.idle_lanes().map(|f| f.connected()).collect();
                if !free.is_empty() {
                    *connected = free.contains(&true);
                }
                *connected
            }
        }
    }

    fn set_method(&mut self, method: &str) {
        match self {
            Edges::One(c) => c.set_method(method),
            Edges::Fleet(f) => f.set_method(method),
            Edges::Stream { stream, .. } => stream.set_method(method),
        }
    }

    /// The hash of the table in use (it changes when the robot planned the edge's table).
    fn table_hash(&self) -> String {
        match self {
            Edges::One(c) => c.book().table_hash.to_hex(),
            Edges::Fleet(f) => f.table().hash.clone(),
            Edges::Stream { table, .. } => table.hash.clone(),
        }
    }

    /// The buckets and bandwidth scale of the table in use.
    fn buckets(&self) -> (Vec<f64>, f64) {
        let spec = match self {
            Edges::One(c) => &c.book().table.spec,
            Edges::Fleet(f) => &f.table().spec,
            Edges::Stream { table, .. } => &table.spec,
        };
        (spec.buckets.clone(), spec.bandwidth_scale)
    }

    /// Frames the edge clients dropped (the lanes not running a frame, with lanes).
    fn dropped_total(&mut self) -> u64 {
        match self {
            Edges::One(c) => c.dropped().total(),
            Edges::Fleet(f) => f.dropped_total(),
            Edges::Stream { stream, .. } => stream.idle_lanes().map(|f| f.dropped_total()).sum(),
        }
    }

    /// Whether a frame can start now (with lanes: a lane is free).
    fn lane_free(&self) -> bool {
        match self {
            Edges::Stream { stream, .. } => stream.has_free_lane(),
            _ => true,
        }
    }

    /// Frames in flight and not yet published (lanes only).
    fn in_flight(&self) -> usize {
        match self {
            Edges::Stream { stream, .. } => stream.in_flight(),
            _ => 0,
        }
    }

    /// With lanes: waits for a frame to finish (or one in flight to pass its deadline) and
    /// returns the frames that can be published now.
    async fn next_done(&mut self, counters: &RobotCounters) -> Vec<(u64, lop_runtime::Result<Inference>)> {
        let Edges::Stream { stream, .. } = self else { return Vec::new() };
        match stream.next_done().await {
            Ok(done) => Self::published(done, counters),
            Err(e) => {
                tracing::error!(error = %e, "a stream lane failed");
                Vec::new()
            }
        }
    }

    fn published(done: Vec<StreamResult>, counters: &RobotCounters) -> Vec<(u64, lop_runtime::Result<Inference>)> {
        done.into_iter()
            .map(|r| {
                if r.late {
                    counters.fleet_late.fetch_add(1, Ordering::Relaxed);
                }
                (r.seq, r.result.map(|f| routed(f, counters)))
            })
            .collect()
    }

    async fn infer(
        &mut self,
        seq: u64,
        (inputs, camera): (Vec<tch::Tensor>, Option<CameraJpeg>),
        bucket: f64,
        deadline: Duration,
        counters: &RobotCounters,
    ) -> lop_runtime::Result<Answered> {
        match self {
            Edges::One(c) => Ok(Answered::Now(Box::new(c.infer_camera(inputs, camera, bucket).await?))),
            Edges::Fleet(f) => {
                let r = f.infer_camera(inputs, camera, bucket, deadline).await?;
                counters.fleet_edges_up.store(f.edges_up() as u64, Ordering::Relaxed);
                counters.set_links(&f.link_estimates());
                Ok(Answered::Now(Box::new(routed(r, counters))))
            }
            Edges::Stream { stream, .. } => {
                let done = stream.submit_camera(seq, inputs, camera, bucket, deadline).await?;
                if let Some(up) = stream.idle_lanes().map(|f| f.edges_up()).max() {
                    counters.fleet_edges_up.store(up as u64, Ordering::Relaxed);
                }
                // Each lane measures the edges it used; the idle lane that knows the most edges.
                if let Some(links) = stream.idle_lanes().map(|f| f.link_estimates()).max_by_key(Vec::len) {
                    counters.set_links(&links);
                }
                Ok(Answered::Stream(Self::published(done, counters)))
            }
        }
    }
}

/// Runs `lop_robot` on `ros` until `shutdown` resolves: loads the model, builds (or loads) the
/// schedule table, connects to the edge, subscribes, logs `ready`, then answers frames.
///
/// # Errors
/// A model, profile or table that cannot be loaded; topics the backend refuses.
pub async fn run(cfg: RobotConfig, ros: SharedRos, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<RobotSummary> {
    let mut stop = stop_on(shutdown);
    if cfg.threads > 0 {
        tch::set_num_threads(cfg.threads);
    }
    let Some((load, origin)) = input_load(&cfg, &ros, &mut stop).await? else {
        return Ok(RobotSummary::default());
    };
    let model = load_model(&cfg, load, origin).await?;
    let input = &model.facts.input;
    let target = match cfg.model_load.fit {
        // The model fits the camera's frames itself: frames are copied at the camera's size,
        // results map back through the model's own input.
        Some(fit) => match resolve_target(&cfg, &model.facts.fitted_shape, input.dtype, model.facts.dense_outputs)? {
            Target::Image(t) => {
                let frame = ImageTarget { width: fit.width as u32, height: fit.height as u32, fit: Fit::Resize, ..t };
                Target::Camera { frame, model: t }
            }
            other => other,
        },
        None => resolve_target(&cfg, &input.shape, input.dtype, model.facts.dense_outputs)?,
    };
    let shape: Vec<i64> = input.shape.iter().map(|&d| d as i64).collect();
    let (buckets, scale) = (model.facts.table.spec.buckets.clone(), model.facts.table.spec.bandwidth_scale);

    let session = cfg.edge.open().await?;
    let opts = client_options(&cfg, &model);
    let (names, model_hash) = (model.facts.names.clone(), model.loaded.hash.clone());
    let mut client = connect_edges(&cfg, &session, opts, model).await?;

    let shared = Shared::new(&cfg);
    shared.counters.connected.store(client.connected(), Ordering::Relaxed);
    ros.on_parameter_set(shared.live.clone());
    let outlet = Outlet::new(&cfg, &ros, &shared, names, model_hash)?;
    let diagnostics = ros.diagnostics_publisher(&cfg.topics.diagnostics)?;
    let _input_sub = subscribe_input(&cfg, &ros, &shared)?;
    let _bw_sub = subscribe_bandwidth(&cfg, &ros, &shared)?;
    let diag_task = spawn_diagnostics(&cfg, &ros, diagnostics, &shared, stop.clone());
    tracing::info!(
        robot = %cfg.robot_id, model = %cfg.model_source, connected = client.connected(), backend = ros.name(),
        topic = %match cfg.input { InputKind::Camera => cfg.image.transport.topic(&cfg.topics.image), InputKind::Lidar => cfg.topics.cloud.clone() },
        "ready"
    );

    let selector = BucketSelector::new(buckets, scale, cfg.hysteresis);
    let mut frames = Frames::new(&cfg, &shared, &outlet, client, target, shape, selector);
    frames.answer(&mut stop).await;
    let _ = diag_task.await;
    // The edge clients go before their session closes.
    drop(frames);
    Ok(finish(&session, &shared.counters, &ros).await)
}

/// A receiver that turns true once `shutdown` resolves (a task waits for it), so that every
/// loop of the node can watch it.
fn stop_on(shutdown: impl Future<Output = ()> + Send + 'static) -> watch::Receiver<bool> {
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    stop
}

/// What the model's worker read from it: the schedule table, the robot's profile, the output
/// names, the one input, whether an output is dense (detections, maps: frames are letterboxed)
/// and the model's price list for routing over a fleet.
struct ModelFacts {
    table: ScheduleTable,
    robot_profile: Profile,
    names: Vec<String>,
    input: ValueInfo,
    /// The shape the model reads after its own fit of the camera's frame (`image.camera_size`;
    /// the input's shape without one).
    fitted_shape: Vec<usize>,
    dense_outputs: bool,
    cost: ModelCost,
}

/// The model loaded on its worker thread, with what that worker read from it.
struct RobotModel {
    worker: Worker,
    loaded: Loaded,
    /// How copies of the model (the replanner's, fleet lanes') load: in the robot profile's
    /// layout, as the worker's.
    replan_load: LoadOptions,
    facts: ModelFacts,
}

/// Loads the model on its worker thread, then (on that thread) checks the class names, loads
/// the profiles, sets the robot profile's layout, and loads or builds the schedule table.
///
/// # Errors
/// A model that does not load (with the `model.input_shape` hint when the shape was not
/// given), profiles or a table that cannot be loaded, a model with more than one input.
async fn load_model(cfg: &RobotConfig, load: LoadOptions, origin: ShapeOrigin) -> Result<RobotModel> {
    let source = cfg.model_source.clone();
    let at = load.input_shape.clone();
    let replan_load = load.clone();
    let (worker, loaded) = match Worker::spawn("lop-robot-model", move || lop::model::load(&source, &load)).await {
        Ok(w) => w,
        Err(e) if origin != ShapeOrigin::Given => {
            return Err(Error::Config {
                what: format!(
                    "the model does not load at {at:?} ({origin:?}): {e}; set model.input_shape (frames are then fitted to it, see image.fit)"
                ),
            });
        }
        Err(e) => return Err(e.into()),
    };
    let (robot_p, server_p, table_s, cache) =
        (cfg.robot_profile.clone(), cfg.server_profile.clone(), cfg.table.clone(), cfg.cache_dir.clone());
    let class_names = cfg.class_names.clone();
    let model_id = cfg.model_id.clone();
    let facts = worker
        .call(move |g| -> Result<_> {
            check_class_names(g, &class_names)?;
            // A coded frame's price on the robot: as its profile measured it, else measured here
            // now (the profile the edge receives in Hello carries it).
            let robot = robot_p.load(g, Side::Robot)?.with_codec_measured(table_s.frame_codec, g)?;
            let server = server_p.load(g, Side::Server)?;
            // The model runs as the robot's profile measured it.
            g.set_layout(robot.layout)?;
            let spec = table_s.spec(g, &robot, &server)?;
            // The model's price list for routing frames over a fleet.
            let sim = lop::sim::SimConfig { input_bytes_per_element: spec.input_bytes_per_element, ..Default::default() };
            let cost = lop::fleet::ModelCost::derive(&model_id, g, &robot, &server, sim)?;
            let (table, _, used) = lop::planner::table::load_or_build(&cache, g, None, &robot, &server, &spec, 1)?;
            tracing::info!(cache = ?used, buckets = spec.buckets.len(), layout = robot.layout.name(), "schedule table ready");
            let names: Vec<String> = g.outputs.iter().map(|&o| g.nodes[o].name.clone()).collect();
            let inputs = g.inputs();
            let [input] = inputs[..] else {
                return Err(Error::Config { what: format!("the model has {} inputs; lop_robot feeds exactly one", inputs.len()) });
            };
            let dense_outputs = g.outputs.iter().any(|&o| g.nodes[o].info.shape.len() >= 3);
            let fitted_shape = lop::fit::fitted_shape(g);
            Ok(ModelFacts { table, robot_profile: robot, names, input: g.nodes[input].info.clone(), fitted_shape, dense_outputs, cost })
        })
        .await??;
    let replan_load = LoadOptions { layout: facts.robot_profile.layout, ..replan_load };
    Ok(RobotModel { worker, loaded, replan_load, facts })
}

/// The edge clients' options from the configuration, with the robot's profile (sent in Hello)
/// and the replanner.
fn client_options(cfg: &RobotConfig, model: &RobotModel) -> ClientOptions {
    let mut opts = ClientOptions::new(&cfg.robot_id, &cfg.model_id);
    opts.method = cfg.method.clone();
    opts.dilation = cfg.dilation;
    opts.input_wire = cfg.table.input_wire();
    opts.device = cfg.device;
    opts.deadline_factor = cfg.deadline_factor;
    opts.deadline_slack = cfg.deadline_slack;
    opts.hello_timeout = cfg.hello_timeout;
    opts.retry_interval = cfg.retry_interval;
    // Sent in Hello: an edge that has never seen this robot plans for it (no file to copy).
    opts.robot_profile = Some(model.facts.robot_profile.clone());
    // An edge that planned for another server profile (its own measured one, say) sends it in
    // Welcome: the robot plans that table on a copy of the model, running alone meanwhile.
    opts.replan = Some(replanner(cfg, model.replan_load.clone(), model.facts.robot_profile.clone()));
    opts
}

/// Connects the robot to its edges: the one edge configured on the model's worker, or (fleet
/// mode) the fleet, each edge used with a worker of its own that loads the model.
///
/// # Errors
/// A client that cannot be built (the table or a lane's robot id refused).
async fn connect_edges(cfg: &RobotConfig, session: &zenoh::Session, opts: ClientOptions, model: RobotModel) -> Result<Edges> {
    let RobotModel { worker, loaded, replan_load, facts } = model;
    if !cfg.edge.fleet() {
        let connector = ZenohConnector::new(session.clone(), &cfg.robot_id);
        let client = RobotClient::new(connector, opts, worker, loaded.meta, &loaded.hash, facts.table).await?;
        return Ok(Edges::One(Box::new(client)));
    }
    // One worker per edge used (and one for frames kept on the robot): each loads the model.
    let source = cfg.model_source.clone();
    let loader: lop_runtime::fleet::ModelLoader = Arc::new(move || lop::model::load(&source, &replan_load));
    drop(worker);
    tracing::info!(
        endpoint = %cfg.edge.endpoint,
        deadline_ms = cfg.fleet_deadline.as_secs_f64() * 1e3,
        binding = cfg.fleet_deadline_binding,
        lanes = cfg.fleet_lanes,
        site_shards_heard = ?cfg.fleet_site_shards,
        "fleet mode: frames are routed over the edges found"
    );
    if cfg.fleet_lanes <= 1 {
        let mut fleet = FleetClient::new(session.clone(), opts, facts.table, facts.cost, loader, lop_runtime::fleet::STALE_AFTER).await?;
        fleet.set_deadline_binding(cfg.fleet_deadline_binding);
        if let Some(shards) = cfg.fleet_site_shards {
            fleet.hear_site(shards).await?;
        }
        return Ok(Edges::Fleet(Box::new(fleet)));
    }
    // Each lane a fleet client with sessions of its own (robot id <robot_id>.lane<k>).
    let mut lanes = Vec::new();
    for k in 0..cfg.fleet_lanes {
        let mut lane_opts = opts.clone();
        lane_opts.robot_id = lop_msgs::lane_robot_id(&cfg.robot_id, k).map_err(|e| Error::Config { what: format!("edge.lanes: {e}") })?;
        let (session, table, cost, loader) = (session.clone(), facts.table.clone(), facts.cost.clone(), loader.clone());
        let mut lane = FleetClient::new(session, lane_opts, table, cost, loader, lop_runtime::fleet::STALE_AFTER).await?;
        lane.set_deadline_binding(cfg.fleet_deadline_binding);
        if let Some(shards) = cfg.fleet_site_shards {
            lane.hear_site(shards).await?;
        }
        lanes.push(lane);
    }
    let connected = lanes.iter().any(FleetClient::connected);
    Ok(Edges::Stream { stream: Box::new(FleetStream::new(lanes)?), table: Box::new(facts.table), connected })
}

/// (inference latency, ROS-layer time, plan hash) of recent frames, for /diagnostics'
/// percentiles.
type RecentTimes = Mutex<(Recent, Recent, String)>;

/// What the subscriptions, the diagnostics task and the frame loop share.
struct Shared {
    counters: Arc<RobotCounters>,
    live: Arc<LiveSettings>,
    recent: Arc<RecentTimes>,
    /// The frame waiting for the model (one slot).
    mailbox: Arc<Mailbox<Frame>>,
    /// The latest bandwidth prediction, Mbit/s.
    latest_mbps: Arc<Mutex<Option<f64>>>,
}

impl Shared {
    fn new(cfg: &RobotConfig) -> Shared {
        Shared {
            counters: Arc::new(RobotCounters::default()),
            live: Arc::new(LiveSettings::new(cfg.enabled, &cfg.method, cfg.drop_policy)),
            recent: Arc::default(),
            mailbox: Arc::new(Mailbox::new()),
            latest_mbps: Arc::new(Mutex::new(None)),
        }
    }
}

/// Subscribes the input (camera or LiDAR): the callback only counts the frame, stamps its
/// arrival and puts it in the mailbox (dropped unread while disabled; `drop_policy` says which
/// frame a full mailbox keeps, the other counted as dropped-busy).
///
/// # Errors
/// A topic the backend refuses.
fn subscribe_input(cfg: &RobotConfig, ros: &SharedRos, shared: &Shared) -> Result<Subscription> {
    let put = {
        let (mailbox, counters, live) = (shared.mailbox.clone(), shared.counters.clone(), shared.live.clone());
        move |f: Frame| {
            counters.received.fetch_add(1, Ordering::Relaxed);
            if !live.enabled() {
                counters.skipped_disabled.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let dropped = match live.drop_policy() {
                DropPolicy::Newest => mailbox.put(f),
                DropPolicy::Oldest => mailbox.put_if_empty(f),
            };
            if dropped.is_some() {
                counters.dropped_busy.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    Ok(match cfg.input {
        InputKind::Camera => {
            let topic = cfg.image.transport.topic(&cfg.topics.image);
            match cfg.image.transport {
                Transport::Raw => ros.subscribe_images(&topic, cfg.input_qos, Box::new(move |m| put(Frame::Image(m, Instant::now()))))?,
                Transport::Compressed => {
                    ros.subscribe_compressed(&topic, cfg.input_qos, Box::new(move |m| put(Frame::Compressed(m, Instant::now()))))?
                }
            }
        }
        InputKind::Lidar => {
            ros.subscribe_clouds(&cfg.topics.cloud, cfg.input_qos, Box::new(move |m| put(Frame::Cloud(m, Instant::now()))))?
        }
    })
}

/// Subscribes the bandwidth predictions: the latest one picks each frame's bucket.
///
/// # Errors
/// A topic the backend refuses.
fn subscribe_bandwidth(cfg: &RobotConfig, ros: &SharedRos, shared: &Shared) -> Result<Subscription> {
    let latest = shared.latest_mbps.clone();
    ros.subscribe_bandwidth(
        &cfg.topics.bandwidth,
        Box::new(move |b| {
            *latest.lock().unwrap_or_else(PoisonError::into_inner) = Some(b.prediction_mbps);
        }),
    )
}

/// Spawns the task that publishes /diagnostics every `diagnostics_period` until `stop`: the
/// counters, the live settings, rates and latency percentiles, at level Warn while the edge is
/// not connected.
fn spawn_diagnostics(
    cfg: &RobotConfig,
    ros: &SharedRos,
    diagnostics: Pub<Diagnostics>,
    shared: &Shared,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let (counters, period, hw) = (shared.counters.clone(), cfg.diagnostics_period, cfg.robot_id.clone());
    let (ros, live, recent) = (ros.clone(), shared.live.clone(), shared.recent.clone());
    let (mut rate_in, mut rate_out) = (Rate::new(), Rate::new());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                _ = tick.tick() => {}
            }
            let connected = counters.connected.load(Ordering::Relaxed);
            let faults = ros.input_faults();
            let bad = counters.bad_total(faults);
            let now = Instant::now();
            let mut values = counters.values(faults);
            values.extend(live_values(
                &live,
                &recent.lock().unwrap_or_else(PoisonError::into_inner),
                rate_in.per_second(now, counters.received.load(Ordering::Relaxed)),
                rate_out.per_second(now, counters.answered.load(Ordering::Relaxed)),
            ));
            let paused = if live.enabled() { "" } else { "paused (enabled: false); " };
            let d = Diagnostics {
                stamp: Stamp::now(),
                level: if connected { Level::Ok } else { Level::Warn },
                name: "lop_robot: inference".into(),
                message: if connected {
                    format!("{paused}edge connected; {bad} bad frames")
                } else {
                    format!("{paused}edge not connected (robot alone); {bad} bad frames")
                },
                hardware_id: hw.clone(),
                values,
            };
            if let Err(e) = diagnostics.publish(&d) {
                tracing::warn!(error = %e, "publishing diagnostics failed");
            }
        }
    })
}

/// Where answered frames go out, and what building their messages takes.
struct Outlet<'a> {
    cfg: &'a RobotConfig,
    shared: &'a Shared,
    // Dropped in field order: the task's publishers, then the result's.
    task_pubs: TaskPublishers,
    task: Postprocess,
    publisher: Pub<InferenceResult>,
    /// The model's output names.
    names: Vec<String>,
    model_hash: String,
}

impl<'a> Outlet<'a> {
    /// Declares the result's publisher, then the configured task's.
    ///
    /// # Errors
    /// A topic the backend refuses.
    fn new(cfg: &'a RobotConfig, ros: &SharedRos, shared: &'a Shared, names: Vec<String>, model_hash: String) -> Result<Outlet<'a>> {
        let publisher = ros.inference_publisher(&cfg.topics.inference)?;
        let task = cfg.model_load.postprocess.clone().unwrap_or(Postprocess::Raw);
        let task_pubs = TaskPublishers::new(ros, &task, &cfg.topics)?;
        Ok(Outlet { cfg, shared, task_pubs, task, publisher, names, model_hash })
    }

    /// Publishes one answered frame: its outputs decoded, the task's messages, the result and
    /// the window of recent latencies.
    async fn publish(&self, meta: FrameMeta, r: Inference) {
        let finished = std::time::SystemTime::now();
        let t_out = Instant::now();
        let Some(decoded) = self.decode(r.outputs).await else { return };
        let out_s = t_out.elapsed().as_secs_f64();
        let t_pub = Instant::now();
        let header = meta.header;
        if !decoded.0.is_empty() {
            self.publish_task(&decoded.0, &header, &meta.source);
        }
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
    /// made from the outputs (the first, or `segment-instance`'s two); a failure is counted in
    /// `task_message_errors`.
    fn publish_task(&self, outputs: &[OutputTensor], header: &crate::backend::Header, source: &Source) {
        let ros_header = hiroz_msgs::std_msgs::Header { stamp: to_time(header.stamp), frame_id: header.frame_id.clone() };
        let shapes: Vec<Vec<usize>> = outputs.iter().map(|o| o.shape.iter().map(|&d| d as usize).collect()).collect();
        let views: Vec<OutputView<'_>> = outputs.iter().zip(&shapes).map(|(o, shape)| OutputView { values: &o.data, shape }).collect();
        let failed = match task_messages_for(&self.task, &views, &ros_header, source, &self.cfg.class_names) {
            Ok(m) => !self.task_pubs.publish(m),
            Err(e) => {
                tracing::error!(error = %e, task = self.task.task_name(), "building the task's messages failed");
                true
            }
        };
        if failed {
            self.shared.counters.task_message_errors.fetch_add(1, Ordering::Relaxed);
        }
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

/// The frame loop: the edges, the bucket in force, the method, and (with lanes) the frames in
/// flight.
struct Frames<'a> {
    cfg: &'a RobotConfig,
    shared: &'a Shared,
    out: &'a Outlet<'a>,
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
    fn new(
        cfg: &'a RobotConfig,
        shared: &'a Shared,
        out: &'a Outlet<'a>,
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

    /// Answers frames until `stop`: takes the mailbox's frame when a lane is free, and (with
    /// lanes) publishes the frames released meanwhile.
    async fn answer(&mut self, stop: &mut watch::Receiver<bool>) {
        loop {
            // With every lane busy the next frame waits in the mailbox (replaced by a newer one).
            let (lane_free, in_flight) = (self.client.lane_free(), self.client.in_flight());
            let frame = tokio::select! {
                _ = stop.changed() => break,
                f = self.shared.mailbox.take(), if lane_free => f,
                done = self.client.next_done(&self.shared.counters), if in_flight > 0 => {
                    self.publish_released(done).await;
                    continue;
                }
            };
            self.step(frame).await;
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
        let (received, header, kind) = match &frame {
            Frame::Image(m, t) => (*t, m.header.clone(), 0u8),
            Frame::Compressed(m, t) => (*t, m.header.clone(), 0u8),
            Frame::Cloud(c, t) => (*t, c.header.clone(), 1u8),
        };
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
        let t_convert = Instant::now();
        let converted = tokio::task::spawn_blocking(move || to_tensor(&frame, &tgt, &shp, passthrough, max_pixels)).await;
        let input = match converted {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => {
                counters.bad_input.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, stamp = ?header.stamp, frame = %header.frame_id, "bad input frame dropped");
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
        Some((input, FrameMeta { header, received, kind, source, started, mbps, bucket, convert_s }))
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
                tracing::error!(error = %e, "inference failed");
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

/// After the frame loop (the edge clients gone): closes the edge session and logs and returns
/// the summary of the counters.
async fn finish(session: &zenoh::Session, counters: &RobotCounters, ros: &SharedRos) -> RobotSummary {
    if let Err(e) = session.close().await {
        tracing::debug!(error = %e, "closing the edge session");
    }
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let answered = g(&counters.answered);
    let faults = ros.input_faults();
    let summary = RobotSummary {
        received: g(&counters.received),
        answered,
        dropped_busy: g(&counters.dropped_busy),
        bad_input: counters.bad_total(faults),
        wrong_type: faults.wrong_type,
        undecodable: faults.undecodable,
        fallbacks: g(&counters.fallbacks),
        ros_mean_s: g(&counters.ros_ns_sum).checked_div(answered).unwrap_or(0) as f64 * 1e-9,
        ros_max_s: g(&counters.ros_ns_max) as f64 * 1e-9,
    };
    tracing::info!(?summary, "lop_robot stopped");
    summary
}

/// The /diagnostics values beside the counters: the live settings, the plan of the last result,
/// the rates of frames in and results out, and percentiles of recent inference latencies and
/// ROS-layer times.
fn live_values(live: &LiveSettings, recent: &(Recent, Recent, String), in_hz: f64, out_hz: f64) -> Vec<(String, String)> {
    let (latency, ros, plan) = recent;
    let ms = |w: &Recent, q: f64| w.quantile(q).map_or_else(|| "-".to_string(), |s| format!("{:.3}", s * 1e3));
    let mut v = vec![
        ("enabled".to_string(), live.enabled().to_string()),
        ("method".into(), live.method().to_string()),
        ("drop_policy".into(), live.drop_policy().as_str().to_string()),
        ("plan_hash".into(), plan.clone()),
        ("frames_in_hz".into(), format!("{in_hz:.2}")),
        ("results_out_hz".into(), format!("{out_hz:.2}")),
        ("latency_window".into(), latency.len().to_string()),
    ];
    for (name, q) in [("p50", 0.5), ("p95", 0.95), ("p99", 0.99)] {
        v.push((format!("latency_ms_{name}"), ms(latency, q)));
        v.push((format!("ros_latency_ms_{name}"), ms(ros, q)));
    }
    v
}

/// Plans the schedule table for an edge's server profile (see
/// [`lop_runtime::client::Replanner`]): loads its own copy of the model, so that inference on
/// the model's worker goes on meanwhile, and caches the table beside the robot's own.
fn replanner(cfg: &RobotConfig, load: LoadOptions, robot: lop::profile::Profile) -> Replanner {
    let (source, settings, cache) = (cfg.model_source.clone(), cfg.table.clone(), cfg.cache_dir.clone());
    Replanner(Arc::new(move |server: lop::profile::Profile| {
        let t0 = Instant::now();
        let g = lop::model::load(&source, &load)?;
        let spec = settings.spec(&g, &robot, &server)?;
        let (table, _, used) = lop::planner::table::load_or_build(&cache, &g, None, &robot, &server, &spec, 1)?;
        tracing::info!(cache = ?used, buckets = spec.buckets.len(), seconds = t0.elapsed().as_secs_f64(), "schedule table planned for the edge's server profile");
        Ok(table)
    }))
}

/// A class-names file must name every class of a detection head (`model.class_names`).
fn check_class_names(g: &lop::Graph, names: &[String]) -> Result<()> {
    let Some(&out) = g.outputs.first() else { return Ok(()) };
    if let lop::Op::Post(PostOp::Detect(d)) = &g.nodes[out].op
        && !names.is_empty()
        && names.len() != d.classes()
    {
        return Err(Error::Config {
            what: format!("model.class_names lists {} names but the model's head scores {} classes", names.len(), d.classes()),
        });
    }
    Ok(())
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
    fn new(ros: &SharedRos, task: &Postprocess, topics: &crate::config::RobotTopics) -> Result<TaskPublishers> {
        let boxes = matches!(task, Postprocess::Detect(_) | Postprocess::Pose(_) | Postprocess::SegmentInstance(_));
        Ok(TaskPublishers {
            detections: boxes.then(|| ros.detections_publisher(&topics.detections)).transpose()?,
            keypoints: matches!(task, Postprocess::Pose(_)).then(|| ros.keypoints_publisher(&topics.keypoints)).transpose()?,
            occupancy: matches!(task, Postprocess::Occupancy(_)).then(|| ros.cloud_publisher(&topics.occupancy)).transpose()?,
            segmentation: matches!(task, Postprocess::Segment).then(|| ros.image_publisher(&topics.segmentation)).transpose()?,
            instances: matches!(task, Postprocess::SegmentInstance(_)).then(|| ros.image_publisher(&topics.instances)).transpose()?,
        })
    }

    /// Publishes what `m` holds; a failure is logged, the others still go out. False when one
    /// failed.
    fn publish(&self, m: TaskMessages) -> bool {
        fn one<T>(p: &Option<crate::backend::Pub<T>>, msg: Option<T>, what: &str) -> bool {
            let (Some(p), Some(msg)) = (p, msg) else { return true };
            p.publish(&msg).inspect_err(|e| tracing::warn!(error = %e, what, "publishing failed")).is_ok()
        }
        [
            one(&self.detections, m.detections, "detections"),
            one(&self.keypoints, m.keypoints, "keypoints"),
            one(&self.occupancy, m.occupancy, "occupancy"),
            one(&self.segmentation, m.segmentation, "segmentation"),
            one(&self.instances, m.instances, "instances"),
        ]
        .iter()
        .all(|&ok| ok)
    }
}

/// The load options with a dynamic model's shape fixed ([`crate::input_shape`]), waiting for the
/// first camera frame where only it can tell; `None` when `stop` came first.
async fn input_load(cfg: &RobotConfig, ros: &SharedRos, stop: &mut watch::Receiver<bool>) -> Result<Option<(LoadOptions, ShapeOrigin)>> {
    if cfg.model_load.input_shape.is_some() || cfg.model_source.starts_with("zoo:") {
        // The shape is given, or fixed by the zoo: nothing to read before loading.
        return Ok(Some((cfg.model_load.clone(), ShapeOrigin::Given)));
    }
    let source = cfg.model_source.clone();
    let declared = tokio::task::spawn_blocking(move || lop::model::declared_inputs(&source))
        .await
        .map_err(|e| Error::Config { what: format!("reading the model's inputs: {e}") })??;
    let mut load = cfg.model_load.clone();
    let origin = match input_shape::resolve(cfg, &declared)? {
        Resolved::Shape(shape, origin) => {
            load.input_shape = shape;
            origin
        }
        Resolved::NeedsFrame => {
            let topic = cfg.image.transport.topic(&cfg.topics.image);
            tracing::info!(%topic, "the model's input size is dynamic: waiting for the first frame to fix it");
            let (tx, mut rx) = tokio::sync::mpsc::channel::<(u32, u32)>(1);
            let _sub = match cfg.image.transport {
                Transport::Raw => ros.subscribe_images(
                    &topic,
                    Qos::SensorData,
                    Box::new(move |m| {
                        let _ = tx.try_send((m.height, m.width));
                    }),
                )?,
                Transport::Compressed => ros.subscribe_compressed(
                    &topic,
                    Qos::SensorData,
                    Box::new(move |m| match convert::compressed::dimensions(&m.format, (*m.data).as_ref()) {
                        Ok((w, h)) => {
                            let _ = tx.try_send((h, w));
                        }
                        Err(e) => tracing::warn!(error = %e, "a first frame that does not fix the input size"),
                    }),
                )?,
            };
            let (height, width) = loop {
                tokio::select! {
                    _ = stop.changed() => return Ok(None),
                    size = rx.recv() => match size {
                        Some((h, w)) if h > 0 && w > 0 => break (h, w),
                        Some(_) => continue,
                        None => return Ok(None),
                    },
                }
            };
            let shape = input_shape::from_frame(cfg, &declared, height, width)?;
            tracing::info!(?shape, "input shape fixed by the first frame");
            load.input_shape = Some(shape);
            ShapeOrigin::FirstFrame
        }
    };
    Ok(Some((load, origin)))
}

#[allow(clippy::too_many_arguments)]
fn result_msg(
    s: &InferenceStats,
    header: crate::backend::Header,
    (started, finished): (std::time::SystemTime, std::time::SystemTime),
    input_kind: u8,
    model_name: &str,
    model_hash: &str,
    mbps: f64,
    latency: Duration,
    (outputs, top_k): (Vec<OutputTensor>, Vec<ClassScore>),
) -> InferenceResult {
    let server = s.server_compute_s.unwrap_or(0.0);
    InferenceResult {
        header: hiroz_msgs::std_msgs::Header { stamp: to_time(header.stamp), frame_id: header.frame_id },
        inference_id: s.id,
        started: to_time(Stamp::from_system(started)),
        finished: to_time(Stamp::from_system(finished)),
        model_name: model_name.to_string(),
        model_sha256: model_hash.to_string(),
        input_kind,
        latency_s: latency.as_secs_f64(),
        robot_compute_s: s.robot_compute_s,
        server_compute_s: server,
        waiting_s: s.robot_wait_s,
        transfer_s: transfer_seconds(s),
        bytes_up: s.bytes_up,
        bytes_down: s.bytes_down,
        bandwidth_bucket: s.bucket,
        bandwidth_mbps: mbps,
        plan_hash: s.plan_hash.clone(),
        method: s.method.clone(),
        fallback: s.fallback,
        fallback_reason: s.fallback_reason.clone().unwrap_or_default(),
        outputs,
        top_k,
    }
}

/// Seconds the inference's transfers held the link, for /lop/inference's `transfer_s` (which
/// `lop_bandwidth` turns into a passive sample, bytes over seconds): the bytes at the upload rate
/// the edge saw, where the link limited the upload
/// ([`lop_runtime::bandwidth::upload`]); else the share of the robot's wait that the server's
/// compute does not explain, which also counts the edge's queueing as transfer and so reads a
/// busy edge as a slow link.
fn transfer_seconds(s: &InferenceStats) -> f64 {
    match s.upload_mbps() {
        Some(m) if m > 0.0 => (s.bytes_up + s.bytes_down) as f64 * 8.0 / (m * 1e6),
        _ => (s.robot_wait_s - s.server_compute_s.unwrap_or(0.0)).max(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{ParamValue, Params};

    /// A frame that queued 0.6 s behind others on the edge: its link time is the upload's 0.3 s
    /// (1 MB at 26.7 Mbit/s as the edge saw it arrive), not the 0.9 s of wait the edge's
    /// compute leaves unexplained, which a frame without the edge's measurement still reports.
    #[test]
    fn transfer_time_is_the_uploads_not_the_edges_queue() {
        let mut s = InferenceStats {
            id: 1,
            method: "server-only".into(),
            bucket: 0,
            bucket_mb_s: 8.0,
            plan_hash: String::new(),
            fallback: false,
            fallback_reason: None,
            total_s: 1.1,
            robot_compute_s: 0.0,
            robot_overruns: 0,
            robot_overrun_s: 0.0,
            robot_coding_s: 0.0,
            frame_coded: false,
            frame_ratio: None,
            robot_wait_s: 1.0,
            server_compute_s: Some(0.1),
            bytes_up: 1_000_000,
            bytes_down: 0,
            predicted_s: None,
            upload_s: Some(0.3),
            send_span_s: Some(0.0),
        };
        assert!((transfer_seconds(&s) - 0.3).abs() < 1e-9, "{}", transfer_seconds(&s));
        s.upload_s = None;
        assert!((transfer_seconds(&s) - 0.9).abs() < 1e-9, "{}", transfer_seconds(&s));
    }

    fn config(fit: Option<&str>) -> RobotConfig {
        let mut p = Params::empty("lop_robot");
        if let Some(f) = fit {
            p.set("image.fit", ParamValue::Str(f.into()));
        }
        p.set("image.pad", ParamValue::Int(114));
        RobotConfig::from_params(&mut p).expect("valid parameters")
    }

    fn fit_of(t: Target) -> Fit {
        match t {
            Target::Image(i) => i.fit,
            other => panic!("not an image target: {other:?}"),
        }
    }

    /// `image.fit: auto` (the default) letterboxes frames for models with dense outputs
    /// (detectors: boxes keep the frame's aspect ratio) and resizes them for classifiers; an
    /// explicit setting wins; a float model is refused with the preprocess hint.
    #[test]
    fn auto_fit_letterboxes_detectors_and_resizes_classifiers() {
        let shape = [1, 3, 640, 640];
        let auto = config(None);
        assert_eq!(fit_of(resolve_target(&auto, &shape, DType::U8, true).expect("detector")), Fit::Letterbox { pad: 114 });
        assert_eq!(fit_of(resolve_target(&auto, &shape, DType::U8, false).expect("classifier")), Fit::Resize);
        let resize = config(Some("resize"));
        assert_eq!(fit_of(resolve_target(&resize, &shape, DType::U8, true).expect("explicit")), Fit::Resize);
        let e = resolve_target(&auto, &shape, DType::F32, true).expect_err("float input").to_string();
        assert!(e.contains("model.preprocess"), "{e}");
    }
}

//! The model's back end (DESIGN.md section 5a): what users read instead of raw head tensors,
//! appended to the graph as its last op so that the planner places it like any other op and only
//! its small result crosses the link when the server runs it.
//!
//! A task is chosen by configuration (`--task`, `model.task`, `models[].task`):
//!
//! | task | head it reads | result (the graph's outputs) |
//! |---|---|---|
//! | `raw` | any | the head itself (no stage) |
//! | `detect` | YOLOv8 `[1, 4 + classes, anchors]` (boxes decoded), or YOLOX `[1, anchors, 5 + classes]` (raw, decoded here) | `[1, max, 6]` float32 rows `x1, y1, x2, y2, score, class` |
//! | `pose` | YOLOv8-pose `[1, 4 + classes + 3 K, anchors]` | `[1, max, 6 + 3 K]`: the detection, then `x, y, visibility` per keypoint |
//! | `segment` | per-pixel class scores `[1, C, H, W]` | `[1, 1, H, W]` uint8 class map |
//! | `segment-instance` | YOLOv8-seg: two outputs, the head `[1, 4 + classes + nm, anchors]` (boxes decoded, classes sigmoided, `nm` mask coefficients) and the prototypes `[1, nm, H / 4, W / 4]` | two outputs: the detections `[1, max, 6]` as `detect`'s, and a `[1, 1, H, W]` uint8 instance-id map at the input's size (0 background, `i + 1` where detection row `i`'s mask is on; a pixel belongs to the best detection whose mask covers it) |
//! | `occupancy` | voxel logits `[1, C, D, H, W]` | `[1, 1, D, H, ceil(W / 8)]` uint8: occupied voxels as bits |
//!
//! Detection rows are sorted by descending score (ties: lower anchor index first); the unused
//! rows of the fixed-size result have class -1 and zeros elsewhere. Box coordinates are in the
//! model input's pixels; the robot maps them back through the letterbox at publish time.
//! `detect` and `pose` are global ops (a barrier, run whole on one side); `segment-instance` is
//! the detection op on the head plus a second global op (see the `instance` module's rules) on the head and
//! prototypes flattened and concatenated in the graph (a Post op reads one value), so that the
//! server can return the boxes and the byte map instead of the prototypes; `segment` and
//! `occupancy` are per-pixel, so their rows are split like any local op and each side computes
//! the bits of its own band.
//!
//! Every step is deterministic (stable tie-breaking, no device-dependent reductions), so the
//! stage computed from a split run's head equals the stage computed from the unsplit head.

mod dense;
mod detect;
mod instance;

pub use dense::{ClassMap, Occupancy, occupied_voxels};
pub use detect::{Detect, Detection, HeadFormat, detections};
pub use instance::{Instances, MAX_INSTANCES};

use crate::error::{Error, Result};
use crate::ops::band::BandIn;
use crate::rows::{Footprint, Rows};
use crate::value::ValueInfo;
use tch::Tensor;

/// Floats per detection row before the keypoints: `x1, y1, x2, y2, score, class`.
pub const DETECTION_FIELDS: usize = 6;

/// The forms [`Postprocess::parse`] accepts, for messages.
pub const SPEC_HELP: &str = "'raw', 'detect', 'pose', 'segment', 'segment-instance' or 'occupancy', optionally followed \
                             by ';key=value' options: detect and pose take score=0..1 (0.25), iou=0..1 (0.45), \
                             max=1..10000 (300), format=auto|yolov8|yolox, and pose keypoints=K (17); segment-instance \
                             takes score, iou, max=1..255 (100) and mask=0..1 (0.5); occupancy takes threshold=0..1 (0.5) \
                             and class=N (1 of a softmax head)";

/// A back-end stage chosen by configuration.
#[derive(Debug, Clone, PartialEq)]
pub enum Postprocess {
    /// No stage: the raw outputs are the result.
    Raw,
    /// Boxes: decode, score threshold, class-wise NMS, at most `max` rows.
    Detect(DetectSpec),
    /// Boxes with keypoints (YOLOv8-pose heads).
    Pose(DetectSpec),
    /// Per-pixel argmax over classes.
    Segment,
    /// Boxes and instance masks of YOLOv8-seg heads (head and prototypes): detections plus an
    /// instance-id map.
    SegmentInstance(InstanceSpec),
    /// Occupied voxels above a probability threshold, as bits.
    Occupancy(OccupancySpec),
}

/// Options of `detect` and `pose`.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectSpec {
    /// Keep boxes whose best class score is above this (0..1).
    pub score: f32,
    /// Suppress a box whose IoU with a kept box of its class is above this (0..1).
    pub iou: f32,
    /// At most this many rows (the result's fixed size).
    pub max: usize,
    /// Head layout.
    pub format: HeadFormat,
    /// Keypoints per object (pose only; 0 for detect).
    pub keypoints: usize,
}

/// Options of `segment-instance`.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceSpec {
    /// Score threshold, IoU and `max` (at most [`MAX_INSTANCES`]) of the detections; the head
    /// is YOLOv8's layout and has no keypoints.
    pub detect: DetectSpec,
    /// A mask pixel is on when its upsampled probability is above this (0..1).
    pub mask: f32,
}

/// Options of `occupancy`.
#[derive(Debug, Clone, PartialEq)]
pub struct OccupancySpec {
    /// Occupied when the class probability is above this (0..1).
    pub threshold: f32,
    /// The occupied class channel of a head with two or more channels (a softmax over them;
    /// default 1, the second). A one-channel head is a sigmoid logit (`None` or 0).
    pub class: Option<usize>,
}

impl Postprocess {
    /// Parses a spec: the task, then `;key=value` options (see [`SPEC_HELP`]).
    ///
    /// # Errors
    /// [`Error::Input`] naming the part that does not parse, the value out of range, and the
    /// accepted forms.
    pub fn parse(spec: &str) -> Result<Postprocess> {
        let bad = |what: String| Error::Input(format!("task '{spec}': {what}; expected {SPEC_HELP}"));
        let mut parts = spec.split(';').map(str::trim).filter(|s| !s.is_empty());
        let task = parts.next().ok_or_else(|| bad("no task given".into()))?;
        let mut det = DetectSpec { score: 0.25, iou: 0.45, max: 300, format: HeadFormat::Auto, keypoints: 0 };
        let mut occ = OccupancySpec { threshold: 0.5, class: None };
        let mut mask = 0.5;
        if task == "segment-instance" {
            (det.max, det.format) = (100, HeadFormat::Yolov8);
        }
        let unit = |k: &str, v: &str| -> Result<f32> {
            v.parse::<f32>().ok().filter(|x| (0.0..=1.0).contains(x)).ok_or_else(|| bad(format!("{k}={v} is not a number in 0..1")))
        };
        let count = |k: &str, v: &str, lo: usize, hi: usize| -> Result<usize> {
            v.parse::<usize>()
                .ok()
                .filter(|n| (lo..=hi).contains(n))
                .ok_or_else(|| bad(format!("{k}={v} is not a whole number in {lo}..={hi}")))
        };
        if task == "pose" {
            det.keypoints = 17;
        }
        for part in parts {
            let Some((k, v)) = part.split_once('=').map(|(k, v)| (k.trim(), v.trim())) else {
                return Err(bad(format!("option '{part}' is not key=value")));
            };
            match (task, k) {
                ("detect" | "pose", "score") => det.score = unit(k, v)?,
                ("detect" | "pose", "iou") => det.iou = unit(k, v)?,
                ("detect" | "pose", "max") => det.max = count(k, v, 1, 10_000)?,
                ("detect" | "pose", "format") => det.format = HeadFormat::parse(v).ok_or_else(|| bad(format!("unknown format '{v}'")))?,
                ("pose", "keypoints") => det.keypoints = count(k, v, 1, 1000)?,
                ("segment-instance", "score") => det.score = unit(k, v)?,
                ("segment-instance", "iou") => det.iou = unit(k, v)?,
                ("segment-instance", "max") => det.max = count(k, v, 1, MAX_INSTANCES)?,
                ("segment-instance", "mask") => mask = unit(k, v)?,
                ("occupancy", "threshold") => occ.threshold = unit(k, v)?,
                ("occupancy", "class") => occ.class = Some(count(k, v, 0, 255)?),
                _ => return Err(bad(format!("task '{task}' takes no option '{k}'"))),
            }
        }
        match task {
            "raw" => Ok(Postprocess::Raw),
            "detect" => Ok(Postprocess::Detect(det)),
            "pose" if det.format == HeadFormat::Yolox => Err(bad("pose reads YOLOv8-pose heads only (format=yolov8)".into())),
            "pose" => Ok(Postprocess::Pose(det)),
            "segment" => Ok(Postprocess::Segment),
            "segment-instance" => Ok(Postprocess::SegmentInstance(InstanceSpec { detect: det, mask })),
            "occupancy" => Ok(Postprocess::Occupancy(occ)),
            other => Err(bad(format!("unknown task '{other}'"))),
        }
    }

    /// The spec [`Postprocess::parse`] reads back as this stage.
    pub fn spec(&self) -> String {
        let det = |task: &str, d: &DetectSpec| {
            let mut s = format!("{task};score={};iou={};max={};format={}", d.score, d.iou, d.max, d.format.name());
            if task == "pose" {
                s.push_str(&format!(";keypoints={}", d.keypoints));
            }
            s
        };
        match self {
            Postprocess::Raw => "raw".into(),
            Postprocess::Detect(d) => det("detect", d),
            Postprocess::Pose(d) => det("pose", d),
            Postprocess::Segment => "segment".into(),
            Postprocess::SegmentInstance(s) => {
                format!("segment-instance;score={};iou={};max={};mask={}", s.detect.score, s.detect.iou, s.detect.max, s.mask)
            }
            Postprocess::Occupancy(o) => match o.class {
                Some(c) => format!("occupancy;threshold={};class={c}", o.threshold),
                None => format!("occupancy;threshold={}", o.threshold),
            },
        }
    }

    /// The task's name (`detect`, ...).
    pub fn task_name(&self) -> &'static str {
        match self {
            Postprocess::Raw => "raw",
            Postprocess::Detect(_) => "detect",
            Postprocess::Pose(_) => "pose",
            Postprocess::Segment => "segment",
            Postprocess::SegmentInstance(_) => "segment-instance",
            Postprocess::Occupancy(_) => "occupancy",
        }
    }

    /// One line saying what a result of this stage holds, for people: the detections (count,
    /// then the best `limit` as `class score [x1 y1 x2 y2]` in input pixels; `segment-instance`'s
    /// first output), the occupied voxels or the classes present; `None` for `raw`, or a result of
    /// another shape.
    pub fn summary(&self, result: &Tensor, limit: usize) -> Option<String> {
        let shape = result.size();
        let values = Vec::<f32>::try_from(result.to_device(tch::Device::Cpu).to_kind(tch::Kind::Float).flatten(0, -1)).ok()?;
        match self {
            Postprocess::Raw => None,
            Postprocess::Detect(_) | Postprocess::Pose(_) | Postprocess::SegmentInstance(_) => {
                if matches!(self, Postprocess::SegmentInstance(_)) && shape.len() != 3 {
                    return None;
                }
                let width = usize::try_from(*shape.last()?).ok()?;
                let found = detections(&values, width);
                let shown: Vec<String> = found
                    .iter()
                    .take(limit)
                    .map(|d| {
                        let [x1, y1, x2, y2] = d.bbox;
                        format!("{} {:.2} [{x1:.0} {y1:.0} {x2:.0} {y2:.0}]", d.class, d.score)
                    })
                    .collect();
                let more = found.len().saturating_sub(limit);
                let tail = if more > 0 { format!(", +{more}") } else { String::new() };
                let plural = if found.len() == 1 { "" } else { "s" };
                Some(format!("{} detection{plural}{}{}{tail}", found.len(), if shown.is_empty() { "" } else { ": " }, shown.join(", ")))
            }
            Postprocess::Occupancy(_) => {
                Some(format!("{} occupied voxels", values.iter().map(|&b| (b as u8).count_ones() as usize).sum::<usize>()))
            }
            Postprocess::Segment => {
                let mut present = [false; 256];
                for &v in &values {
                    present[v as u8 as usize] = true;
                }
                let classes: Vec<String> = (0..256).filter(|&c| present[c]).map(|c| c.to_string()).collect();
                Some(format!("classes present: {}", classes.join(" ")))
            }
        }
    }
}

/// The graph op of a back-end stage ([`Op::Post`](crate::ops::Op::Post)).
#[derive(Debug, Clone)]
pub enum PostOp {
    /// Box decoding, threshold and NMS (a barrier).
    Detect(Detect),
    /// Per-pixel argmax (local).
    ClassMap(ClassMap),
    /// Occupancy bits (local).
    Occupancy(Occupancy),
    /// Instance-id map of a segmentation head and its prototypes (a barrier).
    Instances(Instances),
}

impl PostOp {
    /// Short name of the op kind.
    pub fn kind_name(&self) -> &'static str {
        match self {
            PostOp::Detect(_) => "Detect",
            PostOp::ClassMap(_) => "ClassMap",
            PostOp::Occupancy(_) => "Occupancy",
            PostOp::Instances(_) => "Instances",
        }
    }

    /// The output for this input.
    pub(crate) fn infer(&self, input: &ValueInfo) -> std::result::Result<ValueInfo, String> {
        match self {
            PostOp::Detect(d) => d.infer(input),
            PostOp::ClassMap(c) => c.infer(input),
            PostOp::Occupancy(o) => o.infer(input),
            PostOp::Instances(m) => m.infer(input),
        }
    }

    /// Whether the output keeps the input's image rows (the per-pixel stages do).
    pub(crate) fn keeps_rows(&self, input: &ValueInfo) -> bool {
        !matches!(self, PostOp::Detect(_) | PostOp::Instances(_)) && input.row_axis == Some(2)
    }

    /// Which input rows output rows `rows` need: the same rows for per-pixel stages.
    pub(crate) fn footprint(&self, rows: &Rows) -> Footprint {
        match self {
            PostOp::Detect(_) | PostOp::Instances(_) => Footprint::Whole,
            PostOp::ClassMap(_) | PostOp::Occupancy(_) => Footprint::Rows(rows.clone()),
        }
    }

    /// Computes output rows `rows` (the whole result for [`PostOp::Detect`] and
    /// [`PostOp::Instances`]).
    pub(crate) fn compute(&self, input: &BandIn<'_>, rows: &Rows) -> std::result::Result<Tensor, tch::TchError> {
        match self {
            PostOp::Detect(d) => d.compute(&input.whole()?),
            PostOp::Instances(m) => m.compute(&input.whole()?),
            PostOp::ClassMap(c) => c.compute(&input.rows(rows)?),
            PostOp::Occupancy(o) => o.compute(&input.rows(rows)?),
        }
    }
}

#[cfg(test)]
mod instance_tests;
#[cfg(test)]
mod tests;

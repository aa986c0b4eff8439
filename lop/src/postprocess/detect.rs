//! Box decoding, score threshold and class-wise non-maximum suppression for YOLO-family heads.
//!
//! The rules are those of the reference implementations users compare against (ultralytics'
//! `non_max_suppression` with one label per box, YOLOX's demo post-processing), written so that
//! the result is a pure function of the head's values:
//! - a box's class is its best class (the first on ties), its score that class's score (YOLOX:
//!   objectness times class score); boxes with score `> score` are candidates;
//! - candidates are visited by descending score, ties by ascending anchor index; a candidate is
//!   kept unless a kept box of the same class overlaps it with IoU `> iou` (IoU of `x1 y1 x2 y2`
//!   boxes without a +1, as torchvision computes it); the visit stops at `max` kept boxes.
//!
//! It runs on the CPU in plain Rust on a copy of the head (a few megabytes at most), so it gives
//! the same rows on either side of the link and on any device.

use super::{DETECTION_FIELDS, DetectSpec};
use crate::value::{DType, ValueInfo};
use tch::{Device, Kind, Tensor};

/// Strides of YOLOX's three levels, in anchor order.
const YOLOX_STRIDES: [usize; 3] = [8, 16, 32];

/// How a detection head lays out its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadFormat {
    /// Decided from the shape: channels first when there are fewer channels than anchors.
    Auto,
    /// `[1, 4 + classes (+ 3 K), anchors]`: centre x, centre y, width, height in input pixels,
    /// class scores after the sigmoid, then keypoints (x, y, visibility) for pose heads.
    Yolov8,
    /// `[1, anchors, 5 + classes]` before decoding: box offsets and log sizes per grid cell of
    /// strides 8, 16 and 32, objectness and class scores after the sigmoid.
    Yolox,
}

impl HeadFormat {
    /// Parses `auto`, `yolov8` or `yolox`.
    pub fn parse(s: &str) -> Option<HeadFormat> {
        match s {
            "auto" => Some(HeadFormat::Auto),
            "yolov8" => Some(HeadFormat::Yolov8),
            "yolox" => Some(HeadFormat::Yolox),
            _ => None,
        }
    }
    /// The name [`HeadFormat::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            HeadFormat::Auto => "auto",
            HeadFormat::Yolov8 => "yolov8",
            HeadFormat::Yolox => "yolox",
        }
    }
}

/// The detection stage of one model: its head layout resolved against the head's shape.
#[derive(Debug, Clone)]
pub struct Detect {
    format: HeadFormat,
    anchors: usize,
    classes: usize,
    keypoints: usize,
    /// Mask coefficients after the classes (instance segmentation heads), not carried into the
    /// rows.
    coefficients: usize,
    score: f32,
    iou: f32,
    max: usize,
    /// YOLOX grid levels in anchor order: rows, columns, stride.
    levels: Vec<(usize, usize, usize)>,
}

/// One kept box, read back from a detection result.
#[derive(Debug, Clone, PartialEq)]
pub struct Detection {
    /// Left, top, right, bottom in the model input's pixels.
    pub bbox: [f32; 4],
    /// The class score (YOLOX: objectness times class score).
    pub score: f32,
    /// Class index.
    pub class: usize,
    /// Keypoints: x, y in input pixels and a visibility score (pose only).
    pub keypoints: Vec<[f32; 3]>,
}

/// One box the stage keeps: its anchor, box in input pixels, score and class.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Kept {
    /// The anchor (column of a YOLOv8 head, row of a YOLOX head).
    pub anchor: usize,
    /// Left, top, right, bottom in the model input's pixels.
    pub bbox: [f32; 4],
    /// The score.
    pub score: f32,
    /// The class.
    pub class: usize,
}

/// The detections held in a result's rows (`[.., max, 6 + 3 K]` as a flat row-major slice of
/// `width = 6 + 3 K` floats per row): the rows before the first unused one (class -1).
pub fn detections(rows: &[f32], width: usize) -> Vec<Detection> {
    if width < DETECTION_FIELDS {
        return Vec::new();
    }
    rows.chunks_exact(width)
        .take_while(|r| r[5] >= 0.0)
        .map(|r| Detection {
            bbox: [r[0], r[1], r[2], r[3]],
            score: r[4],
            class: r[5] as usize,
            keypoints: r[DETECTION_FIELDS..].chunks_exact(3).map(|k| [k[0], k[1], k[2]]).collect(),
        })
        .collect()
}

impl Detect {
    /// The stage for a head of shape `head` on a model whose image input is `input_hw`.
    pub(crate) fn new(spec: &DetectSpec, head: &ValueInfo, input_hw: Option<(usize, usize)>) -> Result<Detect, String> {
        let &[1, a, b] = &head.shape[..] else {
            return Err(format!("a detection head has shape [1, channels, anchors] or [1, anchors, channels], not {:?}", head.shape));
        };
        if head.dtype != DType::F32 {
            return Err(format!("a detection head is float32, not {:?}", head.dtype));
        }
        let format = match spec.format {
            HeadFormat::Auto if spec.keypoints > 0 || a < b => HeadFormat::Yolov8,
            HeadFormat::Auto => HeadFormat::Yolox,
            f => f,
        };
        let mut d = Detect {
            format,
            anchors: 0,
            classes: 0,
            keypoints: spec.keypoints,
            coefficients: 0,
            score: spec.score,
            iou: spec.iou,
            max: spec.max,
            levels: vec![],
        };
        match format {
            HeadFormat::Yolov8 => {
                d.anchors = b;
                let extra = 3 * spec.keypoints;
                if a < 4 + extra + 1 {
                    return Err(format!(
                        "a YOLOv8 head has 4 box values + classes{} channels (axis 1); {a} channels leave no class",
                        if spec.keypoints > 0 { format!(" + 3 x {} keypoints", spec.keypoints) } else { String::new() }
                    ));
                }
                d.classes = a - 4 - extra;
                if spec.keypoints > 0 && d.classes != 1 {
                    let hint = match a.checked_sub(5) {
                        Some(k) if k % 3 == 0 => format!("keypoints={} fits it", k / 3),
                        _ => format!("{} is not divisible by 3", a.saturating_sub(5)),
                    };
                    return Err(format!(
                        "a pose head has 4 + 1 class + 3 x keypoints channels; {a} channels with {} keypoints leave {} classes ({hint})",
                        spec.keypoints, d.classes
                    ));
                }
            }
            HeadFormat::Yolox => {
                d.anchors = a;
                if b < 6 {
                    return Err(format!("a YOLOX head has 5 + classes channels (last axis); it has {b}"));
                }
                d.classes = b - 5;
                let Some((h, w)) = input_hw else {
                    return Err(
                        "a YOLOX head is decoded against the image input's height and width; the model has no [1, C, H, W] input".into()
                    );
                };
                d.levels = YOLOX_STRIDES.iter().map(|&s| (h / s, w / s, s)).collect();
                let cells: usize = d.levels.iter().map(|(r, c, _)| r * c).sum();
                if cells != a {
                    return Err(format!("a YOLOX head at input {h}x{w} has {cells} anchors (strides {YOLOX_STRIDES:?}); this one has {a}"));
                }
            }
            HeadFormat::Auto => unreachable!("resolved above"),
        }
        Ok(d)
    }

    /// The stage for a YOLOv8-seg head `[1, 4 + classes + coefficients, anchors]` whose last
    /// `coefficients` channels (the prototypes' count) are mask coefficients: the boxes and
    /// classes as [`Detect::new`] reads them, the coefficients left for the mask stage.
    pub(crate) fn with_coefficients(spec: &DetectSpec, head: &ValueInfo, coefficients: usize) -> Result<Detect, String> {
        let &[1, a, anchors] = &head.shape[..] else {
            return Err(format!("a segmentation head has shape [1, 4 + classes + mask coefficients, anchors], not {:?}", head.shape));
        };
        if head.dtype != DType::F32 {
            return Err(format!("a segmentation head is float32, not {:?}", head.dtype));
        }
        if a < 4 + 1 + coefficients {
            return Err(format!(
                "a segmentation head has 4 box values + classes + {coefficients} mask coefficients channels (axis 1; the \
                 coefficients are as many as the prototypes' channels); {a} channels leave {} classes: it needs at least {} \
                 channels for one class, or prototypes of at most {} channels",
                a as i64 - 4 - coefficients as i64,
                4 + 1 + coefficients,
                a.saturating_sub(5)
            ));
        }
        Ok(Detect {
            format: HeadFormat::Yolov8,
            anchors,
            classes: a - 4 - coefficients,
            keypoints: 0,
            coefficients,
            score: spec.score,
            iou: spec.iou,
            max: spec.max,
            levels: vec![],
        })
    }

    /// Classes the head scores.
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// Keypoints per object.
    pub fn keypoints(&self) -> usize {
        self.keypoints
    }

    /// Anchors of the head.
    pub(super) fn anchors(&self) -> usize {
        self.anchors
    }

    /// Mask coefficients per anchor after the classes (segmentation heads; 0 otherwise).
    pub(super) fn coefficients(&self) -> usize {
        self.coefficients
    }

    /// Floats per result row.
    pub fn width(&self) -> usize {
        DETECTION_FIELDS + 3 * self.keypoints
    }

    /// The result's description: `[1, max, 6 + 3 K]` float32, one block.
    pub(super) fn infer(&self, head: &ValueInfo) -> Result<ValueInfo, String> {
        let expect = match self.format {
            HeadFormat::Yolox => vec![1, self.anchors, 5 + self.classes],
            _ => vec![1, 4 + self.classes + 3 * self.keypoints + self.coefficients, self.anchors],
        };
        if head.shape != expect {
            return Err(format!("the detection stage was built for a head of shape {expect:?}, not {:?}", head.shape));
        }
        Ok(ValueInfo { shape: vec![1, self.max, self.width()], dtype: DType::F32, row_axis: None })
    }

    /// The result rows for one whole head.
    pub(super) fn compute(&self, head: &Tensor) -> Result<Tensor, tch::TchError> {
        let flat = head.f_to_device(Device::Cpu)?.f_to_kind(Kind::Float)?.f_contiguous()?.f_view([-1])?;
        let values = Vec::<f32>::try_from(&flat)?;
        let rows = self.rows(&values);
        Tensor::f_from_slice(&rows)?.f_view([1, self.max as i64, self.width() as i64])
    }

    /// The stage on a head's values in row-major order.
    fn rows(&self, head: &[f32]) -> Vec<f32> {
        let n = self.anchors;
        let mut out = vec![0f32; self.max * self.width()];
        let kept = self.kept(head);
        for (k, row) in kept.iter().zip(out.chunks_exact_mut(self.width())) {
            row[..4].copy_from_slice(&k.bbox);
            row[4] = k.score;
            row[5] = k.class as f32;
            for (j, v) in row[DETECTION_FIELDS..].iter_mut().enumerate() {
                *v = head[(4 + self.classes + j) * n + k.anchor];
            }
        }
        for row in out.chunks_exact_mut(self.width()).skip(kept.len()) {
            row[5] = -1.0;
        }
        out
    }

    /// The kept boxes of a head (row-major values), best first: score threshold, then
    /// class-wise NMS, at most `max`.
    pub(super) fn kept(&self, head: &[f32]) -> Vec<Kept> {
        let n = self.anchors;
        let channels = head.len() / n.max(1);
        let at = |anchor: usize, c: usize| match self.format {
            HeadFormat::Yolox => head[anchor * channels + c],
            _ => head[c * n + anchor],
        };
        let mut candidates: Vec<(usize, f32, usize)> = Vec::new();
        for anchor in 0..n {
            let (mut best, mut class) = (f32::NEG_INFINITY, 0);
            for c in 0..self.classes {
                let s = match self.format {
                    HeadFormat::Yolox => at(anchor, 4) * at(anchor, 5 + c),
                    _ => at(anchor, 4 + c),
                };
                if s > best {
                    (best, class) = (s, c);
                }
            }
            if best > self.score {
                candidates.push((anchor, best, class));
            }
        }
        candidates.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
        let mut kept: Vec<Kept> = Vec::new();
        for (anchor, score, class) in candidates {
            if kept.len() == self.max {
                break;
            }
            let bbox = self.bbox(anchor, &at);
            if kept.iter().any(|k| k.class == class && iou(&k.bbox, &bbox) > self.iou) {
                continue;
            }
            kept.push(Kept { anchor, bbox, score, class });
        }
        kept
    }

    /// `x1, y1, x2, y2` of an anchor's box in input pixels.
    fn bbox(&self, anchor: usize, at: &impl Fn(usize, usize) -> f32) -> [f32; 4] {
        let (cx, cy, w, h) = match self.format {
            HeadFormat::Yolox => {
                let (gx, gy, s) = self.grid_cell(anchor);
                ((at(anchor, 0) + gx) * s, (at(anchor, 1) + gy) * s, at(anchor, 2).exp() * s, at(anchor, 3).exp() * s)
            }
            _ => (at(anchor, 0), at(anchor, 1), at(anchor, 2), at(anchor, 3)),
        };
        [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0]
    }

    /// A YOLOX anchor's grid column, row and stride.
    fn grid_cell(&self, mut anchor: usize) -> (f32, f32, f32) {
        for &(rows, cols, stride) in &self.levels {
            if anchor < rows * cols {
                return ((anchor % cols) as f32, (anchor / cols) as f32, stride as f32);
            }
            anchor -= rows * cols;
        }
        (0.0, 0.0, 0.0)
    }
}

/// Intersection over union of two `x1, y1, x2, y2` boxes (0 for empty unions).
fn iou(a: &[f32; 4], b: &[f32; 4]) -> f32 {
    let w = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let h = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = w * h;
    let union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
    if union > 0.0 { inter / union } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(score: f32, iou: f32, max: usize) -> DetectSpec {
        DetectSpec { score, iou, max, format: HeadFormat::Auto, keypoints: 0 }
    }

    /// A YOLOv8 head `[1, 4 + classes, anchors]` from per-anchor rows `cx, cy, w, h, scores..`.
    fn yolov8(anchors: &[Vec<f32>]) -> (Vec<f32>, ValueInfo) {
        let channels = anchors[0].len();
        let mut v = vec![0f32; channels * anchors.len()];
        for (a, row) in anchors.iter().enumerate() {
            for (c, x) in row.iter().enumerate() {
                v[c * anchors.len() + a] = *x;
            }
        }
        (v, ValueInfo { shape: vec![1, channels, anchors.len()], dtype: DType::F32, row_axis: None })
    }

    #[test]
    fn keeps_the_best_box_per_cluster_and_class_with_stable_ties() {
        // Anchors 0 and 1 overlap heavily (class 0), anchor 2 overlaps them but is class 1,
        // anchor 3 ties anchor 0's score far away, anchor 4 is below the threshold.
        let (head, info) = yolov8(&[
            vec![50.0, 50.0, 20.0, 20.0, 0.9, 0.1],
            vec![51.0, 50.0, 20.0, 20.0, 0.8, 0.1],
            vec![50.0, 51.0, 20.0, 20.0, 0.1, 0.7],
            vec![200.0, 200.0, 10.0, 10.0, 0.9, 0.0],
            vec![300.0, 300.0, 10.0, 10.0, 0.2, 0.2],
            vec![10.0, 10.0, 4.0, 4.0, 0.3, 0.3],
            vec![10.5, 10.5, 4.0, 4.0, 0.6, 0.6],
        ]);
        let d = Detect::new(&spec(0.25, 0.45, 10), &info, None).expect("fits");
        assert_eq!((d.classes(), d.width()), (2, 6));
        let rows = d.rows(&head);
        let got = detections(&rows, 6);
        let summary: Vec<(usize, f32, usize)> = got.iter().map(|g| (g.class, g.score, g.bbox[0] as usize)).collect();
        // Score ties (0.9) go by anchor index; 0.6 ties between classes pick class 0; anchor 5
        // (0.3, class 0) is suppressed by anchor 6, anchor 1 by anchor 0; anchor 2 is another class.
        assert_eq!(summary, vec![(0, 0.9, 40), (0, 0.9, 195), (1, 0.7, 40), (0, 0.6, 8)]);
        assert_eq!(got[0].bbox, [40.0, 40.0, 60.0, 60.0]);
        assert!(rows.chunks_exact(6).skip(4).all(|r| r == [0.0, 0.0, 0.0, 0.0, 0.0, -1.0]));
        // At most `max` rows, the best ones.
        let two = Detect::new(&spec(0.25, 0.45, 2), &info, None).expect("fits");
        assert_eq!(detections(&two.rows(&head), 6).len(), 2);
        // A looser IoU keeps the overlapping box of the same class.
        let loose = Detect::new(&spec(0.25, 0.95, 10), &info, None).expect("fits");
        assert_eq!(detections(&loose.rows(&head), 6).len(), 6);
    }

    #[test]
    fn decodes_yolox_grids_per_stride() {
        // A 64x32 input: levels 8x4, 4x2, 2x1 cells = 32 + 8 + 2 anchors, 5 + 1 channels.
        let info = ValueInfo { shape: vec![1, 42, 6], dtype: DType::F32, row_axis: None };
        let mut head = vec![0f32; 42 * 6];
        // Anchor 33 is level 2 (stride 16), cell (x 1, y 0): offsets 0.5, 0.25, log size 0 and ln 2.
        head[33 * 6..34 * 6].copy_from_slice(&[0.5, 0.25, 0.0, 2f32.ln(), 0.9, 0.5]);
        let d = Detect::new(&spec(0.25, 0.45, 5), &info, Some((64, 32))).expect("fits");
        assert_eq!(d.format, HeadFormat::Yolox);
        let got = detections(&d.rows(&head), 6);
        assert_eq!(got.len(), 1);
        let (cx, cy, w, h) = (1.5 * 16.0, 0.25 * 16.0, 16.0, 32.0);
        let want = [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0];
        assert!(got[0].bbox.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-4), "{:?} vs {want:?}", got[0].bbox);
        assert!((got[0].score - 0.45).abs() < 1e-6);
        let e = Detect::new(&spec(0.25, 0.45, 5), &info, Some((64, 64))).expect_err("wrong grid");
        assert!(e.contains("has 84 anchors") && e.contains("this one has 42"), "{e}");
    }

    #[test]
    fn refuses_heads_that_do_not_fit() {
        let f = |shape: Vec<usize>| ValueInfo { shape, dtype: DType::F32, row_axis: None };
        assert!(Detect::new(&spec(0.25, 0.45, 5), &f(vec![1, 1000]), None).expect_err("rank").contains("[1, channels, anchors]"));
        assert!(Detect::new(&spec(0.25, 0.45, 5), &f(vec![1, 4, 100]), None).expect_err("no class").contains("leave no class"));
        let pose = DetectSpec { keypoints: 17, ..spec(0.25, 0.45, 5) };
        let e = Detect::new(&pose, &f(vec![1, 57, 100]), None).expect_err("bad keypoints");
        assert!(e.contains("not divisible by 3"), "{e}");
        assert!(Detect::new(&pose, &f(vec![1, 56, 100]), None).is_ok());
        let e = Detect::new(&DetectSpec { keypoints: 16, ..pose }, &f(vec![1, 56, 100]), None).expect_err("wrong count");
        assert!(e.contains("keypoints=17 fits it"), "{e}");
    }
}

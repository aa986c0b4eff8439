//! The annotated debug image (`/lop/debug_image`): the input frame with an inference's results
//! drawn on it, for a person watching in rqt or Foxglove. Pure drawing, no ROS calls: the robot's
//! debug outlet (`robot/debug.rs`) decides when one is wanted and publishes it.
//!
//! What is drawn, from the task's messages ([`crate::results::TaskMessages`], so in the frame's
//! own pixels, the letterbox already undone): each detection's box outline with its class name
//! and score above it; each pose's keypoints (those scored at least [`KEYPOINT_MIN_SCORE`]) as
//! discs; `segment-instance`'s instance map tinted over the frame; and in the top-left corner
//! the inference's method, bucket and latency. Colours follow the class (a box, its label, its
//! keypoints and its mask share one).
//!
//! - `canvas`: [`Canvas`], the frame copied into packed `rgb8`.
//! - `draw`: outlines, discs, bitmap-font text, tinted masks.

mod canvas;
pub mod draw;

pub use canvas::Canvas;

use crate::results::TaskMessages;

/// Keypoints scored below this are not drawn (the usual visibility cut of pose models).
pub const KEYPOINT_MIN_SCORE: f32 = 0.5;

/// How strongly an instance mask tints the frame, of 256.
const MASK_ALPHA: u16 = 110;

/// Distinct colours for classes, R G B (a class name picks one by its hash).
const PALETTE: [[u8; 3]; 12] = [
    [255, 56, 56],
    [255, 157, 151],
    [255, 112, 31],
    [255, 178, 29],
    [207, 210, 49],
    [72, 249, 10],
    [26, 147, 52],
    [0, 212, 187],
    [44, 153, 168],
    [0, 194, 255],
    [52, 69, 147],
    [203, 56, 255],
];

/// The colour of class `name` (the same for the same name, every frame).
pub fn class_colour(name: &str) -> [u8; 3] {
    // FNV-1a: stable across runs and processes, unlike std's randomly seeded hasher.
    let h = lop::content_hash::fnv1a(name.as_bytes());
    PALETTE[(h % PALETTE.len() as u64) as usize]
}

/// One detection as drawn: its box in frame pixels and its label.
#[derive(Debug, Clone, PartialEq)]
pub struct Labelled {
    /// Left, top, right, bottom, frame pixels (right and bottom exclusive, as a box's size).
    pub bounds: [f64; 4],
    /// Class name.
    pub class: String,
    /// Score, 0 to 1.
    pub score: f64,
    /// The detection's id (`segment-instance`: its value in the instance map).
    pub id: String,
}

/// Everything drawn on one frame.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Annotations {
    /// Detections.
    pub boxes: Vec<Labelled>,
    /// Each pose's keypoints, `(x, y, score)` in frame pixels, in the order of `boxes`.
    pub keypoints: Vec<Vec<(f64, f64, f32)>>,
    /// The instance map (`segment-instance`): one byte a frame pixel, 0 background, `k` the
    /// detection whose id is `"k"`; with the map's columns and rows.
    pub instances: Option<(u32, u32, Vec<u8>)>,
    /// The corner's line: method, bucket, latency.
    pub caption: String,
}

impl Annotations {
    /// What to draw for task messages `m` (boxes, keypoints, instance map) under `caption`.
    pub fn from_task(m: &TaskMessages, caption: String) -> Annotations {
        let boxes = m.detections.iter().flat_map(|a| &a.detections).map(|d| {
            let (cx, cy, w, h) = (d.bbox.center.position.x, d.bbox.center.position.y, d.bbox.size_x, d.bbox.size_y);
            let top = d.results.first().map(|r| (r.hypothesis.class_id.clone(), r.hypothesis.score));
            let (class, score) = top.unwrap_or_default();
            Labelled { bounds: [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0], class, score, id: d.id.clone() }
        });
        let keypoints =
            m.keypoints.iter().flat_map(|k| &k.objects).map(|o| o.points.iter().map(|p| (p.x, p.y, p.score)).collect()).collect();
        let instances = m.instances.as_ref().map(|img| {
            let data: Vec<u8> = img.data.0.zslices().flat_map(|s| s.as_slice().iter().copied()).collect();
            (img.width, img.height, data)
        });
        Annotations { boxes: boxes.collect(), keypoints, instances, caption }
    }
}

/// The pixel bounds a box is outlined at: `[left, top, right, bottom]` rounded to the nearest
/// pixel, right and bottom inclusive (the last pixel inside the box).
pub fn box_pixels(bounds: [f64; 4]) -> [i64; 4] {
    let r = |v: f64| if v.is_finite() { v.round().clamp(-1e9, 1e9) as i64 } else { 0 };
    [r(bounds[0]), r(bounds[1]), r(bounds[2]) - 1, r(bounds[3]) - 1]
}

/// Lines and text grow with the frame: 1 for frames up to 640 pixels wide, 2 up to 1280, ...
pub fn scale_for(width: u32) -> i64 {
    i64::from(width.div_ceil(640).max(1))
}

/// Draws `a` on `canvas`: masks first (under everything), then boxes, keypoints, labels, and
/// the caption last (on top).
pub fn annotate(canvas: &mut Canvas, a: &Annotations) {
    let s = scale_for(canvas.width);
    let colour_of_id = |id: u8| {
        let id = id.to_string();
        a.boxes.iter().find(|b| b.id == id).map_or([255, 255, 255], |b| class_colour(&b.class))
    };
    if let Some((w, h, ids)) = &a.instances
        && (*w, *h) == (canvas.width, canvas.height)
    {
        draw::tint(canvas, ids, MASK_ALPHA, colour_of_id);
    }
    for b in &a.boxes {
        let [x0, y0, x1, y1] = box_pixels(b.bounds);
        draw::outline(canvas, (x0, y0), (x1, y1), 2 * s, class_colour(&b.class));
    }
    for (points, b) in a.keypoints.iter().zip(a.boxes.iter().map(Some).chain(std::iter::repeat(None))) {
        let colour = b.map_or([255, 255, 255], |b| class_colour(&b.class));
        for &(x, y, _) in points.iter().filter(|p| p.2 >= KEYPOINT_MIN_SCORE) {
            draw::disc(canvas, (x.round() as i64, y.round() as i64), 2 * s, colour);
        }
    }
    for b in &a.boxes {
        let [x0, y0, ..] = box_pixels(b.bounds);
        let label = format!("{} {:.2}", b.class, b.score);
        let (_, h) = draw::text_size(&label, s);
        // Above the box when there is room, else just inside its top.
        let y = if y0 >= h { y0 - h } else { y0 + 2 * s };
        draw::text(canvas, (x0, y), &label, s, [0, 0, 0], class_colour(&b.class));
    }
    if !a.caption.is_empty() {
        draw::text(canvas, (0, 0), &a.caption, s, [255, 255, 255], [0, 0, 0]);
    }
}

/// The corner's line: `method | bucket B MB/s | T ms`, and `fallback` when the robot finished
/// the frame alone.
pub fn caption(method: &str, bucket_mb_s: f64, latency_s: f64, fallback: bool) -> String {
    let fb = if fallback { " | fallback" } else { "" };
    format!("{method} | bucket {bucket_mb_s} MB/s | {:.1} ms{fb}", latency_s * 1e3)
}

#[cfg(test)]
mod tests;

//! The messages users read, built from the back-end stage's output (`model.task`): detections as
//! `vision_msgs/Detection2DArray` with boxes in the input frame's pixels (the letterbox or resize
//! undone), keypoints as `lop_msgs/KeypointsArray`, occupied voxels as a `sensor_msgs/PointCloud2`
//! of voxel centres (x, y, z float32, metres, in the cloud's frame), class maps as a `mono8`
//! `sensor_msgs/Image`, and instance masks (`segment-instance`) as a `mono8` instance-id image in
//! the frame's own pixels (the letterbox undone, nearest pixel): 0 is background, `k` is the
//! detection whose `Detection2D.id` is `"k"`. Pure conversions: no ROS calls here.

use hiroz_msgs::ros::geometry_msgs::PoseWithCovariance;
use hiroz_msgs::ros::sensor_msgs::{Image, PointCloud2, PointField};
use hiroz_msgs::std_msgs::Header as RosHeader;
use lop::postprocess::{Detection, Postprocess, detections, occupied_voxels};
use lop_msgs::ros::msg::{Keypoint, Keypoints, KeypointsArray};
use lop_msgs::ros::vision::{BoundingBox2D, Detection2D, Detection2DArray, ObjectHypothesis, ObjectHypothesisWithPose, Point2D, Pose2D};

use crate::convert::{ImageTarget, VoxelGrid, placement};

/// What one inference publishes besides `InferenceResult`.
#[derive(Debug, Default)]
pub struct TaskMessages {
    /// `detect` and `pose`.
    pub detections: Option<Detection2DArray>,
    /// `pose`.
    pub keypoints: Option<KeypointsArray>,
    /// `occupancy`.
    pub occupancy: Option<PointCloud2>,
    /// `segment`.
    pub segmentation: Option<Image>,
    /// `segment-instance`: the instance-id image (`mono8`, the frame's size).
    pub instances: Option<Image>,
}

/// One output of an inference as the robot reads it: values as floats, row-major, and its shape.
#[derive(Debug, Clone, Copy)]
pub struct OutputView<'a> {
    /// The values.
    pub values: &'a [f32],
    /// The shape.
    pub shape: &'a [usize],
}

/// Where the model's input came from, to map results back into it.
#[derive(Debug, Clone)]
pub enum Source {
    /// A camera frame of this size (columns, rows) fitted to the model's input.
    Frame {
        /// Frame columns.
        width: u32,
        /// Frame rows.
        height: u32,
        /// How it was fitted.
        target: ImageTarget,
    },
    /// A point cloud gridded into voxels.
    Voxels(VoxelGrid),
    /// Anything else (results are published in the model's own coordinates).
    Other,
}

/// The messages of `task` for one output (`values`: the stage's output, row-major, as floats;
/// `shape`: its shape), stamped with the input's `header`. Errors name what did not fit
/// (`segment-instance` has two outputs: [`task_messages_for`]).
pub fn task_messages(
    task: &Postprocess,
    values: &[f32],
    shape: &[usize],
    header: &RosHeader,
    source: &Source,
    class_names: &[String],
) -> Result<TaskMessages, String> {
    task_messages_for(task, &[OutputView { values, shape }], header, source, class_names)
}

/// The messages of `task` for an inference's outputs (the stage's: one, or for
/// `segment-instance` the detections and the instance-id map), stamped with the input's
/// `header`. Errors name what did not fit.
pub fn task_messages_for(
    task: &Postprocess,
    outputs: &[OutputView<'_>],
    header: &RosHeader,
    source: &Source,
    class_names: &[String],
) -> Result<TaskMessages, String> {
    let mut out = TaskMessages::default();
    if let Postprocess::SegmentInstance(_) = task {
        let [rows, map] = outputs else { return Err(format!("segment-instance has two outputs, not {}", outputs.len())) };
        let &[_, _, width] = rows.shape else { return Err(format!("detections of shape {:?}", rows.shape)) };
        let &[_, _, h, w] = map.shape else { return Err(format!("an instance map of shape {:?}", map.shape)) };
        let found = detections(rows.values, width);
        let ids: Vec<u8> = map.values.iter().map(|&v| v as u8).collect();
        let (fw, fh, data) = instances_in_frame(&ids, (h, w), source)?;
        out.detections = Some(detections_msg(&found, header, source, class_names, 1));
        out.instances = Some(Image {
            header: header.clone(),
            height: fh,
            width: fw,
            encoding: "mono8".into(),
            is_bigendian: 0,
            step: fw,
            data: data.into(),
        });
        return Ok(out);
    }
    let Some(&OutputView { values, shape }) = outputs.first() else { return Err("no output".into()) };
    match task {
        Postprocess::Raw | Postprocess::SegmentInstance(_) => {}
        Postprocess::Detect(_) | Postprocess::Pose(_) => {
            let &[_, _, width] = shape else { return Err(format!("detections of shape {shape:?}")) };
            let found = detections(values, width);
            out.detections = Some(detections_msg(&found, header, source, class_names, 0));
            if matches!(task, Postprocess::Pose(_)) {
                out.keypoints = Some(keypoints_msg(&found, header, source));
            }
        }
        Postprocess::Occupancy(_) => {
            let &[_, _, d, h, _] = shape else { return Err(format!("occupancy bits of shape {shape:?}")) };
            let Source::Voxels(grid) = source else { return Err("occupancy needs a voxel grid input (cloud.grid: voxels)".into()) };
            let bits: Vec<u8> = values.iter().map(|&v| v as u8).collect();
            out.occupancy = Some(occupancy_msg(&bits, (d, h), grid, header));
        }
        Postprocess::Segment => {
            let &[_, _, h, w] = shape else { return Err(format!("a class map of shape {shape:?}")) };
            out.segmentation = Some(Image {
                header: header.clone(),
                height: h as u32,
                width: w as u32,
                encoding: "mono8".into(),
                is_bigendian: 0,
                step: w as u32,
                data: values.iter().map(|&v| v as u8).collect::<Vec<u8>>().into(),
            });
        }
    }
    Ok(out)
}

/// Maps model-input pixel coordinates back to the frame's: `(x, y) -> (x', y')`, clamped to it.
/// The frame's placement is computed once per message.
fn to_frame(source: &Source) -> impl Fn(f32, f32) -> (f64, f64) {
    // (left, top, x scale, y scale, width, height); None: model coordinates as they are.
    let fit = match source {
        Source::Frame { width, height, target } => {
            let p = placement(*width, *height, target);
            let (w, h) = (f64::from(*width), f64::from(*height));
            Some((f64::from(p.left), f64::from(p.top), w / f64::from(p.width), h / f64::from(p.height), w, h))
        }
        _ => None,
    };
    move |x, y| match fit {
        Some((left, top, sx, sy, w, h)) => (((f64::from(x) - left) * sx).clamp(0.0, w), ((f64::from(y) - top) * sy).clamp(0.0, h)),
        None => (f64::from(x), f64::from(y)),
    }
}

/// An instance-id map at the model input's size (`(rows, columns)`, row-major bytes) in the
/// frame's own pixels: each frame pixel takes the id of the model pixel its centre maps to
/// through the letterbox or resize (nearest). Returns the frame's columns, rows and bytes; a
/// source other than a camera frame keeps the model's pixels.
///
/// # Errors
/// A map whose size is not the model input's, or a point-cloud source.
pub fn instances_in_frame(ids: &[u8], (h, w): (usize, usize), source: &Source) -> Result<(u32, u32, Vec<u8>), String> {
    if ids.len() != h * w {
        return Err(format!("an instance map of {} bytes is not {h}x{w}", ids.len()));
    }
    let Source::Frame { width, height, target } = source else {
        if let Source::Voxels(_) = source {
            return Err("instance maps need a camera frame input".into());
        }
        let (w32, h32) = (u32::try_from(w).map_err(|e| e.to_string())?, u32::try_from(h).map_err(|e| e.to_string())?);
        return Ok((w32, h32, ids.to_vec()));
    };
    if (target.height as usize, target.width as usize) != (h, w) {
        return Err(format!("an instance map of {h}x{w} for a model input of {}x{}", target.height, target.width));
    }
    let p = placement(*width, *height, target);
    // Frame pixel i's centre (i + 0.5) maps to model coordinate first + (i + 0.5) * span / n,
    // in exact integer arithmetic, kept inside the frame's placement.
    let index = |first: u32, span: u32, n: u32, i: u32| -> usize {
        let off = (u64::from(2 * i + 1) * u64::from(span)) / (2 * u64::from(n));
        (u64::from(first) + off.min(u64::from(span.max(1) - 1))) as usize
    };
    let cols: Vec<usize> = (0..*width).map(|x| index(p.left, p.width, *width, x)).collect();
    let mut data = Vec::with_capacity(*width as usize * *height as usize);
    for y in 0..*height {
        let line = &ids[index(p.top, p.height, *height, y) * w..][..w];
        data.extend(cols.iter().map(|&c| line[c]));
    }
    Ok((*width, *height, data))
}

/// `id_base`: the id of the first detection (`segment-instance`: 1, the instance map's value).
fn detections_msg(found: &[Detection], header: &RosHeader, source: &Source, class_names: &[String], id_base: usize) -> Detection2DArray {
    let map = to_frame(source);
    let detections = found
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let (x1, y1) = map(d.bbox[0], d.bbox[1]);
            let (x2, y2) = map(d.bbox[2], d.bbox[3]);
            let class_id = class_names.get(d.class).cloned().unwrap_or_else(|| d.class.to_string());
            Detection2D {
                header: header.clone(),
                results: vec![ObjectHypothesisWithPose {
                    hypothesis: ObjectHypothesis { class_id, score: f64::from(d.score) },
                    pose: no_pose(),
                }],
                bbox: BoundingBox2D {
                    center: Pose2D { position: Point2D { x: (x1 + x2) / 2.0, y: (y1 + y2) / 2.0 }, theta: 0.0 },
                    size_x: x2 - x1,
                    size_y: y2 - y1,
                },
                id: (i + id_base).to_string(),
            }
        })
        .collect();
    Detection2DArray { header: header.clone(), detections }
}

/// The hypothesis' pose, unused for 2-D boxes: zero position, the identity rotation (the .msg's
/// default `w = 1`, which the generated `Default` leaves at 0) and zero covariance.
fn no_pose() -> PoseWithCovariance {
    let mut pose = PoseWithCovariance::default();
    pose.pose.orientation.w = 1.0;
    pose
}

fn keypoints_msg(found: &[Detection], header: &RosHeader, source: &Source) -> KeypointsArray {
    let map = to_frame(source);
    let objects = found
        .iter()
        .enumerate()
        .map(|(i, d)| Keypoints {
            id: i.to_string(),
            score: f64::from(d.score),
            points: d
                .keypoints
                .iter()
                .map(|k| {
                    let (x, y) = map(k[0], k[1]);
                    Keypoint { x, y, score: k[2] }
                })
                .collect(),
        })
        .collect();
    KeypointsArray { header: header.clone(), objects }
}

/// Voxel centres of the occupied cells: bits `[D, H, ceil(W / 8)]` over a grid of `D` z bins,
/// `H` x rows and `W` y columns spanning the configured ranges (an output grid coarser or finer
/// than the input's spans the same ranges).
fn occupancy_msg(bits: &[u8], (depth, rows): (usize, usize), grid: &VoxelGrid, header: &RosHeader) -> PointCloud2 {
    let cols = grid.cols as usize;
    let cells = occupied_voxels(bits, depth, rows, cols);
    let centre = |(min, max): (f32, f32), n: usize, i: usize| min + (max - min) * (i as f32 + 0.5) / n as f32;
    let mut data = Vec::with_capacity(cells.len() * 12);
    for (d, h, w) in cells.iter().copied() {
        for v in [centre(grid.x_range, rows, h), centre(grid.y_range, cols, w), centre(grid.z_range, depth, d)] {
            data.extend_from_slice(&v.to_le_bytes());
        }
    }
    let field = |name: &str, offset: u32| PointField { name: name.into(), offset, datatype: PointField::FLOAT32, count: 1 };
    PointCloud2 {
        header: header.clone(),
        height: 1,
        width: cells.len() as u32,
        fields: vec![field("x", 0), field("y", 4), field("z", 8)],
        is_bigendian: false,
        point_step: 12,
        row_step: (cells.len() * 12) as u32,
        data: data.into(),
        is_dense: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::{ChannelOrder, Fit};

    fn header() -> RosHeader {
        RosHeader { frame_id: "camera".into(), ..Default::default() }
    }

    /// A 640x480 frame letterboxed into 320x320: scale 0.5, 40 rows of margin on top.
    #[test]
    fn boxes_return_to_frame_pixels_through_the_letterbox() {
        let target = ImageTarget { height: 320, width: 320, channels: 3, order: ChannelOrder::Rgb, fit: Fit::Letterbox { pad: 0 } };
        let source = Source::Frame { width: 640, height: 480, target };
        // One box x 10..30, y 50..90 in model pixels, class 1; then an unused row.
        let rows = [10.0, 50.0, 30.0, 90.0, 0.8, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0];
        let task = Postprocess::parse("detect").expect("spec");
        let names = vec!["person".to_string(), "bicycle".to_string()];
        let m = task_messages(&task, &rows, &[1, 2, 6], &header(), &source, &names).expect("fits");
        let d = m.detections.expect("detections");
        assert_eq!(d.detections.len(), 1);
        let b = &d.detections[0].bbox;
        assert_eq!((b.center.position.x, b.center.position.y, b.size_x, b.size_y), (40.0, 60.0, 40.0, 80.0));
        assert_eq!(d.detections[0].results[0].hypothesis.class_id, "bicycle");
        assert!((d.detections[0].results[0].hypothesis.score - 0.8).abs() < 1e-6);
        assert_eq!(d.header.frame_id, "camera");
        assert_eq!(d.detections[0].results[0].pose.pose.orientation.w, 1.0, "the identity rotation, as the .msg default");
        assert!(m.keypoints.is_none());
        // No detections: an empty array, not nothing.
        let none = task_messages(&task, &rows[6..], &[1, 1, 6], &header(), &source, &[]).expect("fits");
        assert_eq!(none.detections.expect("published").detections.len(), 0);
    }

    /// The instance map of a 640x480 frame letterboxed into 320x320 (scale 0.5, 40 rows of
    /// margin on top and bottom) returns to the frame's 640x480 pixels: a model rectangle
    /// x 10..30, y 50..90 covers frame x 20..60, y 20..100 exactly (frame pixel x reads model
    /// column floor((x + 0.5) / 2), row 40 + floor((y + 0.5) / 2)); the margins never show.
    #[test]
    fn instance_maps_return_to_frame_pixels_through_the_letterbox() {
        let target = ImageTarget { height: 320, width: 320, channels: 3, order: ChannelOrder::Rgb, fit: Fit::Letterbox { pad: 0 } };
        let source = Source::Frame { width: 640, height: 480, target };
        let mut ids = vec![0u8; 320 * 320];
        for y in 50..90 {
            ids[y * 320 + 10..y * 320 + 30].fill(3);
        }
        // The margin rows (0..40 and 280..320) hold an id that must not reach the frame.
        ids[..40 * 320].fill(9);
        ids[280 * 320..].fill(9);
        let (w, h, frame) = instances_in_frame(&ids, (320, 320), &source).expect("fits");
        assert_eq!((w, h, frame.len()), (640, 480, 640 * 480));
        for y in 0..480 {
            for x in 0..640 {
                let want = if (20..60).contains(&x) && (20..100).contains(&y) { 3 } else { 0 };
                assert_eq!(frame[y * 640 + x], want, "frame pixel ({x}, {y})");
            }
        }
        // A stretched frame (resize 320x240 into 160x160): column floor((x + 0.5) / 2), row
        // floor((y + 0.5) * 2 / 3).
        let stretched =
            Source::Frame { width: 320, height: 240, target: ImageTarget { height: 160, width: 160, fit: Fit::Resize, ..target } };
        let model: Vec<u8> = (0..160 * 160).map(|i| ((i / 160) % 7 + (i % 160) % 5) as u8).collect();
        let (w, h, frame) = instances_in_frame(&model, (160, 160), &stretched).expect("fits");
        assert_eq!((w, h), (320, 240));
        for (i, &v) in frame.iter().enumerate() {
            let (x, y) = (i % 320, i / 320);
            assert_eq!(v, model[(2 * y + 1) / 3 * 160 + (2 * x + 1) / 4], "frame pixel ({x}, {y})");
        }
        // Other sources keep the model's pixels; maps of another size are refused.
        assert_eq!(instances_in_frame(&model, (160, 160), &Source::Other).expect("as is"), (160, 160, model.clone()));
        assert!(instances_in_frame(&model, (80, 320), &source).expect_err("size").contains("80x320"));
        assert!(instances_in_frame(&model[1..], (160, 160), &Source::Other).is_err());
    }

    /// `segment-instance`'s two outputs: detections with ids from 1 (the map's values), and the
    /// map as a `mono8` image of the frame's size with the frame's header.
    #[test]
    fn segment_instance_publishes_boxes_and_an_instance_image() {
        let target = ImageTarget { height: 320, width: 320, channels: 3, order: ChannelOrder::Rgb, fit: Fit::Letterbox { pad: 0 } };
        let source = Source::Frame { width: 640, height: 480, target };
        let rows = [10.0, 50.0, 30.0, 90.0, 0.8, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0];
        let mut map = vec![0f32; 320 * 320];
        for y in 50..90 {
            map[y * 320 + 10..y * 320 + 30].fill(1.0);
        }
        let task = Postprocess::parse("segment-instance").expect("spec");
        let outputs = [OutputView { values: &rows, shape: &[1, 2, 6] }, OutputView { values: &map, shape: &[1, 1, 320, 320] }];
        let m = task_messages_for(&task, &outputs, &header(), &source, &[]).expect("fits");
        let d = m.detections.expect("detections");
        assert_eq!(d.detections.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["1"]);
        let b = &d.detections[0].bbox;
        assert_eq!((b.center.position.x, b.center.position.y, b.size_x, b.size_y), (40.0, 60.0, 40.0, 80.0));
        let img = m.instances.expect("instances");
        assert_eq!(
            (img.width, img.height, img.step, img.encoding.as_str(), img.header.frame_id.as_str()),
            (640, 480, 640, "mono8", "camera")
        );
        let bytes: Vec<u8> = img.data.0.zslices().flat_map(|s| s.as_slice().to_vec()).collect();
        assert_eq!(bytes.iter().filter(|&&v| v == 1).count(), 40 * 80);
        assert!(task_messages(&task, &rows, &[1, 2, 6], &header(), &source, &[]).expect_err("one output").contains("two outputs"));
    }

    #[test]
    fn occupied_bits_become_voxel_centres() {
        let grid = VoxelGrid { x_range: (0.0, 4.0), y_range: (-8.0, 8.0), z_range: (0.0, 2.0), rows: 2, cols: 16, depth: 2 };
        // [D=2, H=2, 2 bytes]: voxel (d 1, h 0, w 9) only.
        let mut bits = [0f32; 8];
        bits[4 + 1] = 0b0100_0000 as f32;
        let task = Postprocess::parse("occupancy").expect("spec");
        let m = task_messages(&task, &bits, &[1, 1, 2, 2, 2], &header(), &Source::Voxels(grid), &[]).expect("fits");
        let pc = m.occupancy.expect("cloud");
        assert_eq!((pc.width, pc.point_step, pc.fields.len()), (1, 12, 3));
        let bytes: Vec<u8> = pc.data.0.zslices().flat_map(|s| s.as_slice().to_vec()).collect();
        let xyz: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        assert_eq!(xyz, vec![1.0, 1.5, 1.5]);
    }
}

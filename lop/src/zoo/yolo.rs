//! `yolo_det` and `pose_hr`: YOLOv8-style detectors at camera resolution, the graphs that
//! training frameworks of the YOLOv8 family export (the same structure as
//! `scripts/yolo_style.py`, which the real-model tests check against onnxruntime).
//!
//! Backbone: a strided 3x3 stem, four strided stages of C2f blocks (split the channels in two
//! halves, chain bottlenecks on the second, concat every stage's output), SPPF (three chained 5x5
//! max pools) at stride 32. Neck: a PAN (nearest 2x upsampling and concat top-down, strided convs
//! and concat bottom-up) giving strides 8, 16 and 32. Heads per level: decoupled box (4 x 16 DFL
//! bins) and class branches, plus a keypoint branch for pose. Decoding inside the graph: the
//! levels are flattened into anchors and concatenated, the box bins go through a softmax and a
//! fixed 1x1 convolution (their expectation), distances become centre x, centre y, width, height
//! in input pixels against the anchor grid, classes through a sigmoid; keypoints become x, y in
//! pixels and a visibility score. Everything after the flattening is a barrier (no image rows).
//!
//! - `yolo_det`: YOLOv8n widths, 80 classes, `[1, 3, 640, 640]` u8 in, `[1, 84, 8400]` out.
//! - `pose_hr`: KAPAO's size (about 12 M weights, like its YOLOv5s6 base), 17 keypoints, one
//!   class, `[1, 3, 640, 960]` u8 in, `[1, 56, 12600]` out.
//!
//! Frames enter as bytes and are scaled by 1/255 in the graph, as these detectors expect.

use super::init::{Bias, ConvCfg, Zb};
use crate::error::Result;
use crate::graph::{Graph, NodeId};
use crate::ops::{BinaryOp, Conv, CoordMode, NearestMode, Op, Resize, ResizeMode, SliceAxis, UnaryOp};
use tch::Tensor;

/// DFL bins per box side.
const REG_MAX: usize = 16;
/// Strides of the three detection levels.
const STRIDES: [usize; 3] = [8, 16, 32];

/// The size of one YOLOv8-style net.
#[derive(Debug, Clone, Copy)]
pub(super) struct YoloCfg {
    /// Channels of the stem and the four stages.
    pub widths: [usize; 5],
    /// Bottlenecks in the C2f block of stages 1 to 4.
    pub depths: [usize; 4],
    /// Classes.
    pub classes: usize,
    /// Keypoints per object (0: a plain detector).
    pub keypoints: usize,
}

/// YOLOv8n: 80 classes.
pub(super) const YOLO_DET: YoloCfg = YoloCfg { widths: [16, 32, 64, 128, 256], depths: [1, 2, 2, 1], classes: 80, keypoints: 0 };
/// About KAPAO-S's size: one class (person), 17 keypoints.
pub(super) const POSE_HR: YoloCfg = YoloCfg { widths: [32, 64, 128, 256, 512], depths: [1, 2, 2, 1], classes: 1, keypoints: 17 };

/// Builds the net at input size `size` (height, width; multiples of 32).
pub(super) fn yolo(name: &str, seed: u64, size: &[usize], cfg: YoloCfg) -> Result<(Graph, usize)> {
    let mut b = Zb::new(name, seed);
    let (h, w) = (size[0], size[1]);
    let raw = b.input_u8("images", vec![1, 3, h, w]);
    // x / 255 (a zero mean and unit std leave it at that, bit for bit).
    let x = b.op("scale", Op::NormalizeU8 { mean: vec![0.0; 3], std: vec![1.0; 3] }, &[raw])?;
    let [w0, w1, w2, w3, w4] = cfg.widths;
    let x = conv_silu(&mut b, "model.0", x, w0, 3, 2)?;
    let x = conv_silu(&mut b, "model.1", x, w1, 3, 2)?;
    let x = c2f(&mut b, "model.2", x, w1, cfg.depths[0], true)?;
    let x = conv_silu(&mut b, "model.3", x, w2, 3, 2)?;
    let p3 = c2f(&mut b, "model.4", x, w2, cfg.depths[1], true)?;
    let x = conv_silu(&mut b, "model.5", p3, w3, 3, 2)?;
    let p4 = c2f(&mut b, "model.6", x, w3, cfg.depths[2], true)?;
    let x = conv_silu(&mut b, "model.7", p4, w4, 3, 2)?;
    let x = c2f(&mut b, "model.8", x, w4, cfg.depths[3], true)?;
    let p5 = sppf(&mut b, "model.9", x, w4)?;
    let up = upsample(&mut b, "model.10", p5)?;
    let x = b.concat("model.11", &[up, p4], 1)?;
    let t4 = c2f(&mut b, "model.12", x, w3, 1, false)?;
    let up = upsample(&mut b, "model.13", t4)?;
    let x = b.concat("model.14", &[up, p3], 1)?;
    let n3 = c2f(&mut b, "model.15", x, w2, 1, false)?;
    let x = conv_silu(&mut b, "model.16", n3, w2, 3, 2)?;
    let x = b.concat("model.17", &[x, t4], 1)?;
    let n4 = c2f(&mut b, "model.18", x, w3, 1, false)?;
    let x = conv_silu(&mut b, "model.19", n4, w3, 3, 2)?;
    let x = b.concat("model.20", &[x, p5], 1)?;
    let n5 = c2f(&mut b, "model.21", x, w4, 1, false)?;
    let y = head(&mut b, "model.22", &[n3, n4, n5], cfg)?;
    b.finish(&[y])
}

fn conv_silu(b: &mut Zb, name: &str, x: NodeId, out: usize, k: usize, stride: usize) -> Result<NodeId> {
    let y = b.conv(&format!("{name}.conv"), x, ConvCfg::new(out, k).stride(stride))?;
    b.unary(&format!("{name}.act"), y, UnaryOp::Silu)
}

fn channels(b: &mut Zb, name: &str, x: NodeId, start: usize, end: usize) -> Result<NodeId> {
    b.op(name, Op::Slice(vec![SliceAxis { axis: 1, start, end, step: 1 }]), &[x])
}

/// C2f: a 1x1 conv, split into halves, `n` bottlenecks chained on the second half, concat of
/// all, a 1x1 conv.
fn c2f(b: &mut Zb, name: &str, x: NodeId, out: usize, n: usize, shortcut: bool) -> Result<NodeId> {
    let half = out / 2;
    let y = conv_silu(b, &format!("{name}.cv1"), x, 2 * half, 1, 1)?;
    let mut parts = vec![channels(b, &format!("{name}.split0"), y, 0, half)?, channels(b, &format!("{name}.split1"), y, half, 2 * half)?];
    for i in 0..n {
        let last = parts[parts.len() - 1];
        let p = format!("{name}.m.{i}");
        let z = conv_silu(b, &format!("{p}.cv1"), last, half, 3, 1)?;
        let z = conv_silu(b, &format!("{p}.cv2"), z, half, 3, 1)?;
        parts.push(if shortcut { b.binary(&format!("{p}.add"), BinaryOp::Add, last, z)? } else { z });
    }
    let cat = b.concat(&format!("{name}.cat"), &parts, 1)?;
    conv_silu(b, &format!("{name}.cv2"), cat, out, 1, 1)
}

/// SPPF: three chained 5x5 max pools, concat with their input, a 1x1 conv.
fn sppf(b: &mut Zb, name: &str, x: NodeId, out: usize) -> Result<NodeId> {
    let hidden = b.ch(x) / 2;
    let a = conv_silu(b, &format!("{name}.cv1"), x, hidden, 1, 1)?;
    let p1 = b.max_pool(&format!("{name}.m1"), a, 5, 1, 2, 2)?;
    let p2 = b.max_pool(&format!("{name}.m2"), p1, 5, 1, 2, 2)?;
    let p3 = b.max_pool(&format!("{name}.m3"), p2, 5, 1, 2, 2)?;
    let cat = b.concat(&format!("{name}.cat"), &[a, p1, p2, p3], 1)?;
    conv_silu(b, &format!("{name}.cv2"), cat, out, 1, 1)
}

fn upsample(b: &mut Zb, name: &str, x: NodeId) -> Result<NodeId> {
    let s = b.shape(x);
    let r = Resize {
        mode: ResizeMode::Nearest(NearestMode::Floor),
        coord: CoordMode::Asymmetric,
        out_shape: vec![s[0], s[1], 2 * s[2], 2 * s[3]],
        scales: vec![1.0, 1.0, 2.0, 2.0],
    };
    b.op(name, Op::Resize(r), &[x])
}

/// Two 3x3 conv + SiLU, then a plain 1x1 conv to `out`.
fn branch(b: &mut Zb, name: &str, x: NodeId, hidden: usize, out: usize) -> Result<NodeId> {
    let y = conv_silu(b, &format!("{name}.0"), x, hidden, 3, 1)?;
    let y = conv_silu(b, &format!("{name}.1"), y, hidden, 3, 1)?;
    b.conv(&format!("{name}.2"), y, ConvCfg::new(out, 1).bias(Bias::Plain))
}

/// Anchor points `[1, 2, A]` (cell centres, in cells) and strides `[1, 1, A]` of the levels.
fn anchors(sizes: &[(usize, usize)]) -> (Tensor, Tensor) {
    let (mut xy, mut st) = (Vec::new(), Vec::new());
    let mut ys = Vec::new();
    for (&(h, w), &s) in sizes.iter().zip(&STRIDES) {
        for i in 0..h {
            for j in 0..w {
                xy.push(j as f32 + 0.5);
                ys.push(i as f32 + 0.5);
                st.push(s as f32);
            }
        }
    }
    let a = st.len() as i64;
    xy.extend(ys);
    (Tensor::from_slice(&xy).view([1, 2, a]), Tensor::from_slice(&st).view([1, 1, a]))
}

/// The decoupled heads and the decoding.
fn head(b: &mut Zb, name: &str, feats: &[NodeId], cfg: YoloCfg) -> Result<NodeId> {
    let c0 = b.ch(feats[0]);
    let (c_box, c_cls) = ((c0 / 4).max(4 * REG_MAX).max(16), c0.max(cfg.classes.min(100)));
    let no = 4 * REG_MAX + cfg.classes;
    let mut flat = Vec::new();
    let mut kpts = Vec::new();
    let mut sizes = Vec::new();
    for (i, &f) in feats.iter().enumerate() {
        let s = b.shape(f);
        sizes.push((s[2], s[3]));
        let bx = branch(b, &format!("{name}.cv2.{i}"), f, c_box, 4 * REG_MAX)?;
        let cl = branch(b, &format!("{name}.cv3.{i}"), f, c_cls, cfg.classes)?;
        let cat = b.concat(&format!("{name}.cat.{i}"), &[bx, cl], 1)?;
        flat.push(b.reshape(&format!("{name}.flat.{i}"), cat, vec![1, no, s[2] * s[3]])?);
        if cfg.keypoints > 0 {
            let nk = 3 * cfg.keypoints;
            let kp = branch(b, &format!("{name}.cv4.{i}"), f, (c0 / 4).max(nk), nk)?;
            kpts.push(b.reshape(&format!("{name}.kflat.{i}"), kp, vec![1, nk, s[2] * s[3]])?);
        }
    }
    let a: usize = sizes.iter().map(|(h, w)| h * w).sum();
    let raw = b.concat(&format!("{name}.levels"), &flat, 2)?;
    let bx = channels(b, &format!("{name}.box"), raw, 0, 4 * REG_MAX)?;
    let cl = channels(b, &format!("{name}.cls"), raw, 4 * REG_MAX, no)?;
    let bins = b.reshape(&format!("{name}.dfl.bins"), bx, vec![1, 4, REG_MAX, a])?;
    let bins = b.transpose(&format!("{name}.dfl.transpose"), bins, &[0, 2, 1, 3])?;
    let bins = b.op(&format!("{name}.dfl.softmax"), Op::Softmax { axis: 1 }, &[bins])?;
    let expectation = Tensor::arange(REG_MAX as i64, (tch::Kind::Float, tch::Device::Cpu)).view([1, REG_MAX as i64, 1, 1]);
    let dfl = Conv {
        weight: expectation,
        bias: None,
        strides: vec![1, 1],
        pads_begin: vec![0, 0],
        pads_end: vec![0, 0],
        dilations: vec![1, 1],
        output_padding: vec![0, 0],
        groups: 1,
        packed: None,
        act: None,
    };
    let dist = b.op(&format!("{name}.dfl.conv"), Op::Conv(dfl), &[bins])?;
    let dist = b.reshape(&format!("{name}.dfl.dist"), dist, vec![1, 4, a])?;
    let (points, strides) = anchors(&sizes);
    let points_t = points.shallow_clone();
    let points = b.constant(&format!("{name}.anchors"), points)?;
    let strides_n = b.constant(&format!("{name}.strides"), strides.shallow_clone())?;
    let lt = channels(b, &format!("{name}.lt"), dist, 0, 2)?;
    let rb = channels(b, &format!("{name}.rb"), dist, 2, 4)?;
    let x1y1 = b.binary(&format!("{name}.x1y1"), BinaryOp::Sub, points, lt)?;
    let x2y2 = b.binary(&format!("{name}.x2y2"), BinaryOp::Add, points, rb)?;
    let sum = b.binary(&format!("{name}.sum"), BinaryOp::Add, x1y1, x2y2)?;
    let two = b.constant(&format!("{name}.two"), Tensor::from(2.0f32))?;
    let centre = b.binary(&format!("{name}.centre"), BinaryOp::Div, sum, two)?;
    let wh = b.binary(&format!("{name}.wh"), BinaryOp::Sub, x2y2, x1y1)?;
    let cwh = b.concat(&format!("{name}.cwh"), &[centre, wh], 1)?;
    let boxes = b.binary(&format!("{name}.boxes"), BinaryOp::Mul, cwh, strides_n)?;
    let scores = b.unary(&format!("{name}.scores"), cl, UnaryOp::Sigmoid)?;
    let det = b.concat(&format!("{name}.det"), &[boxes, scores], 1)?;
    if cfg.keypoints == 0 {
        return Ok(det);
    }
    let k = cfg.keypoints;
    let kp = b.concat(&format!("{name}.kpt.levels"), &kpts, 2)?;
    let kp = b.reshape(&format!("{name}.kpt.triplets"), kp, vec![1, k, 3, a])?;
    let xy = b.op(&format!("{name}.kpt.xy"), Op::Slice(vec![SliceAxis { axis: 2, start: 0, end: 2, step: 1 }]), &[kp])?;
    let vis = b.op(&format!("{name}.kpt.vis"), Op::Slice(vec![SliceAxis { axis: 2, start: 2, end: 3, step: 1 }]), &[kp])?;
    let grid = b.constant(&format!("{name}.kpt.grid"), (points_t - 0.5).view([1, 1, 2, a as i64]))?;
    let kstrides = b.constant(&format!("{name}.kpt.strides"), strides.view([1, 1, 1, a as i64]))?;
    let two = b.constant(&format!("{name}.kpt.two"), Tensor::from(2.0f32))?;
    let xy = b.binary(&format!("{name}.kpt.xy2"), BinaryOp::Mul, xy, two)?;
    let xy = b.binary(&format!("{name}.kpt.xyg"), BinaryOp::Add, xy, grid)?;
    let xy = b.binary(&format!("{name}.kpt.xyp"), BinaryOp::Mul, xy, kstrides)?;
    let vis = b.unary(&format!("{name}.kpt.vis.sigmoid"), vis, UnaryOp::Sigmoid)?;
    let kp = b.concat(&format!("{name}.kpt.cat"), &[xy, vis], 2)?;
    let kp = b.reshape(&format!("{name}.kpt.flat"), kp, vec![1, 3 * k, a])?;
    b.concat(&format!("{name}.out"), &[det, kp], 1)
}

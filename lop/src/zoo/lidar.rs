//! `lidar_bev`: a single-stage LiDAR detector over a bird's-eye-view raster, in the style of
//! PointPillars / PIXOR.
//!
//! Input `bev`: f32 `[1, 4, 256, 256]`, one cell per 0.4 m x 0.4 m of ground, channels
//! (occupancy, max height, mean intensity, point density); rows run along the forward axis.
//! Backbone: a 3x3 stem and three strided stages (strides 2, 4, 8). Neck: the stride-8 map is
//! upsampled by a transposed conv, also fed top-down (bilinear resize) into the stride-4 lateral
//! as in an FPN, and the stride-2 map is brought down by a strided conv; the three are
//! concatenated at stride 4. Heads per cell: a 3-class heatmap (car, pedestrian, cyclist) after
//! a sigmoid, and 8 box terms (dx, dy, z, log w, log l, log h, sin yaw, cos yaw). Output
//! `detections`: f32 `[1, 11, 64, 64]`, heatmap channels first.

use super::init::{Bias, ConvCfg, Zb};
use crate::error::Result;
use crate::graph::{Graph, NodeId};
use crate::ops::{BinaryOp, CoordMode, Op, Resize, ResizeMode, UnaryOp};

/// Classes of the heatmap head.
pub(super) const CLASSES: usize = 3;
/// Box regression terms per cell.
pub(super) const BOX_TERMS: usize = 8;
const NECK: usize = 128;

/// (width, convs after the strided one) per backbone stage.
const STAGES: [(usize, usize); 3] = [(64, 2), (128, 3), (256, 3)];

/// The BEV detector.
pub(super) fn lidar_bev(name: &str, seed: u64, size: &[usize]) -> Result<(Graph, usize)> {
    let mut b = Zb::new(name, seed);
    let x = b.input_f32("bev", vec![1, 4, size[0], size[1]]);
    let mut x = b.conv_relu("stem", x, ConvCfg::new(32, 3))?;
    let mut feats = Vec::new();
    for (i, &(w, n)) in STAGES.iter().enumerate() {
        let p = format!("backbone.stage{}", i + 1);
        x = b.conv_relu(&format!("{p}.down"), x, ConvCfg::new(w, 3).stride(2))?;
        for j in 0..n {
            x = b.conv_relu(&format!("{p}.conv{}", j + 1), x, ConvCfg::new(w, 3))?;
        }
        feats.push(x);
    }
    let (c1, c2, c3) = (feats[0], feats[1], feats[2]);
    let cat = neck(&mut b, c1, c2, c3)?;
    let h = b.conv_relu("head.shared", cat, ConvCfg::new(NECK, 3))?;
    let heat = b.conv("head.heatmap", h, ConvCfg::new(CLASSES, 1).bias(Bias::Plain))?;
    let heat = b.unary("head.heatmap.sigmoid", heat, UnaryOp::Sigmoid)?;
    let boxes = b.conv("head.boxes", h, ConvCfg::new(BOX_TERMS, 1).bias(Bias::Plain).gain(0.5))?;
    let y = b.concat("detections", &[heat, boxes], 1)?;
    b.finish(&[y])
}

/// Brings the three backbone maps to stride 4 and concatenates them.
fn neck(b: &mut Zb, c1: NodeId, c2: NodeId, c3: NodeId) -> Result<NodeId> {
    let up3 = b.conv_up("neck.up3", c3, NECK, 2, 2, Bias::FoldedBn)?;
    let up3 = b.relu("neck.up3.relu", up3)?;
    let lat3 = b.conv_relu("neck.lateral3", c3, ConvCfg::new(NECK, 1))?;
    let mut out_shape = b.shape(lat3);
    out_shape[2] *= 2;
    out_shape[3] *= 2;
    let resize = Resize { mode: ResizeMode::Linear, coord: CoordMode::HalfPixel, out_shape, scales: vec![1.0, 1.0, 2.0, 2.0] };
    let td3 = b.op("neck.topdown3", Op::Resize(resize), &[lat3])?;
    let lat2 = b.conv_relu("neck.lateral2", c2, ConvCfg::new(NECK, 1))?;
    let td2 = b.binary("neck.merge2", BinaryOp::Add, lat2, td3)?;
    let down1 = b.conv_relu("neck.down1", c1, ConvCfg::new(NECK, 3).stride(2))?;
    b.concat("neck.concat", &[up3, td2, down1], 1)
}

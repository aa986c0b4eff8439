//! `occupancy3d`: a small 3-d semantic scene completion net over a voxel grid, in the spirit of
//! AGRNav's SCONet: a Conv3d encoder with max pooling, a dilated bottleneck, and a
//! ConvTranspose3d decoder with skip concatenations back to full resolution.
//!
//! Input `voxels`: f32 `[1, 1, 64, 64, 16]` (N, C, X forward, Y left, Z up), 1.0 where a LiDAR
//! point fell; X, the row axis, is cut into bands. Output `occupancy`: f32 logits
//! `[1, 2, 64, 64, 16]` (free, occupied) per voxel.

use super::init::{Bias, ConvCfg, Zb};
use crate::error::Result;
use crate::graph::{Graph, NodeId};

/// Channels at full, half and quarter resolution.
const WIDTHS: [usize; 3] = [16, 32, 64];

fn conv3(b: &mut Zb, name: &str, x: NodeId, out: usize) -> Result<NodeId> {
    b.conv_relu(name, x, ConvCfg::new(out, 3).three_d())
}

/// The occupancy completion net.
pub(super) fn occupancy3d(name: &str, seed: u64, size: &[usize]) -> Result<(Graph, usize)> {
    let mut b = Zb::new(name, seed);
    let x = b.input_f32("voxels", vec![1, 1, size[0], size[1], size[2]]);
    let e1 = conv3(&mut b, "enc1.conv1", x, WIDTHS[0])?;
    let e1 = conv3(&mut b, "enc1.conv2", e1, WIDTHS[0])?;
    let p1 = b.max_pool("enc2.pool", e1, 2, 2, 0, 3)?;
    let e2 = conv3(&mut b, "enc2.conv1", p1, WIDTHS[1])?;
    let e2 = conv3(&mut b, "enc2.conv2", e2, WIDTHS[1])?;
    let p2 = b.max_pool("bottleneck.pool", e2, 2, 2, 0, 3)?;
    let m = conv3(&mut b, "bottleneck.conv1", p2, WIDTHS[2])?;
    // A dilated conv widens the context cheaply, as scene completion needs.
    let m = b.conv_relu("bottleneck.conv2", m, ConvCfg::new(WIDTHS[2], 3).three_d().dilation(2))?;
    let d2 = b.conv_up("dec2.up", m, WIDTHS[1], 2, 3, Bias::FoldedBn)?;
    let d2 = b.relu("dec2.up.relu", d2)?;
    let d2 = b.concat("dec2.skip", &[d2, e2], 1)?;
    let d2 = conv3(&mut b, "dec2.conv", d2, WIDTHS[1])?;
    let d1 = b.conv_up("dec1.up", d2, WIDTHS[0], 2, 3, Bias::FoldedBn)?;
    let d1 = b.relu("dec1.up.relu", d1)?;
    let d1 = b.concat("dec1.skip", &[d1, e1], 1)?;
    let d1 = conv3(&mut b, "dec1.conv", d1, WIDTHS[0])?;
    let y = b.conv("occupancy", d1, ConvCfg::new(2, 1).three_d().bias(Bias::Plain))?;
    b.finish(&[y])
}

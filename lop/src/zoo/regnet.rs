//! RegNetX-400MF (torchvision): a 3x3 stem and four stages of residual bottlenecks whose 3x3 conv
//! is a group conv of group width 16 (bottleneck ratio 1, no squeeze-excitation), batch norms
//! folded into the convs.

use super::init::{ConvCfg, RES_GAIN, Zb};
use crate::error::Result;
use crate::graph::{Graph, NodeId};
use crate::ops::BinaryOp;

/// Stage depths and widths torchvision derives from w_0 = 24, w_a = 24.48, w_m = 2.54, depth 22.
const DEPTHS: [usize; 4] = [1, 2, 7, 12];
const WIDTHS: [usize; 4] = [32, 64, 160, 400];
const GROUP_WIDTH: usize = 16;

/// RegNetX-400MF.
pub(super) fn regnet_x_400mf(name: &str, seed: u64, size: &[usize]) -> Result<(Graph, usize)> {
    let mut b = Zb::new(name, seed);
    let x = b.image_input(size)?;
    let mut x = b.conv_relu("stem", x, ConvCfg::new(32, 3).stride(2))?;
    for (i, (&depth, &w)) in DEPTHS.iter().zip(&WIDTHS).enumerate() {
        for j in 0..depth {
            x = block(&mut b, &format!("block{}.{j}", i + 1), x, w, if j == 0 { 2 } else { 1 })?;
        }
    }
    let y = b.gap_classifier(x, 1000, "fc")?;
    b.finish(&[y])
}

fn block(b: &mut Zb, p: &str, x: NodeId, w: usize, stride: usize) -> Result<NodeId> {
    let cin = b.ch(x);
    let short = if cin != w || stride != 1 { b.conv(&format!("{p}.proj"), x, ConvCfg::new(w, 1).stride(stride))? } else { x };
    let y = b.conv_relu(&format!("{p}.f.a"), x, ConvCfg::new(w, 1))?;
    let y = b.conv_relu(&format!("{p}.f.b"), y, ConvCfg::new(w, 3).stride(stride).groups(w / GROUP_WIDTH))?;
    let y = b.conv(&format!("{p}.f.c"), y, ConvCfg::new(w, 1).gain(RES_GAIN))?;
    let s = b.binary(&format!("{p}.add"), BinaryOp::Add, y, short)?;
    b.relu(&format!("{p}.relu"), s)
}

//! ResNet-18/50/152 (torchvision v1.5: in bottlenecks the stride sits on the 3x3 conv), batch
//! norms folded into the convs.

use super::init::{ConvCfg, RES_GAIN, Zb};
use crate::error::Result;
use crate::graph::{Graph, NodeId};
use crate::ops::BinaryOp;

/// A ResNet with `depths` blocks per stage; `bottleneck` selects 1x1-3x3-1x1 blocks (x4 width)
/// instead of two 3x3 convs.
pub(super) fn resnet(name: &str, seed: u64, size: &[usize], bottleneck: bool, depths: [usize; 4]) -> Result<(Graph, usize)> {
    let mut b = Zb::new(name, seed);
    let x = b.image_input(size)?;
    let x = b.conv_relu("conv1", x, ConvCfg::new(64, 7).stride(2).pad(3))?;
    let mut x = b.max_pool("maxpool", x, 3, 2, 1, 2)?;
    // Keep the summed variance the residual branches add about that of a 16-block net, so
    // ResNet-152's activations stay of order one too.
    let blocks: usize = depths.iter().sum();
    let gain = RES_GAIN * (16.0 / blocks as f64).sqrt().min(1.0);
    for (li, (&n, planes)) in depths.iter().zip([64, 128, 256, 512]).enumerate() {
        for j in 0..n {
            let stride = if j == 0 && li > 0 { 2 } else { 1 };
            let p = format!("layer{}.{j}", li + 1);
            x = if bottleneck {
                bottleneck_block(&mut b, &p, x, planes, stride, gain)?
            } else {
                basic_block(&mut b, &p, x, planes, stride, gain)?
            };
        }
    }
    let y = b.gap_classifier(x, 1000, "fc")?;
    b.finish(&[y])
}

/// The identity, or a strided 1x1 projection when the shape changes.
fn shortcut(b: &mut Zb, p: &str, x: NodeId, out: usize, stride: usize) -> Result<NodeId> {
    if stride == 1 && b.ch(x) == out { Ok(x) } else { b.conv(&format!("{p}.downsample"), x, ConvCfg::new(out, 1).stride(stride)) }
}

fn finish_block(b: &mut Zb, p: &str, branch: NodeId, short: NodeId) -> Result<NodeId> {
    let s = b.binary(&format!("{p}.add"), BinaryOp::Add, branch, short)?;
    b.relu(&format!("{p}.relu"), s)
}

fn basic_block(b: &mut Zb, p: &str, x: NodeId, planes: usize, stride: usize, gain: f64) -> Result<NodeId> {
    let y = b.conv_relu(&format!("{p}.conv1"), x, ConvCfg::new(planes, 3).stride(stride))?;
    let y = b.conv(&format!("{p}.conv2"), y, ConvCfg::new(planes, 3).gain(gain))?;
    let s = shortcut(b, p, x, planes, stride)?;
    finish_block(b, p, y, s)
}

fn bottleneck_block(b: &mut Zb, p: &str, x: NodeId, planes: usize, stride: usize, gain: f64) -> Result<NodeId> {
    let y = b.conv_relu(&format!("{p}.conv1"), x, ConvCfg::new(planes, 1))?;
    let y = b.conv_relu(&format!("{p}.conv2"), y, ConvCfg::new(planes, 3).stride(stride))?;
    let y = b.conv(&format!("{p}.conv3"), y, ConvCfg::new(planes * 4, 1).gain(gain))?;
    let s = shortcut(b, p, x, planes * 4, stride)?;
    finish_block(b, p, y, s)
}

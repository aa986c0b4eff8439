//! ConvNeXt-Tiny (torchvision): a patchify stem, four stages of ConvNeXt blocks (7x7 depthwise
//! conv, per-pixel LayerNorm and a 4x MLP in NHWC, layer scale, residual), LayerNorm2d +
//! strided 2x2 conv downsampling, and a LayerNorm + linear head.

use super::init::{Bias, ConvCfg, Zb};
use crate::error::Result;
use crate::graph::{Graph, NodeId};
use crate::ops::{BinaryOp, Op, UnaryOp};

const DEPTHS: [usize; 4] = [3, 3, 9, 3];
const DIMS: [usize; 4] = [96, 192, 384, 768];
const EPS: f64 = 1e-6;
/// Mean layer scale. torchvision initialises it to 1e-6 for training; a trained network's
/// blocks contribute visibly, so the seeded one does too.
const LAYER_SCALE: f64 = 0.1;

/// ConvNeXt-Tiny.
pub(super) fn convnext_tiny(name: &str, seed: u64, size: &[usize]) -> Result<(Graph, usize)> {
    let mut b = Zb::new(name, seed);
    let x = b.image_input(size)?;
    let x = b.conv("stem.conv", x, ConvCfg::new(DIMS[0], 4).stride(4).pad(0).bias(Bias::Plain))?;
    let mut x = b.layer_norm_2d("stem.norm", x, EPS)?;
    for (i, (&depth, &dim)) in DEPTHS.iter().zip(&DIMS).enumerate() {
        if i > 0 {
            let p = format!("downsample{i}");
            let y = b.layer_norm_2d(&format!("{p}.norm"), x, EPS)?;
            x = b.conv(&format!("{p}.conv"), y, ConvCfg::new(dim, 2).stride(2).pad(0).bias(Bias::Plain))?;
        }
        for j in 0..depth {
            x = block(&mut b, &format!("stage{}.{j}", i + 1), x)?;
        }
    }
    let c = b.ch(x);
    let p = b.op("avgpool", Op::ReduceMean { axes: vec![2, 3], keepdims: true }, &[x])?;
    let f = b.reshape("flatten", p, vec![1, c])?;
    // torchvision applies LayerNorm2d to the pooled [1, C, 1, 1] map: a norm over the C values.
    let n = b.layer_norm("classifier.norm", f, 1, EPS)?;
    let y = b.linear("classifier.fc", n, 1000, 0.5)?;
    b.finish(&[y])
}

fn block(b: &mut Zb, p: &str, x: NodeId) -> Result<NodeId> {
    let c = b.ch(x);
    let y = b.conv(&format!("{p}.dwconv"), x, ConvCfg::new(c, 7).groups(c).bias(Bias::Plain))?;
    let y = b.transpose(&format!("{p}.to_nhwc"), y, &[0, 2, 3, 1])?;
    let y = b.layer_norm(&format!("{p}.norm"), y, 3, EPS)?;
    let y = b.linear(&format!("{p}.fc1"), y, 4 * c, 1.0)?;
    let y = b.unary(&format!("{p}.gelu"), y, UnaryOp::Gelu { tanh: false })?;
    let y = b.linear(&format!("{p}.fc2"), y, c, 1.0)?;
    let gamma = b.tensor(&[c], LAYER_SCALE, LAYER_SCALE / 4.0)?;
    let gamma = b.constant(&format!("{p}.layer_scale"), gamma)?;
    let y = b.binary(&format!("{p}.scale"), BinaryOp::Mul, y, gamma)?;
    let y = b.transpose(&format!("{p}.to_nchw"), y, &[0, 3, 1, 2])?;
    b.binary(&format!("{p}.add"), BinaryOp::Add, y, x)
}

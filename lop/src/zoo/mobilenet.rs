//! MobileNetV2 (torchvision): inverted residual blocks (1x1 expansion, 3x3 depthwise, linear 1x1
//! projection) with ReLU6, batch norms folded into the convs.

use super::init::{ConvCfg, RES_GAIN, Zb};
use crate::error::Result;
use crate::graph::{Graph, NodeId};
use crate::ops::{BinaryOp, UnaryOp};

/// (expansion t, channels c, repeats n, first stride s), as in the paper's table 2.
const SETTINGS: [(usize, usize, usize, usize); 7] =
    [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)];

fn conv_relu6(b: &mut Zb, name: &str, x: NodeId, c: ConvCfg) -> Result<NodeId> {
    let y = b.conv(name, x, c)?;
    b.unary(&format!("{name}.relu6"), y, UnaryOp::Clip { min: 0.0, max: 6.0 })
}

/// MobileNetV2 at width 1.0.
pub(super) fn mobilenet_v2(name: &str, seed: u64, size: &[usize]) -> Result<(Graph, usize)> {
    let mut b = Zb::new(name, seed);
    let x = b.image_input(size)?;
    let mut x = conv_relu6(&mut b, "features.0", x, ConvCfg::new(32, 3).stride(2))?;
    let mut idx = 1;
    for (t, c, n, s) in SETTINGS {
        for j in 0..n {
            x = inverted_residual(&mut b, &format!("features.{idx}"), x, t, c, if j == 0 { s } else { 1 })?;
            idx += 1;
        }
    }
    let x = conv_relu6(&mut b, &format!("features.{idx}"), x, ConvCfg::new(1280, 1))?;
    let y = b.gap_classifier(x, 1000, "classifier")?;
    b.finish(&[y])
}

fn inverted_residual(b: &mut Zb, p: &str, x: NodeId, t: usize, out: usize, stride: usize) -> Result<NodeId> {
    let cin = b.ch(x);
    let hidden = cin * t;
    let y = if t == 1 { x } else { conv_relu6(b, &format!("{p}.expand"), x, ConvCfg::new(hidden, 1))? };
    let y = conv_relu6(b, &format!("{p}.dw"), y, ConvCfg::new(hidden, 3).stride(stride).groups(hidden))?;
    let residual = stride == 1 && cin == out;
    let gain = if residual { RES_GAIN } else { 1.0 };
    let y = b.conv(&format!("{p}.project"), y, ConvCfg::new(out, 1).gain(gain))?;
    if residual { b.binary(&format!("{p}.add"), BinaryOp::Add, y, x) } else { Ok(y) }
}

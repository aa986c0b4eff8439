//! DenseNet-121 (torchvision): dense blocks of pre-activation BN-ReLU-Conv1x1-BN-ReLU-Conv3x3
//! layers whose outputs are concatenated, joined by BN-ReLU-Conv1x1-AvgPool transitions.
//!
//! A pre-activation batch norm feeds a ReLU, not a conv, so it cannot be folded and stays a
//! [`crate::Op::ChannelAffine`]; the batch norm between the 1x1 and the 3x3 conv is folded into the
//! 1x1 conv.

use super::init::{Bias, ConvCfg, Zb};
use crate::error::Result;
use crate::graph::{Graph, NodeId};

const GROWTH: usize = 32;
const BN_SIZE: usize = 4;
const BLOCKS: [usize; 4] = [6, 12, 24, 16];

/// DenseNet-121.
pub(super) fn densenet121(name: &str, seed: u64, size: &[usize]) -> Result<(Graph, usize)> {
    let mut b = Zb::new(name, seed);
    let x = b.image_input(size)?;
    let x = b.conv_relu("conv0", x, ConvCfg::new(64, 7).stride(2).pad(3))?;
    let mut x = b.max_pool("pool0", x, 3, 2, 1, 2)?;
    for (i, &n) in BLOCKS.iter().enumerate() {
        for j in 0..n {
            x = dense_layer(&mut b, &format!("denseblock{}.denselayer{}", i + 1, j + 1), x)?;
        }
        if i + 1 < BLOCKS.len() {
            let p = format!("transition{}", i + 1);
            let half = b.ch(x) / 2;
            let y = b.affine(&format!("{p}.norm"), x)?;
            let y = b.relu(&format!("{p}.relu"), y)?;
            let y = b.conv(&format!("{p}.conv"), y, ConvCfg::new(half, 1).bias(Bias::None))?;
            x = b.avg_pool(&format!("{p}.pool"), y, 2, 2)?;
        }
    }
    let x = b.affine("norm5", x)?;
    let x = b.relu("relu5", x)?;
    let y = b.gap_classifier(x, 1000, "classifier")?;
    b.finish(&[y])
}

/// One dense layer: its 32 new channels appended to `x`. torchvision concatenates the list of
/// all earlier features at each layer; appending to a running concatenation is the same tensor.
fn dense_layer(b: &mut Zb, p: &str, x: NodeId) -> Result<NodeId> {
    let y = b.affine(&format!("{p}.norm1"), x)?;
    let y = b.relu(&format!("{p}.relu1"), y)?;
    let y = b.conv_relu(&format!("{p}.conv1"), y, ConvCfg::new(BN_SIZE * GROWTH, 1))?;
    let y = b.conv(&format!("{p}.conv2"), y, ConvCfg::new(GROWTH, 3).bias(Bias::None))?;
    b.concat(&format!("{p}.concat"), &[x, y], 1)
}

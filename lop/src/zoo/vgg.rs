//! VGG-16 and VGG-19 (torchvision configurations D and E, without batch norm).

use super::init::{Bias, ConvCfg, Zb};
use crate::error::Result;
use crate::graph::Graph;

/// Conv widths per block; every block ends in a 2x2 max pool.
const VGG16: [&[usize]; 5] = [&[64, 64], &[128, 128], &[256, 256, 256], &[512, 512, 512], &[512, 512, 512]];
const VGG19: [&[usize]; 5] = [&[64, 64], &[128, 128], &[256, 256, 256, 256], &[512, 512, 512, 512], &[512, 512, 512, 512]];

/// VGG with `layers` 16 or 19.
pub(super) fn vgg(name: &str, seed: u64, size: &[usize], layers: usize) -> Result<(Graph, usize)> {
    let cfg = if layers == 19 { VGG19 } else { VGG16 };
    let mut b = Zb::new(name, seed);
    let mut x = b.image_input(size)?;
    for (i, widths) in cfg.iter().enumerate() {
        for (j, &w) in widths.iter().enumerate() {
            x = b.conv_relu(&format!("conv{}_{}", i + 1, j + 1), x, ConvCfg::new(w, 3).bias(Bias::Plain))?;
        }
        x = b.max_pool(&format!("pool{}", i + 1), x, 2, 2, 0, 2)?;
    }
    // torchvision's AdaptiveAvgPool2d((7, 7)) is the identity on the 7x7 map of a 224x224 input.
    let flat = b.shape(x).iter().product();
    x = b.reshape("flatten", x, vec![1, flat])?;
    x = b.linear("fc6", x, 4096, 1.0)?;
    x = b.relu("fc6.relu", x)?;
    x = b.linear("fc7", x, 4096, 1.0)?;
    x = b.relu("fc7.relu", x)?;
    x = b.linear("fc8", x, 1000, 0.5)?;
    b.finish(&[x])
}

//! Built-in models with seeded weights.
//!
//! The image models follow torchvision's architectures exactly (layer structure, widths,
//! strides, parameter counts up to batch-norm folding) and take a raw uint8 frame
//! `[1, 3, 224, 224]` that the graph normalises itself, so frames travel as bytes. Batch norms
//! are folded into the preceding conv; those that cannot be folded (pre-activation in DenseNet)
//! are [`crate::Op::ChannelAffine`]. `lidar_bev` and `occupancy3d` are robot-perception nets
//! over a LiDAR bird's-eye-view raster and a voxel grid.
//!
//! Weights are drawn from [`crate::Rng`] with a fixed seed per model (see `init`), so a name
//! always builds bitwise the same graph. They are not trained: outputs are meaningless as
//! predictions but have realistic magnitudes, shapes and costs.

mod convnext;
mod densenet;
mod init;
mod lidar;
mod mobilenet;
mod occupancy;
mod regnet;
mod resnet;
mod vgg;

use crate::error::{Error, Result};
use crate::graph::Graph;

/// Builds a model from its name and weight seed; also returns the number of folded BN channels.
type BuildFn = fn(&str, u64) -> Result<(Graph, usize)>;

/// The registry: name, weight seed, builder.
const MODELS: [(&str, u64, BuildFn); 11] = [
    ("vgg16", 0x5616, |n, s| vgg::vgg(n, s, 16)),
    ("vgg19", 0x5619, |n, s| vgg::vgg(n, s, 19)),
    ("resnet18", 0x2e18, |n, s| resnet::resnet(n, s, false, [2, 2, 2, 2])),
    ("resnet50", 0x2e50, |n, s| resnet::resnet(n, s, true, [3, 4, 6, 3])),
    ("resnet152", 0x2e152, |n, s| resnet::resnet(n, s, true, [3, 8, 36, 3])),
    ("densenet121", 0xde121, densenet::densenet121),
    ("convnext_tiny", 0xc0e7, convnext::convnext_tiny),
    ("mobilenet_v2", 0x30b2, mobilenet::mobilenet_v2),
    ("regnet_x_400mf", 0x4e6400, regnet::regnet_x_400mf),
    ("lidar_bev", 0x11da4, lidar::lidar_bev),
    ("occupancy3d", 0x0cc3d, occupancy::occupancy3d),
];

const NAMES: [&str; 11] = [
    "vgg16",
    "vgg19",
    "resnet18",
    "resnet50",
    "resnet152",
    "densenet121",
    "convnext_tiny",
    "mobilenet_v2",
    "regnet_x_400mf",
    "lidar_bev",
    "occupancy3d",
];

/// Names of the zoo models.
pub fn names() -> &'static [&'static str] {
    &NAMES
}

/// Builds the graph and counts the batch-norm channels folded into convs.
fn build_counted(name: &str) -> Result<(Graph, usize)> {
    match MODELS.iter().find(|(n, _, _)| *n == name) {
        Some((n, seed, f)) => f(n, *seed),
        None => Err(Error::UnknownModel { name: format!("zoo:{name}"), known: known_names() }),
    }
}

/// The zoo's model names as users type them (`zoo:NAME`), comma-separated, for error messages.
pub fn known_names() -> String {
    names().iter().map(|n| format!("zoo:{n}")).collect::<Vec<_>>().join(", ")
}

/// Builds zoo model `name`, with its seeded weights on the CPU.
///
/// # Errors
/// [`Error::UnknownModel`] for an unknown name; libtorch errors while creating weights.
pub fn build(name: &str) -> Result<Graph> {
    build_counted(name).map(|(g, _)| g)
}

/// Number of weight values a graph holds (conv, linear, norm and affine parameters, constants).
pub fn param_count(graph: &Graph) -> usize {
    graph.nodes.iter().flat_map(|n| n.op.weights()).map(|t| t.numel()).sum()
}

#[cfg(test)]
mod tests;

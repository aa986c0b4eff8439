//! Built-in models with seeded weights.
//!
//! The image models follow torchvision's architectures exactly (layer structure, widths,
//! strides, parameter counts up to batch-norm folding) and take a raw uint8 frame
//! `[1, 3, 224, 224]` that the graph normalises itself, so frames travel as bytes. At camera
//! resolution: `yolo_det` (a YOLOv8-style detector, 640x640) and `pose_hr` (a keypoint detector
//! of KAPAO's size, 640x960); `occupancy3d` runs on AGRNav's voxel grid. `zoo:NAME@HxW` builds
//! an image model at another size (a multiple of 32; VGG's classifier fixes it at 224x224),
//! `zoo:occupancy3d@DxHxW` another grid (multiples of 4). Batch norms
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
mod yolo;

use crate::error::{Error, Result};
use crate::graph::Graph;

/// Builds a model from its name, weight seed and input size; also returns the number of folded
/// BN channels.
type BuildFn = fn(&str, u64, &[usize]) -> Result<(Graph, usize)>;

/// How a model's input size may be overridden (`zoo:NAME@HxW`).
#[derive(Debug, Clone, Copy)]
enum Sizes {
    /// Any size whose every dimension is a multiple of `multiple`, for the reason given.
    Multiple(usize, &'static str),
    /// Only the default, for the reason given.
    Fixed(&'static str),
}

/// One zoo model.
struct Entry {
    name: &'static str,
    seed: u64,
    /// The default input size: `[H, W]` for images and BEV grids, `[D, H, W]` for voxel grids.
    size: &'static [usize],
    sizes: Sizes,
    build: BuildFn,
}

const IMAGE: &[usize] = &[224, 224];
const GAP: Sizes = Sizes::Multiple(32, "it downsamples 32x before global pooling");

/// The registry.
const MODELS: [Entry; 13] = [
    Entry { name: "vgg16", seed: 0x5616, size: IMAGE, sizes: VGG, build: |n, s, z| vgg::vgg(n, s, z, 16) },
    Entry { name: "vgg19", seed: 0x5619, size: IMAGE, sizes: VGG, build: |n, s, z| vgg::vgg(n, s, z, 19) },
    Entry { name: "resnet18", seed: 0x2e18, size: IMAGE, sizes: GAP, build: |n, s, z| resnet::resnet(n, s, z, false, [2, 2, 2, 2]) },
    Entry { name: "resnet50", seed: 0x2e50, size: IMAGE, sizes: GAP, build: |n, s, z| resnet::resnet(n, s, z, true, [3, 4, 6, 3]) },
    Entry { name: "resnet152", seed: 0x2e152, size: IMAGE, sizes: GAP, build: |n, s, z| resnet::resnet(n, s, z, true, [3, 8, 36, 3]) },
    Entry { name: "densenet121", seed: 0xde121, size: IMAGE, sizes: GAP, build: densenet::densenet121 },
    Entry { name: "convnext_tiny", seed: 0xc0e7, size: IMAGE, sizes: GAP, build: convnext::convnext_tiny },
    Entry { name: "mobilenet_v2", seed: 0x30b2, size: IMAGE, sizes: GAP, build: mobilenet::mobilenet_v2 },
    Entry { name: "regnet_x_400mf", seed: 0x4e6400, size: IMAGE, sizes: GAP, build: regnet::regnet_x_400mf },
    Entry {
        name: "lidar_bev",
        seed: 0x11da4,
        size: &[256, 256],
        sizes: Sizes::Fixed("its neck resizes to fixed strides of a 256x256 grid"),
        build: lidar::lidar_bev,
    },
    Entry {
        name: "occupancy3d",
        seed: 0x0cc3d,
        size: &[256, 32, 256],
        sizes: Sizes::Multiple(4, "it pools twice by 2 and upsamples back"),
        build: occupancy::occupancy3d,
    },
    Entry {
        name: "yolo_det",
        seed: 0x701d,
        size: &[640, 640],
        sizes: Sizes::Multiple(32, "its deepest level has stride 32"),
        build: |n, s, z| yolo::yolo(n, s, z, yolo::YOLO_DET),
    },
    Entry {
        name: "pose_hr",
        seed: 0x905e,
        size: &[640, 960],
        sizes: Sizes::Multiple(32, "its deepest level has stride 32"),
        build: |n, s, z| yolo::yolo(n, s, z, yolo::POSE_HR),
    },
];

const VGG: Sizes = Sizes::Fixed("its classifier reads a 7x7x512 map");

const NAMES: [&str; 13] = [
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
    "yolo_det",
    "pose_hr",
];

/// Names of the zoo models.
pub fn names() -> &'static [&'static str] {
    &NAMES
}

/// The default input size of zoo model `name` (without `zoo:` or a size), if it exists:
/// `[H, W]` for images and BEV grids, `[D, H, W]` for voxel grids.
pub fn default_size(name: &str) -> Option<&'static [usize]> {
    MODELS.iter().find(|e| e.name == name).map(|e| e.size)
}

/// Splits `NAME@HxW` into the name and the size (`None` without `@`).
///
/// # Errors
/// [`Error::Input`] for a size that is not `A x B [x C]` positive integers.
fn parse_name(spec: &str) -> Result<(&str, Option<Vec<usize>>)> {
    let Some((name, size)) = spec.split_once('@') else { return Ok((spec, None)) };
    let dims: Option<Vec<usize>> = size.split('x').map(|d| d.trim().parse::<usize>().ok().filter(|&d| d > 0)).collect();
    match dims {
        Some(d) => Ok((name, Some(d))),
        None => Err(Error::Input(format!("zoo:{spec}: '{size}' is not a size like 480x640"))),
    }
}

/// Builds the graph and counts the batch-norm channels folded into convs.
fn build_counted(spec: &str) -> Result<(Graph, usize)> {
    let (name, size) = parse_name(spec)?;
    let Some(e) = MODELS.iter().find(|e| e.name == name) else {
        return Err(Error::UnknownModel { name: format!("zoo:{name}"), known: known_names() });
    };
    let show = |d: &[usize]| d.iter().map(usize::to_string).collect::<Vec<_>>().join("x");
    let size = match size {
        None => return (e.build)(e.name, e.seed, e.size),
        Some(s) if s == e.size => return (e.build)(e.name, e.seed, e.size),
        Some(s) => s,
    };
    if size.len() != e.size.len() {
        return Err(Error::Input(format!("zoo:{spec}: {name} takes a size of {} dimensions, like {}", e.size.len(), show(e.size))));
    }
    match e.sizes {
        Sizes::Fixed(why) => Err(Error::Input(format!("zoo:{spec}: {name} is built at {} only: {why}", show(e.size)))),
        Sizes::Multiple(m, why) => {
            if let Some(bad) = size.iter().find(|&&d| d % m != 0) {
                return Err(Error::Input(format!("zoo:{spec}: {bad} is not a multiple of {m}: {why}")));
            }
            let (graph, folded) = (e.build)(&format!("{name}@{}", show(&size)), e.seed, &size)?;
            Ok((graph, folded))
        }
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

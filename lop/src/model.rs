//! Loading a model by name: `zoo:NAME` builds a zoo model, anything else is an ONNX file.

use crate::error::{Error, Result};
use crate::graph::Graph;
pub use crate::onnx::DeclaredInput;
use std::path::Path;

/// Options for [`load`].
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Shape for every graph input whose ONNX shape is dynamic (`--input-shape`).
    pub input_shape: Option<Vec<usize>>,
    /// A front end prepended to a float-input model (`--preprocess`), so that frames enter as
    /// uint8 bytes.
    pub preprocess: Option<crate::preprocess::Preprocess>,
    /// The camera's frame size and how the model fits it (`image.camera`, `--camera`): the
    /// model then takes the camera's frame and letterboxes or resizes it itself, so a camera's
    /// JPEG can cross unchanged at any size. Applied after the preprocess stage.
    pub fit: Option<crate::fit::FrameFit>,
    /// A back end appended after the model's output (`--task`): detections, keypoints, class
    /// maps or occupancy bits instead of raw head tensors.
    pub postprocess: Option<crate::postprocess::Postprocess>,
    /// The memory layout of convolution weights: the side's profile's
    /// ([`crate::profile::Profile::layout`]), so that the model runs as it was measured.
    pub layout: crate::graph::Layout,
    /// Keep every activation a separate op instead of folding ReLU and SiLU into the
    /// convolutions that feed them ([`crate::fuse`]); `LOP_FUSE=off` in the environment does the
    /// same. For comparing fused and unfused runs: both sides of a split must load alike.
    pub unfused: bool,
}

impl LoadOptions {
    /// Whether [`load`] folds activations into convolutions: unless [`LoadOptions::unfused`]
    /// or `LOP_FUSE=off`.
    pub fn fuses(&self) -> bool {
        !self.unfused && std::env::var("LOP_FUSE").map_or(true, |v| v != "off")
    }
}

/// Loads `name`: `zoo:NAME` (see [`crate::zoo::names`]) or a path to a `.onnx` file.
///
/// # Errors
/// [`Error::UnknownModel`] for a name that is neither; import errors for bad files.
pub fn load(name: &str, opts: &LoadOptions) -> Result<Graph> {
    let mut graph = load_graph(name, opts)?;
    if let Some(p) = &opts.preprocess {
        graph = p.apply(graph)?;
    }
    if let Some(f) = &opts.fit {
        graph = f.apply(graph)?;
    }
    if let Some(p) = &opts.postprocess {
        graph = p.apply(graph)?;
    }
    if opts.fuses() {
        graph = crate::fuse::fuse_activations(graph).0;
    }
    if opts.layout != crate::graph::Layout::Nchw {
        graph.set_layout(opts.layout)?;
    }
    Ok(graph)
}

/// The inputs `name` declares, before any shape is fixed: an ONNX file's dynamic dimensions are
/// `None` (callers fill them, e.g. from a camera frame, and pass [`LoadOptions::input_shape`]);
/// a zoo model's are all fixed.
///
/// # Errors
/// As [`load`].
pub fn declared_inputs(name: &str) -> Result<Vec<DeclaredInput>> {
    if name.starts_with("zoo:") {
        let graph = load_graph(name, &LoadOptions::default())?;
        return Ok(graph
            .inputs()
            .into_iter()
            .map(|i| {
                let info = &graph.nodes[i].info;
                DeclaredInput {
                    name: graph.nodes[i].name.clone(),
                    dims: Some(info.shape.iter().map(|&d| Some(d)).collect()),
                    dim_names: info.shape.iter().map(ToString::to_string).collect(),
                    dtype: info.dtype,
                }
            })
            .collect());
    }
    let path = Path::new(name);
    if path.exists() {
        return crate::onnx::declared_inputs_file(path);
    }
    Err(Error::UnknownModel { name: name.to_string(), known: crate::zoo::known_names() })
}

/// A zoo name with the size an input shape asks for (`resnet18` with `[1, 3, 480, 640]` is
/// `resnet18@480x640`): the trailing dimensions are the zoo size; the rest is checked after the
/// build. Names that carry a size already, or unknown names, are kept.
fn sized_zoo_name(zoo_name: &str, input_shape: Option<&[usize]>) -> String {
    let (Some(shape), Some(size)) = (input_shape, crate::zoo::default_size(zoo_name)) else { return zoo_name.to_string() };
    match shape.len().checked_sub(size.len()) {
        Some(lead) if shape[lead..] != *size => {
            format!("{zoo_name}@{}", shape[lead..].iter().map(usize::to_string).collect::<Vec<_>>().join("x"))
        }
        _ => zoo_name.to_string(),
    }
}

fn load_graph(name: &str, opts: &LoadOptions) -> Result<Graph> {
    if let Some(zoo_name) = name.strip_prefix("zoo:") {
        let graph = crate::zoo::build(&sized_zoo_name(zoo_name, opts.input_shape.as_deref()))?;
        if let Some(given) = &opts.input_shape {
            let have: Vec<&Vec<usize>> = graph.inputs().into_iter().map(|i| &graph.nodes[i].info.shape).collect();
            if have.iter().any(|s| *s != given) {
                return Err(Error::Input(format!(
                    "input shape {given:?} does not fit {name}, which takes {:?} (only its size can change, as in zoo:NAME@HxW)",
                    have.first().map_or(&Vec::new(), |s| *s)
                )));
            }
        }
        return Ok(graph);
    }
    let path = Path::new(name);
    if path.exists() {
        let io = crate::onnx::ImportOptions { input_shape: opts.input_shape.clone() };
        return crate::onnx::import_file(path, &io);
    }
    Err(Error::UnknownModel { name: name.to_string(), known: crate::zoo::known_names() })
}

//! Compute-time profiles (DESIGN.md section 5) on the engine: measuring one
//! ([`measure::profile_graph`], the `lop profile` command), the profile of a model with given
//! fits ([`from_fits`]) and the project's synthetic one ([`synthetic`]), a frame codec's price
//! measured on a sample frame ([`with_codec_measured`]), and a cache of measured profiles.
//!
//! The profile's data and checks ([`Profile`], [`Fit`], saving, loading, validating against a
//! model) are `lop_core::profile`'s, re-exported here at their old paths, so that the simulator
//! and the planner read profiles without libtorch.

pub mod cache;
pub mod measure;
pub mod synthetic;

pub use cache::ProfileCache;
pub use lop_core::fit::Fit;
pub use lop_core::profile::{
    DeviceKind, Hardware, LayoutTrial, OpProfile, PROFILE_VERSION, Profile, SLOW_BAND_FACTOR, SLOW_BAND_FLOOR_S, Sample, SlowBand,
};
pub use measure::{LayoutChoice, ProfileOptions, choose_layout, hardware, profile_graph};
pub use synthetic::{SYNTHETIC, SyntheticCosts, synthetic_profile};

use crate::error::{Error, Result};
use crate::graph::{Graph, NodeId};
use crate::plan::Side;

/// The libtorch device of profiles measured on `kind` (CUDA device 0: an edge serving another
/// device measures on the one its graph and inputs are on).
pub fn torch_device(kind: DeviceKind) -> tch::Device {
    match kind {
        DeviceKind::Cpu => tch::Device::Cpu,
        DeviceKind::Cuda => tch::Device::Cuda(0),
    }
}

/// A profile of `graph` with given fits instead of measurements (tests, what-if studies):
/// `fit(id)` is called for every computing node. Hardware is recorded as `synthetic`.
///
/// # Errors
/// When the graph's content hash cannot be computed.
pub fn from_fits(graph: &Graph, role: Side, mut fit: impl FnMut(NodeId) -> Fit) -> Result<Profile> {
    let ops = (0..graph.nodes.len())
        .filter(|&id| graph.is_op(id))
        .map(|id| OpProfile::unmeasured(graph, id, graph.nodes[id].op.kind_name(), fit(id)))
        .collect();
    Ok(Profile::synthetic(&graph.name, graph.content_hash()?, role, ops))
}

/// `profile` with `codec`'s price: as measured, or (when the profile has none) measured now on
/// this machine on [`crate::codec::sample_frame`] of the graph's image input, logged as such.
/// `lop profile --frames` measures it on real frames instead.
///
/// # Errors
/// [`Error::Input`] for a coded frame on a graph whose input is not a uint8 image; codec
/// failures.
pub fn with_codec_measured(mut profile: Profile, codec: crate::codec::FrameCodec, graph: &Graph) -> Result<Profile> {
    if profile.codec_cost(codec).is_some() {
        return Ok(profile);
    }
    let input = graph.inputs().first().map(|&i| graph.nodes[i].info.clone());
    let image = input
        .as_ref()
        .ok_or_else(|| "the model has no input".to_string())
        .and_then(crate::codec::Image::of)
        .map_err(|why| Error::Input(format!("frame codec {codec} needs a uint8 image input: {why}")))?;
    let frame = crate::codec::sample_frame(&image);
    let cost = crate::codec::measure_cost(codec, &image, std::slice::from_ref(&frame), 4, 3)?;
    tracing::warn!(
        %codec,
        role = profile.role.name(),
        ratio = cost.ratio,
        "the profile has no price for the frame codec: measured on a built-in sample frame (measure on real frames with `lop profile --frames`)"
    );
    profile.set_codec_cost(cost);
    Ok(profile)
}

#[cfg(test)]
mod tests;

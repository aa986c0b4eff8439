//! Compute-time profiles (DESIGN.md section 5): per op and side, the measured time of row bands
//! of several sizes and a fitted time-vs-rows model ([`Fit`]), plus what the measurement ran on.
//!
//! The data and its checks live here, so that the simulator and the planner read profiles
//! without libtorch; measuring one (`lop profile`), and the synthetic profile built from a
//! model's weights and shapes, are the engine's (`lop::profile`). A profile is saved as JSON and
//! checked against the model it is applied to by [`Profile::validate`]. The simulator reads
//! compute times only through [`Fit::time`].

use crate::error::{Error, Result};
use crate::fit::Fit;
use crate::frame::{CodecCost, FrameCodec};
use crate::plan::Side;
use crate::structure::{NodeId, Structure};
use crate::value::Layout;
use std::path::Path;

/// Current profile format version.
pub const PROFILE_VERSION: u32 = 1;

/// Where the kernels ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// The CPU.
    Cpu,
    /// A CUDA device: the profile is measured on the one its graph and inputs are on (an edge
    /// serving `cuda:1` measures and synchronises there); the engine's `lop::profile::torch_device`
    /// names device 0.
    Cuda,
}

/// The machine a profile was measured on.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Hardware {
    /// CPU model name (from `/proc/cpuinfo`), or `unknown`.
    pub cpu_model: String,
    /// Logical cores available to the process.
    pub cores: usize,
    /// libtorch version, when it could be found.
    pub libtorch: Option<String>,
    /// CUDA devices visible to libtorch.
    pub cuda_devices: i64,
}

/// One measurement: the median time of a band of `rows` output rows.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    /// Output rows computed.
    pub rows: usize,
    /// Median seconds, multiplied by the profile's dilation (what the simulator uses).
    pub median_s: f64,
    /// Median seconds as measured, before dilation.
    pub raw_median_s: f64,
    /// Timed runs the median is over.
    pub runs: usize,
    /// How many more times this size was timed because its median disagreed with the op's
    /// other sizes (a busy machine); the least median is kept. 0 in older profiles.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retakes: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The timings of one op.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OpProfile {
    /// Node id in the graph.
    pub id: NodeId,
    /// Node name.
    pub name: String,
    /// Op kind.
    pub kind: String,
    /// Output rows of the whole op.
    pub out_rows: usize,
    /// Output bytes per row (link-independent; what a band of this op costs to send).
    pub out_bytes_per_row: usize,
    /// Whether the op can be cut into bands (global ops are measured whole only).
    pub local: bool,
    /// Measurements at several band sizes, ascending rows.
    pub samples: Vec<Sample>,
    /// The fitted model.
    pub fit: Fit,
}

/// A band size of an op that took longer than a larger band of the same op
/// ([`Profile::slow_bands`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SlowBand {
    /// The op's name.
    pub op: String,
    /// Rows of the slow band.
    pub rows: usize,
    /// Its median seconds, as measured (undilated).
    pub seconds: f64,
    /// Rows of the larger band.
    pub more_rows: usize,
    /// Its median seconds, as measured (undilated).
    pub more_seconds: f64,
}

/// A smaller band is slow when it takes this many times a larger band's time...
pub const SLOW_BAND_FACTOR: f64 = 1.5;

/// ...and at least this many more seconds (as measured): below it, timer and cache noise.
pub const SLOW_BAND_FLOOR_S: f64 = 5e-4;

/// Compute-time profile of one model on one side.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Profile {
    /// Format version.
    pub version: u32,
    /// Model name.
    pub model: String,
    /// Content hash of the model (`lop::Graph::content_hash`: its structure and weights).
    pub model_hash: String,
    /// Which side this profile stands for.
    pub role: Side,
    /// Where the kernels ran.
    pub device: DeviceKind,
    /// Factor every measured time was multiplied by (DESIGN.md section 9: a K-times slower
    /// robot emulated on a faster machine); 1 for a real measurement.
    pub dilation: f64,
    /// Whether each timed run was followed by the dilation wait, as the dilated runtime waits
    /// after every chunk (false in profiles written before this field existed, whose dilated
    /// times were measured back to back and under-predict the emulated robot).
    #[serde(default)]
    pub dilation_waits: bool,
    /// libtorch intra-op threads during the measurement.
    pub threads: usize,
    /// Units per op the band sizes were chosen from.
    pub units: usize,
    /// The machine.
    pub hardware: Hardware,
    /// The memory layout the model was measured in, and so the one its side runs it in
    /// (`lop::model::LoadOptions::layout`); NCHW in profiles older than the field.
    #[serde(default)]
    pub layout: Layout,
    /// What choosing the layout measured (empty when it was given, or changes nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layout_trials: Vec<LayoutTrial>,
    /// What each frame codec costs on this side, measured on real frames
    /// (`lop_codec::measure_cost`; `lop profile --frames`): what the simulator prices a
    /// coded frame's input messages with. Empty in profiles that price raw frames only (left
    /// out of their JSON and hash).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub codecs: Vec<CodecCost>,
    /// Per op (every computing node), ascending id.
    pub ops: Vec<OpProfile>,
}

/// What choosing a layout (`lop::profile::choose_layout`) measured: per layout, the model's seconds whole and in 4 bands.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LayoutTrial {
    /// The layout.
    pub layout: Layout,
    /// Every op run whole, summed (median of 3 runs each, back to back, undilated).
    pub whole_s: f64,
    /// Every local op run as 4 bands of a quarter of its rows (global ops whole), summed.
    pub bands_s: f64,
}

impl LayoutTrial {
    /// The score the choice minimises: whole and banded execution weighted alike, as a plan
    /// runs some ops whole and others in bands.
    pub fn score(&self) -> f64 {
        self.whole_s + self.bands_s
    }
}

impl OpProfile {
    /// The entry of `graph`'s node `id` (an op of kind `kind`) with `fit` and no samples.
    pub fn unmeasured(graph: &(impl Structure + ?Sized), id: NodeId, kind: &str, fit: Fit) -> OpProfile {
        let info = graph.node_info(id);
        OpProfile {
            id,
            name: graph.node_name(id).to_string(),
            kind: kind.to_string(),
            out_rows: info.rows(),
            out_bytes_per_row: info.bytes_of_rows(1),
            local: graph.node_locality(id).is_local(),
            samples: vec![],
            fit,
        }
    }
}

impl Profile {
    /// A profile of `model` (content hash `model_hash`) for `role` with the given op entries
    /// instead of measurements (tests, what-if studies, the synthetic profile): CPU, no
    /// dilation, one thread, 8 units, NCHW, hardware recorded as `synthetic`.
    pub fn synthetic(model: &str, model_hash: String, role: Side, ops: Vec<OpProfile>) -> Profile {
        Profile {
            version: PROFILE_VERSION,
            model: model.to_string(),
            model_hash,
            role,
            device: DeviceKind::Cpu,
            dilation: 1.0,
            dilation_waits: false,
            threads: 1,
            units: 8,
            hardware: Hardware { cpu_model: "synthetic".into(), cores: 0, libtorch: None, cuda_devices: 0 },
            layout: Layout::Nchw,
            layout_trials: Vec::new(),
            codecs: Vec::new(),
            ops,
        }
    }

    /// Ops with a band that took at least [`SLOW_BAND_FACTOR`] times (and [`SLOW_BAND_FLOOR_S`]
    /// more than) a larger band of the same op, the worst pair per op, in op order. Either the
    /// backend took a slow path for small bands (libtorch's reference 3-d convolution, ten times
    /// oneDNN's time per row, was one) or the machine was busy while they were timed. The
    /// straight-line fit describes neither, and the planner then avoids cutting the op: worth a
    /// warning that names it.
    pub fn slow_bands(&self) -> Vec<SlowBand> {
        let mut out = Vec::new();
        for op in &self.ops {
            let mut worst: Option<SlowBand> = None;
            for (i, small) in op.samples.iter().enumerate() {
                for large in op.samples[i + 1..].iter().filter(|l| l.rows > small.rows) {
                    let (t, more) = (small.raw_median_s, large.raw_median_s);
                    if t >= SLOW_BAND_FACTOR * more
                        && t - more >= SLOW_BAND_FLOOR_S
                        && worst.as_ref().is_none_or(|w| t / more > w.seconds / w.more_seconds)
                    {
                        worst =
                            Some(SlowBand { op: op.name.clone(), rows: small.rows, seconds: t, more_rows: large.rows, more_seconds: more });
                    }
                }
            }
            out.extend(worst);
        }
        out
    }

    /// Checks the profile's own contents: version, dilation, and every sample and fit finite
    /// and non-negative.
    ///
    /// # Errors
    /// [`Error::ProfileInvalid`] naming the first bad entry.
    pub fn check(&self) -> Result<()> {
        let bad = |node: &str, msg: String| Err(Error::ProfileInvalid { node: node.to_string(), msg });
        if self.version != PROFILE_VERSION {
            return bad("version", format!("profile version {} (this build reads {PROFILE_VERSION})", self.version));
        }
        if !self.dilation.is_finite() || self.dilation <= 0.0 {
            return bad("dilation", format!("dilation {} must be positive", self.dilation));
        }
        for op in &self.ops {
            op.fit.check().map_err(|msg| Error::ProfileInvalid { node: op.name.clone(), msg })?;
            for s in &op.samples {
                if !s.median_s.is_finite() || s.median_s < 0.0 || !s.raw_median_s.is_finite() || s.raw_median_s < 0.0 {
                    return bad(&op.name, format!("time {} s at {} rows", s.median_s, s.rows));
                }
            }
        }
        Ok(())
    }

    /// Checks that the profile fits `graph` (whose content hash, `lop::Graph::content_hash`, is
    /// `graph_hash`): same model, an entry for every computing node (matched by id and name),
    /// sane timings.
    ///
    /// # Errors
    /// [`Error::ProfileModel`], [`Error::ProfileMissingOp`] or [`Error::ProfileInvalid`].
    pub fn validate(&self, graph: &(impl Structure + ?Sized), graph_hash: &str) -> Result<()> {
        if self.model_hash != graph_hash {
            return Err(Error::ProfileModel {
                profile_model: self.model.clone(),
                expected: graph_hash.to_string(),
                found: self.model_hash.clone(),
            });
        }
        self.check()?;
        self.fits(graph).map(|_| ())
    }

    /// The fit of every node, indexed by id (zero for inputs and constants).
    ///
    /// # Errors
    /// [`Error::ProfileMissingOp`] when a computing node has no entry (or one under another
    /// name); [`Error::ProfileInvalid`] for a bad fit.
    pub fn fits(&self, graph: &(impl Structure + ?Sized)) -> Result<Vec<Fit>> {
        let mut out: Vec<Option<Fit>> = vec![None; graph.node_count()];
        for op in &self.ops {
            if let Some(slot) = out.get_mut(op.id)
                && graph.node_name(op.id) == op.name
            {
                op.fit.check().map_err(|msg| Error::ProfileInvalid { node: op.name.clone(), msg })?;
                *slot = Some(op.fit);
            }
        }
        (0..graph.node_count())
            .map(|id| match out[id] {
                Some(f) => Ok(f),
                None if !graph.node_is_op(id) => Ok(Fit::new(0.0, 0.0)),
                None => Err(Error::ProfileMissingOp { node: graph.node_name(id).to_string(), id }),
            })
            .collect()
    }

    /// Content hash (sha256, hex) of the profile: the key a schedule table records. Computed
    /// over the JSON form with every float printed to 9 significant digits, so that a profile
    /// and its saved-and-loaded copy (JSON float parsing may move the last bit) hash alike.
    pub fn hash(&self) -> String {
        crate::content_hash::json_content_hash(self, 9)
    }

    /// Seconds the whole model takes on this side by the profile (every op at its full rows).
    pub fn whole_model_s(&self) -> f64 {
        self.ops.iter().map(|op| op.fit.time(op.out_rows.max(1))).sum()
    }

    /// What `codec` costs on this side, if measured (raw frames cost nothing).
    pub fn codec_cost(&self, codec: FrameCodec) -> Option<CodecCost> {
        if codec == FrameCodec::Raw {
            return Some(CodecCost::raw());
        }
        self.codecs.iter().find(|c| c.codec == codec).copied()
    }

    /// Records `cost`, replacing an earlier measurement of the same codec.
    pub fn set_codec_cost(&mut self, cost: CodecCost) {
        self.codecs.retain(|c| c.codec != cost.codec);
        self.codecs.push(cost);
    }

    /// Writes the profile as pretty JSON.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be written.
    pub fn save(&self, path: &Path) -> Result<()> {
        let json = serde_json::to_string_pretty(self).map_err(|e| Error::Input(format!("serialising profile: {e}")))?;
        std::fs::write(path, json).map_err(|source| Error::Io { path: path.to_path_buf(), source })
    }

    /// Reads a profile and checks its own contents ([`Profile::check`]); check it against the
    /// model with [`Profile::validate`].
    ///
    /// # Errors
    /// [`Error::Io`], [`Error::Malformed`] for bad JSON, or [`Profile::check`]'s errors.
    pub fn load(path: &Path) -> Result<Profile> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
        let p: Profile = serde_json::from_str(&text).map_err(|e| Error::Malformed(format!("profile {}: {e}", path.display())))?;
        p.check()?;
        Ok(p)
    }
}

#[cfg(test)]
mod tests;

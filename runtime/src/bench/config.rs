//! What a benchmark runs ([`BenchConfig`]): the model, the profiles, the table, the trace, the
//! methods and their requests, and how the robot is emulated; with the progress callback's type
//! and the robot id of each method. A leaf of the harness: every run reads it.

use std::path::PathBuf;
use std::time::Duration;

use lop::model::LoadOptions;
use lop::planner::table::TableSpec;
use lop::profile::Profile;
use lop::sim::RobotPower;
use tch::Tensor;

use crate::client::InferenceStats;
use crate::exec::InputWire;
use crate::trace::Trace;

/// What to benchmark.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Model id (for the session) and source (`zoo:NAME` or an ONNX path).
    pub model_id: String,
    /// See `model_id`.
    pub source: String,
    /// Loading options.
    pub load: LoadOptions,
    /// Robot profile (measured with the dilation below).
    pub robot: Profile,
    /// Server profile.
    pub server: Profile,
    /// The schedule table configuration (its bandwidth scale is the trace's scale).
    pub spec: TableSpec,
    /// The link's rate over time, already multiplied by the bandwidth scale (Mbit/s).
    pub trace: Trace,
    /// One-way latency of the link.
    pub latency: Duration,
    /// Methods, by table name: `robot-only`, `server-only`, `layer-partition`, `lop`.
    pub methods: Vec<String>,
    /// Inferences per method.
    pub requests: usize,
    /// Robot dilation.
    pub dilation: f64,
    /// Whether the dilated robot is paced by its profile ([`crate::exec::Stretch::Paced`]): each
    /// robot kernel lasts what `robot` predicts for it, so that this machine's noise, multiplied
    /// by the dilation, does not make the emulated robot another device than the one planned for.
    pub paced: bool,
    /// Untimed inferences per method before its timed ones (first runs allocate, and libtorch
    /// prepares its kernels for each new shape).
    pub warmup: usize,
    /// How the raw input travels.
    pub input_wire: InputWire,
    /// Where schedule tables are cached.
    pub cache_dir: PathBuf,
    /// The robot's power model (modelled energy).
    pub power: RobotPower,
    /// Pause between inferences (0: back to back).
    pub gap: Duration,
    /// Added to each split inference's deadline ([`crate::client::ClientOptions::deadline_slack`]).
    pub deadline_slack: Duration,
    /// Real frames (planar uint8 `[C, H, W]` of the model's image input), used in turn; empty:
    /// one synthetic input. Codecs priced on random pixels would mislead.
    pub frames: Vec<Vec<u8>>,
    /// Under the frame codec `passthrough`: each frame's camera JPEG (`frames` holds their
    /// decodings), sent unchanged; empty otherwise.
    pub cameras: Vec<std::sync::Arc<[u8]>>,
}

/// Called after each inference with the method, the request's index, its statistics and its
/// outputs (to show what the frame's result holds).
pub type Progress<'a> = dyn FnMut(&str, usize, &InferenceStats, &[Tensor]) + 'a;

/// The robot id a benchmark uses for `method` (one per method, so that the edge never confuses
/// the end of one method's session with the next one's).
pub fn robot_id(method: &str) -> String {
    format!("bench-{method}")
}

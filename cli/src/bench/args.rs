//! The command line of `lop bench`: its arguments, how a dilated robot is paced, and which link
//! carries the run.

use std::path::PathBuf;

use lop_runtime::table_config::InputWireSetting;

use crate::ModelArgs;
use crate::plan::Bounds;

/// Arguments of `lop bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Bandwidth trace (CSV `t_s,mbps`, 0.5 s steps), e.g. data/traces/indoor.csv.
    #[arg(long, required_unless_present = "overhead")]
    pub trace: Option<PathBuf>,
    /// The link: the in-process shaped link, or Zenoh over loopback (unshaped: the trace then
    /// only selects the plans). `--netns` implies Zenoh over a shaped veth pair.
    #[arg(long, value_enum, default_value = "inprocess")]
    pub transport: Transport,
    /// Robot and edge in two network namespaces joined by a veth pair shaped with tc from the
    /// trace (root and iproute2 needed); the edge runs as a child process.
    #[arg(long)]
    pub netns: bool,
    /// The edge router's TCP port inside the edge namespace (with --netns).
    #[arg(long, default_value_t = 7447)]
    pub edge_port: u16,
    /// Measure the runtime's overhead instead: on unshaped loopback Zenoh, a bare forward, a raw
    /// ping-pong of the input and output bytes, and server-only through the runtime.
    #[arg(long)]
    pub overhead: bool,
    /// Use the synthetic profiles of the configs' `synthetic` (the robot 8x slower than the
    /// server per byte) instead of measuring: quick, for tests and smoke runs; the simulator's
    /// predictions then do not describe this machine.
    #[arg(long)]
    pub synthetic_profiles: bool,
    /// Methods, comma-separated: robot-only, server-only, layer, lop.
    #[arg(long, default_value = "robot-only,server-only,layer,lop")]
    pub methods: String,
    /// Where the `--task` post-processing stage runs in LOP's plans: auto (each plan places it),
    /// robot (the raw heads come down: what placing it gains) or server. Pinned, only `lop`
    /// runs (the baselines' plans keep their own places): compare with a run without it.
    #[arg(long, value_enum, default_value = "auto")]
    pub post_side: crate::plan::PostSide,
    /// Inferences per method.
    #[arg(long, default_value_t = 20)]
    pub requests: usize,
    /// The robot is this many times slower than this machine (kernels stretched by waiting).
    #[arg(long, default_value_t = 1.0)]
    pub dilation: f64,
    /// How a dilated robot's kernels are stretched: `profile` (each lasts what the robot profile
    /// predicts for it: the emulated robot is its profile, run after run) or `measured` ((K-1)
    /// times its measured duration: this machine's noise is multiplied by K).
    #[arg(long, value_enum, default_value = "profile")]
    pub robot_pace: RobotPace,
    /// Untimed inferences per method before the timed ones (first runs allocate and prepare
    /// kernels).
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Added to each split inference's deadline (3 x its predicted time), milliseconds: past
    /// it the robot answers alone (a fallback). Raise it where latency is not what is measured
    /// (a loaded test machine comparing outputs); the default is the robot's.
    #[arg(long, default_value_t = 250.0)]
    pub deadline_slack_ms: f64,
    /// Multiply the trace by F; `auto` makes the raw input as float32 at the trace's mean rate
    /// take 0.44 x the robot-only compute time (the paper's VGG19 indoor regime).
    #[arg(long, default_value = "auto")]
    pub bandwidth_scale: String,
    /// The realistic scenario: the server GPU's real time for the model, in milliseconds (for
    /// example 4 for YOLOv8n at 640 in PyTorch on an RTX-class card). The run is then slowed by
    /// this CPU's time over it: the trace is read as real Wi-Fi and divided by that factor,
    /// --latency-ms is real and multiplied by it, and --dilation is the robot's slowdown
    /// relative to the server (5 for TensorRT on both, 20 for a Jetson on PyTorch). Excludes
    /// --bandwidth-scale.
    #[arg(long)]
    pub server_real_ms: Option<f64>,
    /// How the raw input crosses the link, for every method alike: native, u8 (an error for a
    /// float model without --preprocess) or f32 (see `lop plan --help`).
    #[arg(long, alias = "input-dtype", default_value = "native")]
    pub input_wire: InputWireSetting,
    /// How the frame's rows cross the link, for every method alike: raw, lossless (QOI per
    /// band), jpeg:Q (the robot encodes at quality Q, 4:4:4; the model's input is the decoded
    /// frame). Needs --frames: codecs are priced on real photographs.
    #[arg(long, default_value = "raw")]
    pub frame_codec: lop::codec::FrameCodec,
    /// Real frames: a photograph (PNG or JPEG) or a folder of them (`scripts/photos.sh` prints
    /// one), or a rosbag2 recording in MCAP storage (a `.mcap` file or the recording's folder),
    /// fitted to the model's input and fed in turn; default: one synthetic input.
    #[arg(long)]
    pub frames: Option<PathBuf>,
    /// The recording's camera topic, sensor_msgs/msg/Image (rgb8, bgr8, rgba8, bgra8, mono8) or
    /// CompressedImage (a camera JPEG, as a .jpg file: passthrough sends it unchanged), read in
    /// the order recorded; optional when the recording has one image topic.
    #[arg(long, requires = "frames")]
    pub frames_topic: Option<String>,
    /// One-way link latency, milliseconds (default: 1 in-process; 0 over Zenoh, where loopback
    /// and a veth add none of their own; with --netns a delay line in userspace adds it).
    #[arg(long)]
    pub latency_ms: Option<f64>,
    /// Schedule table buckets FROM:TO:STEP (MB/s before scaling).
    #[arg(long, default_value = "0:30:1")]
    pub buckets: String,
    /// Where chunks are cut (planner and executor alike).
    #[arg(long, value_enum, default_value = "aligned")]
    pub chunk_bounds: Bounds,
    /// Robot profile (default: measured now with --dilation, cached in --profile-dir).
    #[arg(long)]
    pub robot_profile: Option<PathBuf>,
    /// Server profile (default: measured now, cached in --profile-dir).
    #[arg(long)]
    pub server_profile: Option<PathBuf>,
    /// Where measured profiles are cached (default: the temp dir's lop-profiles).
    #[arg(long)]
    pub profile_dir: Option<PathBuf>,
    /// Memory layout of convolutions in profiles measured here: auto (the faster per side),
    /// nchw or channels_last. Each side runs the model in its profile's layout.
    #[arg(long, default_value = "auto")]
    pub layout: lop::profile::LayoutChoice,
    /// Schedule table cache (default: the temp dir's lop-plan-cache).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Print a line per inference (stderr).
    #[arg(long)]
    pub verbose: bool,
}

/// How `lop bench` stretches a dilated robot's kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RobotPace {
    /// Each kernel lasts what the robot profile predicts for it.
    Profile,
    /// Each kernel is followed by (K-1) times its measured duration.
    Measured,
}

/// The link of `lop bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// The in-process shaped link replaying the trace.
    Inprocess,
    /// Zenoh (router edge, client robot): over loopback, or over the veth pair with --netns.
    Zenoh,
}

//! The `lop` command line over the engine. `main` parses [`Args`] and calls [`run`].
//!
//! ## Layout
//! - [`inspect`]: `lop inspect`, locality statistics.
//! - [`verify`]: `lop verify`, random band layouts against the whole run.
//! - [`run_model`]: `lop run`, one inference from a `.npy` file.
//! - [`bench`]: `lop bench`, every method through the runtime over a bandwidth trace.
//! - [`bench_exec`]: `lop bench-exec`, band-executor overhead and peak memory.
//! - [`profile`]: `lop profile`, per-op compute-time profiles for the simulator.
//! - [`plan`]: `lop plan`, schedule tables (LOSS per bandwidth bucket).
//! - [`simulate`]: `lop simulate`, one plan's simulated timeline as SVG.
//! - [`fleet`]: `lop fleet-sim` (routing policies over a simulated fleet), `lop fleet-cost` and
//!   `lop fleet-watch` (the edges' load reports, live).
//! - [`fleet_rss`]: `lop fleet-rss`, a fleet robot's memory with 1, 3, 10 edges up.
//! - [`frames`]: photographs as frames (`--frames`) and `lop codecs`, every frame codec priced
//!   on them.
//! - [`frame_bytes`]: one picture's bytes as a frame (fitted, or a camera JPEG kept as it is).
//! - [`bag`], [`bag_frames`]: a rosbag2 recording's camera topic as frames (`--frames
//!   recording.mcap --frames-topic T`).
//! - [`certs`]: `lop certs`, a site's CA and certificates for mutual TLS.
//! - [`stream`]: `lop stream`, one robot streaming into a running edge (a load generator).
//! - [`replay`]: `lop replay`, a recording's camera topic played into a running `lop_robot`, its
//!   answers as JSON lines.
#![deny(missing_docs)]

pub mod activations;
pub mod bag;
pub mod bag_frames;
pub mod bench;
pub mod bench_batch;
pub mod bench_edge;
pub mod bench_exec;
pub mod camera_frames;
pub mod certs;
pub mod fleet;
pub mod fleet_rss;
pub mod frame_bytes;
pub mod frames;
pub mod inspect;
pub mod plan;
pub mod power;
pub mod profile;
pub mod replay;
pub mod run_model;
pub mod scenario;
pub mod simulate;
pub mod stream;
pub mod verify;

use clap::{Parser, Subcommand};

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(name = "lop", version, about = "Exact local-operator parallelism: split CNN inference between a robot and an edge server")]
pub struct Args {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
    /// libtorch intra-op threads (default: libtorch's choice).
    #[arg(long, global = true)]
    pub threads: Option<i32>,
}

/// Model selection shared by every command.
#[derive(Debug, clap::Args)]
pub struct ModelArgs {
    /// `zoo:NAME` or a path to an `.onnx` file.
    pub model: String,
    /// Input shape for models with dynamic input dimensions, e.g. `1,3,416,416`.
    #[arg(long, value_parser = parse_shape)]
    pub input_shape: Option<Dims>,
    /// A front end for a float-input model, so that camera frames cross the link as bytes:
    /// `unit` (x/255), `raw` (0..255), `imagenet`, or `mean=R,G,B;std=R,G,B`; add `;bgr` for
    /// models trained on BGR.
    #[arg(long, value_parser = parse_preprocess)]
    pub preprocess: Option<lop::preprocess::Preprocess>,
    /// A back end after the model's output, so that results, not raw heads, are what the plan
    /// returns: `detect`, `pose`, `segment`, `occupancy` or `raw`, with `;key=value` options
    /// (`detect;score=0.25;iou=0.45;max=300;format=auto|yolov8|yolox`, `pose;keypoints=17`,
    /// `occupancy;threshold=0.5;class=1`).
    #[arg(long, value_parser = parse_task)]
    pub task: Option<lop::postprocess::Postprocess>,
    /// The model fits the camera's frame itself (as `lop_robot`'s `image.camera_size` and the
    /// edge's `models[].camera_fits`): `letterbox@WxH`, `letterbox:PAD@WxH` or `resize@WxH`,
    /// with the camera's width and height. The model then takes frames at that size, so that
    /// `--frame-codec passthrough` sends the camera's JPEG unchanged.
    #[arg(long, value_parser = parse_fit)]
    pub camera_fit: Option<lop::fit::FrameFit>,
}

fn parse_fit(s: &str) -> Result<lop::fit::FrameFit, String> {
    lop::fit::FrameFit::parse(s).map_err(|e| e.to_string())
}

fn parse_task(s: &str) -> Result<lop::postprocess::Postprocess, String> {
    lop::postprocess::Postprocess::parse(s).map_err(|e| e.to_string())
}

fn parse_preprocess(s: &str) -> Result<lop::preprocess::Preprocess, String> {
    lop::preprocess::Preprocess::parse(s).map_err(|e| e.to_string())
}

/// A whole shape given as one value (`1,3,416,416`). An alias, so that clap's derive takes it as
/// one value of this type: spelled `Option<Vec<usize>>`, clap reads it as a list of `usize`
/// values and panics on the parser's type.
pub type Dims = Vec<usize>;

impl ModelArgs {
    /// Loads the model.
    ///
    /// # Errors
    /// Unknown names, unreadable or unsupported models.
    pub fn load(&self) -> anyhow::Result<lop::Graph> {
        use anyhow::Context;
        lop::model::load(&self.model, &self.load_options()).with_context(|| format!("loading model '{}'", self.model))
    }

    /// The options [`ModelArgs::load`] loads with.
    pub fn load_options(&self) -> lop::model::LoadOptions {
        lop::model::LoadOptions {
            input_shape: self.input_shape.clone(),
            preprocess: self.preprocess.clone(),
            postprocess: self.task.clone(),
            fit: self.camera_fit,
            ..Default::default()
        }
    }
}

fn parse_shape(s: &str) -> Result<Vec<usize>, String> {
    let dims: Result<Vec<usize>, _> = s.split(',').map(|d| d.trim().parse::<usize>()).collect();
    match dims {
        Ok(d) if !d.is_empty() && !d.contains(&0) => Ok(d),
        _ => Err(format!("'{s}' is not a shape like 1,3,224,224 (positive integers)")),
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Op counts by locality class.
    Inspect(inspect::InspectArgs),
    /// Execute random band layouts and compare with the unsplit run.
    Verify(verify::VerifyArgs),
    /// Run one inference on a `.npy` input.
    Run(run_model::RunArgs),
    /// Every method through the runtime (executor, edge, client) over a bandwidth trace.
    Bench(bench::BenchArgs),
    /// The edge process of `lop bench --netns` (started by it inside the edge namespace).
    #[command(hide = true)]
    BenchEdge(bench_edge::BenchEdgeArgs),
    /// Overhead of the band executor against a plain whole-graph run.
    BenchExec(bench_exec::BenchArgs),
    /// What batching across robots gains: B inferences' server side as one batch against one by one.
    BenchBatch(bench_batch::BenchBatchArgs),
    /// Sample a power source (Jetson rails, tegrastats, NVML, RAPL, or the power model).
    Power(power::PowerArgs),
    /// Measure per-op compute times at several band sizes and write a profile.
    Profile(profile::ProfileArgs),
    /// Build a schedule table: one LOSS plan per bandwidth bucket.
    Plan(plan::PlanArgs),
    /// Simulate one method's plan on one link; draw its timeline.
    Simulate(simulate::SimulateArgs),
    /// Simulate a fleet of robots and edge servers under every routing policy, side by side.
    FleetSim(fleet::FleetSimArgs),
    /// One model's fleet price list (frame bytes, server and robot seconds) from its profiles.
    FleetCost(fleet::FleetCostArgs),
    /// Watch the fleet as a robot sees it: every edge's load reports, once a second.
    FleetWatch(fleet::FleetWatchArgs),
    /// A fleet robot's memory (VmRSS, VmHWM) with 1, 3, 10 edges up: its edge sessions share one model.
    FleetRss(fleet_rss::FleetRssArgs),
    /// Price every frame codec on photographs: bytes against raw, encode and decode time.
    Codecs(frames::CodecsArgs),
    /// Write photographs as a camera's JPEGs (4:2:0, as drivers write them), for `lop bench
    /// --frame-codec passthrough --frames`.
    CameraJpegs(camera_frames::CameraJpegsArgs),
    /// Make a site's CA and the certificates of its edges and robots (mutual TLS).
    Certs(certs::CertsArgs),
    /// Stream frames into a running edge as one robot at a camera's rate, a JSON line per frame
    /// (a load generator for an edge).
    Stream(stream::StreamArgs),
    /// Play a rosbag2 recording's camera topic into a running lop_robot (at the recorded rate, or
    /// as fast as it answers), a JSON line of its answer per frame.
    Replay(replay::ReplayArgs),
}

/// Runs a parsed command; returns the process exit code.
///
/// # Errors
/// Any failure, with context; `main` prints it and exits 2.
pub fn run(args: Args) -> anyhow::Result<i32> {
    if let Some(n) = args.threads {
        anyhow::ensure!(n > 0, "--threads {n}: must be at least 1");
        tch::set_num_threads(n);
    }
    match args.command {
        Command::Inspect(a) => inspect::run(&a),
        Command::Verify(a) => verify::run(&a),
        Command::Run(a) => run_model::run(&a),
        Command::Bench(a) => bench::run(&a, args.threads),
        Command::BenchEdge(a) => bench_edge::run(&a),
        Command::BenchExec(a) => bench_exec::run(&a),
        Command::BenchBatch(a) => bench_batch::run(&a),
        Command::Power(a) => power::run(&a),
        Command::Profile(a) => profile::run(&a, args.threads),
        Command::Plan(a) => plan::run(&a, args.threads),
        Command::Simulate(a) => simulate::run(&a),
        Command::FleetSim(a) => fleet::run_sim(&a),
        Command::FleetCost(a) => fleet::run_cost(&a),
        Command::FleetWatch(a) => fleet::run_watch(&a),
        Command::FleetRss(a) => fleet_rss::run(&a, args.threads),
        Command::Certs(a) => certs::run(&a),
        Command::Stream(a) => stream::run(&a),
        Command::Replay(a) => replay::run(&a),
        Command::Codecs(a) => frames::run_codecs(&a),
        Command::CameraJpegs(a) => camera_frames::run_camera_jpegs(&a),
    }
}

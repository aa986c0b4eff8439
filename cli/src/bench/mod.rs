//! `lop bench`: every method over the same bandwidth trace in one run, through the real
//! runtime (executor, edge service, robot client), over one of three links:
//!
//! - `--transport inprocess` (default): the in-process shaped link replaying the trace;
//! - `--transport zenoh`: Zenoh over unshaped loopback (the trace only selects the plans);
//! - `--netns`: Zenoh between two network namespaces over a veth pair shaped by `tc` from the
//!   trace, the edge a child process (`lop bench-edge`, see [`crate::bench_edge`]).
//!
//! `--overhead` measures the runtime's own cost instead (see
//! [`lop_runtime::bench::run_overhead`]).
//!
//! The frame codec's part (`--frame-codec`, `--frames`: camera JPEGs, the codec's effect on the
//! output, its price in both profiles) lives in `bench/codec.rs`.
//!
//! # Files
//!
//! - `args.rs`: the command line ([`BenchArgs`], [`RobotPace`], [`Transport`]);
//! - `profiles.rs`: the robot's and the server's profiles, loaded, synthetic or measured;
//! - `config.rs`: the options checked and the benchmark's configuration (scenario, table);
//! - `methods.rs`: running the methods over the chosen link, and checking their outputs;
//! - `overhead.rs`: `--overhead`, the runtime's own cost;
//! - `report.rs`: the results printed, as a table or as JSON;
//! - `codec.rs`: the frame codec's part.

use anyhow::Context;
use lop_runtime::trace::Trace;

mod args;
mod codec;
mod config;
mod methods;
mod overhead;
mod profiles;
mod report;

pub use args::{BenchArgs, RobotPace, Transport};
pub use codec::{CameraBytes, camera_frames, codec_effect, measure_codec, price_codec};
use config::{check_options, configure};
use methods::{Run, check_outputs, run_methods};
use overhead::measure_overhead;
use report::print_report;

/// The table name of a method given on the command line.
fn method_name(m: &str) -> anyhow::Result<&'static str> {
    Ok(match m.trim() {
        "robot-only" => "robot-only",
        "server-only" => "server-only",
        "layer" | "layer-partition" => "layer-partition",
        "lop" => "lop",
        other => anyhow::bail!("unknown method '{other}' (robot-only, server-only, layer, lop)"),
    })
}

/// Runs the benchmark and prints the results.
///
/// # Errors
/// Bad options, unreadable trace or profiles, runtime failures.
pub fn run(args: &BenchArgs, threads: Option<i32>) -> anyhow::Result<i32> {
    let (transport, latency_ms) = check_options(args)?;
    let methods: Vec<&str> = args.methods.split(',').map(method_name).collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(!methods.is_empty(), "--methods is empty");
    // Robot and server share this machine's cores: one libtorch thread each unless told otherwise.
    if threads.is_none() {
        tch::set_num_threads(1);
    }
    let trace = match &args.trace {
        Some(path) => Trace::load(path).with_context(|| format!("trace {}", path.display()))?,
        None => Trace::constant(1000.0)?,
    };
    let (cfg, scenario, scenario_line, codec_effect) = configure(args, &methods, &trace, latency_ms)?;
    let (scale, latency_ms) = (scenario.bandwidth_scale, scenario.latency_ms);
    if args.overhead {
        return measure_overhead(args, &cfg);
    }
    let mut run = Run { transport: "inprocess", link: String::new(), latency_ms, netns: None, edge: None, scenario, scenario_line };
    let reports = run_methods(args, &cfg, transport, threads, &mut run)?;
    print_report(args, &cfg, scale, &run, &reports, codec_effect)?;
    check_outputs(&reports)?;
    Ok(0)
}

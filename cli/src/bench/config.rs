//! The benchmark's configuration: the options that need no model checked, then the model loaded,
//! its profiles, frames and codec priced, the scenario resolved and the schedule table specified.

use std::time::Duration;

use anyhow::Context;
use lop::planner::PlannerConfig;
use lop::planner::table::TableSpec;
use lop::profile::Profile;
use lop_runtime::bench::BenchConfig;
use lop_runtime::trace::Trace;

use super::args::{BenchArgs, RobotPace, Transport};
use super::codec::{camera_frames, codec_effect, price_codec};
use super::profiles::profiles;
use crate::plan::parse_buckets;
use crate::scenario::{self, ScenarioRequest};

/// Checks the options that need no model (requests, dilation, the link); returns the transport
/// (Zenoh with `--netns`) and the one-way latency asked for, in milliseconds.
pub(super) fn check_options(args: &BenchArgs) -> anyhow::Result<(Transport, f64)> {
    anyhow::ensure!(args.requests >= 1, "--requests must be at least 1");
    anyhow::ensure!(args.dilation.is_finite() && args.dilation >= 1.0, "--dilation must be >= 1");
    let transport = if args.netns || args.transport == Transport::Zenoh { Transport::Zenoh } else { Transport::Inprocess };
    let latency_ms = args.latency_ms.unwrap_or(if transport == Transport::Inprocess && !args.overhead { 1.0 } else { 0.0 });
    anyhow::ensure!(latency_ms.is_finite() && latency_ms >= 0.0, "--latency-ms must be >= 0");
    if latency_ms > 0.0 && (args.overhead || (transport == Transport::Zenoh && !args.netns)) {
        anyhow::bail!("--latency-ms {latency_ms}: Zenoh over loopback cannot add latency (use the in-process link, or --netns)");
    }
    if args.netns {
        lop_runtime::netns::NetnsLink::is_available().map_err(|e| anyhow::anyhow!("--netns is unusable here: {e}"))?;
    }
    Ok((transport, latency_ms))
}

/// The benchmark's configuration: the model loaded and checked, its profiles, its frames and
/// their codec priced, the scenario resolved (and printed), the table's specification. Returns
/// it with the scenario, the scenario's line and the codec's effect on the output.
pub(super) fn configure(
    args: &BenchArgs,
    methods: &[&str],
    trace: &Trace,
    latency_ms: f64,
) -> anyhow::Result<(BenchConfig, scenario::Scenario, String, Option<f64>)> {
    // Checked before the model and its profiles load: a bad number fails at once.
    let deadline_slack = deadline_slack(args.deadline_slack_ms)?;
    let mut graph = args.model.load()?;
    args.input_wire.check(&graph)?;
    args.post_side.check(&graph)?;
    if let Some(side) = args.post_side.side() {
        anyhow::ensure!(methods == ["lop"], "--post-side {} pins LOP's plans only: run it with --methods lop", side.name());
    }
    let (mut robot, mut server) = profiles(args, &mut graph)?;
    let (frames, cameras) = if args.frame_codec == lop::codec::FrameCodec::Passthrough {
        camera_frames(&graph, args.frames.as_deref(), args.frames_topic.as_deref())?
    } else {
        (crate::frames::real_frames(&graph, args.frames.as_deref(), args.frames_topic.as_deref())?, Vec::new())
    };
    price_codec(args.frame_codec, &graph, &frames, &cameras, &mut robot, &mut server)?;
    let codec_effect = codec_effect(args.frame_codec, &graph, &frames)?;
    let scenario = scenario::resolve(scenario_request(args)?, &graph, &robot, &server, trace, latency_ms, args.dilation)?;
    let scenario_line = scenario.describe(trace);
    eprintln!("{scenario_line}");
    let (scale, latency_ms) = (scenario.bandwidth_scale, scenario.latency_ms);
    let spec = table_spec(args, scale, latency_ms, &robot, &server)?;
    let cfg = BenchConfig {
        model_id: graph.name.replace(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'), "_"),
        source: args.model.model.clone(),
        load: args.model.load_options(),
        robot,
        server,
        spec,
        trace: trace.clone().scaled(scale)?,
        latency: Duration::from_secs_f64(latency_ms / 1e3),
        methods: methods.iter().map(|m| m.to_string()).collect(),
        requests: args.requests,
        dilation: args.dilation,
        paced: args.robot_pace == RobotPace::Profile,
        warmup: args.warmup,
        input_wire: args.input_wire.wire(),
        cache_dir: args.cache_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("lop-plan-cache")),
        power: Default::default(),
        gap: Duration::ZERO,
        deadline_slack,
        frames,
        cameras,
    };
    Ok((cfg, scenario, scenario_line, codec_effect))
}

/// `--deadline-slack-ms` as a duration: finite, from 0 to an hour.
fn deadline_slack(ms: f64) -> anyhow::Result<Duration> {
    anyhow::ensure!((0.0..=3.6e6).contains(&ms), "--deadline-slack-ms {ms}: must be in [0, 3600000]");
    Ok(Duration::from_secs_f64(ms / 1e3))
}

/// What `--bandwidth-scale` and `--server-real-ms` ask of the scenario (the overhead run keeps
/// the trace as it is).
fn scenario_request(args: &BenchArgs) -> anyhow::Result<ScenarioRequest> {
    Ok(match (args.bandwidth_scale.as_str(), args.server_real_ms) {
        _ if args.overhead => ScenarioRequest::Scale(1.0),
        ("auto", Some(ms)) => ScenarioRequest::Realistic { server_real_ms: ms },
        (v, Some(_)) => anyhow::bail!("--server-real-ms sets the link's scale itself: drop --bandwidth-scale {v}"),
        ("auto", None) => ScenarioRequest::Auto,
        (v, None) => ScenarioRequest::Scale(
            v.parse::<f64>().ok().filter(|f| f.is_finite() && *f > 0.0).with_context(|| format!("--bandwidth-scale '{v}'"))?,
        ),
    })
}

/// The schedule table's specification for the scenario's link (`scale`, `latency_ms`).
fn table_spec(args: &BenchArgs, scale: f64, latency_ms: f64, robot: &Profile, server: &Profile) -> anyhow::Result<TableSpec> {
    Ok(TableSpec {
        // The overhead run uses the plans of the fastest bucket only.
        buckets: match parse_buckets(&args.buckets)? {
            b if args.overhead => b.last().map(|&v| vec![v]).unwrap_or(b),
            b => b,
        },
        bandwidth_scale: scale,
        latency_s: latency_ms / 1e3,
        overhead_s: 0.0,
        input_bytes_per_element: args.input_wire.bytes_per_element(),
        objective: lop::sim::Objective::Latency,
        power: Default::default(),
        planner: PlannerConfig::default(),
        chunk_order: lop::sim::ChunkOrder::Wavefront,
        chunk_bounds: args.chunk_bounds.chunk_bounds(),
        post_side: args.post_side.side(),
        frame: Default::default(),
    }
    .with_frame_codec(args.frame_codec, robot, server)?)
}

//! The results of `lop bench` printed: LOP compared with the best baseline, one JSON object with
//! `--json`, else the table and the findings below it.

use lop_runtime::bench::{BenchConfig, MethodReport};

use super::args::BenchArgs;
use super::methods::Run;

/// The JSON name of a method.
fn short_name(m: &str) -> &str {
    if m == "layer-partition" { "layer" } else { m }
}

/// The methods' reports in table order, and how LOP compares with the baselines.
struct Comparison<'a> {
    /// Each method that ran with its report, by its JSON name: robot-only, server-only, layer,
    /// lop.
    ordered: Vec<(&'a str, &'a MethodReport)>,
    /// LOP's measured mean over the best baseline's; only when some baseline ran (`--methods
    /// lop` alone has nothing to compare with).
    lop_ratio: Option<f64>,
    /// In the lop requests' buckets, simulated: LOP's plans and the server-pipelining bound
    /// against the best baseline.
    lop_sim: Option<(f64, Option<f64>)>,
}

impl<'a> Comparison<'a> {
    /// Orders `reports` and compares LOP with the best baseline.
    fn of(reports: &'a std::collections::BTreeMap<String, MethodReport>) -> Self {
        let ordered: Vec<(&str, &MethodReport)> = ["robot-only", "server-only", "layer-partition", "lop"]
            .iter()
            .filter_map(|m| reports.get(*m).map(|r| (short_name(m), r)))
            .collect();
        let best_other = ["robot-only", "server-only", "layer"]
            .iter()
            .filter_map(|m| ordered.iter().find(|(n, _)| n == m))
            .map(|(_, r)| r.mean_ms)
            .fold(f64::INFINITY, f64::min);
        let lop_ratio = ordered
            .iter()
            .find(|(n, _)| *n == "lop")
            .filter(|_| best_other.is_finite())
            .map(|(_, r)| r.mean_ms / best_other)
            .filter(|r| r.is_finite());
        let lop_sim = ordered.iter().find(|(n, _)| *n == "lop").and_then(|(_, r)| {
            let best = r.sim_best_baseline_ms.filter(|b| *b > 0.0)?;
            Some((r.sim_mean_ms / best, r.sim_bound_ms.map(|b| b.min(best) / best)))
        });
        Comparison { ordered, lop_ratio, lop_sim }
    }
}

/// Prints the methods' results: one JSON object with `--json`, else the table and what it shows.
pub(super) fn print_report(
    args: &BenchArgs,
    cfg: &BenchConfig,
    scale: f64,
    run: &Run,
    reports: &std::collections::BTreeMap<String, MethodReport>,
    codec_effect: Option<f64>,
) -> anyhow::Result<()> {
    let c = Comparison::of(reports);
    let trace = args.trace.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    if args.json {
        return print_json(args, cfg, scale, run, &c, &trace, codec_effect);
    }
    print_table(args, cfg, scale, run, &c, &trace);
    print_findings(args, run, &c);
    Ok(())
}

/// `--json`: the run and every method's report as one object.
fn print_json(
    args: &BenchArgs,
    cfg: &BenchConfig,
    scale: f64,
    run: &Run,
    c: &Comparison,
    trace: &str,
    codec_effect: Option<f64>,
) -> anyhow::Result<()> {
    let (ordered, lop_ratio, lop_sim) = (&c.ordered, c.lop_ratio, c.lop_sim);
    let methods: serde_json::Map<String, serde_json::Value> =
        ordered.iter().map(|(m, r)| Ok((m.to_string(), serde_json::to_value(r)?))).collect::<anyhow::Result<_>>()?;
    let v = serde_json::json!({
        "model": args.model.model,
        "trace": trace,
        "dilation": cfg.dilation,
        "robot_pace": if cfg.paced { "profile" } else { "measured" },
        "bandwidth_scale": scale,
        "scenario": run.scenario,
        "input_wire": args.input_wire.name(),
        "transport": run.transport,
        "link": run.link,
        "latency_ms": run.latency_ms,
        "requests": cfg.requests,
        "energy": "modelled (power model), not measured",
        "methods": methods,
        "lop_vs_best_other": lop_ratio,
        "post_side": args.post_side.side().map_or("auto", |s| s.name()),
        "lop_sim_vs_best_baseline_sim": lop_sim.map(|x| x.0),
        "bound_vs_best_baseline_sim": lop_sim.and_then(|x| x.1),
        "netns": run.netns,
        "edge_counts": run.edge,
        "frame_codec": args.frame_codec.to_string(),
        "frames": cfg.frames.len(),
        "codec_output_rel_diff": codec_effect,
    });
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

/// The table: the run's lines, then a row per method.
fn print_table(args: &BenchArgs, cfg: &BenchConfig, scale: f64, run: &Run, c: &Comparison, trace: &str) {
    let ordered = &c.ordered;
    println!(
        "{} over {trace} (x{scale:.3}), dilation {}, input wire {}, {} requests per method",
        args.model.model,
        cfg.dilation,
        args.input_wire.name(),
        cfg.requests
    );
    println!("link: {} [{}]; robot energy is modelled, not measured", run.link, run.transport);
    println!("{}", run.scenario_line);
    println!(
        "{:<12} {:>9} {:>8} {:>9} {:>9} {:>9} {:>8} {:>11} {:>11} {:>9} {:>9} {:>10}",
        "method", "mean ms", "std", "p50", "p95", "sim ms", "meas/sim", "up B", "down B", "energy J", "fallback", "max err"
    );
    for (m, r) in ordered {
        // A ratio measured while the machine changed speed describes the machine: marked.
        let fidelity = r.fidelity.map_or_else(|| "-".to_string(), |f| format!("{f:.2}{}", if r.steady { "" } else { "!" }));
        println!(
            "{m:<12} {:>9.1} {:>8.1} {:>9.1} {:>9.1} {:>9.1} {:>8} {:>11.0} {:>11.0} {:>9.3} {:>9} {:>10.1e}",
            r.mean_ms,
            r.std_ms,
            r.p50_ms,
            r.p95_ms,
            r.sim_mean_ms,
            fidelity,
            r.bytes_up,
            r.bytes_down,
            r.energy_j,
            r.fallbacks,
            r.max_rel_err
        );
    }
}

/// What the table shows beyond its rows: unsteady machines, the server's compute measured
/// against simulated, LOP against the baselines, the link's shaping.
fn print_findings(args: &BenchArgs, run: &Run, c: &Comparison) {
    let (ordered, lop_ratio, lop_sim) = (&c.ordered, c.lop_ratio, c.lop_sim);
    for (m, r) in ordered.iter().filter(|(_, r)| !r.steady) {
        println!(
            "{m}: ! this machine did not hold its speed (calibration kernel {:.2} ms before, {:.2} ms after; robot kernels over their paced time: {}, {:.1} ms per request): its meas/sim describes the machine",
            r.calibration_before_ms, r.calibration_after_ms, r.overruns, r.overrun_ms
        );
    }
    for (m, r) in ordered {
        if let (Some(meas), Some(sim)) = (r.server_compute_ms, r.sim_server_compute_ms) {
            println!("{m}: server compute {meas:.1} ms measured, {sim:.1} ms simulated (meas/sim {:.2})", meas / sim.max(1e-9));
        }
    }
    if let Some(r) = lop_ratio {
        println!("lop / best of robot-only, server-only, layer: {r:.3}");
    }
    if let Some((plans, bound)) = lop_sim {
        let bound = bound.map_or_else(|| "-".to_string(), |b| format!("{b:.3}"));
        let pinned =
            args.post_side.side().map_or_else(String::new, |s| format!(" (post-processing pinned to the {}, baselines too)", s.name()));
        println!("simulated in the lop requests' buckets, / best baseline{pinned}: lop plans {plans:.3}, server-pipelining bound {bound}");
    }
    if let Some(n) = &run.netns {
        for (m, s) in &n.shaping {
            println!("tc shaping during {m}: {} steps, {} rate changes, {} failures", s.steps, s.updates, s.failures);
        }
    }
}

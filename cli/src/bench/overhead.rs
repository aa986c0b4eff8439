//! `lop bench --overhead`: the runtime's own cost on unshaped loopback Zenoh, measured and
//! printed (see [`lop_runtime::bench::run_overhead`]).

use anyhow::Context;
use lop_runtime::bench::{BenchConfig, OverheadReport};

use super::args::BenchArgs;
use super::methods::runtime;

/// `--overhead`: the runtime's own cost on unshaped loopback Zenoh, printed.
pub(super) fn measure_overhead(args: &BenchArgs, cfg: &BenchConfig) -> anyhow::Result<i32> {
    let report = runtime()?.block_on(lop_runtime::bench::run_overhead(cfg)).context("overhead measurement")?;
    print_overhead(args, cfg, &report)?;
    anyhow::ensure!(
        report.outputs_agree,
        "outputs differ from the unsplit model: relative error {:e} (tolerance {})",
        report.max_rel_err,
        lop::exec::Tolerance::OTHER_RUNTIME.describe()
    );
    Ok(0)
}

fn print_overhead(args: &BenchArgs, cfg: &BenchConfig, r: &OverheadReport) -> anyhow::Result<()> {
    if args.json {
        let mut v = serde_json::to_value(r)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("model".into(), args.model.model.clone().into());
            o.insert("transport".into(), "zenoh".into());
            o.insert("link".into(), "Zenoh over loopback (127.0.0.1), unshaped".into());
            o.insert("input_wire".into(), args.input_wire.name().into());
            o.insert("threads".into(), tch::get_num_threads().into());
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{}: runtime overhead on unshaped loopback Zenoh, {} timed rounds, {} libtorch thread(s), input {} B, output {} B",
        args.model.model,
        cfg.requests,
        tch::get_num_threads(),
        r.input_bytes,
        r.output_bytes
    );
    println!("(a) bare forward (run_whole), median        {:>9.2} ms", r.forward_ms);
    println!("(b) raw transfer (ping-pong), median         {:>9.2} ms", r.transfer_ms);
    println!("(c) server-only through the runtime: median {:>9.2} ms, mean {:.2} ms", r.runtime_p50_ms, r.runtime_mean_ms);
    if let Some(ms) = r.server_compute_ms {
        println!("    edge compute inside (c), median          {ms:>9.2} ms ({} of {} reported)", r.server_compute_reported, r.requests);
    }
    println!("ratio (c) / ((a) + (b)): median {:.3}, mean {:.3}; fallbacks {}", r.ratio, r.ratio_mean, r.fallbacks);
    Ok(())
}

//! `lop power [--source auto|jetson-iio|jetson-hwmon|tegrastats|nvml|rapl|model] [--root DIR]
//! [--rate HZ] --duration S [--json]`: samples a power source and prints what it saw.
//!
//! `auto` tries the measured sources in [`lop_power::SourceKind::AUTO_ORDER`] and fails, naming
//! each source and why, when none is there; it never falls back to the power model, which must be
//! asked for (`--source model`, idle state) and is then labelled `"modelled": true`.

use anyhow::Context;
use lop_power::{EnergyOptions, Ring, SamplerConfig, SourceConfig, SourceKind, sampler};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// `auto` or one source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceArg {
    /// Detect.
    Auto,
    /// This source.
    Kind(SourceKind),
}

fn parse_source(s: &str) -> Result<SourceArg, String> {
    if s == "auto" {
        return Ok(SourceArg::Auto);
    }
    s.parse::<SourceKind>().map(SourceArg::Kind).map_err(|e| e.to_string())
}

/// Arguments of `lop power`.
#[derive(Debug, clap::Args)]
pub struct PowerArgs {
    /// `auto` (jetson-iio, jetson-hwmon, tegrastats, nvml, rapl; never the model), or one of
    /// jetson-iio, jetson-hwmon, tegrastats, nvml, rapl, model.
    #[arg(long, default_value = "auto", value_parser = parse_source)]
    pub source: SourceArg,
    /// Prefix for every sysfs path (a fixture tree in tests).
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Requested samples per second.
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// Seconds to sample.
    #[arg(long)]
    pub duration: f64,
    /// The rail to report as the total when the board has no VDD_IN / POM_5V_IN.
    #[arg(long)]
    pub total_rail: Option<String>,
    /// NVML GPU index.
    #[arg(long, default_value_t = 0)]
    pub gpu: u32,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// What `lop power` prints.
#[derive(Debug, serde::Serialize)]
pub struct PowerReport {
    /// The source's name.
    pub source: String,
    /// Whether the figures come from the power model.
    pub modelled: bool,
    /// What the total is (a rail name, or e.g. `sum of package-*`).
    pub total: String,
    /// Rail names.
    pub rails: Vec<String>,
    /// Achieved samples per second.
    pub rate_hz: f64,
    /// Requested samples per second.
    pub requested_hz: f64,
    /// Distinct values per second (what the sensor delivered).
    pub refresh_hz: f64,
    /// Mean total power over the run (time-weighted), if there were readings.
    pub mean_w: Option<f64>,
    /// Mean power per rail, in `rails` order.
    pub rail_mean_w: Vec<f64>,
    /// Energy of the total over the run.
    pub energy_j: Option<f64>,
    /// `counter` or `trapezoid`.
    pub energy_method: Option<&'static str>,
    /// Successful reads.
    pub samples: u64,
    /// Reads with new values.
    pub fresh_samples: u64,
    /// Failed reads.
    pub errors: u64,
    /// Seconds from the first to the last reading.
    pub span_s: f64,
}

/// Samples and prints.
///
/// # Errors
/// Bad arguments, no source, or a source that keeps failing.
pub fn run(args: &PowerArgs) -> anyhow::Result<i32> {
    anyhow::ensure!(
        args.duration.is_finite() && args.duration > 0.0 && args.duration <= 86_400.0,
        "--duration {} is not in (0, 86400] seconds",
        args.duration
    );
    let scfg = SamplerConfig { rate_hz: args.rate, ..SamplerConfig::default() };
    scfg.validate()?;
    let cfg = SourceConfig {
        root: args.root.clone(),
        total_rail: args.total_rail.clone(),
        nvml_device: args.gpu,
        tegrastats_interval: Duration::from_secs_f64(1.0 / args.rate).max(Duration::from_millis(10)),
        ..SourceConfig::default()
    };
    let mut source = match args.source {
        SourceArg::Auto => lop_power::detect(&cfg, &SourceKind::AUTO_ORDER)?,
        SourceArg::Kind(k) => lop_power::open(k, &cfg).with_context(|| format!("opening power source {k}"))?,
    };
    // Room for every reading: a ring that dropped the oldest would shorten the run it reports.
    let capacity = (args.rate * args.duration * 1.5).ceil().min(50_000_000.0) as usize + 16;
    let mut ring = Ring::new(capacity)?;
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs_f64(args.duration);
    let stats = sampler::run(source.as_mut(), &scfg, &stop, Some(deadline), &mut |r, _fresh| {
        if let Err(e) = ring.push(r) {
            tracing::warn!(error = %e, "power reading rejected");
        }
    })
    .with_context(|| format!("sampling {}", source.name()))?;

    let mut report = PowerReport {
        source: source.name().to_string(),
        modelled: source.modelled(),
        total: source.total().to_string(),
        rails: source.rails().to_vec(),
        rate_hz: stats.achieved_hz(),
        requested_hz: args.rate,
        refresh_hz: stats.refresh_hz(),
        mean_w: None,
        rail_mean_w: vec![],
        energy_j: None,
        energy_method: None,
        samples: stats.reads,
        fresh_samples: stats.fresh,
        errors: stats.errors,
        span_s: stats.span.as_secs_f64(),
    };
    match ring.span() {
        Some((a, b)) if a < b => {
            // The whole run: gaps are allowed up to its length (read errors are counted above).
            let opts = EnergyOptions { max_gap: b - a, ..EnergyOptions::default() };
            if let Some(e) = lop_power::energy::energy(&ring, a, b, &opts)?.energy() {
                let secs = e.duration.as_secs_f64();
                report.mean_w = Some(e.mean_w);
                report.energy_j = Some(e.joules);
                report.energy_method = Some(e.method.as_str());
                report.rail_mean_w = e.rails_j.iter().map(|j| j / secs).collect();
            }
        }
        Some(_) => {
            let r = ring.get(0).context("ring with a span has a reading")?;
            report.mean_w = Some(r.total_w);
            report.rail_mean_w = r.rails_w.clone();
        }
        None => {}
    }
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(0);
    }
    let label = if report.modelled { " (MODELLED, not measured)" } else { "" };
    println!("source     {}{label}", report.source);
    println!("total      {}", report.total);
    println!("rate       {:.1} Hz achieved ({:.1} requested, {:.1} Hz fresh values)", report.rate_hz, args.rate, report.refresh_hz);
    println!("samples    {} ({} fresh, {} failed reads) over {:.3} s", report.samples, report.fresh_samples, report.errors, report.span_s);
    match (report.mean_w, report.energy_j) {
        (Some(w), Some(j)) => println!("mean       {w:.3} W, {j:.3} J ({})", report.energy_method.unwrap_or("?")),
        (Some(w), None) => println!("mean       {w:.3} W"),
        _ => println!("mean       no data"),
    }
    for (name, w) in report.rails.iter().zip(&report.rail_mean_w) {
        println!("  {name:<20} {w:.3} W");
    }
    Ok(0)
}

//! `lop profile MODEL --role robot|server [--device cpu|cuda] [--dilation K] [--threads N]
//! [--runs 5] --out PROFILE.json`: measures per-op compute times at several band sizes and
//! writes a profile for the simulator and planner.

use crate::ModelArgs;
use anyhow::Context;
use lop::plan::Side;
use lop::profile::{DeviceKind, ProfileOptions, profile_graph};
use std::path::PathBuf;

/// The side a profile stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RoleArg {
    /// The robot (dilation applies here).
    Robot,
    /// The edge server.
    Server,
}

/// Where to run the kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceArg {
    /// The CPU.
    Cpu,
    /// CUDA device 0.
    Cuda,
}

/// Arguments of `lop profile` (`--threads` is the global option).
#[derive(Debug, clap::Args)]
pub struct ProfileArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Which side the profile stands for.
    #[arg(long, value_enum)]
    pub role: RoleArg,
    /// Where to run the kernels.
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: DeviceArg,
    /// Multiply every measured time by K (a K-times slower robot; recorded in the profile).
    #[arg(long, default_value_t = 1.0)]
    pub dilation: f64,
    /// Timed runs per band size (the median is kept; at least 5).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Untimed runs before each band size.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Units per op the band sizes are chosen from.
    #[arg(long, default_value_t = 8)]
    pub units: usize,
    /// Memory layout of convolutions: auto (both timed, the faster kept and recorded), nchw or
    /// channels_last. The side that uses the profile runs the model in its layout.
    #[arg(long, default_value = "auto")]
    pub layout: lop::profile::LayoutChoice,
    /// Where to write the profile (JSON).
    #[arg(long)]
    pub out: PathBuf,
    /// Real photographs (a PNG or JPEG file or a folder; `scripts/photos.sh` prints one) to
    /// measure frame codecs on, fitted to the model's input.
    #[arg(long)]
    pub frames: Option<PathBuf>,
    /// Frame codecs to measure on --frames, comma-separated (their costs go into the profile;
    /// the planner prices a coded frame with them). Measured at this machine's speed: a robot
    /// codes frames on its CPU, not on the accelerator --dilation stands for.
    #[arg(long, default_value = "lossless,jpeg:90")]
    pub frame_codecs: String,
}

/// Measures the model and writes the profile; prints a one-line summary.
///
/// # Errors
/// Bad options, a missing CUDA device, load or execution failures, an unwritable output.
pub fn run(args: &ProfileArgs, threads: Option<i32>) -> anyhow::Result<i32> {
    anyhow::ensure!(args.runs >= 5, "--runs must be at least 5");
    anyhow::ensure!(
        args.dilation.is_finite() && args.dilation > 0.0,
        "--dilation {}: must be a positive number (1 = this machine's speed, 20 = 20 times slower)",
        args.dilation
    );
    let role = match args.role {
        RoleArg::Robot => Side::Robot,
        RoleArg::Server => Side::Server,
    };
    if role == Side::Server && args.dilation != 1.0 {
        eprintln!("warning: --dilation {} on a server profile (dilation stands for a slower robot)", args.dilation);
    }
    let device = match args.device {
        DeviceArg::Cpu => DeviceKind::Cpu,
        DeviceArg::Cuda => {
            anyhow::ensure!(tch::Cuda::is_available(), "--device cuda: libtorch sees no CUDA device");
            DeviceKind::Cuda
        }
    };
    // An emulated (dilated) robot shares this machine with the edge, so it runs one libtorch
    // thread, as `lop bench` runs it; measured with two, every kernel after a dilation wait also
    // paid for waking the second worker (yolo_det@640: over 5 minutes instead of 44 s here).
    if threads.is_none() && args.dilation > 1.0 {
        tch::set_num_threads(1);
    }
    let mut graph = args.model.load()?;
    graph.to_device(lop::profile::torch_device(device)).context("moving the model to the device")?;
    let inputs = lop::exec::synthetic_inputs(&graph, 0)?
        .into_iter()
        .map(|t| t.f_to_device(lop::profile::torch_device(device)))
        .collect::<Result<Vec<_>, _>>()
        .context("moving the inputs to the device")?;
    let opts = ProfileOptions {
        role,
        device,
        dilation: args.dilation,
        runs: args.runs,
        warmup: args.warmup,
        units: args.units,
        layout: args.layout,
    };
    let started = std::time::Instant::now();
    eprintln!("profiling {} as {} on {:?} ({} threads)", graph.name, role.name(), device, tch::get_num_threads());
    if args.layout == lop::profile::LayoutChoice::Auto {
        eprintln!("timing the model in both memory layouts (whole and in 4 bands)");
    }
    let profile = profile_graph(&mut graph, &inputs, &opts, |i, n, name| {
        if i < n {
            eprintln!("[{:>4}/{n}] {name}", i + 1);
        }
    })?;
    for t in &profile.layout_trials {
        eprintln!("layout {:<13} whole {:8.2} ms, 4 bands {:8.2} ms (undilated)", t.layout.name(), t.whole_s * 1e3, t.bands_s * 1e3);
    }
    let mut profile = profile;
    if let Some(path) = &args.frames {
        let frames = crate::frames::real_frames(&graph, Some(path), None)?;
        for name in args.frame_codecs.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let codec: lop::codec::FrameCodec = name.parse().with_context(|| format!("--frame-codecs '{}'", args.frame_codecs))?;
            profile.set_codec_cost(crate::bench::measure_codec(codec, &graph, &frames)?);
        }
    }
    profile.save(&args.out)?;
    let retaken = profile.ops.iter().flat_map(|o| &o.samples).filter(|s| s.retakes > 0).count();
    if retaken > 0 {
        eprintln!(
            "timed {retaken} band size(s) again: their medians disagreed with their op's other sizes (a busy machine); kept the \
             least median (`retakes` in the profile)"
        );
    }
    let slow = profile.slow_bands();
    if !slow.is_empty() {
        eprintln!(
            "warning: {} op(s) took longer on a smaller band than on a larger one (a slow kernel path for small bands, or a busy \
             machine: profile on a quiet one); the planner will avoid cutting them:",
            slow.len()
        );
        for s in slow.iter().take(10) {
            eprintln!(
                "  {}: {} rows {:.2} ms, {} rows {:.2} ms (undilated)",
                s.op,
                s.rows,
                s.seconds * 1e3,
                s.more_rows,
                s.more_seconds * 1e3
            );
        }
        if slow.len() > 10 {
            eprintln!("  and {} more", slow.len() - 10);
        }
    }
    let whole: f64 = profile.ops.iter().map(|o| o.fit.time(o.out_rows)).sum();
    eprintln!("profiled {} ops in {:.1} s", profile.ops.len(), started.elapsed().as_secs_f64());
    println!(
        "{} {} ops, whole model {:.3} ms (fitted, dilation {}), layout {}, written to {}",
        profile.model,
        profile.ops.len(),
        whole * 1e3,
        profile.dilation,
        profile.layout.name(),
        args.out.display()
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(out: PathBuf, runs: usize) -> ProfileArgs {
        ProfileArgs {
            model: ModelArgs { model: "zoo:mobilenet_v2".into(), input_shape: None, preprocess: None, task: None, camera_fit: None },
            role: RoleArg::Robot,
            device: DeviceArg::Cpu,
            dilation: 2.0,
            runs,
            warmup: 1,
            units: 8,
            layout: lop::profile::LayoutChoice::Auto,
            out,
            frames: None,
            frame_codecs: "lossless,jpeg:90".into(),
        }
    }

    #[test]
    fn writes_a_profile_that_validates_against_the_model() {
        let dir = std::env::temp_dir().join(format!("lop-cli-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let out = dir.join("robot.json");
        assert!(run(&args(out.clone(), 3), None).is_err(), "fewer than 5 runs must be refused");
        assert_eq!(run(&args(out.clone(), 5), None).expect("profile"), 0);
        let p = lop::profile::Profile::load(&out).expect("load");
        // As `lop profile` loads it (activations folded into the convolutions).
        let g = lop::model::load("zoo:mobilenet_v2", &Default::default()).expect("model");
        p.validate(&g, &g.content_hash().expect("hash")).expect("valid for its model");
        assert_eq!((p.role, p.dilation, p.device), (Side::Robot, 2.0, DeviceKind::Cpu));
        assert_eq!(p.threads, 1, "a dilated robot profiles with one libtorch thread unless told otherwise");
        assert!(p.ops.iter().all(|o| !o.local || o.samples.len() >= 4.min(o.out_rows)));
        let other = lop::model::load("zoo:resnet18", &Default::default()).expect("model");
        let err = p.validate(&other, &other.content_hash().expect("hash")).expect_err("other model");
        assert!(err.to_string().contains("mobilenet_v2"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }
}

//! The robot's and the server's profiles for `lop bench`: the files given, the configs' synthetic
//! pair, or measured now and cached by model hash, role, dilation and threads.

use std::path::Path;

use anyhow::Context;
use lop::plan::Side;
use lop::profile::{DeviceKind, Profile, ProfileCache, ProfileOptions};

use super::args::BenchArgs;

/// The robot's and the server's profiles: the synthetic pair, the files given, or measured now
/// (cached in `--profile-dir`).
pub(super) fn profiles(args: &BenchArgs, graph: &mut lop::Graph) -> anyhow::Result<(Profile, Profile)> {
    let pdir = args.profile_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("lop-profiles"));
    if args.synthetic_profiles {
        anyhow::ensure!(
            args.robot_profile.is_none() && args.server_profile.is_none(),
            "--synthetic-profiles and --robot-profile/--server-profile exclude each other"
        );
        return synthetic_profiles(graph);
    }
    Ok((
        profile(graph, args.robot_profile.as_deref(), &pdir, Side::Robot, args.dilation, args.layout)?,
        profile(graph, args.server_profile.as_deref(), &pdir, Side::Server, 1.0, args.layout)?,
    ))
}

/// A profile from `path`, or measured now (cached by model hash, role, dilation and threads).
fn profile(
    graph: &mut lop::Graph,
    path: Option<&Path>,
    dir: &Path,
    role: Side,
    dilation: f64,
    layout: lop::profile::LayoutChoice,
) -> anyhow::Result<Profile> {
    let hash = graph.content_hash()?;
    if let Some(p) = path {
        let prof = Profile::load(p).with_context(|| format!("{} profile {}", role.name(), p.display()))?;
        prof.validate(graph, &hash).with_context(|| format!("{} profile {}", role.name(), p.display()))?;
        // Each side runs with this process's libtorch threads: a profile measured with another
        // count predicts another speed (a two-thread server profile under-predicted the one-thread
        // edge of `lop bench` by 13%).
        let threads = usize::try_from(tch::get_num_threads()).unwrap_or(0);
        if prof.threads != threads {
            eprintln!(
                "warning: the {} profile {} was measured with {} libtorch threads, this run uses {threads}: its times will not describe this run (measure it with `lop --threads {threads} profile ...`)",
                role.name(),
                p.display(),
                prof.threads
            );
        }
        return Ok(prof);
    }
    let cache = ProfileCache::new(dir);
    let opts = ProfileOptions { role, device: DeviceKind::Cpu, dilation, runs: 5, warmup: 1, units: 8, layout };
    if let Some((p, at)) = cache.load(graph, &hash, &opts, tch::Device::Cpu) {
        eprintln!("using cached {} profile {}", role.name(), at.display());
        return Ok(p);
    }
    eprintln!(
        "profiling {} as {} (dilation {dilation}, {} threads); cached in {}",
        graph.name,
        role.name(),
        tch::get_num_threads(),
        dir.display()
    );
    let inputs = lop::exec::synthetic_inputs(graph, 0)?;
    let (prof, _) = cache.measure(graph, &hash, &inputs, &opts, tch::Device::Cpu, |i, n, _| {
        if i % 20 == 0 && i < n {
            eprintln!("  [{i}/{n}]");
        }
    })?;
    Ok(prof)
}

/// The configs' synthetic profiles ([`lop::profile::SYNTHETIC`]), the same the edge and the
/// robot plan with when their config says `synthetic`.
fn synthetic_profiles(graph: &lop::Graph) -> anyhow::Result<(Profile, Profile)> {
    let pair = lop::profile::SYNTHETIC.pair(graph)?;
    eprintln!(
        "synthetic profiles (the configs' `synthetic`: the robot {}x slower than the server per byte); simulated times do not describe this machine",
        lop::profile::SYNTHETIC.robot_slowdown
    );
    Ok(pair)
}

//! The models an edge serves, prepared before it serves: each loaded once per served variant,
//! its sha256 checked, its server profile read, measured (and cached) or made up, and the
//! speeds of the edge's devices measured from those profiles.

use std::time::{Duration, Instant};

use lop::graph::Graph;
use lop::model::LoadOptions;
use lop::plan::Side;
use lop::profile::{DeviceKind, Profile, ProfileCache, ProfileOptions, synthetic_profile};
use lop_runtime::edge::{EdgeModel, EdgeOptions, ServerDevice};
use sha2::{Digest, Sha256};

use crate::Error;
use crate::config::{ConfigError, EdgeConfig, ModelSource, ProfileSource};

/// The sha256 (hex) of a file's bytes.
fn file_sha256(path: &std::path::Path) -> Result<String, Error> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io { what: "model file", path: path.to_path_buf(), source })?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// Loads every model once (checking its sha256 and its server profile, measuring the profile
/// when asked), creates the cache directories, and returns the service's options.
///
/// # Errors
/// Missing or mismatching models, bad profiles, unwritable caches.
pub fn prepare(cfg: &EdgeConfig) -> Result<EdgeOptions, Error> {
    let named = cfg.devices()?;
    let device = named[0].1;
    let spec = cfg.table_spec()?;
    for (what, dir) in [("table cache", &cfg.table_cache), ("profile cache", &cfg.profile_cache)] {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io { what, path: dir.clone(), source })?;
    }
    if !cfg.robot_profiles.is_dir() {
        tracing::info!(dir = %cfg.robot_profiles.display(), "no robot profiles directory: robots' profiles come in their Hellos");
    }
    let mut models = Vec::new();
    for (i, m) in cfg.models.iter().enumerate() {
        let source = cfg.model_source(i)?;
        let preprocess = m
            .preprocess
            .as_deref()
            .map(lop::preprocess::Preprocess::parse)
            .transpose()
            .map_err(|e| Error::Model { id: m.id.clone(), source: Box::new(e) })?;
        let postprocess = m
            .task
            .as_deref()
            .map(lop::postprocess::Postprocess::parse)
            .transpose()
            .map_err(|e| Error::Model { id: m.id.clone(), source: Box::new(e) })?;
        let file_sha = match &source {
            ModelSource::File(p) if m.sha256.is_some() => Some(file_sha256(p)?),
            _ => None,
        };
        for (input_shape, fit) in cfg.served_variants(i) {
            let (preprocess, postprocess) = (preprocess.clone(), postprocess.clone());
            let load = LoadOptions { input_shape, preprocess, postprocess, fit, ..LoadOptions::default() };
            models.push(prepare_variant(cfg, i, &source, load, file_sha.as_deref(), device)?);
        }
    }
    let devices = device_speeds(cfg, &named, &models)?;
    Ok(EdgeOptions {
        models,
        robot_profiles: Vec::new(),
        profiles_dir: Some(cfg.robot_profiles.clone()),
        spec,
        cache_dir: cfg.table_cache.clone(),
        replicas: cfg.replicas,
        devices,
        limits: lop_msgs::protocol::Limits { max_frame_len: cfg.max_frame_bytes },
        hello_timeout: Duration::from_secs_f64(cfg.hello_timeout_s),
        table_wait: Duration::from_secs_f64(cfg.table_wait_s),
        dilation: cfg.dilation,
        memory_budget: cfg.memory_budget(),
        batching: lop_runtime::edge::Batching { max: cfg.max_batch, ..Default::default() },
    })
}

/// One served variant of model `i` (its own shape, or one of its `input_shapes`): loaded, its
/// sha256 checked, its server profile read, measured or made up.
fn prepare_variant(
    cfg: &EdgeConfig,
    i: usize,
    source: &ModelSource,
    load: LoadOptions,
    file_sha: Option<&str>,
    device: tch::Device,
) -> Result<EdgeModel, Error> {
    let m = &cfg.models[i];
    let engine = |source| Error::Model { id: m.id.clone(), source: Box::new(source) };
    let mut graph = lop::model::load(&source.load_name(), &load).map_err(engine)?;
    let hash = graph.content_hash().map_err(engine)?;
    if let Some(expected) = &m.sha256 {
        let expected = expected.to_ascii_lowercase();
        if expected != hash && file_sha != Some(expected.as_str()) {
            let file = file_sha.map(|f| format!(", file sha256 {f}")).unwrap_or_default();
            return Err(ConfigError::Invalid {
                path: cfg.path.clone(),
                field: format!("models[{i}].sha256"),
                msg: format!("expected {expected}, but '{}' has content hash {hash}{file}", source.load_name()),
            }
            .into());
        }
    }
    cfg.table.input_wire.check(&graph).map_err(|e| ConfigError::Invalid {
        path: cfg.path.clone(),
        field: "table.input_wire".into(),
        msg: format!("model '{}': {e}", m.id),
    })?;
    let server_profile = match &m.server_profile {
        ProfileSource::Synthetic => synthetic_profile(&graph, Side::Server).map_err(engine)?,
        ProfileSource::File(p) => {
            let prof = Profile::load(p).and_then(|prof| prof.validate(&graph, &hash).map(|()| prof));
            let bad = |msg: String| ConfigError::Invalid {
                path: cfg.path.clone(),
                field: format!("models[{i}].server_profile"),
                msg: format!("{}: {msg}", p.display()),
            };
            let prof = prof.map_err(|e| bad(e.to_string()))?;
            if prof.role != Side::Server {
                return Err(bad("not a server profile (role robot)".into()).into());
            }
            prof
        }
        ProfileSource::Measure => measured_profile(cfg, &m.id, &mut graph, &hash, device)?,
    };
    let shape = graph.inputs().first().map(|&n| graph.nodes[n].info.shape.clone()).unwrap_or_default();
    let layout = server_profile.layout.name();
    tracing::info!(model = %m.id, source = %source.load_name(), ?shape, %hash, profile = %server_profile.hash(), layout, "model ready");
    // The replicas run the model as its profile measured it.
    let load = LoadOptions { layout: server_profile.layout, ..load };
    Ok(EdgeModel { id: m.id.clone(), source: source.load_name(), load, server_profile })
}

/// The edge's devices with their speeds: on a device other than the first (another GPU, not a
/// CPU group standing in), every model whose profile is measured is measured there too
/// (cached), and the device's speed is the first device's profiled seconds over its own, all
/// models together; 1 where nothing is measured.
fn device_speeds(cfg: &EdgeConfig, named: &[(String, tch::Device)], models: &[EdgeModel]) -> Result<Vec<ServerDevice>, Error> {
    let profiled_s = |p: &Profile| p.ops.iter().map(|op| op.fit.time(op.out_rows.max(1))).sum::<f64>();
    let mut out = Vec::with_capacity(named.len());
    for (name, device) in named {
        let mut speed = 1.0;
        if *device != named[0].1 {
            let (mut first, mut here) = (0.0, 0.0);
            for m in models {
                let measured = cfg.models.iter().find(|e| e.id == m.id).is_some_and(|e| matches!(e.server_profile, ProfileSource::Measure));
                if !measured {
                    continue;
                }
                let engine = |source| Error::Model { id: m.id.clone(), source: Box::new(source) };
                let mut graph = lop::model::load(&m.source, &m.load).map_err(engine)?;
                let hash = graph.content_hash().map_err(engine)?;
                let p = measured_profile(cfg, &m.id, &mut graph, &hash, *device)?;
                first += profiled_s(&m.server_profile);
                here += profiled_s(&p);
            }
            if first > 0.0 && here > 0.0 {
                speed = first / here;
            }
        }
        tracing::info!(device = %name, speed, "server device");
        out.push(ServerDevice { name: name.clone(), device: *device, speed });
    }
    Ok(out)
}

/// The server profile of a model measured on `device`, or the cached one.
fn measured_profile(cfg: &EdgeConfig, id: &str, graph: &mut Graph, hash: &str, device: tch::Device) -> Result<Profile, Error> {
    let engine = |source| Error::Model { id: id.to_string(), source: Box::new(source) };
    let kind = if device.is_cuda() { DeviceKind::Cuda } else { DeviceKind::Cpu };
    let opts = ProfileOptions { role: Side::Server, device: kind, dilation: 1.0, runs: 5, warmup: 1, units: 8, layout: cfg.layout };
    let cache = ProfileCache::new(&cfg.profile_cache);
    if let Some((p, at)) = cache.load(graph, hash, &opts, device) {
        tracing::info!(model = %id, profile = %at.display(), "using the cached server profile");
        return Ok(p);
    }
    tracing::info!(model = %id, device = ?device, threads = tch::get_num_threads(), "measuring the server profile (once; cached)");
    let started = Instant::now();
    graph.to_device(device).map_err(engine)?;
    let inputs: Vec<tch::Tensor> = lop::exec::synthetic_inputs(graph, 0).map_err(engine)?.iter().map(|t| t.to_device(device)).collect();
    let (prof, at) = cache.measure(graph, hash, &inputs, &opts, device, |_, _, _| {}).map_err(engine)?;
    tracing::info!(model = %id, seconds = started.elapsed().as_secs_f64(), profile = %at.display(), "server profile measured");
    Ok(prof)
}

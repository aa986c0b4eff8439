//! The edge process of the netns run, from its own side: what it serves
//! ([`EdgeProcessConfig`], written as JSON by the parent for `lop bench-edge`), how it serves it
//! ([`serve_edge_process`]) and the line it prints once ready ([`EDGE_READY`], [`print_ready`]).

use std::io::Write;
use std::path::PathBuf;

use lop::model::LoadOptions;
use lop::planner::table::TableSpec;
use lop::profile::Profile;

use super::config::BenchConfig;
use super::edge_side::{ZenohEdge, edge_options};
use crate::edge::{EdgeCounts, EdgeService};
use crate::error::{Error, Result};

/// What the edge process of [`run_netns`](super::run_netns) serves (written as JSON for
/// `lop bench-edge`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EdgeProcessConfig {
    /// Model id.
    pub model_id: String,
    /// Model source.
    pub source: String,
    /// Input shape for dynamic ONNX inputs.
    pub input_shape: Option<Vec<usize>>,
    /// The preprocess stage, as [`lop::preprocess::Preprocess::spec`] writes it.
    pub preprocess: Option<String>,
    /// The back end, as [`lop::postprocess::Postprocess::spec`] writes it.
    #[serde(default)]
    pub task: Option<String>,
    /// The model's fit of the camera's frame, as [`lop::fit::FrameFit::spec`] writes it.
    #[serde(default)]
    pub camera_fit: Option<String>,
    /// The robot's profile.
    pub robot: Profile,
    /// The server's profile.
    pub server: Profile,
    /// The schedule table configuration.
    pub spec: TableSpec,
    /// Where schedule tables are cached.
    pub cache_dir: PathBuf,
    /// The router's endpoint, e.g. `tcp/10.77.0.2:7447`.
    pub listen: String,
    /// libtorch intra-op threads.
    pub threads: Option<i32>,
}

impl BenchConfig {
    /// The configuration of an edge process serving this benchmark on `listen`.
    pub fn edge_process_config(&self, listen: &str, threads: Option<i32>) -> EdgeProcessConfig {
        EdgeProcessConfig {
            model_id: self.model_id.clone(),
            source: self.source.clone(),
            input_shape: self.load.input_shape.clone(),
            preprocess: self.load.preprocess.as_ref().map(lop::preprocess::Preprocess::spec),
            task: self.load.postprocess.as_ref().map(lop::postprocess::Postprocess::spec),
            camera_fit: self.load.fit.as_ref().map(lop::fit::FrameFit::spec),
            robot: self.robot.clone(),
            server: self.server.clone(),
            spec: self.spec.clone(),
            cache_dir: self.cache_dir.clone(),
            listen: listen.to_string(),
            threads,
        }
    }
}

/// The line an edge process prints on stdout once its router listens.
pub const EDGE_READY: &str = "lop-bench-edge ready";

/// The edge process's side of [`run_netns`](super::run_netns): serves the benchmark's model over
/// a Zenoh router on `cfg.listen`, calls `ready()` once it listens, and returns the service's
/// counters when `stop` completes (the parent closes the child's stdin, or the child is killed).
///
/// # Errors
/// The model or profiles do not load; the router cannot listen.
pub async fn serve_edge_process(
    cfg: &EdgeProcessConfig,
    stop: impl std::future::Future<Output = ()>,
    ready: impl FnOnce(),
) -> Result<EdgeCounts> {
    let preprocess = cfg.preprocess.as_deref().map(lop::preprocess::Preprocess::parse).transpose()?;
    let postprocess = cfg.task.as_deref().map(lop::postprocess::Postprocess::parse).transpose()?;
    let fit = cfg.camera_fit.as_deref().map(lop::fit::FrameFit::parse).transpose()?;
    let load = LoadOptions { input_shape: cfg.input_shape.clone(), preprocess, postprocess, fit, ..LoadOptions::default() };
    let service =
        EdgeService::start(edge_options(&cfg.model_id, &cfg.source, &load, &cfg.robot, &cfg.server, &cfg.spec, &cfg.cache_dir)).await?;
    let edge = ZenohEdge::start(service, &cfg.listen).await?;
    tracing::info!(listen = %cfg.listen, "bench edge serving");
    ready();
    stop.await;
    let counts = edge.service.counts();
    edge.close().await;
    Ok(counts)
}

/// Writes `line` and a newline to stdout and flushes (for [`EDGE_READY`]).
///
/// # Errors
/// When stdout is closed.
pub fn print_ready() -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{EDGE_READY}").and_then(|_| out.flush()).map_err(|source| Error::Netns { what: "writing to stdout".into(), source })
}

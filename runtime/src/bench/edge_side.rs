//! The benchmark's edge: its options (one replica on the CPU, the robot waiting for its table),
//! started in this process ([`start_edge`]) and, for the Zenoh runs, served behind a router
//! session on an endpoint ([`ZenohEdge`]). The in-process, loopback, netns and overhead runs
//! and the netns edge process all start their edge here.

use std::path::Path;
use std::time::Duration;

use lop::model::LoadOptions;
use lop::planner::table::TableSpec;
use lop::profile::Profile;

use super::config::BenchConfig;
use crate::edge::{EdgeModel, EdgeOptions, EdgeService};
use crate::error::{Error, Result};
use crate::zenoh_link::{EdgeAcceptor, ZenohConfig};
use crate::zenoh_service::serve_zenoh;

/// The edge options of a benchmark (one replica, CPU).
pub(super) fn edge_options(
    model_id: &str,
    source: &str,
    load: &LoadOptions,
    robot: &Profile,
    server: &Profile,
    spec: &TableSpec,
    cache_dir: &Path,
) -> EdgeOptions {
    EdgeOptions {
        models: vec![EdgeModel {
            id: model_id.to_string(),
            source: source.to_string(),
            // The replica runs the model as the server profile measured it.
            load: LoadOptions { layout: server.layout, ..load.clone() },
            server_profile: server.clone(),
        }],
        robot_profiles: vec![robot.clone()],
        profiles_dir: None,
        spec: spec.clone(),
        cache_dir: cache_dir.to_path_buf(),
        replicas: 1,
        devices: vec![crate::edge::ServerDevice::only(tch::Device::Cpu)],
        limits: Default::default(),
        hello_timeout: Duration::from_secs(120),
        // The benchmark's robot waits for its table rather than run alone.
        table_wait: Duration::from_secs(600),
        dilation: 1.0,
        memory_budget: None,
        batching: Default::default(),
    }
}

/// Starts the edge for a benchmark (one replica, CPU).
///
/// # Errors
/// As [`EdgeService::start`].
pub async fn start_edge(cfg: &BenchConfig) -> Result<EdgeService> {
    EdgeService::start(edge_options(&cfg.model_id, &cfg.source, &cfg.load, &cfg.robot, &cfg.server, &cfg.spec, &cfg.cache_dir)).await
}

/// A free TCP port on 127.0.0.1 (bound and released; another process could take it meanwhile).
pub(super) fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|source| Error::Netns { what: "binding 127.0.0.1:0 to find a free port".into(), source })?;
    l.local_addr().map(|a| a.port()).map_err(|source| Error::Netns { what: "reading a bound port".into(), source })
}

/// An edge served over Zenoh from this process: a router session, the acceptor's serving task
/// and the service. Dropping it stops serving.
#[derive(Debug)]
pub struct ZenohEdge {
    /// The router session.
    pub session: zenoh::Session,
    /// The service (counters).
    pub service: EdgeService,
    task: tokio::task::JoinHandle<()>,
}

impl ZenohEdge {
    /// Starts `service` behind a Zenoh router listening on `endpoint` (e.g. `tcp/127.0.0.1:7447`).
    ///
    /// # Errors
    /// [`Error::Zenoh`] when the session cannot open (e.g. the port is taken).
    pub async fn start(service: EdgeService, endpoint: &str) -> Result<ZenohEdge> {
        let session = ZenohConfig::router(vec![endpoint.to_string()]).open().await?;
        let acceptor = EdgeAcceptor::new(&session).await?;
        let task = serve_zenoh(service.clone(), acceptor);
        Ok(ZenohEdge { session, service, task })
    }

    /// Stops serving and closes the session.
    pub async fn close(self) {
        self.task.abort();
        if let Err(e) = self.session.close().await {
            tracing::debug!(error = %e, "closing the edge's Zenoh session");
        }
    }
}

impl Drop for ZenohEdge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

//! The Zenoh loopback run ([`run_zenoh_loopback`]): the edge in this process behind a router
//! session on a free port of 127.0.0.1, the robot on a client session. Loopback cannot be
//! shaped, so the trace only selects the plans.

use std::collections::BTreeMap;

use tch::Tensor;

use super::config::{BenchConfig, robot_id};
use super::edge_side::{ZenohEdge, free_port, start_edge};
use super::methods::run_methods;
use super::report::MethodReport;
use crate::client::InferenceStats;
use crate::edge::EdgeCounts;
use crate::error::Result;
use crate::zenoh_link::ZenohConfig;
use crate::zenoh_service::ZenohConnector;

/// Runs every method over Zenoh on unshaped loopback: the edge in this process behind a router
/// session on a free port of 127.0.0.1, the robot on a client session. The trace only selects
/// the plans (bucket per inference); the link itself is not shaped.
///
/// # Errors
/// As [`run_in_process`](super::run_in_process); Zenoh sessions that cannot open.
pub async fn run_zenoh_loopback(
    cfg: &BenchConfig,
    mut progress: impl FnMut(&str, usize, &InferenceStats, &[Tensor]),
) -> Result<(BTreeMap<String, MethodReport>, EdgeCounts)> {
    let endpoint = format!("tcp/127.0.0.1:{}", free_port()?);
    let edge = ZenohEdge::start(start_edge(cfg).await?, &endpoint).await?;
    let robot = ZenohConfig::client(vec![endpoint]).open().await?;
    let r = run_methods(cfg, &mut |m| Ok(ZenohConnector::new(robot.clone(), &robot_id(m))), &mut progress).await;
    let counts = edge.service.counts();
    if let Err(e) = robot.close().await {
        tracing::debug!(error = %e, "closing the robot's Zenoh session");
    }
    edge.close().await;
    Ok((r?, counts))
}

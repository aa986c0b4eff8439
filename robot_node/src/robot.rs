//! `lop_robot`: camera frames or LiDAR sweeps in, exact LOP inference results out; several
//! cameras on the one model (`cameras`), each input with its own mailbox, frame loop, outputs
//! and edge session ([`crate::config::Sensor`]).
//!
//! Subscription callbacks only stamp the arrival and put the message in a one-slot
//! [`Mailbox`](crate::mailbox::Mailbox) (the newest frame replaces an unread one, counted as
//! dropped-busy). One task takes frames from it: converts (on the blocking pool), runs the
//! inference through the [`RobotClient`](lop_runtime::client::RobotClient) (libtorch on the
//! model's worker thread), and publishes the result with the input's stamp and frame. A bandwidth
//! subscription feeds the [`BucketSelector`]; a diagnostics task publishes the counters, rates and
//! latency percentiles about once a second. `enabled`, `method` and `drop_policy` follow the
//! parameter services while the node runs ([`LiveSettings`](crate::live::LiveSettings)). Bad
//! input is counted and reported, never fatal. The node is a ROS 2 managed node
//! ([`crate::lifecycle`]): frames are answered only while it is active, and deactivating frees
//! the model and the edge sessions.
//!
//! # Layout
//!
//! This file holds [`run`], which wires the rooms below together; each `robot/` file has one job,
//! and they import each other one way (the leaves first):
//!
//! - `counters`: [`RobotCounters`]; `summary`: [`RobotSummary`], what a finished run reports.
//! - `frame`: a frame's own types (in the mailbox, converted, its facts until published);
//!   `target`: what the model takes, from its input shape and the configuration; `conversion`:
//!   a frame to the model's input tensor.
//! - `shared`: what the subscriptions, the diagnostics task and the frame loop share; `input`:
//!   the subscriptions (input frames into the mailbox, bandwidth predictions); `diagnostics`:
//!   the /diagnostics task.
//! - `model`: the input shape fixed before loading, the model loaded on its worker, the
//!   replanner; `edges`: the edge client, the fleet or the fleet's lanes, and connecting them.
//! - `messages`: an answered frame's outputs and `InferenceResult`; `debug`: the annotated debug
//!   image, drawn and published only while subscribed; `outlet`: publishing them and the task's
//!   messages (vision_msgs and the others).
//! - `frames`: the frame loop; `active`: what activating brings up and deactivating frees
//!   (the model, the edge session and clients, the result's publishers) around the frame loop;
//!   `managed`: the node's task, carrying out each lifecycle transition.

mod active;
mod conversion;
mod counters;
mod debug;
mod diagnostics;
mod edges;
mod frame;
mod frames;
mod input;
mod managed;
mod messages;
mod model;
mod outlet;
mod shared;
mod summary;
mod target;

pub use counters::RobotCounters;
pub use summary::RobotSummary;

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;

use crate::backend::SharedRos;
use crate::config::RobotConfig;
use crate::error::{Error, Result};
use crate::lifecycle::Lifecycle;
use diagnostics::spawn_diagnostics;
use managed::Managed;
use shared::Shared;
use summary::finish;

/// Runs `lop_robot` on `ros` until `shutdown` resolves, as a managed node: serves its lifecycle
/// where the backend can, publishes /diagnostics from the start, and (with
/// `lifecycle.autostart`) configures and activates itself: loads the model, builds (or loads)
/// the schedule table, connects to the edge, subscribes, logs `ready`, then answers frames
/// while active.
///
/// # Errors
/// A failed autostart (a model, profile or table that cannot be loaded; topics the backend
/// refuses); `lifecycle.autostart: false` on a backend without lifecycle services.
pub async fn run(cfg: RobotConfig, ros: SharedRos, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<RobotSummary> {
    let mut stop = stop_on(shutdown);
    if cfg.threads > 0 {
        tch::set_num_threads(cfg.threads);
    }
    let (lifecycle, mut requests) = Lifecycle::new();
    let _services = serve_lifecycle(&cfg, &ros, &lifecycle)?;
    // One for each input (camera), the live settings common to all.
    let shared = Shared::for_inputs(&cfg);
    ros.on_parameter_set(shared[0].live.clone());
    let diagnostics = ros.diagnostics_publisher(&cfg.topics.diagnostics)?;
    let diag_task = spawn_diagnostics(&cfg, &ros, diagnostics, &shared, lifecycle.clone(), stop.clone());
    let served = Managed::new(&cfg, &ros, &shared, &lifecycle).serve(&mut stop, &mut requests, cfg.autostart).await;
    diag_task.abort();
    let _ = diag_task.await;
    served?;
    let counters: Vec<&RobotCounters> = shared.iter().map(|s| &*s.counters).collect();
    Ok(finish(&counters, &ros))
}

/// The backend's lifecycle services for `lifecycle`, or a plain word that it has none: then
/// the node can only run active, so `lifecycle.autostart: false` is refused.
///
/// # Errors
/// The services the backend refuses; autostart off without services.
fn serve_lifecycle(cfg: &RobotConfig, ros: &SharedRos, lifecycle: &Arc<Lifecycle>) -> Result<Option<crate::backend::Subscription>> {
    let services = ros.serve_lifecycle(lifecycle.clone())?;
    match (&services, cfg.autostart) {
        (Some(_), _) => tracing::info!(backend = ros.name(), autostart = cfg.autostart, "lifecycle services served (managed node)"),
        (None, true) => tracing::info!(
            backend = ros.name(),
            "this backend offers no lifecycle services (change_state, get_state, ...): the node configures and activates itself and runs active until stopped"
        ),
        (None, false) => {
            return Err(Error::Config {
                what: format!(
                    "lifecycle.autostart: false needs the lifecycle services, which the {} backend does not offer (use --backend r2r, or autostart: true)",
                    ros.name()
                ),
            });
        }
    }
    Ok(services)
}

/// A receiver that turns true once `shutdown` resolves (a task waits for it), so that every
/// loop of the node can watch it.
fn stop_on(shutdown: impl Future<Output = ()> + Send + 'static) -> watch::Receiver<bool> {
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    stop
}

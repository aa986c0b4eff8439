//! `lop_robot`: camera frames or LiDAR sweeps in, exact LOP inference results out.
//!
//! Subscription callbacks only stamp the arrival and put the message in a one-slot
//! [`Mailbox`](crate::mailbox::Mailbox) (the newest frame replaces an unread one, counted as
//! dropped-busy). One task takes frames from it: converts (on the blocking pool), runs the
//! inference through the [`RobotClient`](lop_runtime::client::RobotClient) (libtorch on the
//! model's worker thread), and publishes the result with the input's stamp and frame. A bandwidth
//! subscription feeds the [`BucketSelector`]; a diagnostics task publishes the counters, rates and
//! latency percentiles about once a second. `enabled`, `method` and `drop_policy` follow the
//! parameter services while the node runs ([`LiveSettings`](crate::live::LiveSettings)). Bad
//! input is counted and reported, never fatal.
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
//! - `frames`: the frame loop.

mod conversion;
mod counters;
mod debug;
mod diagnostics;
mod edges;
mod frame;
mod frames;
mod input;
mod messages;
mod model;
mod outlet;
mod shared;
mod summary;
mod target;

pub use counters::RobotCounters;
pub use summary::RobotSummary;

use std::future::Future;
use std::sync::atomic::Ordering;

use lop_runtime::bandwidth::BucketSelector;
use tokio::sync::watch;

use crate::backend::SharedRos;
use crate::config::{InputKind, RobotConfig};
use crate::convert::{Fit, ImageTarget};
use crate::error::Result;
use diagnostics::spawn_diagnostics;
use edges::{client_options, connect_edges};
use frames::Frames;
use input::{subscribe_bandwidth, subscribe_input};
use model::{input_load, load_model};
use outlet::Outlet;
use shared::Shared;
use summary::finish;
use target::{Target, resolve_target};

/// Runs `lop_robot` on `ros` until `shutdown` resolves: loads the model, builds (or loads) the
/// schedule table, connects to the edge, subscribes, logs `ready`, then answers frames.
///
/// # Errors
/// A model, profile or table that cannot be loaded; topics the backend refuses.
pub async fn run(cfg: RobotConfig, ros: SharedRos, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<RobotSummary> {
    let mut stop = stop_on(shutdown);
    if cfg.threads > 0 {
        tch::set_num_threads(cfg.threads);
    }
    let Some((load, origin)) = input_load(&cfg, &ros, &mut stop).await? else {
        return Ok(RobotSummary::default());
    };
    let model = load_model(&cfg, load, origin).await?;
    let input = &model.facts.input;
    let target = match cfg.model_load.fit {
        // The model fits the camera's frames itself: frames are copied at the camera's size,
        // results map back through the model's own input.
        Some(fit) => match resolve_target(&cfg, &model.facts.fitted_shape, input.dtype, model.facts.dense_outputs)? {
            Target::Image(t) => {
                let frame = ImageTarget { width: fit.width as u32, height: fit.height as u32, fit: Fit::Resize, ..t };
                Target::Camera { frame, model: t }
            }
            other => other,
        },
        None => resolve_target(&cfg, &input.shape, input.dtype, model.facts.dense_outputs)?,
    };
    let shape: Vec<i64> = input.shape.iter().map(|&d| d as i64).collect();
    let (buckets, scale) = (model.facts.table.spec.buckets.clone(), model.facts.table.spec.bandwidth_scale);

    let session = cfg.edge.open().await?;
    let opts = client_options(&cfg, &model);
    let (names, model_hash) = (model.facts.names.clone(), model.loaded.hash.clone());
    let mut client = connect_edges(&cfg, &session, opts, model).await?;

    let shared = Shared::new(&cfg);
    shared.counters.connected.store(client.connected(), Ordering::Relaxed);
    ros.on_parameter_set(shared.live.clone());
    let outlet = Outlet::new(&cfg, &ros, &shared, names, model_hash)?;
    let diagnostics = ros.diagnostics_publisher(&cfg.topics.diagnostics)?;
    let _input_sub = subscribe_input(&cfg, &ros, &shared)?;
    let _bw_sub = subscribe_bandwidth(&cfg, &ros, &shared)?;
    let diag_task = spawn_diagnostics(&cfg, &ros, diagnostics, &shared, stop.clone());
    tracing::info!(
        robot = %cfg.robot_id, model = %cfg.model_source, connected = client.connected(), backend = ros.name(),
        topic = %match cfg.input { InputKind::Camera => cfg.image.transport.topic(&cfg.topics.image), InputKind::Lidar => cfg.topics.cloud.clone() },
        "ready"
    );

    let selector = BucketSelector::new(buckets, scale, cfg.hysteresis);
    let mut frames = Frames::new(&cfg, &shared, &outlet, client, target, shape, selector);
    frames.answer(&mut stop).await;
    let _ = diag_task.await;
    // The edge clients go before their session closes.
    drop(frames);
    Ok(finish(&session, &shared.counters, &ros).await)
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

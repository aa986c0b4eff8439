//! The node while active ([`Active`]): what activating brings up (the model on its worker, its
//! schedule table, the edge session and each input's clients) and frees again on deactivation,
//! and the frame loops that run in between, one for each input (camera), each publishing
//! through the outlet that configuring declared for it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::Poll;

use lop::model::LoadOptions;
use lop_runtime::bandwidth::BucketSelector;
use tokio::sync::watch;

use super::edges::{Edges, client_options, connect_edges};
use super::frames::{End, Frames, Requests};
use super::model::{ModelFacts, load_model};
use super::outlet::Outlet;
use super::shared::Shared;
use super::target::{Target, resolve_target};
use crate::backend::SharedRos;
use crate::config::{RobotConfig, Sensor};
use crate::convert::{Fit, ImageTarget};
use crate::error::Result;
use crate::input_shape::ShapeOrigin;
use crate::lifecycle::Pending;

/// What the node holds while active; dropping it frees the model and the edge clients.
pub(super) struct Active<'a> {
    cfg: &'a RobotConfig,
    /// One for each input, in the order of `cfg.inputs`.
    shared: &'a [Shared],
    session: zenoh::Session,
    /// Each input's edge clients (each input on a worker of its own, the weights shared) and what
    /// its frames become.
    inputs: Vec<(Edges, Target)>,
    /// The model's output names and hash, for the outlets.
    model: (Vec<String>, String),
    /// The model's input shape.
    shape: Vec<i64>,
    /// The table's buckets and bandwidth scale, each input's selector's.
    buckets: (Vec<f64>, f64),
}

/// What input `sensor`'s frames become for a model with `facts`: with `image.camera_size` the
/// camera's frames are copied at its size and results map back through the model's own input.
fn input_target(cfg: &RobotConfig, facts: &ModelFacts, sensor: &Sensor) -> Result<Target> {
    let input = &facts.input;
    let Some(fit) = cfg.model_load.fit else {
        return resolve_target(cfg, &input.shape, input.dtype, facts.dense_outputs, sensor.fit);
    };
    Ok(match resolve_target(cfg, &facts.fitted_shape, input.dtype, facts.dense_outputs, sensor.fit)? {
        Target::Image(t) => {
            let frame = ImageTarget { width: fit.width as u32, height: fit.height as u32, fit: Fit::Resize, ..t };
            Target::Camera { frame, model: t }
        }
        other => other,
    })
}

impl<'a> Active<'a> {
    /// Activates: loads the model at `load` once (its table from the cache after the first
    /// time), opens the edge session, connects each input's edges, and logs `ready`.
    ///
    /// # Errors
    /// A model, profile or table that cannot be loaded; topics the backend refuses.
    pub(super) async fn start(
        cfg: &'a RobotConfig,
        ros: &SharedRos,
        shared: &'a [Shared],
        load: LoadOptions,
        origin: ShapeOrigin,
    ) -> Result<Active<'a>> {
        let model = load_model(cfg, load, origin).await?;
        let targets = cfg.inputs.iter().map(|s| input_target(cfg, &model.facts, s)).collect::<Result<Vec<_>>>()?;
        let shape: Vec<i64> = model.facts.input.shape.iter().map(|&d| d as i64).collect();
        let buckets = (model.facts.table.spec.buckets.clone(), model.facts.table.spec.bandwidth_scale);
        let session = cfg.edge.open().await?;
        let opts = client_options(cfg, &model);
        let (names, model_hash) = (model.facts.names.clone(), model.loaded.hash.clone());
        let mut clients = connect_edges(cfg, &session, opts, model).await?;
        // Ready and connected once every input's edge session is up.
        let mut connected = true;
        for (client, s) in clients.iter_mut().zip(shared) {
            let up = client.connected();
            s.counters.connected.store(up, Ordering::Relaxed);
            connected &= up;
        }
        let topics: Vec<String> = cfg.inputs.iter().map(Sensor::input_topic).collect();
        // Logged under the node's own target (`robot_node::robot: ready`), which scripts and
        // tests wait for, as before the node was managed.
        tracing::info!(
            target: "robot_node::robot",
            robot = %cfg.robot_id, model = %cfg.model_source, connected, backend = ros.name(),
            topic = %topics.join(","), inputs = cfg.inputs.len(),
            "ready"
        );
        let inputs = clients.into_iter().zip(targets).collect();
        Ok(Active { cfg, shared, session, inputs, model: (names, model_hash), shape, buckets })
    }

    /// Answers every input's frames through its outlet until `stop` (`None`) or a transition
    /// handed to the node (returned: deactivate or shutdown, the only ones an active node
    /// allows), then frees the model, the edge clients and the edge session. A frame still
    /// waiting in a mailbox is counted as skipped while inactive.
    pub(super) async fn run(
        self,
        outlets: &mut [Outlet<'a>],
        stop: &mut watch::Receiver<bool>,
        requests: &mut Requests,
    ) -> Option<Pending> {
        let Active { cfg, shared, session, inputs, model, shape, buckets } = self;
        for outlet in outlets.iter_mut() {
            outlet.set_model(model.0.clone(), model.1.clone());
        }
        shared[0].active.store(true, Ordering::Relaxed);
        let mut frames: Vec<Frames<'_>> = inputs
            .into_iter()
            .zip(shared.iter().zip(outlets.iter()))
            .zip(&cfg.inputs)
            .map(|(((client, target), (s, out)), sensor)| {
                let selector = BucketSelector::new(buckets.0.clone(), buckets.1, cfg.hysteresis);
                Frames::new(cfg, s, out, sensor, client, target, shape.clone(), selector)
            })
            .collect();
        let (end, ended) = watch::channel(End::Running);
        let next = {
            let mut loops: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> =
                frames.iter_mut().map(|f| Box::pin(f.answer(ended.clone())) as Pin<Box<dyn Future<Output = ()> + Send + '_>>).collect();
            let next = tokio::select! {
                _ = stop.changed() => None,
                p = requests.recv() => p,
                () = all(&mut loops) => None,
            };
            // A transition: every input answers what it has in flight first.
            let _ = end.send(if next.is_some() { End::Drain } else { End::Stop });
            all(&mut loops).await;
            next
        };
        shared[0].active.store(false, Ordering::Relaxed);
        // The edge clients (and the model's worker) go before their session closes.
        drop(frames);
        if let Err(e) = session.close().await {
            tracing::debug!(error = %e, "closing the edge session");
        }
        for s in shared {
            s.counters.connected.store(false, Ordering::Relaxed);
            if s.mailbox.try_take().is_some() {
                s.counters.skipped_inactive.fetch_add(1, Ordering::Relaxed);
            }
        }
        next
    }
}

/// Polls every future of `loops` until all have finished (each is dropped once finished, so
/// that polling again after all finished resolves at once).
async fn all<'f>(loops: &mut Vec<Pin<Box<dyn Future<Output = ()> + Send + 'f>>>) {
    std::future::poll_fn(|cx| {
        loops.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        if loops.is_empty() { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
}

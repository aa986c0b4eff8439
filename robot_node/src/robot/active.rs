//! The node while active ([`Active`]): what activating brings up (the model on its worker, its
//! schedule table, the edge session and clients) and frees again on deactivation, and the frame
//! loop that runs in between (publishing through the outlet that configuring declared).

use std::sync::atomic::Ordering;

use lop::model::LoadOptions;
use lop_runtime::bandwidth::BucketSelector;
use tokio::sync::watch;

use super::edges::{Edges, client_options, connect_edges};
use super::frames::{Frames, Requests};
use super::model::load_model;
use super::outlet::Outlet;
use super::shared::Shared;
use super::target::{Target, resolve_target};
use crate::backend::SharedRos;
use crate::config::{InputKind, RobotConfig};
use crate::convert::{Fit, ImageTarget};
use crate::error::Result;
use crate::input_shape::ShapeOrigin;
use crate::lifecycle::Pending;

/// What the node holds while active; dropping it frees the model and the edge clients.
pub(super) struct Active<'a> {
    cfg: &'a RobotConfig,
    shared: &'a Shared,
    session: zenoh::Session,
    client: Edges,
    /// The model's output names and hash, for the outlet.
    model: (Vec<String>, String),
    target: Target,
    /// The model's input shape.
    shape: Vec<i64>,
    selector: BucketSelector,
}

impl<'a> Active<'a> {
    /// Activates: loads the model at `load` (its table from the cache after the first time),
    /// opens the edge session, connects the edges, and logs `ready`.
    ///
    /// # Errors
    /// A model, profile or table that cannot be loaded; topics the backend refuses.
    pub(super) async fn start(
        cfg: &'a RobotConfig,
        ros: &SharedRos,
        shared: &'a Shared,
        load: LoadOptions,
        origin: ShapeOrigin,
    ) -> Result<Active<'a>> {
        let model = load_model(cfg, load, origin).await?;
        let input = &model.facts.input;
        let target = match cfg.model_load.fit {
            // The model fits the camera's frames itself: frames are copied at the camera's size,
            // results map back through the model's own input.
            Some(fit) => match resolve_target(cfg, &model.facts.fitted_shape, input.dtype, model.facts.dense_outputs)? {
                Target::Image(t) => {
                    let frame = ImageTarget { width: fit.width as u32, height: fit.height as u32, fit: Fit::Resize, ..t };
                    Target::Camera { frame, model: t }
                }
                other => other,
            },
            None => resolve_target(cfg, &input.shape, input.dtype, model.facts.dense_outputs)?,
        };
        let shape: Vec<i64> = input.shape.iter().map(|&d| d as i64).collect();
        let (buckets, scale) = (model.facts.table.spec.buckets.clone(), model.facts.table.spec.bandwidth_scale);
        let session = cfg.edge.open().await?;
        let opts = client_options(cfg, &model);
        let (names, model_hash) = (model.facts.names.clone(), model.loaded.hash.clone());
        let mut client = connect_edges(cfg, &session, opts, model).await?;
        shared.counters.connected.store(client.connected(), Ordering::Relaxed);
        // Logged under the node's own target (`robot_node::robot: ready`), which scripts and
        // tests wait for, as before the node was managed.
        tracing::info!(
            target: "robot_node::robot",
            robot = %cfg.robot_id, model = %cfg.model_source, connected = client.connected(), backend = ros.name(),
            topic = %match cfg.input { InputKind::Camera => cfg.image.transport.topic(&cfg.topics.image), InputKind::Lidar => cfg.topics.cloud.clone() },
            "ready"
        );
        let selector = BucketSelector::new(buckets, scale, cfg.hysteresis);
        Ok(Active { cfg, shared, session, client, model: (names, model_hash), target, shape, selector })
    }

    /// Answers frames through `outlet` until `stop` (`None`) or a transition handed to the
    /// node (returned: deactivate or shutdown, the only ones an active node allows), then frees
    /// the model, the edge clients and the edge session. A frame still waiting in the mailbox is counted as
    /// skipped while inactive.
    pub(super) async fn run(self, outlet: &mut Outlet<'a>, stop: &mut watch::Receiver<bool>, requests: &mut Requests) -> Option<Pending> {
        let Active { cfg, shared, session, client, model, target, shape, selector } = self;
        outlet.set_model(model.0, model.1);
        shared.active.store(true, Ordering::Relaxed);
        let mut frames = Frames::new(cfg, shared, outlet, client, target, shape, selector);
        let next = frames.answer(stop, requests).await;
        shared.active.store(false, Ordering::Relaxed);
        // The edge clients (and the model's worker) go before their session closes.
        drop(frames);
        if let Err(e) = session.close().await {
            tracing::debug!(error = %e, "closing the edge session");
        }
        shared.counters.connected.store(false, Ordering::Relaxed);
        if shared.mailbox.try_take().is_some() {
            shared.counters.skipped_inactive.fetch_add(1, Ordering::Relaxed);
        }
        next
    }
}

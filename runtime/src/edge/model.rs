//! The model store: each model the edge serves, loaded only from its own store (matched by
//! content hash), with its warm replicas (none while placement keeps it cold), its recent
//! demand, its mean server seconds and its refusals; and loading every model at start, warm
//! while they fit the memory budget.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use lop::graph::DType as GraphDType;
use lop::model::LoadOptions;
use lop::plan::Side;
use lop::profile::Profile;
use lop_msgs::Digest;

use super::options::{DEMAND_WINDOW, EdgeModel, EdgeOptions};
use super::replica::{Replica, spawn_replicas, weight_bytes};
use crate::error::{Error, Result};
use crate::exec::GraphMeta;
use crate::exec::worker::Loaded;
use crate::plans::digest;

/// A model's recent demand: requests (Hellos and Starts), decayed with [`DEMAND_WINDOW`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Demand {
    count: f64,
    at: Instant,
}

impl Demand {
    fn decayed(&self, now: Instant) -> f64 {
        self.count * (-now.saturating_duration_since(self.at).as_secs_f64() / DEMAND_WINDOW.as_secs_f64()).exp()
    }
}

/// A model the edge serves, as loaded.
pub(super) struct Model {
    pub(super) id: String,
    /// Where it loads from, for placement's loads.
    pub(super) source: String,
    pub(super) load: LoadOptions,
    pub(super) hash: Digest,
    pub(super) meta: Arc<GraphMeta>,
    pub(super) input_dtype: Option<GraphDType>,
    pub(super) input_shape: Vec<u32>,
    /// Its warm replicas; none while it is cold (placement). A job holds the snapshot it was
    /// queued on, so unloading never pulls a replica from under a running inference.
    pub(super) replicas: std::sync::RwLock<Arc<Vec<Replica>>>,
    /// Bytes of weights its replicas hold when warm (every replica's copy).
    pub(super) bytes: u64,
    pub(super) demand: std::sync::Mutex<Demand>,
    pub(super) server_profile: Profile,
    /// Recent mean server compute seconds per inference (f64 bits): the profile's sum at
    /// first, then a moving average of measured inferences.
    pub(super) server_s: AtomicU64,
    /// Its inferences that did not run here: refused as overloaded, forwarded, late; and
    /// those the robot cancelled.
    pub(super) refusals: ModelRefusals,
}

/// Per model: inferences refused or cancelled (see [`ModelStats`](super::ModelStats)).
#[derive(Debug, Default)]
pub(super) struct ModelRefusals {
    pub(super) overloaded: AtomicU64,
    pub(super) forwarded: AtomicU64,
    pub(super) late: AtomicU64,
    pub(super) cancelled: AtomicU64,
}

impl Model {
    pub(super) fn replicas(&self) -> Arc<Vec<Replica>> {
        self.replicas.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    pub(super) fn set_replicas(&self, replicas: Vec<Replica>) -> Arc<Vec<Replica>> {
        std::mem::replace(&mut *self.replicas.write().unwrap_or_else(std::sync::PoisonError::into_inner), Arc::new(replicas))
    }

    /// Counts one request for it.
    pub(super) fn asked(&self) {
        let now = Instant::now();
        let mut d = self.demand.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *d = Demand { count: d.decayed(now) + 1.0, at: now };
    }

    /// Requests per second lately.
    pub(super) fn demand_per_s(&self, now: Instant) -> f64 {
        self.demand.lock().unwrap_or_else(std::sync::PoisonError::into_inner).decayed(now) / DEMAND_WINDOW.as_secs_f64()
    }
}

impl Model {
    /// The served model `m` as loaded (`info`), with its replicas (none when cold) and the
    /// bytes they hold when warm; its server seconds start at its profile's sum.
    ///
    /// # Errors
    /// A model hash that is not a digest.
    fn new(m: &EdgeModel, info: Loaded, bytes: u64, replicas: Vec<Replica>) -> Result<Model> {
        let inputs: Vec<usize> = (0..info.meta.len()).filter(|&i| info.meta.is_input(i)).collect();
        let first = inputs.first().map(|&i| info.meta.info(i).clone());
        let profiled_s: f64 = m.server_profile.ops.iter().map(|op| op.fit.time(op.out_rows.max(1))).sum();
        Ok(Model {
            id: m.id.clone(),
            source: m.source.clone(),
            load: m.load.clone(),
            bytes,
            demand: std::sync::Mutex::new(Demand { count: 0.0, at: Instant::now() }),
            hash: digest(&info.hash)?,
            meta: Arc::new(info.meta),
            input_dtype: first.as_ref().map(|i| i.dtype),
            input_shape: first.map(|i| i.shape.iter().map(|&d| d as u32).collect()).unwrap_or_default(),
            replicas: std::sync::RwLock::new(Arc::new(replicas)),
            server_profile: m.server_profile.clone(),
            server_s: AtomicU64::new(profiled_s.max(1e-6).to_bits()),
            refusals: ModelRefusals::default(),
        })
    }
}

/// Weight of the newest measurement in a model's moving mean of server seconds.
pub(super) const SERVER_S_EWMA: f64 = 0.2;

/// Loads every model served, in configuration order (see [`load_model`]).
///
/// # Errors
/// As [`load_model`].
pub(super) async fn load_models(opts: &EdgeOptions) -> Result<Vec<Model>> {
    let mut models = Vec::new();
    // Preloading under a memory budget: models in configuration order while they fit.
    let mut budget_left = opts.memory_budget;
    for m in &opts.models {
        models.push(load_model(opts, m, &mut budget_left).await?);
    }
    Ok(models)
}

/// Loads one model: one replica first (it tells the model's hash, shapes and size), then the
/// others when it is warm, i.e. when there is no memory budget or it fits in what `budget_left`
/// still holds (taken from it); a cold model keeps no replica until placement loads it.
///
/// # Errors
/// A bad model id, a model that does not load, one larger than the whole memory budget, a
/// server profile that is not one of that model.
async fn load_model(opts: &EdgeOptions, m: &EdgeModel, budget_left: &mut Option<u64>) -> Result<Model> {
    lop_msgs::validate_id(&m.id).map_err(|e| Error::InvalidConfig { what: format!("model id '{}': {e}", m.id) })?;
    // One replica first: it tells the model's hash, shapes and size.
    let (mut replicas, info) = spawn_replicas(&m.id, &m.source, &m.load, &opts.devices[..1], 1).await?;
    let bytes = replicas[0].worker.call(|g| weight_bytes(g)).await? * (opts.replicas * opts.devices.len()) as u64;
    if let Some(budget) = opts.memory_budget
        && bytes > budget
    {
        return Err(Error::InvalidConfig {
            what: format!(
                "model '{}' takes {:.1} MB warm ({} replicas), more than the memory budget of {:.1} MB: it could never be served",
                m.id,
                bytes as f64 / 1e6,
                opts.replicas,
                budget as f64 / 1e6
            ),
        });
    }
    let warm = match budget_left.as_mut() {
        None => true,
        Some(left) if bytes <= *left => {
            *left -= bytes;
            true
        }
        Some(_) => false,
    };
    if warm {
        if opts.replicas > 1 {
            let (more, _) = spawn_replicas(&m.id, &m.source, &m.load, &opts.devices[..1], opts.replicas - 1).await?;
            replicas.extend(more);
        }
        if opts.devices.len() > 1 {
            let (more, _) = spawn_replicas(&m.id, &m.source, &m.load, &opts.devices[1..], opts.replicas).await?;
            // Their device indices count from the second device.
            replicas.extend(more.into_iter().map(|mut r| {
                r.device += 1;
                r
            }));
        }
    }
    if m.server_profile.model_hash != info.hash || m.server_profile.role != Side::Server {
        return Err(Error::InvalidConfig {
            what: format!("the server profile given for model '{}' is not a server profile of that model", m.id),
        });
    }
    if warm {
        let devices: Vec<&str> = opts.devices.iter().map(|d| d.name.as_str()).collect();
        tracing::info!(model = %m.id, hash = %info.hash, replicas = opts.replicas, ?devices, mb = bytes as f64 / 1e6, "model loaded");
    } else {
        replicas.clear();
        tracing::info!(model = %m.id, hash = %info.hash, mb = bytes as f64 / 1e6, "model cold: past the memory budget until robots ask for it");
    }
    Model::new(m, info, bytes, replicas)
}

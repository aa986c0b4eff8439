//! How to run the edge: the models it serves ([`EdgeModel`]), the devices it computes on
//! ([`ServerDevice`]), batching across robots ([`Batching`]) and the rest of [`EdgeOptions`];
//! where a fleet's edge forwards what it cannot serve in time ([`Forwarding`], set once its fleet
//! view is up); and the check that refuses options the edge cannot run with, before anything
//! loads. Plain data: the service's rooms read it, none changes it.

use std::path::PathBuf;
use std::time::Duration;

use lop::model::LoadOptions;
use lop::planner::table::TableSpec;
use lop::profile::Profile;
use lop_msgs::protocol::Limits;
use tch::Device;

use crate::error::{Error, Result};

/// A model the edge serves.
#[derive(Debug, Clone)]
pub struct EdgeModel {
    /// Its id (what robots name in Hello).
    pub id: String,
    /// `zoo:NAME` or an ONNX path in the model store.
    pub source: String,
    /// Loading options (input shape for dynamic ONNX inputs).
    pub load: LoadOptions,
    /// The edge's own profile of it (role server).
    pub server_profile: Profile,
}

/// How to run the edge.
#[derive(Debug, Clone)]
pub struct EdgeOptions {
    /// Models served.
    pub models: Vec<EdgeModel>,
    /// Robot profiles known up front (a robot's Hello names its profile by hash).
    pub robot_profiles: Vec<Profile>,
    /// A directory searched for `*.json` robot profiles when a Hello names an unknown hash.
    pub profiles_dir: Option<PathBuf>,
    /// The schedule table configuration; a robot's Hello must carry its hash.
    pub spec: TableSpec,
    /// Where schedule tables are cached.
    pub cache_dir: PathBuf,
    /// Warm replicas per model on each device (concurrent inferences per model and device).
    pub replicas: usize,
    /// Where the server computes: one device or several (each with `replicas` replicas of every
    /// warm model; an inference goes to the replica that will finish it first).
    pub devices: Vec<ServerDevice>,
    /// Frame size limit.
    pub limits: Limits,
    /// How long a session may take to send Hello.
    pub hello_timeout: Duration,
    /// How long a Hello waits for its schedule table (loaded from the cache or built for a new
    /// robot profile) before the edge answers Reject `Planning` and finishes it in the background.
    pub table_wait: Duration,
    /// Server kernels stretched this many times (emulating a slower server, e.g. in a fleet
    /// test; 1 = none). The load reports measure it like any other slowness.
    pub dilation: f64,
    /// Memory the models' warm replicas may take, in bytes of weights (`None`: every model is
    /// warm). With a budget, the models kept warm are placed by recent demand
    /// (`lop_fleet::place`, EPARA's placement) every [`PLACEMENT_PERIOD`]: a Hello for a cold
    /// model is answered Reject `Loading` and has it placed at once; its load reports say which
    /// models are warm, so routing avoids the edge for a cold one.
    pub memory_budget: Option<u64>,
    /// Batching across robots: concurrent inferences of one plan queued on a replica run as
    /// one batch.
    pub batching: Batching,
}

/// One device an edge computes on.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerDevice {
    /// Its name in the configuration and the metrics (`cuda:1`, or `cpu:0`, `cpu:1` for CPU
    /// replica groups standing in for devices).
    pub name: String,
    /// Where libtorch runs its replicas.
    pub device: Device,
    /// Its speed relative to the first device (measured profiles' time on the first over
    /// theirs on it; 1 when not measured): an inference there takes the model's server seconds
    /// over this.
    pub speed: f64,
}

impl ServerDevice {
    /// The one device of an edge, named as the configuration names it (`cpu`, `cuda:N`).
    pub fn only(device: Device) -> ServerDevice {
        let name = match device {
            Device::Cuda(i) => format!("cuda:{i}"),
            _ => "cpu".to_string(),
        };
        ServerDevice { name, device, speed: 1.0 }
    }
}

/// Batching across robots (EPARA's multi-request batching): inferences of the same model and
/// plan (the same server chunks and row ranges) waiting on one replica run as one batch, every
/// chunk one kernel call for all of them, each result the one its robot would get alone.
/// Batches form only from work already waiting, so batching adds no wait to an idle edge.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Batching {
    /// The most inferences in one batch (1: no batching).
    pub max: usize,
    /// How long a batch waits for a member's band that every other member has sent before it
    /// drops that member (its robot finishes the frame alone).
    pub straggler_wait: Duration,
}

impl Batching {
    /// The most inferences a batch may hold (`edge.yaml`'s `max_batch` is checked against it).
    pub const MAX: usize = 64;
}

impl Default for Batching {
    /// No batching.
    fn default() -> Batching {
        Batching { max: 1, straggler_wait: Duration::from_millis(20) }
    }
}

/// Picks the edge an inference goes to when this one cannot meet its deadline:
/// `(model id, seconds left of the deadline, edges to leave out)` to a fleet id, or `None`
/// when no edge can. See `crate::fleet::forward`.
pub type PickEdge = Box<dyn Fn(&str, f64, &[String]) -> Option<String> + Send + Sync>;

/// How an edge of a fleet forwards the inferences it cannot serve in time (EPARA's
/// forwarding). The edge answers a Start with Frame `Forward` naming the other edge; the robot,
/// which holds the input, sends it there (one upload instead of a relay's two) with the path in
/// its Start. An edge never forwards to an edge of the path or to itself, nor once the path is
/// `max_forwards` long: then it answers `Overloaded` at once and the robot runs the frame.
pub struct Forwarding {
    /// This edge's fleet id (appended to the path).
    pub edge_id: String,
    /// Most forwards a request may take, this one included (the default is 2).
    pub max_forwards: usize,
    /// Where to.
    pub pick: PickEdge,
}

impl std::fmt::Debug for Forwarding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarding").field("edge_id", &self.edge_id).field("max_forwards", &self.max_forwards).finish()
    }
}

/// How often an edge with a memory budget places its models again.
pub const PLACEMENT_PERIOD: Duration = Duration::from_secs(2);

/// The time constant of a model's demand (requests per second, decayed over about this long).
pub const DEMAND_WINDOW: Duration = Duration::from_secs(30);

/// Refuses options the edge cannot run with, before anything loads.
///
/// # Errors
/// [`Error::InvalidConfig`] for no replicas, a dilation under 1, a zero memory budget; the
/// table spec's own errors.
pub(super) fn check_options(opts: &EdgeOptions) -> Result<()> {
    if opts.replicas == 0 {
        return Err(Error::InvalidConfig { what: "replicas must be at least 1".into() });
    }
    if opts.devices.is_empty() {
        return Err(Error::InvalidConfig { what: "an edge needs at least one device".into() });
    }
    for (i, d) in opts.devices.iter().enumerate() {
        if opts.devices[..i].iter().any(|e| e.name == d.name) {
            return Err(Error::InvalidConfig { what: format!("device '{}' is listed twice", d.name) });
        }
        if !(d.speed.is_finite() && d.speed > 0.0) {
            return Err(Error::InvalidConfig { what: format!("device '{}': speed {} must be > 0", d.name, d.speed) });
        }
    }
    if !(opts.dilation.is_finite() && opts.dilation >= 1.0) {
        return Err(Error::InvalidConfig { what: format!("dilation must be >= 1, got {}", opts.dilation) });
    }
    opts.spec.check()?;
    if opts.memory_budget == Some(0) {
        return Err(Error::InvalidConfig { what: "the memory budget must be more than 0 bytes".into() });
    }
    Ok(())
}

//! The robot's way to the edges ([`Edges`]): the one edge configured, the site's fleet, or the
//! fleet with several frames in flight on lanes; the client options they share, and connecting
//! them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lop::planner::table::ScheduleTable;
use lop_runtime::client::{ClientOptions, Inference, RobotClient};
use lop_runtime::exec::CameraJpeg;
use lop_runtime::fleet::{FleetClient, FleetInference, FleetStream, StreamResult};
use lop_runtime::zenoh_service::ZenohConnector;

use super::counters::RobotCounters;
use super::model::{RobotModel, replanner};
use crate::config::RobotConfig;
use crate::error::{Error, Result};
use lop_runtime::exec::Worker;

/// The robot's way to the edges: the one edge configured (`edge.mode` client or peer), the
/// site's fleet (`edge.mode: fleet`), each frame routed to an edge that can meet its deadline,
/// or the fleet with several frames in flight (`edge.lanes` > 1), results in frame order.
pub(super) enum Edges {
    One(Box<RobotClient<ZenohConnector>>),
    Fleet(Box<FleetClient>),
    Stream {
        stream: Box<FleetStream>,
        /// The lanes' table (the robot's own, the same for every lane).
        table: Box<ScheduleTable>,
        /// Whether a lane had a session up when last seen free.
        connected: bool,
    },
}

/// What an inference call gives back: the answer, or (with lanes) the frames that can be
/// published now, by number, in publication order.
pub(super) enum Answered {
    Now(Box<Inference>),
    Stream(Vec<(u64, lop_runtime::Result<Inference>)>),
}

/// Counts where a fleet frame ran and returns its inference.
fn routed(r: FleetInference, counters: &RobotCounters) -> Inference {
    tracing::debug!(routed = ?r.routed, path = ?r.path, id = r.inference.stats.id, "fleet: frame routed");
    if matches!(r.routed, lop_runtime::fleet::Routed::Robot(_)) {
        counters.fleet_on_robot.fetch_add(1, Ordering::Relaxed);
    }
    r.inference
}

impl Edges {
    /// Whether an edge session is up (with lanes: a free lane's, as last seen).
    pub(super) fn connected(&mut self) -> bool {
        match self {
            Edges::One(c) => c.connected(),
            Edges::Fleet(f) => f.connected(),
            Edges::Stream { stream, connected, .. } => {
                let free: Vec<bool> = stream.idle_lanes().map(|f| f.connected()).collect();
                if !free.is_empty() {
                    *connected = free.contains(&true);
                }
                *connected
            }
        }
    }

    /// Sets the method of every client (`method`, a live parameter).
    pub(super) fn set_method(&mut self, method: &str) {
        match self {
            Edges::One(c) => c.set_method(method),
            Edges::Fleet(f) => f.set_method(method),
            Edges::Stream { stream, .. } => stream.set_method(method),
        }
    }

    /// The hash of the table in use (it changes when the robot planned the edge's table).
    pub(super) fn table_hash(&self) -> String {
        match self {
            Edges::One(c) => c.book().table_hash.to_hex(),
            Edges::Fleet(f) => f.table().hash.clone(),
            Edges::Stream { table, .. } => table.hash.clone(),
        }
    }

    /// The buckets and bandwidth scale of the table in use.
    pub(super) fn buckets(&self) -> (Vec<f64>, f64) {
        let spec = match self {
            Edges::One(c) => &c.book().table.spec,
            Edges::Fleet(f) => &f.table().spec,
            Edges::Stream { table, .. } => &table.spec,
        };
        (spec.buckets.clone(), spec.bandwidth_scale)
    }

    /// Frames the edge clients dropped (the lanes not running a frame, with lanes).
    pub(super) fn dropped_total(&mut self) -> u64 {
        match self {
            Edges::One(c) => c.dropped().total(),
            Edges::Fleet(f) => f.dropped_total(),
            Edges::Stream { stream, .. } => stream.idle_lanes().map(|f| f.dropped_total()).sum(),
        }
    }

    /// Whether a frame can start now (with lanes: a lane is free).
    pub(super) fn lane_free(&self) -> bool {
        match self {
            Edges::Stream { stream, .. } => stream.has_free_lane(),
            _ => true,
        }
    }

    /// Frames in flight and not yet published (lanes only).
    pub(super) fn in_flight(&self) -> usize {
        match self {
            Edges::Stream { stream, .. } => stream.in_flight(),
            _ => 0,
        }
    }

    /// With lanes: waits for a frame to finish (or one in flight to pass its deadline) and
    /// returns the frames that can be published now.
    pub(super) async fn next_done(&mut self, counters: &RobotCounters) -> Vec<(u64, lop_runtime::Result<Inference>)> {
        let Edges::Stream { stream, .. } = self else { return Vec::new() };
        match stream.next_done().await {
            Ok(done) => Self::published(done, counters),
            Err(e) => {
                tracing::error!(error = %e, "a stream lane failed");
                Vec::new()
            }
        }
    }

    /// The lanes' released frames by number, counting the late ones and where each ran.
    fn published(done: Vec<StreamResult>, counters: &RobotCounters) -> Vec<(u64, lop_runtime::Result<Inference>)> {
        done.into_iter()
            .map(|r| {
                if r.late {
                    counters.fleet_late.fetch_add(1, Ordering::Relaxed);
                }
                (r.seq, r.result.map(|f| routed(f, counters)))
            })
            .collect()
    }

    /// Runs (or, with lanes, submits) frame `seq` at `bucket`: the answer now, or what the lanes
    /// released meanwhile.
    pub(super) async fn infer(
        &mut self,
        seq: u64,
        (inputs, camera): (Vec<tch::Tensor>, Option<CameraJpeg>),
        bucket: f64,
        deadline: Duration,
        counters: &RobotCounters,
    ) -> lop_runtime::Result<Answered> {
        match self {
            Edges::One(c) => Ok(Answered::Now(Box::new(c.infer_camera(inputs, camera, bucket).await?))),
            Edges::Fleet(f) => {
                let r = f.infer_camera(inputs, camera, bucket, deadline).await?;
                counters.fleet_edges_up.store(f.edges_up() as u64, Ordering::Relaxed);
                counters.set_links(&f.link_estimates());
                Ok(Answered::Now(Box::new(routed(r, counters))))
            }
            Edges::Stream { stream, .. } => {
                let done = stream.submit_camera(seq, inputs, camera, bucket, deadline).await?;
                if let Some(up) = stream.idle_lanes().map(|f| f.edges_up()).max() {
                    counters.fleet_edges_up.store(up as u64, Ordering::Relaxed);
                }
                // Each lane measures the edges it used; the idle lane that knows the most edges.
                if let Some(links) = stream.idle_lanes().map(|f| f.link_estimates()).max_by_key(Vec::len) {
                    counters.set_links(&links);
                }
                Ok(Answered::Stream(Self::published(done, counters)))
            }
        }
    }
}

/// The edge clients' options from the configuration, with the robot's profile (sent in Hello)
/// and the replanner.
pub(super) fn client_options(cfg: &RobotConfig, model: &RobotModel) -> ClientOptions {
    let mut opts = ClientOptions::new(&cfg.robot_id, &cfg.model_id);
    opts.method = cfg.method.clone();
    opts.dilation = cfg.dilation;
    opts.input_wire = cfg.table.input_wire();
    opts.device = cfg.device;
    opts.deadline_factor = cfg.deadline_factor;
    opts.deadline_slack = cfg.deadline_slack;
    opts.hello_timeout = cfg.hello_timeout;
    opts.retry_interval = cfg.retry_interval;
    // Sent in Hello: an edge that has never seen this robot plans for it (no file to copy).
    opts.robot_profile = Some(model.facts.robot_profile.clone());
    // An edge that planned for another server profile (its own measured one, say) sends it in
    // Welcome: the robot plans that table on a copy of the model, running alone meanwhile.
    opts.replan = Some(replanner(cfg, model.replan_load.clone(), model.facts.robot_profile.clone()));
    opts
}

/// Connects each of the robot's inputs to the edges, in the order of `cfg.inputs`, each input
/// (camera) a session of its own under its edge id: to the one edge configured, or (fleet mode)
/// to the site's fleet. The model's weights are in memory once: the first input runs on the
/// model's worker, each other one on a worker of its own whose copy of the model shares the
/// weights' storage ([`Worker::share`]), so the inputs' inferences run at the same time (one
/// computes while another waits on the edge, and the edge can batch them); a fleet's workers, one
/// per edge used, share them too.
///
/// # Errors
/// A client that cannot be built (the table or a lane's robot id refused), a worker that does
/// not start.
pub(super) async fn connect_edges(
    cfg: &RobotConfig,
    session: &zenoh::Session,
    opts: ClientOptions,
    model: RobotModel,
) -> Result<Vec<Edges>> {
    let RobotModel { worker, loaded, facts, .. } = model;
    if cfg.edge.fleet() {
        return connect_fleets(cfg, session, opts, worker, facts).await;
    }
    let mut clients = Vec::with_capacity(cfg.inputs.len());
    for (k, input) in cfg.inputs.iter().enumerate() {
        let opts = ClientOptions { robot_id: input.edge_id.clone(), ..opts.clone() };
        let connector = ZenohConnector::new(session.clone(), &input.edge_id);
        let worker = input_worker(&worker, k, &input.name).await?;
        let client = RobotClient::new(connector, opts, worker, loaded.meta.clone(), &loaded.hash, facts.table.clone()).await?;
        clients.push(Edges::One(Box::new(client)));
    }
    Ok(clients)
}

/// The worker of input `k` (named `name`): the model's own for the first, a worker of its own
/// sharing the model's weights for each other one.
async fn input_worker(worker: &Worker, k: usize, name: &str) -> Result<Worker> {
    if k == 0 {
        return Ok(worker.clone());
    }
    Ok(worker.share(&format!("lop-robot-{name}")).await?)
}

/// Connects each input to the site's fleet (see [`connect_fleet`]); every edge's worker of every
/// input runs a copy of the model sharing the loaded one's weights (a copy kept for them, the
/// loaded model's worker let go).
///
/// # Errors
/// As [`connect_fleet`]; a model worker that is gone.
async fn connect_fleets(
    cfg: &RobotConfig,
    session: &zenoh::Session,
    opts: ClientOptions,
    worker: Worker,
    facts: super::model::ModelFacts,
) -> Result<Vec<Edges>> {
    let template = std::sync::Mutex::new(worker.call(|g| g.share()).await?);
    drop(worker);
    let loader: lop_runtime::fleet::ModelLoader =
        Arc::new(move || Ok(template.lock().unwrap_or_else(std::sync::PoisonError::into_inner).share()));
    tracing::info!(
        endpoint = %cfg.edge.endpoint,
        deadline_ms = cfg.fleet_deadline.as_secs_f64() * 1e3,
        binding = cfg.fleet_deadline_binding,
        lanes = cfg.fleet_lanes,
        inputs = cfg.inputs.len(),
        site_shards_heard = ?cfg.fleet_site_shards,
        "fleet mode: frames are routed over the edges found"
    );
    let mut edges = Vec::with_capacity(cfg.inputs.len());
    for input in &cfg.inputs {
        let opts = ClientOptions { robot_id: input.edge_id.clone(), ..opts.clone() };
        edges.push(connect_fleet(cfg, session, opts, &facts, loader.clone()).await?);
    }
    Ok(edges)
}

/// Connects one input to the site's fleet under `opts.robot_id`: a worker per edge used (and
/// one for frames kept on the robot), each from `loader`; with lanes (one input only), a fleet
/// client per lane.
///
/// # Errors
/// A client that cannot be built (the table or a lane's robot id refused).
async fn connect_fleet(
    cfg: &RobotConfig,
    session: &zenoh::Session,
    opts: ClientOptions,
    facts: &super::model::ModelFacts,
    loader: lop_runtime::fleet::ModelLoader,
) -> Result<Edges> {
    if cfg.fleet_lanes <= 1 {
        let (table, cost) = (facts.table.clone(), facts.cost.clone());
        let mut fleet = FleetClient::new(session.clone(), opts, table, cost, loader, lop_runtime::fleet::STALE_AFTER).await?;
        fleet.set_deadline_binding(cfg.fleet_deadline_binding);
        if let Some(shards) = cfg.fleet_site_shards {
            fleet.hear_site(shards).await?;
        }
        return Ok(Edges::Fleet(Box::new(fleet)));
    }
    // Each lane a fleet client with sessions of its own (robot id <robot_id>.lane<k>).
    let mut lanes = Vec::new();
    for k in 0..cfg.fleet_lanes {
        let mut lane_opts = opts.clone();
        lane_opts.robot_id = lop_msgs::lane_robot_id(&cfg.robot_id, k).map_err(|e| Error::Config { what: format!("edge.lanes: {e}") })?;
        let (session, table, cost, loader) = (session.clone(), facts.table.clone(), facts.cost.clone(), loader.clone());
        let mut lane = FleetClient::new(session, lane_opts, table, cost, loader, lop_runtime::fleet::STALE_AFTER).await?;
        lane.set_deadline_binding(cfg.fleet_deadline_binding);
        if let Some(shards) = cfg.fleet_site_shards {
            lane.hear_site(shards).await?;
        }
        lanes.push(lane);
    }
    let connected = lanes.iter().any(FleetClient::connected);
    Ok(Edges::Stream { stream: Box::new(FleetStream::new(lanes)?), table: Box::new(facts.table.clone()), connected })
}

//! A robot in a fleet: no edge address, only a Zenoh session. Each inference is routed by
//! EPARA's rule (`lop_fleet::route`) over the edges of the robot's [`FleetView`], with one
//! [`RobotClient`] per edge it has used (its own session and schedule table; one model worker
//! shared by all), or run on the robot when no edge fits the deadline. Nothing is lost: an edge that fails a frame
//! leaves it to the robot (the client's exact fallback), and leaves the view within a second.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lop::planner::table::ScheduleTable;
use lop_fleet::{Choice, ModelCost, Policy, Router, ServerView};
use lop_msgs::key::SessionKeys;
use tch::Tensor;

use super::links::EdgeLinks;
use super::view::FleetView;
use crate::client::{ClientOptions, Hop, Hopped, Inference, RobotClient};
use crate::error::{Error, Result};
use crate::exec::CameraJpeg;
use crate::exec::Worker;
use crate::exec::worker::Loaded;
use crate::zenoh_service::ZenohConnector;

/// Loads the model for the fleet client's worker thread (one, shared by every edge client).
pub type ModelLoader = Arc<dyn Fn() -> lop::Result<lop::Graph> + Send + Sync>;

/// The name of the key space of the robot's own client, which no edge serves: it runs the
/// frames routed to the robot.
const ALONE: &str = "_robot-alone";

/// Weight of the newest frame in the moving mean of the robot's own time per frame.
const ROBOT_S_EWMA: f64 = 0.5;

/// Where one inference ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routed {
    /// At this edge (split with it, or finished by the robot if the edge failed it: see the
    /// inference's `fallback`).
    Edge(String),
    /// On the robot, for this reason.
    Robot(AloneWhy),
}

/// Why a frame ran on the robot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AloneWhy {
    /// No edge up reports the model warm (none holds it, or none is up).
    NoEdgeServes,
    /// Edges hold the model, but none has a session with this robot yet (being set up).
    NotConnected,
    /// No edge can have it back by the deadline, and the robot finishes first.
    Deadline,
    /// The method in force is `robot-only` (or static assignment's edge is not up).
    Chosen,
    /// An edge forwarded it to an edge this robot has no session with (yet).
    ForwardedNowhere,
}

/// One routed inference.
#[derive(Debug)]
pub struct FleetInference {
    /// The inference (outputs exactly the unsplit model's).
    pub inference: Inference,
    /// Where it ran: the edge that answered it, after any forwards.
    pub routed: Routed,
    /// The edges that forwarded it, in order (empty: answered where the router sent it).
    pub path: Vec<String>,
}

/// The robot's fleet client.
pub struct FleetClient {
    session: zenoh::Session,
    view: FleetView,
    template: ClientOptions,
    loader: ModelLoader,
    table: ScheduleTable,
    cost: ModelCost,
    router: Router,
    /// Static assignment (the `nearest` baseline): every frame to this edge, or the robot.
    home: Option<String>,
    /// Seconds the robot takes for a frame alone: the profile's figure until frames kept on
    /// the robot measure it (a moving mean of their wall time).
    robot_s: f64,
    rng: lop::Rng,
    clients: HashMap<String, RobotClient<ZenohConnector>>,
    /// The model worker every client shares (started with the first).
    worker: Option<(Worker, Loaded)>,
    alone: Option<RobotClient<ZenohConnector>>,
    warned_no_model: bool,
    /// Edges up in the view at the last frame.
    edges_up: usize,
    /// The upload rate measured to each edge.
    links: EdgeLinks,
    /// Whether the frame's deadline binds edges and the robot's wait ([`Hop::due`]).
    binding: bool,
}

impl std::fmt::Debug for FleetClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetClient").field("robot", &self.template.robot_id).field("edges", &self.clients.keys()).finish()
    }
}

impl FleetClient {
    /// A fleet client on `session`. `template` is every edge client's options (robot and model
    /// ids, method, deadlines; give it a `replan` so that a table is planned for each edge's
    /// server profile); `table` the robot's own table (planned for any server); `cost` the
    /// model's price list for routing (from the robot's profile, `ModelCost::derive`); `loader`
    /// loads the model for the worker every edge client shares.
    ///
    /// # Errors
    /// [`Error::Zenoh`] when the fleet view cannot subscribe; [`Error::InvalidConfig`] for a bad
    /// model cost.
    pub async fn new(
        session: zenoh::Session,
        template: ClientOptions,
        table: ScheduleTable,
        cost: ModelCost,
        loader: ModelLoader,
        stale_after: Duration,
    ) -> Result<FleetClient> {
        cost.check().map_err(|e| Error::InvalidConfig { what: e.to_string() })?;
        let view = FleetView::new(&session, stale_after).await?;
        let seed = template.robot_id.bytes().fold(0x6c6f_7066_6c65_6574u64, |h, b| h.rotate_left(5) ^ u64::from(b));
        Ok(FleetClient {
            session,
            view,
            template,
            loader,
            table,
            robot_s: cost.robot_s,
            cost,
            router: Router::new(Policy::Lop, 0),
            home: None,
            rng: lop::Rng::new(seed),
            clients: HashMap::new(),
            worker: None,
            alone: None,
            warned_no_model: false,
            edges_up: 0,
            links: EdgeLinks::new(),
            binding: true,
        })
    }

    /// Hears the site's digests of `shards` shards instead of every edge's report
    /// ([`FleetView::site`]; `edge.hear: site`): for sites of hundreds of edges, where a robot
    /// would otherwise receive ten reports a second from each.
    ///
    /// # Errors
    /// As [`FleetView::site`].
    pub async fn hear_site(&mut self, shards: usize) -> Result<()> {
        self.view = FleetView::site(&self.session, &self.template.robot_id, shards, self.view.stale_after()).await?;
        Ok(())
    }

    /// The fleet as this robot sees it.
    pub fn view(&self) -> &FleetView {
        &self.view
    }

    /// Routes by another policy, for comparisons: `Policy::Nearest` sends every frame to `home`
    /// (the robot runs it while `home` is not up); the others route over the edges up.
    pub fn set_policy(&mut self, policy: Policy, home: Option<&str>) {
        self.router = Router::new(policy, 0);
        self.home = home.map(str::to_string);
    }

    /// Whether each frame's deadline binds (`edge.deadline_binding`; on by default): edges
    /// forward what they cannot finish by it, and past it the robot stops waiting and computes
    /// the edge's bands itself while the edge goes on, each band taken from whichever side has it
    /// first ([`crate::exec::run_side_racing`]). Off, the deadline only routes frames, and
    /// edges and robot go by the plan's budget (3x its predicted makespan plus slack). On, a
    /// robot never idles past a deadline, at the cost of its own compute (and energy) on late
    /// frames.
    pub fn set_deadline_binding(&mut self, binding: bool) {
        self.binding = binding;
    }

    /// Switches the method (`lop` or a baseline) of every edge client, and of those opened
    /// later; `robot-only` keeps every frame on the robot.
    pub fn set_method(&mut self, method: &str) {
        self.template.method = method.to_string();
        for c in self.clients.values_mut() {
            c.set_method(method);
        }
    }

    /// The upload rate measured to `edge`, Mbit/s (`None`: none measured in the last
    /// [`super::links::LINK_MAX_AGE`]).
    pub fn link_mbps(&self, edge: &str) -> Option<f64> {
        self.links.mbps(edge, Instant::now())
    }

    /// Every edge's measured upload rate, Mbit/s, sorted by edge (those measured in the last
    /// [`super::links::LINK_MAX_AGE`]).
    pub fn link_estimates(&self) -> Vec<(String, f64)> {
        self.links.estimates(Instant::now())
    }

    /// Takes the upload rates the edge clients measured since the last call.
    fn collect_link_samples(&mut self) {
        let now = Instant::now();
        for (edge, c) in &self.clients {
            if let Some(m) = c.take_upload_mbps() {
                tracing::trace!(%edge, mbps = m, "fleet: upload rate measured");
                self.links.record(edge, now, m);
            }
        }
    }

    /// Edges up in the fleet view when the last frame was routed.
    pub fn edges_up(&self) -> usize {
        self.edges_up
    }

    /// Whether a session with some edge is up.
    pub fn connected(&self) -> bool {
        self.clients.values().any(RobotClient::connected)
    }

    /// Frames the edge clients dropped so far (malformed, stale, ...).
    pub fn dropped_total(&self) -> u64 {
        self.clients.values().map(|c| c.dropped().total()).sum()
    }

    /// The robot's own schedule table (its buckets are the ones to select among).
    pub fn table(&self) -> &ScheduleTable {
        &self.table
    }

    /// The robot's one model worker, started at the first session: every edge client (and the
    /// robot-alone one) shares it, so the model is held once however many edges are up. Frames
    /// of one client run one at a time, so sharing the thread costs no parallelism.
    async fn worker(&mut self) -> Result<(Worker, Loaded)> {
        if let Some(w) = &self.worker {
            return Ok(w.clone());
        }
        let loader = self.loader.clone();
        let name = format!("fleet-{}", self.template.robot_id);
        let w: (Worker, Loaded) = Worker::spawn(&name, move || loader()).await?;
        self.worker = Some(w.clone());
        Ok(w)
    }

    async fn client(&mut self, keys: SessionKeys, opts: ClientOptions) -> Result<RobotClient<ZenohConnector>> {
        let (worker, loaded) = self.worker().await?;
        let connector = ZenohConnector::to_edge(self.session.clone(), &self.template.robot_id, keys);
        RobotClient::new(connector, opts, worker, loaded.meta, &loaded.hash, self.table.clone()).await
    }

    /// Runs one inference: routed to an edge that meets `deadline` from now, or run on the
    /// robot. `bandwidth_mb_s` is the robot's link estimate (bucket units, as for
    /// [`RobotClient::infer`]); an edge whose path measured slower is priced, and planned for,
    /// at its own rate ([`EdgeLinks`]).
    ///
    /// # Errors
    /// Inputs that do not fit the model, engine failures, a model worker that cannot start.
    pub async fn infer(&mut self, inputs: Vec<Tensor>, bandwidth_mb_s: f64, deadline: Duration) -> Result<FleetInference> {
        self.infer_camera(inputs, None, bandwidth_mb_s, deadline).await
    }

    /// As [`FleetClient::infer`], with the camera's own JPEG of the frame: under the frame codec
    /// `passthrough` it crosses unchanged to whichever edge the frame is routed to (and along
    /// its forwards).
    ///
    /// # Errors
    /// As [`FleetClient::infer`].
    pub async fn infer_camera(
        &mut self,
        inputs: Vec<Tensor>,
        camera: Option<CameraJpeg>,
        bandwidth_mb_s: f64,
        deadline: Duration,
    ) -> Result<FleetInference> {
        let model = self.template.model_id.clone();
        let t_frame = Instant::now();
        let due = |binding: bool| binding.then(|| deadline.saturating_sub(t_frame.elapsed()));
        self.collect_link_samples();
        let (now, scale) = (Instant::now(), self.table.spec.bandwidth_scale);
        let robot_mb_s = bandwidth_mb_s.max(0.0);
        let seen = self.view.edges();
        self.edges_up = seen.len();
        let any_up = !seen.is_empty();
        let edges: Vec<_> = seen.iter().filter(|e| e.load.model(&model).is_some_and(|m| m.warm)).cloned().collect();
        if edges.is_empty() && self.template.method != "robot-only" {
            // Edges that hold the model cold (placement under a memory budget): a Hello at the
            // least busy one asks for it to be loaded there; frames run here meanwhile, and
            // routing uses it once its report says warm.
            let cold = seen
                .iter()
                .filter(|e| e.load.model(&model).is_some_and(|m| !m.warm))
                .min_by(|a, b| a.load.utilisation.total_cmp(&b.load.utilisation));
            if let Some(e) = cold {
                self.ask_for(&e.load.edge).await?;
            }
        }
        if edges.is_empty() && any_up && !self.warned_no_model {
            self.warned_no_model = true;
            tracing::warn!(model = %model, "fleet: no edge up serves this model; frames run on the robot");
        }
        for e in &edges {
            match self.clients.get_mut(&e.load.edge) {
                // Reconnects, or takes a table planned for this edge into use, in the background.
                Some(c) => {
                    c.poll_connection().await;
                }
                None => {
                    let keys = SessionKeys::fleet(&e.load.edge).map_err(|err| Error::InvalidConfig { what: err.to_string() })?;
                    tracing::info!(edge = %e.load.edge, "fleet: first frame since this edge appeared; opening a session");
                    let c = self.client(keys, self.template.clone()).await?;
                    self.clients.insert(e.load.edge.clone(), c);
                }
            }
        }
        let candidates: Vec<(String, ServerView)> = edges
            .iter()
            .filter(|e| self.clients.get(&e.load.edge).is_some_and(RobotClient::connected))
            .filter_map(|e| {
                let m = e.load.model(&model)?;
                let reported_s = f64::from(m.server_s).max(1e-6);
                Some((
                    e.load.edge.clone(),
                    ServerView {
                        queued_s: (f64::from(m.queued_s) - e.age.as_secs_f64()).max(0.0),
                        speed: self.cost.server_s / reported_s,
                        bytes_per_s: self.links.table_mb_s(&e.load.edge, now, robot_mb_s, scale) * 1e6,
                        latency_s: 0.001,
                        warm: true,
                    },
                ))
            })
            .collect();
        let views: Vec<ServerView> = candidates.iter().map(|(_, v)| *v).collect();
        let (choice, why) = if self.template.method == "robot-only" {
            (Choice::Robot, AloneWhy::Chosen)
        } else if edges.is_empty() {
            (Choice::Robot, AloneWhy::NoEdgeServes)
        } else if candidates.is_empty() {
            (Choice::Robot, AloneWhy::NotConnected)
        } else if self.router.policy() == Policy::Nearest {
            let home = candidates.iter().position(|(e, _)| Some(e) == self.home.as_ref());
            (home.map_or(Choice::Robot, Choice::Server), AloneWhy::Chosen)
        } else {
            (self.router.choose(&self.cost, 0.0, deadline.as_secs_f64(), self.robot_s, &views, &mut self.rng), AloneWhy::Deadline)
        };
        match choice {
            Choice::Server(j) if j < candidates.len() => {
                let mut edge = candidates[j].0.clone();
                let mut hop = Hop { due: due(self.binding), ..Hop::default() };
                let mut inputs = inputs;
                // Each forward names an edge outside the path, and the path is bounded: this
                // ends. Forwards beyond MAX_PATH would be refused by the encoder anyway.
                loop {
                    let client =
                        self.clients.get_mut(&edge).ok_or_else(|| Error::InvalidConfig { what: format!("no client for edge {edge}") })?;
                    let mb_s = self.links.table_mb_s(&edge, now, robot_mb_s, scale);
                    match client.infer_hop_camera(inputs, camera.clone(), mb_s, &hop).await? {
                        Hopped::Done(inference) => {
                            self.collect_link_samples();
                            return Ok(FleetInference { inference, routed: Routed::Edge(edge), path: hop.path });
                        }
                        Hopped::Forwarded { to, path, budget_left, inputs: back } => {
                            tracing::debug!(from = %edge, %to, ?path, left_ms = budget_left.as_secs_f64() * 1e3, "fleet: forwarded");
                            inputs = back;
                            let usable = path.len() <= lop_msgs::protocol::MAX_PATH
                                && !path.contains(&to)
                                && self.clients.get(&to).is_some_and(RobotClient::connected);
                            hop = Hop { path, budget: Some(budget_left), due: due(self.binding) };
                            if !usable {
                                return self.run_alone(inputs, bandwidth_mb_s, AloneWhy::ForwardedNowhere, hop.path).await;
                            }
                            edge = to;
                        }
                    }
                }
            }
            _ => self.run_alone(inputs, bandwidth_mb_s, why, Vec::new()).await,
        }
    }

    /// Opens (or moves along) a session with `edge`, whose Hello asks for the model there.
    async fn ask_for(&mut self, edge: &str) -> Result<()> {
        match self.clients.get_mut(edge) {
            Some(c) => {
                c.poll_connection().await;
            }
            None => {
                let keys = SessionKeys::fleet(edge).map_err(|err| Error::InvalidConfig { what: err.to_string() })?;
                tracing::info!(%edge, "fleet: no edge holds the model warm; asking this one to load it");
                let c = self.client(keys, self.template.clone()).await?;
                self.clients.insert(edge.to_string(), c);
            }
        }
        Ok(())
    }

    /// Runs a frame on the robot (its own client, which no edge serves).
    async fn run_alone(&mut self, inputs: Vec<Tensor>, bandwidth_mb_s: f64, why: AloneWhy, path: Vec<String>) -> Result<FleetInference> {
        if self.alone.is_none() {
            let mut opts = self.template.clone();
            opts.method = "robot-only".into();
            opts.retry_interval = Duration::from_secs(3600);
            opts.hello_timeout = Duration::from_millis(1);
            let keys = SessionKeys::fleet(ALONE).map_err(|err| Error::InvalidConfig { what: err.to_string() })?;
            self.alone = Some(self.client(keys, opts).await?);
        }
        let alone = self.alone.as_mut().ok_or_else(|| Error::InvalidConfig { what: "no robot-alone client".into() })?;
        let inference = alone.infer(inputs, bandwidth_mb_s).await?;
        let took = inference.stats.total_s;
        if took.is_finite() && took > 0.0 {
            self.robot_s += ROBOT_S_EWMA * (took - self.robot_s);
        }
        Ok(FleetInference { inference, routed: Routed::Robot(why), path })
    }
}

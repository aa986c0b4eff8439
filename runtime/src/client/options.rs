//! How the client runs: the link it opens ([`Connector`]), its options ([`ClientOptions`]) and
//! the planner it may call when the edge's schedule table differs from its own ([`Replanner`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lop::planner::table::ScheduleTable;
use lop::profile::Profile;
use lop_msgs::protocol::Limits;
use tch::Device;

use crate::error::Result;
use crate::exec::InputWire;
use crate::link::{LinkRx, LinkTx};

/// Opens a fresh link to the edge (a new Zenoh session key set, a new in-process pair, ...).
pub trait Connector: Send + Sync + 'static {
    /// The sending half.
    type Tx: LinkTx + 'static;
    /// The receiving half.
    type Rx: LinkRx + 'static;
    /// Opens the link.
    fn connect(&self) -> impl Future<Output = Result<(Self::Tx, Self::Rx)>> + Send;
}

/// How the client runs.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// This robot's id.
    pub robot_id: String,
    /// The model's id at the edge.
    pub model_id: String,
    /// Which plans to run: `lop` (default) or a baseline (`robot-only`, `server-only`,
    /// `layer-partition`).
    pub method: String,
    /// Robot kernels stretched this many times (emulating a slower robot; 1 = none).
    pub dilation: f64,
    /// With a dilation over 1: each robot kernel lasts what `robot_profile` predicts for it,
    /// scaled to the dilation ([`Stretch::Paced`](crate::exec::Stretch::Paced): the emulated robot is its profile, whatever
    /// this machine's noise), rather than `dilation` times its measured duration.
    pub paced: bool,
    /// How the raw input travels.
    pub input_wire: InputWire,
    /// Where the robot computes.
    pub device: Device,
    /// An inference's deadline is `factor x predicted makespan + slack`.
    pub deadline_factor: f64,
    /// See `deadline_factor`.
    pub deadline_slack: Duration,
    /// How long to wait for Welcome.
    pub hello_timeout: Duration,
    /// Least time between reconnection attempts.
    pub retry_interval: Duration,
    /// Frame size limit.
    pub limits: Limits,
    /// The robot's profile (the one its table was planned from), sent in Hello so that an edge
    /// that has never seen this robot plans for it; `None` sends its hash only.
    pub robot_profile: Option<Profile>,
    /// Plans the robot's table again when the edge's differs (see [`Replanner`]); `None`: such
    /// an edge is never used.
    pub replan: Option<Replanner>,
    /// Reads the table at the effective bandwidth the frames' running size ratio gives
    /// ([`crate::frame_ratio::FrameRatio`]; default on). Benchmarks that compare each bucket's
    /// plan with its simulation turn it off.
    pub follow_frame_ratio: bool,
}

impl ClientOptions {
    /// Defaults for a robot id and model id.
    pub fn new(robot_id: &str, model_id: &str) -> ClientOptions {
        ClientOptions {
            robot_id: robot_id.into(),
            model_id: model_id.into(),
            method: "lop".into(),
            dilation: 1.0,
            paced: false,
            input_wire: InputWire::Native,
            device: Device::Cpu,
            deadline_factor: 3.0,
            deadline_slack: Duration::from_millis(250),
            hello_timeout: Duration::from_secs(5),
            retry_interval: Duration::from_millis(500),
            limits: Limits::default(),
            robot_profile: None,
            replan: None,
            follow_frame_ratio: true,
        }
    }
}

/// Plans the schedule table for the edge's server profile, received in Welcome when the edge's
/// table differs from the robot's (the robot was configured with another server profile, e.g.
/// the synthetic default against an edge that measured its own). Called on a blocking thread
/// while the robot keeps running alone; the caller knows the model's source, the table settings
/// and the cache. The table must come out as the edge's (same model, robot profile, settings).
#[derive(Clone)]
pub struct Replanner(pub Arc<dyn Fn(Profile) -> Result<ScheduleTable> + Send + Sync>);

impl std::fmt::Debug for Replanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Replanner")
    }
}

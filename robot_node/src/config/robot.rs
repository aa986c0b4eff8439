//! The configuration of `lop_robot` ([`RobotConfig`]), read one section at a time (sessions,
//! fleet, robot id, model, method and device, input, topics, timing), with where its profiles
//! come from ([`ProfileSource`]) and its topics ([`RobotTopics`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use lop::plan::Side;
use lop::profile::Profile;
use lop_runtime::bandwidth::Hysteresis;
use lop_runtime::table_config::TableSettings;

use super::input::{CloudGrid, ImageSettings, InputKind, input_qos};
use super::session::{EdgeSettings, RosSettings};
use super::values::{device, hysteresis, invalid, ms, positive, read_table, within};
use crate::error::Result;
use crate::params::Params;

/// Configuration of `lop_robot`.
#[derive(Debug, Clone)]
pub struct RobotConfig {
    /// The ROS session.
    pub ros: RosSettings,
    /// The edge session.
    pub edge: EdgeSettings,
    /// Fleet mode (`edge.deadline_ms`): a frame's deadline from its arrival; routing picks an
    /// edge that can meet it.
    pub fleet_deadline: Duration,
    /// Fleet mode (`edge.deadline_binding`, true by default): the deadline also binds edges
    /// (they forward what they cannot finish by it) and the robot's wait (past it the robot
    /// computes the bands it would wait for, and takes each from whichever side has it first).
    pub fleet_deadline_binding: bool,
    /// Fleet mode (`edge.hear`): `None` hears every edge's load report (small sites);
    /// `Some(n)` hears the site aggregator's digests of `n` shards (`edge.hear: site`,
    /// `edge.shards_heard`), for sites of hundreds of edges.
    pub fleet_site_shards: Option<usize>,
    /// Fleet mode (`edge.lanes`): frames in flight at once, each lane with sessions of its own
    /// (`<robot_id>.lane<k>`), so that a camera faster than one edge is spread over several;
    /// results are published in frame order. 1: one frame at a time.
    pub fleet_lanes: usize,
    /// This robot's id at the edge.
    pub robot_id: String,
    /// `zoo:NAME` or an ONNX path.
    pub model_source: String,
    /// How the model is loaded (`model.input_shape`, `model.preprocess`, `model.task`).
    pub model_load: lop::model::LoadOptions,
    /// The model's id at the edge.
    pub model_id: String,
    /// The robot's profile.
    pub robot_profile: ProfileSource,
    /// The server's profile.
    pub server_profile: ProfileSource,
    /// The schedule table (the edge must use the same).
    pub table: TableSettings,
    /// `lop`, `robot-only`, `server-only` or `layer-partition` (may change at run time, see
    /// [`crate::live`]).
    pub method: String,
    /// Whether frames are inferred at start (`enabled`; may change at run time).
    pub enabled: bool,
    /// Whether the managed node configures and activates itself at start
    /// (`lifecycle.autostart`, true by default); false: it waits in `unconfigured` for
    /// `change_state` (r2r backend only, see [`crate::lifecycle`]).
    pub autostart: bool,
    /// What a frame arriving while another waits does (`drop_policy`; may change at run time).
    pub drop_policy: crate::live::DropPolicy,
    /// Robot kernels stretched this many times (emulation; 1 = none).
    pub dilation: f64,
    /// `cpu` or `cuda[:N]`.
    pub device: tch::Device,
    /// Camera or LiDAR.
    pub input: InputKind,
    /// QoS of the input subscription (`input_qos`: `sensor_data` or `reliable`).
    pub input_qos: crate::backend::Qos,
    /// Image conversion.
    pub image: ImageSettings,
    /// Point cloud conversion.
    pub cloud: CloudGrid,
    /// The inputs: one (the camera of `topics.image` or the LiDAR of `topics.cloud`), or the
    /// cameras of `cameras`, each with its own topic, transport, fit and outputs, all on the
    /// one model.
    pub inputs: Vec<super::Sensor>,
    /// Where schedule tables are cached.
    pub cache_dir: PathBuf,
    /// Topics.
    pub topics: RobotTopics,
    /// Bandwidth assumed until the first estimate arrives, Mbit/s.
    pub initial_bandwidth_mbps: f64,
    /// Bucket switching (down at once, up after the prediction held above a higher bucket).
    pub hysteresis: Hysteresis,
    /// An inference's deadline is `factor x predicted + slack`.
    pub deadline_factor: f64,
    /// See `deadline_factor`.
    pub deadline_slack: Duration,
    /// How long to wait for the edge's Welcome.
    pub hello_timeout: Duration,
    /// Least time between reconnection attempts.
    pub retry_interval: Duration,
    /// Classes in `top_k` (0: none).
    pub top_k: usize,
    /// Class names for detections and top-k (`model.class_names`: a file with one name per line;
    /// empty: class indices as names).
    pub class_names: Vec<String>,
    /// The annotated debug image (`debug_image.*`; its topic is `topics.debug_image`).
    pub debug_image: super::DebugImageSettings,
    /// Diagnostics period.
    pub diagnostics_period: Duration,
    /// libtorch intra-op threads of the model worker (0: libtorch's default).
    pub threads: i32,
}

/// Where a profile comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum ProfileSource {
    /// A JSON profile file (`lop profile --out`).
    File(PathBuf),
    /// Synthetic per-row costs (tests, demos): time per row proportional to the op's output
    /// bytes per row, 8 ns/byte on the robot and 1 ns/byte on the server, 20 us per call (the
    /// profiles of `runtime/tests`).
    Synthetic,
}

impl ProfileSource {
    /// `synthetic`, or a profile file's path.
    fn parse(s: &str) -> ProfileSource {
        if s == "synthetic" { ProfileSource::Synthetic } else { ProfileSource::File(PathBuf::from(s)) }
    }

    /// The profile for `graph` on `side`.
    ///
    /// # Errors
    /// [`Error::Engine`](crate::Error::Engine) for an unreadable or mismatched profile.
    pub fn load(&self, graph: &lop::graph::Graph, side: Side) -> Result<Profile> {
        match self {
            ProfileSource::File(path) => Ok(Profile::load(path)?),
            ProfileSource::Synthetic => Ok(lop::profile::synthetic_profile(graph, side)?),
        }
    }
}

/// Topic names of `lop_robot`.
#[derive(Debug, Clone, PartialEq)]
pub struct RobotTopics {
    /// Camera input.
    pub image: String,
    /// LiDAR input.
    pub cloud: String,
    /// Results out.
    pub inference: String,
    /// Bandwidth estimates in.
    pub bandwidth: String,
    /// Diagnostics out.
    pub diagnostics: String,
    /// Detections out (`model.task: detect` or `pose`): `vision_msgs/Detection2DArray`.
    pub detections: String,
    /// Keypoints out (`model.task: pose`): `lop_msgs/KeypointsArray`.
    pub keypoints: String,
    /// Occupied voxels out (`model.task: occupancy`): `sensor_msgs/PointCloud2`.
    pub occupancy: String,
    /// Class maps out (`model.task: segment`): `sensor_msgs/Image`, `mono8` class ids.
    pub segmentation: String,
    /// Instance maps out (`model.task: segment-instance`): `sensor_msgs/Image`, `mono8`, the
    /// frame's size, 0 background and `k` the detection whose `Detection2D.id` is `"k"`.
    pub instances: String,
    /// The annotated debug image out: `sensor_msgs/Image` (`rgb8`) here and
    /// `sensor_msgs/CompressedImage` (JPEG) on `<debug_image>/compressed`, while subscribed.
    pub debug_image: String,
}

/// Class names, one per line (blank lines and surrounding spaces ignored).
fn read_class_names(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| invalid(format!("model.class_names: cannot read {}: {e}", path.display())))?;
    let names: Vec<String> = text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
    if names.is_empty() {
        return Err(invalid(format!("model.class_names: {} holds no names", path.display())));
    }
    Ok(names)
}

impl RobotConfig {
    /// Reads every parameter of `lop_robot` (defaults for those not given).
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) naming the bad parameter.
    pub fn from_params(p: &mut Params) -> Result<RobotConfig> {
        let ros = RosSettings::read(p)?;
        let edge = EdgeSettings::read(p)?;
        let fleet = FleetParams::read(p, &edge)?;
        let robot_id = read_robot_id(p, &edge, fleet.lanes)?;
        let model = ModelParams::read(p)?;
        let table = read_table(p)?;
        let method = p.string("method", "lop");
        crate::live::check_method(&method).map_err(invalid)?;
        let enabled = p.bool("enabled", true)?;
        let autostart = p.bool("lifecycle.autostart", true)?;
        let drop_policy = crate::live::DropPolicy::parse(&p.string("drop_policy", "newest")).map_err(invalid)?;
        let dilation = p.double("dilation", 1.0)?;
        if !(dilation >= 1.0 && dilation.is_finite()) {
            return Err(invalid(format!("dilation must be >= 1, got {dilation}")));
        }
        let device = device(&p.string("device", "cpu"))?;
        let input = InputKind::parse(&p.string("input", "camera"))?;
        let input_qos = input_qos(&p.string("input_qos", "sensor_data"))?;
        let (image, camera_fit) = ImageSettings::read(p)?;
        let cloud = CloudGrid::read(p)?;
        let topics = RobotTopics::read(p);
        let defaults = super::cameras::Defaults {
            input,
            image: &image,
            topics: (&topics.image, &topics.cloud),
            robot_id: &robot_id,
            lanes: fleet.lanes as usize,
        };
        let inputs = super::cameras::read_inputs(p, &defaults)?;
        let top_k = p.int("top_k", 5)?;
        Ok(RobotConfig {
            ros,
            edge,
            fleet_deadline: Duration::from_secs_f64(fleet.deadline_ms / 1e3),
            fleet_deadline_binding: fleet.deadline_binding,
            fleet_lanes: fleet.lanes as usize,
            fleet_site_shards: fleet.site_shards,
            robot_id,
            model_source: model.source,
            model_load: lop::model::LoadOptions { fit: camera_fit, ..model.load },
            model_id: model.id,
            robot_profile: model.robot_profile,
            server_profile: model.server_profile,
            table,
            method,
            enabled,
            autostart,
            drop_policy,
            dilation,
            device,
            input,
            input_qos,
            image,
            cloud,
            inputs,
            cache_dir: PathBuf::from(p.string("cache_dir", ".lop-cache")),
            topics,
            initial_bandwidth_mbps: positive("initial_bandwidth_mbps", p.double("initial_bandwidth_mbps", 80.0)?)?,
            hysteresis: hysteresis(p)?,
            // A frame's deadline is this factor times its predicted makespan, as a duration.
            deadline_factor: within("deadline_factor", p.double("deadline_factor", 3.0)?, 0.01, 1000.0)?,
            deadline_slack: ms(p, "deadline_slack_ms", 250.0)?,
            hello_timeout: ms(p, "hello_timeout_ms", 5000.0)?,
            retry_interval: ms(p, "retry_interval_ms", 500.0)?,
            top_k: usize::try_from(top_k).map_err(|_| invalid(format!("top_k must be >= 0, got {top_k}")))?,
            class_names: model.class_names,
            debug_image: super::DebugImageSettings::read(p)?,
            diagnostics_period: Duration::from_secs_f64(within(
                "diagnostics_period_s",
                p.double("diagnostics_period_s", 1.0)?,
                0.01,
                3600.0,
            )?),
            threads: i32::try_from(p.int("threads", 0)?).map_err(|e| invalid(format!("threads: {e}")))?,
        })
    }
}

/// The fleet's parameters: `edge.lanes`, `edge.deadline_ms`, `edge.deadline_binding`, and what
/// the robot hears of the site (`edge.hear`, `edge.shards_heard`).
struct FleetParams {
    /// Frames in flight at once, 1 to [`lop_msgs::MAX_LANES`].
    lanes: i64,
    /// A frame's deadline from its arrival, ms (positive).
    deadline_ms: f64,
    /// Whether the deadline also binds edges and the robot's wait.
    deadline_binding: bool,
    /// `None`: every edge's load report; `Some(n)`: the site aggregator's digests of `n` shards.
    site_shards: Option<usize>,
}

impl FleetParams {
    /// Reads the fleet's parameters; hearing the site needs `edge.mode: fleet`.
    fn read(p: &mut Params, edge: &EdgeSettings) -> Result<FleetParams> {
        let lanes = p.int("edge.lanes", 1)?;
        if !(1..=lop_msgs::MAX_LANES as i64).contains(&lanes) {
            return Err(invalid(format!("edge.lanes must be 1 to {}, got {lanes}", lop_msgs::MAX_LANES)));
        }
        let deadline_ms = p.double("edge.deadline_ms", 200.0)?;
        if !(deadline_ms.is_finite() && deadline_ms > 0.0) {
            return Err(invalid(format!("edge.deadline_ms must be positive, got {deadline_ms}")));
        }
        within("edge.deadline_ms", deadline_ms, 0.0, 3_600_000.0)?;
        let deadline_binding = p.bool("edge.deadline_binding", true)?;
        let hear = p.string("edge.hear", "direct");
        let shards_heard = p.int("edge.shards_heard", 1)?;
        let fleet_site_shards = match hear.as_str() {
            "direct" => None,
            "site" if (1..=16).contains(&shards_heard) => Some(shards_heard as usize),
            "site" => return Err(invalid(format!("edge.shards_heard must be 1 to 16, got {shards_heard}"))),
            other => {
                return Err(invalid(format!(
                    "edge.hear must be direct (every edge's report) or site (the site aggregator's digests), got '{other}'"
                )));
            }
        };
        if fleet_site_shards.is_some() && !edge.fleet() {
            return Err(invalid("edge.hear is site: the site's digests route a fleet's frames; set edge.mode: fleet".to_string()));
        }
        Ok(FleetParams { lanes, deadline_ms, deadline_binding, site_shards: fleet_site_shards })
    }
}

/// `robot_id`, checked; with several lanes (a fleet's only), also the id of its last lane
/// (`<robot_id>.lane<k>`), so that every lane's id is valid.
fn read_robot_id(p: &mut Params, edge: &EdgeSettings, lanes: i64) -> Result<String> {
    let robot_id = p.string("robot_id", "robot");
    lop_msgs::validate_robot_id(&robot_id).map_err(|e| invalid(format!("robot_id: {e}")))?;
    if lanes > 1 {
        if !edge.fleet() {
            return Err(invalid(format!(
                "edge.lanes is {lanes}: lanes spread frames over a fleet's edges; set edge.mode: fleet (or lanes: 1)"
            )));
        }
        lop_msgs::lane_robot_id(&robot_id, lanes as usize - 1).map_err(|e| invalid(format!("robot_id with edge.lanes {lanes}: {e}")))?;
    }
    Ok(robot_id)
}

/// The `model.*` parameters but the camera's fit (`image.camera_size`, read with the image's).
struct ModelParams {
    /// `model.source`: `zoo:NAME` or an ONNX path.
    source: String,
    /// `model.id`: the model's id at the edge.
    id: String,
    /// `model.input_shape`, `model.preprocess` and `model.task`.
    load: lop::model::LoadOptions,
    /// `model.class_names`, read from its file.
    class_names: Vec<String>,
    /// `model.robot_profile`.
    robot_profile: ProfileSource,
    /// `model.server_profile`.
    server_profile: ProfileSource,
}

impl ModelParams {
    /// Reads the model's parameters and its class names file.
    fn read(p: &mut Params) -> Result<ModelParams> {
        let model_source = p.string("model.source", "zoo:resnet18");
        let model_id = p.string("model.id", "resnet18");
        let shape = p.doubles("model.input_shape", &[])?;
        let input_shape = if shape.is_empty() {
            None
        } else {
            let dims: Option<Vec<usize>> = shape.iter().map(|&d| (d >= 1.0 && d.fract() == 0.0 && d < 1e9).then_some(d as usize)).collect();
            Some(dims.ok_or_else(|| invalid(format!("model.input_shape must be positive integers, got {shape:?}")))?)
        };
        let preprocess = match p.string("model.preprocess", "").as_str() {
            "" => None,
            spec => Some(lop::preprocess::Preprocess::parse(spec).map_err(|e| invalid(format!("model.preprocess: {e}")))?),
        };
        let postprocess = match p.string("model.task", "raw").as_str() {
            "" | "raw" => None,
            spec => Some(lop::postprocess::Postprocess::parse(spec).map_err(|e| invalid(format!("model.task: {e}")))?),
        };
        let class_names = match p.string("model.class_names", "").as_str() {
            "" => Vec::new(),
            path => read_class_names(Path::new(path))?,
        };
        let robot_profile = ProfileSource::parse(&p.string("model.robot_profile", "synthetic"));
        let server_profile = ProfileSource::parse(&p.string("model.server_profile", "synthetic"));
        Ok(ModelParams {
            source: model_source,
            id: model_id,
            load: lop::model::LoadOptions { input_shape, preprocess, postprocess, ..Default::default() },
            class_names,
            robot_profile,
            server_profile,
        })
    }
}

impl RobotTopics {
    /// Reads `topics.*`.
    fn read(p: &mut Params) -> RobotTopics {
        RobotTopics {
            image: p.string("topics.image", "/camera/image_raw"),
            cloud: p.string("topics.cloud", "/lidar/points"),
            inference: p.string("topics.inference", "/lop/inference"),
            bandwidth: p.string("topics.bandwidth", "/lop/bandwidth"),
            diagnostics: p.string("topics.diagnostics", "/diagnostics"),
            detections: p.string("topics.detections", "/lop/detections"),
            keypoints: p.string("topics.keypoints", "/lop/keypoints"),
            occupancy: p.string("topics.occupancy", "/lop/occupancy"),
            segmentation: p.string("topics.segmentation", "/lop/segmentation"),
            instances: p.string("topics.instances", "/lop/instances"),
            debug_image: p.string("topics.debug_image", "/lop/debug_image"),
        }
    }
}

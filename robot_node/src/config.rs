//! Typed configuration of the three nodes, read from [`Params`] (a params file in the ROS 2 shape
//! plus `--ros-args -p` overrides). `config/robot.yaml` documents every parameter with its default;
//! a test checks that it names exactly the parameters read here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lop::plan::Side;
use lop::profile::Profile;
use lop_runtime::security::{Login, Security, TlsFiles, endpoint_protocol};
use lop_runtime::table_config::{ScaleSetting, TableSettings};
use lop_runtime::zenoh_link::{ZenohConfig, ZenohMode};

use crate::convert::{BevChannels, BevGrid, ChannelOrder, Fit, VoxelGrid};
use crate::error::{Error, Result};
use crate::params::{ParamValue, Params};
use lop_runtime::bandwidth::{Hysteresis, MonitorConfig};

fn invalid(what: String) -> Error {
    Error::Config { what }
}

/// The longest message the robot's edge session reassembles: the protocol's longest frame plus
/// Zenoh's own framing, as the edge's default `max_frame_bytes`.
pub const MAX_EDGE_MESSAGE_BYTES: usize = lop_msgs::protocol::DEFAULT_MAX_FRAME_LEN as usize + 4096;

/// A comma-separated list of endpoints, blanks dropped.
fn endpoint_list(s: &str) -> Vec<String> {
    s.split(',').map(str::trim).filter(|e| !e.is_empty()).map(String::from).collect()
}

/// The local ROS session (rmw_zenoh model: every node a Zenoh peer of the robot's router).
#[derive(Debug, Clone, PartialEq)]
pub struct RosSettings {
    /// ROS domain id; `None`: `ROS_DOMAIN_ID` (read by hiroz) or 0.
    pub domain_id: Option<usize>,
    /// The robot's Zenoh router (`rmw_zenohd`), default `tcp/localhost:7447`.
    pub router_endpoint: String,
    /// Start a router in this process, listening on `router_endpoint`.
    pub embedded_router: bool,
    /// Node namespace (empty: root).
    pub namespace: String,
}

impl RosSettings {
    fn read(p: &mut Params) -> Result<RosSettings> {
        let domain = p.int("domain_id", -1)?;
        Ok(RosSettings {
            domain_id: if domain < 0 { None } else { Some(usize::try_from(domain).map_err(|e| invalid(format!("domain_id: {e}")))?) },
            router_endpoint: p.string("router_endpoint", "tcp/localhost:7447"),
            embedded_router: p.bool("embedded_router", false)?,
            namespace: p.string("namespace", ""),
        })
    }
}

/// The Zenoh session to the edge server (separate from the ROS session, so that the edge may
/// run a router of its own on another host, or on this one in tests).
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeSettings {
    /// The edge's router, e.g. `tcp/192.168.1.10:7447`.
    pub endpoint: String,
    /// Endpoints a peer session (`edge.mode: peer`, or the client's fallback) accepts
    /// connections on (`edge.listen`, comma-separated). Empty (the default): none, the robot
    /// only dials out, so nothing on the site's network can connect to it.
    pub listen: Vec<String>,
    /// `client` (default; falls back to a peer that keeps retrying when no edge answers at
    /// start), `peer`, or `fleet`: connect as a client to a router of the site and route every
    /// frame over the edges found there (DESIGN.md section 10), no edge address needed.
    pub mode: String,
    /// Mutual TLS (`edge.tls.ca|cert|key`, for `tls/` endpoints) and a password
    /// (`edge.user`, `edge.password_file`).
    pub security: Security,
}

impl EdgeSettings {
    fn read(p: &mut Params) -> Result<EdgeSettings> {
        let endpoint = p.string("edge.endpoint", "tcp/edge:7447");
        let mode = p.string("edge.mode", "client");
        if !matches!(mode.as_str(), "client" | "peer" | "fleet") {
            return Err(invalid(format!("edge.mode must be client, peer or fleet, got '{mode}'")));
        }
        let (ca, cert, key) = (p.string("edge.tls.ca", ""), p.string("edge.tls.cert", ""), p.string("edge.tls.key", ""));
        let tls = match (ca.is_empty(), cert.is_empty(), key.is_empty()) {
            (true, true, true) => None,
            (false, false, false) => Some(TlsFiles { ca: ca.into(), cert: cert.into(), key: key.into() }),
            _ => return Err(invalid("edge.tls: give ca, cert and key together (`lop certs` makes them)".into())),
        };
        if endpoint_protocol(&endpoint) == "tls" && tls.is_none() {
            return Err(invalid(format!("edge.endpoint {endpoint} needs edge.tls.ca, edge.tls.cert and edge.tls.key")));
        }
        let (user, password_file) = (p.string("edge.user", ""), p.string("edge.password_file", ""));
        let login = match (user.is_empty(), password_file.is_empty()) {
            (true, true) => None,
            (false, false) => {
                Some(Login::from_file(&user, Path::new(&password_file)).map_err(|e| invalid(format!("edge.password_file: {e}")))?)
            }
            _ => return Err(invalid("edge.user and edge.password_file go together".into())),
        };
        let listen = endpoint_list(&p.string("edge.listen", ""));
        if mode == "client" && !listen.is_empty() {
            return Err(invalid("edge.listen: a client session listens nowhere; set edge.mode: peer to accept connections".into()));
        }
        let security = Security { tls, login, ..Security::default() };
        // Checked now, so that a missing certificate is a start-up error, not a silent retry loop.
        ZenohConfig::client(vec![endpoint.clone()])
            .with_security(security.clone())
            .to_zenoh()
            .map_err(|e| invalid(format!("edge: {e}")))?;
        ZenohConfig::peer(listen.clone(), vec![endpoint.clone()]).to_zenoh().map_err(|e| invalid(format!("edge.listen: {e}")))?;
        Ok(EdgeSettings { endpoint, mode, listen, security })
    }

    /// A session of `mode` to the edge, with this robot's listen endpoints and security, and the
    /// protocol's longest frame as its longest message: Zenoh drops a longer one as it arrives,
    /// before holding it whole (its own default is 1 GiB).
    fn zenoh(&self, mode: ZenohMode) -> ZenohConfig {
        let connect = vec![self.endpoint.clone()];
        let config = match mode {
            ZenohMode::Client => ZenohConfig::client(connect),
            _ => ZenohConfig::peer(self.listen.clone(), connect),
        };
        ZenohConfig { max_message_bytes: Some(MAX_EDGE_MESSAGE_BYTES), ..config.with_security(self.security.clone()) }
    }

    /// Whether frames are routed over the site's fleet of edges.
    pub fn fleet(&self) -> bool {
        self.mode == "fleet"
    }

    /// Opens the session. A client (or fleet member) that finds no router falls back to a peer session connecting to
    /// the same endpoint in the background, so the node runs (robot alone) until the edge is up.
    ///
    /// # Errors
    /// [`Error::Runtime`] for a malformed endpoint.
    pub async fn open(&self) -> Result<zenoh::Session> {
        if endpoint_protocol(&self.endpoint) != "tls" {
            tracing::warn!(
                endpoint = %self.endpoint,
                "the link to the edge is plaintext: anyone on the network can read frames and results, and pose as the edge; \
                 use a tls/ endpoint with edge.tls (docs/security.md)"
            );
        }
        let peer = self.zenoh(ZenohMode::Peer);
        if self.mode == "peer" {
            return Ok(peer.open().await?);
        }
        match self.zenoh(ZenohMode::Client).open().await {
            Ok(s) => Ok(s),
            Err(e) => {
                tracing::warn!(endpoint = %self.endpoint, error = %e, "no edge router yet; connecting as a peer in the background");
                Ok(peer.open().await?)
            }
        }
    }
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
    fn parse(s: &str) -> ProfileSource {
        if s == "synthetic" { ProfileSource::Synthetic } else { ProfileSource::File(PathBuf::from(s)) }
    }

    /// The profile for `graph` on `side`.
    ///
    /// # Errors
    /// [`Error::Engine`] for an unreadable or mismatched profile.
    pub fn load(&self, graph: &lop::graph::Graph, side: Side) -> Result<Profile> {
        match self {
            ProfileSource::File(path) => Ok(Profile::load(path)?),
            ProfileSource::Synthetic => Ok(lop::profile::synthetic_profile(graph, side)?),
        }
    }
}

/// What the robot feeds its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// `sensor_msgs/Image` frames.
    Camera,
    /// `sensor_msgs/PointCloud2` sweeps.
    Lidar,
}

/// How a point cloud becomes the model's input.
#[derive(Debug, Clone, PartialEq)]
pub enum CloudGrid {
    /// A bird's-eye-view grid (CHW f32).
    Bev(BevGrid),
    /// An occupancy voxel grid.
    Voxels(VoxelGrid),
}

/// Image settings (0 means "from the model's input shape").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImageSettings {
    /// Rows (0: the model's).
    pub height: u32,
    /// Columns (0: the model's).
    pub width: u32,
    /// Channel order of a colour input.
    pub order: ChannelOrder,
    /// Resize or letterbox; `None` (`auto`): letterbox for detectors and other models with dense
    /// outputs (boxes must keep the frame's aspect ratio), resize for classifiers.
    pub fit: Option<Fit>,
    /// The padding value of a letterbox (`auto` included).
    pub pad: u8,
    /// `sensor_msgs/Image` on the image topic, or `sensor_msgs/CompressedImage` on
    /// `<image topic>/compressed` (image_transport's convention).
    pub transport: Transport,
    /// Most pixels a compressed frame may decode to, checked from its headers before anything is
    /// allocated (`image.max_pixels`); 0: [`ImageSettings::max_pixels_for`]'s default.
    pub max_pixels: u64,
    /// The camera's frame size, columns and rows (`image.camera_size: WxH`; `None`: not given).
    /// The model then takes frames at this size and fits them itself (`image.fit`, letterbox
    /// unless told otherwise), so the camera's JPEG crosses unchanged under `passthrough`
    /// whatever its size; frames of another size are refused, naming both.
    pub camera_size: Option<(u32, u32)>,
}

/// The default cap on a compressed frame's pixels, whatever the model: a 4K camera's.
pub const MIN_DEFAULT_MAX_PIXELS: usize = 3840 * 2160;

impl ImageSettings {
    /// The cap on a compressed frame's pixels for a model input of `width` x `height`: the
    /// configured one, or 16 times the model's input and at least a 4K frame. A 20-megapixel PNG,
    /// 80 MB decoded, costs a 640x640 detector nothing it needs.
    pub fn max_pixels_for(&self, width: u32, height: u32) -> usize {
        match usize::try_from(self.max_pixels) {
            Ok(0) | Err(_) => (16 * width as usize * height as usize).max(MIN_DEFAULT_MAX_PIXELS),
            Ok(n) => n,
        }
    }
}

/// How camera frames arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// `sensor_msgs/Image` on `topics.image`.
    #[default]
    Raw,
    /// `sensor_msgs/CompressedImage` (JPEG or PNG) on `<topics.image>/compressed`.
    Compressed,
}

impl Transport {
    /// The topic frames arrive on, for the image topic `image`.
    pub fn topic(self, image: &str) -> String {
        match self {
            Transport::Raw => image.to_string(),
            Transport::Compressed => format!("{}/compressed", image.trim_end_matches('/')),
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
}

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
    /// Diagnostics period.
    pub diagnostics_period: Duration,
    /// libtorch intra-op threads of the model worker (0: libtorch's default).
    pub threads: i32,
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

fn device(s: &str) -> Result<tch::Device> {
    match s {
        "cpu" => Ok(tch::Device::Cpu),
        "cuda" => Ok(tch::Device::Cuda(0)),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(tch::Device::Cuda)
            .ok_or_else(|| invalid(format!("device must be cpu, cuda or cuda:N, got '{s}'"))),
    }
}

fn ms(p: &mut Params, name: &str, default: f64) -> Result<Duration> {
    let v = p.double(name, default)?;
    Duration::try_from_secs_f64(v / 1e3).map_err(|_| invalid(format!("{name} must be a non-negative number of ms, got {v}")))
}

fn positive(name: &str, v: f64) -> Result<f64> {
    if v.is_finite() && v > 0.0 { Ok(v) } else { Err(invalid(format!("{name} must be > 0, got {v}"))) }
}

fn range(p: &mut Params, name: &str, default: (f64, f64)) -> Result<(f32, f32)> {
    let v = p.doubles(name, &[default.0, default.1])?;
    match v[..] {
        [a, b] if a < b => Ok((a as f32, b as f32)),
        _ => Err(invalid(format!("{name} must be [min, max] with min < max, got {v:?}"))),
    }
}

fn hysteresis(p: &mut Params) -> Result<Hysteresis> {
    let d = Hysteresis::default();
    let margin = p.double("hysteresis.margin", d.margin)?;
    if !(margin.is_finite() && margin >= 0.0) {
        return Err(invalid(format!("hysteresis.margin must be >= 0, got {margin}")));
    }
    Ok(Hysteresis { margin, hold: ms(p, "hysteresis.hold_ms", d.hold.as_secs_f64() * 1e3)? })
}

/// The model's own fitting of the camera's frames (`image.camera_size: WxH`, `""`: none): at
/// the configured fit, letterbox (at `pad`) when it is `auto`.
fn camera_fit(
    size: &str,
    fit: Option<Fit>,
    pad: u8,
    (height, width): (u32, u32),
) -> std::result::Result<Option<lop::fit::FrameFit>, String> {
    if size.trim().is_empty() {
        return Ok(None);
    }
    if height != 0 || width != 0 {
        return Err(format!(
            "image.camera_size {size} with image.height/image.width {height}x{width}: with a camera size the model fits frames itself; leave image.height and image.width at 0"
        ));
    }
    let how = match fit.unwrap_or(Fit::Letterbox { pad }) {
        Fit::Resize => "resize".to_string(),
        Fit::Letterbox { pad } => format!("letterbox:{pad}"),
    };
    lop::fit::FrameFit::parse(&format!("{how}@{}", size.trim()))
        .map(Some)
        .map_err(|e| format!("image.camera_size must be WxH (e.g. 640x480), got '{size}': {e}"))
}

fn u32_param(p: &mut Params, name: &str, default: i64) -> Result<u32> {
    let v = p.int(name, default)?;
    u32::try_from(v).map_err(|_| invalid(format!("{name} must be in 0..2^32, got {v}")))
}

fn param_to_json(v: ParamValue) -> serde_json::Value {
    match v {
        ParamValue::Bool(b) => b.into(),
        ParamValue::Int(i) => i.into(),
        ParamValue::Double(d) => d.into(),
        ParamValue::Str(s) => s.into(),
        ParamValue::StrList(l) => l.into(),
        ParamValue::DoubleList(l) => l.into(),
    }
}

fn json_to_param(v: &serde_json::Value) -> ParamValue {
    match v {
        serde_json::Value::Bool(b) => ParamValue::Bool(*b),
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => ParamValue::Int(n.as_i64().unwrap_or(i64::MAX)),
        serde_json::Value::Number(n) => ParamValue::Double(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::Array(a) => ParamValue::DoubleList(a.iter().filter_map(serde_json::Value::as_f64).collect()),
        other => ParamValue::Str(other.as_str().map_or_else(|| other.to_string(), str::to_string)),
    }
}

/// Reads the parameters under `prefix` shaped like `defaults` (nested objects become dotted
/// names), as JSON.
fn read_section(p: &mut Params, prefix: &str, defaults: serde_json::Value) -> serde_json::Value {
    match defaults {
        serde_json::Value::Object(fields) => serde_json::Value::Object(
            fields.into_iter().map(|(field, default)| (field.clone(), read_section(p, &format!("{prefix}.{field}"), default))).collect(),
        ),
        default => param_to_json(p.raw(prefix, json_to_param(&default))),
    }
}

/// Reads the `table.*` parameters (the `table:` section shared with the edge's configuration).
///
/// # Errors
/// [`Error::Config`] naming the bad field.
pub fn read_table(p: &mut Params) -> Result<TableSettings> {
    let defaults = serde_json::to_value(TableSettings::default()).map_err(|e| invalid(format!("table defaults: {e}")))?;
    let section = match read_section(p, "table", defaults) {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    serde_json::from_value(serde_json::Value::Object(section.clone())).map_err(|e| {
        // Name the field: serde's message for a bad enum value does not.
        let field = section.iter().find(|(k, v)| {
            let one: serde_json::Map<String, serde_json::Value> = [((*k).clone(), (*v).clone())].into_iter().collect();
            serde_json::from_value::<TableSettings>(serde_json::Value::Object(one)).is_err()
        });
        match field {
            Some((k, v)) => invalid(format!("table.{k} = {v}: {e}")),
            None => invalid(format!("table: {e}")),
        }
    })
}

impl RobotConfig {
    /// Reads every parameter of `lop_robot` (defaults for those not given).
    ///
    /// # Errors
    /// [`Error::Config`] naming the bad parameter.
    pub fn from_params(p: &mut Params) -> Result<RobotConfig> {
        let ros = RosSettings::read(p)?;
        let edge = EdgeSettings::read(p)?;
        let lanes = p.int("edge.lanes", 1)?;
        if !(1..=lop_msgs::MAX_LANES as i64).contains(&lanes) {
            return Err(invalid(format!("edge.lanes must be 1 to {}, got {lanes}", lop_msgs::MAX_LANES)));
        }
        let deadline_ms = p.double("edge.deadline_ms", 200.0)?;
        if !(deadline_ms.is_finite() && deadline_ms > 0.0) {
            return Err(invalid(format!("edge.deadline_ms must be positive, got {deadline_ms}")));
        }
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
        let robot_id = p.string("robot_id", "robot");
        lop_msgs::validate_robot_id(&robot_id).map_err(|e| invalid(format!("robot_id: {e}")))?;
        if lanes > 1 {
            if !edge.fleet() {
                return Err(invalid(format!(
                    "edge.lanes is {lanes}: lanes spread frames over a fleet's edges; set edge.mode: fleet (or lanes: 1)"
                )));
            }
            lop_msgs::lane_robot_id(&robot_id, lanes as usize - 1)
                .map_err(|e| invalid(format!("robot_id with edge.lanes {lanes}: {e}")))?;
        }
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
        let table = read_table(p)?;
        let method = p.string("method", "lop");
        crate::live::check_method(&method).map_err(invalid)?;
        let enabled = p.bool("enabled", true)?;
        let drop_policy = crate::live::DropPolicy::parse(&p.string("drop_policy", "newest")).map_err(invalid)?;
        let dilation = p.double("dilation", 1.0)?;
        if !(dilation >= 1.0 && dilation.is_finite()) {
            return Err(invalid(format!("dilation must be >= 1, got {dilation}")));
        }
        let device = device(&p.string("device", "cpu"))?;
        let input = match p.string("input", "camera").as_str() {
            "camera" => InputKind::Camera,
            "lidar" => InputKind::Lidar,
            other => return Err(invalid(format!("input must be camera or lidar, got '{other}'"))),
        };
        let input_qos = match p.string("input_qos", "sensor_data").as_str() {
            "sensor_data" => crate::backend::Qos::SensorData,
            "reliable" => crate::backend::Qos::Default,
            other => return Err(invalid(format!("input_qos must be sensor_data or reliable, got '{other}'"))),
        };
        let order = match p.string("image.channel_order", "rgb").as_str() {
            "rgb" => ChannelOrder::Rgb,
            "bgr" => ChannelOrder::Bgr,
            other => return Err(invalid(format!("image.channel_order must be rgb or bgr, got '{other}'"))),
        };
        let pad = p.int("image.pad", 0)?;
        let pad = u8::try_from(pad).map_err(|_| invalid(format!("image.pad must be 0..=255, got {pad}")))?;
        let fit = match p.string("image.fit", "auto").as_str() {
            "auto" => None,
            "resize" => Some(Fit::Resize),
            "letterbox" => Some(Fit::Letterbox { pad }),
            other => return Err(invalid(format!("image.fit must be auto, resize or letterbox, got '{other}'"))),
        };
        let transport = match p.string("image.transport", "raw").as_str() {
            "raw" => Transport::Raw,
            "compressed" => Transport::Compressed,
            other => return Err(invalid(format!("image.transport must be raw or compressed, got '{other}'"))),
        };
        let max_pixels = p.int("image.max_pixels", 0)?;
        let max_pixels =
            u64::try_from(max_pixels).map_err(|_| invalid(format!("image.max_pixels must be 0 (auto) or more, got {max_pixels}")))?;
        let (height, width) = (u32_param(p, "image.height", 0)?, u32_param(p, "image.width", 0)?);
        let camera_fit = camera_fit(&p.string("image.camera_size", ""), fit, pad, (height, width)).map_err(invalid)?;
        let image = ImageSettings {
            height,
            width,
            order,
            fit: camera_fit.map(|f| f.fit).or(fit),
            pad,
            transport,
            max_pixels,
            camera_size: camera_fit.map(|f| (f.width as u32, f.height as u32)),
        };
        let (x, y, z) =
            (range(p, "cloud.x_range", (0.0, 102.4))?, range(p, "cloud.y_range", (-51.2, 51.2))?, range(p, "cloud.z_range", (-3.0, 1.0))?);
        let (rows, cols, depth) = (u32_param(p, "cloud.rows", 0)?, u32_param(p, "cloud.cols", 0)?, u32_param(p, "cloud.depth", 0)?);
        let names = p.string("cloud.bev_features", "occupancy,max_height,mean_intensity,density");
        let cloud = match p.string("cloud.grid", "bev").as_str() {
            "bev" => {
                let mut channels = BevChannels { occupancy: false, max_height: false, mean_intensity: false, density: false };
                for n in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                    match n {
                        "occupancy" => channels.occupancy = true,
                        "max_height" => channels.max_height = true,
                        "mean_intensity" => channels.mean_intensity = true,
                        "density" => channels.density = true,
                        other => return Err(invalid(format!("cloud.bev_features: unknown feature '{other}'"))),
                    }
                }
                CloudGrid::Bev(BevGrid { x_range: x, y_range: y, z_range: z, rows, cols, channels })
            }
            "voxels" => CloudGrid::Voxels(VoxelGrid { x_range: x, y_range: y, z_range: z, rows, cols, depth }),
            other => return Err(invalid(format!("cloud.grid must be bev or voxels, got '{other}'"))),
        };
        let topics = RobotTopics {
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
        };
        let top_k = p.int("top_k", 5)?;
        Ok(RobotConfig {
            ros,
            edge,
            fleet_deadline: Duration::from_secs_f64(deadline_ms / 1e3),
            fleet_deadline_binding: deadline_binding,
            fleet_lanes: lanes as usize,
            fleet_site_shards,
            robot_id,
            model_source,
            model_load: lop::model::LoadOptions { input_shape, preprocess, postprocess, fit: camera_fit, ..Default::default() },
            model_id,
            robot_profile,
            server_profile,
            table,
            method,
            enabled,
            drop_policy,
            dilation,
            device,
            input,
            input_qos,
            image,
            cloud,
            cache_dir: PathBuf::from(p.string("cache_dir", ".lop-cache")),
            topics,
            initial_bandwidth_mbps: positive("initial_bandwidth_mbps", p.double("initial_bandwidth_mbps", 80.0)?)?,
            hysteresis: hysteresis(p)?,
            deadline_factor: positive("deadline_factor", p.double("deadline_factor", 3.0)?)?,
            deadline_slack: ms(p, "deadline_slack_ms", 250.0)?,
            hello_timeout: ms(p, "hello_timeout_ms", 5000.0)?,
            retry_interval: ms(p, "retry_interval_ms", 500.0)?,
            top_k: usize::try_from(top_k).map_err(|_| invalid(format!("top_k must be >= 0, got {top_k}")))?,
            class_names,
            diagnostics_period: Duration::from_secs_f64(positive("diagnostics_period_s", p.double("diagnostics_period_s", 1.0)?)?),
            threads: i32::try_from(p.int("threads", 0)?).map_err(|e| invalid(format!("threads: {e}")))?,
        })
    }
}

/// Configuration of `lop_bandwidth`.
#[derive(Debug, Clone)]
pub struct BandwidthConfig {
    /// The ROS session.
    pub ros: RosSettings,
    /// The edge session (for active probes).
    pub edge: EdgeSettings,
    /// Results in (passive samples).
    pub inference_topic: String,
    /// Estimates out.
    pub bandwidth_topic: String,
    /// Probe timeout.
    pub probe_timeout: Duration,
    /// The robot's id (`robot_id`, as `lop_robot`'s): the edge rations probes per robot id.
    pub robot_id: String,
    /// The monitor (predictor, publication period, probes, buckets, hysteresis).
    pub monitor: MonitorConfig,
}

impl BandwidthConfig {
    /// Reads every parameter of `lop_bandwidth`.
    ///
    /// # Errors
    /// [`Error::Config`] naming the bad parameter.
    pub fn from_params(p: &mut Params) -> Result<BandwidthConfig> {
        let d = MonitorConfig::default();
        let ros = RosSettings::read(p)?;
        let edge = EdgeSettings::read(p)?;
        let inference_topic = p.string("topics.inference", "/lop/inference");
        let bandwidth_topic = p.string("topics.bandwidth", "/lop/bandwidth");
        let robot_id = p.string("robot_id", "robot");
        lop_msgs::validate_robot_id(&robot_id).map_err(|e| invalid(format!("robot_id: {e}")))?;
        let rate_hz = positive("rate_hz", p.double("rate_hz", 2.0)?)?;
        let window = p.int("window", d.window as i64)?;
        let probe_bytes = p.int("probe_bytes", d.probe_bytes as i64)?;
        let min_passive = p.int("min_passive_bytes", d.min_passive_bytes as i64)?;
        let probes = p.bool("probes", true)?;
        let table = read_table(p)?;
        let bandwidth_scale = match &table.bandwidth_scale {
            ScaleSetting::Factor(f) => positive("table.bandwidth_scale", *f)?,
            ScaleSetting::Word(_) => {
                tracing::warn!(
                    "table.bandwidth_scale auto: the published bucket assumes scale 1 (lop_robot picks its own from the prediction)"
                );
                1.0
            }
        };
        let monitor = MonitorConfig {
            window: usize::try_from(window).ok().filter(|&w| w > 0).ok_or_else(|| invalid(format!("window must be >= 1, got {window}")))?,
            predictor: p.string("predictor", &d.predictor),
            publish_period: Duration::from_secs_f64(1.0 / rate_hz),
            min_passive_bytes: u64::try_from(min_passive)
                .map_err(|_| invalid(format!("min_passive_bytes must be >= 0, got {min_passive}")))?,
            idle_threshold: ms(p, "probe_idle_ms", d.idle_threshold.as_secs_f64() * 1e3)?,
            probe_interval: if probes { ms(p, "probe_interval_ms", d.probe_interval.as_secs_f64() * 1e3)? } else { Duration::ZERO },
            probe_bytes: usize::try_from(probe_bytes)
                .ok()
                .filter(|&b| b > 0 && b <= lop_runtime::bandwidth::probe::MAX_PROBE_BYTES)
                .ok_or_else(|| {
                    invalid(format!("probe_bytes must be 1..={}, got {probe_bytes}", lop_runtime::bandwidth::probe::MAX_PROBE_BYTES))
                })?,
            hysteresis: hysteresis(p)?,
            buckets: table.bucket_values().map_err(|e| invalid(e.to_string()))?,
            bandwidth_scale,
        };
        let probe_timeout = ms(p, "probe_timeout_ms", 2000.0)?;
        Ok(BandwidthConfig { ros, edge, inference_topic, bandwidth_topic, probe_timeout, robot_id, monitor })
    }
}

/// Configuration of `lop_power`.
#[derive(Debug, Clone)]
pub struct PowerConfig {
    /// The ROS session.
    pub ros: RosSettings,
    /// `auto`, `jetson-iio`, `jetson-hwmon`, `tegrastats`, `nvml`, `rapl` or `model`.
    pub source: String,
    /// Root of the sysfs trees (tests point it at a fake tree).
    pub root: PathBuf,
    /// Sampling rate, Hz.
    pub rate_hz: f64,
    /// Rate of /lop/power, Hz.
    pub publish_hz: f64,
    /// Results in.
    pub inference_topic: String,
    /// Energy out.
    pub energy_topic: String,
    /// Power samples out.
    pub power_topic: String,
    /// CSV log of per-inference energy (empty: none).
    pub csv: String,
    /// Seconds of samples kept.
    pub window_s: f64,
    /// Power model (source `model`): idle, computing and transmitting watts.
    pub model: lop_power::model::PowerModel,
}

impl PowerConfig {
    /// Reads every parameter of `lop_power`.
    ///
    /// # Errors
    /// [`Error::Config`] naming the bad parameter.
    pub fn from_params(p: &mut Params) -> Result<PowerConfig> {
        let d = lop_power::model::PowerModel::default();
        let model = lop_power::model::PowerModel {
            idle_w: p.double("model.idle_w", d.idle_w)?,
            computing_w: p.double("model.computing_w", d.computing_w)?,
            transmitting_w: p.double("model.transmitting_w", d.transmitting_w)?,
        };
        model.validate().map_err(|e| invalid(format!("model: {e}")))?;
        Ok(PowerConfig {
            ros: RosSettings::read(p)?,
            source: p.string("source", "auto"),
            root: PathBuf::from(p.string("root", "/")),
            rate_hz: positive("rate_hz", p.double("rate_hz", 100.0)?)?,
            publish_hz: positive("publish_hz", p.double("publish_hz", 10.0)?)?,
            inference_topic: p.string("topics.inference", "/lop/inference"),
            energy_topic: p.string("topics.energy", "/lop/energy"),
            power_topic: p.string("topics.power", "/lop/power"),
            csv: p.string("csv", ""),
            window_s: positive("window_s", p.double("window_s", 30.0)?)?,
            model,
        })
    }
}

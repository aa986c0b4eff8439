//! The ROS layer of the nodes: one small trait, [`Ros`], that the node logic uses to publish
//! typed messages, subscribe with callbacks and declare parameters, and one thin adapter per ROS
//! library: [`hiroz`] (default; ROS 2 over Zenoh, rmw_zenoh-compatible, no ROS install needed)
//! and `r2r` (feature `ros2`; a sourced ROS 2 with any RMW).
//!
//! The lop_msgs messages travel as the generated Rust types of [`lop_msgs::ros`]; sensor input
//! arrives as the backend-neutral [`ImageIn`] and [`CloudIn`], whose payload stays the
//! backend's buffer (no copy); diagnostics leave as [`Diagnostics`].

pub mod hiroz;
#[cfg(feature = "ros2")]
pub mod r2r;
#[cfg(feature = "ros2")]
mod r2r_lifecycle;
#[cfg(feature = "ros2")]
mod r2r_shared;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use hiroz_msgs::ros::sensor_msgs::{CompressedImage, Image, PointCloud2};
pub use lop_msgs::ros::msg::{Bandwidth, InferenceEnergy, InferenceResult, KeypointsArray, PowerSample};
pub use lop_msgs::ros::vision::Detection2DArray;

use crate::error::Result;
use crate::lifecycle::Lifecycle;
use crate::live::OnSet;
use crate::params::Declared;

/// A ROS time stamp.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp {
    /// Seconds.
    pub sec: i32,
    /// Nanoseconds within the second.
    pub nanosec: u32,
}

impl Stamp {
    /// The stamp of a system time (clamped to the representable range).
    pub fn from_system(t: SystemTime) -> Stamp {
        let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        Stamp { sec: i32::try_from(d.as_secs()).unwrap_or(i32::MAX), nanosec: d.subsec_nanos() }
    }

    /// Now, by the system clock.
    pub fn now() -> Stamp {
        Stamp::from_system(SystemTime::now())
    }

    /// The system time of this stamp (stamps before 1970 map to the epoch).
    pub fn to_system(self) -> SystemTime {
        let secs = u64::try_from(self.sec).unwrap_or(0);
        UNIX_EPOCH + std::time::Duration::new(secs, self.nanosec.min(999_999_999))
    }

    /// Seconds since the epoch, as a float.
    pub fn as_secs_f64(self) -> f64 {
        f64::from(self.sec) + f64::from(self.nanosec) * 1e-9
    }
}

/// A message header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Header {
    /// The source's stamp.
    pub stamp: Stamp,
    /// The source's frame.
    pub frame_id: String,
}

/// A message payload kept in the backend's own buffer.
pub type Payload = Box<dyn AsRef<[u8]> + Send + Sync>;

/// A received `sensor_msgs/msg/Image`.
pub struct ImageIn {
    /// Header.
    pub header: Header,
    /// Rows.
    pub height: u32,
    /// Columns.
    pub width: u32,
    /// Pixel encoding (`rgb8`, `bgr8`, `mono8`, ...).
    pub encoding: String,
    /// Byte order of multi-byte pixels.
    pub is_bigendian: bool,
    /// Bytes per row.
    pub step: u32,
    /// Pixels.
    pub data: Payload,
}

impl ImageIn {
    /// The fields [`crate::convert::image_to_chw`] reads, borrowed.
    pub fn view(&self) -> crate::convert::ImageView<'_> {
        crate::convert::ImageView {
            width: self.width,
            height: self.height,
            encoding: &self.encoding,
            is_bigendian: self.is_bigendian,
            step: self.step,
            data: (*self.data).as_ref(),
        }
    }
}

impl std::fmt::Debug for ImageIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageIn")
            .field("header", &self.header)
            .field("size", &(self.width, self.height))
            .field("encoding", &self.encoding)
            .field("step", &self.step)
            .field("bytes", &(*self.data).as_ref().len())
            .finish()
    }
}

/// A received `sensor_msgs/msg/CompressedImage` (image_transport's `compressed` transport).
pub struct CompressedIn {
    /// Header.
    pub header: Header,
    /// The `format` field as image_transport writes it: `jpeg` or `png` on its own, or
    /// `<source encoding>; <jpeg|png> compressed <encoding>` (Jazzy's compressed_image_transport).
    pub format: String,
    /// The picture's bytes (a whole JPEG or PNG file).
    pub data: Payload,
}

impl std::fmt::Debug for CompressedIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompressedIn")
            .field("header", &self.header)
            .field("format", &self.format)
            .field("bytes", &(*self.data).as_ref().len())
            .finish()
    }
}

/// One field of a point cloud's points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointFieldIn {
    /// Name (`x`, `y`, `z`, `intensity`, ...).
    pub name: String,
    /// Byte offset in a point.
    pub offset: u32,
    /// `sensor_msgs/PointField` datatype code.
    pub datatype: u8,
    /// Elements.
    pub count: u32,
}

/// A received `sensor_msgs/msg/PointCloud2`.
pub struct CloudIn {
    /// Header.
    pub header: Header,
    /// Rows (1 for unorganised clouds).
    pub height: u32,
    /// Points per row.
    pub width: u32,
    /// Point layout.
    pub fields: Vec<PointFieldIn>,
    /// Byte order.
    pub is_bigendian: bool,
    /// Bytes per point.
    pub point_step: u32,
    /// Bytes per row.
    pub row_step: u32,
    /// Points.
    pub data: Payload,
    /// Whether the cloud has no invalid points.
    pub is_dense: bool,
}

impl CloudIn {
    /// The point layout as [`CloudIn::view`] needs it.
    pub fn field_views(&self) -> Vec<crate::convert::PointFieldView<'_>> {
        self.fields
            .iter()
            .map(|f| crate::convert::PointFieldView { name: &f.name, offset: f.offset, datatype: f.datatype, count: f.count })
            .collect()
    }

    /// The fields the grid conversions read, borrowed; `fields` from [`CloudIn::field_views`].
    pub fn view<'a>(&'a self, fields: &'a [crate::convert::PointFieldView<'a>]) -> crate::convert::CloudView<'a> {
        crate::convert::CloudView {
            fields,
            is_bigendian: self.is_bigendian,
            point_step: self.point_step,
            row_step: self.row_step,
            width: self.width,
            height: self.height,
            data: (*self.data).as_ref(),
        }
    }
}

impl std::fmt::Debug for CloudIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudIn")
            .field("header", &self.header)
            .field("size", &(self.width, self.height))
            .field("fields", &self.fields)
            .field("bytes", &(*self.data).as_ref().len())
            .finish()
    }
}

/// Severity of a diagnostic status (`diagnostic_msgs/DiagnosticStatus` levels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// OK.
    Ok = 0,
    /// WARN.
    Warn = 1,
    /// ERROR.
    Error = 2,
}

/// One `diagnostic_msgs/DiagnosticStatus`, published in a `DiagnosticArray` on its own.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostics {
    /// When.
    pub stamp: Stamp,
    /// Severity.
    pub level: Level,
    /// Status name (`lop_robot: inference`).
    pub name: String,
    /// One line.
    pub message: String,
    /// Robot id.
    pub hardware_id: String,
    /// Counters and measurements.
    pub values: Vec<(String, String)>,
}

/// Receives each message of a subscription (called on the backend's thread: keep it short).
pub type Callback<T> = Box<dyn Fn(T) + Send + Sync + 'static>;

/// Publishes messages of one type on one topic.
pub trait Publisher<T>: Send + Sync {
    /// Publishes `msg`.
    ///
    /// # Errors
    /// The backend's failure to publish.
    fn publish(&self, msg: &T) -> Result<()>;

    /// How many subscriptions the topic has now, as far as the backend knows (hiroz: the ROS
    /// graph's, from liveliness; r2r: rcl's matched subscriptions). `None` where the backend
    /// cannot tell; a caller that publishes only for subscribers then publishes anyway.
    fn subscribers(&self) -> Option<usize> {
        None
    }
}

/// A boxed publisher.
pub type Pub<T> = Box<dyn Publisher<T>>;

/// Keeps a subscription alive; dropping it unsubscribes.
pub struct Subscription(#[allow(dead_code)] Box<dyn Send + Sync>);

impl Subscription {
    /// Wraps whatever keeps a backend's subscription alive.
    pub fn new(inner: impl Send + Sync + 'static) -> Subscription {
        Subscription(Box::new(inner))
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Subscription")
    }
}

/// A message on an input topic that the typed subscription could not deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputFault {
    /// A message of another type on the topic; its key names this type and type hash.
    WrongType {
        /// The type name in the key (`std_msgs::msg::dds_::String_`).
        type_name: String,
        /// The type hash in the key (`RIHS01_...`).
        type_hash: String,
    },
    /// A message of the right type whose payload does not decode.
    Undecodable {
        /// The decoder's error.
        error: String,
    },
}

/// Input faults counted so far (see [`Ros::input_faults`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InputFaultCounts {
    /// Messages of another type on an input topic.
    pub wrong_type: u64,
    /// Messages of the right type that failed to decode.
    pub undecodable: u64,
}

impl InputFaultCounts {
    /// Both counts together.
    pub fn total(&self) -> u64 {
        self.wrong_type.saturating_add(self.undecodable)
    }
}

/// Shortest time between two warnings about input faults (the counts keep every one).
const FAULT_WARN_PERIOD: Duration = Duration::from_secs(5);

/// Counts the input faults of a backend's subscriptions and logs them at warn, at most once per
/// [`FAULT_WARN_PERIOD`] (with the number of faults not logged since the last warning).
#[derive(Debug, Default)]
pub struct InputFaults {
    wrong_type: AtomicU64,
    undecodable: AtomicU64,
    /// When the last warning was logged, and the faults counted since without a warning.
    warned: Mutex<(Option<Instant>, u64)>,
}

impl InputFaults {
    /// Counts `fault`, seen on `topic`, and logs it unless a warning was logged recently.
    pub fn record(&self, topic: &str, fault: &InputFault) {
        match fault {
            InputFault::WrongType { .. } => self.wrong_type.fetch_add(1, Ordering::Relaxed),
            InputFault::Undecodable { .. } => self.undecodable.fetch_add(1, Ordering::Relaxed),
        };
        let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if warned.0.is_some_and(|t| now.duration_since(t) < FAULT_WARN_PERIOD) {
            warned.1 = warned.1.saturating_add(1);
            return;
        }
        let unlogged = std::mem::take(&mut warned.1);
        warned.0 = Some(now);
        drop(warned);
        let c = self.counts();
        match fault {
            InputFault::WrongType { type_name, type_hash } => tracing::warn!(
                %topic, %type_name, %type_hash, wrong_type = c.wrong_type, undecodable = c.undecodable, unlogged,
                "message of the wrong type on an input topic dropped"
            ),
            InputFault::Undecodable { error } => tracing::warn!(
                %topic, %error, wrong_type = c.wrong_type, undecodable = c.undecodable, unlogged,
                "undecodable message on an input topic dropped"
            ),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> InputFaultCounts {
        InputFaultCounts { wrong_type: self.wrong_type.load(Ordering::Relaxed), undecodable: self.undecodable.load(Ordering::Relaxed) }
    }
}

/// Quality of service of a subscription or publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    /// Reliable, keep last 10 (ROS default).
    Default,
    /// Best effort, keep last 5 (`rclcpp::SensorDataQoS`).
    SensorData,
}

/// What a node needs from a ROS library.
pub trait Ros: Send + Sync + 'static {
    /// `hiroz` or `r2r`.
    fn name(&self) -> &'static str;
    /// A publisher of inference results.
    ///
    /// # Errors
    /// The backend refuses the topic.
    fn inference_publisher(&self, topic: &str) -> Result<Pub<InferenceResult>>;
    /// A publisher of bandwidth estimates.
    ///
    /// # Errors
    /// As [`Ros::inference_publisher`].
    fn bandwidth_publisher(&self, topic: &str) -> Result<Pub<Bandwidth>>;
    /// A publisher of per-inference energy.
    ///
    /// # Errors
    /// As [`Ros::inference_publisher`].
    fn energy_publisher(&self, topic: &str) -> Result<Pub<InferenceEnergy>>;
    /// A publisher of power samples.
    ///
    /// # Errors
    /// As [`Ros::inference_publisher`].
    fn power_publisher(&self, topic: &str) -> Result<Pub<PowerSample>>;
    /// A publisher of `vision_msgs/Detection2DArray` (task detect and pose).
    ///
    /// # Errors
    /// As [`Ros::inference_publisher`].
    fn detections_publisher(&self, topic: &str) -> Result<Pub<Detection2DArray>>;
    /// A publisher of `lop_msgs/KeypointsArray` (task pose).
    ///
    /// # Errors
    /// As [`Ros::inference_publisher`].
    fn keypoints_publisher(&self, topic: &str) -> Result<Pub<KeypointsArray>>;
    /// A publisher of `sensor_msgs/PointCloud2` (task occupancy).
    ///
    /// # Errors
    /// As [`Ros::inference_publisher`].
    fn cloud_publisher(&self, topic: &str) -> Result<Pub<PointCloud2>>;
    /// A publisher of `sensor_msgs/Image` (task segment, the debug image).
    ///
    /// # Errors
    /// As [`Ros::inference_publisher`].
    fn image_publisher(&self, topic: &str) -> Result<Pub<Image>>;
    /// A publisher of `sensor_msgs/CompressedImage` (the debug image's JPEG form).
    ///
    /// # Errors
    /// As [`Ros::inference_publisher`].
    fn compressed_image_publisher(&self, topic: &str) -> Result<Pub<CompressedImage>>;
    /// A publisher of `diagnostic_msgs/DiagnosticArray`.
    ///
    /// # Errors
    /// As [`Ros::inference_publisher`].
    fn diagnostics_publisher(&self, topic: &str) -> Result<Pub<Diagnostics>>;
    /// Subscribes to `sensor_msgs/Image`. Messages the subscription cannot deliver (another type
    /// on the topic, a payload that does not decode) are counted in [`Ros::input_faults`] where
    /// the backend can see them.
    ///
    /// # Errors
    /// As [`Ros::inference_publisher`].
    fn subscribe_images(&self, topic: &str, qos: Qos, cb: Callback<ImageIn>) -> Result<Subscription>;
    /// Subscribes to `sensor_msgs/CompressedImage` (input faults as for
    /// [`Ros::subscribe_images`]).
    ///
    /// # Errors
    /// As [`Ros::inference_publisher`].
    fn subscribe_compressed(&self, topic: &str, qos: Qos, cb: Callback<CompressedIn>) -> Result<Subscription>;
    /// Subscribes to `sensor_msgs/PointCloud2` (input faults as for [`Ros::subscribe_images`]).
    ///
    /// # Errors
    /// As [`Ros::inference_publisher`].
    fn subscribe_clouds(&self, topic: &str, qos: Qos, cb: Callback<CloudIn>) -> Result<Subscription>;
    /// The input faults of the image and cloud subscriptions so far: messages of another type
    /// on their topics and payloads that do not decode. Backends whose ROS layer drops these
    /// before the node sees them report zeros.
    fn input_faults(&self) -> InputFaultCounts;
    /// Subscribes to inference results.
    ///
    /// # Errors
    /// As [`Ros::inference_publisher`].
    fn subscribe_inference(&self, topic: &str, cb: Callback<InferenceResult>) -> Result<Subscription>;
    /// Subscribes to bandwidth estimates.
    ///
    /// # Errors
    /// As [`Ros::inference_publisher`].
    fn subscribe_bandwidth(&self, topic: &str, cb: Callback<Bandwidth>) -> Result<Subscription>;
    /// Installs the policy that decides on changes requested through the node's parameter
    /// services while it runs (`ros2 param set`), replacing the one before. A node opens with
    /// [`crate::live::RefuseAll`]: its parameters are listed and read through the services, and
    /// every change is refused with the reason until the node installs its own policy.
    fn on_parameter_set(&self, policy: OnSet);
    /// Serves the ROS 2 lifecycle interface of a managed node from `lifecycle`: the services
    /// `<node>/change_state`, `get_state`, `get_available_states`, `get_available_transitions`
    /// and `get_transition_graph`, and the topic `<node>/transition_event`; they last as long as
    /// the returned value. `Ok(None)` where the backend does not offer them (hiroz).
    ///
    /// # Errors
    /// The backend refuses a service or the topic.
    fn serve_lifecycle(&self, lifecycle: Arc<Lifecycle>) -> Result<Option<Subscription>>;
    /// Stops the backend's own threads before the process exits (a node calls it once, after
    /// its run); publishing afterwards fails. rcl must not be spinning while the process tears
    /// its libraries down.
    fn shutdown(&self) {}
}

/// A shared backend.
pub type SharedRos = Arc<dyn Ros>;

/// Converts between this crate's stamps and the generated `builtin_interfaces/Time`.
pub fn to_time(s: Stamp) -> hiroz_msgs::builtin_interfaces::Time {
    hiroz_msgs::builtin_interfaces::Time { sec: s.sec, nanosec: s.nanosec }
}

/// See [`to_time`].
pub fn from_time(t: &hiroz_msgs::builtin_interfaces::Time) -> Stamp {
    Stamp { sec: t.sec, nanosec: t.nanosec }
}

/// The parameters a node declared, for backends that expose them (name, value in force).
pub fn declared_summary(declared: &[Declared]) -> String {
    declared.iter().map(|d| format!("{}={}", d.name, d.value.to_text())).collect::<Vec<_>>().join(" ")
}

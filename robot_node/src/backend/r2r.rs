//! The r2r backend (feature `ros2`): a sourced ROS 2 with any RMW.
//!
//! Sensor and diagnostic messages use r2r's typed API. The lop_msgs messages are not among
//! r2r's generated types unless the `lop_msgs` interface package is built and sourced, so they
//! travel through r2r's untyped (JSON) publishers and subscribers, whose JSON is the serde form of
//! the [`lop_msgs::ros`] types (same field names as the `.msg` files). rcl reads `--ros-args`
//! (parameters, remappings) and `ROS_DOMAIN_ID` itself. The node serves the ROS 2 parameter
//! services (list, get, describe, set, set atomically); changes go through the node's
//! [`crate::live::ParamPolicy`], which refuses what it does not accept with the reason. It also
//! serves the lifecycle services of a managed node (`r2r_lifecycle`).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use futures::StreamExt as _;
use r2r::QosProfile;

use super::r2r_shared::{AbortOnDrop, Shared};
use super::{
    Bandwidth, Callback, CloudIn, CompressedImage, CompressedIn, Detection2DArray, Diagnostics, Header, Image, ImageIn, InferenceEnergy,
    InferenceResult, InputFaultCounts, KeypointsArray, PointCloud2, PointFieldIn, PowerSample, Pub, Publisher, Qos, Ros, Stamp,
    Subscription,
};
use crate::config::RosSettings;
use crate::error::{Error, Result};
use crate::live::{OnSet, refuse_all};
use crate::params::{Declared, ParamValue};

fn err(what: impl std::fmt::Display) -> Error {
    Error::Ros { backend: "r2r", what: what.to_string() }
}

/// One r2r node, spun on its own thread.
pub struct R2rRos {
    node: Arc<Mutex<r2r::Node>>,
    runtime: tokio::runtime::Handle,
    stop: Arc<std::sync::atomic::AtomicBool>,
    spinner: Mutex<Option<std::thread::JoinHandle<()>>>,
    policy: Arc<RwLock<OnSet>>,
    _params: AbortOnDrop,
}

impl std::fmt::Debug for R2rRos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("R2rRos")
    }
}

impl Drop for R2rRos {
    fn drop(&mut self) {
        self.stop_spinning();
    }
}

fn to_r2r(v: &ParamValue) -> r2r::ParameterValue {
    match v {
        ParamValue::Bool(b) => r2r::ParameterValue::Bool(*b),
        ParamValue::Int(i) => r2r::ParameterValue::Integer(*i),
        ParamValue::Double(d) => r2r::ParameterValue::Double(*d),
        ParamValue::Str(s) => r2r::ParameterValue::String(s.clone()),
        ParamValue::StrList(l) => r2r::ParameterValue::StringArray(l.clone()),
        ParamValue::DoubleList(l) => r2r::ParameterValue::DoubleArray(l.clone()),
    }
}

fn from_r2r(v: &r2r::ParameterValue) -> Option<ParamValue> {
    Some(match v {
        r2r::ParameterValue::Bool(b) => ParamValue::Bool(*b),
        r2r::ParameterValue::Integer(i) => ParamValue::Int(*i),
        r2r::ParameterValue::Double(d) => ParamValue::Double(*d),
        r2r::ParameterValue::String(s) => ParamValue::Str(s.clone()),
        r2r::ParameterValue::StringArray(l) => ParamValue::StrList(l.clone()),
        r2r::ParameterValue::DoubleArray(l) => ParamValue::DoubleList(l.clone()),
        _ => return None,
    })
}

/// The node's policy as r2r's parameter services see it. Values are kept in the node's own
/// table (r2r updates it after a successful set), so reads fall through to it.
struct PolicyParams(Arc<RwLock<OnSet>>);

impl PolicyParams {
    fn decide(
        &self,
        name: &str,
        value: &r2r::ParameterValue,
        f: impl FnOnce(&OnSet, &ParamValue) -> std::result::Result<(), String>,
    ) -> r2r::Result<()> {
        let refuse = |msg: String| r2r::Error::ParameterValueConv { name: name.to_string(), msg };
        let v = from_r2r(value).ok_or_else(|| refuse("unsupported parameter type".into()))?;
        let policy = self.0.read().unwrap_or_else(PoisonError::into_inner).clone();
        f(&policy, &v).map_err(refuse)
    }
}

impl r2r::RosParams for PolicyParams {
    fn register_parameters(
        &mut self,
        _prefix: &str,
        _param: Option<r2r::Parameter>,
        _params: &mut r2r::indexmap::IndexMap<String, r2r::Parameter>,
    ) -> r2r::Result<()> {
        Ok(())
    }

    fn get_parameter(&mut self, name: &str) -> r2r::Result<r2r::ParameterValue> {
        Err(r2r::Error::InvalidParameterName { name: name.to_string() })
    }

    fn set_parameter(&mut self, name: &str, value: &r2r::ParameterValue) -> r2r::Result<()> {
        self.decide(name, value, |p, v| p.set(name, v))
    }

    fn check_parameter(&self, name: &str, value: &r2r::ParameterValue) -> r2r::Result<()> {
        self.decide(name, value, |p, v| p.check(name, v))
    }
}

fn qos(q: Qos) -> QosProfile {
    match q {
        Qos::Default => QosProfile::default(),
        Qos::SensorData => QosProfile::sensor_data(),
    }
}

fn stamp(t: &r2r::builtin_interfaces::msg::Time) -> Stamp {
    Stamp { sec: t.sec, nanosec: t.nanosec }
}

impl R2rRos {
    /// Creates node `node_name` (rcl parses the process's `--ros-args`) and declares every
    /// parameter of `declared` that rcl did not set. Must be called inside a tokio runtime
    /// (subscriptions are driven by its tasks).
    ///
    /// # Errors
    /// [`Error::Ros`] when rcl fails.
    pub fn open(settings: &RosSettings, node_name: &str, declared: &[Declared]) -> Result<R2rRos> {
        if settings.embedded_router || settings.domain_id.is_some() {
            tracing::warn!("r2r: embedded_router and domain_id are the RMW's business (ROS_DOMAIN_ID, rmw_zenohd); ignored");
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(err)?;
        let ctx = r2r::Context::create().map_err(err)?;
        let mut node = r2r::Node::create(ctx, node_name, &settings.namespace).map_err(err)?;
        {
            let mut params = node.params.lock().unwrap_or_else(PoisonError::into_inner);
            for d in declared {
                params.entry(d.name.clone()).or_insert_with(|| r2r::Parameter::new(to_r2r(&d.value)));
            }
        }
        let policy = Arc::new(RwLock::new(refuse_all()));
        let handler: Arc<Mutex<dyn r2r::RosParams + Send>> = Arc::new(Mutex::new(PolicyParams(policy.clone())));
        let (services, mut changes) = node.make_derived_parameter_handler(handler).map_err(|e| err(format!("parameter services: {e}")))?;
        let params_task = runtime.spawn(async move {
            let drain = async move { while changes.next().await.is_some() {} };
            futures::join!(services, drain);
        });
        let node = Arc::new(Mutex::new(node));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (n, s) = (node.clone(), stop.clone());
        let spinner = std::thread::Builder::new()
            .name(format!("r2r-spin-{node_name}"))
            .spawn(move || {
                while !s.load(std::sync::atomic::Ordering::Relaxed) {
                    n.lock().unwrap_or_else(PoisonError::into_inner).spin_once(Duration::from_millis(5));
                }
            })
            .map_err(err)?;
        Ok(R2rRos { node, runtime, stop, spinner: Mutex::new(Some(spinner)), policy, _params: AbortOnDrop(params_task) })
    }

    /// Stops the spin thread and waits for it (it checks every 5 ms).
    fn stop_spinning(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let handle = self.spinner.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(h) = handle
            && h.join().is_err()
        {
            tracing::warn!("r2r: the spin thread panicked");
        }
    }

    fn node(&self) -> MutexGuard<'_, r2r::Node> {
        self.node.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn untyped_publisher<T: serde::Serialize + Send + Sync + 'static>(&self, topic: &str, ros_type: &str) -> Result<Pub<T>> {
        let p = self
            .node()
            .create_publisher_untyped(topic, ros_type, QosProfile::default())
            .map_err(|e| err(format!("publisher {ros_type} on {topic}: {e}")))?;
        Ok(Box::new(JsonPub(Shared(p), std::marker::PhantomData)))
    }

    fn untyped_subscription<T: serde::de::DeserializeOwned + Send + 'static>(
        &self,
        topic: &str,
        ros_type: &'static str,
        cb: Callback<T>,
    ) -> Result<Subscription> {
        let mut stream = self
            .node()
            .subscribe_untyped(topic, ros_type, QosProfile::default())
            .map_err(|e| err(format!("subscriber {ros_type} on {topic}: {e}")))?;
        let topic = topic.to_string();
        let task = self.runtime.spawn(async move {
            while let Some(v) = stream.next().await {
                match v.map_err(err).and_then(|v| serde_json::from_value::<T>(v).map_err(err)) {
                    Ok(m) => cb(m),
                    Err(e) => tracing::warn!(%topic, error = %e, "undecodable message dropped"),
                }
            }
        });
        Ok(Subscription::new(AbortOnDrop(task)))
    }
}

struct JsonPub<T>(Shared<r2r::PublisherUntyped>, std::marker::PhantomData<fn(&T)>);

impl<T: serde::Serialize> Publisher<T> for JsonPub<T> {
    fn publish(&self, msg: &T) -> Result<()> {
        let v = serde_json::to_value(msg).map_err(err)?;
        self.0.0.publish(v).map_err(|e| err(format!("publish: {e}")))
    }

    /// rcl's count of the subscriptions matched with this publisher
    /// (`rcl_publisher_get_subscription_count`, thread-safe by rcl's documentation; r2r names it
    /// "inter process", and it counts what the RMW matched). `None` when rcl fails (the node
    /// is gone).
    fn subscribers(&self) -> Option<usize> {
        self.0.0.get_inter_process_subscription_count().ok()
    }
}

struct DiagPub(Shared<r2r::Publisher<r2r::diagnostic_msgs::msg::DiagnosticArray>>);

impl Publisher<Diagnostics> for DiagPub {
    fn publish(&self, d: &Diagnostics) -> Result<()> {
        use r2r::diagnostic_msgs::msg::{DiagnosticArray, DiagnosticStatus, KeyValue};
        let msg = DiagnosticArray {
            header: r2r::std_msgs::msg::Header {
                stamp: r2r::builtin_interfaces::msg::Time { sec: d.stamp.sec, nanosec: d.stamp.nanosec },
                frame_id: String::new(),
            },
            status: vec![DiagnosticStatus {
                level: d.level as u8,
                name: d.name.clone(),
                message: d.message.clone(),
                hardware_id: d.hardware_id.clone(),
                values: d.values.iter().map(|(k, v)| KeyValue { key: k.clone(), value: v.clone() }).collect(),
            }],
        };
        self.0.0.publish(&msg).map_err(|e| err(format!("publish diagnostics: {e}")))
    }
}

struct VecPayload(Vec<u8>);

impl AsRef<[u8]> for VecPayload {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Ros for R2rRos {
    fn name(&self) -> &'static str {
        "r2r"
    }

    fn inference_publisher(&self, topic: &str) -> Result<Pub<InferenceResult>> {
        self.untyped_publisher(topic, InferenceResult::ROS_TYPE.name)
    }

    fn bandwidth_publisher(&self, topic: &str) -> Result<Pub<Bandwidth>> {
        self.untyped_publisher(topic, Bandwidth::ROS_TYPE.name)
    }

    fn energy_publisher(&self, topic: &str) -> Result<Pub<InferenceEnergy>> {
        self.untyped_publisher(topic, InferenceEnergy::ROS_TYPE.name)
    }

    fn power_publisher(&self, topic: &str) -> Result<Pub<PowerSample>> {
        self.untyped_publisher(topic, PowerSample::ROS_TYPE.name)
    }

    fn detections_publisher(&self, topic: &str) -> Result<Pub<Detection2DArray>> {
        self.untyped_publisher(topic, Detection2DArray::ROS_TYPE.name)
    }

    fn keypoints_publisher(&self, topic: &str) -> Result<Pub<KeypointsArray>> {
        self.untyped_publisher(topic, KeypointsArray::ROS_TYPE.name)
    }

    fn cloud_publisher(&self, topic: &str) -> Result<Pub<PointCloud2>> {
        self.untyped_publisher(topic, "sensor_msgs/msg/PointCloud2")
    }

    fn image_publisher(&self, topic: &str) -> Result<Pub<Image>> {
        self.untyped_publisher(topic, "sensor_msgs/msg/Image")
    }

    fn compressed_image_publisher(&self, topic: &str) -> Result<Pub<CompressedImage>> {
        self.untyped_publisher(topic, "sensor_msgs/msg/CompressedImage")
    }

    fn diagnostics_publisher(&self, topic: &str) -> Result<Pub<Diagnostics>> {
        let p = self.node().create_publisher(topic, QosProfile::default()).map_err(|e| err(format!("publisher on {topic}: {e}")))?;
        Ok(Box::new(DiagPub(Shared(p))))
    }

    fn subscribe_images(&self, topic: &str, q: Qos, cb: Callback<ImageIn>) -> Result<Subscription> {
        let mut stream =
            self.node().subscribe::<r2r::sensor_msgs::msg::Image>(topic, qos(q)).map_err(|e| err(format!("subscriber on {topic}: {e}")))?;
        let task = self.runtime.spawn(async move {
            while let Some(m) = stream.next().await {
                cb(ImageIn {
                    header: Header { stamp: stamp(&m.header.stamp), frame_id: m.header.frame_id },
                    height: m.height,
                    width: m.width,
                    encoding: m.encoding,
                    is_bigendian: m.is_bigendian != 0,
                    step: m.step,
                    data: Box::new(VecPayload(m.data)),
                });
            }
        });
        Ok(Subscription::new(AbortOnDrop(task)))
    }

    fn subscribe_compressed(&self, topic: &str, q: Qos, cb: Callback<CompressedIn>) -> Result<Subscription> {
        let mut stream = self
            .node()
            .subscribe::<r2r::sensor_msgs::msg::CompressedImage>(topic, qos(q))
            .map_err(|e| err(format!("subscriber on {topic}: {e}")))?;
        let task = self.runtime.spawn(async move {
            while let Some(m) = stream.next().await {
                cb(CompressedIn {
                    header: Header { stamp: stamp(&m.header.stamp), frame_id: m.header.frame_id },
                    format: m.format,
                    data: Box::new(VecPayload(m.data)),
                });
            }
        });
        Ok(Subscription::new(AbortOnDrop(task)))
    }

    fn subscribe_clouds(&self, topic: &str, q: Qos, cb: Callback<CloudIn>) -> Result<Subscription> {
        let mut stream = self
            .node()
            .subscribe::<r2r::sensor_msgs::msg::PointCloud2>(topic, qos(q))
            .map_err(|e| err(format!("subscriber on {topic}: {e}")))?;
        let task = self.runtime.spawn(async move {
            while let Some(m) = stream.next().await {
                cb(CloudIn {
                    header: Header { stamp: stamp(&m.header.stamp), frame_id: m.header.frame_id },
                    height: m.height,
                    width: m.width,
                    fields: m
                        .fields
                        .into_iter()
                        .map(|f| PointFieldIn { name: f.name, offset: f.offset, datatype: f.datatype, count: f.count })
                        .collect(),
                    is_bigendian: m.is_bigendian,
                    point_step: m.point_step,
                    row_step: m.row_step,
                    data: Box::new(VecPayload(m.data)),
                    is_dense: m.is_dense,
                });
            }
        });
        Ok(Subscription::new(AbortOnDrop(task)))
    }

    /// Always zero (a documented no-op): the RMW drops input faults before this node sees them.
    /// A DDS RMW matches publishers and subscriptions by type name (and rmw_zenoh by type name
    /// and hash in the key), so a message of another type on an input topic never reaches the
    /// typed subscription; a payload that fails CDR decoding makes the RMW's take fail inside
    /// rcl, which logs it and delivers nothing to r2r's stream. Neither is visible through r2r,
    /// so lop_robot's `wrong_type` and `undecodable` stay 0 on this backend.
    fn input_faults(&self) -> InputFaultCounts {
        InputFaultCounts::default()
    }

    fn subscribe_inference(&self, topic: &str, cb: Callback<InferenceResult>) -> Result<Subscription> {
        self.untyped_subscription(topic, InferenceResult::ROS_TYPE.name, cb)
    }

    fn subscribe_bandwidth(&self, topic: &str, cb: Callback<Bandwidth>) -> Result<Subscription> {
        self.untyped_subscription(topic, Bandwidth::ROS_TYPE.name, cb)
    }

    /// The lifecycle services and `transition_event` (backend/r2r_lifecycle.rs).
    fn serve_lifecycle(&self, lifecycle: Arc<crate::lifecycle::Lifecycle>) -> Result<Option<Subscription>> {
        super::r2r_lifecycle::serve(&mut self.node(), &self.runtime, lifecycle).map(Some)
    }

    fn on_parameter_set(&self, policy: OnSet) {
        *self.policy.write().unwrap_or_else(PoisonError::into_inner) = policy;
    }

    fn shutdown(&self) {
        self.stop_spinning();
    }
}

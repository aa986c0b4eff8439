//! The hiroz backend (default): ROS 2 over Zenoh without a ROS install, rmw_zenoh-compatible
//! (key expressions, Jazzy type hashes, attachments, liveliness graph), so nodes of a sourced
//! ROS 2 with `rmw_zenoh_cpp` on the same router see these topics. It offers no lifecycle
//! services: on it `lop_robot` activates itself and runs active (`lifecycle.autostart: false`
//! is refused).

use std::collections::HashMap;
use std::marker::PhantomData;
use std::num::NonZeroUsize;
use std::sync::Arc;

use hiroz::Builder as _;
use hiroz::context::{ZContext, ZContextBuilder};
use hiroz::msg::{ZDeserializer, ZMessage};
use hiroz::node::ZNode;
use hiroz::parameter::{ParameterDescriptor, ParameterType, ParameterValue, SetParametersResult};
use hiroz::pubsub::ZPub;
use hiroz::qos::{QosHistory, QosProfile, QosReliability};
use hiroz_msgs::diagnostic_msgs::{DiagnosticArray, DiagnosticStatus, KeyValue};
use hiroz_msgs::sensor_msgs::{CompressedImage, Image, PointCloud2};
use hiroz_msgs::std_msgs::Header as RosHeader;
use zenoh::Wait as _;

use super::{
    Bandwidth, Callback, CloudIn, CompressedIn, Detection2DArray, Diagnostics, Header, ImageIn, InferenceEnergy, InferenceResult,
    InputFault, InputFaultCounts, InputFaults, KeypointsArray, PointFieldIn, PowerSample, Pub, Publisher, Qos, Ros, Subscription,
    from_time, to_time,
};
use crate::config::RosSettings;
use crate::error::{Error, Result};
use crate::live::{OnSet, refuse_all};
use crate::params::{Declared, ParamValue};

fn err(what: impl std::fmt::Display) -> Error {
    Error::Ros { backend: "hiroz", what: what.to_string() }
}

/// A Zenoh router in this process (for a robot without `rmw_zenohd`); it routes while alive.
pub struct EmbeddedRouter {
    session: zenoh::Session,
}

impl std::fmt::Debug for EmbeddedRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedRouter").field("zid", &self.session.zid()).finish()
    }
}

impl EmbeddedRouter {
    /// Starts a router with rmw_zenoh's router settings, listening on `endpoint`.
    ///
    /// # Errors
    /// [`Error::Ros`] when the endpoint is malformed or taken.
    pub fn start(endpoint: &str) -> Result<EmbeddedRouter> {
        let config = hiroz::config::RouterConfigBuilder::new().with_listen_endpoint(endpoint).build_config().map_err(err)?;
        let session = zenoh::open(config).wait().map_err(|e| err(format!("starting the embedded router on {endpoint}: {e}")))?;
        tracing::info!(%endpoint, "embedded Zenoh router started");
        Ok(EmbeddedRouter { session })
    }
}

/// One hiroz node (with its context and, optionally, an embedded router).
pub struct HirozRos {
    node: ZNode,
    faults: Arc<InputFaults>,
    _ctx: ZContext,
    _router: Option<Arc<EmbeddedRouter>>,
}

impl std::fmt::Debug for HirozRos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HirozRos").field("node", &self.node.name()).finish()
    }
}

fn to_param(v: &ParamValue) -> (ParameterValue, ParameterType) {
    match v {
        ParamValue::Bool(b) => (ParameterValue::Bool(*b), ParameterType::Bool),
        ParamValue::Int(i) => (ParameterValue::Integer(*i), ParameterType::Integer),
        ParamValue::Double(d) => (ParameterValue::Double(*d), ParameterType::Double),
        ParamValue::Str(s) => (ParameterValue::String(s.clone()), ParameterType::String),
        ParamValue::StrList(l) => (ParameterValue::StringArray(l.clone()), ParameterType::StringArray),
        ParamValue::DoubleList(l) => (ParameterValue::DoubleArray(l.clone()), ParameterType::DoubleArray),
    }
}

/// The value of a parameter change in this crate's types (`None`: a type no node parameter has).
fn from_param(v: &ParameterValue) -> Option<ParamValue> {
    Some(match v {
        ParameterValue::Bool(b) => ParamValue::Bool(*b),
        ParameterValue::Integer(i) => ParamValue::Int(*i),
        ParameterValue::Double(d) => ParamValue::Double(*d),
        ParameterValue::String(s) => ParamValue::Str(s.clone()),
        ParameterValue::StringArray(l) => ParamValue::StrList(l.clone()),
        ParameterValue::DoubleArray(l) => ParamValue::DoubleList(l.clone()),
        _ => return None,
    })
}

/// Runs `policy` over a batch of changes: all are checked before any is applied, so a refused
/// one leaves the node as it was.
fn decide(policy: &OnSet, params: &[hiroz::parameter::Parameter]) -> SetParametersResult {
    let mut values = Vec::with_capacity(params.len());
    for p in params {
        let Some(v) = from_param(&p.value) else {
            return SetParametersResult::failure(format!("'{}': unsupported parameter type", p.name));
        };
        if let Err(reason) = policy.check(&p.name, &v) {
            return SetParametersResult::failure(reason);
        }
        values.push(v);
    }
    for (p, v) in params.iter().zip(&values) {
        if let Err(reason) = policy.set(&p.name, v) {
            return SetParametersResult::failure(reason);
        }
    }
    SetParametersResult::success()
}

impl HirozRos {
    /// Opens a node named `node_name`: a ROS session to the router of `settings` (or a new
    /// embedded router, when asked for and none is given), the remapping rules, and every
    /// parameter of `declared` declared with its default and its value in force.
    ///
    /// Blocks while Zenoh opens the session: call it off the async executor.
    ///
    /// # Errors
    /// [`Error::Ros`] when the session or the node cannot be created.
    pub fn open(
        settings: &RosSettings,
        node_name: &str,
        remaps: &[String],
        declared: &[Declared],
        router: Option<Arc<EmbeddedRouter>>,
    ) -> Result<HirozRos> {
        let router = match router {
            Some(r) => Some(r),
            None if settings.embedded_router => Some(Arc::new(EmbeddedRouter::start(&settings.router_endpoint)?)),
            None => None,
        };
        let config =
            hiroz::config::SessionConfigBuilder::new().with_router_endpoint(&settings.router_endpoint).build_config().map_err(err)?;
        let mut b = ZContextBuilder::default().with_zenoh_config(config).with_namespace(&settings.namespace);
        if let Some(id) = settings.domain_id {
            b = b.with_domain_id(id);
        }
        b = b.with_remap_rules(remaps.iter().cloned()).map_err(err)?;
        let ctx = b.build().map_err(|e| err(format!("opening the ROS session to {}: {e}", settings.router_endpoint)))?;
        let overrides: HashMap<String, ParameterValue> =
            declared.iter().filter(|d| d.value != d.default).map(|d| (d.name.clone(), to_param(&d.value).0)).collect();
        let node = ctx
            .create_node(node_name)
            .with_type_description_service()
            .with_parameter_overrides(overrides)
            .build()
            .map_err(|e| err(format!("creating node {node_name}: {e}")))?;
        for d in declared {
            let (default, kind) = to_param(&d.default);
            if let Err(e) = node.declare_parameter(&d.name, default, ParameterDescriptor::new(d.name.clone(), kind)) {
                tracing::warn!(parameter = %d.name, error = %e, "could not declare the parameter");
            }
        }
        let ros = HirozRos { node, faults: Arc::new(InputFaults::default()), _ctx: ctx, _router: router };
        ros.on_parameter_set(refuse_all());
        Ok(ros)
    }

    /// The node.
    pub fn node(&self) -> &ZNode {
        &self.node
    }

    fn publisher<T>(&self, topic: &str) -> Result<ZPub<T, T::Serdes>>
    where
        T: ZMessage + hiroz::MessageTypeInfo + hiroz::WithTypeInfo,
    {
        self.node.create_pub::<T>(topic).build().map_err(|e| err(format!("publisher on {topic}: {e}")))
    }

    /// Subscribes to input topic `topic` with `T`'s CDR decoder, calling `cb` with each message
    /// that decodes and counting those that do not; and watches the topic's other types.
    fn subscribe_input<T, F>(&self, topic: &str, q: Qos, cb: F) -> Result<Subscription>
    where
        T: ZMessage + hiroz::MessageTypeInfo + hiroz::WithTypeInfo,
        T::Serdes: for<'a> ZDeserializer<Input<'a> = &'a [u8], Output = T> + 'static,
        F: Fn(T) + Send + Sync + 'static,
    {
        let (faults, name) = (self.faults.clone(), topic.to_string());
        let sub = self
            .node
            .create_sub::<T>(topic)
            .with_qos(qos(q))
            .with_serdes::<Checked<T::Serdes>>()
            .build_with_callback(move |m: std::result::Result<T, String>| match m {
                Ok(m) => cb(m),
                Err(error) => faults.record(&name, &InputFault::Undecodable { error }),
            })
            .map_err(|e| err(format!("subscriber on {topic}: {e}")))?;
        let key = self.node.keyexpr_format().topic_key_expr(&sub.entity).map_err(|e| err(format!("key of {topic}: {e}")))?;
        let watch = watch_types(self.node.session(), topic, key.as_str(), self.faults.clone())?;
        Ok(Subscription::new((sub, watch)))
    }
}

/// A CDR decoder that never fails: it hands the decoding error to the callback, so the input
/// subscriptions count undecodable payloads (hiroz's callback subscriber only logs them).
struct Checked<S>(PhantomData<fn() -> S>);

impl<S> ZDeserializer for Checked<S>
where
    S: for<'a> ZDeserializer<Input<'a> = &'a [u8]>,
{
    type Input<'a> = &'a [u8];
    type Output = std::result::Result<S::Output, String>;
    type Error = std::convert::Infallible;

    fn deserialize(input: &[u8]) -> std::result::Result<Self::Output, Self::Error> {
        Ok(S::deserialize(input).map_err(|e| e.to_string()))
    }
}

/// The type part of an rmw_zenoh data key `<domain>/<topic>/<type name>/<type hash>` below
/// `prefix` (`<domain>/<topic>`): `Some((type name, type hash))`, or `None` for a key of another
/// topic (a deeper one, or the `_buf_cpu` group key).
fn key_type<'k>(key: &'k str, prefix: &str) -> Option<(&'k str, &'k str)> {
    let rest = key.strip_prefix(prefix)?.strip_prefix('/')?;
    let (type_name, type_hash) = rest.split_once('/')?;
    (!type_hash.contains('/')).then_some((type_name, type_hash))
}

/// Declares a raw Zenoh subscriber on `<domain>/<topic>/*/*`, the data keys of every type on the
/// topic whose typed subscription has the key `expected`, and counts the samples of another type
/// name or hash in `faults`. Samples on `expected` itself are left to the typed subscription.
/// The subscriber declares no liveliness token, so it is not in the ROS graph.
fn watch_types(session: &zenoh::Session, topic: &str, expected: &str, faults: Arc<InputFaults>) -> Result<zenoh::pubsub::Subscriber<()>> {
    let mut parts = expected.rsplitn(3, '/');
    let (Some(hash), Some(type_name), Some(prefix)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(err(format!("the key {expected} of {topic} has no type part")));
    };
    let (want, prefix, name) = ((type_name.to_string(), hash.to_string()), prefix.to_string(), topic.to_string());
    session
        .declare_subscriber(format!("{prefix}/*/*"))
        .callback(move |s: zenoh::sample::Sample| {
            if let Some((type_name, type_hash)) = key_type(s.key_expr().as_str(), &prefix)
                && (type_name, type_hash) != (want.0.as_str(), want.1.as_str())
            {
                faults.record(&name, &InputFault::WrongType { type_name: type_name.into(), type_hash: type_hash.into() });
            }
        })
        .wait()
        .map_err(|e| err(format!("type watch on {topic}: {e}")))
}

fn qos(q: Qos) -> QosProfile {
    match q {
        Qos::Default => QosProfile::default(),
        Qos::SensorData => QosProfile {
            reliability: QosReliability::BestEffort,
            history: QosHistory::KeepLast(NonZeroUsize::MIN.saturating_add(4)),
            ..Default::default()
        },
    }
}

/// A typed publisher, with the node's view of the ROS graph to count its topic's subscriptions.
struct HPub<T: ZMessage>(ZPub<T, T::Serdes>, Arc<hiroz::graph::Graph>);

impl<T> Publisher<T> for HPub<T>
where
    T: ZMessage,
    T::Serdes: for<'a> hiroz::msg::ZSerializer<Input<'a> = &'a T> + Send + Sync,
{
    fn publish(&self, msg: &T) -> Result<()> {
        self.0.publish(msg).map_err(|e| err(format!("publish: {e}")))
    }

    /// The subscriptions on the publisher's topic (its fully qualified name) in the node's graph,
    /// which follows the liveliness tokens every rmw_zenoh and hiroz subscription declares: a
    /// lookup in a map under a lock, no network traffic. A subscriber is seen once its token
    /// arrives (milliseconds on one router) and forgotten when it leaves.
    fn subscribers(&self) -> Option<usize> {
        Some(self.1.count(hiroz::entity::EndpointKind::Subscription, &self.0.entity.topic))
    }
}

struct DiagPub(ZPub<DiagnosticArray, <DiagnosticArray as ZMessage>::Serdes>);

impl Publisher<Diagnostics> for DiagPub {
    fn publish(&self, d: &Diagnostics) -> Result<()> {
        let msg = DiagnosticArray {
            header: RosHeader { stamp: to_time(d.stamp), frame_id: String::new() },
            status: vec![DiagnosticStatus {
                level: d.level as u8,
                name: d.name.clone(),
                message: d.message.clone(),
                hardware_id: d.hardware_id.clone(),
                values: d.values.iter().map(|(k, v)| KeyValue { key: k.clone(), value: v.clone() }).collect(),
            }],
        };
        self.0.publish(&msg).map_err(|e| err(format!("publish diagnostics: {e}")))
    }
}

/// A received byte array of one contiguous slice: read in place, no copy.
struct OneSlice(hiroz::ZBuf);

impl AsRef<[u8]> for OneSlice {
    fn as_ref(&self) -> &[u8] {
        self.0.0.zslices().next().map_or(&[], |s| s.as_slice())
    }
}

/// The payload of a `uint8[]` field: in place when contiguous (the usual case), else copied.
fn payload(z: hiroz::ZBuf) -> super::Payload {
    if z.0.zslices().nth(1).is_none() {
        Box::new(OneSlice(z))
    } else {
        Box::new(z.0.zslices().flat_map(|s| s.as_slice().iter().copied()).collect::<Vec<u8>>())
    }
}

fn header(h: &RosHeader) -> Header {
    Header { stamp: from_time(&h.stamp), frame_id: h.frame_id.clone() }
}

/// A decoded `sensor_msgs/Image` as the node's input (public for the fuzz targets, which feed
/// it CDR bytes as the subscription would).
pub fn image_in(m: Image) -> ImageIn {
    ImageIn {
        header: header(&m.header),
        height: m.height,
        width: m.width,
        encoding: m.encoding,
        is_bigendian: m.is_bigendian != 0,
        step: m.step,
        data: payload(m.data),
    }
}

/// A decoded `sensor_msgs/CompressedImage` as the node's input (see [`image_in`]).
pub fn compressed_in(m: CompressedImage) -> CompressedIn {
    CompressedIn { header: header(&m.header), format: m.format, data: payload(m.data) }
}

/// A decoded `sensor_msgs/PointCloud2` as the node's input (see [`image_in`]).
pub fn cloud_in(m: PointCloud2) -> CloudIn {
    CloudIn {
        header: header(&m.header),
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
        data: payload(m.data),
        is_dense: m.is_dense,
    }
}

impl Ros for HirozRos {
    fn name(&self) -> &'static str {
        "hiroz"
    }

    fn inference_publisher(&self, topic: &str) -> Result<Pub<InferenceResult>> {
        Ok(Box::new(HPub(self.publisher::<InferenceResult>(topic)?, self.node.graph().clone())))
    }

    fn bandwidth_publisher(&self, topic: &str) -> Result<Pub<Bandwidth>> {
        Ok(Box::new(HPub(self.publisher::<Bandwidth>(topic)?, self.node.graph().clone())))
    }

    fn energy_publisher(&self, topic: &str) -> Result<Pub<InferenceEnergy>> {
        Ok(Box::new(HPub(self.publisher::<InferenceEnergy>(topic)?, self.node.graph().clone())))
    }

    fn power_publisher(&self, topic: &str) -> Result<Pub<PowerSample>> {
        Ok(Box::new(HPub(self.publisher::<PowerSample>(topic)?, self.node.graph().clone())))
    }

    fn detections_publisher(&self, topic: &str) -> Result<Pub<Detection2DArray>> {
        Ok(Box::new(HPub(self.publisher::<Detection2DArray>(topic)?, self.node.graph().clone())))
    }

    fn keypoints_publisher(&self, topic: &str) -> Result<Pub<KeypointsArray>> {
        Ok(Box::new(HPub(self.publisher::<KeypointsArray>(topic)?, self.node.graph().clone())))
    }

    fn cloud_publisher(&self, topic: &str) -> Result<Pub<PointCloud2>> {
        Ok(Box::new(HPub(self.publisher::<PointCloud2>(topic)?, self.node.graph().clone())))
    }

    fn image_publisher(&self, topic: &str) -> Result<Pub<Image>> {
        Ok(Box::new(HPub(self.publisher::<Image>(topic)?, self.node.graph().clone())))
    }

    fn compressed_image_publisher(&self, topic: &str) -> Result<Pub<CompressedImage>> {
        Ok(Box::new(HPub(self.publisher::<CompressedImage>(topic)?, self.node.graph().clone())))
    }

    fn diagnostics_publisher(&self, topic: &str) -> Result<Pub<Diagnostics>> {
        Ok(Box::new(DiagPub(self.publisher::<DiagnosticArray>(topic)?)))
    }

    fn subscribe_images(&self, topic: &str, q: Qos, cb: Callback<ImageIn>) -> Result<Subscription> {
        self.subscribe_input(topic, q, move |m: Image| cb(image_in(m)))
    }

    fn subscribe_compressed(&self, topic: &str, q: Qos, cb: Callback<CompressedIn>) -> Result<Subscription> {
        self.subscribe_input(topic, q, move |m: CompressedImage| cb(compressed_in(m)))
    }

    fn subscribe_clouds(&self, topic: &str, q: Qos, cb: Callback<CloudIn>) -> Result<Subscription> {
        self.subscribe_input(topic, q, move |m: PointCloud2| cb(cloud_in(m)))
    }

    /// Counted by the input subscriptions: a raw Zenoh subscriber on each input topic's keys of
    /// every type (rmw_zenoh puts the type name and hash in the key, so the typed subscription
    /// never sees another type), and a decoder that reports its errors.
    fn input_faults(&self) -> InputFaultCounts {
        self.faults.counts()
    }

    fn subscribe_inference(&self, topic: &str, cb: Callback<InferenceResult>) -> Result<Subscription> {
        let sub = self
            .node
            .create_sub::<InferenceResult>(topic)
            .build_with_callback(move |m: InferenceResult| cb(m))
            .map_err(|e| err(format!("subscriber on {topic}: {e}")))?;
        Ok(Subscription::new(sub))
    }

    /// None: this backend does not serve the lifecycle services. hiroz's own lifecycle node
    /// answers `change_state` without running the node's work (it only moves its state), and
    /// its callbacks block Zenoh's thread, so a managed `lop_robot` needs the r2r backend; here
    /// the node activates itself and runs active until stopped (`lop_robot` logs this at start).
    fn serve_lifecycle(&self, _lifecycle: Arc<crate::lifecycle::Lifecycle>) -> Result<Option<Subscription>> {
        Ok(None)
    }

    fn subscribe_bandwidth(&self, topic: &str, cb: Callback<Bandwidth>) -> Result<Subscription> {
        let sub = self
            .node
            .create_sub::<Bandwidth>(topic)
            .build_with_callback(move |m: Bandwidth| cb(m))
            .map_err(|e| err(format!("subscriber on {topic}: {e}")))?;
        Ok(Subscription::new(sub))
    }

    fn on_parameter_set(&self, policy: OnSet) {
        self.node.on_set_parameters(move |params| decide(&policy, params));
    }
}

#[cfg(test)]
mod tests {
    use super::{ParameterValue, decide, key_type};
    use crate::live::{DropPolicy, LiveSettings, OnSet};
    use hiroz::parameter::Parameter;
    use std::sync::Arc;

    #[test]
    fn a_batch_of_parameter_changes_is_checked_whole_before_any_applies() {
        let live = Arc::new(LiveSettings::new(true, "lop", DropPolicy::Newest));
        let policy: OnSet = live.clone();
        let good = Parameter::new("enabled", ParameterValue::Bool(false));
        let bad = Parameter::new("method", ParameterValue::String("fastest".into()));
        let r = decide(&policy, &[good.clone(), bad]);
        assert!(!r.successful && r.reason.contains("'fastest'"), "{r:?}");
        assert!(live.enabled(), "nothing applies when one change is refused");
        let r = decide(&policy, &[Parameter::new("enabled", ParameterValue::IntegerArray(vec![1]))]);
        assert!(!r.successful && r.reason.contains("unsupported parameter type"), "{r:?}");
        let r = decide(&policy, &[good, Parameter::new("method", ParameterValue::String("robot-only".into()))]);
        assert!(r.successful, "{r:?}");
        assert!(!live.enabled());
        assert_eq!(live.method(), "robot-only");
    }

    #[test]
    fn key_type_reads_the_type_part_of_this_topic_only() {
        let p = "0/camera/image_raw";
        assert_eq!(
            key_type("0/camera/image_raw/std_msgs::msg::dds_::String_/RIHS01_ab", p),
            Some(("std_msgs::msg::dds_::String_", "RIHS01_ab"))
        );
        assert_eq!(key_type("0/camera/image_raw/compressed/T_/RIHS01_ab", p), None);
        assert_eq!(key_type("0/camera/image_raw/T_/RIHS01_ab/_buf_cpu", p), None);
        assert_eq!(key_type("0/camera/image_rawx/T_/H", p), None);
        assert_eq!(key_type("0/camera/image_raw/T_", p), None);
    }
}

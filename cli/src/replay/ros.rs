//! The replay's ROS side: one hiroz node (rmw_zenoh's wire, as `lop_robot`'s default backend
//! speaks it) on the robot's Zenoh router. It publishes the recorded messages as they were
//! recorded (their CDR bytes, unchanged, under their own type), hears `lop_robot`'s results, and
//! reads the ROS graph to know whether anyone takes the frames.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use hiroz::Builder as _;
use hiroz::context::{ZContext, ZContextBuilder};
use hiroz::entity::EndpointKind;
use hiroz::msg::ZMessage;
use hiroz::node::ZNode;
use hiroz::pubsub::{ZPub, ZSub};
use hiroz_msgs::sensor_msgs::{CompressedImage, Image};
use lop_msgs::ros::msg::InferenceResult;

use super::ReplayError;
use crate::bag::{COMPRESSED_IMAGE, IMAGE};

/// A result as it arrived.
pub type Heard = (Instant, InferenceResult);

/// How often the graph is read while waiting for an endpoint.
const GRAPH_POLL: Duration = Duration::from_millis(20);

/// A ROS error naming what was being done.
fn ros(what: impl std::fmt::Display, e: impl std::fmt::Display) -> ReplayError {
    ReplayError::Ros(format!("{what}: {e}"))
}

/// The replay's node and its context (the Zenoh session to the router).
pub struct Peer {
    node: ZNode,
    _ctx: ZContext,
}

/// The publisher of the frames, of the recorded type.
pub enum FramePub {
    /// `sensor_msgs/msg/Image`.
    Raw(ZPub<Image, <Image as ZMessage>::Serdes>),
    /// `sensor_msgs/msg/CompressedImage`.
    Compressed(ZPub<CompressedImage, <CompressedImage as ZMessage>::Serdes>),
}

impl FramePub {
    /// Publishes one recorded message: its CDR bytes (encapsulation header included) as they are.
    ///
    /// # Errors
    /// [`ReplayError::Ros`] when Zenoh refuses the put.
    pub fn publish(&self, cdr: Vec<u8>) -> Result<(), ReplayError> {
        match self {
            FramePub::Raw(p) => p.publish_serialized(cdr),
            FramePub::Compressed(p) => p.publish_serialized(cdr),
        }
        .map_err(|e| ros("publishing a frame", e))
    }
}

/// The results' subscription: kept alive while the results are read.
pub type ResultSub = ZSub<InferenceResult, (), <InferenceResult as ZMessage>::Serdes>;

impl Peer {
    /// Opens node `lop_replay` on the router at `router` in ROS domain `domain` (`None`:
    /// `ROS_DOMAIN_ID`, else 0, as every ROS 2 node). Blocks while Zenoh opens the session.
    ///
    /// # Errors
    /// [`ReplayError::Ros`] when the router cannot be reached or the node not created.
    pub fn open(router: &str, domain: Option<usize>) -> Result<Peer, ReplayError> {
        let config = hiroz::config::SessionConfigBuilder::new()
            .with_router_endpoint(router)
            .build_config()
            .map_err(|e| ros(format!("the router endpoint '{router}'"), e))?;
        let mut b = ZContextBuilder::default().with_zenoh_config(config);
        if let Some(id) = domain {
            b = b.with_domain_id(id);
        }
        let what = format!("connecting to the ROS router at {router} (rmw_zenohd, or lop_robot's embedded_router)");
        let ctx = b.build().map_err(|e| ros(&what, e))?;
        let node = ctx.create_node("lop_replay").build().map_err(|e| ros("creating node lop_replay", e))?;
        Ok(Peer { node, _ctx: ctx })
    }

    /// A publisher of `msg_type` ([`IMAGE`] or [`COMPRESSED_IMAGE`]) on `topic`.
    ///
    /// # Errors
    /// [`ReplayError::Ros`] for a topic hiroz refuses; [`ReplayError::Ros`] too for another type
    /// (the bag reader hands on only those two).
    pub fn frames(&self, topic: &str, msg_type: &str) -> Result<FramePub, ReplayError> {
        let what = format!("a publisher on {topic}");
        match msg_type {
            IMAGE => self.node.create_pub::<Image>(topic).build().map(FramePub::Raw).map_err(|e| ros(&what, e)),
            COMPRESSED_IMAGE => self.node.create_pub::<CompressedImage>(topic).build().map(FramePub::Compressed).map_err(|e| ros(&what, e)),
            other => Err(ros(&what, format!("{other} is not a camera frame"))),
        }
    }

    /// Subscribes to `lop_robot`'s results on `topic`; each is handed on with when it came.
    ///
    /// # Errors
    /// [`ReplayError::Ros`] for a topic hiroz refuses.
    pub fn results(&self, topic: &str) -> Result<(ResultSub, mpsc::Receiver<Heard>), ReplayError> {
        let (tx, rx) = mpsc::channel();
        let sub = self
            .node
            .create_sub::<InferenceResult>(topic)
            .build_with_callback(move |r| drop(tx.send((Instant::now(), r))))
            .map_err(|e| ros(format!("a subscription to {topic}"), e))?;
        Ok((sub, rx))
    }

    /// How many `kind` endpoints of other nodes on `topic` the ROS graph shows.
    pub fn count(&self, kind: EndpointKind, topic: &str) -> usize {
        self.node.graph().count(kind, topic)
    }

    /// Waits up to `limit` for a `kind` endpoint on `topic` in the ROS graph; whether one came.
    /// Bounded in time (the graph is read every 20 ms).
    pub fn wait_for(&self, kind: EndpointKind, topic: &str, limit: Duration) -> bool {
        let t0 = Instant::now();
        loop {
            if self.count(kind, topic) > 0 {
                return true;
            }
            if t0.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(GRAPH_POLL);
        }
    }
}

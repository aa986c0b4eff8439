//! The node's inputs ([`Sensor`]): one camera or LiDAR configured the single-input way (`input`,
//! `topics.image` or `topics.cloud`, `image.transport`, `image.fit`), or several cameras on the
//! one model (`cameras: [NAME, ...]`, each with `camera.NAME.*`).
//!
//! Each named camera has its own topic, transport and fit, publishes its task's messages and
//! debug image under its namespace (`/NAME` unless told otherwise), names itself in every
//! message's `header.frame_id`, reports on /diagnostics under its name, and talks to the edge as
//! a session of its own (with the one edge, or in fleet mode a fleet client of its own). Those
//! sessions use the ids of a fleet's lanes ([`lop_msgs::lane_robot_id`]: the robot's id for the
//! first camera, `<robot_id>.lane<k>` for camera `k`), which the edge's access control already
//! grants with the robot's own credentials; so several cameras take `edge.lanes: 1`.

use super::input::{ImageSettings, InputKind, Transport, fit_name, parse_fit};
use super::values::invalid;
use crate::convert::Fit;
use crate::error::Result;
use crate::params::Params;

/// One input of `lop_robot`: where its frames arrive, how they fit the model, and how its
/// results are named.
#[derive(Debug, Clone, PartialEq)]
pub struct Sensor {
    /// The camera's name (`cameras`); empty for the input configured the single-input way.
    pub name: String,
    /// The image (or point cloud) topic; compressed frames arrive on `<topic>/compressed`.
    pub topic: String,
    /// Raw or compressed frames.
    pub transport: Transport,
    /// How frames fit the model (`None`: `auto`, letterbox for dense outputs).
    pub fit: Option<Fit>,
    /// Prefix of its output topics (its task's messages and debug image); empty: none.
    pub namespace: String,
    /// The `header.frame_id` of its results (empty: the frame's own).
    pub frame_id: String,
    /// Its robot id at the edge: a session of its own.
    pub edge_id: String,
}

impl Sensor {
    /// The topic its frames arrive on (`<topic>/compressed` for compressed frames).
    pub fn input_topic(&self) -> String {
        self.transport.topic(&self.topic)
    }

    /// Output topic `base` under its namespace (`base` itself without one).
    pub fn output_topic(&self, base: &str) -> String {
        if self.namespace.is_empty() {
            return base.to_string();
        }
        format!("{}/{}", self.namespace.trim_end_matches('/'), base.trim_start_matches('/'))
    }

    /// The `header.frame_id` of a result for a frame whose own is `own`: the configured one,
    /// else the frame's own, else (a named camera's frame without one) the camera's name.
    pub fn frame_id_for(&self, own: &str) -> String {
        match (self.frame_id.is_empty(), own.is_empty()) {
            (false, _) => self.frame_id.clone(),
            (true, false) => own.to_string(),
            (true, true) => self.name.clone(),
        }
    }

    /// The label of its /diagnostics status and logs: `lop_robot: inference`, with the
    /// camera's name in parentheses when it has one.
    pub fn status_name(&self) -> String {
        if self.name.is_empty() { "lop_robot: inference".to_string() } else { format!("lop_robot: inference ({})", self.name) }
    }
}

/// What the cameras' parameters default to and are checked against: the single-input
/// settings.
pub(super) struct Defaults<'a> {
    pub(super) input: InputKind,
    pub(super) image: &'a ImageSettings,
    /// `topics.image` and `topics.cloud`.
    pub(super) topics: (&'a str, &'a str),
    pub(super) robot_id: &'a str,
    /// The fleet's lanes (`edge.lanes`, 1 outside fleet mode): their session ids are the
    /// cameras', so several lanes take one input only.
    pub(super) lanes: usize,
}

/// Reads `cameras` and each camera's `camera.NAME.*`: the inputs of the node.
///
/// # Errors
/// [`Error::Config`](crate::Error::Config) for a bad name, a name or an input topic given twice,
/// two cameras publishing under one namespace, LiDAR input with cameras, several cameras with
/// several fleet lanes, more cameras than sessions the robot's id allows, a camera's own fit where the
/// model fits frames itself (`image.camera_size`).
pub(super) fn read_inputs(p: &mut Params, d: &Defaults<'_>) -> Result<Vec<Sensor>> {
    let names = p.strings("cameras", &[])?;
    if names.is_empty() {
        let (topic, transport) = match d.input {
            InputKind::Camera => (d.topics.0.to_string(), d.image.transport),
            InputKind::Lidar => (d.topics.1.to_string(), Transport::Raw),
        };
        let (namespace, frame_id, edge_id) = (String::new(), String::new(), d.robot_id.to_string());
        return Ok(vec![Sensor { name: String::new(), topic, transport, fit: d.image.fit, namespace, frame_id, edge_id }]);
    }
    if d.input != InputKind::Camera {
        return Err(invalid("cameras: input is lidar; cameras take input: camera".into()));
    }
    if d.lanes > 1 && names.len() > 1 {
        return Err(invalid(format!(
            "cameras: {} cameras with edge.lanes {}: each camera is a session of its own, under the ids the lanes would take ({}.lane<k>); with several cameras each camera is one lane (edge.lanes: 1)",
            names.len(),
            d.lanes,
            d.robot_id
        )));
    }
    let mut cameras: Vec<Sensor> = Vec::with_capacity(names.len());
    for (k, name) in names.iter().enumerate() {
        let camera = read_camera(p, d, name, k)?;
        if let Some(other) = cameras.iter().find(|c| c.name == camera.name) {
            return Err(invalid(format!("cameras: '{}' is named twice", other.name)));
        }
        if let Some(other) = cameras.iter().find(|c| c.input_topic() == camera.input_topic()) {
            return Err(invalid(format!(
                "cameras: '{}' and '{}' both subscribe {}: each camera needs a topic of its own (camera.NAME.topic)",
                other.name,
                camera.name,
                camera.input_topic()
            )));
        }
        if let Some(other) = cameras.iter().find(|c| c.namespace == camera.namespace) {
            return Err(invalid(format!(
                "cameras: '{}' and '{}' both publish under namespace '{}' (camera.NAME.namespace)",
                other.name, camera.name, camera.namespace
            )));
        }
        cameras.push(camera);
    }
    Ok(cameras)
}

/// Reads camera `name`'s parameters (the `k`-th camera).
fn read_camera(p: &mut Params, d: &Defaults<'_>, name: &str, k: usize) -> Result<Sensor> {
    lop_msgs::validate_id(name).map_err(|e| invalid(format!("cameras: '{name}': {e}")))?;
    let key = |leaf: &str| format!("camera.{name}.{leaf}");
    let topic = p.string(&key("topic"), &format!("/{name}/image_raw"));
    let transport = Transport::parse(&key("transport"), &p.string(&key("transport"), d.image.transport.name()))?;
    let fit_word = p.string(&key("fit"), fit_name(d.image.fit));
    let fit = parse_fit(&key("fit"), &fit_word, d.image.pad)?;
    if d.image.camera_size.is_some() && fit != d.image.fit {
        return Err(invalid(format!(
            "{}: {fit_word} with image.camera_size: the model fits every camera's frames itself, at image.fit ({})",
            key("fit"),
            fit_name(d.image.fit)
        )));
    }
    let namespace = p.string(&key("namespace"), &format!("/{name}"));
    if namespace.trim_matches('/').is_empty() {
        return Err(invalid(format!("{}: a camera's outputs need a namespace of their own", key("namespace"))));
    }
    let frame_id = p.string(&key("frame_id"), "");
    let edge_id = lop_msgs::lane_robot_id(d.robot_id, k)
        .map_err(|e| invalid(format!("cameras: camera {} ('{name}') has no session id at the edge: {e}", k + 1)))?;
    Ok(Sensor { name: name.to_string(), topic, transport, fit, namespace, frame_id, edge_id })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::config::RobotConfig;
    use crate::params::{Params, RosArgs};

    fn read(args: &[&str]) -> crate::error::Result<RobotConfig> {
        let args: Vec<String> = args.iter().flat_map(|a| ["-p".to_string(), a.to_string()]).collect();
        RobotConfig::from_params(&mut Params::load("lop_robot", None, &RosArgs::parse(&args).unwrap()).unwrap())
    }

    /// No `cameras`: one input, the old parameters', unnamed, the robot's own session.
    #[test]
    fn without_cameras_the_single_input_parameters_make_one() {
        let cfg = read(&["topics.image:=/cam/img", "image.transport:=compressed", "image.fit:=resize"]).unwrap();
        let [one] = &cfg.inputs[..] else { panic!("{:?}", cfg.inputs) };
        assert_eq!((one.name.as_str(), one.input_topic(), one.edge_id.as_str()), ("", "/cam/img/compressed".into(), "robot"));
        assert_eq!((one.fit, one.output_topic("/lop/detections")), (Some(crate::convert::Fit::Resize), "/lop/detections".into()));
        assert_eq!((one.frame_id_for("optical"), one.frame_id_for("")), ("optical".into(), String::new()));
    }

    /// Two cameras: their own topics, transports and fits, outputs under their namespaces,
    /// the lanes' session ids, their names in frame ids the frame does not give.
    #[test]
    fn two_cameras_each_with_their_own_settings() {
        let cfg = read(&[
            "cameras:=[front, rear]",
            "camera.rear.transport:=compressed",
            "camera.rear.fit:=letterbox",
            "camera.rear.frame_id:=rear_optical",
            "robot_id:=r1",
        ])
        .unwrap();
        let [front, rear] = &cfg.inputs[..] else { panic!("{:?}", cfg.inputs) };
        assert_eq!((front.input_topic(), rear.input_topic()), ("/front/image_raw".into(), "/rear/image_raw/compressed".into()));
        assert_eq!((front.fit, rear.fit), (None, Some(crate::convert::Fit::Letterbox { pad: 0 })));
        assert_eq!((front.edge_id.as_str(), rear.edge_id.as_str()), ("r1", "r1.lane1"));
        assert_eq!(front.output_topic("/lop/debug_image"), "/front/lop/debug_image");
        assert_eq!(
            (front.frame_id_for(""), front.frame_id_for("f_optical"), rear.frame_id_for("x")),
            ("front".into(), "f_optical".into(), "rear_optical".into())
        );
    }

    /// Each mistake is one error at start that names it.
    #[test]
    fn camera_lists_that_cannot_work_are_refused_by_name() {
        for (args, says) in [
            (&["cameras:=[front, rear]", "camera.rear.topic:=/front/image_raw"][..], "both subscribe /front/image_raw"),
            (&["cameras:=[front, front]"], "named twice"),
            (&["cameras:=[front, rear]", "camera.rear.namespace:=/front"], "namespace"),
            (&["cameras:=[a/b]"], "cameras: 'a/b'"),
            (&["cameras:=[front]", "input:=lidar"], "lidar"),
            (&["cameras:=[front, rear]", "edge.mode:=fleet", "edge.lanes:=2"], "edge.lanes 2"),
            (&["cameras:=[a, b, c, d, e, f, g, h, i]"], "session id"),
            (&["cameras:=[front]", "camera.front.fit:=stretch"], "camera.front.fit"),
            (&["cameras:=[front]", "image.camera_size:=640x480", "camera.front.fit:=resize"], "image.camera_size"),
        ] {
            let err = read(args).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains(says), "{args:?}: {err:?}");
        }
        // Several cameras in fleet mode, each a fleet client of its own (one lane each).
        let fleet = read(&["cameras:=[front, rear]", "edge.mode:=fleet", "robot_id:=r1"]).unwrap();
        let ids: Vec<&str> = fleet.inputs.iter().map(|c| c.edge_id.as_str()).collect();
        assert_eq!(ids, ["r1", "r1.lane1"]);
        // One topic raw and compressed is two topics.
        assert!(read(&["cameras:=[a, b]", "camera.a.topic:=/c", "camera.b.topic:=/c", "camera.b.transport:=compressed"]).is_ok());
    }
}

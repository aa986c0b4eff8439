//! Typed configuration of the three nodes, read from [`Params`](crate::params::Params) (a params
//! file in the ROS 2 shape plus `--ros-args -p` overrides). `config/robot.yaml` documents every
//! parameter with its default; a test checks that it names exactly the parameters read here.
//!
//! # Layout
//!
//! - `robot`: [`RobotConfig`] (`lop_robot`), read one section at a time, with where its profiles
//!   come from ([`ProfileSource`]) and its topics ([`RobotTopics`]).
//! - `input`: how the robot's input arrives and becomes the model's: [`InputKind`],
//!   [`ImageSettings`] and [`Transport`], [`CloudGrid`].
//! - `session`: the ROS session ([`RosSettings`]) and the edge's ([`EdgeSettings`]), shared by the
//!   nodes.
//! - `cameras`: the node's inputs ([`Sensor`]): the one camera or LiDAR, or several cameras on
//!   one model (`cameras`, `camera.NAME.*`), each with its topics, fit, outputs and edge session.
//! - `debug_image`: [`DebugImageSettings`], the annotated debug image's (`debug_image.*`).
//! - `bandwidth`: [`BandwidthConfig`] (`lop_bandwidth`); `power`: [`PowerConfig`] (`lop_power`).
//! - `values`: readers of single values (milliseconds, ranges, positive numbers, the device,
//!   hysteresis) and of the `table:` section ([`read_table`]), with the error they give.

mod bandwidth;
mod cameras;
mod debug_image;
mod input;
mod power;
mod robot;
mod session;
mod values;

pub use bandwidth::BandwidthConfig;
pub use cameras::Sensor;
pub use debug_image::DebugImageSettings;
pub use input::{CloudGrid, ImageSettings, InputKind, MIN_DEFAULT_MAX_PIXELS, Transport};
pub use power::PowerConfig;
pub use robot::{ProfileSource, RobotConfig, RobotTopics};
pub use session::{EdgeSettings, MAX_EDGE_MESSAGE_BYTES, RosSettings};
pub use values::read_table;

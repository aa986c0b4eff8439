//! The overlapped executor (DESIGN.md sections 4-6): each side runs its chunks of a
//! [`lop::sim::Schedule`] on a dedicated thread, in the simulator's wavefront order, sending
//! every band the moment the chunk that computes it is done and storing received bands as they
//! arrive; a robot cut off from the edge finishes alone ([`finish_locally`]). An edge runs
//! concurrent inferences of the same schedule as one batch ([`run_batch`]).
//!
//! This module is synchronous: libtorch work never runs on the async executor. The async side
//! (the robot client, the edge service) decodes frames, matches them to transfers
//! ([`GraphMeta::expectations`]) and feeds [`Incoming`] messages through a channel; encoded
//! bands come back through the `send` callback.

mod batch;
pub mod camera;
pub mod coded;
mod fallback;
mod received;
mod side;
pub mod stretch;
pub mod wire;
pub mod worker;

pub use batch::{BatchConfig, Member, run_batch};
pub use camera::{CameraHeaders, CameraJpeg};
pub use fallback::{finish_dilated, finish_locally, outputs};
pub use received::ReceivedBand;
pub use side::{Incoming, SideConfig, SideStats, Stopped, run_side, run_side_racing};
pub use stretch::{Pace, Stretch};
pub use wire::{Expected, GraphMeta, InputWire, encode_band};
pub use worker::Worker;

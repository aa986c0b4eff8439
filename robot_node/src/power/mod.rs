//! The `lop_power` node's logic over the [`lop_power`] crate: the energy of each inference, its CSV log,
//! the reduced `/lop/power` stream and the power model's state feed.
//!
//! - [`EnergyAccountant`] keeps readings in a bounded [`Ring`](lop_power::Ring), filled by its own sampler thread
//!   ([`EnergyAccountant::sampled`]) or by the caller ([`EnergyAccountant::fed`] +
//!   [`EnergyAccountant::push`]), and answers [`EnergyAccountant::energy`] for wall-clock
//!   intervals with [`lop_power::energy`] (trapezoid or counter; no integration here).
//!   Wall-clock times (the ROS stamps) map to the monotonic clock of the readings through one
//!   anchor taken at construction: a wall-clock step after that (NTP) shifts the mapping by the
//!   step, so long-running nodes on a stepping clock should re-create the accountant.
//! - [`CsvLog`] writes one row per inference (see [`CsvLog::header`]), optionally one row per
//!   reading to a second file; every row is written with one `write` call and flushed, so a
//!   crash of the node loses nothing already reported (a power cut may lose what the OS had not
//!   yet written to disk).
//! - [`RateReducer`] averages readings down to at most a given rate for `/lop/power`.
//! - [`ModelStates`] turns an inference's timings into computing / transmitting / idle
//!   intervals, for a live [`ModelSource`](lop_power::ModelSource) ([`ModelStates::apply`]) or, after the fact, as exact
//!   modelled readings for an accountant ([`ModelFeed`]).
//!
//! One file each: `error.rs` ([`PowerNodeError`]), `report.rs` ([`EnergyReport`]), `accountant.rs`,
//! `csv_log.rs`, `reducer.rs`, and `model.rs` ([`ModelStates`], [`ModelFeed`]).

mod accountant;
mod csv_log;
mod error;
mod model;
mod reducer;
mod report;

pub use accountant::EnergyAccountant;
pub use csv_log::CsvLog;
pub use error::PowerNodeError;
pub use model::{MODEL_RAIL, ModelFeed, ModelStates};
pub use reducer::{RateReducer, ReducedSample};
pub use report::{EnergyReport, unix_s};

#[cfg(test)]
mod tests;

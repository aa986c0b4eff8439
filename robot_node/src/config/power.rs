//! The configuration of `lop_power` ([`PowerConfig`]): the power source and its rates, the
//! topics, the CSV log and the power model.

use std::path::PathBuf;

use super::session::RosSettings;
use super::values::{invalid, within};
use crate::error::Result;
use crate::params::Params;

/// The most power readings `lop_power` keeps (`rate_hz` x `window_s`), a few tens of MiB.
pub const MAX_READINGS: f64 = 1_000_000.0;

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
    /// [`Error::Config`](crate::Error::Config) naming the bad parameter.
    pub fn from_params(p: &mut Params) -> Result<PowerConfig> {
        let d = lop_power::model::PowerModel::default();
        let model = lop_power::model::PowerModel {
            idle_w: p.double("model.idle_w", d.idle_w)?,
            computing_w: p.double("model.computing_w", d.computing_w)?,
            transmitting_w: p.double("model.transmitting_w", d.transmitting_w)?,
        };
        model.validate().map_err(|e| invalid(format!("model: {e}")))?;
        // The readings kept for energy per inference: `rate_hz` x `window_s` of them.
        let rate_hz = within("rate_hz", p.double("rate_hz", 100.0)?, 0.01, 10_000.0)?;
        let window_s = within("window_s", p.double("window_s", 30.0)?, 0.01, 3600.0)?;
        if rate_hz * window_s > MAX_READINGS {
            return Err(invalid(format!("rate_hz x window_s must keep at most {MAX_READINGS} readings, got {rate_hz} x {window_s}")));
        }
        Ok(PowerConfig {
            ros: RosSettings::read(p)?,
            source: p.string("source", "auto"),
            root: PathBuf::from(p.string("root", "/")),
            rate_hz,
            publish_hz: within("publish_hz", p.double("publish_hz", 10.0)?, 0.01, 1000.0)?,
            inference_topic: p.string("topics.inference", "/lop/inference"),
            energy_topic: p.string("topics.energy", "/lop/energy"),
            power_topic: p.string("topics.power", "/lop/power"),
            csv: p.string("csv", ""),
            window_s,
            model,
        })
    }
}

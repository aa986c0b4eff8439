//! The configuration of `lop_bandwidth` ([`BandwidthConfig`]): its sessions, topics and robot id,
//! and the monitor (predictor, rates, probes, buckets, hysteresis).

use std::time::Duration;

use lop_runtime::bandwidth::MonitorConfig;
use lop_runtime::table_config::ScaleSetting;

use super::session::{EdgeSettings, RosSettings};
use super::values::{hysteresis, invalid, ms, positive, read_table, within};
use crate::error::Result;
use crate::params::Params;

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
    /// [`Error::Config`](crate::Error::Config) naming the bad parameter.
    pub fn from_params(p: &mut Params) -> Result<BandwidthConfig> {
        let d = MonitorConfig::default();
        let ros = RosSettings::read(p)?;
        let edge = EdgeSettings::read(p)?;
        let inference_topic = p.string("topics.inference", "/lop/inference");
        let bandwidth_topic = p.string("topics.bandwidth", "/lop/bandwidth");
        let robot_id = p.string("robot_id", "robot");
        lop_msgs::validate_robot_id(&robot_id).map_err(|e| invalid(format!("robot_id: {e}")))?;
        let rate_hz = within("rate_hz", p.double("rate_hz", 2.0)?, 0.01, 1000.0)?;
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

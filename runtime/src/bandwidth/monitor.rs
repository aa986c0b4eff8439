//! The bandwidth monitor's state machine (node `lop_bandwidth`) and the robot's bucket selector.
//!
//! [`Monitor`] turns throughput samples into a published [`Estimate`] every publish period:
//! - passive samples come from the robot's completed transfers ([`Monitor::passive`]); transfers
//!   smaller than [`MonitorConfig::min_passive_bytes`] (default 64 KiB) are ignored, because a
//!   small transfer is dominated by latency and would read as a slow link;
//! - when no sample has arrived for [`MonitorConfig::idle_threshold`], [`Monitor::probe_due`] asks
//!   for an active probe of [`MonitorConfig::probe_bytes`], at most once per
//!   [`MonitorConfig::probe_interval`]; the adapter runs it, calls [`Monitor::probe_started`], then
//!   [`Monitor::probe_result`]. A probe that measured nothing in either direction is a sample of
//!   0 Mbit/s: a link that cannot carry a probe cannot carry bands either;
//! - every sample feeds a [`Predictor`] (the harmonic mean of the last
//!   [`MonitorConfig::window`] samples by default), and [`Monitor::tick`] publishes the
//!   prediction and the bucket a [`BucketSelector`] keeps in force.
//!
//! Units: throughput in Mbit/s; buckets in the schedule table's MB/s (1 MB/s = 8 Mbit/s), where
//! bucket `b` stands for `b * bandwidth_scale` MB/s on the real link (the planner's convention).

use super::predict::{self, Predictor};
use crate::{Error, Result};
use std::fmt;
use std::time::{Duration, Instant};

/// Hysteresis of bucket switches (see [`BucketSelector`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hysteresis {
    /// How far above a higher bucket the prediction must be to switch up to it, in bucket (table
    /// MB/s) units.
    pub margin: f64,
    /// How long the prediction must stay above it.
    pub hold: Duration,
}

impl Default for Hysteresis {
    /// Half a bucket, 2 s.
    fn default() -> Self {
        Hysteresis { margin: 0.5, hold: Duration::from_secs(2) }
    }
}

/// Picks the schedule-table bucket in force from predictions, with hysteresis.
///
/// The rule: with `u = predicted_mbps / 8 / scale` (table units) and `target` the largest bucket
/// at or below `u` (the smallest bucket if `u` is below all):
/// - the first update takes `target`;
/// - when `target` is below the bucket in force, switch down at once (a plan for a faster link
///   than there is puts stalled transfers on the critical path);
/// - when some higher bucket `b` has `u >= b + margin`, an upgrade is pending; it happens once the
///   prediction has stayed so for `hold` without interruption, to the lowest such bucket seen
///   during the hold. Any update without a qualifying higher bucket cancels the pending upgrade.
#[derive(Debug, Clone)]
pub struct BucketSelector {
    buckets: Vec<f64>,
    scale: f64,
    hysteresis: Hysteresis,
    current: Option<f64>,
    /// Since when an upgrade has qualified, and the lowest qualifying bucket since then.
    pending: Option<(Instant, f64)>,
    switches: u64,
}

impl BucketSelector {
    /// A selector over `buckets` (table MB/s, any order, at least one, finite and >= 0), with
    /// `scale` real MB/s per table MB/s. Invalid values are cleaned rather than refused (see
    /// [`BucketSelector::try_new`] to refuse them): non-finite or negative buckets are dropped, an
    /// empty list becomes `[0]`, a non-positive scale becomes 1, a negative margin 0.
    pub fn new(buckets: Vec<f64>, scale: f64, hysteresis: Hysteresis) -> BucketSelector {
        let mut b: Vec<f64> = buckets.into_iter().filter(|v| v.is_finite() && *v >= 0.0).collect();
        b.sort_by(f64::total_cmp);
        b.dedup();
        if b.is_empty() {
            tracing::warn!("no valid buckets; using [0]");
            b.push(0.0);
        }
        let scale = if scale.is_finite() && scale > 0.0 { scale } else { 1.0 };
        let margin = if hysteresis.margin.is_finite() { hysteresis.margin.max(0.0) } else { 0.0 };
        BucketSelector { buckets: b, scale, hysteresis: Hysteresis { margin, ..hysteresis }, current: None, pending: None, switches: 0 }
    }

    /// As [`BucketSelector::new`], refusing invalid values.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the value.
    pub fn try_new(buckets: Vec<f64>, scale: f64, hysteresis: Hysteresis) -> Result<BucketSelector> {
        if buckets.is_empty() || buckets.iter().any(|b| !b.is_finite() || *b < 0.0) {
            return Err(Error::InvalidConfig { what: format!("buckets must be a non-empty list of finite values >= 0, got {buckets:?}") });
        }
        if !(scale.is_finite() && scale > 0.0) {
            return Err(Error::InvalidConfig { what: format!("bandwidth scale must be positive, got {scale}") });
        }
        if !(hysteresis.margin.is_finite() && hysteresis.margin >= 0.0) {
            return Err(Error::InvalidConfig { what: format!("hysteresis margin must be >= 0, got {}", hysteresis.margin) });
        }
        Ok(BucketSelector::new(buckets, scale, hysteresis))
    }

    /// `mbps` in table units.
    pub fn units(&self, mbps: f64) -> f64 {
        mbps / 8.0 / self.scale
    }

    /// The largest bucket at or below `units` (the smallest if none).
    fn floor_bucket(&self, units: f64) -> f64 {
        let i = self.buckets.partition_point(|&b| b <= units);
        self.buckets[i.saturating_sub(1)]
    }

    /// Feeds a prediction (Mbit/s) and returns the bucket in force (table MB/s). A non-finite or
    /// negative prediction counts as 0.
    pub fn update(&mut self, now: Instant, predicted_mbps: f64) -> f64 {
        let mbps = if predicted_mbps.is_finite() { predicted_mbps.max(0.0) } else { 0.0 };
        let u = self.units(mbps);
        let target = self.floor_bucket(u);
        let Some(cur) = self.current else {
            self.current = Some(target);
            tracing::debug!(bucket = target, "initial bucket");
            return target;
        };
        if target < cur {
            self.pending = None;
            self.set(cur, target, "down");
            return target;
        }
        let up = self.floor_bucket(u - self.hysteresis.margin);
        if up <= cur {
            self.pending = None;
            return cur;
        }
        let (since, lowest) = match self.pending {
            Some((since, lowest)) => (since, lowest.min(up)),
            None => (now, up),
        };
        if now.saturating_duration_since(since) >= self.hysteresis.hold {
            self.pending = None;
            self.set(cur, lowest, "up");
            return lowest;
        }
        self.pending = Some((since, lowest));
        cur
    }

    fn set(&mut self, from: f64, to: f64, how: &str) {
        self.current = Some(to);
        self.switches += 1;
        tracing::info!(from, to, how, "bandwidth bucket switch");
    }

    /// The bucket in force (`None` before the first update).
    pub fn current(&self) -> Option<f64> {
        self.current
    }

    /// Switches so far (the first choice is not a switch).
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// The buckets, ascending.
    pub fn buckets(&self) -> &[f64] {
        &self.buckets
    }
}

/// The monitor's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct MonitorConfig {
    /// Samples the predictor looks at (N).
    pub window: usize,
    /// A [`predict::NAMES`] entry.
    pub predictor: String,
    /// How often [`Monitor::tick`] publishes.
    pub publish_period: Duration,
    /// Passive transfers below this many bytes are ignored.
    pub min_passive_bytes: u64,
    /// Probe when no sample has arrived for this long.
    pub idle_threshold: Duration,
    /// At most one probe per this interval (`Duration::ZERO` disables probing).
    pub probe_interval: Duration,
    /// Bytes per probe.
    pub probe_bytes: usize,
    /// Bucket switching.
    pub hysteresis: Hysteresis,
    /// Schedule-table buckets (MB/s table units).
    pub buckets: Vec<f64>,
    /// Real MB/s per table MB/s.
    pub bandwidth_scale: f64,
}

impl Default for MonitorConfig {
    /// Harmonic mean of 5, 0.5 s publishing, 64 KiB passive floor, a 256 KiB probe after 1 s idle
    /// at most every 2 s, buckets 0..=30 MB/s, scale 1.
    fn default() -> Self {
        MonitorConfig {
            window: 5,
            predictor: "harmonic".into(),
            publish_period: Duration::from_millis(500),
            min_passive_bytes: 64 * 1024,
            idle_threshold: Duration::from_secs(1),
            probe_interval: Duration::from_secs(2),
            probe_bytes: 256 * 1024,
            hysteresis: Hysteresis::default(),
            buckets: (0..=30).map(f64::from).collect(),
            bandwidth_scale: 1.0,
        }
    }
}

/// One published estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// The latest measured sample, Mbit/s.
    pub estimate_mbps: f64,
    /// The predictor's output, Mbit/s.
    pub prediction_mbps: f64,
    /// Samples received since the previous estimate (0: nothing new, the prediction carries over).
    pub samples: u32,
    /// The predictor's name.
    pub predictor: &'static str,
    /// The bucket in force (table MB/s).
    pub bucket: f64,
}

/// The `lop_bandwidth` node's state machine (see the module docs). Time comes from the caller.
pub struct Monitor {
    cfg: MonitorConfig,
    predictor: Box<dyn Predictor>,
    selector: BucketSelector,
    epoch: Instant,
    last_sample: Option<(Instant, f64)>,
    since_publish: u32,
    last_publish: Option<Instant>,
    probe_in_flight: Option<Instant>,
    last_probe: Option<Instant>,
    ignored: u64,
}

impl fmt::Debug for Monitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Monitor").field("predictor", &self.predictor.name()).field("last_sample", &self.last_sample).finish()
    }
}

impl Monitor {
    /// A monitor started at `now`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an unknown predictor, a zero window or publish period, bad
    /// buckets, scale or margin.
    pub fn new(cfg: MonitorConfig, now: Instant) -> Result<Monitor> {
        let predictor = predict::by_name(&cfg.predictor, cfg.window)?;
        if cfg.publish_period.is_zero() {
            return Err(Error::InvalidConfig { what: "publish period must be positive".into() });
        }
        let selector = BucketSelector::try_new(cfg.buckets.clone(), cfg.bandwidth_scale, cfg.hysteresis)?;
        Ok(Monitor {
            cfg,
            predictor,
            selector,
            epoch: now,
            last_sample: None,
            since_publish: 0,
            last_publish: None,
            probe_in_flight: None,
            last_probe: None,
            ignored: 0,
        })
    }

    fn sample(&mut self, now: Instant, mbps: f64, how: &str) {
        let t_s = now.saturating_duration_since(self.epoch).as_secs_f64();
        tracing::debug!(mbps, how, "bandwidth sample");
        self.predictor.observe(t_s, mbps);
        self.last_sample = Some((now, mbps));
        self.since_publish = self.since_publish.saturating_add(1);
    }

    /// A completed robot transfer of `bytes` in `seconds`. Returns whether it was used (transfers
    /// below [`MonitorConfig::min_passive_bytes`] and non-positive or non-finite durations are
    /// not).
    pub fn passive(&mut self, now: Instant, bytes: u64, seconds: f64) -> bool {
        if bytes < self.cfg.min_passive_bytes || !seconds.is_finite() || seconds <= 0.0 {
            self.ignored += 1;
            tracing::trace!(bytes, seconds, "transfer too small or untimed for a bandwidth sample");
            return false;
        }
        self.sample(now, bytes as f64 * 8.0 / seconds / 1e6, "passive");
        true
    }

    /// Bytes to probe with, when the link has been idle for the idle threshold, no probe is in
    /// flight (one in flight for longer than the probe interval counts as lost) and the last probe
    /// was at least a probe interval ago.
    pub fn probe_due(&self, now: Instant) -> Option<usize> {
        if self.cfg.probe_interval.is_zero() || self.cfg.probe_bytes == 0 {
            return None;
        }
        let since = |t: Instant| now.saturating_duration_since(t);
        let idle = since(self.last_sample.map_or(self.epoch, |(t, _)| t)) >= self.cfg.idle_threshold;
        let in_flight = self.probe_in_flight.is_some_and(|t| since(t) < self.cfg.probe_interval);
        let spaced = self.last_probe.is_none_or(|t| since(t) >= self.cfg.probe_interval);
        (idle && !in_flight && spaced).then_some(self.cfg.probe_bytes)
    }

    /// The adapter started a probe.
    pub fn probe_started(&mut self, now: Instant) {
        self.probe_in_flight = Some(now);
        self.last_probe = Some(now);
    }

    /// A probe's result: the rates measured up and down (Mbit/s; `None` where that direction
    /// failed). The sample is the lower of the two measured directions, or 0 if neither was.
    pub fn probe_result(&mut self, now: Instant, up_mbps: Option<f64>, down_mbps: Option<f64>) {
        self.probe_in_flight = None;
        self.last_probe.get_or_insert(now);
        let ok = |v: Option<f64>| v.filter(|x| x.is_finite() && *x >= 0.0);
        let mbps = match (ok(up_mbps), ok(down_mbps)) {
            (Some(u), Some(d)) => u.min(d),
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => {
                tracing::warn!("bandwidth probe failed in both directions; counting the link as down");
                0.0
            }
        };
        self.sample(now, mbps, "probe");
    }

    /// The estimate to publish, once per publish period after the first sample.
    pub fn tick(&mut self, now: Instant) -> Option<Estimate> {
        if self.last_publish.is_some_and(|t| now.saturating_duration_since(t) < self.cfg.publish_period) {
            return None;
        }
        let ((_, latest), prediction) = (self.last_sample?, self.predictor.predict()?);
        self.last_publish = Some(now);
        let bucket = self.selector.update(now, prediction);
        let samples = std::mem::take(&mut self.since_publish);
        Some(Estimate { estimate_mbps: latest, prediction_mbps: prediction, samples, predictor: self.predictor.name(), bucket })
    }

    /// Passive transfers ignored so far.
    pub fn ignored(&self) -> u64 {
        self.ignored
    }

    /// The bucket selector (for its switch count).
    pub fn selector(&self) -> &BucketSelector {
        &self.selector
    }

    /// The configuration.
    pub fn config(&self) -> &MonitorConfig {
        &self.cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }
    /// Buckets 0..=30 MB/s, scale 1: bucket b is 8b Mbit/s.
    fn selector() -> BucketSelector {
        BucketSelector::new((0..=30).map(f64::from).collect(), 1.0, Hysteresis { margin: 0.5, hold: Duration::from_secs(2) })
    }

    #[test]
    fn bucket_no_flapping_on_noisy_constant() {
        let t0 = Instant::now();
        let mut s = selector();
        // 10.2 MB/s +- 0.4 (81.6 Mbit/s +- 3.2), a deterministic zig-zag every 0.5 s for 5 min.
        let mut seen = Vec::new();
        for k in 0..600u64 {
            let noise = [0.4, -0.4, 0.1, -0.3, 0.25, -0.15][k as usize % 6];
            seen.push(s.update(ms(t0, 500 * k), (10.2 + noise) * 8.0));
        }
        assert!(s.switches() <= 1, "switches {} ({:?})", s.switches(), &seen[..12]);
        assert!(seen.iter().all(|&b| b == 9.0 || b == 10.0));
        assert_eq!(*seen.last().expect("600"), 9.0, "dips below 10 pin it to 9; 10.6 clears 10 + margin only one update at a time");
    }

    #[test]
    fn bucket_prompt_downgrade_delayed_upgrade() {
        let t0 = Instant::now();
        let mut s = selector();
        assert_eq!(s.update(t0, 20.0 * 8.0), 20.0, "first update takes the target");
        assert_eq!(s.update(ms(t0, 500), 5.3 * 8.0), 5.0, "immediate downgrade");
        // Back up to 20: held for 2 s before switching.
        let mut t = 500;
        let mut switched_at = None;
        for _ in 0..10 {
            t += 500;
            let b = s.update(ms(t0, t), 20.0 * 8.0);
            if b > 5.0 && switched_at.is_none() {
                switched_at = Some(t);
                assert_eq!(b, 19.0, "upgrade to the bucket the prediction clears by the margin");
            }
        }
        assert_eq!(switched_at, Some(1000 + 2000), "2 s after the first qualifying update");
        // An interruption restarts the hold.
        let mut s = selector();
        s.update(t0, 5.0 * 8.0);
        s.update(ms(t0, 500), 12.0 * 8.0);
        s.update(ms(t0, 2000), 5.2 * 8.0);
        assert_eq!(s.update(ms(t0, 2600), 12.0 * 8.0), 5.0);
        assert_eq!(s.update(ms(t0, 4000), 12.0 * 8.0), 5.0);
        assert_eq!(s.update(ms(t0, 4600), 12.0 * 8.0), 11.0);
        // Scale: bucket b stands for 0.1 b MB/s; 8 Mbit/s = 1 MB/s = 10 table units.
        let mut s = BucketSelector::new(vec![0.0, 5.0, 10.0, 20.0], 0.1, Hysteresis::default());
        assert_eq!(s.update(t0, 8.0), 10.0);
        assert_eq!(s.update(ms(t0, 1), f64::NAN), 0.0, "no prediction counts as no link");
        assert!(BucketSelector::try_new(vec![], 1.0, Hysteresis::default()).is_err());
        assert!(BucketSelector::try_new(vec![1.0], 0.0, Hysteresis::default()).is_err());
    }

    /// Replays the bundled traces as passive samples every 0.5 s: hysteresis cuts the bucket
    /// switches, and the published bucket overestimates the next sample less often than the plain
    /// floor of the prediction would.
    #[test]
    fn monitor_on_bundled_traces_switches_less_with_hysteresis() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/traces");
        for name in ["outdoor", "indoor"] {
            let samples = crate::Trace::load(dir.join(format!("{name}.csv"))).expect("bundled trace").samples().collect::<Vec<_>>();
            let run = |hysteresis: Hysteresis| {
                let t0 = Instant::now();
                let mut m = Monitor::new(MonitorConfig { hysteresis, ..MonitorConfig::default() }, t0).expect("valid");
                let (mut over, mut n) = (0u32, 0u32);
                let mut bucket = None;
                for &(t, mbps) in &samples {
                    let now = t0 + Duration::from_secs_f64(t + 0.5);
                    if let Some(b) = bucket {
                        n += 1;
                        over += u32::from(b * 8.0 > mbps);
                    }
                    m.passive(now, (mbps * 1e6 / 8.0 * 0.5) as u64, 0.5);
                    bucket = m.tick(now).map(|e| e.bucket).or(bucket);
                }
                (m.selector().switches(), f64::from(over) / f64::from(n.max(1)))
            };
            let (with, over_with) = run(Hysteresis::default());
            let (without, over_without) = run(Hysteresis { margin: 0.0, hold: Duration::ZERO });
            eprintln!(
                "{name}: bucket switches {with} with hysteresis (0.5 bucket, 2 s), {without} without; \
                 bucket above the next sample {:.1}% vs {:.1}%",
                100.0 * over_with,
                100.0 * over_without
            );
            assert!(with < without, "{name}: {with} >= {without}");
            assert!(over_with <= over_without, "{name}");
        }
    }

    #[test]
    fn monitor_passive_probe_and_publish() {
        let t0 = Instant::now();
        let cfg = MonitorConfig { bandwidth_scale: 1.0, ..MonitorConfig::default() };
        let mut m = Monitor::new(cfg, t0).expect("valid");
        assert_eq!(m.tick(t0), None, "nothing to publish before a sample");
        assert!(!m.passive(ms(t0, 10), 1000, 0.001), "small transfers are ignored");
        assert_eq!(m.ignored(), 1);
        // 1 MB in 0.1 s = 80 Mbit/s.
        assert!(m.passive(ms(t0, 100), 1_000_000, 0.1));
        assert_eq!(m.probe_due(ms(t0, 200)), None, "not idle");
        let e = m.tick(ms(t0, 200)).expect("first estimate");
        assert_eq!((e.estimate_mbps, e.prediction_mbps, e.samples, e.predictor, e.bucket), (80.0, 80.0, 1, "harmonic", 10.0));
        assert_eq!(m.tick(ms(t0, 400)), None, "publish period not over");
        let e = m.tick(ms(t0, 700)).expect("carried over");
        assert_eq!(e.samples, 0);
        // Idle for 1 s: a probe is due, once.
        assert_eq!(m.probe_due(ms(t0, 1100)), Some(256 * 1024));
        m.probe_started(ms(t0, 1100));
        assert_eq!(m.probe_due(ms(t0, 1200)), None, "in flight");
        m.probe_result(ms(t0, 1300), Some(40.0), Some(60.0));
        let e = m.tick(ms(t0, 1300)).expect("estimate");
        assert_eq!(e.estimate_mbps, 40.0, "the slower direction");
        assert!((e.prediction_mbps - 2.0 / (1.0 / 80.0 + 1.0 / 40.0)).abs() < 1e-9);
        assert_eq!(e.bucket, 6.0, "53.3 Mbit/s = 6.67 MB/s: down at once");
        assert_eq!(m.probe_due(ms(t0, 2400)), None, "probe interval not over");
        assert_eq!(m.probe_due(ms(t0, 3200)), Some(256 * 1024));
        m.probe_started(ms(t0, 3200));
        m.probe_result(ms(t0, 3300), None, None);
        let e = m.tick(ms(t0, 3300)).expect("estimate");
        assert_eq!((e.estimate_mbps, e.bucket), (0.0, 0.0), "a failed probe is an outage");
        assert!(Monitor::new(MonitorConfig { predictor: "oracle".into(), ..MonitorConfig::default() }, t0).is_err());
        assert!(Monitor::new(MonitorConfig { window: 0, ..MonitorConfig::default() }, t0).is_err());
    }
}

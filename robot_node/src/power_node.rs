//! `lop_power`: samples the robot's power source and reports the energy of every inference.
//!
//! A sampler thread (source `auto`, `jetson-iio`, `jetson-hwmon`, `tegrastats`, `nvml`, `rapl`)
//! fills an [`EnergyAccountant`]; with source `model` the readings are the power model's, fed
//! from each result's timings ([`ModelStates`], [`ModelFeed`]). For every `/lop/inference` result
//! the node integrates power over the inference's interval and publishes `/lop/energy`, appends a
//! CSV row, and publishes `/lop/power` at a reduced rate.
//!
//! The interval of an inference is its result's `[started, finished]` stamps (wall clock of the
//! robot, the same host). A result without them (zero stamps) falls back to
//! `[arrival - latency_s, arrival]`, which ends late by the result's transport time.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use lop_msgs::ros::msg::RailEnergy;
use lop_power::{SamplerConfig, SourceConfig, SourceKind};
use tokio::sync::{mpsc, watch};

use crate::backend::{InferenceEnergy, InferenceResult, PowerSample, SharedRos, Stamp, to_time};
use crate::config::PowerConfig;
use crate::error::{Error, Result};
use crate::power::{CsvLog, EnergyAccountant, EnergyReport, MODEL_RAIL, ModelFeed, ModelStates, RateReducer};

/// Results waiting for their energy, at most this many (a result arriving while it is full is
/// skipped, with a warning).
const QUEUE: usize = 64;
/// How long to wait for readings covering an interval's end before giving up.
const COVER_WAIT: Duration = Duration::from_millis(500);

fn open_accountant(cfg: &PowerConfig) -> Result<(EnergyAccountant, Option<ModelFeed>)> {
    let capacity = ((cfg.rate_hz * cfg.window_s).ceil() as usize).max(16);
    if cfg.source == "model" {
        let acc = EnergyAccountant::fed("model", vec![MODEL_RAIL.to_string()], capacity.max(100_000))?;
        return Ok((acc, Some(ModelFeed::new(cfg.model)?)));
    }
    let scfg = SourceConfig { root: cfg.root.clone(), model: cfg.model, ..SourceConfig::default() };
    let source = if cfg.source == "auto" {
        lop_power::detect(&scfg, &SourceKind::ALL)?
    } else {
        let kind: SourceKind = cfg.source.parse()?;
        lop_power::open(kind, &scfg)?
    };
    let sampler = SamplerConfig { rate_hz: cfg.rate_hz, ..SamplerConfig::default() };
    Ok((EnergyAccountant::sampled(source, sampler, capacity)?, None))
}

fn energy_msg(r: &EnergyReport) -> InferenceEnergy {
    let dur = r.duration_s();
    InferenceEnergy {
        inference_id: r.id,
        start_stamp: to_time(Stamp::from_system(r.start)),
        end_stamp: to_time(Stamp::from_system(r.end)),
        energy_j: r.joules,
        average_w: r.avg_w,
        rails: r
            .rails_j
            .iter()
            .map(|(name, j)| RailEnergy { name: name.clone(), energy_j: *j, average_w: if dur > 0.0 { j / dur } else { 0.0 } })
            .collect(),
        source: r.source.clone(),
        modelled: r.modelled,
        samples: u32::try_from(r.samples).unwrap_or(u32::MAX),
    }
}

/// The wall-clock interval of an inference: its `started`/`finished` stamps, or, from a robot
/// that leaves them zero, `[arrival - latency_s, arrival]`.
pub fn interval(r: &InferenceResult, arrival: SystemTime) -> (SystemTime, SystemTime) {
    let (s, f) = (Stamp { sec: r.started.sec, nanosec: r.started.nanosec }, Stamp { sec: r.finished.sec, nanosec: r.finished.nanosec });
    if s != Stamp::default() && f >= s {
        return (s.to_system(), f.to_system());
    }
    let latency = Duration::try_from_secs_f64(r.latency_s).unwrap_or_default();
    (arrival.checked_sub(latency).unwrap_or(arrival), arrival)
}

/// What a finished `run` reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PowerSummary {
    /// Energy messages published.
    pub reported: u64,
    /// Results whose energy could not be computed (no readings covering them).
    pub missed: u64,
    /// Power samples published.
    pub samples: u64,
}

/// Runs `lop_power` until `shutdown` resolves.
///
/// # Errors
/// No usable power source; a CSV file that cannot be created; topics the backend refuses.
pub async fn run(cfg: PowerConfig, ros: SharedRos, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<PowerSummary> {
    let (stop_tx, mut stop) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let c = cfg.clone();
    let (acc, mut feed) = tokio::task::spawn_blocking(move || open_accountant(&c))
        .await
        .map_err(|e| Error::Config { what: format!("opening the power source: {e}") })??;
    let acc = Arc::new(acc);
    let mut csv = if cfg.csv.is_empty() { None } else { Some(CsvLog::create(&cfg.csv, acc.rails())?) };
    let energy_pub = ros.energy_publisher(&cfg.energy_topic)?;
    let power_pub = ros.power_publisher(&cfg.power_topic)?;
    let (tx, mut rx) = mpsc::channel::<(InferenceResult, SystemTime, Instant)>(QUEUE);
    let _sub = ros.subscribe_inference(
        &cfg.inference_topic,
        Box::new(move |r| {
            if tx.try_send((r, SystemTime::now(), Instant::now())).is_err() {
                tracing::warn!("energy queue full; a result is skipped");
            }
        }),
    )?;
    tracing::info!(
        source = acc.source(), rails = ?acc.rails(), topic = %cfg.energy_topic,
        "ready"
    );
    let mut reducer = RateReducer::new(cfg.publish_hz)?;
    let mut last_reading: Option<Instant> = None;
    let mut tick = tokio::time::interval(Duration::from_secs_f64((1.0 / cfg.publish_hz).max(0.01)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut summary = PowerSummary::default();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = tick.tick() => {
                for r in acc.readings_after(last_reading) {
                    last_reading = Some(r.at);
                    if let Some(s) = reducer.push(&r) {
                        let msg = PowerSample {
                            stamp: to_time(Stamp::from_system(acc.system_time_of(s.at))),
                            rail_names: acc.rails().to_vec(),
                            rail_watts: s.rails_w,
                            total_w: s.total_w,
                            source: acc.source().to_string(),
                            modelled: s.modelled,
                        };
                        match power_pub.publish(&msg) {
                            Ok(()) => summary.samples += 1,
                            Err(e) => tracing::warn!(error = %e, "publishing a power sample failed"),
                        }
                    }
                }
            }
            got = rx.recv() => {
                let Some((r, arrival, arrival_instant)) = got else { break };
                let (start, end) = interval(&r, arrival);
                let latency = end.duration_since(start).unwrap_or_default();
                let end_instant = arrival_instant.checked_sub(arrival.duration_since(end).unwrap_or_default()).unwrap_or(arrival_instant);
                if let Some(f) = feed.as_mut() {
                    let states = ModelStates::from_inference(end_instant.checked_sub(latency).unwrap_or(end_instant), r.robot_compute_s, r.transfer_s, latency.as_secs_f64());
                    match states.map_err(Error::from).and_then(|s| f.feed(&s, &acc).map_err(Error::from)) {
                        Ok(_) => {}
                        Err(e) => tracing::warn!(id = r.inference_id, error = %e, "power model feed failed"),
                    }
                }
                let mut report = acc.energy(r.inference_id, start, end);
                let waited = Instant::now();
                while report.as_ref().is_err_and(|e| e.is_retryable()) && waited.elapsed() < COVER_WAIT {
                    tokio::time::sleep(Duration::from_secs_f64(2.0 / cfg.rate_hz)).await;
                    report = acc.energy(r.inference_id, start, end);
                }
                match report {
                    Ok(rep) => {
                        if let Err(e) = energy_pub.publish(&energy_msg(&rep)) {
                            tracing::warn!(error = %e, "publishing the energy failed");
                        } else {
                            summary.reported += 1;
                        }
                        if let Some(log) = csv.as_mut() && let Err(e) = log.write(&rep) {
                            tracing::warn!(error = %e, "CSV log write failed; logging stops");
                            csv = None;
                        }
                    }
                    Err(e) => {
                        summary.missed += 1;
                        tracing::warn!(id = r.inference_id, error = %e, "no energy for this inference");
                    }
                }
            }
        }
    }
    tracing::info!(?summary, "lop_power stopped");
    Ok(summary)
}

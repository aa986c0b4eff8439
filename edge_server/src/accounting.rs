//! What the edge records of each served inference: a log line, the /metrics counters, and with
//! NVML its GPU energy (the meter over a sampled ring); and the GPUs' gauges for /metrics.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lop_power::Ring;
use lop_runtime::edge::{EdgeOptions, Served};
use tokio::sync::{broadcast, oneshot};

use crate::config::EdgeConfig;
use crate::energy::{EnergyTotals, IntervalEnergy, Meter, RingEnergy};
use crate::http;

/// Every CUDA device's NVML figures for /metrics, where NVML answers.
pub(super) fn gpu_gauges(opts: &EdgeOptions) -> Vec<(String, lop_power::nvml::GpuGauges)> {
    opts.devices
        .iter()
        .filter_map(|d| match d.device {
            tch::Device::Cuda(i) => match lop_power::nvml::GpuGauges::open(i as u32) {
                Ok(g) => Some((d.name.clone(), g)),
                Err(e) => {
                    tracing::info!(device = %d.name, "no NVML figures in /metrics: {e}");
                    None
                }
            },
            _ => None,
        })
        .collect()
}

/// The NVML meter, or `None` (logged once) when GPU energy is off or unavailable.
pub(super) fn gpu_meter(cfg: &EdgeConfig, device: tch::Device) -> Option<Meter<RingEnergy>> {
    let g = cfg.gpu_energy;
    if !g.enabled {
        tracing::info!("GPU energy disabled in the configuration");
        return None;
    }
    let index = match (g.nvml_index, device) {
        (Some(i), _) => i,
        (None, tch::Device::Cuda(n)) => u32::try_from(n).unwrap_or(0),
        (None, _) => {
            tracing::info!("GPU energy not measured: the models run on the CPU");
            return None;
        }
    };
    let source = match lop_power::nvml::NvmlSource::open(index) {
        Ok(s) => s,
        Err(e) => {
            tracing::info!(reason = %e, "GPU energy not available");
            return None;
        }
    };
    let capacity = (g.rate_hz * 60.0).ceil().max(16.0) as usize;
    let ring = match Ring::new(capacity) {
        Ok(r) => Arc::new(Mutex::new(r)),
        Err(e) => {
            tracing::warn!(error = %e, "GPU energy not available");
            return None;
        }
    };
    let sampler = lop_power::SamplerConfig { rate_hz: g.rate_hz, ..Default::default() };
    match lop_power::sampler::spawn(Box::new(source), sampler, ring.clone()) {
        Ok(handle) => {
            // The sampler runs for the life of the process.
            std::mem::forget(handle);
            tracing::info!(gpu = index, rate_hz = g.rate_hz, "GPU energy per served inference through NVML");
            let patience = Duration::from_secs_f64((20.0 / g.rate_hz).max(1.0));
            Some(Meter::new(RingEnergy { ring, opts: Default::default() }, patience))
        }
        Err(e) => {
            tracing::warn!(error = %e, "GPU energy not available");
            None
        }
    }
}

fn log_served(s: &Served) {
    tracing::debug!(
        robot = %s.robot_id,
        model = %s.model_id,
        inference = s.inference_id,
        replica = s.replica,
        outcome = s.outcome.as_str(),
        ms = s.duration().as_secs_f64() * 1e3,
        compute_ms = s.server_compute_s * 1e3,
        bytes_in = s.bytes_received,
        bytes_out = s.bytes_sent,
        "inference served"
    );
}

/// Logs every served inference and, with a meter, its GPU energy, until `stop`; then resolves
/// what is pending (bounded by the meter's patience) and returns the totals.
pub(super) async fn account<S: IntervalEnergy>(
    mut served: broadcast::Receiver<Served>,
    mut meter: Option<Meter<S>>,
    ops: Arc<http::OpsState>,
    mut stop: oneshot::Receiver<()>,
) -> Option<EnergyTotals> {
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    let report = |meter: &mut Option<Meter<S>>| {
        if let Some(m) = meter.as_mut() {
            for e in m.poll(Instant::now()) {
                match e.joules {
                    Ok(j) => tracing::info!(
                        robot = %e.served.robot_id,
                        model = %e.served.model_id,
                        inference = e.served.inference_id,
                        outcome = e.served.outcome.as_str(),
                        ms = e.served.duration().as_secs_f64() * 1e3,
                        gpu_j = j,
                        method = e.method.unwrap_or(""),
                        "GPU energy"
                    ),
                    Err(why) => tracing::debug!(inference = e.served.inference_id, %why, "no GPU energy figure"),
                }
            }
        }
    };
    loop {
        tokio::select! {
            r = served.recv() => match r {
                Ok(s) => {
                    log_served(&s);
                    ops.metrics.observe(&s);
                    if let Some(m) = meter.as_mut() {
                        m.offer(s, Instant::now());
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => tracing::warn!(missed = n, "served-inference reports lost (lagging)"),
                Err(broadcast::error::RecvError::Closed) => break,
            },
            _ = tick.tick() => report(&mut meter),
            _ = &mut stop => break,
        }
    }
    while let Ok(s) = served.try_recv() {
        log_served(&s);
        ops.metrics.observe(&s);
        if let Some(m) = meter.as_mut() {
            m.offer(s, Instant::now());
        }
    }
    // Every pending inference resolves within its patience; bounded at 200 ticks regardless.
    for _ in 0..200 {
        report(&mut meter);
        if meter.as_ref().is_none_or(|m| m.pending() == 0) {
            break;
        }
        tick.tick().await;
    }
    meter.map(|m| m.totals())
}

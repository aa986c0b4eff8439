//! The edge's side: its liveliness token `lop/v1/edge/<id>/alive` and a load report on
//! `lop/v1/edge/<id>/load` every [`REPORT_PERIOD`](super::REPORT_PERIOD).

use std::time::{Duration, Instant};

use lop_msgs::load::{EdgeLoad, ModelLoad};

use crate::edge::EdgeService;
use crate::error::{Error, Result};

/// Turns the edge service's counters into load reports, one per period.
#[derive(Debug)]
pub struct LoadReporter {
    edge: String,
    seq: u64,
    last_busy_s: f64,
    last_at: Instant,
}

impl LoadReporter {
    /// A reporter for the edge `edge`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `edge` is not a valid id.
    pub fn new(edge: &str, svc: &EdgeService) -> Result<LoadReporter> {
        lop_msgs::validate_id(edge).map_err(|e| Error::InvalidConfig { what: format!("edge id '{edge}': {e}") })?;
        Ok(LoadReporter { edge: edge.to_string(), seq: 0, last_busy_s: svc.busy_s(), last_at: Instant::now() })
    }

    /// The report for the period that ends `now`: utilisation is the server compute of the
    /// period over its length; a model's queued seconds are its in-flight inferences times its
    /// mean server seconds; its idle goodput is the share of the next second neither busy nor
    /// queued, in inferences of that model. `gpu_free_bytes` is the device's free memory, when
    /// known.
    pub fn report(&mut self, svc: &EdgeService, now: Instant, gpu_free_bytes: Option<u64>) -> EdgeLoad {
        let busy = svc.busy_s();
        let period = now.saturating_duration_since(self.last_at).as_secs_f64();
        let utilisation = if period > 0.0 { ((busy - self.last_busy_s) / period).clamp(0.0, 1.0) } else { 0.0 };
        self.last_busy_s = busy;
        self.last_at = now;
        self.seq += 1;
        let models = svc
            .model_loads()
            .into_iter()
            .map(|m| {
                let queued_s = m.in_flight as f64 * m.server_s;
                let spare = (1.0 - utilisation.max(queued_s)).max(0.0);
                ModelLoad {
                    model: m.id,
                    queued_s: queued_s as f32,
                    idle_goodput: (spare / m.server_s.max(1e-6)) as f32,
                    server_s: m.server_s as f32,
                    in_flight: m.in_flight.min(usize::from(u16::MAX)) as u16,
                    warm: m.warm,
                }
            })
            .take(lop_msgs::load::MAX_MODELS)
            .collect();
        EdgeLoad { edge: self.edge.clone(), seq: self.seq, utilisation: utilisation as f32, gpu_free_bytes, models }
    }
}

/// The running reporter: holds the edge's liveliness token and its publishing task; dropping
/// it withdraws both (robots see the edge leave at once).
pub struct ReporterHandle {
    task: tokio::task::JoinHandle<()>,
    _token: zenoh::liveliness::LivelinessToken,
}

impl std::fmt::Debug for ReporterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReporterHandle").finish_non_exhaustive()
    }
}

impl Drop for ReporterHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Declares the edge's fleet liveliness token and publishes its load every `period` until the
/// handle is dropped. `gpu_free` is asked for the device's free memory at each report.
///
/// # Errors
/// [`Error::InvalidConfig`] for a bad edge id; [`Error::Zenoh`] when a declaration fails.
pub async fn start_reporter(
    session: &zenoh::Session,
    edge: &str,
    svc: EdgeService,
    period: Duration,
    gpu_free: Box<dyn Fn() -> Option<u64> + Send>,
) -> Result<ReporterHandle> {
    let mut reporter = LoadReporter::new(edge, &svc)?;
    let load_key = lop_msgs::key::edge_load(edge).map_err(|e| Error::InvalidConfig { what: format!("edge id '{edge}': {e}") })?;
    let token_key = lop_msgs::key::edge_token(edge).map_err(|e| Error::InvalidConfig { what: format!("edge id '{edge}': {e}") })?;
    let token = session
        .liveliness()
        .declare_token(token_key.clone())
        .await
        .map_err(|e| Error::Zenoh(format!("declaring liveliness token {token_key}: {e}")))?;
    let publisher = session
        .declare_publisher(load_key.clone())
        .congestion_control(zenoh::qos::CongestionControl::Drop)
        .await
        .map_err(|e| Error::Zenoh(format!("declaring publisher {load_key}: {e}")))?;
    tracing::info!(edge, key = %load_key, "fleet: reporting load every {} ms", period.as_millis());
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let load = reporter.report(&svc, Instant::now(), gpu_free());
            match load.encode() {
                Ok(bytes) => {
                    if let Err(e) = publisher.put(bytes).await {
                        tracing::debug!("fleet: load report not published: {e}");
                    }
                }
                Err(e) => tracing::warn!("fleet: load report not encodable: {e}"),
            }
        }
    });
    Ok(ReporterHandle { task, _token: token })
}

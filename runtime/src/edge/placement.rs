//! Placement under a memory budget (`lop_fleet::place`, EPARA's placement): every
//! [`PLACEMENT_PERIOD`], or at once when a Hello asks for a cold model, the models recent
//! demand asks for are kept warm within the budget; the others are unloaded (never one with
//! work queued).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::model::Model;
use super::options::PLACEMENT_PERIOD;
use super::replica::{Replica, spawn_replicas};
use super::state::Inner;

/// Places the models again every [`PLACEMENT_PERIOD`], or at once when a Hello asks for a cold
/// one, until the service is dropped or shuts down.
pub(super) async fn placement_loop(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(svc) = inner.upgrade() else { return };
        if svc.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        svc.place().await;
        let _ = tokio::time::timeout(PLACEMENT_PERIOD, svc.place_now.notified()).await;
    }
}

impl Inner {
    /// One placement step: the models to keep warm by recent demand within the budget
    /// (`lop_fleet::place`); unloads first (never a model with work queued), then loads.
    async fn place(self: &Arc<Self>) {
        let Some(budget) = self.opts.memory_budget else { return };
        let now = Instant::now();
        let snapshots: Vec<Arc<Vec<Replica>>> = self.models.iter().map(Model::replicas).collect();
        let candidates: Vec<lop_fleet::PlaceCandidate> = self
            .models
            .iter()
            .zip(&snapshots)
            .map(|(m, r)| lop_fleet::PlaceCandidate {
                bytes: m.bytes,
                demand: m.demand_per_s(now),
                warm: !r.is_empty(),
                pinned: r.iter().any(|r| r.queued.load(Ordering::Relaxed) > 0),
            })
            .collect();
        let chosen = lop_fleet::place(&candidates, budget);
        for (i, m) in self.models.iter().enumerate() {
            if !chosen[i] && candidates[i].warm && !candidates[i].pinned {
                let old = m.set_replicas(Vec::new());
                tracing::info!(model = %m.id, demand_per_s = candidates[i].demand, mb = m.bytes as f64 / 1e6, "placement: model unloaded");
                // Joining the replicas' threads blocks: not on the executor.
                tokio::task::spawn_blocking(move || drop(old));
            }
        }
        for (i, m) in self.models.iter().enumerate() {
            if chosen[i] && !candidates[i].warm {
                let started = Instant::now();
                match spawn_replicas(&m.id, &m.source, &m.load, &self.opts.devices, self.opts.replicas).await {
                    Ok((replicas, _)) => {
                        m.set_replicas(replicas);
                        tracing::info!(model = %m.id, demand_per_s = candidates[i].demand, seconds = started.elapsed().as_secs_f64(), "placement: model loaded");
                    }
                    Err(e) => tracing::warn!(model = %m.id, error = %e, "placement: loading the model failed"),
                }
            }
        }
    }
}

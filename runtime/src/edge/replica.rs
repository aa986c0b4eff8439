//! A model's warm replicas: each a worker thread that holds its own copy of the model on one
//! device and takes the inferences queued on it in order ([`Waiting`], each [`JOB_QUEUED`] until
//! the replica takes it or its session releases it); spawning them device by device, and choosing
//! the replica that will finish an inference first ([`finishes_first`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, AtomicUsize};
use std::sync::{Arc, mpsc};
use std::time::Instant;

use lop::graph::Graph;
use lop::model::LoadOptions;
use tokio::sync::oneshot;

use super::options::ServerDevice;
use crate::error::{Error, Result};
use crate::exec::worker::Loaded;
use crate::exec::{GraphMeta, Incoming, SideConfig, SideStats, Stopped, Worker};
use crate::outbox::Outbox;
use crate::plans::Prepared;

/// Which replica an inference goes to: the one that will finish it first, given each replica's
/// queued inferences and its device's speed (`(queued + 1) / speed`, ties to the first);
/// `None` for no replica.
pub fn finishes_first(replicas: impl IntoIterator<Item = (usize, f64)>) -> Option<usize> {
    replicas
        .into_iter()
        .enumerate()
        .map(|(i, (queued, speed))| (i, (queued as f64 + 1.0) / speed.max(1e-9)))
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
        .map(|(i, _)| i)
}

/// A warm replica of a model.
pub(super) struct Replica {
    pub(super) worker: Worker,
    /// Its device (index into [`EdgeOptions::devices`](super::options::EdgeOptions::devices)).
    pub(super) device: usize,
    pub(super) queued: AtomicUsize,
    /// Inferences whose first band has come, waiting for the worker; it takes them in order,
    /// each with the others of its plan up to [`Batching::max`](super::options::Batching::max).
    pub(super) waiting: Arc<std::sync::Mutex<VecDeque<Waiting>>>,
}

/// Where a queued inference stands on its replica, so that one replaced before it started stops
/// counting as work queued ahead of others at once (a session has at most one queued).
pub(super) const JOB_QUEUED: u8 = 0;
/// See [`JOB_QUEUED`]: taken by the replica's thread.
pub(super) const JOB_RUNNING: u8 = 1;
/// See [`JOB_QUEUED`]: replaced or ended before it started, its place in the count given back.
pub(super) const JOB_RELEASED: u8 = 2;

/// An inference waiting on a replica: everything its server side needs, and where its outcome
/// goes.
pub(super) struct Waiting {
    pub(super) plan: Arc<Prepared>,
    pub(super) meta: Arc<GraphMeta>,
    pub(super) config: SideConfig,
    pub(super) bands: mpsc::Receiver<Incoming>,
    pub(super) out: Outbox,
    /// [`JOB_QUEUED`], [`JOB_RUNNING`] or [`JOB_RELEASED`] (shared with its session's view of it).
    pub(super) state: Arc<AtomicU8>,
    pub(super) result: oneshot::Sender<Result<(Stopped, SideStats)>>,
    /// When its first result band went out (the start of its download, as the edge sees it).
    pub(super) first_out: Arc<std::sync::OnceLock<Instant>>,
}

/// Bytes of a graph's weights.
pub(super) fn weight_bytes(g: &Graph) -> u64 {
    g.nodes.iter().flat_map(|n| n.op.weights()).map(|t| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64).sum()
}

/// Spawns `n` replicas of a model on each of `devices` (each a thread that loads its own copy
/// on its device), device by device.
pub(super) async fn spawn_replicas(
    id: &str,
    source: &str,
    load: &LoadOptions,
    devices: &[ServerDevice],
    n: usize,
) -> Result<(Vec<Replica>, Loaded)> {
    let mut replicas = Vec::new();
    let mut loaded = None;
    for (d, dev) in devices.iter().enumerate() {
        for r in 0..n {
            let (source, load, device) = (source.to_string(), load.clone(), dev.device);
            let (worker, info) = Worker::spawn(&format!("edge-{id}-{}-{r}", dev.name), move || {
                let mut g = lop::model::load(&source, &load)?;
                g.to_device(device)?;
                Ok(g)
            })
            .await?;
            replicas.push(Replica { worker, device: d, queued: AtomicUsize::new(0), waiting: Arc::default() });
            loaded = Some(info);
        }
    }
    let loaded = loaded.ok_or_else(|| Error::InvalidConfig { what: "replicas must be at least 1".into() })?;
    Ok((replicas, loaded))
}

#[cfg(test)]
mod tests {
    use tch::Device;

    use super::*;

    #[test]
    fn an_inference_goes_where_it_finishes_first() {
        // Idle replicas: the first; a queue: the other; a device twice as fast takes two
        // queued before an idle one of half its speed.
        assert_eq!(finishes_first([(0, 1.0), (0, 1.0)]), Some(0));
        assert_eq!(finishes_first([(1, 1.0), (0, 1.0)]), Some(1));
        assert_eq!(finishes_first([(0, 1.0), (1, 2.0)]), Some(0));
        assert_eq!(finishes_first([(0, 0.5), (2, 2.0)]), Some(1));
        assert_eq!(finishes_first([(0, 0.5), (4, 2.0)]), Some(0));
        assert_eq!(finishes_first(Vec::<(usize, f64)>::new()), None);
        assert_eq!(ServerDevice::only(Device::Cuda(1)).name, "cuda:1");
    }
}

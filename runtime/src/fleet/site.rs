//! The site's aggregator: hears every edge's load report (a direct [`FleetView`]) and
//! republishes them as one digest per shard and report period on `lop/v1/site/digest/<shard>`
//! (`lop_msgs::site`), so that a robot of a large site hears one message per period and shard
//! ([`FleetView::site`]) instead of every edge's ten a second. Shards are capacity-balanced
//! (`lop_fleet::shard::partition`, `lop_fleet::digest::digests`): robots hashed evenly over them meet even load. Any process
//! on the site can run it (`lop_edge` does with `site.aggregate: true`); a second one for
//! redundancy doubles what robots hear, and their views keep the newest report of each edge.

use std::collections::HashMap;
use std::time::Duration;

use lop_fleet::digest::digests;
use lop_msgs::key::site_digest;
use lop_msgs::site::MAX_DIGEST_EDGES;

use super::view::FleetView;
use crate::error::{Error, Result};

/// Edges per shard by default: a shard of 50 routes as well as a 50-edge site with every report
/// heard (`lop fleet-sim --hear site`), and its digest is about 3.5 kB.
pub const DEFAULT_SHARD_SIZE: usize = 50;

/// The running aggregator; dropping it stops the digests.
pub struct AggregatorHandle {
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for AggregatorHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggregatorHandle").finish_non_exhaustive()
    }
}

impl Drop for AggregatorHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts aggregating the site's reports into shards of at most `shard_size` edges, one digest
/// per shard every `period`; edges leave the digests as they leave a direct view
/// (`stale_after`).
///
/// # Errors
/// [`Error::InvalidConfig`] for a shard size of 0 or above the digest's limit;
/// [`Error::Zenoh`] when subscribing fails.
pub async fn start_aggregator(
    session: &zenoh::Session,
    shard_size: usize,
    period: Duration,
    stale_after: Duration,
) -> Result<AggregatorHandle> {
    if shard_size == 0 || shard_size > MAX_DIGEST_EDGES {
        return Err(Error::InvalidConfig { what: format!("site.shard_size {shard_size}: must be 1 to {MAX_DIGEST_EDGES}") });
    }
    let view = FleetView::new(session, stale_after).await?;
    let session = session.clone();
    tracing::info!(shard_size, "fleet: aggregating the site's load reports into digests every {} ms", period.as_millis());
    let task = tokio::spawn(async move {
        let mut publishers: HashMap<usize, zenoh::pubsub::Publisher<'static>> = HashMap::new();
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut seq = 0u64;
        let mut last_shards = 0usize;
        loop {
            tick.tick().await;
            seq += 1;
            let edges = view.edges();
            if edges.is_empty() {
                continue;
            }
            let all = digests(&edges, shard_size, seq);
            if all.len() != last_shards {
                tracing::info!(edges = edges.len(), shards = all.len(), "fleet: site digests in {} shards", all.len());
                last_shards = all.len();
                publishers.retain(|k, _| *k < all.len());
            }
            for d in all {
                let k = usize::from(d.shard);
                let bytes = match d.encode() {
                    Ok(b) => b,
                    Err(e) => {
                        tracing::warn!("fleet: digest of shard {k} not encodable: {e}");
                        continue;
                    }
                };
                let publisher = match publishers.entry(k) {
                    std::collections::hash_map::Entry::Occupied(p) => p.into_mut(),
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        let key = site_digest(k);
                        match session.declare_publisher(key.clone()).congestion_control(zenoh::qos::CongestionControl::Drop).await {
                            Ok(p) => slot.insert(p),
                            Err(e) => {
                                tracing::warn!("fleet: declaring publisher {key}: {e}");
                                continue;
                            }
                        }
                    }
                };
                if let Err(e) = publisher.put(bytes).await {
                    tracing::debug!("fleet: digest of shard {k} not published: {e}");
                }
            }
        }
    });
    Ok(AggregatorHandle { task })
}

//! The site's digests of one report period: the edges a view hears, split into
//! capacity-balanced shards ([`crate::shard::partition`]), one `lop_msgs::site::LoadDigest` per
//! shard. The site's aggregator (`lop_runtime::fleet::site`) publishes them; robots hear the
//! shards [`crate::shard::robot_shards`] names.

use lop_msgs::site::{LoadDigest, MAX_DIGEST_EDGES};

use crate::forward::EdgeSeen;
use crate::shard::partition;

/// An edge's relative capacity for balancing shards: inferences per second of its warm models'
/// mean server time (1 when it reports none).
pub fn capacity(e: &EdgeSeen) -> f64 {
    let times: Vec<f64> = e.load.models.iter().filter(|m| m.warm && m.server_s > 0.0).map(|m| f64::from(m.server_s)).collect();
    if times.is_empty() { 1.0 } else { times.len() as f64 / times.iter().sum::<f64>() }
}

/// The digests of one period: `edges` (sorted by id) in capacity-balanced shards of at most
/// `shard_size` (taken within 1 and the digest's limit), each numbered `seq`; an edge's age is
/// carried in milliseconds, capped at what the digest holds (65,535).
pub fn digests(edges: &[EdgeSeen], shard_size: usize, seq: u64) -> Vec<LoadDigest> {
    let caps: Vec<f64> = edges.iter().map(capacity).collect();
    let parts = partition(&caps, shard_size.clamp(1, MAX_DIGEST_EDGES));
    let shards = parts.len().min(usize::from(u16::MAX)) as u16;
    parts
        .iter()
        .enumerate()
        .take(usize::from(shards))
        .map(|(k, members)| LoadDigest {
            shard: k as u16,
            shards,
            seq,
            edges: members.iter().map(|&j| (edges[j].load.clone(), edges[j].age.as_millis().min(u128::from(u16::MAX)) as u16)).collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use lop_msgs::load::{EdgeLoad, ModelLoad};

    use super::*;

    fn edge(id: &str, server_s: &[f32], age_ms: u64) -> EdgeSeen {
        let models = server_s
            .iter()
            .enumerate()
            .map(|(i, &s)| ModelLoad { model: format!("m{i}"), queued_s: 0.0, idle_goodput: 1.0, server_s: s, in_flight: 0, warm: true })
            .collect();
        EdgeSeen {
            load: EdgeLoad { edge: id.into(), seq: 1, utilisation: 0.0, gpu_free_bytes: None, models },
            age: Duration::from_millis(age_ms),
        }
    }

    #[test]
    fn capacity_is_inferences_per_second_of_the_warm_models() {
        // Two models of 10 and 30 ms: a mean of 20 ms, 50 inferences a second.
        assert!((capacity(&edge("a", &[0.01, 0.03], 0)) - 50.0).abs() < 1e-4, "f32 seconds: within their rounding");
        // No model reported (or none warm): capacity 1, so the edge still counts.
        assert_eq!(capacity(&edge("b", &[], 0)), 1.0);
        let mut cold = edge("c", &[0.01], 0);
        cold.load.models[0].warm = false;
        assert_eq!(capacity(&cold), 1.0);
    }

    #[test]
    fn digests_cover_every_edge_once_in_balanced_shards() {
        // Five edges, shards of at most 2: three shards, every edge in exactly one.
        let edges: Vec<EdgeSeen> =
            [0.01, 0.02, 0.04, 0.01, 0.02].iter().enumerate().map(|(i, &s)| edge(&format!("e{i}"), &[s], 100 * i as u64)).collect();
        let all = digests(&edges, 2, 7);
        assert_eq!(all.len(), 3);
        let mut seen: Vec<String> = Vec::new();
        for (k, d) in all.iter().enumerate() {
            assert_eq!((usize::from(d.shard), usize::from(d.shards), d.seq), (k, 3, 7));
            assert!(!d.edges.is_empty() && d.edges.len() <= 2, "{:?}", d.edges.len());
            for (load, age) in &d.edges {
                let j: usize = load.edge[1..].parse().expect("an edge id");
                assert_eq!(u64::from(*age), 100 * j as u64, "{}'s age", load.edge);
                seen.push(load.edge.clone());
            }
        }
        seen.sort();
        assert_eq!(seen, ["e0", "e1", "e2", "e3", "e4"]);
        // A shard size of 0 is taken as 1; an age past the digest's 16 bits is capped.
        let old = [edge("x", &[0.01], 70_000)];
        let one = digests(&old, 0, 1);
        assert_eq!((one.len(), one[0].edges[0].1), (1, u16::MAX));
    }
}

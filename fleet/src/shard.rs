//! What a robot hears of a large site: the edges split into shards of balanced capacity, and
//! each robot listening to the digest of one shard (or a few) instead of every edge's report.
//!
//! Why shards of a per-site aggregate, not sampling d edges per decision: a robot routes on
//! reports, and a report heard only every few decisions is stale exactly when it matters; a
//! shard's digest carries all of its edges every period, so within its shard a robot routes with
//! the full information of a small site (the 1,000 robots x 50 edges case of `lop fleet-sim`),
//! at one message per period whatever the site's size. Shards are balanced by capacity so that
//! robots hashed evenly over them meet even load. The aggregator (`lop_runtime::fleet::site`, over [`crate::digest::digests`])
//! and the fleet simulator call these same functions, so what is simulated is what runs.

/// Splits servers of relative capacities `capacity` into shards of at most `shard_size`: as many
/// shards as that needs, the servers of each shard as even in number as can be, and the shards'
/// total capacities balanced (largest server first, each to the shard with room and least
/// capacity so far). Shards list server indices in ascending order; the same capacities give the
/// same shards. No servers, or a `shard_size` of 0 (taken as 1), still give at least one shard.
pub fn partition(capacity: &[f64], shard_size: usize) -> Vec<Vec<usize>> {
    let n = capacity.len();
    let k = n.div_ceil(shard_size.max(1)).max(1);
    let room = n.div_ceil(k).max(1);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| capacity[b].total_cmp(&capacity[a]).then(a.cmp(&b)));
    let mut shards: Vec<Vec<usize>> = vec![Vec::with_capacity(room); k];
    let mut total = vec![0.0f64; k];
    for j in order {
        let pick = (0..k).filter(|&s| shards[s].len() < room).min_by(|&a, &b| total[a].total_cmp(&total[b]).then(a.cmp(&b))).unwrap_or(0);
        shards[pick].push(j);
        total[pick] += capacity[j].max(0.0);
    }
    for s in &mut shards {
        s.sort_unstable();
    }
    shards
}

/// The shards a robot listens to: `heard` distinct shards of `shards` (fewer when there are
/// fewer), the first chosen by the robot's hash and the others spread from it by the hash too,
/// so that robots sharing a first shard do not all share the second.
pub fn robot_shards(robot_hash: u64, shards: usize, heard: usize) -> Vec<usize> {
    let k = shards.max(1);
    let first = (robot_hash % k as u64) as usize;
    let mut out = vec![first];
    if k > 1 {
        let step = 1 + ((robot_hash / k as u64) % (k as u64 - 1)) as usize;
        for m in 1..heard.min(k) {
            let next = (first + m * step) % k;
            if out.contains(&next) {
                // A step sharing a factor with k cycles early: fill with the next unused shard.
                let free = (0..k).map(|d| (next + d) % k).find(|s| !out.contains(s)).unwrap_or(next);
                out.push(free);
            } else {
                out.push(next);
            }
        }
    }
    out
}

/// A robot id's hash for [`robot_shards`] (FNV-1a: stable across builds and machines, so a
/// robot keeps its shards across restarts).
pub fn robot_hash(robot_id: &str) -> u64 {
    lop_core::content_hash::fnv1a(robot_id.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_bounded_even_and_balanced_by_capacity() {
        // 500 servers of speeds 1, 1, 0.5, 0.25 in a fixed mix.
        let cap: Vec<f64> = (0..500).map(|j| [1.0, 1.0, 0.5, 0.25][(j * 7 + j / 3) % 4]).collect();
        let shards = partition(&cap, 50);
        assert_eq!(shards.len(), 10);
        let mut seen: Vec<usize> = shards.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..500).collect::<Vec<_>>(), "every server in exactly one shard");
        assert!(shards.iter().all(|s| s.len() == 50));
        let totals: Vec<f64> = shards.iter().map(|s| s.iter().map(|&j| cap[j]).sum()).collect();
        let (lo, hi) = totals.iter().fold((f64::MAX, 0.0f64), |(l, h), &t| (l.min(t), h.max(t)));
        assert!(hi - lo <= 0.25 + 1e-9, "capacities {totals:?}");
        // Uneven counts: 7 servers in shards of at most 3 are 3 shards of 3, 2 and 2.
        let mut sizes: Vec<usize> = partition(&[1.0; 7], 3).iter().map(Vec::len).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, [2, 2, 3]);
        assert_eq!(partition(&[], 50), vec![Vec::<usize>::new()]);
        assert_eq!(partition(&[1.0, 2.0], 0).len(), 2);
    }

    #[test]
    fn robots_hear_distinct_shards_spread_evenly() {
        let mut first = [0usize; 10];
        for r in 0..10_000u64 {
            let h = robot_hash(&format!("robot-{r}"));
            let s = robot_shards(h, 10, 2);
            assert_eq!(s.len(), 2);
            assert_ne!(s[0], s[1]);
            first[s[0]] += 1;
        }
        assert!(first.iter().all(|&c| (900..=1100).contains(&c)), "{first:?}");
        assert_eq!(robot_shards(7, 1, 2), vec![0]);
        let mut all = robot_shards(5, 4, 9);
        all.sort_unstable();
        assert_eq!(all, [0, 1, 2, 3]);
        assert_eq!(robot_hash("a"), robot_hash("a"));
    }
}

//! `lop plan --activations FRAMES`: how compressible the values that cross the link in each
//! bucket's plan are on real frames, and the most a fast lossless code on them could save.
//!
//! For every value a bucket's plan sends (activations, not the frame), on every frame: the share
//! of zeros (ReLU outputs hold many) and LZ4's size over raw, on the float bytes as they are and
//! split into byte planes (floats compress better by plane), the better of the two kept. The
//! saving bound of a bucket is the link time of the bytes the code would remove,
//! `sum(bytes x (1 - ratio)) / bandwidth`, over the plan's makespan: the plan cannot get faster
//! than that by coding its crossing values, even with coding free (it is an upper bound: coding
//! costs time on both sides, and only link time on the critical path is saved).

use std::collections::BTreeMap;
use std::time::Instant;

use lop::graph::NodeId;
use lop::planner::table::ScheduleTable;
use lop::sim::Schedule;

/// What crossing values compress to, measured on the frames.
#[derive(Debug, Clone, Default)]
struct ValueStats {
    raw: u64,
    coded: u64,
    zeros: u64,
    elements: u64,
    code_s: f64,
}

/// The bytes as four byte planes (the first bytes of every float, then the second, ...).
fn planes(bytes: &[u8]) -> Vec<u8> {
    let n = bytes.len() / 4;
    let mut out = vec![0u8; bytes.len()];
    for (i, f) in bytes.chunks_exact(4).enumerate() {
        for (p, &b) in f.iter().enumerate() {
            out[p * n + i] = b;
        }
    }
    out
}

/// LZ4's size for `bytes` (the better of plain and byte planes), and the seconds to code and
/// decode it.
fn lz4_size(bytes: &[u8]) -> (usize, f64) {
    let t0 = Instant::now();
    let plain = lz4_flex::compress(bytes);
    let planar = lz4_flex::compress(&planes(bytes));
    let best = if planar.len() < plain.len() { &planar } else { &plain };
    let back = lz4_flex::decompress(best, bytes.len()).map(|v| v.len()).unwrap_or(0);
    debug_assert_eq!(back, bytes.len());
    (best.len(), t0.elapsed().as_secs_f64() / 2.0)
}

/// The study as JSON: per bucket the crossing activation bytes, their coded share and the saving
/// bound; per value the zeros and the coded ratio; and the verdict against `target` (3%).
///
/// # Errors
/// Frames that do not load, libtorch failures, plans that do not derive.
pub fn study(graph: &lop::Graph, table: &ScheduleTable, frames: &[Vec<u8>], target: f64) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(!frames.is_empty(), "--activations needs at least one frame");
    let codec = table.spec.frame.codec;
    // What each bucket's plan sends (activations only).
    let mut crossing: Vec<Vec<(NodeId, u64)>> = Vec::new();
    for e in &table.entries {
        let schedule = Schedule::derive(graph, &e.plan, table.spec.chunk_bounds, codec)?;
        crossing.push(schedule.transfers.iter().filter(|t| t.producer.is_some()).map(|t| (t.node, t.bytes as u64)).collect());
    }
    let wanted: std::collections::BTreeSet<NodeId> = crossing.iter().flatten().map(|&(n, _)| n).collect();
    let [input] = graph.inputs()[..] else { anyhow::bail!("--activations needs a model with one input") };
    let info = &graph.nodes[input].info;
    let dims: Vec<i64> = info.shape.iter().map(|&d| d as i64).collect();
    let mut stats: BTreeMap<NodeId, ValueStats> = BTreeMap::new();
    for frame in frames {
        let x = tch::Tensor::from_slice(frame).reshape(&dims);
        lop::exec::run_whole_seeing(graph, &[x], |id, t| {
            if !wanted.contains(&id) {
                return;
            }
            let Ok(t) = t.f_to_kind(tch::Kind::Float).and_then(|t| t.f_contiguous()) else { return };
            let n = t.numel();
            let mut v = vec![0f32; n];
            if t.f_copy_data(&mut v, n).is_err() {
                return;
            }
            let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
            let (size, secs) = lz4_size(&bytes);
            let s = stats.entry(id).or_default();
            s.raw += bytes.len() as u64;
            s.coded += size as u64;
            s.zeros += v.iter().filter(|&&f| f == 0.0).count() as u64;
            s.elements += n as u64;
            s.code_s += secs;
        })?;
    }
    let ratio = |id: NodeId| stats.get(&id).filter(|s| s.raw > 0).map_or(1.0, |s| s.coded as f64 / s.raw as f64);
    let mut buckets = Vec::new();
    let mut best_bound: f64 = 0.0;
    for (e, sent) in table.entries.iter().zip(&crossing) {
        let bytes: u64 = sent.iter().map(|&(_, b)| b).sum();
        let saved = sent.iter().fold(0.0, |acc, &(n, b)| acc + b as f64 * (1.0 - ratio(n)).max(0.0));
        let link = e.bandwidth_mb_s * 1e6;
        let bound = match (e.makespan_s, link > 0.0) {
            (Some(m), true) if m > 0.0 => saved / link / m,
            _ => 0.0,
        };
        best_bound = best_bound.max(bound);
        buckets.push(serde_json::json!({
            "bucket_mb_s": e.bucket_mb_s,
            "method": e.method,
            "activation_bytes": bytes,
            "coded_share": if bytes > 0 { (bytes as f64 - saved) / bytes as f64 } else { 1.0 },
            "saving_bound": bound,
        }));
    }
    let values: Vec<serde_json::Value> = stats
        .iter()
        .map(|(&id, s)| {
            serde_json::json!({
                "value": graph.nodes[id].name,
                "op": graph.nodes[id].op.kind_name(),
                "zeros": s.zeros as f64 / s.elements.max(1) as f64,
                "lz4_ratio": s.coded as f64 / s.raw.max(1) as f64,
                "lz4_mb_s": s.raw as f64 / 1e6 / s.code_s.max(1e-9),
            })
        })
        .collect();
    Ok(serde_json::json!({
        "frames": frames.len(),
        "values": values,
        "buckets": buckets,
        "largest_saving_bound": best_bound,
        "target": target,
        "worth_building": best_bound >= target,
    }))
}

/// Prints the study for people.
pub fn print(study: &serde_json::Value) {
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    println!("activations crossing the link, on {} frame(s) (LZ4, the better of plain and byte planes):", study["frames"]);
    for v in study["values"].as_array().into_iter().flatten() {
        println!(
            "  {:<40} {:<14} zeros {:>5.1}%  LZ4 {:.3} of raw at {:.0} MB/s",
            v["value"].as_str().unwrap_or("?"),
            v["op"].as_str().unwrap_or("?"),
            100.0 * f(&v["zeros"]),
            f(&v["lz4_ratio"]),
            f(&v["lz4_mb_s"])
        );
    }
    for b in study["buckets"].as_array().into_iter().flatten() {
        println!(
            "  bucket {:>5} MB/s ({}): {} activation bytes cross, coded to {:.3}: at most {:.2}% faster",
            b["bucket_mb_s"],
            b["method"].as_str().unwrap_or("?"),
            b["activation_bytes"],
            f(&b["coded_share"]),
            100.0 * f(&b["saving_bound"])
        );
    }
    println!(
        "largest saving bound {:.2}% (target {:.0}%): {}",
        100.0 * f(&study["largest_saving_bound"]),
        100.0 * f(&study["target"]),
        if study["worth_building"].as_bool() == Some(true) {
            "coding the crossing values could pay in some bucket"
        } else {
            "no bucket can gain that much by coding its crossing values, even with coding free"
        }
    );
}

#[cfg(test)]
mod tests {
    use super::{lz4_size, planes};

    #[test]
    fn relu_like_values_compress_and_noise_does_not() {
        let floats = |f: &dyn Fn(usize) -> f32| (0..4096).flat_map(|i| f(i).to_le_bytes()).collect::<Vec<u8>>();
        // Half zeros, the rest smooth: what a ReLU gives.
        let relu = floats(&|i| if (i / 64) % 2 == 0 { 0.0 } else { (i as f32 * 0.01).sin().abs() });
        let (size, _) = lz4_size(&relu);
        assert!((size as f64) < 0.7 * relu.len() as f64, "{size} of {}", relu.len());
        // Pseudo-random mantissas (their three low bytes do not compress).
        let mut rng = lop::Rng::new(0);
        let bits: Vec<u32> = (0..4096).map(|_| (rng.next_u64() >> 32) as u32 & 0x3FFF_FFFF).collect();
        let noise = floats(&|i| f32::from_bits(bits[i]));
        let (size, _) = lz4_size(&noise);
        assert!(size as f64 > 0.7 * noise.len() as f64, "{size} of {}", noise.len());
        // Byte planes: each float's first byte first.
        assert_eq!(planes(&[1, 2, 3, 4, 5, 6, 7, 8]), [1, 5, 2, 6, 3, 7, 4, 8]);
    }
}

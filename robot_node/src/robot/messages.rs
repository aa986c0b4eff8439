//! An answered frame as messages: its output tensors and a classifier's top-k, and the
//! `InferenceResult` published on /lop/inference (with the link time `lop_bandwidth` reads).

use std::time::Duration;

use lop_msgs::ros::msg::{ClassScore, OutputTensor};
use lop_runtime::client::InferenceStats;
use tch::{Kind, Tensor};

use crate::backend::{InferenceResult, Stamp, to_time};

/// Output tensors as messages, and the top-k of the first one (classifiers).
pub(super) fn outputs_msg(
    outputs: &[Tensor],
    names: &[String],
    top_k: usize,
) -> std::result::Result<(Vec<OutputTensor>, Vec<ClassScore>), tch::TchError> {
    let mut out = Vec::with_capacity(outputs.len());
    for (i, t) in outputs.iter().enumerate() {
        let t = t.f_to_device(tch::Device::Cpu)?.f_to_kind(Kind::Float)?.f_contiguous()?;
        let n = t.numel();
        let mut data = vec![0f32; n];
        t.f_copy_data(&mut data, n)?;
        let shape = t.size().iter().map(|&d| u32::try_from(d).unwrap_or(u32::MAX)).collect();
        out.push(OutputTensor { name: names.get(i).cloned().unwrap_or_else(|| format!("output{i}")), shape, data });
    }
    let mut top = Vec::new();
    if let Some(first) = out.first()
        && top_k > 0
        && first.data.len() > 1
        && first.shape.iter().filter(|&&d| d > 1).count() == 1
    {
        let mut idx: Vec<usize> = (0..first.data.len()).collect();
        idx.sort_by(|&a, &b| first.data[b].total_cmp(&first.data[a]));
        top = idx
            .into_iter()
            .take(top_k)
            .map(|i| ClassScore { class_id: u32::try_from(i).unwrap_or(u32::MAX), score: first.data[i], label: String::new() })
            .collect();
    }
    Ok((out, top))
}

/// The `InferenceResult` of an answered frame: its header, times, model, link and plan, the
/// outputs and their top-k.
#[allow(clippy::too_many_arguments)]
pub(super) fn result_msg(
    s: &InferenceStats,
    header: crate::backend::Header,
    (started, finished): (std::time::SystemTime, std::time::SystemTime),
    input_kind: u8,
    model_name: &str,
    model_hash: &str,
    mbps: f64,
    latency: Duration,
    (outputs, top_k): (Vec<OutputTensor>, Vec<ClassScore>),
) -> InferenceResult {
    let server = s.server_compute_s.unwrap_or(0.0);
    InferenceResult {
        header: hiroz_msgs::std_msgs::Header { stamp: to_time(header.stamp), frame_id: header.frame_id },
        inference_id: s.id,
        started: to_time(Stamp::from_system(started)),
        finished: to_time(Stamp::from_system(finished)),
        model_name: model_name.to_string(),
        model_sha256: model_hash.to_string(),
        input_kind,
        latency_s: latency.as_secs_f64(),
        robot_compute_s: s.robot_compute_s,
        server_compute_s: server,
        waiting_s: s.robot_wait_s,
        transfer_s: transfer_seconds(s),
        bytes_up: s.bytes_up,
        bytes_down: s.bytes_down,
        bandwidth_bucket: s.bucket,
        bandwidth_mbps: mbps,
        plan_hash: s.plan_hash.clone(),
        method: s.method.clone(),
        fallback: s.fallback,
        fallback_reason: s.fallback_reason.clone().unwrap_or_default(),
        outputs,
        top_k,
    }
}

/// Seconds the inference's transfers held the link, for /lop/inference's `transfer_s` (which
/// `lop_bandwidth` turns into a passive sample, bytes over seconds): the bytes at the upload rate
/// the edge saw, where the link limited the upload
/// ([`lop_runtime::bandwidth::upload`]); else the share of the robot's wait that the server's
/// compute does not explain, which also counts the edge's queueing as transfer and so reads a
/// busy edge as a slow link.
fn transfer_seconds(s: &InferenceStats) -> f64 {
    match s.upload_mbps() {
        Some(m) if m > 0.0 => (s.bytes_up + s.bytes_down) as f64 * 8.0 / (m * 1e6),
        _ => (s.robot_wait_s - s.server_compute_s.unwrap_or(0.0)).max(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame that queued 0.6 s behind others on the edge: its link time is the upload's 0.3 s
    /// (1 MB at 26.7 Mbit/s as the edge saw it arrive), not the 0.9 s of wait the edge's
    /// compute leaves unexplained, which a frame without the edge's measurement still reports.
    #[test]
    fn transfer_time_is_the_uploads_not_the_edges_queue() {
        let mut s = InferenceStats {
            id: 1,
            method: "server-only".into(),
            bucket: 0,
            bucket_mb_s: 8.0,
            plan_hash: String::new(),
            fallback: false,
            fallback_reason: None,
            total_s: 1.1,
            robot_compute_s: 0.0,
            robot_overruns: 0,
            robot_overrun_s: 0.0,
            robot_coding_s: 0.0,
            frame_coded: false,
            frame_ratio: None,
            robot_wait_s: 1.0,
            server_compute_s: Some(0.1),
            bytes_up: 1_000_000,
            bytes_down: 0,
            predicted_s: None,
            upload_s: Some(0.3),
            send_span_s: Some(0.0),
        };
        assert!((transfer_seconds(&s) - 0.3).abs() < 1e-9, "{}", transfer_seconds(&s));
        s.upload_s = None;
        assert!((transfer_seconds(&s) - 0.9).abs() < 1e-9, "{}", transfer_seconds(&s));
    }
}

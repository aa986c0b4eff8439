//! The robot's upload rate to one edge, read from one inference: the edge reports how long the
//! upload took as it saw it (Done's `upload_ns`, from the Start's arrival to the last band's), and
//! the robot knows when it handed its last band to the link. A fleet robot keeps these per edge
//! (`crate::fleet::links`): its own link estimate says nothing of the path behind the access
//! point to each edge.
//!
//! Both clocks are the sender's and the receiver's own, so no clock sync is needed: the edge
//! measures an interval between two arrivals, the robot one between two sends. Queueing and
//! compute on the edge do not enter (the edge takes arrivals as they come, whatever its replicas
//! are doing), which the robot's own wait minus the edge's compute cannot say.

/// Uploads smaller than this are not read as a rate: the Start and the first bytes' latency
/// dominate (the monitor's passive threshold).
pub const MIN_UPLOAD_BYTES: u64 = 64 << 10;

/// The sends must end within this fraction of the arrival span for the span to measure the link
/// rather than the robot's compute (a plan whose robot bands leave late).
pub const MAX_SEND_FRACTION: f64 = 0.25;

/// Mbit/s of the upload of `bytes` that the edge saw arrive over `upload_s` seconds, the robot
/// having sent the last of them `send_span_s` after its Start; `None` where the span does not
/// measure the link: fewer than [`MIN_UPLOAD_BYTES`], an unmeasured or non-positive span, or
/// sends that ended later than [`MAX_SEND_FRACTION`] of the span (the robot paced the upload).
///
/// With every band sent at once, the last arrives after the link carried them all: the span is
/// the upload's time on the link (latency cancels between the two arrivals). Sends spread over
/// `s` leave the link busy for at least `span - s` carrying at most `bytes`, so the figure is
/// within `1 / (1 - MAX_SEND_FRACTION)` of the rate, on the low side.
pub fn upload_mbps(bytes: u64, upload_s: f64, send_span_s: f64) -> Option<f64> {
    let usable = bytes >= MIN_UPLOAD_BYTES
        && upload_s.is_finite()
        && upload_s > 0.0
        && send_span_s.is_finite()
        && send_span_s >= 0.0
        && send_span_s <= MAX_SEND_FRACTION * upload_s;
    usable.then(|| bytes as f64 * 8.0 / upload_s / 1e6)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_link_limited_upload_reads_as_its_rate() {
        // 1 MB in 0.8 s, all sent at once: 10 Mbit/s.
        let r = upload_mbps(1_000_000, 0.8, 0.0).unwrap();
        assert!((r - 10.0).abs() < 1e-9, "{r}");
        // Sent over a fifth of the span: still the link's.
        assert!(upload_mbps(1_000_000, 0.8, 0.16).is_some());
    }

    #[test]
    fn paced_small_or_unmeasured_uploads_are_not_read() {
        assert_eq!(upload_mbps(1_000_000, 0.8, 0.5), None, "the robot's compute paced it");
        assert_eq!(upload_mbps(MIN_UPLOAD_BYTES - 1, 0.8, 0.0), None, "too small");
        assert_eq!(upload_mbps(1_000_000, 0.0, 0.0), None, "no band arrived");
        assert_eq!(upload_mbps(1_000_000, f64::NAN, 0.0), None);
        assert_eq!(upload_mbps(1_000_000, 0.8, -1.0), None);
    }
}

//! The running estimate of how much a coded frame shrinks (coded bytes over raw bytes) from the
//! frames the robot actually sends, and the bandwidth at which the schedule table is read so
//! that the plan fits that ratio.
//!
//! The table prices the frame at the ratio its profile measured. Compression depends on the
//! scene: a textured street codes larger than a white corridor. When frames code `k` times
//! larger than priced, the frame's upload takes as long as the priced frame's would on a link
//! `k` times slower, so the robot reads the table at `bandwidth / k`, the entry whose plan was
//! priced for that upload time (an effective bandwidth: activations crossing the link are then
//! priced a little pessimistically, which costs a plan nothing when the frame dominates the
//! upload, as it does where coding matters).

/// Weight of the newest frame in the moving average.
const ALPHA: f64 = 0.25;

/// The estimate never moves the effective bandwidth more than this factor either way (one odd
/// frame, a blank image, must not send the robot to the table's ends).
const MAX_FACTOR: f64 = 8.0;

/// Frames within this fraction of the priced ratio read the table as priced: scenes vary a
/// little from frame to frame, and a plan priced a few percent off is still the right one.
const DEAD_BAND: f64 = 0.15;

/// Coded bytes over raw bytes of the frames sent, against the ratio the table priced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FrameRatio {
    priced: f64,
    seen: Option<f64>,
}

impl FrameRatio {
    /// An estimate for a table that priced frames at `priced` (1 for raw frames: the estimate
    /// then stays out of the way).
    pub fn new(priced: f64) -> FrameRatio {
        let priced = if priced.is_finite() && priced > 0.0 { priced } else { 1.0 };
        FrameRatio { priced, seen: None }
    }

    /// The estimate for a table that priced frames at `priced`, keeping the frames seen.
    pub fn repriced(self, priced: f64) -> FrameRatio {
        FrameRatio { seen: self.seen, ..FrameRatio::new(priced) }
    }

    /// Records one frame's coded input: `coded` bytes on the wire for `raw` bytes of pixels.
    /// Frames that sent no input rows (`raw == 0`) say nothing and are ignored.
    pub fn record(&mut self, coded: u64, raw: u64) {
        if raw == 0 {
            return;
        }
        let r = coded as f64 / raw as f64;
        self.seen = Some(match self.seen {
            Some(s) => s + ALPHA * (r - s),
            None => r,
        });
    }

    /// The ratio the frames show, once one has been sent.
    pub fn seen(&self) -> Option<f64> {
        self.seen
    }

    /// The ratio the table priced.
    pub fn priced(&self) -> f64 {
        self.priced
    }

    /// The bandwidth (table units) at which to read the table for a link of `mb_s`: `mb_s`
    /// scaled by priced over seen, within [`MAX_FACTOR`] either way; unscaled while the frames
    /// code within [`DEAD_BAND`] of the price.
    pub fn effective_mb_s(&self, mb_s: f64) -> f64 {
        match self.seen {
            Some(seen) if seen > 0.0 && mb_s.is_finite() && (seen / self.priced - 1.0).abs() > DEAD_BAND => {
                mb_s * (self.priced / seen).clamp(1.0 / MAX_FACTOR, MAX_FACTOR)
            }
            _ => mb_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FrameRatio;

    #[test]
    fn frames_coding_larger_than_priced_read_the_table_at_a_slower_link() {
        let mut r = FrameRatio::new(0.1);
        assert_eq!(r.effective_mb_s(20.0), 20.0, "nothing seen yet: the link as measured");
        r.record(0, 0);
        assert_eq!(r.seen(), None, "a frame that sent no rows says nothing");
        r.record(200, 1000);
        assert_eq!(r.seen(), Some(0.2));
        assert!((r.effective_mb_s(20.0) - 10.0).abs() < 1e-12, "twice the bytes: half the link");
        // The average follows new frames gradually.
        r.record(50, 1000);
        let s = r.seen().unwrap_or(0.0);
        assert!(s < 0.2 && s > 0.05, "{s}");
        // A blank frame cannot send the robot past the bound.
        let mut blank = FrameRatio::new(0.1);
        blank.record(1, 1_000_000);
        assert!((blank.effective_mb_s(20.0) - 160.0).abs() < 1e-9);
        // Raw frames (priced at 1, coded at 1) leave the link alone.
        let mut raw = FrameRatio::new(1.0);
        raw.record(1000, 1000);
        assert_eq!(raw.effective_mb_s(7.0), 7.0);
        assert_eq!(FrameRatio::new(f64::NAN).priced(), 1.0);
        // Frames a little off the price read the table as priced.
        let mut near = FrameRatio::new(0.1);
        near.record(110, 1000);
        assert_eq!(near.effective_mb_s(20.0), 20.0);
        // A new table keeps what the frames showed.
        let again = r.repriced(0.05);
        assert_eq!((again.priced(), again.seen()), (0.05, r.seen()));
    }
}

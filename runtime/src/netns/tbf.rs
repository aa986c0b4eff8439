//! The token bucket filter's parameters for a rate: the clamped rate, the burst and the queue
//! limit given to `tc` (the module docs of [`netns`](super) say why `tbf` and these sizes).

/// The lowest rate given to `tc`, bit/s: a trace rate of 0 (an outage) is clamped to it.
pub const MIN_RATE_BITS: u64 = 8_000;

/// The highest rate given to `tc`, bit/s (100 Gbit/s); higher rates are clamped to it.
pub const MAX_RATE_BITS: u64 = 100_000_000_000;

/// One Ethernet frame at a 1500-byte MTU, bytes.
const FRAME_BYTES: u64 = 1514;
/// The `tbf` parameters for a rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TbfParams {
    pub(super) rate_bits: u64,
    pub(super) burst_bytes: u64,
    pub(super) limit_bytes: u64,
}

impl TbfParams {
    pub(super) fn for_mbit(mbit: f64) -> TbfParams {
        // NaN and negatives map to the floor; `as` saturates.
        let bits = if mbit.is_finite() && mbit > 0.0 { (mbit * 1e6).round() as u64 } else { 0 };
        let rate_bits = bits.clamp(MIN_RATE_BITS, MAX_RATE_BITS);
        let bytes_per_s = rate_bits / 8;
        TbfParams { rate_bits, burst_bytes: (bytes_per_s / 500).max(3200), limit_bytes: (bytes_per_s / 10).max(4 * FRAME_BYTES) }
    }
}

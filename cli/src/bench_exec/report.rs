//! What `lop bench-exec` measured, printed as text or as one JSON object.

use super::{CallFloor, KindTime};
use lop::exec::Joins;
use lop::ops::PackingStats;

/// Every figure of one `lop bench-exec` run.
pub(super) struct Report {
    pub model: String,
    pub layout: &'static str,
    pub bands: usize,
    pub runs: usize,
    pub whole_ms: f64,
    pub one_band_ms: f64,
    pub chunked_ms: f64,
    pub unbuffered_ms: f64,
    pub kinds: Vec<KindTime>,
    pub joins: Joins,
    pub unbuffered_joins: Joins,
    pub whole_peak: usize,
    pub even_peak: usize,
    pub random_peak: usize,
    pub packing: PackingStats,
    pub floor: CallFloor,
}

impl Report {
    fn peak_ratio(&self, split: usize) -> f64 {
        split as f64 / self.whole_peak.max(1) as f64
    }

    /// The JSON object (`cli/tests/cli.rs` checks its keys).
    pub fn json(&self) -> serde_json::Value {
        let kinds: Vec<serde_json::Value> = self
            .kinds
            .iter()
            .map(|k| serde_json::json!({"kind": k.kind, "ops": k.ops, "ms": k.whole_ms, "banded_kernel_ms": k.banded_ms}))
            .collect();
        let (j, u, f, p) = (&self.joins, &self.unbuffered_joins, &self.floor, &self.packing);
        serde_json::json!({
            "model": self.model, "layout": self.layout, "whole_ms": self.whole_ms, "banded_ms": self.one_band_ms,
            "ratio": self.one_band_ms / self.whole_ms, "bands": self.bands, "chunked_ms": self.chunked_ms,
            "chunked_ratio": self.chunked_ms / self.whole_ms, "kinds": kinds,
            "peak_mem_ratio": self.peak_ratio(self.even_peak), "peak_mem_ratio_random_layout": self.peak_ratio(self.random_peak),
            "whole_peak_bytes": self.whole_peak, "split_peak_bytes": self.even_peak,
            "runs": self.runs, "threads": tch::get_num_threads(),
            "joined_copies": j.copies, "joined_bytes": j.bytes, "joined_ms": j.seconds * 1e3,
            "unbuffered_chunked_ms": self.unbuffered_ms, "unbuffered_joined_copies": u.copies,
            "unbuffered_joined_bytes": u.bytes, "unbuffered_joined_ms": u.seconds * 1e3,
            "packing": {"shapes": p.shapes, "formats": p.formats, "plain_calls": p.plain_calls},
            "conv_call_floor_ms": f.conv_ms, "banded_convs": f.convs,
            "linear_call_floor_ms": f.linear_ms, "banded_linears": f.linears, "chunked_floor_ratio": f.ratio,
            "linear_activations": lop::ops::route_choices(),
            "direct_linears": lop::ops::kept_linears(),
        })
    }

    /// The text report: ratios first, then what explains them.
    pub fn print(&self) {
        let (whole_ms, f) = (self.whole_ms, &self.floor);
        println!(
            "{} ({}): whole {whole_ms:.2} ms, one-band executor {:.2} ms, ratio {:.3}",
            self.model,
            self.layout,
            self.one_band_ms,
            self.one_band_ms / whole_ms
        );
        println!("every op in {} bands: {:.2} ms, ratio {:.3}", self.bands, self.chunked_ms, self.chunked_ms / whole_ms);
        println!(
            "a call costs at least {:.1} us per convolution, {:.1} us per linear layer (16 channels, one pixel): {} convolutions and {} linear layers x {} extra bands set the banded ratio's floor at {:.3}",
            f.conv_ms * 1e3,
            f.linear_ms * 1e3,
            f.convs,
            f.linears,
            self.bands.saturating_sub(1),
            f.ratio
        );
        let (j, u) = (&self.joins, &self.unbuffered_joins);
        println!(
            "bands read across chunks and copied together: {} ({:.1} MB, {:.2} ms) with chunks written into one buffer per value; without: {} ({:.1} MB, {:.2} ms), every op in bands {:.2} ms",
            j.copies,
            j.bytes as f64 / 1e6,
            j.seconds * 1e3,
            u.copies,
            u.bytes as f64 / 1e6,
            u.seconds * 1e3,
            self.unbuffered_ms
        );
        println!(
            "prepacked convolution weights: {} input shapes, {} packed copies, {} calls on libtorch's plain path; {} linear layers straight on oneDNN",
            self.packing.shapes,
            self.packing.formats,
            self.packing.plain_calls,
            lop::ops::kept_linears()
        );
        for c in lop::ops::route_choices() {
            let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |m| format!("{m:.3} ms"));
            let how = if c.fused { "oneDNN post-op" } else { "own kernel after the product" };
            println!("linear layers' {}: {how} (measuring layer: post-op {}, own kernel after {})", c.act, ms(c.fused_ms), ms(c.apart_ms));
        }
        self.print_kinds();
        println!(
            "peak activation memory: whole {} B, even split (both sides) {} B, ratio {:.2}; random layout ratio {:.2}",
            self.whole_peak,
            self.even_peak,
            self.peak_ratio(self.even_peak),
            self.peak_ratio(self.random_peak)
        );
    }

    fn print_kinds(&self) {
        if self.kinds.is_empty() {
            return;
        }
        let kernels: f64 = self.kinds.iter().map(|k| k.banded_ms).sum();
        println!(
            "  kernels alone in {} bands: {kernels:.2} ms ({:.3} of whole); the executor's assembly adds {:.2} ms",
            self.bands,
            kernels / self.whole_ms,
            self.chunked_ms - kernels
        );
        println!("  {:<20} {:>8} {:>9} {:>7} {:>10} {:>6}", "kind", "ops", "whole ms", "share", "banded ms", "ratio");
        for k in &self.kinds {
            println!(
                "  {:<20} {:>4} ops {:>9.3} {:>6.1}% {:>10.3} {:>6.2}",
                k.kind,
                k.ops,
                k.whole_ms,
                100.0 * k.whole_ms / self.whole_ms,
                k.banded_ms,
                k.banded_ms / k.whole_ms.max(1e-9)
            );
        }
    }
}

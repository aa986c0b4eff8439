//! Standalone padding (ONNX `Pad` that could not be folded into a convolution or pooling).
//! On the row axis it is a halo of known rows: output row `r` is input row `r - begin` (or a
//! fill, a mirrored row, or the border row), so a band of output rows needs only the input rows
//! those map to, and any split reproduces the whole output.

use super::BandIn;
use crate::rows::{Footprint, Rows};
use crate::value::ValueInfo;
use tch::Tensor;

/// What fills the padded positions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PadMode {
    /// A constant value.
    Constant(f32),
    /// The input mirrored about its border, the border itself excluded (`dcb|abcd|cba`).
    Reflect,
    /// The border value repeated (`aa|abcd|dd`).
    Edge,
}

/// Pads on every axis of a value.
#[derive(Debug, Clone, PartialEq)]
pub struct Pad {
    /// Elements added before each axis.
    pub begin: Vec<usize>,
    /// Elements added after each axis.
    pub end: Vec<usize>,
    /// The fill.
    pub mode: PadMode,
}

impl Pad {
    /// The output: each axis grows by its pads; the row axis stays where it is.
    pub(super) fn infer(&self, x: &ValueInfo) -> Result<ValueInfo, String> {
        let rank = x.shape.len();
        if self.begin.len() != rank || self.end.len() != rank {
            return Err(format!("{} leading and {} trailing pads for a value of rank {rank}", self.begin.len(), self.end.len()));
        }
        let mut shape = Vec::with_capacity(rank);
        for (a, &n) in x.shape.iter().enumerate() {
            let (b, e) = (self.begin[a], self.end[a]);
            match self.mode {
                PadMode::Reflect if (b > 0 || e > 0) && (b >= n || e >= n) => {
                    return Err(format!("reflect pads ({b}, {e}) on axis {a} of extent {n}: a mirror needs pads smaller than the extent"));
                }
                PadMode::Edge if n == 0 && b + e > 0 => return Err(format!("edge pads on axis {a} of extent 0")),
                _ => {}
            }
            shape.push(n + b + e);
        }
        Ok(ValueInfo { shape, ..x.clone() })
    }

    /// The input index an output index `o` of axis `a` reads (`None`: a constant fill).
    fn source(&self, a: usize, n: usize, o: usize) -> Option<usize> {
        let i = o as i64 - self.begin[a] as i64;
        let last = n as i64 - 1;
        match self.mode {
            PadMode::Constant(_) => (0..=last).contains(&i).then_some(i as usize),
            PadMode::Edge => Some(i.clamp(0, last) as usize),
            PadMode::Reflect if i < 0 => Some((-i) as usize),
            PadMode::Reflect if i > last => Some((2 * last - i) as usize),
            PadMode::Reflect => Some(i as usize),
        }
    }

    /// The input rows that output rows `rows` read. A constant fill row is said to read the
    /// nearest edge row, which it does not need: then every output row reads a non-empty range
    /// whose ends never decrease, the structure the server-pipelining bound and the fleet's
    /// price list rely on (a letterbox's margins would otherwise read nothing), at the price
    /// of one row a margin's band waits for.
    pub(super) fn footprint(&self, input: &ValueInfo, rows: &Rows) -> Footprint {
        let Some(ra) = input.row_axis else { return Footprint::Broadcast };
        let n = input.shape[ra];
        let nearest = |o: usize| (n > 0).then(|| (o as i64 - self.begin[ra] as i64).clamp(0, n as i64 - 1) as usize);
        let sources = rows.clone().filter_map(|o| self.source(ra, n, o).or_else(|| nearest(o)));
        let (lo, hi) = sources.fold((usize::MAX, 0), |(lo, hi), i| (lo.min(i), hi.max(i + 1)));
        if lo >= hi { Footprint::Rows(0..0) } else { Footprint::Rows(lo..hi) }
    }

    /// Output rows `rows` from a band holding at least their footprint.
    pub(super) fn compute(&self, b: &BandIn<'_>, rows: &Rows) -> Result<Tensor, tch::TchError> {
        let mut x = b.tensor.shallow_clone();
        for a in 0..b.info.shape.len() {
            let n = b.info.shape[a];
            let (want, held_start) =
                if Some(a) == b.info.row_axis { (rows.clone(), b.start) } else { (0..n + self.begin[a] + self.end[a], 0) };
            if Some(a) != b.info.row_axis && self.begin[a] == 0 && self.end[a] == 0 {
                continue;
            }
            x = self.pad_axis(&x, a, n, held_start, &want)?;
        }
        Ok(x)
    }

    /// Output indices `want` of axis `a` (input extent `n`), from `x`, which holds input indices
    /// from `held_start` on along that axis.
    fn pad_axis(&self, x: &Tensor, a: usize, n: usize, held_start: usize, want: &Rows) -> Result<Tensor, tch::TchError> {
        if let PadMode::Constant(value) = self.mode {
            let inside = want.start.max(self.begin[a])..want.end.min(self.begin[a] + n);
            let mut size = x.size();
            if inside.start >= inside.end {
                size[a] = want.len() as i64;
                return Tensor::f_full(size.as_slice(), f64::from(value), (x.kind(), x.device()));
            }
            let first = (inside.start - self.begin[a] - held_start) as i64;
            let core = x.f_narrow(a as i64, first, inside.len() as i64)?;
            let (before, after) = ((inside.start - want.start) as i64, (want.end - inside.end) as i64);
            if before == 0 && after == 0 {
                return Ok(core);
            }
            // constant_pad_nd lists pads from the last axis backwards.
            let mut pads = vec![0i64; 2 * (x.dim() - a)];
            let k = 2 * (x.dim() - 1 - a);
            (pads[k], pads[k + 1]) = (before, after);
            return core.f_pad(pads.as_slice(), "constant", f64::from(value));
        }
        let idx: Vec<i64> = want.clone().map(|o| self.source(a, n, o).map_or(0, |i| (i - held_start) as i64)).collect();
        let idx = Tensor::f_from_slice(&idx)?.f_to_device(x.device())?;
        x.f_index_select(a as i64, &idx)
    }
}

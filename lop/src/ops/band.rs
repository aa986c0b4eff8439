//! One input band of an op's computation: rows of a value along its row axis. Its own module,
//! importing nothing of `ops`, so that the back-end stages (`crate::postprocess`), which an
//! [`Op`](super::Op) holds, can compute from bands without importing the ops that hold them.

use crate::rows::Rows;
use crate::value::ValueInfo;
use tch::Tensor;

/// One input band handed to [`Op::compute`](super::Op::compute): a tensor holding rows `[start, start + n)` of an
/// input value along its row axis (or the whole value when it has no row axis).
#[derive(Debug)]
pub struct BandIn<'a> {
    /// The rows held.
    pub tensor: &'a Tensor,
    /// The first row held.
    pub start: usize,
    /// The full value's description.
    pub info: &'a ValueInfo,
}

impl BandIn<'_> {
    /// The given rows of this input (a view, no copy). Values without a row axis are returned
    /// whole.
    pub(crate) fn rows(&self, rows: &Rows) -> Result<Tensor, tch::TchError> {
        match self.info.row_axis {
            Some(a) => self.rows_on(a, rows),
            None => Ok(self.tensor.shallow_clone()),
        }
    }

    /// The given rows along `axis`, counted from [`BandIn::start`].
    pub(crate) fn rows_on(&self, axis: usize, rows: &Rows) -> Result<Tensor, tch::TchError> {
        let have = self.tensor.size().get(axis).copied().unwrap_or(1) as usize;
        if rows.start < self.start || rows.end > self.start + have {
            return Err(tch::TchError::Shape(format!(
                "band holds rows {}..{} but rows {:?} were asked for",
                self.start,
                self.start + have,
                rows
            )));
        }
        if rows.start == self.start && rows.len() == have {
            return Ok(self.tensor.shallow_clone());
        }
        self.tensor.f_narrow(axis as i64, (rows.start - self.start) as i64, rows.len() as i64)
    }

    /// The whole value (the band must hold all of it).
    pub(crate) fn whole(&self) -> Result<Tensor, tch::TchError> {
        let rows = 0..self.info.rows();
        self.rows(&rows)
    }
}

//! A band received from the peer and matched to its transfer: its payload turned into the
//! tensor of its rows (raw elements cast back to the node's dtype, or a coded frame band decoded
//! and its digest checked by [`super::coded`]).

use std::ops::Range;

use lop::graph::NodeId;
use lop::rows::Rows;
use lop_msgs::protocol::DType;
use tch::{Device, Tensor};

use super::camera::CameraHeaders;
use super::wire::{GraphMeta, kind_of, torch, wire_dtype};
use crate::error::Result;

/// A band received and matched to its transfer, payload still in the frame's bytes.
#[derive(Debug)]
pub struct ReceivedBand {
    /// Index into [`lop::sim::Schedule::transfers`].
    pub transfer: u32,
    /// The whole frame.
    pub frame: Vec<u8>,
    /// Where the payload lies in `frame`.
    pub payload: Range<usize>,
    /// Wire dtype.
    pub dtype: DType,
    /// Wire shape.
    pub shape: Vec<u32>,
    /// How its rows are coded.
    pub coding: lop_msgs::protocol::Coding,
}

impl ReceivedBand {
    /// The band as a tensor of node `id`'s dtype and shape for its rows, on `device` (a coded
    /// band decoded, its digest checked: [`super::coded::decode_coded_band`]; `headers` are the
    /// inference's camera headers so far).
    ///
    /// # Errors
    /// `Error::Executor` for libtorch failures; `Error::InputMismatch` for a coded band that
    /// does not decode to the robot's pixels.
    pub fn tensor(&self, meta: &GraphMeta, (id, rows): (NodeId, &Rows), device: Device, headers: &mut CameraHeaders) -> Result<Tensor> {
        if self.coding != lop_msgs::protocol::Coding::Raw {
            let payload = &self.frame[self.payload.clone()];
            return super::coded::decode_coded_band(meta, (id, rows), self.coding, payload, device, headers);
        }
        let kind = kind_of(self.dtype)?;
        let info = meta.info(id);
        let dims: Vec<i64> = match info.row_axis {
            Some(a) => info.shape.iter().enumerate().map(|(i, &d)| if i == a { rows.len() } else { d } as i64).collect(),
            None => info.shape.iter().map(|&d| d as i64).collect(),
        };
        let want = wire_dtype(info.dtype).and_then(kind_of)?;
        Tensor::f_from_data_size(&self.frame[self.payload.clone()], &dims, kind)
            .and_then(|t| if kind == want { Ok(t) } else { t.f_to_kind(want) })
            .and_then(|t| t.f_to_device(device))
            .map_err(torch("band from bytes"))
    }
}

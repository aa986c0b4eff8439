//! Tensors on the wire: one [`Band`](lop_msgs::protocol::Band) frame per transfer, built and
//! checked against the schedule, so that only the bands a plan expects are ever accepted.

use std::collections::HashMap;

use lop::graph::{DType as GraphDType, Graph, NodeId, ValueInfo};
use lop::rows::Rows;
use lop::sim::Schedule;
use lop_msgs::protocol::{BandHeader, Coding, DType, encode_band_header};
use tch::{Device, Kind, Tensor};

use crate::error::{Error, Result};

/// How graph inputs travel: as their own dtype (raw uint8 frames as uint8, the default) or as
/// float32 (the paper's setting, four bytes per pixel; values are exact, the receiver casts back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum InputWire {
    /// The input's own dtype.
    #[default]
    Native,
    /// Float32 elements.
    F32,
}

/// The band coding that carries `codec`'s units (`Raw` for raw frames).
pub fn coding_of(codec: lop::codec::FrameCodec) -> Coding {
    use lop::codec::FrameCodec;
    match codec {
        FrameCodec::Raw => Coding::Raw,
        FrameCodec::Lossless => Coding::Qoi,
        FrameCodec::Jpeg { .. } => Coding::JpegScan,
        FrameCodec::Passthrough => Coding::Camera,
    }
}

/// What a band of one transfer must look like on the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    /// Index into [`Schedule::transfers`].
    pub transfer: u32,
    /// Wire dtype.
    pub dtype: DType,
    /// Wire shape.
    pub shape: Vec<u32>,
    /// How its rows are coded (a coded frame's input bands; raw otherwise).
    pub coding: lop_msgs::protocol::Coding,
}

impl Expected {
    /// Whether a band coded as `coding` fits: the expected coding, or, where the camera's own
    /// JPEG is expected (`passthrough`), its restart intervals (a band of a cut frame) or the
    /// lossless code a robot sends for a frame it holds no camera JPEG of (a raw camera topic)
    /// or cannot cut.
    pub fn accepts(&self, coding: lop_msgs::protocol::Coding) -> bool {
        use lop_msgs::protocol::Coding;
        coding == self.coding || (self.coding == Coding::Camera && matches!(coding, Coding::Qoi | Coding::CameraScan))
    }
}

/// The per-node facts a band needs, copied out of the graph (whose tensors cannot be shared
/// across threads): shapes, dtypes, row axes, and which nodes are graph inputs.
#[derive(Debug, Clone)]
pub struct GraphMeta {
    infos: Vec<ValueInfo>,
    is_input: Vec<bool>,
}

impl GraphMeta {
    /// The facts of `graph`.
    pub fn of(graph: &Graph) -> GraphMeta {
        GraphMeta {
            infos: graph.nodes.iter().map(|n| n.info.clone()).collect(),
            is_input: graph.nodes.iter().map(|n| matches!(n.op, lop::ops::Op::Input)).collect(),
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.infos.len()
    }

    /// Whether the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.infos.is_empty()
    }

    /// Whether node `id` is a graph input.
    pub fn is_input(&self, id: NodeId) -> bool {
        self.is_input[id]
    }

    /// Node `id`'s value.
    pub fn info(&self, id: NodeId) -> &ValueInfo {
        &self.infos[id]
    }

    /// The wire dtype of node `id`'s rows.
    pub fn wire_dtype(&self, id: NodeId, input: InputWire) -> Result<DType> {
        if self.is_input[id] && input == InputWire::F32 {
            return Ok(DType::F32);
        }
        wire_dtype(self.infos[id].dtype)
    }

    /// The wire shape of rows `rows` of node `id`: the value's shape with the row axis cut to
    /// the rows, or, for a value without a row axis, its shape behind a leading axis of 1.
    pub fn wire_shape(&self, id: NodeId, rows: &Rows) -> (Vec<u32>, u8) {
        let info = &self.infos[id];
        match info.row_axis {
            Some(a) => (info.shape.iter().enumerate().map(|(i, &d)| if i == a { rows.len() } else { d } as u32).collect(), a as u8),
            None => (std::iter::once(1).chain(info.shape.iter().map(|&d| d as u32)).collect(), 0),
        }
    }

    /// The header of a band of rows `rows` of node `id` of inference `inference_id`, its payload
    /// of `dtype` coded as `coding`.
    pub fn band_header(&self, inference_id: u64, id: NodeId, rows: &Rows, dtype: DType, coding: lop_msgs::protocol::Coding) -> BandHeader {
        let (shape, row_axis) = self.wire_shape(id, rows);
        BandHeader {
            inference_id,
            tensor_id: id as u32,
            row_start: rows.start as u32,
            row_end: rows.end as u32,
            row_axis,
            dtype,
            shape,
            coding,
        }
    }

    /// For each direction (`true` = up), the expected band of every transfer keyed by
    /// `(tensor id, row start, row end)`.
    pub fn expectations(
        &self,
        schedule: &Schedule,
        input: InputWire,
        codec: lop::codec::FrameCodec,
    ) -> Result<HashMap<(bool, u32, u32, u32), Expected>> {
        let mut out = HashMap::with_capacity(schedule.transfers.len());
        for (i, t) in schedule.transfers.iter().enumerate() {
            let (shape, _) = self.wire_shape(t.node, &t.rows);
            let coded = codec.is_coded() && t.up && t.producer.is_none() && self.is_input[t.node];
            let (dtype, coding) =
                if coded { (DType::U8, coding_of(codec)) } else { (self.wire_dtype(t.node, input)?, lop_msgs::protocol::Coding::Raw) };
            let e = Expected { transfer: i as u32, dtype, shape, coding };
            out.insert((t.up, t.node as u32, t.rows.start as u32, t.rows.end as u32), e);
        }
        Ok(out)
    }
}

pub(super) fn wire_dtype(d: GraphDType) -> Result<DType> {
    Ok(match d {
        GraphDType::U8 => DType::U8,
        GraphDType::F32 => DType::F32,
        GraphDType::I64 => DType::I64,
        GraphDType::Bool => DType::Bool,
    })
}

pub(super) fn kind_of(d: DType) -> Result<Kind> {
    Ok(match d {
        DType::U8 => Kind::Uint8,
        DType::F32 => Kind::Float,
        DType::I64 => Kind::Int64,
        DType::Bool => Kind::Bool,
        DType::F16 => Kind::Half,
        DType::BF16 => Kind::BFloat16,
        other => return Err(Error::Executor(format!("no tensor kind for wire dtype {other:?}"))),
    })
}

pub(super) fn torch(what: &str) -> impl FnOnce(tch::TchError) -> Error + '_ {
    move |e| Error::Executor(format!("{what}: {e}"))
}

/// Encodes rows `rows` of node `id` (held as `tensor`, on any device) as one Band frame.
///
/// # Errors
/// [`Error::Executor`] for libtorch failures; [`Error::Frame`] if the band does not encode.
pub fn encode_band(meta: &GraphMeta, inference_id: u64, id: NodeId, rows: &Rows, tensor: &Tensor, input: InputWire) -> Result<Vec<u8>> {
    let dtype = meta.wire_dtype(id, input)?;
    let kind = kind_of(dtype)?;
    let t =
        tensor.f_to_device(Device::Cpu).and_then(|t| t.f_to_kind(kind)).and_then(|t| t.f_contiguous()).map_err(torch("band to bytes"))?;
    let numel = t.numel();
    let bytes = numel * kind.elt_size_in_bytes();
    let header = meta.band_header(inference_id, id, rows, dtype, Default::default());
    let mut buf = Vec::with_capacity(lop_msgs::protocol::HEADER_LEN + 64 + bytes);
    encode_band_header(&header, bytes, &mut buf)?;
    let start = buf.len();
    buf.resize(start + bytes, 0);
    t.f_copy_data_u8(&mut buf[start..], numel).map_err(torch("band to bytes"))?;
    Ok(buf)
}

//! Frame types: one struct per frame kind and the [`Frame`] enum over them.

use crate::Digest;

/// Kind byte of a frame (header offset 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum FrameKind {
    /// [`Hello`].
    Hello = 0x01,
    /// [`Welcome`].
    Welcome = 0x02,
    /// [`Reject`].
    Reject = 0x03,
    /// [`Start`].
    Start = 0x04,
    /// [`Band`].
    Band = 0x05,
    /// [`Done`].
    Done = 0x06,
    /// [`ErrorFrame`].
    Error = 0x07,
    /// [`Forward`].
    Forward = 0x08,
    /// [`Cancel`].
    Cancel = 0x09,
}

impl FrameKind {
    /// The kind for a kind byte, if known.
    pub fn from_u8(b: u8) -> Option<FrameKind> {
        Some(match b {
            0x01 => FrameKind::Hello,
            0x02 => FrameKind::Welcome,
            0x03 => FrameKind::Reject,
            0x04 => FrameKind::Start,
            0x05 => FrameKind::Band,
            0x06 => FrameKind::Done,
            0x07 => FrameKind::Error,
            0x08 => FrameKind::Forward,
            0x09 => FrameKind::Cancel,
            _ => return None,
        })
    }
}

/// Element type of a tensor on the wire. Raw camera input travels as [`DType::U8`], activations
/// as [`DType::F32`]. Elements are little-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum DType {
    /// `uint8`.
    U8 = 1,
    /// IEEE `float16`.
    F16 = 2,
    /// `bfloat16`.
    BF16 = 3,
    /// IEEE `float32`.
    F32 = 4,
    /// `int64`.
    I64 = 5,
    /// Booleans, one byte each (0 or 1).
    Bool = 6,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            DType::U8 | DType::Bool => 1,
            DType::F16 | DType::BF16 => 2,
            DType::F32 => 4,
            DType::I64 => 8,
        }
    }

    /// The dtype for a code, if known.
    pub fn from_u8(b: u8) -> Option<DType> {
        Some(match b {
            1 => DType::U8,
            2 => DType::F16,
            3 => DType::BF16,
            4 => DType::F32,
            5 => DType::I64,
            6 => DType::Bool,
            _ => return None,
        })
    }
}

/// How a band's rows are coded (band header offset 23). A coded band holds rows of the model's
/// uint8 image input: its payload is the 8-byte digest (u64, little-endian) of the pixels the
/// robot computes on, then one independently decodable code unit of the band's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
#[non_exhaustive]
pub enum Coding {
    /// Raw elements, `product(shape) * dtype size` bytes.
    #[default]
    Raw = 0,
    /// A QOI image of the rows.
    Qoi = 1,
    /// A baseline JPEG of the rows, encoded by the robot.
    Jpeg = 2,
    /// The camera's own JPEG of the whole frame, passed through unchanged (any JPEG the
    /// decoder reads: chroma subsampling, no restart markers).
    Camera = 3,
    /// The restart intervals of the band's rows, cut from the one JPEG (4:4:4, a restart
    /// marker after every MCU row) the robot encoded of the whole frame, after a byte naming its
    /// quality: the frame crosses as its one JPEG, without a header per band.
    JpegScan = 4,
    /// The restart intervals of the band's rows, cut from the camera's own JPEG rewritten with a
    /// restart marker after every MCU row (coefficients untouched), after a u32 LE length and
    /// the JPEG's header up to its scan data (in the frame's first band sent; 0 in the others).
    CameraScan = 5,
}

impl Coding {
    /// The coding for a code, if known.
    pub fn from_u8(b: u8) -> Option<Coding> {
        Some(match b {
            0 => Coding::Raw,
            1 => Coding::Qoi,
            2 => Coding::Jpeg,
            3 => Coding::Camera,
            4 => Coding::JpegScan,
            5 => Coding::CameraScan,
            _ => return None,
        })
    }
}

/// Why the edge refused a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum RejectReason {
    /// The robot speaks another protocol version.
    UnsupportedVersion = 1,
    /// The edge's model store has no model with the offered sha256.
    UnknownModel = 2,
    /// Input shape or dtype do not match the model.
    BadInput = 3,
    /// No schedule table for (model, robot profile, server profile, planner config) and the edge
    /// cannot build one.
    NoTable = 4,
    /// The edge is at capacity.
    Busy = 5,
    /// The edge is shutting down.
    ShuttingDown = 6,
    /// The edge is building the schedule table for this robot's profile: retry later (the
    /// robot runs alone meanwhile).
    Planning = 7,
    /// The model is cold on this edge (its memory budget keeps other models warm); the request
    /// counts for placement, which may load it: retry later (the robot runs alone meanwhile).
    Loading = 8,
    /// Anything else; see the text.
    Other = 255,
}

impl RejectReason {
    /// The reason for a code, if known.
    pub fn from_u8(b: u8) -> Option<RejectReason> {
        Some(match b {
            1 => RejectReason::UnsupportedVersion,
            2 => RejectReason::UnknownModel,
            3 => RejectReason::BadInput,
            4 => RejectReason::NoTable,
            5 => RejectReason::Busy,
            6 => RejectReason::ShuttingDown,
            7 => RejectReason::Planning,
            8 => RejectReason::Loading,
            255 => RejectReason::Other,
            _ => return None,
        })
    }
}

/// Why an inference failed on the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
#[non_exhaustive]
pub enum ErrorCode {
    /// An internal failure (e.g. a libtorch error).
    Internal = 1,
    /// The deadline passed before the edge finished its part.
    DeadlineExceeded = 2,
    /// The inference id is unknown or stale.
    UnknownInference = 3,
    /// A band did not fit the plan (wrong tensor, rows, shape or dtype).
    OutOfPlan = 4,
    /// The plan hash or bucket is not in the agreed schedule table.
    UnknownPlan = 5,
    /// The edge is at capacity.
    Overloaded = 6,
    /// The edge is shutting down.
    ShuttingDown = 7,
    /// A forwarded inference arrived with too little of its deadline left for this edge to
    /// compute its part (or none): answered at once, never computed.
    Late = 8,
    /// A coded input band did not decode, or decoded to other pixels than the robot's (its
    /// digest differs): the edge refuses to compute on them; the robot finishes alone.
    InputMismatch = 9,
    /// Anything else; see the text.
    Other = 0xffff,
}

impl ErrorCode {
    /// The code for a number, if known.
    pub fn from_u16(v: u16) -> Option<ErrorCode> {
        Some(match v {
            1 => ErrorCode::Internal,
            2 => ErrorCode::DeadlineExceeded,
            3 => ErrorCode::UnknownInference,
            4 => ErrorCode::OutOfPlan,
            5 => ErrorCode::UnknownPlan,
            6 => ErrorCode::Overloaded,
            7 => ErrorCode::ShuttingDown,
            8 => ErrorCode::Late,
            9 => ErrorCode::InputMismatch,
            0xffff => ErrorCode::Other,
            _ => return None,
        })
    }
}

/// Robot → edge, opens a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Robot id (a valid [`validate_robot_id`](crate::validate_robot_id) id).
    pub robot_id: String,
    /// Model id, e.g. `resnet18` (a valid [`validate_id`](crate::validate_id) id).
    pub model_id: String,
    /// sha256 of the model file; the edge loads the model from its own store by this hash.
    pub model_sha256: Digest,
    /// Content hash of the robot's profile.
    pub robot_profile_hash: Digest,
    /// Content hash of the planner configuration (the last part of the schedule table key).
    pub planner_hash: Digest,
    /// Element type of the model input as the robot sends it.
    pub input_dtype: DType,
    /// Model input shape (at most [`MAX_RANK`](super::MAX_RANK) dimensions).
    pub input_shape: Vec<u32>,
    /// The robot's profile as JSON (at most [`MAX_PROFILE_LEN`](super::MAX_PROFILE_LEN) bytes),
    /// so that an edge that has never seen this robot can plan for it; empty when not sent. Data,
    /// never code: the edge parses and validates it like a profile file.
    pub robot_profile: Vec<u8>,
}

/// Edge → robot, accepts a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// Content hash of the edge's profile.
    pub server_profile_hash: Digest,
    /// Content hash of the schedule table both sides use.
    pub table_hash: Digest,
    /// The edge's profile as JSON (empty: not sent). A robot whose own table was planned for
    /// another server profile (its table hash differs) plans the edge's table from it; it is
    /// data, checked like any profile.
    pub server_profile: Vec<u8>,
}

/// Edge → robot, refuses a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    /// Machine-readable reason.
    pub reason: RejectReason,
    /// Human-readable detail (at most [`MAX_TEXT_LEN`](super::MAX_TEXT_LEN) bytes, may be empty).
    pub text: String,
    /// With [`RejectReason::Planning`]: the edge's profile as JSON (empty otherwise), so that a
    /// robot whose table was planned for another server profile plans the edge's table while
    /// the edge plans it too.
    pub server_profile: Vec<u8>,
}

/// Robot → edge, the one control frame of an inference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// Inference id, increasing per robot session.
    pub inference_id: u64,
    /// Bandwidth bucket index in the schedule table.
    pub bucket: u32,
    /// Content hash of the plan of that bucket (both sides check they agree).
    pub plan_hash: Digest,
    /// Capture time of the input, nanoseconds on the robot's clock.
    pub input_stamp_ns: u64,
    /// Time budget of the inference in nanoseconds, counted from `input_stamp_ns` on the robot and
    /// from the arrival of this frame on the edge (clocks are not shared). A forwarded inference
    /// carries what is left of its budget.
    pub deadline_ns: u64,
    /// The frame's own deadline in nanoseconds from this frame's arrival (0: none, the budget
    /// alone), at most `deadline_ns`. The edge forwards an inference its queue cannot finish
    /// by then, and a forwarded one that arrives with less than its own time left is `Late`;
    /// the robot stops waiting then and computes the bands it would wait for, so the edge keeps
    /// computing until `deadline_ns` (its bands may still come first).
    pub due_ns: u64,
    /// The edges that forwarded this inference, in order (empty: sent here first). At most
    /// [`MAX_PATH`](super::MAX_PATH) valid ids; an edge never forwards to one of them, nor
    /// forwards once the path is `max_forwards` long, so a request cannot loop.
    pub path: Vec<String>,
}

/// Everything of a [`Band`] except its payload; what
/// [`encode_band_header`](super::encode_band_header) writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BandHeader {
    /// Inference id of the [`Start`] it belongs to.
    pub inference_id: u64,
    /// Tensor id: the graph node id that produced the tensor.
    pub tensor_id: u32,
    /// First row (along `row_axis`) of the tensor this band holds.
    pub row_start: u32,
    /// One past the last row; `row_end - row_start == shape[row_axis] > 0`.
    pub row_end: u32,
    /// Which axis of `shape` is the row axis (2 for NCHW).
    pub row_axis: u8,
    /// Element type of the payload.
    pub dtype: DType,
    /// Shape of the band itself (not of the whole tensor), at most
    /// [`MAX_RANK`](super::MAX_RANK) dimensions.
    pub shape: Vec<u32>,
    /// How the rows are coded ([`Coding::Raw`]: as elements).
    pub coding: Coding,
}

/// Either direction: rows `row_start..row_end` of one tensor of one inference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Band {
    /// Ids, rows, dtype and shape.
    pub header: BandHeader,
    /// Row-major elements, little-endian; exactly `product(shape) * dtype.size()` bytes.
    pub payload: Vec<u8>,
}

/// Edge-side statistics of one inference, reported in [`Done`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DoneStats {
    /// Time the edge spent computing, ns.
    pub server_compute_ns: u64,
    /// Time the edge spent waiting for input bands, ns.
    pub server_wait_ns: u64,
    /// Payload bytes the edge received for this inference.
    pub bytes_received: u64,
    /// Payload bytes the edge sent for this inference.
    pub bytes_sent: u64,
    /// Bands received.
    pub bands_received: u32,
    /// Bands sent.
    pub bands_sent: u32,
    /// From the Start's arrival to the last band's, ns, on the edge's clock: how long the
    /// upload took as the edge saw it, queueing and compute excluded (0: no band arrived). A
    /// robot that sent its bands at once reads its link's rate to this edge from it.
    pub upload_ns: u64,
}

/// Edge → robot, the edge's part of an inference is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    /// Inference id.
    pub inference_id: u64,
    /// Edge-side statistics.
    pub stats: DoneStats,
}

/// Edge → robot, an inference failed on the edge (the robot falls back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorFrame {
    /// Inference id.
    pub inference_id: u64,
    /// Machine-readable code.
    pub code: ErrorCode,
    /// Human-readable detail (at most [`MAX_TEXT_LEN`](super::MAX_TEXT_LEN) bytes, may be empty).
    pub text: String,
}

/// Edge → robot, in place of an inference's answer: this edge cannot meet the deadline and
/// forwards the inference to another edge of the fleet that can. The robot, which holds the
/// input, sends it there directly (one upload, not two) with `path` in its Start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    /// Inference id of the [`Start`] forwarded.
    pub inference_id: u64,
    /// The fleet id of the edge to send it to (a valid id, not in `path`).
    pub to: String,
    /// The Start's path with the forwarding edge appended.
    pub path: Vec<String>,
}

/// Robot → edge: the robot no longer needs this inference's answer (it computed the edge's
/// bands itself past the frame's deadline), so the edge stops working on it and frees its
/// replica for other robots' frames. An edge ignores a Cancel of any other inference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancel {
    /// Inference id of the [`Start`] cancelled.
    pub inference_id: u64,
}

/// One protocol frame.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Frame {
    /// See [`Hello`].
    Hello(Hello),
    /// See [`Welcome`].
    Welcome(Welcome),
    /// See [`Reject`].
    Reject(Reject),
    /// See [`Start`].
    Start(Start),
    /// See [`Band`].
    Band(Band),
    /// See [`Done`].
    Done(Done),
    /// See [`ErrorFrame`].
    Error(ErrorFrame),
    /// See [`Forward`].
    Forward(Forward),
    /// See [`Cancel`].
    Cancel(Cancel),
}

impl Frame {
    /// The frame's kind.
    pub fn kind(&self) -> FrameKind {
        match self {
            Frame::Hello(_) => FrameKind::Hello,
            Frame::Welcome(_) => FrameKind::Welcome,
            Frame::Reject(_) => FrameKind::Reject,
            Frame::Start(_) => FrameKind::Start,
            Frame::Band(_) => FrameKind::Band,
            Frame::Done(_) => FrameKind::Done,
            Frame::Error(_) => FrameKind::Error,
            Frame::Forward(_) => FrameKind::Forward,
            Frame::Cancel(_) => FrameKind::Cancel,
        }
    }

    /// The inference id for per-inference frames (Start, Band, Done, Error, Forward, Cancel).
    pub fn inference_id(&self) -> Option<u64> {
        match self {
            Frame::Start(s) => Some(s.inference_id),
            Frame::Band(b) => Some(b.header.inference_id),
            Frame::Done(d) => Some(d.inference_id),
            Frame::Error(e) => Some(e.inference_id),
            Frame::Forward(f) => Some(f.inference_id),
            Frame::Cancel(c) => Some(c.inference_id),
            Frame::Hello(_) | Frame::Welcome(_) | Frame::Reject(_) => None,
        }
    }
}

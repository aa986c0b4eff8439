//! The versioned robot <-> edge wire protocol (DESIGN.md section 6): frame types and pure
//! encode/decode functions. No I/O: the runtime moves the bytes.
//!
//! # Wire format
//!
//! All integers are little-endian. A frame is a 12-byte header followed by a body of `body_len`
//! bytes. Decoding is strict: reserved bytes must be zero, enum codes must be known, and a body
//! must be used exactly, so every accepted byte string is the one encoding of its frame
//! (`encode(decode(b)) == b`).
//!
//! ## Header (12 bytes)
//!
//! | offset | size | field      | value                                              |
//! |-------:|-----:|------------|----------------------------------------------------|
//! | 0      | 4    | magic      | `b"LOPF"` ([`FRAME_MAGIC`])                        |
//! | 4      | 2    | version    | u16, [`PROTOCOL_VERSION`] (= 7); others rejected   |
//! | 6      | 1    | kind       | [`FrameKind`] code, below                          |
//! | 7      | 1    | flags      | reserved, 0                                        |
//! | 8      | 4    | body_len   | u32, bytes after the header                        |
//!
//! ## Bodies (offsets from the start of the body)
//!
//! `str16` = u16 byte length + UTF-8 bytes. `dims` = `rank` u32 values, rank <= [`MAX_RANK`].
//! `digest` = 32 raw sha256 bytes.
//!
//! | kind | frame   | offset | size     | field                                              |
//! |-----:|---------|-------:|---------:|----------------------------------------------------|
//! | 0x01 | Hello   | 0      | 32       | model_sha256                                       |
//! |      |         | 32     | 32       | robot_profile_hash                                 |
//! |      |         | 64     | 32       | planner_hash                                       |
//! |      |         | 96     | 1        | input_dtype ([`DType`] code)                       |
//! |      |         | 97     | 1        | rank                                               |
//! |      |         | 98     | 4·rank   | input_shape dims                                   |
//! |      |         | 98+4r  | 2+n      | robot_id str16 (valid robot id, <= 64 bytes)       |
//! |      |         | …      | 2+n      | model_id str16 (valid id, <= 64 bytes)             |
//! |      |         | …      | 4+n      | robot_profile: u32 length + the robot's profile as |
//! |      |         |        |          | JSON (<= [`MAX_PROFILE_LEN`] bytes; 0: not sent)   |
//! | 0x02 | Welcome | 0      | 32       | server_profile_hash                                |
//! |      |         | 32     | 32       | table_hash                                         |
//! |      |         | 64     | 4+n      | server_profile: u32 length + the edge's profile as |
//! |      |         |        |          | JSON (<= [`MAX_PROFILE_LEN`] bytes; 0: not sent),  |
//! |      |         |        |          | for a robot whose table differs to plan it again   |
//! | 0x03 | Reject  | 0      | 1        | reason ([`RejectReason`] code)                     |
//! |      |         | 1      | 2+n      | text str16 (<= [`MAX_TEXT_LEN`] bytes)             |
//! |      |         | …      | 4+n      | server_profile: u32 length + JSON, as in Welcome   |
//! |      |         |        |          | (sent with reason Planning; 0 otherwise)           |
//! | 0x04 | Start   | 0      | 8        | inference_id u64                                   |
//! |      |         | 8      | 8        | input_stamp_ns u64                                 |
//! |      |         | 16     | 8        | deadline_ns u64 (budget from the stamp)            |
//! |      |         | 24     | 8        | due_ns u64 (the frame's deadline; 0: the budget)   |
//! |      |         | 32     | 4        | bucket u32                                         |
//! |      |         | 36     | 32       | plan_hash                                          |
//! |      |         | 68     | path     | the edges that forwarded it (none: sent here first)|
//! | 0x05 | Band    | 0      | 8        | inference_id u64                                   |
//! |      |         | 8      | 4        | tensor_id u32 (graph node id)                      |
//! |      |         | 12     | 4        | row_start u32                                      |
//! |      |         | 16     | 4        | row_end u32 (exclusive)                            |
//! |      |         | 20     | 1        | row_axis u8                                        |
//! |      |         | 21     | 1        | dtype ([`DType`] code)                             |
//! |      |         | 22     | 1        | rank u8                                            |
//! |      |         | 23     | 1        | coding ([`Coding`] code; 0: raw elements)          |
//! |      |         | 24     | 4·rank   | shape dims (of the band)                           |
//! |      |         | 24+4r  | rest     | payload: raw, `product(shape) · dtype size` bytes; |
//! |      |         |        |          | coded (uint8 only), an 8-byte u64 digest of the    |
//! |      |         |        |          | decoded pixels, then one code unit (>= 1 byte)     |
//! | 0x06 | Done    | 0      | 8        | inference_id u64                                   |
//! |      |         | 8      | 8        | server_compute_ns u64                              |
//! |      |         | 16     | 8        | server_wait_ns u64                                 |
//! |      |         | 24     | 8        | bytes_received u64                                 |
//! |      |         | 32     | 8        | bytes_sent u64                                     |
//! |      |         | 40     | 4        | bands_received u32                                 |
//! |      |         | 44     | 4        | bands_sent u32                                     |
//! |      |         | 48     | 8        | upload_ns u64: Start's arrival to the last input   |
//! |      |         |        |          | band's, on the edge's clock (body 56 bytes)        |
//! | 0x07 | Error   | 0      | 8        | inference_id u64                                   |
//! |      |         | 8      | 2        | code u16 ([`ErrorCode`])                           |
//! |      |         | 10     | 2+n      | text str16 (<= [`MAX_TEXT_LEN`] bytes)             |
//! | 0x08 | Forward | 0      | 8        | inference_id u64                                   |
//! |      |         | 8      | 2+n      | to str16 (a valid edge id, not in the path)        |
//! |      |         | …      | path     | the Start's path and the forwarding edge           |
//! | 0x09 | Cancel  | 0      | 8        | inference_id u64 (robot → edge: answer not needed) |
//!
//! `path` = u8 count (<= [`MAX_PATH`]) + that many str16 valid ids (<= 64 bytes each).
//!
//! Version 2 added Start's path, Forward, Error code `Late` (8) and Reject reason `Loading` (8).
//! Version 3 added Done's `upload_ns`, from which a fleet robot estimates its link to each edge,
//! and Start's `due_ns`, the frame's deadline as distinct from the edge's work budget.
//! Version 4 added Cancel, with which a robot that finished a frame past its deadline frees the
//! edge still working on it.
//! Version 5 added coded bands (the band header's former reserved byte names the [`Coding`]):
//! a camera frame's rows cross as QOI or JPEG code units with the digest of the pixels the robot
//! computes on, and Error code `InputMismatch` (9) for a band that does not decode to them.
//! Coding 3 (`Camera`, the camera's own JPEG of the whole frame) came within version 5.
//! Version 6 added coding 4 (`JpegScan`): under `jpeg:Q` the robot encodes the frame once with a
//! restart marker after every MCU row, and a band carries only its rows' restart intervals (the
//! edge rebuilds the tables and headers from the quality byte that leads the unit).
//! Version 7 added coding 5 (`CameraScan`): under `passthrough`, a frame the plan cuts crosses
//! as the camera's JPEG rewritten with a restart marker after every MCU row, each band carrying
//! its rows' intervals, and the first band sent the JPEG's header.
//!
//! Band rules: `row_axis < rank`; `row_start < row_end` (a zero-row band is rejected: a side
//! with nothing to send sends no band); `row_end - row_start == shape[row_axis]`; other
//! dimensions may be 0; the payload length must equal `product(shape) · dtype size`, computed
//! with checked arithmetic. The payload is the rest of the body, so it needs no length field of
//! its own, and [`encode_band_header`] lets a sender transmit header and payload as two slices.
//!
//! # Decoding
//!
//! [`decode`] / [`Limits::decode`] take exactly one frame; [`Limits::check`] and
//! [`Limits::decode_prefix`] serve stream transports; [`Limits::decode_band`] borrows a band's
//! payload instead of copying it. [`Error::Incomplete`](crate::Error::Incomplete) means "a prefix
//! of a frame, read more"; every other error means malformed. A header declaring more than
//! [`Limits::max_frame_len`] is rejected before its body is read.

mod decode;
mod encode;
mod frame;
pub(crate) mod rules;

pub use decode::{DEFAULT_MAX_FRAME_LEN, Header, Limits, check, decode};
pub use encode::encode_band_header;
pub use frame::{
    Band, BandHeader, Cancel, Coding, DType, Done, DoneStats, ErrorCode, ErrorFrame, Forward, Frame, FrameKind, Hello, Reject,
    RejectReason, Start, Welcome,
};
pub use rules::CODED_DIGEST_LEN;

/// The 4 bytes every frame starts with.
pub const FRAME_MAGIC: [u8; 4] = *b"LOPF";
/// Version of the frame format this crate reads and writes.
pub const PROTOCOL_VERSION: u16 = 7;
/// Most edges a forwarded inference's path may name.
pub const MAX_PATH: usize = 8;
/// Length of the frame header.
pub const HEADER_LEN: usize = 12;
/// Most dimensions of a shape on the wire (NCDHW needs 5).
pub const MAX_RANK: usize = 8;
/// Longest Reject / Error text, in bytes.
pub const MAX_TEXT_LEN: usize = 1024;
/// Longest robot profile a Hello carries, in bytes (a 200-op detector's is about 180 KB).
pub const MAX_PROFILE_LEN: usize = 4 << 20;

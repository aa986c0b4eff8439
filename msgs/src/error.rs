//! The crate's error type.

use crate::protocol::FrameKind;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors from decoding or encoding frames, and from building or parsing keys.
///
/// [`Error::Incomplete`] is the one expected case while reading a byte stream: more bytes are
/// needed. Every other variant means the input is malformed (drop the frame and count it);
/// [`Error::is_malformed`] tells them apart without matching on the variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input is a prefix of a frame: at least `needed` more bytes are required.
    #[error("incomplete frame: at least {needed} more bytes needed")]
    Incomplete {
        /// Lower bound on the number of missing bytes.
        needed: usize,
    },
    /// The first bytes are not the frame magic.
    #[error("bad magic {found:02x?} (expected {expected:02x?})")]
    BadMagic {
        /// The bytes found (as many as were present, at most 4).
        found: Vec<u8>,
        /// The magic this crate writes.
        expected: [u8; 4],
    },
    /// The header's protocol version is not the one this crate speaks.
    #[error("unsupported protocol version {found} (supported: {supported})")]
    UnsupportedVersion {
        /// Version in the header.
        found: u16,
        /// Version this crate speaks.
        supported: u16,
    },
    /// The header's frame kind byte is not a known kind.
    #[error("unknown frame kind {kind:#04x}")]
    UnknownKind {
        /// The kind byte.
        kind: u8,
    },
    /// A reserved byte is not zero.
    #[error("reserved field '{field}' is {value:#04x}, must be 0")]
    Reserved {
        /// Which reserved field.
        field: &'static str,
        /// Its value.
        value: u8,
    },
    /// The frame (header + body) is longer than the configured limit, or than the format allows.
    #[error("frame of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Total frame length (declared in the header, or that encoding would produce).
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// The body ended before a field: the declared body length is too short for its contents.
    #[error("{kind:?} body of {body_len} bytes ends inside field '{field}'")]
    BodyTooShort {
        /// The frame kind.
        kind: FrameKind,
        /// The field that did not fit.
        field: &'static str,
        /// Declared body length.
        body_len: usize,
    },
    /// The body has bytes left over after its last field.
    #[error("{kind:?} body has {extra} bytes after its last field")]
    BodyTooLong {
        /// The frame kind.
        kind: FrameKind,
        /// Number of unused bytes.
        extra: usize,
    },
    /// [`decode`](crate::protocol::decode) got bytes after the end of the frame.
    #[error("{extra} trailing bytes after the frame")]
    TrailingBytes {
        /// Number of bytes after the frame.
        extra: usize,
    },
    /// Unknown element type code.
    #[error("unknown dtype code {code}")]
    UnknownDType {
        /// The code.
        code: u8,
    },
    /// Unknown [`RejectReason`](crate::protocol::RejectReason) code.
    #[error("unknown reject reason code {code}")]
    UnknownRejectReason {
        /// The code.
        code: u8,
    },
    /// Unknown [`ErrorCode`](crate::protocol::ErrorCode).
    #[error("unknown error code {code}")]
    UnknownErrorCode {
        /// The code.
        code: u16,
    },
    /// A fleet load report ([`EdgeLoad`](crate::load::EdgeLoad)) is malformed.
    #[error("bad load report: {reason}")]
    BadLoad {
        /// What is wrong.
        reason: String,
    },
    /// A forwarding path names more edges than the protocol allows.
    #[error("forwarding path of {len} edges, at most {max} allowed")]
    PathTooLong {
        /// Its length.
        len: usize,
        /// [`MAX_PATH`](crate::protocol::MAX_PATH).
        max: usize,
    },
    /// A forwarding path names an edge twice, or a Forward names an edge already in its path.
    #[error("forwarding loop: edge '{to}' is already in the path")]
    ForwardLoop {
        /// The edge named again.
        to: String,
    },
    /// A shape has more dimensions than the protocol allows.
    #[error("{field} has rank {rank}, at most {max} allowed")]
    RankTooLarge {
        /// Which shape.
        field: &'static str,
        /// Its rank.
        rank: usize,
        /// [`MAX_RANK`](crate::protocol::MAX_RANK).
        max: usize,
    },
    /// A band's row axis is not an axis of its shape.
    #[error("row axis {row_axis} out of range for shape {shape:?}")]
    RowAxis {
        /// The row axis.
        row_axis: u8,
        /// The band shape.
        shape: Vec<u32>,
    },
    /// A band's row range is empty or inverted (`start >= end`).
    #[error("band row range {start}..{end} is empty or inverted")]
    EmptyRows {
        /// First row.
        start: u32,
        /// One past the last row.
        end: u32,
    },
    /// A band's row range does not match its shape along the row axis.
    #[error("band row range {start}..{end} has {} rows but the shape {shape:?} has {shape_rows} along axis {row_axis}", end - start)]
    RowsMismatch {
        /// First row.
        start: u32,
        /// One past the last row.
        end: u32,
        /// The row axis.
        row_axis: u8,
        /// The band shape.
        shape: Vec<u32>,
        /// `shape[row_axis]`.
        shape_rows: u32,
    },
    /// The number of bytes of a shape overflows `u64`.
    #[error("byte size of shape {shape:?} overflows")]
    ShapeOverflow {
        /// The shape.
        shape: Vec<u32>,
    },
    /// A band's coding byte is not a known [`Coding`](crate::protocol::Coding).
    #[error("unknown band coding {code}")]
    UnknownCoding {
        /// The byte.
        code: u8,
    },
    /// A coded band whose dtype is not uint8 (only camera frames are coded).
    #[error("a coded band must be uint8, found dtype code {dtype}")]
    CodedDtype {
        /// The dtype code.
        dtype: u8,
    },
    /// A band's payload length is not `product(shape) * dtype size`.
    #[error("band payload has {found} bytes, shape {shape:?} needs {expected}")]
    PayloadSize {
        /// Bytes the shape and dtype require.
        expected: u64,
        /// Bytes present.
        found: u64,
        /// The band shape.
        shape: Vec<u32>,
    },
    /// A text or id field is longer than allowed.
    #[error("field '{field}' has {len} bytes, at most {max} allowed")]
    TextTooLong {
        /// Which field.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// A text field is not UTF-8.
    #[error("field '{field}' is not valid UTF-8")]
    NotUtf8 {
        /// Which field.
        field: &'static str,
    },
    /// An id (robot or model id) is not usable as a Zenoh key chunk.
    #[error("invalid id '{id}': {reason}")]
    InvalidId {
        /// The id as given.
        id: String,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// A key expression is not one of the protocol's keys.
    #[error("invalid key '{key}': {reason}")]
    InvalidKey {
        /// The key as given.
        key: String,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// A digest in hex form is not 64 hex digits.
    #[error("invalid sha256 hex '{hex}'")]
    InvalidHex {
        /// The text as given.
        hex: String,
    },
}

impl Error {
    /// `true` for [`Error::Incomplete`]: read more bytes and try again.
    pub fn is_incomplete(&self) -> bool {
        matches!(self, Error::Incomplete { .. })
    }

    /// `true` for every error except [`Error::Incomplete`]: drop the input and count it.
    pub fn is_malformed(&self) -> bool {
        !self.is_incomplete()
    }
}

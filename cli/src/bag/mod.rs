//! rosbag2 recordings as a source of camera frames (`--frames recording.mcap`): the
//! `sensor_msgs/msg/Image` and `sensor_msgs/msg/CompressedImage` messages of one topic, in the
//! order they were recorded, with their stamps.
//!
//! - [`source`]: which files a recording is (one `.mcap` file, or a rosbag2 folder of them).
//! - [`scan`]: reads the files record by record (Foxglove's `mcap` crate, chunks decompressed by
//!   [`zstd`]), picks the topic and hands its messages on as recorded ([`Message`]: what `lop
//!   replay` publishes).
//! - [`cdr`]: the messages' CDR, read with `hiroz-cdr` (the reader under `lop_robot`'s decoders).
//! - [`raw`]: a raw `Image`'s pixels as a picture (`rgb8`, `bgr8`, `rgba8`, `bgra8`, `mono8`).
//!
//! Only MCAP storage is read (rosbag2's default since Iron); the SQLite3 storage of older
//! recordings is refused by name.

pub mod cdr;
pub mod raw;
mod scan;
pub mod source;
mod zstd;

use std::path::{Path, PathBuf};

pub use raw::{PixelError, RawImage};

/// The type name of a raw camera frame.
pub const IMAGE: &str = "sensor_msgs/msg/Image";
/// The type name of a compressed camera frame (image_transport's `compressed`).
pub const COMPRESSED_IMAGE: &str = "sensor_msgs/msg/CompressedImage";

/// Why a recording's frames could not be read. Each names the file or the topic.
#[derive(Debug, thiserror::Error)]
pub enum BagError {
    /// A file or folder that cannot be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A folder without a recording in it.
    #[error("{path} holds no .mcap file (a rosbag2 recording in MCAP storage)")]
    NoRecording {
        /// The folder.
        path: PathBuf,
    },
    /// A recording in rosbag2's SQLite3 storage.
    #[error(
        "{path} is a rosbag2 recording in SQLite3 storage (.db3); lop reads MCAP storage (rosbag2's default since Iron): convert it with `ros2 bag convert` to storage_id mcap"
    )]
    Sqlite {
        /// The `.db3` file.
        path: PathBuf,
    },
    /// A file that ends before its last record does: cut short while copying or recording.
    #[error("{path} is truncated: it ends in the middle of a record (an MCAP file cut short, or still being recorded)")]
    Truncated {
        /// The file.
        path: PathBuf,
    },
    /// Chunks compressed with something other than zstd (or nothing).
    #[error("{path} has chunks compressed with '{compression}'; lop reads zstd-compressed and uncompressed chunks (rosbag2's presets)")]
    Compression {
        /// The file.
        path: PathBuf,
        /// The chunk's compression.
        compression: String,
    },
    /// A file that is not MCAP, or whose records do not parse.
    #[error("{path} is not a readable MCAP file: {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What the reader found.
        why: String,
    },
    /// The topic asked for is not in the recording.
    #[error("the recording has no topic '{topic}'; its topics: {}", list(topics))]
    NoSuchTopic {
        /// The topic asked for.
        topic: String,
        /// Every topic it has.
        topics: Vec<TopicInfo>,
    },
    /// No topic was named, and the recording has no image topic.
    #[error("the recording has no {IMAGE} or {COMPRESSED_IMAGE} topic; its topics: {}", list(topics))]
    NoImageTopic {
        /// Every topic it has.
        topics: Vec<TopicInfo>,
    },
    /// No topic was named, and the recording has several image topics.
    #[error("the recording has {} image topics: name one with --frames-topic; its image topics: {}", topics.len(), list(topics))]
    SeveralImageTopics {
        /// Its image topics.
        topics: Vec<TopicInfo>,
    },
    /// The topic carries messages of another type.
    #[error("topic '{topic}' carries {msg_type}, not {IMAGE} or {COMPRESSED_IMAGE}")]
    NotAnImage {
        /// The topic.
        topic: String,
        /// Its type.
        msg_type: String,
    },
    /// The topic's messages are not CDR.
    #[error("topic '{topic}' is recorded as '{encoding}', not CDR (rosbag2's serialization of ROS 2 messages)")]
    NotCdr {
        /// The topic.
        topic: String,
        /// Its channel's message encoding.
        encoding: String,
    },
    /// The topic is in the recording, without a message.
    #[error("topic '{topic}' ({msg_type}) holds no message")]
    EmptyTopic {
        /// The topic.
        topic: String,
        /// Its type.
        msg_type: String,
    },
    /// A message that does not decode as its type.
    #[error("message {index} of topic '{topic}' does not decode as {msg_type}: {why}")]
    Message {
        /// The topic.
        topic: String,
        /// The message's place on the topic, from 0.
        index: usize,
        /// Its type.
        msg_type: String,
        /// What the decoder said.
        why: String,
    },
}

/// `/a (type, N messages), /b (...)`, or `none`.
fn list(topics: &[TopicInfo]) -> String {
    if topics.is_empty() {
        return "none".into();
    }
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    topics
        .iter()
        .map(|t| format!("{} ({}, {} message{})", t.topic, t.msg_type, t.messages, plural(t.messages)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A topic of a recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// Its name.
    pub topic: String,
    /// Its message type, as rosbag2 records it (`sensor_msgs/msg/Image`); empty without a schema.
    pub msg_type: String,
    /// Messages recorded on it.
    pub messages: usize,
}

impl TopicInfo {
    /// Whether it carries camera frames.
    pub fn is_image(&self) -> bool {
        self.msg_type == IMAGE || self.msg_type == COMPRESSED_IMAGE
    }
}

/// One camera frame of a recording.
#[derive(Debug)]
pub struct Frame {
    /// Its topic.
    pub topic: String,
    /// Its place on the topic, from 0.
    pub index: usize,
    /// The message header's stamp (when the camera took it), nanoseconds since the epoch.
    pub stamp_ns: i64,
    /// When the recorder received it, nanoseconds since the epoch.
    pub log_time_ns: u64,
    /// The picture.
    pub payload: Payload,
}

/// One message of the camera topic as it was recorded, its header read.
#[derive(Debug)]
pub struct Message {
    /// Its topic.
    pub topic: String,
    /// Its place on the topic, from 0.
    pub index: usize,
    /// Its type ([`IMAGE`] or [`COMPRESSED_IMAGE`]).
    pub msg_type: String,
    /// The header's stamp (when the camera took it), nanoseconds since the epoch.
    pub stamp_ns: i64,
    /// The header's frame id.
    pub frame_id: String,
    /// When the recorder received it, nanoseconds since the epoch.
    pub log_time_ns: u64,
    /// The message's CDR bytes, encapsulation header included, as recorded.
    pub cdr: Vec<u8>,
}

/// A frame's picture as its message carries it.
#[derive(Debug)]
pub enum Payload {
    /// A `CompressedImage`: the `format` field and the whole JPEG or PNG file.
    Compressed {
        /// As image_transport writes it: `jpeg`, or `bgr8; jpeg compressed bgr8`.
        format: String,
        /// The picture's bytes.
        data: Vec<u8>,
    },
    /// An `Image`: raw pixels.
    Raw(RawImage),
}

/// What was read: the topic, its type, and its frames' stamps.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The files read, in order.
    pub files: Vec<PathBuf>,
    /// The topic the frames came from.
    pub topic: TopicInfo,
    /// The first and last header stamps, nanoseconds.
    pub stamps_ns: (i64, i64),
    /// Frames received before the one before them (their log times go backwards).
    pub out_of_order: usize,
}

impl Recording {
    /// One line for the user: topic, type, frames, stamps and rate.
    pub fn describe(&self) -> String {
        let (first, last) = self.stamps_ns;
        let span = (last - first) as f64 / 1e9;
        let rate = if span > 0.0 { format!(", {:.1} Hz", self.topic.messages.saturating_sub(1) as f64 / span) } else { String::new() };
        format!(
            "{} frame(s) of topic {} ({}), stamps {:.3} s to {:.3} s{rate}",
            self.topic.messages,
            self.topic.topic,
            self.topic.msg_type,
            first as f64 / 1e9,
            last as f64 / 1e9
        )
    }
}

/// Whether `path` is a rosbag2 recording rather than pictures: a `.mcap` (or `.db3`) file, a
/// file that starts with MCAP's magic, or a folder with `metadata.yaml` or a `.mcap`/`.db3` file.
pub fn is_recording(path: &Path) -> bool {
    source::is_recording(path)
}

/// Reads the frames of `topic` (default: the recording's one image topic) at `path`, in the
/// order recorded, handing each to `each`; returns what was read.
///
/// # Errors
/// A [`BagError`] (converted to `E`) for an unreadable, truncated or corrupt recording, a topic
/// that is missing, of another type, or empty; whatever `each` returns.
pub fn read_frames<E: From<BagError>>(
    path: &Path,
    topic: Option<&str>,
    mut each: impl FnMut(Frame) -> Result<(), E>,
) -> Result<Recording, E> {
    read_messages(path, topic, |m| {
        let Message { topic, index, msg_type, stamp_ns, log_time_ns, cdr, .. } = m;
        let (_, payload) = cdr::decode(&msg_type, &cdr).map_err(|why| BagError::Message { topic: topic.clone(), index, msg_type, why })?;
        each(Frame { topic, index, stamp_ns, log_time_ns, payload })
    })
}

/// Reads the messages of `topic` (default: the recording's one image topic) at `path` as they
/// were recorded (their CDR bytes, their header read), in the order recorded, handing each to
/// `each`; returns what was read. What `lop replay` publishes.
///
/// # Errors
/// As [`read_frames`], but for the pictures, which are not decoded.
pub fn read_messages<E: From<BagError>>(
    path: &Path,
    topic: Option<&str>,
    each: impl FnMut(Message) -> Result<(), E>,
) -> Result<Recording, E> {
    let files = source::files(path)?;
    scan::read(files, topic, each)
}

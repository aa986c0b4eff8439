//! Sensor messages to model inputs, without any ROS types: the ROS adapters fill the `*View`
//! structs from `sensor_msgs/Image` and `sensor_msgs/PointCloud2` and call these functions.
//!
//! - [`compressed`]: `CompressedImage` frames (JPEG, PNG) decoded to what [`image`] reads.
//! - [`image`]: camera frames to CHW `u8` tensors (normalisation stays inside the model graph,
//!   so images leave here raw, which is also what goes on the wire).
//! - [`cloud`]: point clouds to bird's-eye-view grids and occupancy voxel grids (CHW `f32`).

pub mod cloud;
pub mod compressed;
pub mod image;

pub use cloud::{
    BevChannels, BevGrid, CloudStats, CloudView, PointFieldView, VoxelGrid, cloud_to_bev, cloud_to_bev_with_stats, cloud_to_voxels,
    cloud_to_voxels_with_stats,
};
pub use image::{ChannelOrder, Fit, ImageTarget, ImageView, Placement, image_to_chw, placement};

use std::fmt;

/// Why a message could not be converted.
#[derive(Debug, Clone, PartialEq)]
pub enum ConvertError {
    /// An image encoding this module does not read.
    UnknownEncoding {
        /// The encoding found.
        encoding: String,
    },
    /// A zero width, height, or point count, in the message or the target.
    ZeroSize {
        /// What was zero.
        what: String,
    },
    /// The image row stride is shorter than a row of pixels.
    StepTooSmall {
        /// The message's `step`.
        step: u64,
        /// `width * bytes per pixel`.
        need: u64,
    },
    /// The data buffer is shorter than the header says.
    DataTooShort {
        /// Bytes present.
        len: u64,
        /// Bytes the header implies.
        need: u64,
    },
    /// A target or grid that cannot be produced (bad channels, ranges, or size).
    BadTarget {
        /// What is wrong.
        msg: String,
    },
    /// A compressed frame that cannot be read: an unknown `format`, bytes of another format
    /// than it says, or a picture that does not decode.
    Compressed {
        /// What is wrong.
        msg: String,
    },
    /// A point cloud without a required field.
    MissingField {
        /// The field's name.
        name: String,
    },
    /// A point field whose datatype cannot be read as needed.
    UnsupportedField {
        /// The field's name.
        name: String,
        /// Its `datatype` code.
        datatype: u8,
    },
    /// A field that does not fit inside one point.
    FieldOutsidePoint {
        /// The field's name.
        name: String,
        /// The field's offset.
        offset: u32,
        /// Bytes the field needs.
        size: u32,
        /// The cloud's `point_step`.
        point_step: u32,
    },
    /// `row_step` shorter than `width * point_step`.
    RowStepTooSmall {
        /// The message's `row_step`.
        row_step: u64,
        /// `width * point_step`.
        need: u64,
    },
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConvertError::UnknownEncoding { encoding } => {
                write!(f, "unknown image encoding '{encoding}' (supported: {})", image::ENCODINGS.join(", "))
            }
            ConvertError::ZeroSize { what } => write!(f, "zero size: {what}"),
            ConvertError::StepTooSmall { step, need } => write!(f, "image step {step} is smaller than a row of pixels ({need} bytes)"),
            ConvertError::DataTooShort { len, need } => write!(f, "data has {len} bytes, the header implies {need}"),
            ConvertError::BadTarget { msg } => write!(f, "bad conversion target: {msg}"),
            ConvertError::Compressed { msg } => write!(f, "compressed frame: {msg}"),
            ConvertError::MissingField { name } => write!(f, "point cloud has no '{name}' field"),
            ConvertError::UnsupportedField { name, datatype } => write!(f, "point field '{name}' has unsupported datatype {datatype}"),
            ConvertError::FieldOutsidePoint { name, offset, size, point_step } => {
                write!(f, "point field '{name}' (offset {offset}, {size} bytes) does not fit in point_step {point_step}")
            }
            ConvertError::RowStepTooSmall { row_step, need } => {
                write!(f, "cloud row_step {row_step} is smaller than width * point_step ({need})")
            }
        }
    }
}

impl std::error::Error for ConvertError {}

/// Largest output a conversion may produce, in elements (guards against absurd targets).
pub const MAX_OUTPUT_ELEMENTS: u64 = 1 << 28;

//! How a frame's rows travel, as plans, prices and the wire speak of it: the codec
//! ([`FrameCodec`]), the geometry of the image it carries ([`Image`]) and what it costs
//! ([`CodecCost`]). The codecs themselves (encoders, decoders, measurements) are `lop_codec`'s.

use crate::value::{DType, ValueInfo};
use std::fmt;
use std::str::FromStr;

/// Rows of one JPEG block: a `jpeg:Q` band's rows start on this grid, so that each band decodes
/// to exactly the rows a whole-frame encoding gives.
pub const JPEG_BLOCK_ROWS: usize = 8;

/// Rows of the grid a camera's own JPEG is cut on: the MCU rows of every common chroma
/// subsampling (16 for 4:2:0, 8 for 4:2:2 and 4:4:4).
pub const CAMERA_GRID_ROWS: usize = 16;

/// Why a codec's name or a model input does not fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A codec name that is not one of `raw`, `lossless`, `jpeg:Q`, `passthrough`.
    #[error("unknown frame codec '{0}' (expected raw, lossless, jpeg:Q with Q in 1-100, or passthrough)")]
    Unknown(String),
    /// A JPEG quality outside 1-100.
    #[error("JPEG quality {0} is outside 1-100")]
    Quality(i64),
    /// A model input that no image codec can carry.
    #[error("frame codec {codec} needs a uint8 image input [1, C, H, W] with C = 1 or 3: {why}")]
    NotImage {
        /// The codec asked for.
        codec: String,
        /// What the input is.
        why: String,
    },
}

/// How a frame's rows travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FrameCodec {
    /// The frame's bytes as they are (one byte per pixel and channel).
    #[default]
    Raw,
    /// QOI per band: exact, about 1.5-2x smaller on photographs, a few milliseconds a frame.
    Lossless,
    /// Baseline JPEG at this quality, 4:4:4, one code unit per band of whole 8-row blocks; the
    /// model's input is the decoded frame.
    Jpeg {
        /// 1-100.
        quality: u8,
    },
    /// The camera's own JPEG: unchanged when one message holds the whole frame; cut at restart
    /// markers on a [`CAMERA_GRID_ROWS`]-row grid when the plan splits the frame
    /// (`lop_codec::camera_scan`).
    Passthrough,
}

impl FrameCodec {
    /// The code of each codec in a band's header byte (`0`: raw rows).
    pub fn wire_code(self) -> u8 {
        match self {
            FrameCodec::Raw => 0,
            FrameCodec::Lossless => 1,
            FrameCodec::Jpeg { .. } => 2,
            FrameCodec::Passthrough => 3,
        }
    }

    /// Whether the rows travel as a code unit rather than as raw bytes.
    pub fn is_coded(self) -> bool {
        self != FrameCodec::Raw
    }

    /// Whether the decoded frame may differ from the frame encoded (so the robot must compute
    /// on its own decoding).
    pub fn is_lossy(self) -> bool {
        matches!(self, FrameCodec::Jpeg { .. } | FrameCodec::Passthrough)
    }

    /// The row grid code units are cut on: a unit starts at a multiple of it, and ends at one
    /// or at the frame's bottom. JPEG's 8-row blocks make each band decode to exactly the rows a
    /// whole-frame encoding would give; a camera's JPEG is cut on the MCU rows of any common
    /// subsampling ([`CAMERA_GRID_ROWS`]).
    pub fn unit_rows(self) -> usize {
        match self {
            FrameCodec::Raw | FrameCodec::Lossless => 1,
            FrameCodec::Jpeg { .. } => JPEG_BLOCK_ROWS,
            FrameCodec::Passthrough => CAMERA_GRID_ROWS,
        }
    }

    /// Checks that graph input `info` is an image this codec can carry (any input for `raw`).
    ///
    /// # Errors
    /// [`FrameError::NotImage`].
    pub fn check_input(self, info: &ValueInfo) -> Result<(), FrameError> {
        if self == FrameCodec::Raw {
            return Ok(());
        }
        Image::of(info).map(|_| ()).map_err(|why| FrameError::NotImage { codec: self.to_string(), why })
    }
}

impl fmt::Display for FrameCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameCodec::Raw => f.write_str("raw"),
            FrameCodec::Lossless => f.write_str("lossless"),
            FrameCodec::Jpeg { quality } => write!(f, "jpeg:{quality}"),
            FrameCodec::Passthrough => f.write_str("passthrough"),
        }
    }
}

impl FromStr for FrameCodec {
    type Err = FrameError;
    fn from_str(s: &str) -> Result<Self, FrameError> {
        let s = s.trim();
        Ok(match s {
            "raw" => FrameCodec::Raw,
            "lossless" => FrameCodec::Lossless,
            "passthrough" => FrameCodec::Passthrough,
            _ => {
                let q = s.strip_prefix("jpeg:").ok_or_else(|| FrameError::Unknown(s.to_string()))?;
                let q: i64 = q.trim().parse().map_err(|_| FrameError::Unknown(s.to_string()))?;
                if !(1..=100).contains(&q) {
                    return Err(FrameError::Quality(q));
                }
                FrameCodec::Jpeg { quality: q as u8 }
            }
        })
    }
}

impl serde::Serialize for FrameCodec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for FrameCodec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A frame's geometry: channels and width; rows vary per band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Image {
    /// 1 (grey) or 3 (RGB).
    pub channels: usize,
    /// Pixels per row.
    pub width: usize,
    /// Rows of the whole frame.
    pub height: usize,
}

impl Image {
    /// The geometry of graph input `info`, or why it is not an image a codec can carry.
    ///
    /// # Errors
    /// A sentence naming what is wrong.
    pub fn of(info: &ValueInfo) -> Result<Image, String> {
        if info.dtype != DType::U8 {
            return Err(format!("the input is {:?}, not uint8", info.dtype));
        }
        match info.shape.as_slice() {
            &[1, c, h, w] if (c == 1 || c == 3) && info.row_axis == Some(2) && h > 0 && w > 0 => {
                Ok(Image { channels: c, width: w, height: h })
            }
            s => Err(format!("the input's shape is {s:?} (row axis {:?})", info.row_axis)),
        }
    }

    /// Bytes of `rows` planar rows.
    pub fn bytes(&self, rows: usize) -> usize {
        self.channels * self.width * rows
    }
}

/// A codec's price: bytes relative to raw, and seconds per frame row to encode and to decode
/// on the side that measured it. Profiles carry one per codec; the simulator prices input
/// messages with them.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CodecCost {
    /// The codec.
    pub codec: FrameCodec,
    /// Coded bytes over raw bytes (0 < ratio; about 0.05-0.1 for JPEG at quality 90 on
    /// photographs, 0.4-0.7 for lossless).
    pub ratio: f64,
    /// Seconds to encode one row of the frame.
    pub encode_s_per_row: f64,
    /// Seconds to decode one row of the frame.
    pub decode_s_per_row: f64,
}

impl CodecCost {
    /// Raw rows: no coding, no time, ratio 1.
    pub fn raw() -> CodecCost {
        CodecCost { codec: FrameCodec::Raw, ratio: 1.0, encode_s_per_row: 0.0, decode_s_per_row: 0.0 }
    }

    /// Whether every number is finite and in range.
    pub fn is_valid(&self) -> bool {
        self.ratio.is_finite()
            && self.ratio > 0.0
            && [self.encode_s_per_row, self.decode_s_per_row].iter().all(|v| v.is_finite() && *v >= 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print_back() {
        for s in ["raw", "lossless", "jpeg:90", "jpeg:1", "jpeg:100", "passthrough"] {
            let c: FrameCodec = s.parse().expect(s);
            assert_eq!(c.to_string(), s);
            let json = serde_json::to_string(&c).expect("json");
            assert_eq!(serde_json::from_str::<FrameCodec>(&json).expect("back"), c);
        }
        assert_eq!("jpeg:0".parse::<FrameCodec>(), Err(FrameError::Quality(0)));
        assert_eq!("jpeg:101".parse::<FrameCodec>(), Err(FrameError::Quality(101)));
        assert!(matches!("jpeg:".parse::<FrameCodec>(), Err(FrameError::Unknown(_))));
        assert!(matches!("png".parse::<FrameCodec>(), Err(FrameError::Unknown(_))));
        assert!(serde_json::from_str::<FrameCodec>("\"jpeg:200\"").is_err());
    }

    #[test]
    fn only_uint8_images_are_coded() {
        let ok = ValueInfo { shape: vec![1, 3, 8, 8], dtype: DType::U8, row_axis: Some(2) };
        assert_eq!(Image::of(&ok), Ok(Image { channels: 3, width: 8, height: 8 }));
        let float = ValueInfo { dtype: DType::F32, ..ok.clone() };
        let four = ValueInfo { shape: vec![1, 4, 8, 8], ..ok.clone() };
        for bad in [float, four] {
            assert!(matches!(FrameCodec::Lossless.check_input(&bad), Err(FrameError::NotImage { .. })));
            assert_eq!(FrameCodec::Raw.check_input(&bad), Ok(()));
        }
    }

    #[test]
    fn each_codec_cuts_on_its_grid_and_prices_raw_at_nothing() {
        let grids: Vec<usize> = [FrameCodec::Raw, FrameCodec::Lossless, FrameCodec::Jpeg { quality: 90 }, FrameCodec::Passthrough]
            .iter()
            .map(|c| c.unit_rows())
            .collect();
        assert_eq!(grids, [1, 1, JPEG_BLOCK_ROWS, CAMERA_GRID_ROWS]);
        assert!(CodecCost::raw().is_valid() && CodecCost::raw().ratio == 1.0);
        assert!(!CodecCost { ratio: 0.0, ..CodecCost::raw() }.is_valid());
    }
}

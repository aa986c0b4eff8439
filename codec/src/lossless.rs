//! Lossless bands: QOI ("Quite OK Image"), by the `qoi` crate.
//!
//! Why QOI: it is exact, needs no tables or dictionary, and encodes and decodes a 640x480
//! photograph in a few milliseconds on one core, where PNG at zlib level 1 took 19-36 ms
//! (issue 48's measurement); on photographs it is about 1.5-2x smaller than raw (row deltas
//! with lz4 compress less, zstd costs more). A band is one QOI image of its rows; a grey band
//! travels as RGB with equal channels, which QOI's run and diff codes shrink.

use super::{CodecError, Image, dims, interleave, planarize};

/// Encodes `rows` planar rows of `image` as one QOI image.
///
/// # Errors
/// [`CodecError::Encode`] when QOI refuses the size.
pub fn encode(image: &Image, planar: &[u8], rows: usize) -> Result<Vec<u8>, CodecError> {
    let packed = if image.channels == 1 { planar.iter().flat_map(|&v| [v, v, v]).collect() } else { interleave(image, planar, rows) };
    let (w, h) = (u32::try_from(image.width), u32::try_from(rows));
    let (Ok(w), Ok(h)) = (w, h) else {
        return Err(CodecError::Encode { codec: "QOI", why: format!("{}x{rows} pixels", image.width) });
    };
    qoi::encode_to_vec(&packed, w, h).map_err(|e| CodecError::Encode { codec: "QOI", why: e.to_string() })
}

/// Decodes one QOI image that must hold `rows` rows of `image` into planar rows.
///
/// # Errors
/// [`CodecError::Corrupt`] for data that is not a whole QOI image; [`CodecError::Dimensions`]
/// for one of another size.
pub fn decode(image: &Image, data: &[u8], rows: usize) -> Result<Vec<u8>, CodecError> {
    let corrupt = |why: String| CodecError::Corrupt { codec: "QOI", why };
    let header = qoi::decode_header(data).map_err(|e| corrupt(e.to_string()))?;
    let (w, h) = (header.width as usize, header.height as usize);
    if w != image.width || h != rows || header.channels.as_u8() != 3 {
        return Err(dims("QOI", image, rows, format!("{w}x{h}x{}", header.channels.as_u8())));
    }
    let (_, packed) = qoi::decode_to_vec(data).map_err(|e| corrupt(e.to_string()))?;
    if packed.len() != w * h * 3 {
        return Err(corrupt(format!("{} bytes of pixels for {w}x{h}", packed.len())));
    }
    Ok(planarize(image, &packed, 3, rows))
}

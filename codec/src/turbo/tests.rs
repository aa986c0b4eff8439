#![allow(clippy::unwrap_used)]
use super::*;

/// An arithmetic-coded JPEG (legal, rare from cameras) is read as such and decodes to the very
/// pixels of the Huffman-coded JPEG of the same frame: the entropy coding is lossless, the
/// quantised coefficients are the same. A camera that writes one is served, as one message.
#[test]
fn an_arithmetic_coded_jpeg_decodes_to_the_huffman_ones_pixels() {
    let (w, h) = (64, 48);
    let frame: Vec<u8> = (0..w * h * 3).map(|i| (((i % (w * 3)) * 3 + (i / (w * 3)) * 5 + (i * 7919) % 13) % 256) as u8).collect();
    let options = EncodeOptions { quality: 85, subsampling: tj::TJSAMP_TJSAMP_420, restart_rows: 0 };
    let huffman = encode(&frame, w, h, Pixels::Rgb, options).unwrap();
    let arithmetic = encode_with(&frame, (w, h), Pixels::Rgb, options, |c| c.set(tj::TJPARAM_TJPARAM_ARITHMETIC, 1)).unwrap();
    assert_ne!(huffman, arithmetic);
    assert!(header(&arithmetic).unwrap().arithmetic && !header(&huffman).unwrap().arithmetic);
    let any = |_: &Header| Ok(());
    let (_, a) = decode(&arithmetic, Pixels::Rgb, any).unwrap();
    let (_, b) = decode(&huffman, Pixels::Rgb, any).unwrap();
    assert_eq!(a, b);
    // Cut short, it is refused like any truncated scan.
    assert!(decode(&arithmetic[..arithmetic.len() / 2], Pixels::Rgb, any).is_err());
}

#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::test_frames::{frame, planar_rows};
use crate::turbo::{self, EncodeOptions, Pixels};
use crate::{interleave, jpeg};
use turbojpeg_sys as tj;

/// A camera's JPEG of a photograph-like frame of `image` at `subsampling`, quality 90, without
/// restart markers (as cameras write them); `also` sets more encoder parameters.
fn camera_jpeg(image: &Image, subsampling: i32, also: impl FnOnce(&mut turbo::Handle) -> Result<(), CodecError>) -> Vec<u8> {
    let planar = frame(image, 5);
    let options = EncodeOptions { quality: 90, subsampling, restart_rows: 0 };
    let packed = interleave(image, &planar, image.height);
    turbo::encode_with(&packed, (image.width, image.height), Pixels::of_channels(image.channels), options, also).unwrap()
}

fn plain(image: &Image, subsampling: i32) -> Vec<u8> {
    camera_jpeg(image, subsampling, |_| Ok(()))
}

/// Bands on the grid, with a last one that may end off it.
fn cuttings(h: usize) -> Vec<Vec<Range<usize>>> {
    let single: Vec<Range<usize>> = std::iter::once(0..h).collect();
    let by_grid: Vec<Range<usize>> = (0..h).step_by(GRID).map(|a| a..(a + GRID).min(h)).collect();
    let mut out = vec![single, vec![0..16, 16..h], by_grid];
    if h > 48 {
        out.push(vec![0..32, 32..48, 48..h]);
    }
    out
}

/// Every band of a camera's JPEG, cut at its restart markers, decodes on its own to exactly the
/// rows of the whole JPEG's decoding, for every common subsampling and odd sizes: the rewrite
/// keeps the coefficients, and merged upsampling reads no neighbouring MCU row. The frame crosses
/// as its JPEG: the header once, two bytes a marker, four bytes a band.
#[test]
fn bands_decode_to_the_whole_camera_frames_rows_bitwise() {
    let subsamplings = [tj::TJSAMP_TJSAMP_444, tj::TJSAMP_TJSAMP_422, tj::TJSAMP_TJSAMP_420, tj::TJSAMP_TJSAMP_440];
    for image in [Image { channels: 3, width: 64, height: 80 }, Image { channels: 3, width: 61, height: 77 }] {
        for sub in subsamplings {
            check_bands(&image, &plain(&image, sub), &format!("{image:?} subsampling {sub}"));
        }
    }
    let grey = Image { channels: 1, width: 45, height: 70 };
    check_bands(&grey, &plain(&grey, tj::TJSAMP_TJSAMP_GRAY), "grey");
}

fn check_bands(image: &Image, camera: &[u8], case: &str) {
    let whole = jpeg::decode(image, camera, image.height).unwrap();
    let cut = CameraScan::cut(camera, image).unwrap();
    assert_eq!(jpeg::decode(image, cut.jpeg(), image.height).unwrap(), whole, "{case}: the rewrite changed pixels");
    for cuts in cuttings(image.height) {
        let mut header: Option<Vec<u8>> = None;
        let mut sent = 0;
        for rows in &cuts {
            let unit = cut.unit(rows, header.is_none()).unwrap();
            sent += unit.len();
            let (carried, scan) = split_unit(&unit).unwrap();
            if let Some(h) = carried {
                header = Some(h.to_vec());
            }
            let back = decode_scan(image, header.as_deref().unwrap(), scan, rows.len()).unwrap();
            assert_eq!(back, planar_rows(image, &whole, rows), "{case}: rows {rows:?} of {cuts:?}");
        }
        // The rewritten JPEG, less its end marker, and four bytes a band.
        assert!(sent <= cut.jpeg().len() + 4 * cuts.len(), "{case} {cuts:?}: {sent} bytes for a {} B rewrite", cut.jpeg().len());
    }
    // A sequential camera JPEG with the standard tables grows by its restart markers (two bytes
    // and up to one of padding an MCU row), and its headers by at most 64 bytes (a
    // restart-interval segment, the tables' segments laid out anew).
    if !turbo::header(camera).unwrap().progressive && !turbo::header(camera).unwrap().arithmetic {
        let grown = cut.jpeg().len() as i64 - camera.len() as i64;
        assert!(grown <= 3 * cut.intervals.len() as i64 + 64, "{case}: the rewrite grew by {grown} B");
    }
}

/// A progressive or arithmetic-coded camera JPEG is rewritten as a sequential Huffman one of
/// the same coefficients, so it streams by rows too, to the same pixels.
#[test]
fn progressive_and_arithmetic_jpegs_stream_after_the_rewrite() {
    let image = Image { channels: 3, width: 64, height: 48 };
    let sub = tj::TJSAMP_TJSAMP_420;
    let baseline = jpeg::decode(&image, &plain(&image, sub), image.height).unwrap();
    for (name, param) in [("progressive", tj::TJPARAM_TJPARAM_PROGRESSIVE), ("arithmetic", tj::TJPARAM_TJPARAM_ARITHMETIC)] {
        let camera = camera_jpeg(&image, sub, |c| c.set(param, 1));
        let read = turbo::header(&camera).unwrap();
        assert!(read.progressive || read.arithmetic, "{name}: the test JPEG is not {name}");
        assert_eq!(jpeg::decode(&image, &camera, image.height).unwrap(), baseline, "{name}");
        check_bands(&image, &camera, name);
    }
}

/// Damaged units and JPEGs that cannot be cut are refused by name, never decoded to other rows.
#[test]
fn damaged_units_and_uncuttable_jpegs_are_refused_by_name() {
    let image = Image { channels: 3, width: 64, height: 80 };
    let camera = plain(&image, tj::TJSAMP_TJSAMP_420);
    let cut = CameraScan::cut(&camera, &image).unwrap();
    let first = cut.unit(&(0..32), true).unwrap();
    let (header, _) = split_unit(&first).unwrap();
    let header = header.unwrap().to_vec();
    let unit = cut.unit(&(32..64), false).unwrap();
    let (none, scan) = split_unit(&unit).unwrap();
    assert!(none.is_none());
    let err = |scan: &[u8], rows: usize| decode_scan(&image, &header, scan, rows).unwrap_err().to_string();
    // Cut at its restart marker: one interval where two belong.
    let marker = scan.windows(2).rposition(|w| w == [0xFF, 0xD0]).unwrap();
    assert!(err(&scan[..marker], 32).contains("1 restart intervals for 32 rows"), "{}", err(&scan[..marker], 32));
    assert!(err(scan, 48).contains("2 restart intervals for 48 rows"));
    assert!(err(&scan[..scan.len() - 5], 32).contains("does not decode"), "{}", err(&scan[..scan.len() - 5], 32));
    assert!(decode_scan(&image, &header[..header.len() - 3], scan, 32).is_err(), "a header cut short");
    // A header length past the unit, or absurd.
    let mut long = unit.clone();
    long[..4].copy_from_slice(&(unit.len() as u32).to_le_bytes());
    assert!(split_unit(&long).unwrap_err().to_string().contains("header of"));
    assert!(split_unit(&[1, 0]).is_err());
    for rows in [8..32, 0..20, 64..96, 16..16] {
        assert!(matches!(cut.unit(&rows, false), Err(CodecError::Dimensions { .. })), "{rows:?}");
    }
    // Another size, a truncated JPEG, and MCU rows taller than the grid (4:4:1: 32 rows).
    assert!(matches!(CameraScan::cut(&camera, &Image { channels: 3, width: 64, height: 96 }), Err(CodecError::Dimensions { .. })));
    assert!(matches!(CameraScan::cut(&camera[..camera.len() / 2], &image), Err(CodecError::Corrupt { .. })));
    let tall = plain(&image, tj::TJSAMP_TJSAMP_441);
    let why = CameraScan::cut(&tall, &image).unwrap_err().to_string();
    assert!(why.contains("MCU rows of 32 pixel rows"), "{why}");
}

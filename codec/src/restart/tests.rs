#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::test_frames::{frame as seeded_frame, planar_rows};
use crate::{FrameCodec, decode as decode_codec, encode as encode_codec};

fn frame(image: &Image) -> Vec<u8> {
    seeded_frame(image, 1)
}

fn images() -> [Image; 3] {
    [
        Image { channels: 3, width: 40, height: 48 },
        Image { channels: 3, width: 37, height: 45 },
        Image { channels: 1, width: 24, height: 30 },
    ]
}

/// Every band of a frame coded once decodes, on its own, to exactly the rows of the whole
/// frame's decoding, which is the decoding `jpeg:Q` has always given (band JPEGs or one): the
/// restart markers change the entropy coding, never the pixels.
#[test]
fn bands_decode_to_the_whole_frames_rows_bitwise() {
    for image in images() {
        let planar = frame(&image);
        let cut = RestartJpeg::encode(&image, &planar, image.height, 85).unwrap();
        let whole = decode_codec(FrameCodec::Passthrough, &image, cut.jpeg(), image.height).unwrap();
        let codec = FrameCodec::Jpeg { quality: 85 };
        let classic = decode_codec(codec, &image, &encode_codec(codec, &image, &planar, image.height).unwrap(), image.height).unwrap();
        assert_eq!(whole, classic, "{image:?}: one JPEG with restarts decodes as one without");
        assert_ne!(whole, planar, "{image:?}: the codec is lossy on this frame");
        let h = image.height;
        let one_band: Vec<Range<usize>> = std::iter::once(0..h).collect();
        for cuts in [one_band, vec![0..8, 8..h], vec![0..16, 16..24, 24..h], (0..h).step_by(8).map(|a| a..(a + 8).min(h)).collect()] {
            let mut sent = 0;
            for rows in &cuts {
                let unit = cut.unit(rows).unwrap();
                sent += unit.len();
                let back = decode_unit(&image, &unit, rows.len()).unwrap();
                assert_eq!(back, planar_rows(&image, &whole, rows), "{image:?} rows {rows:?}");
            }
            // The frame's scan data once, a byte of quality a band, and nothing else: no band
            // carries tables or headers.
            let scan: usize = cut.intervals.iter().map(|r| r.len() + 2).sum::<usize>() - 2;
            assert!(sent <= scan + cuts.len(), "{image:?} {cuts:?}: {sent} bytes for {scan} of scan");
            assert!(sent + 300 < cut.jpeg().len() + 2 * cuts.len(), "{image:?}: {sent} bytes, the JPEG is {}", cut.jpeg().len());
            // Coded band by band, as the robot sends them: the same intervals, byte for byte.
            let banded: Vec<u8> = cuts
                .iter()
                .flat_map(|rows| {
                    let band = planar_rows(&image, &planar, rows);
                    RestartJpeg::encode(&image, &band, rows.len(), 85).unwrap().unit(&(0..rows.len())).unwrap()
                })
                .collect();
            let whole_cut: Vec<u8> = cuts.iter().flat_map(|rows| cut.unit(rows).unwrap()).collect();
            assert_eq!(banded, whole_cut, "{image:?} {cuts:?}");
        }
    }
}

/// A unit that is cut, padded, out of sequence, of a bad quality, or with a foreign marker is
/// refused with its reason; a unit asked for rows off the block grid is refused at the robot.
#[test]
fn damaged_units_are_refused_by_name() {
    let image = images()[0];
    let cut = RestartJpeg::encode(&image, &frame(&image), image.height, 90).unwrap();
    let unit = cut.unit(&(8..32)).unwrap();
    let err = |u: &[u8], rows: usize| decode_unit(&image, u, rows).unwrap_err().to_string();
    // Cut at its last restart marker: two intervals where three belong.
    let last = unit.windows(2).rposition(|w| w == [0xFF, 0xD1]).unwrap();
    assert!(err(&unit[..last], 24).contains("2 restart intervals for 24 rows"), "{}", err(&unit[..last], 24));
    // Rows it does not hold.
    assert!(err(&unit, 32).contains("3 restart intervals for 32 rows"));
    // Cut inside an interval: the decoder's warning stops it.
    assert!(err(&unit[..unit.len() - 3], 24).contains("does not decode"), "{}", err(&unit[..unit.len() - 3], 24));
    let mut renumbered = unit.clone();
    renumbered[last + 1] = 0xD5;
    assert!(err(&renumbered, 24).contains("RST5 where RST1 belongs"));
    let mut foreign = unit.clone();
    foreign[last + 1] = 0xD9;
    assert!(err(&foreign, 24).contains("marker FFD9 inside the scan"));
    let mut quality = unit.clone();
    quality[0] = 0;
    assert!(err(&quality, 24).contains("quality 0"));
    assert!(err(&[], 24).contains("empty"));
    for rows in [4..16, 8..20, 40..56, 8..8] {
        assert!(matches!(cut.unit(&rows), Err(CodecError::Dimensions { .. })), "{rows:?}");
    }
    // The bottom may end off the grid, as the frame does.
    assert!(
        decode_unit(&images()[1], &RestartJpeg::encode(&images()[1], &frame(&images()[1]), 45, 90).unwrap().unit(&(40..45)).unwrap(), 5)
            .is_ok()
    );
}

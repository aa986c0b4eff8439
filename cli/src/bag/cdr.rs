//! A recorded message's CDR bytes (the 4-byte encapsulation header, then the fields) decoded as
//! `sensor_msgs/msg/Image` or `sensor_msgs/msg/CompressedImage`.
//!
//! The reading of CDR itself (alignment, strings, sequences, bounds) is `hiroz-cdr`'s
//! `CdrReader`, the reader the generated decoders `lop_robot` receives these messages with
//! (`hiroz-msgs`) are built on; only the order of the fields, as the `.msg` files give it, is
//! written here. Read field by field, a message's header can be read alone ([`header_of`]: what
//! `lop replay` needs of the messages it publishes as they were recorded).

use byteorder::{BigEndian, ByteOrder, LittleEndian};
use hiroz_cdr::CdrReader;

use super::raw::RawImage;
use super::{COMPRESSED_IMAGE, IMAGE, Payload};

/// A decoded camera message: its header stamp (nanoseconds since the epoch) and its picture.
pub type Decoded = (i64, Payload);

/// `std_msgs/Header`: the stamp, in nanoseconds, and the frame id.
fn header<'a, BO: ByteOrder>(r: &mut CdrReader<'a, BO>) -> hiroz_cdr::Result<(i64, &'a str)> {
    let (sec, nanosec) = (r.read_i32()?, r.read_u32()?);
    let frame_id = r.read_str()?;
    Ok((i64::from(sec) * 1_000_000_000 + i64::from(nanosec), frame_id))
}

/// `sensor_msgs/Image` after its header.
fn image<BO: ByteOrder>(r: &mut CdrReader<'_, BO>) -> hiroz_cdr::Result<Payload> {
    let (height, width, encoding) = (r.read_u32()?, r.read_u32()?, r.read_string()?);
    let (_is_bigendian, step) = (r.read_u8()?, r.read_u32()?);
    Ok(Payload::Raw(RawImage { width, height, encoding, step, data: r.read_byte_sequence()?.to_vec() }))
}

/// `sensor_msgs/CompressedImage` after its header.
fn compressed<BO: ByteOrder>(r: &mut CdrReader<'_, BO>) -> hiroz_cdr::Result<Payload> {
    Ok(Payload::Compressed { format: r.read_string()?, data: r.read_byte_sequence()?.to_vec() })
}

/// The fields after the encapsulation header, in the byte order it names.
fn fields<BO: ByteOrder>(msg_type: &str, payload: &[u8]) -> Result<Decoded, String> {
    let r = &mut CdrReader::<BO>::new(payload);
    let read = match msg_type {
        IMAGE => image,
        COMPRESSED_IMAGE => compressed,
        other => return Err(format!("{other} is not a camera frame")),
    };
    let (stamp, _) = header(r).map_err(|e| e.to_string())?;
    read(r).map(|p| (stamp, p)).map_err(|e| e.to_string())
}

/// The fields of a CDR message, after its encapsulation header, in the byte order it names.
enum Fields<'a> {
    Little(&'a [u8]),
    Big(&'a [u8]),
}

/// Splits `cdr` into its encapsulation header's byte order and its fields.
fn fields_of(cdr: &[u8]) -> Result<Fields<'_>, String> {
    match cdr {
        [0x00, 0x01, _, _, payload @ ..] => Ok(Fields::Little(payload)),
        [0x00, 0x00, _, _, payload @ ..] => Ok(Fields::Big(payload)),
        [a, b, _, _, ..] => Err(format!("encapsulation {a:#04x} {b:#04x} is not plain CDR (0x00 0x01 little endian, 0x00 0x00 big)")),
        _ => Err(format!("{} bytes, shorter than CDR's encapsulation header", cdr.len())),
    }
}

/// The header of a camera message's `cdr` (encapsulation header included; `Image` and
/// `CompressedImage` both start with it): its stamp in nanoseconds and its frame id. What
/// `lop replay` needs of a message it publishes as it was recorded.
///
/// # Errors
/// What is wrong with bytes that do not start with a header.
pub fn header_of(cdr: &[u8]) -> Result<(i64, String), String> {
    let read = match fields_of(cdr)? {
        Fields::Little(p) => header(&mut CdrReader::<LittleEndian>::new(p)).map(|(s, f)| (s, f.to_string())),
        Fields::Big(p) => header(&mut CdrReader::<BigEndian>::new(p)).map(|(s, f)| (s, f.to_string())),
    };
    read.map_err(|e| e.to_string())
}

/// Decodes `cdr` (encapsulation header included) as `msg_type` ([`IMAGE`] or
/// [`COMPRESSED_IMAGE`]).
///
/// # Errors
/// What is wrong with bytes that are not that type, or another type name.
pub fn decode(msg_type: &str, cdr: &[u8]) -> Result<Decoded, String> {
    match fields_of(cdr)? {
        Fields::Little(payload) => fields::<LittleEndian>(msg_type, payload),
        Fields::Big(payload) => fields::<BigEndian>(msg_type, payload),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hiroz_cdr::CdrWriter;

    /// A message as rosbag2 records it, written field by field in `BO`'s order.
    fn message<BO: ByteOrder>(raw: bool) -> Vec<u8> {
        let mut v = Vec::new();
        let mut w = CdrWriter::<BO>::new(&mut v);
        w.write_i32(1_700_000_000);
        w.write_u32(5);
        w.write_string("camera");
        if raw {
            w.write_u32(2);
            w.write_u32(3);
            w.write_string("bgr8");
            w.write_u8(0);
            w.write_u32(9);
            w.write_bytes(&(0u8..18).collect::<Vec<_>>());
        } else {
            w.write_string("jpeg");
            w.write_bytes(&[0xFF, 0xD8, 0xFF]);
        }
        let order = if BO::read_u16(&[0, 1]) == 1 { 0 } else { 1 };
        [vec![0, order, 0, 0], v].concat()
    }

    #[test]
    fn both_types_in_both_byte_orders() {
        for cdr in [message::<LittleEndian>(true), message::<BigEndian>(true)] {
            let (stamp, payload) = decode(IMAGE, &cdr).expect("decodes");
            assert_eq!(stamp, 1_700_000_000_000_000_005);
            let Payload::Raw(raw) = payload else { panic!("raw") };
            assert_eq!((raw.width, raw.height, raw.step, raw.encoding.as_str()), (3, 2, 9, "bgr8"));
            assert_eq!(raw.data, (0u8..18).collect::<Vec<_>>());
        }
        for cdr in [message::<LittleEndian>(false), message::<BigEndian>(false)] {
            let (_, payload) = decode(COMPRESSED_IMAGE, &cdr).expect("decodes");
            assert!(matches!(payload, Payload::Compressed { format, data } if format == "jpeg" && data == [0xFF, 0xD8, 0xFF]));
        }
    }

    #[test]
    fn the_header_alone_in_both_byte_orders() {
        for cdr in [message::<LittleEndian>(true), message::<BigEndian>(false)] {
            assert_eq!(header_of(&cdr), Ok((1_700_000_000_000_000_005, "camera".to_string())));
        }
        let cdr = message::<LittleEndian>(false);
        for cut in [0, 3, 4, 10, 15] {
            assert!(header_of(&cdr[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn bad_bytes_are_an_error_not_a_panic() {
        let cdr = message::<LittleEndian>(false);
        for cut in [0, 3, 4, 10, cdr.len() - 1] {
            assert!(decode(COMPRESSED_IMAGE, &cdr[..cut]).is_err(), "cut at {cut}");
        }
        assert!(decode("std_msgs/msg/String", &cdr).is_err());
        assert!(decode(COMPRESSED_IMAGE, &[[0x00, 0x03, 0, 0].as_slice(), &cdr[4..]].concat()).is_err(), "CDR2");
        let mut huge = message::<LittleEndian>(false);
        let n = huge.len();
        huge[n - 7..n - 3].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(COMPRESSED_IMAGE, &huge).is_err(), "a sequence longer than the message");
    }
}

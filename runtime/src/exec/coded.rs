//! Coded frames on the wire (issue 48): the robot codes each input band of its frame with the
//! table's codec as it sends it, and computes on the pixels it decoded; the server decodes each
//! band and checks that it holds those very pixels (the digest the band carries) before it
//! computes on them. The codecs themselves are the engine's ([`lop::codec`]).

use lop::codec::restart::RestartJpeg;
use lop::codec::{self, FrameCodec, Image};
use lop::exec::SideExec;
use lop::graph::NodeId;
use lop::rows::Rows;
use lop::sim::Schedule;
use lop_msgs::protocol::{CODED_DIGEST_LEN, Coding, DType, encode_band_header};
use tch::{Device, Kind, Tensor};

use super::camera::{CameraHeaders, CameraSend, CameraUnit};
use super::wire::{GraphMeta, coding_of};
use crate::error::{Error, Result};

fn torch(what: &'static str) -> impl Fn(tch::TchError) -> Error {
    move |e| Error::Executor(format!("{what}: {e}"))
}

fn image_of(meta: &GraphMeta, id: NodeId) -> Result<Image> {
    Image::of(meta.info(id))
        .map_err(|why| Error::Engine(lop::Error::Codec(codec::CodecError::NotImage { codec: "coded band".into(), why })))
}

/// Planar bytes of rows `rows` of image input `id` as the robot holds them.
fn rows_bytes(exec: &SideExec<'_>, id: NodeId, rows: &Rows) -> Result<Vec<u8>> {
    let t = exec.extract(id, rows).map_err(Error::Engine)?;
    let t = t.f_to_device(Device::Cpu).and_then(|t| t.f_contiguous()).map_err(torch("frame rows to bytes"))?;
    let n = t.numel();
    let mut out = vec![0u8; n];
    t.f_copy_data_u8(&mut out, n).map_err(torch("frame rows to bytes"))?;
    Ok(out)
}

/// A planar band of `image` as the `[1, C, rows, W]` uint8 tensor the graph holds, on `device`.
fn band_tensor(image: &Image, planar: &[u8], rows: usize, device: Device) -> Result<Tensor> {
    let dims = [1, image.channels as i64, rows as i64, image.width as i64];
    Tensor::f_from_data_size(planar, &dims, Kind::Uint8).and_then(|t| t.f_to_device(device)).map_err(torch("band from pixels"))
}

/// The robot codes rows `rows` of image input `id` with `codec` and returns the Band frame.
/// For a lossy codec it first replaces the rows it holds by their decoding, so that it computes
/// on what the server decodes; the frame carries the digest of those pixels.
///
/// Under `passthrough` the band is the camera's JPEG ([`super::camera`]): unchanged when it
/// carries the whole frame, its rows' restart intervals otherwise (the robot holds its decoding
/// already). Without a camera JPEG, or one that cannot be cut, the rows go lossless, which is
/// exact too.
///
/// # Errors
/// Codec failures (a frame the codec cannot hold), libtorch failures.
pub fn encode_coded_band(
    exec: &mut SideExec<'_>,
    meta: &GraphMeta,
    inference_id: u64,
    (id, rows): (NodeId, &Rows),
    codec: FrameCodec,
    camera: Option<&mut CameraSend>,
) -> Result<Vec<u8>> {
    let image = image_of(meta, id)?;
    let planar = rows_bytes(exec, id, rows)?;
    if codec == FrameCodec::Passthrough {
        let band = (id, rows);
        match camera.map(|c| c.unit(&image, rows)).transpose()? {
            Some(CameraUnit::Whole(jpeg)) => return coded_frame(meta, inference_id, band, Coding::Camera, &planar, jpeg),
            Some(CameraUnit::Scan(unit)) => return coded_frame(meta, inference_id, band, Coding::CameraScan, &planar, &unit),
            Some(CameraUnit::Uncut(why)) => tracing::debug!(inference = inference_id, %why, "camera JPEG not cut: its rows go lossless"),
            None => {}
        }
        let unit = codec::encode(FrameCodec::Lossless, &image, &planar, rows.len()).map_err(|e| Error::Engine(e.into()))?;
        return coded_frame(meta, inference_id, band, Coding::Qoi, &planar, &unit);
    }
    let FrameCodec::Jpeg { quality } = codec else {
        let unit = codec::encode(codec, &image, &planar, rows.len()).map_err(|e| Error::Engine(e.into()))?;
        return coded_frame(meta, inference_id, (id, rows), coding_of(codec), &planar, &unit);
    };
    // One JPEG of the band with a restart marker after every MCU row: the band carries its
    // intervals without the headers (lop::codec::restart), and the robot computes on its
    // decoding.
    let engine = |e: codec::CodecError| Error::Engine(e.into());
    let cut = RestartJpeg::encode(&image, &planar, rows.len(), quality).map_err(engine)?;
    let decoded = codec::decode(FrameCodec::Passthrough, &image, cut.jpeg(), rows.len()).map_err(engine)?;
    let held = exec.extract(id, rows).map_err(Error::Engine)?.device();
    exec.overwrite(id, rows, &band_tensor(&image, &decoded, rows.len(), held)?).map_err(Error::Engine)?;
    let unit = cut.unit(&(0..rows.len())).map_err(engine)?;
    coded_frame(meta, inference_id, (id, rows), Coding::JpegScan, &decoded, &unit)
}

/// A coded Band frame: the header, the digest of `pixels` (what the robot computes on), `unit`.
fn coded_frame(
    meta: &GraphMeta,
    inference_id: u64,
    (id, rows): (NodeId, &Rows),
    coding: Coding,
    pixels: &[u8],
    unit: &[u8],
) -> Result<Vec<u8>> {
    let header = meta.band_header(inference_id, id, rows, DType::U8, coding);
    let mut buf = Vec::with_capacity(lop_msgs::protocol::HEADER_LEN + 64 + CODED_DIGEST_LEN + unit.len());
    encode_band_header(&header, CODED_DIGEST_LEN + unit.len(), &mut buf)?;
    buf.extend_from_slice(&codec::digest(pixels).to_le_bytes());
    buf.extend_from_slice(unit);
    Ok(buf)
}

/// After its bands left, a robot under a lossy codec codes the rows of each image input that no
/// band carried (on the codec's unit grid: JPEG's blocks), so that the whole frame it computes on
/// is the decoded frame, whatever the plan's cuts.
///
/// # Errors
/// As [`encode_coded_band`].
pub fn code_kept_rows(exec: &mut SideExec<'_>, meta: &GraphMeta, schedule: &Schedule, codec: FrameCodec) -> Result<()> {
    // Only the robot's own lossy encoding changes pixels: a passthrough robot holds the
    // camera JPEG's decoding (or exact rows) already.
    if !matches!(codec, FrameCodec::Jpeg { .. }) {
        return Ok(());
    }
    for id in 0..meta.len() {
        if !meta.is_input(id) {
            continue;
        }
        let sent: Vec<Rows> =
            schedule.transfers.iter().filter(|t| t.up && t.node == id && t.producer.is_none()).map(|t| t.rows.clone()).collect();
        if sent.is_empty() {
            continue;
        }
        let image = image_of(meta, id)?;
        let mut kept: Vec<Rows> = std::iter::once(0..image.height).collect();
        for s in &sent {
            kept = kept
                .into_iter()
                .flat_map(|k| [k.start..s.start.clamp(k.start, k.end), s.end.clamp(k.start, k.end)..k.end])
                .filter(|r| !r.is_empty())
                .collect();
        }
        for rows in kept {
            let planar = rows_bytes(exec, id, &rows)?;
            let unit = codec::encode(codec, &image, &planar, rows.len()).map_err(|e| Error::Engine(e.into()))?;
            let decoded = codec::decode(codec, &image, &unit, rows.len()).map_err(|e| Error::Engine(e.into()))?;
            let held = exec.extract(id, &rows).map_err(Error::Engine)?.device();
            let t = band_tensor(&image, &decoded, rows.len(), held)?;
            exec.overwrite(id, &rows, &t).map_err(Error::Engine)?;
        }
    }
    Ok(())
}

/// The server decodes a coded band's `payload` (digest, then one code unit) into rows `rows`
/// of image input `id`, on `device`; `headers` keeps the camera header a cut camera frame's
/// first band carries, for its later bands.
///
/// # Errors
/// [`Error::InputMismatch`] for a unit that does not decode to those rows, or decodes to other
/// pixels than the robot's (the digest differs): the edge refuses and reports, never computes
/// on other pixels.
pub fn decode_coded_band(
    meta: &GraphMeta,
    (id, rows): (NodeId, &Rows),
    coding: Coding,
    payload: &[u8],
    device: Device,
    headers: &mut CameraHeaders,
) -> Result<Tensor> {
    let image = image_of(meta, id)?;
    let Some((digest, unit)) = payload.split_first_chunk::<CODED_DIGEST_LEN>() else {
        return Err(Error::InputMismatch(format!("band of input {id} rows {rows:?}: no digest")));
    };
    let pixels = match coding {
        Coding::Qoi => codec::decode(FrameCodec::Lossless, &image, unit, rows.len()),
        Coding::Jpeg | Coding::Camera => codec::decode(FrameCodec::Passthrough, &image, unit, rows.len()),
        Coding::JpegScan => codec::restart::decode_unit(&image, unit, rows.len()),
        Coding::CameraScan => Ok(headers.decode(&image, id, rows, unit)?),
        _ => return Err(Error::InputMismatch(format!("band of input {id} rows {rows:?}: coding {coding:?} is not a frame codec"))),
    }
    .map_err(|e| Error::InputMismatch(format!("band of input {id} rows {rows:?} does not decode: {e}")))?;
    let (want, got) = (u64::from_le_bytes(*digest), codec::digest(&pixels));
    if want != got {
        return Err(Error::InputMismatch(format!(
            "band of input {id} rows {rows:?} decodes to other pixels than the robot's (digest {got:016x}, the robot's {want:016x})"
        )));
    }
    band_tensor(&image, &pixels, rows.len(), device)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use lop::graph::{DType as GDType, GraphBuilder};
    use lop::ops::Op;

    /// A 3-channel 40x24 uint8 image through a normalisation: the frame a camera model takes.
    fn graph() -> lop::Graph {
        let mut b = GraphBuilder::new("camera");
        let x = b.input("image", vec![1, 3, 40, 24], GDType::U8);
        let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.0; 3], std: vec![1.0; 3] }, &[x]).unwrap();
        b.output(n);
        b.build().unwrap()
    }

    /// The robot's side of [`graph`] holding [`frame`] as its input.
    fn robot_holding_frame(g: &lop::Graph) -> (GraphMeta, SideExec<'_>) {
        let mut exec = SideExec::new(g, lop::Side::Robot);
        exec.insert(0, 0..40, frame()).unwrap();
        (GraphMeta::of(g), exec)
    }

    /// A photograph-like frame: gradients, an edge and a little texture.
    fn frame() -> Tensor {
        let v: Vec<u8> = (0..3 * 40 * 24)
            .map(|i| {
                let (c, y, x) = (i / (40 * 24), (i / 24) % 40, i % 24);
                ((x * 9 + y * 4 + c * 50 + if (x / 5 + y / 7) % 2 == 0 { 35 } else { 0 } + (i * 7919) % 5) % 256) as u8
            })
            .collect();
        Tensor::from_slice(&v).reshape([1, 3, 40, 24])
    }

    /// The robot codes bands through its path (`encode_coded_band`, the rows it keeps by
    /// `code_kept_rows`); the server decodes each through its own (`decode_coded_band`): the
    /// pixels are bitwise those the robot computes on, band by band.
    #[test]
    fn both_sides_hold_the_same_pixels_bitwise() {
        let g = graph();
        let meta = GraphMeta::of(&g);
        for codec in [FrameCodec::Lossless, FrameCodec::Jpeg { quality: 75 }] {
            let mut exec = SideExec::new(&g, lop::Side::Robot);
            let original = frame();
            exec.insert(0, 0..40, original.copy()).unwrap();
            let bands = [8..16, 16..40];
            let mut server_rows = Vec::new();
            for rows in &bands {
                let bytes = encode_coded_band(&mut exec, &meta, 9, (0, rows), codec, None).unwrap();
                let (h, payload) = lop_msgs::protocol::Limits::default().decode_band(&bytes).unwrap();
                assert_eq!(h.coding, coding_of(codec));
                let raw = 3 * rows.len() * 24;
                assert!(payload.len() < raw + CODED_DIGEST_LEN + 1024, "{codec}: {} bytes for {raw} raw", payload.len());
                server_rows
                    .push(decode_coded_band(&meta, (0, rows), h.coding, payload, Device::Cpu, &mut CameraHeaders::default()).unwrap());
            }
            let schedule = Schedule {
                chunks: Vec::new(),
                transfers: bands
                    .iter()
                    .map(|r| lop::sim::ScheduledTransfer {
                        up: true,
                        node: 0,
                        rows: r.clone(),
                        bytes: 0,
                        producer: None,
                        waiters: Vec::new(),
                    })
                    .collect(),
                ..Schedule::default()
            };
            code_kept_rows(&mut exec, &meta, &schedule, codec).unwrap();
            for (rows, server) in bands.iter().zip(&server_rows) {
                let robot = exec.extract(0, rows).unwrap();
                assert!(robot.equal(server), "{codec}: rows {rows:?} differ between robot and server");
            }
            let robot = exec.extract(0, &(0..40)).unwrap();
            if codec.is_lossy() {
                // The robot computes on the decoded frame: what one whole-frame unit decodes to,
                // the rows it kept (0..8) included.
                let image = Image { channels: 3, width: 24, height: 40 };
                let planar: Vec<u8> = Vec::<u8>::try_from(original.flatten(0, -1)).unwrap();
                let whole = codec::decode(codec, &image, &codec::encode(codec, &image, &planar, 40).unwrap(), 40).unwrap();
                assert!(robot.equal(&Tensor::from_slice(&whole).reshape([1, 3, 40, 24])), "{codec}");
                assert!(!robot.equal(&original), "{codec} is lossy on this frame");
            } else {
                assert!(robot.equal(&original), "lossless leaves the frame as it was");
            }
        }
    }

    /// Under `jpeg:Q` a band carries its rows' restart intervals and no JPEG header: the bands
    /// of a frame together cost about its one JPEG's scan, never a header each.
    #[test]
    fn jpeg_bands_cost_the_frames_one_jpeg() {
        let g = graph();
        let (meta, mut exec) = robot_holding_frame(&g);
        let image = Image { channels: 3, width: 24, height: 40 };
        let planar: Vec<u8> = Vec::<u8>::try_from(frame().flatten(0, -1)).unwrap();
        let codec = FrameCodec::Jpeg { quality: 90 };
        let one = codec::encode(codec, &image, &planar, 40).unwrap().len();
        let units: usize = (0..40)
            .step_by(8)
            .map(|a| {
                let bytes = encode_coded_band(&mut exec, &meta, 1, (0, &(a..a + 8)), codec, None).unwrap();
                lop_msgs::protocol::Limits::default().decode_band(&bytes).unwrap().1.len() - CODED_DIGEST_LEN
            })
            .sum();
        assert!(units + 300 < one, "five bands cost {units} bytes, the frame's one JPEG {one}");
    }

    /// Under `passthrough` a frame the plan cuts crosses as its camera's JPEG, cut at restart
    /// markers: the first band carries the header, the server keeps it for the second, and
    /// both bands decode to the rows the robot computes on (the camera JPEG's decoding). The
    /// bands cost the camera's JPEG and a few bytes; a whole frame is the JPEG unchanged. A
    /// band that comes without any header before it is refused.
    #[test]
    fn a_cut_camera_frame_streams_as_its_jpeg() {
        let g = graph();
        let meta = GraphMeta::of(&g);
        let image = Image { channels: 3, width: 24, height: 40 };
        let planar: Vec<u8> = Vec::<u8>::try_from(frame().flatten(0, -1)).unwrap();
        let camera = codec::jpeg::encode_as_a_camera_does(&image, &planar, 40, 90).unwrap();
        let decoded = codec::decode(FrameCodec::Passthrough, &image, &camera, 40).unwrap();
        let mut exec = SideExec::new(&g, lop::Side::Robot);
        exec.insert(0, 0..40, band_tensor(&image, &decoded, 40, Device::Cpu).unwrap()).unwrap();
        let jpeg = super::super::camera::CameraJpeg(camera.clone().into());
        let mut send = CameraSend::new(jpeg.clone());
        let (mut headers, mut sent, mut later) = (CameraHeaders::default(), 0, None);
        for (rows, coding) in [(0..16, Coding::CameraScan), (16..40, Coding::CameraScan)] {
            let bytes = encode_coded_band(&mut exec, &meta, 3, (0, &rows), FrameCodec::Passthrough, Some(&mut send)).unwrap();
            let (h, payload) = lop_msgs::protocol::Limits::default().decode_band(&bytes).unwrap();
            assert_eq!(h.coding, coding);
            sent += payload.len() - CODED_DIGEST_LEN;
            let server = decode_coded_band(&meta, (0, &rows), h.coding, payload, Device::Cpu, &mut headers).unwrap();
            assert!(server.equal(&exec.extract(0, &rows).unwrap()), "rows {rows:?}");
            later = Some(payload.to_vec());
        }
        assert!(sent <= camera.len() + 64, "{sent} bytes for a {} B camera JPEG", camera.len());
        let e = decode_coded_band(&meta, (0, &(16..40)), Coding::CameraScan, &later.unwrap(), Device::Cpu, &mut CameraHeaders::default())
            .unwrap_err();
        assert!(matches!(e, Error::InputMismatch(ref m) if m.contains("carried the camera's header")), "{e}");
        let whole =
            encode_coded_band(&mut exec, &meta, 4, (0, &(0..40)), FrameCodec::Passthrough, Some(&mut CameraSend::new(jpeg))).unwrap();
        let (h, payload) = lop_msgs::protocol::Limits::default().decode_band(&whole).unwrap();
        assert_eq!((h.coding, &payload[CODED_DIGEST_LEN..]), (Coding::Camera, &camera[..]), "a whole frame is the JPEG unchanged");
    }

    /// A band whose unit decodes to other pixels than its digest names, or does not decode, is
    /// refused as an input mismatch, never computed on.
    #[test]
    fn other_pixels_are_refused() {
        let g = graph();
        let (meta, mut exec) = robot_holding_frame(&g);
        let bytes = encode_coded_band(&mut exec, &meta, 1, (0, &(0..16)), FrameCodec::Lossless, None).unwrap();
        let (h, payload) = lop_msgs::protocol::Limits::default().decode_band(&bytes).unwrap();
        let mut wrong = payload.to_vec();
        wrong[0] ^= 1; // the digest
        let e = decode_coded_band(&meta, (0, &(0..16)), h.coding, &wrong, Device::Cpu, &mut CameraHeaders::default()).unwrap_err();
        assert!(matches!(e, Error::InputMismatch(ref m) if m.contains("other pixels")), "{e}");
        let mut garbled = payload.to_vec();
        garbled.truncate(payload.len() - 5);
        let e = decode_coded_band(&meta, (0, &(0..16)), h.coding, &garbled, Device::Cpu, &mut CameraHeaders::default()).unwrap_err();
        assert!(matches!(e, Error::InputMismatch(ref m) if m.contains("does not decode")), "{e}");
        // Rows of another size than the unit holds.
        let e = decode_coded_band(&meta, (0, &(0..8)), h.coding, payload, Device::Cpu, &mut CameraHeaders::default()).unwrap_err();
        assert!(matches!(e, Error::InputMismatch(_)), "{e}");
    }
}

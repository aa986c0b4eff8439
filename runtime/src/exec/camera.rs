//! The camera's own JPEG on the wire (`passthrough`, issue 59). A band that holds the whole
//! frame is the camera's JPEG, unchanged (coding `Camera`). A plan that cuts the frame gets it
//! rewritten once with a restart marker after every MCU row, and each band carries its rows'
//! intervals (coding `CameraScan`, [`lop::codec::camera_scan`]); the first band the robot sends
//! also carries the JPEG's header, which the server keeps for the frame's later bands. So the
//! server decodes and computes on the first rows while the last ones are on the way, and the
//! frame costs its camera's JPEG plus a few bytes a band.

use std::sync::Arc;

use lop::codec::camera_scan::{self, CameraScan};
use lop::codec::{CodecError, Image};
use lop::graph::NodeId;
use lop::rows::Rows;

use crate::error::{Error, Result};

/// The camera's own JPEG of a frame (`passthrough`): the whole frame, whose decoding (by
/// [`lop::codec::decode`]) is the model's input the robot computes on.
#[derive(Debug, Clone)]
pub struct CameraJpeg(pub Arc<[u8]>);

/// The robot's camera JPEG for one inference, as its bands leave: cut at the first band that
/// needs it, the header sent once.
#[derive(Debug)]
pub struct CameraSend {
    jpeg: CameraJpeg,
    cut: Option<std::result::Result<CameraScan, String>>,
    header_sent: bool,
}

/// What the robot sends for a band of the camera's frame.
pub(crate) enum CameraUnit<'a> {
    /// The camera's JPEG, unchanged: the band is the whole frame.
    Whole(&'a [u8]),
    /// The band's restart intervals (and the header, in the first band sent).
    Scan(Vec<u8>),
    /// The JPEG cannot be cut (why): the rows go another way, exactly.
    Uncut(String),
}

impl CameraSend {
    /// The camera JPEG of an inference, nothing cut or sent yet.
    pub fn new(jpeg: CameraJpeg) -> CameraSend {
        CameraSend { jpeg, cut: None, header_sent: false }
    }

    /// The unit that carries rows `rows` of the frame `image`.
    ///
    /// # Errors
    /// Rows off the [`camera_scan::GRID`] (a plan derived under another codec).
    pub(crate) fn unit(&mut self, image: &Image, rows: &Rows) -> Result<CameraUnit<'_>> {
        if rows.start == 0 && rows.end == image.height {
            return Ok(CameraUnit::Whole(&self.jpeg.0));
        }
        let jpeg = &self.jpeg.0;
        let cut = self.cut.get_or_insert_with(|| CameraScan::cut(jpeg, image).map_err(|e| e.to_string()));
        match cut {
            Ok(cut) => {
                let unit = cut.unit(rows, !self.header_sent).map_err(engine)?;
                self.header_sent = true;
                Ok(CameraUnit::Scan(unit))
            }
            Err(why) => Ok(CameraUnit::Uncut(why.clone())),
        }
    }
}

/// The camera headers a server has received for one inference, per image input: the first
/// band of a cut camera frame carries them, its later bands do not.
#[derive(Debug, Default)]
pub struct CameraHeaders(Vec<(NodeId, Vec<u8>)>);

impl CameraHeaders {
    /// Decodes a `CameraScan` unit holding rows `rows` of input `id` (an `image`) into planar
    /// rows, keeping the header it carries for the frame's later bands.
    ///
    /// # Errors
    /// [`Error::InputMismatch`] for a unit that does not decode to those rows, or a band without
    /// a header before any band that carried one (the robot sends the header first).
    pub fn decode(&mut self, image: &Image, id: NodeId, rows: &Rows, unit: &[u8]) -> Result<Vec<u8>> {
        let mismatch = |why: String| Error::InputMismatch(format!("camera band of input {id} rows {rows:?}: {why}"));
        let (carried, scan) = camera_scan::split_unit(unit).map_err(|e| mismatch(e.to_string()))?;
        if let Some(header) = carried {
            match self.0.iter_mut().find(|(n, _)| *n == id) {
                Some((_, kept)) => *kept = header.to_vec(),
                None => self.0.push((id, header.to_vec())),
            }
        }
        let Some((_, header)) = self.0.iter().find(|(n, _)| *n == id) else {
            return Err(mismatch("no band of this frame carried the camera's header before it".into()));
        };
        camera_scan::decode_scan(image, header, scan, rows.len()).map_err(|e| mismatch(format!("does not decode: {e}")))
    }
}

fn engine(e: CodecError) -> Error {
    Error::Engine(e.into())
}

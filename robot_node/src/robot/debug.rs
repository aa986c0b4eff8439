//! The annotated debug image going out ([`DebugOutlet`]): for a frame answered while
//! `topics.debug_image` or its `/compressed` form has a subscriber, the frame with its results
//! drawn ([`crate::annotate`]) as `sensor_msgs/Image` (`rgb8`) and `sensor_msgs/CompressedImage`
//! (JPEG), each only where it has a subscriber.
//!
//! It costs nothing without subscribers: the frame loop asks [`DebugOutlet::wanted`] (a lookup in
//! the backend's view of the graph) before converting a frame, and only then keeps the frame
//! past its conversion. The drawing, the JPEG and the publishing run on the blocking pool after
//! the frame's `InferenceResult` went out, never awaited by the frame loop; one debug image at a
//! time (a frame answered while the last is still drawn gets none, counted), so a slow drawing
//! never queues up behind the camera. A frame the drawer cannot read is counted and logged, and
//! its result is already published.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::counters::RobotCounters;
use super::frame::Frame;
use crate::annotate::{Annotations, Canvas, annotate};
use crate::backend::{CompressedImage, Header, Image, Pub, SharedRos, to_time};
use crate::config::{InputKind, RobotConfig};
use crate::convert::{self, ConvertError};
use crate::error::Result;

/// The `format` of the JPEG form, as image_transport's compressed transport writes it for an
/// `rgb8` source (decoders give `rgb8` back).
pub(super) const JPEG_FORMAT: &str = "rgb8; jpeg compressed bgr8";

/// A frame kept for its debug image, with the decoding cap its conversion used.
pub(super) struct Kept {
    pub(super) frame: Frame,
    pub(super) max_pixels: usize,
}

/// Which forms of the debug image have subscribers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Wanted {
    raw: bool,
    compressed: bool,
}

impl Wanted {
    fn any(self) -> bool {
        self.raw || self.compressed
    }
}

/// The two publishers, shared with the drawing task.
struct Publishers {
    raw: Pub<Image>,
    compressed: Pub<CompressedImage>,
}

/// Draws and publishes debug images for subscribed topics (see the module docs).
pub(super) struct DebugOutlet {
    pubs: Arc<Publishers>,
    quality: u8,
    counters: Arc<RobotCounters>,
    /// A debug image is being drawn or published.
    busy: Arc<AtomicBool>,
    /// The first undrawable frame was logged at warn (later ones at debug; all are counted).
    warned: Arc<AtomicBool>,
}

impl DebugOutlet {
    /// Declares the two publishers (`topics.debug_image` and its `/compressed`); `None` when
    /// `debug_image.enabled` is false or the input is a point cloud (no picture to draw on).
    ///
    /// # Errors
    /// A topic the backend refuses.
    pub(super) fn new(cfg: &RobotConfig, ros: &SharedRos, counters: Arc<RobotCounters>) -> Result<Option<DebugOutlet>> {
        if !cfg.debug_image.enabled || cfg.input != InputKind::Camera {
            return Ok(None);
        }
        let topic = &cfg.topics.debug_image;
        let raw = ros.image_publisher(topic)?;
        let compressed = ros.compressed_image_publisher(&format!("{}/compressed", topic.trim_end_matches('/')))?;
        Ok(Some(DebugOutlet::with_publishers(raw, compressed, cfg.debug_image.jpeg_quality, counters)))
    }

    /// An outlet publishing through `raw` and `compressed`, JPEGs at `quality`.
    fn with_publishers(raw: Pub<Image>, compressed: Pub<CompressedImage>, quality: u8, counters: Arc<RobotCounters>) -> DebugOutlet {
        DebugOutlet {
            pubs: Arc::new(Publishers { raw, compressed }),
            quality,
            counters,
            busy: Arc::new(AtomicBool::new(false)),
            warned: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Which forms have subscribers now (a backend that cannot tell counts as subscribed).
    fn subscribed(&self) -> Wanted {
        let has = |n: Option<usize>| n.is_none_or(|n| n > 0);
        Wanted { raw: has(self.pubs.raw.subscribers()), compressed: has(self.pubs.compressed.subscribers()) }
    }

    /// Whether a frame converted now should be kept for a debug image: a form is subscribed and
    /// no debug image is being drawn.
    pub(super) fn wanted(&self) -> bool {
        !self.busy.load(Ordering::Acquire) && self.subscribed().any()
    }

    /// Draws `annotations` on `kept`'s frame and publishes it, stamped `header`, on the forms
    /// subscribed now, on the blocking pool. Returns the task (tests wait for it), or `None`
    /// when nothing is drawn: no form subscribed, or a debug image still being drawn (counted).
    pub(super) fn submit(&self, kept: Kept, header: &Header, annotations: Annotations) -> Option<tokio::task::JoinHandle<()>> {
        let wanted = self.subscribed();
        if !wanted.any() {
            return None;
        }
        if self.busy.swap(true, Ordering::AcqRel) {
            self.counters.debug_images_skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let (pubs, counters, busy, warned) = (self.pubs.clone(), self.counters.clone(), self.busy.clone(), self.warned.clone());
        let (quality, header) = (self.quality, header.clone());
        Some(tokio::task::spawn_blocking(move || {
            // Cleared however the work ends (a panic inside included), so the next frame is drawn.
            let _idle = ClearOnDrop(busy);
            match draw_and_publish(&kept, &annotations, &header, quality, wanted, &pubs) {
                Ok(()) => {
                    counters.debug_images.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    let n = counters.debug_image_errors.fetch_add(1, Ordering::Relaxed) + 1;
                    if warned.swap(true, Ordering::Relaxed) {
                        tracing::debug!(error = %e, debug_image_errors = n, "no debug image for this frame");
                    } else {
                        tracing::warn!(
                            error = %e, frame = %header.frame_id, debug_image_errors = n,
                            "no debug image for this frame (its result was published); later ones are counted in /diagnostics' debug_image_errors"
                        );
                    }
                }
            }
        }))
    }
}

/// Clears the flag it holds when dropped.
struct ClearOnDrop(Arc<AtomicBool>);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Why a debug image was not published.
#[derive(Debug, thiserror::Error)]
enum DebugImageError {
    /// The frame cannot be drawn on (its encoding, a compressed frame that does not decode).
    #[error("the frame cannot be drawn on: {0}")]
    Frame(#[from] ConvertError),
    /// The JPEG form could not be encoded.
    #[error("encoding the JPEG: {0}")]
    Jpeg(#[from] lop::codec::CodecError),
    /// A publisher failed.
    #[error("publishing: {0}")]
    Publish(#[from] crate::Error),
}

/// The frame as a canvas, the annotations drawn, the subscribed forms published.
fn draw_and_publish(
    kept: &Kept,
    a: &Annotations,
    header: &Header,
    quality: u8,
    wanted: Wanted,
    pubs: &Publishers,
) -> std::result::Result<(), DebugImageError> {
    let mut canvas = canvas_of(kept)?;
    annotate(&mut canvas, a);
    let ros_header = hiroz_msgs::std_msgs::Header { stamp: to_time(header.stamp), frame_id: header.frame_id.clone() };
    if wanted.compressed {
        let jpeg = canvas.to_jpeg(quality)?;
        pubs.compressed.publish(&CompressedImage { header: ros_header.clone(), format: JPEG_FORMAT.into(), data: jpeg.into() })?;
    }
    if wanted.raw {
        let (width, height) = (canvas.width, canvas.height);
        let image =
            Image { header: ros_header, height, width, encoding: "rgb8".into(), is_bigendian: 0, step: width * 3, data: canvas.rgb.into() };
        pubs.raw.publish(&image)?;
    }
    Ok(())
}

/// The kept frame's pixels as a canvas (a compressed frame decoded again, under the same cap).
fn canvas_of(kept: &Kept) -> std::result::Result<Canvas, ConvertError> {
    match &kept.frame {
        Frame::Image(m, _) => Canvas::from_view(&m.view()),
        Frame::Compressed(m, _) => {
            let picture = convert::compressed::decode(&m.format, (*m.data).as_ref(), kept.max_pixels)?;
            Canvas::from_view(&convert::compressed::view(&picture))
        }
        Frame::Cloud(..) => Err(ConvertError::BadTarget { msg: "a point cloud has no picture to draw on".into() }),
    }
}

#[cfg(test)]
mod tests;

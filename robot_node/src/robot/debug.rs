//! The annotated debug image going out ([`DebugOutlet`]): for a frame answered while
//! `topics.debug_image` or its `/compressed` form has a subscriber, the frame with its results
//! drawn ([`crate::annotate`]) as `sensor_msgs/Image` (`rgb8`) and `sensor_msgs/CompressedImage`
//! (JPEG), each only where it has a subscriber.
//!
//! It costs nothing without subscribers: the frame loop asks [`DebugOutlet::wanted`] (a lookup in
//! the backend's view of the graph) before converting a frame, and only then keeps the frame
//! past its conversion. The drawing, the JPEG and the publishing run on a thread of their own at
//! the lowest priority (nice 19), after the frame's `InferenceResult` went out: it takes only the
//! CPU time the inference leaves, so a busy robot publishes fewer debug images rather than
//! slower results. One debug image at a time: a frame answered while the last is still being
//! drawn gets none (counted), and at most `debug_image.max_rate_hz` a second (frames in between
//! are not kept). A frame the drawer cannot read is counted and logged once, and its
//! result is already published.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::counters::RobotCounters;
use super::frame::{Frame, Kept};
use crate::annotate::{Annotations, Canvas, annotate};
use crate::backend::{CompressedImage, Header, Image, Pub, SharedRos, to_time};
use crate::config::{InputKind, RobotConfig};
use crate::convert::{self, ConvertError};
use crate::error::{Error, Result};

/// The `format` of the JPEG form, as image_transport's compressed transport writes it for an
/// `rgb8` source (decoders give `rgb8` back).
pub(super) const JPEG_FORMAT: &str = "rgb8; jpeg compressed bgr8";

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

/// The two publishers, used by the drawing thread.
struct Publishers {
    raw: Pub<Image>,
    compressed: Pub<CompressedImage>,
}

impl Publishers {
    /// Which forms have subscribers now (a backend that cannot tell counts as subscribed).
    fn subscribed(&self) -> Wanted {
        let has = |n: Option<usize>| n.is_none_or(|n| n > 0);
        Wanted { raw: has(self.raw.subscribers()), compressed: has(self.compressed.subscribers()) }
    }
}

/// One debug image to draw: the frame, its header, what to draw and which forms to publish.
struct Job {
    kept: Kept,
    header: Header,
    annotations: Annotations,
    wanted: Wanted,
}

/// Draws and publishes debug images for subscribed topics (see the module docs).
pub(super) struct DebugOutlet {
    pubs: Arc<Publishers>,
    /// To the drawing thread, which ends when this is dropped.
    jobs: SyncSender<Job>,
    counters: Arc<RobotCounters>,
    /// A debug image is waiting for the drawing thread or being drawn.
    busy: Arc<AtomicBool>,
    /// Least time between two debug images (`debug_image.max_rate_hz`; zero: none).
    min_interval: Duration,
    /// When the last debug image was handed to the thread.
    last: Mutex<Option<Instant>>,
}

impl DebugOutlet {
    /// Declares the two publishers (`topic`: `topics.debug_image` under the camera's namespace,
    /// and its `/compressed`) and starts the drawing thread; `None` when `debug_image.enabled`
    /// is false or the input is a point cloud (no picture to draw on).
    ///
    /// # Errors
    /// A topic the backend refuses; a thread the system refuses.
    pub(super) fn new(cfg: &RobotConfig, ros: &SharedRos, counters: Arc<RobotCounters>, topic: &str) -> Result<Option<DebugOutlet>> {
        if !cfg.debug_image.enabled || cfg.input != InputKind::Camera {
            return Ok(None);
        }
        let raw = ros.image_publisher(topic)?;
        let compressed = ros.compressed_image_publisher(&format!("{}/compressed", topic.trim_end_matches('/')))?;
        let rate = cfg.debug_image.max_rate_hz;
        let min_interval = if rate > 0.0 { Duration::from_secs_f64(1.0 / rate) } else { Duration::ZERO };
        DebugOutlet::with_publishers(raw, compressed, (cfg.debug_image.jpeg_quality, min_interval), counters).map(Some)
    }

    /// An outlet publishing through `raw` and `compressed`, JPEGs at `quality`, at most one debug
    /// image per `min_interval`, with its thread.
    ///
    /// # Errors
    /// [`Error::Thread`] when the drawing thread cannot start.
    fn with_publishers(
        raw: Pub<Image>,
        compressed: Pub<CompressedImage>,
        (quality, min_interval): (u8, Duration),
        counters: Arc<RobotCounters>,
    ) -> Result<DebugOutlet> {
        let pubs = Arc::new(Publishers { raw, compressed });
        let busy = Arc::new(AtomicBool::new(false));
        // One slot: a job is handed over only while the thread is idle (`busy`).
        let (jobs, inbox) = sync_channel::<Job>(1);
        let drawer = Drawer { pubs: pubs.clone(), counters: counters.clone(), busy: busy.clone(), quality, warned: false };
        std::thread::Builder::new()
            .name(THREAD.into())
            .spawn(move || drawer.run(&inbox))
            .map_err(|source| Error::Thread { name: THREAD, source })?;
        Ok(DebugOutlet { pubs, jobs, counters, busy, min_interval, last: Mutex::new(None) })
    }

    /// Whether a frame converted now should be kept for a debug image: a form is subscribed, no
    /// debug image is being drawn, and the last was handed over at least `min_interval` ago.
    pub(super) fn wanted(&self) -> bool {
        !self.busy.load(Ordering::Acquire) && self.due() && self.pubs.subscribed().any()
    }

    /// Whether `min_interval` has passed since the last debug image (or there was none).
    fn due(&self) -> bool {
        let last = *self.last.lock().unwrap_or_else(PoisonError::into_inner);
        last.is_none_or(|t| t.elapsed() >= self.min_interval)
    }

    /// Hands `kept`'s frame, stamped `header`, with `annotations` to the drawing thread, for the
    /// forms subscribed now. False when nothing will be drawn: no form subscribed, or a debug
    /// image still being drawn (counted in `debug_images_skipped`).
    pub(super) fn submit(&self, kept: Kept, header: &Header, annotations: Annotations) -> bool {
        let wanted = self.pubs.subscribed();
        if !wanted.any() {
            return false;
        }
        if self.busy.swap(true, Ordering::AcqRel) {
            self.counters.debug_images_skipped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        let job = Job { kept, header: header.clone(), annotations, wanted };
        if let Err(e) = self.jobs.try_send(job) {
            // Not reached while the thread lives (it empties the slot before clearing `busy`).
            self.busy.store(false, Ordering::Release);
            self.counters.debug_image_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(error = %e, "the debug image's thread takes no more frames");
            return false;
        }
        true
    }
}

/// The drawing thread's name.
const THREAD: &str = "lop-debug-image";

/// The drawing thread's state.
struct Drawer {
    pubs: Arc<Publishers>,
    counters: Arc<RobotCounters>,
    busy: Arc<AtomicBool>,
    quality: u8,
    /// The first undrawable frame was logged at warn (later ones at debug; all are counted).
    warned: bool,
}

impl Drawer {
    /// Draws and publishes each job until the outlet is dropped, at the lowest priority.
    fn run(mut self, inbox: &Receiver<Job>) {
        lower_priority();
        while let Ok(job) = inbox.recv() {
            // A panic is counted like any failure and the thread goes on (nothing in the
            // drawing indexes past what it checked, but a debug image must never end the node).
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                draw_and_publish(&job.kept, &job.annotations, &job.header, self.quality, job.wanted, &self.pubs)
            }))
            .unwrap_or(Err(DebugImageError::Panic));
            match result {
                Ok(()) => {
                    self.counters.debug_images.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => self.failed(&e, &job.header),
            }
            drop(job);
            self.busy.store(false, Ordering::Release);
        }
    }

    /// Counts a failed debug image; the first is logged at warn, the rest at debug.
    fn failed(&mut self, e: &DebugImageError, header: &Header) {
        let n = self.counters.debug_image_errors.fetch_add(1, Ordering::Relaxed) + 1;
        if std::mem::replace(&mut self.warned, true) {
            tracing::debug!(error = %e, debug_image_errors = n, "no debug image for this frame");
        } else {
            tracing::warn!(
                error = %e, frame = %header.frame_id, debug_image_errors = n,
                "no debug image for this frame (its result was published); later ones are counted in /diagnostics' debug_image_errors"
            );
        }
    }
}

/// Lowers the calling thread to nice 19, the lowest priority, so that it runs on what the
/// inference's threads leave (on Linux a thread's nice value is its own; elsewhere, or when
/// refused, it keeps the process's).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions and cannot fail; setpriority reads no memory of
        // ours and changes only this thread's nice value, its failure reported by the return value.
        let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19) };
        if rc != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "the debug image's thread keeps its priority");
        }
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
    /// The drawing panicked (a bug; the thread goes on).
    #[error("the drawing panicked")]
    Panic,
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

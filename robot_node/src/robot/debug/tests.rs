//! The debug outlet: nothing drawn or published without subscribers, each form only where it is
//! subscribed, the picture the frame's size with the box drawn, an undrawable frame counted
//! (never a panic), and one debug image at a time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{DebugOutlet, Frame, JPEG_FORMAT, Kept};
use crate::annotate::{Annotations, Labelled, class_colour};
use crate::backend::{CompressedImage, Header, Image, ImageIn, Publisher, Stamp};
use crate::robot::counters::RobotCounters;

/// A publisher that keeps what it is given and reports `subs` subscribers.
struct Fake<T> {
    subs: Arc<AtomicUsize>,
    sent: Arc<Mutex<Vec<T>>>,
}

impl<T: Clone + Send + Sync> Publisher<T> for Fake<T> {
    fn publish(&self, msg: &T) -> crate::Result<()> {
        self.sent.lock().expect("lock").push(msg.clone());
        Ok(())
    }

    fn subscribers(&self) -> Option<usize> {
        Some(self.subs.load(Ordering::Relaxed))
    }
}

struct Rig {
    outlet: DebugOutlet,
    counters: Arc<RobotCounters>,
    raw_subs: Arc<AtomicUsize>,
    jpeg_subs: Arc<AtomicUsize>,
    raw: Arc<Mutex<Vec<Image>>>,
    jpeg: Arc<Mutex<Vec<CompressedImage>>>,
}

fn rig() -> Rig {
    rig_at(Duration::ZERO)
}

/// A rig whose outlet draws at most one debug image per `min_interval`.
fn rig_at(min_interval: Duration) -> Rig {
    let (raw_subs, jpeg_subs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (raw, jpeg) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
    let counters = Arc::new(RobotCounters::default());
    let outlet = DebugOutlet::with_publishers(
        Box::new(Fake { subs: raw_subs.clone(), sent: raw.clone() }),
        Box::new(Fake { subs: jpeg_subs.clone(), sent: jpeg.clone() }),
        (90, min_interval),
        counters.clone(),
    )
    .expect("the drawing thread");
    Rig { outlet, counters, raw_subs, jpeg_subs, raw, jpeg }
}

/// A grey 160x120 frame in `encoding` (3 bytes a pixel).
fn frame(encoding: &str) -> Kept {
    let m = ImageIn {
        header: Header { stamp: Stamp { sec: 5, nanosec: 6 }, frame_id: "cam".into() },
        height: 120,
        width: 160,
        encoding: encoding.into(),
        is_bigendian: false,
        step: 480,
        data: Box::new(vec![100u8; 480 * 120]),
    };
    Kept { frame: Frame::Image(m, Instant::now()), max_pixels: 1 << 20 }
}

fn header() -> Header {
    Header { stamp: Stamp { sec: 5, nanosec: 6 }, frame_id: "cam".into() }
}

/// A box over columns 40..80, rows 30..90.
fn boxed() -> Annotations {
    Annotations {
        boxes: vec![Labelled { bounds: [40.0, 30.0, 80.0, 90.0], class: "cup".into(), score: 0.75, id: "0".into() }],
        caption: "lop | bucket 8 MB/s | 10.0 ms".into(),
        ..Default::default()
    }
}

/// Submits a frame and waits until the drawing thread is done with it.
fn draw(outlet: &DebugOutlet, kept: Kept, annotations: Annotations) {
    assert!(outlet.submit(kept, &header(), annotations), "handed to the drawing thread");
    let deadline = Instant::now() + Duration::from_secs(20);
    while outlet.busy.load(Ordering::Acquire) {
        assert!(Instant::now() < deadline, "the drawing thread did not finish");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn nothing_is_drawn_or_published_without_subscribers() {
    let r = rig();
    assert!(!r.outlet.wanted(), "no frame is kept without subscribers");
    assert!(!r.outlet.submit(frame("rgb8"), &header(), boxed()), "nothing drawn");
    std::thread::sleep(Duration::from_millis(50));
    assert!(r.raw.lock().expect("lock").is_empty() && r.jpeg.lock().expect("lock").is_empty());
    let c = &r.counters;
    assert_eq!(
        (
            c.debug_images.load(Ordering::Relaxed),
            c.debug_image_errors.load(Ordering::Relaxed),
            c.debug_images_skipped.load(Ordering::Relaxed)
        ),
        (0, 0, 0)
    );
}

#[test]
fn each_form_goes_out_only_where_subscribed_with_the_box_drawn() {
    let r = rig();
    r.raw_subs.store(1, Ordering::Relaxed);
    assert!(r.outlet.wanted());
    draw(&r.outlet, frame("bgr8"), boxed());
    assert!(r.jpeg.lock().expect("lock").is_empty(), "the JPEG form has no subscriber");
    let img = r.raw.lock().expect("lock").pop().expect("a raw debug image");
    assert_eq!((img.width, img.height, img.step, img.encoding.as_str()), (160, 120, 480, "rgb8"));
    assert_eq!((img.header.stamp.sec, img.header.stamp.nanosec, img.header.frame_id.as_str()), (5, 6, "cam"));
    let bytes: Vec<u8> = img.data.0.zslices().flat_map(|s| s.as_slice().to_vec()).collect();
    let px = |x: usize, y: usize| [bytes[(y * 160 + x) * 3], bytes[(y * 160 + x) * 3 + 1], bytes[(y * 160 + x) * 3 + 2]];
    let colour = class_colour("cup");
    assert_eq!((px(40, 60), px(79, 60), px(60, 89)), (colour, colour, colour), "the box's edges");
    assert_eq!((px(60, 60), px(82, 60), px(60, 100)), ([100; 3], [100; 3], [100; 3]), "inside and outside");
    assert_eq!(r.counters.debug_images.load(Ordering::Relaxed), 1);

    // Only the JPEG form subscribed: a JPEG of the frame's size, the box still there.
    r.raw_subs.store(0, Ordering::Relaxed);
    r.jpeg_subs.store(2, Ordering::Relaxed);
    draw(&r.outlet, frame("rgb8"), boxed());
    assert!(r.raw.lock().expect("lock").is_empty());
    let m = r.jpeg.lock().expect("lock").pop().expect("a JPEG debug image");
    assert_eq!(m.format, JPEG_FORMAT);
    let data: Vec<u8> = m.data.0.zslices().flat_map(|s| s.as_slice().to_vec()).collect();
    let picture = lop::codec::photo::decode_picture(&data).expect("a JPEG");
    assert_eq!((picture.width, picture.height, picture.channels), (160, 120, 3));
    let at = |x: usize, y: usize| &picture.pixels[(y * 160 + x) * 3..][..3];
    let near = |p: &[u8], c: [u8; 3]| p.iter().zip(c).all(|(&a, b)| a.abs_diff(b) < 40);
    assert!(near(at(60, 31), colour), "the box's top edge in the JPEG: {:?}", at(60, 31));
    assert!(near(at(60, 60), [100; 3]), "inside the box in the JPEG: {:?}", at(60, 60));
}

#[test]
fn an_undrawable_frame_is_counted_not_published() {
    let r = rig();
    r.raw_subs.store(1, Ordering::Relaxed);
    r.jpeg_subs.store(1, Ordering::Relaxed);
    draw(&r.outlet, frame("yuv422"), boxed());
    assert!(r.raw.lock().expect("lock").is_empty() && r.jpeg.lock().expect("lock").is_empty());
    assert_eq!(r.counters.debug_image_errors.load(Ordering::Relaxed), 1);
    assert_eq!(r.counters.debug_images.load(Ordering::Relaxed), 0);
    // The next drawable frame is drawn: the outlet is not left busy.
    assert!(r.outlet.wanted());
    draw(&r.outlet, frame("rgb8"), boxed());
    assert_eq!(r.counters.debug_images.load(Ordering::Relaxed), 1);
}

#[test]
fn a_frame_answered_while_one_is_drawn_gets_none() {
    let r = rig();
    r.raw_subs.store(1, Ordering::Relaxed);
    r.outlet.busy.store(true, Ordering::Release);
    assert!(!r.outlet.wanted(), "not kept while one is drawn");
    assert!(!r.outlet.submit(frame("rgb8"), &header(), boxed()));
    assert_eq!(r.counters.debug_images_skipped.load(Ordering::Relaxed), 1);
    assert!(r.raw.lock().expect("lock").is_empty());
}

#[test]
fn at_most_max_rate_hz_debug_images_a_second() {
    let r = rig_at(Duration::from_millis(300));
    r.raw_subs.store(1, Ordering::Relaxed);
    let t0 = Instant::now();
    draw(&r.outlet, frame("rgb8"), boxed());
    // Within the interval no frame is kept, whatever the subscribers.
    while t0.elapsed() < Duration::from_millis(250) {
        assert!(!r.outlet.wanted(), "kept {:?} after the last", t0.elapsed());
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300).saturating_sub(t0.elapsed()));
    assert!(r.outlet.wanted(), "due again after the interval");
    draw(&r.outlet, frame("rgb8"), boxed());
    assert_eq!(r.counters.debug_images.load(Ordering::Relaxed), 2);
}

#[test]
fn a_compressed_frame_is_decoded_again_and_drawn_at_its_size() {
    let r = rig();
    r.raw_subs.store(1, Ordering::Relaxed);
    let image = lop::codec::Image { channels: 3, width: 96, height: 64 };
    let jpeg = lop::codec::jpeg::encode_as_a_camera_does(&image, &vec![100u8; 3 * 96 * 64], 64, 90).expect("jpeg");
    let m = crate::backend::CompressedIn { header: header(), format: "jpeg".into(), data: Box::new(jpeg) };
    let kept = Kept { frame: Frame::Compressed(m, Instant::now()), max_pixels: 1 << 20 };
    let a = Annotations {
        boxes: vec![Labelled { bounds: [10.0, 20.0, 50.0, 60.0], class: "cup".into(), score: 0.5, id: "0".into() }],
        ..Default::default()
    };
    draw(&r.outlet, kept, a);
    let img = r.raw.lock().expect("lock").pop().expect("a debug image");
    assert_eq!((img.width, img.height, img.encoding.as_str()), (96, 64, "rgb8"));
    let bytes: Vec<u8> = img.data.0.zslices().flat_map(|s| s.as_slice().to_vec()).collect();
    let px = |x: usize, y: usize| [bytes[(y * 96 + x) * 3], bytes[(y * 96 + x) * 3 + 1], bytes[(y * 96 + x) * 3 + 2]];
    assert_eq!(px(10, 40), class_colour("cup"), "the box's left edge");
    assert!(px(30, 40).iter().all(|&v| v.abs_diff(100) <= 2), "the decoded frame inside: {:?}", px(30, 40));
}

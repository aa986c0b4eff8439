//! The annotations drawn where the results are: a detection's box edges in its class's colour
//! and nothing inside or outside it, labels and the caption where they belong, keypoints and
//! instance masks on their pixels.

use hiroz_msgs::std_msgs::Header;
use lop::postprocess::Postprocess;

use super::*;
use crate::convert::{ChannelOrder, Fit, ImageTarget};
use crate::results::{OutputView, Source, task_messages, task_messages_for};

const GREY: [u8; 3] = [90, 90, 90];

/// A 640x480 frame letterboxed into 320x320 (scale 0.5, 40 rows of margin on top).
fn source() -> Source {
    let target = ImageTarget { height: 320, width: 320, channels: 3, order: ChannelOrder::Rgb, fit: Fit::Letterbox { pad: 0 } };
    Source::Frame { width: 640, height: 480, target }
}

/// One detection, class 1 ("bicycle"), at model pixels x 100..200, y 140..240: frame pixels
/// x 200..400, y 200..400.
fn one_box() -> TaskMessages {
    let rows = [100.0, 140.0, 200.0, 240.0, 0.87, 1.0];
    let task = Postprocess::parse("detect").expect("spec");
    let names = ["person".to_string(), "bicycle".to_string()];
    task_messages(&task, &rows, &[1, 1, 6], &Header::default(), &source(), &names).expect("fits")
}

#[test]
fn a_box_is_drawn_on_its_edges_in_its_class_colour_and_nowhere_else() {
    let a = Annotations::from_task(&one_box(), caption("lop", 8.0, 0.0421, false));
    assert_eq!(a.boxes.len(), 1);
    assert_eq!((a.boxes[0].bounds, a.boxes[0].class.as_str()), ([200.0, 200.0, 400.0, 400.0], "bicycle"));
    let mut c = Canvas::filled(640, 480, GREY);
    annotate(&mut c, &a);
    let colour = class_colour("bicycle");
    assert_ne!(colour, GREY);
    // The edges: pixel columns 200 and 399, rows 200 and 399 (thickness 2, drawn inward).
    for (x, y) in [(200, 300), (201, 300), (399, 300), (398, 300), (300, 200), (300, 201), (300, 399), (300, 398), (200, 399), (399, 399)] {
        assert_eq!(c.pixel(x, y), Some(colour), "edge pixel ({x}, {y})");
    }
    // Inside and outside: the frame as it was.
    for (x, y) in [(202, 300), (300, 300), (397, 397), (199, 300), (400, 300), (300, 400), (300, 420), (500, 300), (100, 100)] {
        assert_eq!(c.pixel(x, y), Some(GREY), "pixel ({x}, {y})");
    }
    // The label sits on a box of the class's colour just above the box: "bicycle 0.87".
    let (w, h) = draw::text_size("bicycle 0.87", 1);
    assert_eq!(c.pixel(200, 200 - h as u32), Some(colour), "the label's background");
    assert_eq!(c.pixel(200 + w as u32, 200 - h as u32), Some(GREY), "past the label");
    // The caption, white on black, in the top-left corner.
    assert_eq!(a.caption, "lop | bucket 8 MB/s | 42.1 ms");
    let (cw, ch) = draw::text_size(&a.caption, 1);
    assert_eq!(c.pixel(0, 0), Some([0, 0, 0]));
    let white = (0..cw as u32).flat_map(|x| (0..ch as u32).map(move |y| (x, y))).filter(|&(x, y)| c.pixel(x, y) == Some([255; 3])).count();
    assert!(white > 50, "the caption's glyphs: {white} white pixels");
    assert_eq!(c.pixel(cw as u32 + 1, 2), Some(GREY), "past the caption");
}

#[test]
fn a_box_at_the_top_is_labelled_inside_and_a_wider_frame_draws_thicker() {
    assert_eq!((scale_for(640), scale_for(641), scale_for(1920)), (1, 2, 3));
    let a = Annotations {
        boxes: vec![Labelled { bounds: [10.0, 0.0, 300.0, 100.0], class: "x".into(), score: 0.5, id: "0".into() }],
        ..Default::default()
    };
    let mut c = Canvas::filled(1280, 720, GREY);
    annotate(&mut c, &a);
    let colour = class_colour("x");
    // Scale 2: lines 4 pixels wide; the label starts just inside the top line (row 4).
    assert_eq!(c.pixel(13, 50), Some(colour));
    assert_eq!(c.pixel(14, 50), Some(GREY));
    assert_eq!(c.pixel(10, 4), Some(colour), "the label's background inside the box");
}

#[test]
fn keypoints_and_instance_masks_are_drawn_on_their_pixels() {
    let a = Annotations {
        boxes: vec![Labelled { bounds: [0.0, 0.0, 20.0, 20.0], class: "person".into(), score: 0.9, id: "1".into() }],
        keypoints: vec![vec![(50.0, 50.0, 0.9), (80.0, 80.0, 0.1)]],
        instances: Some((100, 100, (0..100 * 100).map(|i| u8::from((i % 100) >= 60 && (i / 100) >= 60)).collect())),
        caption: String::new(),
    };
    let mut c = Canvas::filled(100, 100, GREY);
    annotate(&mut c, &a);
    let colour = class_colour("person");
    assert_eq!(c.pixel(50, 50), Some(colour), "a keypoint scored 0.9");
    assert_eq!(c.pixel(51, 51), Some(colour));
    let tinted = c.pixel(90, 70).expect("inside");
    assert!(tinted != GREY && tinted != colour, "the mask is mixed over the frame: {tinted:?}");
    assert_eq!(c.pixel(59, 70), Some(GREY), "left of the mask");
    // The keypoint scored 0.1 sits on the mask: only the tint shows there.
    assert_eq!(c.pixel(80, 80), Some(tinted));
    assert_eq!(c.pixel(0, 0), Some(colour), "no caption when there is none");
}

#[test]
fn segment_instance_messages_give_boxes_and_a_frame_sized_map() {
    let rows = [100.0, 140.0, 200.0, 240.0, 0.8, 0.0];
    let mut map = vec![0f32; 320 * 320];
    for y in 150..200 {
        map[y * 320 + 120..y * 320 + 180].fill(1.0);
    }
    let task = Postprocess::parse("segment-instance").expect("spec");
    let outputs = [OutputView { values: &rows, shape: &[1, 1, 6] }, OutputView { values: &map, shape: &[1, 1, 320, 320] }];
    let m = task_messages_for(&task, &outputs, &Header::default(), &source(), &[]).expect("fits");
    let a = Annotations::from_task(&m, String::new());
    let (w, h, ids) = a.instances.clone().expect("map");
    assert_eq!((w, h, ids.len()), (640, 480, 640 * 480));
    assert_eq!(a.boxes[0].id, "1");
    let mut c = Canvas::filled(640, 480, GREY);
    annotate(&mut c, &a);
    // Model pixel (150, 175) is frame pixel (300, 270): inside the mask, tinted in box 1's colour.
    let p = c.pixel(300, 270).expect("inside");
    let colour = class_colour("0");
    let mixed = |g: u8, c: u8| ((u32::from(g) * (256 - 110) + u32::from(c) * 110) / 256) as u8;
    assert_eq!(p, [mixed(GREY[0], colour[0]), mixed(GREY[1], colour[1]), mixed(GREY[2], colour[2])]);
}

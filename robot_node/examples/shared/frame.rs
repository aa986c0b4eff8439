//! A camera frame for the examples that drive `lop_robot` (`debug_image_cost`,
//! `cameras_memory`), included by path.

use hiroz_msgs::builtin_interfaces::Time;
use hiroz_msgs::sensor_msgs::Image;
use hiroz_msgs::std_msgs::Header;

/// An rgb8 frame of pseudo-random pixels, stamped `sec`.
pub fn frame((w, h): (u32, u32), sec: i32) -> Image {
    let data: Vec<u8> = (0..w * h * 3).map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(sec as u32) >> 13) as u8).collect();
    Image {
        header: Header { stamp: Time { sec, nanosec: 0 }, frame_id: "camera".into() },
        height: h,
        width: w,
        encoding: "rgb8".into(),
        is_bigendian: 0,
        step: w * 3,
        data: data.into(),
    }
}

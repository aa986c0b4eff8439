//! The annotated debug image's settings ([`DebugImageSettings`], `debug_image.*`): whether
//! `lop_robot` offers it at all, and its JPEG's quality. Its topic is `topics.debug_image`.

use super::values::{invalid, within};
use crate::error::Result;
use crate::params::Params;

/// `debug_image.*`: the input frame with the results drawn, on `topics.debug_image`
/// (`sensor_msgs/Image`, `rgb8`) and `<topics.debug_image>/compressed` (`sensor_msgs/
/// CompressedImage`, JPEG), drawn only for frames that arrive while either has a subscriber.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DebugImageSettings {
    /// `debug_image.enabled` (true): declare the two publishers. False: none are declared, and
    /// nothing about the debug image runs (for a backend or a deployment where even the
    /// subscriber check per frame is unwanted).
    pub enabled: bool,
    /// `debug_image.jpeg_quality` (80), 1 to 100: the compressed form's JPEG quality.
    pub jpeg_quality: u8,
    /// `debug_image.max_rate_hz` (5), 0 to 1000: at most this many debug images a second (0: one
    /// for every answered frame). A person watching needs few, and each costs the robot a copy
    /// of the frame, the drawing, and (for the `rgb8` form) a frame-sized message through the
    /// router; frames in between are not kept.
    pub max_rate_hz: f64,
}

impl Default for DebugImageSettings {
    fn default() -> Self {
        DebugImageSettings { enabled: true, jpeg_quality: 80, max_rate_hz: 5.0 }
    }
}

impl DebugImageSettings {
    /// Reads `debug_image.enabled`, `debug_image.jpeg_quality` and `debug_image.max_rate_hz`.
    ///
    /// # Errors
    /// [`crate::Error::Config`] for a quality outside 1 to 100 or a rate outside 0 to 1000.
    pub(super) fn read(p: &mut Params) -> Result<DebugImageSettings> {
        let d = DebugImageSettings::default();
        let enabled = p.bool("debug_image.enabled", d.enabled)?;
        let q = p.int("debug_image.jpeg_quality", i64::from(d.jpeg_quality))?;
        let jpeg_quality = u8::try_from(q)
            .ok()
            .filter(|q| (1..=100).contains(q))
            .ok_or_else(|| invalid(format!("debug_image.jpeg_quality must be 1 to 100, got {q}")))?;
        let max_rate_hz = within("debug_image.max_rate_hz", p.double("debug_image.max_rate_hz", d.max_rate_hz)?, 0.0, 1000.0)?;
        Ok(DebugImageSettings { enabled, jpeg_quality, max_rate_hz })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_a_bad_quality() {
        let mut p = Params::empty("lop_robot");
        assert_eq!(DebugImageSettings::read(&mut p).expect("defaults"), DebugImageSettings::default());
        let mut bad = Params::from_yaml_str("lop_robot", "lop_robot:\n  ros__parameters:\n    debug_image:\n      jpeg_quality: 0\n", "t")
            .expect("yaml");
        let e = DebugImageSettings::read(&mut bad).expect_err("0").to_string();
        assert!(e.contains("debug_image.jpeg_quality must be 1 to 100, got 0"), "{e}");
        let mut fast =
            Params::from_yaml_str("lop_robot", "lop_robot:\n  ros__parameters:\n    debug_image:\n      max_rate_hz: -1.0\n", "t")
                .expect("yaml");
        let e = DebugImageSettings::read(&mut fast).expect_err("-1").to_string();
        assert!(e.contains("debug_image.max_rate_hz must be in [0, 1000], got -1"), "{e}");
    }
}

//! The annotated debug image's settings ([`DebugImageSettings`], `debug_image.*`): whether
//! `lop_robot` offers it at all, and its JPEG's quality. Its topic is `topics.debug_image`.

use super::values::invalid;
use crate::error::Result;
use crate::params::Params;

/// `debug_image.*`: the input frame with the results drawn, on `topics.debug_image`
/// (`sensor_msgs/Image`, `rgb8`) and `<topics.debug_image>/compressed` (`sensor_msgs/
/// CompressedImage`, JPEG), drawn only for frames that arrive while either has a subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DebugImageSettings {
    /// `debug_image.enabled` (true): declare the two publishers. False: none are declared, and
    /// nothing about the debug image runs (for a backend or a deployment where even the
    /// subscriber check per frame is unwanted).
    pub enabled: bool,
    /// `debug_image.jpeg_quality` (80), 1 to 100: the compressed form's JPEG quality.
    pub jpeg_quality: u8,
}

impl Default for DebugImageSettings {
    fn default() -> Self {
        DebugImageSettings { enabled: true, jpeg_quality: 80 }
    }
}

impl DebugImageSettings {
    /// Reads `debug_image.enabled` and `debug_image.jpeg_quality`.
    ///
    /// # Errors
    /// [`crate::Error::Config`] for a quality outside 1 to 100.
    pub(super) fn read(p: &mut Params) -> Result<DebugImageSettings> {
        let d = DebugImageSettings::default();
        let enabled = p.bool("debug_image.enabled", d.enabled)?;
        let q = p.int("debug_image.jpeg_quality", i64::from(d.jpeg_quality))?;
        let jpeg_quality = u8::try_from(q)
            .ok()
            .filter(|q| (1..=100).contains(q))
            .ok_or_else(|| invalid(format!("debug_image.jpeg_quality must be 1 to 100, got {q}")))?;
        Ok(DebugImageSettings { enabled, jpeg_quality })
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
    }
}

//! The supported libtorch range and how a version string is read, shared by the engine
//! (`lop::libtorch`) and its build script (`lop/build.rs`, through `#[path]`), so that the two
//! refuse the same versions. No libtorch here: only numbers and strings.

/// The libtorch major version this build supports.
pub const MAJOR: u32 = 2;

/// The libtorch minors (of [`MAJOR`]) tch 0.26 builds against and runs the zoo on exactly:
/// 2.12 and 2.13 (docs/jetson.md: 2.9 and older do not compile).
pub const MINORS: std::ops::RangeInclusive<u32> = 12..=13;

/// (major, minor) of a version string such as `2.13.0+cu130`.
pub fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('+').next().unwrap_or_default().split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

/// Whether a version string is in the supported range.
pub fn in_range(version: &str) -> bool {
    major_minor(version).is_some_and(|(major, minor)| major == MAJOR && MINORS.contains(&minor))
}

#[cfg(test)]
mod tests {
    use super::{in_range, major_minor};

    #[test]
    fn versions_read_with_their_local_tag_and_only_the_range_passes() {
        assert_eq!(major_minor("2.13.0+cu130"), Some((2, 13)));
        assert_eq!(major_minor("2.12"), Some((2, 12)));
        assert_eq!(major_minor("two.13"), None);
        assert_eq!(major_minor("2"), None);
        for ok in ["2.12.1", "2.13.0+cpu", "2.13.0a0+git1234"] {
            assert!(in_range(ok), "{ok}");
        }
        for bad in ["2.11.0", "2.14.0", "3.13.0", "", "2.x"] {
            assert!(!in_range(bad), "{bad}");
        }
    }
}

// The supported libtorch range and how a version string is read, shared by the crate
// (`lop::libtorch`) and its build script (`lop/build.rs`, through `#[path]`), so that the two
// refuse the same versions.

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

//! Reading sysfs-style files: one number per file, directories listed in natural order.
//!
//! Files are opened afresh on every read, as sysfs expects (and as fixture trees that replace
//! files by rename need).

use crate::error::{Error, Result};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// Reads a small text file, trimmed.
pub(crate) fn read_trimmed(sensor: &str, path: &Path) -> Result<String> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| Error::power(sensor, format!("cannot read {}: {}", path.display(), describe(&e))))
}

/// Reads a file holding one decimal number.
pub(crate) fn read_number(sensor: &str, path: &Path) -> Result<f64> {
    let text = read_trimmed(sensor, path)?;
    parse_number(&text).ok_or_else(|| {
        let shown: String = text.chars().take(40).collect();
        Error::power(sensor, format!("{} holds '{shown}', not a number", path.display()))
    })
}

/// Parses a decimal number (integer or float), rejecting empty text, NaN and infinities.
pub(crate) fn parse_number(text: &str) -> Option<f64> {
    let t = text.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b)) {
        return None;
    }
    t.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Lists a directory's entries as (name, path) in natural order (`hwmon9` before `hwmon10`).
/// A missing or unreadable directory is [`Error::NotAvailable`].
pub(crate) fn list_dir(sensor: &str, dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let rd =
        std::fs::read_dir(dir).map_err(|e| Error::not_available(sensor, format!("cannot list {}: {}", dir.display(), describe(&e))))?;
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| Error::not_available(sensor, format!("cannot list {}: {}", dir.display(), describe(&e))))?;
        if let Some(name) = entry.file_name().to_str() {
            out.push((name.to_string(), entry.path()));
        }
    }
    out.sort_by_key(|a| natural_key(&a.0));
    Ok(out)
}

/// Splits a name into text and numbers so that numeric parts compare as numbers.
fn natural_key(name: &str) -> Vec<(String, u64)> {
    let mut key = Vec::new();
    let mut text = String::new();
    let mut digits = String::new();
    for c in name.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            if !digits.is_empty() {
                key.push((std::mem::take(&mut text), digits.parse().unwrap_or(u64::MAX)));
                digits.clear();
            }
            text.push(c);
        }
    }
    key.push((text, if digits.is_empty() { 0 } else { digits.parse().unwrap_or(u64::MAX) }));
    key
}

/// An io error in words, with a hint for the usual sysfs case.
pub(crate) fn describe(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::NotFound => "no such file or directory".to_string(),
        ErrorKind::PermissionDenied => "permission denied (run as root, or use tegrastats)".to_string(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_sysfs_parse_numbers() {
        assert_eq!(parse_number("1234\n"), Some(1234.0));
        assert_eq!(parse_number(" -5 "), Some(-5.0));
        assert_eq!(parse_number("2.5"), Some(2.5));
        for bad in ["", "abc", "12mW", "nan", "inf", "0x10", "1 2"] {
            assert_eq!(parse_number(bad), None, "{bad}");
        }
    }

    #[test]
    fn power_sysfs_natural_order() {
        let mut v = vec!["hwmon10", "hwmon9", "hwmon1", "iio:device2", "iio:device0"];
        v.sort_by_key(|a| natural_key(a));
        assert_eq!(v, ["hwmon1", "hwmon9", "hwmon10", "iio:device0", "iio:device2"]);
    }
}

//! The labelled rails of Jetson INA3221 power monitors in sysfs, found the same way under both
//! of its drivers (JetPack 4's `ina3221x` iio driver and JetPack 5/6's `ina3221` hwmon driver):
//! a device folder `<bus>-<addr>` per monitor below the driver's folder, an instance folder in it
//! (`iio:deviceN`, or `hwmon/hwmonN`), and a label file per channel. Unlabelled and unconnected
//! channels are skipped; a label that two monitors share is told apart by its device
//! (`VDD_IN@1-0040`).

use crate::error::{Error, Result};
use crate::sysfs::{list_dir, read_trimmed};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

/// Where one driver keeps its rails.
#[derive(Debug)]
pub(crate) struct RailLayout {
    /// The power source's name, for errors.
    pub source: &'static str,
    /// The driver's folder below the root.
    pub driver_dir: &'static str,
    /// What a missing driver folder means, for the error (`not a JetPack 4 Jetson`).
    pub missing_means: &'static str,
    /// The folder inside a device folder that holds the instances (`hwmon`; empty for none).
    pub instances_in: &'static str,
    /// How an instance folder's name starts (`hwmon`, `iio:device`).
    pub instance_prefix: &'static str,
    /// The channel numbers to look at.
    pub channels: RangeInclusive<usize>,
    /// The label file of channel K (`rail_name_K`, `inK_label`).
    pub label_file: fn(usize) -> String,
    /// Whether a label names no rail (unconnected, or a channel that repeats others).
    pub skip: fn(&str) -> bool,
    /// What was looked for, for the error when nothing is found (`rail_name_K files`).
    pub looked_for: &'static str,
}

/// One rail: its unique name, the instance folder holding its files, and its channel number.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FoundRail {
    pub name: String,
    pub dir: PathBuf,
    pub channel: usize,
}

/// Every rail of `layout` below `root`, in the natural order of devices, instances and channels.
///
/// # Errors
/// [`Error::NotAvailable`] when the driver folder is absent or holds no rail; [`Error::Power`]
/// when a label file cannot be read.
pub(crate) fn find_rails(root: &Path, layout: &RailLayout) -> Result<Vec<FoundRail>> {
    let source = layout.source;
    let dir = root.join(layout.driver_dir);
    if !dir.is_dir() {
        return Err(Error::not_available(source, format!("no {} ({})", dir.display(), layout.missing_means)));
    }
    let mut rails: Vec<FoundRail> = Vec::new();
    for (dev_name, dev) in list_dir(source, &dir)? {
        // Device folders are `<bus>-<addr>`; the rest are driver files (bind, uevent, ...).
        let instances = dev.join(layout.instances_in);
        if !dev_name.contains('-') || !instances.is_dir() {
            continue;
        }
        for (instance_name, instance) in list_dir(source, &instances)? {
            if !instance_name.starts_with(layout.instance_prefix) {
                continue;
            }
            for channel in layout.channels.clone() {
                let label_path = instance.join((layout.label_file)(channel));
                if !label_path.exists() {
                    continue;
                }
                let label = read_trimmed(source, &label_path)?;
                if (layout.skip)(&label) {
                    continue;
                }
                let name = if rails.iter().any(|r| r.name == label) { format!("{label}@{dev_name}") } else { label };
                rails.push(FoundRail { name, dir: instance.clone(), channel });
            }
        }
    }
    if rails.is_empty() {
        return Err(Error::not_available(source, format!("no {} below {}", layout.looked_for, dir.display())));
    }
    Ok(rails)
}

/// `path`, which rail `rail` reads, or [`Error::Power`] naming both when it is absent.
pub(crate) fn rail_file(source: &str, rail: &str, path: PathBuf) -> Result<PathBuf> {
    if path.exists() { Ok(path) } else { Err(Error::power(source, format!("rail {rail}: no {}", path.display()))) }
}

//! Jetson INA3221 on JetPack 4: the `ina3221x` iio driver.
//!
//! Layout: `/sys/bus/i2c/drivers/ina3221x/<bus>-<addr>/iio:deviceN/` with `rail_name_K` and
//! `in_powerK_input` in milliwatts (K = 0..2 per monitor; Xavier has two monitors, Nano and TX2
//! one or two). The total is the module input rail (`POM_5V_IN` on Nano, `VDD_IN` on Xavier NX /
//! TX2), see [`super::total_index`].

use super::rails::{RailLayout, find_rails, rail_file};
use super::sysfs::read_number;
use super::{PowerReading, PowerSource, check_power, midpoint, total_index};
use crate::error::Result;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The source's name.
pub const NAME: &str = "jetson-iio";

/// The driver directory below the root.
pub const DRIVER_DIR: &str = "sys/bus/i2c/drivers/ina3221x";

/// INA3221 rails read through the JetPack 4 iio driver.
#[derive(Debug)]
pub struct JetsonIio {
    rails: Vec<String>,
    files: Vec<PathBuf>,
    total: usize,
}

impl JetsonIio {
    /// Finds every rail below `root` and takes a first reading to check the files.
    ///
    /// # Errors
    /// [`Error::NotAvailable`] when the driver directory or rails are absent; [`Error::Power`] when
    /// a file is unreadable or holds garbage, or there is no total rail.
    pub fn open(root: &Path, total_rail: Option<&str>) -> Result<Self> {
        let layout = RailLayout {
            source: NAME,
            driver_dir: DRIVER_DIR,
            missing_means: "not a JetPack 4 Jetson",
            instances_in: "",
            instance_prefix: "iio:device",
            channels: 0..=15,
            label_file: |k| format!("rail_name_{k}"),
            skip: |label| label.is_empty() || label.eq_ignore_ascii_case("NC"),
            looked_for: "rail_name_K files",
        };
        let mut rails = Vec::new();
        let mut files = Vec::new();
        for rail in find_rails(root, &layout)? {
            files.push(rail_file(NAME, &rail.name, rail.dir.join(format!("in_power{}_input", rail.channel)))?);
            rails.push(rail.name);
        }
        let total = total_index(NAME, &rails, total_rail)?;
        let mut source = JetsonIio { rails, files, total };
        source.read()?;
        Ok(source)
    }
}

impl PowerSource for JetsonIio {
    fn name(&self) -> &str {
        NAME
    }
    fn rails(&self) -> &[String] {
        &self.rails
    }
    fn total(&self) -> &str {
        &self.rails[self.total]
    }
    fn read(&mut self) -> Result<PowerReading> {
        let before = Instant::now();
        let mut rails_w = Vec::with_capacity(self.files.len());
        for path in &self.files {
            let mw = read_number(NAME, path)?;
            rails_w.push(check_power(NAME, &path.display(), mw / 1000.0)?);
        }
        let at = midpoint(before, Instant::now());
        Ok(PowerReading { at, total_w: rails_w[self.total], rails_w, energy_j: None, modelled: false })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::testutil::Fixture;

    #[test]
    fn power_iio_jetpack4_nano_layout() {
        let fx = Fixture::new("iio-nano");
        fx.jetpack4_nano(&[5120, 1000, 830]);
        let mut s = JetsonIio::open(fx.root(), None).expect("opens");
        assert_eq!(s.rails(), ["POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"]);
        assert_eq!(s.total(), "POM_5V_IN");
        let r = s.read().expect("reads");
        assert_eq!(r.rails_w, [5.12, 1.0, 0.83]);
        // The input rail already contains the others: the total is not their sum.
        assert_eq!(r.total_w, 5.12);
        assert!(!r.modelled && r.energy_j.is_none());
    }

    #[test]
    fn power_iio_jetpack4_xavier_two_monitors_need_total_rail() {
        let fx = Fixture::new("iio-xavier");
        let a = "sys/bus/i2c/drivers/ina3221x/1-0040/iio:device0";
        let b = "sys/bus/i2c/drivers/ina3221x/1-0041/iio:device1";
        for (dev, names) in [(a, ["GPU", "CPU", "SOC"]), (b, ["CV", "VDDRQ", "SYS5V"])] {
            for (k, n) in names.iter().enumerate() {
                fx.write(format!("{dev}/rail_name_{k}"), n);
                fx.write(format!("{dev}/in_power{k}_input"), &format!("{}", 100 * (k + 1)));
            }
        }
        let e = JetsonIio::open(fx.root(), None).expect_err("no VDD_IN on AGX Xavier");
        assert!(e.to_string().contains("SYS5V") && e.to_string().contains("--total-rail"), "{e}");
        let mut s = JetsonIio::open(fx.root(), Some("SYS5V")).expect("explicit total");
        assert_eq!(s.rails(), ["GPU", "CPU", "SOC", "CV", "VDDRQ", "SYS5V"]);
        let r = s.read().expect("reads");
        assert_eq!(r.total_w, 0.3);
    }

    #[test]
    fn power_iio_missing_and_bad_files() {
        let fx = Fixture::new("iio-bad");
        let e = JetsonIio::open(fx.root(), None).expect_err("absent");
        assert!(e.is_not_available() && e.to_string().contains("ina3221x"), "{e}");

        let dev = fx.jetpack4_nano(&[5000, 1000, 800]);
        let mut s = JetsonIio::open(fx.root(), None).expect("opens");
        fx.write(dev.join("in_power1_input"), "garbage\n");
        let e = s.read().expect_err("non-numeric");
        assert!(e.to_string().contains("in_power1_input") && e.to_string().contains("'garbage'"), "{e}");
        fx.write(dev.join("in_power1_input"), "-700\n");
        let e = s.read().expect_err("negative");
        assert!(e.to_string().contains("negative power"), "{e}");
        // A directory where the file should be: unreadable.
        std::fs::remove_file(dev.join("in_power1_input")).expect("rm");
        std::fs::create_dir(dev.join("in_power1_input")).expect("mkdir");
        let e = s.read().expect_err("unreadable");
        assert!(matches!(e, Error::Power { .. }) && e.to_string().contains("cannot read"), "{e}");
        // A rail whose power file is missing at open time.
        std::fs::remove_dir(dev.join("in_power1_input")).expect("rmdir");
        let e = JetsonIio::open(fx.root(), None).expect_err("missing power file");
        assert!(e.to_string().contains("POM_5V_GPU"), "{e}");
    }
}

//! Jetson INA3221 on JetPack 5/6: the upstream `ina3221` hwmon driver.
//!
//! Layout: `/sys/bus/i2c/drivers/ina3221/<bus>-<addr>/hwmon/hwmonN/` with `inK_label`,
//! `inK_input` (bus voltage, mV) and `currK_input` (mA) for K = 1..3. Power is mV x mA. Channels
//! labelled `NC` are unconnected, and channel 7 ("sum of shunt voltages", with `curr4_input` the
//! summed current) duplicates the others: both are skipped. Channels 4..6 are shunt voltages with
//! no current and no label, and are ignored.

use super::rails::{RailLayout, find_rails, rail_file};
use super::sysfs::read_number;
use super::{PowerReading, PowerSource, check_power, midpoint, total_index};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The source's name.
pub const NAME: &str = "jetson-hwmon";

/// The driver directory below the root.
pub const DRIVER_DIR: &str = "sys/bus/i2c/drivers/ina3221";

#[derive(Debug)]
struct Channel {
    volts_mv: PathBuf,
    curr_ma: PathBuf,
}

/// INA3221 rails read through the JetPack 5/6 hwmon driver.
#[derive(Debug)]
pub struct JetsonHwmon {
    rails: Vec<String>,
    channels: Vec<Channel>,
    total: usize,
}

/// Whether a label names no rail: unconnected, or the shunt-sum channel.
fn skipped_label(label: &str) -> bool {
    label.is_empty() || label.eq_ignore_ascii_case("NC") || label.to_ascii_lowercase().contains("sum of shunt")
}

impl JetsonHwmon {
    /// Finds every labelled rail below `root` and takes a first reading to check the files.
    ///
    /// # Errors
    /// [`Error::NotAvailable`] when the driver directory or rails are absent; [`Error::Power`] when
    /// a file is unreadable or holds garbage, or there is no total rail.
    pub fn open(root: &Path, total_rail: Option<&str>) -> Result<Self> {
        let layout = RailLayout {
            source: NAME,
            driver_dir: DRIVER_DIR,
            missing_means: "not a JetPack 5/6 Jetson",
            instances_in: "hwmon",
            instance_prefix: "hwmon",
            channels: 1..=16,
            label_file: |k| format!("in{k}_label"),
            skip: skipped_label,
            looked_for: "labelled inK_label rails",
        };
        let mut rails = Vec::new();
        let mut channels = Vec::new();
        for rail in find_rails(root, &layout)? {
            let (k, dir) = (rail.channel, &rail.dir);
            let volts_mv = rail_file(NAME, &rail.name, dir.join(format!("in{k}_input")))?;
            let curr_ma = rail_file(NAME, &rail.name, dir.join(format!("curr{k}_input")))?;
            channels.push(Channel { volts_mv, curr_ma });
            rails.push(rail.name);
        }
        let total = total_index(NAME, &rails, total_rail)?;
        let mut source = JetsonHwmon { rails, channels, total };
        source.read()?;
        Ok(source)
    }
}

impl PowerSource for JetsonHwmon {
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
        let mut rails_w = Vec::with_capacity(self.channels.len());
        for ch in &self.channels {
            let mv = read_number(NAME, &ch.volts_mv)?;
            if mv < 0.0 {
                return Err(Error::power(NAME, format!("{}: negative voltage {mv} mV", ch.volts_mv.display())));
            }
            let ma = read_number(NAME, &ch.curr_ma)?;
            rails_w.push(check_power(NAME, &ch.curr_ma.display(), mv * ma / 1e6)?);
        }
        let at = midpoint(before, Instant::now());
        Ok(PowerReading { at, total_w: rails_w[self.total], rails_w, energy_j: None, modelled: false })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Fixture;

    #[test]
    fn power_hwmon_jetpack5_orin_nano_layout() {
        let fx = Fixture::new("hwmon-orin-nano");
        fx.jetpack5_orin_nano(&[(5000, 1000), (5000, 200), (4000, 250)]);
        let mut s = JetsonHwmon::open(fx.root(), None).expect("opens");
        // The shunt-sum channel and the unlabelled shunt channels are not rails.
        assert_eq!(s.rails(), ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"]);
        assert_eq!(s.total(), "VDD_IN");
        let r = s.read().expect("reads");
        assert_eq!(r.rails_w, [5.0, 1.0, 1.0]);
        assert_eq!(r.total_w, 5.0, "VDD_IN is the total; the other rails are not added");
    }

    #[test]
    fn power_hwmon_jetpack6_agx_orin_skips_nc() {
        let fx = Fixture::new("hwmon-agx-orin");
        let a = "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon2";
        let b = "sys/bus/i2c/drivers/ina3221/1-0041/hwmon/hwmon10";
        for (dev, labels) in [(a, ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0"]), (b, ["NC", "VDDQ_VDD2_1V8AO", "NC"])] {
            for (k, l) in labels.iter().enumerate() {
                fx.write(format!("{dev}/in{}_label", k + 1), l);
                fx.write(format!("{dev}/in{}_input", k + 1), "5000");
                fx.write(format!("{dev}/curr{}_input", k + 1), &format!("{}", 100 * (k + 1)));
            }
            fx.write(format!("{dev}/in7_label"), "sum of shunt voltages");
        }
        let e = JetsonHwmon::open(fx.root(), None).expect_err("AGX Orin has no VDD_IN");
        assert!(e.to_string().contains("VIN_SYS_5V0"), "{e}");
        let mut s = JetsonHwmon::open(fx.root(), Some("VIN_SYS_5V0")).expect("explicit total");
        assert_eq!(s.rails(), ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"]);
        let r = s.read().expect("reads");
        assert_eq!(r.total_w, 1.5);
        assert_eq!(r.rails_w[3], 1.0);
    }

    #[test]
    fn power_hwmon_missing_and_bad_files() {
        let fx = Fixture::new("hwmon-bad");
        let e = JetsonHwmon::open(fx.root(), None).expect_err("absent");
        assert!(e.is_not_available() && e.to_string().contains("JetPack 5/6"), "{e}");
        let dev = fx.jetpack5_orin_nano(&[(5000, 1000), (5000, 200), (5000, 300)]);
        let mut s = JetsonHwmon::open(fx.root(), None).expect("opens");
        fx.write(dev.join("curr1_input"), "1.2.3");
        let e = s.read().expect_err("non-numeric");
        assert!(e.to_string().contains("curr1_input") && e.to_string().contains("not a number"), "{e}");
        fx.write(dev.join("curr1_input"), "-400");
        assert!(s.read().expect_err("negative").to_string().contains("negative power"));
        fx.write(dev.join("curr1_input"), "400");
        fx.write(dev.join("in1_input"), "-5000");
        assert!(s.read().expect_err("negative voltage").to_string().contains("negative voltage"));
        fx.write(dev.join("in1_input"), "");
        assert!(s.read().expect_err("empty").to_string().contains("not a number"));
        std::fs::remove_file(dev.join("in2_input")).expect("rm");
        let e = JetsonHwmon::open(fx.root(), None).expect_err("missing voltage file");
        assert!(e.to_string().contains("VDD_CPU_GPU_CV") && e.to_string().contains("in2_input"), "{e}");
    }
}

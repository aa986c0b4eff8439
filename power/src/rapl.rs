//! Intel RAPL through powercap: `/sys/class/powercap/intel-rapl:N[:M]/energy_uj`.
//!
//! Each zone's counter counts microjoules and wraps to zero after `max_energy_range_uj`. The source
//! keeps every zone's last raw value and accumulates the deltas, adding the range when a counter
//! went down: that is exact as long as reads come faster than one wrap (minutes at full power), and
//! [`PowerReading::energy_j`] is then a counter that never goes down. Power is the mean over the
//! time since the previous read. The total is the sum of the `package-*` zones (one per socket);
//! sub-zones (`core`, `uncore`, `dram`) and `psys` are reported beside it. Since Linux 5.10
//! `energy_uj` is readable by root only.

use super::sysfs::{list_dir, read_number, read_trimmed};
use super::{PowerReading, PowerSource, midpoint};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The source's name.
pub const NAME: &str = "rapl";

/// The powercap directory below the root.
pub const POWERCAP_DIR: &str = "sys/class/powercap";

/// Reads closer together than this are spaced out: RAPL counters update about every millisecond,
/// and the power of a shorter interval would be mostly quantisation.
pub const MIN_INTERVAL: Duration = Duration::from_millis(2);

#[derive(Debug)]
struct Zone {
    energy: PathBuf,
    max_uj: f64,
    last_uj: f64,
    acc_j: f64,
}

/// RAPL zones.
#[derive(Debug)]
pub struct Rapl {
    zones: Vec<Zone>,
    rails: Vec<String>,
    total_zones: Vec<usize>,
    total_desc: String,
    last_at: Instant,
}

impl Rapl {
    /// Finds every `intel-rapl:*` zone below `root` and reads its counter once.
    ///
    /// # Errors
    /// [`Error::NotAvailable`] without zones or when `energy_uj` is unreadable; [`Error::Power`]
    /// for garbage values.
    pub fn open(root: &Path) -> Result<Self> {
        let dir = root.join(POWERCAP_DIR);
        if !dir.is_dir() {
            return Err(Error::not_available(NAME, format!("no {}", dir.display())));
        }
        // Natural order puts every top-level zone before its sub-zones (intel-rapl:0, :0:0, :0:1, :1).
        let found: Vec<(String, PathBuf)> = list_dir(NAME, &dir)?.into_iter().filter(|(n, _)| n.starts_with("intel-rapl:")).collect();
        if found.is_empty() {
            return Err(Error::not_available(NAME, format!("no intel-rapl:N zones in {}", dir.display())));
        }
        let mut zones = Vec::new();
        let mut rails = Vec::new();
        let mut top_names: Vec<(String, String)> = Vec::new();
        for (id, path) in &found {
            let name = read_trimmed(NAME, &path.join("name")).unwrap_or_else(|_| id.clone());
            let energy = path.join("energy_uj");
            let raw = std::fs::read_to_string(&energy)
                .map_err(|e| Error::not_available(NAME, format!("cannot read {}: {}", energy.display(), super::sysfs::describe(&e))))?;
            let last_uj = super::sysfs::parse_number(&raw)
                .ok_or_else(|| Error::power(NAME, format!("{} holds '{}', not a number", energy.display(), raw.trim())))?;
            let max_uj = read_number(NAME, &path.join("max_energy_range_uj"))?;
            if max_uj <= 0.0 || last_uj < 0.0 || last_uj > max_uj {
                return Err(Error::power(NAME, format!("{id}: energy_uj {last_uj} outside max_energy_range_uj {max_uj}")));
            }
            // intel-rapl:0 is top level; intel-rapl:0:1 is a sub-zone of it.
            let parts: Vec<&str> = id.split(':').collect();
            let rail = if parts.len() == 2 {
                top_names.push((parts[1].to_string(), name.clone()));
                name
            } else {
                let parent = top_names.iter().find(|(n, _)| parts.get(1) == Some(&n.as_str()));
                format!("{}/{name}", parent.map_or(parts[1], |(_, p)| p.as_str()))
            };
            rails.push(rail);
            zones.push(Zone { energy, max_uj, last_uj, acc_j: 0.0 });
        }
        let is_top = |i: usize| !rails[i].contains('/');
        let mut total_zones: Vec<usize> = (0..rails.len()).filter(|&i| is_top(i) && rails[i].starts_with("package")).collect();
        let mut total_desc = "sum of package-*".to_string();
        if total_zones.is_empty() {
            total_zones = (0..rails.len()).filter(|&i| is_top(i)).collect();
            total_desc = format!("sum of {}", total_zones.iter().map(|&i| rails[i].as_str()).collect::<Vec<_>>().join(" + "));
        }
        Ok(Rapl { zones, rails, total_zones, total_desc, last_at: Instant::now() })
    }
}

impl PowerSource for Rapl {
    fn name(&self) -> &str {
        NAME
    }
    fn rails(&self) -> &[String] {
        &self.rails
    }
    fn total(&self) -> &str {
        &self.total_desc
    }
    fn read(&mut self) -> Result<PowerReading> {
        let since = self.last_at.elapsed();
        if since < MIN_INTERVAL {
            std::thread::sleep(MIN_INTERVAL - since);
        }
        let before = Instant::now();
        let mut raws = Vec::with_capacity(self.zones.len());
        for z in &self.zones {
            let raw = read_number(NAME, &z.energy)?;
            if raw < 0.0 || raw > z.max_uj {
                return Err(Error::power(NAME, format!("{}: {raw} outside 0..=max_energy_range_uj {}", z.energy.display(), z.max_uj)));
            }
            raws.push(raw);
        }
        let at = midpoint(before, Instant::now());
        let dt = at.saturating_duration_since(self.last_at).as_secs_f64();
        // Commit only after every zone read cleanly, so that a failed read loses nothing.
        let mut rails_w = Vec::with_capacity(self.zones.len());
        for (z, raw) in self.zones.iter_mut().zip(raws) {
            let mut delta = raw - z.last_uj;
            if delta < 0.0 {
                delta += z.max_uj;
            }
            z.last_uj = raw;
            z.acc_j += delta / 1e6;
            rails_w.push(if dt > 0.0 { delta / 1e6 / dt } else { 0.0 });
        }
        self.last_at = at;
        let total_w = self.total_zones.iter().map(|&i| rails_w[i]).sum();
        let energy_j = self.total_zones.iter().map(|&i| self.zones[i].acc_j).sum();
        Ok(PowerReading { at, rails_w, total_w, energy_j: Some(energy_j), modelled: false })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Fixture;

    fn zone(fx: &Fixture, id: &str, name: &str, uj: u64, max: u64) -> PathBuf {
        let dir = format!("{POWERCAP_DIR}/{id}");
        fx.write(format!("{dir}/name"), name);
        fx.write(format!("{dir}/max_energy_range_uj"), &max.to_string());
        fx.write(format!("{dir}/energy_uj"), &uj.to_string())
    }

    #[test]
    fn power_rapl_wraps_at_max_energy_range() {
        let fx = Fixture::new("rapl-wrap");
        let pkg = zone(&fx, "intel-rapl:0", "package-0", 3_900_000, 4_000_000);
        let core = zone(&fx, "intel-rapl:0:0", "core", 100, 4_000_000);
        let psys = zone(&fx, "intel-rapl:1", "psys", 0, 4_000_000);
        let mut s = Rapl::open(fx.root()).expect("opens");
        assert_eq!(s.rails(), ["package-0", "package-0/core", "psys"]);
        assert_eq!(s.total(), "sum of package-*");
        // 3.9 J -> 0.1 J across the 4 J range is +0.2 J, not -3.8 J.
        fx.write(&pkg, "100000");
        fx.write(&core, "50100");
        fx.write(&psys, "900000");
        let r = s.read().expect("reads");
        let e = r.energy_j.expect("counter");
        assert!((e - 0.2).abs() < 1e-9, "{e}");
        assert!(r.total_w > 0.0 && r.rails_w[2] > r.total_w, "psys is beside the total, not in it: {r:?}");
        fx.write(&pkg, "2100000");
        let e2 = s.read().expect("reads").energy_j.expect("counter");
        assert!((e2 - 2.2).abs() < 1e-9, "{e2}");
    }

    #[test]
    fn power_rapl_missing_and_bad_files() {
        let fx = Fixture::new("rapl-bad");
        assert!(Rapl::open(fx.root()).expect_err("absent").is_not_available());
        std::fs::create_dir_all(fx.root().join(POWERCAP_DIR).join("intel-rapl")).expect("mkdir");
        let e = Rapl::open(fx.root()).expect_err("no zones");
        assert!(e.is_not_available() && e.to_string().contains("intel-rapl:N"), "{e}");
        let pkg = zone(&fx, "intel-rapl:0", "package-0", 10, 1000);
        std::fs::remove_file(&pkg).expect("rm");
        std::fs::create_dir(&pkg).expect("mkdir: unreadable energy_uj");
        let e = Rapl::open(fx.root()).expect_err("unreadable");
        assert!(e.is_not_available() && e.to_string().contains("energy_uj"), "{e}");
        std::fs::remove_dir(&pkg).expect("rmdir");
        fx.write(&pkg, "12");
        let mut s = Rapl::open(fx.root()).expect("opens");
        fx.write(&pkg, "lots");
        assert!(s.read().expect_err("garbage").to_string().contains("'lots'"));
        fx.write(&pkg, "5000");
        assert!(s.read().expect_err("above range").to_string().contains("max_energy_range_uj"));
        fx.write(&pkg, "20");
        let r = s.read().expect("a failed read loses nothing");
        assert!((r.energy_j.expect("counter") - 8e-6).abs() < 1e-12, "{r:?}");
    }
}

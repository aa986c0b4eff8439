//! Fixture sysfs trees and a writer thread that changes them on a schedule, for the tests.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A unique directory under the system temp dir, removed on drop.
pub(crate) struct Fixture {
    root: PathBuf,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

impl Fixture {
    pub(crate) fn new(tag: &str) -> Fixture {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let root = std::env::temp_dir().join(format!("lop-power-{tag}-{}-{n}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&root).expect("create fixture root");
        Fixture { root }
    }
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }
    /// Writes `rel` below the root (creating directories), atomically by rename.
    pub(crate) fn write(&self, rel: impl AsRef<Path>, contents: &str) -> PathBuf {
        let path = self.root.join(rel);
        write_atomic(&path, contents);
        path
    }

    /// JetPack 4 Nano: `6-0040/iio:device0`, rails POM_5V_IN, POM_5V_GPU, POM_5V_CPU (mW).
    pub(crate) fn jetpack4_nano(&self, mw: &[u32; 3]) -> PathBuf {
        let dev = "sys/bus/i2c/drivers/ina3221x/6-0040/iio:device0";
        for (k, (name, v)) in ["POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"].iter().zip(mw).enumerate() {
            self.write(format!("{dev}/rail_name_{k}"), &format!("{name}\n"));
            self.write(format!("{dev}/in_power{k}_input"), &format!("{v}\n"));
            self.write(format!("{dev}/in_voltage{k}_input"), "5000\n");
        }
        self.write("sys/bus/i2c/drivers/ina3221x/uevent", "DRIVER=ina3221x\n");
        self.root.join(dev)
    }

    /// JetPack 5/6 Orin Nano: `1-0040/hwmon/hwmon3`, VDD_IN, VDD_CPU_GPU_CV, VDD_SOC as
    /// (mV, mA), plus the shunt-sum channel 7 that must be skipped.
    pub(crate) fn jetpack5_orin_nano(&self, mv_ma: &[(u32, u32); 3]) -> PathBuf {
        let dev = "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3";
        for (k, (name, (mv, ma))) in ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"].iter().zip(mv_ma).enumerate() {
            let ch = k + 1;
            self.write(format!("{dev}/in{ch}_label"), &format!("{name}\n"));
            self.write(format!("{dev}/in{ch}_input"), &format!("{mv}\n"));
            self.write(format!("{dev}/curr{ch}_input"), &format!("{ma}\n"));
            self.write(format!("{dev}/in{}_input", ch + 3), "12\n");
        }
        self.write(format!("{dev}/in7_label"), "sum of shunt voltages\n");
        self.write(format!("{dev}/in7_input"), "40\n");
        self.write(format!("{dev}/curr4_input"), "99999\n");
        self.write(format!("{dev}/name"), "ina3221\n");
        self.root.join(dev)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Replaces `path` by rename, so a concurrent reader sees the old or the new contents, never a
/// half-written file (real sysfs files are never half-written either).
pub(crate) fn write_atomic(path: &Path, contents: &str) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("create fixture dir");
    }
    let tmp = path.with_extension(format!("tmp{}", NEXT.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&tmp, contents).expect("write fixture file");
    std::fs::rename(&tmp, path).expect("rename fixture file");
}

/// One step of a schedule: at `offset` from the start, write these files.
pub(crate) struct Step {
    pub offset: Duration,
    pub writes: Vec<(PathBuf, String)>,
}

/// Runs `steps` on a thread from `start` and returns the instants at which each step's files
/// were actually in place (the middle of the writes), which is what the tests compare against.
pub(crate) fn spawn_writer(start: Instant, steps: Vec<Step>) -> JoinHandle<Vec<Instant>> {
    std::thread::spawn(move || {
        let mut applied = Vec::with_capacity(steps.len());
        for step in steps {
            let due = start + step.offset;
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            let before = Instant::now();
            for (path, contents) in &step.writes {
                write_atomic(path, contents);
            }
            applied.push(super::midpoint(before, Instant::now()));
        }
        applied
    })
}

/// The integral of a piecewise-constant signal over `[start, end]`: `levels[k]` holds from
/// `switches[k]` until `switches[k + 1]` (the last level holds to the end).
pub(crate) fn step_integral(switches: &[Instant], levels: &[f64], start: Instant, end: Instant) -> f64 {
    assert_eq!(switches.len(), levels.len());
    let mut total = 0.0;
    for k in 0..switches.len() {
        let a = switches[k].max(start);
        let b = switches.get(k + 1).copied().unwrap_or(end).min(end);
        if b > a {
            total += levels[k] * (b - a).as_secs_f64();
        }
    }
    total
}

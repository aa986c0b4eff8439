//! # lop_power: power sources, sampling, and the energy of an interval
//!
//! A leaf crate (no libtorch, no async, no ROS): the robot's `lop_power` node, the edge server's
//! GPU energy and the `lop power` command read power through it. The planner's simulator needs
//! only watts per robot activity, which the engine keeps as `lop::sim::RobotPower`.
//!
//! A [`PowerSource`] gives one [`PowerReading`] per [`PowerSource::read`]: a monotonic timestamp,
//! the watts of each rail, the total watts and, where the hardware keeps one, a cumulative energy
//! counter in joules. The [`sampler`] reads a source at a requested rate into a bounded [`Ring`],
//! and [`energy`] turns the ring into the energy of an interval `[start, end]`.
//!
//! ## Layout
//! - [`jetson_iio`]: Jetson INA3221 on JetPack 4 (`ina3221x` iio driver, mW per rail).
//! - [`jetson_hwmon`]: Jetson INA3221 on JetPack 5/6 (`ina3221` hwmon driver, mV x mA).
//! - [`tegrastats`]: a parser of `tegrastats` lines and a source that reads them.
//! - [`nvml`]: the edge server's GPU through NVML (power in mW, energy counter in mJ).
//! - [`rapl`]: Intel RAPL `energy_uj` counters, unwrapped at `max_energy_range_uj`.
//! - [`model`]: a state-based power model for emulation; its readings are labelled modelled.
//! - [`ring`]: the bounded ring buffer of readings.
//! - [`energy`]: the energy over `[start, end]` from a ring.
//! - [`sampler`]: the blocking sampling loop (std threads, a stop flag).
//!
//! ## Roots
//! Every sysfs path is read below [`SourceConfig::root`] (`/` on a real machine), so tests and
//! `lop power --root DIR` can point the sources at a fixture tree.
//!
//! ## Totals
//! On a Jetson the total is the module input rail (`VDD_IN`, or `POM_5V_IN` on Nano/TX2-era
//! boards), which already contains every other rail: the others are reported beside it and never
//! added to it. Boards without such a rail (AGX Xavier, AGX Orin) need
//! [`SourceConfig::total_rail`]. RAPL's total is the sum of its `package-*` zones (separate
//! sockets); sub-zones and `psys` are reported beside it. NVML reports one GPU.
//!
//! ## Detection
//! [`detect`] tries sources in the order given; [`SourceKind::AUTO_ORDER`] is jetson-iio,
//! jetson-hwmon, tegrastats (only when `<root>/usr/bin/tegrastats` exists), nvml (only when the
//! root is `/`: NVML is not file-based, so a fixture root must not reach a real GPU), rapl. The
//! first that opens and gives one valid reading wins. The power model is never chosen
//! automatically: modelled watts must be asked for by name, so a machine without sensors is never
//! reported as measured. When nothing is found the error names every source tried and why it
//! failed.

#![deny(missing_docs)]

pub mod energy;
mod error;
pub mod jetson_hwmon;
pub mod jetson_iio;
pub mod model;
pub mod nvml;
mod rails;
pub mod rapl;
pub mod ring;
pub mod sampler;
mod sysfs;
pub mod tegrastats;
#[cfg(test)]
mod testutil;
#[cfg(test)]
mod timing_tests;

pub use energy::{Energy, EnergyOptions, EnergyOutcome, Method, NoData};
pub use error::{Error, Result};
pub use model::{ModelSource, PowerModel, State};
pub use ring::Ring;
pub use sampler::{SamplerConfig, SamplerHandle, SamplerStats};

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

/// One reading of a power source.
#[derive(Debug, Clone, PartialEq)]
pub struct PowerReading {
    /// When the values were read (the middle of the read for multi-file sources).
    pub at: Instant,
    /// Watts per rail, in the order of [`PowerSource::rails`].
    pub rails_w: Vec<f64>,
    /// Total watts (see the module docs for what "total" means per source).
    pub total_w: f64,
    /// Cumulative energy of the total in joules, for sources with a hardware counter (NVML, RAPL)
    /// and for the model. Non-decreasing while the source lives; the origin is arbitrary.
    pub energy_j: Option<f64>,
    /// Whether the values come from the power model rather than a sensor.
    pub modelled: bool,
}

impl PowerReading {
    /// Whether `other` carries exactly the same values (the timestamp aside): a sensor that has
    /// not refreshed since the last read. Where both carry a counter, the counter is the sensor
    /// (RAPL's power is derived from it), so it alone decides.
    pub fn same_values(&self, other: &PowerReading) -> bool {
        match (self.energy_j, other.energy_j) {
            (Some(a), Some(b)) => a == b,
            _ => self.total_w == other.total_w && self.rails_w == other.rails_w && self.energy_j == other.energy_j,
        }
    }
}

/// Something that reports power.
pub trait PowerSource {
    /// The source's kind name, e.g. `jetson-hwmon`.
    fn name(&self) -> &str;
    /// Rail names, in the order of [`PowerReading::rails_w`].
    fn rails(&self) -> &[String];
    /// What the total is: a rail name, or a description such as `sum of package-*`.
    fn total(&self) -> &str;
    /// Whether the readings are modelled rather than measured.
    fn modelled(&self) -> bool {
        false
    }
    /// Reads the current values.
    ///
    /// # Errors
    /// [`Error::Power`] for unreadable files or values that make no sense (non-numeric,
    /// negative); the caller may retry.
    fn read(&mut self) -> Result<PowerReading>;
}

/// The kinds of power source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKind {
    /// Jetson INA3221, JetPack 4 iio layout.
    JetsonIio,
    /// Jetson INA3221, JetPack 5/6 hwmon layout.
    JetsonHwmon,
    /// `tegrastats` output.
    Tegrastats,
    /// NVIDIA GPU through NVML.
    Nvml,
    /// Intel RAPL counters.
    Rapl,
    /// The state-based power model (modelled, never measured).
    Model,
}

impl SourceKind {
    /// The order `auto` tries; the model is deliberately absent (see the module docs).
    pub const AUTO_ORDER: [SourceKind; 5] =
        [SourceKind::JetsonIio, SourceKind::JetsonHwmon, SourceKind::Tegrastats, SourceKind::Nvml, SourceKind::Rapl];
    /// Every kind, in `--source` order.
    pub const ALL: [SourceKind; 6] =
        [SourceKind::JetsonIio, SourceKind::JetsonHwmon, SourceKind::Tegrastats, SourceKind::Nvml, SourceKind::Rapl, SourceKind::Model];
    /// The name used on the command line and in readings.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::JetsonIio => jetson_iio::NAME,
            SourceKind::JetsonHwmon => jetson_hwmon::NAME,
            SourceKind::Tegrastats => tegrastats::NAME,
            SourceKind::Nvml => nvml::NAME,
            SourceKind::Rapl => rapl::NAME,
            SourceKind::Model => model::NAME,
        }
    }
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SourceKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        SourceKind::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| {
            let known: Vec<&str> = SourceKind::ALL.iter().map(|k| k.as_str()).collect();
            Error::Input(format!("unknown power source '{s}' (known: {})", known.join(", ")))
        })
    }
}

/// Where and how to open sources.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// Prefix of every sysfs path and of `usr/bin/tegrastats`; `/` on a real machine.
    pub root: PathBuf,
    /// The rail to report as the total, overriding `VDD_IN`/`POM_5V_IN` (Jetson, tegrastats).
    pub total_rail: Option<String>,
    /// NVML device index.
    pub nvml_device: u32,
    /// `tegrastats --interval`.
    pub tegrastats_interval: Duration,
    /// Watts of the power model.
    pub model: PowerModel,
    /// The model's state until [`ModelSource::set_state`] says otherwise.
    pub model_state: State,
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            root: PathBuf::from("/"),
            total_rail: None,
            nvml_device: 0,
            tegrastats_interval: Duration::from_millis(100),
            model: PowerModel::default(),
            model_state: State::Idle,
        }
    }
}

impl SourceConfig {
    /// The tegrastats binary below the root.
    pub fn tegrastats_binary(&self) -> PathBuf {
        self.root.join("usr/bin/tegrastats")
    }
    fn root_is_system(&self) -> bool {
        self.root == Path::new("/")
    }
}

/// A boxed source that can move to a sampling thread.
pub type BoxedSource = Box<dyn PowerSource + Send>;

/// Opens one source; each constructor validates with a first read.
///
/// # Errors
/// [`Error::NotAvailable`] when the source is absent here, [`Error::Power`] when it is present
/// but unusable (garbage values, no total rail).
pub fn open(kind: SourceKind, cfg: &SourceConfig) -> Result<BoxedSource> {
    let total = cfg.total_rail.as_deref();
    Ok(match kind {
        SourceKind::JetsonIio => Box::new(jetson_iio::JetsonIio::open(&cfg.root, total)?),
        SourceKind::JetsonHwmon => Box::new(jetson_hwmon::JetsonHwmon::open(&cfg.root, total)?),
        SourceKind::Tegrastats => Box::new(tegrastats::Tegrastats::spawn(&cfg.tegrastats_binary(), cfg.tegrastats_interval, total)?),
        SourceKind::Nvml => Box::new(nvml::NvmlSource::open(cfg.nvml_device)?),
        SourceKind::Rapl => Box::new(rapl::Rapl::open(&cfg.root)?),
        SourceKind::Model => Box::new(ModelSource::new(cfg.model, cfg.model_state)?),
    })
}

/// Tries `order` and returns the first source that opens.
///
/// # Errors
/// [`Error::NotAvailable`] with sensor `auto`, naming every source tried and why it failed.
pub fn detect(cfg: &SourceConfig, order: &[SourceKind]) -> Result<BoxedSource> {
    let mut tried = Vec::new();
    for &kind in order {
        let attempt = match kind {
            SourceKind::Nvml if !cfg.root_is_system() => {
                Err(format!("skipped: root {} is not /, and NVML is not file-based", cfg.root.display()))
            }
            SourceKind::Tegrastats if !cfg.tegrastats_binary().is_file() => Err(format!("no {}", cfg.tegrastats_binary().display())),
            _ => open(kind, cfg).map_err(|e| match e {
                Error::NotAvailable { reason, .. } => reason,
                // Present but broken is worth a warning even when a later source works.
                Error::Power { msg, .. } => {
                    tracing::warn!(source = %kind, why = %msg, "power source present but unusable");
                    msg
                }
                other => other.to_string(),
            }),
        };
        match attempt {
            Ok(source) => {
                tracing::debug!(source = %kind, "power source detected");
                return Ok(source);
            }
            Err(why) => {
                tracing::debug!(source = %kind, why = %why, "power source not usable");
                tried.push(format!("{kind}: {why}"));
            }
        }
    }
    let tried = if tried.is_empty() { "no sources to try".to_string() } else { tried.join("; ") };
    Err(Error::not_available("auto", format!("tried {tried}")))
}

/// Rails that are the module input on Jetsons, in order of preference.
pub const INPUT_RAILS: [&str; 2] = ["VDD_IN", "POM_5V_IN"];

/// The index of the total rail: `explicit` if given, else the first of [`INPUT_RAILS`].
pub(crate) fn total_index(sensor: &str, rails: &[String], explicit: Option<&str>) -> Result<usize> {
    let wanted: Vec<&str> = match explicit {
        Some(name) => vec![name],
        None => INPUT_RAILS.to_vec(),
    };
    wanted.iter().find_map(|w| rails.iter().position(|r| r == w)).ok_or_else(|| {
        let msg = match explicit {
            Some(name) => format!("total rail '{name}' is not among the rails [{}]", rails.join(", ")),
            None => format!(
                "no module input rail ({}) among [{}]; name the total rail explicitly (--total-rail)",
                INPUT_RAILS.join(" or "),
                rails.join(", ")
            ),
        };
        Error::power(sensor, msg)
    })
}

/// Small negative values on a sensor (offset noise around zero current) are read as zero; anything
/// below this is an error rather than a power.
pub const NEGATIVE_NOISE_W: f64 = 0.05;

/// Checks a power value: finite, and not negative beyond [`NEGATIVE_NOISE_W`].
pub(crate) fn check_power(sensor: &str, what: &dyn fmt::Display, w: f64) -> Result<f64> {
    if !w.is_finite() {
        return Err(Error::power(sensor, format!("{what}: power {w} is not finite")));
    }
    if w < -NEGATIVE_NOISE_W {
        return Err(Error::power(sensor, format!("{what}: negative power {w:.3} W")));
    }
    Ok(w.max(0.0))
}

/// The midpoint of `[a, b]`.
pub(crate) fn midpoint(a: Instant, b: Instant) -> Instant {
    a + b.saturating_duration_since(a) / 2
}

#[cfg(test)]
mod tests {
    use super::testutil::Fixture;
    use super::*;

    #[test]
    fn power_source_kinds_parse_and_print() {
        for k in SourceKind::ALL {
            assert_eq!(k.as_str().parse::<SourceKind>().expect("parses"), k);
        }
        let e = "bogus".parse::<SourceKind>().expect_err("unknown");
        assert!(e.to_string().contains("jetson-hwmon"), "{e}");
    }

    #[test]
    fn power_total_rail_selection() {
        let rails: Vec<String> = ["VDD_GPU", "POM_5V_IN", "VDD_IN"].iter().map(|s| s.to_string()).collect();
        assert_eq!(total_index("t", &rails, None).expect("found"), 2);
        assert_eq!(total_index("t", &rails, Some("VDD_GPU")).expect("found"), 0);
        let e = total_index("t", &rails[..1], None).expect_err("no input rail");
        assert!(e.to_string().contains("VDD_GPU") && e.to_string().contains("--total-rail"), "{e}");
        let e = total_index("t", &rails, Some("SYS5V")).expect_err("absent");
        assert!(e.to_string().contains("SYS5V"), "{e}");
    }

    #[test]
    fn power_detect_on_empty_root_lists_every_source() {
        let fx = Fixture::new("detect-empty");
        let cfg = SourceConfig { root: fx.root().to_path_buf(), ..SourceConfig::default() };
        let e = detect(&cfg, &SourceKind::AUTO_ORDER).err().expect("nothing there");
        assert!(e.is_not_available(), "{e}");
        let msg = e.to_string();
        for k in SourceKind::AUTO_ORDER {
            assert!(msg.contains(k.as_str()), "{k} missing from: {msg}");
        }
        assert!(msg.contains("NVML is not file-based"), "{msg}");
        assert!(!msg.contains("model"), "auto must not fall back to the model: {msg}");
    }

    #[test]
    fn power_detect_order_prefers_jetpack4_then_hwmon() {
        let fx = Fixture::new("detect-order");
        fx.jetpack5_orin_nano(&[(5000, 1000), (5000, 200), (5000, 300)]);
        let cfg = SourceConfig { root: fx.root().to_path_buf(), ..SourceConfig::default() };
        let s = detect(&cfg, &SourceKind::AUTO_ORDER).expect("hwmon found");
        assert_eq!(s.name(), "jetson-hwmon");
        fx.jetpack4_nano(&[5000, 1000, 800]);
        let s = detect(&cfg, &SourceKind::AUTO_ORDER).expect("iio found");
        assert_eq!(s.name(), "jetson-iio");
        assert_eq!(s.total(), "POM_5V_IN");
    }

    #[test]
    fn power_check_power_values() {
        assert_eq!(check_power("t", &"x", -0.01).expect("noise"), 0.0);
        assert!(check_power("t", &"x", -1.0).is_err());
        assert!(check_power("t", &"x", f64::NAN).is_err());
        assert_eq!(check_power("t", &"x", 2.5).expect("ok"), 2.5);
    }
}

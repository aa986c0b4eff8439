//! The edge server's GPU through NVML.
//!
//! `nvml-wrapper` loads `libnvidia-ml.so.1` at run time, so building needs neither a GPU nor the
//! driver; without them [`NvmlSource::open`] is a clean [`Error::NotAvailable`]. Power comes from
//! `nvmlDeviceGetPowerUsage` (mW) and, on Volta and newer, the energy counter from
//! `nvmlDeviceGetTotalEnergyConsumption` (mJ since the driver loaded), which [`super::energy`]
//! prefers over integrating power. On recent data-centre GPUs the power value is itself an
//! average over a short window, which the counter avoids.

use super::{PowerReading, PowerSource, check_power, midpoint};
use crate::error::{Error, Result};
use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;
use std::time::Instant;

/// The source's name.
pub const NAME: &str = "nvml";

/// One NVIDIA GPU.
pub struct NvmlSource {
    nvml: Nvml,
    index: u32,
    rails: Vec<String>,
    has_counter: bool,
}

impl std::fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlSource").field("index", &self.index).field("rails", &self.rails).finish_non_exhaustive()
    }
}

fn unavailable(e: NvmlError) -> Error {
    let reason = match e {
        NvmlError::LibloadingError(e) => format!("cannot load the NVML library (no NVIDIA driver?): {e}"),
        NvmlError::DriverNotLoaded => "the NVIDIA driver is not loaded".to_string(),
        NvmlError::LibraryNotFound => "the NVML library was not found".to_string(),
        NvmlError::NoPermission => "no permission to talk to the NVIDIA driver".to_string(),
        other => other.to_string(),
    };
    Error::not_available(NAME, reason)
}

impl NvmlSource {
    /// Initialises NVML and opens GPU `index`, reading it once.
    ///
    /// # Errors
    /// [`Error::NotAvailable`] without the library, driver, device or power readings.
    pub fn open(index: u32) -> Result<Self> {
        let nvml = Nvml::init().map_err(unavailable)?;
        let (name, has_counter) = {
            let dev = nvml.device_by_index(index).map_err(|e| {
                let count = nvml.device_count().map_or_else(|_| "?".to_string(), |c| c.to_string());
                Error::not_available(NAME, format!("no GPU {index} ({count} present): {e}"))
            })?;
            let name = dev.name().unwrap_or_else(|_| "GPU".to_string());
            dev.power_usage().map_err(|e| Error::not_available(NAME, format!("GPU {index} reports no power: {e}")))?;
            (name, dev.total_energy_consumption().is_ok())
        };
        tracing::debug!(gpu = index, name = %name, energy_counter = has_counter, "nvml opened");
        let mut s = NvmlSource { nvml, index, rails: vec![format!("GPU{index}")], has_counter };
        s.read()?;
        Ok(s)
    }
}

impl PowerSource for NvmlSource {
    fn name(&self) -> &str {
        NAME
    }
    fn rails(&self) -> &[String] {
        &self.rails
    }
    fn total(&self) -> &str {
        &self.rails[0]
    }
    fn read(&mut self) -> Result<PowerReading> {
        let before = Instant::now();
        let dev = self.nvml.device_by_index(self.index).map_err(|e| Error::power(NAME, format!("GPU {}: {e}", self.index)))?;
        let mw = dev.power_usage().map_err(|e| Error::power(NAME, format!("GPU {} power: {e}", self.index)))?;
        let energy_j = if self.has_counter {
            let mj = dev.total_energy_consumption().map_err(|e| Error::power(NAME, format!("GPU {} energy counter: {e}", self.index)))?;
            Some(mj as f64 / 1000.0)
        } else {
            None
        };
        let at = midpoint(before, Instant::now());
        let w = check_power(NAME, &self.rails[0], f64::from(mw) / 1000.0)?;
        Ok(PowerReading { at, rails_w: vec![w], total_w: w, energy_j, modelled: false })
    }
}

/// Free memory of one GPU, for the edge's fleet load reports.
pub struct GpuMemory {
    nvml: Nvml,
    index: u32,
}

impl std::fmt::Debug for GpuMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuMemory").field("index", &self.index).finish_non_exhaustive()
    }
}

impl GpuMemory {
    /// Initialises NVML for GPU `index`, reading its memory once.
    ///
    /// # Errors
    /// [`Error::NotAvailable`] without the library, driver or device.
    pub fn open(index: u32) -> Result<Self> {
        let nvml = Nvml::init().map_err(unavailable)?;
        nvml.device_by_index(index)
            .and_then(|d| d.memory_info())
            .map_err(|e| Error::not_available(NAME, format!("GPU {index} memory: {e}")))?;
        Ok(GpuMemory { nvml, index })
    }

    /// Free bytes now; `None` when the reading fails.
    pub fn free_bytes(&self) -> Option<u64> {
        self.nvml.device_by_index(self.index).and_then(|d| d.memory_info()).ok().map(|m| m.free)
    }
}

/// What [`GpuGauges::read`] finds: one GPU's state now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuGaugeReading {
    /// Share of the last sample period a kernel ran, 0 to 1.
    pub utilisation: f64,
    /// Memory in use, bytes.
    pub memory_used_bytes: u64,
    /// Memory in all, bytes.
    pub memory_total_bytes: u64,
    /// Power now, watts (`None`: not reported).
    pub power_w: Option<f64>,
    /// The energy counter, joules since the driver loaded (`None`: before Volta).
    pub energy_j: Option<f64>,
}

/// One GPU's utilisation, memory, power and energy, read when asked: the edge's per-device
/// metrics at each scrape.
pub struct GpuGauges {
    nvml: Nvml,
    index: u32,
}

impl std::fmt::Debug for GpuGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuGauges").field("index", &self.index).finish_non_exhaustive()
    }
}

impl GpuGauges {
    /// Initialises NVML for GPU `index`, reading it once.
    ///
    /// # Errors
    /// [`Error::NotAvailable`] without the library, driver or device.
    pub fn open(index: u32) -> Result<Self> {
        let nvml = Nvml::init().map_err(unavailable)?;
        let g = GpuGauges { nvml, index };
        if g.read().is_none() {
            return Err(Error::not_available(NAME, format!("GPU {index}: no utilisation or memory reading")));
        }
        Ok(g)
    }

    /// The GPU now; `None` when utilisation or memory cannot be read.
    pub fn read(&self) -> Option<GpuGaugeReading> {
        let dev = self.nvml.device_by_index(self.index).ok()?;
        let util = dev.utilization_rates().ok()?;
        let mem = dev.memory_info().ok()?;
        Some(GpuGaugeReading {
            utilisation: f64::from(util.gpu.min(100)) / 100.0,
            memory_used_bytes: mem.used,
            memory_total_bytes: mem.total,
            power_w: dev.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
            energy_j: dev.total_energy_consumption().ok().map(|mj| mj as f64 / 1000.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On machines without an NVIDIA driver (CI, the robot) this must be a clean "not available";
    /// on a GPU machine, a sane reading.
    #[test]
    fn power_nvml_available_or_clean_error() {
        match NvmlSource::open(0) {
            Ok(mut s) => {
                let r = s.read().expect("reads");
                assert!(r.total_w > 0.0 && r.total_w < 2000.0, "{r:?}");
            }
            Err(e) => assert!(e.is_not_available(), "{e}"),
        }
        // An absurd index is never a panic.
        if let Err(e) = NvmlSource::open(4096) {
            assert!(e.is_not_available(), "{e}");
        }
        match GpuGauges::open(0) {
            Ok(g) => {
                let r = g.read().expect("reads");
                assert!((0.0..=1.0).contains(&r.utilisation) && r.memory_used_bytes <= r.memory_total_bytes, "{r:?}");
            }
            Err(e) => assert!(e.is_not_available(), "{e}"),
        }
        if let Err(e) = GpuGauges::open(4096) {
            assert!(e.is_not_available(), "{e}");
        }
    }
}

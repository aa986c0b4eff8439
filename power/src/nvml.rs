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
    }
}

//! The devices the edge computes on (`device`, or each of `devices`), checked against the
//! libtorch of this process: names parsed, CUDA devices present.

use super::error::ConfigError;
use super::schema::{EdgeConfig, default_device};

impl EdgeConfig {
    /// The libtorch device.
    ///
    /// # Errors
    /// A bad name, or CUDA (that GPU) not available.
    pub fn device(&self) -> Result<tch::Device, ConfigError> {
        Ok(self.devices()?[0].1)
    }

    /// Every device the edge computes on, with its name: `device`, or each of `devices`
    /// (`cuda` read as `cuda:0`).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `device` or `devices[i]` for a name that is not a device,
    /// a CUDA device that is not there, a device listed twice, or both fields set.
    pub fn devices(&self) -> Result<Vec<(String, tch::Device)>, ConfigError> {
        if self.devices.is_empty() {
            let d = self.parse_device("device", &self.device)?;
            return Ok(vec![(self.device.trim().to_string(), d)]);
        }
        if self.device != default_device() {
            return Err(self.invalid("devices", format!("set device ('{}') or devices, not both", self.device)));
        }
        let mut out: Vec<(String, tch::Device)> = Vec::new();
        for (i, name) in self.devices.iter().enumerate() {
            let field = format!("devices[{i}]");
            let d = self.parse_device(&field, name)?;
            let name = match name.trim() {
                "cuda" => "cuda:0".to_string(),
                "cpu" => "cpu:0".to_string(),
                n => n.to_string(),
            };
            if out.iter().any(|(n, _)| *n == name) {
                return Err(self.invalid(field, format!("'{name}' is listed twice")));
            }
            out.push((name, d));
        }
        Ok(out)
    }

    fn parse_device(&self, field: &str, name: &str) -> Result<tch::Device, ConfigError> {
        let d = name.trim();
        let ordinal = match d {
            "cpu" => return Ok(tch::Device::Cpu),
            "cuda" => 0,
            _ if d.strip_prefix("cpu:").is_some_and(|n| n.parse::<usize>().is_ok()) => return Ok(tch::Device::Cpu),
            _ => match d.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => n,
                _ => return Err(self.invalid(field, format!("'{d}' is not cpu, cpu:N, cuda or cuda:N"))),
            },
        };
        if !tch::Cuda::is_available() {
            return Err(self.invalid(field, format!("'{d}': CUDA is not available (no GPU, driver or CUDA-enabled libtorch)")));
        }
        let count = usize::try_from(tch::Cuda::device_count()).unwrap_or(0);
        if ordinal >= count {
            return Err(self.invalid(field, format!("'{d}': no CUDA device {ordinal} ({count} present)")));
        }
        Ok(tch::Device::Cuda(ordinal))
    }
}

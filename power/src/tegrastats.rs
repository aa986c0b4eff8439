//! `tegrastats` lines, for Jetsons whose INA3221 sysfs files are not readable.
//!
//! Rails appear as `NAME CUR/AVG` pairs, in milliwatts:
//! - JetPack 4: `POM_5V_IN 2328/2328` (Nano), `VDD_IN 4912/4912` (Xavier NX), `GPU 0/0 CPU 311/311
//!   ... SYS5V 1614/1614` (AGX Xavier), no unit;
//! - JetPack 5 and 6: `VDD_IN 5120mW/5120mW`, lines usually prefixed by a date and time.
//!
//! Other `a/b` fields carry units (`RAM 1520/3956MB`, `IRAM 0/252kB`) or are not pairs of numbers
//! (`EMC_FREQ 0%@1600`), so "two numbers, optionally `mW`" identifies a rail. The instantaneous
//! value (before the slash) is used.

use super::{PowerReading, PowerSource, check_power, total_index};
use crate::error::{Error, Result};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The source's name.
pub const NAME: &str = "tegrastats";

/// Parses one line into (rail, watts) pairs, in line order.
///
/// # Errors
/// [`Error::Power`] for a line without rails, or with a negative or duplicated rail.
pub fn parse_line(line: &str) -> Result<Vec<(String, f64)>> {
    let tokens: Vec<&str> = line.split_whitespace().collect();
    let mut rails: Vec<(String, f64)> = Vec::new();
    for pair in tokens.windows(2) {
        let (name, value) = (pair[0], pair[1]);
        if !is_rail_name(name) {
            continue;
        }
        let Some((cur, avg)) = value.split_once('/') else { continue };
        let (Some(cur_mw), Some(_)) = (milliwatts(cur), milliwatts(avg)) else { continue };
        let w = check_power(NAME, &format_args!("rail {name} in '{value}'"), cur_mw / 1000.0)?;
        if rails.iter().any(|(n, _)| n == name) {
            return Err(Error::power(NAME, format!("rail {name} appears twice in line '{}'", line.trim())));
        }
        rails.push((name.to_string(), w));
    }
    if rails.is_empty() {
        let shown: String = line.trim().chars().take(80).collect();
        return Err(Error::power(NAME, format!("no power rails (NAME mW/mW) in line '{shown}'")));
    }
    Ok(rails)
}

fn is_rail_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic()) && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `1234` or `1234mW` as milliwatts; a leading `-` is kept so that negatives are reported.
fn milliwatts(s: &str) -> Option<f64> {
    let digits = s.strip_suffix("mW").unwrap_or(s);
    let body = digits.strip_prefix('-').unwrap_or(digits);
    if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    digits.parse::<f64>().ok()
}

/// Readings from tegrastats lines, from a child process or any reader.
pub struct Tegrastats {
    reader: Box<dyn BufRead + Send>,
    child: Option<Child>,
    rails: Vec<String>,
    total: usize,
    pending: Option<PowerReading>,
    line: String,
}

impl std::fmt::Debug for Tegrastats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tegrastats").field("rails", &self.rails).field("total", &self.total).finish_non_exhaustive()
    }
}

impl Tegrastats {
    /// Reads lines from `reader`; the first line fixes the rails.
    ///
    /// # Errors
    /// When the first line cannot be read or parsed, or has no total rail.
    pub fn from_reader(reader: Box<dyn BufRead + Send>, total_rail: Option<&str>) -> Result<Self> {
        let mut s = Tegrastats { reader, child: None, rails: Vec::new(), total: 0, pending: None, line: String::new() };
        let rails = s.next_line()?;
        s.rails = rails.iter().map(|(n, _)| n.clone()).collect();
        s.total = total_index(NAME, &s.rails, total_rail)?;
        let reading = s.reading(rails)?;
        s.pending = Some(reading);
        Ok(s)
    }

    /// Starts `binary --interval MS` and reads its output. The child is killed on drop.
    ///
    /// # Errors
    /// [`Error::NotAvailable`] when the binary is missing or cannot start; then as
    /// [`Tegrastats::from_reader`].
    pub fn spawn(binary: &Path, interval: Duration, total_rail: Option<&str>) -> Result<Self> {
        if !binary.is_file() {
            return Err(Error::not_available(NAME, format!("no {}", binary.display())));
        }
        let ms = interval.as_millis().max(1);
        let mut child = Command::new(binary)
            .arg("--interval")
            .arg(ms.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::not_available(NAME, format!("cannot start {}: {e}", binary.display())))?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::not_available(NAME, "child has no stdout"));
        };
        match Tegrastats::from_reader(Box::new(BufReader::new(stdout)), total_rail) {
            Ok(mut s) => {
                s.child = Some(child);
                Ok(s)
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }

    fn next_line(&mut self) -> Result<Vec<(String, f64)>> {
        loop {
            self.line.clear();
            let n = self.reader.read_line(&mut self.line).map_err(|e| Error::power(NAME, format!("cannot read tegrastats output: {e}")))?;
            if n == 0 {
                return Err(Error::power(NAME, "tegrastats output ended"));
            }
            if !self.line.trim().is_empty() {
                return parse_line(&self.line);
            }
        }
    }

    fn reading(&self, rails: Vec<(String, f64)>) -> Result<PowerReading> {
        let at = Instant::now();
        let names_match = rails.len() == self.rails.len() && rails.iter().zip(&self.rails).all(|((n, _), r)| n == r);
        if !names_match {
            let got: Vec<&str> = rails.iter().map(|(n, _)| n.as_str()).collect();
            return Err(Error::power(NAME, format!("rails changed from [{}] to [{}]", self.rails.join(", "), got.join(", "))));
        }
        let rails_w: Vec<f64> = rails.into_iter().map(|(_, w)| w).collect();
        Ok(PowerReading { at, total_w: rails_w[self.total], rails_w, energy_j: None, modelled: false })
    }
}

impl Drop for Tegrastats {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl PowerSource for Tegrastats {
    fn name(&self) -> &str {
        NAME
    }
    fn rails(&self) -> &[String] {
        &self.rails
    }
    fn total(&self) -> &str {
        &self.rails[self.total]
    }
    /// Blocks until tegrastats prints its next line (its `--interval` paces the source).
    fn read(&mut self) -> Result<PowerReading> {
        if let Some(r) = self.pending.take() {
            return Ok(r);
        }
        let rails = self.next_line()?;
        self.reading(rails)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Fixture;
    use std::io::Cursor;

    const JP4_NANO: &str = "RAM 1520/3956MB (lfb 4x4MB) SWAP 0/1978MB (cached 0MB) IRAM 0/252kB(lfb 252kB) \
        CPU [9%@1479,4%@1479,1%@1479,0%@1479] EMC_FREQ 0%@1600 GR3D_FREQ 0%@76 APE 25 PLL@25C CPU@27.5C \
        PMIC@100C GPU@27C AO@34.5C thermal@27.25C POM_5V_IN 2328/2328 POM_5V_GPU 0/0 POM_5V_CPU 326/326";
    const JP4_XAVIER_NX: &str = "RAM 2412/7772MB (lfb 1080x4MB) SWAP 0/3886MB (cached 0MB) \
        CPU [2%@1190,1%@1190,off,off,off,off] EMC_FREQ 0% GR3D_FREQ 0% AO@37C GPU@36.5C PMIC@100C \
        AUX@36C CPU@38C thermal@37C VDD_IN 4912/4912 VDD_CPU_GPU_CV 811/811 VDD_SOC 1217/1217";
    const JP4_AGX_XAVIER: &str = "RAM 3046/15692MB (lfb 2814x4MB) SWAP 0/7846MB (cached 0MB) \
        CPU [1%@1190,0%@1190,0%@1190,0%@1190,off,off,off,off] EMC_FREQ 0% GR3D_FREQ 0% AO@36C GPU@36.5C \
        Tdiode@39C PMIC@100C AUX@35.5C CPU@37.5C thermal@36.4C Tboard@36C GPU 0/0 CPU 311/311 \
        SOC 1087/1087 CV 0/0 VDDRQ 155/155 SYS5V 1614/1614";
    const JP5_AGX_ORIN: &str = "08-16-2023 10:22:41 RAM 3078/30536MB (lfb 6863x4MB) SWAP 0/15268MB \
        (cached 0MB) CPU [0%@729,0%@729,0%@729,0%@729,0%@2201,0%@2201,0%@2201,0%@2201] EMC_FREQ 0%@2133 \
        GR3D_FREQ 0%@[0,0] VIC_FREQ 729 APE 174 CV0@-256C CPU@41.812C Tboard@31C SOC2@38.187C \
        Tdiode@33.75C SOC0@38.75C CV1@-256C GPU@-256C tj@41.812C SOC1@37.562C CV2@-256C \
        VDD_GPU_SOC 2392mW/2392mW VDD_CPU_CV 398mW/398mW VIN_SYS_5V0 2618mW/2618mW \
        VDDQ_VDD2_1V8AO 503mW/503mW";
    const JP6_ORIN_NANO: &str = "11-04-2024 14:03:27 RAM 1765/7620MB (lfb 7x4MB) SWAP 0/3810MB \
        (cached 0MB) CPU [1%@729,0%@729,0%@729,0%@729,0%@729,0%@729] GR3D_FREQ 0% cpu@47.5C soc2@45.312C \
        soc0@46.375C gpu@45.468C tj@47.5C soc1@45.25C VDD_IN 5120mW/5120mW VDD_CPU_GPU_CV 1195mW/1195mW \
        VDD_SOC 1593mW/1593mW";

    fn names(r: &[(String, f64)]) -> Vec<&str> {
        r.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn power_tegrastats_each_jetpack_format() {
        let r = parse_line(JP4_NANO).expect("jp4 nano");
        assert_eq!(names(&r), ["POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"]);
        assert_eq!(r[0].1, 2.328);
        let r = parse_line(JP4_XAVIER_NX).expect("jp4 nx");
        assert_eq!(names(&r), ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"]);
        let r = parse_line(JP4_AGX_XAVIER).expect("jp4 agx");
        assert_eq!(names(&r), ["GPU", "CPU", "SOC", "CV", "VDDRQ", "SYS5V"]);
        assert_eq!(r[5].1, 1.614);
        let r = parse_line(JP5_AGX_ORIN).expect("jp5 agx orin");
        assert_eq!(names(&r), ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"]);
        assert_eq!(r[2].1, 2.618);
        let r = parse_line(JP6_ORIN_NANO).expect("jp6 orin nano");
        assert_eq!(names(&r), ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"]);
        assert_eq!(r[0].1, 5.12);
    }

    #[test]
    fn power_tegrastats_bad_lines() {
        let e = parse_line("RAM 1520/3956MB SWAP 0/1978MB").expect_err("no rails");
        assert!(e.to_string().contains("no power rails"), "{e}");
        let e = parse_line("VDD_IN -5120mW/5120mW").expect_err("negative");
        assert!(e.to_string().contains("negative power"), "{e}");
        let e = parse_line("VDD_IN 1/1 VDD_IN 2/2").expect_err("twice");
        assert!(e.to_string().contains("twice"), "{e}");
        assert!(parse_line("").is_err());
    }

    #[test]
    fn power_tegrastats_reader_source() {
        let text = format!("{JP6_ORIN_NANO}\n\n{}\n{JP4_NANO}\n", JP6_ORIN_NANO.replace("5120mW/5120mW", "7000mW/6000mW"));
        let mut s = Tegrastats::from_reader(Box::new(Cursor::new(text)), None).expect("first line");
        assert_eq!(s.rails(), ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"]);
        assert_eq!(s.read().expect("1").total_w, 5.12);
        assert_eq!(s.read().expect("2, after a blank line").total_w, 7.0);
        let e = s.read().expect_err("different board");
        assert!(e.to_string().contains("rails changed"), "{e}");
        let e = s.read().expect_err("eof");
        assert!(e.to_string().contains("ended"), "{e}");
        let e = Tegrastats::from_reader(Box::new(Cursor::new(JP4_AGX_XAVIER.to_string())), None).expect_err("total");
        assert!(e.to_string().contains("--total-rail"), "{e}");
    }

    #[test]
    fn power_tegrastats_child_process() {
        let fx = Fixture::new("tegrastats-bin");
        // A stand-in binary that prints a few JetPack 5 lines at its interval and exits.
        let script =
            format!("#!/bin/sh\n[ \"$1\" = --interval ] || exit 3\nfor i in 1 2 3 4 5; do echo '{JP6_ORIN_NANO}'; sleep 0.02; done\n");
        let bin = fx.write("usr/bin/tegrastats", &script);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let cfg = crate::SourceConfig { root: fx.root().to_path_buf(), ..Default::default() };
        let mut s = crate::detect(&cfg, &crate::SourceKind::AUTO_ORDER).expect("tegrastats found");
        assert_eq!(s.name(), NAME);
        let mut n = 0;
        while let Ok(r) = s.read() {
            assert_eq!(r.total_w, 5.12);
            n += 1;
        }
        assert_eq!(n, 5, "every line, then a clean error at the end");
        let e = Tegrastats::spawn(&fx.root().join("nope"), Duration::from_millis(10), None).expect_err("missing");
        assert!(e.is_not_available(), "{e}");
    }
}

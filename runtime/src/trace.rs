//! Bandwidth traces: a step function of the link rate over time, loaded from CSV.
//!
//! # File format
//!
//! ```text
//! # comment lines start with '#'; blank lines are ignored
//! t_s,mbps
//! 0.0,83.23
//! 0.5,88.77
//! ```
//!
//! Sample `i` holds from `t_s[i]` until `t_s[i + 1]`. The first sample must be at 0, times must
//! strictly increase (the shared traces use 0.5 s steps, but any increasing times work) and rates
//! must be finite and non-negative. A rate of 0 is an outage: nothing moves until it ends.
//!
//! # Past the end
//!
//! By default a trace **loops** ([`TraceEnd::Loop`]): its period is the last time plus the last
//! step (`t[n-1] + (t[n-1] - t[n-2])`), so every sample, the last included, lasts its step and a
//! long benchmark keeps seeing the trace's statistics instead of one frozen value.
//! [`TraceEnd::Hold`] keeps the last rate forever instead. A one-sample trace is constant.
//!
//! Times are kept in integer nanoseconds so that step boundaries are exact and the transfer
//! integration in [`Trace::transfer_end`] always makes progress.

use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result, TraceErrorKind};

/// What a trace does past its last sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceEnd {
    /// Start again from `t = 0` (the default).
    #[default]
    Loop,
    /// Keep the last rate forever.
    Hold,
}

/// A link rate over time (Mbit/s, step function).
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// Sample start times, ns; `times_ns[0] == 0`, strictly increasing.
    times_ns: Vec<u64>,
    /// Rates, Mbit/s, already multiplied by `scale`.
    mbps: Vec<f64>,
    /// Length of one loop, ns (`> times_ns[n-1]`); unused for a one-sample trace.
    period_ns: u64,
    end: TraceEnd,
    scale: f64,
}

const HEADER: &str = "t_s,mbps";

fn trace_err(path: &Path, line: usize, kind: TraceErrorKind) -> Error {
    Error::Trace { path: path.to_path_buf(), line, kind }
}

fn secs_to_ns(t_s: f64) -> u64 {
    // Rounded to whole nanoseconds; callers checked `t_s` is finite and >= 0.
    (t_s * 1e9).round() as u64
}

impl Trace {
    /// Loads a trace CSV file.
    ///
    /// # Errors
    ///
    /// [`Error::TraceIo`] if the file cannot be read; [`Error::Trace`] (naming the file and line)
    /// if it is malformed.
    pub fn load(path: impl AsRef<Path>) -> Result<Trace> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| Error::TraceIo { path: path.to_path_buf(), source })?;
        Trace::parse(&text, path)
    }

    /// Parses trace CSV text; `path` only names the source in errors.
    ///
    /// # Errors
    ///
    /// [`Error::Trace`] with the 1-based line of the first problem.
    pub fn parse(text: &str, path: &Path) -> Result<Trace> {
        let mut header_seen = false;
        let mut samples = Vec::new();
        let mut last_line = 0;
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            last_line = line_no;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if !header_seen {
                if line.replace(' ', "") != HEADER {
                    return Err(trace_err(path, line_no, TraceErrorKind::MissingHeader { found: line.to_string() }));
                }
                header_seen = true;
                continue;
            }
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            let [t, r] = fields[..] else {
                return Err(trace_err(path, line_no, TraceErrorKind::FieldCount { found: fields.len() }));
            };
            let num = |field: &'static str, text: &str| match text.parse::<f64>() {
                Ok(v) if v.is_finite() => Ok(v),
                _ => Err(trace_err(path, line_no, TraceErrorKind::NotANumber { field, text: text.to_string() })),
            };
            samples.push((line_no, num("t_s", t)?, num("mbps", r)?));
        }
        if !header_seen {
            return Err(trace_err(path, last_line, TraceErrorKind::MissingHeader { found: String::new() }));
        }
        Trace::build(path, last_line, &samples)
    }

    /// A trace from `(t_s, mbps)` samples; errors name `<samples>` and the sample index + 1.
    ///
    /// # Errors
    ///
    /// [`Error::Trace`] under the same rules as a file.
    pub fn from_samples(samples: &[(f64, f64)]) -> Result<Trace> {
        let numbered: Vec<(usize, f64, f64)> = samples.iter().enumerate().map(|(i, &(t, r))| (i + 1, t, r)).collect();
        let path = Path::new("<samples>");
        for &(line, t, r) in &numbered {
            for (field, v) in [("t_s", t), ("mbps", r)] {
                if !v.is_finite() {
                    return Err(trace_err(path, line, TraceErrorKind::NotANumber { field, text: v.to_string() }));
                }
            }
        }
        Trace::build(path, samples.len(), &numbered)
    }

    /// A constant rate.
    ///
    /// # Errors
    ///
    /// [`Error::Trace`] if `mbps` is negative or not finite.
    pub fn constant(mbps: f64) -> Result<Trace> {
        Trace::from_samples(&[(0.0, mbps)])
    }

    fn build(path: &Path, last_line: usize, samples: &[(usize, f64, f64)]) -> Result<Trace> {
        let mut times_ns = Vec::with_capacity(samples.len());
        let mut mbps = Vec::with_capacity(samples.len());
        let mut previous: Option<f64> = None;
        for &(line, t_s, rate) in samples {
            if rate < 0.0 {
                return Err(trace_err(path, line, TraceErrorKind::NegativeRate { mbps: rate }));
            }
            match previous {
                None if t_s != 0.0 => return Err(trace_err(path, line, TraceErrorKind::FirstNotAtZero { t_s })),
                Some(p) if t_s <= p || secs_to_ns(t_s) <= secs_to_ns(p) => {
                    return Err(trace_err(path, line, TraceErrorKind::NonIncreasingTime { previous: p, t_s }));
                }
                _ => {}
            }
            previous = Some(t_s);
            times_ns.push(secs_to_ns(t_s));
            mbps.push(rate);
        }
        let n = times_ns.len();
        let period_ns = match n {
            0 => return Err(trace_err(path, last_line, TraceErrorKind::Empty)),
            1 => 1,
            _ => 2 * times_ns[n - 1] - times_ns[n - 2],
        };
        Ok(Trace { times_ns, mbps, period_ns, end: TraceEnd::Loop, scale: 1.0 })
    }

    /// The same trace with every rate multiplied by `factor` (`--bandwidth-scale`). Scales
    /// compose: `t.scaled(2)?.scaled(3)?` has [`scale`](Trace::scale) 6.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] unless `factor` is finite and positive.
    pub fn scaled(mut self, factor: f64) -> Result<Trace> {
        if !(factor.is_finite() && factor > 0.0) {
            return Err(Error::InvalidConfig { what: format!("bandwidth scale {factor} must be finite and > 0") });
        }
        self.mbps.iter_mut().for_each(|r| *r *= factor);
        self.scale *= factor;
        Ok(self)
    }

    /// The same trace with another behaviour past its end.
    pub fn with_end(mut self, end: TraceEnd) -> Trace {
        self.end = end;
        self
    }

    /// The scale factor applied so far (1 for a freshly loaded trace).
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// What the trace does past its end.
    pub fn end(&self) -> TraceEnd {
        self.end
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.times_ns.len()
    }

    /// Always false: a trace has at least one sample.
    pub fn is_empty(&self) -> bool {
        self.times_ns.is_empty()
    }

    /// The samples as `(t_s, mbps)` pairs (rates scaled), in time order: what a bandwidth
    /// predictor sees when it is replayed over the trace
    /// ([`crate::bandwidth::predict::evaluate`]).
    pub fn samples(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.times_ns.iter().zip(&self.mbps).map(|(&t, &r)| (t as f64 * 1e-9, r))
    }

    /// Length of one loop of the trace (the last time plus the last step; 0 for a constant).
    pub fn period(&self) -> Duration {
        if self.times_ns.len() < 2 { Duration::ZERO } else { Duration::from_nanos(self.period_ns) }
    }

    /// Time-weighted mean rate over one period, Mbit/s (scaled).
    pub fn mean_mbps(&self) -> f64 {
        let n = self.times_ns.len();
        if n < 2 {
            return self.mbps.first().copied().unwrap_or(0.0);
        }
        let total: f64 = (0..n)
            .map(|i| {
                let end = if i + 1 < n { self.times_ns[i + 1] } else { self.period_ns };
                self.mbps[i] * (end - self.times_ns[i]) as f64
            })
            .sum();
        total / self.period_ns as f64
    }

    /// The rate at `t` (since the start of the trace), Mbit/s (scaled).
    pub fn rate_mbps(&self, t: Duration) -> f64 {
        self.segment(duration_ns(t)).0
    }

    /// `(rate, end of its segment)` at `t_ns`; the end is `None` when the rate never changes again.
    fn segment(&self, t_ns: u64) -> (f64, Option<u64>) {
        let n = self.times_ns.len();
        if n < 2 {
            return (self.mbps.first().copied().unwrap_or(0.0), None);
        }
        let (base, u) = match self.end {
            TraceEnd::Loop => (t_ns - t_ns % self.period_ns, t_ns % self.period_ns),
            TraceEnd::Hold => (0, t_ns),
        };
        // times_ns[0] == 0 <= u, so the partition point is at least 1.
        let i = self.times_ns.partition_point(|&x| x <= u).saturating_sub(1);
        let next = if i + 1 < n {
            Some(base + self.times_ns[i + 1])
        } else {
            match self.end {
                TraceEnd::Loop => Some(base + self.period_ns),
                TraceEnd::Hold => None,
            }
        };
        (self.mbps[i], next)
    }

    /// When a transfer of `bytes` that starts at `start` ends: the bits drain at the trace's rate,
    /// and a transfer that spans a step uses the new rate for its remainder. `None` if it never
    /// ends (the rate stays 0 forever).
    pub fn transfer_end(&self, start: Duration, bytes: usize) -> Option<Duration> {
        let mut t = duration_ns(start);
        let mut bits = bytes as f64 * 8.0;
        if bits == 0.0 {
            return Some(start);
        }
        if self.mbps.iter().all(|&r| r == 0.0) {
            return None;
        }
        loop {
            let (rate, next) = self.segment(t);
            // Nanoseconds to send the remaining bits at this rate: bits / (rate · 1e6) · 1e9.
            let need = if rate > 0.0 { bits * 1e3 / rate } else { f64::INFINITY };
            match next {
                Some(next) if need > (next - t) as f64 => {
                    bits -= rate * (next - t) as f64 / 1e3;
                    t = next;
                }
                None if rate == 0.0 => return None,
                _ => return Some(Duration::from_nanos(t.saturating_add(need.ceil() as u64))),
            }
        }
    }
}

fn duration_ns(t: Duration) -> u64 {
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

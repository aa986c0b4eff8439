//! The `lop_power` node's logic over the [`lop_power`] crate: the energy of each inference, its CSV log,
//! the reduced `/lop/power` stream and the power model's state feed.
//!
//! - [`EnergyAccountant`] keeps readings in a bounded [`Ring`], filled by its own sampler thread
//!   ([`EnergyAccountant::sampled`]) or by the caller ([`EnergyAccountant::fed`] +
//!   [`EnergyAccountant::push`]), and answers [`EnergyAccountant::energy`] for wall-clock
//!   intervals with [`lop_power::energy`] (trapezoid or counter; no integration here).
//!   Wall-clock times (the ROS stamps) map to the monotonic clock of the readings through one
//!   anchor taken at construction: a wall-clock step after that (NTP) shifts the mapping by the
//!   step, so long-running nodes on a stepping clock should re-create the accountant.
//! - [`CsvLog`] writes one row per inference (see [`CsvLog::header`]), optionally one row per
//!   reading to a second file; every row is written with one `write` call and flushed, so a
//!   crash of the node loses nothing already reported (a power cut may lose what the OS had not
//!   yet written to disk).
//! - [`RateReducer`] averages readings down to at most a given rate for `/lop/power`.
//! - [`ModelStates`] turns an inference's timings into computing / transmitting / idle
//!   intervals, for a live [`ModelSource`] ([`ModelStates::apply`]) or, after the fact, as exact
//!   modelled readings for an accountant ([`ModelFeed`]).

use lop_power::{
    BoxedSource, EnergyOptions, EnergyOutcome, ModelSource, NoData, PowerModel, PowerReading, Ring, SamplerConfig, SamplerHandle,
    SamplerStats, State,
};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What went wrong in the power node's logic.
#[derive(Debug)]
pub enum PowerNodeError {
    /// The interval ends before it starts.
    Interval {
        /// Its start.
        start: SystemTime,
        /// Its end.
        end: SystemTime,
    },
    /// The buffer does not cover the interval (empty, too early, not yet, or a gap).
    NoData(NoData),
    /// A wall-clock time too far from the anchor to map to the monotonic clock.
    Clock(String),
    /// A power source or sampler error (a rejected reading, a sampler that failed).
    Source(lop_power::Error),
    /// A file that could not be created or written.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A bad setting or input, named.
    Config(String),
}

impl PowerNodeError {
    /// Whether asking again later may succeed (the interval ends after the newest reading).
    pub fn is_retryable(&self) -> bool {
        matches!(self, PowerNodeError::NoData(NoData::EndsAfterBuffer { .. }))
    }
}

impl fmt::Display for PowerNodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PowerNodeError::Interval { start, end } => {
                let by = start.duration_since(*end).unwrap_or_default();
                write!(f, "energy interval ends {by:?} before it starts")
            }
            PowerNodeError::NoData(why) => write!(f, "no energy figure: {why}"),
            PowerNodeError::Clock(msg) => write!(f, "clock: {msg}"),
            PowerNodeError::Source(e) => write!(f, "{e}"),
            PowerNodeError::Io { path, source } => write!(f, "i/o error on {}: {source}", path.display()),
            PowerNodeError::Config(msg) => write!(f, "power node: {msg}"),
        }
    }
}

impl std::error::Error for PowerNodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PowerNodeError::Source(e) => Some(e),
            PowerNodeError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<lop_power::Error> for PowerNodeError {
    fn from(e: lop_power::Error) -> Self {
        PowerNodeError::Source(e)
    }
}

/// The energy of one inference.
#[derive(Debug, Clone, PartialEq)]
pub struct EnergyReport {
    /// The inference id.
    pub id: u64,
    /// Start (wall clock).
    pub start: SystemTime,
    /// End (wall clock).
    pub end: SystemTime,
    /// Joules of the total rail.
    pub joules: f64,
    /// `joules / duration` (the power at `start` for an empty interval).
    pub avg_w: f64,
    /// Joules per rail, in the source's rail order.
    pub rails_j: Vec<(String, f64)>,
    /// Readings strictly inside the interval.
    pub samples: usize,
    /// The power source's name.
    pub source: String,
    /// Whether the figure comes from the power model (never reported as measured).
    pub modelled: bool,
    /// `trapezoid` or `counter`.
    pub method: &'static str,
}

impl EnergyReport {
    /// `end - start`, seconds.
    pub fn duration_s(&self) -> f64 {
        self.end.duration_since(self.start).map_or(0.0, |d| d.as_secs_f64())
    }
}

/// Seconds since the Unix epoch (negative before it).
pub fn unix_s(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

fn lock(ring: &Mutex<Ring>) -> MutexGuard<'_, Ring> {
    // The ring's invariants hold after every push, so a panic elsewhere cannot corrupt it.
    ring.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Readings of one source in a bounded ring, and the energy of wall-clock intervals.
#[derive(Debug)]
pub struct EnergyAccountant {
    ring: Arc<Mutex<Ring>>,
    source: String,
    rails: Vec<String>,
    anchor: (Instant, SystemTime),
    opts: EnergyOptions,
    sampler: Option<SamplerHandle>,
}

impl EnergyAccountant {
    /// An accountant fed by the caller ([`EnergyAccountant::push`]) with readings of `source`
    /// whose rails are `rails`, keeping at most `capacity` readings.
    ///
    /// # Errors
    /// A capacity below 2.
    pub fn fed(source: impl Into<String>, rails: Vec<String>, capacity: usize) -> Result<EnergyAccountant, PowerNodeError> {
        Ok(EnergyAccountant {
            ring: Arc::new(Mutex::new(Ring::new(capacity)?)),
            source: source.into(),
            rails,
            anchor: (Instant::now(), SystemTime::now()),
            opts: EnergyOptions::default(),
            sampler: None,
        })
    }

    /// An accountant that samples `source` on its own thread (see [`lop_power::sampler`]),
    /// keeping at most `capacity` readings (e.g. 6000: a minute at 100 Hz). The thread stops when
    /// the accountant is dropped or [`EnergyAccountant::stop`]ped.
    ///
    /// # Errors
    /// A capacity below 2, a bad sampling config, a thread that cannot start.
    pub fn sampled(source: BoxedSource, cfg: SamplerConfig, capacity: usize) -> Result<EnergyAccountant, PowerNodeError> {
        let mut acc = EnergyAccountant::fed(source.name().to_string(), source.rails().to_vec(), capacity)?;
        tracing::info!(source = %acc.source, rails = ?acc.rails, rate_hz = cfg.rate_hz, capacity, "power sampling started");
        acc.sampler = Some(lop_power::sampler::spawn(source, cfg, Arc::clone(&acc.ring))?);
        Ok(acc)
    }

    /// Replaces the integration options (the longest gap interpolated across, counter use).
    pub fn with_options(mut self, opts: EnergyOptions) -> EnergyAccountant {
        self.opts = opts;
        self
    }

    /// Adds a reading.
    ///
    /// # Errors
    /// [`PowerNodeError::Engine`] when the ring rejects it (not after the newest reading, invalid
    /// power, a different rail count); the ring is unchanged.
    pub fn push(&self, r: PowerReading) -> Result<(), PowerNodeError> {
        lock(&self.ring).push(r).map_err(PowerNodeError::from)
    }

    /// The monotonic instant of a wall-clock time (see the module docs on the anchor).
    ///
    /// # Errors
    /// [`PowerNodeError::Clock`] when not representable.
    pub fn instant_of(&self, t: SystemTime) -> Result<Instant, PowerNodeError> {
        let (ai, asys) = self.anchor;
        let r = match t.duration_since(asys) {
            Ok(d) => ai.checked_add(d),
            Err(e) => ai.checked_sub(e.duration()),
        };
        r.ok_or_else(|| PowerNodeError::Clock(format!("{:.3} s since the epoch is out of the monotonic clock's range", unix_s(t))))
    }

    /// The wall-clock time of a monotonic instant.
    pub fn system_time_of(&self, t: Instant) -> SystemTime {
        let (ai, asys) = self.anchor;
        if t >= ai { asys + (t - ai) } else { asys.checked_sub(ai - t).unwrap_or(UNIX_EPOCH) }
    }

    /// The energy of inference `id` over `[start, end]`.
    ///
    /// # Errors
    /// [`PowerNodeError::Interval`] when `end < start`; [`PowerNodeError::NoData`] when the buffer
    /// is empty or does not cover the interval ([`PowerNodeError::is_retryable`] when it only
    /// ends after the newest reading); [`PowerNodeError::Clock`] for unmappable times.
    pub fn energy(&self, id: u64, start: SystemTime, end: SystemTime) -> Result<EnergyReport, PowerNodeError> {
        if end < start {
            return Err(PowerNodeError::Interval { start, end });
        }
        let (a, b) = (self.instant_of(start)?, self.instant_of(end)?);
        let outcome = lop_power::energy::energy(&lock(&self.ring), a, b, &self.opts)?;
        match outcome {
            EnergyOutcome::NoData(why) => {
                tracing::debug!(id, why = %why, "no energy figure");
                Err(PowerNodeError::NoData(why))
            }
            EnergyOutcome::Energy(e) => {
                let rails_j = self.rails.iter().cloned().zip(e.rails_j.iter().copied()).collect();
                Ok(EnergyReport {
                    id,
                    start,
                    end,
                    joules: e.joules,
                    avg_w: e.mean_w,
                    rails_j,
                    samples: e.samples,
                    source: self.source.clone(),
                    modelled: e.modelled,
                    method: e.method.as_str(),
                })
            }
        }
    }

    /// Readings newer than `after` (all when `None`), oldest first: for publishing and the
    /// per-sample log.
    pub fn readings_after(&self, after: Option<Instant>) -> Vec<PowerReading> {
        let ring = lock(&self.ring);
        ring.iter().filter(|r| after.is_none_or(|t| r.at > t)).cloned().collect()
    }

    /// The newest reading.
    pub fn latest(&self) -> Option<PowerReading> {
        let ring = lock(&self.ring);
        ring.len().checked_sub(1).and_then(|i| ring.get(i).cloned())
    }

    /// Readings held.
    pub fn len(&self) -> usize {
        lock(&self.ring).len()
    }

    /// Whether no reading is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The source's name.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The source's rails.
    pub fn rails(&self) -> &[String] {
        &self.rails
    }

    /// Whether the sampler thread has ended (it stops on persistent read errors); `false` for a
    /// fed accountant.
    pub fn sampler_finished(&self) -> bool {
        self.sampler.as_ref().is_some_and(SamplerHandle::is_finished)
    }

    /// Stops the sampler thread, if any, and returns its statistics.
    ///
    /// # Errors
    /// The sampler's error (e.g. persistent read failures).
    pub fn stop(&mut self) -> Result<Option<SamplerStats>, PowerNodeError> {
        match self.sampler.take() {
            Some(h) => Ok(Some(h.join()?)),
            None => Ok(None),
        }
    }
}

impl Drop for EnergyAccountant {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!(error = %e, "power sampler ended with an error");
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PowerNodeError + '_ {
    move |source| PowerNodeError::Io { path: path.to_path_buf(), source }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}

/// Opens `path` for appending under `header`: creates parent directories; a new or empty file
/// gets the header; an existing one must start with exactly that header.
fn open_csv(path: &Path, header: &str) -> Result<File, PowerNodeError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let mut file = OpenOptions::new().create(true).append(true).read(true).open(path).map_err(io(path))?;
    let len = file.metadata().map_err(io(path))?.len();
    if len == 0 {
        file.write_all(format!("{header}\n").as_bytes()).map_err(io(path))?;
        file.flush().map_err(io(path))?;
    } else {
        let mut first = String::new();
        BufReader::new(File::open(path).map_err(io(path))?).read_line(&mut first).map_err(io(path))?;
        if first.trim_end() != header {
            return Err(PowerNodeError::Config(format!(
                "{} exists with header '{}', not '{header}'; use another file",
                path.display(),
                first.trim_end()
            )));
        }
    }
    Ok(file)
}

/// The per-inference energy log (and optionally a per-reading log).
#[derive(Debug)]
pub struct CsvLog {
    path: PathBuf,
    file: File,
    rails: Vec<String>,
    samples: Option<(PathBuf, File)>,
}

impl CsvLog {
    /// The header row: `inference_id,start_unix_s,end_unix_s,duration_s,joules,avg_w,source,
    /// modelled,samples`, then `rail:<name>_j` per rail. Times are Unix seconds, energies joules,
    /// `avg_w` watts, `modelled` is `true` or `false`, `samples` the readings strictly inside the
    /// interval; numbers have 6 decimals.
    pub fn header(rails: &[String]) -> String {
        let mut cols: Vec<String> =
            ["inference_id", "start_unix_s", "end_unix_s", "duration_s", "joules", "avg_w", "source", "modelled", "samples"]
                .map(String::from)
                .to_vec();
        cols.extend(rails.iter().map(|r| csv_field(&format!("rail:{r}_j"))));
        cols.join(",")
    }

    /// The per-reading header: `unix_s,total_w,modelled`, then `rail:<name>_w` per rail.
    pub fn samples_header(rails: &[String]) -> String {
        let mut cols = vec!["unix_s".to_string(), "total_w".into(), "modelled".into()];
        cols.extend(rails.iter().map(|r| csv_field(&format!("rail:{r}_w"))));
        cols.join(",")
    }

    /// Opens (creating parent directories) or appends to the log at `path`.
    ///
    /// # Errors
    /// [`PowerNodeError::Io`]; [`PowerNodeError::Config`] when the file exists with another header.
    pub fn create(path: impl AsRef<Path>, rails: &[String]) -> Result<CsvLog, PowerNodeError> {
        let path = path.as_ref();
        let file = open_csv(path, &CsvLog::header(rails))?;
        tracing::info!(path = %path.display(), "energy log open");
        Ok(CsvLog { path: path.to_path_buf(), file, rails: rails.to_vec(), samples: None })
    }

    /// Also logs every reading to `path` (see [`CsvLog::samples_header`]).
    ///
    /// # Errors
    /// As [`CsvLog::create`].
    pub fn with_samples(mut self, path: impl AsRef<Path>) -> Result<CsvLog, PowerNodeError> {
        let path = path.as_ref();
        let file = open_csv(path, &CsvLog::samples_header(&self.rails))?;
        self.samples = Some((path.to_path_buf(), file));
        Ok(self)
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one inference's row and flushes it. Rails are matched by name; a rail the report
    /// lacks is left empty.
    ///
    /// # Errors
    /// [`PowerNodeError::Io`].
    pub fn write(&mut self, r: &EnergyReport) -> Result<(), PowerNodeError> {
        let mut row = format!(
            "{},{:.6},{:.6},{:.6},{:.6},{:.6},{},{},{}",
            r.id,
            unix_s(r.start),
            unix_s(r.end),
            r.duration_s(),
            r.joules,
            r.avg_w,
            csv_field(&r.source),
            r.modelled,
            r.samples
        );
        for rail in &self.rails {
            row.push(',');
            if let Some((_, j)) = r.rails_j.iter().find(|(n, _)| n == rail) {
                row.push_str(&format!("{j:.6}"));
            }
        }
        row.push('\n');
        self.file.write_all(row.as_bytes()).map_err(io(&self.path))?;
        self.file.flush().map_err(io(&self.path))
    }

    /// Appends one reading (stamped `at` on the wall clock) to the per-reading log, if any.
    ///
    /// # Errors
    /// [`PowerNodeError::Io`].
    pub fn write_sample(&mut self, at: SystemTime, r: &PowerReading) -> Result<(), PowerNodeError> {
        let Some((path, file)) = self.samples.as_mut() else {
            return Ok(());
        };
        let mut row = format!("{:.6},{:.6},{}", unix_s(at), r.total_w, r.modelled);
        for w in &r.rails_w {
            row.push_str(&format!(",{w:.6}"));
        }
        row.push('\n');
        file.write_all(row.as_bytes()).map_err(io(path))?;
        file.flush().map_err(io(path))
    }
}

/// Readings averaged down for `/lop/power`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReducedSample {
    /// The newest reading's time.
    pub at: Instant,
    /// Mean total watts over the readings.
    pub total_w: f64,
    /// Mean watts per rail.
    pub rails_w: Vec<f64>,
    /// How many readings were averaged.
    pub readings: u32,
    /// Whether any was modelled.
    pub modelled: bool,
}

/// Averages readings and emits at most `max_hz` times a second: the first reading is emitted
/// alone; afterwards an average is emitted with the first reading at or past the next slot of a
/// fixed grid (`first + k / max_hz`), covering every reading since the previous emission. After
/// a gap longer than a slot the grid restarts at the late reading.
#[derive(Debug, Clone)]
pub struct RateReducer {
    period: Duration,
    due: Option<Instant>,
    total: f64,
    rails: Vec<f64>,
    n: u32,
    modelled: bool,
}

impl RateReducer {
    /// At most `max_hz` emissions a second (`f64::INFINITY`: every reading).
    ///
    /// # Errors
    /// [`PowerNodeError::Config`] unless `max_hz > 0`.
    pub fn new(max_hz: f64) -> Result<RateReducer, PowerNodeError> {
        if max_hz.is_nan() || max_hz <= 0.0 {
            return Err(PowerNodeError::Config(format!("publish rate {max_hz} Hz must be positive")));
        }
        let period = if max_hz.is_finite() { Duration::from_secs_f64(1.0 / max_hz) } else { Duration::ZERO };
        Ok(RateReducer { period, due: None, total: 0.0, rails: Vec::new(), n: 0, modelled: false })
    }

    /// Adds a reading; returns the average to publish when a slot is due.
    pub fn push(&mut self, r: &PowerReading) -> Option<ReducedSample> {
        if self.n == 0 || self.rails.len() != r.rails_w.len() {
            self.rails = vec![0.0; r.rails_w.len()];
            self.total = 0.0;
            self.n = 0;
            self.modelled = false;
        }
        self.total += r.total_w;
        for (s, w) in self.rails.iter_mut().zip(&r.rails_w) {
            *s += w;
        }
        self.n += 1;
        self.modelled |= r.modelled;
        let due = *self.due.get_or_insert(r.at);
        if r.at < due {
            return None;
        }
        let next = due + self.period;
        // On the grid while readings keep up; after a gap (or with no period) restart from here.
        self.due = Some(if next > r.at { next } else { r.at + self.period });
        let n = f64::from(self.n);
        let out = ReducedSample {
            at: r.at,
            total_w: self.total / n,
            rails_w: self.rails.iter().map(|s| s / n).collect(),
            readings: self.n,
            modelled: self.modelled,
        };
        self.n = 0;
        Some(out)
    }
}

/// An inference's robot states: computing for the robot's compute time, then transmitting, then
/// idle for the rest of its total time (the same split as the benchmark's modelled energy:
/// compute is capped at the total, transmit at what is left).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelStates {
    start: Instant,
    segments: Vec<(State, Duration)>,
}

impl ModelStates {
    /// The states of an inference that started at `start`.
    ///
    /// # Errors
    /// [`PowerNodeError::Config`] for negative or non-finite seconds.
    pub fn from_inference(start: Instant, robot_compute_s: f64, transmit_s: f64, total_s: f64) -> Result<ModelStates, PowerNodeError> {
        for (what, v) in [("robot compute", robot_compute_s), ("transmit", transmit_s), ("total", total_s)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(PowerNodeError::Config(format!("{what} seconds {v} must be finite and >= 0")));
            }
        }
        let compute = robot_compute_s.min(total_s);
        let tx = transmit_s.min(total_s - compute);
        let idle = (total_s - compute - tx).max(0.0);
        let segments = [(State::Computing, compute), (State::Transmitting, tx), (State::Idle, idle)]
            .into_iter()
            .filter(|(_, s)| *s > 0.0)
            .map(|(st, s)| (st, Duration::from_secs_f64(s)))
            .collect();
        Ok(ModelStates { start, segments })
    }

    /// When the inference started.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// When it ended.
    pub fn end(&self) -> Instant {
        self.start + self.segments.iter().map(|(_, d)| *d).sum::<Duration>()
    }

    /// The non-empty states and their durations, in order.
    pub fn segments(&self) -> &[(State, Duration)] {
        &self.segments
    }

    /// Each state with the instant it begins, then `Idle` at the end.
    pub fn transitions(&self) -> Vec<(State, Instant)> {
        let mut t = self.start;
        let mut out = Vec::with_capacity(self.segments.len() + 1);
        for &(s, d) in &self.segments {
            out.push((s, t));
            t += d;
        }
        out.push((State::Idle, t));
        out
    }

    /// The modelled joules, analytically.
    pub fn energy_j(&self, m: &PowerModel) -> f64 {
        self.segments.iter().map(|&(s, d)| m.watts(s) * d.as_secs_f64()).sum()
    }

    /// Drives a live model source through the transitions (each stamped where it happened; see
    /// [`ModelSource::set_state`] for how late stamps are clamped). Returns when each took effect.
    pub fn apply(&self, source: &ModelSource) -> Vec<Instant> {
        self.transitions().into_iter().map(|(s, at)| source.set_state(s, at)).collect()
    }
}

/// The longest step between two modelled readings inside a state (keeps them within
/// [`EnergyOptions::max_gap`]).
const MODEL_STEP: Duration = Duration::from_millis(500);

/// Turns inferences' states into modelled readings, for an accountant fed after the fact: the
/// readings carry the exact integral of the modelled power as their energy counter, so
/// [`lop_power::energy`] (which prefers the counter) reproduces [`ModelStates::energy_j`]. The
/// robot is idle between inferences; an inference that starts before the previous one ended is
/// cut to start there (its overlapping part is not counted twice).
#[derive(Debug, Clone)]
pub struct ModelFeed {
    model: PowerModel,
    last: Option<Instant>,
    acc_j: f64,
}

/// How long before an inference that follows idling (or comes first) the model feed's idle
/// reading lies.
const FIRST_LEAD: Duration = Duration::from_millis(1);

/// The rail name of modelled readings.
pub const MODEL_RAIL: &str = "MODEL";

impl ModelFeed {
    /// A feed for `model`.
    ///
    /// # Errors
    /// Invalid watts.
    pub fn new(model: PowerModel) -> Result<ModelFeed, PowerNodeError> {
        model.validate()?;
        Ok(ModelFeed { model, last: None, acc_j: 0.0 })
    }

    /// The readings for one inference, strictly after every reading made before.
    pub fn readings(&mut self, states: &ModelStates) -> Vec<PowerReading> {
        let mut out = Vec::new();
        let reading = |at: Instant, w: f64, e: f64| PowerReading { at, rails_w: vec![w], total_w: w, energy_j: Some(e), modelled: true };
        let floor = self.last;
        let push = |out: &mut Vec<PowerReading>, r: PowerReading| {
            if floor.is_none_or(|f| r.at > f) && out.last().is_none_or(|p: &PowerReading| r.at > p.at) {
                out.push(r);
            }
        };
        let start = match self.last {
            Some(last) if states.start() < last => {
                tracing::warn!(overlap = ?(last - states.start()), "inference starts before the previous one ended; cut");
                last
            }
            Some(last) => {
                // Idle since the previous inference, and an idle reading just before this one:
                // without it, the readings around an inference after more than the accountant's
                // gap limit (2 s) of idling were that far apart, and it got no energy figure.
                if let Some(before) = states.start().checked_sub(FIRST_LEAD).filter(|&b| b > last) {
                    push(&mut out, reading(before, self.model.idle_w, self.acc_j + self.model.idle_w * (before - last).as_secs_f64()));
                }
                self.acc_j += self.model.idle_w * (states.start() - last).as_secs_f64();
                states.start()
            }
            None => {
                // The first inference: an idle reading just before it, so that its interval
                // (whose wall-clock stamps round a little differently from these instants) is
                // covered from its start.
                if let Some(before) = states.start().checked_sub(FIRST_LEAD) {
                    push(&mut out, reading(before, self.model.idle_w, self.acc_j));
                    self.acc_j += self.model.idle_w * FIRST_LEAD.as_secs_f64();
                }
                states.start()
            }
        };
        let mut t = states.start();
        for &(state, d) in states.segments() {
            let (a, b) = (t.max(start), (t + d).max(start));
            t += d;
            if b <= a {
                continue;
            }
            let w = self.model.watts(state);
            let steps = (d.as_nanos() / MODEL_STEP.as_nanos()).min(10_000) as u32;
            for k in 0..=steps {
                let at = a + (b - a) * k / (steps + 1);
                push(&mut out, reading(at, w, self.acc_j + w * (at - a).as_secs_f64()));
            }
            let just_before = b - Duration::from_nanos(1);
            push(&mut out, reading(just_before, w, self.acc_j + w * (just_before - a).as_secs_f64()));
            self.acc_j += w * (b - a).as_secs_f64();
        }
        let end = states.end().max(start);
        push(&mut out, reading(end, self.model.idle_w, self.acc_j));
        self.last = Some(end);
        out
    }

    /// Pushes one inference's readings into `acc`; returns how many.
    ///
    /// # Errors
    /// A reading the accountant's ring rejects (e.g. it also holds a sampler's newer readings).
    pub fn feed(&mut self, states: &ModelStates, acc: &EnergyAccountant) -> Result<usize, PowerNodeError> {
        let rs = self.readings(states);
        let n = rs.len();
        for r in rs {
            acc.push(r)?;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(at: Instant, w: f64) -> PowerReading {
        PowerReading { at, rails_w: vec![w, w / 2.0], total_w: w, energy_j: None, modelled: false }
    }
    fn rails() -> Vec<String> {
        vec!["VDD_IN".into(), "VDD_GPU".into()]
    }
    fn secs(t: f64) -> Duration {
        Duration::from_secs_f64(t)
    }

    /// The power node's modelled watts and the planner's priced watts describe the same
    /// reference robot by default, so modelled energy and planned energy agree out of the box.
    #[test]
    fn power_model_defaults_match_the_simulators() {
        let (m, sim) = (PowerModel::default(), lop::sim::RobotPower::default());
        assert_eq!((m.computing_w, m.transmitting_w, m.idle_w), (sim.computing_w, sim.transmitting_w, sim.idle_w));
    }
    struct TempDir(PathBuf);
    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
            TempDir(std::env::temp_dir().join(format!("lop-robot-power-{tag}-{}-{nanos}", std::process::id())))
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn power_accountant_integrates_piecewise_constant_signal() {
        let acc = EnergyAccountant::fed("test", rails(), 1000).expect("accountant");
        let t0_sys = SystemTime::now();
        let t0 = acc.instant_of(t0_sys).expect("maps");
        // 5 W, then 12 W on [1.0, 2.0) s, then 5 W; readings every 10 ms, offset 3 ms.
        let p = |t: f64| if (1.0..2.0).contains(&t) { 12.0 } else { 5.0 };
        for k in 0..300 {
            let t = 0.003 + 0.01 * f64::from(k);
            acc.push(reading(t0 + secs(t), p(t))).expect("push");
        }
        let r = acc.energy(7, t0_sys + secs(0.9), t0_sys + secs(2.1)).expect("figure");
        let exact = 5.0 * 0.1 + 12.0 * 1.0 + 5.0 * 0.1;
        assert!((r.joules - exact).abs() / exact < 0.02, "{} vs {exact}", r.joules);
        assert!((r.avg_w - exact / 1.2).abs() / (exact / 1.2) < 0.02);
        assert_eq!((r.id, r.source.as_str(), r.modelled, r.method), (7, "test", false, "trapezoid"));
        assert_eq!(r.rails_j[1].0, "VDD_GPU");
        assert!((r.rails_j[1].1 - r.joules / 2.0).abs() < 1e-9);
        assert_eq!(r.samples, 120);
        assert!((r.duration_s() - 1.2).abs() < 1e-6);
        // Errors and no-data cases.
        let e = acc.energy(1, t0_sys + secs(1.0), t0_sys + secs(0.5)).expect_err("reversed");
        assert!(e.to_string().contains("before it starts"), "{e}");
        let e = acc.energy(1, t0_sys + secs(2.5), t0_sys + secs(3.5)).expect_err("after the buffer");
        assert!(e.is_retryable() && e.to_string().contains("after the newest"), "{e}");
        let e = acc.energy(1, t0_sys, t0_sys + secs(0.5)).expect_err("before the buffer");
        assert!(matches!(e, PowerNodeError::NoData(NoData::StartsBeforeBuffer { .. })) && !e.is_retryable(), "{e}");
        let empty = EnergyAccountant::fed("test", rails(), 10).expect("accountant");
        let e = empty.energy(1, t0_sys, t0_sys + secs(0.1)).expect_err("empty");
        assert!(matches!(e, PowerNodeError::NoData(NoData::TooFewReadings { have: 0 })), "{e}");
        assert!(acc.push(reading(t0, 1.0)).is_err(), "out-of-order readings are refused");
        assert_eq!(acc.latest().map(|r| r.total_w), Some(5.0));
        assert_eq!(acc.readings_after(Some(t0 + secs(2.975))).len(), 2);
    }

    #[test]
    fn power_accountant_with_sampler_thread() {
        let model = ModelSource::new(PowerModel::default(), State::Computing).expect("model");
        let cfg = SamplerConfig { rate_hz: 200.0, ..SamplerConfig::default() };
        let mut acc = EnergyAccountant::sampled(Box::new(model), cfg, 1000).expect("sampling");
        std::thread::sleep(Duration::from_millis(40));
        let start = SystemTime::now();
        std::thread::sleep(Duration::from_millis(150));
        let end = SystemTime::now();
        std::thread::sleep(Duration::from_millis(60));
        let r = acc.energy(1, start, end).expect("covered");
        assert!(r.modelled && r.source == "model");
        assert!((r.avg_w - 13.35).abs() < 1e-6, "{r:?}");
        assert!(acc.stop().expect("clean").is_some_and(|s| s.reads >= 5));
        assert!(!acc.sampler_finished());
    }

    #[test]
    fn power_csv_log_rows_header_and_append() {
        let dir = TempDir::new("csv");
        let path = dir.0.join("nested/deeper/energy.csv");
        let mut log = CsvLog::create(&path, &rails()).expect("creates dirs").with_samples(dir.0.join("samples.csv")).expect("samples");
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_250);
        let report = EnergyReport {
            id: 3,
            start: t,
            end: t + Duration::from_millis(40),
            joules: 0.534,
            avg_w: 13.35,
            rails_j: vec![("VDD_IN".into(), 0.534), ("VDD_GPU".into(), 0.2)],
            samples: 4,
            source: "model".into(),
            modelled: true,
            method: "counter",
        };
        log.write(&report).expect("row");
        log.write(&EnergyReport { id: 4, rails_j: vec![("VDD_IN".into(), 1.0)], ..report.clone() }).expect("row");
        log.write_sample(t, &reading(Instant::now(), 8.0)).expect("sample row");
        let text = std::fs::read_to_string(&path).expect("read back");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            vec![
                "inference_id,start_unix_s,end_unix_s,duration_s,joules,avg_w,source,modelled,samples,rail:VDD_IN_j,rail:VDD_GPU_j",
                "3,1700000000.250000,1700000000.290000,0.040000,0.534000,13.350000,model,true,4,0.534000,0.200000",
                "4,1700000000.250000,1700000000.290000,0.040000,0.534000,13.350000,model,true,4,1.000000,",
            ]
        );
        let samples = std::fs::read_to_string(dir.0.join("samples.csv")).expect("read back");
        assert_eq!(samples, "unix_s,total_w,modelled,rail:VDD_IN_w,rail:VDD_GPU_w\n1700000000.250000,8.000000,false,8.000000,4.000000\n");
        drop(log);
        // Re-opening appends under the same header; another rail set is refused.
        let mut again = CsvLog::create(&path, &rails()).expect("reopen");
        again.write(&report).expect("row");
        assert_eq!(std::fs::read_to_string(&path).expect("read").lines().count(), 4);
        let e = CsvLog::create(&path, &["VDD_CPU".to_string()]).expect_err("other header");
        assert!(e.to_string().contains("use another file"), "{e}");
    }

    #[test]
    fn power_rate_reducer_averages_to_at_most_the_rate() {
        let t0 = Instant::now();
        let mut red = RateReducer::new(10.0).expect("valid");
        let mut out = Vec::new();
        for k in 0..100u32 {
            let r = reading(t0 + Duration::from_millis(10 * u64::from(k)), f64::from(k));
            out.extend(red.push(&r));
        }
        assert_eq!(out.len(), 10, "1 s of 100 Hz at most 10 Hz: {}", out.len());
        assert_eq!((out[0].readings, out[0].total_w), (1, 0.0), "the first reading goes alone");
        assert_eq!(out[1].readings, 10);
        assert!((out[1].total_w - 5.5).abs() < 1e-9, "mean of 1..=10: {}", out[1].total_w);
        assert!((out[1].rails_w[1] - 2.75).abs() < 1e-9);
        for pair in out.windows(2) {
            assert!(pair[1].at - pair[0].at >= Duration::from_millis(100));
        }
        let mut every = RateReducer::new(f64::INFINITY).expect("valid");
        assert!((0..5).all(|k| every.push(&reading(t0 + Duration::from_millis(k), 1.0)).is_some()));
        assert!(RateReducer::new(0.0).is_err() && RateReducer::new(f64::NAN).is_err());
    }

    #[test]
    fn power_model_states_energy_matches_analytic_figure() {
        let m = PowerModel::default();
        let acc = EnergyAccountant::fed("model", vec![MODEL_RAIL.into()], 10_000).expect("accountant");
        let t0 = Instant::now();
        let mut feed = ModelFeed::new(m).expect("valid model");
        // Two inferences: 30 ms compute, 20 ms transmit, 100 ms total; then a 3 s one with 2.5 s of
        // compute (long states are split below the gap limit), after 10 s idle (past the gap
        // limit: an idle reading just before it covers its start).
        let a = ModelStates::from_inference(t0 + secs(0.2), 0.030, 0.020, 0.100).expect("valid");
        let b = ModelStates::from_inference(a.end() + secs(10.0), 2.5, 0.1, 3.0).expect("valid");
        assert_eq!(a.transitions().len(), 4);
        let analytic_a = 13.35 * 0.030 + 4.25 * 0.020 + 4.04 * 0.050;
        assert!((a.energy_j(&m) - analytic_a).abs() < 1e-9);
        feed.feed(&a, &acc).expect("fed");
        feed.feed(&b, &acc).expect("fed");
        // Each interval as lop_power reads it from a result's wall-clock stamps, which may start
        // a little before the model's instants: half a millisecond of idling more.
        let early = secs(0.0005);
        for (states, expect) in [(&a, analytic_a), (&b, 13.35 * 2.5 + 4.25 * 0.1 + 4.04 * 0.4)] {
            let (s, e) = (acc.system_time_of(states.start()) - early, acc.system_time_of(states.end()));
            let expect = expect + m.idle_w * early.as_secs_f64();
            let r = acc.energy(1, s, e).expect("covered");
            assert!(r.modelled && r.method == "counter", "{r:?}");
            assert!((r.joules - expect).abs() < 1e-6, "{} vs {expect}", r.joules);
        }
        // Compute and transmit are capped by the total; bad numbers are refused.
        let c = ModelStates::from_inference(t0, 0.5, 0.5, 0.2).expect("valid");
        assert_eq!(c.segments(), &[(State::Computing, secs(0.2))]);
        assert!(ModelStates::from_inference(t0, -1.0, 0.0, 1.0).is_err());
        // A live model source follows the transitions.
        let src = ModelSource::new(m, State::Idle).expect("model");
        let now = Instant::now();
        let live = ModelStates::from_inference(now, 0.0, 0.0, 0.0).expect("valid");
        assert_eq!(live.apply(&src).len(), 1);
        assert_eq!(src.state(), State::Idle);
    }
}

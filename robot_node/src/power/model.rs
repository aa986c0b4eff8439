//! The power model's state feed: [`ModelStates`] turns an inference's timings into computing /
//! transmitting / idle intervals for a live model source, and [`ModelFeed`] turns them into
//! exact modelled readings for an accountant, after the fact.

use std::time::{Duration, Instant};

use lop_power::{ModelSource, PowerModel, PowerReading, State};

use super::accountant::EnergyAccountant;
use super::error::PowerNodeError;

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
/// [`EnergyOptions::max_gap`](lop_power::EnergyOptions::max_gap)).
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

//! A state-based power model, for emulation on machines without the robot's sensors.
//!
//! The robot publishes its state (computing, transmitting, idle); [`ModelSource::set_state`]
//! records each change and the source reports the state's watts, plus an energy counter that is
//! the exact integral of the modelled power since the source was made. Every reading is labelled
//! [`PowerReading::modelled`], and so is every energy computed from it: modelled joules are never
//! reported as measured.

use super::{PowerReading, PowerSource};
use crate::error::{Error, Result};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// The source's name.
pub const NAME: &str = "model";

/// The robot's activity, as it publishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Nothing running.
    Idle,
    /// Running kernels (computing takes precedence when the robot also transmits).
    Computing,
    /// Sending or receiving bands, not computing.
    Transmitting,
}

impl State {
    /// The name used in messages and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::Computing => "computing",
            State::Transmitting => "transmitting",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for State {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        [State::Idle, State::Computing, State::Transmitting]
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| Error::Input(format!("unknown robot state '{s}' (idle, computing, transmitting)")))
    }
}

/// Watts per state.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PowerModel {
    /// While computing.
    pub computing_w: f64,
    /// While transmitting only.
    pub transmitting_w: f64,
    /// While idle.
    pub idle_w: f64,
}

impl Default for PowerModel {
    /// The project's reference robot: 13.35 W computing, 4.25 W transmitting, 4.04 W idle.
    fn default() -> Self {
        PowerModel { computing_w: 13.35, transmitting_w: 4.25, idle_w: 4.04 }
    }
}

impl PowerModel {
    /// The watts of a state.
    pub fn watts(&self, state: State) -> f64 {
        match state {
            State::Idle => self.idle_w,
            State::Computing => self.computing_w,
            State::Transmitting => self.transmitting_w,
        }
    }

    /// Checks that every value is a finite, non-negative number of watts.
    ///
    /// # Errors
    /// [`Error::Input`] naming the bad value.
    pub fn validate(&self) -> Result<()> {
        for (what, w) in [("computing", self.computing_w), ("transmitting", self.transmitting_w), ("idle", self.idle_w)] {
            if !w.is_finite() || w < 0.0 {
                return Err(Error::Input(format!("power model: {what} watts {w} must be finite and >= 0")));
            }
        }
        Ok(())
    }
}

/// The model as a [`PowerSource`]. Clones share one state, so a clone kept by the code that
/// hears the robot's states can drive a source that a sampling thread owns.
#[derive(Debug, Clone)]
pub struct ModelSource {
    inner: Arc<Mutex<Inner>>,
    rails: Vec<String>,
}

#[derive(Debug)]
struct Inner {
    model: PowerModel,
    state: State,
    /// When the current state began.
    since: Instant,
    /// Nothing may change before this: the last reading or state change (keeps the counter
    /// consistent with what was already reported).
    floor: Instant,
    /// Modelled joules up to `since`.
    acc_j: f64,
}

impl ModelSource {
    /// A model in `state` from now on.
    ///
    /// # Errors
    /// When the model's watts are invalid.
    pub fn new(model: PowerModel, state: State) -> Result<Self> {
        model.validate()?;
        let now = Instant::now();
        let inner = Inner { model, state, since: now, floor: now, acc_j: 0.0 };
        Ok(ModelSource { inner: Arc::new(Mutex::new(inner)), rails: vec!["MODEL".to_string()] })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every update leaves `Inner` consistent, so a panic elsewhere cannot corrupt it.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.lock().state
    }

    /// The watts of the model.
    pub fn model(&self) -> PowerModel {
        self.lock().model
    }

    /// The robot entered `state` at `at`. A change stamped before the last reading or change (a
    /// late message, a clock that jumped back) takes effect at that point instead, and one stamped
    /// in the future takes effect now: the counter never goes back on a value it reported.
    /// Returns the instant the change took effect.
    pub fn set_state(&self, state: State, at: Instant) -> Instant {
        let mut m = self.lock();
        let now = Instant::now();
        let at = at.clamp(m.floor, now.max(m.floor));
        m.acc_j += m.model.watts(m.state) * at.saturating_duration_since(m.since).as_secs_f64();
        m.state = state;
        m.since = at;
        m.floor = at;
        at
    }
}

impl PowerSource for ModelSource {
    fn name(&self) -> &str {
        NAME
    }
    fn rails(&self) -> &[String] {
        &self.rails
    }
    fn total(&self) -> &str {
        &self.rails[0]
    }
    fn modelled(&self) -> bool {
        true
    }
    fn read(&mut self) -> Result<PowerReading> {
        let mut m = self.lock();
        let at = Instant::now().max(m.floor);
        let w = m.model.watts(m.state);
        let energy = m.acc_j + w * at.saturating_duration_since(m.since).as_secs_f64();
        m.floor = at;
        Ok(PowerReading { at, rails_w: vec![w], total_w: w, energy_j: Some(energy), modelled: true })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn power_model_defaults_and_states() {
        let m = PowerModel::default();
        assert_eq!((m.watts(State::Computing), m.watts(State::Transmitting), m.watts(State::Idle)), (13.35, 4.25, 4.04));
        assert_eq!("transmitting".parse::<State>().expect("parses"), State::Transmitting);
        assert!("busy".parse::<State>().is_err());
        let bad = PowerModel { idle_w: -1.0, ..m };
        assert!(ModelSource::new(bad, State::Idle).is_err());
    }

    #[test]
    fn power_model_counter_is_exact_and_labelled() {
        let mut s = ModelSource::new(PowerModel::default(), State::Idle).expect("valid");
        let t0 = s.lock().since;
        let r0 = s.read().expect("reads");
        assert!(r0.modelled && s.modelled());
        // Changes stamped in the past but after the last read are applied where stamped.
        std::thread::sleep(Duration::from_millis(30));
        let t_c = s.set_state(State::Computing, t0 + Duration::from_millis(10).max(r0.at - t0));
        std::thread::sleep(Duration::from_millis(20));
        let r1 = s.read().expect("reads");
        assert_eq!(r1.total_w, 13.35);
        let expect = 4.04 * (t_c - t0).as_secs_f64() + 13.35 * (r1.at - t_c).as_secs_f64();
        assert!((r1.energy_j.expect("counter") - expect).abs() < 1e-9);
        // A change stamped before the last reading (clock jumped back) is clamped: the counter
        // stays monotonic.
        s.set_state(State::Transmitting, t0);
        let r2 = s.read().expect("reads");
        assert!(r2.energy_j >= r1.energy_j, "{r1:?} {r2:?}");
        assert_eq!(r2.total_w, 4.25);
        // Stamped in the future: takes effect now, never beyond the reading that follows.
        let driver = s.clone();
        let took = driver.set_state(State::Idle, Instant::now() + Duration::from_secs(3600));
        let r3 = s.read().expect("reads");
        assert_eq!((r3.total_w, s.state()), (4.04, State::Idle), "a clone drives the same model");
        assert!(r3.at >= took && took <= Instant::now());
    }
}

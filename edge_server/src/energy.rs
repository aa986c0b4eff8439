//! GPU energy per served inference: each [`Served`] interval `[start, end]` is paired with the
//! power readings around it (NVML's energy counter when the GPU has one, else power integrated
//! over the interval; see [`lop_power::energy`]).
//!
//! An inference's figure can only be computed once a reading at or after its end exists, so a
//! [`Meter`] keeps served inferences pending and resolves them on [`Meter::poll`]; one still
//! uncovered after its patience is reported without a figure (never an extrapolated one).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lop_power::{EnergyOptions, EnergyOutcome, NoData, Ring};
use lop_runtime::edge::Served;

/// Something that knows the energy over an interval (the NVML sampler's ring; a fake in tests).
pub trait IntervalEnergy: Send {
    /// The energy over `[start, end]`, or why there is none (yet).
    ///
    /// # Errors
    /// A reversed interval.
    fn energy(&self, start: Instant, end: Instant) -> lop_power::Result<EnergyOutcome>;
}

/// A ring filled by a [`lop_power::sampler`] thread.
#[derive(Debug, Clone)]
pub struct RingEnergy {
    /// The readings.
    pub ring: Arc<Mutex<Ring>>,
    /// How to integrate them.
    pub opts: EnergyOptions,
}

impl IntervalEnergy for RingEnergy {
    fn energy(&self, start: Instant, end: Instant) -> lop_power::Result<EnergyOutcome> {
        // A poisoned lock means the sampler panicked mid-push; the ring is still consistent.
        let ring = self.ring.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        lop_power::energy::energy(&ring, start, end, &self.opts)
    }
}

/// One served inference and its GPU energy.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedEnergy {
    /// The inference.
    pub served: Served,
    /// Joules over its interval, or why there is no figure.
    pub joules: Result<f64, String>,
    /// `counter` or `trapezoid` when there is a figure.
    pub method: Option<&'static str>,
}

/// Running totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct EnergyTotals {
    /// Served inferences seen.
    pub inferences: u64,
    /// Of which with an energy figure.
    pub measured: u64,
    /// Joules of those.
    pub joules: f64,
    /// Seconds they spanned (`end - start`).
    pub seconds: f64,
    /// Server compute seconds of those.
    pub server_compute_s: f64,
}

impl EnergyTotals {
    /// Mean joules per measured inference (0 with none).
    pub fn mean_j(&self) -> f64 {
        if self.measured == 0 { 0.0 } else { self.joules / self.measured as f64 }
    }
}

/// Pairs served inferences with energy readings.
#[derive(Debug)]
pub struct Meter<S> {
    source: S,
    patience: Duration,
    pending: VecDeque<(Served, Instant)>,
    totals: EnergyTotals,
}

impl<S: IntervalEnergy> Meter<S> {
    /// A meter over `source`; an inference whose interval the readings do not cover `patience`
    /// after it was offered is reported without a figure.
    pub fn new(source: S, patience: Duration) -> Meter<S> {
        Meter { source, patience, pending: VecDeque::new(), totals: EnergyTotals::default() }
    }

    /// Queues an inference, offered at `now`.
    pub fn offer(&mut self, served: Served, now: Instant) {
        self.totals.inferences += 1;
        self.pending.push_back((served, now + self.patience));
    }

    /// Inferences waiting for readings.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The totals so far.
    pub fn totals(&self) -> EnergyTotals {
        self.totals
    }

    /// Resolves every pending inference the readings now cover (or that ran out of patience by
    /// `now`), in the order offered.
    pub fn poll(&mut self, now: Instant) -> Vec<ServedEnergy> {
        let mut out = Vec::new();
        let mut keep = VecDeque::with_capacity(self.pending.len());
        while let Some((served, give_up)) = self.pending.pop_front() {
            let resolved = match self.source.energy(served.start, served.end) {
                Ok(EnergyOutcome::Energy(e)) => Some((Ok(e.joules), Some(e.method.as_str()))),
                // A later reading will cover it: wait, within patience.
                Ok(EnergyOutcome::NoData(NoData::EndsAfterBuffer { .. } | NoData::TooFewReadings { .. })) if now < give_up => None,
                Ok(EnergyOutcome::NoData(why)) => Some((Err(why.to_string()), None)),
                Err(e) => Some((Err(e.to_string()), None)),
            };
            match resolved {
                None => keep.push_back((served, give_up)),
                Some((joules, method)) => {
                    if let Ok(j) = joules {
                        self.totals.measured += 1;
                        self.totals.joules += j;
                        self.totals.seconds += served.duration().as_secs_f64();
                        self.totals.server_compute_s += served.server_compute_s;
                    }
                    out.push(ServedEnergy { served, joules, method });
                }
            }
        }
        self.pending = keep;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lop_power::PowerReading;
    use lop_runtime::edge::ServedOutcome;

    /// Readings pushed by hand: a fake NVML with a counter.
    fn ring_energy() -> RingEnergy {
        RingEnergy { ring: Arc::new(Mutex::new(Ring::new(1000).expect("ring"))), opts: EnergyOptions::default() }
    }

    fn push(src: &RingEnergy, at: Instant, w: f64, counter_j: f64) {
        let r = PowerReading { at, rails_w: vec![w], total_w: w, energy_j: Some(counter_j), modelled: false };
        src.ring.lock().expect("lock").push(r).expect("push");
    }

    fn served(id: u64, start: Instant, end: Instant) -> Served {
        Served {
            inference_id: id,
            robot_id: format!("robot-{id}"),
            model_id: "m".into(),
            replica: 0,
            start,
            end,
            start_wall: std::time::SystemTime::now(),
            server_compute_s: 0.01,
            bytes_received: 0,
            bytes_sent: 0,
            upload_s: 0.0,
            queue_s: 0.0,
            batch: 1,
            download_s: 0.0,
            device: "cpu".into(),
            outcome: ServedOutcome::Done,
        }
    }

    const MS: Duration = Duration::from_millis(1);

    /// 100 W before t = 100 ms, 300 W from then on (the counter integrates exactly that), read
    /// every 10 ms; inferences are resolved against their own intervals, wait for readings past
    /// their end, and give up after their patience.
    #[test]
    fn pairs_intervals_with_counter_readings() {
        let t0 = Instant::now();
        let src = ring_energy();
        let counter = |t_ms: f64| if t_ms <= 100.0 { 0.1 * t_ms } else { 10.0 + 0.3 * (t_ms - 100.0) };
        let watts = |t_ms: f64| if t_ms < 100.0 { 100.0 } else { 300.0 };
        for k in 0..=15u64 {
            push(&src, t0 + k as u32 * 10 * MS, watts(k as f64 * 10.0), counter(k as f64 * 10.0));
        }
        let mut meter = Meter::new(src.clone(), Duration::from_secs(1));
        let now = t0 + 150 * MS;
        // a: [20, 50] ms at 100 W = 3 J; b: [110, 130] ms at 300 W = 6 J; c: ends after the newest reading.
        meter.offer(served(1, t0 + 20 * MS, t0 + 50 * MS), now);
        meter.offer(served(2, t0 + 110 * MS, t0 + 130 * MS), now);
        meter.offer(served(3, t0 + 140 * MS, t0 + 170 * MS), now);
        let got = meter.poll(now);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].served.inference_id, 1);
        assert!((got[0].joules.clone().expect("figure") - 3.0).abs() < 1e-9, "{:?}", got[0]);
        assert_eq!(got[0].method, Some("counter"));
        assert_eq!(got[1].served.inference_id, 2);
        assert!((got[1].joules.clone().expect("figure") - 6.0).abs() < 1e-9, "{:?}", got[1]);
        assert_eq!(meter.pending(), 1);
        // A later reading covers c: [140, 170] ms at 300 W = 9 J.
        for k in 16..=18u64 {
            push(&src, t0 + k as u32 * 10 * MS, 300.0, counter(k as f64 * 10.0));
        }
        let got = meter.poll(now + 30 * MS);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].served.inference_id, 3);
        assert!((got[0].joules.clone().expect("figure") - 9.0).abs() < 1e-9, "{:?}", got[0]);
        let t = meter.totals();
        assert_eq!((t.inferences, t.measured), (3, 3));
        assert!((t.joules - 18.0).abs() < 1e-9 && (t.mean_j() - 6.0).abs() < 1e-9, "{t:?}");
        assert!((t.seconds - 0.08).abs() < 1e-9, "{t:?}");

        // Never covered: reported without a figure once patience runs out, not before.
        meter.offer(served(4, t0 + 175 * MS, t0 + 400 * MS), now);
        assert!(meter.poll(now + 500 * MS).is_empty());
        let got = meter.poll(now + 1001 * MS);
        assert_eq!(got.len(), 1);
        assert!(got[0].joules.as_ref().expect_err("no figure").contains("after the newest"), "{:?}", got[0]);
        // Before the buffer: no figure at once.
        meter.offer(served(5, t0 - 50 * MS, t0 + 10 * MS), now);
        let got = meter.poll(now);
        assert!(got[0].joules.is_err());
        let t = meter.totals();
        assert_eq!((t.inferences, t.measured, meter.pending()), (5, 3, 0));
    }

    /// A fake source that is not a ring: constant 250 W, readings up to a moving horizon.
    struct Constant {
        horizon: Arc<Mutex<Instant>>,
    }
    impl IntervalEnergy for Constant {
        fn energy(&self, start: Instant, end: Instant) -> lop_power::Result<EnergyOutcome> {
            let h = *self.horizon.lock().expect("lock");
            if end > h {
                return Ok(EnergyOutcome::NoData(NoData::EndsAfterBuffer { by: end - h }));
            }
            let d = end.duration_since(start);
            Ok(EnergyOutcome::Energy(lop_power::Energy {
                joules: 250.0 * d.as_secs_f64(),
                rails_j: vec![],
                method: lop_power::Method::Trapezoid,
                duration: d,
                mean_w: 250.0,
                samples: 0,
                modelled: false,
            }))
        }
    }

    #[test]
    fn out_of_order_ends_resolve_independently() {
        let t0 = Instant::now();
        let horizon = Arc::new(Mutex::new(t0 + 100 * MS));
        let mut meter = Meter::new(Constant { horizon: horizon.clone() }, Duration::from_secs(5));
        meter.offer(served(1, t0, t0 + 200 * MS), t0);
        meter.offer(served(2, t0 + 10 * MS, t0 + 50 * MS), t0);
        let got = meter.poll(t0);
        assert_eq!(got.iter().map(|g| g.served.inference_id).collect::<Vec<_>>(), vec![2]);
        assert!((got[0].joules.clone().expect("figure") - 10.0).abs() < 1e-9);
        *horizon.lock().expect("lock") = t0 + 300 * MS;
        let got = meter.poll(t0);
        assert_eq!(got[0].served.inference_id, 1);
        assert!((got[0].joules.clone().expect("figure") - 50.0).abs() < 1e-9);
        assert_eq!(got[0].method, Some("trapezoid"));
    }
}

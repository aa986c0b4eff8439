//! Bandwidth predictors and their evaluation on traces.
//!
//! A [`Predictor`] is fed throughput samples (`observe(t_s, mbps)`) and predicts the next one.
//! The design's choice is the harmonic mean of the last N samples ([`HarmonicMean`]): it is
//! dominated by the small samples, so a short upward spike barely moves it and the prediction
//! errs on the low side, which is the cheap side (a plan for a slower link only wastes some
//! speed-up; a plan for a faster link puts a stalled transfer on the critical path).
//!
//! Predictors here:
//! - [`HarmonicMean`] (`harmonic`): harmonic mean of the last N samples.
//! - [`ArithmeticMean`] (`mean`): arithmetic mean of the last N samples (for comparison).
//! - [`Ewma`] (`ewma`): exponentially weighted moving average.
//! - [`Median`] (`median`): median of the last N samples (robust to single outliers).
//! - [`RobustMpc`] (`robust-mpc`): the harmonic mean divided by `1 + e`, where `e` is the largest
//!   relative prediction error over the last N predictions (RobustMPC, Yin et al., SIGCOMM 2015).
//! - [`Last`] (`last`): the last sample.
//!
//! [`evaluate`] replays a trace, predicting every sample from the ones before it, and reports
//! the mean absolute error, MAPE and the overestimate rate (samples from
//! [`crate::Trace::samples`]).

use crate::{Error, Result};
use std::collections::VecDeque;

/// Samples below this many Mbit/s count as this value in harmonic means, so that an outage
/// (a 0 sample) gives a prediction near zero rather than a division by zero.
pub const MIN_MBPS: f64 = 1e-3;

/// Something that predicts the next throughput sample.
pub trait Predictor: Send {
    /// The predictor's name (as accepted by [`by_name`]).
    fn name(&self) -> &'static str;
    /// A throughput sample: `mbps` Mbit/s measured at `t_s` seconds. Non-finite or negative
    /// samples are ignored (logged).
    fn observe(&mut self, t_s: f64, mbps: f64);
    /// The predicted next sample, Mbit/s; `None` before any sample.
    fn predict(&self) -> Option<f64>;
    /// Forgets every sample.
    fn reset(&mut self);
}

/// Every name [`by_name`] accepts.
pub const NAMES: [&str; 6] = ["harmonic", "mean", "ewma", "median", "robust-mpc", "last"];

/// The predictor called `name`; `window` is N for the windowed ones, and the EWMA uses
/// `alpha = 2 / (window + 1)` (the span convention, so N = 5 weighs the last sample by 1/3).
///
/// # Errors
/// [`Error::InvalidConfig`] for an unknown name or a zero window.
pub fn by_name(name: &str, window: usize) -> Result<Box<dyn Predictor>> {
    if window == 0 {
        return Err(Error::InvalidConfig { what: "bandwidth predictor window must be at least 1".into() });
    }
    Ok(match name {
        "harmonic" => Box::new(HarmonicMean::new(window)),
        "mean" => Box::new(ArithmeticMean::new(window)),
        "ewma" => Box::new(Ewma::new(2.0 / (window as f64 + 1.0))?),
        "median" => Box::new(Median::new(window)),
        "robust-mpc" => Box::new(RobustMpc::new(window)),
        "last" => Box::new(Last::default()),
        other => return Err(Error::InvalidConfig { what: format!("unknown bandwidth predictor '{other}' (known: {})", NAMES.join(", ")) }),
    })
}

fn valid(name: &str, t_s: f64, mbps: f64) -> bool {
    let ok = mbps.is_finite() && mbps >= 0.0 && t_s.is_finite();
    if !ok {
        tracing::debug!(predictor = name, t_s, mbps, "ignoring invalid bandwidth sample");
    }
    ok
}

/// The last N samples.
#[derive(Debug, Clone)]
struct Window {
    buf: VecDeque<f64>,
    n: usize,
}

impl Window {
    fn new(n: usize) -> Window {
        let n = n.max(1);
        Window { buf: VecDeque::with_capacity(n), n }
    }
    fn push(&mut self, v: f64) {
        if self.buf.len() == self.n {
            self.buf.pop_front();
        }
        self.buf.push_back(v);
    }
    fn harmonic(&self) -> Option<f64> {
        if self.buf.is_empty() {
            return None;
        }
        let inv: f64 = self.buf.iter().map(|v| 1.0 / v.max(MIN_MBPS)).sum();
        Some(self.buf.len() as f64 / inv)
    }
}

/// Harmonic mean of the last N samples (the design's predictor).
#[derive(Debug, Clone)]
pub struct HarmonicMean {
    w: Window,
}

impl HarmonicMean {
    /// Over the last `n` samples (at least 1).
    pub fn new(n: usize) -> HarmonicMean {
        HarmonicMean { w: Window::new(n) }
    }
}

impl Predictor for HarmonicMean {
    fn name(&self) -> &'static str {
        "harmonic"
    }
    fn observe(&mut self, t_s: f64, mbps: f64) {
        if valid(self.name(), t_s, mbps) {
            self.w.push(mbps);
        }
    }
    fn predict(&self) -> Option<f64> {
        self.w.harmonic()
    }
    fn reset(&mut self) {
        self.w.buf.clear();
    }
}

/// Arithmetic mean of the last N samples.
#[derive(Debug, Clone)]
pub struct ArithmeticMean {
    w: Window,
}

impl ArithmeticMean {
    /// Over the last `n` samples (at least 1).
    pub fn new(n: usize) -> ArithmeticMean {
        ArithmeticMean { w: Window::new(n) }
    }
}

impl Predictor for ArithmeticMean {
    fn name(&self) -> &'static str {
        "mean"
    }
    fn observe(&mut self, t_s: f64, mbps: f64) {
        if valid(self.name(), t_s, mbps) {
            self.w.push(mbps);
        }
    }
    fn predict(&self) -> Option<f64> {
        (!self.w.buf.is_empty()).then(|| self.w.buf.iter().sum::<f64>() / self.w.buf.len() as f64)
    }
    fn reset(&mut self) {
        self.w.buf.clear();
    }
}

/// Exponentially weighted moving average: `p <- alpha * x + (1 - alpha) * p`, starting at the
/// first sample.
#[derive(Debug, Clone)]
pub struct Ewma {
    alpha: f64,
    value: Option<f64>,
}

impl Ewma {
    /// With weight `alpha` in (0, 1] on the newest sample.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `alpha` is outside (0, 1].
    pub fn new(alpha: f64) -> Result<Ewma> {
        if !(alpha > 0.0 && alpha <= 1.0) {
            return Err(Error::InvalidConfig { what: format!("EWMA alpha {alpha} is not in (0, 1]") });
        }
        Ok(Ewma { alpha, value: None })
    }
}

impl Predictor for Ewma {
    fn name(&self) -> &'static str {
        "ewma"
    }
    fn observe(&mut self, t_s: f64, mbps: f64) {
        if valid(self.name(), t_s, mbps) {
            self.value = Some(self.value.map_or(mbps, |p| self.alpha * mbps + (1.0 - self.alpha) * p));
        }
    }
    fn predict(&self) -> Option<f64> {
        self.value
    }
    fn reset(&mut self) {
        self.value = None;
    }
}

/// Median of the last N samples (the mean of the two middle ones for an even count).
#[derive(Debug, Clone)]
pub struct Median {
    w: Window,
}

impl Median {
    /// Over the last `n` samples (at least 1).
    pub fn new(n: usize) -> Median {
        Median { w: Window::new(n) }
    }
}

impl Predictor for Median {
    fn name(&self) -> &'static str {
        "median"
    }
    fn observe(&mut self, t_s: f64, mbps: f64) {
        if valid(self.name(), t_s, mbps) {
            self.w.push(mbps);
        }
    }
    fn predict(&self) -> Option<f64> {
        let mut v: Vec<f64> = self.w.buf.iter().copied().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let m = v.len() / 2;
        Some(if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 })
    }
    fn reset(&mut self) {
        self.w.buf.clear();
    }
}

/// RobustMPC's discounted harmonic mean: the harmonic mean of the last N samples divided by
/// `1 + e`, `e` the largest relative error `|predicted - actual| / actual` of this predictor's
/// own last N predictions (errors on samples below [`MIN_MBPS`] are capped at 1).
#[derive(Debug, Clone)]
pub struct RobustMpc {
    w: Window,
    errors: Window,
}

impl RobustMpc {
    /// Over the last `n` samples and errors (at least 1).
    pub fn new(n: usize) -> RobustMpc {
        RobustMpc { w: Window::new(n), errors: Window::new(n) }
    }
}

impl Predictor for RobustMpc {
    fn name(&self) -> &'static str {
        "robust-mpc"
    }
    fn observe(&mut self, t_s: f64, mbps: f64) {
        if !valid(self.name(), t_s, mbps) {
            return;
        }
        if let Some(p) = self.predict() {
            let e = if mbps < MIN_MBPS { 1.0 } else { ((p - mbps).abs() / mbps).min(1.0) };
            self.errors.push(e);
        }
        self.w.push(mbps);
    }
    fn predict(&self) -> Option<f64> {
        let e = self.errors.buf.iter().copied().fold(0.0, f64::max);
        self.w.harmonic().map(|h| h / (1.0 + e))
    }
    fn reset(&mut self) {
        self.w.buf.clear();
        self.errors.buf.clear();
    }
}

/// The last sample.
#[derive(Debug, Clone, Default)]
pub struct Last {
    value: Option<f64>,
}

impl Predictor for Last {
    fn name(&self) -> &'static str {
        "last"
    }
    fn observe(&mut self, t_s: f64, mbps: f64) {
        if valid(self.name(), t_s, mbps) {
            self.value = Some(mbps);
        }
    }
    fn predict(&self) -> Option<f64> {
        self.value
    }
    fn reset(&mut self) {
        self.value = None;
    }
}

/// How well a predictor did on a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The predictor's name.
    pub predictor: &'static str,
    /// Samples predicted (every sample after the first).
    pub predictions: usize,
    /// Mean absolute error, Mbit/s.
    pub mae_mbps: f64,
    /// Mean absolute percentage error, percent, over samples above [`MIN_MBPS`].
    pub mape_pct: f64,
    /// Fraction of predictions above the sample that came (the costly error), in [0, 1].
    pub overestimate_rate: f64,
    /// Mean of `predicted - actual` over the overestimates, Mbit/s (0 when there are none).
    pub mean_overestimate_mbps: f64,
}

/// Replays `samples` (`(t_s, mbps)`, in time order) through `p` from a reset state, predicting
/// each sample from the ones before it.
pub fn evaluate(p: &mut dyn Predictor, samples: &[(f64, f64)]) -> Evaluation {
    p.reset();
    let (mut n, mut abs, mut pct, mut n_pct, mut over, mut over_sum) = (0usize, 0.0, 0.0, 0usize, 0usize, 0.0);
    for &(t, actual) in samples {
        if let Some(pred) = p.predict() {
            n += 1;
            abs += (pred - actual).abs();
            if actual > MIN_MBPS {
                pct += (pred - actual).abs() / actual;
                n_pct += 1;
            }
            if pred > actual * (1.0 + 1e-12) {
                over += 1;
                over_sum += pred - actual;
            }
        }
        p.observe(t, actual);
    }
    let div = |a: f64, b: usize| if b == 0 { 0.0 } else { a / b as f64 };
    Evaluation {
        predictor: p.name(),
        predictions: n,
        mae_mbps: div(abs, n),
        mape_pct: 100.0 * div(pct, n_pct),
        overestimate_rate: div(over as f64, n),
        mean_overestimate_mbps: div(over_sum, over),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(values: &[f64]) -> Vec<(f64, f64)> {
        values.iter().enumerate().map(|(i, &v)| (i as f64 * 0.5, v)).collect()
    }
    fn all(window: usize) -> Vec<Box<dyn Predictor>> {
        NAMES.iter().map(|n| by_name(n, window).expect("known")).collect()
    }

    #[test]
    fn bandwidth_constant_trace_has_zero_error() {
        let t = trace(&[40.0; 50]);
        for mut p in all(5) {
            let e = evaluate(p.as_mut(), &t);
            assert_eq!(e.predictions, 49, "{e:?}");
            assert!(e.mae_mbps < 1e-9 && e.mape_pct < 1e-9 && e.overestimate_rate == 0.0, "{e:?}");
        }
    }

    #[test]
    fn bandwidth_step_down_lags_by_window() {
        let n = 5;
        let mut values = vec![100.0; 20];
        values.extend([10.0; 20]);
        let mut p = HarmonicMean::new(n);
        let mut preds = Vec::new();
        for (t, v) in trace(&values) {
            p.observe(t, v);
            preds.push(p.predict().expect("has samples"));
        }
        // After k < N samples of the new rate the prediction still remembers the old one; after N
        // samples it is exactly the new rate.
        for k in 1..n {
            assert!(preds[19 + k] > 10.0 + 1e-9, "k={k}: {}", preds[19 + k]);
            let expect = n as f64 / (k as f64 / 10.0 + (n - k) as f64 / 100.0);
            assert!((preds[19 + k] - expect).abs() < 1e-9);
        }
        assert!((preds[19 + n] - 10.0).abs() < 1e-9);
        // The harmonic mean falls faster than the arithmetic mean (lower is the safe side).
        let mut a = ArithmeticMean::new(n);
        for (t, v) in trace(&values[..21]) {
            a.observe(t, v);
        }
        assert!(preds[20] < a.predict().expect("samples") * 0.5, "{} vs {:?}", preds[20], a.predict());
    }

    #[test]
    fn bandwidth_spike_does_not_fool_robust_predictors() {
        let mut values = vec![50.0; 20];
        values.push(500.0);
        let after = |name: &str| {
            let mut p = by_name(name, 5).expect("known");
            for (t, v) in trace(&values) {
                p.observe(t, v);
            }
            p.predict().expect("samples")
        };
        let (h, m, med, r, ew) = (after("harmonic"), after("mean"), after("median"), after("robust-mpc"), after("ewma"));
        assert_eq!(med, 50.0);
        assert!(r <= 50.0, "robust-mpc must not follow a spike up: {r}");
        assert!(h < 62.0, "harmonic moves little: {h}");
        assert!(m > 130.0 && ew > 150.0, "the means follow it: {m} {ew}");
        // Invalid samples are ignored.
        let mut p = HarmonicMean::new(3);
        p.observe(0.0, 10.0);
        p.observe(0.5, f64::NAN);
        p.observe(1.0, -3.0);
        assert_eq!(p.predict(), Some(10.0));
        // An outage drives the harmonic mean to (nearly) zero.
        p.observe(1.5, 0.0);
        assert!(p.predict().expect("samples") < 0.01);
    }

    #[test]
    fn bandwidth_names() {
        assert!(by_name("oracle", 5).is_err());
        assert!(by_name("harmonic", 0).is_err());
        for n in NAMES {
            assert_eq!(by_name(n, 3).expect("known").name(), n);
        }
    }

    /// Evaluates every predictor on the bundled traces and prints the table.
    #[test]
    fn bandwidth_predictors_on_bundled_traces() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/traces");
        for name in ["outdoor", "indoor"] {
            let samples: Vec<(f64, f64)> = crate::Trace::load(dir.join(format!("{name}.csv"))).expect("bundled trace").samples().collect();
            assert!(samples.len() > 100);
            eprintln!("{name} ({} samples, window 5):", samples.len());
            eprintln!("  {:<11} {:>9} {:>8} {:>9} {:>12}", "predictor", "MAE Mb/s", "MAPE %", "over %", "mean over");
            let mut by: std::collections::HashMap<&str, Evaluation> = std::collections::HashMap::new();
            for mut p in all(5) {
                let e = evaluate(p.as_mut(), &samples);
                eprintln!(
                    "  {:<11} {:>9.2} {:>8.1} {:>9.1} {:>12.2}",
                    e.predictor,
                    e.mae_mbps,
                    e.mape_pct,
                    100.0 * e.overestimate_rate,
                    e.mean_overestimate_mbps
                );
                assert_eq!(e.predictions, samples.len() - 1);
                assert!(e.mae_mbps.is_finite() && (0.0..=1.0).contains(&e.overestimate_rate));
                by.insert(e.predictor, e);
            }
            let rate = |n: &str| by.get(n).map_or(f64::NAN, |e| e.overestimate_rate);
            // Structural facts: the harmonic mean never exceeds the arithmetic mean of the same
            // window, so it overestimates no more often; the discounted one no more than that.
            assert!(rate("harmonic") <= rate("mean"), "{name}: {} > {}", rate("harmonic"), rate("mean"));
            assert!(rate("robust-mpc") <= rate("harmonic"), "{name}");
        }
    }
}

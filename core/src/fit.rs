//! A side's time for one kernel call as a function of the rows it computes: the line profiles
//! fit through their measurements, and what the simulator and the planner price every chunk
//! with.

/// Least-squares time model `time(rows) = a + b * rows`, clamped so that neither coefficient is
/// negative.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Fit {
    /// Fixed seconds per kernel call (launch, framework overhead).
    pub a_s: f64,
    /// Seconds per output row.
    pub b_s_per_row: f64,
    /// Root-mean-square residual of the fit over the samples, seconds.
    pub residual_s: f64,
}

impl Fit {
    /// A fit with the given coefficients and no residual.
    pub fn new(a_s: f64, b_s_per_row: f64) -> Fit {
        Fit { a_s, b_s_per_row, residual_s: 0.0 }
    }

    /// Fits `(rows, seconds)` points by least squares. With one distinct row count (or none)
    /// the model is a constant. A negative slope is clamped to 0 (constant = mean); a negative
    /// intercept to 0 (slope refitted through the origin).
    pub fn from_points(points: &[(f64, f64)]) -> Fit {
        let n = points.len() as f64;
        if points.is_empty() {
            return Fit::new(0.0, 0.0);
        }
        let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
        let my = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let (mut a, mut b) = if sxx > 0.0 { (my - sxy / sxx * mx, sxy / sxx) } else { (my, 0.0) };
        if b < 0.0 {
            (a, b) = (my, 0.0);
        }
        if a < 0.0 {
            let sx2: f64 = points.iter().map(|p| p.0 * p.0).sum();
            let sx1y: f64 = points.iter().map(|p| p.0 * p.1).sum();
            (a, b) = (0.0, if sx2 > 0.0 { (sx1y / sx2).max(0.0) } else { 0.0 });
        }
        let a = a.max(0.0);
        let ss: f64 = points.iter().map(|p| (a + b * p.0 - p.1).powi(2)).sum();
        Fit { a_s: a, b_s_per_row: b, residual_s: (ss / n).sqrt() }
    }

    /// Predicted seconds for a band of `rows` rows (never negative).
    #[inline]
    pub fn time(&self, rows: usize) -> f64 {
        (self.a_s + self.b_s_per_row * rows as f64).max(0.0)
    }

    /// Checks that every coefficient is finite and not negative; the error says which is not.
    ///
    /// # Errors
    /// The message naming the coefficient and its value.
    pub fn check(&self) -> Result<(), String> {
        for (what, v) in [("intercept", self.a_s), ("slope", self.b_s_per_row), ("residual", self.residual_s)] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("fit {what} is {v}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_a_line_and_clamps_negative_coefficients() {
        let f = Fit::from_points(&[(1.0, 3.0), (2.0, 5.0), (4.0, 9.0), (8.0, 17.0)]);
        assert!((f.a_s - 1.0).abs() < 1e-12 && (f.b_s_per_row - 2.0).abs() < 1e-12 && f.residual_s < 1e-12);
        assert_eq!(f.time(10), 21.0);
        // Falling times: slope clamped to 0, constant = mean.
        let f = Fit::from_points(&[(1.0, 4.0), (2.0, 2.0)]);
        assert_eq!((f.a_s, f.b_s_per_row), (3.0, 0.0));
        assert!((f.residual_s - 1.0).abs() < 1e-12);
        // Negative intercept: refitted through the origin.
        let f = Fit::from_points(&[(1.0, 0.0), (2.0, 2.0), (3.0, 4.0)]);
        assert_eq!(f.a_s, 0.0);
        assert!(f.b_s_per_row > 0.0 && f.time(0) == 0.0);
        // One band size: a constant.
        assert_eq!(Fit::from_points(&[(7.0, 0.5), (7.0, 0.7)]).b_s_per_row, 0.0);
    }

    #[test]
    fn check_names_the_coefficient_that_is_not_a_time() {
        assert_eq!(Fit::new(1e-3, 2e-5).check(), Ok(()));
        assert_eq!(Fit::new(-1.0, 0.0).check(), Err("fit intercept is -1".to_string()));
        assert_eq!(Fit::new(0.0, f64::NAN).check(), Err("fit slope is NaN".to_string()));
    }
}

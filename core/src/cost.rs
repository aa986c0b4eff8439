//! One model's price list in a fleet, summarised from measured profiles: the few numbers a
//! router and the fleet simulator need instead of the whole graph. The engine derives it
//! (`lop::sim::model_cost`), the fleet (`lop_fleet`) prices offloads with it.

use crate::error::{Error, Result};

/// One model's price list, on the profiled robot and the profiled server ("speed 1").
///
/// The offloaded inference is priced as the server pipelining bands while the frame arrives
/// (DESIGN.md section 1): it ends no earlier than the whole frame's upload plus the server's
/// [`tail_s`](ModelCost::tail_s), and no earlier than the server's whole work
/// [`server_s`](ModelCost::server_s) after the server is free for it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelCost {
    /// The model's name (what robots ask for).
    pub name: String,
    /// Bytes of one input frame on the wire.
    pub input_bytes: f64,
    /// Bytes of the result that returns (after post-processing when the model has a task).
    pub output_bytes: f64,
    /// Seconds the profiled server computes for one whole inference: its busy time.
    pub server_s: f64,
    /// Server seconds of the rows that depend on the frame's last row: the part of its work
    /// that cannot overlap the upload.
    pub tail_s: f64,
    /// Seconds the profiled robot takes for the whole model alone.
    pub robot_s: f64,
}

impl ModelCost {
    /// Checks that every figure is finite and non-negative, the tail is within the whole work,
    /// and the name is a model id (the rules of `lop_msgs::validate_id`).
    ///
    /// # Errors
    /// [`Error::Input`] naming the model and the bad figure.
    pub fn check(&self) -> Result<()> {
        let bad = |what: &str, v: f64| Err(Error::Input(format!("model cost '{}': {what} = {v} must be finite and >= 0", self.name)));
        let id_ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.');
        if self.name.is_empty() || self.name.len() > 64 || !self.name.bytes().all(id_ok) {
            return Err(Error::Input(format!(
                "model cost name '{}' must be 1 to 64 ASCII letters, digits, '_', '-' or '.' (a model id)",
                self.name.chars().take(80).collect::<String>()
            )));
        }
        for (what, v) in [
            ("input_bytes", self.input_bytes),
            ("output_bytes", self.output_bytes),
            ("server_s", self.server_s),
            ("tail_s", self.tail_s),
            ("robot_s", self.robot_s),
        ] {
            if !v.is_finite() || v < 0.0 {
                return bad(what, v);
            }
        }
        if self.server_s <= 0.0 || self.robot_s <= 0.0 {
            return Err(Error::Input(format!("model cost '{}': server_s and robot_s must be > 0", self.name)));
        }
        if self.tail_s > self.server_s * (1.0 + 1e-9) {
            return Err(Error::Input(format!(
                "model cost '{}': tail_s {} exceeds the whole work server_s {}",
                self.name, self.tail_s, self.server_s
            )));
        }
        Ok(())
    }

    /// Seconds the uplink holds one frame at `bytes_per_s`.
    pub fn upload_s(&self, bytes_per_s: f64) -> f64 {
        self.input_bytes / bytes_per_s.max(1e-9)
    }

    /// Seconds the downlink holds one result at `bytes_per_s`.
    pub fn download_s(&self, bytes_per_s: f64) -> f64 {
        self.output_bytes / bytes_per_s.max(1e-9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost() -> ModelCost {
        ModelCost { name: "m".into(), input_bytes: 1e6, output_bytes: 1e3, server_s: 0.010, tail_s: 0.002, robot_s: 0.2 }
    }

    #[test]
    fn check_refuses_each_bad_figure_by_name() {
        cost().check().expect("a sound price list");
        let mut broken = cost();
        broken.tail_s = 1.0;
        assert!(broken.check().expect_err("refused").to_string().contains("exceeds the whole work"));
        broken.tail_s = f64::NAN;
        assert!(broken.check().expect_err("refused").to_string().contains("tail_s"));
        let mut negative = cost();
        negative.input_bytes = -1.0;
        assert!(negative.check().expect_err("refused").to_string().contains("input_bytes"));
        let mut idle = cost();
        idle.server_s = 0.0;
        idle.tail_s = 0.0;
        assert!(idle.check().expect_err("refused").to_string().contains("must be > 0"));
        for name in ["", "a b", &"x".repeat(65)] {
            let named = ModelCost { name: name.to_string(), ..cost() };
            assert!(named.check().expect_err("refused").to_string().contains("model id"), "{name:?}");
        }
    }

    #[test]
    fn transfer_times_follow_the_rate() {
        assert!((cost().upload_s(1e7) - 0.1).abs() < 1e-12);
        assert!((cost().download_s(1e6) - 1e-3).abs() < 1e-12);
        // A zero rate is a very slow link, not a division by zero.
        assert!(cost().upload_s(0.0).is_finite());
    }
}

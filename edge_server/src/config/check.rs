//! Every value of a parsed configuration checked, in the order the file documents them (the
//! first problem found is the error, naming its field): the edge as a whole, the Zenoh
//! session, each model entry, the runtime's settings, the operators' endpoints and the site.

use super::error::ConfigError;
use super::model_entry::{ModelEntry, ProfileSource};
use super::schema::EdgeConfig;
use super::sections::Mode;

impl EdgeConfig {
    /// Checks every value ([`EdgeConfig::parse`] calls it once the paths are resolved).
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        self.check_edge()?;
        self.check_zenoh()?;
        self.check_models()?;
        self.check_runtime()?;
        self.check_operations()?;
        self.table_spec()?;
        Ok(())
    }

    /// The edge as a whole: its fleet id, dilation, memory budget, batching and forwarding.
    fn check_edge(&self) -> Result<(), ConfigError> {
        if let Some(id) = &self.id {
            lop_msgs::validate_id(id).map_err(|e| self.invalid("id", format!("'{id}': {e}")))?;
        }
        if !(self.dilation.is_finite() && self.dilation >= 1.0) {
            return Err(self.invalid("dilation", format!("{} must be >= 1", self.dilation)));
        }
        if let Some(mb) = self.memory_budget_mb
            && !(mb.is_finite() && mb > 0.0)
        {
            return Err(self.invalid("memory_budget_mb", format!("{mb} must be a number of megabytes above 0 (null: every model warm)")));
        }
        if !(1..=lop_runtime::edge::Batching::MAX).contains(&self.max_batch) {
            return Err(self.invalid(
                "max_batch",
                format!("{} must be a count from 1 (no batching) to {}", self.max_batch, lop_runtime::edge::Batching::MAX),
            ));
        }
        if self.max_forwards > lop_msgs::protocol::MAX_PATH {
            return Err(self.invalid(
                "max_forwards",
                format!("{} is more than the {} a request's path can carry", self.max_forwards, lop_msgs::protocol::MAX_PATH),
            ));
        }
        Ok(())
    }

    /// The Zenoh session: endpoints for its mode, and a configuration Zenoh accepts.
    fn check_zenoh(&self) -> Result<(), ConfigError> {
        if self.zenoh.mode != Mode::Client && self.zenoh.listen.is_empty() {
            return Err(self.invalid("zenoh.listen", "a router or peer needs at least one endpoint to listen on"));
        }
        if self.zenoh.mode == Mode::Client && self.zenoh.connect.is_empty() {
            return Err(self.invalid("zenoh.connect", "a client needs at least one endpoint to connect to"));
        }
        self.zenoh_config()?.to_zenoh().map_err(|e| self.invalid("zenoh", e.to_string()))?;
        Ok(())
    }

    /// At least one model, and each entry ([`EdgeConfig::check_model`]).
    fn check_models(&self) -> Result<(), ConfigError> {
        if self.models.is_empty() {
            return Err(self.invalid("models", "no model to serve"));
        }
        for (i, m) in self.models.iter().enumerate() {
            self.check_model(i, m)?;
        }
        Ok(())
    }

    /// Model entry `i`: a unique valid id, its hash, source, input shapes, camera fits, front
    /// and back ends, and a source that resolves.
    fn check_model(&self, i: usize, m: &ModelEntry) -> Result<(), ConfigError> {
        let field = |f: &str| format!("models[{i}].{f}");
        lop_msgs::validate_id(&m.id).map_err(|e| self.invalid(field("id"), format!("'{}': {e}", m.id)))?;
        if self.models[..i].iter().any(|o| o.id == m.id) {
            return Err(self.invalid(field("id"), format!("'{}' is listed twice", m.id)));
        }
        if let Some(h) = &m.sha256
            && !(h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(self.invalid(field("sha256"), format!("'{h}' is not 64 hexadecimal digits")));
        }
        if m.source.is_none() && m.sha256.is_none() {
            return Err(self.invalid(field("source"), "give a source (zoo:NAME or a file in the store), or a sha256"));
        }
        if m.input_shape.is_some() && !m.input_shapes.is_empty() {
            return Err(self.invalid(field("input_shapes"), "give input_shape or input_shapes, not both"));
        }
        for (name, shape) in m.input_shape.iter().map(|s| ("input_shape", s)).chain(m.input_shapes.iter().map(|s| ("input_shapes", s))) {
            if shape.is_empty() || shape.contains(&0) {
                return Err(self.invalid(field(name), format!("{shape:?} is not a shape of positive dimensions")));
            }
        }
        if let Some((j, dup)) = m.input_shapes.iter().enumerate().find(|(j, s)| m.input_shapes[..*j].contains(s)) {
            return Err(self.invalid(format!("models[{i}].input_shapes[{j}]"), format!("{dup:?} is listed twice")));
        }
        for (j, spec) in m.camera_fits.iter().enumerate() {
            let fit = lop::fit::FrameFit::parse(spec).map_err(|e| self.invalid(format!("models[{i}].camera_fits[{j}]"), e.to_string()))?;
            if m.camera_fits[..j].iter().any(|s| lop::fit::FrameFit::parse(s).ok() == Some(fit)) {
                return Err(self.invalid(format!("models[{i}].camera_fits[{j}]"), format!("{spec} is listed twice")));
            }
        }
        if m.input_shapes.len().max(1) * m.camera_fits.len().max(1) > 1 && matches!(m.server_profile, ProfileSource::File(_)) {
            return Err(self.invalid(
                field("server_profile"),
                "a profile file fits one input shape; with several input_shapes or camera_fits use measure (each variant is profiled and cached)",
            ));
        }
        if let Some(spec) = &m.preprocess {
            lop::preprocess::Preprocess::parse(spec).map_err(|e| self.invalid(field("preprocess"), e.to_string()))?;
        }
        if let Some(spec) = &m.task {
            lop::postprocess::Postprocess::parse(spec).map_err(|e| self.invalid(field("task"), e.to_string()))?;
        }
        self.model_source(i)?;
        Ok(())
    }

    /// The runtime's settings: devices, replicas, threads, frame size, timeouts, log filter and
    /// GPU energy sampling.
    fn check_runtime(&self) -> Result<(), ConfigError> {
        self.device()?;
        if self.replicas == 0 {
            return Err(self.invalid("replicas", "must be at least 1"));
        }
        if let Some(t) = self.threads
            && t < 1
        {
            return Err(self.invalid("threads", format!("{t} must be at least 1")));
        }
        if self.max_frame_bytes < 1024 {
            return Err(self.invalid("max_frame_bytes", format!("{} is too small (at least 1024)", self.max_frame_bytes)));
        }
        for (name, v) in
            [("hello_timeout_s", self.hello_timeout_s), ("table_wait_s", self.table_wait_s), ("shutdown_grace_s", self.shutdown_grace_s)]
        {
            if !(v.is_finite() && (0.0..=86_400.0).contains(&v)) {
                return Err(self.invalid(name, format!("{v} is not a number of seconds in [0, 86400]")));
            }
        }
        tracing_subscriber::EnvFilter::try_new(&self.log).map_err(|e| self.invalid("log", format!("'{}': {e}", self.log)))?;
        let g = &self.gpu_energy;
        // At least 0.01 Hz: the sampler waits 20 readings' time for the first one, as a duration.
        if !(0.01..=10_000.0).contains(&g.rate_hz) {
            return Err(self.invalid("gpu_energy.rate_hz", format!("{} is not in [0.01, 10000]", g.rate_hz)));
        }
        Ok(())
    }

    /// What operators and the site hear from this edge: the metrics address, load report and
    /// digest periods, shard size.
    fn check_operations(&self) -> Result<(), ConfigError> {
        self.metrics_addr()?;
        let site = &self.site;
        for (name, v) in [("site.report_period_ms", site.report_period_ms), ("site.digest_period_ms", site.digest_period_ms)] {
            if !(v.is_finite() && (10.0..=1000.0).contains(&v)) {
                return Err(self.invalid(name, format!("{v} is not a number of milliseconds in [10, 1000]")));
            }
        }
        if !(1..=lop_msgs::site::MAX_DIGEST_EDGES).contains(&site.shard_size) {
            return Err(self.invalid("site.shard_size", format!("{} is not in [1, {}]", site.shard_size, lop_msgs::site::MAX_DIGEST_EDGES)));
        }
        Ok(())
    }
}

//! The Prometheus metrics of `lop_edge`, served on `/metrics` ([`crate::http`]) through the
//! `prometheus-client` registry and its OpenMetrics text encoder.
//!
//! - Observed per served inference ([`EdgeService::served`], labelled by model):
//!   `lop_edge_inferences_total{model, outcome}` (`done`, `deadline`, `aborted`, `failed`), the
//!   bytes in and out, and histograms of the inference as the edge sees it, its compute, its
//!   queue wait and its upload span.
//! - Read from the service at each scrape (a collector): per model the inferences refused as
//!   overloaded or late, forwarded and cancelled, warm and busy replicas; Hellos refused by
//!   reason; frames dropped by reason; open sessions; table builds in progress and the oldest
//!   one's seconds.

use std::sync::{Arc, OnceLock};

use lop_power::nvml::{GpuGaugeReading, GpuGauges};
use lop_runtime::edge::{EdgeService, Served};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A served inference's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    model: String,
    outcome: String,
}

/// A model's label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabel {
    model: String,
}

type Seconds = Family<ModelLabel, Histogram, fn() -> Histogram>;

/// Seconds from 1 ms to about 33 s, doubling.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// The edge's registry and the families fed per served inference.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    inferences: Family<Outcome, Counter>,
    bytes_in: Family<ModelLabel, Counter>,
    bytes_out: Family<ModelLabel, Counter>,
    inference_s: Seconds,
    compute_s: Seconds,
    queue_s: Seconds,
    upload_s: Seconds,
    download_s: Seconds,
    batch: Family<ModelLabel, Histogram, fn() -> Histogram>,
    device_inferences: Family<[(&'static str, String); 1], Counter>,
    gpus: Arc<OnceLock<Vec<(String, GpuGauges)>>>,
    /// Whether served inferences are recorded (`metrics.enabled`).
    on: bool,
    service: Arc<OnceLock<EdgeService>>,
}

/// Batch sizes 1 to 64 (`max_batch` is at most 64), one bucket per power of two.
fn batch_sizes() -> Histogram {
    Histogram::new([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0])
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// The registry with every family registered; the service's own figures appear once
    /// [`Metrics::attach`] gives it.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("lop_edge");
        let inferences = Family::<Outcome, Counter>::default();
        registry.register("inferences", "Inferences the edge served, by model and how they ended", inferences.clone());
        let bytes_in = Family::<ModelLabel, Counter>::default();
        registry.register("received_bytes", "Band bytes received for served inferences", bytes_in.clone());
        let bytes_out = Family::<ModelLabel, Counter>::default();
        registry.register("sent_bytes", "Band bytes sent for served inferences", bytes_out.clone());
        let hist = |registry: &mut Registry, name: &str, help: &str| {
            let f: Seconds = Family::new_with_constructor(seconds);
            registry.register(name, help, f.clone());
            f
        };
        let inference_s = hist(&mut registry, "inference_seconds", "A served inference as the edge saw it: its Start to its end");
        let compute_s = hist(&mut registry, "compute_seconds", "Seconds the server computed a served inference's chunks");
        let queue_s = hist(&mut registry, "queue_seconds", "Seconds a served inference waited for its replica (and the edge's overhead)");
        let upload_s = hist(&mut registry, "upload_seconds", "Seconds from a served inference's Start to its last band's arrival");
        let download_s = hist(
            &mut registry,
            "download_seconds",
            "Seconds from a served inference's first result band out to its end (its download as the edge sees it)",
        );
        let batch: Family<ModelLabel, Histogram, fn() -> Histogram> = Family::new_with_constructor(batch_sizes);
        registry.register(
            "batch_size",
            "Inferences computed together in the batch each served inference ran in (Triton's inference count over execution count)",
            batch.clone(),
        );
        let device_inferences = Family::<[(&'static str, String); 1], Counter>::default();
        registry.register("device_inferences", "Inferences the edge served, by the device that computed them", device_inferences.clone());
        let service = Arc::new(OnceLock::new());
        registry.register_collector(Box::new(ServiceCollector { service: service.clone() }));
        let gpus = Arc::new(OnceLock::new());
        registry.register_collector(Box::new(GpuCollector { gpus: gpus.clone() }));
        Metrics {
            registry,
            inferences,
            bytes_in,
            bytes_out,
            inference_s,
            compute_s,
            queue_s,
            upload_s,
            download_s,
            batch,
            device_inferences,
            gpus,
            on: true,
            service,
        }
    }

    /// Reads the service's own figures at each scrape from now on (once; later calls are
    /// ignored).
    pub fn attach(&self, svc: EdgeService) {
        let _ = self.service.set(svc);
    }

    /// A registry that records nothing: the edge with `metrics.enabled: false`, which serves no
    /// endpoint and so spends nothing on its figures.
    pub fn off() -> Metrics {
        Metrics { on: false, ..Metrics::new() }
    }

    /// Reads these GPUs (each named as its device) at every scrape from now on (once; later
    /// calls are ignored).
    pub fn attach_gpus(&self, gpus: Vec<(String, GpuGauges)>) {
        let _ = self.gpus.set(gpus);
    }

    /// Records one served inference.
    pub fn observe(&self, s: &Served) {
        if !self.on {
            return;
        }
        let model = ModelLabel { model: s.model_id.clone() };
        self.inferences.get_or_create(&Outcome { model: s.model_id.clone(), outcome: s.outcome.as_str().into() }).inc();
        self.bytes_in.get_or_create(&model).inc_by(s.bytes_received);
        self.bytes_out.get_or_create(&model).inc_by(s.bytes_sent);
        self.inference_s.get_or_create(&model).observe(s.duration().as_secs_f64());
        if s.server_compute_s > 0.0 {
            self.compute_s.get_or_create(&model).observe(s.server_compute_s);
        }
        self.queue_s.get_or_create(&model).observe(s.queue_s);
        if s.upload_s > 0.0 {
            self.upload_s.get_or_create(&model).observe(s.upload_s);
        }
        if s.download_s > 0.0 {
            self.download_s.get_or_create(&model).observe(s.download_s);
        }
        if !s.device.is_empty() {
            self.device_inferences.get_or_create(&[("device", s.device.clone())]).inc();
        }
        if s.batch > 0 {
            self.batch.get_or_create(&model).observe(f64::from(s.batch));
        }
    }

    /// The exposition, OpenMetrics text.
    ///
    /// # Errors
    /// Formatting errors of the encoder (none in practice: it writes to a string).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// The exposition in Prometheus' text format (version 0.0.4), for scrapers and tools that do
    /// not ask for OpenMetrics (`promtool check metrics`, a plain `curl`): the OpenMetrics text with
    /// each counter family named by its samples (`..._total`) and without the `# EOF` marker.
    ///
    /// # Errors
    /// As [`Metrics::encode`].
    pub fn encode_text(&self) -> Result<String, std::fmt::Error> {
        Ok(openmetrics_to_text(&self.encode()?))
    }
}

/// OpenMetrics text to Prometheus text: counters' HELP and TYPE lines take the `_total` name of
/// their samples; `# UNIT` and `# EOF` lines go.
fn openmetrics_to_text(open: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for line in open.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some((name, "counter")) = rest.split_once(' ')
        {
            counters.insert(name.to_string());
        }
    }
    let mut out = String::with_capacity(open.len());
    for line in open.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            (counters.contains(name) && !name.ends_with("_total")).then(|| format!("{p}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::openmetrics_to_text;

    #[test]
    fn counters_are_named_by_their_samples_in_prometheus_text() {
        let open = "# HELP a Things.\n# TYPE a counter\na_total{m=\"x\"} 3\n# HELP b Level.\n# TYPE b gauge\nb 1.0\n# EOF\n";
        let text = openmetrics_to_text(open);
        assert_eq!(text, "# HELP a_total Things.\n# TYPE a_total counter\na_total{m=\"x\"} 3\n# HELP b Level.\n# TYPE b gauge\nb 1.0\n");
    }
}

/// The GPUs' NVML figures, read at each scrape (none without NVML).
#[derive(Debug)]
struct GpuCollector {
    gpus: Arc<OnceLock<Vec<(String, GpuGauges)>>>,
}

impl Collector for GpuCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(gpus) = self.gpus.get().filter(|g| !g.is_empty()) else { return Ok(()) };
        let readings: Vec<(String, GpuGaugeReading)> = gpus.iter().filter_map(|(n, g)| g.read().map(|r| (n.clone(), r))).collect();
        let of = |f: &dyn Fn(&GpuGaugeReading) -> Option<f64>| -> Vec<([(&str, String); 1], f64)> {
            readings.iter().filter_map(|(n, r)| f(r).map(|v| ([("device", n.clone())], v))).collect()
        };
        use MetricType::{Counter as C, Gauge as G};
        family(
            &mut encoder,
            "gpu_utilization",
            "Share of the last sample period a kernel ran on the GPU (NVML)",
            G,
            &of(&|r| Some(r.utilisation)),
        )?;
        family(&mut encoder, "gpu_memory_used_bytes", "GPU memory in use (NVML)", G, &of(&|r| Some(r.memory_used_bytes as f64)))?;
        family(&mut encoder, "gpu_memory_total_bytes", "GPU memory in all (NVML)", G, &of(&|r| Some(r.memory_total_bytes as f64)))?;
        family(&mut encoder, "gpu_power_watts", "GPU power now (NVML)", G, &of(&|r| r.power_w))?;
        family(&mut encoder, "gpu_energy_joules", "GPU energy counter since the driver loaded (NVML)", C, &of(&|r| r.energy_j))?;
        Ok(())
    }
}

/// The service's figures, read at each scrape.
#[derive(Debug)]
struct ServiceCollector {
    service: Arc<OnceLock<EdgeService>>,
}

/// Writes one family of `(labels, value)` samples of `kind` (counter or gauge).
fn family<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: &[(L, f64)],
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, v) in samples {
        let mut m = metric.encode_family(labels)?;
        match kind {
            MetricType::Counter => m.encode_counter::<NoLabelSet, _, u64>(&(*v as u64), None)?,
            _ => m.encode_gauge(v)?,
        }
    }
    Ok(())
}

/// Writes one unlabelled sample of `kind` (counter or gauge).
fn single(encoder: &mut DescriptorEncoder, name: &str, help: &str, kind: MetricType, v: f64) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, kind)?;
    match kind {
        MetricType::Counter => m.encode_counter::<NoLabelSet, _, u64>(&(v as u64), None),
        _ => m.encode_gauge(&v),
    }
}

impl Collector for ServiceCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(svc) = self.service.get() else { return Ok(()) };
        let models = svc.model_stats();
        let per_model = |f: &dyn Fn(&lop_runtime::edge::ModelStats) -> f64| -> Vec<(ModelLabel, f64)> {
            models.iter().map(|m| (ModelLabel { model: m.id.clone() }, f(m))).collect()
        };
        use MetricType::{Counter as C, Gauge as G};
        family(
            &mut encoder,
            "overloaded",
            "Inferences refused at once: the queue would miss their deadline",
            C,
            &per_model(&|m| m.overloaded as f64),
        )?;
        family(&mut encoder, "forwarded", "Inferences forwarded to another edge of the fleet", C, &per_model(&|m| m.forwarded as f64))?;
        family(&mut encoder, "late", "Forwarded inferences that arrived with too little time left", C, &per_model(&|m| m.late as f64))?;
        family(
            &mut encoder,
            "cancelled",
            "Inferences the robot cancelled (it finished them itself)",
            C,
            &per_model(&|m| m.cancelled as f64),
        )?;
        family(
            &mut encoder,
            "model_warm",
            "Whether the model's replicas are loaded (1) or it is cold (0)",
            G,
            &per_model(&|m| f64::from(u8::from(m.warm))),
        )?;
        family(&mut encoder, "replicas", "Warm replicas of the model", G, &per_model(&|m| m.replicas as f64))?;
        family(&mut encoder, "replicas_busy", "Replicas with an inference queued or running", G, &per_model(&|m| m.replicas_busy as f64))?;
        let devices = svc.device_loads();
        let per_device = |f: &dyn Fn(&lop_runtime::edge::DeviceLoad) -> f64| -> Vec<([(&str, String); 1], f64)> {
            devices.iter().map(|d| ([("device", d.name.clone())], f(d))).collect()
        };
        family(&mut encoder, "device_replicas", "Warm replicas on the device, every model's", G, &per_device(&|d| d.replicas as f64))?;
        family(
            &mut encoder,
            "device_queued",
            "Inferences queued or running on the device's replicas",
            G,
            &per_device(&|d| d.queued as f64),
        )?;
        family(
            &mut encoder,
            "device_speed",
            "The device's speed relative to the first device (measured profiles)",
            G,
            &per_device(&|d| d.speed),
        )?;
        let rejects: Vec<([(&str, String); 1], f64)> =
            svc.rejects().into_iter().map(|(r, n)| ([("reason", format!("{r:?}").to_lowercase())], n as f64)).collect();
        family(&mut encoder, "hellos_refused", "Hellos refused, by reason", C, &rejects)?;
        let dropped = svc.counts().dropped;
        let drops: Vec<([(&str, String); 1], f64)> = serde_json::to_value(dropped)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| v.as_u64().map(|n| ([("reason", k)], n as f64)))
            .collect();
        family(&mut encoder, "frames_dropped", "Frames from robots dropped, by reason", C, &drops)?;
        let c = svc.counts();
        single(&mut encoder, "sessions_welcomed", "Sessions welcomed", C, c.sessions as f64)?;
        single(
            &mut encoder,
            "robot_profiles_refused",
            "Hellos with a new robot profile refused while a schedule table was being built (retried by the robot)",
            C,
            c.profiles_refused as f64,
        )?;
        single(
            &mut encoder,
            "robot_profiles_evicted",
            "Robot profiles received in Hellos and forgotten, to make room or unused for an hour",
            C,
            c.profiles_evicted as f64,
        )?;
        single(&mut encoder, "probes_answered", "Bandwidth probes answered", C, c.probes_answered as f64)?;
        single(
            &mut encoder,
            "probes_refused",
            "Bandwidth probes refused: their robot, or all robots together, past the probe budget",
            C,
            c.probes_refused as f64,
        )?;
        single(
            &mut encoder,
            "outbound_refused",
            "Inferences given up because a result band did not fit their robot's send queue (a robot that stopped reading); the robot finishes each alone",
            C,
            c.outbound_refused as f64,
        )?;
        single(
            &mut encoder,
            "sessions_refused",
            "Hellos refused before a session was made: sessions open, robot ids or queued bytes past the edge's caps",
            C,
            c.sessions_refused as f64,
        )?;
        single(&mut encoder, "sessions", "Sessions open now", G, svc.open_sessions() as f64)?;
        single(&mut encoder, "batches", "Batches of several inferences of one plan run at once", C, c.batches as f64)?;
        single(&mut encoder, "batched", "Inferences that ran in those batches", C, c.batched as f64)?;
        let (building, oldest) = svc.tables_building();
        single(&mut encoder, "table_builds", "Schedule tables being loaded or planned now", G, building as f64)?;
        single(
            &mut encoder,
            "table_build_seconds",
            "Seconds the oldest table build in progress has taken so far (0: none)",
            G,
            oldest.as_secs_f64(),
        )?;
        Ok(())
    }
}

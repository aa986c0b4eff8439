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
//! - Read from NVML at each scrape, per GPU: utilisation, memory, power and energy.
//!
//! Every family's name, help, kind and label keys are written once, in [`families`];
//! [`exported_families`] lists them all, for the dashboard and alerting rules under `deploy/`.

pub mod families;

use std::sync::{Arc, OnceLock};

use lop_power::nvml::{GpuGaugeReading, GpuGauges};
use lop_runtime::edge::{EdgeService, Served};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use families::{Desc, Kind};

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
        use families as f;
        let mut registry = Registry::with_prefix(f::PREFIX);
        let inferences = Family::<Outcome, Counter>::default();
        registry.register(f::INFERENCES.name, f::INFERENCES.help, inferences.clone());
        let bytes_in = Family::<ModelLabel, Counter>::default();
        registry.register(f::RECEIVED_BYTES.name, f::RECEIVED_BYTES.help, bytes_in.clone());
        let bytes_out = Family::<ModelLabel, Counter>::default();
        registry.register(f::SENT_BYTES.name, f::SENT_BYTES.help, bytes_out.clone());
        let hist = |registry: &mut Registry, d: &Desc| {
            let h: Seconds = Family::new_with_constructor(seconds);
            registry.register(d.name, d.help, h.clone());
            h
        };
        let inference_s = hist(&mut registry, &f::INFERENCE_SECONDS);
        let compute_s = hist(&mut registry, &f::COMPUTE_SECONDS);
        let queue_s = hist(&mut registry, &f::QUEUE_SECONDS);
        let upload_s = hist(&mut registry, &f::UPLOAD_SECONDS);
        let download_s = hist(&mut registry, &f::DOWNLOAD_SECONDS);
        let batch: Family<ModelLabel, Histogram, fn() -> Histogram> = Family::new_with_constructor(batch_sizes);
        registry.register(f::BATCH_SIZE.name, f::BATCH_SIZE.help, batch.clone());
        let device_inferences = Family::<[(&'static str, String); 1], Counter>::default();
        registry.register(f::DEVICE_INFERENCES.name, f::DEVICE_INFERENCES.help, device_inferences.clone());
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

/// What reads a GPU's figure for one family.
type GpuRead = fn(&GpuGaugeReading) -> Option<f64>;

/// The GPU families and what each reads, in the order [`GpuCollector`] writes them: the one list
/// of them ([`exported_families`] takes its families from here).
fn gpu_readings() -> [(Desc, GpuRead); 5] {
    use families as f;
    [
        (f::GPU_UTILIZATION, |r| Some(r.utilisation)),
        (f::GPU_MEMORY_USED_BYTES, |r| Some(r.memory_used_bytes as f64)),
        (f::GPU_MEMORY_TOTAL_BYTES, |r| Some(r.memory_total_bytes as f64)),
        (f::GPU_POWER_WATTS, |r| r.power_w),
        (f::GPU_ENERGY_JOULES, |r| r.energy_j),
    ]
}

/// Every family `/metrics` may export: those fed per served inference (each once it has a
/// sample), the service's (once it is attached) and the GPUs' (where NVML answers). The
/// dashboard and alerting rules under `deploy/` may name only these: `edge_server/tests/deploy.rs`
/// checks that, and checks this list against a rendered exposition so that the two cannot drift.
pub fn exported_families() -> Vec<Desc> {
    families::SERVED.iter().chain(families::SERVICE).copied().chain(gpu_readings().into_iter().map(|(d, _)| d)).collect()
}

impl Collector for GpuCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(gpus) = self.gpus.get().filter(|g| !g.is_empty()) else { return Ok(()) };
        let readings: Vec<(String, GpuGaugeReading)> = gpus.iter().filter_map(|(n, g)| g.read().map(|r| (n.clone(), r))).collect();
        for (desc, read) in gpu_readings() {
            let samples: Vec<([(&str, String); 1], f64)> =
                readings.iter().filter_map(|(n, r)| read(r).map(|v| ([("device", n.clone())], v))).collect();
            family(&mut encoder, &desc, &samples)?;
        }
        Ok(())
    }
}

/// The service's figures, read at each scrape.
#[derive(Debug)]
struct ServiceCollector {
    service: Arc<OnceLock<EdgeService>>,
}

/// Writes family `d` (a counter or a gauge) with its `(labels, value)` samples.
fn family<L: EncodeLabelSet>(encoder: &mut DescriptorEncoder, d: &Desc, samples: &[(L, f64)]) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(d.name, d.help, None, d.kind.metric_type())?;
    for (labels, v) in samples {
        let mut m = metric.encode_family(labels)?;
        match d.kind {
            Kind::Counter => m.encode_counter::<NoLabelSet, _, u64>(&(*v as u64), None)?,
            _ => m.encode_gauge(v)?,
        }
    }
    Ok(())
}

/// Writes family `d` (a counter or a gauge, without labels) with its one sample.
fn single(encoder: &mut DescriptorEncoder, d: &Desc, v: f64) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(d.name, d.help, None, d.kind.metric_type())?;
    match d.kind {
        Kind::Counter => m.encode_counter::<NoLabelSet, _, u64>(&(v as u64), None),
        _ => m.encode_gauge(&v),
    }
}

impl Collector for ServiceCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use families as f;
        let Some(svc) = self.service.get() else { return Ok(()) };
        let models = svc.model_stats();
        let per_model = |get: &dyn Fn(&lop_runtime::edge::ModelStats) -> f64| -> Vec<(ModelLabel, f64)> {
            models.iter().map(|m| (ModelLabel { model: m.id.clone() }, get(m))).collect()
        };
        let e = &mut encoder;
        family(e, &f::OVERLOADED, &per_model(&|m| m.overloaded as f64))?;
        family(e, &f::FORWARDED, &per_model(&|m| m.forwarded as f64))?;
        family(e, &f::LATE, &per_model(&|m| m.late as f64))?;
        family(e, &f::CANCELLED, &per_model(&|m| m.cancelled as f64))?;
        family(e, &f::MODEL_WARM, &per_model(&|m| f64::from(u8::from(m.warm))))?;
        family(e, &f::REPLICAS, &per_model(&|m| m.replicas as f64))?;
        family(e, &f::REPLICAS_BUSY, &per_model(&|m| m.replicas_busy as f64))?;
        let devices = svc.device_loads();
        let per_device = |get: &dyn Fn(&lop_runtime::edge::DeviceLoad) -> f64| -> Vec<([(&str, String); 1], f64)> {
            devices.iter().map(|d| ([("device", d.name.clone())], get(d))).collect()
        };
        family(e, &f::DEVICE_REPLICAS, &per_device(&|d| d.replicas as f64))?;
        family(e, &f::DEVICE_QUEUED, &per_device(&|d| d.queued as f64))?;
        family(e, &f::DEVICE_SPEED, &per_device(&|d| d.speed))?;
        let rejects: Vec<([(&str, String); 1], f64)> =
            svc.rejects().into_iter().map(|(r, n)| ([("reason", format!("{r:?}").to_lowercase())], n as f64)).collect();
        family(e, &f::HELLOS_REFUSED, &rejects)?;
        let dropped = svc.counts().dropped;
        let drops: Vec<([(&str, String); 1], f64)> = serde_json::to_value(dropped)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| v.as_u64().map(|n| ([("reason", k)], n as f64)))
            .collect();
        family(e, &f::FRAMES_DROPPED, &drops)?;
        let c = svc.counts();
        single(e, &f::SESSIONS_WELCOMED, c.sessions as f64)?;
        single(e, &f::ROBOT_PROFILES_REFUSED, c.profiles_refused as f64)?;
        single(e, &f::ROBOT_PROFILES_EVICTED, c.profiles_evicted as f64)?;
        single(e, &f::PROBES_ANSWERED, c.probes_answered as f64)?;
        single(e, &f::PROBES_REFUSED, c.probes_refused as f64)?;
        single(e, &f::OUTBOUND_REFUSED, c.outbound_refused as f64)?;
        single(e, &f::SESSIONS_REFUSED, c.sessions_refused as f64)?;
        single(e, &f::SESSIONS, svc.open_sessions() as f64)?;
        single(e, &f::BATCHES, c.batches as f64)?;
        single(e, &f::BATCHED, c.batched as f64)?;
        let (building, oldest) = svc.tables_building();
        single(e, &f::TABLE_BUILDS, building as f64)?;
        single(e, &f::TABLE_BUILD_SECONDS, oldest.as_secs_f64())?;
        Ok(())
    }
}

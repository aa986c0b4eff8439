//! Every family `lop_edge` exports on `/metrics`, written once: its name, help, kind and label
//! keys. The registry and the collectors of [`super::Metrics`] register from these descriptions,
//! and [`super::exported_families`] lists them for what reads the exposition from outside: the
//! Grafana dashboard and the alerting rules under `deploy/`, which `edge_server/tests/deploy.rs`
//! checks name nothing else (and checks this list against a rendered exposition).

use prometheus_client::metrics::MetricType;

/// The prefix of every family's name (`lop_edge_inferences`).
pub const PREFIX: &str = "lop_edge";

/// What a family's samples are, which fixes the names PromQL reads them by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Samples `NAME_total`.
    Counter,
    /// Samples `NAME`.
    Gauge,
    /// Samples `NAME_bucket{le}`, `NAME_sum` and `NAME_count`.
    Histogram,
}

impl Kind {
    /// The names of the samples of the family named `name` in full (prefix included): what a
    /// PromQL expression may select.
    pub fn series(self, name: &str) -> Vec<String> {
        match self {
            Kind::Counter => vec![format!("{name}_total")],
            Kind::Gauge => vec![name.to_string()],
            Kind::Histogram => ["_bucket", "_sum", "_count"].iter().map(|s| format!("{name}{s}")).collect(),
        }
    }

    /// The kind as an exposition's `# TYPE` line names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }

    /// The encoder's type.
    pub(super) fn metric_type(self) -> MetricType {
        match self {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
            Kind::Histogram => MetricType::Histogram,
        }
    }
}

/// One family: its name after [`PREFIX`], its help, its kind and the keys of its labels (besides
/// a histogram's `le`, and the `job` and `instance` a scrape adds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desc {
    /// Its name after `lop_edge_`.
    pub name: &'static str,
    /// Its help text.
    pub help: &'static str,
    /// Its kind.
    pub kind: Kind,
    /// Its label keys.
    pub labels: &'static [&'static str],
}

impl Desc {
    /// Its name in the exposition: `lop_edge_` and its own.
    pub fn full_name(&self) -> String {
        format!("{PREFIX}_{}", self.name)
    }
}

/// A [`Desc`], shorter to write in the tables below.
const fn d(name: &'static str, kind: Kind, labels: &'static [&'static str], help: &'static str) -> Desc {
    Desc { name, help, kind, labels }
}

use self::Kind::{Counter as C, Gauge as G, Histogram as H};

const MODEL: &[&str] = &["model"];
const DEVICE: &[&str] = &["device"];
const REASON: &[&str] = &["reason"];
const NONE: &[&str] = &[];

// Fed per served inference (`Metrics::observe`); a family appears once it has a sample.
pub const INFERENCES: Desc = d("inferences", C, &["model", "outcome"], "Inferences the edge served, by model and how they ended");
pub const RECEIVED_BYTES: Desc = d("received_bytes", C, MODEL, "Band bytes received for served inferences");
pub const SENT_BYTES: Desc = d("sent_bytes", C, MODEL, "Band bytes sent for served inferences");
pub const INFERENCE_SECONDS: Desc = d("inference_seconds", H, MODEL, "A served inference as the edge saw it: its Start to its end");
pub const COMPUTE_SECONDS: Desc = d("compute_seconds", H, MODEL, "Seconds the server computed a served inference's chunks");
pub const QUEUE_SECONDS: Desc = d("queue_seconds", H, MODEL, "Seconds a served inference waited for its replica (and the edge's overhead)");
pub const UPLOAD_SECONDS: Desc = d("upload_seconds", H, MODEL, "Seconds from a served inference's Start to its last band's arrival");
pub const DOWNLOAD_SECONDS: Desc = d(
    "download_seconds",
    H,
    MODEL,
    "Seconds from a served inference's first result band out to its end (its download as the edge sees it)",
);
pub const BATCH_SIZE: Desc = d(
    "batch_size",
    H,
    MODEL,
    "Inferences computed together in the batch each served inference ran in (Triton's inference count over execution count)",
);
pub const DEVICE_INFERENCES: Desc = d("device_inferences", C, DEVICE, "Inferences the edge served, by the device that computed them");

/// The families fed per served inference, in registration order.
pub const SERVED: &[Desc] = &[
    INFERENCES,
    RECEIVED_BYTES,
    SENT_BYTES,
    INFERENCE_SECONDS,
    COMPUTE_SECONDS,
    QUEUE_SECONDS,
    UPLOAD_SECONDS,
    DOWNLOAD_SECONDS,
    BATCH_SIZE,
    DEVICE_INFERENCES,
];

// Read from the service at each scrape (`ServiceCollector`), present once it is attached.
pub const OVERLOADED: Desc = d("overloaded", C, MODEL, "Inferences refused at once: the queue would miss their deadline");
pub const FORWARDED: Desc = d("forwarded", C, MODEL, "Inferences forwarded to another edge of the fleet");
pub const LATE: Desc = d("late", C, MODEL, "Forwarded inferences that arrived with too little time left");
pub const CANCELLED: Desc = d("cancelled", C, MODEL, "Inferences the robot cancelled (it finished them itself)");
pub const MODEL_WARM: Desc = d("model_warm", G, MODEL, "Whether the model's replicas are loaded (1) or it is cold (0)");
pub const REPLICAS: Desc = d("replicas", G, MODEL, "Warm replicas of the model");
pub const REPLICAS_BUSY: Desc = d("replicas_busy", G, MODEL, "Replicas with an inference queued or running");
pub const DEVICE_REPLICAS: Desc = d("device_replicas", G, DEVICE, "Warm replicas on the device, every model's");
pub const DEVICE_QUEUED: Desc = d("device_queued", G, DEVICE, "Inferences queued or running on the device's replicas");
pub const DEVICE_SPEED: Desc = d("device_speed", G, DEVICE, "The device's speed relative to the first device (measured profiles)");
pub const HELLOS_REFUSED: Desc = d("hellos_refused", C, REASON, "Hellos refused, by reason");
pub const FRAMES_DROPPED: Desc = d("frames_dropped", C, REASON, "Frames from robots dropped, by reason");
pub const SESSIONS_WELCOMED: Desc = d("sessions_welcomed", C, NONE, "Sessions welcomed");
pub const ROBOT_PROFILES_REFUSED: Desc = d(
    "robot_profiles_refused",
    C,
    NONE,
    "Hellos with a new robot profile refused while a schedule table was being built (retried by the robot)",
);
pub const ROBOT_PROFILES_EVICTED: Desc =
    d("robot_profiles_evicted", C, NONE, "Robot profiles received in Hellos and forgotten, to make room or unused for an hour");
pub const PROBES_ANSWERED: Desc = d("probes_answered", C, NONE, "Bandwidth probes answered");
pub const PROBES_REFUSED: Desc =
    d("probes_refused", C, NONE, "Bandwidth probes refused: their robot, or all robots together, past the probe budget");
pub const OUTBOUND_REFUSED: Desc = d(
    "outbound_refused",
    C,
    NONE,
    "Inferences given up because a result band did not fit their robot's send queue (a robot that stopped reading); the robot finishes each alone",
);
pub const SESSIONS_REFUSED: Desc = d(
    "sessions_refused",
    C,
    NONE,
    "Hellos refused before a session was made: sessions open, robot ids or queued bytes past the edge's caps",
);
pub const SESSIONS: Desc = d("sessions", G, NONE, "Sessions open now");
pub const BATCHES: Desc = d("batches", C, NONE, "Batches of several inferences of one plan run at once");
pub const BATCHED: Desc = d("batched", C, NONE, "Inferences that ran in those batches");
pub const TABLE_BUILDS: Desc = d("table_builds", G, NONE, "Schedule tables being loaded or planned now");
pub const TABLE_BUILD_SECONDS: Desc =
    d("table_build_seconds", G, NONE, "Seconds the oldest table build in progress has taken so far (0: none)");

/// The service's families, in the order its collector writes them.
pub const SERVICE: &[Desc] = &[
    OVERLOADED,
    FORWARDED,
    LATE,
    CANCELLED,
    MODEL_WARM,
    REPLICAS,
    REPLICAS_BUSY,
    DEVICE_REPLICAS,
    DEVICE_QUEUED,
    DEVICE_SPEED,
    HELLOS_REFUSED,
    FRAMES_DROPPED,
    SESSIONS_WELCOMED,
    ROBOT_PROFILES_REFUSED,
    ROBOT_PROFILES_EVICTED,
    PROBES_ANSWERED,
    PROBES_REFUSED,
    OUTBOUND_REFUSED,
    SESSIONS_REFUSED,
    SESSIONS,
    BATCHES,
    BATCHED,
    TABLE_BUILDS,
    TABLE_BUILD_SECONDS,
];

// Read from NVML at each scrape (`GpuCollector`, whose table of readings lists them), on each
// CUDA device where NVML answers.
pub const GPU_UTILIZATION: Desc = d("gpu_utilization", G, DEVICE, "Share of the last sample period a kernel ran on the GPU (NVML)");
pub const GPU_MEMORY_USED_BYTES: Desc = d("gpu_memory_used_bytes", G, DEVICE, "GPU memory in use (NVML)");
pub const GPU_MEMORY_TOTAL_BYTES: Desc = d("gpu_memory_total_bytes", G, DEVICE, "GPU memory in all (NVML)");
pub const GPU_POWER_WATTS: Desc = d("gpu_power_watts", G, DEVICE, "GPU power now (NVML)");
pub const GPU_ENERGY_JOULES: Desc = d("gpu_energy_joules", C, DEVICE, "GPU energy counter since the driver loaded (NVML)");

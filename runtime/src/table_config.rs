//! The schedule-table section shared by every configuration file (`config/edge.yaml`,
//! `config/robot.yaml`): robot and edge must build the same [`TableSpec`] (its hash is checked
//! in Hello), so both read it through this one type.

use crate::error::{Error, Result};
use crate::exec::InputWire;
use lop::graph::Graph;
use lop::planner::{PlannerConfig, TableSpec, auto_bandwidth_scale, parse_buckets};
use lop::profile::Profile;
use lop::sim::RobotPower;
use lop::sim::{ChunkBounds, ChunkOrder, Objective};

/// Bucket values: `"FROM:TO:STEP"`, `"0,2,8"` or a YAML list, in MB/s (1 MB/s = 8 Mbit/s).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum BucketSetting {
    /// A range or comma-separated list.
    Text(String),
    /// Explicit values.
    List(Vec<f64>),
}

/// The bandwidth scale: a number, or `auto` (the paper's compute-to-transfer regime, see
/// [`auto_bandwidth_scale`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum ScaleSetting {
    /// A fixed factor.
    Factor(f64),
    /// `auto`.
    Word(String),
}

/// How the raw input crosses the link, for every method alike (`table.input_wire`,
/// `--input-wire`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputWireSetting {
    /// The graph input's own dtype: camera bytes for models that normalise inside the graph
    /// (the zoo, and ONNX models given a preprocess stage), float32 for other float models.
    #[default]
    Native,
    /// Camera bytes, and an error for a model whose input is not uint8 (it needs a preprocess
    /// stage first): the setting that makes sure frames are never priced as bytes but sent as
    /// floats.
    U8,
    /// Float32, 4 bytes per element (as in the paper), whatever the input's dtype.
    F32,
}

impl InputWireSetting {
    /// The names, for messages.
    pub const NAMES: &str = "native, u8 or f32";

    /// Checks the setting against the model's graph input.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for `u8` on a model whose input is not uint8, saying how to add a
    /// preprocess stage.
    pub fn check(self, graph: &Graph) -> Result<()> {
        if self != InputWireSetting::U8 {
            return Ok(());
        }
        for i in graph.inputs() {
            let info = &graph.nodes[i].info;
            if info.dtype != lop::DType::U8 {
                return Err(Error::InvalidConfig {
                    what: format!(
                        "input wire u8: '{}' takes {:?} input {:?}, so its frames would cross the link as floats. Give it a \
                         preprocess stage that takes camera bytes (--preprocess or model.preprocess: {}), or use the \
                         input wire native or f32",
                        graph.name,
                        info.dtype,
                        info.shape,
                        lop::preprocess::SPEC_HELP
                    ),
                });
            }
        }
        Ok(())
    }

    /// The simulator's pricing of graph inputs (`None`: their own dtype).
    pub fn bytes_per_element(self) -> Option<usize> {
        match self {
            InputWireSetting::Native | InputWireSetting::U8 => None,
            InputWireSetting::F32 => Some(4),
        }
    }

    /// How the runtime sends graph inputs.
    pub fn wire(self) -> InputWire {
        match self {
            InputWireSetting::Native | InputWireSetting::U8 => InputWire::Native,
            InputWireSetting::F32 => InputWire::F32,
        }
    }

    /// The setting's name.
    pub fn name(self) -> &'static str {
        match self {
            InputWireSetting::Native => "native",
            InputWireSetting::U8 => "u8",
            InputWireSetting::F32 => "f32",
        }
    }
}

impl std::str::FromStr for InputWireSetting {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [InputWireSetting::Native, InputWireSetting::U8, InputWireSetting::F32]
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| format!("unknown input wire '{s}' (expected {})", InputWireSetting::NAMES))
    }
}

/// The `table:` section of a configuration file. Every field has a default.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TableSettings {
    /// Buckets in MB/s (default `0:30:1`; 0 = no link).
    pub buckets: BucketSetting,
    /// Bucket b stands for b x F MB/s on the real link (default 1).
    pub bandwidth_scale: ScaleSetting,
    /// How the raw input travels (default native; `input_dtype` is read as its old name).
    #[serde(alias = "input_dtype")]
    pub input_wire: InputWireSetting,
    /// One-way link latency the planner assumes, ms (default 1).
    pub latency_ms: f64,
    /// Per-message overhead the planner assumes, ms (default 0).
    pub overhead_ms: f64,
    /// `latency` (default), `energy`, `weighted:LAMBDA`, `deadline:MS`.
    pub objective: String,
    /// `aligned` (default) or `even` chunk bounds.
    pub chunk_bounds: ChunkBounds,
    /// `wavefront` (default) or `op-major` chunk order.
    pub chunk_order: ChunkOrder,
    /// Planner seed (default 0).
    pub seed: u64,
    /// Search budget multiplier (default 1).
    pub budget: usize,
    /// Refuse to send tensors larger than the raw input (default false; see
    /// `lop::planner::PlannerConfig::prune_larger_than_input`).
    pub prune_larger_than_input: bool,
    /// The robot's power model (energy objectives; default 13.35 / 4.25 / 4.04 W).
    pub robot_power: RobotPower,
    /// How the frame's rows cross the link (default `raw`; `lossless`, `jpeg:Q`): both ends
    /// must say the same, and both profiles must have measured the codec (`lop profile
    /// --frames PATH --frame-codecs C`).
    pub frame_codec: lop::codec::FrameCodec,
}

impl Default for TableSettings {
    fn default() -> TableSettings {
        TableSettings {
            buckets: BucketSetting::Text("0:30:1".into()),
            bandwidth_scale: ScaleSetting::Factor(1.0),
            input_wire: InputWireSetting::Native,
            latency_ms: 1.0,
            overhead_ms: 0.0,
            objective: "latency".into(),
            chunk_bounds: ChunkBounds::Aligned,
            chunk_order: ChunkOrder::Wavefront,
            seed: 0,
            budget: 1,
            prune_larger_than_input: false,
            robot_power: RobotPower::default(),
            frame_codec: lop::codec::FrameCodec::Raw,
        }
    }
}

impl TableSettings {
    /// The bucket values.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad range or list.
    pub fn bucket_values(&self) -> Result<Vec<f64>> {
        let bad = |e: lop::lop_core::Error| Error::InvalidConfig { what: format!("table.buckets: {e}") };
        match &self.buckets {
            BucketSetting::Text(s) => parse_buckets(s).map_err(bad),
            BucketSetting::List(v) => parse_buckets(&v.iter().map(f64::to_string).collect::<Vec<_>>().join(",")).map_err(bad),
        }
    }

    /// How the raw input travels on the wire.
    pub fn input_wire(&self) -> InputWire {
        self.input_wire.wire()
    }

    /// The table specification for a model and its two profiles (`auto` needs them).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the bad field; simulator errors for `auto`.
    pub fn spec(&self, graph: &Graph, robot: &Profile, server: &Profile) -> Result<TableSpec> {
        self.input_wire.check(graph)?;
        let scale = match &self.bandwidth_scale {
            ScaleSetting::Word(w) if w == "auto" => auto_bandwidth_scale(graph, robot, server)?,
            _ => self.fixed_scale()?,
        };
        self.build(scale)?
            .with_frame_codec(self.frame_codec, robot, server)
            .map_err(|e| Error::InvalidConfig { what: format!("table.frame_codec: {e}") })
    }

    /// The table specification when the bandwidth scale is a number (the edge, which knows no
    /// robot profile at start-up, needs one).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the bad field, including `auto`.
    pub fn fixed_spec(&self) -> Result<TableSpec> {
        self.build(self.fixed_scale()?)
    }

    fn fixed_scale(&self) -> Result<f64> {
        match &self.bandwidth_scale {
            ScaleSetting::Factor(f) if f.is_finite() && *f > 0.0 => Ok(*f),
            other => Err(Error::InvalidConfig {
                what: format!("table.bandwidth_scale must be a positive number here (auto needs the robot profile), got {other:?}"),
            }),
        }
    }

    fn build(&self, scale: f64) -> Result<TableSpec> {
        let invalid = |what: String| Error::InvalidConfig { what };
        let objective = self.objective.parse::<Objective>().map_err(|e| invalid(format!("table.objective: {e}")))?;
        for (name, v) in [("latency_ms", self.latency_ms), ("overhead_ms", self.overhead_ms)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(invalid(format!("table.{name} must be >= 0, got {v}")));
            }
        }
        if self.budget == 0 {
            return Err(invalid("table.budget must be at least 1".into()));
        }
        let p = self.robot_power;
        if [p.computing_w, p.transmitting_w, p.idle_w].iter().any(|w| !(w.is_finite() && *w >= 0.0)) {
            return Err(invalid(format!("table.robot_power: watts must be finite and >= 0, got {p:?}")));
        }
        let planner = PlannerConfig { seed: self.seed, prune_larger_than_input: self.prune_larger_than_input, ..PlannerConfig::default() }
            .scaled(self.budget);
        let spec = TableSpec {
            buckets: self.bucket_values()?,
            bandwidth_scale: scale,
            latency_s: self.latency_ms / 1e3,
            overhead_s: self.overhead_ms / 1e3,
            input_bytes_per_element: self.input_wire.bytes_per_element(),
            objective,
            power: p,
            planner,
            chunk_order: self.chunk_order,
            chunk_bounds: self.chunk_bounds,
            post_side: None,
            // The codec alone: its prices come from the profiles ([`TableSettings::spec`], or the
            // edge once it knows the robot's profile).
            frame: lop::sim::FrameWire { codec: self.frame_codec, ..lop::sim::FrameWire::raw() },
        };
        spec.check().map_err(|e| invalid(format!("table: {e}")))?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> std::result::Result<TableSettings, String> {
        serde_json::from_str::<serde_json::Value>(yaml)
            .map_err(|e| e.to_string())
            .and_then(|v| serde_json::from_value(v).map_err(|e| e.to_string()))
    }

    #[test]
    fn defaults_and_overrides() -> std::result::Result<(), String> {
        let d = parse("{}")?;
        assert_eq!(d, TableSettings::default());
        assert_eq!(d.bucket_values().map_err(|e| e.to_string())?.len(), 31);
        let s = parse(r#"{"buckets": [0, 2, 8, 30], "bandwidth_scale": "auto", "input_dtype": "f32", "chunk_bounds": "even"}"#)?;
        assert_eq!(s.bucket_values().map_err(|e| e.to_string())?, vec![0.0, 2.0, 8.0, 30.0]);
        assert_eq!(s.bandwidth_scale, ScaleSetting::Word("auto".into()));
        assert_eq!(s.input_wire(), InputWire::F32);
        assert_eq!(s.chunk_bounds, ChunkBounds::Even);
        assert_eq!(parse(r#"{"input_wire": "u8"}"#)?.input_wire, InputWireSetting::U8, "the new name");
        assert_eq!(d.input_wire, InputWireSetting::Native);
        Ok(())
    }

    /// `u8` promises camera bytes: on a float-input model it is an error that says how to add a
    /// preprocess stage, and once the stage is there it holds; `native` prices each model by its
    /// own input dtype.
    #[test]
    fn u8_wire_needs_a_byte_input() -> std::result::Result<(), String> {
        let mut b = lop::GraphBuilder::new("float_net");
        let x = b.input("images", vec![1, 3, 8, 8], lop::DType::F32);
        let y = b.add("relu", lop::Op::Unary(lop::ops::UnaryOp::Relu), &[x]).map_err(|e| e.to_string())?;
        b.output(y);
        let float = b.build().map_err(|e| e.to_string())?;
        let e = InputWireSetting::U8.check(&float).expect_err("float input").to_string();
        assert!(e.contains("float_net") && e.contains("F32") && e.contains("preprocess") && e.contains("'unit'"), "{e}");
        InputWireSetting::Native.check(&float).map_err(|e| e.to_string())?;
        InputWireSetting::F32.check(&float).map_err(|e| e.to_string())?;
        let bytes = lop::preprocess::Preprocess::parse("unit").and_then(|p| p.apply(float)).map_err(|e| e.to_string())?;
        InputWireSetting::U8.check(&bytes).map_err(|e| e.to_string())?;
        assert_eq!("u8".parse::<InputWireSetting>(), Ok(InputWireSetting::U8));
        assert!("f16".parse::<InputWireSetting>().is_err());
        Ok(())
    }

    /// `frame_codec` names the codec; the spec takes its prices from both profiles (an error
    /// naming the field when the robot's has not measured it; a server's derived from the
    /// robot's), and its hash depends on the codec only,
    /// so an edge that knows the codec agrees with a robot whose spec carries the prices.
    #[test]
    fn frame_codec_is_priced_by_the_profiles() -> std::result::Result<(), String> {
        use lop::codec::{CodecCost, FrameCodec};
        let s = parse(r#"{"frame_codec": "jpeg:90"}"#)?;
        assert_eq!(s.frame_codec, FrameCodec::Jpeg { quality: 90 });
        assert!(parse(r#"{"frame_codec": "jpeg:0"}"#).is_err());
        assert!(parse(r#"{"frame_codec": "gif"}"#).is_err());
        let graph = lop::zoo::build("resnet18").map_err(|e| e.to_string())?;
        let (mut robot, mut server) = lop::profile::SYNTHETIC.pair(&graph).map_err(|e| e.to_string())?;
        let err = s.spec(&graph, &robot, &server).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("table.frame_codec") && err.contains("has not measured frame codec jpeg:90"), "{err}");
        let cost = CodecCost { codec: FrameCodec::Jpeg { quality: 90 }, ratio: 0.1, encode_s_per_row: 1e-5, decode_s_per_row: 2e-5 };
        robot.set_codec_cost(cost);
        // A server that has not measured it decodes at the robot's speed scaled by the profiles.
        let derived = s.spec(&graph, &robot, &server).map_err(|e| e.to_string())?;
        let speed = server.whole_model_s() / robot.whole_model_s();
        assert!(speed < 1.0, "the synthetic server is the faster side");
        assert!((derived.frame.server_decode_s_per_row - 2e-5 * speed).abs() < 1e-12, "{:?}", derived.frame);
        server.set_codec_cost(CodecCost { decode_s_per_row: 5e-6, ..cost });
        let priced = s.spec(&graph, &robot, &server).map_err(|e| e.to_string())?;
        assert_eq!((priced.frame.ratio, priced.frame.server_decode_s_per_row), (0.1, 5e-6));
        let unpriced = s.fixed_spec().map_err(|e| e.to_string())?;
        assert_eq!(unpriced.frame.codec, FrameCodec::Jpeg { quality: 90 });
        assert_eq!(unpriced.hash(), priced.hash(), "the hash names the codec, not its prices");
        assert_ne!(unpriced.hash(), TableSettings::default().fixed_spec().map_err(|e| e.to_string())?.hash(), "the codec is in the hash");
        Ok(())
    }

    #[test]
    fn bad_fields_are_refused() -> std::result::Result<(), String> {
        assert!(parse(r#"{"bucket": "0:3:1"}"#).is_err(), "unknown field accepted");
        assert!(parse(r#"{"input_dtype": "f16"}"#).is_err());
        let graph = lop::zoo::build("resnet18").map_err(|e| e.to_string())?;
        let fit = |scale: f64| move |_| lop::profile::Fit::new(1e-5, scale);
        let robot = lop::profile::from_fits(&graph, lop::plan::Side::Robot, fit(1e-5)).map_err(|e| e.to_string())?;
        let server = lop::profile::from_fits(&graph, lop::plan::Side::Server, fit(1e-6)).map_err(|e| e.to_string())?;
        for bad in [
            r#"{"objective": "fast"}"#,
            r#"{"bandwidth_scale": "big"}"#,
            r#"{"bandwidth_scale": -2}"#,
            r#"{"buckets": "3:1:1"}"#,
            r#"{"budget": 0}"#,
            r#"{"overhead_ms": -1}"#,
            r#"{"robot_power": {"computing_w": -1, "transmitting_w": 1, "idle_w": 1}}"#,
        ] {
            let s = parse(bad)?;
            let err = s.spec(&graph, &robot, &server).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains("table."), "{bad}: {err}");
        }
        let auto = parse(r#"{"bandwidth_scale": "auto"}"#)?;
        let ok = auto.spec(&graph, &robot, &server).map_err(|e| e.to_string())?;
        assert!(ok.bandwidth_scale > 0.0 && ok.bandwidth_scale.is_finite());
        assert!(auto.fixed_spec().is_err(), "auto accepted without profiles");
        let fixed = parse(r#"{"bandwidth_scale": 0.5, "overhead_ms": 2}"#)?.fixed_spec().map_err(|e| e.to_string())?;
        assert_eq!((fixed.bandwidth_scale, fixed.overhead_s), (0.5, 0.002));
        Ok(())
    }
}

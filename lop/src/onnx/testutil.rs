//! Test helpers: small ONNX models written with the generated protobuf types.

use super::proto::tensor_proto::DataType;
use super::proto::tensor_shape_proto::{Dimension, dimension};
use super::proto::type_proto;
use super::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
    attribute_proto::AttributeType,
};
use super::{ImportOptions, import_bytes};
use crate::error::Result;
use crate::graph::Graph;
use prost::Message;
use tch::{Kind, Tensor};

/// Builds a model node by node.
pub(crate) struct ModelBuilder {
    opset: i64,
    graph: GraphProto,
}

impl ModelBuilder {
    pub fn new(opset: i64) -> Self {
        ModelBuilder { opset, graph: GraphProto { name: Some("test".into()), ..Default::default() } }
    }

    /// A float input; negative dims are dynamic (`dim_param`).
    pub fn input(&mut self, name: &str, dims: &[i64]) {
        self.input_typed(name, DataType::Float, dims);
    }

    pub fn input_typed(&mut self, name: &str, dt: DataType, dims: &[i64]) {
        let dim = dims
            .iter()
            .map(|&d| Dimension {
                value: Some(if d < 0 { dimension::Value::DimParam("N".into()) } else { dimension::Value::DimValue(d) }),
                ..Default::default()
            })
            .collect();
        let tt = type_proto::Tensor { elem_type: Some(dt as i32), shape: Some(TensorShapeProto { dim }) };
        self.graph.input.push(ValueInfoProto {
            name: Some(name.into()),
            r#type: Some(TypeProto { value: Some(type_proto::Value::TensorType(tt)), ..Default::default() }),
            ..Default::default()
        });
    }

    pub fn init(&mut self, t: TensorProto) {
        self.graph.initializer.push(t);
    }

    pub fn init_f32(&mut self, name: &str, dims: &[i64], data: &[f32]) {
        self.init(tf32(name, dims, data));
    }

    pub fn init_i64(&mut self, name: &str, dims: &[i64], data: &[i64]) {
        self.init(ti64(name, dims, data));
    }

    pub fn node(&mut self, op: &str, ins: &[&str], outs: &[&str], attrs: Vec<AttributeProto>) {
        let name = format!("{}_{}", op.to_lowercase(), self.graph.node.len());
        self.named(&name, op, ins, outs, attrs);
    }

    pub fn named(&mut self, name: &str, op: &str, ins: &[&str], outs: &[&str], attrs: Vec<AttributeProto>) {
        self.graph.node.push(NodeProto {
            name: Some(name.into()),
            op_type: Some(op.into()),
            input: ins.iter().map(|s| s.to_string()).collect(),
            output: outs.iter().map(|s| s.to_string()).collect(),
            attribute: attrs,
            ..Default::default()
        });
    }

    pub fn output(&mut self, name: &str) {
        self.graph.output.push(ValueInfoProto { name: Some(name.into()), ..Default::default() });
    }

    pub fn bytes(&self) -> Vec<u8> {
        let m = ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(self.opset) }],
            graph: Some(self.graph.clone()),
            ..Default::default()
        };
        m.encode_to_vec()
    }

    pub fn import(&self) -> Result<Graph> {
        import_bytes(&self.bytes(), "test", None, &ImportOptions::default())
    }
}

pub(crate) fn tf32(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(DataType::Float as i32),
        raw_data: Some(data.iter().flat_map(|x| x.to_le_bytes()).collect()),
        ..Default::default()
    }
}

pub(crate) fn ti64(name: &str, dims: &[i64], data: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(DataType::Int64 as i32),
        int64_data: data.to_vec(),
        ..Default::default()
    }
}

fn attr(name: &str, ty: AttributeType) -> AttributeProto {
    AttributeProto { name: Some(name.into()), r#type: Some(ty as i32), ..Default::default() }
}

pub(crate) fn ai(name: &str, v: i64) -> AttributeProto {
    AttributeProto { i: Some(v), ..attr(name, AttributeType::Int) }
}

pub(crate) fn ais(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto { ints: v.to_vec(), ..attr(name, AttributeType::Ints) }
}

pub(crate) fn af(name: &str, v: f32) -> AttributeProto {
    AttributeProto { f: Some(v), ..attr(name, AttributeType::Float) }
}

pub(crate) fn afs(name: &str, v: &[f32]) -> AttributeProto {
    AttributeProto { floats: v.to_vec(), ..attr(name, AttributeType::Floats) }
}

pub(crate) fn astr(name: &str, v: &str) -> AttributeProto {
    AttributeProto { s: Some(v.as_bytes().to_vec()), ..attr(name, AttributeType::String) }
}

pub(crate) fn atensor(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto { t: Some(t), ..attr(name, AttributeType::Tensor) }
}

/// Deterministic pseudo-random values.
pub(crate) fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut r = crate::Rng::new(seed);
    (0..n).map(|_| r.normal() as f32).collect()
}

/// A deterministic pseudo-random float tensor.
pub(crate) fn randn(shape: &[i64], seed: u64) -> Tensor {
    let n = shape.iter().product::<i64>() as usize;
    Tensor::from_slice(&values(n, seed)).view(shape)
}

/// Largest absolute difference (infinite when the shapes differ).
pub(crate) fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    if a.size() != b.size() {
        return f64::INFINITY;
    }
    (a.to_kind(Kind::Double) - b.to_kind(Kind::Double)).abs().max().double_value(&[])
}

/// Runs a graph whole on one input and returns its outputs.
pub(crate) fn run(g: &Graph, x: &Tensor) -> Result<Vec<Tensor>> {
    Ok(crate::exec::run_whole(g, &[x.shallow_clone()])?.outputs)
}

/// Number of nodes of an IR kind.
pub(crate) fn count(g: &Graph, kind: &str) -> usize {
    g.nodes.iter().filter(|n| n.op.kind_name() == kind).count()
}

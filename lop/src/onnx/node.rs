//! The context of one ONNX node while it is converted: its name, op type and opset for error
//! messages, and typed access to its attributes and inputs.

use super::proto::{AttributeProto, NodeProto, TensorProto, attribute_proto::AttributeType};
use crate::error::Error;

/// Largest size, stride, pad or extent the importer accepts (guards arithmetic on file data).
pub(super) const MAX_EXTENT: usize = 1 << 31;

/// One ONNX node being converted.
#[derive(Debug)]
pub(super) struct Ctx<'a> {
    /// The node.
    pub node: &'a NodeProto,
    /// The (unique) name its IR nodes are named after.
    pub name: String,
    /// ONNX op type.
    pub op: &'a str,
    /// Opset of the default domain.
    pub opset: i64,
}

impl<'a> Ctx<'a> {
    /// An [`Error::Unsupported`] for this node.
    pub fn unsupported(&self, reason: impl Into<String>) -> Error {
        Error::Unsupported { node: self.name.clone(), op_type: self.op.to_string(), opset: self.opset, reason: reason.into() }
    }

    /// An [`Error::Malformed`] naming this node, its op type and opset.
    pub fn malformed(&self, msg: impl std::fmt::Display) -> Error {
        Error::Malformed(format!("node '{}' ({}, opset {}): {msg}", self.name, self.op, self.opset))
    }

    /// Maps a libtorch failure while evaluating this node to a shape error.
    pub fn torch(&self) -> impl Fn(tch::TchError) -> Error + '_ {
        move |e| Error::Shape { node: self.name.clone(), op: format!("{} (opset {})", self.op, self.opset), msg: e.to_string() }
    }

    /// Adds this node's op type and opset to a shape error raised by the IR.
    pub fn annotate(&self, e: Error) -> Error {
        match e {
            Error::Shape { node, op, msg } if !op.contains("opset") => {
                Error::Shape { node, op: format!("{op} from ONNX {} (opset {})", self.op, self.opset), msg }
            }
            e => e,
        }
    }

    /// Name of input `k`, or `None` when it is absent or left empty (an omitted optional input).
    pub fn input(&self, k: usize) -> Option<&'a str> {
        self.node.input.get(k).map(String::as_str).filter(|s| !s.is_empty())
    }

    /// Number of declared inputs (including empty optional ones).
    pub fn n_inputs(&self) -> usize {
        self.node.input.len()
    }

    /// Name of output `k` (empty when omitted).
    pub fn output(&self, k: usize) -> &'a str {
        self.node.output.get(k).map_or("", String::as_str)
    }

    /// Number of declared outputs.
    pub fn n_outputs(&self) -> usize {
        self.node.output.len()
    }

    /// The attribute named `name`.
    pub fn attr(&self, name: &str) -> Option<&'a AttributeProto> {
        self.node.attribute.iter().find(|a| a.name.as_deref() == Some(name))
    }

    /// Whether the attribute is present.
    pub fn has(&self, name: &str) -> bool {
        self.attr(name).is_some()
    }

    /// An integer attribute.
    pub fn attr_i(&self, name: &str, default: i64) -> Result<i64, Error> {
        match self.attr(name) {
            None => Ok(default),
            Some(a) => a.i.ok_or_else(|| self.malformed(format!("attribute '{name}' must be an int"))),
        }
    }

    /// A float attribute.
    pub fn attr_f(&self, name: &str, default: f32) -> Result<f32, Error> {
        match self.attr(name) {
            None => Ok(default),
            Some(a) => a.f.ok_or_else(|| self.malformed(format!("attribute '{name}' must be a float"))),
        }
    }

    /// A string attribute.
    pub fn attr_s(&self, name: &str, default: &str) -> Result<String, Error> {
        match self.attr(name) {
            None => Ok(default.to_string()),
            Some(a) => match &a.s {
                Some(s) => String::from_utf8(s.clone()).map_err(|_| self.malformed(format!("attribute '{name}' is not UTF-8"))),
                None => Err(self.malformed(format!("attribute '{name}' must be a string"))),
            },
        }
    }

    /// An integer-list attribute (`None` when absent).
    pub fn attr_ints(&self, name: &str) -> Result<Option<Vec<i64>>, Error> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) if !a.ints.is_empty() || a.r#type() == AttributeType::Ints => Ok(Some(a.ints.clone())),
            Some(a) if a.floats.is_empty() && a.i.is_none() && a.f.is_none() && a.s.is_none() && a.t.is_none() => Ok(Some(vec![])),
            Some(_) => Err(self.malformed(format!("attribute '{name}' must be a list of ints"))),
        }
    }

    /// A float-list attribute (`None` when absent).
    pub fn attr_floats(&self, name: &str) -> Result<Option<Vec<f32>>, Error> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) if !a.floats.is_empty() || a.r#type() == AttributeType::Floats => Ok(Some(a.floats.clone())),
            Some(_) => Err(self.malformed(format!("attribute '{name}' must be a list of floats"))),
        }
    }

    /// A tensor attribute (`None` when absent).
    pub fn attr_t(&self, name: &str) -> Result<Option<&'a TensorProto>, Error> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) => a.t.as_ref().map(Some).ok_or_else(|| self.malformed(format!("attribute '{name}' must be a tensor"))),
        }
    }

    /// An integer-list attribute converted to non-negative sizes, or `default` when absent.
    pub fn attr_sizes(&self, name: &str, default: Vec<usize>) -> Result<Vec<usize>, Error> {
        match self.attr_ints(name)? {
            None => Ok(default),
            Some(v) => v
                .iter()
                .map(|&x| match usize::try_from(x) {
                    Ok(u) if u <= MAX_EXTENT => Ok(u),
                    _ => Err(self.malformed(format!("attribute '{name}' has an entry out of range: {v:?}"))),
                })
                .collect(),
        }
    }
}

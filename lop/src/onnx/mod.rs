//! ONNX import (opsets 7 to 22, tested for 11 to 18).
//!
//! The model is decoded with prost types generated at build time from `lop/proto/onnx.proto`.
//! Initializers, `Constant` nodes and every node whose inputs are all known at import time are
//! evaluated immediately (shape arithmetic such as `Shape -> Gather -> Unsqueeze -> Concat ->
//! Reshape` folds to a static `Reshape`), so the IR holds only the computing ops with static
//! shapes. Batch norms are folded into the convolution before them where that convolution has
//! no other consumer; zero `Pad`s are folded into the convolution or pooling after them.
//!
//! Every unsupported op or attribute value returns [`Error::Unsupported`] naming the node, its
//! op type and the opset; undecodable or inconsistent files return [`Error::Malformed`].

mod args;
mod conv;
mod dispatch;
mod fold;
mod importer;
mod layout;
mod math;
mod node;
mod pool;
pub mod proto;
mod resize;
mod select;
mod slice;
mod sources;
mod tensor;
#[cfg(test)]
pub(crate) mod testutil;

use crate::error::{Error, Result};
use crate::graph::{DType, Graph};
use importer::{Importer, Val};
use prost::Message;
use proto::tensor_shape_proto::dimension;
use proto::{ModelProto, ValueInfoProto, type_proto};
use std::path::Path;
use tch::Kind;

/// Options for importing an ONNX model.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Shape used for graph inputs with dynamic dimensions.
    pub input_shape: Option<Vec<usize>>,
}

/// Imports an ONNX file (external data files are looked up next to it).
///
/// # Errors
/// Malformed or unsupported models, naming the node, op type and opset; [`Error::Io`] when the
/// file or an external data file cannot be read.
pub fn import_file(path: &Path, opts: &ImportOptions) -> Result<Graph> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    let name = path.file_stem().map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned());
    import_bytes(&bytes, &name, path.parent(), opts)
}

/// Imports an ONNX model from memory. `name` becomes the graph's name; external data files are
/// looked up in `base_dir` (a model with external data and no `base_dir` is malformed).
///
/// # Errors
/// [`Error::Malformed`] for bytes that are not an ONNX model or an inconsistent model,
/// [`Error::Unsupported`] for ops or attribute values the engine does not implement,
/// [`Error::Input`] for dynamic input dimensions without [`ImportOptions::input_shape`].
pub fn import_bytes(bytes: &[u8], name: &str, base_dir: Option<&Path>, opts: &ImportOptions) -> Result<Graph> {
    let model = ModelProto::decode(bytes).map_err(|e| Error::Malformed(format!("'{name}' is not an ONNX model: {e}")))?;
    let graph = model.graph.as_ref().ok_or_else(|| Error::Malformed(format!("'{name}' has no graph")))?;
    let opset = model
        .opset_import
        .iter()
        .filter(|o| matches!(o.domain.as_deref(), None | Some("") | Some("ai.onnx")))
        .filter_map(|o| o.version)
        .max()
        .ok_or_else(|| Error::Malformed(format!("'{name}' imports no opset of the default ONNX domain")))?;
    if !(7..=22).contains(&opset) {
        return Err(Error::Unsupported {
            node: name.to_string(),
            op_type: "ModelProto".into(),
            opset,
            reason: "only opsets 7 to 22 are supported".into(),
        });
    }
    // The weights' memory, summed from the declared sizes before any is decoded.
    let mut declared = 0u64;
    for t in &graph.initializer {
        declared = declared.saturating_add(tensor::declared_bytes(t)?);
        if declared > tensor::MAX_WEIGHT_BYTES {
            return Err(Error::Malformed(format!(
                "'{name}': initializers up to '{}' declare {declared} bytes, more than the budget of {} bytes",
                t.name.as_deref().unwrap_or(""),
                tensor::MAX_WEIGHT_BYTES
            )));
        }
    }
    let mut imp = Importer::new(name, graph, opset, base_dir);
    let mut initialized = std::collections::HashSet::new();
    for t in &graph.initializer {
        let tname = t.name.as_deref().unwrap_or("");
        imp.bind(tname, Val::Const(tensor::to_tensor(t, base_dir)?))?;
        initialized.insert(tname);
    }
    for vi in &graph.input {
        let iname = vi.name.as_deref().unwrap_or("");
        if !initialized.contains(iname) {
            let (shape, dtype) = input_info(vi, opts, opset)?;
            imp.add_input(iname, shape, dtype)?;
        }
    }
    dispatch::run(&mut imp)?;
    imp.finish_outputs()?;
    imp.b.build()
}

/// A graph input as the file declares it: dimensions the exporter left dynamic are `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredInput {
    /// The input's name.
    pub name: String,
    /// Its dimensions (`None` where dynamic); `None` when the file gives no rank at all.
    pub dims: Option<Vec<Option<usize>>>,
    /// Names of the dimensions (`height` where the exporter named a dynamic one, `?` otherwise).
    pub dim_names: Vec<String>,
    /// Its element type.
    pub dtype: DType,
}

impl DeclaredInput {
    /// Whether some dimension (or the rank) is not fixed by the file.
    pub fn is_dynamic(&self) -> bool {
        self.dims.as_ref().is_none_or(|d| d.iter().any(Option::is_none))
    }
}

/// The graph inputs an ONNX file declares (initializers excluded), without importing the graph:
/// what a caller reads to fill dynamic dimensions before [`import_file`].
///
/// # Errors
/// As [`import_file`] for unreadable, malformed or unsupported files.
pub fn declared_inputs_file(path: &Path) -> Result<Vec<DeclaredInput>> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    let name = path.file_stem().map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned());
    let model = ModelProto::decode(&bytes[..]).map_err(|e| Error::Malformed(format!("'{name}' is not an ONNX model: {e}")))?;
    let graph = model.graph.as_ref().ok_or_else(|| Error::Malformed(format!("'{name}' has no graph")))?;
    let initialized: std::collections::HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_deref().unwrap_or("")).collect();
    graph.input.iter().filter(|vi| !initialized.contains(vi.name.as_deref().unwrap_or(""))).map(|vi| declared(vi, 0)).collect()
}

/// Reads a graph input's declaration.
fn declared(vi: &ValueInfoProto, opset: i64) -> Result<DeclaredInput> {
    let name = vi.name.as_deref().unwrap_or("");
    let unsupported = |reason: String| Error::Unsupported { node: name.to_string(), op_type: "graph input".into(), opset, reason };
    let tt = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => t,
        _ => return Err(unsupported("only tensor inputs are supported".into())),
    };
    let elem = i64::from(tt.elem_type.unwrap_or(0));
    let dtype = match tensor::kind_of(elem) {
        Some(Kind::Float) if elem == 1 => DType::F32,
        Some(Kind::Uint8) => DType::U8,
        Some(Kind::Int64) if elem == 7 => DType::I64,
        _ => return Err(unsupported(format!("element type {elem} (float32, uint8 and int64 inputs are supported)"))),
    };
    let dims: Option<Vec<Option<usize>>> = tt.shape.as_ref().map(|s| {
        s.dim
            .iter()
            .map(|d| match d.value {
                Some(dimension::Value::DimValue(v)) if v > 0 => usize::try_from(v).ok(),
                _ => None,
            })
            .collect()
    });
    // Dynamic dimensions are shown by their names where the exporter gave them (`height`).
    let dim_names: Vec<String> = tt.shape.as_ref().map_or_else(Vec::new, |s| {
        s.dim
            .iter()
            .map(|d| match &d.value {
                Some(dimension::Value::DimParam(p)) if !p.is_empty() => p.clone(),
                _ => "?".to_string(),
            })
            .collect()
    });
    Ok(DeclaredInput { name: name.to_string(), dims, dim_names, dtype })
}

/// Static shape and dtype of a graph input; dynamic dimensions come from `opts`.
/// Most elements a graph input may have (2^31: a 4K RGB frame has 25 million): larger inputs,
/// and the activations they would imply, are refused at load time.
const MAX_INPUT_ELEMENTS: usize = 1 << 31;

fn input_info(vi: &ValueInfoProto, opts: &ImportOptions, opset: i64) -> Result<(Vec<usize>, DType)> {
    let DeclaredInput { name, dims, dim_names: names, dtype } = declared(vi, opset)?;
    let show = |d: &[Option<usize>]| {
        d.iter()
            .enumerate()
            .map(|(i, x)| x.map_or_else(|| names.get(i).cloned().unwrap_or_else(|| "?".into()), |v| v.to_string()))
            .collect::<Vec<_>>()
            .join(",")
    };
    let checked = |shape: Vec<usize>| -> Result<(Vec<usize>, DType)> {
        match shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) {
            Some(n) if n <= MAX_INPUT_ELEMENTS => Ok((shape, dtype)),
            _ => Err(Error::Input(format!("input '{name}' of shape {shape:?} is too large"))),
        }
    };
    match (dims, &opts.input_shape) {
        (Some(d), _) if d.iter().all(Option::is_some) => checked(d.into_iter().flatten().collect()),
        (Some(d), Some(given)) => {
            let fits = d.len() == given.len() && d.iter().zip(given).all(|(m, g)| m.is_none_or(|m| m == *g));
            if fits {
                checked(given.clone())
            } else {
                Err(Error::Input(format!("input shape {given:?} does not fit input '{name}' of shape [{}]", show(&d))))
            }
        }
        (None, Some(given)) => checked(given.clone()),
        (d, None) => Err(Error::Input(format!(
            "input '{name}' has dynamic shape [{}]; give a static input shape (--input-shape on the command line, model.input_shape in the robot and edge configurations)",
            d.as_deref().map_or_else(|| "unknown".to_string(), show)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;

    #[test]
    fn garbage_bytes_are_malformed() {
        for bytes in [&b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"[..], b"\x0a\x05ab", b"not an onnx model at all", b""] {
            let r = import_bytes(bytes, "junk", None, &ImportOptions::default());
            assert!(matches!(r, Err(Error::Malformed(_))), "{bytes:?}: {r:?}");
        }
        // A valid model cut short is malformed too.
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 2, 4, 4]);
        m.node("Relu", &["x"], &["y"], vec![]);
        m.output("y");
        let bytes = m.bytes();
        let r = import_bytes(&bytes[..bytes.len() - 3], "cut", None, &ImportOptions::default());
        assert!(matches!(r, Err(Error::Malformed(_))), "{r:?}");
    }

    #[test]
    fn unknown_op_names_node_op_and_opset() {
        let mut m = ModelBuilder::new(17);
        m.input("x", &[1, 2, 4, 4]);
        m.named("my_weird_node", "FrobnicateXYZ", &["x"], &["y"], vec![]);
        m.output("y");
        let err = m.import().err().map(|e| (matches!(e, Error::UnsupportedOps { .. }), e.to_string()));
        let Some((true, msg)) = err else { panic!("expected UnsupportedOps, got {err:?}") };
        assert!(msg.contains("my_weird_node") && msg.contains("FrobnicateXYZ") && msg.contains("17"), "{msg}");
    }

    #[test]
    fn dynamic_input_dims_need_a_shape() -> Result<()> {
        let mut m = ModelBuilder::new(13);
        m.input("x", &[-1, 3, 8, 8]);
        m.node("Relu", &["x"], &["y"], vec![]);
        m.output("y");
        let r = m.import();
        assert!(matches!(&r, Err(Error::Input(msg)) if msg.contains("'x'")), "{r:?}");
        let opts = ImportOptions { input_shape: Some(vec![2, 3, 8, 8]) };
        let g = import_bytes(&m.bytes(), "dyn", None, &opts)?;
        assert_eq!(g.nodes[g.inputs()[0]].info.shape, vec![2, 3, 8, 8]);
        let wrong = ImportOptions { input_shape: Some(vec![2, 4, 8, 8]) };
        assert!(matches!(import_bytes(&m.bytes(), "dyn", None, &wrong), Err(Error::Input(_))));
        Ok(())
    }

    /// What a caller reads before the shape is fixed: the dynamic dimensions and the fixed ones.
    #[test]
    fn declared_inputs_show_dynamic_dims() -> Result<()> {
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 3, -1, -1]);
        m.node("Relu", &["x"], &["y"], vec![]);
        m.output("y");
        let path = std::env::temp_dir().join(format!("lop-declared-{}.onnx", std::process::id()));
        std::fs::write(&path, m.bytes()).map_err(|source| Error::Io { path: path.clone(), source })?;
        let declared = declared_inputs_file(&path);
        let _ = std::fs::remove_file(&path);
        let [d] = &declared?[..] else { panic!("one input") };
        assert_eq!((d.name.as_str(), d.dims.clone(), d.dtype), ("x", Some(vec![Some(1), Some(3), None, None]), DType::F32));
        assert!(d.is_dynamic());
        Ok(())
    }

    #[test]
    fn identity_dropout_and_dead_nodes_vanish() -> Result<()> {
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 2, 4, 4]);
        m.node("Identity", &["x"], &["a"], vec![]);
        m.node("Dropout", &["a"], &["b"], vec![]);
        m.node("Relu", &["b"], &["y"], vec![]);
        m.node("FrobnicateXYZ", &["x"], &["unused"], vec![]);
        m.output("y");
        let g = m.import()?;
        assert_eq!(g.nodes.len(), 2, "{:?}", g.nodes.iter().map(|n| &n.name).collect::<Vec<_>>());
        let x = randn(&[1, 2, 4, 4], 1);
        assert_eq!(max_diff(&run(&g, &x)?[0], &x.relu()), 0.0);
        Ok(())
    }
}

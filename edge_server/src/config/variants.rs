//! What each model entry resolves to: where its graph comes from ([`ModelSource`],
//! [`EdgeConfig::model_source`]) and the variants it is served as (input shapes and camera
//! fits, [`EdgeConfig::served_variants`]).

use std::path::{Component, Path, PathBuf};

use super::error::ConfigError;
use super::schema::EdgeConfig;

/// Where a model's graph comes from, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// A zoo model, `zoo:NAME`.
    Zoo(String),
    /// An ONNX file in the store (absolute path).
    File(PathBuf),
}

impl ModelSource {
    /// What [`lop::model::load`] takes.
    pub fn load_name(&self) -> String {
        match self {
            ModelSource::Zoo(s) => s.clone(),
            ModelSource::File(p) => p.display().to_string(),
        }
    }
}

impl EdgeConfig {
    /// The input shapes model `i` is served at: `[None]` (its own static shape), its
    /// `input_shape`, or each of its `input_shapes`.
    pub fn served_shapes(&self, i: usize) -> Vec<Option<Vec<usize>>> {
        match self.models.get(i) {
            Some(m) if !m.input_shapes.is_empty() => m.input_shapes.iter().cloned().map(Some).collect(),
            Some(m) => vec![m.input_shape.clone()],
            None => Vec::new(),
        }
    }

    /// The variants model `i` is served as: each of [`EdgeConfig::served_shapes`], fitting
    /// each of its `camera_fits` (or none). Call after validation (specs that do not parse are
    /// left out).
    pub fn served_variants(&self, i: usize) -> Vec<(Option<Vec<usize>>, Option<lop::fit::FrameFit>)> {
        let fits: Vec<Option<lop::fit::FrameFit>> = match self.models.get(i) {
            Some(m) if !m.camera_fits.is_empty() => {
                m.camera_fits.iter().filter_map(|s| lop::fit::FrameFit::parse(s).ok()).map(Some).collect()
            }
            _ => vec![None],
        };
        self.served_shapes(i).into_iter().flat_map(|shape| fits.iter().map(move |&fit| (shape.clone(), fit))).collect()
    }

    /// Model `i`'s source: a zoo name, or a file inside the store (which must exist).
    ///
    /// # Errors
    /// A path leaving the store, or a file that is not there.
    pub fn model_source(&self, i: usize) -> Result<ModelSource, ConfigError> {
        let field = format!("models[{i}].source");
        let m = self.models.get(i).ok_or_else(|| self.invalid("models", format!("no model {i}")))?;
        let name = match (&m.source, &m.sha256) {
            (Some(s), _) => s.clone(),
            (None, Some(h)) => format!("{}.onnx", h.to_ascii_lowercase()),
            (None, None) => return Err(self.invalid(field, "missing")),
        };
        if name.starts_with("zoo:") {
            return Ok(ModelSource::Zoo(name));
        }
        let rel = Path::new(&name);
        if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(self.invalid(field, format!("'{name}' must be a file name inside the model store (no absolute path, no ..)")));
        }
        let path = self.model_store.join(rel);
        if !path.is_file() {
            return Err(self.invalid(field, format!("model file '{name}' not found in the model store {}", self.model_store.display())));
        }
        Ok(ModelSource::File(path))
    }
}

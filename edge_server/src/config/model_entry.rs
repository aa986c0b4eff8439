//! The YAML of one served model: [`ModelEntry`] (`models[]`) and where its server profile comes
//! from ([`ProfileSource`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One model served.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// The id robots name in Hello (letters, digits, `_`, `-`, `.`).
    pub id: String,
    /// `zoo:NAME`, or an ONNX file name relative to the model store. Absent: the store's
    /// `<sha256>.onnx`.
    #[serde(default)]
    pub source: Option<String>,
    /// Expected sha256 (64 hex digits): the ONNX file's `sha256sum` or the model's content hash
    /// (what robots send in Hello). Checked at start-up; a mismatch is an error.
    #[serde(default)]
    pub sha256: Option<String>,
    /// Input shape for ONNX models with dynamic input dimensions, e.g. `[1, 3, 416, 416]`.
    #[serde(default)]
    pub input_shape: Option<Vec<usize>>,
    /// Several input shapes for one model with dynamic dimensions, each served (and profiled) as
    /// its own variant: the camera resolutions of the robots that send frames at their own size
    /// (`lop_robot` without `model.input_shape`). Exclusive with `input_shape`.
    #[serde(default)]
    pub input_shapes: Vec<Vec<usize>>,
    /// The robots' cameras, for models that fit the camera's frame themselves (`lop_robot`'s
    /// `image.camera_size`): each `letterbox@WxH`, `letterbox:PAD@WxH` or `resize@WxH` is
    /// served as its own variant, taking frames of that size, so that a camera's JPEG crosses
    /// unchanged whatever its size. Robots must use the same fit, since it is part of the model.
    #[serde(default)]
    pub camera_fits: Vec<String>,
    /// A front end for a float-input model so that frames arrive as bytes (`unit`, `raw`,
    /// `imagenet`, `mean=R,G,B;std=R,G,B`, each with an optional `;bgr`); robots must use the
    /// same, since it is part of the model.
    #[serde(default)]
    pub preprocess: Option<String>,
    /// A back end after the model's output (`detect`, `pose`, `segment`, `occupancy`, `raw`,
    /// with `;key=value` options, e.g. `detect;score=0.3`), so that results rather than raw heads
    /// return to the robot; robots must use the same `model.task`, since it is part of the model.
    #[serde(default)]
    pub task: Option<String>,
    /// The edge's profile of this model: a profile JSON path, `measure` (at start-up, cached in
    /// `profile_cache`) or `synthetic` (tests).
    #[serde(default)]
    pub server_profile: ProfileSource,
}

/// Where a server profile comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(from = "String", into = "String")]
pub enum ProfileSource {
    /// Measured at start-up on the configured device (cached).
    #[default]
    Measure,
    /// [`crate::synthetic_profile`]: for tests and demos only.
    Synthetic,
    /// A profile JSON (from `lop profile --role server`).
    File(PathBuf),
}

impl From<String> for ProfileSource {
    fn from(s: String) -> Self {
        match s.as_str() {
            "measure" => ProfileSource::Measure,
            "synthetic" => ProfileSource::Synthetic,
            _ => ProfileSource::File(PathBuf::from(s)),
        }
    }
}

impl From<ProfileSource> for String {
    fn from(p: ProfileSource) -> String {
        match p {
            ProfileSource::Measure => "measure".into(),
            ProfileSource::Synthetic => "synthetic".into(),
            ProfileSource::File(p) => p.display().to_string(),
        }
    }
}

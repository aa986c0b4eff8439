//! The input shape of a model whose ONNX file leaves dimensions dynamic, fixed before
//! `lop_robot` loads it: `model.input_shape` when given; else the configured image size or grid;
//! else, for a camera, the first frame's own size (the camera's native resolution, so frames
//! then cross the link without resizing). A static model keeps its own shape.

use lop::model::DeclaredInput;

use crate::config::{CloudGrid, InputKind, RobotConfig};
use crate::error::{Error, Result};

/// Where the input shape came from (logged at start-up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShapeOrigin {
    /// The model fixes it, or `model.input_shape` does.
    Given,
    /// `image.height`/`image.width` or the `cloud.*` grid size.
    Configured,
    /// The first camera frame's size.
    FirstFrame,
}

/// What is known about the shape before any frame arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// The shape to load the model at (`None`: the model's own static shape).
    Shape(Option<Vec<usize>>, ShapeOrigin),
    /// A camera model with a dynamic height or width and no configured size: the first frame
    /// tells.
    NeedsFrame,
}

/// Fixes the dynamic dimensions of `declared` from the configuration where it can.
///
/// # Errors
/// [`Error::Config`] for a model with several inputs, a rank the input kind cannot feed, or a
/// LiDAR grid size that is needed but not configured (naming the parameters to set).
pub fn resolve(cfg: &RobotConfig, declared: &[DeclaredInput]) -> Result<Resolved> {
    if cfg.model_load.input_shape.is_some() {
        return Ok(Resolved::Shape(cfg.model_load.input_shape.clone(), ShapeOrigin::Given));
    }
    let [input] = declared else {
        return Err(Error::Config { what: format!("the model has {} inputs; lop_robot feeds exactly one", declared.len()) });
    };
    if !input.is_dynamic() {
        return Ok(Resolved::Shape(None, ShapeOrigin::Given));
    }
    let show = || format!("[{}]", input.dim_names.join(", "));
    let Some(dims) = &input.dims else {
        return Err(Error::Config {
            what: format!("input '{}' declares no rank; set model.input_shape to the shape the model takes", input.name),
        });
    };
    let fill = |wanted: &[(usize, u32, &str)]| -> Result<Option<Vec<usize>>> {
        let mut shape = Vec::with_capacity(dims.len());
        for (axis, d) in dims.iter().enumerate() {
            let v = match (d, wanted.iter().find(|w| w.0 == axis)) {
                (Some(v), _) => *v,
                (None, Some(&(_, configured, _))) if configured > 0 => configured as usize,
                (None, Some(_)) => return Ok(None),
                // The batch and a LiDAR voxel grid's channel: one.
                (None, None) if axis == 0 || (dims.len() == 5 && axis == 1) => 1,
                (None, None) => {
                    return Err(Error::Config {
                        what: format!(
                            "input '{}' of shape {} has a dynamic dimension {axis} that no frame fixes; set model.input_shape",
                            input.name,
                            show()
                        ),
                    });
                }
            };
            shape.push(v);
        }
        Ok(Some(shape))
    };
    match (cfg.input, &cfg.cloud) {
        (InputKind::Camera, _) => {
            if dims.len() != 4 {
                return Err(Error::Config {
                    what: format!("input camera needs a model taking [1, C, H, W]; input '{}' is {}", input.name, show()),
                });
            }
            // A dynamic channel count: the colour encodings lop_robot converts to (rgb8, bgr8).
            let channels = if dims[1].is_none() { 3 } else { 0 };
            let wanted = [(1, channels, "image channels"), (2, cfg.image.height, "image.height"), (3, cfg.image.width, "image.width")];
            Ok(fill(&wanted)?.map_or(Resolved::NeedsFrame, |s| Resolved::Shape(Some(s), ShapeOrigin::Configured)))
        }
        (InputKind::Lidar, grid) => {
            let wanted: Vec<(usize, u32, &str)> = match grid {
                CloudGrid::Bev(g) => {
                    vec![
                        (1, u32::try_from(g.channels.count()).unwrap_or(0), "cloud.bev_features"),
                        (2, g.rows, "cloud.rows"),
                        (3, g.cols, "cloud.cols"),
                    ]
                }
                CloudGrid::Voxels(g) => vec![(2, g.depth, "cloud.depth"), (3, g.rows, "cloud.rows"), (4, g.cols, "cloud.cols")],
            };
            match fill(&wanted)? {
                Some(s) => Ok(Resolved::Shape(Some(s), ShapeOrigin::Configured)),
                None => {
                    let missing: Vec<&str> =
                        wanted.iter().filter(|w| dims.get(w.0).is_some_and(Option::is_none) && w.1 == 0).map(|w| w.2).collect();
                    Err(Error::Config {
                        what: format!(
                            "input '{}' has dynamic shape {}; set {} (or model.input_shape) to fix the grid",
                            input.name,
                            show(),
                            missing.join(", ")
                        ),
                    })
                }
            }
        }
    }
}

/// The shape for a camera model with dynamic dimensions, from a frame's size.
///
/// # Errors
/// [`Error::Config`] when the declared input is not a [N, C, H, W] image input.
pub fn from_frame(cfg: &RobotConfig, declared: &[DeclaredInput], height: u32, width: u32) -> Result<Vec<usize>> {
    let [input] = declared else {
        return Err(Error::Config { what: format!("the model has {} inputs; lop_robot feeds exactly one", declared.len()) });
    };
    let Some(dims) = input.dims.as_ref().filter(|d| d.len() == 4) else {
        return Err(Error::Config { what: format!("input camera needs a model taking [1, C, H, W]; input '{}' is not", input.name) });
    };
    let pick = |configured: u32, frame: u32| if configured > 0 { configured } else { frame } as usize;
    let fixed = [1, 3, pick(cfg.image.height, height), pick(cfg.image.width, width)];
    Ok(dims.iter().zip(fixed).map(|(d, f)| d.unwrap_or(f)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{ParamValue, Params};
    use lop::graph::DType;

    fn config(set: &[(&str, ParamValue)]) -> RobotConfig {
        let mut p = Params::empty("lop_robot");
        for (k, v) in set {
            p.set(k, v.clone());
        }
        RobotConfig::from_params(&mut p).expect("valid parameters")
    }

    fn input(dims: &[Option<usize>]) -> Vec<DeclaredInput> {
        vec![DeclaredInput {
            name: "images".into(),
            dims: Some(dims.to_vec()),
            dim_names: dims.iter().map(|d| d.map_or_else(|| "?".into(), |v| v.to_string())).collect(),
            dtype: DType::F32,
        }]
    }

    #[test]
    fn camera_models_take_the_configured_size_or_the_first_frame() {
        let dynamic = input(&[None, Some(3), None, None]);
        let plain = config(&[]);
        assert_eq!(resolve(&plain, &dynamic).expect("resolves"), Resolved::NeedsFrame);
        assert_eq!(from_frame(&plain, &dynamic, 480, 640).expect("frame"), vec![1, 3, 480, 640]);
        let sized = config(&[("image.height", ParamValue::Int(384)), ("image.width", ParamValue::Int(512))]);
        assert_eq!(resolve(&sized, &dynamic).expect("resolves"), Resolved::Shape(Some(vec![1, 3, 384, 512]), ShapeOrigin::Configured));
        // Only the width is dynamic: the frame's width, the model's height.
        let wide = input(&[Some(1), Some(3), Some(320), None]);
        assert_eq!(from_frame(&plain, &wide, 480, 640).expect("frame"), vec![1, 3, 320, 640]);
        // A static model and model.input_shape are kept as they are.
        assert_eq!(
            resolve(&plain, &input(&[Some(1), Some(3), Some(64), Some(64)])).expect("static"),
            Resolved::Shape(None, ShapeOrigin::Given)
        );
        let given = config(&[("model.input_shape", ParamValue::DoubleList(vec![1.0, 3.0, 96.0, 128.0]))]);
        assert_eq!(resolve(&given, &dynamic).expect("given"), Resolved::Shape(Some(vec![1, 3, 96, 128]), ShapeOrigin::Given));
    }

    #[test]
    fn lidar_models_take_the_grid_and_name_what_is_missing() {
        let voxels = input(&[None, Some(1), None, None, None]);
        let base = [("input", ParamValue::Str("lidar".into())), ("cloud.grid", ParamValue::Str("voxels".into()))];
        let e = resolve(&config(&base), &voxels).expect_err("no grid size").to_string();
        assert!(e.contains("cloud.depth") && e.contains("cloud.rows") && e.contains("cloud.cols"), "{e}");
        let mut sized = base.to_vec();
        sized.extend([("cloud.depth", ParamValue::Int(16)), ("cloud.rows", ParamValue::Int(64)), ("cloud.cols", ParamValue::Int(64))]);
        assert_eq!(
            resolve(&config(&sized), &voxels).expect("grid"),
            Resolved::Shape(Some(vec![1, 1, 16, 64, 64]), ShapeOrigin::Configured)
        );
        let e = resolve(&config(&[]), &input(&[None, Some(3), None])).expect_err("rank 3 camera").to_string();
        assert!(e.contains("[1, C, H, W]"), "{e}");
    }
}

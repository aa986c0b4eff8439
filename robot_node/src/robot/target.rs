//! What the model takes ([`Target`]): an image of a size and fit, the camera's own frame that
//! the model fits itself, a BEV grid or a voxel grid, resolved from the model's input shape and
//! the configuration.

use lop::graph::DType;

use crate::config::{CloudGrid, InputKind, RobotConfig};
use crate::convert::{BevGrid, Fit, ImageTarget, VoxelGrid};
use crate::error::{Error, Result};

/// What the model takes, resolved from its input shape and the configuration.
#[derive(Debug, Clone)]
pub(super) enum Target {
    Image(ImageTarget),
    /// The model fits frames itself (`image.camera_size`): frames must be `frame`'s size and are
    /// copied as they are; results map back through `model` (the model's own input and fit).
    Camera {
        frame: ImageTarget,
        model: ImageTarget,
    },
    Bev(BevGrid),
    Voxels(VoxelGrid),
}

/// The model's target for one input's frames, from its input `shape` and `dtype`, the
/// configured input and image settings (`0`: the model's size), the input's `fit`, and (for
/// `auto`, `None`) whether its outputs are dense.
///
/// # Errors
/// [`Error::Config`] for a model that does not take the configured input.
pub(super) fn resolve_target(cfg: &RobotConfig, shape: &[usize], dtype: DType, dense_outputs: bool, fit: Option<Fit>) -> Result<Target> {
    let dim = |i: usize| shape.get(i).and_then(|&d| u32::try_from(d).ok()).unwrap_or(0);
    let pick = |configured: u32, model: u32| if configured == 0 { model } else { configured };
    match cfg.input {
        InputKind::Camera => {
            if shape.len() != 4 || dtype != DType::U8 {
                let hint = if dtype == DType::F32 && shape.len() == 4 {
                    format!(
                        " (a float model takes camera bytes behind a preprocess stage: model.preprocess, {})",
                        lop::preprocess::SPEC_HELP
                    )
                } else {
                    String::new()
                };
                return Err(Error::Config {
                    what: format!("input camera needs a model taking a [1, C, H, W] uint8 image; this one takes {shape:?} {dtype:?}{hint}"),
                });
            }
            let auto = if dense_outputs { Fit::Letterbox { pad: cfg.image.pad } } else { Fit::Resize };
            Ok(Target::Image(ImageTarget {
                height: pick(cfg.image.height, dim(2)),
                width: pick(cfg.image.width, dim(3)),
                channels: dim(1),
                order: cfg.image.order,
                fit: fit.unwrap_or(auto),
            }))
        }
        InputKind::Lidar => match &cfg.cloud {
            CloudGrid::Bev(g) => {
                if shape.len() != 4 || usize::try_from(dim(1)).ok() != Some(g.channels.count()) {
                    return Err(Error::Config {
                        what: format!("the BEV grid has {} channels; the model takes {shape:?}", g.channels.count()),
                    });
                }
                Ok(Target::Bev(BevGrid { rows: pick(g.rows, dim(2)), cols: pick(g.cols, dim(3)), ..g.clone() }))
            }
            CloudGrid::Voxels(g) => {
                if shape.len() != 5 || dim(1) != 1 {
                    return Err(Error::Config {
                        what: format!("a voxel grid needs a model taking [1, 1, D, H, W]; this one takes {shape:?}"),
                    });
                }
                Ok(Target::Voxels(VoxelGrid {
                    depth: pick(g.depth, dim(2)),
                    rows: pick(g.rows, dim(3)),
                    cols: pick(g.cols, dim(4)),
                    ..g.clone()
                }))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{ParamValue, Params};

    fn config(fit: Option<&str>) -> RobotConfig {
        let mut p = Params::empty("lop_robot");
        if let Some(f) = fit {
            p.set("image.fit", ParamValue::Str(f.into()));
        }
        p.set("image.pad", ParamValue::Int(114));
        RobotConfig::from_params(&mut p).expect("valid parameters")
    }

    fn fit_of(t: Target) -> Fit {
        match t {
            Target::Image(i) => i.fit,
            other => panic!("not an image target: {other:?}"),
        }
    }

    /// `image.fit: auto` (the default) letterboxes frames for models with dense outputs
    /// (detectors: boxes keep the frame's aspect ratio) and resizes them for classifiers; an
    /// explicit setting wins; a float model is refused with the preprocess hint.
    #[test]
    fn auto_fit_letterboxes_detectors_and_resizes_classifiers() {
        let shape = [1, 3, 640, 640];
        let auto = config(None);
        assert_eq!(fit_of(resolve_target(&auto, &shape, DType::U8, true, auto.image.fit).expect("detector")), Fit::Letterbox { pad: 114 });
        assert_eq!(fit_of(resolve_target(&auto, &shape, DType::U8, false, auto.image.fit).expect("classifier")), Fit::Resize);
        let resize = config(Some("resize"));
        assert_eq!(fit_of(resolve_target(&resize, &shape, DType::U8, true, resize.inputs[0].fit).expect("explicit")), Fit::Resize);
        let e = resolve_target(&auto, &shape, DType::F32, true, None).expect_err("float input").to_string();
        assert!(e.contains("model.preprocess"), "{e}");
    }
}

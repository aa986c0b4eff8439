//! The robot's side of a benchmark before any method runs: its model worker, loaded as the
//! robot's profile measured it, and the inputs it sends ([`Sample`]: each real frame, or one
//! synthetic input) with the unsplit model's outputs on them, as given and as decoded after the
//! table's lossy codec: what every method's outputs are checked against.

use lop::model::LoadOptions;
use tch::Tensor;

use super::config::BenchConfig;
use crate::error::{Error, Result};
use crate::exec::worker::Loaded;
use crate::exec::{CameraJpeg, Worker};

/// One input and the unsplit model's outputs on it: as given, and as decoded after the table's
/// lossy codec (what the robot computes on once its frame crossed coded).
pub(super) struct Sample {
    inputs: Vec<Tensor>,
    /// The camera's JPEG the input is the decoding of (`passthrough`).
    pub(super) camera: Option<CameraJpeg>,
    whole: Vec<Tensor>,
    whole_coded: Vec<Tensor>,
}

impl Sample {
    pub(super) fn inputs(&self) -> Vec<Tensor> {
        self.inputs.iter().map(|t| t.shallow_clone()).collect()
    }
    /// The outputs an inference must equal.
    pub(super) fn reference(&self, coded: bool) -> &[Tensor] {
        if coded { &self.whole_coded } else { &self.whole }
    }
}

/// The robot's model worker, one input per frame (or a synthetic one) and the unsplit outputs.
pub(super) async fn robot_worker(cfg: &BenchConfig) -> Result<(Worker, Loaded, Vec<Sample>)> {
    // The robot runs the model as its profile measured it.
    let (source, load) = (cfg.source.clone(), LoadOptions { layout: cfg.robot.layout, ..cfg.load.clone() });
    let (worker, loaded) = Worker::spawn("robot", move || lop::model::load(&source, &load)).await?;
    let (frames, codec, cameras) = (cfg.frames.clone(), cfg.spec.frame.codec, cfg.cameras.clone());
    let samples = worker
        .call(move |g| -> Result<Vec<Sample>> {
            let whole = |inputs: &[Tensor]| lop::exec::run_whole(g, inputs).map(|r| r.outputs);
            if frames.is_empty() {
                let inputs = lop::exec::synthetic_inputs(g, 1)?;
                let w = whole(&inputs)?;
                let wc = w.iter().map(|t| t.shallow_clone()).collect();
                return Ok(vec![Sample { inputs, camera: None, whole: w, whole_coded: wc }]);
            }
            let [input] = g.inputs()[..] else {
                return Err(Error::InvalidConfig { what: "real frames need a model with one image input".into() });
            };
            let image = lop::codec::Image::of(&g.nodes[input].info)
                .map_err(|why| Error::InvalidConfig { what: format!("real frames need an image input: {why}") })?;
            let tensor = |planar: &[u8]| {
                Tensor::f_from_data_size(planar, &[1, image.channels as i64, image.height as i64, image.width as i64], tch::Kind::Uint8)
                    .map_err(|e| Error::Executor(format!("frame to tensor: {e}")))
            };
            frames
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let inputs = vec![tensor(f)?];
                    let w = whole(&inputs)?;
                    let camera = cameras.get(i).map(|c| CameraJpeg(c.clone()));
                    // The decoded frame: one unit coded whole decodes to what the bands give
                    // (a camera's JPEG: the frame is its decoding already).
                    let wc = if codec.is_lossy() && camera.is_none() {
                        let unit = lop::codec::encode(codec, &image, f, image.height).map_err(lop::Error::from)?;
                        let decoded = lop::codec::decode(codec, &image, &unit, image.height).map_err(lop::Error::from)?;
                        whole(&[tensor(&decoded)?])?
                    } else {
                        w.iter().map(|t| t.shallow_clone()).collect()
                    };
                    Ok(Sample { inputs, camera, whole: w, whole_coded: wc })
                })
                .collect()
        })
        .await??;
    Ok((worker, loaded, samples))
}

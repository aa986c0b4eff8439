//! The model on the robot: its input shape fixed before it loads (a dynamic model waits for the
//! first camera frame), loaded on its worker thread with what that worker reads from it
//! (profiles, schedule table, output names, price list), and the replanner that plans a table
//! for an edge's server profile.

use std::sync::Arc;
use std::time::Instant;

use lop::ValueInfo;
use lop::model::LoadOptions;
use lop::plan::Side;
use lop::planner::table::ScheduleTable;
use lop::postprocess::PostOp;
use lop::profile::Profile;
use lop_fleet::ModelCost;
use lop_runtime::client::Replanner;
use lop_runtime::exec::Worker;
use lop_runtime::exec::worker::Loaded;
use tokio::sync::watch;

use crate::backend::{Qos, SharedRos};
use crate::config::{RobotConfig, Transport};
use crate::convert;
use crate::error::{Error, Result};
use crate::input_shape::{self, Resolved, ShapeOrigin};

/// The load options with a dynamic model's shape fixed ([`crate::input_shape`]), waiting for the
/// first camera frame where only it can tell; `None` when `stop` came first.
pub(super) async fn input_load(
    cfg: &RobotConfig,
    ros: &SharedRos,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<(LoadOptions, ShapeOrigin)>> {
    if cfg.model_load.input_shape.is_some() || cfg.model_source.starts_with("zoo:") {
        // The shape is given, or fixed by the zoo: nothing to read before loading.
        return Ok(Some((cfg.model_load.clone(), ShapeOrigin::Given)));
    }
    let source = cfg.model_source.clone();
    let declared = tokio::task::spawn_blocking(move || lop::model::declared_inputs(&source))
        .await
        .map_err(|e| Error::Config { what: format!("reading the model's inputs: {e}") })??;
    let mut load = cfg.model_load.clone();
    let origin = match input_shape::resolve(cfg, &declared)? {
        Resolved::Shape(shape, origin) => {
            load.input_shape = shape;
            origin
        }
        Resolved::NeedsFrame => {
            // The first camera's frame fixes it (the cameras share the model).
            let camera = cfg.inputs.first().ok_or_else(|| Error::Config { what: "no input configured".into() })?;
            let topic = camera.input_topic();
            tracing::info!(%topic, "the model's input size is dynamic: waiting for the first frame to fix it");
            let (tx, mut rx) = tokio::sync::mpsc::channel::<(u32, u32)>(1);
            let _sub = match camera.transport {
                Transport::Raw => ros.subscribe_images(
                    &topic,
                    Qos::SensorData,
                    Box::new(move |m| {
                        let _ = tx.try_send((m.height, m.width));
                    }),
                )?,
                Transport::Compressed => ros.subscribe_compressed(
                    &topic,
                    Qos::SensorData,
                    Box::new(move |m| match convert::compressed::dimensions(&m.format, (*m.data).as_ref()) {
                        Ok((w, h)) => {
                            let _ = tx.try_send((h, w));
                        }
                        Err(e) => tracing::warn!(error = %e, "a first frame that does not fix the input size"),
                    }),
                )?,
            };
            let (height, width) = loop {
                tokio::select! {
                    _ = stop.changed() => return Ok(None),
                    size = rx.recv() => match size {
                        Some((h, w)) if h > 0 && w > 0 => break (h, w),
                        Some(_) => continue,
                        None => return Ok(None),
                    },
                }
            };
            let shape = input_shape::from_frame(cfg, &declared, height, width)?;
            tracing::info!(?shape, "input shape fixed by the first frame");
            load.input_shape = Some(shape);
            ShapeOrigin::FirstFrame
        }
    };
    Ok(Some((load, origin)))
}

/// What the model's worker read from it: the schedule table, the robot's profile, the output
/// names, the one input, whether an output is dense (detections, maps: frames are letterboxed)
/// and the model's price list for routing over a fleet.
pub(super) struct ModelFacts {
    pub(super) table: ScheduleTable,
    pub(super) robot_profile: Profile,
    pub(super) names: Vec<String>,
    pub(super) input: ValueInfo,
    /// The shape the model reads after its own fit of the camera's frame (`image.camera_size`;
    /// the input's shape without one).
    pub(super) fitted_shape: Vec<usize>,
    pub(super) dense_outputs: bool,
    pub(super) cost: ModelCost,
}

/// The model loaded on its worker thread, with what that worker read from it.
pub(super) struct RobotModel {
    pub(super) worker: Worker,
    pub(super) loaded: Loaded,
    /// How the replanner's copy of the model loads: in the robot profile's layout, as the
    /// worker's. (The other inputs' and a fleet's workers share the worker's weights instead.)
    pub(super) replan_load: LoadOptions,
    pub(super) facts: ModelFacts,
}

/// Loads the model on its worker thread, then (on that thread) checks the class names, loads
/// the profiles, sets the robot profile's layout, and loads or builds the schedule table.
///
/// # Errors
/// A model that does not load (with the `model.input_shape` hint when the shape was not
/// given), profiles or a table that cannot be loaded, a model with more than one input.
pub(super) async fn load_model(cfg: &RobotConfig, load: LoadOptions, origin: ShapeOrigin) -> Result<RobotModel> {
    let source = cfg.model_source.clone();
    let at = load.input_shape.clone();
    let replan_load = load.clone();
    let (worker, loaded) = match Worker::spawn("lop-robot-model", move || lop::model::load(&source, &load)).await {
        Ok(w) => w,
        Err(e) if origin != ShapeOrigin::Given => {
            return Err(Error::Config {
                what: format!(
                    "the model does not load at {at:?} ({origin:?}): {e}; set model.input_shape (frames are then fitted to it, see image.fit)"
                ),
            });
        }
        Err(e) => return Err(e.into()),
    };
    let (robot_p, server_p, table_s, cache) =
        (cfg.robot_profile.clone(), cfg.server_profile.clone(), cfg.table.clone(), cfg.cache_dir.clone());
    let class_names = cfg.class_names.clone();
    let model_id = cfg.model_id.clone();
    let facts = worker
        .call(move |g| -> Result<_> {
            check_class_names(g, &class_names)?;
            // A coded frame's price on the robot: as its profile measured it, else measured here
            // now (the profile the edge receives in Hello carries it).
            let robot = lop::profile::with_codec_measured(robot_p.load(g, Side::Robot)?, table_s.frame_codec, g)?;
            let server = server_p.load(g, Side::Server)?;
            // The model runs as the robot's profile measured it.
            g.set_layout(robot.layout)?;
            let spec = table_s.spec(g, &robot, &server)?;
            // The model's price list for routing frames over a fleet.
            let sim = lop::sim::SimConfig { input_bytes_per_element: spec.input_bytes_per_element, ..Default::default() };
            let cost = lop::sim::model_cost(&model_id, g, &robot, &server, sim)?;
            let (table, _, used) = lop::planner::table::load_or_build(&cache, g, &robot, &server, &spec, 1)?;
            tracing::info!(cache = ?used, buckets = spec.buckets.len(), layout = robot.layout.name(), "schedule table ready");
            let names: Vec<String> = g.outputs.iter().map(|&o| g.nodes[o].name.clone()).collect();
            let inputs = g.inputs();
            let [input] = inputs[..] else {
                return Err(Error::Config { what: format!("the model has {} inputs; lop_robot feeds exactly one", inputs.len()) });
            };
            let dense_outputs = g.outputs.iter().any(|&o| g.nodes[o].info.shape.len() >= 3);
            let fitted_shape = lop::fit::fitted_shape(g);
            Ok(ModelFacts { table, robot_profile: robot, names, input: g.nodes[input].info.clone(), fitted_shape, dense_outputs, cost })
        })
        .await??;
    let replan_load = LoadOptions { layout: facts.robot_profile.layout, ..replan_load };
    Ok(RobotModel { worker, loaded, replan_load, facts })
}

/// A class-names file must name every class of a detection head (`model.class_names`).
fn check_class_names(g: &lop::Graph, names: &[String]) -> Result<()> {
    let Some(&out) = g.outputs.first() else { return Ok(()) };
    if let lop::Op::Post(PostOp::Detect(d)) = &g.nodes[out].op
        && !names.is_empty()
        && names.len() != d.classes()
    {
        return Err(Error::Config {
            what: format!("model.class_names lists {} names but the model's head scores {} classes", names.len(), d.classes()),
        });
    }
    Ok(())
}

/// Plans the schedule table for an edge's server profile (see
/// [`lop_runtime::client::Replanner`]): loads its own copy of the model, so that inference on
/// the model's worker goes on meanwhile, and caches the table beside the robot's own.
pub(super) fn replanner(cfg: &RobotConfig, load: LoadOptions, robot: lop::profile::Profile) -> Replanner {
    let (source, settings, cache) = (cfg.model_source.clone(), cfg.table.clone(), cfg.cache_dir.clone());
    Replanner(Arc::new(move |server: lop::profile::Profile| {
        let t0 = Instant::now();
        let g = lop::model::load(&source, &load)?;
        let spec = settings.spec(&g, &robot, &server)?;
        let (table, _, used) = lop::planner::table::load_or_build(&cache, &g, &robot, &server, &spec, 1)?;
        tracing::info!(cache = ?used, buckets = spec.buckets.len(), seconds = t0.elapsed().as_secs_f64(), "schedule table planned for the edge's server profile");
        Ok(table)
    }))
}

//! The robot's side of a one-model edge, made before the edge starts: the steps the single-edge
//! tests and the `metrics_cost` example share. A module of `tests/common` and, by path, of
//! `examples/metrics_cost.rs`: nothing here names the test binaries' `lop_edge`.
// Each includer uses its part (the example never reads `whole`).
#![allow(dead_code)]

use std::path::Path;

use lop::plan::Side;

/// What [`robot_side`] made.
pub struct RobotSide {
    /// The edge's configuration, loaded from its file.
    pub cfg: edge_server::EdgeConfig,
    /// The robot's schedule table.
    pub table: lop::planner::table::ScheduleTable,
    /// A frame of the model's synthetic inputs.
    pub inputs: Vec<tch::Tensor>,
    /// The unsplit model's outputs for `inputs`, to check every answer against (when asked for).
    pub whole: Option<Vec<tch::Tensor>>,
}

/// The robot's side of the edge configured in `config` (which serves `model` with synthetic
/// profiles): the same table configuration, the robot's synthetic profile saved as
/// `robot.json` in the edge's `robot_profiles` folder, the table built once into `robot_tables`
/// (`None`: the edge's `table_cache`, which the edge then loads), a frame of inputs from `seed`,
/// and, when `whole` is set, the unsplit model's outputs for it.
///
/// # Errors
/// Any step's error: the configuration, the model, the profiles, the table, the inputs.
pub fn robot_side(config: &Path, model: &str, robot_tables: Option<&Path>, seed: u64, whole: bool) -> anyhow::Result<RobotSide> {
    let cfg = edge_server::EdgeConfig::load(config)?;
    let spec = cfg.table_spec()?;
    let g = lop::model::load(model, &Default::default())?;
    let robot = edge_server::synthetic_profile(&g, Side::Robot)?;
    let server = edge_server::synthetic_profile(&g, Side::Server)?;
    std::fs::create_dir_all(&cfg.robot_profiles)?;
    robot.save(&cfg.robot_profiles.join("robot.json"))?;
    let tables = robot_tables.unwrap_or(&cfg.table_cache);
    let (table, _, _) = lop::planner::table::load_or_build(tables, &g, &robot, &server, &spec, 1)?;
    let inputs = lop::exec::synthetic_inputs(&g, seed)?;
    let whole = if whole { Some(lop::exec::run_whole(&g, &inputs)?.outputs) } else { None };
    Ok(RobotSide { cfg, table, inputs, whole })
}

//! `lop_robot`: the inference node (see `robot_node::robot`).

use anyhow::Context as _;
use robot_node::cli;
use robot_node::config::RobotConfig;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    cli::finish(run().await);
}

async fn run() -> anyhow::Result<()> {
    cli::init_tracing();
    // A libtorch other than the one tch binds would fail at its first missing operator.
    lop::libtorch::check_loaded()?;
    let (args, ros_args) = cli::parse(std::env::args().collect())?;
    let mut params = cli::params("lop_robot", &args, &ros_args).context("reading the parameters")?;
    let config = RobotConfig::from_params(&mut params).context("lop_robot parameters")?;
    cli::report_params(&params, args.print_params);
    if args.print_params {
        return Ok(());
    }
    let ros =
        cli::open_backend(&args.backend, &config.ros, "lop_robot", &ros_args, params.declared()).await.context("opening the ROS node")?;
    let result = robot_node::robot::run(config, ros.clone(), cli::shutdown_signal()).await;
    ros.shutdown();
    let summary = result.context("lop_robot")?;
    tracing::info!(answered = summary.answered, bad = summary.bad_input, "bye");
    Ok(())
}

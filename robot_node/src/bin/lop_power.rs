//! `lop_power`: the power-sampling node (see `robot_node::power_node`).

use anyhow::Context as _;
use robot_node::cli;
use robot_node::config::PowerConfig;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    cli::finish(run().await);
}

async fn run() -> anyhow::Result<()> {
    cli::init_tracing();
    let (args, ros_args) = cli::parse(std::env::args().collect())?;
    let mut params = cli::params("lop_power", &args, &ros_args).context("reading the parameters")?;
    let config = PowerConfig::from_params(&mut params).context("lop_power parameters")?;
    cli::report_params(&params, args.print_params);
    if args.print_params {
        return Ok(());
    }
    let ros =
        cli::open_backend(&args.backend, &config.ros, "lop_power", &ros_args, params.declared()).await.context("opening the ROS node")?;
    let result = robot_node::power_node::run(config, ros.clone(), cli::shutdown_signal()).await;
    ros.shutdown();
    result.context("lop_power")?;
    Ok(())
}

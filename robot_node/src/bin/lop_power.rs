//! `lop_power`: the power-sampling node (see `robot_node::power_node`).

use robot_node::cli;
use robot_node::config::PowerConfig;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let run = cli::run_node("lop_power", |config: PowerConfig, ros| robot_node::power_node::run(config, ros, cli::shutdown_signal()));
    cli::finish(run.await.map(drop));
}

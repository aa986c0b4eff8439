//! `lop_bandwidth`: the link monitor node (see `robot_node::bandwidth_node`).

use robot_node::cli;
use robot_node::config::BandwidthConfig;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let run =
        cli::run_node("lop_bandwidth", |config: BandwidthConfig, ros| robot_node::bandwidth_node::run(config, ros, cli::shutdown_signal()));
    cli::finish(run.await.map(drop));
}

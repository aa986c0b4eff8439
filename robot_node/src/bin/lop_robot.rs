//! `lop_robot`: the inference node (see `robot_node::robot`).

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
    let summary =
        cli::run_node("lop_robot", |config: RobotConfig, ros| robot_node::robot::run(config, ros, cli::shutdown_signal())).await?;
    if let Some(summary) = summary {
        tracing::info!(answered = summary.answered, bad = summary.bad_input, "bye");
    }
    Ok(())
}

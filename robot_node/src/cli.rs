//! What the three binaries share: the command line (`--config FILE`, `--backend`, then ROS 2
//! arguments after `--ros-args`), logging, opening the backend, and the shutdown signal.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;

use crate::backend::SharedRos;
use crate::config::RosSettings;
use crate::error::{Error, Result};
use crate::params::{Declared, Params, RosArgs};

/// The command line of a node (ROS 2 arguments follow `--ros-args`).
#[derive(Debug, Clone, Parser)]
pub struct Args {
    /// Parameters file in the ROS 2 shape (`NODE: {ros__parameters: {...}}`), e.g. config/robot.yaml.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// ROS library: `hiroz` (default; ROS 2 over Zenoh, no ROS install) or `r2r` (feature `ros2`).
    #[arg(long, default_value = "hiroz")]
    pub backend: String,
    /// Print every parameter with its value in force and exit.
    #[arg(long)]
    pub print_params: bool,
}

/// Splits `argv` at `--ros-args`: clap parses what comes before, [`RosArgs`] the rest.
///
/// # Errors
/// [`Error::Config`] for malformed ROS arguments (clap exits on its own errors).
pub fn parse(argv: Vec<String>) -> Result<(Args, RosArgs)> {
    let split = argv.iter().position(|a| a == "--ros-args").unwrap_or(argv.len());
    let (ours, ros) = argv.split_at(split);
    Ok((Args::parse_from(ours), RosArgs::parse(ros)?))
}

/// Loads a node's parameters from the command line.
///
/// # Errors
/// As [`Params::load`].
pub fn params(node: &str, args: &Args, ros: &RosArgs) -> Result<Params> {
    Params::load(node, args.config.as_deref(), ros)
}

/// Warns about parameters no getter read (typos), and prints them all if asked.
pub fn report_params(p: &Params, print: bool) {
    for name in p.unknown() {
        tracing::warn!(node = p.node(), parameter = %name, "unknown parameter ignored");
    }
    if print {
        for d in p.declared() {
            println!("{}.{} = {} (default {})", p.node(), d.name, d.value.to_text(), d.default.to_text());
        }
    }
}

/// Starts logging (`RUST_LOG`, default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
}

/// Opens the backend `name` for node `node` (off the async executor: session set-up blocks).
///
/// # Errors
/// [`Error::Config`] for an unknown or not compiled-in backend; the backend's own errors.
pub async fn open_backend(name: &str, settings: &RosSettings, node: &str, ros: &RosArgs, declared: &[Declared]) -> Result<SharedRos> {
    let (settings, node, remaps, declared) = (settings.clone(), node.to_string(), ros.remaps.clone(), declared.to_vec());
    let name = name.to_string();
    tokio::task::spawn_blocking(move || -> Result<SharedRos> {
        match name.as_str() {
            "hiroz" => Ok(Arc::new(crate::backend::hiroz::HirozRos::open(&settings, &node, &remaps, &declared, None)?)),
            #[cfg(feature = "ros2")]
            "r2r" => Ok(Arc::new(crate::backend::r2r::R2rRos::open(&settings, &node, &declared)?)),
            other => Err(Error::Config {
                what: format!(
                    "unknown backend '{other}' (hiroz{})",
                    if cfg!(feature = "ros2") { ", r2r" } else { "; r2r needs feature ros2" }
                ),
            }),
        }
    })
    .await
    .map_err(|e| Error::Config { what: format!("opening the backend: {e}") })?
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "no SIGTERM handler; stopping on Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutting down");
}

/// Ends a node's `main`: on an error, one line naming it and each cause once
/// ([`lop::error::report`]) on stderr, and exit status 1.
pub fn finish(result: anyhow::Result<()>) {
    if let Err(e) = result {
        eprintln!("error: {}", lop::error::report(&*e));
        std::process::exit(1);
    }
}

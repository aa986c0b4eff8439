//! What the three binaries share: the command line (`--config FILE`, `--backend`, then ROS 2
//! arguments after `--ros-args`), logging, opening the backend, the shutdown signal, and the
//! life of a node from its command line to its shutdown ([`run_node`]).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser;

use crate::backend::SharedRos;
use crate::config::{BandwidthConfig, PowerConfig, RobotConfig, RosSettings};
use crate::error::{Error, Result};
use crate::params::{Declared, Params, RosArgs};

/// A node's configuration, read from its parameters.
pub trait NodeConfig: Sized {
    /// Reads and checks the node's parameters.
    ///
    /// # Errors
    /// [`Error::Config`] naming the parameter that is missing, malformed or out of range.
    fn read(params: &mut Params) -> Result<Self>;
    /// The node's ROS settings.
    fn ros(&self) -> &RosSettings;
}

impl NodeConfig for RobotConfig {
    fn read(params: &mut Params) -> Result<Self> {
        RobotConfig::from_params(params)
    }
    fn ros(&self) -> &RosSettings {
        &self.ros
    }
}

impl NodeConfig for BandwidthConfig {
    fn read(params: &mut Params) -> Result<Self> {
        BandwidthConfig::from_params(params)
    }
    fn ros(&self) -> &RosSettings {
        &self.ros
    }
}

impl NodeConfig for PowerConfig {
    fn read(params: &mut Params) -> Result<Self> {
        PowerConfig::from_params(params)
    }
    fn ros(&self) -> &RosSettings {
        &self.ros
    }
}

/// A node's life, as each binary's `main` runs it: logging started; the command line and the
/// parameters read into `C` (unknown ones warned about; with `--print-params`, printed and
/// done: `None`); the ROS node `node` opened on the chosen backend; `serve` run with the
/// configuration and the node until it returns (on [`shutdown_signal`], which `serve` is given
/// to wait on); the ROS node shut down. Returns what `serve` returned.
///
/// # Errors
/// Each step's, with context naming the step or the node.
pub async fn run_node<C, T, F>(node: &str, serve: impl FnOnce(C, SharedRos) -> F) -> anyhow::Result<Option<T>>
where
    C: NodeConfig,
    F: Future<Output = Result<T>>,
{
    init_tracing();
    let (args, ros_args) = parse(std::env::args().collect())?;
    let mut params = params(node, &args, &ros_args).context("reading the parameters")?;
    let config = C::read(&mut params).with_context(|| format!("{node} parameters"))?;
    report_params(&params, args.print_params);
    if args.print_params {
        return Ok(None);
    }
    let ros = open_backend(&args.backend, config.ros(), node, &ros_args, params.declared()).await.context("opening the ROS node")?;
    let result = serve(config, ros.clone()).await;
    ros.shutdown();
    Ok(Some(result.with_context(|| node.to_string())?))
}

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
        // Written without println!, so that a closed pipe (`--print-params | head`) ends the
        // listing instead of panicking.
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        for d in p.declared() {
            if writeln!(out, "{}.{} = {} (default {})", p.node(), d.name, d.value.to_text(), d.default.to_text()).is_err() {
                break;
            }
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

//! `lop certs`: a site's CA and certificates for mutual TLS between robots and edges
//! (docs/security.md), and the configuration lines that use them.

use std::path::PathBuf;

use anyhow::Context as _;
use lop_runtime::security::certs::{CertsRequest, make_site_certs};

/// Arguments of `lop certs`.
#[derive(Debug, clap::Args)]
pub struct CertsArgs {
    /// Folder to write into (created; existing certificates are never overwritten).
    #[arg(long)]
    pub out: PathBuf,
    /// Robot ids, comma-separated: one certificate each, its common name the robot id.
    #[arg(long, value_delimiter = ',', required = true)]
    pub robots: Vec<String>,
    /// Host names or IP addresses robots use to reach the edges (besides localhost),
    /// comma-separated, e.g. `gpu-1.lab,10.0.0.5`.
    #[arg(long, value_delimiter = ',')]
    pub edge_names: Vec<String>,
    /// Days the certificates stay valid.
    #[arg(long, default_value_t = 825)]
    pub days: u32,
}

/// Runs `lop certs`.
///
/// # Errors
/// An invalid robot id or name, a folder that cannot be written, certificates already there.
pub fn run(args: &CertsArgs) -> anyhow::Result<i32> {
    let request = CertsRequest { robots: args.robots.clone(), edge_names: args.edge_names.clone(), days: args.days };
    let site = make_site_certs(&args.out, &request).with_context(|| format!("making certificates in {}", args.out.display()))?;
    for f in &site.files {
        eprintln!("certs: wrote {}", f.display());
    }
    let dir = args.out.display();
    let robots = args.robots.join(", ");
    println!(
        "# Edge (config/edge.yaml), zenoh section:\n\
         #   listen: [\"tls/[::]:7447\"]\n\
         #   tls: {{ca: {dir}/ca.pem, cert: {dir}/edge.pem, key: {dir}/edge.key}}\n\
         #   access: {{robots: [{robots}], edges: [edge]}}\n\
         # Robot <id> (config/robot.yaml, lop_robot and lop_bandwidth):\n\
         #   edge: {{endpoint: \"tls/EDGE-HOST:7447\", tls: {{ca: {dir}/ca.pem, cert: {dir}/robot-<id>.pem, key: {dir}/robot-<id>.key}}}}\n\
         # Copy ca.pem and the robot's own .pem and .key to each robot; ca.key stays off the robots."
    );
    Ok(0)
}

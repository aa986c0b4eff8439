//! How to build a [`NetnsLink`](super::NetnsLink): the name prefix, the addresses, the latency
//! and the initial rate, and the checks they must pass before anything is created.

use std::net::Ipv4Addr;
use std::time::Duration;

use crate::error::{Error, Result};

/// Longest prefix: the veth names `{prefix}-r` / `{prefix}-e` must fit Linux's 15 characters.
const MAX_PREFIX_LEN: usize = 13;

/// How to build a [`NetnsLink`](super::NetnsLink).
#[derive(Debug, Clone, PartialEq)]
pub struct NetnsOptions {
    /// Name prefix: namespaces `{prefix}-robot` / `{prefix}-edge`, veth ends `{prefix}-r` /
    /// `{prefix}-e`. At most 13 characters of `[A-Za-z0-9_]` and `-`. Default `lop`.
    pub prefix: String,
    /// The robot's address. Default 10.77.0.1.
    pub robot_addr: Ipv4Addr,
    /// The edge's address. Default 10.77.0.2.
    pub edge_addr: Ipv4Addr,
    /// Prefix length of both addresses. Default 24.
    pub prefix_len: u8,
    /// One-way latency added in each direction (by a delay line in userspace, see the module
    /// docs); 0 joins the two sides
    /// directly. Default 0.
    pub latency: Duration,
    /// The rate of both directions until a trace or [`NetnsLink::set_rate`](super::NetnsLink::set_rate) changes it, Mbit/s.
    /// Default 1000.
    pub initial_mbit: f64,
}

impl Default for NetnsOptions {
    fn default() -> Self {
        NetnsOptions {
            prefix: "lop".to_string(),
            robot_addr: Ipv4Addr::new(10, 77, 0, 1),
            edge_addr: Ipv4Addr::new(10, 77, 0, 2),
            prefix_len: 24,
            latency: Duration::ZERO,
            initial_mbit: 1000.0,
        }
    }
}

impl NetnsOptions {
    /// The options with another name prefix.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The options with a one-way latency per direction.
    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    /// The options with another initial rate, Mbit/s.
    pub fn with_initial_mbit(mut self, mbit: f64) -> Self {
        self.initial_mbit = mbit;
        self
    }

    /// The options with other addresses (same prefix length).
    pub fn with_addrs(mut self, robot: Ipv4Addr, edge: Ipv4Addr) -> Self {
        self.robot_addr = robot;
        self.edge_addr = edge;
        self
    }

    pub(super) fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::InvalidConfig { what });
        let p = &self.prefix;
        if p.is_empty() || p.len() > MAX_PREFIX_LEN || !p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return bad(format!("netns prefix {p:?} must be 1..={MAX_PREFIX_LEN} characters of [A-Za-z0-9_-]"));
        }
        if self.robot_addr == self.edge_addr {
            return bad(format!("netns robot and edge addresses are both {}", self.robot_addr));
        }
        if !(1..=30).contains(&self.prefix_len) {
            return bad(format!("netns prefix length /{} must be in 1..=30", self.prefix_len));
        }
        if !(self.initial_mbit.is_finite() && self.initial_mbit >= 0.0) {
            return bad(format!("netns initial rate {} Mbit/s must be finite and >= 0", self.initial_mbit));
        }
        Ok(())
    }
}

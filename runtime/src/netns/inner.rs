//! The state a [`NetnsLink`](super::NetnsLink) shares with its shaping handles: the names of the
//! namespaces and devices, the tools, the delay line, and the `ip`/`tc` steps that wire the
//! veth pairs and set the rates. Dropping the last owner deletes the namespaces.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use super::command::run;
use super::delay;
use super::side::{Direction, NetnsSide};
use super::tbf::TbfParams;
use crate::error::{Error, Result};

/// Names and settings shared by a [`NetnsLink`](super::NetnsLink) and its [`ShapingHandle`](super::ShapingHandle)s; deleting the
/// namespaces happens when the last of them is dropped.
#[derive(Debug)]
pub(super) struct Inner {
    pub(super) ns_robot: String,
    pub(super) ns_edge: String,
    pub(super) dev_robot: String,
    pub(super) dev_edge: String,
    pub(super) robot_addr: Ipv4Addr,
    pub(super) edge_addr: Ipv4Addr,
    pub(super) latency: Duration,
    /// The namespace of the delay line, under a latency.
    pub(super) ns_wire: Option<String>,
    /// The delay line, under a latency; stopped before the namespaces are deleted.
    pub(super) delay: Option<delay::DelayLine>,
    pub(super) ip: PathBuf,
    pub(super) tc: PathBuf,
}

impl Inner {
    pub(super) fn namespace(&self, side: NetnsSide) -> &str {
        match side {
            NetnsSide::Robot => &self.ns_robot,
            NetnsSide::Edge => &self.ns_edge,
        }
    }

    pub(super) fn device(&self, side: NetnsSide) -> &str {
        match side {
            NetnsSide::Robot => &self.dev_robot,
            NetnsSide::Edge => &self.dev_edge,
        }
    }

    pub(super) fn address(&self, side: NetnsSide) -> Ipv4Addr {
        match side {
            NetnsSide::Robot => self.robot_addr,
            NetnsSide::Edge => self.edge_addr,
        }
    }

    /// Creates the veth pair between the sides' namespaces, or under a latency the two pairs
    /// through the wire namespace, whose ends come up without addresses of any kind
    /// (`addrgenmode none`: not even an IPv6 link-local one), so the wire sends nothing itself.
    pub(super) fn wire(&self) -> Result<()> {
        let (ip, r, e) = (&self.ip, &self.dev_robot, &self.dev_edge);
        let Some(w) = &self.ns_wire else {
            // Created directly inside the namespaces, so nothing is ever left in the root namespace.
            run(ip, &["link", "add", r, "netns", &self.ns_robot, "type", "veth", "peer", "name", e, "netns", &self.ns_edge])?;
            return Ok(());
        };
        run(ip, &["link", "add", r, "netns", &self.ns_robot, "type", "veth", "peer", "name", delay::WIRE_ROBOT_DEV, "netns", w])?;
        run(ip, &["link", "add", e, "netns", &self.ns_edge, "type", "veth", "peer", "name", delay::WIRE_EDGE_DEV, "netns", w])?;
        for dev in [delay::WIRE_ROBOT_DEV, delay::WIRE_EDGE_DEV] {
            run(ip, &["-n", w, "link", "set", "dev", dev, "addrgenmode", "none"])?;
            run(ip, &["-n", w, "link", "set", "dev", dev, "up"])?;
        }
        Ok(())
    }

    /// `tc -n NS qdisc {add|change} dev DEV root handle 10: tbf ...` for `mbit`; returns the
    /// rate applied, bit/s.
    pub(super) fn tbf(&self, verb: &str, direction: Direction, mbit: f64) -> Result<u64> {
        let side = direction.sender();
        let p = TbfParams::for_mbit(mbit);
        let (rate, burst, limit) = (format!("{}bit", p.rate_bits), p.burst_bytes.to_string(), p.limit_bytes.to_string());
        let args = ["-n", self.namespace(side), "qdisc", verb, "dev", self.device(side), "root", "handle", "10:", "tbf"];
        run(&self.tc, &[&args[..], &["rate", &rate, "burst", &burst, "limit", &limit]].concat())?;
        Ok(p.rate_bits)
    }

    pub(super) fn set_rate(&self, direction: Direction, mbit: f64) -> Result<u64> {
        if !(mbit.is_finite() && mbit >= 0.0) {
            return Err(Error::InvalidConfig { what: format!("netns {direction} rate {mbit} Mbit/s must be finite and >= 0") });
        }
        let bits = self.tbf("change", direction, mbit)?;
        tracing::debug!(%direction, mbit, bits, "netns rate changed");
        Ok(bits)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        drop(self.delay.take()); // its sockets are bound to devices of the wire namespace
        for ns in [Some(&self.ns_robot), Some(&self.ns_edge), self.ns_wire.as_ref()].into_iter().flatten() {
            match run(&self.ip, &["netns", "del", ns]) {
                Ok(_) => tracing::debug!(ns = %ns, "netns deleted"),
                Err(e) => tracing::warn!(ns = %ns, error = %e, "deleting a network namespace failed"),
            }
        }
    }
}

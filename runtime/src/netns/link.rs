//! [`NetnsLink`]: two network namespaces joined by a shaped veth pair, created, entered and
//! torn down (the shaping replay lives in `shaping.rs`).

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::command::{find_tool, run};
use super::delay::{self, DelayStats};
use super::inner::Inner;
use super::namespaces::{add_namespaces, enter_namespace};
use super::options::NetnsOptions;
use super::side::{Direction, NetnsSide};
use crate::error::{Error, Result};

/// Two network namespaces joined by a shaped veth pair; see the [module docs](super).
///
/// Dropping it deletes both namespaces (and with them the veth pair) once no [`ShapingHandle`](super::ShapingHandle)
/// from it is alive either.
#[derive(Debug)]
pub struct NetnsLink {
    pub(super) inner: Arc<Inner>,
}

impl NetnsLink {
    /// Whether network namespaces can be used here: `Err` says why not (not root, no `ip` or
    /// `tc`, or `ip netns add` fails), for callers to print.
    pub fn is_available() -> std::result::Result<(), String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            return Err(format!("network namespaces need root (effective uid is {euid})"));
        }
        let ip = find_tool("ip").ok_or("the `ip` command (iproute2) is not installed")?;
        find_tool("tc").ok_or("the `tc` command (iproute2) is not installed")?;
        // Unique per call: callers (tests) may probe from several threads at once.
        static PROBES: AtomicU32 = AtomicU32::new(0);
        let probe = format!("lopprobe{}-{}", std::process::id(), PROBES.fetch_add(1, Ordering::Relaxed));
        let _ = run(&ip, &["netns", "del", &probe]); // a stale probe from a killed run
        let added = run(&ip, &["netns", "add", &probe]);
        let _ = run(&ip, &["netns", "del", &probe]);
        added.map(|_| ()).map_err(|e| format!("cannot create a network namespace: {e}"))
    }

    /// For tests that need network namespaces: `true` where they can be made. Where they cannot,
    /// the test fails naming `test` and why, unless `LOP_ALLOW_SKIP` names `netns`
    /// ([`crate::skips`]): then it is skipped loudly and logged (`false`).
    ///
    /// # Panics
    /// When namespaces are unavailable and their skip is not allowed.
    pub fn available_for_test(test: &str) -> bool {
        let Err(why) = Self::is_available() else { return true };
        crate::skips::may_skip(
            test,
            "netns",
            &format!("network namespaces are unavailable ({why}); scripts/test.sh installs iproute2, and the tests run as root"),
        );
        false
    }

    /// Creates both namespaces, the veth pair, the addresses and the shaping qdiscs; removes
    /// stale namespaces of the same names first (left by a crashed run).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for bad options; [`Error::Command`] naming the failing `ip`/`tc`
    /// command line and its stderr. Whatever was created is deleted again on error.
    pub fn create(opts: NetnsOptions) -> Result<NetnsLink> {
        opts.validate()?;
        let missing = |tool: &str| Error::Command { command: tool.to_string(), stderr: format!("`{tool}` (iproute2) not found") };
        let ip = find_tool("ip").ok_or_else(|| missing("ip"))?;
        let tc = find_tool("tc").ok_or_else(|| missing("tc"))?;
        let p = &opts.prefix;
        let ns_wire = (!opts.latency.is_zero()).then(|| format!("{p}-wire"));
        let (ns_robot, ns_edge) = (format!("{p}-robot"), format!("{p}-edge"));
        add_namespaces(&ip, [Some(&ns_robot), Some(&ns_edge), ns_wire.as_ref()].into_iter().flatten())?;
        // From here on, dropping `inner` (on any error) deletes the namespaces.
        let mut inner = Inner {
            ns_robot,
            ns_edge,
            dev_robot: format!("{p}-r"),
            dev_edge: format!("{p}-e"),
            robot_addr: opts.robot_addr,
            edge_addr: opts.edge_addr,
            latency: opts.latency,
            ns_wire,
            delay: None,
            ip,
            tc,
        };
        inner.wire()?;
        for side in [NetnsSide::Robot, NetnsSide::Edge] {
            let (ns, dev) = (inner.namespace(side), inner.device(side));
            let addr = format!("{}/{}", inner.address(side), opts.prefix_len);
            run(&inner.ip, &["-n", ns, "addr", "add", &addr, "dev", dev])?;
            run(&inner.ip, &["-n", ns, "link", "set", "lo", "up"])?;
            run(&inner.ip, &["-n", ns, "link", "set", dev, "up"])?;
        }
        for direction in [Direction::Up, Direction::Down] {
            inner.tbf("add", direction, opts.initial_mbit)?;
        }
        if let Some(wire) = &inner.ns_wire {
            inner.delay = Some(delay::DelayLine::start(wire, opts.latency)?);
        }
        tracing::info!(
            robot = %inner.ns_robot, edge = %inner.ns_edge, robot_addr = %inner.robot_addr, edge_addr = %inner.edge_addr,
            latency_ms = opts.latency.as_secs_f64() * 1e3, mbit = opts.initial_mbit, "netns link created"
        );
        Ok(NetnsLink { inner: Arc::new(inner) })
    }

    /// The namespace's name (`{prefix}-robot` / `{prefix}-edge`).
    pub fn namespace(&self, side: NetnsSide) -> &str {
        self.inner.namespace(side)
    }

    /// The name of the side's veth end (`{prefix}-r` / `{prefix}-e`).
    pub fn device(&self, side: NetnsSide) -> &str {
        self.inner.device(side)
    }

    /// The side's IPv4 address.
    pub fn address(&self, side: NetnsSide) -> Ipv4Addr {
        self.inner.address(side)
    }

    /// The one-way latency of each direction.
    pub fn latency(&self) -> Duration {
        self.inner.latency
    }

    /// What the delay line has carried so far; `None` without a latency (no delay line).
    pub fn delay_stats(&self) -> Option<DelayStats> {
        self.inner.delay.as_ref().map(delay::DelayLine::stats)
    }

    /// Moves the calling thread into the side's namespace (`setns(CLONE_NEWNET)`); sockets it
    /// opens and threads it spawns afterwards live there. Other threads are unaffected.
    ///
    /// # Errors
    ///
    /// [`Error::Netns`] if the namespace handle cannot be opened or `setns` fails.
    pub fn enter(&self, side: NetnsSide) -> Result<()> {
        enter_namespace(self.namespace(side))
    }

    /// A command that runs `program` inside the side's namespace (`ip netns exec NS program`);
    /// add its arguments with [`Command::arg`].
    pub fn command(&self, side: NetnsSide, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(&self.inner.ip);
        cmd.args(["netns", "exec", self.namespace(side)]).arg(program);
        cmd
    }

    /// Sets one direction's rate now, Mbit/s (0 is clamped to [`MIN_RATE_BITS`](super::MIN_RATE_BITS)); returns the
    /// rate given to `tc`, bit/s. A running [`ShapingHandle`](super::ShapingHandle) overrides it at its next step.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a negative or non-finite rate; [`Error::Command`] if `tc` fails.
    pub fn set_rate(&self, direction: Direction, mbit: f64) -> Result<u64> {
        self.inner.set_rate(direction, mbit)
    }

    /// The side's qdiscs as `tc -s qdisc show dev DEV` prints them (for logs and tests).
    ///
    /// # Errors
    ///
    /// [`Error::Command`] if `tc` fails.
    pub fn qdisc_show(&self, side: NetnsSide) -> Result<String> {
        run(&self.inner.tc, &["-n", self.namespace(side), "-s", "qdisc", "show", "dev", self.device(side)])
    }
}

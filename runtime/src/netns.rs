//! Robot and edge in two network namespaces joined by a veth pair, shaped with `tc`
//! (DESIGN.md section 9; used by `lop bench --netns`).
//!
//! # Topology
//!
//! ```text
//!   netns {prefix}-robot                              netns {prefix}-edge
//!  +--------------------------+                      +--------------------------+
//!  | lo (up)                  |                      |                  lo (up) |
//!  | {prefix}-r  10.77.0.1/24 |====== veth pair =====| 10.77.0.2/24  {prefix}-e |
//!  |  egress: tbf (uplink)    |  robot -> edge: up   |  egress: tbf (downlink)  |
//!  |                          |  edge -> robot: down |                          |
//!  +--------------------------+                      +--------------------------+
//! ```
//!
//! (Under a latency the veth pair becomes two, through the delay line of `{prefix}-wire`; see
//! "Latency" below.) Each direction is shaped on the egress of the side that sends it: [`Direction::Up`]
//! (robot -> edge) on the robot's veth end, [`Direction::Down`] (edge -> robot) on the edge's.
//!
//! # Shaping: why `tbf`
//!
//! The rate is a token bucket filter as the root qdisc of each veth end:
//!
//! ```text
//! tc qdisc add    dev {prefix}-r root handle 10: tbf rate {bits}bit burst {bytes} limit {bytes}
//! tc qdisc change dev {prefix}-r root handle 10: tbf rate {bits}bit burst {bytes} limit {bytes}
//! ```
//!
//! - `tbf` is built into kernels that lack `sch_netem` (such as the CI/firecracker kernel this was
//!   written on, whose only shaping qdiscs are `tbf` and `htb`), it is a single qdisc that
//!   `tc qdisc change` retunes in place in a few milliseconds without dropping its queue, and it
//!   splits GSO/TSO super-packets larger than its burst into MTU segments, so bulk TCP over a
//!   veth (64 KiB GSO packets) is paced frame by frame (an `htb` class would send each
//!   super-packet as one lump). Measured on that kernel: 1 MB of TCP payload takes 1.04 s at
//!   8 Mbit/s and 0.52 s at 16 Mbit/s; changing the rate every 50 ms during a bulk transfer
//!   caused no extra drops. Each change refills the bucket (one burst of bonus bytes), so only
//!   changed rates are applied.
//! - The rate counts Ethernet frames (IP + TCP headers + 14 bytes), so TCP goodput is about
//!   1448/1514 = 95.6 % of the configured rate.
//! - Burst: `max(3200 B, 2 ms of rate)`; a small bucket keeps the rate accurate on short time
//!   scales. Queue limit: `max(6056 B (4 full frames), 100 ms of rate)`, so bulk TCP cannot build
//!   seconds of queue at usable rates (at the floor rate the 4-frame queue is, by nature, slow).
//! - A rate of 0 (an outage in a trace) cannot be given to `tc`; it is clamped to
//!   [`MIN_RATE_BITS`] (8 kbit/s): one 1500-byte frame per 1.5 s, effectively an outage.
//!
//! # Latency
//!
//! A one-way latency ([`NetnsOptions::latency`] > 0) is added in userspace, on every kernel:
//! the robot and the edge are then joined through a third namespace, `{prefix}-wire`, where a
//! delay line holds each frame for the latency (`netns/delay.rs` says how, and why not `netem`, which
//! kernels such as this project's CI machines lack). The `tbf` qdiscs stay where they are, on
//! the robot's and the edge's own veth ends, so rate and latency add up as on a real link.
//!
//! # Entering a namespace
//!
//! [`NetnsLink::enter`] moves the *calling thread* into one side's namespace (`setns`); sockets it
//! creates afterwards, and threads it spawns afterwards, live there (so a tokio runtime built
//! on an entered thread has its workers there too). [`NetnsLink::command`] runs a
//! program inside a namespace with `ip netns exec`.
//!
//! # Example
//!
//! ```no_run
//! use lop_runtime::netns::{NetnsLink, NetnsOptions, NetnsSide};
//! use lop_runtime::Trace;
//!
//! # fn main() -> lop_runtime::Result<()> {
//! if let Err(why) = NetnsLink::is_available() {
//!     eprintln!("network namespaces unavailable: {why}");
//!     return Ok(());
//! }
//! let link = NetnsLink::create(NetnsOptions::default())?;
//! let up = Trace::load("data/traces/indoor.csv")?;
//! let shaping = link.start_shaping(up.clone(), up)?;
//! let served = std::thread::scope(|s| {
//!     s.spawn(|| -> lop_runtime::Result<()> {
//!         link.enter(NetnsSide::Edge)?; // this thread (and threads it spawns) now live there
//!         let _listener = std::net::TcpListener::bind((link.address(NetnsSide::Edge), 7447));
//!         // ... serve ...
//!         Ok(())
//!     })
//!     .join()
//! });
//! assert!(matches!(served, Ok(Ok(()))));
//! println!("{:?}", shaping.stop());
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::trace::Trace;

mod delay;
pub use delay::{DelayStats, QUEUE_BYTES as DELAY_QUEUE_BYTES};

/// The lowest rate given to `tc`, bit/s: a trace rate of 0 (an outage) is clamped to it.
pub const MIN_RATE_BITS: u64 = 8_000;

/// The highest rate given to `tc`, bit/s (100 Gbit/s); higher rates are clamped to it.
pub const MAX_RATE_BITS: u64 = 100_000_000_000;

/// How often [`NetnsLink::start_shaping`] re-reads the traces: the step of the shared traces.
pub const SHAPING_STEP: Duration = Duration::from_millis(500);

/// Where `ip netns` keeps the namespace handles.
const NETNS_DIR: &str = "/var/run/netns";

/// Longest prefix: the veth names `{prefix}-r` / `{prefix}-e` must fit Linux's 15 characters.
const MAX_PREFIX_LEN: usize = 13;

/// One Ethernet frame at a 1500-byte MTU, bytes.
const FRAME_BYTES: u64 = 1514;

/// One of the two namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetnsSide {
    /// The robot's namespace (`{prefix}-robot`).
    Robot,
    /// The edge's namespace (`{prefix}-edge`).
    Edge,
}

impl fmt::Display for NetnsSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NetnsSide::Robot => "robot",
            NetnsSide::Edge => "edge",
        })
    }
}

/// A direction of the link; each is shaped on the egress of its sending side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Robot -> edge, shaped on the robot's veth end.
    Up,
    /// Edge -> robot, shaped on the edge's veth end.
    Down,
}

impl Direction {
    /// The side whose egress shapes this direction.
    pub fn sender(self) -> NetnsSide {
        match self {
            Direction::Up => NetnsSide::Robot,
            Direction::Down => NetnsSide::Edge,
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Up => "up",
            Direction::Down => "down",
        })
    }
}

/// How to build a [`NetnsLink`].
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
    /// The rate of both directions until a trace or [`NetnsLink::set_rate`] changes it, Mbit/s.
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

    fn validate(&self) -> Result<()> {
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

/// Names and settings shared by a [`NetnsLink`] and its [`ShapingHandle`]s; deleting the
/// namespaces happens when the last of them is dropped.
#[derive(Debug)]
struct Inner {
    ns_robot: String,
    ns_edge: String,
    dev_robot: String,
    dev_edge: String,
    robot_addr: Ipv4Addr,
    edge_addr: Ipv4Addr,
    latency: Duration,
    /// The namespace of the delay line, under a latency.
    ns_wire: Option<String>,
    /// The delay line, under a latency; stopped before the namespaces are deleted.
    delay: Option<delay::DelayLine>,
    ip: PathBuf,
    tc: PathBuf,
}

impl Inner {
    fn namespace(&self, side: NetnsSide) -> &str {
        match side {
            NetnsSide::Robot => &self.ns_robot,
            NetnsSide::Edge => &self.ns_edge,
        }
    }

    fn device(&self, side: NetnsSide) -> &str {
        match side {
            NetnsSide::Robot => &self.dev_robot,
            NetnsSide::Edge => &self.dev_edge,
        }
    }

    fn address(&self, side: NetnsSide) -> Ipv4Addr {
        match side {
            NetnsSide::Robot => self.robot_addr,
            NetnsSide::Edge => self.edge_addr,
        }
    }

    /// Creates the veth pair between the sides' namespaces, or under a latency the two pairs
    /// through the wire namespace, whose ends come up without addresses of any kind
    /// (`addrgenmode none`: not even an IPv6 link-local one), so the wire sends nothing itself.
    fn wire(&self) -> Result<()> {
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
    fn tbf(&self, verb: &str, direction: Direction, mbit: f64) -> Result<u64> {
        let side = direction.sender();
        let p = TbfParams::for_mbit(mbit);
        let (rate, burst, limit) = (format!("{}bit", p.rate_bits), p.burst_bytes.to_string(), p.limit_bytes.to_string());
        let args = ["-n", self.namespace(side), "qdisc", verb, "dev", self.device(side), "root", "handle", "10:", "tbf"];
        run(&self.tc, &[&args[..], &["rate", &rate, "burst", &burst, "limit", &limit]].concat())?;
        Ok(p.rate_bits)
    }

    fn set_rate(&self, direction: Direction, mbit: f64) -> Result<u64> {
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

/// The `tbf` parameters for a rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TbfParams {
    rate_bits: u64,
    burst_bytes: u64,
    limit_bytes: u64,
}

impl TbfParams {
    fn for_mbit(mbit: f64) -> TbfParams {
        // NaN and negatives map to the floor; `as` saturates.
        let bits = if mbit.is_finite() && mbit > 0.0 { (mbit * 1e6).round() as u64 } else { 0 };
        let rate_bits = bits.clamp(MIN_RATE_BITS, MAX_RATE_BITS);
        let bytes_per_s = rate_bits / 8;
        TbfParams { rate_bits, burst_bytes: (bytes_per_s / 500).max(3200), limit_bytes: (bytes_per_s / 10).max(4 * FRAME_BYTES) }
    }
}

/// Two network namespaces joined by a shaped veth pair; see the [module docs](self).
///
/// Dropping it deletes both namespaces (and with them the veth pair) once no [`ShapingHandle`]
/// from it is alive either.
#[derive(Debug)]
pub struct NetnsLink {
    inner: Arc<Inner>,
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

    /// Sets one direction's rate now, Mbit/s (0 is clamped to [`MIN_RATE_BITS`]); returns the
    /// rate given to `tc`, bit/s. A running [`ShapingHandle`] overrides it at its next step.
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

    /// Replays two traces, `up` (robot -> edge) and `down` (edge -> robot), on a thread: the rates
    /// at trace time 0 are applied before this returns, then the rates at every multiple of
    /// [`SHAPING_STEP`] (0.5 s, the shared traces' step; a finer trace is sampled) on the
    /// monotonic clock from this call, until the handle is stopped or dropped. Only changed
    /// rates run `tc`. Failures at a step are counted and logged, never fatal; the last rates
    /// applied stay in place after the stop.
    ///
    /// # Errors
    ///
    /// [`Error::Command`] if the first rates cannot be applied; [`Error::Netns`] if the thread
    /// cannot be spawned.
    pub fn start_shaping(&self, up: Trace, down: Trace) -> Result<ShapingHandle> {
        let stats = Arc::new(Mutex::new(ShapingStats::default()));
        let mut shaper = Shaper { inner: Arc::clone(&self.inner), up, down, last: [None, None], stats: Arc::clone(&stats) };
        shaper.step(Duration::ZERO, true)?;
        let start = Instant::now();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("{}-shaper", self.inner.ns_robot))
            .spawn(move || shaper.run(start, &stop_rx))
            .map_err(|source| Error::Netns { what: "spawning the shaping thread".to_string(), source })?;
        Ok(ShapingHandle { stop: Some(stop_tx), thread: Some(thread), stats, _inner: Arc::clone(&self.inner) })
    }
}

/// What a [`ShapingHandle`] has done so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShapingStats {
    /// Steps evaluated (including the one at trace time 0).
    pub steps: u64,
    /// Rate changes applied with `tc` (one per direction whose rate changed at a step).
    pub updates: u64,
    /// `tc` changes that failed.
    pub failures: u64,
    /// The message of the last failure.
    pub last_error: Option<String>,
    /// The last rate applied robot -> edge, Mbit/s as read from the trace (before clamping).
    pub up_mbit: Option<f64>,
    /// The last rate applied edge -> robot, Mbit/s as read from the trace (before clamping).
    pub down_mbit: Option<f64>,
}

/// The trace replay thread's state.
struct Shaper {
    inner: Arc<Inner>,
    up: Trace,
    down: Trace,
    /// Last applied rates (Mbit/s), up and down.
    last: [Option<f64>; 2],
    stats: Arc<Mutex<ShapingStats>>,
}

impl Shaper {
    /// Applies the rates at trace time `t`; with `strict`, the first failure is returned.
    fn step(&mut self, t: Duration, strict: bool) -> Result<()> {
        let mut stats = ShapingStats::default();
        for (k, direction) in [Direction::Up, Direction::Down].into_iter().enumerate() {
            let trace = if direction == Direction::Up { &self.up } else { &self.down };
            let mbit = trace.rate_mbps(t);
            if self.last[k] == Some(mbit) {
                continue;
            }
            match self.inner.set_rate(direction, mbit) {
                Ok(_) => {
                    self.last[k] = Some(mbit);
                    stats.updates += 1;
                }
                Err(e) if strict => return Err(e),
                Err(e) => {
                    tracing::warn!(%direction, mbit, t_s = t.as_secs_f64(), error = %e, "netns shaping step failed");
                    stats.failures += 1;
                    stats.last_error = Some(e.to_string());
                }
            }
        }
        let mut shared = self.stats.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        shared.steps += 1;
        shared.updates += stats.updates;
        shared.failures += stats.failures;
        if stats.last_error.is_some() {
            shared.last_error = stats.last_error;
        }
        shared.up_mbit = self.last[0];
        shared.down_mbit = self.last[1];
        Ok(())
    }

    fn run(mut self, start: Instant, stop: &mpsc::Receiver<()>) {
        let step_ns = SHAPING_STEP.as_nanos();
        let mut k: u128 = 1;
        loop {
            let due = start + Duration::from_nanos(u64::try_from(k * step_ns).unwrap_or(u64::MAX));
            let wait = due.saturating_duration_since(Instant::now());
            match stop.recv_timeout(wait) {
                Err(RecvTimeoutError::Timeout) => {}
                // A message or a dropped sender both mean stop.
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
            let _ = self.step(Duration::from_nanos(u64::try_from(k * step_ns).unwrap_or(u64::MAX)), false);
            // If `tc` was slow and steps were missed, jump to the next one due (no bursts of
            // stale updates).
            let elapsed = start.elapsed().as_nanos();
            k = (k + 1).max(elapsed / step_ns + 1);
        }
    }
}

/// A running trace replay from [`NetnsLink::start_shaping`]; stops when dropped.
#[derive(Debug)]
pub struct ShapingHandle {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<Mutex<ShapingStats>>,
    /// Keeps the namespaces alive while the thread may still run `tc` in them.
    _inner: Arc<Inner>,
}

impl ShapingHandle {
    /// A snapshot of what the replay has done so far.
    pub fn stats(&self) -> ShapingStats {
        self.stats.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Stops the replay (waiting for the thread) and returns the final statistics.
    pub fn stop(mut self) -> ShapingStats {
        self.halt();
        self.stats()
    }

    fn halt(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::warn!("the netns shaping thread panicked");
        }
    }
}

impl Drop for ShapingHandle {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Moves the calling thread into the named network namespace (a handle under
/// `/var/run/netns`, as `ip netns add` creates); see [`NetnsLink::enter`]. Threads spawned by the
/// calling thread afterwards start there too.
///
/// # Errors
///
/// [`Error::Netns`] if the namespace handle cannot be opened or `setns` fails.
pub fn enter_namespace(name: &str) -> Result<()> {
    let path = Path::new(NETNS_DIR).join(name);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
        .map_err(|source| Error::Netns { what: format!("opening {}", path.display()), source })?;
    // SAFETY: the fd is open (owned by `file` for the duration of the call); setns only changes
    // the calling thread's network namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        let source = std::io::Error::last_os_error();
        return Err(Error::Netns { what: format!("setns({}, CLONE_NEWNET)", path.display()), source });
    }
    tracing::debug!(ns = %name, "thread entered network namespace");
    Ok(())
}

/// Namespace names `{stem}{pid}-robot` / `{stem}{pid}-edge` (and `-wire`) of a process: a per-process prefix
/// (at most 13 characters for stems up to 5 characters) so that concurrent runs never collide
/// and [`remove_stale`] can tell whose namespaces were left behind.
pub fn process_prefix(stem: &str) -> String {
    format!("{stem}{}", std::process::id())
}

/// Deletes namespaces named `{stem}{pid}-robot` / `-edge` / `-wire` whose process `pid` no
/// longer runs (left by a run that was killed with SIGKILL, which no guard survives); returns
/// the names deleted. Failures are logged, never fatal.
pub fn remove_stale(stem: &str) -> Vec<String> {
    let Some(ip) = find_tool("ip") else { return Vec::new() };
    let Ok(list) = run(&ip, &["netns", "list"]) else { return Vec::new() };
    let mut removed = Vec::new();
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(rest) = name.strip_prefix(stem) else { continue };
        let Some(pid) = ["-robot", "-edge", "-wire"].iter().find_map(|suffix| rest.strip_suffix(suffix)) else { continue };
        if pid.is_empty() || !pid.chars().all(|c| c.is_ascii_digit()) || Path::new("/proc").join(pid).exists() {
            continue;
        }
        match run(&ip, &["netns", "del", name]) {
            Ok(_) => {
                tracing::warn!(ns = %name, "removed a stale network namespace of a dead process");
                removed.push(name.to_string());
            }
            Err(e) => tracing::warn!(ns = %name, error = %e, "removing a stale network namespace failed"),
        }
    }
    removed
}

/// Set by the handler [`interrupt_flag`] installs.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_interrupt(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs handlers for SIGINT, SIGTERM and SIGHUP that only set the returned flag (instead of
/// ending the process), so that a caller polling it can remove its namespaces and stop its child
/// processes before exiting. Installing twice is harmless.
///
/// # Errors
///
/// [`Error::Netns`] if `sigaction` fails.
pub fn interrupt_flag() -> Result<&'static std::sync::atomic::AtomicBool> {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is valid (empty mask, no flags); the handler only performs
        // an atomic store, which is async-signal-safe.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(Error::Netns { what: format!("sigaction({signal})"), source: std::io::Error::last_os_error() });
        }
    }
    Ok(&INTERRUPTED)
}

/// Adds the named namespaces, after removing stale ones of the same names (left by a crashed
/// run); on a failure, those already added are deleted again.
fn add_namespaces<'a>(ip: &Path, names: impl Iterator<Item = &'a String>) -> Result<()> {
    let mut added: Vec<&String> = Vec::new();
    for ns in names {
        if Path::new(NETNS_DIR).join(ns).exists() {
            tracing::warn!(ns = %ns, "removing a stale network namespace");
            run(ip, &["netns", "del", ns])?;
        }
        if let Err(e) = run(ip, &["netns", "add", ns]) {
            for earlier in added {
                let _ = run(ip, &["netns", "del", earlier]);
            }
            return Err(e);
        }
        added.push(ns);
    }
    Ok(())
}

/// Runs `program args...` and returns its stdout; failures become [`Error::Command`] with the
/// command line and stderr.
fn run(program: &Path, args: &[&str]) -> Result<String> {
    let command = std::iter::once(program.display().to_string()).chain(args.iter().map(|a| a.to_string())).collect::<Vec<_>>().join(" ");
    tracing::trace!(%command, "running");
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| Error::Command { command: command.clone(), stderr: format!("cannot run: {e}") })?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    let stderr = if stderr.is_empty() { format!("exited with {}", output.status) } else { stderr };
    Err(Error::Command { command, stderr })
}

/// Finds an iproute2 tool on `PATH` or in the sbin directories (often missing from a user's PATH).
fn find_tool(name: &str) -> Option<PathBuf> {
    let path_dirs = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default();
    let fallback = ["/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin"].map(PathBuf::from);
    path_dirs.into_iter().chain(fallback).map(|d| d.join(name)).find(|p| p.is_file())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

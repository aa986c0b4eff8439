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
//!
//! # Files
//!
//! - `side.rs`: the two sides and the two directions;
//! - `options.rs`: [`NetnsOptions`] and their checks;
//! - `tbf.rs`: the `tbf` parameters for a rate;
//! - `command.rs`: running `ip` and `tc`;
//! - `namespaces.rs`: adding, entering and cleaning up named namespaces;
//! - `interrupt.rs`: the signal flag that lets a run clean up before it exits;
//! - `inner.rs`: the state a link shares with its shaping handles;
//! - `link.rs`: [`NetnsLink`] itself;
//! - `shaping.rs`: the trace replay ([`NetnsLink::start_shaping`]);
//! - `delay.rs`: the userspace delay line under a latency.

mod command;
mod delay;
mod inner;
mod interrupt;
mod link;
mod namespaces;
mod options;
mod shaping;
mod side;
mod tbf;

pub use delay::{DelayStats, QUEUE_BYTES as DELAY_QUEUE_BYTES};
pub use interrupt::interrupt_flag;
pub use link::NetnsLink;
pub use namespaces::{enter_namespace, process_prefix, remove_stale};
pub use options::NetnsOptions;
pub use shaping::{SHAPING_STEP, ShapingHandle, ShapingStats};
pub use side::{Direction, NetnsSide};
pub use tbf::{MAX_RATE_BITS, MIN_RATE_BITS};

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

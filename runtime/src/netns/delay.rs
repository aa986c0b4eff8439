//! A one-way latency without `netem`: a userspace delay line between two veth pairs.
//!
//! Kernels without `sch_netem` (this project's CI machines among them, whose only shaping
//! qdiscs are `tbf` and `htb`) cannot hold a packet back for a while. So under a latency the
//! robot and the edge are not joined by one veth pair but by two, whose inner ends lie in a
//! third namespace, `{prefix}-wire`, with no address. A [`DelayLine`] there carries every
//! Ethernet frame from one inner end to the other after the latency, in both directions:
//!
//! ```text
//!  robot ns          wire ns ({prefix}-wire)                      edge ns
//!  {prefix}-r ==== wr --> [hold latency] --> we ==== {prefix}-e
//!  (tbf: up)          <-- [hold latency] <--          (tbf: down)
//! ```
//!
//! - Frames are read and written with `AF_PACKET` raw sockets bound to each inner end. Each
//!   socket ignores the frames the line itself sends (`PACKET_IGNORE_OUTGOING`), so nothing
//!   loops.
//! - The sockets carry a `virtio_net_hdr` (`PACKET_VNET_HDR`), so that a TCP super-packet (GSO)
//!   and a checksum left to offload cross as they are: the kernel segments and checksums them
//!   as it would have on the direct pair. Without it a re-sent frame would carry a partial
//!   checksum and be dropped by the receiver.
//! - Order is kept: a direction's frames wait in one FIFO, each until its arrival plus the
//!   latency. A frame that would push a direction past [`QUEUE_BYTES`] in flight is dropped
//!   and counted, as a tail-drop queue does.
//! - Precision: a frame leaves when its sender thread wakes, so a loaded machine adds its
//!   scheduling delay (tens of microseconds idle, a few milliseconds under load) on top.

use std::collections::VecDeque;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The name of the wire namespace's end facing the robot.
pub(super) const WIRE_ROBOT_DEV: &str = "wr";
/// The name of the wire namespace's end facing the edge.
pub(super) const WIRE_EDGE_DEV: &str = "we";

/// The most bytes one direction holds in flight; past it frames are dropped (netem's default
/// queue of 1,000 packets holds 1.5 MB of full frames; this is larger, so that the `tbf`
/// queues, not the line, decide what is dropped at usable rates).
pub const QUEUE_BYTES: u64 = 32 << 20;

/// Largest frame read: a GSO super-packet of 64 KiB and its headers, with room to spare.
const FRAME_BUF: usize = 256 << 10;

/// How often a blocked thread looks at the stop flag.
const POLL: Duration = Duration::from_millis(50);

/// What a [`DelayLine`] has carried, in both directions together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DelayStats {
    /// Frames delivered after the latency.
    pub frames: u64,
    /// Their bytes, virtio header included.
    pub bytes: u64,
    /// Frames dropped because a direction held [`QUEUE_BYTES`].
    pub dropped: u64,
    /// Frames that could not be read whole or written (counted, never fatal).
    pub errors: u64,
}

#[derive(Debug, Default)]
struct Counters {
    frames: AtomicU64,
    bytes: AtomicU64,
    dropped: AtomicU64,
    errors: AtomicU64,
}

/// One direction's frames in flight, each with the instant it may leave.
#[derive(Debug, Default)]
struct Fifo {
    frames: VecDeque<(Instant, Vec<u8>)>,
    bytes: u64,
}

/// The threads carrying frames between the two inner ends; see the [module docs](self). Stops
/// (and joins its threads) when dropped.
#[derive(Debug)]
pub(super) struct DelayLine {
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    threads: Vec<JoinHandle<()>>,
}

impl DelayLine {
    /// Opens a raw socket on each inner end inside the namespace `wire_ns` and starts carrying
    /// frames both ways with `latency`.
    ///
    /// # Errors
    ///
    /// [`Error::Netns`] if the namespace cannot be entered, a socket cannot be opened or bound,
    /// or a thread cannot be spawned.
    pub(super) fn start(wire_ns: &str, latency: Duration) -> Result<DelayLine> {
        let (robot_end, edge_end) = open_ends(wire_ns)?;
        let (robot_end, edge_end) = (Arc::new(robot_end), Arc::new(edge_end));
        let mut line = DelayLine { stop: Arc::new(AtomicBool::new(false)), counters: Arc::default(), threads: Vec::new() };
        line.direction("up", Arc::clone(&robot_end), Arc::clone(&edge_end), latency)?;
        line.direction("down", edge_end, robot_end, latency)?;
        tracing::debug!(ns = %wire_ns, latency_ms = latency.as_secs_f64() * 1e3, "netns delay line started");
        Ok(line)
    }

    /// What the line has carried so far.
    pub(super) fn stats(&self) -> DelayStats {
        let c = &self.counters;
        DelayStats {
            frames: c.frames.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
        }
    }

    /// Starts the reader and the writer of one direction, `from` -> `to`.
    fn direction(&mut self, name: &str, from: Arc<OwnedFd>, to: Arc<OwnedFd>, latency: Duration) -> Result<()> {
        let fifo = Arc::new((Mutex::new(Fifo::default()), Condvar::new()));
        let reader = Reader { from, fifo: Arc::clone(&fifo), latency, stop: Arc::clone(&self.stop), counters: Arc::clone(&self.counters) };
        let writer = Writer { to, fifo, stop: Arc::clone(&self.stop), counters: Arc::clone(&self.counters) };
        self.spawn(format!("netns-delay-{name}-in"), move || reader.run())?;
        self.spawn(format!("netns-delay-{name}-out"), move || writer.run())
    }

    fn spawn(&mut self, name: String, body: impl FnOnce() + Send + 'static) -> Result<()> {
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(body)
            .map_err(|source| Error::Netns { what: "spawning a delay-line thread".to_string(), source })?;
        self.threads.push(thread);
        Ok(())
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for thread in self.threads.drain(..) {
            if thread.join().is_err() {
                tracing::warn!("a netns delay-line thread panicked");
            }
        }
    }
}

/// Reads frames arriving at one inner end and queues them with their departure instant.
struct Reader {
    from: Arc<OwnedFd>,
    fifo: Arc<(Mutex<Fifo>, Condvar)>,
    latency: Duration,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
}

impl Reader {
    fn run(self) {
        let mut buf = vec![0u8; FRAME_BUF];
        while !self.stop.load(Ordering::Relaxed) {
            // SAFETY: `buf` is writable for its length; the fd is open while `self.from` lives.
            // MSG_TRUNC makes the call return the frame's real length.
            let n = unsafe { libc::recv(self.from.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_TRUNC) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted) {
                    self.counters.errors.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(POLL); // the device is going away; the stop flag follows
                }
                continue;
            }
            let len = n as usize; // n >= 0 here
            if len > buf.len() {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.push(buf[..len].to_vec());
        }
    }

    fn push(&self, frame: Vec<u8>) {
        let (lock, ready) = &*self.fifo;
        let mut fifo = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let len = frame.len() as u64;
        if fifo.bytes + len > QUEUE_BYTES {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        fifo.bytes += len;
        fifo.frames.push_back((Instant::now() + self.latency, frame));
        ready.notify_one();
    }
}

/// Sends one direction's queued frames out of the other inner end when they are due.
struct Writer {
    to: Arc<OwnedFd>,
    fifo: Arc<(Mutex<Fifo>, Condvar)>,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
}

impl Writer {
    fn run(self) {
        while let Some(frame) = self.next_due() {
            // SAFETY: `frame` is readable for its length; the fd is open while `self.to` lives.
            let n = unsafe { libc::send(self.to.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
            if n < 0 || n as usize != frame.len() {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.counters.frames.fetch_add(1, Ordering::Relaxed);
            self.counters.bytes.fetch_add(frame.len() as u64, Ordering::Relaxed);
        }
    }

    /// The oldest frame once its departure instant has come; `None` once the line stops.
    fn next_due(&self) -> Option<Vec<u8>> {
        let (lock, ready) = &*self.fifo;
        let mut fifo = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            let wait = match fifo.frames.front() {
                Some((due, _)) => due.saturating_duration_since(Instant::now()),
                None => POLL,
            };
            if wait.is_zero() {
                let (_, frame) = fifo.frames.pop_front()?;
                fifo.bytes -= frame.len() as u64;
                return Some(frame);
            }
            fifo = ready.wait_timeout(fifo, wait.min(POLL)).unwrap_or_else(|poisoned| poisoned.into_inner()).0;
        }
    }
}

/// Opens the raw sockets of both inner ends from a thread that enters `wire_ns` (the sockets
/// stay bound to their devices wherever they are used from).
fn open_ends(wire_ns: &str) -> Result<(OwnedFd, OwnedFd)> {
    let ns = wire_ns.to_string();
    std::thread::scope(|s| {
        s.spawn(move || {
            super::namespaces::enter_namespace(&ns)?;
            Ok((raw_socket(WIRE_ROBOT_DEV)?, raw_socket(WIRE_EDGE_DEV)?))
        })
        .join()
        .unwrap_or_else(|_| Err(Error::Netns { what: "opening the delay line".to_string(), source: std::io::Error::other("panicked") }))
    })
}

/// An `AF_PACKET` socket for every protocol, bound to `device`, with virtio headers, ignoring
/// its own outgoing frames, with a receive timeout of [`POLL`].
fn raw_socket(device: &str) -> Result<OwnedFd> {
    let fail = |what: &str| Error::Netns { what: format!("{what} on {device}"), source: std::io::Error::last_os_error() };
    let all = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2) call; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::c_int::from(all)) };
    if fd < 0 {
        return Err(fail("socket(AF_PACKET)"));
    }
    // SAFETY: `fd` is a fresh socket that nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    set_option(&socket, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &1i32).map_err(|_| fail("PACKET_VNET_HDR"))?;
    set_option(&socket, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &1i32).map_err(|_| fail("PACKET_IGNORE_OUTGOING"))?;
    let timeout = libc::timeval { tv_sec: 0, tv_usec: POLL.as_micros() as libc::suseconds_t };
    set_option(&socket, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &timeout).map_err(|_| fail("SO_RCVTIMEO"))?;
    set_option(&socket, libc::SOL_SOCKET, libc::SO_RCVBUF, &(8i32 << 20)).map_err(|_| fail("SO_RCVBUF"))?;
    let name = CString::new(device).map_err(|_| Error::InvalidConfig { what: format!("device name {device:?}") })?;
    // SAFETY: `name` is a valid C string.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return Err(fail("if_nametoindex"));
    }
    // SAFETY: a zeroed sockaddr_ll is valid; the fields set below make it a bind address.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = all;
    addr.sll_ifindex = index as i32;
    let len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: `addr` is a valid sockaddr_ll of `len` bytes.
    if unsafe { libc::bind(socket.as_raw_fd(), (&raw const addr).cast(), len) } != 0 {
        return Err(fail("bind"));
    }
    Ok(socket)
}

/// `setsockopt(socket, level, name, value)`.
fn set_option<T>(socket: &OwnedFd, level: libc::c_int, name: libc::c_int, value: &T) -> std::io::Result<()> {
    let len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` points to `len` readable bytes for the duration of the call.
    let rc = unsafe { libc::setsockopt(socket.as_raw_fd(), level, name, (value as *const T).cast(), len) };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

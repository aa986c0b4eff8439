//! These tests need root and iproute2; without them they skip with a loud notice, or fail under `CI`.
//! Every test uses its own prefix, so they run in parallel; `NetnsLink`'s Drop cleans up even
//! when an assertion fails.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::command::{find_tool, run};
use super::tbf::TbfParams;
use super::*;
use crate::error::Error;
use crate::trace::{Trace, TraceEnd};

const IO_TIMEOUT: Duration = Duration::from_secs(15);

/// A prefix unique to this process and test: `lopt{pid}{n}` (at most 13 characters).
fn prefix() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("lopt{}{}", std::process::id() % 10_000_000, N.fetch_add(1, Ordering::Relaxed))
}

fn available() -> bool {
    NetnsLink::available_for_test("netns test")
}

fn ns_exists(name: &str) -> bool {
    let out = run(&find_tool("ip").unwrap(), &["netns", "list"]).unwrap();
    out.lines().any(|l| l.split_whitespace().next() == Some(name))
}

/// Accepts one connection on `listener` (non-blocking poll, bounded).
fn accept(listener: &TcpListener) -> TcpStream {
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
                s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
                return s;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).unwrap();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    s
}

/// Sends `bytes` robot -> edge over TCP; returns the receiver's time from first byte to EOF.
fn transfer(link: &NetnsLink, bytes: usize) -> Duration {
    let (port_tx, port_rx) = mpsc::channel();
    std::thread::scope(|s| {
        let server = s.spawn(|| {
            link.enter(NetnsSide::Edge).unwrap();
            let listener = TcpListener::bind((link.address(NetnsSide::Edge), 0)).unwrap();
            port_tx.send(listener.local_addr().unwrap()).unwrap();
            let mut stream = accept(&listener);
            let mut buf = vec![0u8; 64 * 1024];
            let mut got = 0;
            let mut t0 = None;
            loop {
                let n = stream.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                t0.get_or_insert_with(Instant::now);
                got += n;
            }
            assert_eq!(got, bytes);
            t0.unwrap().elapsed()
        });
        s.spawn(move || {
            link.enter(NetnsSide::Robot).unwrap();
            let addr = port_rx.recv_timeout(IO_TIMEOUT).unwrap();
            let mut stream = connect(addr);
            stream.write_all(&vec![7u8; bytes]).unwrap();
        });
        server.join().unwrap()
    })
}

/// The shaped transfer took about `want`: never more than 20% faster (the rate limit holds: no
/// load makes a transfer faster), and at most 2.5x slower (a loaded host delays the endpoints,
/// but a rate off by a unit or a missing rate change still fails).
fn assert_shaped(got: Duration, want: Duration) {
    let (g, w) = (got.as_secs_f64(), want.as_secs_f64());
    assert!(g >= 0.8 * w && g <= 2.5 * w, "took {got:?}, want {want:?} (between 0.8x and 2.5x)");
}

#[test]
fn netns_create_and_drop() {
    if !available() {
        return;
    }
    let link = NetnsLink::create(NetnsOptions::default().with_prefix(prefix())).unwrap();
    let (robot, edge) = (link.namespace(NetnsSide::Robot).to_string(), link.namespace(NetnsSide::Edge).to_string());
    assert!(ns_exists(&robot) && ns_exists(&edge), "{robot} / {edge} missing");
    assert_eq!(link.address(NetnsSide::Robot), Ipv4Addr::new(10, 77, 0, 1));
    assert_eq!(link.address(NetnsSide::Edge), Ipv4Addr::new(10, 77, 0, 2));

    // `command` runs inside the namespace: the edge sees its address, its veth end and lo up.
    let out = link.command(NetnsSide::Edge, "ip").args(["-o", "addr", "show"]).output().unwrap();
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.contains("10.77.0.2/24") && out.contains(link.device(NetnsSide::Edge)), "{out}");
    assert!(out.contains("127.0.0.1/8"), "lo not up: {out}");
    assert!(!out.contains("10.77.0.1/"), "{out}");
    let qdisc = link.qdisc_show(NetnsSide::Robot).unwrap();
    assert!(qdisc.contains("tbf 10: root") && qdisc.contains("rate 1Gbit"), "{qdisc}");

    drop(link);
    assert!(!ns_exists(&robot) && !ns_exists(&edge), "namespaces left after drop");
}

#[test]
fn netns_bad_options_and_failing_commands() {
    for bad in ["", "much-too-long-prefix", "a b", "x/y"] {
        let err = NetnsLink::create(NetnsOptions::default().with_prefix(bad)).unwrap_err();
        assert!(matches!(err, Error::InvalidConfig { .. }), "{bad:?}: {err}");
    }
    let same = NetnsOptions::default().with_addrs(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 1));
    assert!(matches!(NetnsLink::create(same), Err(Error::InvalidConfig { .. })));
    let Some(tc) = find_tool("tc") else {
        eprintln!("\n!!!!!!!! netns command-error test SKIPPED: no `tc` !!!!!!!!\n");
        return;
    };
    let err = run(&tc, &["qdisc", "show", "dev", "lop-no-such-dev"]).unwrap_err();
    match &err {
        Error::Command { command, stderr } => {
            assert!(command.ends_with("tc qdisc show dev lop-no-such-dev"), "{command}");
            assert!(!stderr.is_empty());
        }
        e => panic!("{e}"),
    }
    assert!(err.to_string().contains("lop-no-such-dev"), "{err}");
}

#[test]
fn netns_tbf_params() {
    let p = TbfParams::for_mbit(8.0);
    assert_eq!(p, TbfParams { rate_bits: 8_000_000, burst_bytes: 3200, limit_bytes: 100_000 });
    // Outages and nonsense clamp to the floor; the queue stays at 4 frames.
    for mbit in [0.0, -1.0, f64::NAN] {
        assert_eq!(TbfParams::for_mbit(mbit), TbfParams { rate_bits: MIN_RATE_BITS, burst_bytes: 3200, limit_bytes: 6056 });
    }
    let fast = TbfParams::for_mbit(1000.0);
    assert_eq!(fast, TbfParams { rate_bits: 1_000_000_000, burst_bytes: 250_000, limit_bytes: 12_500_000 });
    assert_eq!(TbfParams::for_mbit(1e9).rate_bits, MAX_RATE_BITS);
}

#[test]
fn netns_throughput_follows_rate() {
    if !available() {
        return;
    }
    let link = NetnsLink::create(NetnsOptions::default().with_prefix(prefix()).with_initial_mbit(8.0)).unwrap();
    let bytes = 1_000_000;
    // 1 MB of payload is ~1.046 MB of Ethernet frames: 1.05 s at 8 Mbit/s.
    let slow = transfer(&link, bytes);
    eprintln!("netns: 1 MB at 8 Mbit/s took {slow:?} ({:.2} Mbit/s goodput)", bytes as f64 * 8e-6 / slow.as_secs_f64());
    assert_shaped(slow, Duration::from_secs(1));

    assert_eq!(link.set_rate(Direction::Up, 16.0).unwrap(), 16_000_000);
    let fast = transfer(&link, bytes);
    eprintln!("netns: 1 MB at 16 Mbit/s took {fast:?} ({:.2} Mbit/s goodput)", bytes as f64 * 8e-6 / fast.as_secs_f64());
    assert_shaped(fast, Duration::from_millis(500));
    assert!(slow.as_secs_f64() > 1.4 * fast.as_secs_f64(), "doubling the rate: {slow:?} -> {fast:?}");

    // An outage is clamped to the floor, never passed to tc as 0.
    assert_eq!(link.set_rate(Direction::Down, 0.0).unwrap(), MIN_RATE_BITS);
    let qdisc = link.qdisc_show(NetnsSide::Edge).unwrap();
    assert!(qdisc.contains("rate 8Kbit"), "{qdisc}");
    assert!(matches!(link.set_rate(Direction::Down, f64::NAN), Err(Error::InvalidConfig { .. })));
}

/// Robot-to-edge round trips over the link: the time to connect and that of a 1-byte echo.
fn round_trips(link: &NetnsLink) -> (Duration, Duration) {
    let (port_tx, port_rx) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            link.enter(NetnsSide::Edge).unwrap();
            let listener = TcpListener::bind((link.address(NetnsSide::Edge), 0)).unwrap();
            port_tx.send(listener.local_addr().unwrap()).unwrap();
            let mut stream = accept(&listener);
            let mut b = [0u8; 1];
            stream.read_exact(&mut b).unwrap();
            stream.write_all(&b).unwrap();
        });
        let client = s.spawn(move || {
            link.enter(NetnsSide::Robot).unwrap();
            let addr = port_rx.recv_timeout(IO_TIMEOUT).unwrap();
            let t0 = Instant::now();
            let mut stream = connect(addr);
            stream.set_nodelay(true).unwrap();
            let t1 = Instant::now();
            stream.write_all(&[42]).unwrap();
            let mut b = [0u8; 1];
            stream.read_exact(&mut b).unwrap();
            assert_eq!(b, [42]);
            (t1 - t0, t1.elapsed())
        });
        client.join().unwrap()
    })
}

#[test]
fn netns_latency() {
    if !available() {
        return;
    }
    let opts = NetnsOptions::default().with_prefix(prefix()).with_latency(Duration::from_millis(20));
    let link = NetnsLink::create(opts).unwrap();
    let wire = format!("{}-wire", link.namespace(NetnsSide::Robot).trim_end_matches("-robot"));
    assert!(ns_exists(&wire), "no {wire}");
    let (connect_rtt, echo_rtt) = round_trips(&link);
    eprintln!("netns: 20 ms one-way latency: connect {connect_rtt:?}, 1-byte echo {echo_rtt:?}");
    // Both round trips cross the line twice; a loaded host only adds to them.
    assert!(connect_rtt >= Duration::from_millis(40) && echo_rtt >= Duration::from_millis(40));
    assert!(echo_rtt < Duration::from_millis(200), "{echo_rtt:?}");
    let stats = link.delay_stats().unwrap();
    assert!(stats.frames >= 6 && stats.dropped == 0, "{stats:?}"); // SYN, SYN-ACK, ACK, data and echo
    drop(link);
    assert!(!ns_exists(&wire), "the wire namespace outlived the link");

    // Without a latency the sides are joined directly: round trips well under the 40 ms above.
    let direct = NetnsLink::create(NetnsOptions::default().with_prefix(prefix())).unwrap();
    assert!(direct.delay_stats().is_none());
    let (_, echo_direct) = round_trips(&direct);
    eprintln!("netns: no latency: 1-byte echo {echo_direct:?}");
    assert!(echo_direct < echo_rtt, "{echo_direct:?} against {echo_rtt:?} under 20 ms each way");
}

#[test]
fn netns_latency_keeps_the_rate_and_carries_bulk_tcp() {
    if !available() {
        return;
    }
    // Bulk TCP at the default 1 Gbit/s crosses the line as GSO super-packets with offloaded
    // checksums: without the virtio headers they would be dropped and this would time out.
    let opts = NetnsOptions::default().with_prefix(prefix()).with_latency(Duration::from_millis(10));
    let link = NetnsLink::create(opts).unwrap();
    let fast = transfer(&link, 4_000_000);
    eprintln!("netns: 4 MB at 1 Gbit/s, 10 ms each way, took {fast:?}");
    assert!(fast < Duration::from_secs(5), "{fast:?}");

    // The tbf still sets the rate: 1 MB at 8 Mbit/s takes about 1.05 s, plus the latency.
    link.set_rate(Direction::Up, 8.0).unwrap();
    let slow = transfer(&link, 1_000_000);
    eprintln!("netns: 1 MB at 8 Mbit/s, 10 ms each way, took {slow:?}");
    assert_shaped(slow, Duration::from_secs(1));
    let stats = link.delay_stats().unwrap();
    eprintln!("netns: delay line {stats:?}");
    assert!(stats.bytes >= 5_000_000 && stats.dropped == 0, "{stats:?}");
}

#[test]
fn netns_shaping_follows_trace() {
    if !available() {
        return;
    }
    let link = NetnsLink::create(NetnsOptions::default().with_prefix(prefix())).unwrap();
    let up = Trace::from_samples(&[(0.0, 4.0), (0.5, 16.0)]).unwrap().with_end(TraceEnd::Hold);
    let down = Trace::constant(100.0).unwrap();
    let shaping = link.start_shaping(up, down).unwrap();
    // The rates at trace time 0 are in place when start_shaping returns.
    let robot = link.qdisc_show(NetnsSide::Robot).unwrap();
    assert!(robot.contains("rate 4Mbit"), "{robot}");
    let edge = link.qdisc_show(NetnsSide::Edge).unwrap();
    assert!(edge.contains("rate 100Mbit"), "{edge}");
    assert_eq!(shaping.stats().updates, 2);

    std::thread::sleep(Duration::from_millis(800));
    let robot = link.qdisc_show(NetnsSide::Robot).unwrap();
    assert!(robot.contains("rate 16Mbit"), "{robot}");
    let fast = transfer(&link, 1_000_000);
    eprintln!("netns: 1 MB after the trace stepped to 16 Mbit/s took {fast:?}");
    assert_shaped(fast, Duration::from_millis(500));

    let stats = shaping.stop();
    eprintln!("netns: shaping stats {stats:?}");
    assert_eq!(stats.updates, 3, "{stats:?}"); // up: 4 then 16; down: 100 once
    assert!(stats.steps >= 3, "{stats:?}");
    assert_eq!((stats.failures, stats.last_error.as_deref()), (0, None));
    assert_eq!((stats.up_mbit, stats.down_mbit), (Some(16.0), Some(100.0)));
}

#[test]
fn netns_shaping_keeps_namespaces_alive_and_stops_on_drop() {
    if !available() {
        return;
    }
    let link = NetnsLink::create(NetnsOptions::default().with_prefix(prefix())).unwrap();
    let robot = link.namespace(NetnsSide::Robot).to_string();
    let trace = Trace::from_samples(&[(0.0, 1.0), (0.5, 2.0)]).unwrap(); // loops: a change every step
    let shaping = link.start_shaping(trace.clone(), trace).unwrap();
    drop(link);
    assert!(ns_exists(&robot), "a live ShapingHandle keeps the namespaces");
    std::thread::sleep(Duration::from_millis(1100));
    let stats = shaping.stats();
    assert!(stats.updates >= 6 && stats.failures == 0, "{stats:?}");
    let t0 = Instant::now();
    drop(shaping);
    assert!(t0.elapsed() < Duration::from_millis(300), "drop must not wait for the next step");
    assert!(!ns_exists(&robot), "namespaces left after the last owner dropped");
}

#[test]
fn netns_create_removes_stale_namespaces() {
    if !available() {
        return;
    }
    let p = prefix();
    let crashed = NetnsLink::create(NetnsOptions::default().with_prefix(p.clone())).unwrap();
    let (robot, edge) = (crashed.namespace(NetnsSide::Robot).to_string(), crashed.namespace(NetnsSide::Edge).to_string());
    std::mem::forget(crashed); // as if the process had died: nothing deleted
    assert!(ns_exists(&robot) && ns_exists(&edge));
    let link = NetnsLink::create(NetnsOptions::default().with_prefix(p).with_initial_mbit(8.0)).unwrap();
    assert!(ns_exists(&robot) && ns_exists(&edge));
    assert!(link.qdisc_show(NetnsSide::Robot).unwrap().contains("rate 8Mbit"));
    drop(link);
    assert!(!ns_exists(&robot) && !ns_exists(&edge));
}

//! A robot exposes nothing by default: `lop_robot` started while no edge is up (its client
//! falls back to a peer that keeps dialling, or `edge.mode: peer` from the start) holds no
//! listening socket beyond loopback. Its ROS session and embedded router are on loopback here,
//! as the robot's own router is on a robot. The sockets are read from `/proc`, as `ss` reads
//! them; the reader is checked on a socket of this test's own that listens on every interface,
//! and on `lop_robot` asked to listen on every interface (`edge.listen`).
#![allow(clippy::unwrap_used)]

use crate::common::free_port;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long `lop_robot` may take to load the model, plan its table and log `ready`.
const START_LIMIT: Duration = Duration::from_secs(180);

/// A socket a process holds that others can reach: listening TCP, or bound UDP.
#[derive(Debug, Clone, PartialEq)]
struct Exposed {
    table: &'static str,
    local: String,
}

/// Whether `/proc/net` hex address `addr` (without its port) is a loopback address.
fn is_loopback(addr: &str) -> bool {
    match addr.len() {
        // IPv4, one little-endian word: 127.x.y.z ends in 7F.
        8 => addr.ends_with("7F"),
        // IPv6, four little-endian words: ::1, or ::ffff:127.x.y.z.
        32 => addr == "00000000000000000000000001000000" || (addr.starts_with("0000000000000000FFFF0000") && addr.ends_with("7F")),
        _ => false,
    }
}

/// The sockets of process `pid` that listen (TCP) or are bound (UDP) on an address other than
/// loopback.
fn exposed_sockets(pid: u32) -> Vec<Exposed> {
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(String::from))
        .collect();
    let mut out = vec![];
    for (table, listening_state) in [("tcp", Some("0A")), ("tcp6", Some("0A")), ("udp", None), ("udp6", None)] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else { continue };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else { continue };
            let listens = listening_state.is_none_or(|s| *state == s);
            let addr = local.split(':').next().unwrap_or_default();
            if listens && inodes.contains(*inode) && !is_loopback(addr) {
                out.push(Exposed { table, local: local.to_string() });
            }
        }
    }
    out
}

/// Starts `lop_robot` with the edge at a port nobody listens on, `mode` as the edge mode, and
/// its log (stdout) and errors (stderr) read line by line into the returned channel.
fn start_robot(dir: &std::path::Path, mode: &str, listen: &str) -> (Child, mpsc::Receiver<String>) {
    let yaml = dir.join(format!("robot-{mode}-{}.yaml", listen.len()));
    let (ros_port, edge_port) = (free_port(), free_port());
    std::fs::write(
        &yaml,
        format!(
            "lop_robot:\n  ros__parameters:\n    domain_id: 77\n    router_endpoint: \"tcp/127.0.0.1:{ros_port}\"\n    embedded_router: true\n\
             \x20   edge:\n      endpoint: \"tcp/127.0.0.1:{edge_port}\"\n      mode: \"{mode}\"\n      listen: \"{listen}\"\n\
             \x20   model:\n      source: \"zoo:resnet18@64x64\"\n      id: \"resnet18\"\n\
             \x20   table:\n      buckets: \"0,2\"\n    cache_dir: \"{}\"\n",
            dir.join("cache").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lop_robot"))
        .arg("--config")
        .arg(&yaml)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let out: Box<dyn std::io::Read + Send> = Box::new(child.stdout.take().unwrap());
    let err: Box<dyn std::io::Read + Send> = Box::new(child.stderr.take().unwrap());
    for stream in [out, err] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    (child, rx)
}

/// Waits for a line containing `pattern`; every line read goes into `seen`.
fn wait_for(rx: &mpsc::Receiver<String>, pattern: &str, seen: &mut Vec<String>) -> bool {
    let t0 = Instant::now();
    while let Some(left) = START_LIMIT.checked_sub(t0.elapsed()) {
        match rx.recv_timeout(left) {
            Ok(line) => {
                let hit = line.contains(pattern);
                seen.push(line);
                if hit {
                    return true;
                }
            }
            Err(_) => return false,
        }
    }
    false
}

#[test]
fn the_socket_reader_sees_a_socket_on_every_interface() {
    let open = TcpListener::bind("0.0.0.0:0").unwrap();
    let local = TcpListener::bind("127.0.0.1:0").unwrap();
    let exposed = exposed_sockets(std::process::id());
    let port = format!(":{:04X}", open.local_addr().unwrap().port());
    let local_port = format!(":{:04X}", local.local_addr().unwrap().port());
    assert!(exposed.iter().any(|e| e.table == "tcp" && e.local.ends_with(&port)), "{exposed:?}");
    assert!(!exposed.iter().any(|e| e.local.ends_with(&local_port)), "{exposed:?}");
    assert!(is_loopback("0100007F") && is_loopback("00000000000000000000000001000000"));
    assert!(is_loopback("0000000000000000FFFF00000100007F") && !is_loopback("00000000") && !is_loopback(&"0".repeat(32)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_robot_whose_edge_is_down_listens_on_loopback_only() {
    let _heavy = crate::HEAVY.lock().await;
    let dir = std::env::temp_dir().join(format!("lop-exposure-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The last case asks for a port on every interface: the same reading must then find it.
    for (mode, listen, first) in [("client", "", "no edge router yet"), ("peer", "", "plaintext"), ("peer", "tcp/0.0.0.0:0", "plaintext")] {
        let (mut child, rx) = start_robot(&dir, mode, listen);
        let mut seen = vec![];
        let fell_back = wait_for(&rx, first, &mut seen);
        let ready = fell_back && wait_for(&rx, "ready", &mut seen);
        let exposed = exposed_sockets(child.id());
        let _ = child.kill();
        let _ = child.wait();
        let log = seen.join("\n");
        assert!(ready, "{mode}: lop_robot did not log '{first}' and then 'ready' within {START_LIMIT:?}:\n{log}");
        assert!(log.contains("plaintext"), "{mode}: no warning about the plaintext edge link:\n{log}");
        if listen.is_empty() {
            assert!(exposed.is_empty(), "{mode}: lop_robot listens beyond loopback: {exposed:?}\n{log}");
        } else {
            assert!(exposed.iter().any(|e| e.table == "tcp"), "{mode} with edge.listen {listen}: no socket found:\n{log}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

//! Free loopback ports for the processes that tests, benchmarks and demos start on one machine
//! (Zenoh routers, edges), which must not collide when they run in parallel.

use std::sync::{Mutex, PoisonError};

/// A loopback TCP port free now and never returned before by this process: parallel tests that
/// each ask for a port could otherwise be given the same just-released one by the kernel.
///
/// # Panics
/// When no loopback socket can be bound at all (the machine has no loopback).
pub fn free_loopback_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    loop {
        #[allow(clippy::expect_used)] // no loopback at all: nothing on this machine can run
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("binding a loopback port");
        let mut given = GIVEN.lock().unwrap_or_else(PoisonError::into_inner);
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

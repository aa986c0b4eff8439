//! systemd's service notifications (`Type=notify`): `READY=1` once the edge serves, `STOPPING=1`
//! when it begins to shut down, and `WATCHDOG=1` from the serving runtime while its heartbeat is
//! fresh, so that systemd kills and restarts an edge whose serving loop hangs (`WatchdogSec=`).
//!
//! The protocol is one datagram per message on the Unix socket named by `$NOTIFY_SOCKET` (a path,
//! or `@name` in the abstract namespace); `$WATCHDOG_USEC` gives the watchdog's period. Without
//! `$NOTIFY_SOCKET` (not started by systemd) every call is a no-op.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Where notifications go, if anywhere.
#[derive(Debug)]
pub struct Notifier {
    target: Option<(UnixDatagram, std::os::unix::net::SocketAddr)>,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// The notifier of this process's environment (`NOTIFY_SOCKET`, `WATCHDOG_USEC`,
    /// `WATCHDOG_PID`: a watchdog meant for another process is ignored).
    pub fn from_env() -> Notifier {
        let target = std::env::var_os("NOTIFY_SOCKET").and_then(|s| {
            let addr = socket_addr(&s.to_string_lossy()).map_err(|e| tracing::warn!(error = %e, "NOTIFY_SOCKET unusable")).ok()?;
            let sock = UnixDatagram::unbound().map_err(|e| tracing::warn!(error = %e, "cannot open a notification socket")).ok()?;
            // Never block the serving runtime on a full receiver: a notification that does
            // not fit is dropped (and the next watchdog ping tries again).
            sock.set_nonblocking(true).map_err(|e| tracing::warn!(error = %e, "cannot make the notification socket non-blocking")).ok()?;
            Some((sock, addr))
        });
        let for_us = std::env::var("WATCHDOG_PID").ok().and_then(|p| p.parse::<u32>().ok()).is_none_or(|p| p == std::process::id());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.parse::<u64>().ok())
            .filter(|&u| u > 0 && for_us && target.is_some())
            .map(Duration::from_micros);
        Notifier { target, watchdog }
    }

    /// The watchdog's period, when systemd runs one for this process.
    pub fn watchdog(&self) -> Option<Duration> {
        self.watchdog
    }

    /// Sends `state` (`READY=1`, `WATCHDOG=1`, `STOPPING=1`, `STATUS=...`) without blocking;
    /// errors (a full receiver, systemd gone during shutdown) are logged, never fatal.
    pub fn notify(&self, state: &str) {
        if let Some((sock, addr)) = &self.target
            && let Err(e) = sock.send_to_addr(state.as_bytes(), addr)
        {
            tracing::debug!(error = %e, state, "systemd notification not sent");
        }
    }
}

/// The address of `$NOTIFY_SOCKET`: a filesystem path, or `@name` in the abstract namespace.
fn socket_addr(s: &str) -> std::io::Result<std::os::unix::net::SocketAddr> {
    match s.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt as _;
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        }
        None => std::os::unix::net::SocketAddr::from_pathname(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages arrive as datagrams; a receiver that stops reading never blocks the sender.
    #[test]
    fn notifications_arrive_and_a_full_receiver_never_blocks() {
        let dir = std::env::temp_dir().join(format!("lop-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("sock");
        let rx = UnixDatagram::bind(&path).expect("bind");
        let sock = UnixDatagram::unbound().expect("socket");
        sock.set_nonblocking(true).expect("non-blocking");
        let n = Notifier { target: Some((sock, socket_addr(path.to_str().expect("utf8")).expect("addr"))), watchdog: None };
        n.notify("READY=1");
        let mut buf = [0u8; 64];
        let got = rx.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..got], b"READY=1");
        let t0 = std::time::Instant::now();
        for _ in 0..1000 {
            n.notify("WATCHDOG=1");
        }
        assert!(t0.elapsed() < Duration::from_secs(2), "a full receiver blocked the sender");
        assert!(socket_addr("@lop-test").is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

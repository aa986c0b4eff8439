//! Where the edge listens and how securely: the Zenoh endpoints actually listened on
//! ([`EdgeConfig::listen_plan`], secure by default), the session's security settings and Zenoh
//! configuration, and the operators' HTTP address ([`EdgeConfig::metrics_addr`]).

use lop_runtime::security::{AccessPolicy, Login, Security, TlsFiles, endpoint_protocol, is_loopback_endpoint};
use lop_runtime::zenoh_link::{ZenohConfig, ZenohMode};

use super::error::ConfigError;
use super::schema::EdgeConfig;
use super::sections::Mode;

/// The endpoints an edge listens on and the warnings to log at start-up about them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenPlan {
    /// The endpoints listened on.
    pub listen: Vec<String>,
    /// What start-up says (loopback only, insecure, no access control).
    pub warnings: Vec<String>,
}

/// The loopback endpoints replacing one on every address (`tcp/[::]:P`, `tcp/0.0.0.0:P`).
fn loopback_of_unspecified(endpoint: &str) -> Option<Vec<String>> {
    let (proto, rest) = endpoint.split_once('/')?;
    let (addr, tail) = match rest.find(['?', '#']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (host, port) = addr.rsplit_once(':')?;
    let ip: std::net::IpAddr = host.trim_start_matches('[').trim_end_matches(']').parse().ok()?;
    if !ip.is_unspecified() {
        return None;
    }
    Some(if ip.is_ipv4() {
        vec![format!("{proto}/127.0.0.1:{port}{tail}")]
    } else {
        vec![format!("{proto}/127.0.0.1:{port}{tail}"), format!("{proto}/[::1]:{port}{tail}")]
    })
}

impl EdgeConfig {
    /// Where the operators' endpoints listen (`None`: turned off).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `metrics.listen` for an address that does not parse, or
    /// one beyond loopback without `metrics.allow_remote_metrics`.
    pub fn metrics_addr(&self) -> Result<Option<std::net::SocketAddr>, ConfigError> {
        let m = &self.metrics;
        if !m.enabled {
            return Ok(None);
        }
        let addr: std::net::SocketAddr =
            m.listen.parse().map_err(|e| self.invalid("metrics.listen", format!("'{}' is not an address:port ({e})", m.listen)))?;
        if !addr.ip().is_loopback() && !m.allow_remote_metrics {
            return Err(self.invalid(
                "metrics.listen",
                format!(
                    "{addr} is beyond loopback and the endpoints carry no authentication: set metrics.allow_remote_metrics: true to serve them there"
                ),
            ));
        }
        Ok(Some(addr))
    }
    /// The Zenoh session configuration: the endpoints actually listened on
    /// ([`listen_plan`](Self::listen_plan)) and the security settings.
    ///
    /// # Errors
    /// A listen endpoint refused by [`listen_plan`](Self::listen_plan); an unreadable password
    /// file; `user` without `password_file` or the reverse.
    pub fn zenoh_config(&self) -> Result<ZenohConfig, ConfigError> {
        let mode = match self.zenoh.mode {
            Mode::Router => ZenohMode::Router,
            Mode::Peer => ZenohMode::Peer,
            Mode::Client => ZenohMode::Client,
        };
        Ok(ZenohConfig {
            mode,
            listen: self.listen_plan()?.listen,
            connect: self.zenoh.connect.clone(),
            multicast_scouting: self.zenoh.multicast_scouting,
            security: self.security()?,
            // A frame's header plus Zenoh's own framing: anything longer is a lie about its length.
            max_message_bytes: Some(self.max_frame_bytes as usize + 4096),
        })
    }

    /// The security settings of the edge's Zenoh session.
    ///
    /// # Errors
    /// `user` without `password_file` (or the reverse), an unreadable password file, an invalid
    /// robot id in `access.robots`.
    pub fn security(&self) -> Result<Security, ConfigError> {
        let z = &self.zenoh;
        let login = match (&z.user, &z.password_file) {
            (Some(user), Some(file)) => Some(Login::from_file(user, file).map_err(|e| self.invalid("zenoh.password_file", e.to_string()))?),
            (None, None) => None,
            _ => return Err(self.invalid("zenoh.user", "give both user and password_file, or neither")),
        };
        let access = z.access.as_ref().map(|a| AccessPolicy { robots: a.robots.clone(), edges: a.edges.clone() });
        if let Some(a) = &access {
            a.to_json().map_err(|e| self.invalid("zenoh.access", e.to_string()))?;
        }
        Ok(Security {
            tls: z.tls.as_ref().map(|t| TlsFiles { ca: t.ca.clone(), cert: t.cert.clone(), key: t.key.clone() }),
            login,
            users_file: z.users_file.clone(),
            access,
        })
    }

    /// Where the edge listens, and what to say about it at start-up. Secure by default: without
    /// TLS, an endpoint on every address (`tcp/[::]:7447`) becomes loopback only, and one on a
    /// network address is refused, unless `allow_insecure` is set.
    ///
    /// # Errors
    /// A `tls/` endpoint without `zenoh.tls`; a non-TLS endpoint on a network address without
    /// `allow_insecure`.
    pub fn listen_plan(&self) -> Result<ListenPlan, ConfigError> {
        let z = &self.zenoh;
        let mut plan = ListenPlan { listen: Vec::new(), warnings: Vec::new() };
        for ep in &z.listen {
            let proto = endpoint_protocol(ep);
            if matches!(proto, "tls" | "quic") {
                if z.tls.is_none() {
                    return Err(self.invalid("zenoh.listen", format!("{ep} needs zenoh.tls (ca, cert, key; `lop certs` makes them)")));
                }
                plan.listen.push(ep.clone());
            } else if is_loopback_endpoint(ep) || z.allow_insecure {
                if !is_loopback_endpoint(ep) {
                    plan.warnings.push(format!(
                        "insecure: listening on {ep} without TLS (allow_insecure): anyone on the network can send frames to this edge"
                    ));
                }
                plan.listen.push(ep.clone());
            } else if let Some(local) = loopback_of_unspecified(ep) {
                plan.warnings.push(format!(
                    "listening on {} instead of {ep}: loopback only, since this endpoint has no TLS. Robots on other hosts \
                     cannot connect: give zenoh.tls and a tls/ endpoint (`lop certs`), or set zenoh.allow_insecure: true",
                    local.join(" and ")
                ));
                plan.listen.extend(local);
            } else {
                return Err(self.invalid(
                    "zenoh.listen",
                    format!("{ep} is reachable from the network without TLS: use a tls/ endpoint with zenoh.tls, or set zenoh.allow_insecure: true"),
                ));
            }
        }
        let security = self.security()?;
        if security.authenticates() && z.access.is_none() {
            if !z.allow_shared_keys {
                return Err(self.invalid(
                    "zenoh.access",
                    "authentication is on but no robot is confined to its own keys: list the robots in zenoh.access.robots \
                     (each may then use only lop/v1/<robot>/), or set zenoh.allow_shared_keys: true to let every \
                     authenticated robot use every robot's keys",
                ));
            }
            plan.warnings.push("no zenoh.access (allow_shared_keys): every authenticated robot may use every robot's keys".into());
        }
        Ok(plan)
    }
}

//! The sessions the nodes open: the local ROS session ([`RosSettings`]) and the Zenoh session to
//! the edge ([`EdgeSettings`]: endpoint, mode, listen endpoints, TLS and password), checked when
//! read so that a bad one is a start-up error.

use std::path::Path;

use lop_runtime::security::{Login, Security, TlsFiles, endpoint_protocol};
use lop_runtime::zenoh_link::{ZenohConfig, ZenohMode};

use super::values::invalid;
use crate::error::Result;
use crate::params::Params;

/// The longest message the robot's edge session reassembles: the protocol's longest frame plus
/// Zenoh's own framing, as the edge's default `max_frame_bytes`.
pub const MAX_EDGE_MESSAGE_BYTES: usize = lop_msgs::protocol::DEFAULT_MAX_FRAME_LEN as usize + 4096;

/// A comma-separated list of endpoints, blanks dropped.
fn endpoint_list(s: &str) -> Vec<String> {
    s.split(',').map(str::trim).filter(|e| !e.is_empty()).map(String::from).collect()
}

/// The local ROS session (rmw_zenoh model: every node a Zenoh peer of the robot's router).
#[derive(Debug, Clone, PartialEq)]
pub struct RosSettings {
    /// ROS domain id; `None`: `ROS_DOMAIN_ID` (read by hiroz) or 0.
    pub domain_id: Option<usize>,
    /// The robot's Zenoh router (`rmw_zenohd`), default `tcp/localhost:7447`.
    pub router_endpoint: String,
    /// Start a router in this process, listening on `router_endpoint`.
    pub embedded_router: bool,
    /// Node namespace (empty: root).
    pub namespace: String,
}

impl RosSettings {
    /// Reads `domain_id`, `router_endpoint`, `embedded_router` and `namespace`.
    pub(super) fn read(p: &mut Params) -> Result<RosSettings> {
        let domain = p.int("domain_id", -1)?;
        Ok(RosSettings {
            domain_id: if domain < 0 { None } else { Some(usize::try_from(domain).map_err(|e| invalid(format!("domain_id: {e}")))?) },
            router_endpoint: p.string("router_endpoint", "tcp/localhost:7447"),
            embedded_router: p.bool("embedded_router", false)?,
            namespace: p.string("namespace", ""),
        })
    }
}

/// The Zenoh session to the edge server (separate from the ROS session, so that the edge may
/// run a router of its own on another host, or on this one in tests).
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeSettings {
    /// The edge's router, e.g. `tcp/192.168.1.10:7447`.
    pub endpoint: String,
    /// Endpoints a peer session (`edge.mode: peer`, or the client's fallback) accepts
    /// connections on (`edge.listen`, comma-separated). Empty (the default): none, the robot
    /// only dials out, so nothing on the site's network can connect to it.
    pub listen: Vec<String>,
    /// `client` (default; falls back to a peer that keeps retrying when no edge answers at
    /// start), `peer`, or `fleet`: connect as a client to a router of the site and route every
    /// frame over the edges found there (DESIGN.md section 10), no edge address needed.
    pub mode: String,
    /// Mutual TLS (`edge.tls.ca|cert|key`, for `tls/` endpoints) and a password
    /// (`edge.user`, `edge.password_file`).
    pub security: Security,
}

impl EdgeSettings {
    /// Reads `edge.*` (but the fleet's) and checks the sessions it makes: a missing certificate
    /// is a start-up error, not a silent retry loop.
    pub(super) fn read(p: &mut Params) -> Result<EdgeSettings> {
        let endpoint = p.string("edge.endpoint", "tcp/edge:7447");
        let mode = p.string("edge.mode", "client");
        if !matches!(mode.as_str(), "client" | "peer" | "fleet") {
            return Err(invalid(format!("edge.mode must be client, peer or fleet, got '{mode}'")));
        }
        let (ca, cert, key) = (p.string("edge.tls.ca", ""), p.string("edge.tls.cert", ""), p.string("edge.tls.key", ""));
        let tls = match (ca.is_empty(), cert.is_empty(), key.is_empty()) {
            (true, true, true) => None,
            (false, false, false) => Some(TlsFiles { ca: ca.into(), cert: cert.into(), key: key.into() }),
            _ => return Err(invalid("edge.tls: give ca, cert and key together (`lop certs` makes them)".into())),
        };
        if endpoint_protocol(&endpoint) == "tls" && tls.is_none() {
            return Err(invalid(format!("edge.endpoint {endpoint} needs edge.tls.ca, edge.tls.cert and edge.tls.key")));
        }
        let (user, password_file) = (p.string("edge.user", ""), p.string("edge.password_file", ""));
        let login = match (user.is_empty(), password_file.is_empty()) {
            (true, true) => None,
            (false, false) => {
                Some(Login::from_file(&user, Path::new(&password_file)).map_err(|e| invalid(format!("edge.password_file: {e}")))?)
            }
            _ => return Err(invalid("edge.user and edge.password_file go together".into())),
        };
        let listen = endpoint_list(&p.string("edge.listen", ""));
        if mode == "client" && !listen.is_empty() {
            return Err(invalid("edge.listen: a client session listens nowhere; set edge.mode: peer to accept connections".into()));
        }
        let security = Security { tls, login, ..Security::default() };
        // Checked now, so that a missing certificate is a start-up error, not a silent retry loop.
        ZenohConfig::client(vec![endpoint.clone()])
            .with_security(security.clone())
            .to_zenoh()
            .map_err(|e| invalid(format!("edge: {e}")))?;
        ZenohConfig::peer(listen.clone(), vec![endpoint.clone()]).to_zenoh().map_err(|e| invalid(format!("edge.listen: {e}")))?;
        Ok(EdgeSettings { endpoint, mode, listen, security })
    }

    /// A session of `mode` to the edge, with this robot's listen endpoints and security, and the
    /// protocol's longest frame as its longest message: Zenoh drops a longer one as it arrives,
    /// before holding it whole (its own default is 1 GiB).
    fn zenoh(&self, mode: ZenohMode) -> ZenohConfig {
        let connect = vec![self.endpoint.clone()];
        let config = match mode {
            ZenohMode::Client => ZenohConfig::client(connect),
            _ => ZenohConfig::peer(self.listen.clone(), connect),
        };
        ZenohConfig { max_message_bytes: Some(MAX_EDGE_MESSAGE_BYTES), ..config.with_security(self.security.clone()) }
    }

    /// Whether frames are routed over the site's fleet of edges.
    pub fn fleet(&self) -> bool {
        self.mode == "fleet"
    }

    /// Opens the session. A client (or fleet member) that finds no router falls back to a peer session connecting to
    /// the same endpoint in the background, so the node runs (robot alone) until the edge is up.
    ///
    /// # Errors
    /// [`Error::Runtime`](crate::Error::Runtime) for a malformed endpoint.
    pub async fn open(&self) -> Result<zenoh::Session> {
        if endpoint_protocol(&self.endpoint) != "tls" {
            tracing::warn!(
                endpoint = %self.endpoint,
                "the link to the edge is plaintext: anyone on the network can read frames and results, and pose as the edge; \
                 use a tls/ endpoint with edge.tls (docs/security.md)"
            );
        }
        let peer = self.zenoh(ZenohMode::Peer);
        if self.mode == "peer" {
            return Ok(peer.open().await?);
        }
        match self.zenoh(ZenohMode::Client).open().await {
            Ok(s) => Ok(s),
            Err(e) => {
                tracing::warn!(endpoint = %self.endpoint, error = %e, "no edge router yet; connecting as a peer in the background");
                Ok(peer.open().await?)
            }
        }
    }
}

//! How a Zenoh session is opened: its role ([`ZenohMode`]), the endpoints it listens on and
//! connects to, scouting, security and the longest message ([`ZenohConfig`]), turned into
//! Zenoh's own configuration. A leaf of the link: the halves and the acceptor only take the
//! session it opens.

use crate::error::{Error, Result};
use crate::security::Security;

/// First wait before connecting again to a router that went away (Zenoh's default: 1 s).
pub const CONNECT_RETRY_INIT_MS: u64 = 100;
/// Longest wait between attempts to reach a router that went away (Zenoh's default: 4 s).
pub const CONNECT_RETRY_MAX_MS: u64 = 500;

/// The role of a Zenoh session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ZenohMode {
    /// A peer: connects to and accepts other peers.
    Peer,
    /// A client: connects to one router (or peer) and routes nothing.
    Client,
    /// A router: accepts clients and peers and routes between them (the edge).
    Router,
}

impl ZenohMode {
    fn as_str(self) -> &'static str {
        match self {
            ZenohMode::Peer => "peer",
            ZenohMode::Client => "client",
            ZenohMode::Router => "router",
        }
    }
}

/// What [`open`](ZenohConfig::open) configures of a Zenoh session; everything else keeps Zenoh's
/// defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZenohConfig {
    /// The session's role.
    pub mode: ZenohMode,
    /// Endpoints to listen on, e.g. `tcp/0.0.0.0:7447`. Empty: a router keeps Zenoh's default
    /// (`tcp/[::]:7447`, every interface: the edge is a server); a peer or a client listens
    /// nowhere and only dials out (Zenoh's own peer default, `tcp/[::]:0`, would accept
    /// connections from anyone on the site's network).
    pub listen: Vec<String>,
    /// Endpoints to connect to, e.g. `tcp/192.168.1.10:7447`.
    pub connect: Vec<String>,
    /// Whether to discover other Zenoh nodes by UDP multicast (off in the constructors).
    pub multicast_scouting: bool,
    /// TLS, authentication and access control (none in the constructors).
    pub security: Security,
    /// Longest message Zenoh reassembles, bytes (`None`: Zenoh's 1 GiB). The edge sets its
    /// longest frame, so that an oversized message is dropped by Zenoh before it is held whole.
    pub max_message_bytes: Option<usize>,
}

impl ZenohConfig {
    /// A router listening on `listen` (the edge).
    pub fn router(listen: Vec<String>) -> ZenohConfig {
        ZenohConfig {
            mode: ZenohMode::Router,
            listen,
            connect: Vec::new(),
            multicast_scouting: false,
            security: Security::default(),
            max_message_bytes: None,
        }
    }

    /// A client connecting to `connect` (a robot).
    pub fn client(connect: Vec<String>) -> ZenohConfig {
        ZenohConfig {
            mode: ZenohMode::Client,
            listen: Vec::new(),
            connect,
            multicast_scouting: false,
            security: Security::default(),
            max_message_bytes: None,
        }
    }

    /// A peer listening on `listen` and connecting to `connect`.
    pub fn peer(listen: Vec<String>, connect: Vec<String>) -> ZenohConfig {
        ZenohConfig {
            mode: ZenohMode::Peer,
            listen,
            connect,
            multicast_scouting: false,
            security: Security::default(),
            max_message_bytes: None,
        }
    }

    /// Sets multicast scouting.
    pub fn with_multicast_scouting(mut self, on: bool) -> ZenohConfig {
        self.multicast_scouting = on;
        self
    }

    /// Sets the security settings.
    pub fn with_security(mut self, security: Security) -> ZenohConfig {
        self.security = security;
        self
    }

    /// The Zenoh configuration this describes.
    ///
    /// # Errors
    ///
    /// [`Error::Zenoh`] when Zenoh refuses a value (e.g. a malformed endpoint);
    /// [`Error::InvalidConfig`] for an unreadable TLS file or an invalid access policy.
    pub fn to_zenoh(&self) -> Result<zenoh::Config> {
        let mut config = zenoh::Config::default();
        let mut set = |key: &str, value: String| {
            config.insert_json5(key, &value).map_err(|e| {
                let shown = if key.contains("password") { "<hidden>" } else { value.as_str() };
                Error::Zenoh(format!("config {key} = {shown}: {e}"))
            })
        };
        set("mode", json_string(self.mode.as_str()))?;
        if !self.listen.is_empty() || self.mode != ZenohMode::Router {
            set("listen/endpoints", json_strings(&self.listen))?;
        }
        if !self.connect.is_empty() {
            set("connect/endpoints", json_strings(&self.connect))?;
            // A robot whose edge restarts must be back on split inference within seconds; Zenoh's
            // default retry backs off to 4 s between attempts. A refused TCP connect costs little.
            set(
                "connect/retry",
                format!(
                    r#"{{"period_init_ms": {CONNECT_RETRY_INIT_MS}, "period_max_ms": {CONNECT_RETRY_MAX_MS}, "period_increase_factor": 2.0}}"#
                ),
            )?;
        }
        set("scouting/multicast/enabled", self.multicast_scouting.to_string())?;
        // hiroz builds Zenoh with shared memory, which would carry large payloads between a robot
        // and an edge on one host through memory instead of the link (and past any tc shaping).
        // The robot-edge link is a network link: never shortcut it.
        set("transport/shared_memory/enabled", "false".into())?;
        if let Some(n) = self.max_message_bytes {
            set("transport/link/rx/max_message_size", n.to_string())?;
        }
        self.security.apply(&mut set)?;
        Ok(config)
    }

    /// Opens a session.
    ///
    /// # Errors
    ///
    /// [`Error::Zenoh`] when the configuration is refused or the session cannot start (e.g. the
    /// listen port is taken, or a client finds no router).
    pub async fn open(&self) -> Result<zenoh::Session> {
        let config = self.to_zenoh()?;
        zenoh::open(config).await.map_err(|e| Error::Zenoh(format!("opening a {} session ({self:?}): {e}", self.mode.as_str())))
    }
}

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

fn json_strings(v: &[String]) -> String {
    serde_json::Value::Array(v.iter().map(|s| serde_json::Value::String(s.clone())).collect()).to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn config_builds() {
        ZenohConfig::router(vec!["tcp/127.0.0.1:7447".into()]).to_zenoh().unwrap();
        ZenohConfig::client(vec!["tcp/127.0.0.1:7447".into()]).to_zenoh().unwrap();
        ZenohConfig::peer(vec![], vec!["udp/127.0.0.1:7447".into()]).with_multicast_scouting(true).to_zenoh().unwrap();
        assert!(matches!(ZenohConfig::client(vec!["nonsense".into()]).to_zenoh(), Err(Error::Zenoh(_))));
    }

    /// A peer or a client given no listen endpoint listens nowhere (Zenoh's peer default would be
    /// every interface); a router keeps its default, and endpoints given are kept.
    #[test]
    fn only_a_router_listens_by_default() {
        let listen = |c: ZenohConfig| c.to_zenoh().unwrap().get_json("listen/endpoints").unwrap();
        let connect = vec!["tcp/127.0.0.1:7447".to_string()];
        assert_eq!(listen(ZenohConfig::peer(vec![], connect.clone())), "[]");
        assert_eq!(listen(ZenohConfig::client(connect.clone())), "[]");
        assert_eq!(listen(ZenohConfig::peer(vec!["tcp/127.0.0.1:0".into()], connect)), r#"["tcp/127.0.0.1:0"]"#);
        let router = listen(ZenohConfig::router(vec![]));
        assert!(router.contains("7447"), "{router}");
    }
}

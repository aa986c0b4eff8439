//! Encrypted, authenticated robot-edge links (docs/security.md): what a node's Zenoh session
//! gets of Zenoh's TLS transport, its user/password authentication and its access control.
//!
//! - [`TlsFiles`]: a node's certificate, its key and the site's CA. With them, Zenoh's `tls/`
//!   endpoints are mutual: the edge accepts only robots whose certificate the site's CA signed,
//!   and a robot only an edge whose certificate the CA signed for the name it dialled.
//! - [`Login`] / `users_file`: Zenoh's user/password authentication, alone or on top of TLS.
//! - [`AccessPolicy`]: Zenoh access control on the edge's router: a robot, known by its
//!   certificate's common name or its user name (both its robot id), may publish, subscribe and
//!   hold liveliness tokens only under its own `lop/v1/<robot>/`, and read the edges' public keys
//!   under `lop/v1/edge/` (tokens and load reports) and probe the edge's bandwidth responder. The
//!   edges themselves (common name or user
//!   `edge` by default) may do anything. Everyone else may do nothing.
//!
//! [`certs`] makes a site's CA and certificates (`lop certs`).
//!
//! Refusals are Zenoh's: a TLS handshake without a valid certificate is logged by
//! `zenoh_link_tls` at warn ("invalid peer certificate: ..."), a wrong password by
//! `zenoh_transport` at debug ("Invalid password"), a denied message by Zenoh's access control at
//! trace. The edge's default log filter turns on the first two ([`REFUSAL_LOG_FILTER`]).

pub mod certs;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::error::{Error, Result};

/// Log directives that make Zenoh report refused connections (a bad or missing certificate, a
/// wrong password) without its per-message chatter.
pub const REFUSAL_LOG_FILTER: &str = "zenoh_link_tls=debug,zenoh_transport::unicast::establishment::accept=debug";

/// The common name (and user name) the edges' certificates carry by default.
pub const EDGE_IDENTITY: &str = "edge";

/// A node's TLS files (PEM), all required: TLS here is always mutual.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The site's CA certificate (`ca.pem`): what peers' certificates must be signed by.
    pub ca: PathBuf,
    /// This node's certificate (`edge.pem`, `robot-<id>.pem`).
    pub cert: PathBuf,
    /// This node's private key (`edge.key`, `robot-<id>.key`).
    pub key: PathBuf,
}

/// User/password credentials a node presents when it connects.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    /// The user name (a robot's is its robot id, for access control).
    pub user: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login").field("user", &self.user).field("password", &"<hidden>").finish()
    }
}

impl Login {
    /// `user` with the password read from the first line of `password_file` (so that the
    /// password stays out of parameter files and command lines).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when the file cannot be read or its first line is empty.
    pub fn from_file(user: &str, password_file: &Path) -> Result<Login> {
        let text = std::fs::read_to_string(password_file)
            .map_err(|e| Error::InvalidConfig { what: format!("password file {}: {e}", password_file.display()) })?;
        let password = text.lines().next().unwrap_or("").trim_end_matches('\r').to_string();
        if password.is_empty() || user.is_empty() {
            return Err(Error::InvalidConfig { what: format!("password file {}: empty user or password", password_file.display()) });
        }
        Ok(Login { user: user.to_string(), password })
    }
}

/// Who may use which keys on an edge's router (Zenoh access control, default deny).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessPolicy {
    /// Robot ids allowed on the edge, each confined to its own keys.
    pub robots: Vec<String>,
    /// Identities (certificate common names or user names) trusted as edges: everything allowed.
    pub edges: Vec<String>,
}

impl AccessPolicy {
    /// Zenoh's `access_control` section for this policy.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an invalid robot id or an empty identity.
    pub fn to_json(&self) -> Result<Value> {
        for r in &self.robots {
            lop_msgs::validate_robot_id(r).map_err(|e| Error::InvalidConfig { what: format!("access.robots: {e}") })?;
            if lop_msgs::is_lane_id(r) {
                return Err(Error::InvalidConfig {
                    what: format!(
                        "access.robots: '{r}' has the form of a stream lane's id (<robot>.lane<k>), which its robot's credentials may use; name the robot otherwise"
                    ),
                });
            }
        }
        if self.edges.iter().any(|e| e.is_empty()) {
            return Err(Error::InvalidConfig { what: "access.edges: an empty identity".into() });
        }
        let both = json!(["ingress", "egress"]);
        let mut rules = vec![json!({
            "id": "edge-everything",
            "messages": ["put", "delete", "declare_subscriber", "query", "reply", "declare_queryable",
                         "liveliness_token", "declare_liveliness_subscriber", "liveliness_query"],
            "flows": both, "permission": "allow", "key_exprs": ["**"],
        })];
        // What every robot may do beyond its own keys: learn the edges (their tokens and load
        // reports), and be told which subscriptions exist (so that its publications are routed).
        rules.push(json!({
            "id": "robot-reads-edges", "messages": ["declare_subscriber", "declare_liveliness_subscriber", "liveliness_query"],
            "flows": ["ingress"], "permission": "allow", "key_exprs": ["lop/v1/edge/**"],
        }));
        rules.push(json!({
            "id": "robot-hears-edges", "messages": ["put", "liveliness_token", "reply"],
            "flows": ["egress"], "permission": "allow", "key_exprs": ["lop/v1/edge/**"],
        }));
        rules.push(json!({
            "id": "robot-sees-subscriptions", "messages": ["declare_subscriber", "declare_liveliness_subscriber", "declare_queryable"],
            "flows": ["egress"], "permission": "allow", "key_exprs": ["lop/v1/**"],
        }));
        let mut subjects = Vec::new();
        let mut policies = Vec::new();
        let mut robot_subjects = Vec::new();
        for (i, robot) in self.robots.iter().enumerate() {
            let (rule, cn, user) = (format!("robot-{i}-own"), format!("robot-{i}-cert"), format!("robot-{i}-user"));
            rules.push(json!({
                "id": rule,
                "messages": ["put", "delete", "declare_subscriber", "liveliness_token", "declare_liveliness_subscriber", "liveliness_query", "reply"],
                // Its own keys and its stream lanes' (`lop_msgs::key::lane_robot_id`).
                "flows": both, "permission": "allow", "key_exprs": robot_keys(robot)?,
            }));
            // Bandwidth probes against the edge's responder (lop_bandwidth), under its own id
            // only: the responder rations probes per id, so an id is a budget.
            let probes = format!("robot-{i}-probes");
            rules.push(json!({
                "id": probes, "messages": ["query"],
                "flows": ["ingress"], "permission": "allow",
                "key_exprs": [format!("{}/{robot}", crate::bandwidth::probe::PROBE_KEY)],
            }));
            subjects.push(json!({"id": cn, "cert_common_names": [robot]}));
            subjects.push(json!({"id": user, "usernames": [robot]}));
            policies.push(json!({"id": format!("robot-{i}"), "rules": [rule, probes], "subjects": [cn, user]}));
            robot_subjects.push(cn);
            robot_subjects.push(user);
        }
        if !robot_subjects.is_empty() {
            policies.push(json!({
                "id": "robots-public",
                "rules": ["robot-reads-edges", "robot-hears-edges", "robot-sees-subscriptions"],
                "subjects": robot_subjects,
            }));
        }
        if !self.edges.is_empty() {
            subjects.push(json!({"id": "edges-cert", "cert_common_names": self.edges}));
            subjects.push(json!({"id": "edges-user", "usernames": self.edges}));
            policies.push(json!({"id": "edges", "rules": ["edge-everything"], "subjects": ["edges-cert", "edges-user"]}));
        }
        // Zenoh refuses rules that no policy uses.
        let used: Vec<String> = policies
            .iter()
            .flat_map(|p| p["rules"].as_array().into_iter().flatten().filter_map(|r| r.as_str().map(String::from)))
            .collect();
        rules.retain(|r| r["id"].as_str().is_some_and(|id| used.iter().any(|u| u == id)));
        Ok(json!({
            "enabled": true,
            "default_permission": "deny",
            "rules": rules,
            "subjects": subjects,
            "policies": policies,
        }))
    }
}

/// A node's security settings; the default is none (plain TCP, no authentication).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Security {
    /// Mutual TLS on `tls/` endpoints.
    pub tls: Option<TlsFiles>,
    /// Credentials presented when connecting.
    pub login: Option<Login>,
    /// Accepting side: a file of `user:password` lines; a peer must present one of them.
    pub users_file: Option<PathBuf>,
    /// Accepting side: Zenoh access control.
    pub access: Option<AccessPolicy>,
}

impl Security {
    /// Whether the session is encrypted and its peers authenticated by certificate.
    pub fn has_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Whether peers must authenticate at all (a certificate or a password).
    pub fn authenticates(&self) -> bool {
        self.tls.is_some() || self.users_file.is_some()
    }

    /// Sets these settings into a Zenoh configuration through `set(key, json5 value)`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a TLS or password file that cannot be read (named), or an
    /// invalid access policy; what `set` returns.
    pub fn apply(&self, set: &mut dyn FnMut(&str, String) -> Result<()>) -> Result<()> {
        if let Some(tls) = &self.tls {
            for (what, path) in [("ca", &tls.ca), ("cert", &tls.cert), ("key", &tls.key)] {
                readable(what, path)?;
            }
            let path = |p: &PathBuf| json!(p.to_string_lossy()).to_string();
            set("transport/link/tls/root_ca_certificate", path(&tls.ca))?;
            set("transport/link/tls/listen_certificate", path(&tls.cert))?;
            set("transport/link/tls/listen_private_key", path(&tls.key))?;
            set("transport/link/tls/connect_certificate", path(&tls.cert))?;
            set("transport/link/tls/connect_private_key", path(&tls.key))?;
            set("transport/link/tls/enable_mtls", "true".into())?;
            set("transport/link/tls/verify_name_on_connect", "true".into())?;
        }
        if let Some(login) = &self.login {
            set("transport/auth/usrpwd/user", json!(login.user).to_string())?;
            set("transport/auth/usrpwd/password", json!(login.password).to_string())?;
        }
        if let Some(users) = &self.users_file {
            readable("users_file", users)?;
            set("transport/auth/usrpwd/dictionary_file", json!(users.to_string_lossy()).to_string())?;
        }
        if let Some(access) = &self.access {
            set("access_control", access.to_json()?.to_string())?;
        }
        Ok(())
    }
}

fn readable(what: &str, path: &Path) -> Result<()> {
    std::fs::File::open(path).map(drop).map_err(|e| Error::InvalidConfig { what: format!("tls {what} {}: {e}", path.display()) })
}

/// Whether `endpoint` (a Zenoh endpoint such as `tcp/127.0.0.1:7447`) listens on loopback only.
/// An unspecified address (`[::]`, `0.0.0.0`) and any name but `localhost` are not loopback.
///
/// ```
/// use lop_runtime::security::is_loopback_endpoint;
/// assert!(is_loopback_endpoint("tcp/127.0.0.1:7447"));
/// assert!(is_loopback_endpoint("tcp/[::1]:7447"));
/// assert!(is_loopback_endpoint("tcp/localhost:7447"));
/// assert!(!is_loopback_endpoint("tcp/[::]:7447"));
/// assert!(!is_loopback_endpoint("tcp/192.168.1.10:7447"));
/// ```
pub fn is_loopback_endpoint(endpoint: &str) -> bool {
    let Some((_, rest)) = endpoint.split_once('/') else { return false };
    let address = rest.split(['?', '#']).next().unwrap_or("");
    let host = match address.rsplit_once(':') {
        Some((host, _port)) => host.trim_start_matches('[').trim_end_matches(']'),
        None => address,
    };
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The protocol of a Zenoh endpoint (`tcp`, `tls`, ...).
pub fn endpoint_protocol(endpoint: &str) -> &str {
    endpoint.split_once('/').map_or("", |(p, _)| p)
}

/// The key expressions a robot's credentials may use: its own and its stream lanes'.
fn robot_keys(robot: &str) -> Result<Vec<String>> {
    (0..lop_msgs::MAX_LANES)
        .map(|k| lop_msgs::lane_robot_id(robot, k).map(|id| format!("lop/v1/{id}/**")))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::InvalidConfig { what: format!("access.robots: {e}") })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn access_policy_confines_each_robot_to_its_keys() {
        let p = AccessPolicy { robots: vec!["r1".into(), "r2".into()], edges: vec!["edge".into()] };
        let j = p.to_json().unwrap();
        assert_eq!(j["default_permission"], "deny");
        let rule = |id: &str| j["rules"].as_array().unwrap().iter().find(|r| r["id"] == id).unwrap().clone();
        let own = |r: &str| {
            let mut keys = vec![format!("lop/v1/{r}/**")];
            keys.extend((1..8).map(|k| format!("lop/v1/{r}.lane{k}/**")));
            json!(keys)
        };
        assert_eq!(rule("robot-0-own")["key_exprs"], own("r1"), "its own keys and its stream lanes'");
        assert_eq!(rule("robot-1-own")["key_exprs"], own("r2"));
        // No robot is named like another's lane.
        let err = AccessPolicy { robots: vec!["r1".into(), "r1.lane2".into()], edges: vec![] }.to_json().unwrap_err().to_string();
        assert!(err.contains("lane"), "{err}");
        // No robot may publish outside its own keys: put is allowed only by its own rule (and
        // egress, towards it, under the edges' public keys).
        for r in j["rules"].as_array().unwrap() {
            let puts = r["messages"].as_array().unwrap().iter().any(|m| m == "put");
            let ingress = r["flows"].as_array().unwrap().iter().any(|f| f == "ingress");
            let id = r["id"].as_str().unwrap();
            if puts && ingress {
                assert!(id.ends_with("-own") || id == "edge-everything", "{id}");
            }
        }
        // A robot id that is no key chunk is refused.
        assert!(AccessPolicy { robots: vec!["r/*".into()], edges: vec![] }.to_json().is_err());
        assert!(AccessPolicy { robots: vec!["edge".into()], edges: vec![] }.to_json().is_err());
    }

    #[test]
    fn unreadable_files_are_named() {
        let s =
            Security { tls: Some(TlsFiles { ca: "/nonexistent/ca.pem".into(), cert: "c".into(), key: "k".into() }), ..Security::default() };
        let err = s.apply(&mut |_, _| Ok(())).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
    }

    #[test]
    fn login_reads_the_first_line() {
        let dir = std::env::temp_dir().join(format!("lop-login-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("pw");
        std::fs::write(&f, "s3cret\nignored\n").unwrap();
        let login = Login::from_file("r1", &f).unwrap();
        assert_eq!(login.password, "s3cret");
        assert!(!format!("{login:?}").contains("s3cret"), "the password is never logged");
        std::fs::write(&f, "\n").unwrap();
        assert!(Login::from_file("r1", &f).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}

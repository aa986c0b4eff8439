//! Names in the Zenoh key space `lop/v1/...` (DESIGN.md section 6): pure string building and
//! parsing, no Zenoh types.
//!
//! | key                    | direction    | carries                                      |
//! |------------------------|--------------|----------------------------------------------|
//! | `lop/v1/<robot>/hello` | robot → edge | Hello (the robot id in the key is the Hello's) |
//! | `lop/v1/<robot>/up`    | robot → edge | Start, Band (robot → edge)                   |
//! | `lop/v1/<robot>/down`  | edge → robot | Welcome, Reject, Band (edge → robot), Done, Error |
//! | `lop/v1/edge/alive`    | edge         | the edge's Zenoh liveliness token            |
//! | `lop/v1/<robot>/alive` | robot        | a robot's Zenoh liveliness token             |
//! | `lop/v1/edge/<edge>/alive` | edge     | a fleet edge's liveliness token (discovery)  |
//! | `lop/v1/edge/<edge>/load`  | edge     | its [`EdgeLoad`](crate::load::EdgeLoad) at 10 Hz |
//!
//! Everything a robot publishes lies under `lop/v1/<robot>/`, so that access control can confine
//! an authenticated robot to its own keys (docs/security.md). The edge subscribes to [`ALL_HELLO`]
//! and [`ALL_UP`]. The `v1` chunk names the key layout; the frame header carries
//! the frame format version separately ([`PROTOCOL_VERSION`](crate::protocol::PROTOCOL_VERSION)).

use std::fmt;

use crate::{Error, Result};

/// Prefix of every key.
pub const KEY_PREFIX: &str = "lop/v1";
/// Key expression matching every robot's Hello key (for the single edge's subscriber).
pub const ALL_HELLO: &str = "lop/v1/*/hello";
/// Key expression matching every robot's uplink (for the edge's subscriber).
pub const ALL_UP: &str = "lop/v1/*/up";
/// The edge's liveliness token: present while an edge server is up.
pub const EDGE_ALIVE: &str = "lop/v1/edge/alive";
/// Key expression matching every robot's liveliness token (for the edge's liveliness subscriber).
pub const ALL_ALIVE: &str = "lop/v1/*/alive";
/// Key expression matching every fleet edge's load reports (DESIGN.md section 10).
pub const ALL_EDGE_LOADS: &str = "lop/v1/edge/*/load";
/// Key expression matching every fleet edge's liveliness token.
pub const ALL_EDGE_TOKENS: &str = "lop/v1/edge/*/alive";
/// Longest id (robot or model id) in bytes.
pub const MAX_ID_LEN: usize = 64;
/// The chunk reserved for the edge's own keys; no robot may use it as its id.
pub const EDGE_CHUNK: &str = "edge";

/// Checks that `id` can be a single Zenoh key chunk and a file-name-like identifier: 1 to
/// [`MAX_ID_LEN`] bytes of ASCII letters, digits, `_`, `-` and `.`. This excludes `/`, `*`, `$`,
/// `#`, `?`, whitespace and control characters.
///
/// # Errors
/// [`Error::InvalidId`] naming the first problem.
///
/// ```
/// assert!(lop_msgs::validate_id("jetson-01").is_ok());
/// assert!(lop_msgs::validate_id("a/b").is_err());
/// ```
pub fn validate_id(id: &str) -> Result<()> {
    let bad = |reason| Err(Error::InvalidId { id: id.chars().take(MAX_ID_LEN + 16).collect(), reason });
    if id.is_empty() {
        return bad("empty");
    }
    if id.len() > MAX_ID_LEN {
        return bad("longer than 64 bytes");
    }
    if !id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')) {
        return bad("only ASCII letters, digits, '_', '-' and '.' are allowed");
    }
    Ok(())
}

/// [`validate_id`] plus: not the reserved chunk [`EDGE_CHUNK`].
///
/// # Errors
/// [`Error::InvalidId`].
pub fn validate_robot_id(id: &str) -> Result<()> {
    validate_id(id)?;
    if id == EDGE_CHUNK {
        return Err(Error::InvalidId { id: id.to_string(), reason: "'edge' is reserved" });
    }
    Ok(())
}

/// Most lanes a robot's stream may spread its frames over (see [`lane_robot_id`]).
pub const MAX_LANES: usize = 8;

/// The robot id lane `lane` of `robot`'s stream uses in its sessions: `robot` itself for lane 0,
/// `<robot>.lane<k>` for the others, so that each lane has sessions of its own. Access control
/// grants a robot its lanes' keys along with its own (`lop_runtime::security`).
///
/// # Errors
/// [`Error::InvalidId`] when `robot` is not a valid robot id, is itself a lane's id, or leaves no
/// room for the suffix; `lane` at [`MAX_LANES`] or above.
///
/// ```
/// assert_eq!(lop_msgs::key::lane_robot_id("r1", 0).unwrap(), "r1");
/// assert_eq!(lop_msgs::key::lane_robot_id("r1", 2).unwrap(), "r1.lane2");
/// assert!(lop_msgs::key::lane_robot_id("r1.lane2", 1).is_err());
/// assert!(lop_msgs::key::lane_robot_id("r1", 8).is_err());
/// ```
pub fn lane_robot_id(robot: &str, lane: usize) -> Result<String> {
    validate_robot_id(robot)?;
    if is_lane_id(robot) {
        return Err(Error::InvalidId { id: robot.to_string(), reason: "a lane's id (<robot>.lane<k>) is not a robot's id" });
    }
    if lane >= MAX_LANES {
        return Err(Error::InvalidId { id: robot.to_string(), reason: "at most 8 lanes (0 to 7)" });
    }
    if lane == 0 {
        return Ok(robot.to_string());
    }
    let id = format!("{robot}.lane{lane}");
    validate_robot_id(&id).map(|()| id)
}

/// Whether `id` has the form of a lane's robot id (`<robot>.lane<digits>`): such an id is never
/// given to a robot of its own, so that no robot can be another's lane.
pub fn is_lane_id(id: &str) -> bool {
    id.rsplit_once(".lane").is_some_and(|(head, k)| !head.is_empty() && !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
}

/// The liveliness token key of `robot`: `lop/v1/<robot>/alive`.
///
/// # Errors
/// [`Error::InvalidId`] when `robot` fails [`validate_robot_id`].
///
/// ```
/// assert_eq!(lop_msgs::key::robot_alive("r1").unwrap(), "lop/v1/r1/alive");
/// ```
pub fn robot_alive(robot: &str) -> Result<String> {
    validate_robot_id(robot)?;
    Ok(format!("{KEY_PREFIX}/{robot}/alive"))
}

/// The key an edge publishes its load on: `lop/v1/edge/<edge>/load`.
///
/// # Errors
/// [`Error::InvalidId`] when `edge` fails [`validate_id`].
///
/// ```
/// assert_eq!(lop_msgs::key::edge_load("gpu-1").unwrap(), "lop/v1/edge/gpu-1/load");
/// ```
pub fn edge_load(edge: &str) -> Result<String> {
    validate_id(edge)?;
    Ok(format!("{KEY_PREFIX}/{EDGE_CHUNK}/{edge}/load"))
}

/// The key of a site digest of shard `shard`: `lop/v1/site/digest/<shard>` ([`crate::site`]).
///
/// ```
/// assert_eq!(lop_msgs::key::site_digest(3), "lop/v1/site/digest/3");
/// ```
pub fn site_digest(shard: usize) -> String {
    format!("{KEY_PREFIX}/site/digest/{shard}")
}

/// An edge's fleet liveliness token: `lop/v1/edge/<edge>/alive`.
///
/// # Errors
/// [`Error::InvalidId`] when `edge` fails [`validate_id`].
pub fn edge_token(edge: &str) -> Result<String> {
    validate_id(edge)?;
    Ok(format!("{KEY_PREFIX}/{EDGE_CHUNK}/{edge}/alive"))
}

/// The edge id of a fleet key `lop/v1/edge/<edge>/<last>` (with `last` `load` or `alive`), if
/// `key` is one with a valid edge id.
///
/// ```
/// use lop_msgs::key::edge_of;
/// assert_eq!(edge_of("lop/v1/edge/gpu-1/load", "load"), Some("gpu-1"));
/// assert_eq!(edge_of("lop/v1/edge/gpu-1/alive", "load"), None);
/// assert_eq!(edge_of("lop/v1/edge/a/b/load", "load"), None);
/// ```
pub fn edge_of<'k>(key: &'k str, last: &str) -> Option<&'k str> {
    let rest = key.strip_prefix(KEY_PREFIX)?.strip_prefix('/')?.strip_prefix(EDGE_CHUNK)?.strip_prefix('/')?;
    let edge = rest.strip_suffix(last)?.strip_suffix('/')?;
    validate_id(edge).ok().map(|()| edge)
}

/// The keys of one robot-edge session space: the single edge's (`lop/v1/<robot>/hello`,
/// `lop/v1/<robot>/up`, `lop/v1/<robot>/down`, token `lop/v1/edge/alive`), or one fleet edge's,
/// addressed by its id so that several edges share a Zenoh network without hearing each other's
/// robots (`lop/v1/<robot>/<edge>/hello`, `lop/v1/<robot>/<edge>/up`,
/// `lop/v1/<robot>/<edge>/down`, token `lop/v1/edge/<edge>/alive`, the same token as its load
/// reports').
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKeys {
    edge: Option<String>,
}

impl SessionKeys {
    /// The single edge's keys (a site with one edge, robots configured with its address).
    pub fn single() -> SessionKeys {
        SessionKeys { edge: None }
    }

    /// Fleet edge `edge`'s keys.
    ///
    /// # Errors
    /// [`Error::InvalidId`] when `edge` fails [`validate_id`].
    ///
    /// ```
    /// let k = lop_msgs::key::SessionKeys::fleet("gpu-1").unwrap();
    /// assert_eq!(k.hello("r1").unwrap(), "lop/v1/r1/gpu-1/hello");
    /// assert_eq!(k.robot_of_hello("lop/v1/r1/gpu-1/hello"), Some("r1"));
    /// assert_eq!(k.up("r1").unwrap(), "lop/v1/r1/gpu-1/up");
    /// assert_eq!(k.robot_of_up("lop/v1/r1/gpu-1/up"), Some("r1"));
    /// assert_eq!(k.robot_of_up("lop/v1/r1/up"), None);
    /// let single = lop_msgs::key::SessionKeys::single();
    /// assert_eq!(single.up("r1").unwrap(), "lop/v1/r1/up");
    /// assert_eq!(single.robot_of_up("lop/v1/r1/gpu-1/up"), None);
    /// ```
    pub fn fleet(edge: &str) -> Result<SessionKeys> {
        validate_id(edge)?;
        Ok(SessionKeys { edge: Some(edge.to_string()) })
    }

    /// The fleet edge's id; `None` for the single edge.
    pub fn edge(&self) -> Option<&str> {
        self.edge.as_deref()
    }

    /// Where `robot` sends its Hello to this edge: a key of the robot's own, so that the edge
    /// can check that the Hello's robot id is the key's, and access control can confine a robot
    /// to its own keys.
    ///
    /// # Errors
    /// [`Error::InvalidId`] when `robot` fails [`validate_robot_id`].
    pub fn hello(&self, robot: &str) -> Result<String> {
        validate_robot_id(robot)?;
        Ok(format!("{KEY_PREFIX}/{robot}/{}", self.tail("hello")))
    }

    /// The key expression of every robot's Hello key for this edge (the edge's subscription).
    pub fn all_hello(&self) -> String {
        format!("{KEY_PREFIX}/*/{}", self.tail("hello"))
    }

    /// The robot id of one of this edge's Hello keys.
    pub fn robot_of_hello<'k>(&self, key: &'k str) -> Option<&'k str> {
        self.robot_of(key, "hello")
    }

    /// The edge's liveliness token.
    pub fn token(&self) -> String {
        match &self.edge {
            None => EDGE_ALIVE.to_string(),
            Some(e) => format!("{KEY_PREFIX}/{EDGE_CHUNK}/{e}/alive"),
        }
    }

    fn tail(&self, dir: &str) -> String {
        match &self.edge {
            None => dir.to_string(),
            Some(e) => format!("{e}/{dir}"),
        }
    }

    /// `robot`'s uplink to this edge.
    ///
    /// # Errors
    /// [`Error::InvalidId`] when `robot` fails [`validate_robot_id`].
    pub fn up(&self, robot: &str) -> Result<String> {
        validate_robot_id(robot)?;
        Ok(format!("{KEY_PREFIX}/{robot}/{}", self.tail("up")))
    }

    /// `robot`'s downlink from this edge.
    ///
    /// # Errors
    /// [`Error::InvalidId`] when `robot` fails [`validate_robot_id`].
    pub fn down(&self, robot: &str) -> Result<String> {
        validate_robot_id(robot)?;
        Ok(format!("{KEY_PREFIX}/{robot}/{}", self.tail("down")))
    }

    /// The key expression of every robot's uplink to this edge (the edge's subscription).
    pub fn all_up(&self) -> String {
        format!("{KEY_PREFIX}/*/{}", self.tail("up"))
    }

    /// The robot id of one of this edge's uplink keys.
    pub fn robot_of_up<'k>(&self, key: &'k str) -> Option<&'k str> {
        self.robot_of(key, "up")
    }

    fn robot_of<'k>(&self, key: &'k str, dir: &str) -> Option<&'k str> {
        let tail = self.tail(dir);
        let robot = key.strip_prefix(KEY_PREFIX)?.strip_prefix('/')?.strip_suffix(tail.as_str())?.strip_suffix('/')?;
        validate_robot_id(robot).ok().map(|()| robot)
    }
}

/// The robot id of a robot liveliness key `lop/v1/<robot>/alive`, if `key` is one with a valid
/// robot id ([`EDGE_ALIVE`] is not: `edge` is no robot id).
///
/// ```
/// assert_eq!(lop_msgs::key::alive_robot("lop/v1/r1/alive"), Some("r1"));
/// assert_eq!(lop_msgs::key::alive_robot("lop/v1/edge/alive"), None);
/// ```
pub fn alive_robot(key: &str) -> Option<&str> {
    let robot = key.strip_prefix(KEY_PREFIX)?.strip_prefix('/')?.strip_suffix("/alive")?;
    validate_robot_id(robot).ok().map(|()| robot)
}

/// One key of the protocol's key space.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Key {
    /// `lop/v1/<robot>/hello`.
    Hello {
        /// Robot id (validated).
        robot: String,
    },
    /// `lop/v1/<robot>/up`.
    Up {
        /// Robot id (validated).
        robot: String,
    },
    /// `lop/v1/<robot>/down`.
    Down {
        /// Robot id (validated).
        robot: String,
    },
}

impl Key {
    /// The uplink key of `robot`.
    ///
    /// # Errors
    /// [`Error::InvalidId`] when `robot` fails [`validate_robot_id`].
    ///
    /// ```
    /// let k = lop_msgs::Key::up("r1").unwrap();
    /// assert_eq!(k.to_string(), "lop/v1/r1/up");
    /// assert_eq!(lop_msgs::Key::parse("lop/v1/r1/up").unwrap(), k);
    /// ```
    pub fn up(robot: &str) -> Result<Key> {
        validate_robot_id(robot)?;
        Ok(Key::Up { robot: robot.to_string() })
    }

    /// The downlink key of `robot`.
    ///
    /// # Errors
    /// [`Error::InvalidId`] when `robot` fails [`validate_robot_id`].
    pub fn down(robot: &str) -> Result<Key> {
        validate_robot_id(robot)?;
        Ok(Key::Down { robot: robot.to_string() })
    }

    /// The robot id in the key.
    pub fn robot(&self) -> Option<&str> {
        match self {
            Key::Hello { robot } | Key::Up { robot } | Key::Down { robot } => Some(robot),
        }
    }

    /// Parses a concrete key (no wildcards).
    ///
    /// # Errors
    /// [`Error::InvalidKey`] when `key` is not `lop/v1/<robot>/hello`, `lop/v1/<robot>/up` or
    /// `lop/v1/<robot>/down`; [`Error::InvalidId`] when the robot chunk is not a valid robot id.
    pub fn parse(key: &str) -> Result<Key> {
        let bad = |reason| Error::InvalidKey { key: key.chars().take(200).collect(), reason };
        let rest = key.strip_prefix(KEY_PREFIX).and_then(|r| r.strip_prefix('/')).ok_or_else(|| bad("does not start with 'lop/v1/'"))?;
        let (first, second) = rest.split_once('/').ok_or_else(|| bad("expected two chunks after 'lop/v1/'"))?;
        if second.contains('/') {
            return Err(bad("too many chunks"));
        }
        if first == EDGE_CHUNK {
            return Err(bad("the edge's keys carry no frames"));
        }
        match second {
            "hello" => {
                validate_robot_id(first)?;
                Ok(Key::Hello { robot: first.to_string() })
            }
            "up" => Key::up(first),
            "down" => Key::down(first),
            _ => Err(bad("last chunk must be 'hello', 'up' or 'down'")),
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Hello { robot } => write!(f, "{KEY_PREFIX}/{robot}/hello"),
            Key::Up { robot } => write!(f, "{KEY_PREFIX}/{robot}/up"),
            Key::Down { robot } => write!(f, "{KEY_PREFIX}/{robot}/down"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;

    #[test]
    fn ids_are_validated() {
        for ok in ["r", "robot_1", "jetson-orin.nano", &"x".repeat(64)] {
            validate_robot_id(ok).unwrap();
        }
        let long = "x".repeat(65);
        for bad in ["", "a/b", "*", "**", "a*", "$x", "a#b", "a?b", "a b", "é", "a\n", "edge", &long] {
            assert!(matches!(validate_robot_id(bad), Err(Error::InvalidId { .. })), "{bad:?}");
        }
        // "edge" is only reserved for robots.
        validate_id("edge").unwrap();
    }

    #[test]
    fn keys_round_trip() {
        for k in [Key::Hello { robot: "r1".into() }, Key::up("r1").unwrap(), Key::down("r-2.x").unwrap()] {
            assert_eq!(Key::parse(&k.to_string()).unwrap(), k);
        }
        assert_eq!(Key::up("r1").unwrap().to_string(), "lop/v1/r1/up");
        assert_eq!(Key::down("r1").unwrap().to_string(), "lop/v1/r1/down");
        assert_eq!(Key::Hello { robot: "r1".into() }.to_string(), "lop/v1/r1/hello");
        assert!(Key::parse("lop/v1/edge/hello").is_err());
        assert_eq!(Key::down("r1").unwrap().robot(), Some("r1"));
    }

    #[test]
    fn alive_keys() {
        assert_eq!(robot_alive("r-1").unwrap(), "lop/v1/r-1/alive");
        assert!(robot_alive("edge").is_err());
        assert!(robot_alive("a/b").is_err());
        assert_eq!(alive_robot(&robot_alive("r.2").unwrap()), Some("r.2"));
        for bad in [EDGE_ALIVE, ALL_ALIVE, "lop/v1/r1/up", "lop/v1/a/b/alive", "lop/v1//alive", "lop/v2/r1/alive", "lop/v1/r1/alive/x"] {
            assert_eq!(alive_robot(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn bad_keys_are_rejected() {
        for bad in [
            "",
            "lop/v1",
            "lop/v1/",
            "lop/v2/r1/up",
            "lop/v1/r1",
            "lop/v1/r1/up/x",
            "lop/v1/r1/sideways",
            "lop/v1/edge/up",
            "lop/v1/edge/x",
            "lop/v1/*/up",
            "lop/v1//up",
            "xlop/v1/r1/up",
        ] {
            assert!(Key::parse(bad).is_err(), "{bad:?}");
        }
    }
}

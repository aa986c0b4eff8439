//! Parameters a running node takes through the ROS 2 parameter services (`ros2 param set`):
//! `lop_robot`'s [`LiveSettings`] (`enabled`, `method`, `drop_policy`), read before every frame.
//! Every other parameter is read once at start-up; a request to change one is refused with that
//! reason, and so is a value of the wrong type or out of range, so the node never runs with a
//! value it did not check.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::params::ParamValue;

/// Decides on parameter changes requested at run time (the `set_parameters` and
/// `set_parameters_atomically` services): [`ParamPolicy::check`] says whether a change would be
/// accepted, and why not; [`ParamPolicy::set`] checks and applies it.
pub trait ParamPolicy: Send + Sync {
    /// Whether `name` may take `value` now; `Err(reason)` refuses it (the reason goes back to
    /// the caller of the service).
    ///
    /// # Errors
    /// The reason for refusing.
    fn check(&self, name: &str, value: &ParamValue) -> std::result::Result<(), String>;

    /// Checks the change and applies it.
    ///
    /// # Errors
    /// As [`ParamPolicy::check`]; a refused change applies nothing.
    fn set(&self, name: &str, value: &ParamValue) -> std::result::Result<(), String>;
}

/// A shared policy.
pub type OnSet = Arc<dyn ParamPolicy>;

/// The reason given for a parameter that is read only at start-up.
pub fn startup_only(name: &str) -> String {
    format!("'{name}' is read at start-up; change it in the params file or with -p and restart the node")
}

/// The policy of a node whose parameters are all read at start-up: every change is refused.
#[derive(Debug, Clone, Copy, Default)]
pub struct RefuseAll;

impl ParamPolicy for RefuseAll {
    fn check(&self, name: &str, _: &ParamValue) -> std::result::Result<(), String> {
        Err(startup_only(name))
    }

    fn set(&self, name: &str, value: &ParamValue) -> std::result::Result<(), String> {
        self.check(name, value)
    }
}

/// [`RefuseAll`], shared.
pub fn refuse_all() -> OnSet {
    Arc::new(RefuseAll)
}

/// What happens to a frame that arrives while another one waits for the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropPolicy {
    /// The new frame replaces the waiting one (the result is always of the newest frame).
    Newest,
    /// The waiting frame stays, the new one is dropped (frames are answered in arrival order,
    /// at the model's pace).
    Oldest,
}

impl DropPolicy {
    /// Parses `newest` or `oldest`.
    ///
    /// # Errors
    /// The reason, naming the accepted values.
    pub fn parse(s: &str) -> std::result::Result<DropPolicy, String> {
        match s {
            "newest" => Ok(DropPolicy::Newest),
            "oldest" => Ok(DropPolicy::Oldest),
            other => Err(format!("drop_policy must be newest or oldest, got '{other}'")),
        }
    }

    /// The parameter's text.
    pub fn as_str(self) -> &'static str {
        match self {
            DropPolicy::Newest => "newest",
            DropPolicy::Oldest => "oldest",
        }
    }
}

/// The methods `lop_robot` can run: LOP and the table's baselines.
pub const METHODS: [&str; 4] = ["lop", "robot-only", "server-only", "layer-partition"];

/// Checks a `method` value.
///
/// # Errors
/// The reason, naming the accepted values.
pub fn check_method(m: &str) -> std::result::Result<(), String> {
    if METHODS.contains(&m) { Ok(()) } else { Err(format!("method must be one of {}, got '{m}'", METHODS.join(", "))) }
}

/// `lop_robot`'s settings that may change while it runs.
#[derive(Debug)]
pub struct LiveSettings {
    enabled: AtomicBool,
    method: AtomicU8,
    drop_policy: AtomicU8,
}

impl LiveSettings {
    /// The settings in force at start-up (`method` already checked by the configuration).
    pub fn new(enabled: bool, method: &str, drop_policy: DropPolicy) -> LiveSettings {
        let m = METHODS.iter().position(|x| *x == method).unwrap_or(0);
        LiveSettings { enabled: AtomicBool::new(enabled), method: AtomicU8::new(m as u8), drop_policy: AtomicU8::new(drop_policy as u8) }
    }

    /// Whether frames are inferred (`false`: they are counted and dropped, as `enabled` in
    /// yolo_ros pauses its detector).
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The method in force.
    pub fn method(&self) -> &'static str {
        METHODS.get(usize::from(self.method.load(Ordering::Relaxed))).copied().unwrap_or(METHODS[0])
    }

    /// The drop policy in force.
    pub fn drop_policy(&self) -> DropPolicy {
        if self.drop_policy.load(Ordering::Relaxed) == DropPolicy::Oldest as u8 { DropPolicy::Oldest } else { DropPolicy::Newest }
    }
}

/// A checked change of a live setting.
enum Change {
    Enabled(bool),
    Method(u8),
    Drop(DropPolicy),
}

fn change(name: &str, value: &ParamValue) -> std::result::Result<Change, String> {
    Ok(match (name, value) {
        ("enabled", ParamValue::Bool(b)) => Change::Enabled(*b),
        ("enabled", v) => return Err(format!("enabled takes true or false, got {}", v.to_text())),
        ("method", ParamValue::Str(m)) => {
            check_method(m)?;
            Change::Method(METHODS.iter().position(|x| x == m).unwrap_or(0) as u8)
        }
        ("drop_policy", ParamValue::Str(p)) => Change::Drop(DropPolicy::parse(p)?),
        ("method" | "drop_policy", v) => return Err(format!("{name} takes a string, got {}", v.to_text())),
        _ => return Err(startup_only(name)),
    })
}

impl ParamPolicy for LiveSettings {
    /// Accepts `enabled` (bool), `method` and `drop_policy` (strings of the accepted values);
    /// refuses every other parameter as read at start-up.
    fn check(&self, name: &str, value: &ParamValue) -> std::result::Result<(), String> {
        change(name, value).map(|_| ())
    }

    fn set(&self, name: &str, value: &ParamValue) -> std::result::Result<(), String> {
        match change(name, value)? {
            Change::Enabled(b) => self.enabled.store(b, Ordering::Relaxed),
            Change::Method(m) => self.method.store(m, Ordering::Relaxed),
            Change::Drop(p) => self.drop_policy.store(p as u8, Ordering::Relaxed),
        }
        tracing::info!(parameter = name, value = %value.to_text(), "parameter changed at run time");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_parameters_change_and_bad_values_are_refused_with_the_reason() {
        let s = Arc::new(LiveSettings::new(true, "lop", DropPolicy::Newest));
        let set = |n: &str, v: &ParamValue| s.set(n, v);
        assert!(s.check("enabled", &ParamValue::Bool(false)).is_ok());
        assert!(s.enabled(), "check applies nothing");
        assert!(s.enabled());
        set("enabled", &ParamValue::Bool(false)).expect("a bool");
        assert!(!s.enabled());
        set("method", &ParamValue::Str("server-only".into())).expect("a known method");
        assert_eq!(s.method(), "server-only");
        set("drop_policy", &ParamValue::Str("oldest".into())).expect("a known policy");
        assert_eq!(s.drop_policy(), DropPolicy::Oldest);

        let e = set("enabled", &ParamValue::Str("yes".into())).expect_err("a string for a bool");
        assert!(e.contains("true or false"), "{e}");
        let e = set("method", &ParamValue::Str("fast".into())).expect_err("an unknown method");
        assert!(e.contains("lop, robot-only, server-only, layer-partition") && e.contains("'fast'"), "{e}");
        let e = set("drop_policy", &ParamValue::Int(1)).expect_err("an int for a string");
        assert!(e.contains("takes a string"), "{e}");
        let e = set("dilation", &ParamValue::Double(4.0)).expect_err("a start-up parameter");
        assert!(e.contains("read at start-up") && e.contains("'dilation'"), "{e}");
        // Refused changes leave the settings as they were.
        assert!(!s.enabled());
        assert_eq!(s.method(), "server-only");
        assert_eq!(s.drop_policy(), DropPolicy::Oldest);
        assert!(refuse_all().set("topics.image", &ParamValue::Str("/x".into())).is_err());
    }
}

//! Node parameters the ROS 2 way: a params file (`NODE: {ros__parameters: {...}}`, nested maps
//! flattened to dotted names as rclcpp does), then `--ros-args -p name:=value` overrides (values
//! parsed as YAML scalars, as rcl does), read through typed getters that record every parameter's
//! name, default and value so that a backend can declare them as node parameters.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_yaml_ng::Value;

use crate::error::{Error, Result};

/// A parameter value (the ROS 2 parameter types this crate uses).
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    /// `bool`.
    Bool(bool),
    /// `integer` (i64).
    Int(i64),
    /// `double`.
    Double(f64),
    /// `string`.
    Str(String),
    /// `string_array`.
    StrList(Vec<String>),
    /// `double_array`.
    DoubleList(Vec<f64>),
}

impl ParamValue {
    fn from_yaml(name: &str, v: &Value) -> Result<ParamValue> {
        let bad = || Error::Config { what: format!("parameter '{name}': unsupported value {v:?}") };
        Ok(match v {
            Value::Bool(b) => ParamValue::Bool(*b),
            Value::Number(n) if n.is_i64() => ParamValue::Int(n.as_i64().ok_or_else(bad)?),
            Value::Number(n) => ParamValue::Double(n.as_f64().ok_or_else(bad)?),
            Value::String(s) => ParamValue::Str(s.clone()),
            Value::Null => ParamValue::Str(String::new()),
            Value::Sequence(items) if items.iter().all(|i| matches!(i, Value::Number(_))) => {
                ParamValue::DoubleList(items.iter().map(|i| i.as_f64().ok_or_else(bad)).collect::<Result<_>>()?)
            }
            Value::Sequence(items) => ParamValue::StrList(
                items
                    .iter()
                    .map(|i| match i {
                        Value::String(s) => Ok(s.clone()),
                        Value::Number(n) => Ok(n.to_string()),
                        Value::Bool(b) => Ok(b.to_string()),
                        _ => Err(bad()),
                    })
                    .collect::<Result<_>>()?,
            ),
            _ => return Err(bad()),
        })
    }

    /// The value as text (for strings given as numbers and for logs).
    pub fn to_text(&self) -> String {
        match self {
            ParamValue::Bool(b) => b.to_string(),
            ParamValue::Int(i) => i.to_string(),
            ParamValue::Double(d) => d.to_string(),
            ParamValue::Str(s) => s.clone(),
            ParamValue::StrList(l) => l.join(","),
            ParamValue::DoubleList(l) => l.iter().map(f64::to_string).collect::<Vec<_>>().join(","),
        }
    }
}

/// What the command line of a node carries besides the config file: `--ros-args` parameter
/// overrides (`-p name:=value`), parameter files (`--params-file F`) and remappings
/// (`-r from:=to`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RosArgs {
    /// `name:=value` overrides in order (later wins).
    pub params: Vec<(String, String)>,
    /// Extra parameter files, applied after `--config` and before `-p`.
    pub params_files: Vec<PathBuf>,
    /// Remapping rules `from:=to`.
    pub remaps: Vec<String>,
}

impl RosArgs {
    /// Parses the arguments after `--ros-args` (up to an optional `--`).
    ///
    /// # Errors
    /// [`Error::Config`] for a malformed or unsupported argument.
    pub fn parse(args: &[String]) -> Result<RosArgs> {
        let mut out = RosArgs::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = |flag: &str| it.next().cloned().ok_or_else(|| Error::Config { what: format!("{flag} needs a value") });
            match a.as_str() {
                "--ros-args" => {}
                "--" => break,
                "-p" | "--param" => {
                    let v = value(a)?;
                    let (name, val) =
                        v.split_once(":=").ok_or_else(|| Error::Config { what: format!("expected -p name:=value, got '{v}'") })?;
                    out.params.push((name.trim().to_string(), val.to_string()));
                }
                "-r" | "--remap" => {
                    let v = value(a)?;
                    if !v.contains(":=") {
                        return Err(Error::Config { what: format!("expected -r from:=to, got '{v}'") });
                    }
                    out.remaps.push(v);
                }
                "--params-file" => out.params_files.push(PathBuf::from(value(a)?)),
                "--log-level" | "-e" | "--enclave" => {
                    value(a)?;
                }
                other => return Err(Error::Config { what: format!("unsupported ROS argument '{other}'") }),
            }
        }
        Ok(out)
    }
}

/// One declared parameter: its name, default and the value in force.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    /// Dotted name.
    pub name: String,
    /// The default.
    pub default: ParamValue,
    /// The value in force (file or override, else the default).
    pub value: ParamValue,
}

/// The parameters of one node, read through typed getters.
#[derive(Debug, Clone)]
pub struct Params {
    node: String,
    given: BTreeMap<String, ParamValue>,
    declared: Vec<Declared>,
}

fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, ParamValue>) -> Result<()> {
    match v {
        Value::Mapping(m) => {
            for (k, v) in m {
                let key = match k {
                    Value::String(s) => s.clone(),
                    other => return Err(Error::Config { what: format!("parameter key {other:?} under '{prefix}' is not a string") }),
                };
                let name = if prefix.is_empty() { key } else { format!("{prefix}.{key}") };
                flatten(&name, v, out)?;
            }
            Ok(())
        }
        other => {
            out.insert(prefix.to_string(), ParamValue::from_yaml(prefix, other)?);
            Ok(())
        }
    }
}

impl Params {
    /// No parameters given: every getter returns its default.
    pub fn empty(node: &str) -> Params {
        Params { node: node.to_string(), given: BTreeMap::new(), declared: Vec::new() }
    }

    /// Reads the parameters of `node` from a params-file text: the section `node`, `/node` or
    /// `/**` (all of them apply, the node's own last), its `ros__parameters` flattened.
    ///
    /// # Errors
    /// [`Error::Config`] for YAML that is not a params file.
    pub fn from_yaml_str(node: &str, text: &str, what: &str) -> Result<Params> {
        let mut p = Params::empty(node);
        p.merge_yaml(text, what)?;
        Ok(p)
    }

    fn merge_yaml(&mut self, text: &str, what: &str) -> Result<()> {
        let doc: Value = serde_yaml_ng::from_str(text).map_err(|e| Error::Config { what: format!("{what}: {e}") })?;
        let Value::Mapping(top) = doc else {
            if doc.is_null() {
                return Ok(());
            }
            return Err(Error::Config { what: format!("{what}: expected a mapping of node names") });
        };
        let full = format!("/{}", self.node);
        for selector in ["/**", self.node.as_str(), full.as_str()] {
            let Some(section) = top.get(selector) else { continue };
            let Some(params) = section.get("ros__parameters") else {
                return Err(Error::Config { what: format!("{what}: section '{selector}' has no ros__parameters") });
            };
            flatten("", params, &mut self.given)?;
        }
        Ok(())
    }

    /// Loads `config` (if any), then `args`' parameter files and `-p` overrides.
    ///
    /// # Errors
    /// [`Error::Io`] for an unreadable file; [`Error::Config`] for malformed contents.
    pub fn load(node: &str, config: Option<&Path>, args: &RosArgs) -> Result<Params> {
        let mut p = Params::empty(node);
        for path in config.into_iter().chain(args.params_files.iter().map(PathBuf::as_path)) {
            let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
            p.merge_yaml(&text, &path.display().to_string())?;
        }
        for (name, value) in &args.params {
            let v: Value = serde_yaml_ng::from_str(value).unwrap_or_else(|_| Value::String(value.clone()));
            p.given.insert(name.clone(), ParamValue::from_yaml(name, &v)?);
        }
        Ok(p)
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Sets a parameter (as a `-p` override would).
    pub fn set(&mut self, name: &str, value: ParamValue) {
        self.given.insert(name.to_string(), value);
    }

    fn take(&mut self, name: &str, default: ParamValue) -> ParamValue {
        let value = self.given.get(name).cloned().unwrap_or_else(|| default.clone());
        self.declared.retain(|d| d.name != name);
        self.declared.push(Declared { name: name.to_string(), default, value: value.clone() });
        value
    }

    fn type_error(&self, name: &str, want: &str, got: &ParamValue) -> Error {
        Error::Config { what: format!("{}: parameter '{name}' must be {want}, got {got:?}", self.node) }
    }

    /// A string parameter (numbers and booleans are taken as their text).
    pub fn string(&mut self, name: &str, default: &str) -> String {
        self.take(name, ParamValue::Str(default.into())).to_text()
    }

    /// A boolean parameter.
    ///
    /// # Errors
    /// [`Error::Config`] for a value of another type.
    pub fn bool(&mut self, name: &str, default: bool) -> Result<bool> {
        match self.take(name, ParamValue::Bool(default)) {
            ParamValue::Bool(b) => Ok(b),
            ParamValue::Str(s) if s == "true" || s == "false" => Ok(s == "true"),
            other => Err(self.type_error(name, "a boolean", &other)),
        }
    }

    /// An integer parameter.
    ///
    /// # Errors
    /// [`Error::Config`] for a value of another type.
    pub fn int(&mut self, name: &str, default: i64) -> Result<i64> {
        match self.take(name, ParamValue::Int(default)) {
            ParamValue::Int(i) => Ok(i),
            other => Err(self.type_error(name, "an integer", &other)),
        }
    }

    /// A floating-point parameter (integers accepted).
    ///
    /// # Errors
    /// [`Error::Config`] for a value of another type.
    pub fn double(&mut self, name: &str, default: f64) -> Result<f64> {
        match self.take(name, ParamValue::Double(default)) {
            ParamValue::Double(d) => Ok(d),
            ParamValue::Int(i) => Ok(i as f64),
            other => Err(self.type_error(name, "a number", &other)),
        }
    }

    /// A list of numbers.
    ///
    /// # Errors
    /// [`Error::Config`] for a value of another type.
    pub fn doubles(&mut self, name: &str, default: &[f64]) -> Result<Vec<f64>> {
        match self.take(name, ParamValue::DoubleList(default.to_vec())) {
            ParamValue::DoubleList(d) => Ok(d),
            ParamValue::Double(d) => Ok(vec![d]),
            ParamValue::Int(i) => Ok(vec![i as f64]),
            other => Err(self.type_error(name, "a list of numbers", &other)),
        }
    }

    /// A list of strings (`string_array`): a YAML list, `[]`, or one string (a
    /// comma-separated list, as `-p name:=a,b` gives it; empty: none).
    ///
    /// # Errors
    /// [`Error::Config`] for a value of another type.
    pub fn strings(&mut self, name: &str, default: &[&str]) -> Result<Vec<String>> {
        let default = default.iter().map(|s| s.to_string()).collect();
        let list = match self.take(name, ParamValue::StrList(default)) {
            ParamValue::StrList(l) => l,
            ParamValue::DoubleList(l) if l.is_empty() => Vec::new(),
            ParamValue::Str(s) => s.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect(),
            other => return Err(self.type_error(name, "a list of strings", &other)),
        };
        // Declared as the string list it is (YAML's `[]` reads as a list of numbers).
        if let Some(d) = self.declared.last_mut() {
            d.value = ParamValue::StrList(list.clone());
        }
        Ok(list)
    }

    /// A raw parameter value, if given (for settings that accept several types).
    pub fn raw(&mut self, name: &str, default: ParamValue) -> ParamValue {
        self.take(name, default)
    }

    /// Every parameter read so far, in reading order.
    pub fn declared(&self) -> &[Declared] {
        &self.declared
    }

    /// Parameters given (file or command line) that no getter read: likely typos.
    pub fn unknown(&self) -> Vec<String> {
        self.given.keys().filter(|k| !self.declared.iter().any(|d| &d.name == *k)).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn file_sections_overrides_and_types() {
        let yaml = "/**:\n  ros__parameters:\n    domain_id: 3\nlop_robot:\n  ros__parameters:\n    model:\n      source: zoo:vgg16\n    \
                    dilation: 2\n    other: 1\nlop_power:\n  ros__parameters:\n    rate_hz: 5.0\n";
        let mut p = Params::from_yaml_str("lop_robot", yaml, "test").unwrap();
        assert_eq!(p.int("domain_id", 0).unwrap(), 3);
        assert_eq!(p.string("model.source", "zoo:resnet18"), "zoo:vgg16");
        assert_eq!(p.double("dilation", 1.0).unwrap(), 2.0);
        assert_eq!(p.double("rate_hz", 100.0).unwrap(), 100.0, "another node's section does not apply");
        assert_eq!(p.unknown(), vec!["other".to_string()]);
        assert!(p.bool("dilation", false).is_err());

        let args = RosArgs::parse(&["--ros-args".into(), "-p".into(), "dilation:=4.5".into(), "-r".into(), "/a:=/b".into()]).unwrap();
        assert_eq!(args.remaps, vec!["/a:=/b".to_string()]);
        let mut p = Params::load("lop_robot", None, &args).unwrap();
        assert_eq!(p.double("dilation", 1.0).unwrap(), 4.5);
        assert_eq!(p.declared()[0].default, ParamValue::Double(1.0));
        assert!(RosArgs::parse(&["-p".into(), "novalue".into()]).is_err());
        assert!(RosArgs::parse(&["--bogus".into()]).is_err());
    }

    /// A list of strings from a file's list, an empty list (which YAML cannot type), a
    /// command line's comma-separated text, or its YAML list; a number is refused.
    #[test]
    fn string_lists() {
        let yaml = "lop_robot:\n  ros__parameters:\n    a: [front, rear]\n    b: []\n    c: 3\n";
        let mut p = Params::from_yaml_str("lop_robot", yaml, "test").unwrap();
        assert_eq!(p.strings("a", &[]).unwrap(), vec!["front", "rear"]);
        assert!(p.strings("b", &["x"]).unwrap().is_empty());
        assert!(p.strings("c", &[]).is_err());
        assert_eq!(p.strings("d", &["x"]).unwrap(), vec!["x"]);
        let args = RosArgs::parse(&["-p".into(), "a:=front, rear".into(), "-p".into(), "b:=[left,right]".into()]).unwrap();
        let mut p = Params::load("lop_robot", None, &args).unwrap();
        assert_eq!(p.strings("a", &[]).unwrap(), vec!["front", "rear"]);
        assert_eq!(p.strings("b", &[]).unwrap(), vec!["left", "right"]);
    }
}

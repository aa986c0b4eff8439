//! Readers of single parameter values (milliseconds, ranges, positive numbers, unsigned
//! integers, the device, bucket hysteresis) and of the `table:` section shared with the edge,
//! each refusing a bad value with an [`Error::Config`] that names the parameter.

use std::time::Duration;

use lop_runtime::bandwidth::Hysteresis;
use lop_runtime::table_config::TableSettings;

use crate::error::{Error, Result};
use crate::params::{ParamValue, Params};

/// A configuration error saying `what`.
pub(super) fn invalid(what: String) -> Error {
    Error::Config { what }
}

/// `name`, milliseconds (non-negative), as a duration.
pub(super) fn ms(p: &mut Params, name: &str, default: f64) -> Result<Duration> {
    let v = p.double(name, default)?;
    Duration::try_from_secs_f64(v / 1e3).map_err(|_| invalid(format!("{name} must be a non-negative number of ms, got {v}")))
}

/// `v`, the value of `name`, when it is finite and positive.
pub(super) fn positive(name: &str, v: f64) -> Result<f64> {
    if v.is_finite() && v > 0.0 { Ok(v) } else { Err(invalid(format!("{name} must be > 0, got {v}"))) }
}

/// `v`, the value of `name`, when it is a number in `[min, max]`: a rate, period or window that a
/// node turns into a duration or a buffer, so that a typo such as `1e300` is refused here rather
/// than panicking or allocating without bound where it is used.
pub(super) fn within(name: &str, v: f64, min: f64, max: f64) -> Result<f64> {
    if (min..=max).contains(&v) { Ok(v) } else { Err(invalid(format!("{name} must be in [{min}, {max}], got {v}"))) }
}

/// `name`, a `[min, max]` pair with min < max.
pub(super) fn range(p: &mut Params, name: &str, default: (f64, f64)) -> Result<(f32, f32)> {
    let v = p.doubles(name, &[default.0, default.1])?;
    match v[..] {
        [a, b] if a < b => Ok((a as f32, b as f32)),
        _ => Err(invalid(format!("{name} must be [min, max] with min < max, got {v:?}"))),
    }
}

/// `name`, an integer in 0..2^32.
pub(super) fn u32_param(p: &mut Params, name: &str, default: i64) -> Result<u32> {
    let v = p.int(name, default)?;
    u32::try_from(v).map_err(|_| invalid(format!("{name} must be in 0..2^32, got {v}")))
}

/// `hysteresis.margin` (>= 0) and `hysteresis.hold_ms`.
pub(super) fn hysteresis(p: &mut Params) -> Result<Hysteresis> {
    let d = Hysteresis::default();
    let margin = p.double("hysteresis.margin", d.margin)?;
    if !(margin.is_finite() && margin >= 0.0) {
        return Err(invalid(format!("hysteresis.margin must be >= 0, got {margin}")));
    }
    Ok(Hysteresis { margin, hold: ms(p, "hysteresis.hold_ms", d.hold.as_secs_f64() * 1e3)? })
}

/// `device`: `cpu`, `cuda` (device 0) or `cuda:N`.
pub(super) fn device(s: &str) -> Result<tch::Device> {
    match s {
        "cpu" => Ok(tch::Device::Cpu),
        "cuda" => Ok(tch::Device::Cuda(0)),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(tch::Device::Cuda)
            .ok_or_else(|| invalid(format!("device must be cpu, cuda or cuda:N, got '{s}'"))),
    }
}

/// A parameter's value as JSON.
fn param_to_json(v: ParamValue) -> serde_json::Value {
    match v {
        ParamValue::Bool(b) => b.into(),
        ParamValue::Int(i) => i.into(),
        ParamValue::Double(d) => d.into(),
        ParamValue::Str(s) => s.into(),
        ParamValue::StrList(l) => l.into(),
        ParamValue::DoubleList(l) => l.into(),
    }
}

/// A JSON value as a parameter's (numbers integer where they are, arrays of numbers).
fn json_to_param(v: &serde_json::Value) -> ParamValue {
    match v {
        serde_json::Value::Bool(b) => ParamValue::Bool(*b),
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => ParamValue::Int(n.as_i64().unwrap_or(i64::MAX)),
        serde_json::Value::Number(n) => ParamValue::Double(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::Array(a) => ParamValue::DoubleList(a.iter().filter_map(serde_json::Value::as_f64).collect()),
        other => ParamValue::Str(other.as_str().map_or_else(|| other.to_string(), str::to_string)),
    }
}

/// Reads the parameters under `prefix` shaped like `defaults` (nested objects become dotted
/// names), as JSON.
fn read_section(p: &mut Params, prefix: &str, defaults: serde_json::Value) -> serde_json::Value {
    match defaults {
        serde_json::Value::Object(fields) => serde_json::Value::Object(
            fields.into_iter().map(|(field, default)| (field.clone(), read_section(p, &format!("{prefix}.{field}"), default))).collect(),
        ),
        default => param_to_json(p.raw(prefix, json_to_param(&default))),
    }
}

/// Reads the `table.*` parameters (the `table:` section shared with the edge's configuration).
///
/// # Errors
/// [`Error::Config`] naming the bad field.
pub fn read_table(p: &mut Params) -> Result<TableSettings> {
    let defaults = serde_json::to_value(TableSettings::default()).map_err(|e| invalid(format!("table defaults: {e}")))?;
    let section = match read_section(p, "table", defaults) {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    serde_json::from_value(serde_json::Value::Object(section.clone())).map_err(|e| {
        // Name the field: serde's message for a bad enum value does not.
        let field = section.iter().find(|(k, v)| {
            let one: serde_json::Map<String, serde_json::Value> = [((*k).clone(), (*v).clone())].into_iter().collect();
            serde_json::from_value::<TableSettings>(serde_json::Value::Object(one)).is_err()
        });
        match field {
            Some((k, v)) => invalid(format!("table.{k} = {v}: {e}")),
            None => invalid(format!("table: {e}")),
        }
    })
}

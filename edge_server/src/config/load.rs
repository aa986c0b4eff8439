//! Reading a configuration file: [`EdgeConfig::load`] parses the YAML, resolves relative paths
//! against the file's directory and checks every value; and the values derived from a loaded
//! configuration that need no checks of their own (the fleet id, the memory budget, the table
//! specification, the resolved YAML).

use std::path::{Path, PathBuf};

use lop::planner::table::TableSpec;

use super::error::ConfigError;
use super::model_entry::ProfileSource;
use super::schema::EdgeConfig;

impl EdgeConfig {
    /// Reads, checks and resolves `path`.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file and the field.
    pub fn load(path: &Path) -> Result<EdgeConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io { path: path.to_path_buf(), source })?;
        Self::parse(&text, path)
    }

    /// Parses `text` as if read from `path` (relative paths resolve against its directory).
    ///
    /// # Errors
    /// As [`EdgeConfig::load`].
    pub fn parse(text: &str, path: &Path) -> Result<EdgeConfig, ConfigError> {
        let mut cfg: EdgeConfig =
            serde_yaml_ng::from_str(text).map_err(|e| ConfigError::Parse { path: path.to_path_buf(), msg: e.to_string() })?;
        cfg.path = path.to_path_buf();
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let base = if base.as_os_str().is_empty() { PathBuf::from(".") } else { base };
        let base = std::path::absolute(&base).unwrap_or(base);
        for p in [&mut cfg.model_store, &mut cfg.profile_cache, &mut cfg.robot_profiles, &mut cfg.table_cache] {
            *p = base.join(&*p);
        }
        for m in &mut cfg.models {
            if let ProfileSource::File(p) = &mut m.server_profile {
                *p = base.join(&*p);
            }
        }
        let z = &mut cfg.zenoh;
        for p in z.tls.iter_mut().flat_map(|t| [&mut t.ca, &mut t.cert, &mut t.key]).chain(&mut z.users_file).chain(&mut z.password_file) {
            *p = base.join(&*p);
        }
        cfg.check()?;
        Ok(cfg)
    }

    /// This edge's fleet id: `id`, or the host name made a valid id (letters, digits, `_`, `-`
    /// and `.` kept, anything else `-`, at most 64 bytes), or `edge` when there is none.
    pub fn edge_id(&self) -> String {
        if let Some(id) = &self.id {
            return id.clone();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let id: String = host
            .trim()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') { c } else { '-' })
            .take(lop_msgs::MAX_ID_LEN)
            .collect();
        if lop_msgs::validate_id(&id).is_ok() { id } else { "edge".to_string() }
    }

    /// The memory budget in bytes (`memory_budget_mb`), if any.
    pub fn memory_budget(&self) -> Option<u64> {
        self.memory_budget_mb.map(|mb| (mb * 1e6) as u64)
    }

    /// The schedule-table specification (robots must build theirs from the same values).
    ///
    /// # Errors
    /// Bad buckets, objective, link numbers or planner budget, naming the `table.*` field.
    pub fn table_spec(&self) -> Result<TableSpec, ConfigError> {
        self.table.fixed_spec().map_err(|e| self.invalid("table", e.to_string()))
    }

    /// The resolved configuration as YAML (defaults filled in, paths absolute).
    ///
    /// # Errors
    /// Never in practice (plain data); a serialiser failure is reported as [`ConfigError::Parse`].
    pub fn to_yaml(&self) -> Result<String, ConfigError> {
        serde_yaml_ng::to_string(self).map_err(|e| ConfigError::Parse { path: self.path.clone(), msg: e.to_string() })
    }
}

//! The table cache on disk: a table per key, trusted only when it parses, has this build's
//! version and hash and its key matches; built and stored (atomically) otherwise.

use super::TableModel;
use super::key::TableKey;
use super::schedule::ScheduleTable;
use super::spec::TableSpec;
use crate::error::{Error, Result};
use crate::profile::Profile;
use std::path::{Path, PathBuf};

/// Whether a table came from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheUse {
    /// A valid cached table was used.
    Hit,
    /// No cached table: built and stored.
    Miss,
    /// A cached file was corrupt or did not match its key: rebuilt and overwritten.
    Rebuilt,
}

/// The cache path of a key in `dir`.
pub fn cache_path(dir: &Path, key: &TableKey) -> PathBuf {
    dir.join(format!("{}.json", key.digest()))
}

/// The table for these inputs from the cache in `dir`, or built (and stored) when absent or
/// corrupt (a cached file is trusted only if it parses, has this build's version, its content
/// hash checks, and its key matches). Per-bucket planning seconds are empty on a hit.
///
/// # Errors
/// As [`ScheduleTable::build`]; [`Error::Io`] when the cache cannot be written.
pub fn load_or_build<G: TableModel>(
    dir: &Path,
    graph: &G,
    robot: &Profile,
    server: &Profile,
    spec: &TableSpec,
    threads: usize,
) -> Result<(ScheduleTable, Vec<f64>, CacheUse)> {
    spec.check()?;
    let model_hash = graph.content_hash()?;
    robot.validate(graph, &model_hash)?;
    server.validate(graph, &model_hash)?;
    let key = TableKey { model_hash, robot_profile_hash: robot.hash(), server_profile_hash: server.hash(), config_hash: spec.hash() };
    let path = cache_path(dir, &key);
    let mut usage = CacheUse::Miss;
    if path.exists() {
        match ScheduleTable::load(&path) {
            Ok(t) if t.key == key => return Ok((t, Vec::new(), CacheUse::Hit)),
            _ => usage = CacheUse::Rebuilt,
        }
    }
    let (t, times) = ScheduleTable::build(graph, robot, server, spec, threads)?;
    std::fs::create_dir_all(dir).map_err(|source| Error::Io { path: dir.to_path_buf(), source })?;
    // Written beside, then renamed: a `lop plan` running at the same time reads the old file or
    // the new one, never half of one.
    let partial = path.with_extension(format!("json.{}.partial", std::process::id()));
    t.save(&partial)?;
    std::fs::rename(&partial, &path).map_err(|source| Error::Io { path: path.clone(), source })?;
    Ok((t, times, usage))
}

//! [`TableKey`]: what a schedule table is keyed by (the model's, the profiles' and the spec's
//! hashes), and its digest, the cache file's stem.

use sha2::{Digest, Sha256};

/// What a table is keyed by.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TableKey {
    /// [`TableModel::content_hash`](super::TableModel::content_hash) of the model.
    pub model_hash: String,
    /// [`Profile::hash`](crate::profile::Profile::hash) of the robot profile.
    pub robot_profile_hash: String,
    /// [`Profile::hash`](crate::profile::Profile::hash) of the server profile.
    pub server_profile_hash: String,
    /// Hash of the [`TableSpec`](super::TableSpec) (planner configuration, buckets, link, objective).
    pub config_hash: String,
}

impl TableKey {
    /// The cache file name stem: sha256 of the key.
    pub fn digest(&self) -> String {
        hex::encode(Sha256::digest(serde_json::to_string(self).unwrap_or_default().as_bytes()))
    }
}

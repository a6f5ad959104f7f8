//! What a plan deploys for one entity: a version with one config text and one secrets
//! revision. Plain data: `state.json` (module `state`) records deployments, the layout
//! (module `layout`) names their files.

use serde::{Deserialize, Serialize};

use super::names::{check_version, is_sha256, NameError};

/// What a plan deploys: a version with one config text and one secrets revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deployment {
    /// The version (an unpacked directory under `versions/`).
    pub version: String,
    /// Hex SHA-256 of the plan's config text.
    pub config_sha256: String,
    /// The secrets revision.
    pub secrets_revision: u64,
}

impl Deployment {
    /// Checks that the fields are safe to build paths from (they may come from disk).
    pub fn validate(&self) -> Result<(), InvalidDeployment> {
        check_version(&self.version)?;
        if !is_sha256(&self.config_sha256) {
            return Err(InvalidDeployment::ConfigSha256 {
                value: self.config_sha256.clone(),
            });
        }
        Ok(())
    }
}

/// Why a deployment is not safe to build paths from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidDeployment {
    /// The version is not usable as a directory name.
    #[error(transparent)]
    Version(#[from] NameError),
    /// `config_sha256` is not a hex SHA-256.
    #[error("config_sha256 {value:?} is not a hex SHA-256")]
    ConfigSha256 {
        /// The value found.
        value: String,
    },
}

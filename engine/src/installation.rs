//! Module records in the replicated state (SPEC M8–M16): published module versions, module
//! installations in environments, and the change requests that move an installation to a
//! newer module version. The definition format itself is in [`crate::module`].

use std::collections::BTreeMap;

use semver::Version;
use serde::{Deserialize, Serialize};

use crate::module::{ModuleConfig, ModuleDefinition, MultikeySecret, SyncMode};
use crate::TimestampMs;

/// One published, immutable module version (SPEC M8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedModule {
    /// The module's name.
    pub name: String,
    /// Its version: 0.1.0 first, each publish bumps the minor version.
    pub version: Version,
    /// The validated definition.
    pub definition: ModuleDefinition,
    /// The YAML exactly as published, for download.
    pub yaml: String,
    /// Entry time of the publish.
    pub published_ms: TimestampMs,
}

impl PublishedModule {
    /// The record key: `name@version`.
    pub fn key_name(name: &str, version: &Version) -> String {
        format!("{name}@{version}")
    }
}

/// The first version a module gets (SPEC M8).
pub const FIRST_MODULE_VERSION: Version = Version::new(0, 1, 0);

/// What an installation manages for one entity: the module's config (which keys it controls
/// under MERGE) and the secrets the entity must have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagedEntity {
    /// How the module's config overrides meet the entity's.
    pub sync_mode: SyncMode,
    /// The module's rendered config overrides by version key.
    pub config: BTreeMap<Version, ModuleConfig>,
    /// Secrets the module requires the entity to have (SPEC M4).
    pub secret_requirements: BTreeMap<String, MultikeySecret>,
    /// The module (or `parent/sub`) that defines the entity.
    pub source_module: String,
}

/// A module installed in an environment (SPEC M9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Installation {
    /// `<environment>/<module>`.
    pub id: String,
    /// The environment.
    pub environment: String,
    /// The module's name.
    pub module: String,
    /// The module version whose definition was last applied.
    pub version: Version,
    /// Installer values by variable name (`sub.var` for a submodule's variable).
    pub variables: BTreeMap<String, String>,
    /// Module updates paused (SPEC M15): no change requests, module keys unlocked.
    pub paused: bool,
    /// Updates were resumed and the reconciling change request is not merged yet.
    pub resuming: bool,
    /// The entities it manages, by entity id.
    pub entities: BTreeMap<String, ManagedEntity>,
    /// Entry time of the installation.
    pub created_ms: TimestampMs,
    /// Entry time of the last applied update.
    pub updated_ms: TimestampMs,
}

impl Installation {
    /// The id of `module`'s installation in `environment`.
    pub fn id_of(environment: &str, module: &str) -> String {
        format!("{environment}/{module}")
    }
}

/// Where a change request stands (SPEC M9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ChangeRequestStatus {
    /// Waiting for an operator's approval.
    PendingApproval,
    /// Approved and applied to the installation.
    Merged,
    /// Refused by an operator.
    Rejected,
    /// Superseded by a newer version, or updates were paused or the installation removed.
    Cancelled,
    /// The new version cannot be applied to this installation (see the message).
    Error,
}

impl ChangeRequestStatus {
    /// Lowercase name for APIs and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeRequestStatus::PendingApproval => "pending-approval",
            ChangeRequestStatus::Merged => "merged",
            ChangeRequestStatus::Rejected => "rejected",
            ChangeRequestStatus::Cancelled => "cancelled",
            ChangeRequestStatus::Error => "error",
        }
    }

    /// Whether it can still be approved or rejected.
    pub fn is_open(self) -> bool {
        self == ChangeRequestStatus::PendingApproval
    }
}

/// A request to update an installation to another module version (SPEC M9, M15).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeRequest {
    /// `cr-<log index>`.
    pub id: String,
    /// The installation it updates.
    pub installation: String,
    /// The version the installation was at when it was opened.
    pub from_version: Version,
    /// The version it updates to.
    pub to_version: Version,
    /// Where it stands.
    pub status: ChangeRequestStatus,
    /// Why it exists: `module update` or `resuming updates`.
    pub reason: String,
    /// What must happen before it can be approved (variables without a value), if anything.
    pub blocked: Option<String>,
    /// Why it failed, was cancelled or rejected.
    pub message: String,
    /// Entry time it was opened.
    pub created_ms: TimestampMs,
    /// Who approved or rejected it.
    pub decided_by: Option<String>,
    /// When it was merged, rejected, cancelled or failed.
    pub closed_ms: Option<TimestampMs>,
}

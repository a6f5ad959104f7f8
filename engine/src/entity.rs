//! Entities: one deployed product in one environment (SPEC "Vocabulary").

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use semver::Version;

use serde::{Deserialize, Serialize};

use crate::error::CommandError;
use crate::settings::WindowOverride;
use crate::window::MaintenanceWindow;
use crate::TimestampMs;

/// Entity ids are shorter than this (SPEC "Vocabulary").
pub const MAX_ENTITY_ID_LEN: usize = 255;

/// What kind of deployable an entity is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EntityKind {
    /// A Helm chart; needs a Kubernetes namespace.
    HelmChart,
    /// A Terraform module; may name a cloud account.
    TerraformModule,
}

impl EntityKind {
    /// The spelling used in ids, the CLI and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            EntityKind::HelmChart => "helmChart",
            EntityKind::TerraformModule => "terraformModule",
        }
    }
}

impl fmt::Display for EntityKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EntityKind {
    type Err = CommandError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "helmChart" => Ok(EntityKind::HelmChart),
            "terraformModule" => Ok(EntityKind::TerraformModule),
            other => Err(CommandError::invalid(
                "kind",
                format!("{other:?} is not one of helmChart, terraformModule"),
            )),
        }
    }
}

/// `eid:<env>:<kind>:<name>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EntityId(pub String);

impl EntityId {
    /// Builds the id of entity `name` of `kind` in `environment`.
    pub fn new(environment: &str, kind: EntityKind, name: &str) -> Self {
        EntityId(format!("eid:{environment}:{kind}:{name}"))
    }

    /// The prefix shared by every entity id of `environment`.
    pub fn environment_prefix(environment: &str) -> String {
        format!("eid:{environment}:")
    }
}

impl fmt::Display for EntityId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The release channel an entity follows unless told otherwise.
pub const DEFAULT_RELEASE_CHANNEL: &str = "RELEASE";

/// The dependency group every entity is in unless told otherwise (SPEC C7, M5).
pub const DEFAULT_DEPENDENCY_GROUP: &str = "default";

/// One deployed product in one environment (SPEC "Vocabulary").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entity {
    /// `eid:<env>:<kind>:<name>`.
    pub id: EntityId,
    /// The environment it lives in.
    pub environment: String,
    /// Helm chart or Terraform module.
    pub kind: EntityKind,
    /// Its name within the environment and kind.
    pub name: String,
    /// `group:name` of the product it deploys.
    pub product_id: String,
    /// Kubernetes namespace (helm charts only, required there).
    pub k8s_namespace: Option<String>,
    /// Cloud account (terraform modules only, optional).
    pub account_id: Option<String>,
    /// Subscribed release channel.
    pub release_channel: String,
    /// Time of the Raft entry that created it.
    pub created_at_ms: TimestampMs,
    /// Dependency groups: a dependency is satisfied by an entity sharing one (SPEC C7, M5).
    pub dependency_groups: BTreeSet<String>,
    /// Products whose dependency checks this entity skips (SPEC C7).
    pub ignored_dependencies: BTreeSet<String>,
    /// The entity's own maintenance window (SPEC C4).
    pub maintenance_window: Option<MaintenanceWindow>,
    /// One-off window overrides (SPEC C5).
    pub window_overrides: Vec<WindowOverride>,
    /// Config overrides (YAML text) keyed by the lowest version they apply to; a version uses
    /// the newest key not above it (SPEC P4).
    pub config_overrides: BTreeMap<Version, String>,
    /// Secret values by name; never printed back (SPEC S4).
    pub secrets: BTreeMap<String, SecretValue>,
    /// Bumped on every secret change; a higher revision than reported is a secrets plan.
    pub secrets_revision: u64,
    /// What the agent (or the last successful plan) says is deployed.
    pub reported: ReportedState,
    /// The module that manages it, if any (SPEC M12).
    pub owner_module: Option<String>,
    /// When set, the entity's product is to be uninstalled (SPEC M11).
    pub marked_for_uninstall: bool,
    /// With `marked_for_uninstall`: the uninstall waits until the entity runs at least this
    /// version (it is upgraded there first, like any entity) (SPEC M11 `minVersion`).
    pub uninstall_min_version: Option<Version>,
    /// Secrets its module requires before a release is deployed, as `secret.key` names
    /// (SPEC M4 `secretRequirements`, multikey).
    pub required_secrets: BTreeSet<String>,
    /// For a dependency on a given product, the groups its providers are looked up in instead
    /// of `dependency_groups` (SPEC M5 `dependencyGroupOverrides`).
    pub dependency_group_overrides: BTreeMap<String, BTreeSet<String>>,
}

/// What an entity is created with; everything else starts at its default
/// ([`Entity::new`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntityIdentity {
    /// The environment it belongs to.
    pub environment: String,
    /// Helm chart or Terraform module.
    pub kind: EntityKind,
    /// Its name in the environment.
    pub name: String,
    /// The product it runs.
    pub product_id: String,
    /// The Kubernetes namespace (Helm charts only).
    pub k8s_namespace: Option<String>,
    /// The cloud account (Terraform modules only).
    pub account_id: Option<String>,
    /// The release channel it follows.
    pub release_channel: String,
}

impl Entity {
    /// A new, unmanaged entity with the defaults every entity starts with: the default
    /// dependency group, no windows, config, secrets or reported state. Its id is derived from
    /// the identity's environment, kind and name.
    pub fn new(identity: EntityIdentity, created_at_ms: TimestampMs) -> Self {
        let EntityIdentity {
            environment,
            kind,
            name,
            product_id,
            k8s_namespace,
            account_id,
            release_channel,
        } = identity;
        Entity {
            id: EntityId::new(&environment, kind, &name),
            environment,
            kind,
            name,
            product_id,
            k8s_namespace,
            account_id,
            release_channel,
            created_at_ms,
            dependency_groups: BTreeSet::from([DEFAULT_DEPENDENCY_GROUP.to_string()]),
            ignored_dependencies: BTreeSet::new(),
            maintenance_window: None,
            window_overrides: Vec::new(),
            config_overrides: BTreeMap::new(),
            secrets: BTreeMap::new(),
            secrets_revision: 0,
            reported: ReportedState::default(),
            owner_module: None,
            marked_for_uninstall: false,
            uninstall_min_version: None,
            required_secrets: BTreeSet::new(),
            dependency_group_overrides: BTreeMap::new(),
        }
    }

    /// The config overrides that apply to `version`: the newest key not above it.
    pub fn config_for(&self, version: &Version) -> &str {
        self.config_overrides
            .range(..=version.clone())
            .next_back()
            .map(|(_, text)| text.as_str())
            .unwrap_or("")
    }

    /// The groups in which this entity looks for providers of `product` (SPEC C7, M5).
    pub fn groups_for_dependency(&self, product: &str) -> &BTreeSet<String> {
        self.dependency_group_overrides
            .get(product)
            .unwrap_or(&self.dependency_groups)
    }

    /// Whether this entity and `other` share a dependency group.
    pub fn shares_group_with(&self, other: &Entity) -> bool {
        !self.dependency_groups.is_disjoint(&other.dependency_groups)
    }
}

pub use hub_wire::entity_state::{Health, ReportedState};

/// A secret's value. Its `Debug` never shows the value, so it cannot leak into logs.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretValue(pub String);

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretValue(<redacted>)")
    }
}

/// SHA-256 (hex) of a config overrides text: what agents report and plans compare.
pub fn config_sha256(text: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(text.as_bytes()))
}

//! Entities: one deployed product in one environment (SPEC "Vocabulary").

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::CommandError;
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

/// One deployed product in one environment. Later issues add reported state, overrides,
/// secrets, dependency groups and windows.
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
}

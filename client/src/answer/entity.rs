//! `entity`: one entity's settings and reported state (never a secret value: only the
//! secrets' names and revision).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{RegistryRef, Typed, WindowOverrideView};
use crate::query::Query;

/// What the agent (or the last finished plan) says the entity runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedView {
    /// When it was last reported.
    pub at: Option<String>,
    /// SHA-256 (hex) of the config overrides applied.
    pub config_sha256: Option<String>,
    /// `unknown`, `healthy` or `error`.
    pub health: String,
    /// The agent's last message (why it is unhealthy, …).
    pub message: String,
    /// The secrets revision applied.
    pub secrets_revision: u64,
    /// The version deployed (`None`: not installed).
    pub version: Option<String>,
}

/// The answer to `entity`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityView {
    /// Its cloud account (Terraform modules).
    pub account_id: Option<String>,
    /// Config overrides (YAML text) by the lowest version they apply to.
    pub config_overrides: BTreeMap<String, String>,
    /// Its dependency groups.
    pub dependency_groups: Vec<String>,
    /// Its environment.
    pub environment: String,
    /// `eid:…`.
    pub id: String,
    /// Products whose dependency checks it skips.
    pub ignored_dependencies: Vec<String>,
    /// Registries of its environment whose TLS is not verified.
    pub insecure_registries: Vec<RegistryRef>,
    /// Its Kubernetes namespace (Helm charts).
    pub k8s_namespace: Option<String>,
    /// `helmChart` or `terraformModule`.
    pub kind: String,
    /// Its own maintenance window.
    pub maintenance_window: Option<String>,
    /// Whether its product is to be uninstalled.
    pub marked_for_uninstall: bool,
    /// Its name in the environment.
    pub name: String,
    /// The module installation that manages it.
    pub owner_module: Option<String>,
    /// The product it deploys (`group:name`).
    pub product_id: String,
    /// The release channel it follows.
    pub release_channel: String,
    /// What it reports running.
    pub reported: ReportedView,
    /// Its secrets' names (never their values).
    pub secrets: Vec<String>,
    /// Bumped on every change of its secrets.
    pub secrets_revision: u64,
    /// Its window overrides.
    pub window_overrides: Vec<WindowOverrideView>,
}

/// Asks for one entity, by reference (`eid:…`, `ENV/NAME` or `ENV/KIND/NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetEntity(pub String);

impl Typed for GetEntity {
    type Answer = EntityView;
    fn query(&self) -> Query {
        Query::Entity {
            entity: self.0.clone(),
        }
    }
}

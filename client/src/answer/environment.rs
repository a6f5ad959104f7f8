//! `environment_settings` and `environment_labels`: an environment's settings and every
//! environment's labels.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Typed;
use crate::query::Query;

/// A one-off maintenance-window override (of an environment or an entity): inside
/// `[start, end)` the window constraint passes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowOverrideView {
    /// End of the range (exclusive).
    pub end: String,
    /// `o-…`.
    pub id: String,
    /// Why.
    pub reason: String,
    /// Start of the range (inclusive).
    pub start: String,
}

/// One artifact registry of an environment (its address without credentials).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryView {
    /// Whether the hub checks its artifacts: `expected` or `not-expected`.
    pub hub_access: String,
    /// Whether its certificate goes unverified.
    pub insecure_skip_verify: bool,
    /// Its name.
    pub name: String,
    /// How its certificate is verified: `system-roots`, `ca-bundle sha256:…` or
    /// `insecure-skip-verify`.
    pub tls: String,
    /// Its address, credentials removed.
    pub url: String,
}

/// The answer to `environment_settings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvironmentSettingsView {
    /// How long a failed plan suppresses its entity, in milliseconds.
    pub auto_suppression_ms: i64,
    /// How many of its entities are auto-suppressed now.
    pub autosuppressed_entities: usize,
    /// The environment's name.
    pub environment: String,
    /// Its maintenance window (`None`: always open).
    pub maintenance_window: Option<String>,
    /// Whether its window replaces the products' windows.
    pub override_product_maintenance_windows: bool,
    /// Its artifact registries, in declaration order.
    pub registries: Vec<RegistryView>,
    /// Whether a no-downtime roll-off of a recalled release waits for a maintenance window.
    pub require_maintenance_windows_for_no_downtime_recalled_release_roll_offs: bool,
    /// More auto-suppressed entities than this suppress the whole environment.
    pub suppress_deployment_after_num_autosuppressions: u32,
    /// Its window overrides.
    pub window_overrides: Vec<WindowOverrideView>,
}

/// Asks for one environment's settings, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetEnvironmentSettings(pub String);

impl Typed for GetEnvironmentSettings {
    type Answer = EnvironmentSettingsView;
    fn query(&self) -> Query {
        Query::EnvironmentSettings {
            environment: self.0.clone(),
        }
    }
}

/// One environment's labels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvironmentLabelsView {
    /// The environment's name.
    pub environment: String,
    /// Its labels, by key (empty when it has none).
    pub labels: BTreeMap<String, String>,
}

/// The answer to `environment_labels`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvironmentLabelsAnswer {
    /// Every environment, by name.
    pub environments: Vec<EnvironmentLabelsView>,
}

/// Asks for every environment's labels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListEnvironmentLabels;

impl Typed for ListEnvironmentLabels {
    type Answer = EnvironmentLabelsAnswer;
    fn query(&self) -> Query {
        Query::EnvironmentLabels
    }
}

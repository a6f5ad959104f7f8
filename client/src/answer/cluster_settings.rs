//! `cluster_settings`: the hub's cluster-wide settings.

use serde::{Deserialize, Serialize};

use super::Typed;
use crate::query::Query;

/// The answer to `cluster_settings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSettingsAnswer {
    /// Whether a change of an entity's config or secrets alone starts a canary analysis.
    pub canary_config_tracking: bool,
}

/// Asks for the cluster-wide settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterSettings;

impl Typed for ClusterSettings {
    type Answer = ClusterSettingsAnswer;
    fn query(&self) -> Query {
        Query::ClusterSettings
    }
}

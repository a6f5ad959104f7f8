//! Environments: the spokes an agent manages, each holding entities and settings.

use serde::{Deserialize, Serialize};

use crate::settings::{EnvironmentSettings, WindowOverride};
use crate::TimestampMs;

/// A spoke environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Environment {
    /// Unique name (a DNS label).
    pub name: String,
    /// Free text for operators.
    pub description: String,
    /// Time of the Raft entry that created it.
    pub created_at_ms: TimestampMs,
    /// Windows, registries, thresholds and flags.
    pub settings: EnvironmentSettings,
    /// One-off window overrides for the whole environment (SPEC C5).
    pub window_overrides: Vec<WindowOverride>,
}

//! Environment settings (SPEC "Vocabulary", C3–C6, C8, C9, P8, P9), one-off window overrides,
//! and the hub's own settings ([`ClusterSettings`]).

use serde::{Deserialize, Serialize};

use crate::artifact::ArtifactRegistry;
use crate::window::MaintenanceWindow;
use crate::TimestampMs;

/// Default duration of the automatic suppression created by a failed plan (SPEC P8).
pub const DEFAULT_AUTO_SUPPRESSION_MS: TimestampMs = 60 * 60 * 1000;

/// Default `suppress-deployment-after-num-autosuppressions` (SPEC P9).
pub const DEFAULT_AUTOSUPPRESSION_THRESHOLD: u32 = 5;

/// An environment's orchestration settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvironmentSettings {
    /// The environment's maintenance window; none means always open.
    pub maintenance_window: Option<MaintenanceWindow>,
    /// Artifact registries, in declaration order (the first one resolves relative URIs).
    pub registries: Vec<ArtifactRegistry>,
    /// `suppress-deployment-after-num-autosuppressions`: more auto-suppressed entities than
    /// this suppress the whole environment (SPEC P9).
    pub autosuppression_threshold: u32,
    /// How long a failed plan suppresses its entity (SPEC P8).
    pub auto_suppression_ms: TimestampMs,
    /// `override-product-maintenance-windows` (SPEC C4).
    pub override_product_maintenance_windows: bool,
    /// `require-maintenance-windows-for-no-downtime-recalled-release-roll-offs` (SPEC C6).
    pub require_windows_for_recall_roll_offs: bool,
}

impl Default for EnvironmentSettings {
    fn default() -> Self {
        Self {
            maintenance_window: None,
            registries: Vec::new(),
            autosuppression_threshold: DEFAULT_AUTOSUPPRESSION_THRESHOLD,
            auto_suppression_ms: DEFAULT_AUTO_SUPPRESSION_MS,
            override_product_maintenance_windows: false,
            require_windows_for_recall_roll_offs: false,
        }
    }
}

/// A temporary maintenance-window override: inside `[start, end)` the window constraint
/// passes; every other constraint still holds (SPEC C5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowOverride {
    /// `o-<index>`.
    pub id: String,
    /// Start (inclusive).
    pub start_ms: TimestampMs,
    /// End (exclusive).
    pub end_ms: TimestampMs,
    /// Why; required.
    pub reason: String,
}

impl WindowOverride {
    /// Whether the override is in force at `t`.
    pub fn active_at(&self, t: TimestampMs) -> bool {
        self.start_ms <= t && t < self.end_ms
    }
}

/// The name of the one [`ClusterSettings`] record.
pub const CLUSTER_SETTINGS_KEY: &str = "cluster";

/// Settings of the whole hub, replicated (the leader decides by them, so no node flag could
/// hold them). Without a record every setting has its default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSettings {
    /// Whether a change of an entity's config or secrets alone starts a canary analysis
    /// (Flagger's config tracking; default on). Off, such a revision is promoted without
    /// analysis, like a canary's own `flagger.app/config-tracking: disabled` annotation.
    pub canary_config_tracking: bool,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        Self {
            canary_config_tracking: true,
        }
    }
}

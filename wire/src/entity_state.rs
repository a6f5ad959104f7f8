//! What an entity runs, as its agent reports it and the hub records it.

use semver::Version;
use serde::{Deserialize, Serialize};

use crate::TimestampMs;

/// Reported health (SPEC C10).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Health {
    /// Nothing reported yet.
    #[default]
    Unknown,
    /// Running and ready.
    Healthy,
    /// In error: ordinary plans do not upgrade it.
    Error,
}

impl Health {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Healthy => "healthy",
            Health::Error => "error",
        }
    }

    /// Parses a lower-case name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "unknown" => Health::Unknown,
            "healthy" => Health::Healthy,
            "error" => Health::Error,
            _ => return None,
        })
    }
}

/// What is deployed, as last reported.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedState {
    /// The deployed version; `None` when not installed.
    pub version: Option<Version>,
    /// Its health.
    pub health: Health,
    /// SHA-256 (hex) of the applied config overrides text.
    pub config_sha256: Option<String>,
    /// The applied secrets revision.
    pub secrets_revision: u64,
    /// The agent's last message (e.g. why it is unhealthy).
    pub message: String,
    /// Entry time of the last report or finished plan.
    pub reported_at_ms: Option<TimestampMs>,
}

/// One entity's reported state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityReport {
    /// The entity id.
    pub entity: String,
    /// Deployed version, `None` when not installed.
    pub version: Option<Version>,
    /// Health.
    pub health: Health,
    /// SHA-256 of the applied config text, if known.
    pub config_sha256: Option<String>,
    /// The applied secrets revision, if known.
    pub secrets_revision: Option<u64>,
    /// Free text (why unhealthy).
    pub message: String,
}

impl EntityReport {
    /// Whether applying this report would change `reported` (a report that changes nothing
    /// writes no record and fires no trigger). Absent `config_sha256` and `secrets_revision`
    /// leave the recorded values as they are.
    pub fn changes(&self, reported: &ReportedState) -> bool {
        reported.version != self.version
            || reported.health != self.health
            || self
                .config_sha256
                .as_ref()
                .is_some_and(|sha| reported.config_sha256.as_ref() != Some(sha))
            || self
                .secrets_revision
                .is_some_and(|rev| reported.secrets_revision != rev)
            || reported.message != self.message
    }
}

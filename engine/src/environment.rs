//! Environments: the spokes an agent manages, each holding entities and settings.

use serde::{Deserialize, Serialize};

use crate::TimestampMs;

/// A spoke environment. Later issues add its settings (windows, registries, thresholds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Environment {
    /// Unique name (a DNS label).
    pub name: String,
    /// Free text for operators.
    pub description: String,
    /// Time of the Raft entry that created it.
    pub created_at_ms: TimestampMs,
}

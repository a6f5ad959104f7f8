//! Products, their releases, release channels and recalls (SPEC "Vocabulary", P4, C6, C7).

use std::collections::BTreeSet;

use semver::Version;
use serde::{Deserialize, Serialize};

use crate::release::{builtin_channels_for, Artifact, ProductDependency, BUILTIN_CHANNELS};
use crate::window::MaintenanceWindow;
use crate::TimestampMs;

/// A product (`group:name`) that releases are published for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Product {
    /// `group:name`.
    pub id: String,
    /// Free text.
    pub description: String,
    /// The product editors' maintenance window (SPEC C3, C4), if any.
    pub maintenance_window: Option<MaintenanceWindow>,
    /// Time of the entry that created it.
    pub created_at_ms: TimestampMs,
}

/// One published version of a product: immutable except for its custom channel membership.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Release {
    /// `group:name`.
    pub product_id: String,
    /// Its semantic version.
    pub version: Version,
    /// What the agent fetches.
    pub artifacts: Vec<Artifact>,
    /// `extensions.product-dependencies`.
    pub dependencies: Vec<ProductDependency>,
    /// Custom channels this release was added to (built-ins follow from the version).
    pub custom_channels: BTreeSet<String>,
    /// Time of the entry that published it.
    pub published_at_ms: TimestampMs,
}

impl Release {
    /// Whether the release is in `channel` (built-in by version type, or added to a custom one).
    pub fn in_channel(&self, channel: &str) -> bool {
        if BUILTIN_CHANNELS.contains(&channel) {
            builtin_channels_for(&self.version).contains(&channel)
        } else {
            self.custom_channels.contains(channel)
        }
    }

    /// The record name: `group:name@version`.
    pub fn key_name(product_id: &str, version: &Version) -> String {
        format!("{product_id}@{version}")
    }
}

/// A custom release channel (built-ins need no record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Channel {
    /// Upper-case name, e.g. `CANARY_FLEET`.
    pub name: String,
    /// Free text.
    pub description: String,
    /// Time of the entry that created it.
    pub created_at_ms: TimestampMs,
}

/// A recall: releases of one product in an inclusive version range that must not be deployed,
/// and that entities running them are rolled off (SPEC P4, C6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recall {
    /// `r-<index>`.
    pub id: String,
    /// `group:name`.
    pub product_id: String,
    /// Lowest recalled version (inclusive).
    pub from: Version,
    /// Highest recalled version (inclusive); equal to `from` for a single version.
    pub to: Version,
    /// Why, for Activity.
    pub reason: String,
    /// Time of the entry that recalled.
    pub created_at_ms: TimestampMs,
}

impl Recall {
    /// Whether `version` is in the recalled range.
    pub fn covers(&self, version: &Version) -> bool {
        &self.from <= version && version <= &self.to
    }

    /// `1.2.3` or `1.2.0..=1.2.9`.
    pub fn range_text(&self) -> String {
        if self.from == self.to {
            self.from.to_string()
        } else {
            format!("{}..={}", self.from, self.to)
        }
    }
}

/// Whether `name` is a built-in channel.
pub fn is_builtin_channel(name: &str) -> bool {
    BUILTIN_CHANNELS.contains(&name)
}

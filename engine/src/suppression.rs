//! Suppression windows: block plan issuance on an entity or a whole environment for a time
//! range, and take precedence over maintenance windows (SPEC C8, P8, P9, P10, P12).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::TimestampMs;

/// What a suppression, a window override or a cancel applies to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Scope {
    /// Every entity of an environment, by name.
    Environment(String),
    /// One entity, by id.
    Entity(String),
}

impl Scope {
    /// The environment the scope lies in.
    pub fn environment(&self) -> &str {
        match self {
            Scope::Environment(env) => env,
            // Entity ids are `eid:<env>:<kind>:<name>`; validated on creation.
            Scope::Entity(id) => id.split(':').nth(1).unwrap_or(""),
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Environment(env) => write!(f, "environment {env}"),
            Scope::Entity(id) => write!(f, "entity {id}"),
        }
    }
}

/// Who created a suppression.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SuppressionSource {
    /// An operator; always respected (SPEC P10).
    Manual,
    /// A failed plan (SPEC P8); a rollback may pass it (SPEC P10).
    FailedPlan {
        /// The plan that failed.
        plan_id: String,
    },
    /// Too many auto-suppressed entities in the environment (SPEC P9).
    EnvironmentThreshold,
}

impl SuppressionSource {
    /// Automatic suppressions (failed plan, threshold) let rollbacks through.
    pub fn is_automatic(&self) -> bool {
        !matches!(self, SuppressionSource::Manual)
    }

    /// A short label for tables.
    pub fn label(&self) -> &'static str {
        match self {
            SuppressionSource::Manual => "manual",
            SuppressionSource::FailedPlan { .. } => "failed-plan",
            SuppressionSource::EnvironmentThreshold => "environment-threshold",
        }
    }
}

/// A suppression window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suppression {
    /// `s-<index>`.
    pub id: String,
    /// What it suppresses.
    pub scope: Scope,
    /// Who created it.
    pub source: SuppressionSource,
    /// Start (inclusive).
    pub start_ms: TimestampMs,
    /// End (exclusive); `None` for the threshold suppression, which ends when the count falls.
    pub end_ms: Option<TimestampMs>,
    /// Why.
    pub reason: String,
    /// Time of the entry that created it.
    pub created_at_ms: TimestampMs,
}

impl Suppression {
    /// Whether it blocks at `t`.
    pub fn active_at(&self, t: TimestampMs) -> bool {
        self.start_ms <= t && self.end_ms.is_none_or(|end| t < end)
    }

    /// Whether it has ended by `t` (and can be forgotten).
    pub fn expired_at(&self, t: TimestampMs) -> bool {
        self.end_ms.is_some_and(|end| end <= t)
    }
}

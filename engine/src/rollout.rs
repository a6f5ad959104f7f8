//! The committed progress of one release's rollout under a policy ([`crate::rollout_policy`]):
//! when each wave became done, until when it soaks, whether an operator promoted it, and
//! whether the rollout is halted.
//!
//! Everything time-dependent about a rollout is here, written by apply at the entry time of
//! the entry that changed it, never recomputed from a clock: a new leader reads the same
//! soak ends and halts from the replicated state, so no wave opens early or twice and no
//! soak restarts when the leadership moves. One record per (policy product, version),
//! created the first time something about that release is committed.

use std::collections::{BTreeMap, BTreeSet};

use semver::Version;
use serde::{Deserialize, Serialize};

use crate::TimestampMs;

/// The progress of `product@version` (the policy's product; the record covers the release
/// `version` of every product of the policy's group).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rollout {
    /// The policy's product.
    pub product: String,
    /// The version rolling out.
    pub version: Version,
    /// Each wave's progress, by wave name (a wave without an entry has not been done yet).
    pub waves: BTreeMap<String, WaveProgress>,
    /// Set while the rollout is halted.
    pub halt: Option<RolloutHalt>,
    /// Failures an operator resumed past (`ResumeRollout`): they do not halt it again.
    pub forgiven: BTreeSet<String>,
}

impl Rollout {
    /// The record's name: `group:name@version`.
    pub fn key_name(product: &str, version: &Version) -> String {
        format!("{product}@{version}")
    }

    /// A record with nothing committed yet.
    pub fn new(product: &str, version: &Version) -> Self {
        Rollout {
            product: product.to_string(),
            version: version.clone(),
            waves: BTreeMap::new(),
            halt: None,
            forgiven: BTreeSet::new(),
        }
    }

    /// The progress of wave `name` (empty if nothing is committed for it).
    pub fn wave(&self, name: &str) -> WaveProgress {
        self.waves.get(name).cloned().unwrap_or_default()
    }
}

/// What is committed about one wave of a rollout.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaveProgress {
    /// Entry time at which every entity of the wave was done (running the release, healthy,
    /// its canary succeeded). Cleared if one regresses before the soak ends.
    pub completed_at_ms: Option<TimestampMs>,
    /// `completed_at_ms` plus the wave's soak as the policy said then: the wave has passed
    /// from this time on.
    pub soak_until_ms: Option<TimestampMs>,
    /// An operator's `PromoteWave`: the wave passed then, soak or not.
    pub promoted: Option<Promotion>,
}

impl WaveProgress {
    /// Whether the wave has passed at `now`: promoted, or done and soaked. Once passed, a
    /// wave stays passed (apply never clears a soak that has ended).
    pub fn passed_at(&self, now: TimestampMs) -> bool {
        self.promoted.is_some() || self.soak_until_ms.is_some_and(|t| t <= now)
    }
}

/// An operator's promotion of a wave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Promotion {
    /// Entry time.
    pub at_ms: TimestampMs,
    /// Who.
    pub actor: String,
}

/// Why and since when a rollout is halted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutHalt {
    /// Entry time.
    pub at_ms: TimestampMs,
    /// What halted it.
    pub cause: HaltCause,
    /// The recalls a `recall` wave created (`r-<index>`, `r-<index>-<n>`).
    pub recalls: Vec<String>,
}

/// What halted a rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HaltCause {
    /// A plan to the release failed.
    PlanFailed {
        /// The plan.
        plan: String,
        /// Its entity.
        entity: String,
        /// The entity's wave (`None`: after the last wave).
        wave: Option<String>,
    },
    /// A canary analysing the release failed.
    CanaryFailed {
        /// The canary.
        canary: String,
        /// Its entity.
        entity: String,
        /// The entity's wave (`None`: after the last wave).
        wave: Option<String>,
        /// Since when the canary has been failed (its phase's start).
        since_ms: TimestampMs,
    },
    /// An operator's `HaltRollout`.
    Operator {
        /// Who.
        actor: String,
        /// Why.
        reason: String,
    },
}

impl HaltCause {
    /// The key under which `ResumeRollout` forgives this failure (`None`: an operator's
    /// halt, which nothing re-raises).
    pub fn failure_key(&self) -> Option<String> {
        match self {
            HaltCause::PlanFailed { plan, .. } => Some(format!("plan {plan}")),
            HaltCause::CanaryFailed {
                canary, since_ms, ..
            } => Some(format!("canary {canary} at {since_ms}")),
            HaltCause::Operator { .. } => None,
        }
    }
}

impl std::fmt::Display for HaltCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let wave = |w: &Option<String>| match w {
            Some(w) => format!("wave `{w}`"),
            None => "after the last wave".to_string(),
        };
        match self {
            HaltCause::PlanFailed {
                plan,
                entity,
                wave: w,
            } => {
                write!(f, "plan {plan} of {entity} failed in {}", wave(w))
            }
            HaltCause::CanaryFailed {
                canary,
                entity,
                wave: w,
                ..
            } => write!(f, "canary {canary} of {entity} failed in {}", wave(w)),
            HaltCause::Operator { actor, reason } => write!(f, "by {actor}: {reason}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wave_passes_at_its_soak_end_or_when_promoted() {
        let mut w = WaveProgress::default();
        assert!(!w.passed_at(i64::MAX), "not done");
        w.completed_at_ms = Some(100);
        w.soak_until_ms = Some(200);
        assert!(!w.passed_at(199));
        assert!(w.passed_at(200), "exactly at the soak end");
        let early = WaveProgress {
            promoted: Some(Promotion {
                at_ms: 5,
                actor: "alice".into(),
            }),
            ..WaveProgress::default()
        };
        assert!(early.passed_at(0));
    }
}

//! Entities that have never been healthy on any version (issue 55), and the last attempt
//! that failed for each.
//!
//! The health constraint (SPEC C10) protects a running workload: an entity in error is not
//! changed by ordinary plans. An entity whose first install failed has nothing running to
//! protect, so the constraint lets it retry once something changed since the failed attempt:
//! its config, a secret, or the release (a newer one was published). The same attempt is not
//! repeated by itself.
//!
//! An entity gets a [`NeverHealthy`] row when it is created and loses it the first time it is
//! reported (or a plan leaves it) healthy on a version; the row is never created again. The
//! row is its own record, so the entity record's encoding is unchanged and old logs and
//! snapshots decode as before. An entity created before this record existed has no row and
//! is treated as once healthy: the rule it had (held while in error) stays, never a looser one.

use semver::Version;
use serde::{Deserialize, Serialize};

use crate::TimestampMs;

/// An entity not yet healthy on any version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeverHealthy {
    /// The entity's id.
    pub entity: String,
    /// Entry time of the entity's creation.
    pub since_ms: TimestampMs,
    /// The last plan that failed after touching the workload, if any.
    pub failed_attempt: Option<FailedAttempt>,
}

/// What a failed plan of a never-healthy entity tried to deploy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedAttempt {
    /// The plan's id.
    pub plan: String,
    /// The version it deployed.
    pub version: Version,
    /// SHA-256 (hex) of the config overrides it applied.
    pub config_sha256: String,
    /// The secrets revision it applied.
    pub secrets_revision: u64,
}

/// What differs between a candidate and the failed attempt of a never-healthy entity, in
/// the order it is named: a new release first, then config, then secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RetryChange {
    /// No failed attempt is recorded: the entity reported an error by itself.
    NoFailedAttempt,
    /// The candidate deploys another release than the failed attempt.
    Release {
        /// The failed attempt's version.
        failed: Version,
    },
    /// Same release, other config overrides.
    Config,
    /// Same release and config, other secrets.
    Secrets,
}

impl FailedAttempt {
    /// How a candidate deploying `version` with config `config_sha256` and secrets revision
    /// `secrets_revision` differs from this attempt; `None` when it would repeat it.
    pub fn change_to(
        &self,
        version: &Version,
        config_sha256: &str,
        secrets_revision: u64,
    ) -> Option<RetryChange> {
        if *version != self.version {
            Some(RetryChange::Release {
                failed: self.version.clone(),
            })
        } else if config_sha256 != self.config_sha256 {
            Some(RetryChange::Config)
        } else if secrets_revision != self.secrets_revision {
            Some(RetryChange::Secrets)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_names_what_changed_and_a_repeat_is_none() {
        let v = |s: &str| Version::parse(s).unwrap();
        let a = FailedAttempt {
            plan: "p-7-0".into(),
            version: v("1.0.0"),
            config_sha256: "aa".into(),
            secrets_revision: 2,
        };
        assert_eq!(a.change_to(&v("1.0.0"), "aa", 2), None);
        assert_eq!(
            a.change_to(&v("1.1.0"), "bb", 3),
            Some(RetryChange::Release { failed: v("1.0.0") })
        );
        assert_eq!(a.change_to(&v("1.0.0"), "bb", 3), Some(RetryChange::Config));
        assert_eq!(
            a.change_to(&v("1.0.0"), "aa", 3),
            Some(RetryChange::Secrets)
        );
    }
}

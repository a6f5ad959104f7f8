//! Environment labels (`region=eu`, `tier=prod`): what rollout-policy selectors match
//! ([`crate::rollout_policy::Selector`]).
//!
//! Labels live in a record of their own, one per labelled environment, rather than in
//! [`crate::Environment`]: the environment record's encoding is part of the log format and
//! stays as it is. An environment without labels has no record.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::CommandError;

/// Most labels one environment may carry.
pub const MAX_LABELS: usize = 32;

/// Longest label key or value.
pub const MAX_LABEL_LEN: usize = 63;

/// An environment's labels: one record per environment that has any.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvironmentLabels {
    /// The environment.
    pub environment: String,
    /// Key -> value, at most [`MAX_LABELS`].
    pub labels: BTreeMap<String, String>,
}

impl EnvironmentLabels {
    /// Whether every `key=value` of `wanted` is among these labels (an empty `wanted`
    /// matches every environment).
    pub fn matches(labels: &BTreeMap<String, String>, wanted: &BTreeMap<String, String>) -> bool {
        wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
    }
}

/// Checks a label key: 1–63 characters of `a-z`, `0-9`, `-`, `.`, `_` and `/`, starting and
/// ending with a letter or digit (`tier`, `topology.example.com/region`). `field` names the
/// field in the error.
pub fn validate_label_key(field: &str, key: &str) -> Result<(), CommandError> {
    check_label(field, "key", key, |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.' | '_' | '/')
    })
}

/// Checks a label value: 1–63 characters of `A-Z`, `a-z`, `0-9`, `-`, `.` and `_`, starting
/// and ending with a letter or digit.
pub fn validate_label_value(field: &str, value: &str) -> Result<(), CommandError> {
    check_label(field, "value", value, |c| {
        c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')
    })
}

fn check_label(
    field: &str,
    what: &str,
    text: &str,
    allowed: impl Fn(char) -> bool,
) -> Result<(), CommandError> {
    if text.is_empty() {
        return Err(CommandError::invalid(
            field,
            format!("label {what} must not be empty"),
        ));
    }
    if text.len() > MAX_LABEL_LEN {
        return Err(CommandError::invalid(
            field,
            format!(
                "label {what} has {} characters, at most {MAX_LABEL_LEN} allowed",
                text.len()
            ),
        ));
    }
    if let Some(bad) = text.chars().find(|c| !allowed(*c)) {
        return Err(CommandError::invalid(
            field,
            format!("label {what} {text:?} contains {bad:?}"),
        ));
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    if !text.starts_with(alnum) || !text.ends_with(alnum) {
        return Err(CommandError::invalid(
            field,
            format!("label {what} {text:?} must start and end with a letter or digit"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values() {
        for ok in ["tier", "region", "topology.example.com/zone", "a_b", "x1"] {
            validate_label_key("labels", ok).unwrap();
        }
        for bad in ["", "Tier", "-a", "a-", "a b", "a=b", &"k".repeat(64)] {
            let err = validate_label_key("labels", bad).unwrap_err();
            assert!(err.to_string().starts_with("invalid labels:"), "{err}");
        }
        for ok in ["prod", "EU-West", "1.2", "a_b"] {
            validate_label_value("labels.tier", ok).unwrap();
        }
        for bad in ["", "a/b", "-x", "x.", "a b"] {
            assert!(validate_label_value("labels.tier", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn selection_is_an_and_of_every_wanted_label() {
        let labels: BTreeMap<String, String> = [
            ("tier".into(), "prod".into()),
            ("region".into(), "eu".into()),
        ]
        .into();
        let want = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(EnvironmentLabels::matches(
            &labels,
            &want(&[("tier", "prod")])
        ));
        assert!(EnvironmentLabels::matches(
            &labels,
            &want(&[("tier", "prod"), ("region", "eu")])
        ));
        assert!(!EnvironmentLabels::matches(
            &labels,
            &want(&[("tier", "prod"), ("region", "us")])
        ));
        assert!(!EnvironmentLabels::matches(
            &labels,
            &want(&[("zone", "a")])
        ));
        assert!(EnvironmentLabels::matches(&labels, &want(&[])));
    }
}

//! Errors a command can fail with. A failed command changes nothing.

use serde::{Deserialize, Serialize};

use crate::feature_level::FeatureLevel;

/// Why a command was refused. Each variant names the field or object at fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum CommandError {
    /// A field's value is malformed.
    #[error("invalid {field}: {reason}")]
    InvalidField {
        /// The field, as the user spells it (`name`, `product_id`, ...).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The object to create exists already.
    #[error("{kind} {name:?} already exists")]
    AlreadyExists {
        /// `environment`, `entity`, ...
        kind: String,
        /// Its name or id.
        name: String,
    },
    /// The object named does not exist.
    #[error("{kind} {name:?} not found")]
    NotFound {
        /// `environment`, `entity`, ...
        kind: String,
        /// Its name or id.
        name: String,
    },
    /// The object exists but the command may not act on it now.
    #[error("{0}")]
    FailedPrecondition(String),
    /// The actor's roles do not allow the command: who, what, and the role and scope it
    /// needs.
    #[error("{0}")]
    PermissionDenied(String),
    /// The command needs a feature level the cluster does not run yet
    /// ([`crate::feature_level`]): every node refuses it alike, and it changes nothing.
    #[error(
        "the cluster runs feature level {cluster}; {command} needs {needed}: upgrade every node first"
    )]
    FeatureLevelTooLow {
        /// The cluster's level ([`crate::State::cluster_level`]).
        cluster: FeatureLevel,
        /// The level the command needs ([`crate::Command::level`]).
        needed: FeatureLevel,
        /// The command's name, as [`crate::Command::kind`] gives it (`set_cluster_level`).
        command: String,
    },
}

impl CommandError {
    pub(crate) fn invalid(field: &str, reason: impl Into<String>) -> Self {
        Self::InvalidField {
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    /// This error of an element of a list: an invalid field's name is prefixed with the
    /// element's path (`certificates[3].serial`); other errors are unchanged.
    pub(crate) fn within(self, path: &str) -> Self {
        match self {
            Self::InvalidField { field, reason } => Self::InvalidField {
                field: format!("{path}.{field}"),
                reason,
            },
            other @ (Self::AlreadyExists { .. }
            | Self::NotFound { .. }
            | Self::FailedPrecondition(_)
            | Self::PermissionDenied(_)
            | Self::FeatureLevelTooLow { .. }) => other,
        }
    }
}

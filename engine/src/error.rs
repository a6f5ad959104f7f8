//! Errors a command can fail with. A failed command changes nothing.

use serde::{Deserialize, Serialize};

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
}

impl CommandError {
    pub(crate) fn invalid(field: &str, reason: impl Into<String>) -> Self {
        Self::InvalidField {
            field: field.to_string(),
            reason: reason.into(),
        }
    }
}

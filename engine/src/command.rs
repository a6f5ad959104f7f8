//! Commands: the only way the replicated state changes. Each is one Raft entry.

use serde::{Deserialize, Serialize};

use crate::entity::EntityKind;
use crate::TimestampMs;

/// One Raft entry's payload: a command, the leader's clock when it proposed it, and an optional
/// idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// What to do.
    pub command: Command,
    /// Wall-clock time stamped by the proposing leader; the only time apply ever sees.
    pub time_ms: TimestampMs,
    /// A client-chosen key: a second request with the same key returns the first one's
    /// result and changes nothing.
    pub request_id: Option<String>,
}

/// A change to the replicated state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Create an environment.
    CreateEnvironment {
        /// A DNS label.
        name: String,
        /// Free text.
        description: String,
    },
    /// Delete an environment that has no entities.
    DeleteEnvironment {
        /// Its name.
        name: String,
    },
    /// Create an entity in an existing environment.
    CreateEntity {
        /// The environment's name.
        environment: String,
        /// Helm chart or Terraform module.
        kind: EntityKind,
        /// A DNS label, unique per environment and kind.
        name: String,
        /// `group:name`.
        product_id: String,
        /// Required for helm charts, refused for terraform modules.
        k8s_namespace: Option<String>,
        /// Optional, terraform modules only.
        account_id: Option<String>,
        /// Defaults to `RELEASE`.
        release_channel: Option<String>,
    },
}

impl Command {
    /// A short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::CreateEnvironment { .. } => "create_environment",
            Command::DeleteEnvironment { .. } => "delete_environment",
            Command::CreateEntity { .. } => "create_entity",
        }
    }
}

/// What a successful command produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandOutput {
    /// Nothing to report beyond success (membership and blank entries too).
    Done,
    /// The environment was created.
    EnvironmentCreated(String),
    /// The environment was deleted.
    EnvironmentDeleted(String),
    /// The entity was created; its id.
    EntityCreated(String),
}

impl CommandOutput {
    /// A one-line summary for clients.
    pub fn summary(&self) -> String {
        match self {
            CommandOutput::Done => String::new(),
            CommandOutput::EnvironmentCreated(n) => format!("environment {n} created"),
            CommandOutput::EnvironmentDeleted(n) => format!("environment {n} deleted"),
            CommandOutput::EntityCreated(id) => id.clone(),
        }
    }
}

impl std::fmt::Display for Request {
    /// Names the command only: payloads may later carry secrets, which never reach logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.command.kind(), self.time_ms)
    }
}

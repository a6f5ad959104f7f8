//! The write audit: one row per write an identified caller asked for (`Command::As`), with its
//! outcome, and the retention that bounds the rows. Replicated data, no transitions.

use hub_identity::Identity;
use serde::{Deserialize, Serialize};

use crate::error::CommandError;
use crate::TimestampMs;

/// Rows kept when no retention was set: the newest writes.
pub const DEFAULT_AUDIT_RETENTION: u64 = 100_000;
/// Largest retention an admin may set.
pub const MAX_AUDIT_RETENTION: u64 = 1_000_000;
/// The key name of the one [`AuditLog`] record.
pub const AUDIT_LOG_KEY: &str = "writes";

/// How the caller proved who it is. Part of the replicated format: variants keep their
/// order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthMethod {
    /// A certificate of the cluster's CA, verified by the TLS handshake.
    Certificate,
    /// An operator token's secret (`authorization: Bearer`); the actor is `token/<name>`.
    Token,
}

impl AuthMethod {
    /// How `actor` proved itself: a token identity only ever by its token, every other
    /// identity by its certificate.
    pub fn of(actor: &Identity) -> AuthMethod {
        match actor {
            Identity::Token(_) => AuthMethod::Token,
            Identity::Node(_) | Identity::Agent(_) | Identity::Operator(_) => {
                AuthMethod::Certificate
            }
        }
    }
}

/// What became of an audited write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WriteOutcome {
    /// It was applied.
    Applied,
    /// Apply refused it (roles, validation, preconditions); nothing changed.
    Refused(CommandError),
}

/// One audited write, keyed by its log index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteAudit {
    /// The entry's log index.
    pub index: u64,
    /// The entry's time.
    pub time_ms: TimestampMs,
    /// Who asked.
    pub actor: Identity,
    /// How it was authenticated.
    pub method: AuthMethod,
    /// The command's name (`SetSecret`).
    pub command: String,
    /// What it acted on: `environment prod`, `product com.example:web`, `cluster`.
    pub target: String,
    /// What became of it.
    pub outcome: WriteOutcome,
}

impl WriteAudit {
    /// The record name for log index `index` (zero-padded, so names sort by index).
    pub fn key_name(index: u64) -> String {
        format!("{index:020}")
    }
}

/// The audit's retention and what it dropped: one record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditLog {
    /// How many rows are kept (the oldest go first).
    pub retention: u64,
    /// Rows dropped by retention so far.
    pub dropped: u64,
}

impl Default for AuditLog {
    fn default() -> Self {
        AuditLog {
            retention: DEFAULT_AUDIT_RETENTION,
            dropped: 0,
        }
    }
}

//! `audit`: who wrote what, newest first. A row is a write of the write audit (every write
//! of an identified caller, with its outcome), an entry a command wrote itself (its action,
//! target and reason), or both (the same log index). Every text is shown with its control
//! characters escaped.

use serde::{Deserialize, Serialize};

use super::Typed;
use crate::query::Query;

/// One audit row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntryView {
    /// The command's own action (`module-install`, `suppression`, …), else the write's
    /// command.
    pub action: Option<String>,
    /// Who (`operator/alice`).
    pub actor: Option<String>,
    /// The write's command (`PutSecret`); `None` for a row of no audited write.
    pub command: Option<String>,
    /// Why a refused write was refused; empty when applied.
    pub error: String,
    /// The log index.
    pub index: u64,
    /// How the caller was identified: `certificate` or `token`; `None` for a row of no
    /// audited write.
    pub method: Option<String>,
    /// `applied` or `refused`.
    pub outcome: String,
    /// The reason the command gave; empty when none.
    pub reason: String,
    /// What it was done to (`cluster`, `environment prod`, `eid:…`, …).
    pub target: Option<String>,
    /// When.
    pub time: String,
    /// When, in milliseconds since the epoch.
    pub time_ms: i64,
}

/// The answer to `audit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditAnswer {
    /// The rows that pass the filters, newest first.
    pub audit: Vec<AuditEntryView>,
    /// Rows dropped by retention so far.
    pub dropped: u64,
    /// How many rows are kept (the oldest go first).
    pub retention: u64,
}

/// Asks for audit rows, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListAudit {
    /// At most this many (default 100).
    pub limit: Option<usize>,
    /// Only this actor (`operator/alice`).
    pub actor: Option<String>,
    /// Only writes whose target is this environment.
    pub environment: Option<String>,
    /// Only this command (`PutSecret`) or legacy action (`suppression`).
    pub kind: Option<String>,
    /// Only rows at or after this time (milliseconds since the epoch).
    pub since_ms: Option<i64>,
}

impl Typed for ListAudit {
    type Answer = AuditAnswer;
    fn query(&self) -> Query {
        Query::Audit {
            limit: self.limit,
            actor: self.actor.clone(),
            environment: self.environment.clone(),
            kind: self.kind.clone(),
            since_ms: self.since_ms,
        }
    }
}

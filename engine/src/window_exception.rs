//! Window-exception requests (issue 55): a temporary maintenance-window exception someone
//! asked for, which opens the window only once the approvals its policy requires were given.
//!
//! A request is pending until approved (then it becomes a [`crate::settings::WindowOverride`]
//! of its scope, whose id it records), rejected, or its approvals can no longer be given (it
//! expired, or the time range ended): those stay pending in the record and are shown as
//! expired; approving them is refused. The direct override
//! ([`crate::Command::AddWindowOverride`]) stays for the roles that may bypass approval.

use serde::{Deserialize, Serialize};

use crate::approval::RequestApprovals;
use crate::suppression::Scope;
use crate::TimestampMs;

/// Most pending requests per scope.
pub const MAX_PENDING_PER_SCOPE: usize = 32;

/// Where a window-exception request stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExceptionStatus {
    /// Waiting for approvals.
    Pending,
    /// Approved: the window override it opened.
    Approved {
        /// `o-<index>` of the override.
        override_id: String,
    },
    /// Rejected by an approver.
    Rejected,
}

impl ExceptionStatus {
    /// Lowercase name for APIs and the CLI.
    pub fn as_str(&self) -> &'static str {
        match self {
            ExceptionStatus::Pending => "pending",
            ExceptionStatus::Approved { .. } => "approved",
            ExceptionStatus::Rejected => "rejected",
        }
    }
}

/// A request for a temporary maintenance-window exception.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowException {
    /// `wx-<index>`.
    pub id: String,
    /// The environment or entity whose window it opens.
    pub scope: Scope,
    /// Start (inclusive).
    pub start_ms: TimestampMs,
    /// End (exclusive).
    pub end_ms: TimestampMs,
    /// Why; required.
    pub reason: String,
    /// Where it stands.
    pub status: ExceptionStatus,
    /// The rule, the requester and the approvals.
    pub approvals: RequestApprovals,
    /// Entry time it was requested.
    pub created_ms: TimestampMs,
    /// Who approved it last (completing it) or rejected it.
    pub decided_by: Option<String>,
    /// When it was approved or rejected.
    pub closed_ms: Option<TimestampMs>,
    /// Why it was rejected.
    pub message: String,
}

impl WindowException {
    /// Whether it can no longer be approved at `t`: its policy's expiry passed, or its time
    /// range ended.
    pub fn expired_at(&self, t: TimestampMs) -> bool {
        self.approvals.expired_at(t) || t >= self.end_ms
    }

    /// The status as shown at `t`: `expired` for a pending one that can no longer be approved.
    pub fn status_at(&self, t: TimestampMs) -> &'static str {
        if self.status == ExceptionStatus::Pending && self.expired_at(t) {
            "expired"
        } else {
            self.status.as_str()
        }
    }
}

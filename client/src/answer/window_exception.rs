//! `window_exceptions` and `window_exception` (issue 55): requests for a temporary
//! maintenance-window exception, and where each stands.

use serde::{Deserialize, Serialize};

use super::{ApprovalView, Typed};
use crate::query::Query;

/// One window-exception request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowExceptionView {
    /// Its approvals and who still must approve.
    pub approval: ApprovalView,
    /// When it was approved or rejected.
    pub closed: Option<String>,
    /// When it was requested.
    pub created: String,
    /// Who completed or rejected it.
    pub decided_by: Option<String>,
    /// End of the range (exclusive).
    pub end: String,
    /// `wx-…`.
    pub id: String,
    /// Why it was rejected.
    pub message: String,
    /// The window override its approval opened (`o-…`).
    pub override_id: Option<String>,
    /// Why it was asked for.
    pub reason: String,
    /// `environment prod` or `entity eid:…`.
    pub scope: String,
    /// Start of the range.
    pub start: String,
    /// `pending`, `approved`, `rejected` or `expired`.
    pub status: String,
}

/// The answer to `window_exceptions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowExceptionsAnswer {
    /// In the order they were requested.
    pub window_exceptions: Vec<WindowExceptionView>,
}

/// Asks for window-exception requests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListWindowExceptions {
    /// Only those in this environment.
    pub environment: Option<String>,
    /// Only pending ones (not expired).
    pub open: bool,
}

impl Typed for ListWindowExceptions {
    type Answer = WindowExceptionsAnswer;
    fn query(&self) -> Query {
        Query::WindowExceptions {
            environment: self.environment.clone(),
            open: self.open,
        }
    }
}

/// Asks for one window-exception request, by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetWindowException(pub String);

impl Typed for GetWindowException {
    type Answer = WindowExceptionView;
    fn query(&self) -> Query {
        Query::WindowException { id: self.0.clone() }
    }
}

//! `change_requests` and `change_request`: module updates waiting for, or past, a decision.

use serde::{Deserialize, Serialize};

use super::Typed;
use crate::query::Query;

/// One change request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeRequestView {
    /// Its approvals under the policy it was opened with (issue 55); absent for one opened
    /// under no policy (one approver of the environment; the publisher may approve).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<super::ApprovalView>,
    /// Why it cannot merge yet (variables without a value).
    pub blocked: Option<String>,
    /// When it was closed.
    pub closed: Option<String>,
    /// When it was opened.
    pub created: String,
    /// Who approved or rejected it.
    pub decided_by: Option<String>,
    /// The installation's version.
    pub from_version: String,
    /// `cr-…`.
    pub id: String,
    /// `<environment>/<module>`.
    pub installation: String,
    /// What its decision or merge said.
    pub message: String,
    /// Why it was opened.
    pub reason: String,
    /// `pending-approval`, `merged`, `rejected`, `cancelled`, `error`.
    pub status: String,
    /// The version it updates to.
    pub to_version: String,
}

/// The answer to `change_requests`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeRequestsAnswer {
    /// In the order they were opened.
    pub change_requests: Vec<ChangeRequestView>,
}

/// Asks for change requests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListChangeRequests {
    /// Only this installation (`<environment>/<module>`).
    pub installation: Option<String>,
    /// Only pending ones.
    pub open: bool,
}

impl Typed for ListChangeRequests {
    type Answer = ChangeRequestsAnswer;
    fn query(&self) -> Query {
        Query::ChangeRequests {
            installation: self.installation.clone(),
            open: self.open,
        }
    }
}

/// Asks for one change request, by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetChangeRequest(pub String);

impl Typed for GetChangeRequest {
    type Answer = ChangeRequestView;
    fn query(&self) -> Query {
        Query::ChangeRequest { id: self.0.clone() }
    }
}

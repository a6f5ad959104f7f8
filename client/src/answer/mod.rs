//! What the hub answers to a query, typed: one struct per answer.
//!
//! Each answer travels as JSON. Its fields are declared in alphabetical order, the order the
//! hub has always written them in, so a node that serializes these structs sends the same
//! bytes as before and older clients, the dashboard and scripts keep reading them
//! (`hub-node`'s `tests/query_wire.rs` pins every answer). Times are RFC 3339 text, as shown
//! to people; versions are semver text. A field that only some answers carry is left out
//! when absent (`Option` with `skip_serializing_if`); one that is always present but may be
//! empty is `null`.
//!
//! Answers not typed yet are read as JSON ([`crate::FailoverClient::query_json`]); issue 54
//! types them one by one, each pinned by its fixture.

mod approval;
mod change_request;
mod cluster_settings;
mod explain;
mod metric_template;
mod plan;
mod resolve;
mod revocation;
mod suppression;
mod window_exception;

pub use approval::{
    ApprovalGiven, ApprovalPoliciesAnswer, ApprovalPolicyView, ApprovalView, ApproverGroupView,
    ApproverGroupsAnswer, AutoApprovalView, GroupRequirementView, ListApprovalPolicies,
    ListApproverGroups,
};
pub use change_request::{
    ChangeRequestView, ChangeRequestsAnswer, GetChangeRequest, ListChangeRequests,
};
pub use cluster_settings::{ClusterSettings, ClusterSettingsAnswer};
pub use explain::{
    ConstraintView, Explain, Explanation, IssuedView, LastExecution, MeetsConstraints,
    ProposedChange, RegistryRef,
};
pub use metric_template::{
    GetMetricTemplate, ListMetricTemplates, MetricProviderView, MetricTemplateView,
    MetricTemplatesAnswer,
};
pub use plan::{ArtifactView, FailureView, GetPlan, ListPlans, PlanView, PlansAnswer, TaskView};
pub use resolve::{ResolveEntity, ResolvedEntity};
pub use revocation::{ListRevokedCertificates, RevokedCertificateView, RevokedCertificatesAnswer};
pub use suppression::{ListSuppressions, SuppressionView, SuppressionsAnswer};
pub use window_exception::{
    GetWindowException, ListWindowExceptions, WindowExceptionView, WindowExceptionsAnswer,
};

use serde::de::DeserializeOwned;

use crate::query::Query;

/// A query whose answer has a type: the query and its answer are one pair, so a caller
/// cannot read an answer as the wrong struct.
pub trait Typed {
    /// The answer's type.
    type Answer: DeserializeOwned;
    /// The query as it travels.
    fn query(&self) -> Query;
}

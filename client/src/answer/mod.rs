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
//! Every answer has its type here (issue 54), each pinned by its fixture;
//! [`crate::FailoverClient::query_json`] still reads any answer as JSON.

mod access;
mod activity;
mod approval;
mod audit;
mod canary;
mod change_request;
mod cluster_settings;
mod entity;
mod environment;
mod explain;
mod metric_template;
mod module;
mod plan;
mod product;
mod resolve;
mod revocation;
mod rollout;
mod suppression;
mod window_exception;

pub use access::{
    ListRoleBindings, ListTokens, RoleBindingView, RoleBindingsAnswer, TokenRoleView, TokenView,
    TokensAnswer,
};
pub use activity::{ActivityAnswer, ActivityEntry, GetActivity};
pub use approval::{
    ApprovalGiven, ApprovalPoliciesAnswer, ApprovalPolicyView, ApprovalView, ApproverGroupView,
    ApproverGroupsAnswer, AutoApprovalView, GroupRequirementView, ListApprovalPolicies,
    ListApproverGroups,
};
pub use audit::{AuditAnswer, AuditEntryView, ListAudit};
pub use canary::{
    CanariesAnswer, CanaryActionView, CanaryAddressesView, CanaryConditionView, CanaryEventView,
    CanaryJudgesView, CanaryObservationView, CanarySampleView, CanaryStatusBlock, CanaryTargetView,
    CanaryView, CommittedWeightView, GetCanary, IgnoredFieldView, JudgedMetricView, ListCanaries,
    MetricWindowView, VerdictView,
};
pub use change_request::{
    ChangeRequestView, ChangeRequestsAnswer, GetChangeRequest, ListChangeRequests,
};
pub use cluster_settings::{ClusterSettings, ClusterSettingsAnswer};
pub use entity::{EntityView, GetEntity, ReportedView};
pub use environment::{
    EnvironmentLabelsAnswer, EnvironmentLabelsView, EnvironmentSettingsView,
    GetEnvironmentSettings, ListEnvironmentLabels, RegistryView, WindowOverrideView,
};
pub use explain::{
    ConstraintView, Explain, Explanation, IssuedView, LastExecution, MeetsConstraints,
    ProposedChange, RegistryRef,
};
pub use metric_template::{
    GetMetricTemplate, ListMetricTemplates, MetricProviderView, MetricTemplateView,
    MetricTemplatesAnswer,
};
pub use module::{
    GetModule, GetModuleInstallation, InstallationEntityView, ListModuleInstallations, ListModules,
    ModuleDryRun, ModuleDryRunAnswer, ModuleEntityView, ModuleInstallationDetail,
    ModuleInstallationView, ModuleInstallationsAnswer, ModuleSummaryView, ModuleView,
    ModulesAnswer,
};
pub use plan::{ArtifactView, FailureView, GetPlan, ListPlans, PlanView, PlansAnswer, TaskView};
pub use product::{
    ChannelView, ChannelsAnswer, ListChannels, ListProducts, ListRecalls, ListReleases,
    ProductView, ProductsAnswer, RecallView, RecallsAnswer, ReleaseView, ReleasesAnswer,
};
pub use resolve::{ResolveEntity, ResolvedEntity};
pub use revocation::{ListRevokedCertificates, RevokedCertificateView, RevokedCertificatesAnswer};
pub use rollout::{
    GetRolloutPolicy, GetRolloutStatus, HaltView, ListRolloutPolicies, RolloutEntityView,
    RolloutPoliciesAnswer, RolloutPolicyView, RolloutStatusView, WaveStatusView, WaveView,
};
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

/// A field that is present, even as `null`: `Some(None)` for `null`, so the field reads back
/// as it was written (a missing one is `None` through `#[serde(default)]`).
pub(crate) fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    <Option<T> as serde::Deserialize>::deserialize(d).map(Some)
}

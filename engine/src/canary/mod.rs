//! Canary analysis (SPEC K1–K10): Flagger-style progressive delivery of an entity's new
//! revisions, decided by the hub leader and executed by the agent.
//!
//! - [`parse_canary`] reads and validates a canary resource ([`CanarySpec`]), reporting every
//!   problem with its YAML path ([`CanaryErrors`]).
//! - [`revision_hash`] identifies a revision of the target (version, rendered config, tracked
//!   secrets), keyed with the cluster's revision key, stably across hub upgrades
//!   ([`is_revision_of`] still recognises revisions named before the key existed).
//! - [`CanaryStatus`] is the replicated state of one canary.
//! - A tick is two pure steps so that all I/O happens outside and the decision replays
//!   identically on every node: [`plan_tick`] says which webhooks to call and metrics to
//!   measure; the leader does that and proposes the answers ([`TickInput`]) with the
//!   plan's step; applying the entry runs [`advance`] (only if the status is still at that
//!   step), which returns the new status, the [`Action`]s for agent and leader, and events.
//! - [`terminate`] handles deletion (`revertOnDeletion`).
//!
//! Nothing here does I/O or reads a clock. The resource format, the phase machine and the
//! replay protocol are documented in `docs/CANARY.md`.

#![warn(missing_docs)]

mod action;
mod duration;
mod error;
mod input;
mod machine;
mod parse;
mod plan;
mod raw;
mod revision;
mod rollout;
mod spec;
mod status;
mod webhook;

pub use action::{Action, TickOutcome};
pub use duration::{format_duration, parse_duration, MAX_DURATION_MS};
pub use error::{CanaryError, CanaryErrors};
pub use input::{Manual, TickInput, WebhookResult, WEBHOOK_MAX_SUCCESS_STATUS};
pub use machine::{advance, terminate};
pub use parse::{
    parse_canary, parse_canary_reporting, IgnoredField, API_VERSION, KIND, MAX_CANARY_BYTES,
    MAX_LIST_LEN, MAX_WEBHOOK_RETRIES, MAX_WEBHOOK_TIMEOUT_MS, WORKLOAD_API_VERSION,
};
pub use plan::{plan_tick, MetricQuery, TickPlan};
pub use revision::{
    is_revision_of, legacy_revision_hash, revision_hash, REVISION_HEX_LEN, REVISION_V2_PREFIX,
};
pub use rollout::{
    names_target, CanaryObservation, CanaryRevision, CanaryStepSpec, MetricWindow,
    MAX_OBSERVATIONS, MAX_SPARE_REVISIONS, MAX_WINDOWS,
};
pub use spec::{
    AlertSpec, AlertTarget, Analysis, CanarySpec, HeaderMatch, MatchRule, Metric, MetricSource,
    ServiceSpec, Severity, StepWeights, Strategy, TargetRef, ThresholdRange, Webhook, WebhookType,
    DEFAULT_INTERVAL_MS, DEFAULT_METRIC_INTERVAL_MS, DEFAULT_PROGRESS_DEADLINE_SECONDS,
    DEFAULT_READY_THRESHOLD, DEFAULT_THRESHOLD, DEFAULT_WEBHOOK_TIMEOUT_MS, MILLI, MIN_INTERVAL_MS,
    TOTAL_WEIGHT,
};
pub use status::{CanaryStatus, ConditionStatus, Phase, PromotedCondition};
pub use webhook::{WebhookCall, WebhookPayload};

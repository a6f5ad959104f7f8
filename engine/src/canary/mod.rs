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
//! - Issue 20: a metric's [`Judge`] compares the canary's binned per-request samples
//!   ([`MetricSamples`]) with a baseline's by [`mann_whitney`] and gives a [`Verdict`];
//!   [`advance_judged`] runs the machine with the [`AnalysisPolicy`] (judges,
//!   `inconclusiveLimit`, `onFailure: hold` → [`Phase::Halted`]) that
//!   [`parse_canary_with_policy`] returns beside the stored spec.
//!
//! Nothing here does I/O or reads a clock. The resource format, the phase machine and the
//! replay protocol are documented in `docs/CANARY.md`.

#![warn(missing_docs)]

mod action;
mod alert_provider;
mod duration;
mod error;
mod event;
mod ignored;
mod input;
mod judge;
mod load_tester;
mod machine;
mod mann_whitney;
mod parse;
mod plan;
mod provider;
mod raw;
mod render;
mod revision;
mod rollout;
mod samples;
mod spec;
mod status;
mod template;
mod templated;
mod webhook;

pub use action::{Action, TickOutcome};
pub use alert_provider::{
    parse_alert_provider, AlertProviderKind, AlertProviderSpec, ParsedAlertProvider,
    ALERT_PROVIDER_KIND, DEFAULT_ALERT_CHANNEL, DEFAULT_ALERT_USERNAME, MAX_ALERT_LABEL_BYTES,
    MAX_ALERT_PROVIDER_BYTES,
};
pub use duration::{format_duration, parse_duration, DurationError, MAX_DURATION_MS};
pub use error::{CanaryError, CanaryErrors};
pub use event::{
    event_message, CanaryEvent, EventKind, EventReason, MAX_EVENT_MESSAGE_BYTES, REDACTED,
};
pub use ignored::IgnoredField;
pub use input::{Manual, TickInput, WebhookResult, WEBHOOK_MAX_SUCCESS_STATUS};
pub use judge::{
    judge, AnalysisPolicy, Baseline, Direction, Judge, Judgement, OnFailure, Verdict,
    DEFAULT_CONFIDENCE_MILLI, JUDGE_MIN_SAMPLES, MAX_CONFIDENCE_MILLI, MIN_CONFIDENCE_MILLI,
};
pub use load_tester::{
    analysis_loads, built_in_answer, is_load_tester_url, load_tester_call, parse_command,
    CurlCheck, GrepPattern, HeyLoad, LoadCommand, LoadTesterCall, LoadTesterError, StableAddresses,
    LOAD_TESTER_NAMES,
};
pub use machine::{advance, advance_judged, terminate, JudgedOutcome, Judging};
pub use mann_whitney::{mann_whitney, normal_sf, Alternative, MannWhitney};
pub use parse::{
    parse_canary, parse_canary_reporting, parse_canary_templated, parse_canary_with_policy,
    API_VERSION, CONFIG_TRACKING_ANNOTATION, KIND, MAX_CANARY_BYTES, MAX_LIST_LEN,
    MAX_WEBHOOK_RETRIES, MAX_WEBHOOK_TIMEOUT_MS, WORKLOAD_API_VERSION,
};
pub use plan::{plan_tick, MetricQuery, TickPlan};
pub use render::{
    parse_query, prometheus_query_text, render, render_query, ModelField, Piece, QueryTemplate,
    RenderError, TemplateModel, MAX_RENDERED_QUERY_BYTES,
};
pub use revision::{
    is_revision_of, legacy_revision_hash, revision_hash, REVISION_HEX_LEN, REVISION_V2_PREFIX,
};
pub use rollout::{
    names_target, CanaryObservation, CanaryRevision, CanaryStepSpec, MetricWindow,
    MAX_OBSERVATIONS, MAX_SPARE_REVISIONS, MAX_WINDOWS,
};
pub use samples::{
    Bin, Histogram, MetricSamples, SampleWindow, SamplesError, WorkloadSamples, FAILURE_VALUE,
    MAX_BINS, MAX_BIN_TOTAL, MAX_SAMPLE_WINDOWS, SUCCESS_VALUE,
};
pub use spec::{
    AlertSpec, AlertTarget, Analysis, CanarySpec, HeaderMatch, MatchRule, Metric, MetricSource,
    PrometheusCheck, ServiceSpec, Severity, StepWeights, Strategy, TargetRef, ThresholdRange,
    Webhook, WebhookType, DEFAULT_INTERVAL_MS, DEFAULT_METRIC_INTERVAL_MS,
    DEFAULT_PROGRESS_DEADLINE_SECONDS, DEFAULT_READY_THRESHOLD, DEFAULT_THRESHOLD,
    DEFAULT_WEBHOOK_TIMEOUT_MS, MILLI, MIN_INTERVAL_MS, TOTAL_WEIGHT,
};
pub use status::{CanaryStatus, ConditionStatus, Phase, PromotedCondition};
pub use template::{
    parse_metric_template, MetricProvider, MetricTemplateSpec, ParsedMetricTemplate, ProviderKind,
    MAX_METRIC_TEMPLATE_BYTES, MAX_PROVIDER_HEADERS, METRIC_TEMPLATE_KIND,
};
pub use templated::{
    template_model, MetricTemplates, ModelRefs, ParsedCanary, TemplatedMetric,
    DEFAULT_TEMPLATE_INTERVAL,
};
pub use webhook::{WebhookCall, WebhookPayload};

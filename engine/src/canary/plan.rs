//! The first half of a tick (SPEC K9): [`plan_tick`] says whether a tick is due and which
//! webhooks must be called and which metrics measured before [`super::advance`] can decide.
//! The leader performs that I/O and proposes the answers as a [`super::TickInput`].
//!
//! The plan lists every gate the tick *might* consult (for example both the rollout webhooks
//! and the confirm-traffic-increase gate of the same step), because the calls happen before
//! the decision; an answer the decision turns out not to need is ignored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::machine::{gate_after_analysis, is_first_step, is_new_revision};
use super::spec::{CanarySpec, MetricSource, Webhook, WebhookType};
use super::status::{CanaryStatus, Phase};
use crate::TimestampMs;

/// The JSON body POSTed to a webhook (SPEC K5): `{name, namespace, phase, checksum,
/// metadata}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookPayload {
    /// The canary's name.
    pub name: String,
    /// Its namespace (the hub environment; empty when the resource names none).
    pub namespace: String,
    /// The phase, as Flagger spells it.
    pub phase: String,
    /// The revision hash concerned.
    pub checksum: String,
    /// The webhook's metadata (for event webhooks also `eventMessage`, `eventType`,
    /// `timestamp`).
    pub metadata: BTreeMap<String, String>,
}

/// One webhook call to make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookCall {
    /// The webhook's name: the key of its answer in [`super::TickInput::webhooks`].
    pub name: String,
    /// Its type.
    pub kind: WebhookType,
    /// Where to POST.
    pub url: String,
    /// Request timeout in milliseconds.
    pub timeout_ms: i64,
    /// Retries after a failed call.
    pub retries: u32,
    /// The body.
    pub payload: WebhookPayload,
}

impl WebhookCall {
    /// The call of `webhook` with `payload`.
    pub fn new(webhook: &Webhook, payload: WebhookPayload) -> Self {
        WebhookCall {
            name: webhook.name.clone(),
            kind: webhook.kind,
            url: webhook.url.clone(),
            timeout_ms: webhook.timeout_ms,
            retries: webhook.retries,
            payload,
        }
    }
}

/// One metric to measure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricQuery {
    /// The metric's name: the key of its value in [`super::TickInput::metrics`].
    pub name: String,
    /// Window to measure over, in milliseconds, ending now.
    pub interval_ms: i64,
    /// What to measure.
    pub source: MetricSource,
}

/// What one tick needs before it can be decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickPlan {
    /// Whether a tick should be proposed at all. `false` when the canary is suspended or
    /// terminating, the tick is not due yet, or the canary rests and the target has no new
    /// revision.
    pub due: bool,
    /// The status step the plan was made at: propose the tick with it, and apply it only if
    /// the status is still at this step.
    pub step: u64,
    /// Webhooks to call, in order.
    pub webhooks: Vec<WebhookCall>,
    /// Metrics to measure.
    pub metrics: Vec<MetricQuery>,
}

impl TickPlan {
    /// Whether there is nothing to do (no tick to propose).
    pub fn is_empty(&self) -> bool {
        !self.due
    }
}

/// The payload of a call to a webhook of `spec` in `phase` about `revision`, with `extra`
/// metadata added (the webhook's own keys do not override them).
pub(super) fn payload(
    spec: &CanarySpec,
    webhook: &Webhook,
    phase: Phase,
    revision: &str,
    extra: &[(&str, String)],
) -> WebhookPayload {
    let mut metadata: BTreeMap<String, String> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    for (k, v) in &webhook.metadata {
        metadata.entry(k.clone()).or_insert_with(|| v.clone());
    }
    WebhookPayload {
        name: spec.name.clone(),
        namespace: spec.namespace.clone().unwrap_or_default(),
        phase: phase.as_str().to_string(),
        checksum: revision.to_string(),
        metadata,
    }
}

/// Plans the tick of a canary whose target is at `revision`, at `now`. Pure: the same
/// arguments give the same plan.
pub fn plan_tick(
    spec: &CanarySpec,
    status: &CanaryStatus,
    revision: &str,
    now: TimestampMs,
) -> TickPlan {
    let mut plan = TickPlan {
        due: false,
        step: status.step,
        webhooks: Vec::new(),
        metrics: Vec::new(),
    };
    if spec.suspend || status.phase == Phase::Terminating || !status.is_due(now) {
        return plan;
    }
    let call = |plan: &mut TickPlan, kind: WebhookType, phase: Phase| {
        for w in spec.webhooks_of(kind) {
            plan.webhooks
                .push(WebhookCall::new(w, payload(spec, w, phase, revision, &[])));
        }
    };
    match status.phase {
        Phase::Terminating => {}
        Phase::Initializing | Phase::Promoting | Phase::Finalising => plan.due = true,
        Phase::Initialized | Phase::Succeeded | Phase::Failed | Phase::Waiting => {
            let new = is_new_revision(status, revision);
            // Waiting is due even without a new revision: it settles back.
            plan.due = new || status.phase == Phase::Waiting;
            // A canary that never initialised re-initialises without gates.
            if new && status.last_promoted_spec.is_some() {
                call(&mut plan, WebhookType::ConfirmRollout, status.phase);
            }
        }
        Phase::Progressing | Phase::WaitingPromotion => {
            plan.due = true;
            if status.last_applied_spec.as_deref() != Some(revision) || spec.skip_analysis {
                // A restart, or a promotion without analysis: no gate.
                return plan;
            }
            call(&mut plan, WebhookType::Rollback, status.phase);
            if status.failed_checks >= spec.analysis.threshold {
                return plan;
            }
            if is_first_step(status) {
                call(&mut plan, WebhookType::PreRollout, Phase::Progressing);
            } else {
                call(&mut plan, WebhookType::Rollout, Phase::Progressing);
                plan.metrics = spec
                    .analysis
                    .metrics
                    .iter()
                    .map(|m| MetricQuery {
                        name: m.name.clone(),
                        interval_ms: m.interval_ms,
                        source: m.source.clone(),
                    })
                    .collect();
            }
            if let Some(gate) = gate_after_analysis(spec, status) {
                call(&mut plan, gate, Phase::Progressing);
            }
        }
    }
    plan
}

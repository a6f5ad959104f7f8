//! The first half of a tick (SPEC K9): [`plan_tick`] says whether a tick is due and which
//! webhooks must be called and which metrics measured before [`super::advance`] can decide.
//! The leader performs that I/O and proposes the answers as a [`super::TickInput`].
//!
//! The plan lists every gate the tick *might* consult (for example both the rollout webhooks
//! and the confirm-traffic-increase gate of the same step), because the calls happen before
//! the decision; an answer the decision turns out not to need is ignored.

use serde::{Deserialize, Serialize};

use super::machine::{gate_after_analysis, is_first_step, is_new_revision};
use super::spec::{CanarySpec, MetricSource, WebhookType};
use super::status::{CanaryStatus, Phase};
use super::webhook::{payload, WebhookCall};
use crate::TimestampMs;

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
        // Halted waits for an operator (manual commands are ticks of their own); only a new
        // revision restarts the analysis.
        Phase::Halted => plan.due = status.last_applied_spec.as_deref() != Some(revision),
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

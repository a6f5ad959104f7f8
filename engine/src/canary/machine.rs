//! The second half of a tick (SPEC K3–K10): [`advance`] decides, from the spec, the status,
//! what the leader observed ([`TickInput`]) and the entry's time, what the canary does next.
//! It is pure, so re-applying a committed tick on any node gives the same [`TickOutcome`].
//!
//! Order inside one tick (Flagger's, see `docs/CANARY.md`):
//!
//! 1. suspended (or terminating, or not due and no manual command) → nothing but `step`;
//! 2. Initializing → set up the primary, then wait for it to be ready;
//! 3. resting phases (Initialized, Succeeded, Failed, Waiting) → a new revision passes the
//!    confirm-rollout gate and starts analysis;
//! 4. Progressing/WaitingPromotion with a new revision → restart at weight 0 (no
//!    confirm-rollout again);
//! 5. manual promote / abort / retry;
//! 6. Promoting/Finalising → primary readiness (hold, then fail forward to the canary), then
//!    the traffic shift back to the primary, then Succeeded;
//! 7. readiness of primary and canary (progress deadline → rollback);
//! 8. skipAnalysis → promote at once;
//! 9. rollback webhooks (a success rolls back);
//! 10. failedChecks ≥ threshold → rollback;
//! 11. analysis: the first step runs pre-rollout webhooks only, later steps rollout webhooks
//!     then metrics; a failure adds one failed check and keeps the weight;
//! 12. advance: confirm-traffic-increase then the next weight, or at maxWeight (iterations)
//!     confirm-promotion then promotion.
//!
//! Issue 20 ([`advance_judged`]): step 10 halts instead of rolling back with
//! `onFailure: hold`; step 11 also runs the metrics' judges on the tick's binned samples,
//! where a failed judgement is a failed check and an inconclusive one holds the weight (no
//! failed check) and, after `inconclusiveLimit` in a row, halts. Halted waits for an
//! operator: promote, abort, or retry (analysis resumes at the weight, failed checks reset).

use std::collections::BTreeMap;

use super::action::{Action, TickOutcome};
use super::event::{event_message, go_duration, go_float, two_decimals, CanaryEvent, EventKind};
use super::input::{Manual, TickInput};
use super::judge::{judge, AnalysisPolicy, OnFailure, Verdict};
use super::samples::MetricSamples;
use super::spec::{
    CanarySpec, Metric, MetricSource, Severity, Strategy, WebhookType, MILLI, TOTAL_WEIGHT,
};
use super::status::{CanaryStatus, Phase};
use super::webhook::{payload, WebhookCall};
use crate::TimestampMs;

/// Whether `revision` is one a resting canary should analyse (SPEC K3): not the last applied,
/// not the promoted one, and not the one that failed.
pub(super) fn is_new_revision(status: &CanaryStatus, revision: &str) -> bool {
    let r = Some(revision);
    status.last_applied_spec.as_deref() != r
        && status.last_promoted_spec.as_deref() != r
        && status.failed_spec.as_deref() != r
}

/// Whether the next analysis step is the first of the revision (pre-rollout webhooks only).
pub(super) fn is_first_step(status: &CanaryStatus) -> bool {
    status.canary_weight == 0 && status.iterations == 0
}

/// The gate a successful analysis step passes before it advances.
pub(super) fn gate_after_analysis(spec: &CanarySpec, status: &CanaryStatus) -> Option<WebhookType> {
    match &spec.analysis.strategy {
        Strategy::Canary { max_weight, .. } => Some(if status.canary_weight < *max_weight {
            WebhookType::ConfirmTrafficIncrease
        } else {
            WebhookType::ConfirmPromotion
        }),
        Strategy::AbTesting { iterations, .. } | Strategy::BlueGreen { iterations } => {
            (status.iterations >= *iterations).then_some(WebhookType::ConfirmPromotion)
        }
    }
}

/// Decides one tick. `now` is the time stamped on the Raft entry. The outcome's status has
/// `step` one more than `status` in every case (a suspended or not-due tick changes nothing
/// else), so a second proposal planned at the same step is refused by the step check.
pub fn advance(
    spec: &CanarySpec,
    status: &CanaryStatus,
    input: &TickInput,
    now: TimestampMs,
) -> TickOutcome {
    advance_traced(spec, status, input, &Judging::NONE, now)
        .0
        .outcome
}

/// The issue-20 context of a tick: the analysis policy (judges, `inconclusiveLimit`,
/// `onFailure`), the binned samples the leader observed, and the count of consecutive
/// inconclusive judgements before the tick (to be kept beside the status: the replicated
/// record for it is not written yet, see `docs/CANARY.md`).
#[derive(Debug, Clone, Copy)]
pub struct Judging<'a> {
    /// The policy.
    pub policy: &'a AnalysisPolicy,
    /// Metric name → samples, for the judged metrics; a judged metric missing here has no
    /// samples (inconclusive).
    pub samples: &'a BTreeMap<String, MetricSamples>,
    /// Consecutive inconclusive judgements so far.
    pub inconclusive: u32,
}

static NO_POLICY: AnalysisPolicy = AnalysisPolicy {
    judges: BTreeMap::new(),
    inconclusive_limit: None,
    on_failure: OnFailure::Rollback,
    config_tracking_disabled: false,
};
static NO_SAMPLES: BTreeMap<String, MetricSamples> = BTreeMap::new();

impl Judging<'static> {
    /// No judges, rollback on failure: [`advance`]'s behaviour.
    pub const NONE: Judging<'static> = Judging {
        policy: &NO_POLICY,
        samples: &NO_SAMPLES,
        inconclusive: 0,
    };
}

/// What [`advance_judged`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JudgedOutcome {
    /// The tick's outcome, as [`advance`] gives it.
    pub outcome: TickOutcome,
    /// Consecutive inconclusive judgements after the tick (reset by a conclusive analysis
    /// step, a new revision and every manual command).
    pub inconclusive: u32,
    /// The verdicts of the judges that ran in this tick (metric name, verdict, reason), in
    /// the spec's order; empty when no analysis step ran. A failed judge stops the others.
    pub verdicts: Vec<(String, Verdict, String)>,
}

/// [`advance`] with the judges and failure policy of issue 20. With [`Judging::NONE`] it
/// decides exactly as [`advance`].
pub fn advance_judged(
    spec: &CanarySpec,
    status: &CanaryStatus,
    input: &TickInput,
    judging: &Judging<'_>,
    now: TimestampMs,
) -> JudgedOutcome {
    advance_traced(spec, status, input, judging, now).0
}

/// [`advance`], also returning the names of the webhooks and metrics it consulted (tests
/// check that they are always in the plan).
pub(super) fn advance_traced(
    spec: &CanarySpec,
    status: &CanaryStatus,
    input: &TickInput,
    judging: &Judging<'_>,
    now: TimestampMs,
) -> (JudgedOutcome, Vec<String>) {
    let mut t = Tick {
        spec,
        input,
        policy: judging.policy,
        samples: judging.samples,
        inconclusive: judging.inconclusive,
        now,
        s: status.clone(),
        actions: Vec::new(),
        events: Vec::new(),
        consulted: Vec::new(),
        verdicts: Vec::new(),
        fallback_to_canary: false,
        analysis_passed: false,
    };
    t.s.step = status.step.saturating_add(1);
    t.run();
    t.check_invariants(status);
    let outcome = TickOutcome {
        status: t.s,
        actions: t.actions,
        events: t.events,
    };
    let judged = JudgedOutcome {
        outcome,
        inconclusive: t.inconclusive,
        verdicts: t.verdicts,
    };
    (judged, t.consulted)
}

/// Marks the canary deleted (SPEC K8): phase Terminating, and with `revertOnDeletion` the
/// original workload and routing are restored. Later ticks do nothing.
pub fn terminate(spec: &CanarySpec, status: &CanaryStatus, now: TimestampMs) -> TickOutcome {
    let mut s = status.clone();
    s.step = status.step.saturating_add(1);
    let mut actions = Vec::new();
    let mut events = Vec::new();
    if status.phase != Phase::Terminating {
        let name = qualified(spec, &spec.name);
        let message = if spec.revert_on_deletion {
            actions.push(Action::RestoreOriginal);
            s.canary_weight = 0;
            s.match_routing = false;
            s.canary_revision = None;
            format!(
                "Terminating canary {name}: restoring the original routing of {}",
                qualified(spec, &spec.target.name)
            )
        } else {
            format!("Terminating canary {name}: workloads and routing are left as they are")
        };
        events.push(CanaryEvent::new(now, EventKind::Normal, message));
        s.next_tick_ms = None;
        s.set_phase(
            Phase::Terminating,
            "Canary is being deleted.".to_string(),
            now,
        );
    }
    TickOutcome {
        status: s,
        actions,
        events,
    }
}

/// `name` qualified by the canary's namespace as Flagger writes it (`podinfo.test`); bare when
/// the resource has none.
fn qualified(spec: &CanarySpec, name: &str) -> String {
    match &spec.namespace {
        Some(ns) => format!("{name}.{ns}"),
        None => name.to_string(),
    }
}

/// Why a gate held: the webhook and its answer.
struct Held {
    webhook: String,
    message: String,
    /// Whether an HTTP answer arrived (a refusal, not an error reaching the webhook).
    answered: bool,
    muted: bool,
}

/// What one analysis step found.
enum StepResult {
    /// Every check passed and every judge said pass.
    Passed,
    /// A check failed or a judge said fail: one failed check.
    Failed(String),
    /// Every check passed, but a judge could not decide: the weight holds.
    Inconclusive(String),
}

struct Tick<'a> {
    spec: &'a CanarySpec,
    input: &'a TickInput,
    policy: &'a AnalysisPolicy,
    samples: &'a BTreeMap<String, MetricSamples>,
    /// Consecutive inconclusive judgements (updated by the tick).
    inconclusive: u32,
    now: TimestampMs,
    s: CanaryStatus,
    actions: Vec<Action>,
    events: Vec<CanaryEvent>,
    consulted: Vec<String>,
    /// The judges' verdicts of this tick.
    verdicts: Vec<(String, Verdict, String)>,
    /// Set when traffic moved to the canary because the promoted primary is not ready.
    fallback_to_canary: bool,
    /// Set when this tick's analysis step passed (every check, every judge).
    analysis_passed: bool,
}

impl Tick<'_> {
    fn run(&mut self) {
        let phase = self.s.phase;
        let manual = self.input.manual;
        if self.spec.suspend {
            let message = match manual {
                Some(m) => format!(
                    "skipping canary run as object is suspended: manual {} ignored",
                    m.as_str()
                ),
                None => "skipping canary run as object is suspended".to_string(),
            };
            self.record(EventKind::Normal, message);
            return;
        }
        if phase == Phase::Terminating {
            let message = format!("Canary {} is terminating: tick skipped", self.name());
            self.record(EventKind::Normal, message);
            return;
        }
        if manual.is_none() && !self.s.is_due(self.now) {
            let message = format!(
                "Canary {}: tick not due before {} ms: skipped",
                self.name(),
                self.s.next_tick_ms.unwrap_or_default()
            );
            self.record(EventKind::Normal, message);
            return;
        }
        self.s.next_tick_ms = Some(self.now.saturating_add(self.spec.analysis.interval_ms));
        if manual.is_some() {
            // An operator looked: inconclusive judgements count again from zero.
            self.inconclusive = 0;
        }
        match phase {
            Phase::Initializing => self.initializing(),
            Phase::Initialized | Phase::Succeeded | Phase::Failed | Phase::Waiting => {
                self.resting()
            }
            Phase::Progressing | Phase::WaitingPromotion | Phase::Promoting | Phase::Finalising => {
                self.active()
            }
            Phase::Halted => self.halted(),
            // Handled above.
            Phase::Terminating => {}
        }
    }

    // ----- helpers -----

    fn revision(&self) -> &str {
        &self.input.revision
    }

    /// The revision notifications are about: the one analysed (or promoted), else the
    /// target's.
    fn subject(&self) -> &str {
        self.s
            .last_applied_spec
            .as_deref()
            .unwrap_or(&self.input.revision)
    }

    /// The canary as Flagger names it in events: `podinfo.test`.
    fn name(&self) -> String {
        qualified(self.spec, &self.spec.name)
    }

    /// The target as Flagger names it in events: `podinfo.test`.
    fn target(&self) -> String {
        qualified(self.spec, &self.spec.target.name)
    }

    /// The primary workload as Flagger names it in events: `podinfo-primary.test`.
    fn primary(&self) -> String {
        qualified(self.spec, &format!("{}-primary", self.spec.target.name))
    }

    /// Records an event without notifying event webhooks (a tick that does nothing).
    fn record(&mut self, kind: EventKind, message: String) {
        let urls = self.spec.analysis.webhooks.iter().map(|w| w.url.as_str());
        let message = event_message(&message, urls);
        self.events.push(CanaryEvent::new(self.now, kind, message));
    }

    /// Records an event and sends it to the event webhooks (Flagger's `recordEvent*f`).
    fn event(&mut self, kind: EventKind, message: String) {
        self.record(kind, message);
        let Some(message) = self.events.last().map(|e| e.message.clone()) else {
            return;
        };
        let hooks: Vec<_> = self.spec.webhooks_of(WebhookType::Event).collect();
        for w in hooks {
            let extra = [
                ("eventMessage", message.clone()),
                ("eventType", kind.as_str().to_string()),
                ("timestamp", self.now.to_string()),
            ];
            let p = payload(self.spec, w, self.s.phase, self.subject(), &extra);
            self.actions.push(Action::NotifyWebhook {
                call: WebhookCall::new(w, p),
            });
        }
    }

    /// Flagger's event for a primary that is not ready (`podinfo-primary.test not ready:
    /// waiting for rollout to finish: ...`).
    fn primary_not_ready(&self) -> String {
        let wanted = match (&self.input.primary_revision, &self.s.primary_revision) {
            (Some(seen), Some(wanted)) => seen == wanted,
            _ => true,
        };
        let why = if wanted {
            format!(
                "{}% of updated replicas are available (readyThreshold {}%)",
                self.input.primary_ready_percent, self.spec.analysis.primary_ready_threshold
            )
        } else {
            "the primary does not run the wanted revision yet".to_string()
        };
        format!(
            "{} not ready: waiting for rollout to finish: {why}",
            self.primary()
        )
    }

    /// Flagger's event for a canary workload that is not ready.
    fn canary_not_ready(&self) -> String {
        let wanted = match (&self.input.canary_revision, &self.s.canary_revision) {
            (Some(seen), Some(wanted)) => seen == wanted,
            _ => true,
        };
        let why = if wanted {
            format!(
                "{}% of updated replicas are available (readyThreshold {}%)",
                self.input.canary_ready_percent, self.spec.analysis.canary_ready_threshold
            )
        } else {
            "the canary does not run the wanted revision yet".to_string()
        };
        format!(
            "canary {} {} not ready: waiting for rollout to finish: {why}",
            self.spec.target.kind,
            self.target()
        )
    }

    fn alert(&mut self, severity: Severity, message: String) {
        if self
            .spec
            .analysis
            .alerts
            .iter()
            .any(|a| a.receives(severity))
        {
            self.actions.push(Action::Alert { severity, message });
        }
    }

    fn notify_post_rollout(&mut self) {
        let hooks: Vec<_> = self.spec.webhooks_of(WebhookType::PostRollout).collect();
        for w in hooks {
            let p = payload(self.spec, w, self.s.phase, self.subject(), &[]);
            self.actions.push(Action::NotifyWebhook {
                call: WebhookCall::new(w, p),
            });
        }
    }

    fn deadline_passed(&self, since: TimestampMs) -> bool {
        self.now.saturating_sub(since) >= self.spec.progress_deadline_ms()
    }

    /// Whether the primary is ready: enough replicas, and (when the agent says) running the
    /// revision the status wants on it.
    fn primary_ready(&self) -> bool {
        let runs_wanted = match (&self.input.primary_revision, &self.s.primary_revision) {
            (Some(seen), Some(wanted)) => seen == wanted,
            _ => true,
        };
        runs_wanted
            && self.input.primary_ready_percent >= self.spec.analysis.primary_ready_threshold
    }

    /// Whether the canary is ready, likewise.
    fn canary_ready(&self) -> bool {
        let runs_wanted = match (&self.input.canary_revision, &self.s.canary_revision) {
            (Some(seen), Some(wanted)) => seen == wanted,
            _ => true,
        };
        runs_wanted && self.input.canary_ready_percent >= self.spec.analysis.canary_ready_threshold
    }

    /// Runs every webhook of `kind` as a gate: all must have succeeded.
    fn gate(&mut self, kind: WebhookType) -> Result<(), Held> {
        let hooks: Vec<_> = self.spec.webhooks_of(kind).collect();
        for w in hooks {
            self.consulted.push(w.name.clone());
            match self.input.webhooks.get(&w.name) {
                Some(r) if r.ok => {
                    if let Some(check) = gate_check_name(kind) {
                        let message = format!("{check} check {} passed", w.name);
                        self.event(EventKind::Normal, message);
                    }
                }
                Some(r) => {
                    let status = r.status.map(|s| format!(" (HTTP {s})")).unwrap_or_default();
                    return Err(Held {
                        webhook: w.name.clone(),
                        message: format!("{}{status}", r.message),
                        answered: r.status.is_some(),
                        muted: w.mute_alert,
                    });
                }
                None => {
                    return Err(Held {
                        webhook: w.name.clone(),
                        message: "no answer (the webhook was not called)".to_string(),
                        answered: false,
                        muted: w.mute_alert,
                    })
                }
            }
        }
        Ok(())
    }

    /// A gate's hold as Flagger words it (`Halt podinfo.test advancement waiting for approval
    /// gate`); when the webhook could not be reached, also why.
    fn held_event(&mut self, what: &str, held: &Held) {
        let mut message = format!(
            "Halt {} advancement waiting for {what} {}",
            self.name(),
            held.webhook
        );
        if !held.answered {
            message.push_str(&format!(": {}", held.message));
        }
        self.event(EventKind::Warning, message);
    }

    /// The first rollback webhook that succeeded, if any (SPEC K5: a success rolls back).
    fn rollback_signal(&mut self) -> Option<String> {
        let hooks: Vec<_> = self.spec.webhooks_of(WebhookType::Rollback).collect();
        for w in hooks {
            self.consulted.push(w.name.clone());
            if self.input.webhooks.get(&w.name).is_some_and(|r| r.ok) {
                self.event(
                    EventKind::Warning,
                    format!("Rollback check {} passed", w.name),
                );
                return Some(w.name.clone());
            }
            self.event(
                EventKind::Normal,
                format!("Rollback hook {} not signaling a rollback", w.name),
            );
        }
        None
    }

    /// Checks every metric (SPEC K6); the first failure, described.
    fn metrics(&mut self) -> Result<(), String> {
        let metrics = &self.spec.analysis.metrics;
        for m in metrics {
            self.consulted.push(m.name.clone());
            if m.range.min.is_none() && m.range.max.is_none() {
                // A judged metric without thresholdRange: only its judge decides.
                continue;
            }
            let Some(value) = self.input.metrics.get(&m.name).copied().flatten() else {
                return Err(self.no_values(m));
            };
            if !m.range.contains(value) {
                let (op, bound) = match (m.range.min, m.range.max) {
                    (Some(min), _) if value < min => ('<', min),
                    (_, Some(max)) => ('>', max),
                    // Not reached: a value out of a range is below its min or above its max.
                    (Some(min), None) => ('<', min),
                    (None, None) => continue,
                };
                let name = self.name();
                return Err(out_of_range(&name, m, value, op, bound));
            }
        }
        Ok(())
    }

    /// Flagger's event for a metric whose query returned no data.
    fn no_values(&self, m: &Metric) -> String {
        match &m.source {
            MetricSource::RequestSuccessRate | MetricSource::RequestDuration => format!(
                "Halt advancement no values found for proxy metric {} probably {} is not \
                 receiving traffic",
                m.name,
                self.target()
            ),
            MetricSource::Prometheus { .. } => {
                format!("Halt advancement no values found for metric: {}", m.name)
            }
            MetricSource::Template { .. } => {
                format!(
                    "Halt advancement no values found for custom metric: {}",
                    m.name
                )
            }
        }
    }

    /// Runs the judges of the analysed metrics on the tick's samples: the first failure,
    /// else the inconclusive ones, else pass.
    fn judgements(&mut self) -> StepResult {
        let mut inconclusive = Vec::new();
        for m in &self.spec.analysis.metrics {
            let Some(j) = self.policy.judges.get(&m.name) else {
                continue;
            };
            let empty = MetricSamples::default();
            let samples = self.samples.get(&m.name).unwrap_or(&empty);
            let judgement = judge(j, samples);
            self.verdicts
                .push((m.name.clone(), judgement.verdict, judgement.reason.clone()));
            match judgement.verdict {
                Verdict::Pass => self.record(
                    EventKind::Normal,
                    format!("Judge of metric {} passed: {}", m.name, judgement.reason),
                ),
                Verdict::Fail => {
                    return StepResult::Failed(format!(
                        "Halt {} advancement judge of metric {} failed: {}",
                        self.name(),
                        m.name,
                        judgement.reason
                    ))
                }
                Verdict::Inconclusive => {
                    inconclusive.push(format!("metric {}: {}", m.name, judgement.reason))
                }
            }
        }
        if inconclusive.is_empty() {
            StepResult::Passed
        } else {
            StepResult::Inconclusive(inconclusive.join("; "))
        }
    }

    /// The fresh baseline starts with the canary, from the primary's revision.
    fn deploy_baseline(&mut self) {
        if !self.policy.uses_fresh_baseline() {
            return;
        }
        if let Some(revision) = self.s.primary_revision.clone() {
            self.actions.push(Action::DeployBaseline { revision });
        }
    }

    /// The fresh baseline goes when the analysis ends.
    fn scale_baseline_to_zero(&mut self) {
        if self.policy.uses_fresh_baseline() {
            self.actions.push(Action::ScaleBaselineToZero);
        }
    }

    /// Stops the analysis for an operator: the weights and workloads stay (issue 20).
    fn halt(&mut self, message: String, severity: Severity) {
        self.s.set_phase(Phase::Halted, message.clone(), self.now);
        self.event(
            EventKind::Warning,
            format!(
                "Halting {} at weight {} for an operator (promote, abort or retry): {message}",
                self.name(),
                self.s.canary_weight
            ),
        );
        self.alert(severity, message);
    }

    fn route_all_to_primary(&mut self) {
        self.actions.push(Action::RouteAllToPrimary);
        self.s.canary_weight = 0;
        self.s.match_routing = false;
    }

    /// Clears the analysis counters for a fresh analysis of `revision` that starts now.
    fn reset_analysis(&mut self, revision: &str) {
        self.inconclusive = 0;
        self.s.failed_checks = 0;
        self.s.iterations = 0;
        self.s.last_applied_spec = Some(revision.to_string());
        self.s.failed_spec = None;
        self.s.revision_started_ms = Some(self.now);
        self.s.not_ready_since_ms = Some(self.now);
    }

    // ----- phases -----

    fn initializing(&mut self) {
        if let Some(m) = self.input.manual {
            self.event(
                EventKind::Warning,
                format!(
                    "Manual {} ignored: canary {} is still initializing",
                    m.as_str(),
                    self.name()
                ),
            );
            return;
        }
        let rev = self.revision().to_string();
        if self.s.last_applied_spec.as_deref() != Some(rev.as_str()) {
            self.reinitialize(&rev);
            return;
        }
        if self.primary_ready() {
            self.s.not_ready_since_ms = None;
            self.s.last_promoted_spec = Some(rev);
            let msg = format!("{} initialization completed.", self.spec.target.kind);
            self.s.set_phase(Phase::Initialized, msg, self.now);
            self.event(
                EventKind::Normal,
                format!("Initialization done! {}", self.name()),
            );
            self.alert(
                Severity::Info,
                format!(
                    "New {} detected, initialization completed.",
                    self.spec.target.kind
                ),
            );
            return;
        }
        let since = *self.s.not_ready_since_ms.get_or_insert(self.now);
        if self.deadline_passed(since) {
            self.s.not_ready_since_ms = None;
            self.s.failed_spec = Some(rev);
            let msg = format!(
                "Initialization failed: the primary was not ready within {}s.",
                self.spec.progress_deadline_seconds
            );
            self.s.set_phase(Phase::Failed, msg.clone(), self.now);
            let event = format!(
                "Initialization of {} failed: {} not ready within {}s",
                self.name(),
                self.primary(),
                self.spec.progress_deadline_seconds
            );
            self.event(EventKind::Warning, event);
            self.alert(Severity::Error, msg);
            return;
        }
        let event = self.primary_not_ready();
        self.event(EventKind::Warning, event);
    }

    /// (Re)creates the primary from `rev`: on the first tick, when the target changed before
    /// initialisation finished, and for a new revision after initialisation failed.
    fn reinitialize(&mut self, rev: &str) {
        self.actions.push(Action::Initialize {
            revision: rev.to_string(),
        });
        self.s.canary_weight = 0;
        self.s.match_routing = false;
        self.s.canary_revision = None;
        self.s.primary_revision = Some(rev.to_string());
        self.s.last_applied_spec = Some(rev.to_string());
        self.s.failed_spec = None;
        self.s.not_ready_since_ms = Some(self.now);
        let msg = format!(
            "New {} detected, starting initialization.",
            self.spec.target.kind
        );
        self.s.set_phase(Phase::Initializing, msg, self.now);
        self.event(
            EventKind::Normal,
            format!(
                "Initializing {}: creating {} from {} at revision {rev}",
                self.name(),
                self.primary(),
                self.target()
            ),
        );
    }

    /// Resting phases and Waiting: start analysis of a new revision.
    fn resting(&mut self) {
        let rev = self.revision().to_string();
        if let Some(m) = self.input.manual {
            self.resting_manual(m, &rev);
            return;
        }
        if !is_new_revision(&self.s, &rev) {
            if self.s.phase == Phase::Waiting {
                self.settle_waiting(&rev);
            }
            return;
        }
        if self.s.last_promoted_spec.is_none() {
            // Initialisation failed: a new revision sets the primary up again.
            self.reinitialize(&rev);
            return;
        }
        if !self.spec.skip_analysis && !self.primary_ready() {
            let event = self.primary_not_ready();
            self.event(EventKind::Warning, event);
            return;
        }
        if let Err(held) = self.gate(WebhookType::ConfirmRollout) {
            if self.s.canary_weight > 0 || self.s.match_routing {
                // Traffic is still on the canary after a failed promotion: it moves back to
                // the primary only once the primary is ready; Waiting carries none.
                if !self.primary_ready() {
                    let event = self.primary_not_ready();
                    self.event(EventKind::Warning, event);
                    return;
                }
                self.route_all_to_primary();
            }
            if self.s.phase != Phase::Waiting {
                self.s.set_phase(
                    Phase::Waiting,
                    "Waiting for approval.".to_string(),
                    self.now,
                );
                if !held.muted {
                    self.alert(
                        Severity::Warn,
                        "Canary is waiting for approval.".to_string(),
                    );
                }
            }
            self.held_event("approval", &held);
            return;
        }
        let msg = format!("New revision detected! Scaling up {}", self.target());
        self.start(&rev, msg);
    }

    fn resting_manual(&mut self, m: Manual, rev: &str) {
        let phase = self.s.phase;
        let is_failed_rev = self.s.failed_spec.as_deref() == Some(rev)
            || self.s.last_applied_spec.as_deref() == Some(rev);
        match m {
            Manual::Retry if phase == Phase::Failed && is_failed_rev => {
                if self.s.last_promoted_spec.is_none() {
                    self.reinitialize(rev);
                } else if self.s.canary_weight > 0
                    && self.s.primary_revision.as_deref() == Some(rev)
                {
                    // The promotion of this revision failed with traffic on the canary:
                    // retry the promotion.
                    self.event(
                        EventKind::Normal,
                        format!("Retrying the promotion of {} (operator)", self.name()),
                    );
                    self.promote();
                } else if !self.spec.skip_analysis && !self.primary_ready() {
                    let event = format!(
                        "Manual retry of {} refused: {}",
                        self.name(),
                        self.primary_not_ready()
                    );
                    self.event(EventKind::Warning, event);
                } else {
                    let msg = format!(
                        "Retrying analysis of revision {rev} of {} (operator)",
                        self.target()
                    );
                    self.start(rev, msg);
                }
            }
            Manual::Abort if phase == Phase::Waiting => {
                // Reject the revision waiting for approval: it does not start by itself.
                self.s.last_applied_spec = Some(rev.to_string());
                let msg = format!("Revision {rev} of {} rejected by operator", self.name());
                self.rollback(msg.clone());
                self.alert(Severity::Warn, msg);
            }
            _ => {
                let event = format!(
                    "Manual {} ignored: canary {} is {} with revision {rev}",
                    m.as_str(),
                    self.name(),
                    phase
                );
                self.event(EventKind::Warning, event);
            }
        }
    }

    /// Waiting, but the target went back to a revision that needs no analysis.
    fn settle_waiting(&mut self, rev: &str) {
        if self.s.canary_weight > 0 || self.s.match_routing {
            // Only after a failed promotion: the canary still carries the traffic because the
            // primary never became ready. Nothing is settled and no traffic moves to a
            // primary that may be dead (SPEC K10); a retry promotes again.
            let msg = format!(
                "Revision {rev} needs no analysis, but traffic is still on the canary after a \
                 failed promotion; retry to promote again."
            );
            self.s.set_phase(Phase::Failed, msg, self.now);
            let event = format!(
                "{} stays Failed with traffic on the canary until a retry",
                self.name()
            );
            self.event(EventKind::Warning, event);
            return;
        }
        if self.s.failed_spec.as_deref() == Some(rev) {
            let msg = format!("Revision {rev} failed before; it does not restart by itself.");
            self.s.set_phase(Phase::Failed, msg, self.now);
        } else if self.s.primary_revision.as_deref() != Some(rev) {
            // After a failed promotion the primary runs another revision: claiming success
            // would be false. The operator retries the promotion or publishes a revision.
            let msg = format!(
                "The target is back at {rev}, but the primary runs {}; retry the promotion \
                 or publish a new revision.",
                self.s.primary_revision.as_deref().unwrap_or("nothing")
            );
            self.s.set_phase(Phase::Failed, msg, self.now);
        } else {
            if self.s.canary_revision.is_some() {
                // A canary left running (a failed promotion's) is not needed at rest.
                self.actions.push(Action::ScaleCanaryToZero);
                self.s.canary_revision = None;
            }
            self.s.last_applied_spec = Some(rev.to_string());
            let msg = "The target is back at the promoted revision.".to_string();
            self.s.set_phase(Phase::Succeeded, msg, self.now);
        }
        let event = format!(
            "Revision {rev} of {} needs no analysis: back to {}",
            self.name(),
            self.s.phase
        );
        self.event(EventKind::Normal, event);
    }

    /// Starts analysis of `rev`: Progressing at weight 0, canary deployed.
    fn start(&mut self, rev: &str, event: String) {
        if self.s.canary_weight > 0 || self.s.match_routing {
            // Only after a failed promotion: the primary is ready again (checked).
            self.route_all_to_primary();
        }
        self.reset_analysis(rev);
        self.s.canary_revision = Some(rev.to_string());
        self.actions.push(Action::DeployCanary {
            revision: rev.to_string(),
        });
        self.deploy_baseline();
        self.s.set_phase(
            Phase::Progressing,
            "New revision detected, progressing canary analysis.".to_string(),
            self.now,
        );
        self.event(EventKind::Normal, event);
        self.alert(
            Severity::Info,
            "New revision detected, progressing canary analysis.".to_string(),
        );
    }

    fn active(&mut self) {
        let rev = self.revision().to_string();
        if self.s.phase.is_analysing() && self.s.last_applied_spec.as_deref() != Some(rev.as_str())
        {
            self.restart(&rev);
            return;
        }
        if let Some(m) = self.input.manual {
            self.active_manual(m);
            return;
        }
        if self.s.phase.is_promoting() {
            self.promotion();
            return;
        }
        // Progressing or WaitingPromotion.
        if !self.readiness() {
            return;
        }
        if self.spec.skip_analysis {
            self.skip_to_promoted();
            return;
        }
        if self.rollback_signal().is_some() {
            let msg = format!("Rolling back {} manual webhook invoked", self.name());
            self.rollback(msg);
            self.alert(
                Severity::Warn,
                "Rolling back manual webhook invoked".to_string(),
            );
            return;
        }
        if self.s.failed_checks >= self.spec.analysis.threshold
            && self.policy.on_failure == OnFailure::Hold
        {
            let msg = format!(
                "Failed checks threshold reached {}: holding at weight {} (onFailure: hold)",
                self.s.failed_checks, self.s.canary_weight
            );
            self.halt(msg, Severity::Error);
            return;
        }
        if self.s.failed_checks >= self.spec.analysis.threshold {
            let msg = format!(
                "Rolling back {} failed checks threshold reached {}",
                self.name(),
                self.s.failed_checks
            );
            self.rollback(msg);
            self.alert(
                Severity::Error,
                format!("Failed checks threshold reached {}", self.s.failed_checks),
            );
            return;
        }
        match self.analysis() {
            StepResult::Passed => {}
            StepResult::Failed(event) => {
                self.inconclusive = 0;
                self.s.failed_checks = self.s.failed_checks.saturating_add(1);
                self.event(EventKind::Warning, event);
                return;
            }
            StepResult::Inconclusive(why) => {
                self.inconclusive = self.inconclusive.saturating_add(1);
                let limit = self.policy.inconclusive_limit;
                let event = format!(
                    "Halt {} advancement inconclusive judgement ({why}) ({} in a row{})",
                    self.name(),
                    self.inconclusive,
                    limit.map(|l| format!(", limit {l}")).unwrap_or_default()
                );
                self.event(EventKind::Warning, event);
                if limit.is_some_and(|l| self.inconclusive >= l) {
                    let msg = format!(
                        "{} inconclusive judgements in a row: holding at weight {}",
                        self.inconclusive, self.s.canary_weight
                    );
                    self.halt(msg, Severity::Warn);
                }
                return;
            }
        }
        self.inconclusive = 0;
        self.analysis_passed = true;
        self.step_forward();
    }

    /// Halted (issue 20): waits for an operator's promote, abort or retry; a new revision
    /// restarts the analysis.
    fn halted(&mut self) {
        let rev = self.revision().to_string();
        if self.s.last_applied_spec.as_deref() != Some(rev.as_str()) {
            self.restart(&rev);
            return;
        }
        let name = self.name();
        let weight = self.s.canary_weight;
        match self.input.manual {
            Some(Manual::Promote) => {
                self.event(
                    EventKind::Normal,
                    format!("Promotion of halted {name} requested by operator"),
                );
                self.promote();
            }
            Some(Manual::Abort) => {
                let msg = format!("Rolling back halted {name}: aborted by operator");
                self.rollback(msg.clone());
                self.alert(Severity::Warn, msg);
            }
            Some(Manual::Retry) => {
                self.s.failed_checks = 0;
                let msg = format!("Analysis resumed by operator at weight {weight}.");
                self.s.set_phase(Phase::Progressing, msg, self.now);
                self.event(
                    EventKind::Normal,
                    format!(
                        "Retrying analysis of {name} at weight {weight} (operator): failed checks \
                         reset"
                    ),
                );
            }
            None => self.event(
                EventKind::Warning,
                format!("{name} is halted at weight {weight}: waiting for an operator"),
            ),
        }
    }

    /// A new revision during analysis: back to weight 0 (or, if the target went back to the
    /// promoted revision, nothing left to analyse).
    fn restart(&mut self, rev: &str) {
        if self.s.canary_weight > 0 || self.s.match_routing {
            self.route_all_to_primary();
        }
        if self.s.last_promoted_spec.as_deref() == Some(rev) {
            self.actions.push(Action::ScaleCanaryToZero);
            self.scale_baseline_to_zero();
            self.inconclusive = 0;
            self.s.canary_revision = None;
            self.s.last_applied_spec = Some(rev.to_string());
            self.s.failed_checks = 0;
            self.s.iterations = 0;
            self.s.not_ready_since_ms = None;
            let msg = "The target is back at the promoted revision; analysis cancelled.";
            self.s
                .set_phase(Phase::Succeeded, msg.to_string(), self.now);
            let event = format!(
                "{} is back at the promoted revision {rev}: analysis of {} cancelled",
                self.target(),
                self.name()
            );
            self.event(EventKind::Normal, event);
            return;
        }
        self.reset_analysis(rev);
        self.s.canary_revision = Some(rev.to_string());
        self.actions.push(Action::DeployCanary {
            revision: rev.to_string(),
        });
        self.deploy_baseline();
        self.s.set_phase(
            Phase::Progressing,
            "New revision detected, progressing canary analysis.".to_string(),
            self.now,
        );
        self.event(
            EventKind::Normal,
            format!(
                "New revision detected! Restarting analysis for {}",
                self.target()
            ),
        );
    }

    fn active_manual(&mut self, m: Manual) {
        let phase = self.s.phase;
        match m {
            Manual::Abort if phase.is_analysing() => {
                let msg = format!("Rolling back {}: aborted by operator", self.name());
                self.rollback(msg.clone());
                self.alert(Severity::Warn, msg);
            }
            Manual::Promote if phase.is_analysing() => {
                let event = format!("Promotion of {} requested by operator", self.name());
                self.event(EventKind::Normal, event);
                self.promote();
            }
            _ => {
                let why = if phase.is_promoting() {
                    "the canary spec is already copied to the primary"
                } else {
                    "nothing to retry"
                };
                let event = format!(
                    "Manual {} ignored: canary {} is {phase}: {why}",
                    m.as_str(),
                    self.name()
                );
                self.event(EventKind::Warning, event);
            }
        }
    }

    /// Readiness of primary and canary during analysis; `false` ends the tick.
    fn readiness(&mut self) -> bool {
        let primary_ok = self.spec.skip_analysis || self.primary_ready();
        let canary_ok = self.canary_ready();
        if primary_ok && canary_ok {
            self.s.not_ready_since_ms = None;
            return true;
        }
        let which = match (primary_ok, canary_ok) {
            (false, false) => "primary and canary",
            (false, true) => "primary",
            _ => "canary",
        };
        // Flagger checks the primary first, and reports the first that is not ready.
        let not_ready = if primary_ok {
            self.canary_not_ready()
        } else {
            self.primary_not_ready()
        };
        let since = *self.s.not_ready_since_ms.get_or_insert(self.now);
        if self.deadline_passed(since) {
            let msg = format!(
                "Progress deadline exceeded: {which} of {} not ready for {}s",
                self.spec.name, self.spec.progress_deadline_seconds
            );
            self.rollback(format!(
                "Rolling back {} progress deadline exceeded {not_ready} for {}s",
                self.name(),
                self.spec.progress_deadline_seconds
            ));
            self.alert(Severity::Error, msg);
        } else {
            self.event(EventKind::Warning, not_ready);
        }
        false
    }

    /// One analysis step: the first runs pre-rollout webhooks, later ones rollout webhooks
    /// then metrics and the metrics' judges.
    fn analysis(&mut self) -> StepResult {
        if is_first_step(&self.s) {
            self.event(
                EventKind::Normal,
                format!("Starting canary analysis for {}", self.target()),
            );
            return match self.gate(WebhookType::PreRollout) {
                Ok(()) => StepResult::Passed,
                Err(h) => StepResult::Failed(format!(
                    "Halt {} advancement pre-rollout check {} failed {}",
                    self.name(),
                    h.webhook,
                    h.message
                )),
            };
        }
        if let Err(h) = self.gate(WebhookType::Rollout) {
            return StepResult::Failed(format!(
                "Halt {} advancement external check {} failed {}",
                self.name(),
                h.webhook,
                h.message
            ));
        }
        if let Err(why) = self.metrics() {
            return StepResult::Failed(why);
        }
        self.judgements()
    }

    /// After a successful analysis step: the next weight or iteration, or promotion.
    fn step_forward(&mut self) {
        let name = self.name();
        match &self.spec.analysis.strategy {
            Strategy::Canary { steps, max_weight } => {
                let max = *max_weight;
                if self.s.canary_weight < max {
                    if let Err(held) = self.gate(WebhookType::ConfirmTrafficIncrease) {
                        self.held_event("traffic increase approval", &held);
                        if !held.muted {
                            self.alert(
                                Severity::Warn,
                                "Canary traffic increase is waiting for approval.".to_string(),
                            );
                        }
                        return;
                    }
                    let w = steps.next(self.s.canary_weight, max);
                    self.actions.push(Action::SetWeights {
                        primary: TOTAL_WEIGHT - w,
                        canary: w,
                    });
                    self.s.canary_weight = w;
                    self.event(
                        EventKind::Normal,
                        format!("Advance {name} canary weight {w}"),
                    );
                } else if self.confirm_promotion() {
                    self.promote();
                }
            }
            Strategy::AbTesting {
                iterations,
                match_rules,
            } => {
                if self.s.iterations < *iterations {
                    if !self.s.match_routing {
                        self.actions.push(Action::SetRouting {
                            canary_weight: 0,
                            match_rules: match_rules.clone(),
                        });
                        self.s.match_routing = true;
                    }
                    self.s.iterations += 1;
                    self.event(
                        EventKind::Normal,
                        format!(
                            "Advance {name} canary iteration {}/{iterations}",
                            self.s.iterations
                        ),
                    );
                } else if self.confirm_promotion() {
                    self.promote();
                }
            }
            Strategy::BlueGreen { iterations } => {
                let n = *iterations;
                if self.s.iterations < n {
                    self.s.iterations += 1;
                    self.event(
                        EventKind::Normal,
                        format!("Advance {name} canary iteration {}/{n}", self.s.iterations),
                    );
                } else if self.confirm_promotion() {
                    if self.s.iterations == n {
                        // Switch: all traffic to the canary for one more analysis step.
                        self.actions.push(Action::SetWeights {
                            primary: 0,
                            canary: TOTAL_WEIGHT,
                        });
                        self.s.canary_weight = TOTAL_WEIGHT;
                        self.s.iterations += 1;
                        if self.s.phase == Phase::WaitingPromotion {
                            self.s.set_phase(
                                Phase::Progressing,
                                "New revision detected, progressing canary analysis.".to_string(),
                                self.now,
                            );
                        }
                        self.event(
                            EventKind::Normal,
                            "Routing all traffic to canary".to_string(),
                        );
                    } else {
                        self.promote();
                    }
                }
            }
        }
    }

    /// The confirm-promotion gate; a hold moves to WaitingPromotion.
    fn confirm_promotion(&mut self) -> bool {
        match self.gate(WebhookType::ConfirmPromotion) {
            Ok(()) => true,
            Err(held) => {
                if self.s.phase != Phase::WaitingPromotion {
                    self.s.set_phase(
                        Phase::WaitingPromotion,
                        "Waiting for approval.".to_string(),
                        self.now,
                    );
                    if !held.muted {
                        self.alert(
                            Severity::Warn,
                            "Canary promotion is waiting for approval.".to_string(),
                        );
                    }
                }
                self.held_event("promotion approval", &held);
                false
            }
        }
    }

    /// Copies the canary spec to the primary: Promoting.
    fn promote(&mut self) {
        let Some(rev) = self.s.last_applied_spec.clone() else {
            // Not reached: analysis (and a failed promotion) always has a last applied spec.
            return;
        };
        self.actions.push(Action::PromoteCanary {
            revision: rev.clone(),
        });
        self.scale_baseline_to_zero();
        self.s.primary_revision = Some(rev);
        // The primary rolls to the new spec: the deadline for it to be ready starts now.
        self.s.not_ready_since_ms = Some(self.now);
        self.s.set_phase(
            Phase::Promoting,
            "Canary analysis completed, starting primary rolling update.".to_string(),
            self.now,
        );
        let event = format!(
            "Copying {} template spec to {}",
            self.target(),
            self.primary()
        );
        self.event(EventKind::Normal, event);
    }

    /// Promoting and Finalising. Traffic never moves to a primary that is not ready (SPEC
    /// K10): while it is not, the weights hold (in Finalising, where the primary already has
    /// all traffic, traffic goes back to the still-running canary at once); at the progress
    /// deadline the promotion fails forward: all traffic on the canary, phase Failed.
    fn promotion(&mut self) {
        if !self.primary_ready() {
            let since = *self.s.not_ready_since_ms.get_or_insert(self.now);
            if self.s.phase == Phase::Finalising {
                self.actions.push(Action::SetWeights {
                    primary: 0,
                    canary: TOTAL_WEIGHT,
                });
                self.s.canary_weight = TOTAL_WEIGHT;
                self.s.match_routing = false;
                self.fallback_to_canary = true;
                self.s.set_phase(
                    Phase::Promoting,
                    "Primary not ready: traffic back on the canary.".to_string(),
                    self.now,
                );
                self.alert(
                    Severity::Warn,
                    format!(
                        "Promotion of {}: primary not ready, all traffic routed to the canary",
                        self.spec.name
                    ),
                );
            }
            if self.deadline_passed(since) {
                self.promotion_failed();
            } else {
                let event = self.primary_not_ready();
                self.event(EventKind::Warning, event);
            }
            return;
        }
        self.s.not_ready_since_ms = None;
        if self.s.phase == Phase::Promoting {
            match self.spec.analysis.step_weight_promotion {
                Some(step) if self.s.canary_weight > step && !self.s.match_routing => {
                    let c = self.s.canary_weight - step;
                    self.actions.push(Action::SetWeights {
                        primary: TOTAL_WEIGHT - c,
                        canary: c,
                    });
                    self.s.canary_weight = c;
                    let event = format!(
                        "Advance {} primary weight {}",
                        self.name(),
                        TOTAL_WEIGHT - c
                    );
                    self.event(EventKind::Normal, event);
                }
                _ => {
                    self.route_all_to_primary();
                    self.s.set_phase(
                        Phase::Finalising,
                        "Canary analysis completed, routing all traffic to primary.".to_string(),
                        self.now,
                    );
                    self.event(
                        EventKind::Normal,
                        "Routing all traffic to primary".to_string(),
                    );
                }
            }
            return;
        }
        // Finalising, with a ready primary holding all traffic.
        self.actions.push(Action::ScaleCanaryToZero);
        self.s.canary_revision = None;
        self.s.iterations = 0;
        self.s.failed_spec = None;
        self.s.last_promoted_spec = self.s.last_applied_spec.clone();
        self.s.set_phase(
            Phase::Succeeded,
            "Canary analysis completed successfully, promotion finished.".to_string(),
            self.now,
        );
        self.notify_post_rollout();
        self.event(
            EventKind::Normal,
            format!("Promotion completed! Scaling down {}", self.target()),
        );
        self.alert(
            Severity::Info,
            "Canary analysis completed successfully, promotion finished.".to_string(),
        );
    }

    /// The promoted primary did not become ready by the deadline: all traffic stays on (or
    /// goes back to) the canary, which keeps running; phase Failed.
    fn promotion_failed(&mut self) {
        if self.s.canary_weight != TOTAL_WEIGHT || self.s.match_routing {
            self.actions.push(Action::SetWeights {
                primary: 0,
                canary: TOTAL_WEIGHT,
            });
            self.s.canary_weight = TOTAL_WEIGHT;
            self.s.match_routing = false;
        }
        self.fallback_to_canary = true;
        self.s.not_ready_since_ms = None;
        self.s.failed_spec = self.s.last_applied_spec.clone();
        let msg = format!(
            "Promotion failed: the primary was not ready within {}s; all traffic is on the canary.",
            self.spec.progress_deadline_seconds
        );
        self.s.set_phase(Phase::Failed, msg.clone(), self.now);
        self.notify_post_rollout();
        let event = format!(
            "Promotion of {} failed, primary not ready: {} not ready within {}s",
            self.target(),
            self.primary(),
            self.spec.progress_deadline_seconds
        );
        self.event(EventKind::Warning, event);
        self.alert(Severity::Error, msg);
    }

    /// skipAnalysis: promote at once (Flagger: all traffic to the primary, copy the spec,
    /// scale the canary down, Succeeded).
    fn skip_to_promoted(&mut self) {
        let Some(rev) = self.s.last_applied_spec.clone() else {
            // Not reached: analysis always has a last applied spec.
            return;
        };
        self.route_all_to_primary();
        self.actions.push(Action::PromoteCanary {
            revision: rev.clone(),
        });
        self.actions.push(Action::ScaleCanaryToZero);
        self.scale_baseline_to_zero();
        self.s.primary_revision = Some(rev);
        self.s.canary_revision = None;
        self.s.iterations = 0;
        self.s.not_ready_since_ms = None;
        self.s.last_promoted_spec = self.s.last_applied_spec.clone();
        self.s.set_phase(
            Phase::Succeeded,
            "Canary analysis completed successfully, promotion finished.".to_string(),
            self.now,
        );
        self.notify_post_rollout();
        self.event(
            EventKind::Normal,
            format!(
                "Promotion completed! Canary analysis was skipped for {}",
                self.target()
            ),
        );
        self.alert(
            Severity::Info,
            "Canary analysis was skipped, promotion finished.".to_string(),
        );
    }

    /// Rolls the revision back (SPEC K3): all traffic to the primary, canary to zero, phase
    /// Failed, the revision remembered so that it does not start again by itself.
    fn rollback(&mut self, event: String) {
        self.route_all_to_primary();
        self.actions.push(Action::ScaleCanaryToZero);
        self.scale_baseline_to_zero();
        self.s.canary_revision = None;
        self.s.not_ready_since_ms = None;
        self.s.failed_spec = self.s.last_applied_spec.clone();
        let msg = format!(
            "Canary analysis failed, {} scaled to zero.",
            self.spec.target.kind
        );
        self.s.set_phase(Phase::Failed, msg, self.now);
        self.event(EventKind::Warning, event);
        self.event(
            EventKind::Warning,
            format!("Canary failed! Scaling down {}", self.name()),
        );
        self.notify_post_rollout();
    }

    /// TigerBeetle-style assertions of what every tick must keep (debug builds).
    fn check_invariants(&self, before: &CanaryStatus) {
        let s = &self.s;
        debug_assert_eq!(
            s.step,
            before.step.saturating_add(1),
            "step advances by one"
        );
        debug_assert!(
            s.canary_weight <= TOTAL_WEIGHT,
            "weight {}",
            s.canary_weight
        );
        for a in &self.actions {
            if let Some((p, c)) = a.weights() {
                debug_assert_eq!(u16::from(p) + u16::from(c), 100, "weights {p}+{c}");
            }
        }
        if s.canary_weight > before.canary_weight && !self.fallback_to_canary {
            debug_assert!(
                s.canary_weight <= self.spec.max_weight(),
                "weight {} above maxWeight {}",
                s.canary_weight,
                self.spec.max_weight()
            );
        }
        if matches!(s.phase, Phase::Initialized | Phase::Succeeded) {
            debug_assert!(
                s.canary_weight == 0 && !s.match_routing,
                "resting with traffic on the canary"
            );
        }
        if s.phase == Phase::Failed && s.canary_weight > 0 {
            debug_assert!(
                s.canary_revision.is_some(),
                "traffic on a canary scaled to zero"
            );
        }
        self.check_primary(before);
        let retried_halt =
            before.phase == Phase::Halted && self.input.manual == Some(Manual::Retry);
        if s.last_applied_spec == before.last_applied_spec
            && s.revision_started_ms == before.revision_started_ms
            && !retried_halt
        {
            debug_assert!(
                s.failed_checks >= before.failed_checks,
                "failed checks decreased"
            );
        }
    }
}

impl Tick<'_> {
    /// Issue 52's invariant, the machine's half: no revision reaches the primary without a
    /// Succeeded analysis, a `skipAnalysis` or a manual promote. The primary's revision
    /// changes only by initialisation, while the canary has never been initialised (the
    /// evaluation holds its target at what the entity runs until then), or by the promotion
    /// of the revision the canary workload ran, from an analysing phase, in a tick whose
    /// analysis step passed, with `skipAnalysis`, or on a manual promote.
    fn check_primary(&self, before: &CanaryStatus) {
        let s = &self.s;
        if s.primary_revision == before.primary_revision {
            return;
        }
        if before.last_promoted_spec.is_none() {
            debug_assert!(
                s.last_promoted_spec.is_none() || s.last_promoted_spec == s.primary_revision,
                "initialised with a primary other than the one set up"
            );
            return;
        }
        let analysed = matches!(
            before.phase,
            Phase::Progressing | Phase::WaitingPromotion | Phase::Halted
        ) && s.primary_revision.is_some()
            && s.primary_revision == before.canary_revision;
        let why = self.analysis_passed
            || self.spec.skip_analysis
            || self.input.manual == Some(Manual::Promote);
        debug_assert!(
            analysed && why,
            "revision {:?} reached the primary from {} without a passed analysis, skipAnalysis \
             or a manual promote (canary workload {:?})",
            s.primary_revision,
            before.phase,
            before.canary_revision
        );
    }
}

/// Flagger's event for metric `m` of canary `name` (`podinfo.test`) out of its range: `value`
/// `op` `bound`, in thousandths (`Halt podinfo.test advancement success rate 80.00% < 99%`).
fn out_of_range(name: &str, m: &Metric, value: i64, op: char, bound: i64) -> String {
    match m.source {
        MetricSource::RequestSuccessRate => format!(
            "Halt {name} advancement success rate {}% {op} {}%",
            two_decimals(value),
            go_float(bound)
        ),
        // Flagger compares durations in whole milliseconds of the threshold.
        MetricSource::RequestDuration => format!(
            "Halt {name} advancement request duration {} {op} {}",
            go_duration(value),
            go_duration(bound / MILLI * MILLI)
        ),
        MetricSource::Prometheus { .. } | MetricSource::Template { .. } => format!(
            "Halt {name} advancement {} {} {op} {}",
            m.name,
            two_decimals(value),
            go_float(bound)
        ),
    }
}

/// How Flagger names a passed gate of `kind` in its event (`Confirm-rollout check gate
/// passed`); `None` for webhooks that are not gates.
fn gate_check_name(kind: WebhookType) -> Option<&'static str> {
    match kind {
        WebhookType::ConfirmRollout => Some("Confirm-rollout"),
        WebhookType::PreRollout => Some("Pre-rollout"),
        WebhookType::ConfirmTrafficIncrease => Some("Confirm-traffic-increase"),
        WebhookType::ConfirmPromotion => Some("Confirm-promotion"),
        WebhookType::Rollout
        | WebhookType::PostRollout
        | WebhookType::Rollback
        | WebhookType::Event => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canary::{parse_canary, plan_tick, WebhookResult};
    use proptest::prelude::*;

    const HOOKS: &str = "
    webhooks:
      - {name: gate, type: confirm-rollout, url: 'http://g/'}
      - {name: smoke, type: pre-rollout, url: 'http://t/'}
      - {name: load, url: 'http://t/'}
      - {name: traffic, type: confirm-traffic-increase, url: 'http://g/'}
      - {name: promotion, type: confirm-promotion, url: 'http://g/'}
      - {name: done, type: post-rollout, url: 'http://c/'}
      - {name: kill, type: rollback, url: 'http://g/'}
      - {name: audit, type: event, url: 'http://a/'}
    metrics:
      - {name: request-success-rate, thresholdRange: {min: 99}}
      - {name: request-duration, thresholdRange: {max: 500}}
";

    fn specs() -> Vec<CanarySpec> {
        [
            "maxWeight: 30\n    stepWeight: 10\n    stepWeightPromotion: 10",
            "stepWeights: [5, 50]",
            "iterations: 2\n    match: [{headers: {x: {exact: y}}}]",
            "iterations: 2",
        ]
        .iter()
        .map(|strategy| {
            let yaml = format!(
                "metadata: {{name: p}}\nspec:\n  targetRef: {{name: p}}\n  service: {{port: 80}}\n  \
                 progressDeadlineSeconds: 3\n  analysis:\n    interval: 1s\n    threshold: 2\n    \
                 {strategy}{HOOKS}"
            );
            parse_canary(&yaml).unwrap_or_else(|e| panic!("{e}"))
        })
        .collect()
    }

    proptest! {
        /// Everything [`advance`] consults is in the plan of the same tick, and a tick with
        /// an empty plan (and no manual command) does nothing.
        #[test]
        fn advance_consults_only_what_the_plan_asked_for(
            which in 0usize..4,
            ticks in prop::collection::vec(
                (0u8..4, any::<u8>(), any::<u8>(), prop::option::weighted(0.05, 0u8..3), any::<bool>()),
                1..80,
            ),
        ) {
            let spec = specs().swap_remove(which);
            let mut status = CanaryStatus::new(0);
            let mut now = 0;
            for (rev, bits, ready, manual, force) in ticks {
                now += 1_000;
                let revision = if rev == 3 { "r2".to_string() } else { format!("r{}", rev.min(1)) };
                let plan = plan_tick(&spec, &status, &revision, now);
                let manual = manual.map(|m| [Manual::Promote, Manual::Abort, Manual::Retry][usize::from(m)]);
                if !plan.due && manual.is_none() && !force {
                    continue;
                }
                let mut input = TickInput::new(revision);
                input.primary_ready_percent = if ready % 7 == 0 { 0 } else { 100 };
                input.canary_ready_percent = if ready % 5 == 0 { 0 } else { 100 };
                input.manual = manual;
                for (i, call) in plan.webhooks.iter().enumerate() {
                    let ok = bits & (1 << (i % 8)) != 0;
                    input.webhooks.insert(call.name.clone(), WebhookResult::from_status(if ok { 200 } else { 500 }, ""));
                }
                for q in &plan.metrics {
                    input.metrics.insert(q.name.clone(), (bits % 3 != 0).then_some(100_000));
                }
                let (judged, consulted) = advance_traced(&spec, &status, &input, &Judging::NONE, now);
                let out = judged.outcome;
                if plan.due {
                    for name in &consulted {
                        prop_assert!(
                            plan.webhooks.iter().any(|c| &c.name == name)
                                || plan.metrics.iter().any(|m| &m.name == name),
                            "{} consulted but not planned in {}", name, status.phase
                        );
                    }
                } else if manual.is_none() {
                    prop_assert!(out.actions.is_empty(), "{:?}", out.actions);
                }
                status = out.status;
            }
        }
    }

    /// Regression (found by the property test in CI): a promotion fails forward (traffic on
    /// the canary, primary not ready), a new revision is held at its gate, then the target
    /// goes back to the promoted revision. The canary must neither settle as Succeeded with
    /// traffic on it nor claim success while the primary runs another revision.
    #[test]
    fn back_to_the_promoted_revision_after_a_failed_promotion_keeps_traffic_on_the_canary() {
        let spec = specs().swap_remove(0);
        let mut status = CanaryStatus::new(0);
        let mut now = 0;
        let ticks: Vec<(u8, u8, u8, Option<u8>, bool)> = vec![
            (1, 0, 0, None, false),
            (1, 0, 1, None, false),
            (0, 103, 57, None, false),
            (0, 0, 0, Some(0), false),
            (0, 0, 49, None, false),
            (0, 0, 147, None, false),
            (0, 0, 7, None, false),
            (3, 20, 1, None, false),
            (1, 0, 0, None, false),
        ];
        for (rev, bits, ready, manual, force) in ticks {
            now += 1_000;
            let revision = if rev == 3 {
                "r2".to_string()
            } else {
                format!("r{}", rev.min(1))
            };
            let plan = plan_tick(&spec, &status, &revision, now);
            let manual =
                manual.map(|m| [Manual::Promote, Manual::Abort, Manual::Retry][usize::from(m)]);
            if !plan.due && manual.is_none() && !force {
                continue;
            }
            let mut input = TickInput::new(revision.clone());
            input.primary_ready_percent = if ready % 7 == 0 { 0 } else { 100 };
            input.canary_ready_percent = if ready % 5 == 0 { 0 } else { 100 };
            input.manual = manual;
            for (i, call) in plan.webhooks.iter().enumerate() {
                let ok = bits & (1 << (i % 8)) != 0;
                input.webhooks.insert(
                    call.name.clone(),
                    WebhookResult::from_status(if ok { 200 } else { 500 }, ""),
                );
            }
            for q in &plan.metrics {
                input
                    .metrics
                    .insert(q.name.clone(), (bits % 3 != 0).then_some(100_000));
            }
            let out = advance(&spec, &status, &input, now);
            status = out.status;
        }
        // The primary became ready (running the failed promotion's revision r0) when r2
        // arrived, so traffic went back to it; back at r1, the canary does not claim success
        // while the primary runs r0.
        assert_eq!(status.phase, Phase::Failed, "{status:?}");
        assert_eq!(status.canary_weight, 0, "{status:?}");
        assert_eq!(status.primary_revision.as_deref(), Some("r0"));
    }
}

//! Plans: recording the leader's evaluations (issuing plans, noting decisions in Activity),
//! finishing and cancelling plans.

use std::collections::BTreeMap;

use crate::activity::{Activity, RECHECK};
use crate::artifact::{ArtifactLocation, Availability};
use crate::command::{CancelTarget, CommandOutput};
use crate::error::CommandError;
use crate::evaluate::{evaluate, Candidate, Evaluation, Outcome};
use crate::leader::{blocked_periods, decision_changed};
use crate::plan::{Plan, PlanStatus, FINISHED_PLANS_KEPT};
use crate::plan_outcome::PlanOutcome;
use crate::record::{Record, RecordKey};
use crate::state::{HistoryWrite, State, Trigger};
use crate::suppression::{Scope, Suppression, SuppressionSource};
use crate::TimestampMs;

use super::{check_text, not_found, Tx};

/// Most entities one `Evaluate` command may name.
pub const MAX_EVALUATE_BATCH: usize = 2_000;

impl State {
    /// `Evaluate`: re-evaluates the named entities at the entry's time and records each decision.
    pub(crate) fn evaluate(
        &mut self,
        entities: &[String],
        artifacts: &[(ArtifactLocation, Availability)],
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        if entities.len() > MAX_EVALUATE_BATCH {
            return Err(CommandError::invalid(
                "entities",
                format!("{} entities, at most {MAX_EVALUATE_BATCH}", entities.len()),
            ));
        }
        let observed: BTreeMap<&ArtifactLocation, &Availability> =
            artifacts.iter().map(|(l, a)| (l, a)).collect();
        let lookup = |l: &ArtifactLocation| observed.get(l).map(|a| (*a).clone());
        let mut issued = Vec::new();
        for id in entities {
            // An entity deleted since the proposal is skipped, not an error.
            let Some(eval) = evaluate(self, id, now, &lookup) else {
                continue;
            };
            if let Some(plan_id) = self.record_decision(eval, issued.len(), tx) {
                issued.push(plan_id);
            }
        }
        Ok(CommandOutput::Evaluated { issued })
    }

    /// `CancelPlans`: cancels the active plans of an entity, an environment or one plan.
    pub(super) fn cancel_plans(
        &mut self,
        target: &CancelTarget,
        reason: &str,
        suppress_for_ms: &Option<TimestampMs>,
        actor: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        let index = tx.index;
        check_text("reason", reason, true)?;
        let (scope, plans) = match target {
            CancelTarget::Environment(env) => {
                let scope = Scope::Environment(env.clone());
                self.require_scope(&scope)?;
                let plans = self.active_plans_in_scope(&scope);
                (scope, plans)
            }
            CancelTarget::Entity(id) => {
                let scope = Scope::Entity(id.clone());
                self.require_scope(&scope)?;
                let plans = self.active_plans_in_scope(&scope);
                (scope, plans)
            }
            CancelTarget::Plan(pid) => {
                if let Some(o) = self.plan_outcomes.get(pid) {
                    return Err(CommandError::FailedPrecondition(format!(
                        "plan {pid} is {} and cannot be cancelled",
                        o.status
                    )));
                }
                let p = self.plans.get(pid).ok_or_else(|| not_found("plan", pid))?;
                (Scope::Entity(p.entity.clone()), vec![pid.clone()])
            }
        };
        if let Some(ms) = suppress_for_ms {
            if !(1_000..=30 * 24 * 3_600_000).contains(ms) {
                return Err(CommandError::invalid(
                    "suppress_for",
                    "must be between 1 second and 30 days",
                ));
            }
        }
        let n = plans.len();
        for p in &plans {
            self.cancel_plan(p, reason, tx);
        }
        let mut suppression = None;
        if let Some(ms) = suppress_for_ms {
            let id = self.unused_suppression_id(format!("s-{index}"));
            suppression = Some(id.clone());
            self.add_suppression(
                Suppression {
                    id,
                    scope: scope.clone(),
                    source: SuppressionSource::Manual,
                    start_ms: now,
                    end_ms: Some(now + ms),
                    reason: format!("after cancel: {reason}"),
                    created_at_ms: now,
                },
                tx,
            );
        }
        self.audit_entry(actor, "cancel", scope.to_string(), reason, tx);
        let mut summary = format!("{n} plans cancelled");
        if !plans.is_empty() {
            summary.push_str(&format!(" ({})", plans.join(", ")));
        }
        if let Some(id) = &suppression {
            summary.push_str(&format!("; suppression {id} created"));
        }
        Ok(CommandOutput::Changed {
            id: suppression.unwrap_or_default(),
            summary,
        })
    }

    /// Records an evaluation: issues its plan, or notes a changed decision in Activity.
    /// Returns the id of an issued plan.
    // Long: the 4-hour re-check bookkeeping and one arm per outcome; they share the entity's
    // Activity record.
    fn record_decision(&mut self, eval: Evaluation, seq: usize, tx: &mut Tx) -> Option<String> {
        let now = tx.now;
        let index = tx.index;
        let id = eval.entity.clone();
        let fingerprint = eval.fingerprint();
        let candidate_key = eval.candidate.as_ref().map(|c| c.describe());
        // The plan an `Issue` creates, built before anything changes. Every `Outcome::Issue`
        // has a candidate (see evaluate::evaluate) and evaluate found the entity.
        let mut plan = match &eval.outcome {
            Outcome::Issue => Some(self.plan_for(&id, eval.candidate.as_ref()?, seq, tx)?),
            _ => None,
        };
        let history = &mut tx.history;
        self.activity.update(
            id.clone(),
            &mut tx.changed,
            || Activity {
                entity: id.clone(),
                ..Activity::default()
            },
            |activity| {
                let mut touched = false;
                // Track since when this candidate has been blocked (4-hour re-check, created
                // time).
                if eval.is_blocked() {
                    if activity.blocked_candidate != candidate_key
                        || activity.blocked_since_ms.is_none()
                    {
                        activity.blocked_since_ms = Some(now);
                        activity.blocked_candidate = candidate_key.clone();
                        touched = true;
                    } else if let Some(since) = activity.blocked_since_ms {
                        // SPEC P11: blocked for more than 4 hours is a trigger of its own;
                        // note it once per 4-hour period. The period of the newest re-check
                        // since the block began decides (counting re-checks would note a
                        // skipped period twice).
                        let periods = blocked_periods(since, now);
                        let noted = activity
                            .last_recheck_ms
                            .filter(|t| *t >= since)
                            .map_or(0, |t| blocked_periods(since, t));
                        if periods > noted {
                            push_line(
                                activity,
                                now,
                                index,
                                RECHECK,
                                format!(
                                    "re-checked after {}h blocked: {}",
                                    periods * 4,
                                    eval.summary()
                                ),
                                history,
                            );
                            touched = true;
                        }
                    }
                }
                match &eval.outcome {
                    Outcome::Issue => {
                        if let Some(plan) = plan.as_mut() {
                            plan.created_ms =
                                match (&activity.blocked_candidate, activity.blocked_since_ms) {
                                    (Some(c), Some(t)) if Some(c) == candidate_key.as_ref() => t,
                                    _ => now,
                                };
                            let line = format!(
                                "plan {} issued: {}: {}",
                                plan.id,
                                candidate_key.as_deref().unwrap_or_default(),
                                plan.reason
                            );
                            push_line(activity, now, index, "plan", line, history);
                        }
                        activity.blocked_since_ms = None;
                        activity.blocked_candidate = None;
                        activity.last_decision = None;
                        touched = true;
                    }
                    Outcome::PlanActive { .. } => {}
                    Outcome::CanaryTarget { .. } => {
                        activity.blocked_since_ms = None;
                        activity.blocked_candidate = None;
                        activity.last_decision = Some(fingerprint.clone());
                        push_line(activity, now, index, "canary", eval.summary(), history);
                        touched = true;
                    }
                    Outcome::AtTarget { .. }
                    | Outcome::NothingExecutable { .. }
                    | Outcome::Blocked { .. } => {
                        if decision_changed(activity.last_decision.as_deref(), &fingerprint) {
                            push_line(activity, now, index, "decision", eval.summary(), history);
                            activity.last_decision = Some(fingerprint.clone());
                            touched = true;
                        }
                        if !eval.is_blocked() && activity.blocked_since_ms.is_some() {
                            activity.blocked_since_ms = None;
                            activity.blocked_candidate = None;
                            touched = true;
                        }
                    }
                }
                touched
            },
        );
        if let Outcome::CanaryTarget { canary, revision } = &eval.outcome {
            self.set_canary_target(canary, revision.clone(), tx);
        }
        let plan = plan?;
        let plan_id = plan.id.clone();
        self.insert_plan(plan, tx);
        Some(plan_id)
    }

    /// The plan `candidate` becomes for entity `id` (its `created_ms` is the issue time; the
    /// caller sets it from Activity). `None` if the entity does not exist.
    fn plan_for(&self, id: &str, candidate: &Candidate, seq: usize, tx: &Tx) -> Option<Plan> {
        let entity = self.entities.get(id)?;
        let artifacts = candidate
            .to_version
            .as_ref()
            .and_then(|v| self.release(&entity.product_id, v))
            .map(|r| r.artifacts.clone())
            .unwrap_or_default();
        Some(Plan {
            id: format!("p-{}-{seq}", tx.index),
            entity: id.to_string(),
            environment: entity.environment.clone(),
            tasks: Plan::tasks_for(&candidate.kind),
            kind: candidate.kind.clone(),
            from_version: candidate.from_version.clone(),
            to_version: candidate.to_version.clone(),
            from_config_sha256: entity.reported.config_sha256.clone(),
            to_config: candidate.to_config.clone(),
            secrets_revision: candidate.secrets_revision,
            artifacts,
            reason: candidate.reason.clone(),
            output: String::new(),
            failure: None,
            created_ms: tx.now,
            issued_ms: tx.now,
            started_ms: None,
            ended_ms: None,
            status: PlanStatus::Issued,
            cancel_reason: None,
            issued_index: tx.index,
        })
    }

    pub(super) fn insert_plan(&mut self, plan: Plan, tx: &mut Tx) {
        debug_assert!(
            !plan.status.is_active() || !self.plans.index().active.contains_key(&plan.entity),
            "a second active plan for {}",
            plan.entity
        );
        self.plans.put(plan, &mut tx.changed);
    }

    /// Marks a plan finished (succeeded, failed, cancelled): the plan leaves the state for
    /// history, the state keeps its outcome, and the entity's finished plans beyond the
    /// newest [`FINISHED_PLANS_KEPT`] are forgotten, outcome and history together.
    pub(super) fn finish_plan(&mut self, plan_id: &str, status: PlanStatus, tx: &mut Tx) {
        assert!(!status.is_active(), "a plan cannot finish as {status}");
        let Some(mut plan) = self.plans.remove(plan_id, &mut tx.changed) else {
            return;
        };
        assert!(plan.status.is_active(), "plan {plan_id} finished twice");
        plan.status = status;
        plan.ended_ms = Some(tx.now);
        let entity = plan.entity.clone();
        self.plan_outcomes
            .put(PlanOutcome::of(&plan), &mut tx.changed);
        tx.history
            .push(HistoryWrite::Put(Box::new(Record::FinishedPlan(plan))));
        let kept = self
            .plan_outcomes
            .index()
            .by_entity
            .get(&entity)
            .map_or(0, |s| s.len());
        let forgotten: Vec<String> = self
            .plan_outcomes
            .index()
            .by_entity
            .get(&entity)
            .into_iter()
            .flatten()
            .take(kept.saturating_sub(FINISHED_PLANS_KEPT))
            .map(|(_, id)| id.clone())
            .collect();
        for id in forgotten {
            self.plan_outcomes.remove(&id, &mut tx.changed);
            tx.history
                .push(HistoryWrite::Delete(RecordKey::FinishedPlan(id)));
        }
    }

    pub(super) fn cancel_plan(&mut self, plan_id: &str, reason: &str, tx: &mut Tx) {
        let Some(mut plan) = self.plans.get_mut(plan_id, &mut tx.changed) else {
            return;
        };
        plan.cancel_reason = Some(reason.to_string());
        let entity = plan.entity.clone();
        drop(plan);
        self.finish_plan(plan_id, PlanStatus::Cancelled, tx);
        self.note(
            &entity,
            "plan",
            format!("plan {plan_id} cancelled: {reason}"),
            tx,
        );
        tx.triggers.push(Trigger::EntityOnly(entity));
    }

    pub(super) fn active_plans_in_scope(&self, scope: &Scope) -> Vec<String> {
        match scope {
            Scope::Environment(env) => self.active_plans_in(env).map(|p| p.id.clone()).collect(),
            Scope::Entity(id) => self
                .active_plan_of(id)
                .map(|p| p.id.clone())
                .into_iter()
                .collect(),
        }
    }

    pub(super) fn note(&mut self, entity: &str, kind: &str, message: String, tx: &mut Tx) {
        let now = tx.now;
        let index = tx.index;
        let activity =
            self.activity
                .get_or_insert_with(entity.to_string(), &mut tx.changed, || Activity {
                    entity: entity.to_string(),
                    ..Activity::default()
                });
        push_line(activity, now, index, kind, message, &mut tx.history);
        // A note breaks the "same decision" run, so the next decision is recorded again.
        activity.last_decision = None;
    }

    pub(super) fn note_scope(&mut self, scope: &Scope, message: String, tx: &mut Tx) {
        match scope {
            Scope::Entity(id) => self.note(id, "suppression", message, tx),
            Scope::Environment(env) => {
                tx.triggers.push(Trigger::Environment(env.clone()));
            }
        }
    }
}

/// Appends a line to an entity's Activity: the line, and the deletion of the one that falls
/// out of the kept, go to `history` ([`crate::Residence::History`]).
fn push_line(
    activity: &mut Activity,
    now: TimestampMs,
    index: u64,
    kind: &str,
    message: String,
    history: &mut Vec<HistoryWrite>,
) {
    let (line, dropped) = activity.push(now, index, kind, message);
    history.push(HistoryWrite::Put(Box::new(Record::ActivityLine(line))));
    if let Some(name) = dropped {
        history.push(HistoryWrite::Delete(RecordKey::ActivityLine(name)));
    }
}

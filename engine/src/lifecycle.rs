//! Command handlers for the plan lifecycle (SPEC P2, P6–P12, C2, C8): evaluation and
//! issuance, agent reports, failure suppression and thresholds, cancels and break-glass
//! commands. Each validates everything before it changes anything.

use std::collections::BTreeMap;

use crate::artifact::{ArtifactLocation, Availability};
use crate::command::{CancelTarget, Command, CommandOutput, EntityReport};
use crate::entity::{config_sha256, Health};
use crate::error::CommandError;
use crate::evaluate::{evaluate, format_time, Evaluation, Outcome, BLOCKED_RECHECK_MS};
use crate::handlers::check_text;
use crate::plan::{
    EmergencyCommand, Plan, PlanKind, PlanStatus, TaskReport, TaskState, FINISHED_PLANS_KEPT,
};
use crate::record::RecordKey;
use crate::state::{Effects, State, Trigger};
use crate::suppression::{Scope, Suppression, SuppressionSource};
use crate::TimestampMs;

/// Most entities one `Evaluate` command may name.
pub const MAX_EVALUATE_BATCH: usize = 2_000;

/// Most task reports in one `ReportTasks` command.
pub const MAX_BATCHED_REPORTS: usize = 1_000;

/// Most entity reports in one command.
pub const MAX_REPORTS: usize = 5_000;

fn not_found(kind: &str, name: &str) -> CommandError {
    CommandError::NotFound {
        kind: kind.into(),
        name: name.into(),
    }
}

impl State {
    pub(crate) fn execute_lifecycle(
        &mut self,
        command: &Command,
        now: TimestampMs,
        index: u64,
        fx: &mut Effects,
    ) -> Result<CommandOutput, CommandError> {
        match command {
            Command::Evaluate {
                entities,
                artifacts,
            } => {
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
                    if let Some(plan_id) = self.record_decision(eval, now, index, issued.len(), fx)
                    {
                        issued.push(plan_id);
                    }
                }
                Ok(CommandOutput::Evaluated { issued })
            }
            Command::ExpireSuppressions => {
                let expired: Vec<String> = self
                    .suppressions
                    .values()
                    .filter(|s| s.expired_at(now))
                    .map(|s| s.id.clone())
                    .collect();
                let mut envs = Vec::new();
                for id in &expired {
                    if let Some(s) = self.remove_suppression(id, fx) {
                        envs.push(s.scope.environment().to_string());
                    }
                }
                envs.sort();
                envs.dedup();
                for env in envs {
                    self.reconcile_threshold(&env, now, index, fx);
                }
                Ok(CommandOutput::Changed {
                    id: String::new(),
                    summary: format!("{} suppressions expired", expired.len()),
                })
            }
            Command::ReportEntityStates {
                environment,
                states,
            } => self.report_entity_states(environment, states, now, index, fx),
            Command::ReportTask {
                environment,
                report,
            } => self.report_task(environment, report, now, index, fx),
            Command::ReportTasks {
                environment,
                reports,
            } => {
                if !self.environments.contains_key(environment) {
                    return Err(not_found("environment", environment));
                }
                if reports.len() > MAX_BATCHED_REPORTS {
                    return Err(CommandError::invalid(
                        "reports",
                        format!("{} reports, at most {MAX_BATCHED_REPORTS}", reports.len()),
                    ));
                }
                let mut applied = 0;
                let mut refused = Vec::new();
                // Each report validates before it changes anything, so skipping a refused
                // one leaves no partial change behind.
                for r in reports {
                    match self.report_task(environment, r, now, index, fx) {
                        Ok(_) => applied += 1,
                        Err(e) => refused.push(format!("{} {}: {e}", r.plan_id, r.task)),
                    }
                }
                let mut summary = format!("{applied} reports applied");
                if !refused.is_empty() {
                    summary.push_str(&format!(
                        "; {} refused: {}",
                        refused.len(),
                        refused.join("; ")
                    ));
                }
                Ok(CommandOutput::Changed {
                    id: environment.clone(),
                    summary,
                })
            }
            Command::CreateSuppression {
                scope,
                start_ms,
                end_ms,
                reason,
                cancel_active_plans,
                actor,
            } => {
                check_text("reason", reason, true)?;
                let start = start_ms.unwrap_or(now);
                if *end_ms <= start {
                    return Err(CommandError::invalid("end", "must be after start"));
                }
                if *end_ms <= now {
                    return Err(CommandError::invalid("end", "is in the past"));
                }
                self.require_scope(scope)?;
                let id = format!("s-{index}");
                self.add_suppression(
                    Suppression {
                        id: id.clone(),
                        scope: scope.clone(),
                        source: SuppressionSource::Manual,
                        start_ms: start,
                        end_ms: Some(*end_ms),
                        reason: reason.clone(),
                        created_at_ms: now,
                    },
                    fx,
                );
                let mut cancelled = 0;
                if *cancel_active_plans {
                    let plans = self.active_plans_in_scope(scope);
                    cancelled = plans.len();
                    for p in plans {
                        self.cancel_plan(
                            &p,
                            &format!("suppression {id}: {reason}"),
                            now,
                            index,
                            fx,
                        );
                    }
                }
                self.audit_entry(
                    index,
                    now,
                    actor,
                    "suppression",
                    scope.to_string(),
                    reason,
                    fx,
                );
                self.note_scope(
                    scope,
                    now,
                    index,
                    format!(
                        "manual suppression {id} until {}: {reason}",
                        format_time(*end_ms)
                    ),
                    fx,
                );
                Ok(CommandOutput::Changed {
                    id: id.clone(),
                    summary: format!("suppression {id} on {scope}; {cancelled} plans cancelled"),
                })
            }
            Command::DeleteSuppression { id, actor } => {
                let s = self
                    .suppressions
                    .get(id)
                    .cloned()
                    .ok_or_else(|| not_found("suppression", id))?;
                self.remove_suppression(id, fx);
                if matches!(s.source, SuppressionSource::FailedPlan { .. }) {
                    self.reconcile_threshold(s.scope.environment(), now, index, fx);
                }
                self.audit_entry(
                    index,
                    now,
                    actor,
                    "suppression-delete",
                    s.scope.to_string(),
                    id,
                    fx,
                );
                Ok(CommandOutput::Changed {
                    id: id.clone(),
                    summary: format!("suppression {id} deleted"),
                })
            }
            Command::CancelPlans {
                target,
                reason,
                suppress_for_ms,
                actor,
            } => {
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
                        let p = self.plans.get(pid).ok_or_else(|| not_found("plan", pid))?;
                        if !p.status.is_active() {
                            return Err(CommandError::FailedPrecondition(format!(
                                "plan {pid} is {} and cannot be cancelled",
                                p.status
                            )));
                        }
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
                    self.cancel_plan(p, reason, now, index, fx);
                }
                let mut suppression = None;
                if let Some(ms) = suppress_for_ms {
                    let id = format!("s-{index}");
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
                        fx,
                    );
                }
                self.audit_entry(index, now, actor, "cancel", scope.to_string(), reason, fx);
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
            Command::IssueCommand {
                entity,
                command,
                reason,
                actor,
            } => self.issue_command(entity, command, reason, actor, now, index, fx),
            Command::ApplyCanary { environment, yaml } => {
                self.apply_canary(environment.as_deref(), yaml, now, index, fx)
            }
            Command::DeleteCanary { id } => self.delete_canary(id, now, index, fx),
            Command::ReportCanaries {
                environment,
                observations,
            } => {
                let stored = self.observe_canaries(environment, observations, now, fx)?;
                Ok(CommandOutput::Changed {
                    id: environment.clone(),
                    summary: format!("{stored} canary observations stored"),
                })
            }
            Command::CanaryTick { id, step, input } => {
                self.canary_tick(id, *step, input, now, index, fx)
            }
            Command::CanaryManual { id, action, actor } => {
                if actor.trim().is_empty() {
                    return Err(CommandError::invalid("actor", "required"));
                }
                let out = self.canary_manual(id, *action, now, index, fx)?;
                self.audit_entry(
                    index,
                    now,
                    actor,
                    &format!("canary-{}", action.as_str()),
                    id.clone(),
                    "",
                    fx,
                );
                Ok(out)
            }
            Command::PublishModule { .. }
            | Command::DeleteModule { .. }
            | Command::InstallModule { .. }
            | Command::SetModuleVariables { .. }
            | Command::SetModuleUpdatesPaused { .. }
            | Command::UnlinkModule { .. }
            | Command::ApproveChangeRequest { .. }
            | Command::RejectChangeRequest { .. } => self.execute_module(command, now, index, fx),
            Command::SetClusterKey { name, key } => self.set_cluster_key(name, key, now, fx),
            other => Err(CommandError::FailedPrecondition(format!(
                "command {} is not handled",
                other.kind()
            ))),
        }
    }

    /// Records an evaluation: issues its plan, or notes a changed decision in Activity.
    /// Returns the id of an issued plan.
    fn record_decision(
        &mut self,
        eval: Evaluation,
        now: TimestampMs,
        index: u64,
        seq: usize,
        fx: &mut Effects,
    ) -> Option<String> {
        let id = eval.entity.clone();
        let fingerprint = eval.fingerprint();
        let activity = self.activity.entry(id.clone()).or_default();
        activity.entity = id.clone();
        let candidate_key = eval.candidate.as_ref().map(|c| c.describe());
        let mut touched = false;
        // Track since when this candidate has been blocked (4-hour re-check, created time).
        if eval.is_blocked() {
            if activity.blocked_candidate != candidate_key || activity.blocked_since_ms.is_none() {
                activity.blocked_since_ms = Some(now);
                activity.blocked_candidate = candidate_key.clone();
                touched = true;
            } else if let Some(since) = activity.blocked_since_ms {
                // SPEC P11: blocked for more than 4 hours is a trigger of its own; note it once
                // per 4-hour period. The period of the newest re-check entry decides (counting
                // entries would note a skipped period twice, and once per evaluation after the
                // bounded Activity dropped old re-checks).
                let periods = (now - since) / BLOCKED_RECHECK_MS;
                let noted = activity
                    .entries
                    .iter()
                    .rev()
                    .take_while(|e| e.time_ms >= since)
                    .find(|e| e.kind == "recheck")
                    .map_or(0, |e| (e.time_ms - since) / BLOCKED_RECHECK_MS);
                if periods > noted {
                    activity.push(
                        now,
                        index,
                        "recheck",
                        format!(
                            "re-checked after {}h blocked: {}",
                            periods * 4,
                            eval.summary()
                        ),
                    );
                    touched = true;
                }
            }
        }
        let mut issued = None;
        match &eval.outcome {
            Outcome::Issue => {
                let created = match (&activity.blocked_candidate, activity.blocked_since_ms) {
                    (Some(c), Some(t)) if Some(c) == candidate_key.as_ref() => t,
                    _ => now,
                };
                activity.blocked_since_ms = None;
                activity.blocked_candidate = None;
                activity.last_decision = None;
                // Every Outcome::Issue has a candidate (see evaluate::evaluate).
                let candidate = eval.candidate.clone()?;
                let plan_id = format!("p-{index}-{seq}");
                let entity = self.entities.get(&id)?;
                let artifacts = candidate
                    .to_version
                    .as_ref()
                    .and_then(|v| self.release(&entity.product_id, v))
                    .map(|r| r.artifacts.clone())
                    .unwrap_or_default();
                let plan = Plan {
                    id: plan_id.clone(),
                    entity: id.clone(),
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
                    created_ms: created,
                    issued_ms: now,
                    started_ms: None,
                    ended_ms: None,
                    status: PlanStatus::Issued,
                    cancel_reason: None,
                    issued_index: index,
                };
                let line = format!(
                    "plan {plan_id} issued: {}: {}",
                    candidate.describe(),
                    candidate.reason
                );
                self.insert_plan(plan, fx);
                let activity = self.activity.entry(id.clone()).or_default();
                activity.push(now, index, "plan", line);
                touched = true;
                issued = Some(plan_id);
            }
            Outcome::PlanActive { .. } => {}
            Outcome::CanaryTarget { canary, revision } => {
                activity.blocked_since_ms = None;
                activity.blocked_candidate = None;
                activity.last_decision = Some(fingerprint);
                activity.push(now, index, "canary", eval.summary());
                touched = true;
                let (canary, revision) = (canary.clone(), revision.clone());
                self.set_canary_target(&canary, revision, fx);
            }
            _ => {
                if activity.last_decision.as_deref() != Some(fingerprint.as_str()) {
                    activity.push(now, index, "decision", eval.summary());
                    activity.last_decision = Some(fingerprint);
                    touched = true;
                }
                if !eval.is_blocked() && activity.blocked_since_ms.is_some() {
                    activity.blocked_since_ms = None;
                    activity.blocked_candidate = None;
                    touched = true;
                }
            }
        }
        if touched {
            fx.changed.push(RecordKey::Activity(id));
        }
        issued
    }

    pub(crate) fn insert_plan(&mut self, plan: Plan, fx: &mut Effects) {
        debug_assert!(
            !plan.status.is_active() || !self.idx.active_plan.contains_key(&plan.entity),
            "a second active plan for {}",
            plan.entity
        );
        self.idx
            .plans_by_entity
            .entry(plan.entity.clone())
            .or_default()
            .insert((plan.issued_index, plan.id.clone()));
        if plan.status.is_active() {
            self.idx
                .active_plan
                .insert(plan.entity.clone(), plan.id.clone());
        }
        fx.changed.push(RecordKey::Plan(plan.id.clone()));
        self.plans.insert(plan.id.clone(), plan);
    }

    /// Marks a plan finished (succeeded, failed, cancelled) and forgets old finished plans.
    fn finish_plan(
        &mut self,
        plan_id: &str,
        status: PlanStatus,
        now: TimestampMs,
        fx: &mut Effects,
    ) {
        let Some(plan) = self.plans.get_mut(plan_id) else {
            return;
        };
        debug_assert!(plan.status.is_active());
        plan.status = status;
        plan.ended_ms = Some(now);
        let entity = plan.entity.clone();
        if self.idx.active_plan.get(&entity).map(String::as_str) == Some(plan_id) {
            self.idx.active_plan.remove(&entity);
        }
        fx.changed.push(RecordKey::Plan(plan_id.to_string()));
        // Keep the newest FINISHED_PLANS_KEPT finished plans of the entity.
        let finished: Vec<(u64, String)> = self
            .idx
            .plans_by_entity
            .get(&entity)
            .into_iter()
            .flatten()
            .filter(|(_, id)| self.plans.get(id).is_some_and(|p| !p.status.is_active()))
            .cloned()
            .collect();
        if finished.len() > FINISHED_PLANS_KEPT {
            for (i, id) in &finished[..finished.len() - FINISHED_PLANS_KEPT] {
                self.plans.remove(id);
                if let Some(set) = self.idx.plans_by_entity.get_mut(&entity) {
                    set.remove(&(*i, id.clone()));
                }
                fx.changed.push(RecordKey::Plan(id.clone()));
            }
        }
    }

    pub(crate) fn cancel_plan(
        &mut self,
        plan_id: &str,
        reason: &str,
        now: TimestampMs,
        index: u64,
        fx: &mut Effects,
    ) {
        let Some(plan) = self.plans.get_mut(plan_id) else {
            return;
        };
        if !plan.status.is_active() {
            return;
        }
        plan.cancel_reason = Some(reason.to_string());
        let entity = plan.entity.clone();
        self.finish_plan(plan_id, PlanStatus::Cancelled, now, fx);
        self.note(
            &entity,
            now,
            index,
            "plan",
            format!("plan {plan_id} cancelled: {reason}"),
            fx,
        );
        fx.triggers.push(Trigger::EntityOnly(entity));
    }

    fn active_plans_in_scope(&self, scope: &Scope) -> Vec<String> {
        match scope {
            Scope::Environment(env) => self.active_plans_in(env).map(|p| p.id.clone()).collect(),
            Scope::Entity(id) => self
                .active_plan_of(id)
                .map(|p| p.id.clone())
                .into_iter()
                .collect(),
        }
    }

    pub(crate) fn note(
        &mut self,
        entity: &str,
        now: TimestampMs,
        index: u64,
        kind: &str,
        message: String,
        fx: &mut Effects,
    ) {
        let activity = self.activity.entry(entity.to_string()).or_default();
        activity.entity = entity.to_string();
        activity.push(now, index, kind, message);
        // A note breaks the "same decision" run, so the next decision is recorded again.
        activity.last_decision = None;
        fx.changed.push(RecordKey::Activity(entity.to_string()));
    }

    fn note_scope(
        &mut self,
        scope: &Scope,
        now: TimestampMs,
        index: u64,
        message: String,
        fx: &mut Effects,
    ) {
        match scope {
            Scope::Entity(id) => self.note(id, now, index, "suppression", message, fx),
            Scope::Environment(env) => {
                fx.triggers.push(Trigger::Environment(env.clone()));
            }
        }
    }

    fn add_suppression(&mut self, s: Suppression, fx: &mut Effects) {
        self.idx
            .suppressions_by_scope
            .entry(s.scope.clone())
            .or_default()
            .insert(s.id.clone());
        fx.changed.push(RecordKey::Suppression(s.id.clone()));
        fx.triggers.push(match &s.scope {
            Scope::Environment(env) => Trigger::Environment(env.clone()),
            Scope::Entity(id) => Trigger::EntityOnly(id.clone()),
        });
        self.suppressions.insert(s.id.clone(), s);
    }

    fn remove_suppression(&mut self, id: &str, fx: &mut Effects) -> Option<Suppression> {
        let s = self.suppressions.remove(id)?;
        if let Some(set) = self.idx.suppressions_by_scope.get_mut(&s.scope) {
            set.remove(id);
            if set.is_empty() {
                self.idx.suppressions_by_scope.remove(&s.scope);
            }
        }
        fx.changed.push(RecordKey::Suppression(id.to_string()));
        fx.triggers.push(match &s.scope {
            Scope::Environment(env) => Trigger::Environment(env.clone()),
            Scope::Entity(e) => Trigger::EntityOnly(e.clone()),
        });
        Some(s)
    }

    /// Entities of `env` with a failed-plan suppression in force at `now`.
    pub fn autosuppressed_count(&self, env: &str, now: TimestampMs) -> usize {
        self.entities_of(env)
            .filter(|e| {
                self.suppressions_in(&Scope::Entity(e.id.0.clone()))
                    .any(|s| {
                        matches!(s.source, SuppressionSource::FailedPlan { .. }) && s.active_at(now)
                    })
            })
            .count()
    }

    /// SPEC P9: more auto-suppressed entities than the threshold suppress the environment;
    /// the suppression goes when the count no longer exceeds it.
    pub(crate) fn reconcile_threshold(
        &mut self,
        env: &str,
        now: TimestampMs,
        index: u64,
        fx: &mut Effects,
    ) {
        let Some(settings) = self.environments.get(env).map(|e| e.settings.clone()) else {
            return;
        };
        let count = self.autosuppressed_count(env, now);
        let scope = Scope::Environment(env.to_string());
        let existing: Vec<String> = self
            .suppressions_in(&scope)
            .filter(|s| s.source == SuppressionSource::EnvironmentThreshold)
            .map(|s| s.id.clone())
            .collect();
        let exceeds = count > settings.autosuppression_threshold as usize;
        if exceeds && existing.is_empty() {
            self.add_suppression(
                Suppression {
                    id: format!("s-{index}-env"),
                    scope,
                    source: SuppressionSource::EnvironmentThreshold,
                    start_ms: now,
                    end_ms: None,
                    reason: format!(
                        "{count} entities auto-suppressed, more than the threshold {}",
                        settings.autosuppression_threshold
                    ),
                    created_at_ms: now,
                },
                fx,
            );
        } else if !exceeds {
            for id in existing {
                self.remove_suppression(&id, fx);
            }
        }
    }

    /// Checks a state report against the state: the environment exists, every report names
    /// one of its entities, and messages are within bounds.
    fn check_entity_reports(
        &self,
        environment: &str,
        states: &[EntityReport],
    ) -> Result<(), CommandError> {
        if !self.environments.contains_key(environment) {
            return Err(not_found("environment", environment));
        }
        if states.len() > MAX_REPORTS {
            return Err(CommandError::invalid(
                "states",
                format!("at most {MAX_REPORTS} reports"),
            ));
        }
        for (i, r) in states.iter().enumerate() {
            match self.entities.get(&r.entity) {
                Some(e) if e.environment == environment => {}
                _ => {
                    return Err(CommandError::invalid(
                        &format!("states[{i}].entity"),
                        format!(
                            "{:?} is not an entity of environment {environment}",
                            r.entity
                        ),
                    ))
                }
            }
            if r.message.len() > 4096 {
                return Err(CommandError::invalid(
                    &format!("states[{i}].message"),
                    "longer than 4096 bytes",
                ));
            }
        }
        Ok(())
    }

    /// Whether `ReportEntityStates { environment, states }` would be accepted and change
    /// nothing: a node that sees this on a linearizable read may answer the agent without a
    /// Raft write (a no-op is ordered at the read).
    pub fn entity_reports_change_nothing(
        &self,
        environment: &str,
        states: &[EntityReport],
    ) -> bool {
        self.check_entity_reports(environment, states).is_ok()
            && states.iter().all(|r| {
                self.entities
                    .get(&r.entity)
                    .is_some_and(|e| !r.changes(&e.reported))
            })
    }

    fn report_entity_states(
        &mut self,
        environment: &str,
        states: &[EntityReport],
        now: TimestampMs,
        index: u64,
        fx: &mut Effects,
    ) -> Result<CommandOutput, CommandError> {
        self.check_entity_reports(environment, states)?;
        let mut changed_count = 0;
        for r in states {
            let Some(e) = self.entities.get_mut(&r.entity) else {
                continue;
            };
            if !r.changes(&e.reported) {
                // An unchanged report changes no record (no write, no trigger).
                continue;
            }
            let before = e.reported.clone();
            e.reported.version = r.version.clone();
            e.reported.health = r.health;
            if let Some(sha) = &r.config_sha256 {
                e.reported.config_sha256 = Some(sha.clone());
            }
            if let Some(rev) = r.secrets_revision {
                e.reported.secrets_revision = rev;
            }
            e.reported.message = r.message.clone();
            e.reported.reported_at_ms = Some(now);
            let version_changed = before.version != e.reported.version;
            let line = format!(
                "reported {} {}{}",
                e.reported
                    .version
                    .as_ref()
                    .map_or("not installed".to_string(), |v| v.to_string()),
                e.reported.health.as_str(),
                if e.reported.message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", e.reported.message)
                }
            );
            changed_count += 1;
            fx.changed.push(RecordKey::Entity(r.entity.clone()));
            if version_changed {
                self.reindex_dependencies(&r.entity);
            }
            fx.triggers.push(Trigger::Entity(r.entity.clone()));
            if before.version != r.version || before.health != r.health {
                self.note(&r.entity, now, index, "report", line, fx);
            }
        }
        Ok(CommandOutput::Changed {
            id: environment.to_string(),
            summary: format!("{changed_count} entity states changed"),
        })
    }

    fn report_task(
        &mut self,
        environment: &str,
        report: &TaskReport,
        now: TimestampMs,
        index: u64,
        fx: &mut Effects,
    ) -> Result<CommandOutput, CommandError> {
        let plan = self
            .plans
            .get(&report.plan_id)
            .filter(|p| p.environment == environment)
            .ok_or_else(|| {
                not_found(
                    "plan",
                    &format!("{} in environment {environment}", report.plan_id),
                )
            })?;
        let Some(task_index) = plan.tasks.iter().position(|t| t.name == report.task) else {
            return Err(CommandError::invalid(
                "task",
                format!("plan {} has no task {:?}", report.plan_id, report.task),
            ));
        };
        if report.attempt == 0 {
            return Err(CommandError::invalid("attempt", "starts at 1"));
        }
        if report.state == TaskState::Pending {
            return Err(CommandError::invalid(
                "state",
                "a report is running, succeeded or failed",
            ));
        }
        if report.output.len() > 1024 * 1024 {
            return Err(CommandError::invalid("output", "longer than 1 MiB"));
        }
        let ignored = |why: &str| {
            Ok(CommandOutput::Changed {
                id: report.plan_id.clone(),
                summary: format!("report ignored: {why}"),
            })
        };
        if !plan.status.is_active() {
            return ignored(&format!("plan is {}", plan.status));
        }
        let task = &plan.tasks[task_index];
        let newer = report.attempt > task.attempt
            || (report.attempt == task.attempt
                && report.state > task.state
                && task.state < TaskState::Succeeded);
        if !newer {
            return ignored("already recorded");
        }
        // Every check passed: change the plan.
        let plan_id = report.plan_id.clone();
        let Some(plan) = self.plans.get_mut(&plan_id) else {
            return ignored("plan vanished");
        };
        let task = &mut plan.tasks[task_index];
        task.attempt = report.attempt;
        task.state = report.state;
        if task.started_ms.is_none() || report.state == TaskState::Running {
            task.started_ms.get_or_insert(now);
        }
        if report.state >= TaskState::Succeeded {
            task.ended_ms = Some(now);
        }
        if report.state == TaskState::Failed {
            task.error = Some(
                report
                    .failure
                    .as_ref()
                    .map(|f| f.message.clone())
                    .unwrap_or_else(|| "failed".to_string()),
            );
        }
        if !report.output.is_empty() {
            plan.append_output(&report.output);
        }
        if plan.started_ms.is_none() {
            plan.started_ms = Some(now);
        }
        if plan.status == PlanStatus::Issued {
            plan.status = PlanStatus::Running;
        }
        fx.changed.push(RecordKey::Plan(plan_id.clone()));
        let entity_id = plan.entity.clone();
        if report.state == TaskState::Failed {
            let mut failure = report.failure.clone().unwrap_or_default();
            if failure.stage.is_empty() {
                failure.stage = report.task.clone();
            }
            let line = format!(
                "plan {plan_id} failed at {}: {}",
                failure.stage, failure.message
            );
            // A plan that failed before touching the workload (fetching or verifying the
            // artifact) left it as it was.
            // A canary step's workloads are the canary's: its analysis reads their readiness.
            let canary_step = plan.kind.is_canary_step();
            let changes_workload = !matches!(plan.kind, PlanKind::Uninstall)
                && !canary_step
                && failure.touched_workload();
            let health_message = format!(
                "plan {plan_id} failed at {}: {}",
                failure.stage, failure.message
            );
            plan.failure = Some(failure);
            self.finish_plan(&plan_id, PlanStatus::Failed, now, fx);
            // The failure is evidence the workload is not healthy, whatever version it runs
            // now; the agent's next report corrects the details. This is what lets the
            // rollback (SPEC P10) see that the entity is not back where it was.
            if changes_workload {
                if let Some(e) = self.entities.get_mut(&entity_id) {
                    e.reported.health = Health::Error;
                    e.reported.message = health_message;
                    e.reported.reported_at_ms = Some(now);
                    fx.changed.push(RecordKey::Entity(entity_id.clone()));
                }
            }
            self.note(&entity_id, now, index, "plan", line, fx);
            if canary_step {
                self.release_queued_canary_step(&entity_id, now, fx);
            } else {
                self.suppress_after_failure(&entity_id, &plan_id, now, index, fx);
            }
            fx.triggers.push(Trigger::Entity(entity_id));
            return Ok(CommandOutput::Changed {
                id: plan_id,
                summary: "plan failed".into(),
            });
        }
        if plan.tasks.iter().all(|t| t.state == TaskState::Succeeded) {
            let (to_version, to_config, secrets_revision, kind) = (
                plan.to_version.clone(),
                plan.to_config.clone(),
                plan.secrets_revision,
                plan.kind.clone(),
            );
            self.finish_plan(&plan_id, PlanStatus::Succeeded, now, fx);
            // A canary step changes the canary's workloads; the entity's reported state
            // follows the primary through the agent's reports.
            let canary_step = kind.is_canary_step();
            self.release_queued_canary_step(&entity_id, now, fx);
            if let Some(e) = self.entities.get_mut(&entity_id).filter(|_| !canary_step) {
                let uninstall = matches!(kind, PlanKind::Uninstall)
                    || matches!(
                        kind,
                        PlanKind::Command {
                            command: EmergencyCommand::Uninstall,
                            ..
                        }
                    );
                let version_before = e.reported.version.clone();
                if uninstall {
                    e.reported.version = None;
                    e.reported.config_sha256 = None;
                } else {
                    if to_version.is_some() {
                        e.reported.version = to_version;
                    }
                    if let Some(c) = &to_config {
                        e.reported.config_sha256 = Some(config_sha256(c));
                    }
                    e.reported.secrets_revision = e.reported.secrets_revision.max(secrets_revision);
                    e.reported.health = Health::Healthy;
                }
                e.reported.reported_at_ms = Some(now);
                let moved = version_before != e.reported.version;
                fx.changed.push(RecordKey::Entity(entity_id.clone()));
                if moved {
                    self.reindex_dependencies(&entity_id);
                }
            }
            self.note(
                &entity_id,
                now,
                index,
                "plan",
                format!("plan {plan_id} succeeded"),
                fx,
            );
            fx.triggers.push(Trigger::Entity(entity_id));
            return Ok(CommandOutput::Changed {
                id: plan_id,
                summary: "plan succeeded".into(),
            });
        }
        Ok(CommandOutput::Changed {
            id: plan_id,
            summary: format!("task {} {}", report.task, report.state.as_str()),
        })
    }

    /// SPEC P8: every failed plan (commands and rollbacks included) suppresses its entity for
    /// the environment's duration; SPEC P9: then the environment threshold is reconciled.
    fn suppress_after_failure(
        &mut self,
        entity: &str,
        plan_id: &str,
        now: TimestampMs,
        index: u64,
        fx: &mut Effects,
    ) {
        let Some(env) = self.entities.get(entity).map(|e| e.environment.clone()) else {
            return;
        };
        let Some(duration) = self
            .environments
            .get(&env)
            .map(|e| e.settings.auto_suppression_ms)
        else {
            return;
        };
        let id = format!("s-{index}");
        self.add_suppression(
            Suppression {
                id: id.clone(),
                scope: Scope::Entity(entity.to_string()),
                source: SuppressionSource::FailedPlan {
                    plan_id: plan_id.to_string(),
                },
                start_ms: now,
                end_ms: Some(now + duration),
                reason: format!("plan {plan_id} failed"),
                created_at_ms: now,
            },
            fx,
        );
        self.note(
            entity,
            now,
            index,
            "suppression",
            format!(
                "automatic suppression {id} until {}",
                format_time(now + duration)
            ),
            fx,
        );
        self.reconcile_threshold(&env, now, index, fx);
    }

    #[allow(clippy::too_many_arguments)]
    fn issue_command(
        &mut self,
        entity: &str,
        command: &EmergencyCommand,
        reason: &str,
        actor: &str,
        now: TimestampMs,
        index: u64,
        fx: &mut Effects,
    ) -> Result<CommandOutput, CommandError> {
        check_text("reason", reason, true)?;
        check_text("actor", actor, true)?;
        let e = self.require_entity(entity)?;
        if let Some(active) = self.active_plan_of(entity) {
            if active.kind.is_command() {
                return Err(CommandError::FailedPrecondition(format!(
                    "command plan {} is still {} on {entity}: one command per entity at a time",
                    active.id, active.status
                )));
            }
        }
        let current = e.reported.version.clone();
        let (to_version, to_config) = match command {
            EmergencyCommand::Install { version }
            | EmergencyCommand::EnforceConfigAndVersion { version } => {
                if self.release(&e.product_id, version).is_none() {
                    return Err(not_found("release", &format!("{}@{version}", e.product_id)));
                }
                (
                    Some(version.clone()),
                    Some(e.config_for(version).to_string()),
                )
            }
            EmergencyCommand::EnforceConfig | EmergencyCommand::Restart => {
                let Some(v) = &current else {
                    return Err(CommandError::FailedPrecondition(format!(
                        "{entity} is not installed; use the install command"
                    )));
                };
                (Some(v.clone()), Some(e.config_for(v).to_string()))
            }
            EmergencyCommand::Uninstall => (None, None),
        };
        let artifacts = to_version
            .as_ref()
            .filter(|_| {
                matches!(
                    command,
                    EmergencyCommand::Install { .. }
                        | EmergencyCommand::EnforceConfigAndVersion { .. }
                )
            })
            .and_then(|v| self.release(&e.product_id, v))
            .map(|r| r.artifacts.clone())
            .unwrap_or_default();
        let kind = PlanKind::Command {
            command: command.clone(),
            actor: actor.to_string(),
        };
        let plan = Plan {
            id: format!("p-{index}-0"),
            entity: entity.to_string(),
            environment: e.environment.clone(),
            tasks: Plan::tasks_for(&kind),
            kind,
            from_version: current,
            to_version,
            from_config_sha256: e.reported.config_sha256.clone(),
            to_config,
            secrets_revision: e.secrets_revision,
            artifacts,
            reason: reason.to_string(),
            output: String::new(),
            failure: None,
            created_ms: now,
            issued_ms: now,
            started_ms: None,
            ended_ms: None,
            status: PlanStatus::Issued,
            cancel_reason: None,
            issued_index: index,
        };
        // SPEC P4: a command beats plans.
        if let Some(active) = self.active_plan_of(entity).map(|p| p.id.clone()) {
            self.cancel_plan(
                &active,
                &format!("superseded by command {}", plan.id),
                now,
                index,
                fx,
            );
        }
        let id = plan.id.clone();
        let label = command.label();
        self.insert_plan(plan, fx);
        self.audit_entry(
            index,
            now,
            actor,
            &format!("command {label}"),
            entity.to_string(),
            reason,
            fx,
        );
        self.note(
            entity,
            now,
            index,
            "command",
            format!("command {label} by {actor} ({id}): {reason}"),
            fx,
        );
        Ok(CommandOutput::Changed {
            id: id.clone(),
            summary: format!("command plan {id} issued"),
        })
    }
}

//! Agent reports: entity states and task progress.

use crate::command::{CommandOutput, EntityReport, RefusedTaskReport, SampledEntityReport};
use crate::entity::{config_sha256, Health};
use crate::error::CommandError;
use crate::plan::{EmergencyCommand, PlanKind, PlanStatus, TaskReport, TaskState};
use crate::state::{State, Trigger};

use super::health::failed_attempt;
use super::{not_found, Tx};

/// Most task reports in one `ReportTasks` command.
pub const MAX_BATCHED_REPORTS: usize = 1_000;
/// Most entity reports in one command.
pub const MAX_REPORTS: usize = 5_000;

impl State {
    /// `ReportTasks`: applies each report on its own; refused ones are listed, the rest applied.
    pub(super) fn report_tasks(
        &mut self,
        environment: &str,
        reports: &[TaskReport],
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
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
        for (position, r) in reports.iter().enumerate() {
            match self.report_task(environment, r, tx) {
                Ok(_) => applied += 1,
                Err(error) => refused.push(RefusedTaskReport {
                    // At most MAX_BATCHED_REPORTS, checked above.
                    position: position as u32,
                    plan_id: r.plan_id.clone(),
                    task: r.task.clone(),
                    error,
                }),
            }
        }
        Ok(CommandOutput::TasksReported {
            environment: environment.to_string(),
            applied,
            refused,
        })
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

    /// `ReportSampledEntityStates`: checked whole as `ReportEntityStates` is, then applied
    /// without the stale samples ([`State::sampled_before_a_recorded_end`]).
    pub(super) fn report_sampled_entity_states(
        &mut self,
        environment: &str,
        states: &[SampledEntityReport],
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let all: Vec<EntityReport> = states.iter().map(|s| s.report.clone()).collect();
        self.check_entity_reports(environment, &all)?;
        let fresh: Vec<EntityReport> = states
            .iter()
            .filter(|s| !self.sampled_before_a_recorded_end(s))
            .map(|s| s.report.clone())
            .collect();
        let stale = states.len() - fresh.len();
        let out = self.report_entity_states(environment, &fresh, tx)?;
        Ok(match out {
            CommandOutput::Changed { id, summary } if stale > 0 => CommandOutput::Changed {
                id,
                summary: format!(
                    "{summary}; {stale} samples older than a recorded plan end skipped"
                ),
            },
            other => other,
        })
    }

    /// Whether `sample` was taken before the end of one of its entity's plans that the state
    /// records: a plan that ran on the agent (it succeeded or failed there, not cancelled by
    /// the hub) issued after every plan the sample reflects. Applied after that end, the
    /// sample would record the state from before it (an old version after an upgrade's
    /// success), and the entity would be planned again.
    pub(crate) fn sampled_before_a_recorded_end(&self, sample: &SampledEntityReport) -> bool {
        let Some(through) = sample.reflects_through else {
            return false;
        };
        let Some(finished) = self
            .plan_outcomes
            .index()
            .by_entity
            .get(&sample.report.entity)
        else {
            return false;
        };
        finished
            .iter()
            .rev()
            .take_while(|(issued, _)| *issued > through)
            .filter_map(|(_, id)| self.plan_outcomes.get(id))
            .any(|o| matches!(o.status, PlanStatus::Succeeded | PlanStatus::Failed))
    }

    pub(super) fn report_entity_states(
        &mut self,
        environment: &str,
        states: &[EntityReport],
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        self.check_entity_reports(environment, states)?;
        let mut changed_count = 0;
        for r in states {
            if !self
                .entities
                .get(&r.entity)
                .is_some_and(|e| r.changes(&e.reported))
            {
                // An unchanged report changes no record (no write, no trigger).
                continue;
            }
            let Some(mut e) = self.entities.get_mut(&r.entity, &mut tx.changed) else {
                continue;
            };
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
            drop(e);
            self.end_never_healthy_if_healthy(&r.entity, tx);
            changed_count += 1;
            if version_changed {
                self.reindex_dependencies(&r.entity);
            }
            tx.triggers.push(Trigger::Entity(r.entity.clone()));
            if before.version != r.version || before.health != r.health {
                self.note(&r.entity, "report", line, tx);
            }
        }
        Ok(CommandOutput::Changed {
            id: environment.to_string(),
            summary: format!("{changed_count} entity states changed"),
        })
    }

    // Long: the report's checks, each returning early, then the task's transition and the
    // plan's end (failure with its suppression, or success); the order of the checks is the
    // order of the refusals.
    pub(super) fn report_task(
        &mut self,
        environment: &str,
        report: &TaskReport,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        // A finished plan is known by its outcome; a report of it is checked like any
        // other, then ignored (its tasks are history, so the task name is not checked).
        let finished = self
            .plan_outcomes
            .get(&report.plan_id)
            .filter(|o| {
                o.entity
                    .starts_with(&crate::EntityId::environment_prefix(environment))
            })
            .map(|o| o.status);
        let plan = self
            .plans
            .get(&report.plan_id)
            .filter(|p| p.environment == environment);
        if plan.is_none() && finished.is_none() {
            return Err(not_found(
                "plan",
                &format!("{} in environment {environment}", report.plan_id),
            ));
        }
        let task_index = match plan {
            Some(plan) => match plan.tasks.iter().position(|t| t.name == report.task) {
                Some(i) => i,
                None => {
                    return Err(CommandError::invalid(
                        "task",
                        format!("plan {} has no task {:?}", report.plan_id, report.task),
                    ))
                }
            },
            None => 0,
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
        let plan = match (plan, finished) {
            (Some(plan), _) => plan,
            (None, Some(status)) => return ignored(&format!("plan is {status}")),
            // Proven above: one of the two is there.
            (None, None) => unreachable!("plan {} neither active nor finished", report.plan_id),
        };
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
        let Some(mut plan) = self.plans.get_mut(&plan_id, &mut tx.changed) else {
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
            let attempt = if changes_workload {
                failed_attempt(&plan)
            } else {
                None
            };
            drop(plan);
            self.record_failed_attempt(&entity_id, attempt, tx);
            self.finish_plan(&plan_id, PlanStatus::Failed, tx);
            // The failure is evidence the workload is not healthy, whatever version it runs
            // now; the agent's next report corrects the details. This is what lets the
            // rollback (SPEC P10) see that the entity is not back where it was.
            if changes_workload {
                if let Some(mut e) = self.entities.get_mut(&entity_id, &mut tx.changed) {
                    e.reported.health = Health::Error;
                    e.reported.message = health_message;
                    e.reported.reported_at_ms = Some(now);
                }
            }
            self.note(&entity_id, "plan", line, tx);
            if canary_step {
                self.release_queued_canary_step(&entity_id, tx);
            } else {
                self.suppress_after_failure(&entity_id, &plan_id, tx);
            }
            tx.triggers.push(Trigger::Entity(entity_id));
            return Ok(CommandOutput::Changed {
                id: plan_id,
                summary: "plan failed".into(),
            });
        }
        let succeeded = plan
            .tasks
            .iter()
            .all(|t| t.state == TaskState::Succeeded)
            .then(|| {
                (
                    plan.to_version.clone(),
                    plan.to_config.clone(),
                    plan.secrets_revision,
                    plan.kind.clone(),
                )
            });
        drop(plan);
        if let Some((to_version, to_config, secrets_revision, kind)) = succeeded {
            self.finish_plan(&plan_id, PlanStatus::Succeeded, tx);
            // A canary step changes the canary's workloads; the entity's reported state
            // follows the primary through the agent's reports.
            let canary_step = kind.is_canary_step();
            self.release_queued_canary_step(&entity_id, tx);
            let mut moved = false;
            if canary_step {
                // Nothing of the entity changes.
            } else if let Some(mut e) = self.entities.get_mut(&entity_id, &mut tx.changed) {
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
                moved = version_before != e.reported.version;
            }
            if moved {
                self.reindex_dependencies(&entity_id);
            }
            self.end_never_healthy_if_healthy(&entity_id, tx);
            if matches!(kind, PlanKind::Uninstall) {
                self.after_module_uninstall(&entity_id, tx);
            }
            self.note(&entity_id, "plan", format!("plan {plan_id} succeeded"), tx);
            tx.triggers.push(Trigger::Entity(entity_id));
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
}

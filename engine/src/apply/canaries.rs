//! Canaries: applying a canary resource to an entity, deleting it, the leader's committed
//! ticks and operators' manual promote / abort / retry, each running the pure phase machine
//! of [`crate::canary`]; the step plans that carry the resulting actions to the agent, and
//! the agent's observations.

use std::collections::BTreeMap;

use crate::canary::{
    advance_judged, parse_canary_templated, parse_canary_with_policy, terminate, Action,
    AnalysisPolicy, CanaryEvent, CanaryObservation, CanaryRevision, CanaryStatus, CanaryStepSpec,
    Judging, Manual, MetricSamples, MetricSource, Phase, SampleWindow, Strategy, TickInput,
    MAX_OBSERVATIONS, MAX_SPARE_REVISIONS, MAX_WINDOWS,
};
use crate::canary_events::CanaryEvents;
use crate::canary_history::{CanaryHistory, CanarySample};
use crate::canary_judging::MAX_JUDGED_METRICS;
use crate::canary_record::{action_label, Canary};
use crate::command::CommandOutput;
use crate::entity::EntityId;
use crate::error::CommandError;
use crate::plan::{Plan, PlanKind, PlanStatus};
use crate::state::{State, Trigger};
use crate::TimestampMs;

use super::canary_judging::{judged_metrics, validate_reported_samples, validate_tick_samples};
use super::{not_found, Tx};

impl State {
    /// `ReportCanaries` (and `ReportCanariesWithSamples`): stores the agent's observations on
    /// the canary records, and the sample windows of judged canaries on their judging records.
    pub(super) fn report_canaries(
        &mut self,
        environment: &str,
        observations: &[(String, CanaryObservation)],
        samples: &[(String, Vec<SampleWindow>)],
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        validate_reported_samples(samples)?;
        let stored = self.observe_canaries(environment, observations, tx)?;
        self.store_samples(environment, observations, samples, tx);
        Ok(CommandOutput::Changed {
            id: environment.to_string(),
            summary: format!("{stored} canary observations stored"),
        })
    }

    /// `CanaryManual`: an operator's promote, abort or retry, audited.
    pub(super) fn canary_manual_command(
        &mut self,
        id: &str,
        action: &crate::canary::Manual,
        actor: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        if actor.trim().is_empty() {
            return Err(CommandError::invalid("actor", "required"));
        }
        let out = self.canary_manual(id, *action, tx)?;
        self.audit_entry(
            actor,
            &format!("canary-{}", action.as_str()),
            id.to_string(),
            "",
            tx,
        );
        Ok(out)
    }

    /// Creates or updates a canary from its resource (SPEC K1). Invalid resources are refused
    /// with every problem's path, and a running canary is left untouched.
    // Long: the checks of a canary resource, each returning early, then create or update.
    pub(super) fn apply_canary(
        &mut self,
        environment: Option<&str>,
        yaml: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        let parsed = parse_canary_templated(yaml)
            .map_err(|errors| CommandError::invalid("canary", format!("\n{errors}")))?;
        let env = super::metric_templates::resource_environment(
            parsed.spec.namespace.as_deref(),
            environment,
            "required: the environment of the target entity",
        )?;
        if !self.environments.contains_key(&env) {
            return Err(CommandError::NotFound {
                kind: "environment".into(),
                name: env,
            });
        }
        // Metrics with templateRef: the stored templates, their queries rendered.
        let (mut spec, policy, ignored) = parsed
            .resolve(&env, self)
            .map_err(|errors| CommandError::invalid("canary", format!("\n{errors}")))?;
        let judged = judged_metrics(&spec, &policy);
        if judged.len() > MAX_JUDGED_METRICS {
            return Err(CommandError::invalid(
                "spec.analysis.metrics",
                format!(
                    "{} judged metrics, at most {MAX_JUDGED_METRICS}",
                    judged.len()
                ),
            ));
        }
        // The canary's namespace is its environment, whether the resource named it or `-n`
        // gave it: webhook payloads carry it (Flagger's load tester keys gates by it).
        spec.namespace = Some(env.clone());
        // alerts[].providerRef: the stored providers (from feature level 2 on).
        self.check_alert_providers(&spec)?;
        let entity = EntityId::new(&env, spec.target.kind, &spec.target.name).0;
        if !self.entities.contains_key(&entity) {
            return Err(CommandError::invalid(
                "spec.targetRef",
                format!("entity {entity} does not exist"),
            ));
        }
        let suffixes: &[&str] = if policy.uses_fresh_baseline() {
            &["primary", "canary", "baseline"]
        } else {
            &["primary", "canary"]
        };
        for suffix in suffixes {
            let workload = EntityId::new(
                &env,
                spec.target.kind,
                &format!("{}-{suffix}", spec.target.name),
            )
            .0;
            if self.entities.contains_key(&workload) {
                return Err(CommandError::FailedPrecondition(format!(
                    "entity {workload} exists: the canary's {suffix} workload of {entity} \
                     would take its name"
                )));
            }
        }
        let id = Canary::id_of(&env, &spec.name);
        if let Some(other) = self
            .canaries
            .index()
            .of_entity
            .get(&entity)
            .filter(|other| **other != id)
        {
            return Err(CommandError::FailedPrecondition(format!(
                "entity {entity} already has canary {other}; one canary per entity"
            )));
        }
        if let Some(c) = self.canaries.get(&id) {
            if c.entity != entity {
                return Err(CommandError::invalid(
                    "spec.targetRef",
                    format!(
                        "canary {id} controls {}; delete it to attach the name to {entity}",
                        c.entity
                    ),
                ));
            }
            if c.yaml == yaml {
                return Ok(CommandOutput::Changed {
                    id,
                    summary: with_ignored("canary unchanged".into(), &ignored),
                });
            }
        }
        let summary = if self.canaries.contains_key(&id) {
            if let Some(mut c) = self.canaries.get_mut(&id, &mut tx.changed) {
                c.spec = spec;
                c.yaml = yaml.to_string();
                c.updated_ms = now;
            }
            format!("canary {id} updated")
        } else {
            {
                self.canaries.put(
                    Canary {
                        id: id.clone(),
                        environment: env.clone(),
                        name: spec.name.clone(),
                        entity: entity.clone(),
                        spec,
                        yaml: yaml.to_string(),
                        status: CanaryStatus::new(now),
                        actions: Vec::new(),
                        target: None,
                        revisions: Vec::new(),
                        observation: None,
                        queued: Vec::new(),
                        created_ms: now,
                        updated_ms: now,
                    },
                    &mut tx.changed,
                );
                format!("canary {id} created for {entity}")
            }
        };
        self.set_judged_metrics(&id, judged, policy.inconclusive_limit, tx);
        // The next evaluation sets the canary's target.
        tx.triggers.push(Trigger::Entity(entity.clone()));
        self.note(&entity, "canary", summary.clone(), tx);
        Ok(CommandOutput::Changed {
            id,
            summary: with_ignored(summary, &ignored),
        })
    }

    /// Deletes a canary; with `revertOnDeletion` the decided actions restore the original
    /// routing (SPEC K8).
    pub(super) fn delete_canary(
        &mut self,
        id: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        let c = self
            .canaries
            .get(id)
            .cloned()
            .ok_or_else(|| not_found("canary", id))?;
        let outcome = terminate(&c.spec, &c.status, now);
        // Steps not yet applied are moot. With revertOnDeletion the restore plan must reach
        // the agent: it supersedes whatever plan of the entity is active.
        let restore = !outcome.actions.is_empty();
        let active = self
            .active_plan_of(&c.entity)
            .map(|p| (p.id.clone(), p.kind.is_canary_step()));
        if let Some((plan, is_step)) = active {
            if is_step || restore {
                self.cancel_plan(&plan, &format!("canary {id} deleted"), tx);
            }
        }
        if restore {
            if let Some(mut rec) = self.canaries.get_mut(id, &mut tx.changed) {
                rec.queued.clear();
                rec.status = outcome.status.clone();
            }
            self.issue_canary_step(id, &outcome.actions, tx);
        }
        self.canaries.remove(id, &mut tx.changed);
        self.canary_history.remove(id, &mut tx.changed);
        self.canary_events.remove(id, &mut tx.changed);
        self.canary_judging.remove(id, &mut tx.changed);
        let mut summary = format!("canary {id} deleted");
        if !outcome.actions.is_empty() {
            summary.push_str(&format!(
                " ({})",
                outcome
                    .actions
                    .iter()
                    .map(action_label)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if self.entities.contains_key(&c.entity) {
            self.note(&c.entity, "canary", summary.clone(), tx);
            // The entity is an ordinary one again: its next plan (from what the agent
            // reports, the primary left serving) is decided now, not at the next re-check.
            tx.triggers.push(Trigger::Entity(c.entity.clone()));
        }
        Ok(CommandOutput::Changed {
            id: id.to_string(),
            summary,
        })
    }

    /// Applies one planned tick: runs the phase machine with the leader's observations (and,
    /// for a judged tick, the samples its judges compare) if the canary is still at `step`;
    /// otherwise (a deposed leader's proposal, a duplicate) changes nothing (SPEC K9).
    pub(super) fn canary_tick(
        &mut self,
        id: &str,
        step: u64,
        input: &TickInput,
        samples: Option<&BTreeMap<String, MetricSamples>>,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        let c = self
            .canaries
            .get(id)
            .ok_or_else(|| not_found("canary", id))?;
        if c.status.step != step {
            return Ok(CommandOutput::Changed {
                id: id.to_string(),
                summary: format!(
                    "stale tick (planned at step {step}, canary at {}) ignored",
                    c.status.step
                ),
            });
        }
        if let Some(samples) = samples {
            validate_tick_samples(samples)?;
        }
        let no_samples = BTreeMap::new();
        let policy = analysis_policy(&c.yaml);
        let judging = Judging {
            policy: &policy,
            samples: samples.unwrap_or(&no_samples),
            inconclusive: self.canary_judging.get(id).map_or(0, |j| j.inconclusive),
        };
        let spec = self.canary_tick_spec(c, &input.revision);
        let judged = advance_judged(&spec, &c.status, input, &judging, now);
        let outcome = judged.outcome;
        debug_assert_eq!(outcome.status.step, step + 1, "a tick advances one step");
        // Until now the evaluation held the target at what runs (issue 52): a candidate that
        // waited is to become the target at once.
        let initialised =
            c.status.last_promoted_spec.is_none() && outcome.status.last_promoted_spec.is_some();
        let entity = c.entity.clone();
        self.record_judgements(id, step, judged.inconclusive, judged.verdicts, tx);
        let (before, after) = self.commit_outcome(id, step, outcome.status, outcome.actions, tx);
        if initialised {
            tx.triggers.push(Trigger::Entity(entity));
        }
        let weight = self.canaries.get(id).map_or(0, |c| c.status.canary_weight);
        let metrics = input.metrics.iter().map(|(n, v)| (n.clone(), *v)).collect();
        self.record_sample(id, step, metrics, tx);
        self.record_events(id, &outcome.events, tx);
        let summary = with_events(
            format!(
                "canary {id} step {step}: {} -> {}, weight {weight}",
                before.as_str(),
                after.as_str()
            ),
            &outcome.events,
        );
        if before != after {
            self.note_canary(id, summary.clone(), tx);
        }
        Ok(CommandOutput::Changed {
            id: id.to_string(),
            summary,
        })
    }

    /// Runs an operator's promote, abort or retry as a tick of its own, at once (SPEC K10).
    fn canary_manual(
        &mut self,
        id: &str,
        manual: Manual,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        let c = self
            .canaries
            .get(id)
            .ok_or_else(|| not_found("canary", id))?;
        if c.spec.suspend {
            return Err(CommandError::FailedPrecondition(format!(
                "canary {id} is suspended (spec.suspend); resume it first"
            )));
        }
        let input = TickInput::manual(c.current_revision(), manual);
        let policy = analysis_policy(&c.yaml);
        let no_samples = BTreeMap::new();
        let judging = Judging {
            policy: &policy,
            samples: &no_samples,
            inconclusive: self.canary_judging.get(id).map_or(0, |j| j.inconclusive),
        };
        let spec = self.canary_tick_spec(c, &input.revision);
        let judged = advance_judged(&spec, &c.status, &input, &judging, now);
        let outcome = judged.outcome;
        let step = c.status.step;
        self.record_judgements(id, step, judged.inconclusive, judged.verdicts, tx);
        let (before, after) = self.commit_outcome(id, step, outcome.status, outcome.actions, tx);
        self.record_sample(id, step, Vec::new(), tx);
        self.record_events(id, &outcome.events, tx);
        let summary = with_events(
            format!(
                "canary {id}: {} ({} -> {})",
                manual.as_str(),
                before.as_str(),
                after.as_str()
            ),
            &outcome.events,
        );
        self.note_canary(id, summary.clone(), tx);
        Ok(CommandOutput::Changed {
            id: id.to_string(),
            summary,
        })
    }

    /// Stores the status a tick decided and its actions (decided at `step`), and issues the
    /// step plan that carries them to the agent; returns the phases before and after.
    fn commit_outcome(
        &mut self,
        id: &str,
        step: u64,
        status: CanaryStatus,
        actions: Vec<Action>,
        tx: &mut Tx,
    ) -> (Phase, Phase) {
        let Some(mut c) = self.canaries.get_mut(id, &mut tx.changed) else {
            // Callers looked the canary up just before; nothing removed it since.
            return (status.phase, status.phase);
        };
        let before = c.status.phase;
        c.status = status;
        c.record_actions(step, actions.clone());
        let after = c.status.phase;
        drop(c);
        self.issue_canary_step(id, &actions, tx);
        (before, after)
    }

    /// Appends where step `step` left canary `id` to its history, with the metric values the
    /// step judged.
    fn record_sample(
        &mut self,
        id: &str,
        step: u64,
        metrics: Vec<(String, Option<i64>)>,
        tx: &mut Tx,
    ) {
        let Some(status) = self.canaries.get(id).map(|c| c.status.clone()) else {
            return;
        };
        let sample = CanarySample {
            time_ms: tx.now,
            step,
            phase: status.phase,
            canary_weight: status.canary_weight,
            metrics,
        };
        self.canary_history
            .get_or_insert_with(id.to_string(), &mut tx.changed, || CanaryHistory {
                canary: id.to_string(),
                ..CanaryHistory::default()
            })
            .push(sample);
    }

    /// Appends a tick's events to the events of canary `id` (issue 52 item 5).
    fn record_events(&mut self, id: &str, events: &[CanaryEvent], tx: &mut Tx) {
        if events.is_empty() || !self.canaries.contains_key(id) {
            return;
        }
        let record = self
            .canary_events
            .get_or_insert_with(id.to_string(), &mut tx.changed, || CanaryEvents {
                canary: id.to_string(),
                ..CanaryEvents::default()
            });
        for event in events {
            record.push(event.clone());
        }
    }

    /// Notes `summary` in the activity of the canary's entity, if it still exists.
    fn note_canary(&mut self, id: &str, summary: String, tx: &mut Tx) {
        let Some(entity) = self.canaries.get(id).map(|c| c.entity.clone()) else {
            return;
        };
        if self.entities.contains_key(&entity) {
            self.note(&entity, "canary", summary, tx);
        }
    }

    /// Records `target` as the revision canary `id` analyses next (from an evaluation).
    pub(super) fn set_canary_target(&mut self, id: &str, target: CanaryRevision, tx: &mut Tx) {
        // Issue 52's invariant, the half the evaluation keeps: initialisation copies the
        // target to the primary without analysis, so until then the target is what runs.
        debug_assert!(
            self.canaries
                .get(id)
                .filter(|c| c.status.last_promoted_spec.is_none())
                .and_then(|c| self.entities.get(&c.entity))
                .is_none_or(|e| e.reported.version.as_ref() == Some(&target.version)),
            "canary {id} is not initialised, yet its target {} ({}) is not what its entity runs",
            target.revision,
            target.version
        );
        let Some(mut c) = self.canaries.get_mut(id, &mut tx.changed) else {
            return;
        };
        remember_revision(&mut c, target.clone());
        c.target = Some(target);
    }

    /// The desired state after the status of canary `id` changed with `actions`, as a step
    /// plan (issued now or queued); nothing when no action concerns the agent.
    fn issue_canary_step(&mut self, id: &str, actions: &[Action], tx: &mut Tx) {
        let now = tx.now;
        let index = tx.index;
        if !actions.iter().any(is_agent_action) {
            return;
        }
        let Some(c) = self.canaries.get(id) else {
            return;
        };
        let restore = actions.iter().any(|a| matches!(a, Action::RestoreOriginal));
        let spec = step_spec(c, restore);
        let baseline = if restore { None } else { fresh_baseline(c) };
        let plan = step_plan(c, spec, baseline, now, index);
        let entity = c.entity.clone();
        if let Some(mut c) = self.canaries.get_mut(id, &mut tx.changed) {
            c.queued.push(plan);
        }
        // Issued at once when no plan of the entity is active (after older queued steps).
        self.release_queued_canary_step(&entity, tx);
    }

    /// Issues the next queued step plan of the canary of `entity`, once no plan of the entity
    /// is active (called when a plan finishes and when a step is decided).
    pub(super) fn release_queued_canary_step(&mut self, entity: &str, tx: &mut Tx) {
        let now = tx.now;
        if self.plans.index().active.contains_key(entity) {
            return;
        }
        let Some(id) = self
            .canaries
            .index()
            .of_entity
            .get(entity)
            .filter(|id| self.canaries.get(*id).is_some_and(|c| !c.queued.is_empty()))
            .cloned()
        else {
            return;
        };
        let Some(mut c) = self.canaries.get_mut(&id, &mut tx.changed) else {
            return;
        };
        let mut plan = c.queued.remove(0);
        drop(c);
        plan.issued_ms = now;
        self.insert_plan(plan, tx);
    }

    /// Stores what the agent of `environment` observed (SPEC K6). Observations of canaries
    /// that do not exist (any more) in the environment are skipped; returns how many were
    /// stored.
    fn observe_canaries(
        &mut self,
        environment: &str,
        observations: &[(String, CanaryObservation)],
        tx: &mut Tx,
    ) -> Result<usize, CommandError> {
        let now = tx.now;
        if observations.len() > MAX_OBSERVATIONS {
            return Err(CommandError::invalid(
                "observations",
                format!(
                    "{} observations, at most {MAX_OBSERVATIONS}",
                    observations.len()
                ),
            ));
        }
        for (id, o) in observations {
            if o.windows.len() > MAX_WINDOWS {
                return Err(CommandError::invalid(
                    "observations.windows",
                    format!("{id}: {} windows, at most {MAX_WINDOWS}", o.windows.len()),
                ));
            }
            if o.primary_ready_percent > 100 || o.canary_ready_percent > 100 {
                return Err(CommandError::invalid(
                    "observations.ready_percent",
                    format!("{id}: above 100"),
                ));
            }
        }
        let mut stored = 0;
        for (id, o) in observations {
            if self
                .canaries
                .get(id)
                .is_none_or(|c| c.environment != environment)
            {
                continue;
            }
            let Some(mut c) = self.canaries.get_mut(id, &mut tx.changed) else {
                continue;
            };
            c.observation = Some(CanaryObservation {
                observed_ms: now,
                ..o.clone()
            });
            stored += 1;
        }
        Ok(stored)
    }
}

/// `summary`, followed by the tick's event messages when there are any.
fn with_events(mut summary: String, events: &[CanaryEvent]) -> String {
    if !events.is_empty() {
        let messages: Vec<&str> = events.iter().map(|e| e.message.as_str()).collect();
        summary.push_str(&format!(": {}", messages.join("; ")));
    }
    summary
}

/// Whether an action changes what the agent runs or routes (alerts and notifications are
/// the leader's).
fn is_agent_action(a: &Action) -> bool {
    !matches!(a, Action::Alert { .. } | Action::NotifyWebhook { .. })
}

/// Adds `rev` to the canary's known revisions, forgetting the oldest ones its status, target
/// and queue do not refer to.
fn remember_revision(c: &mut Canary, rev: CanaryRevision) {
    c.revisions.retain(|r| r.revision != rev.revision);
    c.revisions.push(rev);
    let mut keep: Vec<String> = [
        c.status.primary_revision.clone(),
        c.status.canary_revision.clone(),
        c.status.last_applied_spec.clone(),
        c.status.last_promoted_spec.clone(),
        c.target.as_ref().map(|t| t.revision.clone()),
    ]
    .into_iter()
    .flatten()
    .collect();
    keep.push(
        c.revisions
            .last()
            .map(|r| r.revision.clone())
            .unwrap_or_default(),
    );
    while c.revisions.len() > MAX_SPARE_REVISIONS + 5 {
        let Some(pos) = c.revisions.iter().position(|r| !keep.contains(&r.revision)) else {
            break;
        };
        c.revisions.remove(pos);
    }
}

/// The desired state of canary `c` as its status now describes it.
fn step_spec(c: &Canary, restore: bool) -> CanaryStepSpec {
    let find = |rev: &Option<String>| {
        rev.as_ref()
            .and_then(|r| c.revisions.iter().find(|x| &x.revision == r).cloned())
    };
    let mut windows: Vec<i64> = c
        .spec
        .analysis
        .metrics
        .iter()
        .filter(|m| {
            matches!(
                m.source,
                MetricSource::RequestSuccessRate | MetricSource::RequestDuration
            )
        })
        .map(|m| m.interval_ms)
        .collect();
    windows.sort_unstable();
    windows.dedup();
    let match_rules = match &c.spec.analysis.strategy {
        Strategy::AbTesting { match_rules, .. } => match_rules.clone(),
        _ => Vec::new(),
    };
    CanaryStepSpec {
        canary: c.id.clone(),
        service: c.spec.service.name.clone(),
        port: c.spec.service.port,
        step: c.status.step,
        phase: c.status.phase,
        primary: find(&c.status.primary_revision),
        canary_workload: if restore {
            None
        } else {
            find(&c.status.canary_revision)
        },
        canary_weight: if restore { 0 } else { c.status.canary_weight },
        match_routing: !restore && c.status.match_routing,
        match_rules,
        restore_original: restore,
        metric_windows_ms: windows,
    }
}

/// The fresh baseline canary `c` runs in the state its status describes: the primary's
/// revision while a revision is analysed with a canary workload (Progressing,
/// WaitingPromotion, Halted), when a judge of the resource compares with a fresh baseline.
/// These are the moments between the machine's `DeployBaseline` and `ScaleBaselineToZero`;
/// the step plan carries the desired state, not the actions.
fn fresh_baseline(c: &Canary) -> Option<CanaryRevision> {
    let analysing = matches!(
        c.status.phase,
        Phase::Progressing | Phase::WaitingPromotion | Phase::Halted
    );
    if !analysing || c.status.canary_revision.is_none() {
        return None;
    }
    if !analysis_policy(&c.yaml).uses_fresh_baseline() {
        return None;
    }
    let primary = c.status.primary_revision.as_ref()?;
    c.revisions.iter().find(|r| &r.revision == primary).cloned()
}

/// The plan record carrying `spec` (and the fresh `baseline`, if one runs) for the canary's
/// entity.
fn step_plan(
    c: &Canary,
    spec: CanaryStepSpec,
    baseline: Option<CanaryRevision>,
    now: TimestampMs,
    index: u64,
) -> Plan {
    let (version, config, secrets_revision) = spec
        .primary
        .as_ref()
        .map(|p| {
            (
                Some(p.version.clone()),
                Some(p.config.clone()),
                p.secrets_revision,
            )
        })
        .unwrap_or((None, None, 0));
    let reason = format!(
        "canary {} step {}: {}, weight {}{}",
        spec.canary,
        spec.step,
        spec.phase.as_str(),
        spec.canary_weight,
        if baseline.is_some() {
            ", fresh baseline"
        } else {
            ""
        }
    );
    let kind = match baseline {
        Some(b) => PlanKind::CanaryStepWithBaseline {
            step: Box::new(spec),
            baseline: Box::new(b),
        },
        None => PlanKind::CanaryStep(Box::new(spec)),
    };
    Plan {
        id: format!("p-{index}-c"),
        entity: c.entity.clone(),
        environment: c.environment.clone(),
        tasks: Plan::tasks_for(&kind),
        kind,
        from_version: version.clone(),
        to_version: version,
        from_config_sha256: None,
        to_config: config,
        secrets_revision,
        artifacts: Vec::new(),
        reason,
        output: String::new(),
        failure: None,
        created_ms: now,
        issued_ms: now,
        started_ms: None,
        ended_ms: None,
        status: PlanStatus::Issued,
        cancel_reason: None,
        issued_index: index,
    }
}

/// `summary`, followed by the Kubernetes-only fields the resource set and the hub ignores.
fn with_ignored(summary: String, ignored: &[crate::canary::IgnoredField]) -> String {
    if ignored.is_empty() {
        return summary;
    }
    let fields: Vec<String> = ignored.iter().map(ToString::to_string).collect();
    format!("{summary}; {}", fields.join("; "))
}

/// The analysis policy of a stored canary resource (judges, `inconclusiveLimit`,
/// `onFailure`). The policy is not a field of the record, whose
/// encoding stays as it was: it is read again from the committed YAML, so every node decides
/// from the same bytes. A resource the parser now refuses (accepted by an older release) has
/// the default policy, as it had then.
fn analysis_policy(yaml: &str) -> AnalysisPolicy {
    parse_canary_with_policy(yaml)
        .map(|(_, policy, _)| policy)
        .unwrap_or_default()
}

//! Canaries in the replicated state (SPEC K1, K7, K10): applying a canary resource to an
//! entity, deleting it, and operators' manual promote / abort / retry, each a Raft entry
//! that runs the pure phase machine of [`crate::canary`].
//!
//! The leader's per-interval ticks (webhooks, metrics) and the canary-step plans that carry
//! the resulting actions to the agent build on these records.

use serde::{Deserialize, Serialize};

use crate::canary::{
    advance, parse_canary, terminate, Action, CanarySpec, CanaryStatus, Manual, Phase, TickInput,
};
use crate::canary_rollout::{CanaryObservation, CanaryRevision};
use crate::command::CommandOutput;
use crate::entity::EntityId;
use crate::error::CommandError;
use crate::plan::Plan;
use crate::record::RecordKey;
use crate::state::{Effects, State, Trigger};
use crate::TimestampMs;

/// Most actions remembered on a canary record (the newest).
pub const MAX_RECORDED_ACTIONS: usize = 64;

/// A canary attached to an entity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Canary {
    /// `<environment>/<name>`.
    pub id: String,
    /// The environment (the resource's namespace).
    pub environment: String,
    /// The resource's name.
    pub name: String,
    /// The entity it controls.
    pub entity: String,
    /// The validated resource.
    pub spec: CanarySpec,
    /// The resource as applied.
    pub yaml: String,
    /// Where the analysis stands.
    pub status: CanaryStatus,
    /// The newest actions decided, oldest first, with the step that decided them.
    pub actions: Vec<(u64, Action)>,
    /// The revision the analysis is about: the entity's newest candidate that passed every
    /// constraint (or what it runs), set by evaluations. `None` until the first one.
    pub target: Option<CanaryRevision>,
    /// Revisions the status and queued steps may refer to (target, primary, canary, ...).
    pub revisions: Vec<CanaryRevision>,
    /// What the agent last observed.
    pub observation: Option<CanaryObservation>,
    /// Step plans decided while another plan of the entity was active, oldest first.
    pub queued: Vec<Plan>,
    /// Entry time of the first apply.
    pub created_ms: TimestampMs,
    /// Entry time of the last apply of the resource.
    pub updated_ms: TimestampMs,
}

impl Canary {
    /// The id of canary `name` in `environment`.
    pub fn id_of(environment: &str, name: &str) -> String {
        format!("{environment}/{name}")
    }

    /// The revision the analysis is about (for manual commands): the last one applied, else
    /// the primary's.
    fn current_revision(&self) -> String {
        self.status
            .last_applied_spec
            .clone()
            .or_else(|| self.status.primary_revision.clone())
            .unwrap_or_default()
    }

    fn record_actions(&mut self, step: u64, actions: Vec<Action>) {
        self.actions.extend(actions.into_iter().map(|a| (step, a)));
        let excess = self.actions.len().saturating_sub(MAX_RECORDED_ACTIONS);
        self.actions.drain(..excess);
    }
}

impl State {
    /// Creates or updates a canary from its resource (SPEC K1). Invalid resources are refused
    /// with every problem's path, and a running canary is left untouched.
    pub(crate) fn apply_canary(
        &mut self,
        environment: Option<&str>,
        yaml: &str,
        now: TimestampMs,
        index: u64,
        fx: &mut Effects,
    ) -> Result<CommandOutput, CommandError> {
        let spec = parse_canary(yaml)
            .map_err(|errors| CommandError::invalid("canary", format!("\n{errors}")))?;
        let env = match (spec.namespace.as_deref(), environment) {
            (Some(ns), Some(env)) if ns != env => {
                return Err(CommandError::invalid(
                    "metadata.namespace",
                    format!("{ns:?} differs from the environment given, {env:?}"),
                ))
            }
            (Some(ns), _) => ns.to_string(),
            (None, Some(env)) => env.to_string(),
            (None, None) => {
                return Err(CommandError::invalid(
                    "metadata.namespace",
                    "required: the environment of the target entity",
                ))
            }
        };
        if !self.environments.contains_key(&env) {
            return Err(CommandError::NotFound {
                kind: "environment".into(),
                name: env,
            });
        }
        let entity = EntityId::new(&env, spec.target.kind, &spec.target.name).0;
        if !self.entities.contains_key(&entity) {
            return Err(CommandError::invalid(
                "spec.targetRef",
                format!("entity {entity} does not exist"),
            ));
        }
        for suffix in ["primary", "canary"] {
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
            .idx
            .canary_of_entity
            .get(&entity)
            .filter(|other| **other != id)
        {
            return Err(CommandError::FailedPrecondition(format!(
                "entity {entity} already has canary {other}; one canary per entity"
            )));
        }
        let summary = match self.canaries.get_mut(&id) {
            Some(c) => {
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
                        summary: "canary unchanged".into(),
                    });
                }
                c.spec = spec;
                c.yaml = yaml.to_string();
                c.updated_ms = now;
                format!("canary {id} updated")
            }
            None => {
                self.idx.canary_of_entity.insert(entity.clone(), id.clone());
                self.canaries.insert(
                    id.clone(),
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
                );
                format!("canary {id} created for {entity}")
            }
        };
        fx.changed.push(RecordKey::Canary(id.clone()));
        // The next evaluation sets the canary's target.
        fx.triggers.push(Trigger::Entity(entity.clone()));
        self.note(&entity, now, index, "canary", summary.clone(), fx);
        Ok(CommandOutput::Changed { id, summary })
    }

    /// Deletes a canary; with `revertOnDeletion` the decided actions restore the original
    /// routing (SPEC K8).
    pub(crate) fn delete_canary(
        &mut self,
        id: &str,
        now: TimestampMs,
        index: u64,
        fx: &mut Effects,
    ) -> Result<CommandOutput, CommandError> {
        let c = self
            .canaries
            .get(id)
            .cloned()
            .ok_or_else(|| CommandError::NotFound {
                kind: "canary".into(),
                name: id.to_string(),
            })?;
        let outcome = terminate(&c.spec, &c.status, now);
        // Steps not yet applied are moot. With revertOnDeletion the restore plan must reach
        // the agent: it supersedes whatever plan of the entity is active.
        let restore = !outcome.actions.is_empty();
        let active = self
            .active_plan_of(&c.entity)
            .map(|p| (p.id.clone(), p.kind.is_canary_step()));
        if let Some((plan, is_step)) = active {
            if is_step || restore {
                self.cancel_plan(&plan, &format!("canary {id} deleted"), now, index, fx);
            }
        }
        if restore {
            if let Some(rec) = self.canaries.get_mut(id) {
                rec.queued.clear();
                rec.status = outcome.status.clone();
            }
            self.issue_canary_step(id, &outcome.actions, now, index, fx);
        }
        self.canaries.remove(id);
        self.idx.canary_of_entity.remove(&c.entity);
        fx.changed.push(RecordKey::Canary(id.to_string()));
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
            self.note(&c.entity, now, index, "canary", summary.clone(), fx);
        }
        Ok(CommandOutput::Changed {
            id: id.to_string(),
            summary,
        })
    }

    /// Applies one planned tick: runs the phase machine with the leader's observations if the
    /// canary is still at `step`; otherwise (a deposed leader's proposal, a duplicate) changes
    /// nothing (SPEC K9).
    pub(crate) fn canary_tick(
        &mut self,
        id: &str,
        step: u64,
        input: &TickInput,
        now: TimestampMs,
        index: u64,
        fx: &mut Effects,
    ) -> Result<CommandOutput, CommandError> {
        let c = self
            .canaries
            .get(id)
            .ok_or_else(|| CommandError::NotFound {
                kind: "canary".into(),
                name: id.to_string(),
            })?;
        if c.status.step != step {
            return Ok(CommandOutput::Changed {
                id: id.to_string(),
                summary: format!(
                    "stale tick (planned at step {step}, canary at {}) ignored",
                    c.status.step
                ),
            });
        }
        let outcome = advance(&c.spec, &c.status, input, now);
        debug_assert_eq!(outcome.status.step, step + 1, "a tick advances one step");
        let (before, after) =
            self.commit_outcome(id, step, outcome.status, outcome.actions, now, index, fx);
        let weight = self.canaries.get(id).map_or(0, |c| c.status.canary_weight);
        let summary = with_events(
            format!(
                "canary {id} step {step}: {} -> {}, weight {weight}",
                before.as_str(),
                after.as_str()
            ),
            &outcome.events,
        );
        if before != after {
            self.note_canary(id, summary.clone(), now, index, fx);
        }
        Ok(CommandOutput::Changed {
            id: id.to_string(),
            summary,
        })
    }

    /// Runs an operator's promote, abort or retry as a tick of its own, at once (SPEC K10).
    pub(crate) fn canary_manual(
        &mut self,
        id: &str,
        manual: Manual,
        now: TimestampMs,
        index: u64,
        fx: &mut Effects,
    ) -> Result<CommandOutput, CommandError> {
        let c = self
            .canaries
            .get(id)
            .ok_or_else(|| CommandError::NotFound {
                kind: "canary".into(),
                name: id.to_string(),
            })?;
        if c.spec.suspend {
            return Err(CommandError::FailedPrecondition(format!(
                "canary {id} is suspended (spec.suspend); resume it first"
            )));
        }
        let input = TickInput::manual(c.current_revision(), manual);
        let outcome = advance(&c.spec, &c.status, &input, now);
        let step = c.status.step;
        let (before, after) =
            self.commit_outcome(id, step, outcome.status, outcome.actions, now, index, fx);
        let summary = with_events(
            format!(
                "canary {id}: {} ({} -> {})",
                manual.as_str(),
                before.as_str(),
                after.as_str()
            ),
            &outcome.events,
        );
        self.note_canary(id, summary.clone(), now, index, fx);
        Ok(CommandOutput::Changed {
            id: id.to_string(),
            summary,
        })
    }

    /// Stores the status a tick decided and its actions (decided at `step`), and issues the
    /// step plan that carries them to the agent; returns the phases before and after.
    #[allow(clippy::too_many_arguments)]
    fn commit_outcome(
        &mut self,
        id: &str,
        step: u64,
        status: CanaryStatus,
        actions: Vec<Action>,
        now: TimestampMs,
        index: u64,
        fx: &mut Effects,
    ) -> (Phase, Phase) {
        let Some(c) = self.canaries.get_mut(id) else {
            // Callers looked the canary up just before; nothing removed it since.
            return (status.phase, status.phase);
        };
        let before = c.status.phase;
        c.status = status;
        c.record_actions(step, actions.clone());
        let after = c.status.phase;
        fx.changed.push(RecordKey::Canary(id.to_string()));
        self.issue_canary_step(id, &actions, now, index, fx);
        (before, after)
    }

    /// Notes `summary` in the activity of the canary's entity, if it still exists.
    fn note_canary(
        &mut self,
        id: &str,
        summary: String,
        now: TimestampMs,
        index: u64,
        fx: &mut Effects,
    ) {
        let Some(entity) = self.canaries.get(id).map(|c| c.entity.clone()) else {
            return;
        };
        if self.entities.contains_key(&entity) {
            self.note(&entity, now, index, "canary", summary, fx);
        }
    }

    /// One canary.
    pub fn canary(&self, id: &str) -> Option<&Canary> {
        self.canaries.get(id)
    }

    /// Every canary, by id.
    pub fn canaries(&self) -> impl Iterator<Item = &Canary> {
        self.canaries.values()
    }
}

/// `summary`, followed by the tick's events when there are any.
fn with_events(mut summary: String, events: &[String]) -> String {
    if !events.is_empty() {
        summary.push_str(&format!(": {}", events.join("; ")));
    }
    summary
}

/// A short name for an action, for summaries.
pub fn action_label(a: &Action) -> String {
    match a {
        Action::Initialize { .. } => "initialize".into(),
        Action::DeployCanary { .. } => "deploy canary".into(),
        Action::SetWeights { primary, canary } => format!("weights {primary}/{canary}"),
        Action::SetRouting { canary_weight, .. } => format!("routing {canary_weight}"),
        Action::RouteAllToPrimary => "all traffic to primary".into(),
        Action::PromoteCanary { .. } => "promote".into(),
        Action::ScaleCanaryToZero => "canary to zero".into(),
        Action::Alert { .. } => "alert".into(),
        Action::NotifyWebhook { call } => format!("notify {}", call.name),
        Action::RestoreOriginal => "restore original routing".into(),
    }
}

//! Suppressions: operators' and automatic ones, their expiry, and the environment's
//! autosuppression threshold.

use crate::command::CommandOutput;
use crate::error::CommandError;
use crate::evaluate::format_time;
use crate::state::{State, Trigger};
use crate::suppression::{Scope, Suppression, SuppressionSource};
use crate::TimestampMs;

use super::{check_text, not_found, Tx};

/// The fields of `CreateSuppression`.
pub(super) struct NewSuppression<'a> {
    pub(super) scope: &'a Scope,
    pub(super) start_ms: &'a Option<TimestampMs>,
    pub(super) end_ms: &'a TimestampMs,
    pub(super) reason: &'a str,
    pub(super) cancel_active_plans: bool,
    pub(super) actor: &'a str,
}

impl State {
    /// `CreateSuppression`: optionally cancels the active plans in its scope.
    pub(super) fn create_suppression(
        &mut self,
        command: NewSuppression<'_>,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let NewSuppression {
            scope,
            start_ms,
            end_ms,
            reason,
            cancel_active_plans,
            actor,
        } = command;
        let now = tx.now;
        let index = tx.index;
        check_text("reason", reason, true)?;
        let start = start_ms.unwrap_or(now);
        if *end_ms <= start {
            return Err(CommandError::invalid("end", "must be after start"));
        }
        if *end_ms <= now {
            return Err(CommandError::invalid("end", "is in the past"));
        }
        self.require_scope(scope)?;
        let id = self.unused_suppression_id(format!("s-{index}"));
        self.add_suppression(
            Suppression {
                id: id.clone(),
                scope: scope.clone(),
                source: SuppressionSource::Manual,
                start_ms: start,
                end_ms: Some(*end_ms),
                reason: reason.to_string(),
                created_at_ms: now,
            },
            tx,
        );
        let mut cancelled = 0;
        if cancel_active_plans {
            let plans = self.active_plans_in_scope(scope);
            cancelled = plans.len();
            for p in plans {
                self.cancel_plan(&p, &format!("suppression {id}: {reason}"), tx);
            }
        }
        self.audit_entry(actor, "suppression", scope.to_string(), reason, tx);
        self.note_scope(
            scope,
            format!(
                "manual suppression {id} until {}: {reason}",
                format_time(*end_ms)
            ),
            tx,
        );
        Ok(CommandOutput::Changed {
            id: id.clone(),
            summary: format!("suppression {id} on {scope}; {cancelled} plans cancelled"),
        })
    }

    /// `DeleteSuppression`.
    pub(super) fn delete_suppression(
        &mut self,
        id: &str,
        actor: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let s = self
            .suppressions
            .get(id)
            .cloned()
            .ok_or_else(|| not_found("suppression", id))?;
        self.remove_suppression(id, tx);
        if matches!(s.source, SuppressionSource::FailedPlan { .. }) {
            self.reconcile_threshold(s.scope.environment(), tx);
        }
        self.audit_entry(actor, "suppression-delete", s.scope.to_string(), id, tx);
        Ok(CommandOutput::Changed {
            id: id.to_string(),
            summary: format!("suppression {id} deleted"),
        })
    }

    /// `ExpireSuppressions`: removes every suppression that ended by the entry's time.
    pub(super) fn expire_suppressions(
        &mut self,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        let expired: Vec<String> = self
            .suppressions
            .values()
            .filter(|s| s.expired_at(now))
            .map(|s| s.id.clone())
            .collect();
        let mut envs = Vec::new();
        for id in &expired {
            if let Some(s) = self.remove_suppression(id, tx) {
                envs.push(s.scope.environment().to_string());
            }
        }
        envs.sort();
        envs.dedup();
        for env in envs {
            self.reconcile_threshold(&env, tx);
        }
        Ok(CommandOutput::Changed {
            id: String::new(),
            summary: format!("{} suppressions expired", expired.len()),
        })
    }

    /// `base` (an id derived from the entry's index) if no suppression has it, else the
    /// first free `<base>-2`, `<base>-3`, …: one entry can create several suppressions (an
    /// agent's batch of reports can fail several plans), and a second `put` under the same
    /// id would replace the first.
    pub(super) fn unused_suppression_id(&self, base: String) -> String {
        if self.suppressions.get(&base).is_none() {
            return base;
        }
        (2u64..)
            .map(|n| format!("{base}-{n}"))
            .find(|id| self.suppressions.get(id).is_none())
            // Proven: the table is finite, so some suffix is free.
            .unwrap_or_else(|| unreachable!("every suppression id is taken"))
    }

    pub(super) fn add_suppression(&mut self, s: Suppression, tx: &mut Tx) {
        tx.triggers.push(match &s.scope {
            Scope::Environment(env) => Trigger::Environment(env.clone()),
            Scope::Entity(id) => Trigger::EntityOnly(id.clone()),
        });
        self.suppressions.put(s, &mut tx.changed);
    }

    fn remove_suppression(&mut self, id: &str, tx: &mut Tx) -> Option<Suppression> {
        let s = self.suppressions.remove(id, &mut tx.changed)?;
        tx.triggers.push(match &s.scope {
            Scope::Environment(env) => Trigger::Environment(env.clone()),
            Scope::Entity(e) => Trigger::EntityOnly(e.clone()),
        });
        Some(s)
    }

    /// SPEC P9: more auto-suppressed entities than the threshold suppress the environment;
    /// the suppression goes when the count no longer exceeds it.
    pub(super) fn reconcile_threshold(&mut self, env: &str, tx: &mut Tx) {
        let now = tx.now;
        let index = tx.index;
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
                    id: self.unused_suppression_id(format!("s-{index}-env")),
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
                tx,
            );
        } else if !exceeds {
            for id in existing {
                self.remove_suppression(&id, tx);
            }
        }
    }

    /// SPEC P8: every failed plan (commands and rollbacks included) suppresses its entity for
    /// the environment's duration; SPEC P9: then the environment threshold is reconciled.
    pub(super) fn suppress_after_failure(&mut self, entity: &str, plan_id: &str, tx: &mut Tx) {
        let now = tx.now;
        let index = tx.index;
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
        let id = self.unused_suppression_id(format!("s-{index}"));
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
            tx,
        );
        self.note(
            entity,
            "suppression",
            format!(
                "automatic suppression {id} until {}",
                format_time(now + duration)
            ),
            tx,
        );
        self.reconcile_threshold(&env, tx);
    }
}

//! Window overrides: time-boxed exceptions that open an environment's or entity's
//! maintenance windows.

use crate::command::CommandOutput;
use crate::error::CommandError;
use crate::settings::WindowOverride;
use crate::state::{State, Trigger};
use crate::suppression::Scope;
use crate::TimestampMs;

use super::{changed, check_text, not_found, Tx};

impl State {
    /// `AddWindowOverride`.
    pub(super) fn add_window_override(
        &mut self,
        scope: &Scope,
        start_ms: &TimestampMs,
        end_ms: &TimestampMs,
        reason: &str,
        actor: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        let index = tx.index;
        check_text("reason", reason, true)?;
        if end_ms <= start_ms {
            return Err(CommandError::invalid("end", "must be after start"));
        }
        if *end_ms <= now {
            return Err(CommandError::invalid("end", "is in the past"));
        }
        self.require_scope(scope)?;
        let o = WindowOverride {
            id: format!("o-{index}"),
            start_ms: *start_ms,
            end_ms: *end_ms,
            reason: reason.to_string(),
        };
        let id = o.id.clone();
        let live = self
            .overrides(scope)?
            .iter()
            .filter(|o| o.end_ms > now)
            .count();
        if live >= 32 {
            return Err(CommandError::invalid(
                "scope",
                "at most 32 window overrides",
            ));
        }
        self.change_overrides(scope, tx, |list| {
            list.retain(|o| o.end_ms > now);
            list.push(o);
        })?;
        self.touch_scope(scope, tx);
        self.audit_entry(actor, "window-override", scope.to_string(), reason, tx);
        Ok(changed(
            id.clone(),
            format!("window override {id} on {scope}"),
        ))
    }

    /// `RemoveWindowOverride`.
    pub(super) fn remove_window_override(
        &mut self,
        scope: &Scope,
        id: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        self.require_scope(scope)?;
        if !self.overrides(scope)?.iter().any(|o| o.id == *id) {
            return Err(not_found("window override", id));
        }
        self.change_overrides(scope, tx, |list| list.retain(|o| o.id != *id))?;
        self.touch_scope(scope, tx);
        Ok(changed(
            id.to_string(),
            format!("window override {id} removed"),
        ))
    }

    pub(super) fn overrides(&self, scope: &Scope) -> Result<&Vec<WindowOverride>, CommandError> {
        match scope {
            Scope::Environment(env) => self
                .environments
                .get(env)
                .map(|e| &e.window_overrides)
                .ok_or_else(|| not_found("environment", env)),
            Scope::Entity(id) => self
                .entities
                .get(id)
                .map(|e| &e.window_overrides)
                .ok_or_else(|| not_found("entity", id)),
        }
    }

    /// Runs `change` on the scope's overrides (the change is recorded).
    pub(super) fn change_overrides(
        &mut self,
        scope: &Scope,
        tx: &mut Tx,
        change: impl FnOnce(&mut Vec<WindowOverride>),
    ) -> Result<(), CommandError> {
        match scope {
            Scope::Environment(env) => {
                let e = self
                    .environments
                    .get_mut(env, &mut tx.changed)
                    .ok_or_else(|| not_found("environment", env))?;
                change(&mut e.window_overrides);
            }
            Scope::Entity(id) => {
                let mut e = self
                    .entities
                    .get_mut(id, &mut tx.changed)
                    .ok_or_else(|| not_found("entity", id))?;
                change(&mut e.window_overrides);
            }
        }
        Ok(())
    }

    pub(super) fn touch_scope(&self, scope: &Scope, tx: &mut Tx) {
        tx.triggers.push(match scope {
            Scope::Environment(env) => Trigger::Environment(env.clone()),
            Scope::Entity(id) => Trigger::EntityOnly(id.clone()),
        });
    }
}

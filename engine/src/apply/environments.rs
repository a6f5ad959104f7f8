//! Environments: creating and deleting them, their settings and artifact registries.

use crate::artifact::{ArtifactRegistry, HubAccess, InvalidRegistry, RegistryTls};
use crate::command::{CommandOutput, EnvironmentSettingsPatch, WindowChange};
use crate::environment::Environment;
use crate::error::CommandError;
use crate::name::validate_name;
use crate::state::{State, Trigger};
use crate::suppression::Scope;

use super::{changed, not_found, parse_window, Tx};

/// The fields of `SetRegistry`.
pub(super) struct RegistryChange<'a> {
    pub(super) environment: &'a str,
    pub(super) name: &'a str,
    pub(super) url: &'a str,
    pub(super) hub_access: &'a str,
    pub(super) ca_pem: &'a Option<String>,
    pub(super) insecure_skip_verify: bool,
}

impl State {
    /// `CreateEnvironment`: a new, empty environment.
    pub(super) fn create_environment(
        &mut self,
        name: &str,
        description: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        validate_name("name", name)?;
        if description.len() > 1024 {
            return Err(CommandError::invalid(
                "description",
                "longer than 1024 bytes",
            ));
        }
        if self.environments.contains_key(name) {
            return Err(CommandError::AlreadyExists {
                kind: "environment".into(),
                name: name.to_string(),
            });
        }
        self.environments.put(
            Environment {
                name: name.to_string(),
                description: description.to_string(),
                created_at_ms: now,
                settings: Default::default(),
                window_overrides: Vec::new(),
            },
            &mut tx.changed,
        );
        Ok(CommandOutput::EnvironmentCreated(name.to_string()))
    }

    /// `DeleteEnvironment`: only an environment without entities; its suppressions go with it.
    pub(super) fn delete_environment(
        &mut self,
        name: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        if !self.environments.contains_key(name) {
            return Err(not_found("environment", name));
        }
        let count = self.entities_of(name).count();
        if count > 0 {
            return Err(CommandError::FailedPrecondition(format!(
                "environment {name:?} still has {count} entities; delete them first"
            )));
        }
        // Its metric templates go with it, unless a canary elsewhere uses one.
        self.delete_environment_templates(name, tx)?;
        // And its alert providers, likewise.
        self.delete_environment_alert_providers(name, tx)?;
        self.environments.remove(name, &mut tx.changed);
        // Its labels go with it (a later environment of the same name starts unlabelled).
        self.environment_labels.remove(name, &mut tx.changed);
        // And its approval policy.
        let policy = crate::approval::PolicyScope::Environment(name.to_string());
        self.approval_policies
            .remove(&policy.key_name(), &mut tx.changed);
        let scope = Scope::Environment(name.to_string());
        let ids = self
            .suppressions
            .index()
            .by_scope
            .get(&scope)
            .cloned()
            .unwrap_or_default();
        for id in ids {
            self.suppressions.remove(&id, &mut tx.changed);
        }
        Ok(CommandOutput::EnvironmentDeleted(name.to_string()))
    }

    /// `SetEnvironmentSettings`: a partial update; a new suppression threshold takes effect at once.
    pub(super) fn set_environment_settings(
        &mut self,
        environment: &str,
        patch: &EnvironmentSettingsPatch,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let out = self.patch_environment_settings(environment, patch, tx)?;
        // SPEC P9: a new threshold is compared with the current count at once.
        if patch.autosuppression_threshold.is_some() {
            self.reconcile_threshold(environment, tx);
        }
        Ok(out)
    }

    fn patch_environment_settings(
        &mut self,
        environment: &str,
        patch: &EnvironmentSettingsPatch,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let window = match &patch.maintenance_window {
            Some(WindowChange::Set(w)) => Some(Some(parse_window("maintenance_window", w)?)),
            Some(WindowChange::Remove) => Some(None),
            None => None,
        };
        if let Some(ms) = patch.auto_suppression_ms {
            if !(60_000..=30 * 24 * 3_600_000).contains(&ms) {
                return Err(CommandError::invalid(
                    "auto_suppression_ms",
                    "must be between 1 minute and 30 days",
                ));
            }
        }
        let env = self
            .environments
            .get_mut(environment, &mut tx.changed)
            .ok_or_else(|| not_found("environment", environment))?;
        let s = &mut env.settings;
        if let Some(w) = window {
            s.maintenance_window = w;
        }
        if let Some(t) = patch.autosuppression_threshold {
            s.autosuppression_threshold = t;
        }
        if let Some(ms) = patch.auto_suppression_ms {
            s.auto_suppression_ms = ms;
        }
        if let Some(b) = patch.override_product_maintenance_windows {
            s.override_product_maintenance_windows = b;
        }
        if let Some(b) = patch.require_windows_for_recall_roll_offs {
            s.require_windows_for_recall_roll_offs = b;
        }
        tx.triggers
            .push(Trigger::Environment(environment.to_string()));
        Ok(changed(
            environment,
            format!("settings of {environment} updated"),
        ))
    }

    /// `SetRegistry`: adds or replaces one artifact registry of the environment.
    pub(super) fn set_registry(
        &mut self,
        command: RegistryChange<'_>,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let RegistryChange {
            environment,
            name,
            url,
            hub_access,
            ca_pem,
            insecure_skip_verify,
        } = command;
        validate_name("name", name)?;
        let access = HubAccess::parse(hub_access)
            .map_err(|e| CommandError::invalid("hub_access", e.to_string()))?;
        let invalid = |e: InvalidRegistry| CommandError::invalid(e.field, e.reason);
        let tls =
            RegistryTls::from_input(ca_pem.as_deref(), insecure_skip_verify).map_err(invalid)?;
        let registry = ArtifactRegistry::with_tls(name, url, access, tls).map_err(invalid)?;
        let registries = &self
            .environments
            .get(environment)
            .ok_or_else(|| not_found("environment", environment))?
            .settings
            .registries;
        let existing = registries.iter().position(|r| r.name == *name);
        if existing.is_none() && registries.len() >= 32 {
            return Err(CommandError::invalid("name", "at most 32 registries"));
        }
        // The environment exists (checked above).
        let Some(env) = self.environments.get_mut(environment, &mut tx.changed) else {
            unreachable!("environment {environment} checked above");
        };
        match existing {
            Some(i) => env.settings.registries[i] = registry,
            None => env.settings.registries.push(registry),
        }
        tx.triggers
            .push(Trigger::Environment(environment.to_string()));
        Ok(changed(
            name.to_string(),
            format!("registry {name} set on {environment}"),
        ))
    }

    /// `RemoveRegistry`.
    pub(super) fn remove_registry(
        &mut self,
        environment: &str,
        name: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let env = self
            .environments
            .get(environment)
            .ok_or_else(|| not_found("environment", environment))?;
        if !env.settings.registries.iter().any(|r| r.name == *name) {
            return Err(not_found("registry", name));
        }
        // The environment exists (checked above).
        let Some(env) = self.environments.get_mut(environment, &mut tx.changed) else {
            unreachable!("environment {environment} checked above");
        };
        env.settings.registries.retain(|r| r.name != *name);
        tx.triggers
            .push(Trigger::Environment(environment.to_string()));
        Ok(changed(
            name.to_string(),
            format!("registry {name} removed"),
        ))
    }
}

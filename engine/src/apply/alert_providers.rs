//! AlertProviders (issue 52 item 6): applying one to an environment, and deleting one no
//! canary references. A canary's `alerts[].providerRef` must name an existing provider from
//! feature level 2 on ([`State::check_alert_providers`]); before it, a canary applied as it
//! was (its alerts to a missing provider are logged by the leader), so the log's older
//! entries apply as they did.

use crate::alert_provider::AlertProvider;
use crate::canary::{parse_alert_provider, CanaryError, CanaryErrors, CanarySpec};
use crate::command::CommandOutput;
use crate::error::CommandError;
use crate::feature_level::LEVEL_2;
use crate::state::State;

use super::metric_templates::resource_environment;
use super::{not_found, Tx};

impl State {
    /// `ApplyAlertProvider`: creates or updates a provider. Invalid resources are refused
    /// with every problem's path.
    pub(super) fn apply_alert_provider(
        &mut self,
        environment: Option<&str>,
        yaml: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let parsed = parse_alert_provider(yaml)
            .map_err(|errors| CommandError::invalid("alert provider", format!("\n{errors}")))?;
        let env = resource_environment(
            parsed.namespace.as_deref(),
            environment,
            "required: the environment of the alert provider",
        )?;
        if !self.environments.contains_key(&env) {
            return Err(not_found("environment", &env));
        }
        let id = AlertProvider::id_of(&env, &parsed.name);
        let ignored: Vec<String> = parsed.ignored.iter().map(ToString::to_string).collect();
        let with_ignored = |summary: String| {
            if ignored.is_empty() {
                summary
            } else {
                format!("{summary}; {}", ignored.join("; "))
            }
        };
        if self
            .alert_providers
            .get(&id)
            .is_some_and(|p| p.yaml == yaml)
        {
            return Ok(CommandOutput::Changed {
                id,
                summary: with_ignored("alert provider unchanged".into()),
            });
        }
        let now = tx.now;
        let summary = match self.alert_providers.get_mut(&id, &mut tx.changed) {
            Some(p) => {
                p.spec = parsed.spec;
                p.yaml = yaml.to_string();
                p.updated_ms = now;
                format!("alert provider {id} updated")
            }
            None => {
                self.alert_providers.put(
                    AlertProvider {
                        id: id.clone(),
                        environment: env,
                        name: parsed.name,
                        spec: parsed.spec,
                        yaml: yaml.to_string(),
                        created_ms: now,
                        updated_ms: now,
                    },
                    &mut tx.changed,
                );
                format!("alert provider {id} created")
            }
        };
        Ok(CommandOutput::Changed {
            id,
            summary: with_ignored(summary),
        })
    }

    /// `DeleteAlertProvider`: refused while a canary references the provider.
    pub(super) fn delete_alert_provider(
        &mut self,
        id: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        if !self.alert_providers.contains_key(id) {
            return Err(not_found("alert provider", id));
        }
        if let Some(users) = self.alert_provider_users(|p| p == id) {
            return Err(CommandError::FailedPrecondition(format!(
                "alert provider {id} is used by {users}; change or delete them first"
            )));
        }
        self.alert_providers.remove(id, &mut tx.changed);
        Ok(CommandOutput::Changed {
            id: id.to_string(),
            summary: format!("alert provider {id} deleted"),
        })
    }

    /// The canaries whose alerts reference a provider `is_used` picks, each with the paths of
    /// those alerts (`canary test/podinfo (spec.analysis.alerts[0])`); `None` when none does.
    fn alert_provider_users(&self, is_used: impl Fn(&str) -> bool) -> Option<String> {
        let mut users = Vec::new();
        for c in self.canaries.values() {
            let paths: Vec<String> = c
                .spec
                .alert_providers()
                .filter(|(_, p)| is_used(p))
                .map(|(i, _)| format!("spec.analysis.alerts[{i}]"))
                .collect();
            if !paths.is_empty() {
                users.push(format!("canary {} ({})", c.id, paths.join(", ")));
            }
        }
        (!users.is_empty()).then(|| users.join(", "))
    }

    /// Removes the alert providers of environment `name` (being deleted); refused while a
    /// canary references one of them.
    pub(super) fn delete_environment_alert_providers(
        &mut self,
        name: &str,
        tx: &mut Tx,
    ) -> Result<(), CommandError> {
        let ids: Vec<String> = self
            .alert_providers
            .values()
            .filter(|p| p.environment == name)
            .map(|p| p.id.clone())
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        if let Some(users) = self.alert_provider_users(|p| ids.iter().any(|id| id == p)) {
            return Err(CommandError::FailedPrecondition(format!(
                "environment {name:?} has alert providers used by {users}; change or delete \
                 them first"
            )));
        }
        for id in ids {
            self.alert_providers.remove(&id, &mut tx.changed);
        }
        Ok(())
    }

    /// From feature level 2 on, every `alerts[].providerRef` of a canary being applied names
    /// an existing provider; the ones that do not are refused with their paths
    /// (`spec.analysis.alerts[0].providerRef: alert provider on-call not found in test`).
    pub(super) fn check_alert_providers(&self, spec: &CanarySpec) -> Result<(), CommandError> {
        if self.cluster_level() < LEVEL_2 {
            return Ok(());
        }
        let errors: Vec<CanaryError> = spec
            .alert_providers()
            .filter(|(_, id)| !self.alert_providers.contains_key(id))
            .map(|(i, id)| {
                let (env, name) = id.split_once('/').unwrap_or(("", id.as_str()));
                CanaryError::new(
                    format!("spec.analysis.alerts[{i}].providerRef"),
                    format!("alert provider {name} not found in {env}"),
                )
            })
            .collect();
        match CanaryErrors::from_vec(errors) {
            None => Ok(()),
            Some(errors) => Err(CommandError::invalid("canary", format!("\n{errors}"))),
        }
    }
}

//! Entities: creating them, their settings, config overrides and secrets.

use crate::command::{CommandOutput, EntitySettingsPatch, WindowChange};
use crate::entity::{
    Entity, EntityId, EntityIdentity, EntityKind, SecretValue, DEFAULT_RELEASE_CHANNEL,
    MAX_ENTITY_ID_LEN,
};
use crate::error::CommandError;
use crate::name::{validate_name, validate_product_id};
use crate::state::{State, Trigger};
use crate::yaml_error::YamlShape;

use super::{changed, not_found, parse_version, parse_window, Tx};

/// Largest config overrides text per version.
pub const MAX_CONFIG_BYTES: usize = 64 * 1024;
/// Largest secret value.
pub const MAX_SECRET_BYTES: usize = 16 * 1024;
/// Most secrets per entity.
pub const MAX_SECRETS: usize = 128;

/// The fields of `CreateEntity`.
pub(super) struct NewEntity<'a> {
    pub(super) environment: &'a str,
    pub(super) kind: EntityKind,
    pub(super) name: &'a str,
    pub(super) product_id: &'a str,
    pub(super) k8s_namespace: &'a Option<String>,
    pub(super) account_id: &'a Option<String>,
    pub(super) release_channel: &'a Option<String>,
}

impl State {
    /// `CreateEntity`: a new entity in an existing environment, indexed by product and dependency group.
    pub(super) fn create_entity(
        &mut self,
        command: NewEntity<'_>,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let NewEntity {
            environment,
            kind,
            name,
            product_id,
            k8s_namespace,
            account_id,
            release_channel,
        } = command;
        let now = tx.now;
        validate_name("environment", environment)?;
        validate_name("name", name)?;
        validate_product_id("product_id", product_id)?;
        let k8s_namespace = non_empty(k8s_namespace);
        let account_id = non_empty(account_id);
        match kind {
            EntityKind::HelmChart => match &k8s_namespace {
                None => {
                    return Err(CommandError::invalid(
                        "k8s_namespace",
                        "required for a helmChart entity",
                    ))
                }
                Some(ns) => validate_name("k8s_namespace", ns)?,
            },
            EntityKind::TerraformModule => {
                if k8s_namespace.is_some() {
                    return Err(CommandError::invalid(
                        "k8s_namespace",
                        "only helmChart entities have a namespace",
                    ));
                }
            }
        }
        if account_id.is_some() && kind != EntityKind::TerraformModule {
            return Err(CommandError::invalid(
                "account_id",
                "only terraformModule entities have an account",
            ));
        }
        let release_channel =
            non_empty(release_channel).unwrap_or_else(|| DEFAULT_RELEASE_CHANNEL.to_string());
        self.check_channel("release_channel", &release_channel)?;
        if !self.environments.contains_key(environment) {
            return Err(not_found("environment", environment));
        }
        let id = EntityId::new(environment, kind, name);
        if id.0.len() >= MAX_ENTITY_ID_LEN {
            return Err(CommandError::invalid(
                "name",
                format!("entity id {id} must be shorter than {MAX_ENTITY_ID_LEN}"),
            ));
        }
        if self.entities.contains_key(&id.0) {
            return Err(CommandError::AlreadyExists {
                kind: "entity".into(),
                name: id.0,
            });
        }
        let entity = Entity::new(
            EntityIdentity {
                environment: environment.to_string(),
                kind,
                name: name.to_string(),
                product_id: product_id.to_string(),
                k8s_namespace: k8s_namespace.clone(),
                account_id: account_id.clone(),
                release_channel,
            },
            now,
        );
        debug_assert_eq!(entity.id, id);
        self.entities.put(entity, &mut tx.changed);
        self.start_never_healthy(&id.0, tx);
        tx.triggers.push(Trigger::Entity(id.0.clone()));
        Ok(CommandOutput::EntityCreated(id.0))
    }

    pub(super) fn set_entity_settings(
        &mut self,
        id: &str,
        patch: &EntitySettingsPatch,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        self.require_entity(id)?;
        if let Some(channel) = &patch.release_channel {
            self.check_channel("release_channel", channel)?;
        }
        if let Some(groups) = &patch.dependency_groups {
            if groups.is_empty() {
                return Err(CommandError::invalid(
                    "dependency_groups",
                    "at least one group",
                ));
            }
            for g in groups {
                validate_name("dependency_groups", g)?;
            }
        }
        if let Some(ignored) = &patch.ignored_dependencies {
            for p in ignored {
                validate_product_id("ignored_dependencies", p)?;
            }
        }
        let window = match &patch.maintenance_window {
            Some(WindowChange::Set(w)) => Some(Some(parse_window("maintenance_window", w)?)),
            Some(WindowChange::Remove) => Some(None),
            None => None,
        };
        let mut e = self
            .entities
            .get_mut(id, &mut tx.changed)
            .ok_or_else(|| not_found("entity", id))?;
        let mut neighbours = false;
        if let Some(channel) = &patch.release_channel {
            e.release_channel = channel.clone();
        }
        if let Some(groups) = &patch.dependency_groups {
            e.dependency_groups = groups.iter().cloned().collect();
            neighbours = true;
        }
        if let Some(ignored) = &patch.ignored_dependencies {
            e.ignored_dependencies = ignored.iter().cloned().collect();
            neighbours = true;
        }
        if let Some(w) = window {
            e.maintenance_window = w;
        }
        if let Some(m) = patch.marked_for_uninstall {
            e.marked_for_uninstall = m;
        }
        drop(e);
        if patch.dependency_groups.is_some() {
            self.reindex_dependencies(id);
        }
        tx.triggers.push(if neighbours {
            Trigger::Entity(id.to_string())
        } else {
            Trigger::EntityOnly(id.to_string())
        });
        Ok(changed(id, format!("settings of {id} updated")))
    }

    /// `SetConfigOverrides`: sets or removes the overrides of one version.
    pub(super) fn set_config_overrides(
        &mut self,
        entity: &str,
        version: &str,
        config: &Option<String>,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let v = parse_version("version", version)?;
        if let Some(text) = config {
            if text.len() > MAX_CONFIG_BYTES {
                return Err(CommandError::invalid(
                    "config",
                    format!("{} bytes, at most {MAX_CONFIG_BYTES}", text.len()),
                ));
            }
            validate_config_yaml(text)?;
        }
        self.require_entity(entity)?;
        self.check_module_config_edit(entity, &v, config.as_ref())?;
        let e = self.require_entity(entity)?;
        if config.is_none() && !e.config_overrides.contains_key(&v) {
            return Err(not_found("config overrides for version", version));
        }
        // The entity exists (checked above).
        let Some(mut e) = self.entities.get_mut(entity, &mut tx.changed) else {
            unreachable!("entity {entity} checked above");
        };
        match config {
            Some(text) => e.config_overrides.insert(v.clone(), text.clone()),
            None => e.config_overrides.remove(&v),
        };
        tx.triggers.push(Trigger::EntityOnly(entity.to_string()));
        let verb = if config.is_some() { "set" } else { "removed" };
        Ok(changed(
            entity.to_string(),
            format!("config overrides from {v} {verb}"),
        ))
    }

    /// `SetSecret` and `PutSecret`: sets or removes one secret; every change bumps the
    /// secrets revision, and under `write` so does a set to the value already stored.
    pub(super) fn set_secret(
        &mut self,
        entity: &str,
        name: &str,
        value: &Option<SecretValue>,
        write: SecretWrite,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        if name.is_empty()
            || name.len() > 128
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(CommandError::invalid(
                "name",
                format!("{name:?}: 1-128 of A-Z, a-z, 0-9, '-', '_', '.'"),
            ));
        }
        if let Some(v) = value {
            if v.0.len() > MAX_SECRET_BYTES {
                return Err(CommandError::invalid(
                    "value",
                    format!("longer than {MAX_SECRET_BYTES} bytes"),
                ));
            }
        }
        let e = self.require_entity(entity)?;
        match value {
            Some(v) => {
                if !e.secrets.contains_key(name) && e.secrets.len() >= MAX_SECRETS {
                    return Err(CommandError::invalid(
                        "name",
                        format!("at most {MAX_SECRETS} secrets"),
                    ));
                }
                if write == SecretWrite::UnchangedIfEqual && e.secrets.get(name) == Some(v) {
                    return Ok(changed(
                        entity.to_string(),
                        format!("secret {name} unchanged"),
                    ));
                }
            }
            None => {
                if !e.secrets.contains_key(name) {
                    return Err(not_found("secret", name));
                }
            }
        }
        // The entity exists (checked above).
        let Some(mut e) = self.entities.get_mut(entity, &mut tx.changed) else {
            unreachable!("entity {entity} checked above");
        };
        match value {
            Some(v) => e.secrets.insert(name.to_string(), v.clone()),
            None => e.secrets.remove(name),
        };
        e.secrets_revision += 1;
        let rev = e.secrets_revision;
        tx.triggers.push(Trigger::EntityOnly(entity.to_string()));
        Ok(changed(
            entity.to_string(),
            format!("secret {name} set (revision {rev})"),
        ))
    }
}

/// What setting a secret to the value it already has does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SecretWrite {
    /// Nothing, answered "unchanged" (`SetSecret`, as older releases applied it).
    UnchangedIfEqual,
    /// What any other value does: a new revision, the same answer (`PutSecret`).
    AlwaysNewRevision,
}

/// Config overrides must be a YAML mapping (or empty).
fn validate_config_yaml(text: &str) -> Result<(), CommandError> {
    if text.trim().is_empty() {
        return Ok(());
    }
    let checked = crate::yaml_budget::check(crate::yaml_budget::Document::ConfigOverrides, text)
        .map_err(|e| CommandError::invalid("config", refusal_reason(&e)))?;
    // The shape only: no `Value` is built.
    match checked.shape() {
        Ok(YamlShape::Mapping) | Ok(YamlShape::Null) => Ok(()),
        Ok(_) => Err(CommandError::invalid("config", "must be a YAML mapping")),
        Err(e) => Err(CommandError::invalid(
            "config",
            format!("not valid YAML: {e}"),
        )),
    }
}

/// What a refused config text is told: a budget refusal as it is, a syntax error as before.
fn refusal_reason(refusal: &crate::yaml_budget::YamlRefusal) -> String {
    match refusal {
        crate::yaml_budget::YamlRefusal::Budget(e) => e.to_string(),
        crate::yaml_budget::YamlRefusal::Syntax(e) => format!("not valid YAML: {e}"),
    }
}

pub(crate) fn non_empty(value: &Option<String>) -> Option<String> {
    value.as_ref().filter(|v| !v.is_empty()).cloned()
}

//! Command handlers for settings: environments, entities, products, releases, channels,
//! recalls and window overrides. Each validates everything before it changes anything.

use semver::Version;

use crate::artifact::{
    validate_artifact_uri, ArtifactRegistry, HubAccess, InvalidRegistry, RegistryTls,
};
use crate::command::{
    Command, CommandOutput, EntitySettingsPatch, EnvironmentSettingsPatch, WindowChange, WindowSpec,
};
use crate::error::CommandError;
use crate::name::{validate_name, validate_product_id};
use crate::product::{is_builtin_channel, Channel, Product, Recall, Release};
use crate::record::{AuditEntry, RecordKey};
use crate::release::parse_manifest;
use crate::settings::WindowOverride;
use crate::state::{Effects, State, Trigger};
use crate::suppression::Scope;
use crate::window::MaintenanceWindow;
use crate::TimestampMs;

/// Largest config overrides text per version.
pub const MAX_CONFIG_BYTES: usize = 64 * 1024;
/// Largest secret value.
pub const MAX_SECRET_BYTES: usize = 16 * 1024;
/// Most secrets per entity.
pub const MAX_SECRETS: usize = 128;
/// Longest free-text reason or description.
pub const MAX_TEXT: usize = 1024;

pub(crate) fn parse_window(
    field: &str,
    spec: &WindowSpec,
) -> Result<MaintenanceWindow, CommandError> {
    MaintenanceWindow::parse(&spec.spec, &spec.time_zone)
        .map_err(|e| CommandError::invalid(field, e.to_string()))
}

pub(crate) fn parse_version(field: &str, text: &str) -> Result<Version, CommandError> {
    Version::parse(text.trim()).map_err(|e| {
        CommandError::invalid(field, format!("{text:?} is not a semantic version: {e}"))
    })
}

pub(crate) fn check_text(field: &str, text: &str, required: bool) -> Result<(), CommandError> {
    if required && text.trim().is_empty() {
        return Err(CommandError::invalid(field, "is required"));
    }
    if text.len() > MAX_TEXT {
        return Err(CommandError::invalid(
            field,
            format!("longer than {MAX_TEXT} bytes"),
        ));
    }
    Ok(())
}

fn not_found(kind: &str, name: &str) -> CommandError {
    CommandError::NotFound {
        kind: kind.into(),
        name: name.into(),
    }
}

fn changed(id: impl Into<String>, summary: impl Into<String>) -> CommandOutput {
    CommandOutput::Changed {
        id: id.into(),
        summary: summary.into(),
    }
}

/// Validates a custom channel name: upper-case letters, digits and `_`, 1–64 characters.
fn validate_channel_name(name: &str) -> Result<(), CommandError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_uppercase())
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(CommandError::invalid(
            "name",
            format!("{name:?} must be 1-64 of A-Z, 0-9 and '_', starting with a letter"),
        ))
    }
}

impl State {
    pub(crate) fn require_entity(&self, id: &str) -> Result<&crate::entity::Entity, CommandError> {
        self.entities.get(id).ok_or_else(|| not_found("entity", id))
    }

    pub(crate) fn require_scope(&self, scope: &Scope) -> Result<(), CommandError> {
        match scope {
            Scope::Environment(env) => self
                .environments
                .get(env)
                .map(|_| ())
                .ok_or_else(|| not_found("environment", env)),
            Scope::Entity(id) => self.require_entity(id).map(|_| ()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn audit_entry(
        &mut self,
        index: u64,
        now: TimestampMs,
        actor: &str,
        action: &str,
        target: String,
        reason: &str,
        fx: &mut Effects,
    ) {
        let key = AuditEntry::key_name(index);
        self.audit.insert(
            key.clone(),
            AuditEntry {
                index,
                time_ms: now,
                actor: actor.to_string(),
                action: action.to_string(),
                target,
                reason: reason.to_string(),
            },
        );
        fx.changed.push(RecordKey::Audit(key));
    }

    pub(crate) fn execute_orchestration(
        &mut self,
        command: &Command,
        now: TimestampMs,
        index: u64,
        fx: &mut Effects,
    ) -> Result<CommandOutput, CommandError> {
        match command {
            Command::SetEnvironmentSettings { environment, patch } => {
                let out = self.set_environment_settings(environment, patch, fx)?;
                // SPEC P9: a new threshold is compared with the current count at once.
                if patch.autosuppression_threshold.is_some() {
                    self.reconcile_threshold(environment, now, index, fx);
                }
                Ok(out)
            }
            Command::SetRegistry {
                environment,
                name,
                url,
                hub_access,
                ca_pem,
                insecure_skip_verify,
            } => {
                validate_name("name", name)?;
                let access = HubAccess::parse(hub_access)
                    .map_err(|e| CommandError::invalid("hub_access", e))?;
                let invalid = |e: InvalidRegistry| CommandError::invalid(e.field, e.reason);
                let tls = RegistryTls::from_input(ca_pem.as_deref(), *insecure_skip_verify)
                    .map_err(invalid)?;
                let registry =
                    ArtifactRegistry::with_tls(name, url, access, tls).map_err(invalid)?;
                let env = self
                    .environments
                    .get_mut(environment)
                    .ok_or_else(|| not_found("environment", environment))?;
                match env.settings.registries.iter_mut().find(|r| r.name == *name) {
                    Some(existing) => *existing = registry,
                    None => {
                        if env.settings.registries.len() >= 32 {
                            return Err(CommandError::invalid("name", "at most 32 registries"));
                        }
                        env.settings.registries.push(registry)
                    }
                }
                fx.changed.push(RecordKey::Environment(environment.clone()));
                fx.triggers.push(Trigger::Environment(environment.clone()));
                Ok(changed(
                    name.clone(),
                    format!("registry {name} set on {environment}"),
                ))
            }
            Command::RemoveRegistry { environment, name } => {
                let env = self
                    .environments
                    .get_mut(environment)
                    .ok_or_else(|| not_found("environment", environment))?;
                let before = env.settings.registries.len();
                env.settings.registries.retain(|r| r.name != *name);
                if env.settings.registries.len() == before {
                    return Err(not_found("registry", name));
                }
                fx.changed.push(RecordKey::Environment(environment.clone()));
                fx.triggers.push(Trigger::Environment(environment.clone()));
                Ok(changed(name.clone(), format!("registry {name} removed")))
            }
            Command::SetEntitySettings { entity, patch } => {
                self.set_entity_settings(entity, patch, fx)
            }
            Command::SetConfigOverrides {
                entity,
                version,
                config,
            } => {
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
                let e = self
                    .entities
                    .get_mut(entity)
                    .ok_or_else(|| not_found("entity", entity))?;
                match config {
                    Some(text) => {
                        e.config_overrides.insert(v.clone(), text.clone());
                    }
                    None => {
                        if e.config_overrides.remove(&v).is_none() {
                            return Err(not_found("config overrides for version", version));
                        }
                    }
                }
                fx.changed.push(RecordKey::Entity(entity.clone()));
                fx.triggers.push(Trigger::EntityOnly(entity.clone()));
                let verb = if config.is_some() { "set" } else { "removed" };
                Ok(changed(
                    entity.clone(),
                    format!("config overrides from {v} {verb}"),
                ))
            }
            Command::SetSecret {
                entity,
                name,
                value,
            } => {
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
                let e = self
                    .entities
                    .get_mut(entity)
                    .ok_or_else(|| not_found("entity", entity))?;
                match value {
                    Some(v) => {
                        if !e.secrets.contains_key(name) && e.secrets.len() >= MAX_SECRETS {
                            return Err(CommandError::invalid(
                                "name",
                                format!("at most {MAX_SECRETS} secrets"),
                            ));
                        }
                        if e.secrets.get(name) == Some(v) {
                            return Ok(changed(entity.clone(), format!("secret {name} unchanged")));
                        }
                        e.secrets.insert(name.clone(), v.clone());
                    }
                    None => {
                        if e.secrets.remove(name).is_none() {
                            return Err(not_found("secret", name));
                        }
                    }
                }
                e.secrets_revision += 1;
                let rev = e.secrets_revision;
                fx.changed.push(RecordKey::Entity(entity.clone()));
                fx.triggers.push(Trigger::EntityOnly(entity.clone()));
                Ok(changed(
                    entity.clone(),
                    format!("secret {name} set (revision {rev})"),
                ))
            }
            Command::CreateProduct {
                product_id,
                description,
            } => {
                validate_product_id("product_id", product_id)?;
                check_text("description", description, false)?;
                if self.products.contains_key(product_id) {
                    return Err(CommandError::AlreadyExists {
                        kind: "product".into(),
                        name: product_id.clone(),
                    });
                }
                self.products.insert(
                    product_id.clone(),
                    Product {
                        id: product_id.clone(),
                        description: description.clone(),
                        maintenance_window: None,
                        created_at_ms: now,
                    },
                );
                fx.changed.push(RecordKey::Product(product_id.clone()));
                Ok(changed(
                    product_id.clone(),
                    format!("product {product_id} created"),
                ))
            }
            Command::SetProductWindow { product_id, window } => {
                let parsed = window
                    .as_ref()
                    .map(|w| parse_window("window", w))
                    .transpose()?;
                let p = self
                    .products
                    .get_mut(product_id)
                    .ok_or_else(|| not_found("product", product_id))?;
                let verb = if parsed.is_some() { "set" } else { "removed" };
                p.maintenance_window = parsed;
                fx.changed.push(RecordKey::Product(product_id.clone()));
                fx.triggers.push(Trigger::Product(product_id.clone()));
                Ok(changed(
                    product_id.clone(),
                    format!("product window {verb}"),
                ))
            }
            Command::PublishRelease { manifest } => {
                let m = parse_manifest(manifest)
                    .map_err(|e| CommandError::invalid("manifest", e.to_string()))?;
                for (i, a) in m.artifacts.iter().enumerate() {
                    validate_artifact_uri(&a.uri).map_err(|e| {
                        CommandError::invalid(&format!("manifest: artifacts[{i}].uri"), e)
                    })?;
                }
                if !self.products.contains_key(&m.product_id) {
                    return Err(CommandError::NotFound {
                        kind: "product".into(),
                        name: format!("{} (create it first: hubctl product create)", m.product_id),
                    });
                }
                let key = Release::key_name(&m.product_id, &m.version);
                if let Some(existing) = self.releases.get(&key) {
                    if existing.artifacts == m.artifacts && existing.dependencies == m.dependencies
                    {
                        return Ok(changed(key, "release already published (identical)"));
                    }
                    return Err(CommandError::AlreadyExists {
                        kind: "release (releases are immutable)".into(),
                        name: key,
                    });
                }
                self.releases.insert(
                    key.clone(),
                    Release {
                        product_id: m.product_id.clone(),
                        version: m.version.clone(),
                        artifacts: m.artifacts,
                        dependencies: m.dependencies,
                        custom_channels: Default::default(),
                        published_at_ms: now,
                    },
                );
                self.idx
                    .release_versions
                    .entry(m.product_id.clone())
                    .or_default()
                    .insert(m.version.clone());
                // Entities already reporting this version now have dependency edges.
                let ids: Vec<String> = self
                    .entities
                    .values()
                    .filter(|e| {
                        e.product_id == m.product_id
                            && e.reported.version.as_ref() == Some(&m.version)
                    })
                    .map(|e| e.id.0.clone())
                    .collect();
                for id in ids {
                    self.reindex_dependencies(&id);
                }
                fx.changed.push(RecordKey::Release(key.clone()));
                fx.triggers.push(Trigger::Product(m.product_id.clone()));
                Ok(changed(key.clone(), format!("release {key} published")))
            }
            Command::CreateChannel { name, description } => {
                validate_channel_name(name)?;
                check_text("description", description, false)?;
                if is_builtin_channel(name) || self.channels.contains_key(name) {
                    return Err(CommandError::AlreadyExists {
                        kind: "channel".into(),
                        name: name.clone(),
                    });
                }
                self.channels.insert(
                    name.clone(),
                    Channel {
                        name: name.clone(),
                        description: description.clone(),
                        created_at_ms: now,
                    },
                );
                fx.changed.push(RecordKey::Channel(name.clone()));
                Ok(changed(name.clone(), format!("channel {name} created")))
            }
            Command::SetReleaseChannel {
                channel,
                product_id,
                version,
                member,
            } => {
                if is_builtin_channel(channel) {
                    return Err(CommandError::invalid(
                        "channel",
                        format!("{channel} is built in: its releases follow from their version"),
                    ));
                }
                if !self.channels.contains_key(channel) {
                    return Err(not_found("channel", channel));
                }
                let v = parse_version("version", version)?;
                if !self.products.contains_key(product_id) {
                    return Err(not_found("product", product_id));
                }
                let key = Release::key_name(product_id, &v);
                let r = self
                    .releases
                    .get_mut(&key)
                    .ok_or_else(|| not_found("release", &key))?;
                let did = if *member {
                    r.custom_channels.insert(channel.clone())
                } else {
                    r.custom_channels.remove(channel)
                };
                if !did {
                    let state = if *member { "already in" } else { "not in" };
                    return Err(CommandError::FailedPrecondition(format!(
                        "release {key} is {state} channel {channel}"
                    )));
                }
                fx.changed.push(RecordKey::Release(key.clone()));
                fx.triggers.push(Trigger::Product(product_id.clone()));
                let verb = if *member { "added to" } else { "removed from" };
                Ok(changed(key.clone(), format!("{key} {verb} {channel}")))
            }
            Command::RecallReleases {
                product_id,
                from,
                to,
                reason,
            } => {
                let from = parse_version("from", from)?;
                let to = parse_version("to", to)?;
                if to < from {
                    return Err(CommandError::invalid(
                        "to",
                        format!("{to} is below from {from}"),
                    ));
                }
                check_text("reason", reason, true)?;
                if !self.products.contains_key(product_id) {
                    return Err(not_found("product", product_id));
                }
                let id = format!("r-{index}");
                let recall = Recall {
                    id: id.clone(),
                    product_id: product_id.clone(),
                    from,
                    to,
                    reason: reason.clone(),
                    created_at_ms: now,
                };
                let summary = format!("{product_id} {} recalled", recall.range_text());
                self.idx
                    .recalls_by_product
                    .entry(product_id.clone())
                    .or_default()
                    .insert(id.clone());
                self.recalls.insert(id.clone(), recall);
                fx.changed.push(RecordKey::Recall(id.clone()));
                fx.triggers.push(Trigger::Product(product_id.clone()));
                Ok(changed(id, summary))
            }
            Command::DeleteRecall { id } => {
                let recall = self
                    .recalls
                    .remove(id)
                    .ok_or_else(|| not_found("recall", id))?;
                if let Some(set) = self.idx.recalls_by_product.get_mut(&recall.product_id) {
                    set.remove(id);
                    // Rebuilt indexes hold no empty sets: keep the live index equal to them.
                    if set.is_empty() {
                        self.idx.recalls_by_product.remove(&recall.product_id);
                    }
                }
                fx.changed.push(RecordKey::Recall(id.clone()));
                fx.triggers
                    .push(Trigger::Product(recall.product_id.clone()));
                Ok(changed(id.clone(), format!("recall {id} withdrawn")))
            }
            Command::AddWindowOverride {
                scope,
                start_ms,
                end_ms,
                reason,
                actor,
            } => {
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
                    reason: reason.clone(),
                };
                let id = o.id.clone();
                let list = self.overrides_mut(scope)?;
                list.retain(|o| o.end_ms > now);
                if list.len() >= 32 {
                    return Err(CommandError::invalid(
                        "scope",
                        "at most 32 window overrides",
                    ));
                }
                list.push(o);
                self.touch_scope(scope, fx);
                self.audit_entry(
                    index,
                    now,
                    actor,
                    "window-override",
                    scope.to_string(),
                    reason,
                    fx,
                );
                Ok(changed(
                    id.clone(),
                    format!("window override {id} on {scope}"),
                ))
            }
            Command::RemoveWindowOverride { scope, id } => {
                self.require_scope(scope)?;
                let list = self.overrides_mut(scope)?;
                let before = list.len();
                list.retain(|o| o.id != *id);
                if list.len() == before {
                    return Err(not_found("window override", id));
                }
                self.touch_scope(scope, fx);
                Ok(changed(id.clone(), format!("window override {id} removed")))
            }
            other => self.execute_lifecycle(other, now, index, fx),
        }
    }

    fn overrides_mut(&mut self, scope: &Scope) -> Result<&mut Vec<WindowOverride>, CommandError> {
        match scope {
            Scope::Environment(env) => self
                .environments
                .get_mut(env)
                .map(|e| &mut e.window_overrides)
                .ok_or_else(|| not_found("environment", env)),
            Scope::Entity(id) => self
                .entities
                .get_mut(id)
                .map(|e| &mut e.window_overrides)
                .ok_or_else(|| not_found("entity", id)),
        }
    }

    fn touch_scope(&self, scope: &Scope, fx: &mut Effects) {
        match scope {
            Scope::Environment(env) => {
                fx.changed.push(RecordKey::Environment(env.clone()));
                fx.triggers.push(Trigger::Environment(env.clone()));
            }
            Scope::Entity(id) => {
                fx.changed.push(RecordKey::Entity(id.clone()));
                fx.triggers.push(Trigger::EntityOnly(id.clone()));
            }
        }
    }

    fn set_environment_settings(
        &mut self,
        environment: &str,
        patch: &EnvironmentSettingsPatch,
        fx: &mut Effects,
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
            .get_mut(environment)
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
        fx.changed
            .push(RecordKey::Environment(environment.to_string()));
        fx.triggers
            .push(Trigger::Environment(environment.to_string()));
        Ok(changed(
            environment,
            format!("settings of {environment} updated"),
        ))
    }

    fn set_entity_settings(
        &mut self,
        id: &str,
        patch: &EntitySettingsPatch,
        fx: &mut Effects,
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
        if let Some(groups) = &patch.dependency_groups {
            // Re-key the entity in the group indexes (validated above; cannot fail now).
            if let Some(before) = self.entities.get(id).cloned() {
                self.index_providers(&before, false);
                let mut after = before;
                after.dependency_groups = groups.iter().cloned().collect();
                self.index_providers(&after, true);
            }
        }
        let e = self
            .entities
            .get_mut(id)
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
        if patch.dependency_groups.is_some() {
            self.reindex_dependencies(id);
        }
        fx.changed.push(RecordKey::Entity(id.to_string()));
        fx.triggers.push(if neighbours {
            Trigger::Entity(id.to_string())
        } else {
            Trigger::EntityOnly(id.to_string())
        });
        Ok(changed(id, format!("settings of {id} updated")))
    }
}

/// Config overrides must be a YAML mapping (or empty).
fn validate_config_yaml(text: &str) -> Result<(), CommandError> {
    if text.trim().is_empty() {
        return Ok(());
    }
    match serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text) {
        Ok(serde_yaml_ng::Value::Mapping(_)) | Ok(serde_yaml_ng::Value::Null) => Ok(()),
        Ok(_) => Err(CommandError::invalid("config", "must be a YAML mapping")),
        Err(e) => Err(CommandError::invalid(
            "config",
            format!("not valid YAML: {e}"),
        )),
    }
}

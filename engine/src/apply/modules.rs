//! Module commands (SPEC M8–M16): publishing versions, installing a module into an
//! environment (creating or adopting its entities), change requests that move an installation
//! to a newer version, pausing and resuming updates, unlinking and deleting.
//!
//! Every handler first computes everything it will change without touching the state, and
//! only then mutates: a refused command changes nothing.

use std::collections::{BTreeMap, BTreeSet};

use semver::Version;

use crate::access::ApprovalTarget;
use crate::approval::{
    ApprovalPolicy, Approvers, ChangeRequestApproval, SemverPart, UpdateChange,
    MAX_MODULE_VERSION_LEN,
};
use crate::command::CommandOutput;
use crate::entity::{
    Entity, EntityId, EntityIdentity, EntityKind, DEFAULT_RELEASE_CHANNEL, MAX_ENTITY_ID_LEN,
};
use crate::error::CommandError;
use crate::installation::{
    ChangeRequest, ChangeRequestStatus, Installation, ManagedEntity, PublishedModule,
    FIRST_MODULE_VERSION,
};
use crate::module::{
    check_user_edit, render, sync_config, DefinitionErrors, ModuleCatalog, ModuleDefinition,
    ParsedDefinition, RenderError, RenderedEntity, SyncMode, UnmanageAfterUninstall,
};
use crate::module_channel::{InstallationChannel, ModuleChannels};
use crate::name::{validate_len, validate_name, validate_product_id};
use crate::state::{State, Trigger};

use super::{changed, not_found, Tx};

/// Most installer values one installation holds.
pub const MAX_MODULE_VARIABLES: usize = 256;

/// Longest installer value, in bytes.
pub const MAX_VARIABLE_VALUE_BYTES: usize = 4096;

impl ModuleCatalog for State {
    fn definition(&self, name: &str, version: &Version) -> Option<&ModuleDefinition> {
        self.modules
            .get(&(name.to_string(), version.clone()))
            .map(|m| &m.definition)
    }
}

/// A definition's errors as the command error `PublishModule` answers with.
fn definition_error(file_name: Option<&str>, errors: &DefinitionErrors) -> CommandError {
    CommandError::invalid(
        file_name.unwrap_or("module definition"),
        format!("\n{errors}"),
    )
}

/// What applying a module version to an installation changes, computed before any mutation.
struct ModuleSync {
    /// The installer values kept (an update drops those of variables the version removed).
    variables: BTreeMap<String, String>,
    /// New values of entities to create (`false`) or update (`true`).
    upserts: Vec<(Entity, bool)>,
    /// Entities the installation stops managing.
    unmanage: Vec<String>,
    /// What it manages afterwards.
    managed: BTreeMap<String, ManagedEntity>,
    /// Entities created, adopted (managed for the first time) and updated.
    created: usize,
    adopted: usize,
}

fn render_error(err: RenderError) -> CommandError {
    match err {
        RenderError::MissingVariables(_)
        | RenderError::UnknownVariable(_)
        | RenderError::PresetNotSettable { .. }
        | RenderError::InvalidValue { .. } => CommandError::invalid("variables", err.to_string()),
        other => CommandError::FailedPrecondition(other.to_string()),
    }
}

pub(super) fn check_actor(actor: &str) -> Result<(), CommandError> {
    if actor.trim().is_empty() || actor.len() > 256 {
        return Err(CommandError::invalid(
            "actor",
            "required, at most 256 bytes",
        ));
    }
    Ok(())
}

fn check_variables<'a>(
    variables: impl Iterator<Item = (&'a String, Option<&'a String>)>,
) -> Result<(), CommandError> {
    let mut count = 0;
    for (name, value) in variables {
        count += 1;
        if name.is_empty() || name.len() > 256 || name.chars().any(char::is_whitespace) {
            return Err(CommandError::invalid(
                "variables",
                format!("{name:?} is not a variable name"),
            ));
        }
        if value.is_some_and(|v| v.len() > MAX_VARIABLE_VALUE_BYTES) {
            return Err(CommandError::invalid(
                &format!("variables.{name}"),
                format!("longer than {MAX_VARIABLE_VALUE_BYTES} bytes"),
            ));
        }
    }
    if count > MAX_MODULE_VARIABLES {
        return Err(CommandError::invalid(
            "variables",
            format!("at most {MAX_MODULE_VARIABLES}"),
        ));
    }
    Ok(())
}

/// What `InstallModule` and `InstallModuleOnChannel` name.
pub(super) struct NewInstallation<'a> {
    pub(super) environment: &'a str,
    pub(super) module: &'a str,
    pub(super) version: Option<&'a str>,
    pub(super) variables: &'a BTreeMap<String, String>,
    /// The channel chosen for it, if one was.
    pub(super) channel: Option<&'a str>,
    pub(super) actor: &'a str,
}

impl NewInstallation<'_> {
    /// Refuses a field that is malformed or over its budget, before anything is looked up.
    fn check(&self) -> Result<(), CommandError> {
        check_actor(self.actor)?;
        check_variables(self.variables.iter().map(|(k, v)| (k, Some(v))))?;
        validate_name("environment", self.environment)?;
        validate_name("module", self.module)?;
        match self.version {
            Some(v) => validate_len("version", v, MAX_MODULE_VERSION_LEN),
            None => Ok(()),
        }
    }
}

impl State {
    /// Module installation `id`, or a not-found error.
    pub(super) fn require_installation(&self, id: &str) -> Result<&Installation, CommandError> {
        self.installations
            .get(id)
            .ok_or_else(|| not_found("module installation", id))
    }

    /// Change request `id`, if it is still pending approval.
    fn pending_change_request(&self, id: &str) -> Result<&ChangeRequest, CommandError> {
        let cr = self
            .change_requests
            .get(id)
            .ok_or_else(|| not_found("change request", id))?;
        if !cr.status.is_open() {
            return Err(CommandError::FailedPrecondition(format!(
                "change request {id} is {}, not pending approval",
                cr.status.as_str()
            )));
        }
        Ok(cr)
    }

    /// `RejectChangeRequest`: closes a pending change request without applying it.
    pub(super) fn reject_change_request(
        &mut self,
        id: &str,
        actor: &str,
        reason: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        check_actor(actor)?;
        self.pending_change_request(id)?;
        if let Some(record) = self.change_request_approvals.get(id) {
            let what = ApprovalTarget::ChangeRequest(id.to_string());
            self.check_rejection(&what, &record.approvals, tx)?;
        }
        // The change request exists (checked above).
        let Some(cr) = self.change_requests.get_mut(id, &mut tx.changed) else {
            unreachable!("change request {id} checked above");
        };
        cr.status = ChangeRequestStatus::Rejected;
        cr.decided_by = Some(actor.to_string());
        cr.closed_ms = Some(now);
        cr.message = reason.to_string();
        let target = cr.installation.clone();
        self.audit_entry(actor, "changerequest-reject", target, reason, tx);
        Ok(CommandOutput::Changed {
            id: id.to_string(),
            summary: format!("change request {id} rejected"),
        })
    }

    /// Validates `yaml` as `PublishModule` would and returns the definition with the version
    /// it would be published as: [`State::parse_module`] then [`State::check_parsed_module`].
    pub fn prepare_module_publish(
        &self,
        file_name: Option<&str>,
        yaml: &str,
    ) -> Result<(ModuleDefinition, Version), CommandError> {
        self.check_parsed_module(State::parse_module(file_name, yaml)?, file_name)
    }

    /// The half of [`State::prepare_module_publish`] that needs no state: `yaml` parsed and
    /// checked on its own (the costly half, see [`ParsedDefinition`]).
    pub fn parse_module(
        file_name: Option<&str>,
        yaml: &str,
    ) -> Result<ParsedDefinition, CommandError> {
        ParsedDefinition::parse(file_name, yaml)
            .map_err(|errors| definition_error(file_name, &errors))
    }

    /// The half of [`State::prepare_module_publish`] that needs the state: `parsed` against
    /// the published modules, and the version it would be published as. `hubctl module create
    /// --dry-run` parses without the state's lock and calls this under it.
    pub fn check_parsed_module(
        &self,
        parsed: ParsedDefinition,
        file_name: Option<&str>,
    ) -> Result<(ModuleDefinition, Version), CommandError> {
        let def = parsed
            .validate_against(self)
            .map_err(|errors| definition_error(file_name, &errors))?;
        let version = match self.latest_module(&def.name) {
            Some(m) => Version::new(m.version.major, m.version.minor + 1, 0),
            None => FIRST_MODULE_VERSION,
        };
        Ok((def, version))
    }

    pub(super) fn publish_module(
        &mut self,
        file_name: Option<&str>,
        yaml: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        let (definition, version) = self.prepare_module_publish(file_name, yaml)?;
        let name = definition.name.clone();
        let record = PublishedModule {
            name: name.clone(),
            version: version.clone(),
            definition,
            yaml: yaml.to_string(),
            published_ms: now,
        };
        self.modules.put(record, &mut tx.changed);
        // Every installation that follows updates on a channel the version is on (every
        // version is on the built-in ones) gets a change request (SPEC M9, issue 55).
        let installations: Vec<String> = self
            .installations
            .values()
            .filter(|i| i.module == name && !i.paused && i.version < version)
            .filter(|i| self.module_on_channel(&name, &version, &self.tracked_channel(&i.id)))
            .map(|i| i.id.clone())
            .collect();
        let mut opened = 0;
        for (n, inst) in installations.iter().enumerate() {
            self.cancel_open_change_requests(inst, &format!("superseded by {name} {version}"), tx);
            self.open_change_request(inst, &version, "module update", n, tx);
            opened += 1;
        }
        Ok(CommandOutput::Changed {
            id: PublishedModule::key_name(&name, &version),
            summary: format!(
                "module {name} {version} published; {opened} change request(s) opened"
            ),
        })
    }

    pub(super) fn delete_module(
        &mut self,
        name: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let versions: Vec<Version> = self
            .module_versions(name)
            .map(|m| m.version.clone())
            .collect();
        if versions.is_empty() {
            return Err(not_found("module", name));
        }
        if let Some(i) = self.installations.values().find(|i| i.module == name) {
            return Err(CommandError::FailedPrecondition(format!(
                "module {name} is installed in {} ({}); unlink every installation first",
                i.environment, i.id
            )));
        }
        if let Some(parent) = self
            .modules
            .values()
            .find(|m| m.name != name && m.definition.submodules.iter().any(|s| s.name == name))
        {
            return Err(CommandError::FailedPrecondition(format!(
                "module {name} is a submodule of {} {}",
                parent.name, parent.version
            )));
        }
        for v in &versions {
            self.modules
                .remove(&(name.to_string(), v.clone()), &mut tx.changed);
            self.module_channels
                .remove(&ModuleChannels::key_name(name, v), &mut tx.changed);
        }
        Ok(CommandOutput::Changed {
            id: name.to_string(),
            summary: format!("module {name} deleted ({} versions)", versions.len()),
        })
    }

    pub(super) fn install_module(
        &mut self,
        new: NewInstallation<'_>,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        new.check()?;
        let NewInstallation {
            environment,
            module,
            version,
            variables,
            channel,
            actor,
        } = new;
        let now = tx.now;
        if !self.environments.contains_key(environment) {
            return Err(not_found("environment", environment));
        }
        if let Some(c) = channel {
            self.require_channel("channel", c)?;
        }
        let id = Installation::id_of(environment, module);
        // The channel it will track: chosen, else its environment's policy's default.
        let tracked = match channel {
            Some(c) => c.to_string(),
            None => self.tracked_channel(&id),
        };
        let published = match version {
            Some(v) => {
                let v = Version::parse(v)
                    .map_err(|e| CommandError::invalid("version", format!("{v:?}: {e}")))?;
                self.module(module, &v).ok_or_else(|| {
                    not_found("module version", &PublishedModule::key_name(module, &v))
                })?
            }
            None => match self.latest_module_on_channel(module, &tracked) {
                Some(m) => m,
                None if self.latest_module(module).is_some() => {
                    return Err(CommandError::FailedPrecondition(format!(
                        "no version of module {module} is on channel {tracked}"
                    )))
                }
                None => return Err(not_found("module", module)),
            },
        };
        if !published.definition.restrictions.new_installations_allowed {
            return Err(CommandError::FailedPrecondition(format!(
                "module {module} does not allow direct installation \
                 (restrictions.newInstallations.allowed: false); use it as a submodule"
            )));
        }
        let version = published.version.clone();
        if self.installations.contains_key(&id) {
            return Err(CommandError::AlreadyExists {
                kind: "module installation".into(),
                name: id,
            });
        }
        let mut inst = Installation {
            id: id.clone(),
            environment: environment.to_string(),
            module: module.to_string(),
            version: version.clone(),
            variables: variables.clone(),
            paused: false,
            resuming: false,
            entities: BTreeMap::new(),
            created_ms: now,
            updated_ms: now,
        };
        let sync = self.plan_module_sync(&inst, &version, false)?;
        let (created, adopted) = (sync.created, sync.adopted);
        self.apply_module_sync(&mut inst, sync, tx);
        self.installations.put(inst, &mut tx.changed);
        if let Some(c) = channel {
            self.installation_channels.put(
                InstallationChannel {
                    installation: id.clone(),
                    channel: c.to_string(),
                    set_ms: now,
                },
                &mut tx.changed,
            );
        }
        self.audit_entry(actor, "module-install", id.clone(), "", tx);
        Ok(CommandOutput::Changed {
            id,
            summary: format!(
                "module {module} {version} installed in {environment}: \
                 {created} entities created, {adopted} adopted; tracking channel {tracked}"
            ),
        })
    }

    pub(super) fn set_module_variables(
        &mut self,
        id: &str,
        variables: &BTreeMap<String, Option<String>>,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        check_variables(variables.iter().map(|(k, v)| (k, v.as_ref())))?;
        let mut inst = self.require_installation(id)?.clone();
        for (name, value) in variables {
            match value {
                Some(v) => {
                    inst.variables.insert(name.clone(), v.clone());
                }
                None => {
                    inst.variables.remove(name);
                }
            }
        }
        if inst.variables.len() > MAX_MODULE_VARIABLES {
            return Err(CommandError::invalid(
                "variables",
                format!("an installation holds at most {MAX_MODULE_VARIABLES}"),
            ));
        }
        self.installations.put(inst.clone(), &mut tx.changed);
        // Open change requests may be unblocked (or blocked) by the new values.
        for cr in self.open_change_requests(id) {
            let to = self.change_requests[&cr].to_version.clone();
            let blocked = self.blocked_reason(&inst, &to);
            if self.change_requests[&cr].blocked != blocked {
                if let Some(c) = self.change_requests.get_mut(&cr, &mut tx.changed) {
                    c.blocked = blocked;
                }
            }
        }
        Ok(CommandOutput::Changed {
            id: id.to_string(),
            summary: format!("variables of {id} updated"),
        })
    }

    pub(super) fn set_updates_paused(
        &mut self,
        id: &str,
        paused: bool,
        actor: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        check_actor(actor)?;
        let inst = self.require_installation(id)?;
        if inst.paused == paused {
            return Err(CommandError::FailedPrecondition(format!(
                "module updates of {id} are already {}",
                if paused { "paused" } else { "active" }
            )));
        }
        let module = inst.module.clone();
        if paused {
            self.cancel_open_change_requests(id, "module updates paused", tx);
        }
        if let Some(inst) = self.installations.get_mut(id, &mut tx.changed) {
            inst.paused = paused;
            inst.resuming = !paused;
        }
        let mut summary = format!(
            "module updates of {id} {}",
            if paused { "paused" } else { "resumed" }
        );
        if !paused {
            // One change request to the latest version reconciles what drifted while paused.
            let channel = self.tracked_channel(id);
            let latest = self.latest_module_on_channel(&module, &channel);
            if let Some(latest) = latest.map(|m| m.version.clone()) {
                let cr = self.open_change_request(id, &latest, "resuming updates", 0, tx);
                summary.push_str(&format!("; change request {cr} opened"));
            }
        }
        self.audit_entry(
            actor,
            if paused {
                "module-pause"
            } else {
                "module-resume"
            },
            id.to_string(),
            "",
            tx,
        );
        Ok(CommandOutput::Changed {
            id: id.to_string(),
            summary,
        })
    }

    pub(super) fn unlink_module(
        &mut self,
        id: &str,
        actor: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        check_actor(actor)?;
        let inst = self.require_installation(id)?.clone();
        self.cancel_open_change_requests(id, "installation unlinked", tx);
        for entity in inst.entities.keys() {
            self.release_ownership(entity, &inst.module, tx);
        }
        self.installations.remove(id, &mut tx.changed);
        // Its own channel and policy go with it (a later installation starts from defaults).
        self.installation_channels.remove(id, &mut tx.changed);
        let scope = crate::approval::PolicyScope::Installation(id.to_string());
        self.approval_policies
            .remove(&scope.key_name(), &mut tx.changed);
        self.audit_entry(actor, "module-unlink", id.to_string(), "", tx);
        Ok(CommandOutput::Changed {
            id: id.to_string(),
            summary: format!(
                "installation {id} unlinked; its {} entities stay installed, unmanaged",
                inst.entities.len()
            ),
        })
    }

    pub(super) fn approve_change_request(
        &mut self,
        id: &str,
        actor: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        check_actor(actor)?;
        let cr = self.pending_change_request(id)?.clone();
        // Opened without a policy: one approver of the environment merges it (SPEC M9).
        let Some(mut record) = self.change_request_approvals.get(id).cloned() else {
            let out = self.merge_change_request(&cr, actor, tx)?;
            self.audit_entry(
                actor,
                "changerequest-approve",
                cr.installation.clone(),
                "",
                tx,
            );
            return Ok(out);
        };
        let what = ApprovalTarget::ChangeRequest(id.to_string());
        let approval = self.check_approval(&what, &record.approvals, tx)?;
        let who = approval.identity.to_string();
        record.approvals.approvals.push(approval);
        let out = if record.approvals.is_met() {
            // Refused (nothing changed) if the update cannot be applied.
            self.merge_change_request(&cr, &who, tx)?
        } else {
            changed(
                id,
                format!(
                    "change request {id} approved by {who}; still needs {}",
                    record.approvals.outstanding_text()
                ),
            )
        };
        self.change_request_approvals.put(record, &mut tx.changed);
        self.audit_entry(
            &who,
            "changerequest-approve",
            cr.installation.clone(),
            "",
            tx,
        );
        Ok(out)
    }

    /// Applies change request `cr` to its installation and closes it as merged, decided by
    /// `decided_by`; refused, with nothing changed, when the update cannot be applied.
    fn merge_change_request(
        &mut self,
        cr: &ChangeRequest,
        decided_by: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        let id = &cr.id;
        let mut inst = self.require_installation(&cr.installation)?.clone();
        if inst.paused {
            return Err(CommandError::FailedPrecondition(format!(
                "module updates of {} are paused",
                inst.id
            )));
        }
        let sync = self.plan_module_sync(&inst, &cr.to_version, true)?;
        let (created, adopted) = (sync.created, sync.adopted);
        self.apply_module_sync(&mut inst, sync, tx);
        inst.version = cr.to_version.clone();
        inst.resuming = false;
        inst.updated_ms = now;
        self.installations.put(inst.clone(), &mut tx.changed);
        if let Some(c) = self.change_requests.get_mut(id, &mut tx.changed) {
            c.status = ChangeRequestStatus::Merged;
            c.decided_by = Some(decided_by.to_string());
            c.closed_ms = Some(now);
            c.blocked = None;
        }
        Ok(CommandOutput::Changed {
            id: id.to_string(),
            summary: format!(
                "change request {id} merged: {} at {} ({created} entities created, {adopted} adopted)",
                inst.id, cr.to_version
            ),
        })
    }

    /// Under installation `inst`'s policy, merges the change request `id` just opened when
    /// the policy approves its update automatically; otherwise notes why it waits.
    fn auto_approve(&mut self, id: &str, policy: &ApprovalPolicy, tx: &mut Tx) {
        let Some(cr) = self.change_requests.get(id).cloned() else {
            return;
        };
        let Some(inst) = self.installations.get(&cr.installation).cloned() else {
            return;
        };
        let refusal = match self.plan_module_sync(&inst, &cr.to_version, true) {
            Err(e) => Some(e.to_string()),
            Ok(sync) => {
                let declared = |v: &Version| {
                    self.definition(&inst.module, v)
                        .map(|d| d.variables.keys().cloned().collect::<BTreeSet<_>>())
                };
                let change = UpdateChange {
                    part: SemverPart::of_change(&cr.from_version, &cr.to_version),
                    variables: declared(&cr.from_version) != declared(&cr.to_version)
                        || sync.variables != inst.variables,
                    entities: sync.created > 0 || sync.adopted > 0 || !sync.unmanage.is_empty(),
                };
                policy.spec.auto_approve.refuses(&change)
            }
        };
        let by = format!("policy {}", policy.scope);
        match refusal {
            None => match self.merge_change_request(&cr, &by, tx) {
                Ok(_) => {
                    let reason = "approved automatically";
                    self.audit_entry(&by, "changerequest-approve", cr.installation, reason, tx);
                }
                Err(e) => {
                    self.note_change_request(id, format!("not approved automatically: {e}"), tx)
                }
            },
            Some(why) => self.note_change_request(id, format!("needs approval: {why}"), tx),
        }
    }

    /// Sets the message of change request `id`.
    fn note_change_request(&mut self, id: &str, message: String, tx: &mut Tx) {
        if let Some(c) = self.change_requests.get_mut(id, &mut tx.changed) {
            c.message = message;
        }
    }

    /// Why `inst` cannot be updated to `version` with its current values (a variable without
    /// a default and without a value), if so.
    fn blocked_reason(&self, inst: &Installation, version: &Version) -> Option<String> {
        let def = self.definition(&inst.module, version)?;
        match self.render_values(def, &inst.variables, true) {
            Err(e @ RenderError::MissingVariables(_)) => Some(e.to_string()),
            _ => None,
        }
    }

    /// Opens a change request moving `inst` to `to`; returns its id.
    pub(super) fn open_change_request(
        &mut self,
        inst: &str,
        to: &Version,
        reason: &str,
        n: usize,
        tx: &mut Tx,
    ) -> String {
        let now = tx.now;
        let index = tx.index;
        let id = format!("cr-{index}-{n}");
        let Some(installation) = self.installations.get(inst).cloned() else {
            return id;
        };
        let (status, blocked, message) = match self
            .definition(&installation.module, to)
            .map(|def| self.render_values(def, &installation.variables, true))
        {
            None => (
                ChangeRequestStatus::Error,
                None,
                format!("{} {to} is not published", installation.module),
            ),
            Some(Ok(_)) => (ChangeRequestStatus::PendingApproval, None, String::new()),
            Some(Err(e @ RenderError::MissingVariables(_))) => (
                ChangeRequestStatus::PendingApproval,
                Some(e.to_string()),
                String::new(),
            ),
            Some(Err(e)) => (ChangeRequestStatus::Error, None, e.to_string()),
        };
        let closed_ms = (status == ChangeRequestStatus::Error).then_some(now);
        self.change_requests.put(
            ChangeRequest {
                id: id.clone(),
                installation: inst.to_string(),
                from_version: installation.version.clone(),
                to_version: to.clone(),
                status,
                reason: reason.to_string(),
                blocked,
                message,
                created_ms: now,
                decided_by: None,
                closed_ms,
            },
            &mut tx.changed,
        );
        if status == ChangeRequestStatus::Error {
            return id;
        }
        // Under a policy: its rule is recorded with the request, and it may approve the
        // update itself (issue 55).
        if let Some(policy) = self.installation_policy(inst).cloned() {
            let approvers = Approvers::Environment(installation.environment.clone());
            let approvals = State::new_request_approvals(Some(&policy), approvers, tx);
            self.change_request_approvals.put(
                ChangeRequestApproval {
                    change_request: id.clone(),
                    approvals,
                },
                &mut tx.changed,
            );
            if self.change_requests[&id].blocked.is_none() {
                self.auto_approve(&id, &policy, tx);
            }
        }
        id
    }

    /// The ids of installation `inst`'s open change requests.
    pub(super) fn open_change_requests(&self, inst: &str) -> Vec<String> {
        self.change_requests
            .values()
            .filter(|c| c.installation == inst && c.status.is_open())
            .map(|c| c.id.clone())
            .collect()
    }

    pub(super) fn cancel_open_change_requests(&mut self, inst: &str, message: &str, tx: &mut Tx) {
        let now = tx.now;
        for id in self.open_change_requests(inst) {
            if let Some(c) = self.change_requests.get_mut(&id, &mut tx.changed) {
                c.status = ChangeRequestStatus::Cancelled;
                c.message = message.to_string();
                c.closed_ms = Some(now);
            }
        }
    }

    /// Renders `inst`'s module at `version` and computes every entity it creates, adopts,
    /// updates or lets go, refusing (with nothing changed) what the module may not do.
    // Long: one pass over the rendered entities deciding create, adopt, update or release for
    // each, with every refusal before anything changes.
    fn plan_module_sync(
        &self,
        inst: &Installation,
        version: &Version,
        update: bool,
    ) -> Result<ModuleSync, CommandError> {
        let def = self.definition(&inst.module, version).ok_or_else(|| {
            not_found(
                "module version",
                &PublishedModule::key_name(&inst.module, version),
            )
        })?;
        let (rendered, variables) = self
            .render_values(def, &inst.variables, update)
            .map_err(render_error)?;
        let mut sync = ModuleSync {
            variables,
            upserts: Vec::new(),
            unmanage: Vec::new(),
            managed: BTreeMap::new(),
            created: 0,
            adopted: 0,
        };
        let mut seen = BTreeSet::new();
        for r in &rendered {
            let field = |f: &str| format!("entities[{}].{f}", r.product_id);
            validate_product_id(&field("productId"), &r.product_id)?;
            validate_name(&field("entityName"), &r.entity_name)?;
            if let Some(ns) = &r.k8s_namespace {
                validate_name(&field("k8sNamespace"), ns)?;
            }
            let id = EntityId::new(&inst.environment, r.kind, &r.entity_name);
            if id.0.len() >= MAX_ENTITY_ID_LEN {
                return Err(CommandError::invalid(
                    &field("entityName"),
                    format!("entity id {id} must be shorter than {MAX_ENTITY_ID_LEN}"),
                ));
            }
            if !seen.insert(id.0.clone()) {
                return Err(CommandError::FailedPrecondition(format!(
                    "the module renders entity {id} twice"
                )));
            }
            let existing = self.entities.get(&id.0);
            if existing.is_some_and(|e| let_go_after_uninstall(e, r)) {
                // Uninstalled and let go (unmanageAfterUninstall: AUTOMATIC): still marked,
                // there is nothing to take back.
                continue;
            }
            if let Some(e) = existing {
                self.check_adoption(inst, e, r)?;
            }
            let config = sync_config(
                r.sync_mode,
                existing.map(|e| &e.config_overrides),
                &r.config_overrides,
                &r.install_config_overrides,
            )
            .map_err(|e| CommandError::invalid(&field("configOverrides"), e.to_string()))?;
            let mut entity = match existing {
                Some(e) => e.clone(),
                None => {
                    if r.marked_for_uninstallation.is_some() {
                        // Nothing installed, nothing to uninstall: the entity is not created.
                        continue;
                    }
                    Entity::new(
                        EntityIdentity {
                            environment: inst.environment.clone(),
                            kind: r.kind,
                            name: r.entity_name.clone(),
                            product_id: r.product_id.clone(),
                            k8s_namespace: r.k8s_namespace.clone(),
                            account_id: r.account_id.clone(),
                            release_channel: DEFAULT_RELEASE_CHANNEL.to_string(),
                        },
                        0,
                    )
                }
            };
            for g in &r.dependency_groups {
                validate_name(&field("dependencyGroups"), g)?;
            }
            for p in &r.ignored_dependencies {
                validate_product_id(&field("ignoredDependencies"), p)?;
            }
            for (p, groups) in &r.dependency_group_overrides {
                validate_product_id(&field("dependencyGroupOverrides"), p)?;
                if groups.is_empty() {
                    return Err(CommandError::invalid(
                        &field(&format!("dependencyGroupOverrides.{p}")),
                        "at least one group",
                    ));
                }
                for g in groups {
                    validate_name(&field(&format!("dependencyGroupOverrides.{p}")), g)?;
                }
            }
            entity.dependency_group_overrides = r
                .dependency_group_overrides
                .iter()
                .map(|(p, groups)| (p.clone(), groups.iter().cloned().collect()))
                .collect();
            if !r.dependency_groups.is_empty() {
                entity.dependency_groups = r.dependency_groups.iter().cloned().collect();
            }
            if !r.ignored_dependencies.is_empty() {
                entity.ignored_dependencies = r.ignored_dependencies.iter().cloned().collect();
            }
            if r.kind == EntityKind::TerraformModule && r.account_id.is_some() {
                entity.account_id = r.account_id.clone();
            }
            entity.config_overrides = config;
            entity.marked_for_uninstall = r.marked_for_uninstallation.is_some();
            entity.uninstall_min_version = r
                .marked_for_uninstallation
                .as_ref()
                .and_then(|u| u.min_version.clone());
            entity.required_secrets = r
                .secret_requirements
                .iter()
                .flat_map(|(name, secret)| {
                    if secret.keys.is_empty() {
                        vec![name.clone()]
                    } else {
                        secret.keys.iter().map(|k| format!("{name}.{k}")).collect()
                    }
                })
                .collect();
            entity.owner_module = Some(inst.module.clone());
            match existing {
                None => sync.created += 1,
                Some(_) if !inst.entities.contains_key(&id.0) => sync.adopted += 1,
                Some(_) => {}
            }
            sync.managed.insert(
                id.0.clone(),
                ManagedEntity {
                    sync_mode: r.sync_mode,
                    config: r.config_overrides.clone(),
                    secret_requirements: r.secret_requirements.clone(),
                    source_module: r.source_module.clone(),
                },
            );
            if existing != Some(&entity) {
                sync.upserts.push((entity, existing.is_some()));
            }
        }
        sync.unmanage = inst
            .entities
            .keys()
            .filter(|id| !sync.managed.contains_key(*id))
            .cloned()
            .collect();
        Ok(sync)
    }

    /// Refuses to adopt `existing` for `inst` when another module manages it (SPEC M12) or
    /// the module would move or change it in ways an existing entity never is (SPEC M4).
    fn check_adoption(
        &self,
        inst: &Installation,
        existing: &Entity,
        r: &RenderedEntity,
    ) -> Result<(), CommandError> {
        let id = &existing.id;
        if let Some(owner) = &existing.owner_module {
            if *owner != inst.module {
                return Err(CommandError::FailedPrecondition(format!(
                    "entity {id} is managed by module {owner}; one module manages an entity at a \
                     time: remove it from {owner}'s definition and update that installation \
                     first"
                )));
            }
        }
        if existing.product_id != r.product_id {
            return Err(CommandError::FailedPrecondition(format!(
                "entity {id} deploys {}, the module's entity deploys {}",
                existing.product_id, r.product_id
            )));
        }
        if existing.kind == EntityKind::HelmChart && existing.k8s_namespace != r.k8s_namespace {
            return Err(CommandError::FailedPrecondition(format!(
                "entity {id} exists in namespace {}; the module renders namespace {}: an \
                 existing entity is never moved to another namespace",
                existing.k8s_namespace.as_deref().unwrap_or("-"),
                r.k8s_namespace.as_deref().unwrap_or("-"),
            )));
        }
        Ok(())
    }

    /// Ends `module`'s management of `entity` (if it still manages it): the entity stays
    /// installed, unowned, without the module's secret requirements (SPEC M11, M16).
    fn release_ownership(&mut self, entity: &str, module: &str, tx: &mut Tx) {
        let owned = self
            .entities
            .get(entity)
            .is_some_and(|e| e.owner_module.as_deref() == Some(module));
        if !owned {
            return;
        }
        if let Some(mut e) = self.entities.get_mut(entity, &mut tx.changed) {
            e.owner_module = None;
            e.required_secrets.clear();
            tx.triggers.push(Trigger::EntityOnly(entity.to_string()));
        }
    }

    /// After an uninstall plan of `entity` succeeded (SPEC M11): if its module marked it for
    /// uninstallation, `unmanageAfterUninstall` decides whether the module's management ends
    /// now (`AUTOMATIC`, the default: unowned, no longer listed by the installation, still
    /// marked so that nothing reinstalls it) or stays until an operator ends it (`MANUAL`).
    pub(super) fn after_module_uninstall(&mut self, entity: &str, tx: &mut Tx) {
        let Some(e) = self.entities.get(entity) else {
            return;
        };
        let Some(module) = e.owner_module.clone().filter(|_| e.marked_for_uninstall) else {
            return;
        };
        let inst_id = Installation::id_of(&e.environment, &module);
        let Some(inst) = self
            .installations
            .get(&inst_id)
            .filter(|i| i.entities.contains_key(entity))
        else {
            return;
        };
        let line = match self.unmanage_mode(inst, entity) {
            UnmanageAfterUninstall::Manual => format!(
                "uninstalled; module {module} still manages it (unmanageAfterUninstall: MANUAL): \
                 remove it from the definition and update {inst_id}, or unlink, to end that"
            ),
            UnmanageAfterUninstall::Automatic => {
                self.release_ownership(entity, &module, tx);
                if let Some(inst) = self.installations.get_mut(&inst_id, &mut tx.changed) {
                    inst.entities.remove(entity);
                }
                format!(
                    "uninstalled; no longer managed by module {module} \
                     (unmanageAfterUninstall: AUTOMATIC); it stays, not installed"
                )
            }
        };
        self.note(entity, "module", line, tx);
    }

    /// `entity`'s `unmanageAfterUninstall` in `inst`'s module version, rendered with its
    /// values. `MANUAL` when it cannot be told (the version no longer renders, or no longer
    /// marks the entity): management is never ended on a guess.
    fn unmanage_mode(&self, inst: &Installation, entity: &str) -> UnmanageAfterUninstall {
        let Some(def) = self.definition(&inst.module, &inst.version) else {
            return UnmanageAfterUninstall::Manual;
        };
        let Ok(rendered) = render(def, self, &inst.variables) else {
            return UnmanageAfterUninstall::Manual;
        };
        rendered
            .iter()
            .find(|r| EntityId::new(&inst.environment, r.kind, &r.entity_name).0 == entity)
            .and_then(|r| r.marked_for_uninstallation.as_ref())
            .map_or(UnmanageAfterUninstall::Manual, |u| u.unmanage())
    }

    /// Applies a computed [`ModuleSync`] to the state and to `inst`.
    fn apply_module_sync(&mut self, inst: &mut Installation, sync: ModuleSync, tx: &mut Tx) {
        let now = tx.now;
        for (mut entity, existed) in sync.upserts {
            let id = entity.id.0.clone();
            if !existed {
                entity.created_at_ms = now;
            }
            self.entities.put(entity, &mut tx.changed);
            if !existed {
                self.start_never_healthy(&id, tx);
            }
            self.reindex_dependencies(&id);
            tx.triggers.push(Trigger::Entity(id.clone()));
            self.note(
                &id,
                "module",
                format!(
                    "{} by module {} ({})",
                    if existed { "updated" } else { "created" },
                    inst.module,
                    inst.id
                ),
                tx,
            );
        }
        for id in &sync.unmanage {
            self.release_ownership(id, &inst.module, tx);
            if self.entities.contains_key(id) {
                self.note(
                    id,
                    "module",
                    format!(
                        "no longer managed by module {}: removed from its definition (it stays installed)",
                        inst.module
                    ),
                    tx,
                );
            }
        }
        inst.entities = sync.managed;
        inst.variables = sync.variables;
    }

    /// Renders `def` with `values`. For an update, values of variables the version no longer
    /// defines are dropped, not refused: a removed or renamed variable's value is not carried
    /// (SPEC M3). Returns the entities and the values kept.
    fn render_values(
        &self,
        def: &ModuleDefinition,
        values: &BTreeMap<String, String>,
        update: bool,
    ) -> Result<(Vec<RenderedEntity>, BTreeMap<String, String>), RenderError> {
        let mut values = values.clone();
        loop {
            match render(def, self, &values) {
                Ok(rendered) => return Ok((rendered, values)),
                // Terminates: every retry has one value fewer.
                Err(RenderError::UnknownVariable(name))
                    if update && values.remove(&name).is_some() => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Under MERGE, refuses a user's edit of an entity's config overrides (`version` set to
    /// `config`, or removed) that would change a key its module controls, unless the
    /// installation's module updates are paused (SPEC M13, M15).
    pub(super) fn check_module_config_edit(
        &self,
        entity: &str,
        version: &Version,
        config: Option<&String>,
    ) -> Result<(), CommandError> {
        let Some(e) = self.entities.get(entity) else {
            return Ok(());
        };
        let Some(owner) = &e.owner_module else {
            return Ok(());
        };
        let Some(inst) = self
            .installations
            .get(&Installation::id_of(&e.environment, owner))
        else {
            return Ok(());
        };
        let Some(managed) = inst.entities.get(entity) else {
            return Ok(());
        };
        if inst.paused || managed.sync_mode != SyncMode::Merge {
            return Ok(());
        }
        let mut proposed = e.config_overrides.clone();
        match config {
            Some(text) => {
                proposed.insert(version.clone(), text.clone());
            }
            None => {
                proposed.remove(version);
            }
        }
        check_user_edit(&managed.config, &proposed).map_err(|err| {
            CommandError::FailedPrecondition(format!(
                "{err}; pause module updates of {} to edit it",
                inst.id
            ))
        })
    }
}

/// Whether `existing` is an entity a module let go after uninstalling it
/// (`unmanageAfterUninstall: AUTOMATIC`) that `rendered` still marks for uninstallation: not
/// installed, unowned and still marked, so there is nothing for the module to take back.
fn let_go_after_uninstall(existing: &Entity, rendered: &RenderedEntity) -> bool {
    rendered.marked_for_uninstallation.is_some()
        && existing.owner_module.is_none()
        && existing.marked_for_uninstall
        && existing.reported.version.is_none()
}

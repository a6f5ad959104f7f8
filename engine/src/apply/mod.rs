//! Applying a committed command: the engine's only `match` on [`Command`].
//!
//! [`State::apply`] is called once per Raft entry, in log order, on every node. It
//! deduplicates by request id, runs the command's handler through [`State::execute`] and
//! returns what changed. The match there has one arm per variant and no wildcard, so a new
//! command does not compile until it has a handler; each arm only delegates.
//!
//! Handlers live one file per command family and share one shape: check everything the
//! command could be refused for (assert, return early), then change the tables. A refused
//! command therefore changes nothing; `apply` asserts that in debug builds. Every handler
//! gets a [`Tx`]: the entry's time and index (the engine reads no clock) and the record keys
//! and triggers it changed.
//!
//! | file | commands |
//! |---|---|
//! | `environments.rs` | environments, their settings and registries |
//! | `entities.rs` | entities, their settings, config overrides and secrets |
//! | `catalog.rs` | products, releases, channels, recalls |
//! | `windows.rs` | window overrides |
//! | `suppressions.rs` | suppressions, their expiry, the autosuppression threshold |
//! | `plans.rs` | the leader's evaluations and plan cancels |
//! | `reports.rs` | agents' entity-state and task reports |
//! | `commands.rs` | break-glass commands |
//! | `modules.rs` | modules, installations, change requests |
//! | `canaries.rs` | canaries: resources, ticks, manual actions, step plans, observations |
//! | `alert_providers.rs` | Flagger AlertProviders, where canary alerts go |
//! | `metric_templates.rs` | Flagger MetricTemplates, rendered again for the canaries using them |
//! | `cluster_keys.rs` | cluster keys |
//! | `cluster_level.rs` | the cluster's feature level (raised only) |
//! | `roles.rs` | role bindings |
//! | `tokens.rs` | operator tokens |
//! | `revocations.rs` | the certificate revocation list |
//! | `audit.rs` | the write audit, recorded refusals, retention |
//! | `approvals.rs` | approver groups, approval policies, and the approval step of every request |
//! | `window_exceptions.rs` | window-exception requests: request, approve, reject |
//! | `module_channels.rs` | module versions on custom channels, the channel an installation tracks |
//! | `rollouts.rs` | environment labels, rollout policies, promote/halt/resume, and the wave bookkeeping every entry runs ([`State::track_rollouts`]) |

mod alert_providers;
mod approvals;
mod audit;
mod canaries;
mod canary_judging;
mod catalog;
mod cluster_keys;
mod cluster_level;
mod cluster_settings;
mod commands;
mod entities;
mod environments;
mod health;
mod membership;
mod metric_templates;
mod module_channels;
mod modules;
mod plans;
mod reports;
mod revocations;
mod roles;
mod rollouts;
mod suppressions;
#[cfg(test)]
mod tests;
mod tokens;
mod window_exceptions;
mod windows;

use entities::SecretWrite;

use hub_identity::Identity;
use semver::Version;

use crate::command::{Command, CommandOutput, Request, WindowSpec};
use crate::entity::MAX_ENTITY_ID_LEN;
use crate::error::CommandError;
use crate::feature_level::LEVEL_2;
use crate::record::{AuditEntry, RecordKey, RequestRecord};
use crate::state::{Applied, HistoryWrite, State, Trigger, REQUEST_TTL_MS};
use crate::suppression::Scope;
use crate::window::MaintenanceWindow;
use crate::TimestampMs;

/// Longest free-text reason or description.
pub const MAX_TEXT: usize = 1024;

/// The context of one apply: the entry's time and index, and what the handler changed.
#[derive(Debug)]
pub(crate) struct Tx {
    /// The time stamped on the entry (milliseconds since the Unix epoch).
    pub(crate) now: TimestampMs,
    /// The entry's log index; ids derived from it (`p-<index>-<n>`, `r-<index>`) are unique.
    pub(crate) index: u64,
    /// Every record key set or removed, for storage.
    pub(crate) changed: Vec<RecordKey>,
    /// What the leader must re-evaluate.
    pub(crate) triggers: Vec<Trigger>,
    /// History written, in order (see [`Applied::history`]).
    pub(crate) history: Vec<HistoryWrite>,
    /// Who the entry names as its actor (`Command::As`); `None` for a node's own entry.
    pub(crate) actor: Option<Identity>,
}

impl Tx {
    pub(crate) fn new(now: TimestampMs, index: u64) -> Self {
        Tx {
            now,
            index,
            changed: Vec::new(),
            triggers: Vec::new(),
            history: Vec::new(),
            actor: None,
        }
    }
}

impl State {
    /// Applies `req`, which Raft committed at log `index`. Deterministic: the result depends
    /// only on the state, the request and `index`. The command runs at the entry time,
    /// `max(req.time_ms, time of the last entry that changed the state)`
    /// ([`crate::entry_clock`]).
    pub fn apply(&mut self, req: &Request, index: u64) -> Applied {
        let (now, clock) = self.entry_clock().advance(req.time_ms);
        let mut tx = Tx::new(now, index);
        if let Some(id) = &req.request_id {
            if let Some(prev) = self.requests.get(id) {
                return Applied {
                    result: prev.result.clone(),
                    changed: Vec::new(),
                    triggers: Vec::new(),
                    history: Vec::new(),
                };
            }
        }
        // An `As` entry: its need resolved once, before the command changes what its target
        // resolves to, for the check and for the audit row.
        let (result, audited) = match &req.command {
            Command::As { actor, command } => {
                let need = crate::access::need(self, command);
                let result = self.execute_as(actor, command, &need, &mut tx);
                let target = crate::access::target_text(&need);
                (
                    result,
                    Some((actor.clone(), command.variant_name(), target)),
                )
            }
            other => (self.execute(other, &mut tx), None),
        };
        // What the command changed may have finished a wave or failed a rollout: committed
        // in the same entry, at its time.
        if result.is_ok() {
            self.track_rollouts(&mut tx);
        }
        if result.is_err() {
            debug_assert!(
                tx.changed.is_empty(),
                "a refused command changed {:?}",
                tx.changed
            );
            tx.changed.clear();
            tx.triggers.clear();
        }
        if let Some((actor, command, target)) = audited {
            // Agents' reports are telemetry, recorded where they land (plans, Activity): only
            // a refused one is an audited event.
            let report = matches!(actor, Identity::Agent(_)) && result.is_ok();
            if !report {
                self.record_write(actor, command, target, &result, &mut tx);
            }
        }
        if let Some(id) = &req.request_id {
            let record = RequestRecord {
                id: id.clone(),
                index,
                time_ms: now,
                result: result.clone(),
            };
            self.requests.put(record, &mut tx.changed);
        }
        self.forget_requests_before(now - REQUEST_TTL_MS, &mut tx.changed);
        // An entry that changed the state moves the clock: every time the state records is
        // at least every time recorded before it. One that changed nothing leaves no trace.
        if !tx.changed.is_empty() && clock != self.entry_clock() {
            self.entry_clock.put(clock, &mut tx.changed);
        }
        self.check_invariants(&tx.changed);
        debug_assert!(
            tx.history
                .iter()
                .all(|w| w.key().residence() == crate::Residence::History),
            "a history write outside history: {:?}",
            tx.history
        );
        Applied {
            result,
            changed: tx.changed,
            triggers: tx.triggers,
            history: tx.history,
        }
    }

    /// Runs the handler of `command`: one arm per variant, each only delegating. A command
    /// above the cluster's feature level is refused first, on every node alike
    /// ([`crate::feature_gate`]).
    // Long: the one exhaustive match on `Command`, one delegating arm per variant.
    fn execute(&mut self, command: &Command, tx: &mut Tx) -> Result<CommandOutput, CommandError> {
        crate::feature_gate::check_level(self, command)?;
        let recorded = self.recorded_actor(tx);
        let actor_of = |field: &str| recorded.clone().unwrap_or_else(|| field.to_string());
        match command {
            Command::CreateEnvironment { name, description } => {
                self.create_environment(name, description, tx)
            }
            Command::DeleteEnvironment { name } => self.delete_environment(name, tx),
            Command::CreateEntity {
                environment,
                kind,
                name,
                product_id,
                k8s_namespace,
                account_id,
                release_channel,
            } => self.create_entity(
                entities::NewEntity {
                    environment,
                    kind: *kind,
                    name,
                    product_id,
                    k8s_namespace,
                    account_id,
                    release_channel,
                },
                tx,
            ),
            Command::SetEnvironmentSettings { environment, patch } => {
                self.set_environment_settings(environment, patch, tx)
            }
            Command::SetRegistry {
                environment,
                name,
                url,
                hub_access,
                ca_pem,
                insecure_skip_verify,
            } => self.set_registry(
                environments::RegistryChange {
                    environment,
                    name,
                    url,
                    hub_access,
                    ca_pem,
                    insecure_skip_verify: *insecure_skip_verify,
                },
                tx,
            ),
            Command::RemoveRegistry { environment, name } => {
                self.remove_registry(environment, name, tx)
            }
            Command::SetEntitySettings { entity, patch } => {
                self.set_entity_settings(entity, patch, tx)
            }
            Command::SetConfigOverrides {
                entity,
                version,
                config,
            } => self.set_config_overrides(entity, version, config, tx),
            Command::SetSecret {
                entity,
                name,
                value,
            } => self.set_secret(entity, name, value, SecretWrite::UnchangedIfEqual, tx),
            Command::PutSecret {
                entity,
                name,
                value,
            } => self.set_secret(entity, name, value, SecretWrite::AlwaysNewRevision, tx),
            Command::CreateProduct {
                product_id,
                description,
            } => self.create_product(product_id, description, tx),
            Command::SetProductWindow { product_id, window } => {
                self.set_product_window(product_id, window, tx)
            }
            Command::PublishRelease { manifest } => self.publish_release(manifest, tx),
            Command::CreateChannel { name, description } => {
                self.create_channel(name, description, tx)
            }
            Command::SetReleaseChannel {
                channel,
                product_id,
                version,
                member,
            } => self.set_release_channel(channel, product_id, version, *member, tx),
            Command::RecallReleases {
                product_id,
                from,
                to,
                reason,
            } => self.recall_releases(product_id, from, to, reason, tx),
            Command::DeleteRecall { id } => self.delete_recall(id, tx),
            Command::AddWindowOverride {
                scope,
                start_ms,
                end_ms,
                reason,
                actor,
            } => self.add_window_override(scope, start_ms, end_ms, reason, &actor_of(actor), tx),
            Command::RemoveWindowOverride { scope, id } => {
                self.remove_window_override(scope, id, tx)
            }
            Command::CreateSuppression {
                scope,
                start_ms,
                end_ms,
                reason,
                cancel_active_plans,
                actor,
            } => self.create_suppression(
                suppressions::NewSuppression {
                    scope,
                    start_ms,
                    end_ms,
                    reason,
                    cancel_active_plans: *cancel_active_plans,
                    actor: &actor_of(actor),
                },
                tx,
            ),
            Command::DeleteSuppression { id, actor } => {
                self.delete_suppression(id, &actor_of(actor), tx)
            }
            Command::PublishModule { file_name, yaml } => {
                self.publish_module(file_name.as_deref(), yaml, tx)
            }
            Command::DeleteModule { name } => self.delete_module(name, tx),
            Command::InstallModule {
                environment,
                module,
                version,
                variables,
                actor,
            } => self.install_module(
                modules::NewInstallation {
                    environment,
                    module,
                    version: version.as_deref(),
                    variables,
                    channel: None,
                    actor: &actor_of(actor),
                },
                tx,
            ),
            Command::SetModuleVariables {
                installation,
                variables,
            } => self.set_module_variables(installation, variables, tx),
            Command::SetModuleUpdatesPaused {
                installation,
                paused,
                actor,
            } => self.set_updates_paused(installation, *paused, &actor_of(actor), tx),
            Command::UnlinkModule {
                installation,
                actor,
            } => self.unlink_module(installation, &actor_of(actor), tx),
            Command::ApproveChangeRequest { id, actor } => {
                self.approve_change_request(id, &actor_of(actor), tx)
            }
            Command::RejectChangeRequest { id, actor, reason } => {
                self.reject_change_request(id, &actor_of(actor), reason, tx)
            }
            Command::ApplyCanary { environment, yaml } => {
                self.apply_canary(environment.as_deref(), yaml, tx)
            }
            Command::DeleteCanary { id } => self.delete_canary(id, tx),
            Command::CanaryTick { id, step, input } => self.canary_tick(id, *step, input, None, tx),
            Command::CanaryJudgedTick {
                id,
                step,
                input,
                samples,
            } => self.canary_tick(id, *step, input, Some(samples), tx),
            Command::CanaryManual { id, action, actor } => {
                self.canary_manual_command(id, action, &actor_of(actor), tx)
            }
            Command::CancelPlans {
                target,
                reason,
                suppress_for_ms,
                actor,
            } => self.cancel_plans(target, reason, suppress_for_ms, &actor_of(actor), tx),
            Command::IssueCommand {
                entity,
                command,
                reason,
                actor,
            } => self.issue_command(entity, command, reason, &actor_of(actor), tx),
            Command::Evaluate {
                entities,
                artifacts,
            } => self.evaluate(entities, artifacts, tx),
            Command::ExpireSuppressions => self.expire_suppressions(tx),
            Command::ReportEntityStates {
                environment,
                states,
            } => self.report_entity_states(environment, states, tx),
            Command::ReportSampledEntityStates {
                environment,
                states,
            } => self.report_sampled_entity_states(environment, states, tx),
            Command::ReportTasks {
                environment,
                reports,
            } => self.report_tasks(environment, reports, tx),
            Command::ReportCanaries {
                environment,
                observations,
            } => self.report_canaries(environment, observations, &[], tx),
            Command::ReportCanariesWithSamples {
                environment,
                observations,
                samples,
            } => self.report_canaries(environment, observations, samples, tx),
            Command::ReportTask {
                environment,
                report,
            } => self.report_task(environment, report, tx),
            Command::SetClusterKey { name, key } => self.set_cluster_key(name, key, tx),
            Command::BindRole {
                identity,
                role,
                environments,
                products,
            } => self.bind_role(identity, *role, environments, products, tx),
            Command::UnbindRole { identity, role } => self.unbind_role(identity, *role, tx),
            Command::SetAuditRetention { entries } => self.set_audit_retention(*entries, tx),
            Command::RecordRefusal {
                actor,
                command,
                target,
                error,
            } => self.record_refusal(actor, command, target, error, tx),
            Command::CreateToken {
                name,
                hash,
                ttl_ms,
                roles,
            } => self.create_token(name, hash, *ttl_ms, roles, tx),
            Command::RevokeToken { name } => self.revoke_token(name, tx),
            Command::SetEnvironmentLabels {
                environment,
                labels,
            } => self.set_environment_labels(environment, labels, tx),
            Command::ApplyRolloutPolicy { yaml } => self.apply_rollout_policy(yaml, tx),
            Command::DeleteRolloutPolicy { product } => self.delete_rollout_policy(product, tx),
            Command::PromoteWave {
                product,
                version,
                actor,
            } => self.promote_wave(product, version, &actor_of(actor), tx),
            Command::HaltRollout {
                product,
                version,
                reason,
                actor,
            } => self.halt_rollout(product, version, reason, &actor_of(actor), tx),
            Command::ResumeRollout {
                product,
                version,
                actor,
            } => self.resume_rollout(product, version, &actor_of(actor), tx),
            Command::SetCanaryConfigTracking { enabled } => {
                self.set_canary_config_tracking(*enabled, tx)
            }
            Command::SetApproverGroup { name, members } => {
                self.set_approver_group(name, members, tx)
            }
            Command::DeleteApproverGroup { name } => self.delete_approver_group(name, tx),
            Command::SetApprovalPolicy { scope, policy } => {
                self.set_approval_policy(scope, policy, tx)
            }
            Command::RequestWindowException {
                scope,
                start_ms,
                end_ms,
                reason,
                actor: _,
            } => self.request_window_exception(scope, *start_ms, *end_ms, reason, tx),
            Command::ApproveWindowException { id, actor: _ } => {
                self.approve_window_exception(id, tx)
            }
            Command::RejectWindowException {
                id,
                reason,
                actor: _,
            } => self.reject_window_exception(id, reason, tx),
            Command::InstallModuleOnChannel {
                environment,
                module,
                version,
                variables,
                channel,
                actor,
            } => self.install_module(
                modules::NewInstallation {
                    environment,
                    module,
                    version: version.as_deref(),
                    variables,
                    channel: channel.as_deref(),
                    actor: &actor_of(actor),
                },
                tx,
            ),
            Command::SetInstallationChannel {
                installation,
                channel,
                actor,
            } => self.set_installation_channel(
                installation,
                channel.as_deref(),
                &actor_of(actor),
                tx,
            ),
            Command::SetModuleChannel {
                module,
                version,
                channel,
                member,
            } => self.set_module_channel(module, version, channel, *member, tx),
            Command::ApplyMetricTemplate { environment, yaml } => {
                self.apply_metric_template(environment.as_deref(), yaml, tx)
            }
            Command::DeleteMetricTemplate { id } => self.delete_metric_template(id, tx),
            Command::ApplyAlertProvider { environment, yaml } => {
                self.apply_alert_provider(environment.as_deref(), yaml, tx)
            }
            Command::DeleteAlertProvider { id } => self.delete_alert_provider(id, tx),
            Command::RevokeCertificate {
                serial,
                reason,
                identity,
                not_after,
            } => self.revoke_certificate(serial, reason, identity.as_deref(), *not_after, tx),
            Command::SetClusterLevel { level } => self.set_cluster_level(*level, tx),
            Command::RevokeCertificates { certificates } => {
                self.revoke_certificates(certificates, tx)
            }
            // The envelope is opened by `apply`; one reaching here is nested.
            Command::As { .. } => Err(CommandError::invalid("command", "an As inside an As")),
        }
    }

    /// The actor a command's own `actor` field stands for, when the entry records it
    /// elsewhere: from [`LEVEL_2`] on, a write a node wrapped in `Command::As` names its
    /// caller only there (the node leaves the field empty), so apply takes the verified
    /// identity. `None` (the field is the record) for a write without a wrapper (an insecure
    /// node names nobody: the field is what the client or the dashboard wrote) and for an
    /// entry from before that level, whose field the node stamped with the same identity.
    fn recorded_actor(&self, tx: &Tx) -> Option<String> {
        let once = self.cluster_level() >= LEVEL_2;
        tx.actor.as_ref().filter(|_| once).map(Identity::to_string)
    }

    /// Runs `command` as `actor`, if `actor`'s role bindings allow it now.
    fn execute_as(
        &mut self,
        actor: &Identity,
        command: &Command,
        need: &crate::access::Need,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        self.require_live_token(actor, tx.now)?;
        crate::access::authorize_need(self, actor, command, need)?;
        debug_assert!(tx.actor.is_none(), "one actor per entry");
        tx.actor = Some(actor.clone());
        self.execute(command, tx)
    }

    /// The entity `id`, or a not-found error.
    pub(crate) fn require_entity(&self, id: &str) -> Result<&crate::entity::Entity, CommandError> {
        self.entities.get(id).ok_or_else(|| not_found("entity", id))
    }

    /// Checks that `scope` names an existing environment or entity.
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

    /// Appends an audit entry keyed by the entry's index.
    pub(crate) fn audit_entry(
        &mut self,
        actor: &str,
        action: &str,
        target: String,
        reason: &str,
        tx: &mut Tx,
    ) {
        let (now, index) = (tx.now, tx.index);
        self.audit.put(
            AuditEntry {
                index,
                time_ms: now,
                actor: actor.to_string(),
                action: action.to_string(),
                target,
                reason: reason.to_string(),
            },
            &mut tx.changed,
        );
    }

    fn forget_requests_before(&mut self, cutoff: TimestampMs, changed: &mut Vec<RecordKey>) {
        while let Some((t, id)) = self.requests.index().expiry.first().cloned() {
            if t >= cutoff {
                break;
            }
            let forgotten = self.requests.remove(&id, changed);
            debug_assert!(forgotten.is_some(), "request {id} expired twice");
        }
    }
}

/// Parses a window spec, naming `field` in the error.
pub(crate) fn parse_window(
    field: &str,
    spec: &WindowSpec,
) -> Result<MaintenanceWindow, CommandError> {
    MaintenanceWindow::parse(&spec.spec, &spec.time_zone)
        .map_err(|e| CommandError::invalid(field, e.to_string()))
}

/// Parses a semantic version, naming `field` in the error.
pub(crate) fn parse_version(field: &str, text: &str) -> Result<Version, CommandError> {
    Version::parse(text.trim()).map_err(|e| {
        CommandError::invalid(field, format!("{text:?} is not a semantic version: {e}"))
    })
}

/// Checks a free-text field: at most [`MAX_TEXT`] bytes, non-blank if `required`.
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

/// Checks that `scope` could name an environment or an entity (a name as
/// [`crate::name::validate_name`] takes, an id shorter than [`MAX_ENTITY_ID_LEN`]) before it is
/// looked up.
pub(crate) fn check_scope_name(field: &str, scope: &Scope) -> Result<(), CommandError> {
    match scope {
        Scope::Environment(env) => crate::name::validate_name(field, env),
        Scope::Entity(id) if id.len() >= MAX_ENTITY_ID_LEN => Err(CommandError::invalid(
            field,
            format!(
                "{} characters; entity ids are shorter than {MAX_ENTITY_ID_LEN}",
                id.len()
            ),
        )),
        Scope::Entity(_) => Ok(()),
    }
}

/// The error for a missing `kind` named `name`.
pub(crate) fn not_found(kind: &str, name: &str) -> CommandError {
    CommandError::NotFound {
        kind: kind.into(),
        name: name.into(),
    }
}

/// The output of a command that changed record `id`.
pub(crate) fn changed(id: impl Into<String>, summary: impl Into<String>) -> CommandOutput {
    CommandOutput::Changed {
        id: id.into(),
        summary: summary.into(),
    }
}

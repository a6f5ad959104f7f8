//! Read-only queries of the orchestration state (`Hub.Query`), answered as JSON views.
//!
//! Views are built here, field by field, so nothing is exposed by accident: secret values are
//! never part of any view (SPEC S4), only their names and the revision.

use hub_engine::access::{Need, Role, Target};
use hub_engine::evaluate::{evaluate, format_time};
use hub_engine::plan::Plan;
use hub_engine::State;
use serde_json::Value;

use hub_client::answer::{
    ActivityAnswer, ActivityEntry, ApprovalPoliciesAnswer, ApproverGroupsAnswer, ArtifactView,
    AuditAnswer, AuditEntryView, CanariesAnswer, CanaryActionView, CanaryAddressesView,
    CanaryConditionView, CanaryEventView, CanaryJudgesView, CanaryObservationView,
    CanarySampleView, CanaryStatusBlock, CanaryTargetView, CanaryView, ChangeRequestView,
    ChangeRequestsAnswer, ChannelView, ChannelsAnswer, ClusterSettingsAnswer, CommittedWeightView,
    ConstraintView, EntityView, EnvironmentLabelsAnswer, EnvironmentLabelsView,
    EnvironmentSettingsView, Explanation, FailureView, HaltView, IgnoredFieldView,
    InstallationEntityView, IssuedView, JudgedMetricView, LastExecution, MeetsConstraints,
    MetricProviderView, MetricTemplateView, MetricTemplatesAnswer, MetricWindowView,
    ModuleDryRunAnswer, ModuleEntityView, ModuleInstallationDetail, ModuleInstallationView,
    ModuleInstallationsAnswer, ModuleSummaryView, ModuleView, ModulesAnswer, PlanView, PlansAnswer,
    ProductView, ProductsAnswer, ProposedChange, RecallView, RecallsAnswer, RegistryRef,
    RegistryView, ReleaseView, ReleasesAnswer, ReportedView, ResolvedEntity,
    RevokedCertificateView, RevokedCertificatesAnswer, RoleBindingView, RoleBindingsAnswer,
    RolloutEntityView, RolloutPoliciesAnswer, RolloutPolicyView, RolloutStatusView,
    SuppressionView, SuppressionsAnswer, TaskView, TokenRoleView, TokenView, TokensAnswer,
    VerdictView, WaveStatusView, WaveView, WindowExceptionsAnswer, WindowOverrideView,
};
pub use hub_client::query::Query;

use crate::artifacts::ArtifactChecker;
use crate::query_approval as approval;
use hub_engine::window_exception::ExceptionStatus;

/// What a caller needs to ask `query`: one arm per query kind, no fallback, so a new
/// query does not compile without its rule. Every read is a viewer's (any role binding)
/// but the token list, an admin's; none answers with a secret value.
pub fn need(query: &Query) -> Need {
    let viewer = Need::Role(Role::Viewer, Target::Cluster);
    let admin = Need::Role(Role::Admin, Target::Cluster);
    match query {
        Query::ResolveEntity { .. }
        | Query::Entity { .. }
        | Query::Explain { .. }
        | Query::Activity { .. }
        | Query::Plans { .. }
        | Query::Plan { .. }
        | Query::Products
        | Query::Releases { .. }
        | Query::Channels
        | Query::Recalls
        | Query::Suppressions { .. }
        | Query::EnvironmentSettings { .. }
        | Query::Audit { .. }
        | Query::Modules
        | Query::Module { .. }
        | Query::ModuleDryRun { .. }
        | Query::ModuleInstallations { .. }
        | Query::ModuleInstallation { .. }
        | Query::ChangeRequests { .. }
        | Query::ChangeRequest { .. }
        | Query::Canaries { .. }
        | Query::Canary { .. }
        | Query::EnvironmentLabels
        | Query::RolloutPolicies
        | Query::RolloutPolicy { .. }
        | Query::RolloutStatus { .. }
        | Query::RoleBindings
        | Query::ClusterSettings
        | Query::ApproverGroups
        | Query::ApprovalPolicies
        | Query::WindowExceptions { .. }
        | Query::WindowException { .. }
        | Query::MetricTemplates { .. }
        | Query::MetricTemplate { .. } => viewer,
        Query::Tokens | Query::RevokedCertificates => admin,
    }
}

/// What answering a query costs, which decides where it is answered (see
/// [`crate::query_pool`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cost {
    /// Lookups by key and an answer of bounded size: on the call's task, under the state's
    /// lock.
    Lookup,
    /// A walk over a table, or a computation over many rows, growing with the state: on the
    /// query pool, under the state's lock.
    Scan,
    /// Parses text the caller sent: on the query pool, parsing before the state's lock is
    /// taken.
    Parse,
}

/// Where `query` is answered: one arm per query kind, no fallback, so a new query does not
/// compile without its cost.
pub fn cost(query: &Query) -> Cost {
    match query {
        Query::ResolveEntity { .. }
        | Query::Entity { .. }
        | Query::Plan { .. }
        | Query::EnvironmentSettings { .. }
        | Query::Module { .. }
        | Query::ModuleInstallation { .. }
        | Query::ChangeRequest { .. }
        | Query::Canary { .. }
        | Query::RolloutPolicy { .. }
        | Query::ClusterSettings
        | Query::WindowException { .. }
        | Query::MetricTemplate { .. } => Cost::Lookup,
        Query::Explain { .. }
        | Query::Activity { .. }
        | Query::Plans { .. }
        | Query::Products
        | Query::Releases { .. }
        | Query::Channels
        | Query::Recalls
        | Query::Suppressions { .. }
        | Query::Audit { .. }
        | Query::Modules
        | Query::ModuleInstallations { .. }
        | Query::ChangeRequests { .. }
        | Query::Canaries { .. }
        | Query::EnvironmentLabels
        | Query::RolloutPolicies
        | Query::RolloutStatus { .. }
        | Query::RoleBindings
        | Query::Tokens
        | Query::RevokedCertificates
        | Query::ApproverGroups
        | Query::ApprovalPolicies
        | Query::WindowExceptions { .. }
        | Query::MetricTemplates { .. } => Cost::Scan,
        Query::ModuleDryRun { .. } => Cost::Parse,
    }
}

/// One audit row: a write of the write audit, the entry a command wrote itself, or both (the
/// same log index).
struct AuditRow<'a> {
    index: u64,
    write: Option<&'a hub_engine::audit::WriteAudit>,
    entry: Option<&'a hub_engine::record::AuditEntry>,
}

impl AuditRow<'_> {
    fn actor(&self) -> Option<String> {
        self.write
            .map(|w| w.actor.to_string())
            .or(self.entry.map(|l| l.actor.clone()))
    }

    /// The entry's action, else the write's command.
    fn action(&self) -> Option<&str> {
        self.entry
            .map(|l| l.action.as_str())
            .or(self.write.map(|w| w.command.as_str()))
    }

    fn target(&self) -> Option<&str> {
        self.entry
            .map(|l| l.target.as_str())
            .or(self.write.map(|w| w.target.as_str()))
    }

    fn time_ms(&self) -> i64 {
        self.write
            .map(|w| w.time_ms)
            .or(self.entry.map(|l| l.time_ms))
            .unwrap_or(0)
    }

    /// Whether the row passes the `audit` query's filters.
    fn wanted(
        &self,
        actor: Option<&str>,
        environment: Option<&str>,
        kind: Option<&str>,
        since_ms: Option<i64>,
    ) -> bool {
        actor.is_none_or(|a| self.actor().as_deref() == Some(a))
            && environment.is_none_or(|e| {
                self.target().is_some_and(|t| {
                    t.strip_prefix("environment ") == Some(e)
                        || t == e
                        || t.strip_prefix("eid:")
                            .and_then(|t| t.strip_prefix(e))
                            .is_some_and(|t| t.starts_with(':'))
                })
            })
            && kind.is_none_or(|k| {
                self.write.is_some_and(|w| w.command == k) || self.action() == Some(k)
            })
            && since_ms.is_none_or(|s| self.time_ms() >= s)
    }

    /// The row as the `audit` query shows it. Every text is shown with its control
    /// characters escaped ([`hub_client::text::escape_controls`]): a refused write's target is
    /// whatever the caller wrote, and a newline in it must not print as a second row.
    fn view(&self) -> AuditEntryView {
        use hub_client::text::escape_controls as esc;
        use hub_engine::audit::{AuthMethod, WriteOutcome};
        let (w, l) = (self.write, self.entry);
        let (outcome, error) = match w.map(|w| &w.outcome) {
            Some(WriteOutcome::Refused(e)) => ("refused", esc(&e.to_string()).into_owned()),
            Some(WriteOutcome::Applied) | None => ("applied", String::new()),
        };
        let time_ms = self.time_ms();
        AuditEntryView {
            action: self.action().map(|a| esc(a).into_owned()),
            actor: self.actor().map(|a| esc(&a).into_owned()),
            command: w.map(|w| esc(&w.command).into_owned()),
            error,
            index: self.index,
            method: w.map(|w| {
                match w.method {
                    AuthMethod::Certificate => "certificate",
                    AuthMethod::Token => "token",
                }
                .to_string()
            }),
            outcome: outcome.to_string(),
            reason: l.map(|l| esc(&l.reason).into_owned()).unwrap_or_default(),
            target: self.target().map(|t| esc(t).into_owned()),
            time: format_time(time_ms),
            time_ms,
        }
    }
}

/// Every audit row, newest first: the write audit (every write of an identified caller, with
/// its outcome) merged by log index with the entries commands write themselves (suppressions,
/// overrides, cancels, break-glass commands, module changes: their action, target and reason).
/// Rows are filtered before they are shown, so a filter that passes few of the retained rows
/// (100,000 by default) builds only those.
fn audit_rows(state: &State) -> impl Iterator<Item = AuditRow<'_>> + '_ {
    let mut writes = state.write_audit().rev().peekable();
    let mut legacy = state.audit().rev().peekable();
    std::iter::from_fn(move || {
        let w_index = writes.peek().map(|w| w.index);
        let l_index = legacy.peek().map(|l| l.index);
        let index = w_index.max(l_index)?;
        Some(AuditRow {
            index,
            write: (w_index == Some(index)).then(|| writes.next()).flatten(),
            entry: (l_index == Some(index)).then(|| legacy.next()).flatten(),
        })
    })
}

/// Why a query failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The query JSON is malformed.
    #[error("bad query: {0}")]
    Bad(String),
    /// What it names does not exist.
    #[error("{0}")]
    NotFound(String),
    /// This node could not read what it stores (the details are in its log).
    #[error("{0}")]
    Internal(String),
}

/// Resolves an entity reference against the state.
pub fn resolve_entity(state: &State, reference: &str) -> Result<String, QueryError> {
    if reference.starts_with("eid:") {
        return state
            .entity(reference)
            .map(|e| e.id.0.clone())
            .ok_or_else(|| QueryError::NotFound(format!("entity {reference:?} not found")));
    }
    let parts: Vec<&str> = reference.split('/').collect();
    let (env, kind, name) = match parts.as_slice() {
        [env, name] => (*env, None, *name),
        [env, kind, name] => (*env, Some(*kind), *name),
        _ => {
            return Err(QueryError::Bad(format!(
                "entity {reference:?}: expected ENV/NAME, ENV/KIND/NAME or an eid:… id"
            )))
        }
    };
    if state.environment(env).is_none() {
        return Err(QueryError::NotFound(format!(
            "environment {env:?} not found"
        )));
    }
    let matches: Vec<String> = state
        .entities_of(env)
        .filter(|e| e.name == name && kind.is_none_or(|k| e.kind.as_str() == k))
        .map(|e| e.id.0.clone())
        .collect();
    match matches.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(QueryError::NotFound(format!(
            "entity {reference:?} not found"
        ))),
        _ => Err(QueryError::Bad(format!(
            "entity {reference:?} is ambiguous ({}); write ENV/KIND/NAME",
            matches.join(", ")
        ))),
    }
}

/// A plan's view (no secrets: plans never hold values); `full` adds the record's
/// config, artifacts, tasks and output.
pub fn plan_view(p: &Plan, full: bool) -> PlanView {
    use hub_engine::plan::PlanKind;
    let text = |t: Option<i64>| t.map(format_time);
    let (command, actor) = match &p.kind {
        PlanKind::Command { command, actor } => {
            (Some(command.label().to_string()), Some(actor.clone()))
        }
        _ => (None, None),
    };
    let rolls_back = match &p.kind {
        PlanKind::Rollback { failed_plan } => Some(failed_plan.clone()),
        _ => None,
    };
    PlanView {
        actor,
        artifacts: full.then(|| {
            p.artifacts
                .iter()
                .map(|a| ArtifactView {
                    sha256: a.sha256.clone(),
                    uri: a.uri.clone(),
                })
                .collect()
        }),
        cancel_reason: p.cancel_reason.clone(),
        command,
        created: format_time(p.created_ms),
        ended: text(p.ended_ms),
        entity: p.entity.clone(),
        environment: p.environment.clone(),
        failure: p.failure.as_ref().map(|f| FailureView {
            message: f.message.clone(),
            not_ready: f.not_ready.clone(),
            stage: f.stage.clone(),
            validation_errors: f.validation_errors.clone(),
        }),
        from_config_sha256: full.then(|| p.from_config_sha256.clone()),
        from_version: p.from_version.as_ref().map(ToString::to_string),
        id: p.id.clone(),
        issued: format_time(p.issued_ms),
        issued_index: p.issued_index,
        issued_ms: p.issued_ms,
        kind: p.kind.label().to_string(),
        output: full.then(|| p.output.clone()),
        reason: p.reason.clone(),
        rolls_back,
        secrets_revision: full.then_some(p.secrets_revision),
        started: text(p.started_ms),
        status: p.status.as_str().to_string(),
        tasks: full.then(|| {
            p.tasks
                .iter()
                .map(|t| TaskView {
                    attempt: t.attempt,
                    ended: text(t.ended_ms),
                    error: t.error.clone(),
                    name: t.name.clone(),
                    started: text(t.started_ms),
                    state: t.state.as_str().to_string(),
                })
                .collect()
        }),
        to_config: full.then(|| p.to_config.clone()),
        to_version: p.to_version.as_ref().map(ToString::to_string),
    }
}

/// A typed answer as the JSON the wire carries.
fn to_json<T: serde::Serialize>(answer: &T) -> Result<Value, QueryError> {
    serde_json::to_value(answer).map_err(|e| {
        tracing::error!(error = %e, "an answer did not serialize");
        QueryError::Internal("an answer did not serialize on this node".into())
    })
}

/// A finished plan from history, by id; a storage failure is logged and answered as an
/// internal error (its cause stays in this node's log).
fn finished_plan(history: &raft_store::History, id: &str) -> Result<Option<Plan>, QueryError> {
    history.finished_plan(id).map_err(|e| {
        tracing::error!(plan = %id, error = %e, "reading a stored finished plan");
        QueryError::Internal(format!("reading plan {id} failed on this node"))
    })
}

/// `plans`: the newest `limit` plans, active and kept finished ones, of one entity, one
/// environment or all, newest first. Finished plans are chosen from their outcomes in the
/// state, and only the chosen ones are read from history.
fn plans_view(
    state: &State,
    history: &raft_store::History,
    environment: Option<&str>,
    entity: Option<&str>,
    active_only: bool,
    limit: usize,
) -> Result<PlansAnswer, QueryError> {
    let entity = entity.map(|r| resolve_entity(state, r)).transpose()?;
    let env_prefix = environment.map(hub_engine::EntityId::environment_prefix);
    let wanted = |e: &str| {
        entity.as_deref().is_none_or(|id| id == e)
            && env_prefix.as_deref().is_none_or(|p| e.starts_with(p))
    };
    // (issued index, id, the plan if active)
    let mut rows: Vec<(u64, &str, Option<&Plan>)> = match &entity {
        Some(id) => state.active_plan_of(id).into_iter().collect::<Vec<_>>(),
        None => state.plans().filter(|p| wanted(&p.entity)).collect(),
    }
    .into_iter()
    .map(|p| (p.issued_index, p.id.as_str(), Some(p)))
    .collect();
    if !active_only {
        match &entity {
            Some(id) => rows.extend(
                state
                    .outcomes_of(id)
                    .map(|o| (o.issued_index, o.id.as_str(), None)),
            ),
            None => rows.extend(
                state
                    .plan_outcomes()
                    .filter(|o| wanted(&o.entity))
                    .map(|o| (o.issued_index, o.id.as_str(), None)),
            ),
        }
    }
    rows.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(a.1)));
    rows.truncate(limit);
    let mut out = Vec::with_capacity(rows.len());
    for (_, id, active) in rows {
        match active {
            Some(p) => out.push(plan_view(p, false)),
            None => {
                let p = finished_plan(history, id)?.ok_or_else(|| {
                    tracing::error!(plan = %id, "a kept finished plan is missing from history");
                    QueryError::Internal(format!("plan {id} is missing on this node"))
                })?;
                out.push(plan_view(&p, false));
            }
        }
    }
    Ok(PlansAnswer { plans: out })
}

/// Answers `query` from `state` and its `history` at time `now`. `checker` supplies artifact observations for
/// `explain` (what the leader would see; other nodes show "not checked yet").
// Long: one short arm per query kind; the flat dispatch is the list of queries.
pub fn answer(
    state: &State,
    history: &raft_store::History,
    query: &Query,
    now: i64,
    checker: Option<&ArtifactChecker>,
) -> Result<Value, QueryError> {
    Ok(match query {
        Query::ResolveEntity { entity } => to_json(&ResolvedEntity {
            id: resolve_entity(state, entity)?,
        })?,
        Query::Entity { entity } => {
            let id = resolve_entity(state, entity)?;
            let e = state
                .entity(&id)
                .ok_or_else(|| QueryError::NotFound(format!("entity {id} not found")))?;
            to_json(&entity_view(state, e))?
        }
        Query::Explain { entity } => {
            let id = resolve_entity(state, entity)?;
            let lookup =
                |l: &hub_engine::artifact::ArtifactLocation| checker.and_then(|c| c.status(l));
            let eval = evaluate(state, &id, now, &lookup)
                .ok_or_else(|| QueryError::NotFound(format!("entity {id} not found")))?;
            to_json(&explain_view(state, history, &eval)?)?
        }
        Query::Activity { entity } => to_json(&activity_view(state, history, entity)?)?,
        Query::Plans {
            environment,
            entity,
            active,
            limit,
        } => {
            let limit = limit.unwrap_or(100).min(10_000);
            to_json(&plans_view(
                state,
                history,
                environment.as_deref(),
                entity.as_deref(),
                *active,
                limit,
            )?)?
        }
        Query::Plan { id } => {
            let p = match state.plan(id) {
                Some(p) => p.clone(),
                None => finished_plan(history, id)?
                    .ok_or_else(|| QueryError::NotFound(format!("plan {id:?} not found")))?,
            };
            to_json(&plan_view(&p, true))?
        }
        Query::Products => to_json(&ProductsAnswer {
            products: state
                .products()
                .map(|p| ProductView {
                    description: p.description.clone(),
                    id: p.id.clone(),
                    maintenance_window: p.maintenance_window.as_ref().map(ToString::to_string),
                    releases: state.releases_desc(&p.id).count(),
                })
                .collect(),
        })?,
        Query::Releases { product } => to_json(&releases_view(state, product.as_deref())?)?,
        Query::Channels => to_json(&channels_view(state))?,
        Query::Recalls => to_json(&RecallsAnswer {
            recalls: state
                .recalls()
                .map(|r| RecallView {
                    created: format_time(r.created_at_ms),
                    id: r.id.clone(),
                    product: r.product_id.clone(),
                    reason: r.reason.clone(),
                    versions: r.range_text(),
                })
                .collect(),
        })?,
        Query::Suppressions { environment } => to_json(&SuppressionsAnswer {
            suppressions: state
                .suppressions()
                .filter(|s| {
                    environment
                        .as_ref()
                        .is_none_or(|e| s.scope.environment() == e)
                })
                .map(|s| SuppressionView {
                    active: s.active_at(now),
                    end: s.end_ms.map(format_time),
                    id: s.id.clone(),
                    reason: s.reason.clone(),
                    scope: s.scope.to_string(),
                    source: s.source.label().to_string(),
                    start: format_time(s.start_ms),
                })
                .collect(),
        })?,
        Query::EnvironmentSettings { environment } => {
            to_json(&environment_settings_view(state, environment, now)?)?
        }
        Query::Audit {
            limit,
            actor,
            environment,
            kind,
            since_ms,
        } => {
            let log = state.audit_log();
            to_json(&AuditAnswer {
                audit: audit_rows(state)
                    .filter(|r| {
                        r.wanted(
                            actor.as_deref(),
                            environment.as_deref(),
                            kind.as_deref(),
                            *since_ms,
                        )
                    })
                    .take(limit.unwrap_or(100).min(10_000))
                    .map(|r| r.view())
                    .collect(),
                dropped: log.dropped,
                retention: log.retention,
            })?
        }
        Query::RoleBindings => to_json(&RoleBindingsAnswer {
            bindings: state
                .role_bindings()
                .map(|b| RoleBindingView {
                    bound: format_time(b.bound_ms),
                    bound_by: b.bound_by.clone(),
                    environments: b.environments.iter().cloned().collect(),
                    identity: b.identity.to_string(),
                    products: b.products.iter().cloned().collect(),
                    role: b.role.as_str().to_string(),
                })
                .collect(),
        })?,
        Query::RevokedCertificates => to_json(&RevokedCertificatesAnswer {
            certificates: state
                .revoked_certificates()
                .map(|c| RevokedCertificateView {
                    identity: c.identity.as_ref().map(ToString::to_string),
                    not_after: c.not_after.map(format_time),
                    reason: c.reason.clone(),
                    revoked: format_time(c.revoked_at),
                    revoked_by: c.revoked_by.to_string(),
                    serial: c.serial.clone(),
                })
                .collect(),
        })?,
        Query::ClusterSettings => to_json(&ClusterSettingsAnswer {
            canary_config_tracking: state.cluster_settings().canary_config_tracking,
        })?,
        Query::Tokens => to_json(&tokens_view(state, now))?,
        Query::Modules => to_json(&modules_view(state))?,
        Query::Module { name, version } => {
            let m = match version {
                Some(v) => {
                    let v = semver::Version::parse(v)
                        .map_err(|e| QueryError::Bad(format!("version {v:?}: {e}")))?;
                    state.module(name, &v)
                }
                None => state.latest_module(name),
            }
            .ok_or_else(|| QueryError::NotFound(format!("module {name:?} not found")))?;
            to_json(&module_view(m))?
        }
        Query::ModuleDryRun { file_name, yaml } => to_json(&dry_run_view(
            state.prepare_module_publish(file_name.as_deref(), yaml),
        )?)?,
        Query::ModuleInstallations {
            environment,
            module,
        } => to_json(&ModuleInstallationsAnswer {
            installations: state
                .installations()
                .filter(|i| environment.as_ref().is_none_or(|e| *e == i.environment))
                .filter(|i| module.as_ref().is_none_or(|m| *m == i.module))
                .map(|i| installation_view(state, i))
                .collect(),
        })?,
        Query::ModuleInstallation { id } => {
            let i = state.installation(id).ok_or_else(|| {
                QueryError::NotFound(format!("module installation {id:?} not found"))
            })?;
            to_json(&installation_detail(state, i))?
        }
        Query::ChangeRequests { installation, open } => to_json(&ChangeRequestsAnswer {
            change_requests: state
                .change_requests()
                .filter(|c| installation.as_ref().is_none_or(|i| *i == c.installation))
                .filter(|c| !*open || c.status.is_open())
                .map(|c| change_request_view(state, c, now))
                .collect(),
        })?,
        Query::Canaries { environment } => to_json(&CanariesAnswer {
            canaries: state
                .canaries()
                .filter(|c| environment.as_ref().is_none_or(|e| *e == c.environment))
                .map(canary_row)
                .collect(),
        })?,
        Query::Canary { id } => to_json(&canary_detail(state, id)?)?,
        Query::EnvironmentLabels => to_json(&EnvironmentLabelsAnswer {
            environments: state
                .environments()
                .map(|e| EnvironmentLabelsView {
                    environment: e.name.clone(),
                    labels: state.environment_labels(&e.name).clone(),
                })
                .collect(),
        })?,
        Query::RolloutPolicies => to_json(&RolloutPoliciesAnswer {
            policies: state
                .rollout_policies()
                .map(|p| rollout_policy_view(p, false))
                .collect(),
        })?,
        Query::RolloutPolicy { product } => to_json(&rollout_policy_view(
            state.rollout_policy_of(product).ok_or_else(|| {
                QueryError::NotFound(format!("no rollout policy governs {product:?}"))
            })?,
            true,
        ))?,
        Query::RolloutStatus { product, version } => {
            let v = semver::Version::parse(version)
                .map_err(|e| QueryError::Bad(format!("version: {version:?}: {e}")))?;
            let status =
                hub_engine::evaluate::rollout_status(state, product, &v, now).ok_or_else(|| {
                    QueryError::NotFound(format!("no rollout policy governs {product:?}"))
                })?;
            to_json(&rollout_status_view(&status, now))?
        }
        Query::ChangeRequest { id } => to_json(&change_request_view(
            state,
            state
                .change_request(id)
                .ok_or_else(|| QueryError::NotFound(format!("change request {id:?} not found")))?,
            now,
        ))?,
        Query::ApproverGroups => to_json(&ApproverGroupsAnswer {
            groups: state.approver_groups().map(approval::group_view).collect(),
        })?,
        Query::ApprovalPolicies => to_json(&ApprovalPoliciesAnswer {
            policies: state
                .approval_policies()
                .map(approval::policy_view)
                .collect(),
        })?,
        Query::WindowExceptions { environment, open } => to_json(&WindowExceptionsAnswer {
            window_exceptions: state
                .window_exceptions()
                .filter(|w| {
                    environment
                        .as_ref()
                        .is_none_or(|e| e == w.scope.environment())
                })
                .filter(|w| !*open || (w.status == ExceptionStatus::Pending && !w.expired_at(now)))
                .map(|w| approval::window_exception_view(w, now))
                .collect(),
        })?,
        Query::MetricTemplates { environment } => to_json(&MetricTemplatesAnswer {
            metric_templates: state
                .metric_templates()
                .filter(|t| environment.as_ref().is_none_or(|e| *e == t.environment))
                .map(|t| metric_template_view(t, false))
                .collect(),
        })?,
        Query::MetricTemplate { id } => {
            let (env, name) = id.split_once('/').unwrap_or(("", id));
            to_json(&metric_template_view(
                state.metric_template(env, name).ok_or_else(|| {
                    QueryError::NotFound(format!("metric template {id:?} not found"))
                })?,
                true,
            ))?
        }
        Query::WindowException { id } => to_json(&approval::window_exception_view(
            state.window_exception(id).ok_or_else(|| {
                QueryError::NotFound(format!("window-exception request {id:?} not found"))
            })?,
            now,
        ))?,
    })
}

/// What a query takes from the caller's text before the state is read: a dry run's parsed
/// definition (see [`parse`]).
#[derive(Debug)]
pub enum Parsed {
    /// Nothing: the query parses nothing.
    Nothing,
    /// A dry run's definition, parsed and checked on its own, or why it is refused.
    Module(Box<Result<hub_engine::module::ParsedDefinition, hub_engine::CommandError>>),
}

/// The part of `query`'s answer that needs no state: a dry run's parse of the definition (a
/// [`Cost::Parse`] query), done without the state's lock.
pub fn parse(query: &Query) -> Parsed {
    match query {
        Query::ModuleDryRun { file_name, yaml } => {
            Parsed::Module(Box::new(State::parse_module(file_name.as_deref(), yaml)))
        }
        _ => Parsed::Nothing,
    }
}

/// Answers `query` from the applied state `shared` and its `history` (see [`answer`]),
/// holding the state's lock only while the answer reads the state; a dry run whose definition
/// was [`parse`]d only checks it against the published modules under the lock. Returns the
/// answer and the applied index it reflects.
pub fn answer_shared(
    shared: &raft_store::SharedState,
    history: &raft_store::History,
    query: &Query,
    parsed: Parsed,
    now: i64,
    checker: Option<&ArtifactChecker>,
) -> Result<(Value, u64), QueryError> {
    let s = shared.read();
    let value = match (query, parsed) {
        (Query::ModuleDryRun { file_name, .. }, Parsed::Module(parsed)) => {
            to_json(&dry_run_view(parsed.and_then(|p| {
                s.state.check_parsed_module(p, file_name.as_deref())
            }))?)?
        }
        (query, _) => answer(&s.state, history, query, now, checker)?,
    };
    Ok((value, s.applied_index()))
}

/// A dry run's answer: what publishing would create, or why it would be refused.
fn dry_run_view(
    checked: Result<
        (hub_engine::module::ModuleDefinition, semver::Version),
        hub_engine::CommandError,
    >,
) -> Result<ModuleDryRunAnswer, QueryError> {
    match checked {
        Ok((def, version)) => Ok(ModuleDryRunAnswer {
            entities: def.entities.len(),
            name: def.name,
            valid: true,
            variables: def.variables.len(),
            version: version.to_string(),
        }),
        Err(e) => Err(QueryError::Bad(e.to_string())),
    }
}

/// `canaries`: one canary as listed (the fields of the full view left out).
/// Where the agent's proxy serves the canary's three names.
fn canary_addresses(c: &hub_engine::canary_record::Canary) -> CanaryAddressesView {
    let a = hub_engine::canary::StableAddresses::of(c.spec.service.port);
    CanaryAddressesView {
        canary: a.canary.to_string(),
        primary: a.primary.to_string(),
        service: a.main.to_string(),
    }
}

fn canary_row(c: &hub_engine::canary_record::Canary) -> CanaryView {
    let st = &c.status;
    CanaryView {
        actions: None,
        addresses: Some(canary_addresses(c)),
        canary_revision: None,
        committed_weights: None,
        entity: c.entity.clone(),
        history: None,
        id: c.id.clone(),
        last_transition: format_time(st.phase_started_ms),
        name: c.name.clone(),
        namespace: c.environment.clone(),
        next_tick: None,
        observation: None,
        primary_revision: None,
        promoted: st.is_promoted(),
        queued_steps: None,
        status: st.phase.as_str().to_string(),
        status_block: None,
        step: None,
        target: None,
        weight: st.canary_weight,
        yaml: None,
    }
}

/// `canary`: one canary's full view: its YAML, Flagger's status block (with its events and,
/// when judged, its judges), the newest actions, the weights committed, the target, what the
/// agent last observed and the samples.
fn canary_detail(state: &State, id: &str) -> Result<CanaryView, QueryError> {
    let c = state
        .canary(id)
        .ok_or_else(|| QueryError::NotFound(format!("canary {id:?} not found")))?;
    let st = &c.status;
    Ok(CanaryView {
        addresses: Some(canary_addresses(c)),
        actions: Some(
            c.actions
                .iter()
                .rev()
                .take(20)
                .map(|(step, a)| CanaryActionView {
                    action: hub_engine::canary_record::action_label(a),
                    step: *step,
                })
                .collect(),
        ),
        canary_revision: Some(st.canary_revision.clone()),
        committed_weights: Some(committed_weights(c)),
        history: Some(canary_history_view(state.canary_history(id))),
        next_tick: Some(st.next_tick_ms.map(format_time)),
        observation: Some(c.observation.as_ref().map(canary_observation_view)),
        primary_revision: Some(st.primary_revision.clone()),
        queued_steps: Some(c.queued.len()),
        status_block: Some(canary_status_block(state, id, c)),
        step: Some(st.step),
        target: Some(c.target.as_ref().map(|t| CanaryTargetView {
            revision: t.revision.clone(),
            version: t.version.to_string(),
        })),
        yaml: Some(c.yaml.clone()),
        ..canary_row(c)
    })
}

/// Flagger's status block of canary `id`, as `kubectl get canary -o yaml` shows it, with
/// Flagger's events (`kubectl describe canary`, oldest first: at most 100) and, for a judged
/// canary, its judging state.
fn canary_status_block(
    state: &State,
    id: &str,
    c: &hub_engine::canary_record::Canary,
) -> CanaryStatusBlock {
    let st = &c.status;
    CanaryStatusBlock {
        canary_weight: st.canary_weight,
        conditions: vec![CanaryConditionView {
            last_transition_time: format_time(st.promoted.last_transition_ms),
            last_update_time: format_time(st.promoted.last_update_ms),
            message: st.promoted.message.clone(),
            reason: st.promoted.reason.as_str().to_string(),
            status: st.promoted.status.as_str().to_string(),
            kind: "Promoted".to_string(),
        }],
        events: state
            .canary_events(id)
            .map(|e| CanaryEventView {
                count: e.count,
                first_timestamp: format_time(e.first_time_ms),
                last_timestamp: format_time(e.time_ms),
                message: e.message.clone(),
                reason: e.reason.as_str().to_string(),
                kind: e.kind.as_str().to_string(),
            })
            .collect(),
        failed_checks: st.failed_checks,
        ignored_fields: c
            .ignored_fields()
            .into_iter()
            .map(|f| IgnoredFieldView {
                path: f.path,
                reason: f.reason,
            })
            .collect(),
        iterations: st.iterations,
        judges: state.canary_judging(id).map(canary_judging_view),
        last_applied_spec: st.last_applied_spec.clone(),
        last_promoted_spec: st.last_promoted_spec.clone(),
        phase: st.phase.as_str().to_string(),
    }
}

/// The canary weight each committed step set, by the step its plan brings the agent to
/// (what the agent's applied log records).
fn committed_weights(c: &hub_engine::canary_record::Canary) -> Vec<CommittedWeightView> {
    let mut weights: Vec<CommittedWeightView> = Vec::new();
    for (step, a) in &c.actions {
        if let Some((_, canary)) = a.weights() {
            match weights.last_mut() {
                Some(last) if last.step == step + 1 => last.canary_weight = canary,
                _ => weights.push(CommittedWeightView {
                    canary_weight: canary,
                    step: step + 1,
                }),
            }
        }
    }
    weights
}

/// What the agent last observed of a canary: the workloads' revisions and readiness, and the
/// canary proxy's metrics by window (in their unit: thousandths are divided out).
fn canary_observation_view(o: &hub_engine::canary::CanaryObservation) -> CanaryObservationView {
    CanaryObservationView {
        applied_step: o.applied_step,
        canary_ready_percent: o.canary_ready_percent,
        canary_revision: o.canary_revision.clone(),
        observed: format_time(o.observed_ms),
        primary_ready_percent: o.primary_ready_percent,
        primary_revision: o.primary_revision.clone(),
        windows: o
            .windows
            .iter()
            .map(|w| MetricWindowView {
                interval_ms: w.interval_ms,
                p99_ms: w.p99_ms_milli.map(|m| m as f64 / 1000.0),
                requests: w.requests,
                success_rate: w.success_rate_milli.map(|m| m as f64 / 1000.0),
            })
            .collect(),
    }
}

/// The replicated judging state of a judged canary (issue 20): the judges, the inconclusive
/// count against its limit, the last verdicts and when the agent's samples were taken.
fn canary_judging_view(j: &hub_engine::canary_judging::CanaryJudging) -> CanaryJudgesView {
    CanaryJudgesView {
        inconclusive: j.inconclusive,
        inconclusive_limit: j.inconclusive_limit,
        metrics: j
            .metrics
            .iter()
            .map(|m| JudgedMetricView {
                baseline: m.judge.baseline.as_str().to_string(),
                confidence: f64::from(m.judge.confidence_milli) / 1000.0,
                direction: m.judge.direction.as_str().to_string(),
                effect_size: f64::from(m.judge.effect_size_milli) / 1000.0,
                interval_ms: m.interval_ms,
                name: m.name.clone(),
            })
            .collect(),
        samples_step: j.samples_step,
        samples_time: (j.samples_ms > 0).then(|| format_time(j.samples_ms)),
        verdicts: j
            .verdicts
            .iter()
            .map(|v| VerdictView {
                metric: v.metric.clone(),
                reason: v.reason.clone(),
                step: v.step,
                verdict: v.verdict.as_str().to_string(),
            })
            .collect(),
    }
}

/// A canary's samples, oldest first: where each committed step left phase and weight, and
/// the metric values it judged (in the metric's unit: thousandths are divided out).
fn canary_history_view(
    history: Option<&hub_engine::canary_history::CanaryHistory>,
) -> Vec<CanarySampleView> {
    let samples = history.map(|h| h.samples.iter()).into_iter().flatten();
    samples
        .map(|s| CanarySampleView {
            canary_weight: s.canary_weight,
            metrics: s
                .metrics
                .iter()
                .map(|(name, v)| (name.clone(), v.map(|m| m as f64 / 1000.0)))
                .collect(),
            phase: s.phase.as_str().to_string(),
            step: s.step,
            time: format_time(s.time_ms),
            time_ms: s.time_ms,
        })
        .collect()
}

/// A rollout policy: its product, group, waves (with the YAML when `full`).
fn rollout_policy_view(
    p: &hub_engine::rollout_policy::RolloutPolicy,
    full: bool,
) -> RolloutPolicyView {
    RolloutPolicyView {
        product: p.product.clone(),
        products: p.products.clone(),
        updated: format_time(p.updated_ms),
        waves: p.waves.iter().map(WaveView::from).collect(),
        yaml: full.then(|| p.yaml.clone()),
    }
}

/// A release's rollout as it stands: one row per wave and its entities; the entities in no
/// wave only when there are some.
fn rollout_status_view(r: &hub_engine::evaluate::RolloutStatus, now: i64) -> RolloutStatusView {
    RolloutStatusView {
        halted: r.halt.as_ref().map(|h| HaltView {
            at: format_time(h.at_ms),
            cause: h.cause.to_string(),
            recalls: h.recalls.clone(),
        }),
        policy: r.policy.clone(),
        version: r.version.to_string(),
        waves: r
            .waves
            .iter()
            .filter(|w| w.name.is_some() || !w.entities.is_empty())
            .map(|w| wave_status_view(w, now))
            .collect(),
    }
}

/// One wave of a rollout as it stands at `now`, with its entities.
fn wave_status_view(w: &hub_engine::evaluate::WaveStatus, now: i64) -> WaveStatusView {
    let state = if w.progress.promoted.is_some() {
        "promoted".into()
    } else if w.passed {
        "passed".into()
    } else if let Some(until) = w.progress.soak_until_ms.filter(|t| *t > now) {
        format!("soaking until {}", format_time(until))
    } else if w.done == w.entities.len() {
        "done".into()
    } else if w.in_flight > 0 || w.done > 0 {
        "rolling out".into()
    } else {
        "waiting".into()
    };
    WaveStatusView {
        completed: w.progress.completed_at_ms.map(format_time),
        // Milliseconds since the epoch, for scripts comparing with plan times.
        completed_ms: w.progress.completed_at_ms,
        done: w.done,
        entities: w
            .entities
            .iter()
            .map(|e| RolloutEntityView {
                canary: e.canary_phase.map(|p| p.as_str().to_string()),
                entity: e.entity.clone(),
                environment: e.environment.clone(),
                health: e.health.as_str().to_string(),
                product: e.product.clone(),
                runs: e.runs.as_ref().map(ToString::to_string),
                state: if e.done {
                    "done"
                } else if e.in_flight {
                    "in flight"
                } else {
                    "waiting"
                }
                .to_string(),
            })
            .collect(),
        entities_total: w.entities.len(),
        in_flight: w.in_flight,
        promoted_by: w.progress.promoted.as_ref().map(|p| p.actor.clone()),
        soak_until: w.progress.soak_until_ms.map(format_time),
        soak_until_ms: w.progress.soak_until_ms,
        state,
        wave: w.name.clone().unwrap_or_else(|| "(no wave)".into()),
    }
}

/// `modules`: every module by name, with its versions (oldest first) and how many
/// installations it has.
fn modules_view(state: &State) -> ModulesAnswer {
    let mut by_name: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for m in state.modules() {
        by_name
            .entry(&m.name)
            .or_default()
            .push(m.version.to_string());
    }
    ModulesAnswer {
        modules: by_name
            .into_iter()
            .map(|(name, versions)| ModuleSummaryView {
                installations: state.installations().filter(|i| i.module == name).count(),
                latest: versions.last().cloned(),
                name: name.to_string(),
                versions,
            })
            .collect(),
    }
}

/// `module`: one published module version, with its definition's YAML.
fn module_view(m: &hub_engine::installation::PublishedModule) -> ModuleView {
    let d = &m.definition;
    ModuleView {
        allow_entity_overrides: d.restrictions.allow_entity_overrides,
        description: d.description.clone(),
        display_name: d.display_name.clone(),
        entities: d
            .entities
            .iter()
            .map(|e| ModuleEntityView {
                kind: e.kind.as_str().to_string(),
                name: e.name_template().to_string(),
                product_id: e.product_id.clone(),
            })
            .collect(),
        name: m.name.clone(),
        new_installations_allowed: d.restrictions.new_installations_allowed,
        published: format_time(m.published_ms),
        submodules: d
            .submodules
            .iter()
            .map(|s| format!("{}@{}", s.name, s.version))
            .collect(),
        variables: d.variables.keys().cloned().collect(),
        version: m.version.to_string(),
        yaml: m.yaml.clone(),
    }
}

/// One module installation as `module_installations` lists it: its status in words and how
/// many entities it manages.
fn installation_view(
    state: &State,
    i: &hub_engine::installation::Installation,
) -> ModuleInstallationView {
    let status = if i.paused {
        "Paused"
    } else if i.resuming {
        "Resuming Updates"
    } else if state
        .change_requests()
        .any(|c| c.installation == i.id && c.status.is_open())
    {
        "Update Pending"
    } else {
        "Up To Date"
    };
    ModuleInstallationView {
        channel: state.tracked_channel(&i.id),
        entities: i.entities.len(),
        environment: i.environment.clone(),
        id: i.id.clone(),
        installed: format_time(i.created_ms),
        module: i.module.clone(),
        paused: i.paused,
        policy: state.installation_policy(&i.id).map(|p| p.scope.key_name()),
        resuming: i.resuming,
        status: status.to_string(),
        updated: format_time(i.updated_ms),
        version: i.version.to_string(),
    }
}

/// `module_installation`: the listing's view of one installation, with its entities listed
/// (rather than counted) and its variables.
fn installation_detail(
    state: &State,
    i: &hub_engine::installation::Installation,
) -> ModuleInstallationDetail {
    let ModuleInstallationView {
        channel,
        entities: _,
        environment,
        id,
        installed,
        module,
        paused,
        policy,
        resuming,
        status,
        updated,
        version,
    } = installation_view(state, i);
    ModuleInstallationDetail {
        channel,
        entities: i
            .entities
            .iter()
            .map(|(id, m)| InstallationEntityView {
                id: id.clone(),
                marked_for_uninstall: state.entity(id).is_some_and(|e| e.marked_for_uninstall),
                secret_requirements: m.secret_requirements.keys().cloned().collect(),
                source: m.source_module.clone(),
                sync: m.sync_mode.as_str().to_string(),
            })
            .collect(),
        environment,
        id,
        installed,
        module,
        paused,
        policy,
        resuming,
        status,
        updated,
        variables: i.variables.clone(),
        version,
    }
}

/// A MetricTemplate's view: header names and the secret's name, never a value; `full` adds
/// the YAML as applied, unless the resource may carry a credential a viewer must not read
/// (header values, or userinfo or a query in the address).
fn metric_template_view(
    t: &hub_engine::metric_template::MetricTemplate,
    full: bool,
) -> MetricTemplateView {
    let p = &t.spec.provider;
    let address = hub_engine::artifact::redact_url(&p.address);
    let shows_no_credential = p.headers.is_empty() && address == p.address;
    MetricTemplateView {
        created: format_time(t.created_ms),
        environment: t.environment.clone(),
        id: t.id.clone(),
        name: t.name.clone(),
        provider: MetricProviderView {
            address,
            headers: p.headers.keys().cloned().collect(),
            insecure_skip_verify: p.insecure_skip_verify,
            secret_ref: p.secret_ref.clone(),
            kind: p.kind.as_str().to_string(),
        },
        query: t.spec.query.clone(),
        updated: format_time(t.updated_ms),
        yaml: (full && shows_no_credential).then(|| t.yaml.clone()),
    }
}

fn change_request_view(
    state: &State,
    c: &hub_engine::installation::ChangeRequest,
    now: i64,
) -> ChangeRequestView {
    ChangeRequestView {
        approval: approval::change_request_approval(state, c, now),
        blocked: c.blocked.clone(),
        closed: c.closed_ms.map(format_time),
        created: format_time(c.created_ms),
        decided_by: c.decided_by.clone(),
        from_version: c.from_version.to_string(),
        id: c.id.clone(),
        installation: c.installation.clone(),
        message: c.message.clone(),
        reason: c.reason.clone(),
        status: c.status.as_str().to_string(),
        to_version: c.to_version.to_string(),
    }
}

/// `entity`: one entity's settings and reported state (its secrets' names and revision,
/// never a value).
fn entity_view(state: &State, e: &hub_engine::entity::Entity) -> EntityView {
    let r = &e.reported;
    EntityView {
        account_id: e.account_id.clone(),
        config_overrides: e
            .config_overrides
            .iter()
            .map(|(v, c)| (v.to_string(), c.clone()))
            .collect(),
        dependency_groups: e.dependency_groups.iter().cloned().collect(),
        environment: e.environment.clone(),
        id: e.id.0.clone(),
        ignored_dependencies: e.ignored_dependencies.iter().cloned().collect(),
        insecure_registries: insecure_registries(state, &e.environment),
        k8s_namespace: e.k8s_namespace.clone(),
        kind: e.kind.as_str().to_string(),
        maintenance_window: e.maintenance_window.as_ref().map(ToString::to_string),
        marked_for_uninstall: e.marked_for_uninstall,
        name: e.name.clone(),
        owner_module: e.owner_module.clone(),
        product_id: e.product_id.clone(),
        release_channel: e.release_channel.clone(),
        reported: ReportedView {
            at: r.reported_at_ms.map(format_time),
            config_sha256: r.config_sha256.clone(),
            health: r.health.as_str().to_string(),
            message: r.message.clone(),
            secrets_revision: r.secrets_revision,
            version: r.version.as_ref().map(ToString::to_string),
        },
        secrets: e.secrets.keys().cloned().collect(),
        secrets_revision: e.secrets_revision,
        window_overrides: e
            .window_overrides
            .iter()
            .map(window_override_view)
            .collect(),
    }
}

/// A maintenance-window override (of an environment or an entity).
fn window_override_view(o: &hub_engine::settings::WindowOverride) -> WindowOverrideView {
    WindowOverrideView {
        end: format_time(o.end_ms),
        id: o.id.clone(),
        reason: o.reason.clone(),
        start: format_time(o.start_ms),
    }
}

/// `activity`: an entity's newest activity lines, read from history; a storage failure is
/// logged and answered as an internal error.
fn activity_view(
    state: &State,
    history: &raft_store::History,
    entity: &str,
) -> Result<ActivityAnswer, QueryError> {
    let id = resolve_entity(state, entity)?;
    let entries = history
        .activity_lines(&id, hub_engine::activity::ACTIVITY_KEPT)
        .map_err(|e| {
            tracing::error!(entity = %id, error = %e, "reading stored activity");
            QueryError::Internal(format!("reading the activity of {id} failed on this node"))
        })?
        .into_iter()
        .map(|e| ActivityEntry {
            index: e.index,
            kind: e.kind,
            message: e.message,
            time: format_time(e.time_ms),
        })
        .collect();
    Ok(ActivityAnswer {
        entity: id,
        entries,
    })
}

/// `releases`: the releases of `product` (every product when `None`), each product's newest
/// first.
fn releases_view(state: &State, product: Option<&str>) -> Result<ReleasesAnswer, QueryError> {
    let products: Vec<String> = match product {
        Some(p) => {
            if state.product(p).is_none() {
                return Err(QueryError::NotFound(format!("product {p:?} not found")));
            }
            vec![p.to_string()]
        }
        None => state.products().map(|p| p.id.clone()).collect(),
    };
    let mut releases = Vec::new();
    for p in products {
        for r in state.releases_desc(&p) {
            let mut channels: Vec<String> = hub_engine::release::builtin_channels_for(&r.version)
                .iter()
                .map(|c| c.to_string())
                .collect();
            channels.extend(r.custom_channels.iter().cloned());
            releases.push(ReleaseView {
                artifacts: r
                    .artifacts
                    .iter()
                    .map(|a| ArtifactView {
                        sha256: a.sha256.clone(),
                        uri: a.uri.clone(),
                    })
                    .collect(),
                channels,
                dependencies: r.dependencies.iter().map(ToString::to_string).collect(),
                product: r.product_id.clone(),
                published: format_time(r.published_at_ms),
                recalled: state
                    .recall_covering(&r.product_id, &r.version)
                    .map(|x| x.id.clone()),
                version: r.version.to_string(),
            });
        }
    }
    Ok(ReleasesAnswer { releases })
}

/// `channels`: the built-in release channels, then the custom ones.
fn channels_view(state: &State) -> ChannelsAnswer {
    let builtin = hub_engine::release::BUILTIN_CHANNELS
        .iter()
        .map(|c| ChannelView {
            builtin: true,
            description: "built in".to_string(),
            name: c.to_string(),
        });
    let custom = state.channels().map(|c| ChannelView {
        builtin: false,
        description: c.description.clone(),
        name: c.name.clone(),
    });
    ChannelsAnswer {
        channels: builtin.chain(custom).collect(),
    }
}

/// `environment_settings`: one environment's settings (its registries' addresses without
/// credentials), window overrides and how many of its entities are auto-suppressed at `now`.
fn environment_settings_view(
    state: &State,
    environment: &str,
    now: i64,
) -> Result<EnvironmentSettingsView, QueryError> {
    let env = state
        .environment(environment)
        .ok_or_else(|| QueryError::NotFound(format!("environment {environment:?} not found")))?;
    let s = &env.settings;
    Ok(EnvironmentSettingsView {
        auto_suppression_ms: s.auto_suppression_ms,
        autosuppressed_entities: state.autosuppressed_count(&env.name, now),
        environment: env.name.clone(),
        maintenance_window: s.maintenance_window.as_ref().map(ToString::to_string),
        override_product_maintenance_windows: s.override_product_maintenance_windows,
        registries: s
            .registries
            .iter()
            .map(|r| RegistryView {
                hub_access: r.hub_access.as_str().to_string(),
                insecure_skip_verify: r.tls.skips_verification(),
                name: r.name.clone(),
                tls: r.tls.label(),
                url: hub_engine::artifact::redact_url(&r.url),
            })
            .collect(),
        require_maintenance_windows_for_no_downtime_recalled_release_roll_offs: s
            .require_windows_for_recall_roll_offs,
        suppress_deployment_after_num_autosuppressions: s.autosuppression_threshold,
        window_overrides: env
            .window_overrides
            .iter()
            .map(window_override_view)
            .collect(),
    })
}

/// `tokens`: every operator token with the roles bound to its identity (never its secret or
/// hash); `expired` as of `now`.
fn tokens_view(state: &State, now: i64) -> TokensAnswer {
    TokensAnswer {
        tokens: state
            .tokens()
            .map(|t| TokenView {
                created: format_time(t.created_ms),
                created_by: t.created_by.clone(),
                expired: t.is_expired(now),
                expires: t.expires_ms.map(format_time),
                identity: t.identity().to_string(),
                name: t.name.clone(),
                roles: state
                    .bindings_of(&t.identity())
                    .map(|b| TokenRoleView {
                        environments: b.environments.iter().cloned().collect(),
                        products: b.products.iter().cloned().collect(),
                        role: b.role.as_str().to_string(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The registries of `environment` whose certificates are not verified
/// (`insecure-skip-verify`), which `hubctl` shows in red wherever an entity is shown.
fn insecure_registries(state: &State, environment: &str) -> Vec<RegistryRef> {
    state
        .environment(environment)
        .map(|env| {
            env.settings
                .registries
                .iter()
                .filter(|r| r.tls.skips_verification())
                .map(|r| RegistryRef {
                    name: r.name.clone(),
                    url: hub_engine::artifact::redact_url(&r.url),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// SPEC P3: the four questions, separately, and every constraint.
fn explain_view(
    state: &State,
    history: &raft_store::History,
    eval: &hub_engine::Evaluation,
) -> Result<Explanation, QueryError> {
    use hub_engine::evaluate::Outcome;
    let version = |v: &Option<semver::Version>| v.as_ref().map(ToString::to_string);
    let candidate = eval.candidate.as_ref().map(|c| ProposedChange {
        from_version: version(&c.from_version),
        kind: c.kind.label().to_string(),
        reason: c.reason.clone(),
        to_version: version(&c.to_version),
    });
    let (meets_constraints, issued) = match &eval.outcome {
        Outcome::PlanActive { plan_id, status } => (
            MeetsConstraints::Issued,
            Some(IssuedView {
                plan: plan_id.clone(),
                status: status.as_str().to_string(),
            }),
        ),
        Outcome::Issue => (MeetsConstraints::Yes, None),
        Outcome::Blocked { .. } => (MeetsConstraints::No, None),
        _ => (MeetsConstraints::Undecided, None),
    };
    let last_execution = match state.outcomes_of(&eval.entity).next_back() {
        Some(o) => Some(LastExecution {
            failure: finished_plan(history, &o.id)?
                .and_then(|p| p.failure)
                .map(|f| format!("{}: {}", f.stage, f.message)),
            kind: o.kind.label().to_string(),
            plan: o.id.clone(),
            status: o.status.as_str().to_string(),
        }),
        None => None,
    };
    let may_clear_at = match &eval.outcome {
        Outcome::Blocked { may_clear_at_ms } => may_clear_at_ms.map(format_time),
        _ => None,
    };
    Ok(Explanation {
        candidate,
        constraints: eval
            .constraints
            .iter()
            .map(|c| ConstraintView {
                constraint: c.constraint.label().to_string(),
                may_clear_at: c.may_clear_at_ms.map(format_time),
                passed: c.passed,
                reason: c.reason.to_string(),
            })
            .collect(),
        entity: eval.entity.clone(),
        evaluated_at: format_time(eval.time_ms),
        has_candidate: eval.candidate.is_some(),
        insecure_registries: state
            .entity(&eval.entity)
            .map(|e| insecure_registries(state, &e.environment))
            .unwrap_or_default(),
        issued,
        last_execution,
        may_clear_at,
        meets_constraints,
        skipped: eval.skipped.clone(),
        summary: eval.summary(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hub_engine::{Command, Request};
    use hub_tls::Identity;

    /// A refused write whose environment name holds a newline and an escape sequence: the
    /// `audit` view shows them as escapes, and the filters still match the raw name.
    #[test]
    fn audit_rows_show_control_characters_as_escapes_and_filter_on_the_raw_text() {
        let mut state = State::new();
        let env = "x\n9999 operator/admin DeleteEnvironment\u{1b}[2K";
        let vic = Identity::Operator("vic".into());
        let applied = state.apply(
            &Request {
                command: Command::As {
                    actor: vic,
                    command: Box::new(Command::CreateEntity {
                        environment: env.into(),
                        kind: hub_engine::EntityKind::HelmChart,
                        name: "web".into(),
                        product_id: "com.example:web".into(),
                        k8s_namespace: Some("web".into()),
                        account_id: None,
                        release_channel: None,
                    }),
                },
                time_ms: 1_700_000_000_000,
                request_id: None,
            },
            1,
        );
        assert!(applied.result.is_err(), "{:?}", applied.result);
        let rows: Vec<AuditEntryView> = audit_rows(&state)
            .filter(|r| r.wanted(Some("operator/vic"), Some(env), Some("CreateEntity"), None))
            .map(|r| r.view())
            .collect();
        assert_eq!(rows.len(), 1, "{rows:?}");
        let shown = format!("{:?}", rows[0]);
        let target = rows[0].target.as_deref().expect("target");
        for text in [target, &rows[0].error] {
            assert!(!text.contains(|c: char| c.is_control()), "{text:?}");
        }
        assert!(
            target.contains("x\\n9999") && target.contains("\\u{1b}[2K"),
            "{shown}"
        );
        assert_eq!(
            audit_rows(&state)
                .filter(|r| r.wanted(Some("operator/bob"), None, None, None))
                .count(),
            0
        );
    }
}

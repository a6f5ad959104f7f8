//! The replicated state: its tables, the lookup that joins them, and the read accessors.
//!
//! The state is a set of tables (one per record kind, each keeping its own lookups; see
//! [`crate::tables`]) plus the dependents index, which joins entities with the releases they
//! run: rebuilt after loading and kept up to date by every apply. Nothing here changes
//! the state in response to a command: the transitions are in [`crate::apply`], which is the
//! only module that calls the mutating helpers below.

use std::collections::{BTreeMap, BTreeSet};

use semver::Version;
use sha2::{Digest, Sha256};

use hub_identity::Identity;

use crate::activity::Activity;
use crate::canary::Phase;
use crate::canary_record::Canary;
use crate::cluster_key::{SecretKey, CANARY_REVISION_KEY};
use crate::command::CommandOutput;
use crate::entity::{Entity, EntityId, Health};
use crate::environment::Environment;
use crate::error::CommandError;
use crate::installation::{ChangeRequest, Installation, PublishedModule};
use crate::plan::{Plan, PlanStatus, FINISHED_PLANS_KEPT};
use crate::plan_outcome::{OutcomeKind, PlanOutcome};
use crate::product::{Channel, Product, Recall, Release};
use crate::record::Residence;
use crate::record::{AuditEntry, Record, RecordKey, RequestRecord};
use crate::release::ProductDependency;
use crate::role::{Role, RoleBinding};
use crate::suppression::{Scope, Suppression, SuppressionSource};
use crate::table::Table;
use crate::TimestampMs;

/// How long a request id is remembered for deduplication (entry time, not wall time).
pub const REQUEST_TTL_MS: TimestampMs = 60 * 60 * 1000;

/// Something that changed in a way that may change decisions (SPEC P11). The leader
/// re-evaluates the affected entities ([`State::affected_entities`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Trigger {
    /// The entity and its direct neighbours in the dependency graph.
    Entity(String),
    /// Only the entity itself (its own settings changed).
    EntityOnly(String),
    /// Every entity of an environment.
    Environment(String),
    /// Every entity of a product, in every environment.
    Product(String),
}

/// The result of applying one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// What the command produced, or why it was refused (then nothing changed but, at most,
    /// the remembered request id).
    pub result: Result<CommandOutput, CommandError>,
    /// Every record key whose value changed (set or removed); storage persists exactly these.
    pub changed: Vec<RecordKey>,
    /// What the leader must re-evaluate.
    pub triggers: Vec<Trigger>,
    /// History written, in order: records storage keeps that the state does not hold
    /// ([`crate::Residence::History`]). Storage applies them in the same batch as
    /// `changed`.
    pub history: Vec<HistoryWrite>,
}

/// A write of a history record ([`crate::Residence::History`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryWrite {
    /// Store the record under its key (boxed: a `Record` is large, a key small).
    Put(Box<Record>),
    /// Delete the record under the key.
    Delete(RecordKey),
}

impl HistoryWrite {
    /// The key written.
    pub fn key(&self) -> RecordKey {
        match self {
            HistoryWrite::Put(record) => record.key(),
            HistoryWrite::Delete(key) => key.clone(),
        }
    }
}

/// Lookups that join tables, rebuilt from them ([`State::rebuild_indexes`]) and kept up to
/// date by [`State::reindex_dependencies`]. Lookups within one table are the table's own
/// ([`crate::tables`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Indexes {
    /// (environment, dependency group, product depended on) -> entities of the group whose
    /// deployed release depends on it.
    pub(crate) dependents: BTreeMap<(String, String, String), BTreeSet<String>>,
    /// entity -> the (group, product) keys it has in `dependents`.
    pub(crate) dependency_edges: BTreeMap<String, BTreeSet<(String, String)>>,
}

/// Everything the hub replicates. Built only by applying commands in log order (or by loading
/// records that were produced that way).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    pub(crate) environments: Table<Environment>,
    pub(crate) entities: Table<Entity>,
    pub(crate) requests: Table<RequestRecord>,
    pub(crate) products: Table<Product>,
    /// By `group:name@version`.
    pub(crate) releases: Table<Release>,
    pub(crate) channels: Table<Channel>,
    pub(crate) recalls: Table<Recall>,
    pub(crate) suppressions: Table<Suppression>,
    /// Issued and running plans only.
    pub(crate) plans: Table<Plan>,
    /// What is kept of finished plans (the plans themselves are history).
    pub(crate) plan_outcomes: Table<PlanOutcome>,
    pub(crate) activity: Table<Activity>,
    pub(crate) audit: Table<AuditEntry>,
    /// Published module versions by (name, version).
    pub(crate) modules: Table<PublishedModule>,
    /// Module installations by `<environment>/<module>`.
    pub(crate) installations: Table<Installation>,
    /// Module change requests by id.
    pub(crate) change_requests: Table<ChangeRequest>,
    /// Canaries by `<environment>/<name>`.
    pub(crate) canaries: Table<Canary>,
    /// Cluster keys by name ([`crate::cluster_key`]).
    pub(crate) cluster_keys: Table<crate::cluster_key::ClusterKey>,
    /// Role bindings by (identity, role).
    pub(crate) role_bindings: Table<crate::role::RoleBinding>,
    /// Audited writes by log index.
    pub(crate) write_audit: Table<crate::audit::WriteAudit>,
    /// The write audit's retention and drop count (at most one row).
    pub(crate) audit_log: Table<crate::audit::AuditLog>,
    /// Operator tokens by name, found by their secret's hash.
    pub(crate) tokens: Table<crate::token::OperatorToken>,
    /// Each canary's samples over time, by canary id.
    pub(crate) canary_history: Table<crate::canary_history::CanaryHistory>,
    /// The time of the last applied entry (at most one row).
    pub(crate) entry_clock: Table<crate::entry_clock::EntryClock>,
    /// The Raft members and the ids removed for good (at most one row).
    pub(crate) cluster_members: Table<crate::cluster_members::ClusterMembers>,
    /// Environment labels by environment (only environments that have labels).
    pub(crate) environment_labels: Table<crate::labels::EnvironmentLabels>,
    /// Rollout policies by their product, found by any product of their group.
    pub(crate) rollout_policies: Table<crate::rollout_policy::RolloutPolicy>,
    /// Rollout progress by (policy product, version).
    pub(crate) rollouts: Table<crate::rollout::Rollout>,
    /// Judging state of judged canaries, by canary id.
    pub(crate) canary_judging: Table<crate::canary_judging::CanaryJudging>,
    /// Entities not yet healthy on any version, by entity id ([`crate::never_healthy`]).
    pub(crate) never_healthy: Table<crate::never_healthy::NeverHealthy>,
    /// The hub's settings (at most one row).
    pub(crate) cluster_settings: Table<crate::settings::ClusterSettings>,
    /// Approver groups by name ([`crate::approval`]).
    pub(crate) approver_groups: Table<crate::approval::ApproverGroup>,
    /// Approval policies by scope key name.
    pub(crate) approval_policies: Table<crate::approval::ApprovalPolicy>,
    /// The approvals of change requests opened under a policy, by change request id.
    pub(crate) change_request_approvals: Table<crate::approval::ChangeRequestApproval>,
    /// Window-exception requests by id ([`crate::window_exception`]).
    pub(crate) window_exceptions: Table<crate::window_exception::WindowException>,
    /// Channels chosen for installations, by installation id ([`crate::module_channel`]).
    pub(crate) installation_channels: Table<crate::module_channel::InstallationChannel>,
    /// Custom channels of module versions, by `name@version`.
    pub(crate) module_channels: Table<crate::module_channel::ModuleChannels>,
    /// Metric templates, by `<environment>/<name>`.
    pub(crate) metric_templates: Table<crate::metric_template::MetricTemplate>,
    /// Each canary's newest events, by canary id ([`crate::canary_events`]).
    pub(crate) canary_events: Table<crate::canary_events::CanaryEvents>,
    /// Revoked certificates, by canonical serial ([`crate::revocation`]).
    pub(crate) revoked_certificates: Table<crate::revocation::RevokedCertificate>,
    /// The cluster's feature level, once raised (at most one row; [`crate::feature_level`]).
    pub(crate) cluster_level: Table<crate::feature_level::ClusterLevel>,
    /// Alert providers, by `<environment>/<name>`.
    pub(crate) alert_providers: Table<crate::alert_provider::AlertProvider>,
    pub(crate) idx: Indexes,
}

impl State {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a state from persisted records (any order) and rebuilds its indexes.
    pub fn from_records(records: impl IntoIterator<Item = Record>) -> Self {
        let mut state = State::new();
        for record in records {
            state.insert_record(record);
        }
        state.rebuild_indexes();
        state
    }

    /// The state's invariants, checked after every apply in debug builds (tests and the
    /// chaos build): the global counts, and every record `changed` touched against the
    /// tables and indexes it must agree with. Panics, naming the record, on a violation.
    pub(crate) fn check_invariants(&self, changed: &[RecordKey]) {
        if !cfg!(debug_assertions) {
            return;
        }
        assert_eq!(
            self.requests.len(),
            self.requests.index().expiry.len(),
            "request expiry"
        );
        assert_eq!(
            self.plans.index().counts.values().sum::<u64>(),
            self.plans.len() as u64,
            "plan counts against the plans"
        );
        // The plan table holds active plans only, at most one per entity.
        assert_eq!(
            self.plans.index().active.len(),
            self.plans.len(),
            "active plans against the active-plan index"
        );
        assert_eq!(
            self.plan_outcomes.index().counts.values().sum::<u64>(),
            self.plan_outcomes.len() as u64,
            "outcome counts against the outcomes"
        );
        for key in changed {
            match key {
                RecordKey::Entity(id) => {
                    self.check_entity(id);
                    self.check_never_healthy(id);
                }
                RecordKey::Plan(id) => self.check_plan(id),
                RecordKey::PlanOutcome(id) => self.check_plan_outcome(id),
                RecordKey::Canary(id) => self.check_canary(id),
                RecordKey::MetricTemplate(id) => self.check_metric_template(id),
                RecordKey::AlertProvider(id) => self.check_alert_provider(id),
                RecordKey::Installation(id) => self.check_installation(id),
                RecordKey::Environment(_)
                | RecordKey::Request(_)
                | RecordKey::Product(_)
                | RecordKey::Release(_)
                | RecordKey::Channel(_)
                | RecordKey::Recall(_)
                | RecordKey::Suppression(_)
                | RecordKey::ActivityHead(_)
                | RecordKey::Audit(_)
                | RecordKey::Module(_)
                | RecordKey::ChangeRequest(_)
                | RecordKey::ClusterKey(_)
                | RecordKey::WriteAudit(_)
                | RecordKey::AuditLog(_)
                | RecordKey::EntryClock(_)
                | RecordKey::ClusterMembers(_) => {}
                RecordKey::EnvironmentLabels(env) => self.check_environment_labels(env),
                RecordKey::RolloutPolicy(_) | RecordKey::Rollout(_) => self.check_rollouts(),
                RecordKey::RoleBinding(name) => self.check_role_binding(name),
                RecordKey::Token(name) => self.check_token(name),
                RecordKey::CanaryHistory(id) => self.check_canary_history(id),
                RecordKey::CanaryJudging(id) => self.check_canary_judging(id),
                RecordKey::CanaryEvents(id) => self.check_canary_events(id),
                RecordKey::RevokedCertificate(serial) => self.check_revoked_certificate(serial),
                RecordKey::NeverHealthy(id) => self.check_never_healthy(id),
                RecordKey::ClusterSettings(_) => {}
                RecordKey::ClusterLevel(_) => self.check_cluster_level(),
                RecordKey::ApproverGroup(_)
                | RecordKey::ApprovalPolicy(_)
                | RecordKey::ChangeRequestApproval(_)
                | RecordKey::WindowException(_)
                | RecordKey::InstallationChannel(_)
                | RecordKey::ModuleChannels(_) => self.check_approvals(key),
                RecordKey::ActivityV1(_)
                | RecordKey::ActivityLine(_)
                | RecordKey::FinishedPlan(_) => {
                    panic!("{key:?} is not a row of the state but is in `changed`")
                }
            }
        }
    }

    /// A history belongs to a canary that exists (deleting a canary deletes its history), and
    /// stays within its bound.
    fn check_canary_history(&self, id: &str) {
        let Some(h) = self.canary_history.get(id) else {
            return;
        };
        assert!(
            self.canaries.contains_key(id),
            "history of a deleted canary {id}"
        );
        assert!(
            h.samples.len() <= crate::canary_history::CANARY_HISTORY_KEPT,
            "history of {id} beyond its bound"
        );
    }

    /// Events belong to a canary that exists (deleting a canary deletes its events), and stay
    /// within their bounds.
    fn check_canary_events(&self, id: &str) {
        let Some(e) = self.canary_events.get(id) else {
            return;
        };
        assert!(
            self.canaries.contains_key(id),
            "events of a deleted canary {id}"
        );
        assert!(e.within_bounds(), "events of {id} beyond their bounds");
    }

    /// A revoked certificate is keyed by its canonical serial and has a valid reason and a
    /// certificate identity; the list stays within its budget and its lookups hold every
    /// entry.
    fn check_revoked_certificate(&self, serial: &str) {
        use crate::revocation::{check_reason, normalise_serial, MAX_REVOKED_CERTIFICATES};
        let list = &self.revoked_certificates;
        assert!(
            list.len() <= MAX_REVOKED_CERTIFICATES,
            "{} revoked certificates, beyond the budget",
            list.len()
        );
        assert_eq!(
            list.len(),
            list.index().by_index.len(),
            "revoked certificates against their index"
        );
        let Some(r) = list.get(serial) else {
            return;
        };
        assert_eq!(
            normalise_serial(serial).as_deref(),
            Ok(serial),
            "revoked certificate {serial}: not canonical"
        );
        assert!(
            check_reason(&r.reason).is_ok(),
            "revoked certificate {serial}: reason"
        );
        assert!(
            r.identity
                .as_ref()
                .is_none_or(|i| i.is_certificate_identity()),
            "revoked certificate {serial}: identity"
        );
    }

    /// A stored cluster level was raised: it is above the baseline a state without one runs.
    fn check_cluster_level(&self) {
        if let Some(r) = self.cluster_level.get(&()) {
            assert!(
                r.level > crate::feature_level::BASELINE_LEVEL,
                "cluster level {} stored, not above the baseline",
                r.level
            );
        }
    }

    /// Judging state belongs to a canary that exists, and stays within its bounds.
    fn check_canary_judging(&self, id: &str) {
        let Some(j) = self.canary_judging.get(id) else {
            return;
        };
        assert!(
            self.canaries.contains_key(id),
            "judging state of a deleted canary {id}"
        );
        assert!(j.within_bounds(), "judging state of {id} beyond its bounds");
    }

    /// Approval records belong to what they describe: a change request's approvals to the
    /// change request, a chosen channel to its installation, a version's channels to the
    /// published version (and are never empty), a policy to its existing scope; no request
    /// holds more approvals than its bound.
    fn check_approvals(&self, key: &RecordKey) {
        use crate::approval::{PolicyScope, MAX_APPROVALS};
        match key {
            RecordKey::ChangeRequestApproval(id) => {
                if let Some(a) = self.change_request_approvals.get(id) {
                    assert!(
                        self.change_requests.contains_key(id),
                        "approvals of missing {id}"
                    );
                    assert!(
                        a.approvals.approvals.len() <= MAX_APPROVALS,
                        "approvals of {id}"
                    );
                }
            }
            RecordKey::WindowException(id) => {
                if let Some(w) = self.window_exceptions.get(id) {
                    assert!(
                        w.approvals.approvals.len() <= MAX_APPROVALS,
                        "approvals of {id}"
                    );
                }
            }
            RecordKey::InstallationChannel(id) if self.installation_channels.contains_key(id) => {
                assert!(
                    self.installations.contains_key(id),
                    "channel of missing {id}"
                );
            }
            RecordKey::ModuleChannels(name) => {
                if let Some(m) = self.module_channels.get(name) {
                    assert!(!m.channels.is_empty(), "empty channel record {name}");
                    assert!(
                        self.module(&m.module, &m.version).is_some(),
                        "channels of unpublished {name}"
                    );
                }
            }
            RecordKey::ApprovalPolicy(name) => {
                if let Some(p) = self.approval_policies.get(name) {
                    let exists = match &p.scope {
                        PolicyScope::Environment(e) => self.environments.contains_key(e),
                        PolicyScope::Product(id) => self.products.contains_key(id),
                        PolicyScope::Installation(id) => self.installations.contains_key(id),
                    };
                    assert!(exists, "policy {name} of a missing scope");
                }
            }
            _ => {}
        }
    }

    /// A never-healthy row belongs to an entity that exists and is not healthy on a version
    /// (being reported healthy on a version removes the row for good).
    fn check_never_healthy(&self, id: &str) {
        if !self.never_healthy.contains_key(id) {
            return;
        }
        let e = self
            .entities
            .get(id)
            .unwrap_or_else(|| panic!("never-healthy row of a missing entity {id}"));
        assert!(
            !(e.reported.health == Health::Healthy && e.reported.version.is_some()),
            "entity {id} is healthy on a version but keeps its never-healthy row"
        );
    }

    /// Labels belong to an environment that exists, within their bound.
    fn check_environment_labels(&self, env: &str) {
        let Some(l) = self.environment_labels.get(env) else {
            return;
        };
        assert!(
            self.environments.contains_key(env),
            "labels of a deleted environment {env}"
        );
        assert!(
            !l.labels.is_empty() && l.labels.len() <= crate::labels::MAX_LABELS,
            "labels of {env}: {} (an environment without labels has no record)",
            l.labels.len()
        );
    }

    /// Every rollout belongs to a policy that exists, and the policy index names each
    /// product of each group once.
    fn check_rollouts(&self) {
        for (product, version) in self.rollouts.keys() {
            assert!(
                self.rollout_policies.contains_key(product),
                "rollout {product}@{version} without its policy"
            );
        }
        let members: usize = self
            .rollout_policies
            .values()
            .map(|p| p.group().count())
            .sum();
        assert_eq!(
            members,
            self.rollout_policies.index().of_product.len(),
            "a product in two rollout policies"
        );
    }

    /// A token's binding belongs to a token that exists (revoking removes its bindings).
    fn check_role_binding(&self, name: &str) {
        let Some(key) = RoleBinding::parse_key_name(name) else {
            return;
        };
        let Identity::Token(token) = &key.0 else {
            return;
        };
        if self.role_bindings.contains_key(&key) {
            assert!(
                self.tokens.contains_key(token),
                "role binding {name} of a token that does not exist"
            );
        }
    }

    /// A token is found by its hash, and a removed token left no binding behind.
    fn check_token(&self, name: &str) {
        assert_eq!(
            self.tokens.len(),
            self.tokens.index().by_hash.len(),
            "tokens against the hash index"
        );
        match self.tokens.get(name) {
            Some(t) => assert_eq!(
                self.tokens.index().by_hash.get(&t.hash).map(String::as_str),
                Some(name),
                "token {name} not found by its hash"
            ),
            None => assert!(
                self.bindings_of(&Identity::Token(name.to_string()))
                    .next()
                    .is_none(),
                "revoked token {name} still holds a role"
            ),
        }
    }

    /// An entity's environment exists, its product index holds it, its active plan is its
    /// own, and the installation that owns it manages it.
    fn check_entity(&self, id: &str) {
        let Some(e) = self.entities.get(id) else {
            return;
        };
        assert!(
            self.environments.contains_key(&e.environment),
            "entity {id}: environment {} missing",
            e.environment
        );
        assert!(
            self.entities
                .index()
                .by_product
                .get(&(e.environment.clone(), e.product_id.clone()))
                .is_some_and(|ids| ids.contains(id)),
            "entity {id}: not in the product index"
        );
        assert_eq!(
            self.idx
                .dependency_edges
                .get(id)
                .cloned()
                .unwrap_or_default(),
            self.dependency_edges_of(e),
            "entity {id}: dependency edges disagree with its deployed release"
        );
        if let Some(plan_id) = self.plans.index().active.get(id) {
            let plan = self.plans.get(plan_id);
            assert!(
                plan.is_some_and(|p| p.entity == id && p.status.is_active()),
                "entity {id}: active plan {plan_id} is not an active plan of it"
            );
        }
        if let Some(module) = &e.owner_module {
            let inst = self
                .installations
                .get(&crate::installation::Installation::id_of(
                    &e.environment,
                    module,
                ));
            assert!(
                inst.is_some_and(|i| i.entities.contains_key(id)),
                "entity {id}: owned by module {module}, whose installation does not manage it"
            );
        }
    }

    /// A plan in the table is active and is its entity's active plan; a finished plan is
    /// not in the table (it has an outcome instead), and no index names a removed plan.
    fn check_plan(&self, id: &str) {
        let Some(p) = self.plans.get(id) else {
            assert!(
                !self.plans.index().active.values().any(|a| a == id),
                "plan {id}: removed but still active in the index"
            );
            return;
        };
        assert!(
            p.status.is_active(),
            "plan {id} is {} but still a row of the plan table",
            p.status
        );
        assert_eq!(
            self.plans.index().active.get(&p.entity).map(String::as_str),
            Some(id),
            "plan {id}: active-plan index disagrees"
        );
        assert!(
            !self.plan_outcomes.contains_key(id),
            "plan {id}: active and finished at once"
        );
    }

    /// An outcome is a finished plan's, in its entity's outcome index, and the entity keeps
    /// at most [`FINISHED_PLANS_KEPT`] of them.
    fn check_plan_outcome(&self, id: &str) {
        let Some(o) = self.plan_outcomes.get(id) else {
            return;
        };
        assert!(!o.status.is_active(), "outcome {id} is {}", o.status);
        assert!(
            !self.plans.contains_key(id),
            "plan {id}: finished and still a row of the plan table"
        );
        let kept = self.plan_outcomes.index().by_entity.get(&o.entity);
        assert!(
            kept.is_some_and(|s| s.contains(&(o.issued_index, id.to_string()))),
            "outcome {id}: not in the outcome index of {}",
            o.entity
        );
        assert!(
            kept.is_some_and(|s| s.len() <= FINISHED_PLANS_KEPT),
            "entity {}: more than {FINISHED_PLANS_KEPT} finished plans kept",
            o.entity
        );
    }

    /// A canary's entity exists and the canary index names it; a removed canary is in no
    /// index.
    fn check_canary(&self, id: &str) {
        match self.canaries.get(id) {
            Some(c) => {
                assert!(
                    self.entities.contains_key(&c.entity),
                    "canary {id}: entity {} missing",
                    c.entity
                );
                assert_eq!(
                    self.canaries
                        .index()
                        .of_entity
                        .get(&c.entity)
                        .map(String::as_str),
                    Some(id),
                    "canary {id}: the canary index of {} disagrees",
                    c.entity
                );
                for t in c.spec.metric_templates() {
                    assert!(
                        self.metric_templates.contains_key(t),
                        "canary {id}: metric template {t} missing"
                    );
                }
            }
            None => assert!(
                !self.canaries.index().of_entity.values().any(|c| c == id),
                "canary {id}: removed but still indexed"
            ),
        }
    }

    /// A metric template belongs to an existing environment under its id; a removed one is
    /// referenced by no canary.
    fn check_metric_template(&self, id: &str) {
        match self.metric_templates.get(id) {
            Some(t) => {
                assert_eq!(
                    crate::metric_template::MetricTemplate::id_of(&t.environment, &t.name),
                    id,
                    "metric template {id}: id disagrees"
                );
                assert!(
                    self.environments.contains_key(&t.environment),
                    "metric template {id}: environment missing"
                );
            }
            None => assert!(
                self.canaries
                    .values()
                    .all(|c| c.spec.metric_templates().all(|t| t != id)),
                "metric template {id}: removed while a canary references it"
            ),
        }
    }

    /// An alert provider belongs to an existing environment under its id; a removed one is
    /// referenced by no canary.
    fn check_alert_provider(&self, id: &str) {
        match self.alert_providers.get(id) {
            Some(p) => {
                assert_eq!(
                    crate::alert_provider::AlertProvider::id_of(&p.environment, &p.name),
                    id,
                    "alert provider {id}: id disagrees"
                );
                assert!(
                    self.environments.contains_key(&p.environment),
                    "alert provider {id}: environment missing"
                );
            }
            None => assert!(
                self.canaries
                    .values()
                    .all(|c| c.spec.alert_providers().all(|(_, p)| p != id)),
                "alert provider {id}: removed while a canary references it"
            ),
        }
    }

    /// Every entity an installation manages exists and names the installation's module as
    /// its owner.
    fn check_installation(&self, id: &str) {
        let Some(inst) = self.installations.get(id) else {
            return;
        };
        for entity in inst.entities.keys() {
            let owner = self.entities.get(entity).map(|e| e.owner_module.as_deref());
            assert_eq!(
                owner,
                Some(Some(inst.module.as_str())),
                "installation {id}: manages {entity}, which is not owned by {}",
                inst.module
            );
        }
    }

    /// Checks that `channel` names a built-in or an existing custom channel.
    pub(crate) fn check_channel(&self, field: &str, channel: &str) -> Result<(), CommandError> {
        if crate::product::is_builtin_channel(channel) || self.channels.contains_key(channel) {
            Ok(())
        } else {
            Err(CommandError::invalid(
                field,
                format!("unknown release channel {channel:?} (built-ins: DEV, RELEASE_CANDIDATE, RELEASE)"),
            ))
        }
    }

    // ---- read accessors ----

    /// An environment by name.
    pub fn environment(&self, name: &str) -> Option<&Environment> {
        self.environments.get(name)
    }

    /// All environments, by name.
    pub fn environments(&self) -> impl Iterator<Item = &Environment> {
        self.environments.values()
    }

    /// The entities of one environment, by id.
    pub fn entities_of<'a>(&'a self, environment: &str) -> impl Iterator<Item = &'a Entity> + 'a {
        let prefix = EntityId::environment_prefix(environment);
        self.entities
            .range(prefix.clone()..)
            .take_while(move |(id, _)| id.starts_with(&prefix))
            .map(|(_, e)| e)
    }

    /// All entities, by id.
    pub fn entities(&self) -> impl Iterator<Item = &Entity> {
        self.entities.values()
    }

    /// An entity by id.
    pub fn entity(&self, id: &str) -> Option<&Entity> {
        self.entities.get(id)
    }

    /// The entities of `product` in `environment`.
    pub fn entities_of_product<'a>(
        &'a self,
        environment: &str,
        product: &str,
    ) -> impl Iterator<Item = &'a Entity> + 'a {
        self.entities
            .index()
            .by_product
            .get(&(environment.to_string(), product.to_string()))
            .into_iter()
            .flatten()
            .filter_map(|id| self.entities.get(id))
    }

    /// Entities of `product` that share a dependency group with `entity` (itself excluded):
    /// the ones that satisfy, or fail to satisfy, its dependency on that product (SPEC C7, M5).
    pub fn providers_for<'a>(
        &'a self,
        entity: &'a Entity,
        product: &str,
    ) -> impl Iterator<Item = &'a Entity> + 'a {
        let mut ids: BTreeSet<&'a String> = BTreeSet::new();
        for g in entity.groups_for_dependency(product) {
            if let Some(set) = self.entities.index().providers.get(&(
                entity.environment.clone(),
                g.clone(),
                product.to_string(),
            )) {
                ids.extend(set.iter());
            }
        }
        ids.into_iter()
            .filter(move |id| **id != entity.id.0)
            .filter_map(|id| self.entities.get(id))
    }

    /// Entities sharing a dependency group with `entity` whose deployed release depends on its
    /// product (and do not ignore that dependency), with the dependency.
    pub fn dependents_of<'a>(
        &'a self,
        entity: &'a Entity,
    ) -> impl Iterator<Item = (&'a Entity, &'a ProductDependency)> + 'a {
        let mut ids: BTreeSet<&'a String> = BTreeSet::new();
        for g in &entity.dependency_groups {
            if let Some(set) = self.idx.dependents.get(&(
                entity.environment.clone(),
                g.clone(),
                entity.product_id.clone(),
            )) {
                ids.extend(set.iter());
            }
        }
        ids.into_iter()
            .filter_map(|id| self.entities.get(id))
            .filter(move |d| {
                d.id != entity.id && !d.ignored_dependencies.contains(&entity.product_id)
            })
            .filter_map(move |d| {
                let release = self.deployed_release(d)?;
                let dep = release
                    .dependencies
                    .iter()
                    .find(|dep| dep.product_id == entity.product_id)?;
                Some((d, dep))
            })
    }

    /// The release record of what `entity` runs, if it is a known release.
    pub fn deployed_release(&self, entity: &Entity) -> Option<&Release> {
        let v = entity.reported.version.as_ref()?;
        self.release(&entity.product_id, v)
    }

    /// A product by id.
    pub fn product(&self, id: &str) -> Option<&Product> {
        self.products.get(id)
    }

    /// All products.
    pub fn products(&self) -> impl Iterator<Item = &Product> {
        self.products.values()
    }

    /// A release.
    pub fn release(&self, product: &str, version: &Version) -> Option<&Release> {
        self.releases.get(&Release::key_name(product, version))
    }

    /// A product's releases, newest first.
    pub fn releases_desc<'a>(&'a self, product: &str) -> impl Iterator<Item = &'a Release> + 'a {
        let product = product.to_string();
        self.releases
            .index()
            .versions
            .get(&product)
            .into_iter()
            .flat_map(|vs| vs.iter().rev())
            .filter_map(move |v| self.release(&product, v))
    }

    /// A product's releases in `channel`, newest first (recalled ones included).
    pub fn channel_releases_desc<'a>(
        &'a self,
        product: &str,
        channel: &'a str,
    ) -> impl Iterator<Item = &'a Release> + 'a {
        self.releases_desc(product)
            .filter(move |r| r.in_channel(channel))
    }

    /// Custom channels.
    pub fn channels(&self) -> impl Iterator<Item = &Channel> {
        self.channels.values()
    }

    /// All recalls.
    pub fn recalls(&self) -> impl Iterator<Item = &Recall> {
        self.recalls.values()
    }

    /// The recall covering `product@version`, if any.
    pub fn recall_covering(&self, product: &str, version: &Version) -> Option<&Recall> {
        self.recalls
            .index()
            .by_product
            .get(product)
            .into_iter()
            .flatten()
            .filter_map(|id| self.recalls.get(id))
            .find(|r| r.covers(version))
    }

    /// The suppressions of one scope.
    pub fn suppressions_in<'a>(
        &'a self,
        scope: &Scope,
    ) -> impl Iterator<Item = &'a Suppression> + 'a {
        self.suppressions
            .index()
            .by_scope
            .get(scope)
            .into_iter()
            .flatten()
            .filter_map(|id| self.suppressions.get(id))
    }

    /// All suppressions.
    pub fn suppressions(&self) -> impl Iterator<Item = &Suppression> {
        self.suppressions.values()
    }

    /// An issued or running plan, by id (a finished plan is history: [`State::plan_outcome`]
    /// says how it ended).
    pub fn plan(&self, id: &str) -> Option<&Plan> {
        self.plans.get(id)
    }

    /// All issued and running plans, by id.
    pub fn plans(&self) -> impl Iterator<Item = &Plan> {
        self.plans.values()
    }

    /// How many plans there are of each (kind label, status), the kept finished ones
    /// included, without zeros; kept as plans change, so reading it costs the number of
    /// pairs, not of plans.
    pub fn plan_counts(&self) -> impl Iterator<Item = ((&'static str, &'static str), u64)> + '_ {
        let mut counts = self.plan_outcomes.index().counts.clone();
        for (k, n) in &self.plans.index().counts {
            *counts.entry(*k).or_default() += n;
        }
        counts.into_iter()
    }

    /// How a finished plan ended, by id, while its entity keeps it.
    pub fn plan_outcome(&self, id: &str) -> Option<&PlanOutcome> {
        self.plan_outcomes.get(id)
    }

    /// Every kept finished plan's outcome, by id.
    pub fn plan_outcomes(&self) -> impl Iterator<Item = &PlanOutcome> {
        self.plan_outcomes.values()
    }

    /// An entity's kept finished plans, oldest first.
    pub fn outcomes_of<'a>(
        &'a self,
        entity: &str,
    ) -> impl DoubleEndedIterator<Item = &'a PlanOutcome> + 'a {
        self.plan_outcomes
            .index()
            .by_entity
            .get(entity)
            .into_iter()
            .flatten()
            .filter_map(|(_, id)| self.plan_outcomes.get(id))
    }

    /// The entity a plan, active or finished and kept, changes.
    pub fn plan_entity(&self, id: &str) -> Option<&str> {
        self.plans
            .get(id)
            .map(|p| p.entity.as_str())
            .or_else(|| self.plan_outcomes.get(id).map(|o| o.entity.as_str()))
    }

    /// The entity's issued or running plan.
    pub fn active_plan_of(&self, entity: &str) -> Option<&Plan> {
        self.plans
            .index()
            .active
            .get(entity)
            .and_then(|id| self.plans.get(id))
    }

    /// Active plans of an environment.
    pub fn active_plans_in<'a>(&'a self, environment: &str) -> impl Iterator<Item = &'a Plan> + 'a {
        let prefix = EntityId::environment_prefix(environment);
        self.plans
            .index()
            .active
            .range(prefix.clone()..)
            .take_while(move |(id, _)| id.starts_with(&prefix))
            .filter_map(|(_, pid)| self.plans.get(pid))
    }

    /// The failed version-changing plan a rollback should undo (SPEC P10): the entity's last
    /// finished plan failed after touching the workload and had a version to go back to.
    ///
    /// Decided from the plan record alone, never from the agent's state reports: an agent
    /// may restore the previous version on its own before it reports the failure, and its
    /// "back at the old version, healthy" report can be applied before or after the leader
    /// decides. Either order issues the same rollback plan, which on such an agent finds
    /// the old version running and confirms it (see docs/ARCHITECTURE.md, "The flow of a
    /// decision"). A plan that failed before touching the workload (fetch, verify) left the
    /// entity as it was and needs none.
    pub fn rollback_needed(&self, entity: &Entity) -> Option<&PlanOutcome> {
        let last = self.outcomes_of(&entity.id.0).next_back()?;
        if last.status != PlanStatus::Failed
            || !matches!(
                last.kind,
                OutcomeKind::VersionChange | OutcomeKind::RecallRollOff
            )
        {
            return None;
        }
        last.from_version.as_ref()?;
        last.failure_touched_workload.then_some(last)
    }

    /// An entity's activity head (its lines are history: [`crate::activity`]).
    pub fn activity(&self, entity: &str) -> Option<&Activity> {
        self.activity.get(entity)
    }

    /// Every activity head, by entity id.
    pub fn activity_heads(&self) -> impl Iterator<Item = (&String, &Activity)> {
        self.activity.iter()
    }

    /// Audit entries, oldest first.
    pub fn audit(&self) -> impl DoubleEndedIterator<Item = &AuditEntry> {
        self.audit.values()
    }

    /// The entities a trigger asks to re-evaluate (SPEC P11): for an entity, itself and its
    /// direct neighbours (what its deployed release depends on, and what depends on it),
    /// never their neighbours.
    pub fn affected_entities(&self, trigger: &Trigger) -> Vec<String> {
        match trigger {
            Trigger::EntityOnly(id) => vec![id.clone()],
            Trigger::Entity(id) => {
                let mut out = vec![id.clone()];
                let Some(entity) = self.entities.get(id) else {
                    return out;
                };
                if let Some(release) = self.deployed_release(entity) {
                    for dep in &release.dependencies {
                        out.extend(
                            self.providers_for(entity, &dep.product_id)
                                .map(|e| e.id.0.clone()),
                        );
                    }
                }
                out.extend(self.dependents_of(entity).map(|(d, _)| d.id.0.clone()));
                out.sort();
                out.dedup();
                out
            }
            Trigger::Environment(env) => self.entities_of(env).map(|e| e.id.0.clone()).collect(),
            Trigger::Product(product) => self
                .entities
                .index()
                .by_product
                .iter()
                .filter(|((_, p), _)| p == product)
                .flat_map(|(_, ids)| ids.iter().cloned())
                .collect(),
        }
    }

    /// Entities of `env` with a failed-plan suppression in force at `now`.
    pub fn autosuppressed_count(&self, env: &str, now: TimestampMs) -> usize {
        self.entities_of(env)
            .filter(|e| {
                self.suppressions_in(&Scope::Entity(e.id.0.clone()))
                    .any(|s| {
                        matches!(s.source, SuppressionSource::FailedPlan { .. }) && s.active_at(now)
                    })
            })
            .count()
    }

    /// Every published version of `name`, oldest first.
    pub fn module_versions(
        &self,
        name: &str,
    ) -> impl DoubleEndedIterator<Item = &PublishedModule> + '_ {
        // `name` followed by NUL is the least string above `name`: the range holds exactly
        // `name`'s versions.
        let from = (name.to_string(), Version::new(0, 0, 0));
        let to = (format!("{name}\u{0}"), Version::new(0, 0, 0));
        self.modules.range(from..to).map(|(_, m)| m)
    }

    /// `name` at `version`, if published.
    pub fn module(&self, name: &str, version: &Version) -> Option<&PublishedModule> {
        self.modules.get(&(name.to_string(), version.clone()))
    }

    /// The newest version of `name`.
    pub fn latest_module(&self, name: &str) -> Option<&PublishedModule> {
        self.module_versions(name).next_back()
    }

    /// Every published module version, by name then version.
    pub fn modules(&self) -> impl Iterator<Item = &PublishedModule> {
        self.modules.values()
    }

    /// One installation.
    pub fn installation(&self, id: &str) -> Option<&Installation> {
        self.installations.get(id)
    }

    /// Every installation, by id.
    pub fn installations(&self) -> impl Iterator<Item = &Installation> {
        self.installations.values()
    }

    /// One change request.
    pub fn change_request(&self, id: &str) -> Option<&ChangeRequest> {
        self.change_requests.get(id)
    }

    /// Every change request, by id.
    pub fn change_requests(&self) -> impl Iterator<Item = &ChangeRequest> {
        self.change_requests.values()
    }

    /// One canary.
    pub fn canary(&self, id: &str) -> Option<&Canary> {
        self.canaries.get(id)
    }

    /// The newest events of canary `id` (at most
    /// [`crate::canary_events::CANARY_EVENTS_KEPT`]), oldest first; empty if it has recorded
    /// none (or does not exist).
    pub fn canary_events(&self, id: &str) -> impl Iterator<Item = &crate::canary::CanaryEvent> {
        self.canary_events
            .get(id)
            .into_iter()
            .flat_map(|e| e.events.iter())
    }

    /// The samples of canary `id` over time, if it has taken a step.
    pub fn canary_history(&self, id: &str) -> Option<&crate::canary_history::CanaryHistory> {
        self.canary_history.get(id)
    }

    /// Entity `id`'s never-healthy row: present while it has not been healthy on any version
    /// (and it was created after the row existed; see [`crate::never_healthy`]).
    pub fn never_healthy(&self, id: &str) -> Option<&crate::never_healthy::NeverHealthy> {
        self.never_healthy.get(id)
    }

    /// The spec a tick of canary `c` about `revision` runs with (the leader's tick plan and
    /// apply's phase machine both use it). With config tracking off, for the hub
    /// ([`crate::settings::ClusterSettings::canary_config_tracking`]) or for the canary
    /// (`flagger.app/config-tracking: disabled`), a revision that differs from the primary's
    /// only in config or secrets is promoted without analysis: `skipAnalysis` for that
    /// revision. Any other revision, and every revision with tracking on, gets `c.spec`.
    /// A canary stored before `ApplyCanary` recorded the environment as the namespace gets
    /// it here (webhook payloads name it).
    pub fn canary_tick_spec<'a>(
        &self,
        c: &'a Canary,
        revision: &str,
    ) -> std::borrow::Cow<'a, crate::canary::CanarySpec> {
        use std::borrow::Cow;
        // The annotation is read from the committed resource (the stored spec's encoding
        // stays as it was), and only for a config-only revision: rare, and cheap then.
        let tracking = || {
            self.cluster_settings().canary_config_tracking
                && !crate::canary::parse_canary_with_policy(&c.yaml)
                    .is_ok_and(|(_, policy, _)| policy.config_tracking_disabled)
        };
        let skip =
            !c.spec.skip_analysis && c.differs_from_primary_only_in_config(revision) && !tracking();
        if !skip && c.spec.namespace.is_some() {
            return Cow::Borrowed(&c.spec);
        }
        let mut spec = c.spec.clone();
        spec.skip_analysis |= skip;
        spec.namespace.get_or_insert_with(|| c.environment.clone());
        Cow::Owned(spec)
    }

    /// Metric template `name` of `environment` (issue 52 item 3).
    pub fn metric_template(
        &self,
        environment: &str,
        name: &str,
    ) -> Option<&crate::metric_template::MetricTemplate> {
        self.metric_templates
            .get(&crate::metric_template::MetricTemplate::id_of(
                environment,
                name,
            ))
    }

    /// Alert provider `name` of `environment` (issue 52 item 6).
    pub fn alert_provider(
        &self,
        environment: &str,
        name: &str,
    ) -> Option<&crate::alert_provider::AlertProvider> {
        self.alert_providers
            .get(&crate::alert_provider::AlertProvider::id_of(
                environment,
                name,
            ))
    }

    /// Every alert provider, by id.
    pub fn alert_providers(&self) -> impl Iterator<Item = &crate::alert_provider::AlertProvider> {
        self.alert_providers.values()
    }

    /// Every metric template, by id.
    pub fn metric_templates(
        &self,
    ) -> impl Iterator<Item = &crate::metric_template::MetricTemplate> {
        self.metric_templates.values()
    }

    /// The hub's settings (the defaults until one is set).
    pub fn cluster_settings(&self) -> crate::settings::ClusterSettings {
        self.cluster_settings.get(&()).cloned().unwrap_or_default()
    }

    /// The cluster's feature level ([`crate::feature_level`]): the level the last
    /// `SetClusterLevel` raised it to, or [`crate::feature_level::BASELINE_LEVEL`] (1) in a
    /// state that never set one (every log and snapshot written before levels existed).
    pub fn cluster_level(&self) -> crate::feature_level::FeatureLevel {
        self.cluster_level
            .get(&())
            .map_or(crate::feature_level::BASELINE_LEVEL, |r| r.level)
    }

    /// The record of the cluster's feature level: when and at which log index it was raised
    /// to its level; `None` while it is the baseline.
    pub fn cluster_level_record(&self) -> Option<&crate::feature_level::ClusterLevel> {
        self.cluster_level.get(&())
    }

    /// Approver group `name` ([`crate::approval`]).
    pub fn approver_group(&self, name: &str) -> Option<&crate::approval::ApproverGroup> {
        self.approver_groups.get(name)
    }

    /// Every approver group, by name.
    pub fn approver_groups(&self) -> impl Iterator<Item = &crate::approval::ApproverGroup> {
        self.approver_groups.values()
    }

    /// The approval policy set for `scope`, if any.
    pub fn approval_policy(
        &self,
        scope: &crate::approval::PolicyScope,
    ) -> Option<&crate::approval::ApprovalPolicy> {
        self.approval_policies.get(&scope.key_name())
    }

    /// Every approval policy, by scope key name.
    pub fn approval_policies(&self) -> impl Iterator<Item = &crate::approval::ApprovalPolicy> {
        self.approval_policies.values()
    }

    /// The policy that governs installation `id`: its own, else its environment's.
    pub fn installation_policy(&self, id: &str) -> Option<&crate::approval::ApprovalPolicy> {
        use crate::approval::PolicyScope;
        let env = id.split('/').next().unwrap_or_default();
        self.approval_policy(&PolicyScope::Installation(id.to_string()))
            .or_else(|| self.approval_policy(&PolicyScope::Environment(env.to_string())))
    }

    /// The approvals of change request `id`, if it was opened under a policy.
    pub fn change_request_approval(
        &self,
        id: &str,
    ) -> Option<&crate::approval::ChangeRequestApproval> {
        self.change_request_approvals.get(id)
    }

    /// Window-exception request `id`.
    pub fn window_exception(&self, id: &str) -> Option<&crate::window_exception::WindowException> {
        self.window_exceptions.get(id)
    }

    /// Every window-exception request, by id.
    pub fn window_exceptions(
        &self,
    ) -> impl Iterator<Item = &crate::window_exception::WindowException> {
        self.window_exceptions.values()
    }

    /// The channel installation `id` tracks: the one chosen for it, else its governing
    /// policy's default channel, else `RELEASE` ([`crate::module_channel`]).
    pub fn tracked_channel(&self, id: &str) -> String {
        if let Some(c) = self.installation_channels.get(id) {
            return c.channel.clone();
        }
        self.installation_policy(id)
            .and_then(|p| p.spec.default_channel.clone())
            .unwrap_or_else(|| crate::module_channel::DEFAULT_MODULE_CHANNEL.to_string())
    }

    /// Whether the channel of installation `id` was chosen for it (not a default).
    pub fn installation_channel(
        &self,
        id: &str,
    ) -> Option<&crate::module_channel::InstallationChannel> {
        self.installation_channels.get(id)
    }

    /// Whether published version `version` of `module` is on `channel`: every version is on
    /// the built-in channels; a custom one holds the versions added to it.
    pub fn module_on_channel(&self, module: &str, version: &Version, channel: &str) -> bool {
        crate::product::is_builtin_channel(channel)
            || self
                .module_channels
                .get(&crate::module_channel::ModuleChannels::key_name(
                    module, version,
                ))
                .is_some_and(|m| m.channels.contains(channel))
    }

    /// The custom channels of `module` at `version`.
    pub fn module_version_channels(
        &self,
        module: &str,
        version: &Version,
    ) -> Option<&crate::module_channel::ModuleChannels> {
        self.module_channels
            .get(&crate::module_channel::ModuleChannels::key_name(
                module, version,
            ))
    }

    /// The newest published version of `module` on `channel`.
    pub fn latest_module_on_channel(
        &self,
        module: &str,
        channel: &str,
    ) -> Option<&PublishedModule> {
        self.module_versions(module)
            .filter(|m| self.module_on_channel(module, &m.version, channel))
            .max_by(|a, b| a.version.cmp(&b.version))
    }

    /// The judging state of canary `id`, if it has judged metrics.
    pub fn canary_judging(&self, id: &str) -> Option<&crate::canary_judging::CanaryJudging> {
        self.canary_judging.get(id)
    }

    /// Every canary, by id.
    pub fn canaries(&self) -> impl Iterator<Item = &Canary> {
        self.canaries.values()
    }

    /// The canary controlling `entity`, unless it is being deleted.
    pub fn canary_of_entity(&self, entity: &str) -> Option<&Canary> {
        self.canaries
            .index()
            .of_entity
            .get(entity)
            .and_then(|id| self.canaries.get(id))
            .filter(|c| c.status.phase != Phase::Terminating)
    }

    /// The cluster key `name`, once set.
    pub fn cluster_key(&self, name: &str) -> Option<&SecretKey> {
        self.cluster_keys.get(name).map(|k| &k.key)
    }

    /// Every role binding of `identity`.
    pub fn bindings_of<'a>(
        &'a self,
        identity: &Identity,
    ) -> impl Iterator<Item = &'a RoleBinding> + 'a {
        let from = (identity.clone(), Role::Admin);
        let identity = identity.clone();
        self.role_bindings
            .range(from..)
            .take_while(move |((who, _), _)| *who == identity)
            .map(|(_, b)| b)
    }

    /// Every role binding, by identity then role.
    pub fn role_bindings(&self) -> impl Iterator<Item = &RoleBinding> {
        self.role_bindings.values()
    }

    /// Audited writes, oldest first.
    pub fn write_audit(&self) -> impl DoubleEndedIterator<Item = &crate::audit::WriteAudit> {
        self.write_audit.values()
    }

    /// The time of the last applied entry, and how often a stamp was raised to it.
    pub fn entry_clock(&self) -> crate::entry_clock::EntryClock {
        self.entry_clock.get(&()).cloned().unwrap_or_default()
    }

    /// The Raft members as the applied log has them, and the ids removed for good.
    pub fn cluster_members(&self) -> crate::cluster_members::ClusterMembers {
        self.cluster_members.get(&()).cloned().unwrap_or_default()
    }

    /// The write audit's retention and drop count.
    pub fn audit_log(&self) -> crate::audit::AuditLog {
        self.audit_log.get(&()).cloned().unwrap_or_default()
    }

    /// The legacy audit entry of log index `index`, if its command wrote one.
    pub fn audit_entry_at(&self, index: u64) -> Option<&AuditEntry> {
        self.audit.get(&AuditEntry::key_name(index))
    }

    /// How many certificate identities hold the admin role. Tokens' admin bindings do not
    /// count: a token expires, so the last admin is always someone with a certificate (and
    /// the bootstrap of the first admin stays closed while one exists).
    pub fn admin_count(&self) -> usize {
        self.role_bindings
            .keys()
            .filter(|(who, role)| *role == Role::Admin && who.is_certificate_identity())
            .count()
    }

    /// Every operator token, by name.
    pub fn tokens(&self) -> impl Iterator<Item = &crate::token::OperatorToken> {
        self.tokens.values()
    }

    /// The token named `name`.
    pub fn token(&self, name: &str) -> Option<&crate::token::OperatorToken> {
        self.tokens.get(name)
    }

    /// Whether the certificate with `serial` is revoked. `serial` must be canonical
    /// ([`crate::revocation::normalise_serial`], or
    /// [`crate::revocation::serial_from_der_bytes`] of the certificate's serial): any other
    /// spelling is not found.
    pub fn is_revoked(&self, serial: &str) -> bool {
        self.revoked_certificates.contains_key(serial)
    }

    /// The revocation of the certificate with canonical `serial`, if it is revoked.
    pub fn revoked_certificate(
        &self,
        serial: &str,
    ) -> Option<&crate::revocation::RevokedCertificate> {
        self.revoked_certificates.get(serial)
    }

    /// Every revoked certificate, by canonical serial.
    pub fn revoked_certificates(
        &self,
    ) -> impl ExactSizeIterator<Item = &crate::revocation::RevokedCertificate> {
        self.revoked_certificates.values()
    }

    /// The revocation list's version: changes whenever the list does (cheap: no scan).
    pub fn revocation_list_version(&self) -> crate::revocation::RevocationListVersion {
        crate::revocation::RevocationListVersion {
            count: self.revoked_certificates.len(),
            newest_index: self
                .revoked_certificates
                .index()
                .by_index
                .last()
                .map_or(0, |(index, _)| *index),
        }
    }

    /// The token whose secret hashes to `hash`: how a bearer is identified.
    pub fn token_by_hash(
        &self,
        hash: &crate::token::TokenHash,
    ) -> Option<&crate::token::OperatorToken> {
        let name = self.tokens.index().by_hash.get(hash)?;
        self.tokens.get(name)
    }

    /// The labels of environment `name` (empty when it has none).
    pub fn environment_labels(&self, name: &str) -> &BTreeMap<String, String> {
        static NONE: BTreeMap<String, String> = BTreeMap::new();
        self.environment_labels
            .get(name)
            .map_or(&NONE, |l| &l.labels)
    }

    /// Every labelled environment's labels, by environment.
    pub fn all_environment_labels(
        &self,
    ) -> impl Iterator<Item = &crate::labels::EnvironmentLabels> {
        self.environment_labels.values()
    }

    /// The rollout policy of `product` (its own, keyed by it).
    pub fn rollout_policy(&self, product: &str) -> Option<&crate::rollout_policy::RolloutPolicy> {
        self.rollout_policies.get(product)
    }

    /// The rollout policy whose group holds `product` (its own, or one that names it in
    /// `products`).
    pub fn rollout_policy_of(
        &self,
        product: &str,
    ) -> Option<&crate::rollout_policy::RolloutPolicy> {
        self.rollout_policies
            .index()
            .of_product
            .get(product)
            .and_then(|p| self.rollout_policies.get(p))
    }

    /// Every rollout policy, by product.
    pub fn rollout_policies(&self) -> impl Iterator<Item = &crate::rollout_policy::RolloutPolicy> {
        self.rollout_policies.values()
    }

    /// The committed progress of `version`'s rollout under the policy of `product` (the
    /// policy's own product), if anything was committed about it yet.
    pub fn rollout(&self, product: &str, version: &Version) -> Option<&crate::rollout::Rollout> {
        self.rollouts.get(&(product.to_string(), version.clone()))
    }

    /// The rollouts of the policy of `product` (its own product), oldest version first.
    pub fn rollouts_of<'a>(
        &'a self,
        product: &str,
    ) -> impl DoubleEndedIterator<Item = &'a crate::rollout::Rollout> + 'a {
        // `product` followed by NUL is the least string above it: the range holds exactly
        // its versions.
        let from = (product.to_string(), Version::new(0, 0, 0));
        let to = (format!("{product}\u{0}"), Version::new(0, 0, 0));
        self.rollouts.range(from..to).map(|(_, r)| r)
    }

    /// Every rollout, by product then version.
    pub fn rollouts(&self) -> impl Iterator<Item = &crate::rollout::Rollout> {
        self.rollouts.values()
    }

    /// The entities of `product` in every environment, by environment then id.
    pub fn entities_of_product_everywhere<'a>(
        &'a self,
        product: &str,
    ) -> impl Iterator<Item = &'a Entity> + 'a {
        let product = product.to_string();
        self.entities
            .index()
            .by_product
            .iter()
            .filter(move |((_, p), _)| *p == product)
            .flat_map(|(_, ids)| ids.iter())
            .filter_map(|id| self.entities.get(id))
    }

    /// The canary revision key, once set.
    pub fn revision_key(&self) -> Option<&SecretKey> {
        self.cluster_key(CANARY_REVISION_KEY)
    }

    // ---- records ----

    /// Adds a record while loading persisted state or a snapshot. Call
    /// [`State::rebuild_indexes`] after the last one (or use [`State::from_records`]).
    /// History records are not held in the state and are skipped; an older format loads
    /// what it becomes ([`Record::migrated`]), so storage must persist the migration too.
    pub fn insert_record(&mut self, record: Record) {
        for record in record.migrated() {
            match record.key().residence() {
                Residence::State => self.load_row(record),
                Residence::History => {}
                Residence::Legacy => unreachable!("migrated records are current: {record:?}"),
            }
        }
    }

    /// Recomputes the lookups that join tables (each table keeps its own index as rows load).
    pub fn rebuild_indexes(&mut self) {
        self.idx = Indexes::default();
        let ids: Vec<String> = self.entities.keys().cloned().collect();
        for id in ids {
            self.reindex_dependencies(&id);
        }
    }

    /// The (group, product) keys `entity` has in the dependents index: every product its
    /// deployed release depends on, under each of the entity's groups for that dependency.
    fn dependency_edges_of(&self, entity: &Entity) -> BTreeSet<(String, String)> {
        let Some(release) = self.deployed_release(entity) else {
            return BTreeSet::new();
        };
        release
            .dependencies
            .iter()
            .flat_map(|d| {
                entity
                    .groups_for_dependency(&d.product_id)
                    .iter()
                    .map(|g| (g.clone(), d.product_id.clone()))
            })
            .collect()
    }

    /// Recomputes the dependency edges of one entity from its deployed release and groups.
    pub(crate) fn reindex_dependencies(&mut self, id: &str) {
        let old = self.idx.dependency_edges.remove(id).unwrap_or_default();
        let Some(entity) = self.entities.get(id) else {
            return;
        };
        let env = entity.environment.clone();
        let new = self.dependency_edges_of(entity);
        for (group, product) in &old {
            let key = (env.clone(), group.clone(), product.clone());
            if let Some(set) = self.idx.dependents.get_mut(&key) {
                set.remove(id);
                if set.is_empty() {
                    self.idx.dependents.remove(&key);
                }
            }
        }
        for (group, product) in &new {
            self.idx
                .dependents
                .entry((env.clone(), group.clone(), product.clone()))
                .or_default()
                .insert(id.to_string());
        }
        if !new.is_empty() {
            self.idx.dependency_edges.insert(id.to_string(), new);
        }
    }

    /// SHA-256 over every record in key order, hex encoded ([`StateDigest`]). Equal on every
    /// node that applied the same log prefix. O(state): a caller holding the state's lock
    /// holds up apply for as long; a store can compute the same from its records instead.
    pub fn digest(&self) -> String {
        let mut digest = StateDigest::new();
        for record in self.records() {
            digest.add(&record.key().to_bytes(), &canonical_bytes(&record));
        }
        digest.finish()
    }
}

/// The state digest, built record by record in key order: each record's key bytes
/// ([`crate::RecordKey::to_bytes`]) and its canonical encoding ([`canonical_bytes`]), each
/// preceded by its length.
pub struct StateDigest(Sha256);

impl StateDigest {
    /// An empty digest.
    pub fn new() -> Self {
        Self(Sha256::new())
    }

    /// Adds the next record, in key order.
    pub fn add(&mut self, key: &[u8], canonical: &[u8]) {
        self.0.update((key.len() as u64).to_le_bytes());
        self.0.update(key);
        self.0.update((canonical.len() as u64).to_le_bytes());
        self.0.update(canonical);
    }

    /// The hex-encoded digest.
    pub fn finish(self) -> String {
        hex::encode(self.0.finalize())
    }
}

impl Default for StateDigest {
    fn default() -> Self {
        Self::new()
    }
}

/// A record's canonical encoding for the digest: bincode's standard configuration (what a
/// store keeps after its format byte, which lets it digest stored records undecoded).
pub fn canonical_bytes(record: &Record) -> Vec<u8> {
    // Encoding plain data structs into a Vec cannot fail: there is no I/O and no size limit.
    bincode::serde::encode_to_vec(record, bincode::config::standard())
        .expect("encoding a record into memory cannot fail")
}

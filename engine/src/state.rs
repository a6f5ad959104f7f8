//! The replicated state and the deterministic [`State::apply`].
//!
//! The state is a set of tables (one per record kind) plus derived indexes that are rebuilt
//! from the tables after loading and kept up to date by every apply. Command handlers live in
//! [`crate::handlers`] (settings, products, windows) and [`crate::lifecycle`] (evaluation,
//! plans, reports, suppressions, commands); this module holds the tables, the dispatch and the
//! read accessors.

use std::collections::{BTreeMap, BTreeSet};

use semver::Version;
use sha2::{Digest, Sha256};

use crate::activity::Activity;
use crate::canary_lifecycle::Canary;
use crate::command::{Command, CommandOutput, Request};
use crate::entity::{Entity, EntityId, EntityKind, DEFAULT_RELEASE_CHANNEL, MAX_ENTITY_ID_LEN};
use crate::environment::Environment;
use crate::error::CommandError;
use crate::installation::{ChangeRequest, Installation, PublishedModule};
use crate::name::{validate_name, validate_product_id};
use crate::plan::{Plan, PlanKind, PlanStatus};
use crate::product::{Channel, Product, Recall, Release};
use crate::record::{AuditEntry, Record, RecordKey, RequestRecord};
use crate::release::ProductDependency;
use crate::suppression::{Scope, Suppression};
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
}

/// What a command handler accumulates besides its result.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    pub(crate) changed: Vec<RecordKey>,
    pub(crate) triggers: Vec<Trigger>,
}

/// Derived lookups, rebuilt from the tables ([`State::rebuild_indexes`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Indexes {
    /// product -> its released versions.
    pub(crate) release_versions: BTreeMap<String, BTreeSet<Version>>,
    /// product -> recall ids.
    pub(crate) recalls_by_product: BTreeMap<String, BTreeSet<String>>,
    /// scope -> suppression ids.
    pub(crate) suppressions_by_scope: BTreeMap<Scope, BTreeSet<String>>,
    /// entity -> (issued index, plan id), oldest first.
    pub(crate) plans_by_entity: BTreeMap<String, BTreeSet<(u64, String)>>,
    /// entity -> its issued or running plan.
    pub(crate) active_plan: BTreeMap<String, String>,
    /// (environment, product) -> entity ids.
    pub(crate) entities_by_product: BTreeMap<(String, String), BTreeSet<String>>,
    /// (environment, dependency group, product) -> entity ids: who can satisfy a dependency
    /// on that product for members of the group.
    pub(crate) providers: BTreeMap<(String, String, String), BTreeSet<String>>,
    /// (environment, dependency group, product depended on) -> entities of the group whose
    /// deployed release depends on it.
    pub(crate) dependents: BTreeMap<(String, String, String), BTreeSet<String>>,
    /// entity -> the (group, product) keys it has in `dependents`.
    pub(crate) dependency_edges: BTreeMap<String, BTreeSet<(String, String)>>,
    /// entity -> the id of its canary (at most one per entity).
    pub(crate) canary_of_entity: BTreeMap<String, String>,
}

/// Everything the hub replicates. Built only by applying commands in log order (or by loading
/// records that were produced that way).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    pub(crate) environments: BTreeMap<String, Environment>,
    pub(crate) entities: BTreeMap<String, Entity>,
    pub(crate) requests: BTreeMap<String, RequestRecord>,
    /// `(first applied at, request id)`, to forget request ids in time order.
    pub(crate) request_expiry: BTreeSet<(TimestampMs, String)>,
    pub(crate) products: BTreeMap<String, Product>,
    /// By `group:name@version`.
    pub(crate) releases: BTreeMap<String, Release>,
    pub(crate) channels: BTreeMap<String, Channel>,
    pub(crate) recalls: BTreeMap<String, Recall>,
    pub(crate) suppressions: BTreeMap<String, Suppression>,
    pub(crate) plans: BTreeMap<String, Plan>,
    pub(crate) activity: BTreeMap<String, Activity>,
    pub(crate) audit: BTreeMap<String, AuditEntry>,
    /// Published module versions by (name, version).
    pub(crate) modules: BTreeMap<(String, Version), PublishedModule>,
    /// Module installations by `<environment>/<module>`.
    pub(crate) installations: BTreeMap<String, Installation>,
    /// Module change requests by id.
    pub(crate) change_requests: BTreeMap<String, ChangeRequest>,
    /// Canaries by `<environment>/<name>`.
    pub(crate) canaries: BTreeMap<String, Canary>,
    /// Cluster keys by name ([`crate::cluster_key`]).
    pub(crate) cluster_keys: BTreeMap<String, crate::cluster_key::ClusterKey>,
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

    /// Applies `req`, which Raft committed at log `index`. Deterministic: the result depends
    /// only on the state, the request and `index`.
    pub fn apply(&mut self, req: &Request, index: u64) -> Applied {
        let mut fx = Effects::default();
        if let Some(id) = &req.request_id {
            if let Some(prev) = self.requests.get(id) {
                return Applied {
                    result: prev.result.clone(),
                    changed: Vec::new(),
                    triggers: Vec::new(),
                };
            }
        }
        let result = self.execute(&req.command, req.time_ms, index, &mut fx);
        if result.is_err() {
            debug_assert!(
                fx.changed.is_empty(),
                "a refused command changed {:?}",
                fx.changed
            );
            fx.changed.clear();
            fx.triggers.clear();
        }
        if let Some(id) = &req.request_id {
            let record = RequestRecord {
                id: id.clone(),
                index,
                time_ms: req.time_ms,
                result: result.clone(),
            };
            self.request_expiry.insert((req.time_ms, id.clone()));
            self.requests.insert(id.clone(), record);
            fx.changed.push(RecordKey::Request(id.clone()));
        }
        self.forget_requests_before(req.time_ms - REQUEST_TTL_MS, &mut fx.changed);
        self.check_invariants();
        Applied {
            result,
            changed: fx.changed,
            triggers: fx.triggers,
        }
    }

    fn execute(
        &mut self,
        command: &Command,
        now: TimestampMs,
        index: u64,
        fx: &mut Effects,
    ) -> Result<CommandOutput, CommandError> {
        match command {
            Command::CreateEnvironment { name, description } => {
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
                        name: name.clone(),
                    });
                }
                self.environments.insert(
                    name.clone(),
                    Environment {
                        name: name.clone(),
                        description: description.clone(),
                        created_at_ms: now,
                        settings: Default::default(),
                        window_overrides: Vec::new(),
                    },
                );
                fx.changed.push(RecordKey::Environment(name.clone()));
                Ok(CommandOutput::EnvironmentCreated(name.clone()))
            }
            Command::DeleteEnvironment { name } => {
                if !self.environments.contains_key(name) {
                    return Err(CommandError::NotFound {
                        kind: "environment".into(),
                        name: name.clone(),
                    });
                }
                let count = self.entities_of(name).count();
                if count > 0 {
                    return Err(CommandError::FailedPrecondition(format!(
                        "environment {name:?} still has {count} entities; delete them first"
                    )));
                }
                self.environments.remove(name);
                fx.changed.push(RecordKey::Environment(name.clone()));
                let scope = Scope::Environment(name.clone());
                for id in self
                    .idx
                    .suppressions_by_scope
                    .remove(&scope)
                    .unwrap_or_default()
                {
                    self.suppressions.remove(&id);
                    fx.changed.push(RecordKey::Suppression(id));
                }
                Ok(CommandOutput::EnvironmentDeleted(name.clone()))
            }
            Command::CreateEntity {
                environment,
                kind,
                name,
                product_id,
                k8s_namespace,
                account_id,
                release_channel,
            } => {
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
                if account_id.is_some() && *kind != EntityKind::TerraformModule {
                    return Err(CommandError::invalid(
                        "account_id",
                        "only terraformModule entities have an account",
                    ));
                }
                let release_channel = non_empty(release_channel)
                    .unwrap_or_else(|| DEFAULT_RELEASE_CHANNEL.to_string());
                self.check_channel("release_channel", &release_channel)?;
                if !self.environments.contains_key(environment) {
                    return Err(CommandError::NotFound {
                        kind: "environment".into(),
                        name: environment.clone(),
                    });
                }
                let id = EntityId::new(environment, *kind, name);
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
                    id.clone(),
                    environment,
                    *kind,
                    name,
                    product_id,
                    k8s_namespace,
                    account_id,
                    release_channel,
                    now,
                );
                self.idx
                    .entities_by_product
                    .entry((environment.clone(), product_id.clone()))
                    .or_default()
                    .insert(id.0.clone());
                self.index_providers(&entity, true);
                self.entities.insert(id.0.clone(), entity);
                fx.changed.push(RecordKey::Entity(id.0.clone()));
                fx.triggers.push(Trigger::Entity(id.0.clone()));
                Ok(CommandOutput::EntityCreated(id.0))
            }
            other => self.execute_orchestration(other, now, index, fx),
        }
    }

    fn forget_requests_before(&mut self, cutoff: TimestampMs, changed: &mut Vec<RecordKey>) {
        while let Some((t, id)) = self.request_expiry.first().cloned() {
            if t >= cutoff {
                break;
            }
            self.request_expiry.pop_first();
            self.requests.remove(&id);
            changed.push(RecordKey::Request(id));
        }
    }

    /// Cheap structural checks, run after every apply in debug builds.
    fn check_invariants(&self) {
        debug_assert_eq!(self.requests.len(), self.request_expiry.len());
        debug_assert!(self
            .entities
            .values()
            .all(|e| self.environments.contains_key(&e.environment)));
        // At most one active plan per entity, and the index agrees with the plans.
        debug_assert_eq!(
            self.idx.active_plan.len(),
            self.plans.values().filter(|p| p.status.is_active()).count()
        );
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
        self.idx
            .entities_by_product
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
            if let Some(set) = self.idx.providers.get(&(
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
        self.idx
            .release_versions
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
        self.idx
            .recalls_by_product
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
        self.idx
            .suppressions_by_scope
            .get(scope)
            .into_iter()
            .flatten()
            .filter_map(|id| self.suppressions.get(id))
    }

    /// All suppressions.
    pub fn suppressions(&self) -> impl Iterator<Item = &Suppression> {
        self.suppressions.values()
    }

    /// A plan by id.
    pub fn plan(&self, id: &str) -> Option<&Plan> {
        self.plans.get(id)
    }

    /// All plans, by id.
    pub fn plans(&self) -> impl Iterator<Item = &Plan> {
        self.plans.values()
    }

    /// An entity's plans, oldest first.
    pub fn plans_of<'a>(&'a self, entity: &str) -> impl DoubleEndedIterator<Item = &'a Plan> + 'a {
        self.idx
            .plans_by_entity
            .get(entity)
            .into_iter()
            .flatten()
            .filter_map(|(_, id)| self.plans.get(id))
    }

    /// The entity's issued or running plan.
    pub fn active_plan_of(&self, entity: &str) -> Option<&Plan> {
        self.idx
            .active_plan
            .get(entity)
            .and_then(|id| self.plans.get(id))
    }

    /// Active plans of an environment.
    pub fn active_plans_in<'a>(&'a self, environment: &str) -> impl Iterator<Item = &'a Plan> + 'a {
        let prefix = EntityId::environment_prefix(environment);
        self.idx
            .active_plan
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
    pub fn rollback_needed(&self, entity: &Entity) -> Option<&Plan> {
        let last = self
            .plans_of(&entity.id.0)
            .rev()
            .find(|p| !p.status.is_active())?;
        if last.status != PlanStatus::Failed
            || !matches!(last.kind, PlanKind::VersionChange | PlanKind::RecallRollOff)
        {
            return None;
        }
        last.from_version.as_ref()?;
        last.failure
            .as_ref()
            .is_none_or(|f| f.touched_workload())
            .then_some(last)
    }

    /// An entity's activity.
    pub fn activity(&self, entity: &str) -> Option<&Activity> {
        self.activity.get(entity)
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
                .idx
                .entities_by_product
                .iter()
                .filter(|((_, p), _)| p == product)
                .flat_map(|(_, ids)| ids.iter().cloned())
                .collect(),
        }
    }

    // ---- records ----

    /// The current record under `key`, if any.
    pub fn record(&self, key: &RecordKey) -> Option<Record> {
        match key {
            RecordKey::Environment(n) => self.environments.get(n).cloned().map(Record::Environment),
            RecordKey::Entity(n) => self.entities.get(n).cloned().map(Record::Entity),
            RecordKey::Request(n) => self.requests.get(n).cloned().map(Record::Request),
            RecordKey::Product(n) => self.products.get(n).cloned().map(Record::Product),
            RecordKey::Release(n) => self.releases.get(n).cloned().map(Record::Release),
            RecordKey::Channel(n) => self.channels.get(n).cloned().map(Record::Channel),
            RecordKey::Recall(n) => self.recalls.get(n).cloned().map(Record::Recall),
            RecordKey::Suppression(n) => self.suppressions.get(n).cloned().map(Record::Suppression),
            RecordKey::Plan(n) => self.plans.get(n).cloned().map(Record::Plan),
            RecordKey::Activity(n) => self.activity.get(n).cloned().map(Record::Activity),
            RecordKey::Audit(n) => self.audit.get(n).cloned().map(Record::Audit),
            RecordKey::Module(n) => {
                let (name, version) = n.rsplit_once('@')?;
                let version = Version::parse(version).ok()?;
                self.modules
                    .get(&(name.to_string(), version))
                    .cloned()
                    .map(Record::Module)
            }
            RecordKey::Installation(n) => {
                self.installations.get(n).cloned().map(Record::Installation)
            }
            RecordKey::ChangeRequest(n) => self
                .change_requests
                .get(n)
                .cloned()
                .map(Record::ChangeRequest),
            RecordKey::Canary(n) => self
                .canaries
                .get(n)
                .map(|c| Record::Canary(Box::new(c.clone()))),
            RecordKey::ClusterKey(n) => self.cluster_keys.get(n).cloned().map(Record::ClusterKey),
        }
    }

    /// Every record, table by table in tag order, each table in key order.
    pub fn records(&self) -> impl Iterator<Item = Record> + '_ {
        let envs = self.environments.values().cloned().map(Record::Environment);
        let ents = self.entities.values().cloned().map(Record::Entity);
        let reqs = self.requests.values().cloned().map(Record::Request);
        let products = self.products.values().cloned().map(Record::Product);
        let releases = self.releases.values().cloned().map(Record::Release);
        let channels = self.channels.values().cloned().map(Record::Channel);
        let recalls = self.recalls.values().cloned().map(Record::Recall);
        let sups = self.suppressions.values().cloned().map(Record::Suppression);
        let plans = self.plans.values().cloned().map(Record::Plan);
        let acts = self.activity.values().cloned().map(Record::Activity);
        let audit = self.audit.values().cloned().map(Record::Audit);
        let modules = self.modules.values().cloned().map(Record::Module);
        let installations = self
            .installations
            .values()
            .cloned()
            .map(Record::Installation);
        let crs = self
            .change_requests
            .values()
            .cloned()
            .map(Record::ChangeRequest);
        let canaries = self
            .canaries
            .values()
            .map(|c| Record::Canary(Box::new(c.clone())));
        let keys = self.cluster_keys.values().cloned().map(Record::ClusterKey);
        envs.chain(ents)
            .chain(reqs)
            .chain(products)
            .chain(releases)
            .chain(channels)
            .chain(recalls)
            .chain(sups)
            .chain(plans)
            .chain(acts)
            .chain(audit)
            .chain(modules)
            .chain(installations)
            .chain(crs)
            .chain(canaries)
            .chain(keys)
    }

    /// Adds a record while loading persisted state or a snapshot. Call
    /// [`State::rebuild_indexes`] after the last one (or use [`State::from_records`]).
    pub fn insert_record(&mut self, record: Record) {
        match record {
            Record::Environment(e) => {
                self.environments.insert(e.name.clone(), e);
            }
            Record::Entity(e) => {
                self.entities.insert(e.id.0.clone(), e);
            }
            Record::Request(r) => {
                self.request_expiry.insert((r.time_ms, r.id.clone()));
                self.requests.insert(r.id.clone(), r);
            }
            Record::Product(p) => {
                self.products.insert(p.id.clone(), p);
            }
            Record::Release(r) => {
                self.releases
                    .insert(Release::key_name(&r.product_id, &r.version), r);
            }
            Record::Channel(c) => {
                self.channels.insert(c.name.clone(), c);
            }
            Record::Recall(r) => {
                self.recalls.insert(r.id.clone(), r);
            }
            Record::Suppression(s) => {
                self.suppressions.insert(s.id.clone(), s);
            }
            Record::Plan(p) => {
                self.plans.insert(p.id.clone(), p);
            }
            Record::Activity(a) => {
                self.activity.insert(a.entity.clone(), a);
            }
            Record::Audit(a) => {
                self.audit.insert(AuditEntry::key_name(a.index), a);
            }
            Record::Module(m) => {
                self.modules.insert((m.name.clone(), m.version.clone()), m);
            }
            Record::Installation(i) => {
                self.installations.insert(i.id.clone(), i);
            }
            Record::ChangeRequest(c) => {
                self.change_requests.insert(c.id.clone(), c);
            }
            Record::Canary(c) => {
                self.canaries.insert(c.id.clone(), *c);
            }
            Record::ClusterKey(k) => {
                self.cluster_keys.insert(k.name.clone(), k);
            }
        }
    }

    /// Recomputes every derived index from the tables.
    pub fn rebuild_indexes(&mut self) {
        let mut idx = Indexes::default();
        for r in self.releases.values() {
            idx.release_versions
                .entry(r.product_id.clone())
                .or_default()
                .insert(r.version.clone());
        }
        for r in self.recalls.values() {
            idx.recalls_by_product
                .entry(r.product_id.clone())
                .or_default()
                .insert(r.id.clone());
        }
        for s in self.suppressions.values() {
            idx.suppressions_by_scope
                .entry(s.scope.clone())
                .or_default()
                .insert(s.id.clone());
        }
        for p in self.plans.values() {
            idx.plans_by_entity
                .entry(p.entity.clone())
                .or_default()
                .insert((p.issued_index, p.id.clone()));
            if p.status.is_active() {
                idx.active_plan.insert(p.entity.clone(), p.id.clone());
            }
        }
        for c in self.canaries.values() {
            idx.canary_of_entity.insert(c.entity.clone(), c.id.clone());
        }
        for e in self.entities.values() {
            idx.entities_by_product
                .entry((e.environment.clone(), e.product_id.clone()))
                .or_default()
                .insert(e.id.0.clone());
        }
        self.idx = idx;
        let entities: Vec<Entity> = self.entities.values().cloned().collect();
        for e in &entities {
            self.index_providers(e, true);
        }
        let ids: Vec<String> = self.entities.keys().cloned().collect();
        for id in ids {
            self.reindex_dependencies(&id);
        }
    }

    /// Adds (or removes) `entity` under each of its dependency groups in the providers index.
    pub(crate) fn index_providers(&mut self, entity: &Entity, add: bool) {
        for g in &entity.dependency_groups {
            let key = (
                entity.environment.clone(),
                g.clone(),
                entity.product_id.clone(),
            );
            if add {
                self.idx
                    .providers
                    .entry(key)
                    .or_default()
                    .insert(entity.id.0.clone());
            } else if let Some(set) = self.idx.providers.get_mut(&key) {
                set.remove(&entity.id.0);
                if set.is_empty() {
                    self.idx.providers.remove(&key);
                }
            }
        }
    }

    /// Recomputes the dependency edges of one entity from its deployed release and groups.
    pub(crate) fn reindex_dependencies(&mut self, id: &str) {
        let old = self.idx.dependency_edges.remove(id).unwrap_or_default();
        let Some(entity) = self.entities.get(id) else {
            return;
        };
        let env = entity.environment.clone();
        for (group, product) in &old {
            let key = (env.clone(), group.clone(), product.clone());
            if let Some(set) = self.idx.dependents.get_mut(&key) {
                set.remove(id);
                if set.is_empty() {
                    self.idx.dependents.remove(&key);
                }
            }
        }
        let products: BTreeSet<String> = self
            .deployed_release(entity)
            .map(|r| {
                r.dependencies
                    .iter()
                    .map(|d| d.product_id.clone())
                    .collect()
            })
            .unwrap_or_default();
        let new: BTreeSet<(String, String)> = products
            .iter()
            .flat_map(|p| {
                entity
                    .groups_for_dependency(p)
                    .iter()
                    .map(move |g| (g.clone(), p.clone()))
            })
            .collect();
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

    /// SHA-256 over every record in key order, hex encoded. Equal on every node that applied
    /// the same log prefix.
    pub fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        for record in self.records() {
            let key = record.key().to_bytes();
            let value = canonical_bytes(&record);
            hasher.update((key.len() as u64).to_le_bytes());
            hasher.update(&key);
            hasher.update((value.len() as u64).to_le_bytes());
            hasher.update(&value);
        }
        hex::encode(hasher.finalize())
    }
}

/// A deterministic encoding of a record for the digest.
fn canonical_bytes(record: &Record) -> Vec<u8> {
    // Encoding plain data structs into a Vec cannot fail: there is no I/O and no size limit.
    bincode::serde::encode_to_vec(record, bincode::config::standard())
        .expect("encoding a record into memory cannot fail")
}

pub(crate) fn non_empty(value: &Option<String>) -> Option<String> {
    value.as_ref().filter(|v| !v.is_empty()).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(command: Command, time_ms: TimestampMs) -> Request {
        Request {
            command,
            time_ms,
            request_id: None,
        }
    }

    fn create_env(name: &str) -> Command {
        Command::CreateEnvironment {
            name: name.into(),
            description: String::new(),
        }
    }

    fn create_helm(env: &str, name: &str) -> Command {
        Command::CreateEntity {
            environment: env.into(),
            kind: EntityKind::HelmChart,
            name: name.into(),
            product_id: "com.example:web".into(),
            k8s_namespace: Some("web".into()),
            account_id: None,
            release_channel: None,
        }
    }

    #[test]
    fn creates_environments_and_entities() {
        let mut s = State::new();
        let a = s.apply(&req(create_env("prod"), 10), 1);
        assert_eq!(
            a.result,
            Ok(CommandOutput::EnvironmentCreated("prod".into()))
        );
        assert_eq!(a.changed, vec![RecordKey::Environment("prod".into())]);
        let a = s.apply(&req(create_helm("prod", "web"), 11), 2);
        assert_eq!(
            a.result,
            Ok(CommandOutput::EntityCreated(
                "eid:prod:helmChart:web".into()
            ))
        );
        let e = s.entities_of("prod").next().unwrap();
        assert_eq!(e.release_channel, "RELEASE");
        assert_eq!(e.created_at_ms, 11);
    }

    #[test]
    fn refused_commands_change_nothing() {
        // SPEC S3
        let mut s = State::new();
        s.apply(&req(create_env("prod"), 1), 1);
        let before = s.clone();
        let digest = s.digest();
        for cmd in [
            create_env("prod"),
            create_env("Bad"),
            create_helm("nope", "web"),
            Command::DeleteEnvironment {
                name: "nope".into(),
            },
            Command::CreateEntity {
                environment: "prod".into(),
                kind: EntityKind::HelmChart,
                name: "web".into(),
                product_id: "com.example:web".into(),
                k8s_namespace: None,
                account_id: None,
                release_channel: None,
            },
        ] {
            let a = s.apply(&req(cmd, 2), 2);
            assert!(a.result.is_err());
            assert!(a.changed.is_empty());
        }
        assert_eq!(s, before);
        assert_eq!(s.digest(), digest);
    }

    #[test]
    fn duplicate_names_fail_with_the_name() {
        let mut s = State::new();
        s.apply(&req(create_env("prod"), 1), 1);
        let err = s.apply(&req(create_env("prod"), 1), 2).result.unwrap_err();
        assert_eq!(err.to_string(), "environment \"prod\" already exists");
        s.apply(&req(create_helm("prod", "web"), 1), 3);
        let err = s
            .apply(&req(create_helm("prod", "web"), 1), 4)
            .result
            .unwrap_err();
        assert!(err.to_string().contains("eid:prod:helmChart:web"), "{err}");
    }

    #[test]
    fn an_environment_with_entities_is_not_deleted() {
        let mut s = State::new();
        s.apply(&req(create_env("prod"), 1), 1);
        s.apply(&req(create_helm("prod", "web"), 1), 2);
        let a = s.apply(
            &req(
                Command::DeleteEnvironment {
                    name: "prod".into(),
                },
                1,
            ),
            3,
        );
        assert!(a.result.unwrap_err().to_string().contains("1 entities"));
        assert!(s.environment("prod").is_some());
    }

    #[test]
    fn request_ids_apply_once_and_expire() {
        let mut s = State::new();
        let mut r = req(create_env("prod"), 1_000);
        r.request_id = Some("k1".into());
        let first = s.apply(&r, 1);
        assert!(first.result.is_ok());
        let again = s.apply(&r, 2);
        assert_eq!(again.result, first.result);
        assert!(again.changed.is_empty());
        // After the TTL the id is forgotten on the next apply.
        let later = s.apply(&req(create_env("dev"), 1_000 + REQUEST_TTL_MS + 1), 3);
        assert!(later.changed.contains(&RecordKey::Request("k1".into())));
        assert!(s.record(&RecordKey::Request("k1".into())).is_none());
    }

    #[test]
    fn entities_of_does_not_leak_across_prefixes() {
        let mut s = State::new();
        for env in ["prod", "prod2"] {
            s.apply(&req(create_env(env), 1), 1);
            s.apply(&req(create_helm(env, "web"), 1), 2);
        }
        assert_eq!(s.entities_of("prod").count(), 1);
        assert_eq!(s.entities_of("prod2").count(), 1);
    }

    #[test]
    fn records_rebuild_an_equal_state_and_digest() {
        let mut s = State::new();
        s.apply(&req(create_env("prod"), 1), 1);
        s.apply(&req(create_helm("prod", "web"), 2), 2);
        let mut r = req(create_env("dev"), 3);
        r.request_id = Some("x".into());
        s.apply(&r, 3);
        let t = State::from_records(s.records());
        assert_eq!(s, t);
        assert_eq!(s.digest(), t.digest());
        assert_ne!(s.digest(), State::new().digest());
    }

    /// A tiny deterministic generator, so a failing seed can be replayed exactly.
    struct SplitMix(u64);

    impl SplitMix {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn pick(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn random_request(rng: &mut SplitMix, t: TimestampMs) -> Request {
        let env = format!("e{}", rng.pick(6));
        let command = match rng.pick(4) {
            0 => create_env(&env),
            1 => Command::DeleteEnvironment { name: env },
            _ => create_helm(&env, &format!("s{}", rng.pick(4))),
        };
        let request_id = (rng.pick(3) == 0).then(|| format!("r{}", rng.pick(20)));
        Request {
            command,
            time_ms: t,
            request_id,
        }
    }

    #[test]
    fn random_histories_are_deterministic_and_rebuildable() {
        for seed in 0..50u64 {
            let mut rng = SplitMix(seed);
            let (mut a, mut b) = (State::new(), State::new());
            let mut t = 0;
            for index in 1..=200u64 {
                // Time jumps now and then past the request-id TTL.
                t += if rng.pick(50) == 0 {
                    REQUEST_TTL_MS
                } else {
                    1_000
                };
                let req = random_request(&mut rng, t);
                let ra = a.apply(&req, index);
                let rb = b.apply(&req, index);
                assert_eq!(ra, rb, "seed {seed} index {index}");
                // Storage persists exactly the changed keys: rebuilding from records is exact.
                let rebuilt = State::from_records(a.records());
                assert_eq!(rebuilt, a, "seed {seed} index {index}");
            }
            assert_eq!(a.digest(), b.digest(), "seed {seed}");
        }
    }
}

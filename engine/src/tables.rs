//! The one declaration of the state's tables: which row type each holds, the record variant
//! and key it is persisted under, the lookups each table keeps ([`Lookups`]), and from that
//! list the state's `record`, `records` and loading of persisted rows.
//!
//! `Record` and `RecordKey` themselves are declared in [`crate::record`], with their explicit
//! wire tags: they are the persisted format and change only with a format version.

use std::collections::{BTreeMap, BTreeSet};

use semver::Version;

use hub_identity::Identity;

use crate::activity::Activity;
use crate::alert_provider::AlertProvider;
use crate::approval::{ApprovalPolicy, ApproverGroup, ChangeRequestApproval};
use crate::audit::{AuditLog, WriteAudit, AUDIT_LOG_KEY};
use crate::canary_events::CanaryEvents;
use crate::canary_history::CanaryHistory;
use crate::canary_judging::CanaryJudging;
use crate::canary_record::Canary;
use crate::cluster_key::ClusterKey;
use crate::cluster_members::{ClusterMembers, CLUSTER_MEMBERS_KEY};
use crate::entity::Entity;
use crate::entry_clock::{EntryClock, ENTRY_CLOCK_KEY};
use crate::environment::Environment;
use crate::feature_level::{ClusterLevel, CLUSTER_LEVEL_KEY};
use crate::installation::{ChangeRequest, Installation, PublishedModule};
use crate::labels::EnvironmentLabels;
use crate::metric_template::MetricTemplate;
use crate::module_channel::{InstallationChannel, ModuleChannels};
use crate::never_healthy::NeverHealthy;
use crate::plan::Plan;
use crate::plan_outcome::PlanOutcome;
use crate::product::{Channel, Product, Recall, Release};
use crate::record::{AuditEntry, Record, RecordKey, RequestRecord};
use crate::revocation::RevokedCertificate;
use crate::role::{Role, RoleBinding};
use crate::rollout::Rollout;
use crate::rollout_policy::RolloutPolicy;
use crate::settings::{ClusterSettings, CLUSTER_SETTINGS_KEY};
use crate::state::State;
use crate::suppression::{Scope, Suppression};
use crate::table::{lookups_index, Lookups, Row};
use crate::token::{OperatorToken, TokenHash};
use crate::window_exception::WindowException;
use crate::TimestampMs;

/// Rows keyed by a name that is also their record key's name.
macro_rules! named_rows {
    ($($row:ty => $variant:ident, |$v:ident| $key:expr, $index:ty;)*) => {$(
        impl Row for $row {
            type Key = String;
            type Index = $index;
            fn key(&self) -> String {
                let $v = self;
                $key
            }
            fn record_key(key: &String) -> RecordKey {
                RecordKey::$variant(key.clone())
            }
            fn key_of_name(name: &str) -> Option<String> {
                Some(name.to_string())
            }
            fn to_record(&self) -> Record {
                Record::$variant(self.clone().into())
            }
        }
    )*};
}

named_rows! {
    Environment => Environment, |e| e.name.clone(), ();
    Entity => Entity, |e| e.id.0.clone(), EntityIndex;
    RequestRecord => Request, |r| r.id.clone(), RequestIndex;
    Product => Product, |p| p.id.clone(), ();
    Release => Release, |r| Release::key_name(&r.product_id, &r.version), ReleaseIndex;
    Channel => Channel, |c| c.name.clone(), ();
    Recall => Recall, |r| r.id.clone(), RecallIndex;
    Suppression => Suppression, |s| s.id.clone(), SuppressionIndex;
    Plan => Plan, |p| p.id.clone(), PlanIndex;
    PlanOutcome => PlanOutcome, |o| o.id.clone(), OutcomeIndex;
    Activity => ActivityHead, |a| a.entity.clone(), ();
    AuditEntry => Audit, |a| AuditEntry::key_name(a.index), ();
    Installation => Installation, |i| i.id.clone(), ();
    ChangeRequest => ChangeRequest, |c| c.id.clone(), ();
    Canary => Canary, |c| c.id.clone(), CanaryIndex;
    ClusterKey => ClusterKey, |k| k.name.clone(), ();
    OperatorToken => Token, |t| t.name.clone(), TokenIndex;
    CanaryHistory => CanaryHistory, |h| h.canary.clone(), ();
    CanaryJudging => CanaryJudging, |j| j.canary.clone(), ();
    EnvironmentLabels => EnvironmentLabels, |l| l.environment.clone(), ();
    RolloutPolicy => RolloutPolicy, |p| p.product.clone(), RolloutPolicyIndex;
    NeverHealthy => NeverHealthy, |n| n.entity.clone(), ();
    ApproverGroup => ApproverGroup, |g| g.name.clone(), ();
    ApprovalPolicy => ApprovalPolicy, |p| p.scope.key_name(), ();
    ChangeRequestApproval => ChangeRequestApproval, |a| a.change_request.clone(), ();
    WindowException => WindowException, |w| w.id.clone(), ();
    InstallationChannel => InstallationChannel, |c| c.installation.clone(), ();
    ModuleChannels => ModuleChannels, |m| ModuleChannels::key_name(&m.module, &m.version), ();
    MetricTemplate => MetricTemplate, |t| t.id.clone(), ();
    AlertProvider => AlertProvider, |p| p.id.clone(), ();
    CanaryEvents => CanaryEvents, |e| e.canary.clone(), ();
    RevokedCertificate => RevokedCertificate, |r| r.serial.clone(), RevocationIndex;
}

lookups_index! {
    Entity => EntityIndex,
    RequestRecord => RequestIndex,
    Release => ReleaseIndex,
    Recall => RecallIndex,
    Suppression => SuppressionIndex,
    Plan => PlanIndex,
    PlanOutcome => OutcomeIndex,
    Canary => CanaryIndex,
    OperatorToken => TokenIndex,
    RolloutPolicy => RolloutPolicyIndex,
    RevokedCertificate => RevocationIndex,
}

/// Adds `value` to the set under `key`.
fn set_add<K: Ord, T: Ord>(map: &mut BTreeMap<K, BTreeSet<T>>, key: K, value: T) {
    map.entry(key).or_default().insert(value);
}

/// Removes `value` from the set under `key`, and the set once empty (so an index changed
/// row by row equals one built from scratch, which holds no empty sets).
fn set_remove<K: Ord, T: Ord>(map: &mut BTreeMap<K, BTreeSet<T>>, key: &K, value: &T) {
    if let Some(set) = map.get_mut(key) {
        set.remove(value);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

/// Removes `key` from `map` if it maps to `value`.
fn remove_if<K: Ord, T: PartialEq>(map: &mut BTreeMap<K, T>, key: &K, value: &T) {
    if map.get(key) == Some(value) {
        map.remove(key);
    }
}

/// Lookups of the entity table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EntityIndex {
    /// (environment, product) -> entity ids.
    pub(crate) by_product: BTreeMap<(String, String), BTreeSet<String>>,
    /// (environment, dependency group, product) -> entity ids: who can satisfy a dependency
    /// on that product for members of the group.
    pub(crate) providers: BTreeMap<(String, String, String), BTreeSet<String>>,
}

impl Lookups<Entity> for EntityIndex {
    fn add(&mut self, e: &Entity) {
        set_add(
            &mut self.by_product,
            (e.environment.clone(), e.product_id.clone()),
            e.id.0.clone(),
        );
        for g in &e.dependency_groups {
            set_add(
                &mut self.providers,
                (e.environment.clone(), g.clone(), e.product_id.clone()),
                e.id.0.clone(),
            );
        }
    }

    fn remove(&mut self, e: &Entity) {
        set_remove(
            &mut self.by_product,
            &(e.environment.clone(), e.product_id.clone()),
            &e.id.0,
        );
        for g in &e.dependency_groups {
            set_remove(
                &mut self.providers,
                &(e.environment.clone(), g.clone(), e.product_id.clone()),
                &e.id.0,
            );
        }
    }
}

/// Lookups of the token table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TokenIndex {
    /// Secret hash -> token name: how a bearer is looked up.
    pub(crate) by_hash: BTreeMap<TokenHash, String>,
}

impl Lookups<OperatorToken> for TokenIndex {
    fn add(&mut self, t: &OperatorToken) {
        let other = self.by_hash.insert(t.hash, t.name.clone());
        debug_assert!(
            other.as_ref().is_none_or(|o| *o == t.name),
            "token {} shares its hash with {other:?}",
            t.name
        );
    }

    fn remove(&mut self, t: &OperatorToken) {
        remove_if(&mut self.by_hash, &t.hash, &t.name);
    }
}

/// Lookups of the revocation list ([`crate::revocation`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RevocationIndex {
    /// `(revoking entry's log index, serial)`: the newest entry is the last.
    pub(crate) by_index: BTreeSet<(u64, String)>,
    /// `(certificate's notAfter, serial)` of the entries that gave one, to prune in time
    /// order.
    pub(crate) by_not_after: BTreeSet<(TimestampMs, String)>,
}

impl Lookups<RevokedCertificate> for RevocationIndex {
    fn add(&mut self, r: &RevokedCertificate) {
        self.by_index.insert((r.revoked_index, r.serial.clone()));
        if let Some(t) = r.not_after {
            self.by_not_after.insert((t, r.serial.clone()));
        }
    }

    fn remove(&mut self, r: &RevokedCertificate) {
        self.by_index.remove(&(r.revoked_index, r.serial.clone()));
        if let Some(t) = r.not_after {
            self.by_not_after.remove(&(t, r.serial.clone()));
        }
    }
}

/// Lookups of the remembered request ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RequestIndex {
    /// `(first applied at, request id)`, to forget request ids in time order.
    pub(crate) expiry: BTreeSet<(TimestampMs, String)>,
}

impl Lookups<RequestRecord> for RequestIndex {
    fn add(&mut self, r: &RequestRecord) {
        self.expiry.insert((r.time_ms, r.id.clone()));
    }

    fn remove(&mut self, r: &RequestRecord) {
        self.expiry.remove(&(r.time_ms, r.id.clone()));
    }
}

/// Lookups of the release table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ReleaseIndex {
    /// product -> its released versions.
    pub(crate) versions: BTreeMap<String, BTreeSet<Version>>,
}

impl Lookups<Release> for ReleaseIndex {
    fn add(&mut self, r: &Release) {
        set_add(&mut self.versions, r.product_id.clone(), r.version.clone());
    }

    fn remove(&mut self, r: &Release) {
        set_remove(&mut self.versions, &r.product_id, &r.version);
    }
}

/// Lookups of the recall table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RecallIndex {
    /// product -> recall ids.
    pub(crate) by_product: BTreeMap<String, BTreeSet<String>>,
}

impl Lookups<Recall> for RecallIndex {
    fn add(&mut self, r: &Recall) {
        set_add(&mut self.by_product, r.product_id.clone(), r.id.clone());
    }

    fn remove(&mut self, r: &Recall) {
        set_remove(&mut self.by_product, &r.product_id, &r.id);
    }
}

/// Lookups of the suppression table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SuppressionIndex {
    /// scope -> suppression ids.
    pub(crate) by_scope: BTreeMap<Scope, BTreeSet<String>>,
}

impl Lookups<Suppression> for SuppressionIndex {
    fn add(&mut self, s: &Suppression) {
        set_add(&mut self.by_scope, s.scope.clone(), s.id.clone());
    }

    fn remove(&mut self, s: &Suppression) {
        set_remove(&mut self.by_scope, &s.scope, &s.id);
    }
}

/// Lookups of the plan table, which holds issued and running plans only (a finished plan
/// becomes a [`PlanOutcome`] and history).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PlanIndex {
    /// entity -> its issued or running plan (at most one: see `State::check_invariants`).
    pub(crate) active: BTreeMap<String, String>,
    /// (kind label, status) -> plans of that kind in that status, for metrics without a
    /// walk over every plan. No zero counts.
    pub(crate) counts: BTreeMap<(&'static str, &'static str), u64>,
}

impl Lookups<Plan> for PlanIndex {
    fn add(&mut self, p: &Plan) {
        *self
            .counts
            .entry((p.kind.label(), p.status.as_str()))
            .or_default() += 1;
        if p.status.is_active() {
            let other = self.active.insert(p.entity.clone(), p.id.clone());
            debug_assert!(
                other.as_ref().is_none_or(|o| *o == p.id),
                "a second active plan {} for {} beside {other:?}",
                p.id,
                p.entity
            );
        }
    }

    fn remove(&mut self, p: &Plan) {
        remove_if(&mut self.active, &p.entity, &p.id);
        count_down(&mut self.counts, &(p.kind.label(), p.status.as_str()));
    }
}

/// Lookups of the plan-outcome table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct OutcomeIndex {
    /// entity -> (issued index, plan id) of its finished plans, oldest first.
    pub(crate) by_entity: BTreeMap<String, BTreeSet<(u64, String)>>,
    /// (kind label, status) -> finished plans of that kind in that status. No zero counts.
    pub(crate) counts: BTreeMap<(&'static str, &'static str), u64>,
}

impl Lookups<PlanOutcome> for OutcomeIndex {
    fn add(&mut self, o: &PlanOutcome) {
        set_add(
            &mut self.by_entity,
            o.entity.clone(),
            (o.issued_index, o.id.clone()),
        );
        *self
            .counts
            .entry((o.kind.label(), o.status.as_str()))
            .or_default() += 1;
    }

    fn remove(&mut self, o: &PlanOutcome) {
        set_remove(
            &mut self.by_entity,
            &o.entity,
            &(o.issued_index, o.id.clone()),
        );
        count_down(&mut self.counts, &(o.kind.label(), o.status.as_str()));
    }
}

/// Lowers the count under `key` by one, and removes it at zero.
fn count_down<K: Ord>(counts: &mut BTreeMap<K, u64>, key: &K) {
    if let Some(n) = counts.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            counts.remove(key);
        }
    }
}

/// Lookups of the canary table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CanaryIndex {
    /// entity -> the id of its canary (at most one per entity).
    pub(crate) of_entity: BTreeMap<String, String>,
}

impl Lookups<Canary> for CanaryIndex {
    fn add(&mut self, c: &Canary) {
        self.of_entity.insert(c.entity.clone(), c.id.clone());
    }

    fn remove(&mut self, c: &Canary) {
        remove_if(&mut self.of_entity, &c.entity, &c.id);
    }
}

/// Lookups of the rollout-policy table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RolloutPolicyIndex {
    /// Product -> the policy (its product) whose group holds it (at most one: apply refuses
    /// a product in two policies).
    pub(crate) of_product: BTreeMap<String, String>,
}

impl Lookups<RolloutPolicy> for RolloutPolicyIndex {
    fn add(&mut self, p: &RolloutPolicy) {
        for member in p.group() {
            let other = self
                .of_product
                .insert(member.to_string(), p.product.clone());
            debug_assert!(
                other.as_ref().is_none_or(|o| *o == p.product),
                "{member} in policies {} and {other:?}",
                p.product
            );
        }
    }

    fn remove(&mut self, p: &RolloutPolicy) {
        for member in p.group() {
            remove_if(&mut self.of_product, &member.to_string(), &p.product);
        }
    }
}

/// Rollouts are keyed by (policy product, version) and persisted as `product@version`.
impl Row for Rollout {
    type Key = (String, Version);
    type Index = ();
    fn key(&self) -> Self::Key {
        (self.product.clone(), self.version.clone())
    }
    fn record_key((product, version): &Self::Key) -> RecordKey {
        RecordKey::Rollout(Rollout::key_name(product, version))
    }
    fn key_of_name(name: &str) -> Option<Self::Key> {
        let (product, version) = name.rsplit_once('@')?;
        Some((product.to_string(), Version::parse(version).ok()?))
    }
    fn to_record(&self) -> Record {
        Record::Rollout(self.clone())
    }
}

/// Role bindings are keyed by (identity, role) and persisted as `<identity>#<role>`.
impl Row for RoleBinding {
    type Key = (Identity, Role);
    type Index = ();
    fn key(&self) -> Self::Key {
        (self.identity.clone(), self.role)
    }
    fn record_key((identity, role): &Self::Key) -> RecordKey {
        RecordKey::RoleBinding(RoleBinding::key_name(identity, *role))
    }
    fn key_of_name(name: &str) -> Option<Self::Key> {
        RoleBinding::parse_key_name(name)
    }
    fn to_record(&self) -> Record {
        Record::RoleBinding(self.clone())
    }
}

/// Audited writes are keyed by log index and persisted zero-padded.
impl Row for WriteAudit {
    type Key = u64;
    type Index = ();
    fn key(&self) -> u64 {
        self.index
    }
    fn record_key(index: &u64) -> RecordKey {
        RecordKey::WriteAudit(WriteAudit::key_name(*index))
    }
    fn key_of_name(name: &str) -> Option<u64> {
        name.parse().ok()
    }
    fn to_record(&self) -> Record {
        Record::WriteAudit(self.clone())
    }
}

/// The one audit-log record, under `writes`.
impl Row for AuditLog {
    type Key = ();
    type Index = ();
    fn key(&self) {}
    fn record_key(_: &()) -> RecordKey {
        RecordKey::AuditLog(AUDIT_LOG_KEY.to_string())
    }
    fn key_of_name(name: &str) -> Option<()> {
        (name == AUDIT_LOG_KEY).then_some(())
    }
    fn to_record(&self) -> Record {
        Record::AuditLog(self.clone())
    }
}

/// The one cluster-settings record, under `cluster`.
impl Row for ClusterSettings {
    type Key = ();
    type Index = ();
    fn key(&self) {}
    fn record_key(_: &()) -> RecordKey {
        RecordKey::ClusterSettings(CLUSTER_SETTINGS_KEY.to_string())
    }
    fn key_of_name(name: &str) -> Option<()> {
        (name == CLUSTER_SETTINGS_KEY).then_some(())
    }
    fn to_record(&self) -> Record {
        Record::ClusterSettings(self.clone())
    }
}

/// The one cluster-level record, under `cluster`.
impl Row for ClusterLevel {
    type Key = ();
    type Index = ();
    fn key(&self) {}
    fn record_key(_: &()) -> RecordKey {
        RecordKey::ClusterLevel(CLUSTER_LEVEL_KEY.to_string())
    }
    fn key_of_name(name: &str) -> Option<()> {
        (name == CLUSTER_LEVEL_KEY).then_some(())
    }
    fn to_record(&self) -> Record {
        Record::ClusterLevel(self.clone())
    }
}

/// The one entry-clock record, under `log`.
impl Row for EntryClock {
    type Key = ();
    type Index = ();
    fn key(&self) {}
    fn record_key(_: &()) -> RecordKey {
        RecordKey::EntryClock(ENTRY_CLOCK_KEY.to_string())
    }
    fn key_of_name(name: &str) -> Option<()> {
        (name == ENTRY_CLOCK_KEY).then_some(())
    }
    fn to_record(&self) -> Record {
        Record::EntryClock(self.clone())
    }
}

/// The one cluster-members record, under `raft`.
impl Row for ClusterMembers {
    type Key = ();
    type Index = ();
    fn key(&self) {}
    fn record_key(_: &()) -> RecordKey {
        RecordKey::ClusterMembers(CLUSTER_MEMBERS_KEY.to_string())
    }
    fn key_of_name(name: &str) -> Option<()> {
        (name == CLUSTER_MEMBERS_KEY).then_some(())
    }
    fn to_record(&self) -> Record {
        Record::ClusterMembers(self.clone())
    }
}

/// Published modules are keyed by (name, version) and persisted as `name@version`.
impl Row for PublishedModule {
    type Key = (String, Version);
    type Index = ();
    fn key(&self) -> Self::Key {
        (self.name.clone(), self.version.clone())
    }
    fn record_key((name, version): &Self::Key) -> RecordKey {
        RecordKey::Module(PublishedModule::key_name(name, version))
    }
    fn key_of_name(name: &str) -> Option<Self::Key> {
        let (name, version) = name.rsplit_once('@')?;
        Some((name.to_string(), Version::parse(version).ok()?))
    }
    fn to_record(&self) -> Record {
        Record::Module(self.clone())
    }
}

/// The row inside a record variant (`boxed` variants hold a `Box`).
macro_rules! unbox {
    ($r:ident) => {
        $r
    };
    ($r:ident boxed) => {
        *$r
    };
}

/// The tables, in record-tag order: `field: Variant`; then the record variants that are
/// not rows of the state (history and older formats: [`crate::Residence`]).
macro_rules! state_tables {
    (
        $($field:ident: $variant:ident $($boxed:ident)?),* $(,)?
        ; not_in_state: $($other:ident),* $(,)?
    ) => {
        impl State {
            /// The current record under `key`, if any.
            pub fn record(&self, key: &RecordKey) -> Option<Record> {
                match key {
                    $(RecordKey::$variant(name) => self.$field.record_named(name),)*
                    $(RecordKey::$other(_) => None,)*
                }
            }

            /// Every record, table by table in tag order, each table in key order.
            pub fn records(&self) -> impl Iterator<Item = Record> + '_ {
                std::iter::empty()$(.chain(self.$field.records()))*
            }

            /// Adds a persisted row to its table and its index (no change recorded).
            /// A record that is not a row of the state is a caller's bug
            /// ([`State::insert_record`] sorts them out).
            pub(crate) fn load_row(&mut self, record: Record) {
                match record {
                    $(Record::$variant(row) => self.$field.load(unbox!(row $($boxed)?)),)*
                    $(Record::$other(_) => {
                        unreachable!("{:?} is not a row of the state", record.key())
                    })*
                }
            }
        }
    };
}

state_tables! {
    environments: Environment,
    entities: Entity,
    requests: Request,
    products: Product,
    releases: Release,
    channels: Channel,
    recalls: Recall,
    suppressions: Suppression,
    plans: Plan,
    plan_outcomes: PlanOutcome,
    audit: Audit,
    modules: Module,
    installations: Installation,
    change_requests: ChangeRequest,
    canaries: Canary boxed,
    cluster_keys: ClusterKey,
    role_bindings: RoleBinding,
    write_audit: WriteAudit,
    audit_log: AuditLog,
    tokens: Token,
    canary_history: CanaryHistory,
    entry_clock: EntryClock,
    cluster_members: ClusterMembers,
    environment_labels: EnvironmentLabels,
    rollout_policies: RolloutPolicy,
    rollouts: Rollout,
    canary_judging: CanaryJudging,
    activity: ActivityHead,
    never_healthy: NeverHealthy,
    cluster_settings: ClusterSettings,
    approver_groups: ApproverGroup,
    approval_policies: ApprovalPolicy,
    change_request_approvals: ChangeRequestApproval,
    window_exceptions: WindowException,
    installation_channels: InstallationChannel,
    module_channels: ModuleChannels,
    metric_templates: MetricTemplate,
    canary_events: CanaryEvents,
    revoked_certificates: RevokedCertificate,
    cluster_level: ClusterLevel,
    alert_providers: AlertProvider;
    not_in_state: ActivityV1, ActivityLine, FinishedPlan,
}

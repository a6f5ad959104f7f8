//! Records: the unit in which the state is persisted and snapshotted.
//!
//! The state is a set of records, each under a [`RecordKey`]. Applying a command reports which
//! keys it changed, so storage writes exactly those (in the same batch as `last_applied`). Keys
//! encode to bytes that sort in a stable order, which also fixes the order of the digest.

use serde::{Deserialize, Serialize};

use crate::alert_provider::AlertProvider;
use crate::approval::{ApprovalPolicy, ApproverGroup, ChangeRequestApproval};
use crate::audit::{AuditLog, WriteAudit, AUDIT_LOG_KEY};
use crate::canary_events::CanaryEvents;
use crate::canary_history::CanaryHistory;
use crate::canary_judging::CanaryJudging;
use crate::canary_record::Canary;
use crate::cluster_key::ClusterKey;
use crate::cluster_members::{ClusterMembers, CLUSTER_MEMBERS_KEY};
use crate::entry_clock::{EntryClock, ENTRY_CLOCK_KEY};
use crate::feature_level::{ClusterLevel, CLUSTER_LEVEL_KEY};
use crate::installation::{ChangeRequest, Installation, PublishedModule};
use crate::labels::EnvironmentLabels;
use crate::metric_template::MetricTemplate;
use crate::module_channel::{InstallationChannel, ModuleChannels};
use crate::never_healthy::NeverHealthy;
use crate::revocation::RevokedCertificate;
use crate::role::RoleBinding;
use crate::rollout::Rollout;
use crate::rollout_policy::RolloutPolicy;
use crate::settings::{ClusterSettings, CLUSTER_SETTINGS_KEY};
use crate::token::OperatorToken;
use crate::window_exception::WindowException;

use crate::activity::{Activity, ActivityLine, ActivityV1};
use crate::command::{wire_tags, CommandOutput};
use crate::entity::Entity;
use crate::environment::Environment;
use crate::error::CommandError;
use crate::plan::Plan;
use crate::plan_outcome::PlanOutcome;
use crate::product::{Channel, Product, Recall, Release};
use crate::suppression::Suppression;
use crate::TimestampMs;

/// Where a record lives.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RecordKey {
    /// An environment, by name.
    Environment(String),
    /// An entity, by id.
    Entity(String),
    /// The remembered result of an idempotent request, by request id.
    Request(String),
    /// A product, by `group:name`.
    Product(String),
    /// A release, by `group:name@version`.
    Release(String),
    /// A custom channel, by name.
    Channel(String),
    /// A recall, by id.
    Recall(String),
    /// A suppression window, by id.
    Suppression(String),
    /// A plan, by id.
    Plan(String),
    /// An entity's activity in the format before lines were records of their own
    /// ([`ActivityV1`]), by entity id: read only to migrate it.
    ActivityV1(String),
    /// An audit entry, by zero-padded log index.
    Audit(String),
    /// A published module version, by `name@version`.
    Module(String),
    /// A module installation, by `<environment>/<module>`.
    Installation(String),
    /// A module change request, by id.
    ChangeRequest(String),
    /// A canary, by `<environment>/<name>`.
    Canary(String),
    /// A cluster key, by name.
    ClusterKey(String),
    /// A role binding, by `<identity>#<role>`.
    RoleBinding(String),
    /// An audited write, by zero-padded log index.
    WriteAudit(String),
    /// The write audit's retention and drop count (one record, `writes`).
    AuditLog(String),
    /// An operator token, by name.
    Token(String),
    /// A canary's history, by the canary's id.
    CanaryHistory(String),
    /// The time of the last applied entry (one record, `log`).
    EntryClock(String),
    /// The Raft members and the ids removed for good (one record, `raft`).
    ClusterMembers(String),
    /// An environment's labels, by environment name.
    EnvironmentLabels(String),
    /// A product's rollout policy, by `group:name`.
    RolloutPolicy(String),
    /// A release's rollout progress, by `group:name@version` (the policy's product).
    Rollout(String),
    /// A judged canary's judging state, by the canary's id.
    CanaryJudging(String),
    /// An entity's activity head, by entity id.
    ActivityHead(String),
    /// One line of an entity's activity (history, not in the state), by
    /// `<entity id>/<zero-padded seq>` ([`ActivityLine::key_name`]).
    ActivityLine(String),
    /// What the state keeps of a finished plan ([`PlanOutcome`]), by plan id.
    PlanOutcome(String),
    /// A finished plan in full (history, not in the state), by plan id.
    FinishedPlan(String),
    /// An entity not yet healthy on any version ([`NeverHealthy`]), by entity id.
    NeverHealthy(String),
    /// The hub's settings (one record, `cluster`).
    ClusterSettings(String),
    /// An approver group, by name ([`crate::approval::ApproverGroup`]).
    ApproverGroup(String),
    /// An approval policy, by its scope ([`crate::approval::PolicyScope::key_name`]).
    ApprovalPolicy(String),
    /// A change request's approvals under its policy, by change request id.
    ChangeRequestApproval(String),
    /// A window-exception request, by id.
    WindowException(String),
    /// The channel chosen for an installation, by `<environment>/<module>`.
    InstallationChannel(String),
    /// The custom channels of a module version, by `name@version`.
    ModuleChannels(String),
    /// A metric template, by `<environment>/<name>`.
    MetricTemplate(String),
    /// A canary's events, by the canary's id.
    CanaryEvents(String),
    /// A revoked certificate, by its canonical serial.
    RevokedCertificate(String),
    /// The cluster's feature level (one record, `cluster`; [`crate::feature_level`]).
    ClusterLevel(String),
    /// An alert provider, by `<environment>/<name>`.
    AlertProvider(String),
}

const TAG_ENVIRONMENT: u8 = 1;
const TAG_ENTITY: u8 = 2;
const TAG_REQUEST: u8 = 3;
const TAG_PRODUCT: u8 = 4;
const TAG_RELEASE: u8 = 5;
const TAG_CHANNEL: u8 = 6;
const TAG_RECALL: u8 = 7;
const TAG_SUPPRESSION: u8 = 8;
const TAG_PLAN: u8 = 9;
const TAG_ACTIVITY: u8 = 10;
const TAG_AUDIT: u8 = 11;
const TAG_MODULE: u8 = 12;
const TAG_INSTALLATION: u8 = 13;
const TAG_CHANGE_REQUEST: u8 = 14;
const TAG_CANARY: u8 = 15;
const TAG_CLUSTER_KEY: u8 = 16;
const TAG_ROLE_BINDING: u8 = 17;
const TAG_WRITE_AUDIT: u8 = 18;
const TAG_AUDIT_LOG: u8 = 19;
const TAG_TOKEN: u8 = 20;
const TAG_CANARY_HISTORY: u8 = 21;
const TAG_ENTRY_CLOCK: u8 = 22;
const TAG_CLUSTER_MEMBERS: u8 = 23;
const TAG_ENVIRONMENT_LABELS: u8 = 24;
const TAG_ROLLOUT_POLICY: u8 = 25;
const TAG_ROLLOUT: u8 = 26;
const TAG_CANARY_JUDGING: u8 = 27;
const TAG_ACTIVITY_HEAD: u8 = 28;
const TAG_ACTIVITY_LINE: u8 = 29;
const TAG_PLAN_OUTCOME: u8 = 30;
const TAG_FINISHED_PLAN: u8 = 31;
const TAG_NEVER_HEALTHY: u8 = 32;
const TAG_CLUSTER_SETTINGS: u8 = 33;
const TAG_APPROVER_GROUP: u8 = 34;
const TAG_APPROVAL_POLICY: u8 = 35;
const TAG_CHANGE_REQUEST_APPROVAL: u8 = 36;
const TAG_WINDOW_EXCEPTION: u8 = 37;
const TAG_INSTALLATION_CHANNEL: u8 = 38;
const TAG_MODULE_CHANNELS: u8 = 39;
const TAG_METRIC_TEMPLATE: u8 = 40;
const TAG_CANARY_EVENTS: u8 = 41;
const TAG_REVOKED_CERTIFICATE: u8 = 42;
const TAG_CLUSTER_LEVEL: u8 = 43;
const TAG_ALERT_PROVIDER: u8 = 44;

/// Where the records under a key live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residence {
    /// A row of the state, in memory on every node and persisted as it changes.
    State,
    /// History: written by apply ([`crate::HistoryWrite`]) to storage only, read from storage
    /// by queries, never read by a decision.
    History,
    /// An older format, read only to be migrated ([`crate::activity::ActivityV1`]).
    Legacy,
}

impl RecordKey {
    /// Where records under this key live. Exhaustive, so a new table decides.
    pub fn residence(&self) -> Residence {
        match self {
            RecordKey::ActivityLine(_) | RecordKey::FinishedPlan(_) => Residence::History,
            RecordKey::ActivityV1(_) => Residence::Legacy,
            RecordKey::Environment(_)
            | RecordKey::Entity(_)
            | RecordKey::Request(_)
            | RecordKey::Product(_)
            | RecordKey::Release(_)
            | RecordKey::Channel(_)
            | RecordKey::Recall(_)
            | RecordKey::Suppression(_)
            | RecordKey::Plan(_)
            | RecordKey::Audit(_)
            | RecordKey::Module(_)
            | RecordKey::Installation(_)
            | RecordKey::ChangeRequest(_)
            | RecordKey::Canary(_)
            | RecordKey::ClusterKey(_)
            | RecordKey::RoleBinding(_)
            | RecordKey::WriteAudit(_)
            | RecordKey::AuditLog(_)
            | RecordKey::Token(_)
            | RecordKey::CanaryHistory(_)
            | RecordKey::EntryClock(_)
            | RecordKey::ClusterMembers(_)
            | RecordKey::EnvironmentLabels(_)
            | RecordKey::RolloutPolicy(_)
            | RecordKey::Rollout(_)
            | RecordKey::CanaryJudging(_)
            | RecordKey::ActivityHead(_)
            | RecordKey::PlanOutcome(_)
            | RecordKey::NeverHealthy(_)
            | RecordKey::ClusterSettings(_)
            | RecordKey::ApproverGroup(_)
            | RecordKey::ApprovalPolicy(_)
            | RecordKey::ChangeRequestApproval(_)
            | RecordKey::WindowException(_)
            | RecordKey::InstallationChannel(_)
            | RecordKey::ModuleChannels(_)
            | RecordKey::MetricTemplate(_)
            | RecordKey::CanaryEvents(_)
            | RecordKey::RevokedCertificate(_)
            | RecordKey::ClusterLevel(_)
            | RecordKey::AlertProvider(_) => Residence::State,
        }
    }

    /// Stable byte encoding: a table tag, then the UTF-8 name.
    pub fn to_bytes(&self) -> Vec<u8> {
        let (tag, name) = match self {
            RecordKey::Environment(n) => (TAG_ENVIRONMENT, n),
            RecordKey::Entity(n) => (TAG_ENTITY, n),
            RecordKey::Request(n) => (TAG_REQUEST, n),
            RecordKey::Product(n) => (TAG_PRODUCT, n),
            RecordKey::Release(n) => (TAG_RELEASE, n),
            RecordKey::Channel(n) => (TAG_CHANNEL, n),
            RecordKey::Recall(n) => (TAG_RECALL, n),
            RecordKey::Suppression(n) => (TAG_SUPPRESSION, n),
            RecordKey::Plan(n) => (TAG_PLAN, n),
            RecordKey::ActivityV1(n) => (TAG_ACTIVITY, n),
            RecordKey::Audit(n) => (TAG_AUDIT, n),
            RecordKey::Module(n) => (TAG_MODULE, n),
            RecordKey::Installation(n) => (TAG_INSTALLATION, n),
            RecordKey::ChangeRequest(n) => (TAG_CHANGE_REQUEST, n),
            RecordKey::Canary(n) => (TAG_CANARY, n),
            RecordKey::ClusterKey(n) => (TAG_CLUSTER_KEY, n),
            RecordKey::RoleBinding(n) => (TAG_ROLE_BINDING, n),
            RecordKey::WriteAudit(n) => (TAG_WRITE_AUDIT, n),
            RecordKey::AuditLog(n) => (TAG_AUDIT_LOG, n),
            RecordKey::Token(n) => (TAG_TOKEN, n),
            RecordKey::CanaryHistory(n) => (TAG_CANARY_HISTORY, n),
            RecordKey::EntryClock(n) => (TAG_ENTRY_CLOCK, n),
            RecordKey::ClusterMembers(n) => (TAG_CLUSTER_MEMBERS, n),
            RecordKey::EnvironmentLabels(n) => (TAG_ENVIRONMENT_LABELS, n),
            RecordKey::RolloutPolicy(n) => (TAG_ROLLOUT_POLICY, n),
            RecordKey::Rollout(n) => (TAG_ROLLOUT, n),
            RecordKey::CanaryJudging(n) => (TAG_CANARY_JUDGING, n),
            RecordKey::ActivityHead(n) => (TAG_ACTIVITY_HEAD, n),
            RecordKey::ActivityLine(n) => (TAG_ACTIVITY_LINE, n),
            RecordKey::PlanOutcome(n) => (TAG_PLAN_OUTCOME, n),
            RecordKey::FinishedPlan(n) => (TAG_FINISHED_PLAN, n),
            RecordKey::NeverHealthy(n) => (TAG_NEVER_HEALTHY, n),
            RecordKey::ClusterSettings(n) => (TAG_CLUSTER_SETTINGS, n),
            RecordKey::ApproverGroup(n) => (TAG_APPROVER_GROUP, n),
            RecordKey::ApprovalPolicy(n) => (TAG_APPROVAL_POLICY, n),
            RecordKey::ChangeRequestApproval(n) => (TAG_CHANGE_REQUEST_APPROVAL, n),
            RecordKey::WindowException(n) => (TAG_WINDOW_EXCEPTION, n),
            RecordKey::InstallationChannel(n) => (TAG_INSTALLATION_CHANNEL, n),
            RecordKey::ModuleChannels(n) => (TAG_MODULE_CHANNELS, n),
            RecordKey::MetricTemplate(n) => (TAG_METRIC_TEMPLATE, n),
            RecordKey::CanaryEvents(n) => (TAG_CANARY_EVENTS, n),
            RecordKey::RevokedCertificate(n) => (TAG_REVOKED_CERTIFICATE, n),
            RecordKey::ClusterLevel(n) => (TAG_CLUSTER_LEVEL, n),
            RecordKey::AlertProvider(n) => (TAG_ALERT_PROVIDER, n),
        };
        let mut out = Vec::with_capacity(1 + name.len());
        out.push(tag);
        out.extend_from_slice(name.as_bytes());
        out
    }

    /// Inverse of [`RecordKey::to_bytes`]; `None` for bytes it never produces.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let (&tag, rest) = bytes.split_first()?;
        let name = String::from_utf8(rest.to_vec()).ok()?;
        match tag {
            TAG_ENVIRONMENT => Some(RecordKey::Environment(name)),
            TAG_ENTITY => Some(RecordKey::Entity(name)),
            TAG_REQUEST => Some(RecordKey::Request(name)),
            TAG_PRODUCT => Some(RecordKey::Product(name)),
            TAG_RELEASE => Some(RecordKey::Release(name)),
            TAG_CHANNEL => Some(RecordKey::Channel(name)),
            TAG_RECALL => Some(RecordKey::Recall(name)),
            TAG_SUPPRESSION => Some(RecordKey::Suppression(name)),
            TAG_PLAN => Some(RecordKey::Plan(name)),
            TAG_ACTIVITY => Some(RecordKey::ActivityV1(name)),
            TAG_AUDIT => Some(RecordKey::Audit(name)),
            TAG_MODULE => Some(RecordKey::Module(name)),
            TAG_INSTALLATION => Some(RecordKey::Installation(name)),
            TAG_CHANGE_REQUEST => Some(RecordKey::ChangeRequest(name)),
            TAG_CANARY => Some(RecordKey::Canary(name)),
            TAG_CLUSTER_KEY => Some(RecordKey::ClusterKey(name)),
            TAG_ROLE_BINDING => Some(RecordKey::RoleBinding(name)),
            TAG_WRITE_AUDIT => Some(RecordKey::WriteAudit(name)),
            TAG_AUDIT_LOG => Some(RecordKey::AuditLog(name)),
            TAG_TOKEN => Some(RecordKey::Token(name)),
            TAG_CANARY_HISTORY => Some(RecordKey::CanaryHistory(name)),
            TAG_ENTRY_CLOCK => Some(RecordKey::EntryClock(name)),
            TAG_CLUSTER_MEMBERS => Some(RecordKey::ClusterMembers(name)),
            TAG_ENVIRONMENT_LABELS => Some(RecordKey::EnvironmentLabels(name)),
            TAG_ROLLOUT_POLICY => Some(RecordKey::RolloutPolicy(name)),
            TAG_ROLLOUT => Some(RecordKey::Rollout(name)),
            TAG_CANARY_JUDGING => Some(RecordKey::CanaryJudging(name)),
            TAG_ACTIVITY_HEAD => Some(RecordKey::ActivityHead(name)),
            TAG_ACTIVITY_LINE => Some(RecordKey::ActivityLine(name)),
            TAG_PLAN_OUTCOME => Some(RecordKey::PlanOutcome(name)),
            TAG_FINISHED_PLAN => Some(RecordKey::FinishedPlan(name)),
            TAG_NEVER_HEALTHY => Some(RecordKey::NeverHealthy(name)),
            TAG_CLUSTER_SETTINGS => Some(RecordKey::ClusterSettings(name)),
            TAG_APPROVER_GROUP => Some(RecordKey::ApproverGroup(name)),
            TAG_APPROVAL_POLICY => Some(RecordKey::ApprovalPolicy(name)),
            TAG_CHANGE_REQUEST_APPROVAL => Some(RecordKey::ChangeRequestApproval(name)),
            TAG_WINDOW_EXCEPTION => Some(RecordKey::WindowException(name)),
            TAG_INSTALLATION_CHANNEL => Some(RecordKey::InstallationChannel(name)),
            TAG_MODULE_CHANNELS => Some(RecordKey::ModuleChannels(name)),
            TAG_METRIC_TEMPLATE => Some(RecordKey::MetricTemplate(name)),
            TAG_CANARY_EVENTS => Some(RecordKey::CanaryEvents(name)),
            TAG_REVOKED_CERTIFICATE => Some(RecordKey::RevokedCertificate(name)),
            TAG_CLUSTER_LEVEL => Some(RecordKey::ClusterLevel(name)),
            TAG_ALERT_PROVIDER => Some(RecordKey::AlertProvider(name)),
            _ => None,
        }
    }
}

/// The remembered outcome of a request that carried a request id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// The request id.
    pub id: String,
    /// Log index at which it was first applied.
    pub index: u64,
    /// When it was first applied (entry time); forgotten after [`crate::state::REQUEST_TTL_MS`].
    pub time_ms: TimestampMs,
    /// Its result, returned again to a retry.
    pub result: Result<CommandOutput, CommandError>,
}

/// One persisted record.
///
/// Wire format: every variant has an explicit tag (the list after the enum; see
/// [`crate::Command`] for the rules): a new variant takes the next unused tag, a removed
/// one's tag moves to `retired` and is never given again, and changing tags or the records'
/// fields needs a codec format-version bump (raft-store's `tests/log_format.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub enum Record {
    /// See [`Environment`].
    Environment(Environment),
    /// See [`Entity`].
    Entity(Entity),
    /// See [`RequestRecord`].
    Request(RequestRecord),
    /// See [`Product`].
    Product(Product),
    /// See [`Release`].
    Release(Release),
    /// See [`Channel`].
    Channel(Channel),
    /// See [`Recall`].
    Recall(Recall),
    /// See [`Suppression`].
    Suppression(Suppression),
    /// See [`Plan`].
    Plan(Plan),
    /// See [`ActivityV1`]: read only to migrate it.
    ActivityV1(ActivityV1),
    /// See [`AuditEntry`].
    Audit(AuditEntry),
    /// See [`PublishedModule`].
    Module(PublishedModule),
    /// See [`Installation`].
    Installation(Installation),
    /// See [`ChangeRequest`].
    ChangeRequest(ChangeRequest),
    /// See [`Canary`].
    Canary(Box<Canary>),
    /// See [`ClusterKey`].
    ClusterKey(ClusterKey),
    /// See [`RoleBinding`].
    RoleBinding(RoleBinding),
    /// See [`WriteAudit`].
    WriteAudit(WriteAudit),
    /// See [`AuditLog`].
    AuditLog(AuditLog),
    /// See [`OperatorToken`].
    Token(OperatorToken),
    /// See [`CanaryHistory`].
    CanaryHistory(CanaryHistory),
    /// See [`EntryClock`].
    EntryClock(EntryClock),
    /// See [`ClusterMembers`].
    ClusterMembers(ClusterMembers),
    /// See [`EnvironmentLabels`].
    EnvironmentLabels(EnvironmentLabels),
    /// See [`RolloutPolicy`].
    RolloutPolicy(RolloutPolicy),
    /// See [`Rollout`].
    Rollout(Rollout),
    /// See [`CanaryJudging`].
    CanaryJudging(CanaryJudging),
    /// See [`Activity`].
    ActivityHead(Activity),
    /// See [`ActivityLine`]: history, not in the state.
    ActivityLine(ActivityLine),
    /// See [`PlanOutcome`].
    PlanOutcome(PlanOutcome),
    /// A finished [`Plan`] in full: history, not in the state (see [`crate::plan_outcome`]).
    FinishedPlan(Plan),
    /// See [`NeverHealthy`].
    NeverHealthy(NeverHealthy),
    /// See [`ClusterSettings`].
    ClusterSettings(ClusterSettings),
    /// See [`ApproverGroup`].
    ApproverGroup(ApproverGroup),
    /// See [`ApprovalPolicy`].
    ApprovalPolicy(ApprovalPolicy),
    /// See [`ChangeRequestApproval`].
    ChangeRequestApproval(ChangeRequestApproval),
    /// See [`WindowException`].
    WindowException(WindowException),
    /// See [`InstallationChannel`].
    InstallationChannel(InstallationChannel),
    /// See [`ModuleChannels`].
    ModuleChannels(ModuleChannels),
    /// See [`MetricTemplate`].
    MetricTemplate(MetricTemplate),
    /// See [`CanaryEvents`].
    CanaryEvents(CanaryEvents),
    /// See [`RevokedCertificate`].
    RevokedCertificate(RevokedCertificate),
    /// See [`ClusterLevel`].
    ClusterLevel(ClusterLevel),
    /// See [`AlertProvider`].
    AlertProvider(AlertProvider),
}

wire_tags! {
    Record {
        Environment = 0,
        Entity = 1,
        Request = 2,
        Product = 3,
        Release = 4,
        Channel = 5,
        Recall = 6,
        Suppression = 7,
        Plan = 8,
        ActivityV1 = 9,
        Audit = 10,
        Module = 11,
        Installation = 12,
        ChangeRequest = 13,
        Canary = 14,
        ClusterKey = 15,
        RoleBinding = 16,
        WriteAudit = 17,
        AuditLog = 18,
        Token = 19,
        CanaryHistory = 20,
        EntryClock = 21,
        ClusterMembers = 22,
        EnvironmentLabels = 23,
        RolloutPolicy = 24,
        Rollout = 25,
        CanaryJudging = 26,
        ActivityHead = 27,
        ActivityLine = 28,
        PlanOutcome = 29,
        FinishedPlan = 30,
        NeverHealthy = 31,
        ClusterSettings = 32,
        ApproverGroup = 33,
        ApprovalPolicy = 34,
        ChangeRequestApproval = 35,
        WindowException = 36,
        InstallationChannel = 37,
        ModuleChannels = 38,
        MetricTemplate = 39,
        CanaryEvents = 40,
        RevokedCertificate = 41,
        ClusterLevel = 42,
        AlertProvider = 43,
    }
    retired []
}

/// Who did what, when (SPEC C2, S2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Log index (also the key, zero-padded).
    pub index: u64,
    /// Entry time.
    pub time_ms: TimestampMs,
    /// Who.
    pub actor: String,
    /// What (`command`, `suppression`, `window-override`, `cancel`).
    pub action: String,
    /// On what.
    pub target: String,
    /// Why.
    pub reason: String,
}

impl AuditEntry {
    /// The record name for log index `index`.
    pub fn key_name(index: u64) -> String {
        format!("{index:020}")
    }
}

impl Record {
    /// Whether this stored record is of an older format and must be migrated
    /// ([`Record::migrated`]): a record under a legacy key, or a finished plan stored as a
    /// row of the state (before finished plans were history: [`crate::plan_outcome`]).
    pub fn is_legacy(&self) -> bool {
        match self {
            Record::Plan(p) => !p.status.is_active(),
            other => other.key().residence() == Residence::Legacy,
        }
    }

    /// The records a stored record becomes in this release's format: itself; for an
    /// [`ActivityV1`] its head and its lines (see [`ActivityV1::split`]); for a finished plan
    /// stored as a row, its outcome and the plan as history.
    pub fn migrated(self) -> Vec<Record> {
        match self {
            Record::Plan(p) if !p.status.is_active() => {
                vec![
                    Record::PlanOutcome(PlanOutcome::of(&p)),
                    Record::FinishedPlan(p),
                ]
            }
            Record::ActivityV1(v1) => {
                let (head, lines) = v1.split();
                std::iter::once(Record::ActivityHead(head))
                    .chain(lines.into_iter().map(Record::ActivityLine))
                    .collect()
            }
            other => vec![other],
        }
    }

    /// The key this record is stored under.
    pub fn key(&self) -> RecordKey {
        match self {
            Record::Environment(e) => RecordKey::Environment(e.name.clone()),
            Record::Entity(e) => RecordKey::Entity(e.id.0.clone()),
            Record::Request(r) => RecordKey::Request(r.id.clone()),
            Record::Product(p) => RecordKey::Product(p.id.clone()),
            Record::Release(r) => RecordKey::Release(Release::key_name(&r.product_id, &r.version)),
            Record::Channel(c) => RecordKey::Channel(c.name.clone()),
            Record::Recall(r) => RecordKey::Recall(r.id.clone()),
            Record::Suppression(s) => RecordKey::Suppression(s.id.clone()),
            Record::Plan(p) => RecordKey::Plan(p.id.clone()),
            Record::ActivityV1(a) => RecordKey::ActivityV1(a.entity.clone()),
            Record::Audit(a) => RecordKey::Audit(AuditEntry::key_name(a.index)),
            Record::Module(m) => RecordKey::Module(PublishedModule::key_name(&m.name, &m.version)),
            Record::Installation(i) => RecordKey::Installation(i.id.clone()),
            Record::ChangeRequest(c) => RecordKey::ChangeRequest(c.id.clone()),
            Record::Canary(c) => RecordKey::Canary(c.id.clone()),
            Record::ClusterKey(k) => RecordKey::ClusterKey(k.name.clone()),
            Record::RoleBinding(b) => {
                RecordKey::RoleBinding(RoleBinding::key_name(&b.identity, b.role))
            }
            Record::WriteAudit(w) => RecordKey::WriteAudit(WriteAudit::key_name(w.index)),
            Record::AuditLog(_) => RecordKey::AuditLog(AUDIT_LOG_KEY.to_string()),
            Record::Token(t) => RecordKey::Token(t.name.clone()),
            Record::CanaryHistory(h) => RecordKey::CanaryHistory(h.canary.clone()),
            Record::EntryClock(_) => RecordKey::EntryClock(ENTRY_CLOCK_KEY.to_string()),
            Record::ClusterMembers(_) => RecordKey::ClusterMembers(CLUSTER_MEMBERS_KEY.to_string()),
            Record::EnvironmentLabels(l) => RecordKey::EnvironmentLabels(l.environment.clone()),
            Record::RolloutPolicy(p) => RecordKey::RolloutPolicy(p.product.clone()),
            Record::Rollout(r) => RecordKey::Rollout(Rollout::key_name(&r.product, &r.version)),
            Record::CanaryJudging(j) => RecordKey::CanaryJudging(j.canary.clone()),
            Record::ActivityHead(a) => RecordKey::ActivityHead(a.entity.clone()),
            Record::ActivityLine(l) => {
                RecordKey::ActivityLine(ActivityLine::key_name(&l.entity, l.seq))
            }
            Record::PlanOutcome(o) => RecordKey::PlanOutcome(o.id.clone()),
            Record::FinishedPlan(p) => RecordKey::FinishedPlan(p.id.clone()),
            Record::NeverHealthy(n) => RecordKey::NeverHealthy(n.entity.clone()),
            Record::ClusterSettings(_) => {
                RecordKey::ClusterSettings(CLUSTER_SETTINGS_KEY.to_string())
            }
            Record::ApproverGroup(g) => RecordKey::ApproverGroup(g.name.clone()),
            Record::ApprovalPolicy(p) => RecordKey::ApprovalPolicy(p.scope.key_name()),
            Record::ChangeRequestApproval(a) => {
                RecordKey::ChangeRequestApproval(a.change_request.clone())
            }
            Record::WindowException(w) => RecordKey::WindowException(w.id.clone()),
            Record::InstallationChannel(c) => {
                RecordKey::InstallationChannel(c.installation.clone())
            }
            Record::ModuleChannels(m) => {
                RecordKey::ModuleChannels(ModuleChannels::key_name(&m.module, &m.version))
            }
            Record::MetricTemplate(t) => RecordKey::MetricTemplate(t.id.clone()),
            Record::CanaryEvents(e) => RecordKey::CanaryEvents(e.canary.clone()),
            Record::RevokedCertificate(r) => RecordKey::RevokedCertificate(r.serial.clone()),
            Record::ClusterLevel(_) => RecordKey::ClusterLevel(CLUSTER_LEVEL_KEY.to_string()),
            Record::AlertProvider(p) => RecordKey::AlertProvider(p.id.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        for k in [
            RecordKey::Environment("prod".into()),
            RecordKey::Entity("eid:prod:helmChart:web".into()),
            RecordKey::Request("r-1".into()),
            RecordKey::Product("com.example:web".into()),
            RecordKey::Release("com.example:web@1.2.3".into()),
            RecordKey::Channel("CANARY".into()),
            RecordKey::Recall("r-9".into()),
            RecordKey::Suppression("s-9".into()),
            RecordKey::Plan("p-9-0".into()),
            RecordKey::ActivityV1("eid:prod:helmChart:web".into()),
            RecordKey::Audit(AuditEntry::key_name(9)),
            RecordKey::Module("control-plane-module@0.1.0".into()),
            RecordKey::Installation("prod/control-plane-module".into()),
            RecordKey::ChangeRequest("cr-9".into()),
            RecordKey::Canary("prod/demo".into()),
            RecordKey::ClusterKey("canary-revision".into()),
            RecordKey::RoleBinding("operator/alice#admin".into()),
            RecordKey::WriteAudit("00000000000000000009".into()),
            RecordKey::AuditLog("writes".into()),
            RecordKey::Token("ci".into()),
            RecordKey::CanaryHistory("prod/demo".into()),
            RecordKey::EntryClock("log".into()),
            RecordKey::ClusterMembers("raft".into()),
            RecordKey::EnvironmentLabels("prod".into()),
            RecordKey::RolloutPolicy("com.example:api".into()),
            RecordKey::Rollout("com.example:api@2.0.0".into()),
            RecordKey::CanaryJudging("prod/demo".into()),
            RecordKey::ActivityHead("eid:prod:helmChart:web".into()),
            RecordKey::ActivityLine(ActivityLine::key_name("eid:prod:helmChart:web", 7)),
            RecordKey::PlanOutcome("p-9-0".into()),
            RecordKey::FinishedPlan("p-9-0".into()),
            RecordKey::NeverHealthy("eid:prod:helmChart:web".into()),
            RecordKey::ClusterSettings("cluster".into()),
            RecordKey::ApproverGroup("compliance".into()),
            RecordKey::ApprovalPolicy("environment/prod".into()),
            RecordKey::ChangeRequestApproval("cr-9-0".into()),
            RecordKey::WindowException("wx-9".into()),
            RecordKey::InstallationChannel("prod/control-plane-module".into()),
            RecordKey::ModuleChannels("control-plane-module@0.2.0".into()),
            RecordKey::MetricTemplate("prod/latency".into()),
            RecordKey::CanaryEvents("prod/demo".into()),
            RecordKey::RevokedCertificate("8f3a01".into()),
            RecordKey::ClusterLevel("cluster".into()),
            RecordKey::AlertProvider("prod/on-call".into()),
        ] {
            assert_eq!(RecordKey::from_bytes(&k.to_bytes()), Some(k));
        }
        assert_eq!(RecordKey::from_bytes(&[]), None);
        assert_eq!(RecordKey::from_bytes(&[99, b'x']), None);
    }

    #[test]
    fn records_carry_their_explicit_tag() {
        let cfg = bincode::config::standard();
        let r = Record::Channel(Channel {
            name: "CANARY".into(),
            description: String::new(),
            created_at_ms: 7,
        });
        let bytes = bincode::serde::encode_to_vec(&r, cfg).unwrap();
        assert_eq!((r.tag(), u32::from(bytes[0])), (5, 5));
        let (back, _): (Record, usize) = bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
        assert_eq!(back, r);
        let err = bincode::serde::decode_from_slice::<Record, _>(&[99], cfg).unwrap_err();
        assert!(err.to_string().contains("unknown Record tag 99"), "{err}");
        for pair in Record::TAGS.windows(2) {
            assert!(pair[0].0 < pair[1].0, "{pair:?}");
        }
        for &(tag, name) in Record::TAGS {
            assert_eq!(Record::variant_of_tag(tag), Some(name));
        }
    }
}

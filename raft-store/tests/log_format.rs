//! The replicated format, pinned by golden bytes (issue 15).
//!
//! Every `Command` variant and every `Record` variant (plus one `Request` and one log
//! `Entry`) has a sample built below and a fixture in `tests/fixtures/log-format/`: the
//! sample as `codec::encode` writes it, format-version byte first. The fixture must decode
//! (`codec::decode_bounded`) to the sample, and the sample must encode to the fixture's
//! bytes. Fixture names are `<enum>-<tag>-<Variant>.bin`, the variant named as serde names it.
//! So moving a tag, renaming a variant, adding, removing or reordering fields, or changing a
//! field's encoding makes this test fail instead of silently misreading the Raft logs and
//! snapshots of existing data directories. Samples use distinct values for fields of one type,
//! so two swapped fields do not encode alike.
//!
//! Enums nested inside those (`PlanKind`, `Phase`, `CommandOutput`, …) have no explicit tags:
//! a variant's number is its place in the declaration. Every variant of each of them appears
//! in some sample (the `nested-<Enum>.bin` fixtures hold the ones the command and record
//! samples do not use), and a test traces the samples' serialization to check that, so
//! reordering any nested enum moves a sampled variant and fails its fixture.
//!
//! Blessing: `HUB_BLESS_FIXTURES=1 cargo test -p raft-store --test log_format` writes the
//! fixtures from the samples. It writes missing fixtures and rewrites fixtures of an older
//! format version; it never overwrites a differing fixture of the current version (that is the
//! failure this test exists for). Blessing is allowed only for a newly added variant (its new
//! fixture) or together with a bump of `codec::FORMAT_VERSION` whose decoder refuses (or
//! migrates) the old version. Changing the bytes of an existing fixture any other way means
//! every data directory written before is misread.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Debug;
use std::path::{Path, PathBuf};

use hub_engine::access::{Role, RoleBinding};
use hub_engine::activity::{Activity, ActivityEntryV1, ActivityLine, ActivityV1};
use hub_engine::alert_provider::AlertProvider;
use hub_engine::approval::{
    AppliedPolicy, Approval, ApprovalPolicy, ApprovalPolicySpec, ApproverGroup, Approvers,
    AutoApproval, ChangeRequestApproval, GroupRequirement, PolicyScope, RequestApprovals,
    SemverPart,
};
use hub_engine::artifact::{
    ArtifactLocation, ArtifactRegistry, Availability, HubAccess, RegistryTls, TlsTrust,
};
use hub_engine::audit::{AuditLog, AuthMethod, WriteAudit, WriteOutcome};
use hub_engine::canary::{
    Action, AlertSpec, AlertTarget, Analysis, CanarySpec, CanaryStatus, ConditionStatus,
    HeaderMatch, Manual, MatchRule, Metric, MetricSource, Phase, PromotedCondition, ServiceSpec,
    Severity, StepWeights, Strategy, TargetRef, ThresholdRange, TickInput, Webhook, WebhookResult,
    WebhookType,
};
use hub_engine::canary::{AlertProviderKind, AlertProviderSpec};
use hub_engine::canary::{
    Baseline, Direction, Histogram, Judge, MetricSamples, SampleWindow, Verdict, WorkloadSamples,
};
use hub_engine::canary::{CanaryEvent, EventKind, EventReason};
use hub_engine::canary::{CanaryObservation, CanaryRevision, CanaryStepSpec, MetricWindow};
use hub_engine::canary::{MetricProvider, MetricTemplateSpec, ProviderKind};
use hub_engine::canary_events::CanaryEvents;
use hub_engine::canary_history::{CanaryHistory, CanarySample};
use hub_engine::canary_judging::{CanaryJudging, JudgeResult, JudgedMetric};
use hub_engine::canary_record::Canary;
use hub_engine::cluster_key::{ClusterKey, SecretKey, CANARY_REVISION_KEY};
use hub_engine::cluster_members::ClusterMembers;
use hub_engine::command::{
    CancelTarget, CommandOutput, EntityReport, EntitySettingsPatch, EnvironmentSettingsPatch,
    SampledEntityReport, TokenRole, WindowChange, WindowSpec,
};
use hub_engine::entity::{Health, ReportedState, SecretValue};
use hub_engine::entry_clock::EntryClock;
use hub_engine::feature_level::{ClusterLevel, FeatureLevel};
use hub_engine::installation::{
    ChangeRequest, ChangeRequestStatus, Installation, ManagedEntity, PublishedModule,
};
use hub_engine::labels::EnvironmentLabels;
use hub_engine::metric_template::MetricTemplate;
use hub_engine::module::{
    Constraint, EntityOverride, EntityTemplate, KeyPath, ModuleConfig, ModuleDefinition,
    MultikeySecret, Restrictions, SubmoduleRef, SyncMode, Uninstall, Variable,
};
use hub_engine::module_channel::{InstallationChannel, ModuleChannels};
use hub_engine::never_healthy::{FailedAttempt, NeverHealthy};
use hub_engine::plan::{
    EmergencyCommand, FailureMetadata, Plan, PlanKind, PlanStatus, Task, TaskReport, TaskState,
};
use hub_engine::plan_outcome::{OutcomeKind, PlanOutcome};
use hub_engine::product::{Channel, Product, Recall, Release};
use hub_engine::record::{AuditEntry, RequestRecord};
use hub_engine::release::{Artifact, ProductDependency, VersionBound};
use hub_engine::revocation::{CertificateRevocation, RevokedCertificate};
use hub_engine::rollout::{HaltCause, Promotion, Rollout, RolloutHalt, WaveProgress};
use hub_engine::rollout_policy::{OnFailure, RolloutPolicy, Selector, Wave};
use hub_engine::settings::ClusterSettings;
use hub_engine::settings::{EnvironmentSettings, WindowOverride};
use hub_engine::suppression::{Scope, Suppression, SuppressionSource};
use hub_engine::token::{OperatorToken, TokenHash};
use hub_engine::window::MaintenanceWindow;
use hub_engine::window_exception::{ExceptionStatus, WindowException};
use hub_engine::{Command, Entity, EntityId, EntityKind, Environment, Record, Request};
use hub_identity::Identity;
use openraft::vote::RaftLeaderId;
use openraft::EntryPayload;
use raft_store::codec::{self, CodecError, Limit, FORMAT_VERSION};
use raft_store::Entry;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Set to `1` to write the fixtures (see the module documentation for when that is allowed).
const BLESS_VAR: &str = "HUB_BLESS_FIXTURES";

fn fixtures_dir() -> PathBuf {
    std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("tests/fixtures/log-format")
}

/// A version (or any other parsed value) in a sample; the test crate does not name `semver`.
fn v<T: std::str::FromStr>(s: &str) -> T
where
    T::Err: Debug,
{
    s.parse().unwrap_or_else(|e| panic!("{s:?}: {e:?}"))
}

fn s(text: &str) -> String {
    text.to_string()
}

const ENTITY: &str = "eid:prod:helmChart:web";
const PRODUCT: &str = "com.example:web";
const T0: i64 = 1_795_996_800_000;

fn window() -> MaintenanceWindow {
    MaintenanceWindow::parse("MONDAY/22:00-TUESDAY/06:00", "Europe/Berlin").unwrap()
}

fn artifact() -> Artifact {
    Artifact {
        uri: s("web/web-1.2.0.tgz"),
        sha256: s("3f7a9c0d5e1b2a4c6d8e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c"),
    }
}

fn failure() -> FailureMetadata {
    FailureMetadata {
        stage: s("readiness"),
        message: s("not ready after 30s"),
        not_ready: vec![s("http://127.0.0.1:8080/ready")],
        validation_errors: vec![s("port: not a number")],
    }
}

fn revision(rev: &str, version: &str) -> CanaryRevision {
    CanaryRevision {
        revision: s(rev),
        version: v(version),
        config: s("port: 8080\n"),
        secrets_revision: 4,
        artifacts: vec![artifact()],
    }
}

fn observation() -> CanaryObservation {
    CanaryObservation {
        applied_step: 6,
        primary_revision: Some(s("v2-aaaa")),
        primary_ready_percent: 100,
        canary_revision: Some(s("v2-bbbb")),
        canary_ready_percent: 90,
        windows: vec![MetricWindow {
            interval_ms: 60_000,
            requests: 1_200,
            success_rate_milli: Some(99_917),
            p99_ms_milli: Some(12_500),
        }],
        observed_ms: T0 + 5,
    }
}

fn task_report(state: TaskState, failure: Option<FailureMetadata>) -> TaskReport {
    TaskReport {
        plan_id: s("p-40-0"),
        task: s("fetch"),
        attempt: 2,
        state,
        output: s("fetching web-1.2.0.tgz\n"),
        failure,
    }
}

/// One sample of every `Command` variant, in tag order.
fn commands() -> Vec<Command> {
    vec![
        Command::CreateEnvironment {
            name: s("prod"),
            description: s("production"),
        },
        Command::DeleteEnvironment { name: s("staging") },
        Command::CreateEntity {
            environment: s("prod"),
            kind: EntityKind::HelmChart,
            name: s("web"),
            product_id: s(PRODUCT),
            k8s_namespace: Some(s("web-ns")),
            account_id: Some(s("acct-7")),
            release_channel: Some(s("BETA")),
        },
        Command::SetEnvironmentSettings {
            environment: s("prod"),
            patch: EnvironmentSettingsPatch {
                maintenance_window: Some(WindowChange::Set(WindowSpec {
                    spec: s("MONDAY/22:00-TUESDAY/06:00"),
                    time_zone: s("Europe/Berlin"),
                })),
                autosuppression_threshold: Some(3),
                auto_suppression_ms: Some(3_600_000),
                override_product_maintenance_windows: Some(true),
                require_windows_for_recall_roll_offs: Some(false),
            },
        },
        Command::SetRegistry {
            environment: s("prod"),
            name: s("local"),
            url: s("https://registry.example:8443/base"),
            hub_access: s("not-expected"),
            ca_pem: Some(s(
                "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
            )),
            insecure_skip_verify: true,
        },
        Command::RemoveRegistry {
            environment: s("prod"),
            name: s("old-registry"),
        },
        Command::SetEntitySettings {
            entity: s(ENTITY),
            patch: EntitySettingsPatch {
                release_channel: Some(s("CANARY_FLEET")),
                dependency_groups: Some(vec![s("default"), s("edge")]),
                ignored_dependencies: Some(vec![s("com.example:db")]),
                maintenance_window: Some(WindowChange::Remove),
                marked_for_uninstall: Some(true),
            },
        },
        Command::SetConfigOverrides {
            entity: s(ENTITY),
            version: s("1.2.0"),
            config: Some(s("port: 8080\n")),
        },
        Command::SetSecret {
            entity: s(ENTITY),
            name: s("db-password"),
            value: Some(SecretValue(s("s3cret"))),
        },
        Command::CreateProduct {
            product_id: s(PRODUCT),
            description: s("the web tier"),
        },
        Command::SetProductWindow {
            product_id: s(PRODUCT),
            window: Some(WindowSpec {
                spec: s("all-time"),
                time_zone: s("UTC"),
            }),
        },
        Command::PublishRelease {
            manifest: s("product-group: com.example\nproduct-name: web\nproduct-version: 1.2.0\n"),
        },
        Command::CreateChannel {
            name: s("CANARY_FLEET"),
            description: s("early adopters"),
        },
        Command::SetReleaseChannel {
            channel: s("CANARY_FLEET"),
            product_id: s(PRODUCT),
            version: s("1.2.0"),
            member: true,
        },
        Command::RecallReleases {
            product_id: s(PRODUCT),
            from: s("1.1.0"),
            to: s("1.1.9"),
            reason: s("data loss"),
        },
        Command::DeleteRecall { id: s("r-14") },
        Command::AddWindowOverride {
            scope: Scope::Entity(s(ENTITY)),
            start_ms: T0,
            end_ms: T0 + 3_600_000,
            reason: s("hotfix"),
            actor: s("alice"),
        },
        Command::RemoveWindowOverride {
            scope: Scope::Environment(s("prod")),
            id: s("o-16"),
        },
        Command::CreateSuppression {
            scope: Scope::Environment(s("prod")),
            start_ms: Some(T0 + 1),
            end_ms: T0 + 7_200_000,
            reason: s("freeze"),
            cancel_active_plans: true,
            actor: s("bob"),
        },
        Command::DeleteSuppression {
            id: s("s-18"),
            actor: s("carol"),
        },
        Command::PublishModule {
            file_name: Some(s("web-module.yml")),
            yaml: s("name: web-module\n"),
        },
        Command::DeleteModule {
            name: s("old-module"),
        },
        Command::InstallModule {
            environment: s("prod"),
            module: s("web-module"),
            version: Some(s("0.2.0")),
            variables: BTreeMap::from([(s("threads"), s("8")), (s("tier"), s("small"))]),
            actor: s("dave"),
        },
        Command::SetModuleVariables {
            installation: s("prod/web-module"),
            variables: BTreeMap::from([(s("threads"), Some(s("16"))), (s("tier"), None)]),
        },
        Command::SetModuleUpdatesPaused {
            installation: s("prod/web-module"),
            paused: true,
            actor: s("erin"),
        },
        Command::UnlinkModule {
            installation: s("prod/other-module"),
            actor: s("frank"),
        },
        Command::ApproveChangeRequest {
            id: s("cr-30"),
            actor: s("grace"),
        },
        Command::RejectChangeRequest {
            id: s("cr-31"),
            actor: s("heidi"),
            reason: s("not now"),
        },
        Command::ApplyCanary {
            environment: Some(s("prod")),
            yaml: s("apiVersion: flagger.app/v1beta1\nkind: Canary\n"),
        },
        Command::DeleteCanary { id: s("prod/web") },
        Command::CanaryTick {
            id: s("prod/web"),
            step: 7,
            input: TickInput {
                revision: s("v2-bbbb"),
                primary_ready_percent: 100,
                canary_ready_percent: 80,
                primary_revision: Some(s("v2-aaaa")),
                canary_revision: Some(s("v2-cccc")),
                webhooks: BTreeMap::from([(
                    s("load-test"),
                    WebhookResult {
                        ok: true,
                        status: Some(200),
                        message: s("ok"),
                    },
                )]),
                metrics: BTreeMap::from([
                    (s("latency"), None),
                    (s("request-success-rate"), Some(99_500)),
                ]),
                manual: Some(Manual::Retry),
            },
        },
        Command::CanaryManual {
            id: s("prod/web"),
            action: Manual::Abort,
            actor: s("ivan"),
        },
        Command::CancelPlans {
            target: CancelTarget::Plan(s("p-40-0")),
            reason: s("wrong version"),
            suppress_for_ms: Some(600_000),
            actor: s("judy"),
        },
        Command::IssueCommand {
            entity: s(ENTITY),
            command: EmergencyCommand::EnforceConfigAndVersion {
                version: v("1.2.0"),
            },
            reason: s("break glass"),
            actor: s("mallory"),
        },
        Command::Evaluate {
            entities: vec![s(ENTITY), s("eid:prod:helmChart:api")],
            artifacts: vec![
                (
                    ArtifactLocation::Http {
                        url: s("https://registry.example/web/web-1.2.0.tgz"),
                        trust: TlsTrust::ExtraCa { sha256: s("ab12") },
                    },
                    Availability::Unavailable {
                        reason: s("404 Not Found"),
                    },
                ),
                (
                    ArtifactLocation::File(s("/srv/registry/web/web-1.2.0.tgz")),
                    Availability::Available,
                ),
            ],
        },
        Command::ExpireSuppressions,
        Command::ReportEntityStates {
            environment: s("prod"),
            states: vec![EntityReport {
                entity: s(ENTITY),
                version: Some(v("1.2.0")),
                health: Health::Healthy,
                config_sha256: Some(s("cafe")),
                secrets_revision: Some(3),
                message: s("ready"),
            }],
        },
        Command::ReportTasks {
            environment: s("prod"),
            reports: vec![task_report(TaskState::Failed, Some(failure()))],
        },
        Command::ReportCanaries {
            environment: s("prod"),
            observations: vec![(s("prod/web"), observation())],
        },
        Command::ReportTask {
            environment: s("staging"),
            report: task_report(TaskState::Running, None),
        },
        Command::SetClusterKey {
            name: s(CANARY_REVISION_KEY),
            key: SecretKey::from_bytes(std::array::from_fn(|i| i as u8)),
        },
        Command::BindRole {
            identity: Identity::Operator(s("alice")),
            role: Role::EnvironmentOperator,
            environments: BTreeSet::from([s("prod"), s("stage")]),
            products: BTreeSet::new(),
        },
        Command::UnbindRole {
            identity: Identity::Agent(s("prod")),
            role: Role::Viewer,
        },
        Command::As {
            actor: Identity::Node(3),
            command: Box::new(Command::DeleteCanary { id: s("prod/web") }),
        },
        Command::SetAuditRetention { entries: 250_000 },
        Command::RecordRefusal {
            actor: Identity::Operator(s("mallory")),
            command: s("CreateEnvironment"),
            target: s("cluster"),
            error: s("operator/mallory may not CreateEnvironment: needs admin"),
        },
        Command::CreateToken {
            name: s("ci"),
            hash: TokenHash(std::array::from_fn(|i| 0x40 + i as u8)),
            ttl_ms: Some(30 * 86_400_000),
            roles: vec![TokenRole {
                role: Role::Approver,
                environments: BTreeSet::from([s("prod")]),
                products: BTreeSet::new(),
            }],
        },
        Command::RevokeToken { name: s("ci") },
        Command::SetEnvironmentLabels {
            environment: s("prod"),
            labels: BTreeMap::from([(s("region"), Some(s("eu"))), (s("tier"), None)]),
        },
        Command::ApplyRolloutPolicy {
            yaml: s("product: com.example:api\nwaves: []\n"),
        },
        Command::DeleteRolloutPolicy {
            product: s("com.example:db"),
        },
        Command::PromoteWave {
            product: s("com.example:api"),
            version: s("2.0.0"),
            actor: s("operator/admin"),
        },
        Command::HaltRollout {
            product: s("com.example:api"),
            version: s("2.0.1"),
            reason: s("error budget"),
            actor: s("operator/ops"),
        },
        Command::ResumeRollout {
            product: s("com.example:db"),
            version: s("2.0.2"),
            actor: s("operator/sre"),
        },
        Command::CanaryJudgedTick {
            id: s("prod/web"),
            step: 8,
            input: TickInput {
                revision: s("v2-dddd"),
                primary_ready_percent: 90,
                canary_ready_percent: 100,
                primary_revision: None,
                canary_revision: Some(s("v2-dddd")),
                webhooks: BTreeMap::new(),
                metrics: BTreeMap::from([(s("request-success-rate"), Some(99_900))]),
                manual: None,
            },
            samples: BTreeMap::from([(
                s("request-duration"),
                MetricSamples {
                    canary: Histogram::from_pairs(&[(5_000, 11), (25_000, 3)]),
                    baseline: Histogram::from_pairs(&[(1_000, 40), (5_000, 9)]),
                },
            )]),
        },
        Command::ReportCanariesWithSamples {
            environment: s("prod"),
            observations: vec![(s("prod/web"), observation())],
            samples: vec![(s("prod/web"), vec![sample_window()])],
        },
        Command::ReportSampledEntityStates {
            environment: s("prod"),
            states: vec![
                SampledEntityReport {
                    report: EntityReport {
                        entity: s(ENTITY),
                        version: Some(v("1.3.0")),
                        health: Health::Error,
                        config_sha256: None,
                        secrets_revision: None,
                        message: s("slow"),
                    },
                    reflects_through: Some(41),
                },
                SampledEntityReport {
                    report: EntityReport {
                        entity: s("eid:prod:helmChart:api"),
                        version: None,
                        health: Health::Unknown,
                        config_sha256: Some(s("beef")),
                        secrets_revision: Some(4),
                        message: s(""),
                    },
                    reflects_through: None,
                },
            ],
        },
        Command::PutSecret {
            entity: s(ENTITY),
            name: s("api-token"),
            value: Some(SecretValue(s("t0ken"))),
        },
        Command::SetCanaryConfigTracking { enabled: false },
        Command::SetApproverGroup {
            name: s("compliance"),
            members: BTreeSet::from([Identity::Operator(s("carl"))]),
        },
        Command::DeleteApproverGroup { name: s("audit") },
        Command::SetApprovalPolicy {
            scope: PolicyScope::Installation(s("prod/web-module")),
            policy: Some(policy_spec()),
        },
        Command::RequestWindowException {
            scope: Scope::Entity(s(ENTITY)),
            start_ms: T0 + 30,
            end_ms: T0 + 31,
            reason: s("INC-42"),
            actor: s("operator/vic"),
        },
        Command::ApproveWindowException {
            id: s("wx-9"),
            actor: s("operator/ann"),
        },
        Command::RejectWindowException {
            id: s("wx-10"),
            reason: s("no"),
            actor: s("operator/bob"),
        },
        Command::InstallModuleOnChannel {
            environment: s("prod"),
            module: s("web-module"),
            version: Some(s("0.2.0")),
            variables: BTreeMap::from([(s("ns"), s("web"))]),
            channel: Some(s("STABLE")),
            actor: s("operator/root"),
        },
        Command::SetInstallationChannel {
            installation: s("prod/web-module"),
            channel: None,
            actor: s("operator/olga"),
        },
        Command::SetModuleChannel {
            module: s("web-module"),
            version: s("0.2.0"),
            channel: s("STABLE"),
            member: true,
        },
        Command::ApplyMetricTemplate {
            environment: Some(s("flagger")),
            yaml: s("kind: MetricTemplate\nmetadata: {name: latency}\n"),
        },
        Command::DeleteMetricTemplate {
            id: s("flagger/error-rate"),
        },
        Command::RevokeCertificate {
            serial: s("00:8F:3A:01"),
            reason: s("laptop stolen"),
            identity: Some(s("operator/alice")),
            not_after: Some(T0 + 44),
        },
        Command::SetClusterLevel {
            level: FeatureLevel(2),
        },
        Command::RevokeCertificates {
            certificates: vec![
                CertificateRevocation {
                    serial: s("0a"),
                    reason: s("listed in a CRL: KeyCompromise"),
                    identity: Some(s("agent/prod")),
                    not_after: Some(T0 + 45),
                },
                CertificateRevocation {
                    serial: s("0B"),
                    reason: s("superseded"),
                    identity: None,
                    not_after: None,
                },
            ],
        },
        Command::ApplyAlertProvider {
            environment: Some(s("flagger")),
            yaml: s("kind: AlertProvider\nmetadata: {name: on-call}\n"),
        },
        Command::DeleteAlertProvider {
            id: s("flagger/qa-discord"),
        },
    ]
}

/// A metric template's provider with every field set, each to a distinct value.
fn metric_provider() -> MetricProvider {
    MetricProvider {
        kind: ProviderKind::Prometheus,
        address: s("https://prometheus.flagger:9090"),
        secret_ref: Some(s("prom-auth")),
        insecure_skip_verify: true,
        headers: BTreeMap::from([(s("X-Scope-OrgID"), vec![s("tenant-1"), s("tenant-2")])]),
    }
}

fn sample_window() -> SampleWindow {
    SampleWindow {
        interval_ms: 30_000,
        canary: WorkloadSamples {
            latency: Histogram::from_pairs(&[(2_000, 5), (10_000, 2)]),
            success: Histogram::success(1, 6),
        },
        primary: WorkloadSamples {
            latency: Histogram::from_pairs(&[(2_000, 50), (5_000, 20)]),
            success: Histogram::success(0, 70),
        },
        baseline: Some(WorkloadSamples {
            latency: Histogram::from_pairs(&[(1_000, 4)]),
            success: Histogram::success(2, 2),
        }),
    }
}

fn judge(baseline: Baseline, direction: Direction, effect_size_milli: u32) -> Judge {
    Judge {
        baseline,
        direction,
        effect_size_milli,
        confidence_milli: 950 + effect_size_milli % 7,
    }
}

fn plan(id: &str, kind: PlanKind) -> Plan {
    Plan {
        id: s(id),
        entity: s(ENTITY),
        environment: s("prod"),
        kind,
        from_version: Some(v("1.1.0")),
        to_version: Some(v("1.2.0")),
        from_config_sha256: Some(s("beef")),
        to_config: Some(s("port: 8081\n")),
        secrets_revision: 5,
        artifacts: vec![artifact()],
        reason: s("new release 1.2.0"),
        tasks: vec![Task {
            name: s("fetch"),
            state: TaskState::Succeeded,
            attempt: 1,
            started_ms: Some(T0 + 10),
            ended_ms: Some(T0 + 20),
            error: Some(s("retried once")),
        }],
        output: s("fetched\n"),
        failure: Some(failure()),
        created_ms: T0 + 1,
        issued_ms: T0 + 2,
        started_ms: Some(T0 + 3),
        ended_ms: Some(T0 + 4),
        status: PlanStatus::Failed,
        cancel_reason: Some(s("superseded")),
        issued_index: 40,
    }
}

fn canary_spec() -> CanarySpec {
    CanarySpec {
        name: s("web"),
        namespace: Some(s("prod")),
        target: TargetRef {
            kind: EntityKind::HelmChart,
            name: s("web-target"),
        },
        service: ServiceSpec {
            name: s("web-svc"),
            port: 9898,
            port_name: s("http"),
            target_port: Some(9899),
        },
        progress_deadline_seconds: 600,
        skip_analysis: false,
        suspend: true,
        revert_on_deletion: true,
        analysis: Analysis {
            interval_ms: 30_000,
            threshold: 5,
            strategy: Strategy::Canary {
                steps: StepWeights::List(vec![10, 20, 50]),
                max_weight: 50,
            },
            step_weight_promotion: Some(25),
            primary_ready_threshold: 100,
            canary_ready_threshold: 90,
            metrics: vec![Metric {
                name: s("error-rate"),
                interval_ms: 60_000,
                range: ThresholdRange {
                    min: Some(-1_000),
                    max: Some(1_000),
                },
                source: MetricSource::Prometheus {
                    address: s("http://prometheus:9090"),
                    query: s("sum(rate(errors[1m]))"),
                },
            }],
            webhooks: vec![Webhook {
                name: s("load-test"),
                kind: WebhookType::Rollout,
                url: s("http://loadtester/"),
                timeout_ms: 10_000,
                retries: 2,
                metadata: BTreeMap::from([(s("cmd"), s("hey -z 1m"))]),
                mute_alert: true,
            }],
            alerts: vec![AlertSpec {
                name: s("on-call"),
                severity: Severity::Warn,
                target: AlertTarget::Provider {
                    name: s("slack"),
                    namespace: Some(s("ops")),
                },
            }],
        },
    }
}

fn canary_status() -> CanaryStatus {
    CanaryStatus {
        phase: Phase::Progressing,
        canary_weight: 20,
        match_routing: true,
        failed_checks: 1,
        iterations: 2,
        last_applied_spec: Some(s("v2-bbbb")),
        last_promoted_spec: Some(s("v2-aaaa")),
        failed_spec: Some(s("v2-dddd")),
        primary_revision: Some(s("v2-aaaa")),
        canary_revision: Some(s("v2-bbbb")),
        step: 7,
        next_tick_ms: Some(T0 + 30_000),
        phase_started_ms: T0 + 6,
        revision_started_ms: Some(T0 + 7),
        not_ready_since_ms: Some(T0 + 8),
        promoted: PromotedCondition {
            status: ConditionStatus::Unknown,
            reason: Phase::Progressing,
            message: s("New revision detected"),
            last_transition_ms: T0 + 9,
            last_update_ms: T0 + 11,
        },
    }
}

fn canary() -> Canary {
    let rule = MatchRule {
        headers: BTreeMap::from([(s("x-canary"), HeaderMatch::Exact(s("always")))]),
    };
    let step = CanaryStepSpec {
        canary: s("prod/web"),
        service: s("web-svc"),
        port: 9898,
        step: 7,
        phase: Phase::Progressing,
        primary: Some(revision("v2-aaaa", "1.1.0")),
        canary_workload: Some(revision("v2-bbbb", "1.2.0")),
        canary_weight: 20,
        match_routing: true,
        match_rules: vec![rule.clone()],
        restore_original: false,
        metric_windows_ms: vec![60_000, 300_000],
    };
    Canary {
        id: s("prod/web"),
        environment: s("prod"),
        name: s("web"),
        entity: s(ENTITY),
        spec: canary_spec(),
        yaml: s("apiVersion: flagger.app/v1beta1\nkind: Canary\n"),
        status: canary_status(),
        actions: vec![
            (
                6,
                Action::SetWeights {
                    primary: 80,
                    canary: 20,
                },
            ),
            (
                7,
                Action::SetRouting {
                    canary_weight: 0,
                    match_rules: vec![rule],
                },
            ),
        ],
        target: Some(revision("v2-bbbb", "1.2.0")),
        revisions: vec![revision("v2-aaaa", "1.1.0")],
        observation: Some(observation()),
        queued: vec![plan("p-41-0", PlanKind::CanaryStep(Box::new(step)))],
        created_ms: T0 + 12,
        updated_ms: T0 + 13,
    }
}

fn module_definition() -> ModuleDefinition {
    ModuleDefinition {
        name: s("web-module"),
        display_name: Some(s("Web module")),
        description: Some(s("the web tier and its cache")),
        variables: BTreeMap::from([
            (
                s("threads"),
                Variable::String {
                    default: Some(s("8")),
                    description: Some(s("worker threads")),
                    constraint: Constraint::Regex(s("[0-9]+")),
                },
            ),
            (
                s("tier"),
                Variable::Options {
                    values: vec![s("small"), s("large")],
                    default: Some(s("small")),
                    description: None,
                },
            ),
        ]),
        entities: vec![EntityTemplate {
            kind: EntityKind::HelmChart,
            product_id: s(PRODUCT),
            k8s_namespace: Some(s("web-ns")),
            account_id: None,
            entity_name: Some(s("web")),
            dependency_groups: vec![s("edge")],
            dependency_group_overrides: BTreeMap::from([(s("com.example:db"), vec![s("data")])]),
            sync_config_overrides: SyncMode::Merge,
            config_overrides: Some(s("threads: '{{ moduleVariable.threads }}'\n")),
            install_config_overrides: Some(s("seed: true\n")),
            secret_requirements: BTreeMap::from([(
                s("db"),
                MultikeySecret {
                    description: Some(s("database login")),
                    keys: vec![s("user"), s("password")],
                },
            )]),
            marked_for_uninstallation: Some(Uninstall {
                min_version: Some(v("1.0.0")),
                unmanage_after_uninstall: Some(s("MANUAL")),
            }),
        }],
        submodules: vec![SubmoduleRef {
            name: s("cache-module"),
            version: v("0.3.0"),
            variable_overrides: BTreeMap::from([(s("size"), s("{{ moduleVariable.tier }}"))]),
            entity_overrides: BTreeMap::from([(
                s("com.example:cache"),
                EntityOverride {
                    config_overrides: Some(s("maxmemory: 1gb\n")),
                    secret_requirements: BTreeMap::new(),
                    ignored_dependencies: vec![s("com.example:metrics")],
                    dependency_groups: Some(vec![s("cache")]),
                },
            )]),
        }],
        restrictions: Restrictions {
            new_installations_allowed: true,
            allow_entity_overrides: false,
        },
    }
}

/// An approval policy with every field set, each to a distinct value.
fn policy_spec() -> ApprovalPolicySpec {
    ApprovalPolicySpec {
        auto_approve: AutoApproval {
            up_to: Some(SemverPart::Minor),
            variable_changes: true,
            entity_changes: false,
        },
        approvers: 2,
        required_groups: vec![GroupRequirement {
            group: s("compliance"),
            count: 1,
        }],
        allow_self_approval: true,
        expire_after_ms: Some(86_400_000),
        default_channel: Some(s("STABLE")),
    }
}

/// A request's approvals under a policy drawn from `approvers`.
fn request_approvals(approvers: Approvers) -> RequestApprovals {
    RequestApprovals {
        policy: AppliedPolicy {
            source: Some(PolicyScope::Product(s("com.example:web"))),
            approvers,
            count: 3,
            required_groups: vec![GroupRequirement {
                group: s("security"),
                count: 2,
            }],
            allow_self_approval: false,
        },
        requester: Some(Identity::Operator(s("mo"))),
        approvals: vec![Approval {
            identity: Identity::Operator(s("ann")),
            time_ms: T0 + 36,
            counts_for: vec![0, 1],
        }],
        expires_ms: Some(T0 + 37),
    }
}

/// One sample of every `Record` variant, in tag order.
fn records() -> Vec<Record> {
    vec![
        Record::Environment(Environment {
            name: s("prod"),
            description: s("production"),
            created_at_ms: T0,
            settings: EnvironmentSettings {
                maintenance_window: Some(window()),
                registries: vec![
                    ArtifactRegistry {
                        name: s("local"),
                        url: s("file:///srv/registry"),
                        hub_access: HubAccess::Expected,
                        tls: RegistryTls::SystemRoots,
                    },
                    ArtifactRegistry {
                        name: s("mirror"),
                        url: s("https://mirror.example"),
                        hub_access: HubAccess::NotExpected,
                        tls: RegistryTls::InsecureSkipVerify,
                    },
                ],
                autosuppression_threshold: 3,
                auto_suppression_ms: 3_600_000,
                override_product_maintenance_windows: true,
                require_windows_for_recall_roll_offs: false,
            },
            window_overrides: vec![WindowOverride {
                id: s("o-16"),
                start_ms: T0 + 1,
                end_ms: T0 + 2,
                reason: s("hotfix"),
            }],
        }),
        Record::Entity(Entity {
            id: EntityId(s(ENTITY)),
            environment: s("prod"),
            kind: EntityKind::HelmChart,
            name: s("web"),
            product_id: s(PRODUCT),
            k8s_namespace: Some(s("web-ns")),
            account_id: Some(s("acct-7")),
            release_channel: s("BETA"),
            created_at_ms: T0,
            dependency_groups: BTreeSet::from([s("default"), s("edge")]),
            ignored_dependencies: BTreeSet::from([s("com.example:db")]),
            maintenance_window: Some(window()),
            window_overrides: vec![WindowOverride {
                id: s("o-17"),
                start_ms: T0 + 3,
                end_ms: T0 + 4,
                reason: s("demo"),
            }],
            config_overrides: BTreeMap::from([
                (v("0.0.0"), s("port: 8080\n")),
                (v("1.2.0"), s("port: 8081\n")),
            ]),
            secrets: BTreeMap::from([(s("db-password"), SecretValue(s("s3cret")))]),
            secrets_revision: 4,
            reported: ReportedState {
                version: Some(v("1.1.0")),
                health: Health::Error,
                config_sha256: Some(s("cafe")),
                secrets_revision: 3,
                message: s("crashed"),
                reported_at_ms: Some(T0 + 5),
            },
            owner_module: Some(s("prod/web-module")),
            marked_for_uninstall: true,
            uninstall_min_version: Some(v("1.0.0")),
            required_secrets: BTreeSet::from([s("db.password")]),
            dependency_group_overrides: BTreeMap::from([(
                s("com.example:cache"),
                BTreeSet::from([s("cache")]),
            )]),
        }),
        Record::Request(RequestRecord {
            id: s("r-1"),
            index: 12,
            time_ms: T0 + 6,
            result: Ok(CommandOutput::Changed {
                id: s("s-12"),
                summary: s("suppression s-12 created"),
            }),
        }),
        Record::Product(Product {
            id: s(PRODUCT),
            description: s("the web tier"),
            maintenance_window: Some(MaintenanceWindow::all_time()),
            created_at_ms: T0 + 7,
        }),
        Record::Release(Release {
            product_id: s(PRODUCT),
            version: v("1.2.0"),
            artifacts: vec![artifact()],
            dependencies: vec![ProductDependency {
                product_id: s("com.example:db"),
                minimum: VersionBound::parse("1.2.x").unwrap(),
                maximum: VersionBound::parse("1.x.x").unwrap(),
                optional: true,
            }],
            custom_channels: BTreeSet::from([s("CANARY_FLEET")]),
            published_at_ms: T0 + 8,
        }),
        Record::Channel(Channel {
            name: s("CANARY_FLEET"),
            description: s("early adopters"),
            created_at_ms: T0 + 9,
        }),
        Record::Recall(Recall {
            id: s("r-14"),
            product_id: s(PRODUCT),
            from: v("1.1.0"),
            to: v("1.1.9"),
            reason: s("data loss"),
            created_at_ms: T0 + 10,
        }),
        Record::Suppression(Suppression {
            id: s("s-18"),
            scope: Scope::Entity(s(ENTITY)),
            source: SuppressionSource::FailedPlan {
                plan_id: s("p-40-0"),
            },
            start_ms: T0 + 11,
            end_ms: Some(T0 + 12),
            reason: s("plan p-40-0 failed"),
            created_at_ms: T0 + 13,
        }),
        Record::Plan(plan(
            "p-40-0",
            PlanKind::Rollback {
                failed_plan: s("p-39-0"),
            },
        )),
        Record::ActivityV1(ActivityV1 {
            entity: s(ENTITY),
            entries: VecDeque::from([ActivityEntryV1 {
                time_ms: T0 + 14,
                index: 41,
                kind: s("blocked"),
                message: s("outside the maintenance window"),
            }]),
            last_decision: Some(s("blocked: window")),
            blocked_since_ms: Some(T0 + 15),
            blocked_candidate: Some(s("1.2.0")),
        }),
        Record::Audit(AuditEntry {
            index: 42,
            time_ms: T0 + 16,
            actor: s("alice"),
            action: s("command"),
            target: s(ENTITY),
            reason: s("break glass"),
        }),
        Record::Module(PublishedModule {
            name: s("web-module"),
            version: v("0.2.0"),
            definition: module_definition(),
            yaml: s("name: web-module\n"),
            published_ms: T0 + 17,
        }),
        Record::Installation(Installation {
            id: s("prod/web-module"),
            environment: s("prod"),
            module: s("web-module"),
            version: v("0.2.0"),
            variables: BTreeMap::from([(s("threads"), s("8"))]),
            paused: true,
            resuming: false,
            entities: BTreeMap::from([(
                s(ENTITY),
                ManagedEntity {
                    sync_mode: SyncMode::Merge,
                    config: BTreeMap::from([(
                        v("1.2.0"),
                        ModuleConfig {
                            overrides: s("threads: '8'\n"),
                            controlled: vec![KeyPath::dotted("threads")],
                            unset: vec![KeyPath::dotted("legacy.mode")],
                            module: s("web-module"),
                        },
                    )]),
                    secret_requirements: BTreeMap::from([(
                        s("db"),
                        MultikeySecret {
                            description: None,
                            keys: vec![s("user")],
                        },
                    )]),
                    source_module: s("web-module/cache-module"),
                },
            )]),
            created_ms: T0 + 18,
            updated_ms: T0 + 19,
        }),
        Record::ChangeRequest(ChangeRequest {
            id: s("cr-30"),
            installation: s("prod/web-module"),
            from_version: v("0.1.0"),
            to_version: v("0.2.0"),
            status: ChangeRequestStatus::Merged,
            reason: s("module 0.2.0 published"),
            blocked: Some(s("waiting for threads")),
            message: s("merged"),
            created_ms: T0 + 20,
            decided_by: Some(s("grace")),
            closed_ms: Some(T0 + 21),
        }),
        Record::Canary(Box::new(canary())),
        Record::ClusterKey(ClusterKey {
            name: s(CANARY_REVISION_KEY),
            key: SecretKey::from_bytes([0xa5; 32]),
            set_at_ms: T0 + 22,
        }),
        Record::RoleBinding(RoleBinding {
            identity: Identity::Operator(s("pat")),
            role: Role::ProductEditor,
            environments: BTreeSet::new(),
            products: BTreeSet::from([s("com.example:*"), s("org.other:db")]),
            bound_ms: T0 + 23,
            bound_by: s("operator/root"),
        }),
        Record::WriteAudit(WriteAudit {
            index: 4242,
            time_ms: T0 + 24,
            actor: Identity::Operator(s("bob")),
            method: AuthMethod::Certificate,
            command: s("SetSecret"),
            target: s("environment prod"),
            outcome: WriteOutcome::Refused(hub_engine::CommandError::PermissionDenied(s(
                "operator/bob may not SetSecret in prod: needs environment-operator on prod",
            ))),
        }),
        Record::AuditLog(AuditLog {
            retention: 100_000,
            dropped: 17,
        }),
        Record::Token(OperatorToken {
            name: s("dashboard"),
            hash: TokenHash([0x5a; 32]),
            created_ms: T0 + 25,
            expires_ms: Some(T0 + 86_400_000),
            created_by: s("operator/root"),
        }),
        Record::CanaryHistory(CanaryHistory {
            canary: s("prod/web"),
            samples: VecDeque::from([
                CanarySample {
                    time_ms: T0 + 26,
                    step: 4,
                    phase: Phase::Progressing,
                    canary_weight: 20,
                    metrics: vec![
                        (s("request-success-rate"), Some(99_500)),
                        (s("request-duration"), None),
                    ],
                },
                CanarySample {
                    time_ms: T0 + 27,
                    step: 5,
                    phase: Phase::Failed,
                    canary_weight: 0,
                    metrics: vec![],
                },
            ]),
        }),
        Record::EntryClock(EntryClock {
            last_ms: T0 + 28,
            raised: 3,
            max_raise_ms: 1_250,
        }),
        Record::ClusterMembers(ClusterMembers {
            members: BTreeSet::from([1, 3, 4]),
            removed: BTreeSet::from([2, 5]),
        }),
        Record::EnvironmentLabels(EnvironmentLabels {
            environment: s("prod"),
            labels: BTreeMap::from([(s("region"), s("eu")), (s("tier"), s("prod"))]),
        }),
        Record::RolloutPolicy(RolloutPolicy {
            product: s("com.example:api"),
            products: vec![s("com.example:db")],
            waves: vec![
                Wave {
                    name: s("eu-canary"),
                    selector: Selector {
                        environments: BTreeSet::from([s("eu-1")]),
                        labels: BTreeMap::from([(s("tier"), s("canary"))]),
                    },
                    soak_ms: 1_800_000,
                    max_parallel: Some(2),
                    on_failure: OnFailure::Halt,
                },
                Wave {
                    name: s("prod"),
                    selector: Selector {
                        environments: BTreeSet::new(),
                        labels: BTreeMap::from([(s("tier"), s("prod"))]),
                    },
                    soak_ms: 3_600_000,
                    max_parallel: None,
                    on_failure: OnFailure::Recall,
                },
            ],
            yaml: s("product: com.example:api\n"),
            created_ms: T0 + 29,
            updated_ms: T0 + 30,
        }),
        Record::Rollout(Rollout {
            product: s("com.example:api"),
            version: v("2.0.0"),
            waves: BTreeMap::from([
                (
                    s("eu-canary"),
                    WaveProgress {
                        completed_at_ms: Some(T0 + 31),
                        soak_until_ms: Some(T0 + 31 + 1_800_000),
                        promoted: None,
                    },
                ),
                (
                    s("prod"),
                    WaveProgress {
                        completed_at_ms: None,
                        soak_until_ms: None,
                        promoted: Some(Promotion {
                            at_ms: T0 + 32,
                            actor: s("operator/admin"),
                        }),
                    },
                ),
            ]),
            halt: Some(RolloutHalt {
                at_ms: T0 + 33,
                cause: HaltCause::PlanFailed {
                    plan: s("p-40-0"),
                    entity: s(ENTITY),
                    wave: Some(s("prod")),
                },
                recalls: vec![s("r-41-0")],
            }),
            forgiven: BTreeSet::from([s("p-12-0")]),
        }),
        Record::CanaryJudging(CanaryJudging {
            canary: s("prod/web"),
            metrics: vec![
                JudgedMetric {
                    name: s("request-duration"),
                    interval_ms: 30_000,
                    source: MetricSource::RequestDuration,
                    judge: judge(Baseline::Primary, Direction::Increase, 147),
                },
                JudgedMetric {
                    name: s("request-success-rate"),
                    interval_ms: 60_000,
                    source: MetricSource::RequestSuccessRate,
                    judge: judge(Baseline::Fresh, Direction::Decrease, 10),
                },
                JudgedMetric {
                    name: s("shift"),
                    interval_ms: 90_000,
                    source: MetricSource::RequestDuration,
                    judge: judge(Baseline::Primary, Direction::Either, 330),
                },
            ],
            inconclusive_limit: Some(4),
            samples: vec![sample_window()],
            samples_step: 9,
            samples_ms: T0 + 35,
            inconclusive: 2,
            verdicts: vec![
                JudgeResult {
                    metric: s("request-duration"),
                    step: 9,
                    verdict: Verdict::Pass,
                    reason: s("canary 30 vs baseline 40"),
                },
                JudgeResult {
                    metric: s("request-success-rate"),
                    step: 9,
                    verdict: Verdict::Inconclusive,
                    reason: s("too few samples"),
                },
                JudgeResult {
                    metric: s("shift"),
                    step: 8,
                    verdict: Verdict::Fail,
                    reason: s("p 0.0001"),
                },
            ],
        }),
        Record::ActivityHead(Activity {
            entity: s(ENTITY),
            lines: 230,
            last_decision: Some(s("at target")),
            blocked_since_ms: Some(T0 + 24),
            blocked_candidate: Some(s("1.3.0")),
            last_recheck_ms: Some(T0 + 25),
        }),
        Record::ActivityLine(ActivityLine {
            entity: s(ENTITY),
            seq: 229,
            time_ms: T0 + 26,
            index: 231,
            kind: s("recheck"),
            message: s("re-checked after 4h blocked"),
        }),
        Record::PlanOutcome(PlanOutcome {
            id: s("p-42-0"),
            entity: s(ENTITY),
            issued_index: 42,
            kind: OutcomeKind::CanaryStep {
                canary: s("prod/web"),
                step: 6,
            },
            status: PlanStatus::Cancelled,
            from_version: Some(v("1.2.0")),
            to_version: Some(v("1.3.0")),
            failure_touched_workload: true,
            ended_ms: Some(T0 + 27),
        }),
        Record::FinishedPlan(plan("p-43-0", PlanKind::VersionChange)),
        Record::NeverHealthy(NeverHealthy {
            entity: s(ENTITY),
            since_ms: T0 + 28,
            failed_attempt: Some(FailedAttempt {
                plan: s("p-44-0"),
                version: v("1.3.0"),
                config_sha256: s("c0ffee"),
                secrets_revision: 5,
            }),
        }),
        Record::ClusterSettings(ClusterSettings {
            canary_config_tracking: false,
        }),
        Record::ApproverGroup(ApproverGroup {
            name: s("compliance"),
            members: BTreeSet::from([Identity::Operator(s("carl")), Identity::Token(s("ci"))]),
            updated_ms: T0 + 29,
        }),
        Record::ApprovalPolicy(ApprovalPolicy {
            scope: PolicyScope::Environment(s("prod")),
            spec: policy_spec(),
            set_ms: T0 + 30,
        }),
        Record::ChangeRequestApproval(ChangeRequestApproval {
            change_request: s("cr-9-0"),
            approvals: request_approvals(Approvers::Environment(s("prod"))),
        }),
        Record::WindowException(WindowException {
            id: s("wx-9"),
            scope: Scope::Environment(s("prod")),
            start_ms: T0 + 31,
            end_ms: T0 + 32,
            reason: s("INC-7"),
            status: ExceptionStatus::Approved {
                override_id: s("o-12"),
            },
            approvals: request_approvals(Approvers::Product(s("com.example:web"))),
            created_ms: T0 + 33,
            decided_by: Some(s("operator/ann")),
            closed_ms: Some(T0 + 34),
            message: s("approved"),
        }),
        Record::InstallationChannel(InstallationChannel {
            installation: s("prod/web-module"),
            channel: s("STABLE"),
            set_ms: T0 + 35,
        }),
        Record::ModuleChannels(ModuleChannels {
            module: s("web-module"),
            version: v("0.2.0"),
            channels: BTreeSet::from([s("STABLE"), s("BETA")]),
        }),
        Record::MetricTemplate(MetricTemplate {
            id: s("flagger/latency"),
            environment: s("flagger"),
            name: s("latency"),
            spec: MetricTemplateSpec {
                provider: metric_provider(),
                query: s("histogram_quantile(0.99, x{ns=\"{{ namespace }}\"}[{{ interval }}])"),
            },
            yaml: s("kind: MetricTemplate\n"),
            created_ms: T0 + 38,
            updated_ms: T0 + 39,
        }),
        Record::CanaryEvents(canary_events()),
        Record::RevokedCertificate(RevokedCertificate {
            serial: s("8f3a01"),
            reason: s("key compromised"),
            identity: Some(Identity::Agent(s("prod"))),
            not_after: Some(T0 + 45),
            revoked_at: T0 + 46,
            revoked_by: Identity::Operator(s("root")),
            revoked_index: 47,
        }),
        Record::ClusterLevel(ClusterLevel {
            level: FeatureLevel(3),
            set_at_ms: T0 + 48,
            set_index: 49,
        }),
        Record::AlertProvider(AlertProvider {
            id: s("flagger/on-call"),
            environment: s("flagger"),
            name: s("on-call"),
            spec: AlertProviderSpec {
                kind: AlertProviderKind::Slack,
                channel: s("on-call-alerts"),
                username: s("flagger-bot"),
                address: Some(s("https://hooks.slack.example/services/T/B/x")),
                secret_ref: Some(s("on-call-url")),
            },
            yaml: s("kind: AlertProvider\n"),
            created_ms: T0 + 50,
            updated_ms: T0 + 51,
        }),
    ]
}

/// A canary's events (issue 52 item 5): a repeated Warning and a Normal event, every field
/// distinct.
fn canary_events() -> CanaryEvents {
    CanaryEvents {
        canary: s("prod/podinfo"),
        events: VecDeque::from([
            CanaryEvent {
                time_ms: T0 + 42,
                kind: EventKind::Warning,
                reason: EventReason::Synced,
                message: s("Halt podinfo.prod advancement success rate 80.00% < 99%"),
                count: 3,
                first_time_ms: T0 + 40,
            },
            CanaryEvent {
                time_ms: T0 + 43,
                kind: EventKind::Normal,
                reason: EventReason::Synced,
                message: s("Advance podinfo.prod canary weight 10"),
                count: 1,
                first_time_ms: T0 + 41,
            },
        ]),
    }
}

fn request() -> Request {
    Request {
        command: Command::DeleteCanary { id: s("prod/web") },
        time_ms: T0 + 23,
        request_id: Some(s("admin:req-7")),
    }
}

fn log_id(term: u64, index: u64) -> raft_store::LogId {
    openraft::LogId::new(
        openraft::vote::leader_id_adv::CommittedLeaderId::new(term, 2),
        index,
    )
}

fn entry() -> Entry {
    Entry {
        log_id: log_id(3, 44),
        payload: EntryPayload::Normal(request()),
    }
}

/// Decodes a fixture and compares it with a sample; the error says how they differ.
type Check = Box<dyn Fn(&[u8]) -> Result<(), String>>;

/// One pinned value: its fixture's name, its encoding, and the check of a fixture against it.
struct Golden {
    /// File name in [`fixtures_dir`].
    file: String,
    /// `codec::encode` of the sample.
    bytes: Vec<u8>,
    /// Checks a fixture against the sample.
    check: Check,
    /// Traces the sample's serialization (for the nested-enum coverage).
    trace: Trace,
}

/// Traces one sample's serialization into a tracer.
type Trace = Box<dyn Fn(&mut serde_reflection::Tracer, &mut serde_reflection::Samples)>;

fn golden<T>(file: String, value: T, limit: Limit) -> Golden
where
    T: Serialize + DeserializeOwned + PartialEq + Debug + Clone + 'static,
{
    let bytes = codec::encode(&value);
    let traced = value.clone();
    let trace: Trace = Box::new(move |tracer, samples| {
        tracer
            .trace_value(samples, &traced)
            .expect("trace a sample");
    });
    let check: Check = Box::new(move |fixture: &[u8]| {
        let decoded: T = codec::decode_bounded(fixture, limit)
            .map_err(|e| format!("the fixture does not decode: {e}"))?;
        if decoded != value {
            return Err(format!(
                "the fixture decodes to\n{decoded:#?}\nnot to the sample\n{value:#?}"
            ));
        }
        if codec::encode(&decoded) != fixture {
            return Err("the fixture decodes to the sample, which encodes to other bytes".into());
        }
        Ok(())
    });
    Golden {
        file,
        bytes,
        check,
        trace,
    }
}

/// The variant's name as serde spells it (the key of its externally tagged JSON).
fn variant_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value).expect("samples encode as JSON") {
        serde_json::Value::String(unit) => unit,
        serde_json::Value::Object(map) if map.len() == 1 => map.keys().next().cloned().unwrap(),
        other => panic!("not an externally tagged enum: {other}"),
    }
}

/// The variant number bincode wrote first (after the format byte): a varint, one byte below 251.
fn leading_tag(bytes: &[u8]) -> u32 {
    assert_eq!(bytes[0], FORMAT_VERSION);
    assert!(bytes[1] < 251, "a multi-byte tag: extend leading_tag");
    u32::from(bytes[1])
}

fn goldens() -> Vec<Golden> {
    let mut out = Vec::new();
    for c in commands() {
        let file = format!("command-{:02}-{}.bin", c.tag(), variant_name(&c));
        out.push(golden(file, c, Limit::Command));
    }
    for r in records() {
        let file = format!("record-{:02}-{}.bin", r.tag(), variant_name(&r));
        out.push(golden(file, r, Limit::Snapshot));
    }
    out.push(golden(s("request.bin"), request(), Limit::Message));
    out.push(golden(s("entry-normal.bin"), entry(), Limit::Message));
    out.extend(nested_goldens());
    out
}

/// `<enum>-<tag>-<Variant>.bin` split into its three parts.
fn parts(file: &str) -> Option<(&str, &str, &str)> {
    let mut it = file.strip_suffix(".bin")?.splitn(3, '-');
    Some((it.next()?, it.next()?, it.next()?))
}

/// Another fixture of the same enum with the same tag or the same variant as `file`.
fn conflicting_fixture(file: &str) -> Option<String> {
    let (e, tag, variant) = parts(file)?;
    std::fs::read_dir(fixtures_dir())
        .ok()?
        .filter_map(|d| d.ok()?.file_name().into_string().ok())
        .find(|other| {
            other != file
                && parts(other).is_some_and(|(oe, ot, ov)| oe == e && (ot == tag || ov == variant))
        })
}

/// Writes `golden`'s fixture when blessing allows it (see the module documentation); says
/// what it did, or why it refused.
fn bless(golden: &Golden, path: &Path) -> Result<Option<&'static str>, String> {
    let what = match std::fs::read(path) {
        Ok(old) if old == golden.bytes => return Ok(None),
        Ok(old) if old.first() == Some(&FORMAT_VERSION) => {
            return Err(format!(
                "differs from its fixture of the current format version {FORMAT_VERSION}, \
                 which blessing never overwrites: bump codec::FORMAT_VERSION (its decoder \
                 refusing or migrating the old version), or undo the change"
            ))
        }
        Ok(_) => "rewrote (older format version)",
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(other) = conflicting_fixture(&golden.file) {
                return Err(format!(
                    "not a new variant: {other} exists, so a tag moved or a variant was \
                     renamed; undo that (blessing does not cover it)"
                ));
            }
            "wrote (new)"
        }
        Err(e) => return Err(e.to_string()),
    };
    std::fs::create_dir_all(fixtures_dir()).map_err(|e| e.to_string())?;
    std::fs::write(path, &golden.bytes).map_err(|e| e.to_string())?;
    Ok(Some(what))
}

#[test]
fn every_fixture_decodes_to_its_sample_and_encodes_back_to_the_same_bytes() {
    let blessing = std::env::var(BLESS_VAR).is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    for g in goldens() {
        let path = fixtures_dir().join(&g.file);
        if blessing {
            match bless(&g, &path) {
                Ok(Some(what)) => eprintln!("{what}: {}", g.file),
                Ok(None) => {}
                Err(e) => failures.push(format!("{}: {e}", g.file)),
            }
        }
        match std::fs::read(&path) {
            Err(e) => failures.push(format!(
                "{}: {e}. A newly added variant is blessed with {BLESS_VAR}=1 (see the module \
                 documentation); otherwise a tag moved or a variant was renamed: undo that",
                g.file
            )),
            Ok(fixture) => {
                if let Err(e) = (g.check)(&fixture) {
                    failures.push(format!("{}: {e}", g.file));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_fixture_has_a_sample() {
    let expected: BTreeSet<String> = goldens().into_iter().map(|g| g.file).collect();
    let mut orphans = Vec::new();
    for dirent in std::fs::read_dir(fixtures_dir()).unwrap() {
        let name = dirent.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".bin") && !expected.contains(&name) {
            orphans.push(name);
        }
    }
    assert!(
        orphans.is_empty(),
        "fixtures without a sample (a moved tag or a renamed variant?): {orphans:?}"
    );
}

/// The samples cover each tag once, named as the enums' tag lists name them (so serde's name
/// of each variant is the one the tags are looked up by).
#[test]
fn every_variant_has_one_sample() {
    let named = |tags: &[(u32, &str)]| -> Vec<(u32, String)> {
        tags.iter().map(|&(t, n)| (t, s(n))).collect()
    };
    let commands: Vec<(u32, String)> = commands()
        .iter()
        .map(|c| (c.tag(), variant_name(c)))
        .collect();
    assert_eq!(commands, named(Command::TAGS));
    let records: Vec<(u32, String)> = records()
        .iter()
        .map(|r| (r.tag(), variant_name(r)))
        .collect();
    assert_eq!(records, named(Record::TAGS));
}

#[test]
fn the_leading_varint_is_the_tag() {
    for c in commands() {
        assert_eq!(
            leading_tag(&codec::encode(&c)),
            c.tag(),
            "{}",
            variant_name(&c)
        );
    }
    for r in records() {
        assert_eq!(
            leading_tag(&codec::encode(&r)),
            r.tag(),
            "{}",
            variant_name(&r)
        );
    }
}

/// What `decode_bounded` refuses `bytes` with (the value must be malformed).
fn refusal<T: DeserializeOwned + Debug>(bytes: &[u8], limit: Limit) -> String {
    match codec::decode_bounded::<T>(bytes, limit) {
        Err(CodecError::Malformed(message)) => message,
        other => panic!("not refused as malformed: {other:?}"),
    }
}

#[test]
fn an_unknown_tag_is_refused_naming_the_enum_and_the_tag() {
    let unused = Command::TAGS.last().unwrap().0 + 1;
    let v = FORMAT_VERSION;
    assert_eq!(
        refusal::<Command>(&[v, unused as u8], Limit::Command),
        format!("unknown Command tag {unused}")
    );
    assert_eq!(
        refusal::<Command>(&[v, 97], Limit::Command),
        "unknown Command tag 97"
    );
    // Multi-byte varints: 300 (0xfb, u16 little-endian) and u32::MAX (0xfc, u32).
    assert_eq!(
        refusal::<Command>(&[v, 0xfb, 0x2c, 0x01], Limit::Command),
        "unknown Command tag 300"
    );
    assert_eq!(
        refusal::<Command>(&[v, 0xfc, 0xff, 0xff, 0xff, 0xff], Limit::Command),
        "unknown Command tag 4294967295"
    );
    assert_eq!(
        refusal::<Record>(&[v, 99, 0], Limit::Snapshot),
        "unknown Record tag 99"
    );
    let err = codec::decode_bounded::<Command>(&[v, 97], Limit::Command).unwrap_err();
    assert_eq!(err.to_string(), "malformed value: unknown Command tag 97");

    // Inside what the store and the network carry: a forwarded write, a log entry, the
    // records of a snapshot. `ExpireSuppressions` (35) has no fields, so its tag is one byte
    // followed by the request's time (0) and request id (none).
    let expire = Command::ExpireSuppressions.tag() as u8;
    let mut forwarded = codec::encode(&(Command::ExpireSuppressions, Some(s("r-1"))));
    assert_eq!(forwarded[1], expire);
    forwarded[1] = 97;
    assert_eq!(
        refusal::<(Command, Option<String>)>(&forwarded, Limit::Command),
        "unknown Command tag 97"
    );
    let mut entry = codec::encode(&Entry {
        log_id: log_id(3, 45),
        payload: EntryPayload::Normal(Request {
            command: Command::ExpireSuppressions,
            time_ms: 0,
            request_id: None,
        }),
    });
    let at = entry.len() - 3;
    assert_eq!(entry[at..], [expire, 0, 0]);
    entry[at] = 97;
    assert_eq!(
        refusal::<Entry>(&entry, Limit::Message),
        "unknown Command tag 97"
    );
    let channel = Record::Channel(Channel {
        name: s("CANARY"),
        description: String::new(),
        created_at_ms: 0,
    });
    let mut snapshot = codec::encode(&vec![channel]);
    assert_eq!(snapshot[1..3], [1, 5], "one record, tag 5");
    snapshot[2] = 99;
    assert_eq!(
        refusal::<Vec<Record>>(&snapshot, Limit::Snapshot),
        "unknown Record tag 99"
    );
}

/// The variant names an enum's serde derive declares, in declaration order: it passes them
/// to `deserialize_enum`, where this deserializer takes them and stops.
fn declared_variants<'de, T: serde::Deserialize<'de>>() -> Vec<&'static str> {
    use serde::de::{Error, Visitor};

    #[derive(Debug)]
    struct Probed(Vec<&'static str>);
    impl std::fmt::Display for Probed {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "probed {:?}", self.0)
        }
    }
    impl std::error::Error for Probed {}
    impl Error for Probed {
        fn custom<M: std::fmt::Display>(msg: M) -> Self {
            panic!("not an enum: {msg}")
        }
    }

    struct Probe;
    impl<'de> serde::Deserializer<'de> for Probe {
        type Error = Probed;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Probed> {
            panic!("not an enum")
        }
        fn deserialize_enum<V: Visitor<'de>>(
            self,
            _: &'static str,
            variants: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Probed> {
            Err(Probed(variants.to_vec()))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier
            ignored_any
        }
    }
    match T::deserialize(Probe) {
        Err(Probed(variants)) => variants,
        Ok(_) => unreachable!("the probe never yields a value"),
    }
}

/// A test CA certificate (the engine's own test CA), for `RegistryTls::ExtraCa`.
const TEST_CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBgzCCASmgAwIBAgIUPkslldVmKXBmg6tfS2VdhQu/YLMwCgYIKoZIzj0EAwIw\nFjEUMBIGA1UEAwwLaHViIHRlc3QgQ0EwIBcNMjYxMjAxMDkwMjIzWhgPMjEyNjEx\nMDcwOTAyMjNaMBYxFDASBgNVBAMMC2h1YiB0ZXN0IENBMFkwEwYHKoZIzj0CAQYI\nKoZIzj0DAQcDQgAEpZIvzp4DaI1GTvIi8UewpCJvYaFE1lT4wEXyACdIIs7BPj4L\n7QH1zuugJ2+bgcfSy2cptP4ThNZKSqtOIJinxaNTMFEwHQYDVR0OBBYEFMdDx4/K\nQvDdb2LOUURlN6coioOTMB8GA1UdIwQYMBaAFMdDx4/KQvDdb2LOUURlN6coioOT\nMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIgBkWenGtj4QPCg997\no9PL4/WyGFl9E1wkmU40/hz1SikCIQCuEjjOpIKCx+IlAQIkJhuV3qdfHV8x9wzH\nFVboxUhnYw==\n-----END CERTIFICATE-----\n";

/// Samples of the variants of nested enums the command and record samples do not use, one
/// fixture per enum (`nested-<Enum>.bin`, a list of values), so every variant's number is
/// pinned ([`every_variant_of_every_nested_enum_is_in_a_sample`]).
fn nested_goldens() -> Vec<Golden> {
    use hub_engine::artifact::CaBundle;
    use hub_engine::canary::{WebhookCall, WebhookPayload};
    use hub_engine::command::RefusedTaskReport;
    use hub_engine::module::Constraint as VariableConstraint;
    use hub_engine::CommandError;
    let rule = MatchRule {
        headers: BTreeMap::from([
            (s("x-a"), HeaderMatch::Prefix(s("beta"))),
            (s("x-b"), HeaderMatch::Regex(s("^c.*$"))),
        ]),
    };
    let call = WebhookCall {
        name: s("announce"),
        kind: WebhookType::Event,
        url: s("http://hooks.example/"),
        timeout_ms: 5_000,
        retries: 1,
        payload: WebhookPayload {
            name: s("web"),
            namespace: s("prod"),
            phase: s("Progressing"),
            checksum: s("rev-7"),
            metadata: BTreeMap::from([(s("eventType"), s("Normal"))]),
        },
    };
    let n = |name: &str| format!("nested-{name}.bin");
    vec![
        golden(
            n("Action"),
            vec![
                Action::Initialize { revision: s("r1") },
                Action::DeployCanary { revision: s("r2") },
                Action::SetRouting {
                    canary_weight: 100,
                    match_rules: vec![rule],
                },
                Action::RouteAllToPrimary,
                Action::PromoteCanary { revision: s("r3") },
                Action::ScaleCanaryToZero,
                Action::Alert {
                    severity: Severity::Error,
                    message: s("failed checks"),
                },
                Action::NotifyWebhook { call },
                Action::RestoreOriginal,
            ],
            Limit::Snapshot,
        ),
        golden(
            n("AlertTarget"),
            vec![AlertTarget::Url(s("https://chat.example/hook"))],
            Limit::Snapshot,
        ),
        golden(
            n("Availability"),
            vec![Availability::Unchecked {
                reason: s("not yet"),
            }],
            Limit::Snapshot,
        ),
        golden(
            n("CancelTarget"),
            vec![
                CancelTarget::Environment(s("prod")),
                CancelTarget::Entity(s("prod/helm/web")),
            ],
            Limit::Snapshot,
        ),
        golden(
            n("ChangeRequestStatus"),
            vec![
                ChangeRequestStatus::PendingApproval,
                ChangeRequestStatus::Rejected,
                ChangeRequestStatus::Cancelled,
                ChangeRequestStatus::Error,
            ],
            Limit::Snapshot,
        ),
        golden(
            n("CommandOutput"),
            vec![
                CommandOutput::Done,
                CommandOutput::EnvironmentCreated(s("staging")),
                CommandOutput::EnvironmentDeleted(s("old")),
                CommandOutput::EntityCreated(s("prod/helm/api")),
                CommandOutput::Evaluated {
                    issued: vec![s("p-9-0"), s("p-9-1")],
                },
                CommandOutput::TasksReported {
                    environment: s("prod"),
                    applied: 3,
                    refused: vec![RefusedTaskReport {
                        position: 1,
                        plan_id: s("p-8-0"),
                        task: s("deploy"),
                        error: CommandError::NotFound {
                            kind: s("plan"),
                            name: s("p-8-0"),
                        },
                    }],
                },
            ],
            Limit::Snapshot,
        ),
        golden(
            n("CommandError"),
            vec![
                CommandError::InvalidField {
                    field: s("spec.analysis.interval"),
                    reason: s("must be at least 1s"),
                },
                CommandError::AlreadyExists {
                    kind: s("environment"),
                    name: s("prod"),
                },
                CommandError::FailedPrecondition(s("environment prod still has entities")),
            ],
            Limit::Snapshot,
        ),
        // Variants added later get their own fixture: an existing one never changes.
        golden(
            n("CommandError.PermissionDenied"),
            vec![CommandError::PermissionDenied(s(
                "operator/bob may not SetSecret in prod: needs environment-operator on prod",
            ))],
            Limit::Snapshot,
        ),
        golden(
            n("CommandError.FeatureLevelTooLow"),
            vec![CommandError::FeatureLevelTooLow {
                cluster: FeatureLevel(1),
                needed: FeatureLevel(2),
                command: s("set_cluster_level"),
            }],
            Limit::Snapshot,
        ),
        golden(
            n("AuthMethod.Token"),
            vec![AuthMethod::Token],
            Limit::Snapshot,
        ),
        golden(
            n("Identity.Token"),
            vec![Identity::Token(s("dashboard"))],
            Limit::Snapshot,
        ),
        golden(
            n("Result"),
            vec![
                Ok(CommandOutput::Done),
                Err(CommandError::NotFound {
                    kind: s("canary"),
                    name: s("prod/web"),
                }),
            ],
            Limit::Snapshot,
        ),
        golden(
            n("ConditionStatus"),
            vec![ConditionStatus::True, ConditionStatus::False],
            Limit::Snapshot,
        ),
        golden(
            n("Constraint"),
            vec![
                VariableConstraint::None,
                VariableConstraint::OneOf(vec![s("small"), s("large")]),
            ],
            Limit::Snapshot,
        ),
        golden(
            n("EmergencyCommand"),
            vec![
                EmergencyCommand::Install {
                    version: v("1.2.3"),
                },
                EmergencyCommand::Uninstall,
                EmergencyCommand::EnforceConfig,
                EmergencyCommand::Restart,
            ],
            Limit::Snapshot,
        ),
        golden(
            n("EntityKind"),
            vec![EntityKind::TerraformModule],
            Limit::Snapshot,
        ),
        golden(n("Health"), vec![Health::Unknown], Limit::Snapshot),
        golden(
            n("WriteOutcome"),
            vec![WriteOutcome::Applied],
            Limit::Snapshot,
        ),
        golden(
            n("Identity"),
            vec![Identity::Operator(s("ivy"))],
            Limit::Snapshot,
        ),
        golden(n("Manual"), vec![Manual::Promote], Limit::Snapshot),
        golden(
            n("MetricSource"),
            vec![
                MetricSource::RequestSuccessRate,
                MetricSource::RequestDuration,
            ],
            Limit::Snapshot,
        ),
        golden(
            n("Phase"),
            vec![
                Phase::Initializing,
                Phase::Initialized,
                Phase::Waiting,
                Phase::WaitingPromotion,
                Phase::Promoting,
                Phase::Finalising,
                Phase::Succeeded,
                Phase::Failed,
                Phase::Terminating,
            ],
            Limit::Snapshot,
        ),
        golden(
            n("PlanKind"),
            vec![
                PlanKind::Install,
                PlanKind::ConfigChange,
                PlanKind::VersionChange,
                PlanKind::Uninstall,
                PlanKind::SecretsChange,
                PlanKind::RecallRollOff,
                PlanKind::Command {
                    command: EmergencyCommand::Restart,
                    actor: s("operator/alice"),
                },
            ],
            Limit::Snapshot,
        ),
        golden(
            n("PlanStatus"),
            vec![
                PlanStatus::Issued,
                PlanStatus::Running,
                PlanStatus::Succeeded,
                PlanStatus::Cancelled,
            ],
            Limit::Snapshot,
        ),
        golden(
            n("RegistryTls"),
            vec![RegistryTls::ExtraCa(
                CaBundle::parse(TEST_CA).expect("the test CA parses"),
            )],
            Limit::Snapshot,
        ),
        golden(
            n("Role"),
            vec![
                Role::Admin,
                Role::ProductEditor,
                Role::ModuleEditor,
                Role::Approver,
            ],
            Limit::Snapshot,
        ),
        golden(
            n("Severity"),
            vec![Severity::Info, Severity::Error],
            Limit::Snapshot,
        ),
        golden(
            n("StepWeights"),
            vec![StepWeights::Fixed(5)],
            Limit::Snapshot,
        ),
        golden(
            n("Strategy"),
            vec![
                Strategy::AbTesting {
                    iterations: 10,
                    match_rules: Vec::new(),
                },
                Strategy::BlueGreen { iterations: 4 },
            ],
            Limit::Snapshot,
        ),
        golden(
            n("SuppressionSource"),
            vec![
                SuppressionSource::Manual,
                SuppressionSource::EnvironmentThreshold,
            ],
            Limit::Snapshot,
        ),
        golden(
            n("SyncMode"),
            vec![SyncMode::Enabled, SyncMode::Disabled],
            Limit::Snapshot,
        ),
        golden(n("TaskState"), vec![TaskState::Pending], Limit::Snapshot),
        golden(
            n("TlsTrust"),
            vec![TlsTrust::SystemRoots, TlsTrust::InsecureSkipVerify],
            Limit::Snapshot,
        ),
        golden(
            n("Variable"),
            vec![Variable::StringPreset {
                options: s("size"),
                mapping: BTreeMap::from([(s("small"), s("1")), (s("large"), s("4"))]),
                description: Some(s("replicas by size")),
            }],
            Limit::Snapshot,
        ),
        golden(
            n("WebhookType"),
            vec![
                WebhookType::ConfirmRollout,
                WebhookType::PreRollout,
                WebhookType::ConfirmTrafficIncrease,
                WebhookType::ConfirmPromotion,
                WebhookType::PostRollout,
                WebhookType::Rollback,
                WebhookType::Event,
            ],
            Limit::Snapshot,
        ),
        golden(
            n("HaltCause"),
            vec![
                HaltCause::CanaryFailed {
                    canary: s("prod/web"),
                    entity: s(ENTITY),
                    wave: None,
                    since_ms: T0 + 34,
                },
                HaltCause::Operator {
                    actor: s("operator/ops"),
                    reason: s("error budget"),
                },
            ],
            Limit::Snapshot,
        ),
        // Issue 20: a canary step with a fresh baseline, appended to `PlanKind`.
        golden(
            s("nested-issue20-baseline.bin"),
            vec![PlanKind::CanaryStepWithBaseline {
                step: Box::new(CanaryStepSpec {
                    canary: s("prod/web"),
                    service: s("web-svc"),
                    port: 9899,
                    step: 9,
                    phase: Phase::WaitingPromotion,
                    primary: Some(revision("v2-aaaa", "1.1.0")),
                    canary_workload: Some(revision("v2-cccc", "1.3.0")),
                    canary_weight: 30,
                    match_routing: false,
                    match_rules: vec![],
                    restore_original: false,
                    metric_windows_ms: vec![30_000],
                }),
                baseline: Box::new(revision("v2-aaaa", "1.1.0")),
            }],
            Limit::Snapshot,
        ),
        // Issue 18: the kinds of a finished plan's outcome the record sample does not use.
        golden(
            s("nested-OutcomeKind.bin"),
            vec![
                OutcomeKind::Install,
                OutcomeKind::ConfigChange,
                OutcomeKind::VersionChange,
                OutcomeKind::Uninstall,
                OutcomeKind::SecretsChange,
                OutcomeKind::Rollback,
                OutcomeKind::RecallRollOff,
                OutcomeKind::Command,
            ],
            Limit::Snapshot,
        ),
        // Issue 20: variants appended to nested enums, in a fixture of their own so the
        // fixtures above keep their bytes.
        golden(
            s("nested-issue20.bin"),
            (
                vec![
                    Action::DeployBaseline { revision: s("r1") },
                    Action::ScaleBaselineToZero,
                ],
                vec![Phase::Halted],
            ),
            Limit::Snapshot,
        ),
        // Issue 55: the approval enums' variants no command or record sample uses.
        golden(
            s("nested-issue55.bin"),
            (
                vec![SemverPart::Patch, SemverPart::Major],
                vec![ExceptionStatus::Pending, ExceptionStatus::Rejected],
            ),
            Limit::Snapshot,
        ),
        // Issue 52 item 3: a canary metric rendered from a MetricTemplate (MetricSource's
        // new last variant) and the provider types the record sample does not use.
        golden(
            s("nested-issue52.bin"),
            (
                vec![MetricSource::Template {
                    template: s("flagger/latency"),
                    provider: metric_provider(),
                    query: s("histogram_quantile(0.99, x{ns=\"prod\"}[1m])"),
                }],
                vec![
                    ProviderKind::Influxdb,
                    ProviderKind::Datadog,
                    ProviderKind::ExternalMetrics,
                    ProviderKind::Stackdriver,
                    ProviderKind::Cloudwatch,
                    ProviderKind::Newrelic,
                    ProviderKind::Graphite,
                    ProviderKind::Dynatrace,
                    ProviderKind::Keptn,
                    ProviderKind::Splunk,
                ],
            ),
            Limit::Snapshot,
        ),
        // Issue 52 item 6: the alert provider types the record sample does not use.
        golden(
            s("nested-AlertProviderKind.bin"),
            vec![
                AlertProviderKind::Msteams,
                AlertProviderKind::Discord,
                AlertProviderKind::Rocket,
                AlertProviderKind::Gchat,
                AlertProviderKind::Generic,
            ],
            Limit::Snapshot,
        ),
    ]
}

/// Every enum nested in the log format (inside a `Command`, a `Record` or a `Request`), by
/// the name serde gives it, with its declared variants. A nested enum is positional: its
/// variant number is its place in the declaration.
fn nested_enums() -> BTreeMap<&'static str, Vec<&'static str>> {
    use hub_engine::module::Constraint as VariableConstraint;
    BTreeMap::from([
        ("Action", declared_variants::<Action>()),
        ("AlertTarget", declared_variants::<AlertTarget>()),
        ("Baseline", declared_variants::<Baseline>()),
        ("Direction", declared_variants::<Direction>()),
        ("Verdict", declared_variants::<Verdict>()),
        ("ArtifactLocation", declared_variants::<ArtifactLocation>()),
        ("Availability", declared_variants::<Availability>()),
        ("CancelTarget", declared_variants::<CancelTarget>()),
        (
            "ChangeRequestStatus",
            declared_variants::<ChangeRequestStatus>(),
        ),
        (
            "CommandError",
            declared_variants::<hub_engine::CommandError>(),
        ),
        ("CommandOutput", declared_variants::<CommandOutput>()),
        ("ConditionStatus", declared_variants::<ConditionStatus>()),
        ("Constraint", declared_variants::<VariableConstraint>()),
        ("EmergencyCommand", declared_variants::<EmergencyCommand>()),
        ("EntityKind", declared_variants::<EntityKind>()),
        ("Health", declared_variants::<Health>()),
        ("HaltCause", declared_variants::<HaltCause>()),
        ("OnFailure", declared_variants::<OnFailure>()),
        ("AuthMethod", declared_variants::<AuthMethod>()),
        ("WriteOutcome", declared_variants::<WriteOutcome>()),
        ("Identity", declared_variants::<Identity>()),
        ("HeaderMatch", declared_variants::<HeaderMatch>()),
        ("HubAccess", declared_variants::<HubAccess>()),
        ("Manual", declared_variants::<Manual>()),
        ("MetricSource", declared_variants::<MetricSource>()),
        ("Phase", declared_variants::<Phase>()),
        ("PlanKind", declared_variants::<PlanKind>()),
        ("PlanStatus", declared_variants::<PlanStatus>()),
        ("OutcomeKind", declared_variants::<OutcomeKind>()),
        ("RegistryTls", declared_variants::<RegistryTls>()),
        ("Result", declared_variants::<Result<(), ()>>()),
        ("Role", declared_variants::<Role>()),
        ("Scope", declared_variants::<Scope>()),
        ("Severity", declared_variants::<Severity>()),
        ("StepWeights", declared_variants::<StepWeights>()),
        ("Strategy", declared_variants::<Strategy>()),
        (
            "SuppressionSource",
            declared_variants::<SuppressionSource>(),
        ),
        ("SyncMode", declared_variants::<SyncMode>()),
        ("TaskState", declared_variants::<TaskState>()),
        ("TlsTrust", declared_variants::<TlsTrust>()),
        ("Variable", declared_variants::<Variable>()),
        ("WebhookType", declared_variants::<WebhookType>()),
        ("WindowChange", declared_variants::<WindowChange>()),
        ("PolicyScope", declared_variants::<PolicyScope>()),
        ("SemverPart", declared_variants::<SemverPart>()),
        ("Approvers", declared_variants::<Approvers>()),
        ("ExceptionStatus", declared_variants::<ExceptionStatus>()),
        ("ProviderKind", declared_variants::<ProviderKind>()),
        (
            "AlertProviderKind",
            declared_variants::<AlertProviderKind>(),
        ),
        ("EventKind", declared_variants::<EventKind>()),
        ("EventReason", declared_variants::<EventReason>()),
    ])
}

/// Golden bytes pin a nested enum's variant numbers only for the variants some sample uses:
/// swapping two variants no sample uses would go unseen. So every variant of every enum in the
/// format must appear in a sample; then any reordering moves a sampled variant, whose fixture
/// fails. The enums and the variants the samples use come from tracing their serialization
/// (`serde-reflection`); the declared variants from the derive ([`declared_variants`]).
#[test]
fn every_variant_of_every_nested_enum_is_in_a_sample() {
    use serde_reflection::{ContainerFormat, Samples, Tracer, TracerConfig};
    let mut tracer = Tracer::new(TracerConfig::default());
    let mut samples = Samples::new();
    for c in commands() {
        tracer
            .trace_value(&mut samples, &c)
            .expect("trace a command");
    }
    for r in records() {
        tracer
            .trace_value(&mut samples, &r)
            .expect("trace a record");
    }
    tracer
        .trace_value(&mut samples, &request())
        .expect("trace a request");
    for g in nested_goldens() {
        (g.trace)(&mut tracer, &mut samples);
    }
    // Unchecked: a field whose samples are all `None` has no known format, which is fine here.
    let registry = tracer.registry_unchecked();
    let declared = nested_enums();
    let mut failures = Vec::new();
    for (name, format) in &registry {
        let ContainerFormat::Enum(sampled) = format else {
            continue;
        };
        if matches!(name.as_str(), "Command" | "Record" | "RecordKey") {
            continue; // explicit tags, pinned by every_variant_has_one_sample
        }
        let Some(variants) = declared.get(name.as_str()) else {
            failures.push(format!("{name}: a nested enum missing from nested_enums()"));
            continue;
        };
        let used: BTreeSet<&str> = sampled.values().map(|v| v.name.as_str()).collect();
        let unused: Vec<&str> = variants
            .iter()
            .copied()
            .filter(|v| !used.contains(v))
            .collect();
        if !unused.is_empty() {
            failures.push(format!("{name}: no sample uses {unused:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

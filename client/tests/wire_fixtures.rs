//! The typed answers against the wire (issue 54): every answer reads its fixture in
//! `node/tests/fixtures/query-wire/` (the bytes the node's `json!` views wrote) and writes it
//! back unchanged, so a field renamed, reordered, dropped or added fails here. Answers with a
//! field the node writes only sometimes also round-trip a value with that field set.

use std::collections::BTreeMap;
use std::path::PathBuf;

use hub_client::answer::{
    ActivityAnswer, ApprovalPoliciesAnswer, ApproverGroupsAnswer, AuditAnswer, CanariesAnswer,
    CanaryActionView, CanaryAddressesView, CanaryConditionView, CanaryEventView, CanaryJudgesView,
    CanaryObservationView, CanarySampleView, CanaryStatusBlock, CanaryTargetView, CanaryView,
    ChangeRequestView, ChangeRequestsAnswer, ChannelsAnswer, ClusterSettingsAnswer,
    CommittedWeightView, EntityView, EnvironmentLabelsAnswer, EnvironmentSettingsView, Explanation,
    GetActivity, GetCanary, GetEntity, GetEnvironmentSettings, GetModule, GetModuleInstallation,
    GetRolloutPolicy, GetRolloutStatus, IgnoredFieldView, JudgedMetricView, ListAudit,
    ListCanaries, ListChannels, ListEnvironmentLabels, ListModuleInstallations, ListModules,
    ListProducts, ListRecalls, ListReleases, ListRoleBindings, ListRolloutPolicies, ListTokens,
    MetricTemplateView, MetricTemplatesAnswer, MetricWindowView, ModuleDryRun, ModuleDryRunAnswer,
    ModuleInstallationDetail, ModuleInstallationsAnswer, ModuleView, ModulesAnswer, PlanView,
    PlansAnswer, ProductsAnswer, RecallsAnswer, ReleasesAnswer, ResolvedEntity,
    RevokedCertificatesAnswer, RoleBindingsAnswer, RolloutPoliciesAnswer, RolloutPolicyView,
    RolloutStatusView, SuppressionsAnswer, TokensAnswer, Typed, VerdictView, WaveView,
    WindowExceptionView, WindowExceptionsAnswer,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../node/tests/fixtures/query-wire")
        .join(format!("{name}.json"))
}

/// Reads fixture `name` as `T` and writes it back as the node does (pretty, one newline).
fn round_trip<T: Serialize + DeserializeOwned>(name: &str) {
    let path = fixture(name);
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let typed: T = serde_json::from_str(&want).unwrap_or_else(|e| panic!("{name}: {e}"));
    let got = format!("{}\n", serde_json::to_string_pretty(&typed).expect("JSON"));
    assert_eq!(got, want, "{name}");
}

#[test]
fn typed_answers_read_and_write_their_fixtures() {
    round_trip::<ResolvedEntity>("resolve_entity");
    round_trip::<PlanView>("plan");
    round_trip::<PlansAnswer>("plans");
    round_trip::<PlansAnswer>("plans_active_of_entity");
    round_trip::<Explanation>("explain");
    round_trip::<ClusterSettingsAnswer>("cluster_settings");
    round_trip::<ChangeRequestView>("change_request");
    round_trip::<ChangeRequestView>("change_request_under_policy");
    round_trip::<ChangeRequestsAnswer>("change_requests");
    round_trip::<SuppressionsAnswer>("suppressions");
    round_trip::<ApproverGroupsAnswer>("approver_groups");
    round_trip::<ApprovalPoliciesAnswer>("approval_policies");
    round_trip::<WindowExceptionsAnswer>("window_exceptions");
    round_trip::<WindowExceptionView>("window_exception");
    round_trip::<MetricTemplatesAnswer>("metric_templates");
    round_trip::<MetricTemplateView>("metric_template");
    round_trip::<RevokedCertificatesAnswer>("revoked_certificates");
    round_trip::<ActivityAnswer>("activity");
    round_trip::<AuditAnswer>("audit");
    round_trip::<CanariesAnswer>("canaries");
    round_trip::<CanaryView>("canary");
    round_trip::<ChannelsAnswer>("channels");
    round_trip::<EntityView>("entity");
    round_trip::<EnvironmentLabelsAnswer>("environment_labels");
    round_trip::<EnvironmentSettingsView>("environment_settings");
    round_trip::<ModuleView>("module");
    round_trip::<ModuleDryRunAnswer>("module_dry_run");
    round_trip::<ModuleInstallationDetail>("module_installation");
    round_trip::<ModuleInstallationDetail>("module_installation_under_policy");
    round_trip::<ModuleInstallationsAnswer>("module_installations");
    round_trip::<ModulesAnswer>("modules");
    round_trip::<ProductsAnswer>("products");
    round_trip::<RecallsAnswer>("recalls");
    round_trip::<ReleasesAnswer>("releases");
    round_trip::<RoleBindingsAnswer>("role_bindings");
    round_trip::<RolloutPoliciesAnswer>("rollout_policies");
    round_trip::<RolloutPolicyView>("rollout_policy");
    round_trip::<RolloutStatusView>("rollout_status");
    round_trip::<TokensAnswer>("tokens");
}

/// `value` survives serialize → deserialize, and its keys are written sorted, as the node's
/// `json!` views write them (a `serde_json::Value` map is sorted).
fn same_after_round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: &T) {
    let text = serde_json::to_string(value).expect("JSON");
    let back: T = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(&back, value, "{text}");
    let sorted =
        serde_json::to_string(&serde_json::to_value(value).expect("a value")).expect("JSON");
    assert_eq!(text, sorted, "keys out of order");
}

/// A canary's full view with every optional field set, nothing `null`.
fn full_canary() -> CanaryView {
    let time = "2025-10-09T08:53:35Z".to_string();
    CanaryView {
        addresses: Some(CanaryAddressesView {
            canary: "127.0.0.3:9898".into(),
            primary: "127.0.0.2:9898".into(),
            service: "127.0.0.1:9898".into(),
        }),
        actions: Some(vec![CanaryActionView {
            action: "weights 90/10".into(),
            step: 3,
        }]),
        canary_revision: Some(Some("rev-canary".into())),
        committed_weights: Some(vec![CommittedWeightView {
            canary_weight: 10,
            step: 4,
        }]),
        entity: "eid:test:helmChart:podinfo".into(),
        history: Some(vec![CanarySampleView {
            canary_weight: 10,
            metrics: BTreeMap::from([
                ("request-duration".to_string(), Some(412.5)),
                ("request-success-rate".to_string(), None),
            ]),
            phase: "Progressing".into(),
            step: 4,
            time: time.clone(),
            time_ms: 1_760_000_015_000,
        }]),
        id: "test/podinfo".into(),
        last_transition: time.clone(),
        name: "podinfo".into(),
        namespace: "test".into(),
        next_tick: Some(Some(time.clone())),
        observation: Some(Some(CanaryObservationView {
            applied_step: 4,
            canary_ready_percent: 100,
            canary_revision: Some("rev-canary".into()),
            observed: time.clone(),
            primary_ready_percent: 50,
            primary_revision: None,
            windows: vec![MetricWindowView {
                interval_ms: 60_000,
                p99_ms: Some(12.25),
                requests: 600,
                success_rate: Some(99.5),
            }],
        })),
        primary_revision: Some(Some("rev-primary".into())),
        promoted: false,
        queued_steps: Some(1),
        status: "Progressing".into(),
        status_block: Some(CanaryStatusBlock {
            canary_weight: 10,
            conditions: vec![CanaryConditionView {
                last_transition_time: time.clone(),
                last_update_time: time.clone(),
                message: "Canary analysis in progress".into(),
                reason: "Progressing".into(),
                status: "Unknown".into(),
                kind: "Promoted".into(),
            }],
            events: vec![CanaryEventView {
                count: 2,
                first_timestamp: time.clone(),
                last_timestamp: time.clone(),
                message: "Advance podinfo.test canary weight 10".into(),
                reason: "Synced".into(),
                kind: "Normal".into(),
            }],
            failed_checks: 1,
            ignored_fields: vec![IgnoredFieldView {
                path: "spec.service.gateways".into(),
                reason: "no gateways".into(),
            }],
            iterations: 2,
            judges: Some(CanaryJudgesView {
                inconclusive: 1,
                inconclusive_limit: Some(3),
                metrics: vec![JudgedMetricView {
                    baseline: "primary".into(),
                    confidence: 0.95,
                    direction: "increase".into(),
                    effect_size: 0.3,
                    interval_ms: 60_000,
                    name: "request-duration".into(),
                }],
                samples_step: 4,
                samples_time: Some(time.clone()),
                verdicts: vec![VerdictView {
                    metric: "request-duration".into(),
                    reason: "no shift".into(),
                    step: 4,
                    verdict: "pass".into(),
                }],
            }),
            last_applied_spec: Some("rev-canary".into()),
            last_promoted_spec: Some("rev-primary".into()),
            phase: "Progressing".into(),
        }),
        step: Some(4),
        target: Some(Some(CanaryTargetView {
            revision: "rev-canary".into(),
            version: "1.1.0".into(),
        })),
        weight: 10,
        yaml: Some("apiVersion: flagger.app/v1beta1\nkind: Canary\n".into()),
    }
}

#[test]
fn a_full_canary_with_every_optional_field_round_trips() {
    let full = full_canary();
    same_after_round_trip(&full);
    // The full view's nullable fields, present as `null`, stay present.
    let nulls = CanaryView {
        canary_revision: Some(None),
        next_tick: Some(None),
        observation: Some(None),
        primary_revision: Some(None),
        target: Some(None),
        ..full.clone()
    };
    same_after_round_trip(&nulls);
    let text = serde_json::to_string(&nulls).expect("JSON");
    assert!(text.contains(r#""target":null"#), "{text}");
    // A listing row leaves the full view's fields out.
    let row = CanaryView {
        actions: None,
        canary_revision: None,
        committed_weights: None,
        history: None,
        next_tick: None,
        observation: None,
        primary_revision: None,
        queued_steps: None,
        status_block: None,
        step: None,
        target: None,
        yaml: None,
        ..full
    };
    same_after_round_trip(&row);
    let text = serde_json::to_string(&row).expect("JSON");
    assert!(!text.contains("target") && !text.contains("yaml"), "{text}");
}

#[test]
fn a_status_block_with_judges_round_trips() {
    let block = full_canary().status_block.expect("a status block");
    assert!(block.judges.is_some());
    same_after_round_trip(&block);
    let without = CanaryStatusBlock {
        judges: None,
        ..block
    };
    same_after_round_trip(&without);
    let text = serde_json::to_string(&without).expect("JSON");
    assert!(!text.contains("judges"), "{text}");
}

#[test]
fn a_rollout_policy_with_its_yaml_round_trips() {
    let policy = RolloutPolicyView {
        product: "com.example:web".into(),
        products: vec!["com.example:backend".into()],
        updated: "2025-10-09T08:53:34Z".into(),
        waves: vec![WaveView {
            environments: vec!["prod".into()],
            labels: BTreeMap::from([("tier".to_string(), "gold".to_string())]),
            max_parallel: Some(2),
            name: "first".into(),
            on_failure: "halt".into(),
            soak_ms: 1_800_000,
        }],
        yaml: Some("product: com.example:web\n".into()),
    };
    same_after_round_trip(&policy);
    let listed = RolloutPolicyView {
        yaml: None,
        ..policy
    };
    same_after_round_trip(&listed);
    let text = serde_json::to_string(&listed).expect("JSON");
    assert!(!text.contains("yaml"), "{text}");
}

/// Each typed query travels as the query the node's `query_wire` test asks for its fixture.
#[test]
fn typed_queries_travel_as_their_queries() {
    fn wire<T: Typed>(typed: T) -> serde_json::Value {
        serde_json::to_value(typed.query()).expect("JSON")
    }
    let text = |t: &str| serde_json::from_str::<serde_json::Value>(t).expect("JSON");
    let cases = [
        (
            wire(GetEntity("prod/web".into())),
            r#"{"query":"entity","entity":"prod/web"}"#,
        ),
        (
            wire(GetActivity("prod/web".into())),
            r#"{"query":"activity","entity":"prod/web"}"#,
        ),
        (wire(ListProducts), r#"{"query":"products"}"#),
        (
            wire(ListReleases {
                product: Some("com.example:web".into()),
            }),
            r#"{"query":"releases","product":"com.example:web"}"#,
        ),
        (wire(ListChannels), r#"{"query":"channels"}"#),
        (wire(ListRecalls), r#"{"query":"recalls"}"#),
        (
            wire(GetEnvironmentSettings("prod".into())),
            r#"{"query":"environment_settings","environment":"prod"}"#,
        ),
        (
            wire(ListAudit {
                limit: Some(5),
                actor: Some("operator/admin".into()),
                environment: Some("prod".into()),
                kind: Some("PutSecret".into()),
                since_ms: Some(1),
            }),
            r#"{"query":"audit","limit":5,"actor":"operator/admin","environment":"prod",
                "kind":"PutSecret","since_ms":1}"#,
        ),
        (wire(ListModules), r#"{"query":"modules"}"#),
        (
            wire(GetModule {
                name: "helm-chart-entity-module".into(),
                version: Some("0.1.0".into()),
            }),
            r#"{"query":"module","name":"helm-chart-entity-module","version":"0.1.0"}"#,
        ),
        (
            wire(ModuleDryRun {
                file_name: Some("m.yml".into()),
                yaml: "name: m\n".into(),
            }),
            r#"{"query":"module_dry_run","file_name":"m.yml","yaml":"name: m\n"}"#,
        ),
        (
            wire(ListModuleInstallations {
                environment: Some("test".into()),
                module: Some("m".into()),
            }),
            r#"{"query":"module_installations","environment":"test","module":"m"}"#,
        ),
        (
            wire(GetModuleInstallation("test/m".into())),
            r#"{"query":"module_installation","id":"test/m"}"#,
        ),
        (
            wire(ListCanaries {
                environment: Some("test".into()),
            }),
            r#"{"query":"canaries","environment":"test"}"#,
        ),
        (
            wire(GetCanary("test/podinfo".into())),
            r#"{"query":"canary","id":"test/podinfo"}"#,
        ),
        (
            wire(ListEnvironmentLabels),
            r#"{"query":"environment_labels"}"#,
        ),
        (wire(ListRolloutPolicies), r#"{"query":"rollout_policies"}"#),
        (
            wire(GetRolloutPolicy("com.example:web".into())),
            r#"{"query":"rollout_policy","product":"com.example:web"}"#,
        ),
        (
            wire(GetRolloutStatus {
                product: "com.example:web".into(),
                version: "1.1.0".into(),
            }),
            r#"{"query":"rollout_status","product":"com.example:web","version":"1.1.0"}"#,
        ),
        (wire(ListRoleBindings), r#"{"query":"role_bindings"}"#),
        (wire(ListTokens), r#"{"query":"tokens"}"#),
    ];
    for (got, want) in cases {
        assert_eq!(got, text(want));
    }
}

//! The JSON wire format of every query's answer, pinned: every key, its order and its value (issue 54).
//!
//! One state with a little of everything (environments, an entity with a plan, products and
//! releases, a suppression, a module installation with a change request, a canary, a
//! rollout policy, role bindings, a token, audit rows) answers every query kind; each answer
//! is compared with its fixture in `tests/fixtures/query-wire/`. The fixtures were written by
//! the `json!` views before answers were typed, so a typed answer that reorders, renames,
//! drops or adds a field fails here: older `hubctl` binaries, the dashboard and scripts read
//! these bytes.
//!
//! Blessing (only for a deliberate change of the wire, which older clients then see):
//! `HUB_BLESS_FIXTURES=1 cargo test -p hub-node --test query_wire` writes missing fixtures;
//! a fixture that exists is never overwritten: delete it first, and say why in the commit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use hub_engine::command::TokenRole;
use hub_engine::role::Role;
use hub_engine::suppression::Scope;
use hub_engine::token::TokenSecret;
use hub_engine::{Command, CommandOutput, EntityKind, Request, State};
use hub_node::query::{answer, answer_shared, parse, Query};
use hub_tls::Identity;

/// The entry times: a fixed clock, one second per entry.
const T0: i64 = 1_760_000_000_000;

struct Scenario {
    state: State,
    index: u64,
}

impl Scenario {
    fn apply_as(&mut self, actor: Identity, command: Command) -> CommandOutput {
        self.index += 1;
        let request = Request {
            command: Command::As {
                actor,
                command: Box::new(command),
            },
            time_ms: T0 + 1_000 * self.index as i64,
            request_id: None,
        };
        let applied = self.state.apply(&request, self.index);
        applied
            .result
            .unwrap_or_else(|e| panic!("entry {}: {e}", self.index))
    }

    fn ok(&mut self, command: Command) -> CommandOutput {
        self.apply_as(Identity::Operator("admin".into()), command)
    }
}

fn manifest(product: &str, version: &str) -> String {
    let (group, name) = product.split_once(':').expect("group:name");
    format!(
        "product-group: {group}\nproduct-name: {name}\nproduct-version: {version}\nartifacts:\n  \
         - uri: {name}/{name}-{version}.tgz\n    sha256: {}\n",
        "3f7a9c0d5e1b2a4c6d8e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c"
    )
}

fn engine_fixture(path: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/tests/fixtures")
        .join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const POLICY: &str = "\
product: com.example:web
waves:
  - name: first
    selector: {environments: [prod]}
    soak: 30m
    onFailure: halt
";

/// The state every query is asked of.
fn scenario() -> Scenario {
    let mut s = Scenario {
        state: State::new(),
        index: 0,
    };
    // The first admin binds itself (the bootstrap rule).
    s.ok(Command::BindRole {
        identity: Identity::Operator("admin".into()),
        role: Role::Admin,
        environments: BTreeSet::new(),
        products: BTreeSet::new(),
    });
    for env in ["prod", "test"] {
        s.ok(Command::CreateEnvironment {
            name: env.into(),
            description: format!("the {env} environment"),
        });
    }
    for product in [
        "com.example:web",
        "com.example:podinfo",
        "com.example:backend-service",
    ] {
        s.ok(Command::CreateProduct {
            product_id: product.into(),
            description: String::new(),
        });
    }
    for version in ["1.0.0", "1.1.0"] {
        s.ok(Command::PublishRelease {
            manifest: manifest("com.example:web", version),
        });
    }
    s.ok(Command::PublishRelease {
        manifest: manifest("com.example:podinfo", "1.0.0"),
    });
    s.ok(Command::CreateEntity {
        environment: "prod".into(),
        kind: EntityKind::HelmChart,
        name: "web".into(),
        product_id: "com.example:web".into(),
        k8s_namespace: Some("web".into()),
        account_id: None,
        release_channel: None,
    });
    s.ok(Command::CreateEntity {
        environment: "test".into(),
        kind: EntityKind::HelmChart,
        name: "podinfo".into(),
        product_id: "com.example:podinfo".into(),
        k8s_namespace: Some("test".into()),
        account_id: None,
        release_channel: None,
    });
    // The leader's evaluation issues the entity's first plan.
    s.apply_as(
        Identity::Node(1),
        Command::Evaluate {
            entities: vec!["eid:prod:helmChart:web".into()],
            artifacts: vec![],
        },
    );
    s.ok(Command::CreateSuppression {
        scope: Scope::Environment("test".into()),
        start_ms: None,
        end_ms: T0 + 86_400_000,
        reason: "freeze".into(),
        cancel_active_plans: false,
        actor: "operator/admin".into(),
    });
    s.ok(Command::ApplyRolloutPolicy {
        yaml: POLICY.into(),
    });
    s.ok(Command::ApplyCanary {
        environment: Some("test".into()),
        yaml: engine_fixture("canary/valid/flagger-podinfo.yml"),
    });
    s.ok(Command::PublishModule {
        file_name: None,
        yaml: engine_fixture("modules/valid/helm-chart-entity-module.yml"),
    });
    s.ok(Command::InstallModule {
        environment: "test".into(),
        module: "helm-chart-entity-module".into(),
        version: None,
        variables: [("myNamespace".to_string(), "apps".to_string())].into(),
        actor: "operator/admin".into(),
    });
    s.ok(Command::PublishModule {
        file_name: None,
        yaml: engine_fixture("modules/valid/helm-chart-entity-module.yml")
            .replace("defaultValue: default", "defaultValue: other"),
    });
    s.ok(Command::BindRole {
        identity: Identity::Operator("vic".into()),
        role: Role::Viewer,
        environments: BTreeSet::new(),
        products: BTreeSet::new(),
    });
    s.ok(Command::CreateToken {
        name: "ci".into(),
        hash: TokenSecret::from_bytes([7; 32]).hash(),
        ttl_ms: Some(86_400_000),
        roles: vec![TokenRole {
            role: Role::Viewer,
            environments: BTreeSet::new(),
            products: BTreeSet::new(),
        }],
    });
    s
}

/// A state with issue 55's approvals: an approver group, an environment policy requiring
/// one approver and one member of the group, a change request opened under it and a
/// window-exception request with one of the two approvals it needs; and a MetricTemplate
/// (issue 52).
fn approval_scenario() -> Scenario {
    use hub_engine::approval::{ApprovalPolicySpec, GroupRequirement, PolicyScope};
    let mut s = Scenario {
        state: State::new(),
        index: 0,
    };
    s.ok(Command::BindRole {
        identity: Identity::Operator("admin".into()),
        role: Role::Admin,
        environments: BTreeSet::new(),
        products: BTreeSet::new(),
    });
    s.ok(Command::CreateEnvironment {
        name: "prod".into(),
        description: String::new(),
    });
    s.ok(Command::CreateProduct {
        product_id: "com.example:backend-service".into(),
        description: String::new(),
    });
    for who in ["alice", "bob"] {
        s.ok(Command::BindRole {
            identity: Identity::Operator(who.into()),
            role: Role::Approver,
            environments: ["prod".to_string()].into(),
            products: BTreeSet::new(),
        });
    }
    s.ok(Command::SetApproverGroup {
        name: "compliance".into(),
        members: [Identity::Operator("bob".into())].into(),
    });
    s.ok(Command::SetApprovalPolicy {
        scope: PolicyScope::Environment("prod".into()),
        policy: Some(ApprovalPolicySpec {
            required_groups: vec![GroupRequirement {
                group: "compliance".into(),
                count: 1,
            }],
            expire_after_ms: Some(86_400_000),
            ..ApprovalPolicySpec::default()
        }),
    });
    s.ok(Command::PublishModule {
        file_name: None,
        yaml: engine_fixture("modules/valid/helm-chart-entity-module.yml"),
    });
    s.ok(Command::InstallModule {
        environment: "prod".into(),
        module: "helm-chart-entity-module".into(),
        version: None,
        variables: BTreeMap::new(),
        actor: "operator/admin".into(),
    });
    s.ok(Command::PublishModule {
        file_name: None,
        yaml: engine_fixture("modules/valid/helm-chart-entity-module.yml")
            .replace("defaultValue: default", "defaultValue: other"),
    });
    s.apply_as(
        Identity::Operator("alice".into()),
        Command::RequestWindowException {
            scope: Scope::Environment("prod".into()),
            start_ms: T0,
            end_ms: T0 + 86_400_000,
            reason: "hotfix".into(),
            actor: String::new(),
        },
    );
    let wx = s
        .state
        .window_exceptions()
        .next()
        .map(|w| w.id.clone())
        .expect("a window-exception request");
    s.apply_as(
        Identity::Operator("bob".into()),
        Command::ApproveWindowException {
            id: wx,
            actor: String::new(),
        },
    );
    s.ok(Command::ApplyMetricTemplate {
        environment: Some("prod".into()),
        yaml: std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/flagger/metric-templates/linkerd-tutorial-latency.yaml"),
        )
        .expect("a Flagger MetricTemplate fixture")
        .replace("namespace: test", "namespace: prod"),
    });
    s.ok(Command::RevokeCertificate {
        serial: "0B:AD:C0:DE".into(),
        reason: "laptop stolen".into(),
        identity: Some("operator/bob".into()),
        not_after: Some(T0 + 90 * 86_400_000),
    });
    s.ok(Command::RevokeCertificate {
        serial: "7f".into(),
        reason: "decommissioned".into(),
        identity: None,
        not_after: None,
    });
    s
}

/// Issue 55's query kinds and a change request under a policy, asked of
/// [`approval_scenario`] (`{wx}` and `{cr}` are its request and change request).
const APPROVAL_QUERIES: &[(&str, &str)] = &[
    (
        "revoked_certificates",
        r#"{"query":"revoked_certificates"}"#,
    ),
    ("approver_groups", r#"{"query":"approver_groups"}"#),
    ("approval_policies", r#"{"query":"approval_policies"}"#),
    (
        "window_exceptions",
        r#"{"query":"window_exceptions","environment":"prod","open":true}"#,
    ),
    (
        "window_exception",
        r#"{"query":"window_exception","id":"{wx}"}"#,
    ),
    (
        "change_request_under_policy",
        r#"{"query":"change_request","id":"{cr}"}"#,
    ),
    (
        "metric_templates",
        r#"{"query":"metric_templates","environment":"prod"}"#,
    ),
    (
        "metric_template",
        r#"{"query":"metric_template","id":"prod/latency"}"#,
    ),
    (
        "module_installation_under_policy",
        r#"{"query":"module_installation","id":"prod/helm-chart-entity-module"}"#,
    ),
];

/// Every query kind, by fixture name, as a client sends it (`{plan}` and `{cr}` are the
/// scenario's first plan and change request).
const QUERIES: &[(&str, &str)] = &[
    ("plan", r#"{"query":"plan","id":"{plan}"}"#),
    (
        "change_request",
        r#"{"query":"change_request","id":"{cr}"}"#,
    ),
    (
        "module_dry_run",
        r#"{"query":"module_dry_run","file_name":"m.yml","yaml":"name: m\nentities: []\n"}"#,
    ),
    (
        "resolve_entity",
        r#"{"query":"resolve_entity","entity":"prod/web"}"#,
    ),
    ("entity", r#"{"query":"entity","entity":"prod/web"}"#),
    ("explain", r#"{"query":"explain","entity":"prod/web"}"#),
    ("activity", r#"{"query":"activity","entity":"prod/web"}"#),
    ("plans", r#"{"query":"plans"}"#),
    (
        "plans_active_of_entity",
        r#"{"query":"plans","entity":"prod/web","active":true}"#,
    ),
    ("products", r#"{"query":"products"}"#),
    (
        "releases",
        r#"{"query":"releases","product":"com.example:web"}"#,
    ),
    ("channels", r#"{"query":"channels"}"#),
    ("recalls", r#"{"query":"recalls"}"#),
    ("suppressions", r#"{"query":"suppressions"}"#),
    (
        "environment_settings",
        r#"{"query":"environment_settings","environment":"prod"}"#,
    ),
    ("audit", r#"{"query":"audit","limit":5}"#),
    ("modules", r#"{"query":"modules"}"#),
    (
        "module",
        r#"{"query":"module","name":"helm-chart-entity-module"}"#,
    ),
    (
        "module_installations",
        r#"{"query":"module_installations"}"#,
    ),
    (
        "module_installation",
        r#"{"query":"module_installation","id":"test/helm-chart-entity-module"}"#,
    ),
    ("change_requests", r#"{"query":"change_requests"}"#),
    ("canaries", r#"{"query":"canaries"}"#),
    ("canary", r#"{"query":"canary","id":"test/podinfo"}"#),
    ("environment_labels", r#"{"query":"environment_labels"}"#),
    ("rollout_policies", r#"{"query":"rollout_policies"}"#),
    (
        "rollout_policy",
        r#"{"query":"rollout_policy","product":"com.example:web"}"#,
    ),
    (
        "rollout_status",
        r#"{"query":"rollout_status","product":"com.example:web","version":"1.1.0"}"#,
    ),
    ("role_bindings", r#"{"query":"role_bindings"}"#),
    ("tokens", r#"{"query":"tokens"}"#),
    ("cluster_settings", r#"{"query":"cluster_settings"}"#),
];

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/query-wire")
}

#[test]
fn every_answer_keeps_its_wire_bytes() {
    check_answers(&scenario(), QUERIES);
}

#[test]
fn every_approval_answer_keeps_its_wire_bytes() {
    check_answers(&approval_scenario(), APPROVAL_QUERIES);
}

/// Asks `s` each of `queries` and compares each answer with its fixture.
fn check_answers(s: &Scenario, queries: &[(&str, &str)]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let identity = raft_store::NodeIdentity {
        node_id: 1,
        cluster_id: "query-wire".into(),
    };
    let (_store, _log, sm) = raft_store::open(dir.path(), &identity).expect("store");
    let history = sm.history();
    let now = T0 + 1_000 * (s.index as i64 + 1);
    let bless = std::env::var("HUB_BLESS_FIXTURES").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    let first = |ids: Vec<String>| ids.into_iter().next().unwrap_or_default();
    let plan = first(s.state.plans().map(|p| p.id.clone()).collect());
    let cr = first(s.state.change_requests().map(|c| c.id.clone()).collect());
    let wx = first(s.state.window_exceptions().map(|w| w.id.clone()).collect());
    for (name, text) in queries {
        let text = text
            .replace("{plan}", &plan)
            .replace("{cr}", &cr)
            .replace("{wx}", &wx);
        let query: Query =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {text}: {e}"));
        let value = match query {
            Query::ModuleDryRun { .. } => {
                let parsed = parse(&query);
                answer_shared(&sm.shared(), &history, &query, parsed, now, None).map(|(v, _)| v)
            }
            _ => answer(&s.state, &history, &query, now, None),
        }
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = format!("{}\n", serde_json::to_string_pretty(&value).expect("JSON"));
        let path = fixture_dir().join(format!("{name}.json"));
        match std::fs::read_to_string(&path) {
            Ok(want) if want == got => {}
            Ok(want) => failures.push(format!(
                "{name}: the answer's bytes changed\n--- fixture\n{want}\n--- now\n{got}"
            )),
            Err(_) if bless => {
                std::fs::create_dir_all(fixture_dir()).expect("fixture dir");
                std::fs::write(&path, &got).expect("write fixture");
            }
            Err(e) => failures.push(format!(
                "{}: {e} (a new query kind is blessed with HUB_BLESS_FIXTURES=1)",
                path.display()
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The kind of `query`, as its JSON names it: one arm per kind and no wildcard, so a new
/// query kind does not compile here until it is added to [`QUERIES`].
fn kind(query: &Query) -> &'static str {
    match query {
        Query::ResolveEntity { .. } => "resolve_entity",
        Query::Entity { .. } => "entity",
        Query::Explain { .. } => "explain",
        Query::Activity { .. } => "activity",
        Query::Plans { .. } => "plans",
        Query::Plan { .. } => "plan",
        Query::Products => "products",
        Query::Releases { .. } => "releases",
        Query::Channels => "channels",
        Query::Recalls => "recalls",
        Query::Suppressions { .. } => "suppressions",
        Query::EnvironmentSettings { .. } => "environment_settings",
        Query::Audit { .. } => "audit",
        Query::Modules => "modules",
        Query::Module { .. } => "module",
        // Answered with the parse outside the state's lock (`answer_shared`): pinned by
        // `module_dry_run.json` through that path.
        Query::ModuleDryRun { .. } => "module_dry_run",
        Query::ModuleInstallations { .. } => "module_installations",
        Query::ModuleInstallation { .. } => "module_installation",
        Query::ChangeRequests { .. } => "change_requests",
        Query::ChangeRequest { .. } => "change_request",
        Query::Canaries { .. } => "canaries",
        Query::Canary { .. } => "canary",
        Query::EnvironmentLabels => "environment_labels",
        Query::RolloutPolicies => "rollout_policies",
        Query::RolloutPolicy { .. } => "rollout_policy",
        Query::RolloutStatus { .. } => "rollout_status",
        Query::RoleBindings => "role_bindings",
        Query::Tokens => "tokens",
        Query::RevokedCertificates => "revoked_certificates",
        Query::ClusterSettings => "cluster_settings",
        Query::ApproverGroups => "approver_groups",
        Query::ApprovalPolicies => "approval_policies",
        Query::WindowExceptions { .. } => "window_exceptions",
        Query::WindowException { .. } => "window_exception",
        Query::MetricTemplates { .. } => "metric_templates",
        Query::MetricTemplate { .. } => "metric_template",
    }
}

/// Every query kind has a fixture.
#[test]
fn every_query_kind_is_pinned() {
    let pinned: BTreeSet<&str> = QUERIES
        .iter()
        .chain(APPROVAL_QUERIES)
        .map(|(_, text)| {
            let text = text
                .replace("{plan}", "p")
                .replace("{cr}", "c")
                .replace("{wx}", "w");
            kind(&serde_json::from_str(&text).expect("a query"))
        })
        .collect();
    let every: BTreeSet<&str> = [
        "resolve_entity",
        "entity",
        "explain",
        "activity",
        "plans",
        "plan",
        "products",
        "releases",
        "channels",
        "recalls",
        "suppressions",
        "environment_settings",
        "audit",
        "modules",
        "module",
        "module_dry_run",
        "module_installations",
        "module_installation",
        "change_requests",
        "change_request",
        "canaries",
        "canary",
        "environment_labels",
        "rollout_policies",
        "rollout_policy",
        "rollout_status",
        "role_bindings",
        "tokens",
        "revoked_certificates",
        "cluster_settings",
        "approver_groups",
        "approval_policies",
        "window_exceptions",
        "window_exception",
        "metric_templates",
        "metric_template",
    ]
    .into();
    assert_eq!(pinned, every);
}

//! The JSON wire format of every query's answer, pinned: every key, its order and its value (issue 54).
//!
//! One state with a little of everything (environments, an entity with a plan, products and
//! releases, a suppression, a module installation with a change request, a canary, a
//! rollout policy, role bindings, a token, audit rows) answers every query kind; each answer
//! is compared with its fixture in `tests/fixtures/query-wire/`. Two more states pin what
//! that one leaves empty: issue 55's approvals, and canaries analysed tick by tick (the
//! agent's observation, Flagger's events, the history, a judged canary's judges) beside a
//! halted rollout. The fixtures were written by the `json!` views before answers were typed,
//! so a typed answer that reorders, renames, drops or adds a field fails here: older `hubctl`
//! binaries, the dashboard and scripts read these bytes.
//!
//! Blessing (only for a deliberate change of the wire, which older clients then see):
//! `HUB_BLESS_FIXTURES=1 cargo test -p hub-node --test query_wire` writes missing fixtures;
//! a fixture that exists is never overwritten: delete it first, and say why in the commit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use hub_client::answer::{CanariesAnswer, CanaryView, RolloutStatusView};
use hub_engine::canary::{
    CanaryObservation, CanaryStepSpec, Histogram, MetricWindow, Phase, SampleWindow, WebhookResult,
    WorkloadSamples,
};
use hub_engine::canary_record::Canary;
use hub_engine::cluster_key::{SecretKey, CANARY_REVISION_KEY};
use hub_engine::command::TokenRole;
use hub_engine::leader::{canary_step, CanaryStep};
use hub_engine::plan::{Plan, TaskReport, TaskState};
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

/// The agent of `environment`.
fn agent(environment: &str) -> Identity {
    Identity::Agent(environment.into())
}

/// The leader (node 1).
fn leader() -> Identity {
    Identity::Node(1)
}

impl Scenario {
    /// An empty state at entry 0.
    fn empty() -> Scenario {
        Scenario {
            state: State::new(),
            index: 0,
        }
    }

    /// The time of the next entry.
    fn next_time(&self) -> i64 {
        T0 + 1_000 * (self.index as i64 + 1)
    }

    /// The agent of the plan's environment runs every task of the active plan `id`: one
    /// `ReportTasks` entry, every task succeeded.
    fn run_plan(&mut self, id: &str) -> Plan {
        let plan = self.state.plan(id).cloned().expect("an active plan");
        let reports = plan
            .kind
            .task_names()
            .iter()
            .map(|task| TaskReport {
                plan_id: plan.id.clone(),
                task: task.to_string(),
                attempt: 1,
                state: TaskState::Succeeded,
                output: String::new(),
                failure: None,
            })
            .collect();
        self.apply_as(
            agent(&plan.environment),
            Command::ReportTasks {
                environment: plan.environment.clone(),
                reports,
            },
        );
        assert!(self.state.plan(id).is_none(), "plan {id} ran to its end");
        plan
    }

    /// The leader's evaluation of `entities`; the agents run the plans it issues.
    fn evaluate_and_run(&mut self, entities: &[&str]) -> Vec<String> {
        let issued = match self.apply_as(
            leader(),
            Command::Evaluate {
                entities: entities.iter().map(|e| e.to_string()).collect(),
                artifacts: vec![],
            },
        ) {
            CommandOutput::Evaluated { issued } => issued,
            other => panic!("evaluate: {other:?}"),
        };
        for plan in &issued {
            self.run_plan(plan);
        }
        issued
    }

    /// A helm chart entity `<environment>/<name>` of `product`, installed by the leader's
    /// evaluation and its agent; its id.
    fn installed_entity(&mut self, environment: &str, name: &str, product: &str) -> String {
        let id = match self.ok(Command::CreateEntity {
            environment: environment.into(),
            kind: EntityKind::HelmChart,
            name: name.into(),
            product_id: product.into(),
            k8s_namespace: Some(name.into()),
            account_id: None,
            release_channel: None,
        }) {
            CommandOutput::EntityCreated(id) => id,
            other => panic!("create entity: {other:?}"),
        };
        assert_eq!(self.evaluate_and_run(&[&id]).len(), 1, "{id} is installed");
        id
    }
}

/// What the agent of a canary scenario last applied of each canary: the spec of its last
/// step plan, and whether that plan ran a fresh baseline.
#[derive(Default)]
struct CanaryAgent {
    applied: BTreeMap<String, (CanaryStepSpec, bool)>,
}

impl CanaryAgent {
    /// Drives canary `id` entry by entry, as the leader and the agent do, until `done` says
    /// so (at most 300 entries): the leader proposes the tick [`canary_step`] says is due,
    /// with every webhook answering 200; otherwise the agent runs the entity's active plan,
    /// or reports what it observes.
    fn drive(&mut self, s: &mut Scenario, id: &str, done: impl Fn(&Canary) -> bool) {
        for _ in 0..300 {
            let c = s.state.canary(id).cloned().expect("the canary");
            if done(&c) {
                // The agent catches up: it runs the last step plan and reports.
                if let Some(plan) = s.state.active_plan_of(&c.entity).map(|p| p.id.clone()) {
                    self.run_step_plan(s, &plan);
                }
                self.report(s, &c);
                return;
            }
            match canary_step(&s.state, &c, None, s.next_time()) {
                CanaryStep::Tick {
                    plan,
                    mut input,
                    samples,
                    stale,
                } => {
                    assert!(!stale, "{id}: the agent reported before every tick");
                    for call in &plan.webhooks {
                        input
                            .webhooks
                            .insert(call.name.clone(), WebhookResult::from_status(200, "ok"));
                    }
                    let (id, step) = (id.to_string(), plan.step);
                    s.apply_as(
                        leader(),
                        match samples {
                            Some(samples) => Command::CanaryJudgedTick {
                                id,
                                step,
                                input,
                                samples,
                            },
                            None => Command::CanaryTick { id, step, input },
                        },
                    );
                }
                _ => match s.state.active_plan_of(&c.entity).map(|p| p.id.clone()) {
                    Some(plan) => self.run_step_plan(s, &plan),
                    None => self.report(s, &c),
                },
            }
        }
        panic!("{id} did not get there in 300 entries");
    }

    /// The agent runs the active plan `id` and, for a canary step, remembers what it applied.
    fn run_step_plan(&mut self, s: &mut Scenario, id: &str) {
        let plan = s.run_plan(id);
        if let Some(step) = plan.kind.canary_step() {
            let baseline = plan.kind.canary_baseline().is_some();
            self.applied
                .insert(step.canary.clone(), (step.clone(), baseline));
        }
    }

    /// The agent reports what it observes of canary `c`: its workloads as the last step plan
    /// left them, all ready, with healthy proxy metrics over every window the plan asked for
    /// (and, for a judged canary, the binned samples of each workload, alike).
    fn report(&self, s: &mut Scenario, c: &Canary) {
        let applied = self.applied.get(&c.id);
        let observation = match applied {
            Some((step, _)) => CanaryObservation {
                applied_step: step.step,
                primary_revision: step.primary.as_ref().map(|r| r.revision.clone()),
                primary_ready_percent: 100,
                canary_revision: step.canary_workload.as_ref().map(|r| r.revision.clone()),
                canary_ready_percent: if step.canary_workload.is_some() {
                    100
                } else {
                    0
                },
                windows: step
                    .metric_windows_ms
                    .iter()
                    .map(|&interval_ms| MetricWindow {
                        interval_ms,
                        requests: 600,
                        success_rate_milli: Some(99_900),
                        p99_ms_milli: Some(120_000),
                    })
                    .collect(),
                observed_ms: 0,
            },
            None => CanaryObservation {
                applied_step: 0,
                primary_revision: None,
                primary_ready_percent: 0,
                canary_revision: None,
                canary_ready_percent: 0,
                windows: Vec::new(),
                observed_ms: 0,
            },
        };
        let environment = c.environment.clone();
        let observations = vec![(c.id.clone(), observation)];
        let command = if s.state.canary_judging(&c.id).is_some() {
            let samples = applied.map_or_else(Vec::new, |(step, baseline)| {
                step.metric_windows_ms
                    .iter()
                    .map(|&interval_ms| SampleWindow {
                        interval_ms,
                        canary: healthy_samples(),
                        primary: healthy_samples(),
                        baseline: baseline.then(healthy_samples),
                    })
                    .collect()
            });
            Command::ReportCanariesWithSamples {
                environment: environment.clone(),
                observations,
                samples: vec![(c.id.clone(), samples)],
            }
        } else {
            Command::ReportCanaries {
                environment: environment.clone(),
                observations,
            }
        };
        s.apply_as(agent(&environment), command);
    }
}

/// One healthy workload's binned samples: 100 requests of 5 to 50 ms, one 5xx in 200.
fn healthy_samples() -> WorkloadSamples {
    WorkloadSamples {
        latency: Histogram::from_pairs(&[(5_000, 20), (10_000, 50), (25_000, 20), (50_000, 10)]),
        success: Histogram::success(1, 199),
    }
}

/// `<product>` 1.0.0 installed on `prod/<name>` with canary `yaml` (its analysis every
/// second, so a tick is due at the entry after the last) initialised, then 1.1.0 published
/// and made the canary's target by the leader's evaluation; the canary's id.
fn canary_with_target(
    s: &mut Scenario,
    agent: &mut CanaryAgent,
    product: &str,
    yaml: &str,
) -> String {
    let name = product.split_once(':').expect("group:name").1;
    s.ok(Command::CreateProduct {
        product_id: product.into(),
        description: String::new(),
    });
    s.ok(Command::PublishRelease {
        manifest: manifest(product, "1.0.0"),
    });
    let entity = s.installed_entity("prod", name, product);
    s.ok(Command::ApplyCanary {
        environment: Some("prod".into()),
        yaml: yaml.replacen(
            "interval: 1m\n    threshold",
            "interval: 1s\n    threshold",
            1,
        ),
    });
    assert!(
        s.evaluate_and_run(&[&entity]).is_empty(),
        "the leader's evaluation makes 1.0.0 the canary's target, not a plan"
    );
    let id = format!("prod/{name}");
    agent.drive(s, &id, |c| c.status.phase == Phase::Initialized);
    s.ok(Command::PublishRelease {
        manifest: manifest(product, "1.1.0"),
    });
    assert!(
        s.evaluate_and_run(&[&entity]).is_empty(),
        "a canary's new release is its target, not a plan"
    );
    id
}

/// Two waves of com.example:web: staging, then prod.
const WAVES: &str = "\
product: com.example:web
waves:
  - name: staging
    selector: {environments: [staging]}
    soak: 30m
    onFailure: halt
  - name: prod
    selector: {environments: [prod]}
    soak: 1h
    onFailure: recall
";

/// com.example:web on staging and prod at 1.0.0 under a two-wave policy; 1.1.0 rolled out
/// to the first wave, then halted by an operator.
fn halted_rollout(s: &mut Scenario) {
    s.ok(Command::CreateProduct {
        product_id: "com.example:web".into(),
        description: String::new(),
    });
    s.ok(Command::PublishRelease {
        manifest: manifest("com.example:web", "1.0.0"),
    });
    let web: Vec<String> = ["staging", "prod"]
        .into_iter()
        .map(|env| s.installed_entity(env, "web", "com.example:web"))
        .collect();
    s.ok(Command::ApplyRolloutPolicy { yaml: WAVES.into() });
    s.ok(Command::PublishRelease {
        manifest: manifest("com.example:web", "1.1.0"),
    });
    let issued = s.evaluate_and_run(&[&web[0], &web[1]]);
    assert_eq!(issued.len(), 1, "the first wave's one entity moves");
    s.ok(Command::HaltRollout {
        product: "com.example:web".into(),
        version: "1.1.0".into(),
        reason: "error budget spent".into(),
        actor: "operator/admin".into(),
    });
}

/// A state whose canaries were analysed: `prod/podinfo` (the Flagger podinfo resource)
/// promoted 1.1.0 after its whole analysis, and `prod/checkout` (the judged resource, its
/// judges comparing samples with a fresh baseline) analysing 1.1.0 at weight 20; every tick
/// proposed as the leader does ([`canary_step`]) on what the agent observed and reported.
/// And a release rollout halted by an operator in its first wave.
fn canary_scenario() -> Scenario {
    let mut s = Scenario::empty();
    s.ok(Command::BindRole {
        identity: Identity::Operator("admin".into()),
        role: Role::Admin,
        environments: BTreeSet::new(),
        products: BTreeSet::new(),
    });
    for env in ["staging", "prod"] {
        s.ok(Command::CreateEnvironment {
            name: env.into(),
            description: String::new(),
        });
    }
    s.apply_as(
        leader(),
        Command::SetClusterKey {
            name: CANARY_REVISION_KEY.into(),
            key: SecretKey::from_bytes([42; 32]),
        },
    );
    let mut agent = CanaryAgent::default();
    let podinfo = canary_with_target(
        &mut s,
        &mut agent,
        "com.example:podinfo",
        &engine_fixture("canary/valid/flagger-podinfo.yml"),
    );
    agent.drive(&mut s, &podinfo, |c| c.status.phase == Phase::Succeeded);
    let checkout = canary_with_target(
        &mut s,
        &mut agent,
        "com.example:checkout",
        &engine_fixture("canary/valid/judged.yml"),
    );
    agent.drive(&mut s, &checkout, |c| c.status.canary_weight >= 20);
    halted_rollout(&mut s);
    s
}

/// The parts of canary and rollout answers the other scenarios leave empty, asked of
/// [`canary_scenario`].
const CANARY_QUERIES: &[(&str, &str)] = &[
    ("canaries_analysed", r#"{"query":"canaries"}"#),
    (
        "canary_promoted",
        r#"{"query":"canary","id":"prod/podinfo"}"#,
    ),
    (
        "canary_judged",
        r#"{"query":"canary","id":"prod/checkout"}"#,
    ),
    (
        "rollout_status_halted",
        r#"{"query":"rollout_status","product":"com.example:web","version":"1.1.0"}"#,
    ),
];

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

#[test]
fn every_canary_and_halted_rollout_answer_keeps_its_wire_bytes() {
    let answers = ask_all(&canary_scenario(), CANARY_QUERIES);
    let answer_of = |name: &str| {
        let (_, value) = answers
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no answer {name}"));
        value.clone()
    };
    // The scenario fills what the fixtures are here to pin: a future change that leaves a
    // part empty fails here, not silently in a fixture.
    let listed: CanariesAnswer =
        serde_json::from_value(answer_of("canaries_analysed")).expect("canaries");
    let phases: Vec<(&str, &str)> = listed
        .canaries
        .iter()
        .map(|c| (c.id.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(
        phases,
        [
            ("prod/checkout", "Progressing"),
            ("prod/podinfo", "Succeeded")
        ]
    );
    let promoted: CanaryView =
        serde_json::from_value(answer_of("canary_promoted")).expect("canary");
    assert_analysed(&promoted);
    assert!(promoted.promoted, "podinfo promoted its revision");
    let history = promoted.history.as_deref().unwrap_or_default();
    assert_eq!(
        history.last().map(|h| h.phase.as_str()),
        Some("Succeeded"),
        "the history reaches the promotion"
    );
    let judged: CanaryView = serde_json::from_value(answer_of("canary_judged")).expect("canary");
    assert_analysed(&judged);
    let judges = judged
        .status_block
        .and_then(|b| b.judges)
        .expect("the judged canary's judging state");
    assert_eq!(judges.metrics.len(), 2, "{judges:?}");
    assert!(judges.samples_time.is_some(), "{judges:?}");
    assert!(
        !judges.verdicts.is_empty() && judges.verdicts.iter().all(|v| v.verdict == "pass"),
        "{judges:?}"
    );
    let rollout: RolloutStatusView =
        serde_json::from_value(answer_of("rollout_status_halted")).expect("rollout status");
    let halted = rollout.halted.expect("a halted rollout");
    assert_eq!(halted.cause, "by operator/admin: error budget spent");
    let waves: Vec<(&str, usize)> = rollout
        .waves
        .iter()
        .map(|w| (w.wave.as_str(), w.done))
        .collect();
    assert_eq!(waves, [("staging", 1), ("prod", 0)]);
    compare_with_fixtures(&answers);
}

/// `c` (a `canary` answer) was analysed: the agent's observation, Flagger's events and the
/// history of its steps are there.
fn assert_analysed(c: &CanaryView) {
    let observation = c.observation.clone().flatten().expect("an observation");
    assert!(!observation.windows.is_empty(), "{observation:?}");
    let block = c.status_block.as_ref().expect("a status block");
    assert!(!block.events.is_empty(), "{}: no events", c.id);
    assert!(
        c.history.as_ref().is_some_and(|h| h.len() > 2),
        "{}: {:?}",
        c.id,
        c.history
    );
}

/// Asks `s` each of `queries` and compares each answer with its fixture.
fn check_answers(s: &Scenario, queries: &[(&'static str, &str)]) {
    compare_with_fixtures(&ask_all(s, queries));
}

/// Asks `s` each of `queries`: each fixture name with its answer.
fn ask_all(
    s: &Scenario,
    queries: &[(&'static str, &str)],
) -> Vec<(&'static str, serde_json::Value)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let identity = raft_store::NodeIdentity {
        node_id: 1,
        cluster_id: "query-wire".into(),
    };
    let (_store, _log, sm) = raft_store::open(dir.path(), &identity).expect("store");
    let history = sm.history();
    let now = s.next_time();
    let first = |ids: Vec<String>| ids.into_iter().next().unwrap_or_default();
    let plan = first(s.state.plans().map(|p| p.id.clone()).collect());
    let cr = first(s.state.change_requests().map(|c| c.id.clone()).collect());
    let wx = first(s.state.window_exceptions().map(|w| w.id.clone()).collect());
    let mut answers = Vec::new();
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
        answers.push((*name, value));
    }
    answers
}

/// Compares each answer with its fixture; with `HUB_BLESS_FIXTURES=1`, writes the missing
/// ones.
fn compare_with_fixtures(answers: &[(&str, serde_json::Value)]) {
    let bless = std::env::var("HUB_BLESS_FIXTURES").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    for (name, value) in answers {
        let got = format!("{}\n", serde_json::to_string_pretty(value).expect("JSON"));
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
        .chain(CANARY_QUERIES)
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

//! Property tests: random histories of operator, agent and leader commands over a small
//! universe (two environments, a database, an application depending on it and a web front
//! end, releases including pre-releases, recalls, windows, suppressions, config and secret
//! changes, reports, evaluations with random artifact observations, cancels, commands and time
//! jumps past the 4-hour re-check).
//!
//! Properties (each cited where it is checked):
//! 1. decisions are deterministic: the same history gives the same `Applied` results and
//!    digests (`Hub::apply` applies every command to a twin), and `evaluate` is pure;
//! 2. at most one active plan per entity, at every step;
//! 3. a plan issued by an `Evaluate` at `t` passes every constraint when the pre-state is
//!    evaluated at `t`, and no ordinary plan is issued while a manual suppression is in force;
//! 4. `State::from_records(records())` equals the state, and so does a store that persisted
//!    exactly `Applied.changed` (`Hub::apply`).
//! 5. the leader's policy (`leader::next_step`) agrees with apply: it proposes every plan
//!    (`Issue`) and nothing for an active plan; when it proposes nothing (a fresh term, so no
//!    proposal of its own to repeat), an `Evaluate` of that entity would change no record,
//!    except for a block made only of artifacts not checked yet, where the checker wakes the
//!    entity instead; its wake-up is after now and no later than the block may clear or the
//!    next 4-hour re-check.
//!
//! `PROPTEST_CASES=N` changes the number of histories; `HUB_PROP_STATS=1` prints, per history,
//! the plans by kind and status and the suppressions by source (to check what is exercised).

mod common;

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

use common::*;
use hub_engine::artifact::{ArtifactLocation, Availability};
use hub_engine::command::{
    CancelTarget, EntityReport, EntitySettingsPatch, EnvironmentSettingsPatch,
};
use hub_engine::entity::{config_sha256, Health, SecretValue};
use hub_engine::evaluate::{evaluate, Outcome, Reason};
use hub_engine::leader::{next_recheck_at, next_step, DecisionRecord};
use hub_engine::plan::{EmergencyCommand, PlanKind, TaskReport, TaskState};
use hub_engine::suppression::{Scope, SuppressionSource};
use hub_engine::{Command, CommandOutput, Request, State, TimestampMs};
use proptest::prelude::*;

const ENVS: [&str; 2] = ["e0", "e1"];
const DB: &str = "com.example:db";
const APP: &str = "com.example:app";
const WEB: &str = "com.example:web";
const PRODUCTS: [&str; 3] = [DB, APP, WEB];
const VERSIONS: [&str; 8] = [
    "1.0.0",
    "1.1.0",
    "1.2.0-rc.1",
    "1.2.0",
    "2.0.0-rc.1",
    "2.0.0",
    "2.1.0-beta.1",
    "2.1.0",
];
const WINDOWS: [&str; 5] = [
    "MONDAY/00:00-MONDAY/06:00",
    "SATURDAY/00:00-SUNDAY/00:00",
    "all-time",
    "TUESDAY/22:00-WEDNESDAY/02:00",
    "SUNDAY/20:00-MONDAY/01:00",
];
const CHANNELS: [&str; 3] = ["RELEASE", "RELEASE_CANDIDATE", "DEV"];
const CONFIGS: [&str; 3] = ["replicas: 1", "replicas: 2\nmode: fast", ""];

/// Entity `i`: environment `i / 3`, product `i % 3`.
const ENTITIES: usize = 6;

fn entity_id(i: usize) -> String {
    let i = i % ENTITIES;
    let name = ["db", "app", "web"][i % 3];
    helm_id(ENVS[i / 3], name)
}

/// Dependencies of a release, fixed per (product, version) so republishing is idempotent:
/// app X.y.z needs db [X.0.0, X.x.x]; web needs app [1.0.0, 2.x.x], optionally.
fn deps(product: &str, version: &str) -> Vec<Dep<'static>> {
    let major = if version.starts_with('1') {
        ("1.0.0", "1.x.x")
    } else {
        ("2.0.0", "2.x.x")
    };
    match product {
        APP => vec![(DB, major.0, major.1, false)],
        WEB => vec![(APP, "1.0.0", "2.x.x", true)],
        _ => vec![],
    }
}

#[derive(Debug, Clone)]
enum Op {
    Advance(TimestampMs),
    /// A leader step over all entities (or a subset), artifacts observed by `seed`.
    Step(Option<Vec<usize>>, u64),
    /// The agent succeeds every task of the entity's active plan.
    Succeed(usize),
    /// The agent fails task `t` of the entity's active plan.
    Fail(usize, usize),
    /// One raw task report.
    Task(usize, usize, u32, u8),
    /// The agent fails the entity's active plan half-way and reports the target version in
    /// error (what makes a rollback necessary).
    FailHalfway(usize),
    /// Recall the version the entity runs.
    RecallCurrent(usize),
    /// A report for the plan sent by the other environment's agent (refused).
    CrossReport(usize),
    Report(usize, Option<usize>, u8, u8),
    Publish(usize, usize),
    Recall(usize, usize, usize),
    DeleteRecall(usize),
    EnvWindow(usize, Option<usize>),
    EntityWindow(usize, Option<usize>),
    ProductWindow(usize, Option<usize>),
    EnvFlags(usize, bool, bool, u32),
    Override(bool, usize, TimestampMs, TimestampMs),
    Suppress(bool, usize, TimestampMs, TimestampMs, bool),
    DeleteSuppression(usize),
    Expire,
    Config(usize, usize, Option<usize>),
    Secret(usize, usize),
    Cancel(u8, usize, Option<TimestampMs>),
    IssueCommand(usize, u8, usize),
    Channel(usize, usize),
    Groups(usize, bool),
    Ignore(usize, bool),
    Registry(usize, bool),
}

fn op() -> impl Strategy<Value = Op> {
    let e = 0..ENTITIES;
    let time = prop_oneof![
        3 => 1_000i64..10 * MINUTE,
        2 => HOUR..5 * HOUR,
        1 => 4 * HOUR..3 * DAY,
    ];
    prop_oneof![
        6 => time.prop_map(Op::Advance),
        10 => (proptest::option::weighted(0.8, Just(())).prop_map(|o| o.is_none()), proptest::collection::vec(0..ENTITIES, 1..4), any::<u64>())
            .prop_map(|(subset, ids, seed)| Op::Step(subset.then_some(ids), seed)),
        6 => e.clone().prop_map(Op::Succeed),
        3 => (e.clone(), 0..5usize).prop_map(|(e, t)| Op::Fail(e, t)),
        3 => e.clone().prop_map(Op::FailHalfway),
        1 => e.clone().prop_map(Op::RecallCurrent),
        3 => (e.clone(), 0..5usize, 1..3u32, 0..3u8).prop_map(|(e, t, a, s)| Op::Task(e, t, a, s)),
        1 => e.clone().prop_map(Op::CrossReport),
        4 => (e.clone(), proptest::option::of(0..VERSIONS.len()), 0..3u8, 0..3u8).prop_map(|(e, v, h, c)| Op::Report(e, v, h, c)),
        4 => (0..3usize, 0..VERSIONS.len()).prop_map(|(p, v)| Op::Publish(p, v)),
        1 => (0..3usize, 0..VERSIONS.len(), 0..VERSIONS.len()).prop_map(|(p, a, b)| Op::Recall(p, a, b)),
        1 => (0..4usize).prop_map(Op::DeleteRecall),
        1 => (0..2usize, proptest::option::of(0..WINDOWS.len())).prop_map(|(n, w)| Op::EnvWindow(n, w)),
        1 => (e.clone(), proptest::option::of(0..WINDOWS.len())).prop_map(|(n, w)| Op::EntityWindow(n, w)),
        1 => (0..3usize, proptest::option::of(0..WINDOWS.len())).prop_map(|(n, w)| Op::ProductWindow(n, w)),
        1 => (0..2usize, any::<bool>(), any::<bool>(), 0..3u32).prop_map(|(n, a, b, t)| Op::EnvFlags(n, a, b, t)),
        1 => (any::<bool>(), e.clone(), -HOUR..HOUR, MINUTE..6 * HOUR).prop_map(|(s, n, a, b)| Op::Override(s, n, a, b)),
        1 => (any::<bool>(), e.clone(), 0..HOUR, MINUTE..6 * HOUR, any::<bool>()).prop_map(|(s, n, a, b, c)| Op::Suppress(s, n, a, b, c)),
        1 => (0..8usize).prop_map(Op::DeleteSuppression),
        2 => Just(Op::Expire),
        2 => (e.clone(), 0..VERSIONS.len(), proptest::option::weighted(0.8, 0..CONFIGS.len())).prop_map(|(n, v, c)| Op::Config(n, v, c)),
        1 => (e.clone(), 0..3usize).prop_map(|(n, v)| Op::Secret(n, v)),
        1 => (0..3u8, e.clone(), proptest::option::of(MINUTE..HOUR)).prop_map(|(k, n, s)| Op::Cancel(k, n, s)),
        2 => (e.clone(), 0..5u8, 0..VERSIONS.len()).prop_map(|(n, k, v)| Op::IssueCommand(n, k, v)),
        1 => (e.clone(), 0..CHANNELS.len()).prop_map(|(n, c)| Op::Channel(n, c)),
        1 => (e.clone(), any::<bool>()).prop_map(|(n, o)| Op::Groups(n, o)),
        1 => (e.clone(), any::<bool>()).prop_map(|(n, i)| Op::Ignore(n, i)),
        1 => (0..2usize, any::<bool>()).prop_map(|(n, x)| Op::Registry(n, x)),
    ]
}

fn setup() -> Hub {
    let mut hub = Hub::new();
    for env in ENVS {
        hub.env(env);
    }
    for p in PRODUCTS {
        hub.product(p);
        hub.publish(p, "1.0.0", &deps(p, "1.0.0"));
    }
    for env in ENVS {
        for (name, p) in [("db", DB), ("app", APP), ("web", WEB)] {
            hub.helm(env, name, p);
        }
    }
    // Everything runs 1.0.0 except e1's web, which is still to be installed.
    for i in 0..ENTITIES - 1 {
        hub.installed(&entity_id(i), "1.0.0");
    }
    // e1 checks artifacts in a registry; e0 has none (its artifacts are unchecked).
    hub.ok(Command::SetRegistry {
        environment: "e1".into(),
        name: "reg".into(),
        url: "http://127.0.0.1:9/reg".into(),
        hub_access: "expected".into(),
        ca_pem: None,
        insecure_skip_verify: false,
    });
    hub
}

/// What the artifact checker says about `l` under `seed`: mostly available.
fn observe(seed: u64, l: &ArtifactLocation) -> Option<Availability> {
    let mut h = DefaultHasher::new();
    seed.hash(&mut h);
    l.hash(&mut h);
    match h.finish() % 8 {
        0 => None,
        1 => Some(Availability::Unavailable {
            reason: "404".into(),
        }),
        _ => Some(Availability::Available),
    }
}

/// Property 3: a manual suppression in force on the entity or its environment at `t`.
fn manual_suppression_at(state: &State, entity: &str, t: TimestampMs) -> bool {
    let env = state.entity(entity).unwrap().environment.clone();
    [Scope::Entity(entity.into()), Scope::Environment(env)]
        .iter()
        .flat_map(|s| state.suppressions_in(s))
        .any(|s| s.source == SuppressionSource::Manual && s.active_at(t))
}

fn leader_step(hub: &mut Hub, ids: Vec<String>, seed: u64) {
    let t = hub.now;
    let mut observed: BTreeMap<ArtifactLocation, Availability> = BTreeMap::new();
    for id in &ids {
        for l in hub.eval(id).artifact_locations {
            if let Some(a) = observe(seed, &l) {
                observed.insert(l, a);
            }
        }
    }
    let pre = hub.state.clone();
    for id in &ids {
        leader_agrees_with_apply(&pre, id, t, hub.index + 1, &observed);
    }
    let out = hub.ok(Command::Evaluate {
        entities: ids,
        artifacts: observed.clone().into_iter().collect(),
    });
    let CommandOutput::Evaluated { issued } = out else {
        panic!("{out:?}")
    };
    let lookup = |l: &ArtifactLocation| observed.get(l).cloned();
    for pid in issued {
        // Property 3: the pre-state, evaluated at t, issues exactly this candidate.
        let plan = hub.plan(&pid);
        let e = evaluate(&pre, &plan.entity, t, &lookup).unwrap();
        assert_eq!(
            e.outcome,
            Outcome::Issue,
            "{pid} issued but: {}",
            e.summary()
        );
        assert!(e.blocking().next().is_none());
        let c = e.candidate.unwrap();
        assert_eq!(
            (c.kind, c.to_version, c.to_config),
            (
                plan.kind.clone(),
                plan.to_version.clone(),
                plan.to_config.clone()
            )
        );
        assert_eq!((plan.issued_ms, plan.issued_index), (t, hub.index));
    }
}

/// Property 5, for one entity of a leader step at `t`.
fn leader_agrees_with_apply(
    pre: &State,
    id: &str,
    t: TimestampMs,
    index: u64,
    observed: &BTreeMap<ArtifactLocation, Availability>,
) {
    let lookup = |l: &ArtifactLocation| observed.get(l).cloned();
    let Some(eval) = evaluate(pre, id, t, &lookup) else {
        return;
    };
    let statuses: Vec<_> = eval
        .artifact_locations
        .iter()
        .map(|l| (l.clone(), lookup(l)))
        .collect();
    let recorded = pre.activity(id).map(DecisionRecord::of).unwrap_or_default();
    let step = next_step(&eval, &recorded, None, &statuses, 60_000, t);
    let why = eval.summary();
    if let Some(w) = step.wake_at {
        assert!(w > t, "{id}: wakes at {w}, not after {t}: {why}");
    }
    match &eval.outcome {
        Outcome::PlanActive { .. } => assert!(step.propose.is_none(), "{id}: {why}"),
        Outcome::Issue | Outcome::CanaryTarget { .. } => {
            assert!(step.propose.is_some(), "{id}: not proposed: {why}")
        }
        Outcome::Blocked { may_clear_at_ms } => {
            let w = step.wake_at.expect("a block always has a wake-up");
            let since = recorded.blocked_since_ms.unwrap_or(t);
            assert!(
                w <= next_recheck_at(since, t).max(t + 1),
                "{id}: {w}: {why}"
            );
            if let Some(clear) = may_clear_at_ms {
                assert!(w <= (*clear).max(t + 1), "{id}: {w} after {clear}: {why}");
            }
        }
        Outcome::AtTarget { .. } | Outcome::NothingExecutable { .. } => {}
    }
    let only_pending = eval.is_blocked()
        && eval
            .blocking()
            .all(|c| matches!(c.reason, Reason::ArtifactsNotCheckedYet { .. }));
    if step.propose.is_none() && !only_pending {
        let request = Request {
            command: Command::Evaluate {
                entities: vec![id.to_string()],
                artifacts: observed.clone().into_iter().collect(),
            },
            time_ms: t,
            request_id: None,
        };
        let applied = pre.clone().apply(&request, index);
        assert!(
            applied.changed.is_empty(),
            "{id}: the leader would not propose, but apply changes {:?}: {why}",
            applied.changed
        );
    }
}

fn apply_op(hub: &mut Hub, op: &Op) {
    match op.clone() {
        Op::Advance(ms) => hub.advance(ms),
        Op::Step(subset, seed) => {
            let ids = match subset {
                Some(ix) => ix.into_iter().map(entity_id).collect(),
                None => (0..ENTITIES).map(entity_id).collect(),
            };
            leader_step(hub, ids, seed);
        }
        Op::Succeed(e) => {
            if let Some(p) = hub.active(&entity_id(e)) {
                for t in p.tasks.clone() {
                    hub.task(
                        &p.id,
                        &t.name,
                        t.attempt.max(1),
                        TaskState::Succeeded,
                        "ok\n",
                    )
                    .result
                    .unwrap();
                }
            }
        }
        Op::Fail(e, t) => {
            if let Some(p) = hub.active(&entity_id(e)) {
                let task = &p.tasks[t % p.tasks.len()];
                let attempt = if task.state >= TaskState::Succeeded {
                    task.attempt + 1
                } else {
                    task.attempt.max(1)
                };
                hub.task(
                    &p.id,
                    &task.name.clone(),
                    attempt,
                    TaskState::Failed,
                    "boom\n",
                )
                .result
                .unwrap();
            }
        }
        Op::FailHalfway(e) => {
            let id = entity_id(e);
            if let Some(p) = hub.active(&id) {
                let task = p.tasks.last().unwrap();
                hub.task(
                    &p.id,
                    &task.name.clone(),
                    task.attempt + 1,
                    TaskState::Failed,
                    "not ready\n",
                )
                .result
                .unwrap();
                let env = p.environment.clone();
                hub.ok(Command::ReportEntityStates {
                    environment: env,
                    states: vec![EntityReport {
                        entity: id,
                        version: p.to_version.clone(),
                        health: Health::Error,
                        config_sha256: None,
                        secrets_revision: None,
                        message: "crash loop".into(),
                    }],
                });
            }
        }
        Op::RecallCurrent(e) => {
            let ent = hub.state.entity(&entity_id(e)).unwrap();
            if let Some(ver) = ent.reported.version.clone() {
                let product = ent.product_id.clone();
                hub.ok(Command::RecallReleases {
                    product_id: product,
                    from: ver.to_string(),
                    to: ver.to_string(),
                    reason: "bad".into(),
                });
            }
        }
        Op::Task(e, t, attempt, s) => {
            if let Some(p) = hub.active(&entity_id(e)) {
                let task = p.tasks[t % p.tasks.len()].name.clone();
                let state =
                    [TaskState::Running, TaskState::Succeeded, TaskState::Failed][s as usize];
                hub.task(&p.id, &task, attempt, state, "out\n")
                    .result
                    .unwrap();
            }
        }
        Op::CrossReport(e) => {
            if let Some(p) = hub.active(&entity_id(e)) {
                let other = if p.environment == "e0" { "e1" } else { "e0" };
                hub.err(Command::ReportTask {
                    environment: other.into(),
                    report: TaskReport {
                        plan_id: p.id.clone(),
                        task: p.tasks[0].name.clone(),
                        attempt: 1,
                        state: TaskState::Succeeded,
                        output: String::new(),
                        failure: None,
                    },
                });
            }
        }
        Op::Report(e, ver, h, c) => {
            let id = entity_id(e);
            let version = ver.map(|i| v(VERSIONS[i]));
            let config = match (c, &version) {
                (0, Some(ver)) => Some(config_sha256(
                    hub.state.entity(&id).unwrap().config_for(ver),
                )),
                (1, _) => Some("0".repeat(64)),
                _ => None,
            };
            let env = hub.state.entity(&id).unwrap().environment.clone();
            hub.ok(Command::ReportEntityStates {
                environment: env,
                states: vec![EntityReport {
                    entity: id,
                    version,
                    health: [Health::Healthy, Health::Error, Health::Unknown][h as usize],
                    config_sha256: config,
                    secrets_revision: None,
                    message: String::new(),
                }],
            });
        }
        Op::Publish(p, ver) => {
            let (p, ver) = (PRODUCTS[p], VERSIONS[ver]);
            hub.publish(p, ver, &deps(p, ver));
        }
        Op::Recall(p, a, b) => {
            let (a, b) = (a.min(b), a.max(b));
            hub.ok(Command::RecallReleases {
                product_id: PRODUCTS[p].into(),
                from: VERSIONS[a].into(),
                to: VERSIONS[b].into(),
                reason: "bad".into(),
            });
        }
        Op::DeleteRecall(k) => {
            let ids: Vec<String> = hub.state.recalls().map(|r| r.id.clone()).collect();
            if !ids.is_empty() {
                hub.ok(Command::DeleteRecall {
                    id: ids[k % ids.len()].clone(),
                });
            }
        }
        Op::EnvWindow(n, w) => hub.env_settings(
            ENVS[n],
            EnvironmentSettingsPatch {
                maintenance_window: Some(w.map(|w| window(WINDOWS[w])).into()),
                ..Default::default()
            },
        ),
        Op::EntityWindow(n, w) => hub.entity_settings(
            &entity_id(n),
            EntitySettingsPatch {
                maintenance_window: Some(w.map(|w| window(WINDOWS[w])).into()),
                ..Default::default()
            },
        ),
        Op::ProductWindow(n, w) => {
            hub.ok(Command::SetProductWindow {
                product_id: PRODUCTS[n].into(),
                window: w.map(|w| window(WINDOWS[w])),
            });
        }
        Op::EnvFlags(n, over, recall, threshold) => hub.env_settings(
            ENVS[n],
            EnvironmentSettingsPatch {
                override_product_maintenance_windows: Some(over),
                require_windows_for_recall_roll_offs: Some(recall),
                autosuppression_threshold: Some(threshold),
                auto_suppression_ms: Some(HOUR + i64::from(threshold) * HOUR),
                ..Default::default()
            },
        ),
        Op::Override(env_scope, n, start, len) => {
            let scope = if env_scope {
                Scope::Environment(ENVS[n / 3].into())
            } else {
                Scope::Entity(entity_id(n))
            };
            let start = hub.now + start;
            hub.ok(Command::AddWindowOverride {
                scope,
                start_ms: start,
                end_ms: start.max(hub.now) + len,
                reason: "urgent".into(),
                actor: "alice".into(),
            });
        }
        Op::Suppress(env_scope, n, start, len, cancel) => {
            let scope = if env_scope {
                Scope::Environment(ENVS[n / 3].into())
            } else {
                Scope::Entity(entity_id(n))
            };
            hub.ok(Command::CreateSuppression {
                scope,
                start_ms: Some(hub.now + start),
                end_ms: hub.now + start + len,
                reason: "manual work".into(),
                cancel_active_plans: cancel,
                actor: "alice".into(),
            });
        }
        Op::DeleteSuppression(k) => {
            let ids: Vec<String> = hub.state.suppressions().map(|s| s.id.clone()).collect();
            if !ids.is_empty() {
                hub.ok(Command::DeleteSuppression {
                    id: ids[k % ids.len()].clone(),
                    actor: "alice".into(),
                });
            }
        }
        Op::Expire => {
            hub.ok(Command::ExpireSuppressions);
        }
        Op::Config(n, ver, text) => {
            let id = entity_id(n);
            let version = VERSIONS[ver].to_string();
            let exists = hub
                .state
                .entity(&id)
                .unwrap()
                .config_overrides
                .contains_key(&v(&version));
            match text {
                Some(t) => {
                    hub.ok(Command::SetConfigOverrides {
                        entity: id,
                        version,
                        config: Some(CONFIGS[t].into()),
                    });
                }
                None if exists => {
                    hub.ok(Command::SetConfigOverrides {
                        entity: id,
                        version,
                        config: None,
                    });
                }
                None => {
                    hub.err(Command::SetConfigOverrides {
                        entity: id,
                        version,
                        config: None,
                    });
                }
            }
        }
        Op::Secret(n, val) => {
            hub.ok(Command::SetSecret {
                entity: entity_id(n),
                name: "token".into(),
                value: Some(SecretValue(format!("secret-{val}"))),
            });
        }
        Op::Cancel(kind, n, suppress) => {
            let id = entity_id(n);
            let target = match kind {
                0 => CancelTarget::Environment(ENVS[n / 3].into()),
                1 => CancelTarget::Entity(id.clone()),
                _ => match hub.active(&id) {
                    Some(p) => CancelTarget::Plan(p.id),
                    None => CancelTarget::Entity(id.clone()),
                },
            };
            hub.ok(Command::CancelPlans {
                target,
                reason: "stop".into(),
                suppress_for_ms: suppress,
                actor: "alice".into(),
            });
        }
        Op::IssueCommand(n, kind, ver) => {
            let id = entity_id(n);
            let e = hub.state.entity(&id).unwrap();
            let version = v(VERSIONS[ver]);
            let published = hub.state.release(&e.product_id, &version).is_some();
            let installed = e.reported.version.is_some();
            let command_active = hub.active(&id).is_some_and(|p| p.kind.is_command());
            let cmd = match kind {
                0 => EmergencyCommand::Install { version },
                1 => EmergencyCommand::EnforceConfigAndVersion { version },
                2 => EmergencyCommand::Uninstall,
                3 => EmergencyCommand::EnforceConfig,
                _ => EmergencyCommand::Restart,
            };
            let should_work = !command_active
                && match kind {
                    0 | 1 => published,
                    2 => true,
                    _ => installed,
                };
            let command = Command::IssueCommand {
                entity: id.clone(),
                command: cmd,
                reason: "break glass".into(),
                actor: "root".into(),
            };
            if should_work {
                hub.ok(command);
                // SPEC C2: the command is the entity's active plan, and it is audited.
                assert!(hub.active(&id).unwrap().kind.is_command());
                assert_eq!(hub.state.audit().last().unwrap().index, hub.index);
            } else {
                hub.err(command);
            }
        }
        Op::Channel(n, c) => hub.entity_settings(
            &entity_id(n),
            EntitySettingsPatch {
                release_channel: Some(CHANNELS[c].into()),
                ..Default::default()
            },
        ),
        Op::Groups(n, other) => hub.entity_settings(
            &entity_id(n),
            EntitySettingsPatch {
                dependency_groups: Some(if other {
                    vec!["other".into()]
                } else {
                    vec!["default".into()]
                }),
                ..Default::default()
            },
        ),
        Op::Ignore(n, ignore) => hub.entity_settings(
            &entity_id(n),
            EntitySettingsPatch {
                ignored_dependencies: Some(if ignore {
                    vec![DB.into(), APP.into()]
                } else {
                    vec![]
                }),
                ..Default::default()
            },
        ),
        Op::Registry(n, not_expected) => {
            hub.ok(Command::SetRegistry {
                environment: ENVS[n].into(),
                name: "reg".into(),
                url: "http://127.0.0.1:9/reg".into(),
                hub_access: if not_expected {
                    "not-expected"
                } else {
                    "expected"
                }
                .into(),
                ca_pem: None,
                insecure_skip_verify: false,
            });
        }
    }
}

/// Checks that hold after every step.
fn check_step(hub: &Hub, before: &State, op: &Op) {
    // Property 2: at most one active plan per entity, and the index agrees.
    let mut active: BTreeMap<&str, usize> = BTreeMap::new();
    for p in hub.state.plans().filter(|p| p.status.is_active()) {
        *active.entry(p.entity.as_str()).or_default() += 1;
    }
    for (entity, n) in &active {
        assert_eq!(*n, 1, "{entity} has {n} active plans after {op:?}");
        assert_eq!(
            hub.state
                .active_plan_of(entity)
                .map(|p| p.status.is_active()),
            Some(true)
        );
    }
    // New plans: only an Evaluate issues ordinary plans, only IssueCommand issues commands, and
    // no ordinary plan is issued under a manual suppression (property 3).
    let old: BTreeSet<&str> = before.plans().map(|p| p.id.as_str()).collect();
    for p in hub.state.plans().filter(|p| !old.contains(p.id.as_str())) {
        if p.kind.is_command() {
            assert!(
                matches!(op, Op::IssueCommand(..)),
                "{op:?} issued command {}",
                p.id
            );
        } else {
            assert!(matches!(op, Op::Step(..)), "{op:?} issued plan {}", p.id);
            assert!(
                !manual_suppression_at(before, &p.entity, hub.now),
                "{} issued under a manual suppression after {op:?}",
                p.id
            );
            if matches!(p.kind, PlanKind::Install | PlanKind::VersionChange) {
                let release = hub.state.release(
                    &hub.state.entity(&p.entity).unwrap().product_id,
                    p.to_version.as_ref().unwrap(),
                );
                assert!(release.is_some(), "{} targets an unpublished release", p.id);
            }
        }
    }
    // Issued plans keep their identity, active or finished; finished plans stay finished.
    for p in before.plans() {
        if let Some(q) = hub.state.plan(&p.id) {
            assert_eq!(
                (&q.entity, &q.kind, q.issued_ms, &q.to_version),
                (&p.entity, &p.kind, p.issued_ms, &p.to_version)
            );
        } else if let Some(o) = hub.state.plan_outcome(&p.id) {
            assert_eq!(
                (&o.entity, o.kind.label(), o.issued_index, &o.to_version),
                (&p.entity, p.kind.label(), p.issued_index, &p.to_version)
            );
        }
    }
    for o in before.plan_outcomes() {
        assert!(hub.state.plan(&o.id).is_none(), "{} active again", o.id);
        if let Some(q) = hub.state.plan_outcome(&o.id) {
            assert_eq!(q, o, "{} changed after {op:?}", o.id);
        }
    }
    // Property 1: evaluate is a pure function of the state (Hub::eval evaluates twice).
    for i in 0..ENTITIES {
        hub.eval(&entity_id(i));
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(96)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 2_000, ..ProptestConfig::default() })]

    // SPEC P2, P4, P7, P8, P9, P10, P11, P12, C1–C10, R2 (properties 1–4 above).
    #[test]
    fn random_histories_keep_the_invariants(ops in proptest::collection::vec(op(), 1..80)) {
        let mut hub = setup();
        for op in &ops {
            let before = hub.state.clone();
            apply_op(&mut hub, op);
            check_step(&hub, &before, op);
        }
        if std::env::var("HUB_PROP_STATS").is_ok() {
            let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
            for p in hub.state.plans() {
                *kinds.entry(format!("{}:{}", p.kind.label(), p.status)).or_default() += 1;
            }
            let blocked = (0..ENTITIES).filter(|i| hub.eval(&entity_id(*i)).is_blocked()).count();
            for s in hub.state.suppressions() {
                *kinds.entry(format!("sup:{}", s.source.label())).or_default() += 1;
            }
            eprintln!("STATS {kinds:?} blocked={blocked}");
        }
        // Property 1 and 4: replaying the log, and rebuilding from records, give this state.
        prop_assert_eq!(hub.replay_digest(), hub.state.digest());
        prop_assert!(State::from_records(hub.state.records()) == hub.state);
    }

    // SPEC R2: two hubs fed the same history agree on every result and on the digest.
    #[test]
    fn two_hubs_with_the_same_history_agree(ops in proptest::collection::vec(op(), 1..40)) {
        let (mut a, mut b) = (setup(), setup());
        for op in &ops {
            apply_op(&mut a, op);
            apply_op(&mut b, op);
            prop_assert_eq!(a.state.digest(), b.state.digest());
        }
        let results = |h: &Hub| -> Vec<String> {
            let mut s = State::new();
            h.log.iter().map(|(req, i)| format!("{:?}", s.apply(req, *i))).collect()
        };
        prop_assert_eq!(results(&a), results(&b));
    }
}

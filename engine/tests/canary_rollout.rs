//! Canaries driving the entity's rollout through `State::apply` (SPEC K2, K3, K9): a new
//! release becomes the canary's target instead of a plan, every committed step reaches the
//! agent as a `canary-step` plan carrying the desired state, step plans are issued one at a
//! time in step order (queued behind an active plan), and agent observations are stored.
//! Every apply runs the harness checks.

mod common;

use common::*;
use hub_engine::canary::{plan_tick, Phase};
use hub_engine::canary::{CanaryObservation, MetricWindow};
use hub_engine::evaluate::Outcome;
use hub_engine::plan::{PlanKind, PlanStatus};
use hub_engine::Command;

const ID: &str = "prod/podinfo";

fn fixture() -> String {
    let path = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("tests/fixtures/canary/valid/podinfo.yml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// prod/podinfo installed at 1.0.0 with the podinfo canary applied (and, with `key`, the
/// cluster's revision key set first), after one leader step.
fn with_canary(key: bool) -> (Hub, String) {
    with_canary_yaml(key, fixture())
}

/// [`with_canary`] with the canary resource `yaml`.
fn with_canary_yaml(key: bool, yaml: String) -> (Hub, String) {
    let mut hub = Hub::new();
    if key {
        hub.set_revision_key();
    }
    hub.env("prod");
    hub.product("com.example:podinfo");
    hub.publish("com.example:podinfo", "1.0.0", &[]);
    let e = hub.helm("prod", "podinfo", "com.example:podinfo");
    hub.converge(&e);
    hub.ok(Command::ApplyCanary {
        environment: Some("prod".into()),
        yaml,
    });
    assert!(hub.step().is_empty(), "a canary target is not a plan");
    (hub, e)
}

/// prod/podinfo installed at 1.0.0, with the podinfo canary applied and its target set.
fn setup() -> (Hub, String) {
    with_canary(true)
}

/// One leader tick with everything healthy: the agent runs what the status says, every
/// webhook answers 200 and every metric is in range. Returns the step plan it issued.
fn tick(hub: &mut Hub) -> Option<String> {
    let c = hub.state.canary(ID).unwrap().clone();
    if let Some(at) = c.status.next_tick_ms {
        hub.set_time(at.max(hub.now));
    }
    let revision = c.target.as_ref().expect("target").revision.clone();
    let plan = plan_tick(&c.spec, &c.status, &revision, hub.now);
    assert!(plan.due, "tick due at {:?}", c.status.next_tick_ms);
    let input = healthy_tick_input(&c, &plan, &revision);
    let before: Vec<String> = hub.state.plans().map(|p| p.id.clone()).collect();
    hub.ok(Command::CanaryTick {
        id: ID.into(),
        step: plan.step,
        input,
    });
    hub.state
        .plans()
        .map(|p| p.id.clone())
        .find(|p| !before.contains(p))
}

fn step_weight(hub: &Hub, plan: &str) -> (u64, u8, Phase) {
    match &hub.plan(plan).kind {
        PlanKind::CanaryStep(s) => (s.step, s.canary_weight, s.phase),
        other => panic!("{plan} is {other:?}"),
    }
}

#[test]
fn a_release_is_analysed_by_the_canary_and_every_step_reaches_the_agent_in_order() {
    // SPEC K3: the new release becomes the target, no version-change plan.
    let (mut hub, e) = setup();
    let target0 = hub
        .state
        .canary(ID)
        .unwrap()
        .target
        .clone()
        .expect("target");
    assert_eq!(target0.version, v("1.0.0"));
    assert!(hub
        .activity(&e)
        .iter()
        .any(|a| a.contains("targets revision")));

    // Initialisation: the primary at 1.0.0.
    let p = tick(&mut hub).expect("initialize plan");
    let PlanKind::CanaryStep(spec) = hub.plan(&p).kind else {
        unreachable!()
    };
    assert_eq!(spec.primary.as_ref().unwrap().revision, target0.revision);
    assert_eq!(spec.port, 9898);
    assert_eq!(spec.metric_windows_ms, vec![60_000]);
    assert_eq!(hub.plan(&p).kind.task_names(), ["apply"]);
    hub.succeed(&p);
    let mut applied = Vec::new();
    while hub.state.canary(ID).unwrap().status.phase != Phase::Initialized {
        if let Some(p) = tick(&mut hub) {
            hub.succeed(&p);
        }
    }

    hub.publish("com.example:podinfo", "1.1.0", &[]);
    let eval = hub.eval(&e);
    assert!(
        matches!(eval.outcome, Outcome::CanaryTarget { .. }),
        "{}",
        eval.summary()
    );
    assert!(hub.step().is_empty(), "no version-change plan");
    let target1 = hub.state.canary(ID).unwrap().target.clone().unwrap();
    assert_eq!(target1.version, v("1.1.0"));
    assert_ne!(target1.revision, target0.revision);
    // The next evaluation records nothing new.
    assert!(matches!(hub.eval(&e).outcome, Outcome::AtTarget { .. }));

    // Analysis to promotion; the agent applies each step plan before the next tick.
    for _ in 0..40 {
        if hub.state.canary(ID).unwrap().status.phase == Phase::Succeeded {
            break;
        }
        if let Some(p) = tick(&mut hub) {
            applied.push(step_weight(&hub, &p));
            hub.succeed(&p);
        }
    }
    let c = hub.state.canary(ID).unwrap();
    assert_eq!(c.status.phase, Phase::Succeeded);
    // Exactly: the canary deployed at 0, stepWeight 5 up to maxWeight 50, promotion (the
    // canary keeps its traffic while the primary is replaced), then all traffic back at once.
    let weights: Vec<u8> = applied.iter().map(|(_, w, _)| *w).collect();
    let mut expected: Vec<u8> = (0..=10).map(|i| i * 5).collect();
    expected.extend([50, 0, 0]);
    assert_eq!(weights, expected);
    let phases: Vec<Phase> = applied.iter().map(|(_, _, p)| *p).collect();
    assert_eq!(
        &phases[phases.len() - 3..],
        [Phase::Promoting, Phase::Finalising, Phase::Succeeded]
    );
    // One plan per committed step, in order, and each plan's weight is its step's.
    assert!(
        applied.windows(2).all(|w| w[0].0 + 1 == w[1].0),
        "{applied:?}"
    );
    for (step, weight, _) in &applied {
        if let Some((_, canary)) = c
            .actions
            .iter()
            .rev()
            .filter(|(s, _)| s + 1 == *step)
            .find_map(|(_, a)| a.weights())
        {
            assert_eq!(canary, *weight, "step {step}");
        }
    }
    // The history has one sample per committed tick, oldest first, ending where the status
    // is, with the metric values each tick judged.
    let history = hub.state.canary_history(ID).expect("history");
    let last = history.samples.back().expect("a sample");
    assert_eq!(
        (last.phase, last.canary_weight, last.step + 1),
        (c.status.phase, c.status.canary_weight, c.status.step)
    );
    assert!(history
        .samples
        .iter()
        .zip(history.samples.iter().skip(1))
        .all(|(a, b)| a.step < b.step && a.time_ms <= b.time_ms));
    let weights_charted: Vec<u8> = history.samples.iter().map(|s| s.canary_weight).collect();
    assert!(weights_charted.contains(&50), "{weights_charted:?}");
    let judged: Vec<_> = history.samples.iter().flat_map(|s| &s.metrics).collect();
    assert!(!judged.is_empty(), "the analysis judged metrics");
    assert!(judged.iter().all(|(_, v)| *v == Some(99_500)), "{judged:?}");
    // No plan but canary steps since the install.
    assert!(hub
        .plans_of(&e)
        .iter()
        .all(|p| p.kind.is_canary_step() || p.kind == PlanKind::Install));
    // The agent now reports the primary at 1.1.0: at target, nothing to do.
    hub.report(&e, Some("1.1.0"), hub_engine::entity::Health::Healthy);
    assert!(
        matches!(hub.eval(&e).outcome, Outcome::AtTarget { .. }),
        "{}",
        hub.eval(&e).summary()
    );
}

#[test]
fn steps_decided_while_a_plan_is_active_wait_and_are_issued_in_order() {
    // SPEC K9: the agent applies every committed weight, in order.
    let (mut hub, _e) = setup();
    let first = tick(&mut hub).expect("initialize plan");
    // The agent has not applied it; two manual commands' steps queue behind it.
    hub.ok(Command::CanaryManual {
        id: ID.into(),
        action: hub_engine::canary::Manual::Abort,
        actor: "ops".into(),
    });
    let queued = hub.state.canary(ID).unwrap().queued.len();
    assert!(queued <= 1, "{queued}");
    assert_eq!(hub.plan(&first).status, PlanStatus::Issued);
    hub.succeed(&first);
    // The queued step (if the abort decided one) is issued only now.
    let c = hub.state.canary(ID).unwrap();
    assert!(c.queued.is_empty());
    if queued == 1 {
        let active = hub.active(&c.entity).expect("queued step issued");
        assert!(active.kind.is_canary_step());
        assert!(step_weight(&hub, &active.id).0 > step_weight(&hub, &first).0);
    }
}

#[test]
fn observations_are_stored_with_the_entry_time_and_foreign_ones_skipped() {
    // SPEC K6: the proxy's metrics reach the leader through the replicated state.
    let (mut hub, _e) = setup();
    let o = CanaryObservation {
        applied_step: 1,
        primary_revision: Some("abc".into()),
        primary_ready_percent: 100,
        canary_revision: None,
        canary_ready_percent: 0,
        windows: vec![MetricWindow {
            interval_ms: 60_000,
            requests: 10,
            success_rate_milli: Some(100_000),
            p99_ms_milli: Some(3_000),
        }],
        observed_ms: 0,
    };
    hub.ok(Command::ReportCanaries {
        environment: "prod".into(),
        observations: vec![(ID.into(), o.clone()), ("prod/nope".into(), o.clone())],
    });
    let stored = hub.state.canary(ID).unwrap().observation.clone().unwrap();
    assert_eq!(stored.observed_ms, hub.now);
    assert_eq!(stored.windows, o.windows);
    // Another environment's agent cannot write it.
    hub.env("staging");
    hub.ok(Command::ReportCanaries {
        environment: "staging".into(),
        observations: vec![(
            ID.into(),
            CanaryObservation {
                applied_step: 9,
                ..o.clone()
            },
        )],
    });
    assert_eq!(
        hub.state
            .canary(ID)
            .unwrap()
            .observation
            .as_ref()
            .unwrap()
            .applied_step,
        1
    );
    // Out-of-range readiness is refused.
    let err = hub.err(Command::ReportCanaries {
        environment: "prod".into(),
        observations: vec![(
            ID.into(),
            CanaryObservation {
                canary_ready_percent: 101,
                ..o
            },
        )],
    });
    assert!(err.to_string().contains("ready_percent"), "{err}");
}

#[test]
fn deleting_with_revert_supersedes_pending_steps_with_a_restore_plan() {
    // SPEC K8: revertOnDeletion gives the entity its original workload back.
    let mut hub = Hub::new();
    hub.set_revision_key();
    hub.env("prod");
    hub.product("com.example:podinfo");
    hub.publish("com.example:podinfo", "1.0.0", &[]);
    let e = hub.helm("prod", "podinfo", "com.example:podinfo");
    hub.converge(&e);
    hub.ok(Command::ApplyCanary {
        environment: Some("prod".into()),
        yaml: fixture().replace("spec:\n", "spec:\n  revertOnDeletion: true\n"),
    });
    hub.step();
    let init = tick(&mut hub).expect("initialize plan");
    assert!(hub.state.canary_history(ID).is_some());
    hub.ok(Command::DeleteCanary { id: ID.into() });
    assert!(
        hub.state.canary_history(ID).is_none(),
        "deleted with its canary"
    );
    assert_eq!(hub.plan(&init).status, PlanStatus::Cancelled);
    let restore = hub.active(&e).expect("restore plan");
    let PlanKind::CanaryStep(spec) = &restore.kind else {
        panic!("{restore:?}")
    };
    assert!(spec.restore_original);
    assert_eq!(spec.canary_weight, 0);
    assert!(hub.state.canary(ID).is_none());
}

#[test]
fn a_canary_waits_for_the_clusters_revision_key_and_setting_it_sets_the_target() {
    let (mut hub, e) = with_canary(false);
    assert!(hub.state.canary(ID).unwrap().target.is_none());
    assert!(
        hub.activity(&e)
            .iter()
            .any(|a| a.contains("waits for the cluster's revision key")),
        "{:?}",
        hub.activity(&e)
    );
    // The leader sets the key: the canary's entity is re-evaluated.
    let applied = hub.set_revision_key();
    assert!(applied
        .triggers
        .contains(&hub_engine::Trigger::EntityOnly(e.clone())));
    assert!(hub.step().is_empty());
    let target = hub
        .state
        .canary(ID)
        .unwrap()
        .target
        .clone()
        .expect("target");
    assert!(target.revision.starts_with("v2:"), "{}", target.revision);
    // Once set, the key is never replaced.
    let err = hub.err(Command::SetClusterKey {
        name: hub_engine::cluster_key::CANARY_REVISION_KEY.into(),
        key: hub_engine::cluster_key::SecretKey::from_bytes([1; 32]),
    });
    assert!(err.to_string().contains("already exists"), "{err}");
    let err = hub.err(Command::SetClusterKey {
        name: "other".into(),
        key: hub_engine::cluster_key::SecretKey::from_bytes([1; 32]),
    });
    assert!(err.to_string().contains("not a cluster key"), "{err}");
}

/// The records as a release without revision keys would have stored them: the key record
/// gone and every v2 revision of the canary (and of its step plans) named by its v1 hash.
fn as_before_the_upgrade(hub: &Hub, e: &str) -> Vec<hub_engine::Record> {
    let c = hub.state.canary(ID).unwrap();
    let entity = hub.state.entity(e).unwrap();
    let secrets: std::collections::BTreeMap<String, String> = entity
        .secrets
        .iter()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    let renames: Vec<(String, String)> = c
        .revisions
        .iter()
        .map(|r| {
            let old = hub_engine::canary::legacy_revision_hash(
                &r.version.to_string(),
                &r.config,
                &secrets,
            );
            (r.revision.clone(), old)
        })
        .collect();
    assert!(!renames.is_empty());
    hub.stored_records()
        .filter(|r| !matches!(r, hub_engine::Record::ClusterKey(_)))
        .map(|r| {
            let mut json = serde_json::to_string(&r).unwrap();
            for (new, old) in &renames {
                json = json.replace(&format!("\"{new}\""), &format!("\"{old}\""));
            }
            serde_json::from_str(&json).unwrap()
        })
        .collect()
}

#[test]
fn a_canary_named_by_the_old_hash_is_not_analysed_again_after_the_upgrade() {
    // Flagger's complaint: a controller upgrade that changes the hash re-analyses every
    // canary. Here the canary was initialised and promoted 1.0.0 under a v1 revision.
    let (mut hub, e) = setup();
    while hub.state.canary(ID).unwrap().status.phase != Phase::Initialized {
        if let Some(p) = tick(&mut hub) {
            hub.succeed(&p);
        }
    }
    let records = as_before_the_upgrade(&hub, &e);
    hub.load_records(records);
    let before = hub.state.canary(ID).unwrap().clone();
    let old = before.target.clone().unwrap().revision;
    assert!(!old.starts_with("v2:"), "{old}");
    assert_eq!(
        before.status.last_promoted_spec.as_deref(),
        Some(old.as_str())
    );
    let plans_before = hub.state.plans().count();

    // Without the key yet, and once the upgraded leader set it: the same target.
    assert!(matches!(hub.eval(&e).outcome, Outcome::AtTarget { .. }));
    hub.set_revision_key();
    assert!(hub.step().is_empty());
    assert!(
        matches!(hub.eval(&e).outcome, Outcome::AtTarget { .. }),
        "{}",
        hub.eval(&e).summary()
    );
    // The stored revision stays what the agent runs it as; a resting canary whose target did
    // not change has nothing to tick (a new revision would be due at once).
    let c = hub.state.canary(ID).unwrap().clone();
    hub.set_time(c.status.next_tick_ms.unwrap_or(hub.now).max(hub.now) + 60_000);
    let revision = c.target.as_ref().unwrap().revision.clone();
    assert!(!plan_tick(&c.spec, &c.status, &revision, hub.now).due);
    let after = hub.state.canary(ID).unwrap();
    assert_eq!(after.target.as_ref().unwrap().revision, old);
    assert_eq!(after.status.phase, Phase::Initialized);
    assert_eq!(
        after.status.last_promoted_spec,
        before.status.last_promoted_spec
    );
    assert_eq!(hub.state.plans().count(), plans_before);

    // A real change is named in v2 and analysed.
    hub.publish("com.example:podinfo", "1.1.0", &[]);
    assert!(hub.step().is_empty());
    let target = hub.state.canary(ID).unwrap().target.clone().unwrap();
    assert!(target.revision.starts_with("v2:"), "{}", target.revision);
    let p = tick(&mut hub).expect("the analysis starts with a step plan");
    assert_eq!(
        hub.state.canary(ID).unwrap().status.phase,
        Phase::Progressing
    );
    hub.succeed(&p);
}

#[test]
fn a_canary_refuses_a_target_whose_workload_names_are_taken() {
    let mut hub = Hub::new();
    hub.env("prod");
    hub.helm("prod", "podinfo", "com.example:podinfo");
    hub.helm("prod", "podinfo-primary", "com.example:podinfo");
    let err = hub.err(Command::ApplyCanary {
        environment: Some("prod".into()),
        yaml: fixture(),
    });
    assert!(err.to_string().contains("podinfo-primary"), "{err}");
}

#[test]
fn a_fresh_baseline_runs_at_the_primarys_revision_while_a_revision_is_analysed() {
    // Issue 20, `judge.baseline: fresh`: every step plan of an analysis carries the baseline
    // workload at the primary's revision (version and config included), and the plans from
    // the promotion on carry none.
    use hub_engine::canary::{Histogram, MetricSamples};
    let yaml = fixture().replace(
        "        thresholdRange:\n          max: 500\n",
        "        judge: {type: mann-whitney, baseline: fresh, direction: increase, effectSize: 0.3}\n",
    );
    let (mut hub, _) = with_canary_yaml(true, yaml);
    let same = Histogram::from_pairs(&[(1_000, 30), (5_000, 10)]);
    // One judged tick with everything healthy; the agent applies the step plan it issues.
    let judged_tick = |hub: &mut Hub| -> Option<(Phase, u8, Option<String>)> {
        let c = hub.state.canary(ID).unwrap().clone();
        if let Some(at) = c.status.next_tick_ms {
            hub.set_time(at.max(hub.now));
        }
        let revision = c.target.as_ref().expect("target").revision.clone();
        let plan = plan_tick(&c.spec, &c.status, &revision, hub.now);
        let input = healthy_tick_input(&c, &plan, &revision);
        let before: Vec<String> = hub.state.plans().map(|p| p.id.clone()).collect();
        hub.ok(Command::CanaryJudgedTick {
            id: ID.into(),
            step: plan.step,
            input,
            samples: [(
                "request-duration".to_string(),
                MetricSamples {
                    canary: same.clone(),
                    baseline: same.clone(),
                },
            )]
            .into_iter()
            .collect(),
        });
        let p = hub
            .state
            .plans()
            .map(|p| p.id.clone())
            .find(|p| !before.contains(p))?;
        let kind = hub.plan(&p).kind;
        let step = kind.canary_step().expect("a canary step").clone();
        let baseline = kind.canary_baseline().map(|b| b.version.to_string());
        hub.succeed(&p);
        Some((step.phase, step.canary_weight, baseline))
    };
    let mut seen = Vec::new();
    while hub.state.canary(ID).unwrap().status.phase != Phase::Initialized {
        seen.extend(judged_tick(&mut hub));
    }
    hub.publish("com.example:podinfo", "1.1.0", &[]);
    assert!(hub.step().is_empty(), "no version-change plan");
    for _ in 0..40 {
        if hub.state.canary(ID).unwrap().status.phase == Phase::Succeeded {
            break;
        }
        seen.extend(judged_tick(&mut hub));
    }
    assert_eq!(hub.state.canary(ID).unwrap().status.phase, Phase::Succeeded);
    let analysing: Vec<_> = seen
        .iter()
        .filter(|(p, _, _)| *p == Phase::Progressing)
        .collect();
    assert!(analysing.len() > 5, "{seen:?}");
    assert!(
        analysing
            .iter()
            .all(|(_, _, b)| b.as_deref() == Some("1.0.0")),
        "every analysis step runs the baseline at the primary's 1.0.0: {seen:?}"
    );
    let from_promotion: Vec<_> = seen
        .iter()
        .skip_while(|(p, _, _)| *p != Phase::Promoting)
        .collect();
    assert!(!from_promotion.is_empty(), "{seen:?}");
    assert!(
        from_promotion.iter().all(|(_, _, b)| b.is_none()),
        "no baseline from the promotion on: {seen:?}"
    );
    assert!(
        seen.iter()
            .filter(|(p, _, _)| matches!(p, Phase::Initializing | Phase::Initialized))
            .all(|(_, _, b)| b.is_none()),
        "{seen:?}"
    );
    // The judge compared with the baseline's samples.
    let v = &hub.state.canary_judging(ID).unwrap().verdicts[0];
    assert_eq!(v.verdict, hub_engine::canary::Verdict::Pass, "{}", v.reason);
}

/// [`tick`] as the leader plans it: with the spec the state says the tick runs with
/// ([`hub_engine::State::canary_tick_spec`]). Returns the step plan it issued and how many
/// metrics the tick planned to measure.
fn leader_tick(hub: &mut Hub) -> (Option<String>, usize) {
    let c = hub.state.canary(ID).unwrap().clone();
    if let Some(at) = c.status.next_tick_ms {
        hub.set_time(at.max(hub.now));
    }
    let revision = c.target.as_ref().expect("target").revision.clone();
    let spec = hub.state.canary_tick_spec(&c, &revision).into_owned();
    let plan = plan_tick(&spec, &c.status, &revision, hub.now);
    assert!(plan.due, "tick due at {:?}", c.status.next_tick_ms);
    let measured = plan.metrics.len();
    let input = healthy_tick_input(&c, &plan, &revision);
    let before: Vec<String> = hub.state.plans().map(|p| p.id.clone()).collect();
    hub.ok(Command::CanaryTick {
        id: ID.into(),
        step: plan.step,
        input,
    });
    let issued = hub
        .state
        .plans()
        .map(|p| p.id.clone())
        .find(|p| !before.contains(p));
    (issued, measured)
}

/// Issue 55, item 6: with config tracking off, for the canary (Flagger's annotation) or for
/// the hub (its replicated setting), a config change is promoted without analysis; with it
/// on (the default) it is analysed, and a new release is analysed either way.
#[test]
fn config_tracking_off_promotes_a_config_change_without_analysis() {
    let annotated = fixture().replacen(
        "metadata:\n  name: podinfo\n",
        "metadata:\n  name: podinfo\n  annotations:\n    flagger.app/config-tracking: disabled\n    example.com/team: web\n",
        1,
    );
    // (resource, hub tracking, whether a config change is analysed)
    let cases = [
        (fixture(), true, true),
        (annotated, true, false),
        (fixture(), false, false),
    ];
    for (yaml, hub_tracking, analysed) in cases {
        let (mut hub, e) = with_canary_yaml(true, yaml);
        if !hub_tracking {
            hub.ok(Command::SetCanaryConfigTracking { enabled: false });
            assert!(!hub.state.cluster_settings().canary_config_tracking);
        }
        while hub.state.canary(ID).unwrap().status.phase != Phase::Initialized {
            if let (Some(p), _) = leader_tick(&mut hub) {
                hub.succeed(&p);
            }
        }
        let primary = hub
            .state
            .canary(ID)
            .unwrap()
            .status
            .primary_revision
            .clone();

        hub.ok(Command::SetConfigOverrides {
            entity: e.clone(),
            version: "1.0.0".into(),
            config: Some("replicas: 3\n".into()),
        });
        assert!(hub.step().is_empty(), "a canary target, not a config plan");
        let target = hub.state.canary(ID).unwrap().target.clone().unwrap();
        assert_eq!(target.config, "replicas: 3\n");
        assert!(hub
            .state
            .canary(ID)
            .unwrap()
            .differs_from_primary_only_in_config(&target.revision));

        let (mut weights, mut measured) = (Vec::new(), 0);
        for _ in 0..40 {
            if hub.state.canary(ID).unwrap().status.phase == Phase::Succeeded {
                break;
            }
            let (p, m) = leader_tick(&mut hub);
            measured += m;
            if let Some(p) = p {
                weights.push(step_weight(&hub, &p).1);
                hub.succeed(&p);
            }
        }
        let c = hub.state.canary(ID).unwrap();
        assert_eq!(c.status.phase, Phase::Succeeded, "{analysed}");
        assert_eq!(c.status.primary_revision, Some(target.revision.clone()));
        assert_ne!(c.status.primary_revision, primary);
        if analysed {
            assert!(measured > 0 && weights.contains(&50), "{weights:?}");
        } else {
            assert_eq!(measured, 0, "no metric is measured: {weights:?}");
            assert!(
                weights.iter().all(|w| *w == 0),
                "no traffic shifted: {weights:?}"
            );
            let history = hub.state.canary_history(ID).expect("history");
            assert!(history.samples.iter().all(|s| s.metrics.is_empty()));
        }

        // A new release is analysed whatever the setting: it is not a config change.
        hub.publish("com.example:podinfo", "1.1.0", &[]);
        assert!(hub.step().is_empty());
        let target = hub.state.canary(ID).unwrap().target.clone().unwrap();
        assert_eq!(target.version, v("1.1.0"));
        let c = hub.state.canary(ID).unwrap().clone();
        let spec = hub.state.canary_tick_spec(&c, &target.revision);
        assert!(!spec.skip_analysis);
        assert_eq!(hub.replay_digest(), hub.state.digest());
    }
}

#[test]
fn a_config_tracking_annotation_other_than_enabled_or_disabled_is_refused() {
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product("com.example:podinfo");
    hub.helm("prod", "podinfo", "com.example:podinfo");
    let yaml = fixture().replacen(
        "metadata:\n  name: podinfo\n",
        "metadata:\n  name: podinfo\n  annotations:\n    flagger.app/config-tracking: off\n",
        1,
    );
    let err = hub.err(Command::ApplyCanary {
        environment: Some("prod".into()),
        yaml,
    });
    let msg = err.to_string();
    assert!(
        msg.contains("metadata.annotations.flagger.app/config-tracking")
            && msg.contains("must be \"enabled\" or \"disabled\""),
        "{msg}"
    );
}

/// One leader tick as [`tick`] does it, also returning what the apply reported (its
/// triggers).
fn tick_applied(hub: &mut Hub) -> (Option<String>, hub_engine::Applied) {
    let c = hub.state.canary(ID).unwrap().clone();
    if let Some(at) = c.status.next_tick_ms {
        hub.set_time(at.max(hub.now));
    }
    let revision = c.target.as_ref().expect("target").revision.clone();
    let plan = plan_tick(&c.spec, &c.status, &revision, hub.now);
    assert!(plan.due, "tick due at {:?}", c.status.next_tick_ms);
    let input = healthy_tick_input(&c, &plan, &revision);
    let before: Vec<String> = hub.state.plans().map(|p| p.id.clone()).collect();
    let applied = hub.apply(Command::CanaryTick {
        id: ID.into(),
        step: plan.step,
        input,
    });
    applied.result.as_ref().expect("tick refused");
    let issued = hub
        .state
        .plans()
        .map(|p| p.id.clone())
        .find(|p| !before.contains(p));
    (issued, applied)
}

/// The entities the leader's orchestrator evaluates after `applied`: its triggers, expanded.
fn triggered(hub: &Hub, applied: &hub_engine::Applied) -> Vec<String> {
    let mut ids: Vec<String> = applied
        .triggers
        .iter()
        .flat_map(|t| hub.state.affected_entities(t))
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Ticks (the agent applying every step plan) until the canary is Initialized.
fn initialise(hub: &mut Hub) {
    for _ in 0..10 {
        if hub.state.canary(ID).unwrap().status.phase == Phase::Initialized {
            return;
        }
        if let Some(p) = tick(hub) {
            hub.succeed(&p);
        }
    }
    panic!(
        "not initialised: {:?}",
        hub.state.canary(ID).unwrap().status
    );
}

/// The version of the revision the canary's primary runs.
fn primary_version(hub: &Hub) -> semver::Version {
    let c = hub.state.canary(ID).unwrap();
    let primary = c.status.primary_revision.as_ref().expect("a primary");
    c.revisions
        .iter()
        .chain(&c.target)
        .find(|r| &r.revision == primary)
        .map(|r| r.version.clone())
        .expect("the primary's revision is remembered")
}

#[test]
fn deleting_a_canary_re_evaluates_its_entity_at_once_whether_a_step_is_active_or_not() {
    // Issue 52: after `canary delete` (no revertOnDeletion) `entity explain` said "meets
    // constraints: yes, issued: no" for over 90 s: the delete triggered no evaluation.
    for step_active in [true, false] {
        let (mut hub, e) = setup();
        initialise(&mut hub);
        hub.publish("com.example:podinfo", "1.1.0", &[]);
        assert!(hub.step().is_empty(), "the canary analyses 1.1.0");
        let step = tick(&mut hub).expect("the canary's first step plan");
        if !step_active {
            hub.succeed(&step);
        }
        let applied = hub.apply(Command::DeleteCanary { id: ID.into() });
        applied.result.as_ref().expect("deleted");
        let ids = triggered(&hub, &applied);
        assert!(
            ids.contains(&e),
            "step active: {step_active}: the delete re-evaluates {e}: {:?}",
            applied.triggers
        );
        // The orchestrator evaluates them at once: an ordinary plan from what the agent
        // reports (the primary, left serving) to the candidate.
        let issued = hub.step_entities(&ids);
        assert_eq!(issued.len(), 1, "step active: {step_active}");
        let plan = hub.plan(&issued[0]);
        assert_eq!(plan.kind, PlanKind::VersionChange);
        assert_eq!(
            (plan.from_version, plan.to_version),
            (Some(v("1.0.0")), Some(v("1.1.0")))
        );
        let step_status = hub.plan(&step).status;
        if step_active {
            assert_eq!(
                step_status,
                PlanStatus::Cancelled,
                "a moot step is cancelled"
            );
        } else {
            assert_eq!(step_status, PlanStatus::Succeeded);
        }
    }
}

#[test]
fn a_release_published_before_the_first_tick_is_analysed_before_it_reaches_the_primary() {
    // Issue 52: 1.1.0, published while the canary was initialising (its first tick waits one
    // whole interval), went to the primary with no analysis.
    let (mut hub, e) = setup();
    let initial = hub
        .state
        .canary(ID)
        .unwrap()
        .target
        .clone()
        .expect("target");
    assert_eq!(initial.version, v("1.0.0"));
    hub.publish("com.example:podinfo", "1.1.0", &[]);
    assert!(
        hub.step().is_empty(),
        "no version-change plan under a canary"
    );
    let init = tick(&mut hub).expect("initialize plan");
    let PlanKind::CanaryStep(spec) = hub.plan(&init).kind else {
        panic!("{:?}", hub.plan(&init).kind)
    };
    assert_eq!(
        spec.primary.as_ref().map(|p| p.version.clone()),
        Some(v("1.0.0")),
        "the primary starts from what the entity runs"
    );
    hub.succeed(&init);
    analysed_after_initialisation(&mut hub, &e);
}

#[test]
fn a_release_published_while_the_primary_gets_ready_is_analysed_before_it_reaches_it() {
    // The same slip one tick later: the primary is set up at 1.0.0 and not ready yet when
    // 1.1.0 is published; the next tick must not set the primary up again at 1.1.0.
    let (mut hub, e) = setup();
    let init = tick(&mut hub).expect("initialize plan");
    hub.succeed(&init);
    assert_eq!(
        hub.state.canary(ID).unwrap().status.phase,
        Phase::Initializing
    );
    hub.publish("com.example:podinfo", "1.1.0", &[]);
    assert!(
        hub.step().is_empty(),
        "no version-change plan under a canary"
    );
    analysed_after_initialisation(&mut hub, &e);
}

/// Initialises the canary (1.1.0 published meanwhile) and checks that the primary stays at
/// 1.0.0 and that 1.1.0 becomes the target as soon as initialisation is done, then starts its
/// analysis as the canary workload.
fn analysed_after_initialisation(hub: &mut Hub, e: &str) {
    let mut last = None;
    for _ in 0..10 {
        if hub.state.canary(ID).unwrap().status.phase == Phase::Initialized {
            break;
        }
        let (plan, applied) = tick_applied(hub);
        if let Some(p) = plan {
            hub.succeed(&p);
        }
        last = Some(applied);
    }
    let c = hub.state.canary(ID).unwrap().clone();
    assert_eq!(c.status.phase, Phase::Initialized, "{:?}", c.status);
    assert_eq!(
        primary_version(hub),
        v("1.0.0"),
        "no release reached the primary"
    );
    assert_eq!(c.status.last_promoted_spec, c.status.primary_revision);
    // Initialised: the entity is evaluated again at once, and 1.1.0 becomes the target.
    let ids = triggered(hub, last.as_ref().expect("ticked"));
    assert!(ids.iter().any(|i| i == e), "{:?}", last.map(|a| a.triggers));
    assert!(hub.step_entities(&ids).is_empty(), "no plan under a canary");
    let target = hub
        .state
        .canary(ID)
        .unwrap()
        .target
        .clone()
        .expect("target");
    assert_eq!(target.version, v("1.1.0"));
    // Its analysis starts with 1.1.0 as the canary workload, the primary still at 1.0.0.
    let p = tick(hub).expect("deploy canary step");
    let c = hub.state.canary(ID).unwrap();
    assert_eq!(c.status.phase, Phase::Progressing);
    assert_eq!(c.status.canary_revision.as_ref(), Some(&target.revision));
    assert_eq!(primary_version(hub), v("1.0.0"));
    let PlanKind::CanaryStep(spec) = hub.plan(&p).kind else {
        panic!("{:?}", hub.plan(&p).kind)
    };
    assert_eq!(spec.primary.map(|p| p.version), Some(v("1.0.0")));
    assert_eq!(spec.canary_workload.map(|c| c.version), Some(v("1.1.0")));
}

#[test]
fn webhook_payloads_name_the_environment_given_with_n() {
    // Issue 52: `"namespace": ""` when the canary took its environment from `-n` (the
    // fixture has no metadata.namespace), which breaks load-tester gates keyed by namespace.
    let (mut hub, _e) = setup();
    initialise(&mut hub);
    hub.publish("com.example:podinfo", "1.1.0", &[]);
    hub.step();
    let mut calls = Vec::new();
    for _ in 0..5 {
        let c = hub.state.canary(ID).unwrap().clone();
        let at = c.status.next_tick_ms.unwrap_or(hub.now).max(hub.now);
        let revision = c.target.clone().expect("target").revision;
        // What the leader calls (`leader::canary_step` plans with this spec).
        let spec = hub.state.canary_tick_spec(&c, &revision);
        calls.extend(plan_tick(&spec, &c.status, &revision, at).webhooks);
        if let Some(p) = tick(&mut hub) {
            hub.succeed(&p);
        }
    }
    assert!(
        calls.iter().any(|w| w.name == "load-test"),
        "{:?}",
        calls.iter().map(|w| &w.name).collect::<Vec<_>>()
    );
    for call in &calls {
        assert_eq!(call.payload.namespace, "prod", "{}", call.name);
    }
    assert_eq!(
        hub.state.canary(ID).unwrap().spec.namespace.as_deref(),
        Some("prod")
    );
}

#[test]
fn a_canary_stored_without_its_namespace_gets_its_environment_in_webhook_payloads() {
    // A canary applied with `-n` before ApplyCanary recorded the environment as its
    // namespace: its stored spec names none, and its ticks still name the environment.
    let (mut hub, _e) = setup();
    let records: Vec<hub_engine::Record> = hub
        .stored_records()
        .cloned()
        .map(|r| match r {
            hub_engine::Record::Canary(mut c) => {
                c.spec.namespace = None;
                hub_engine::Record::Canary(c)
            }
            other => other,
        })
        .collect();
    hub.load_records(records);
    let c = hub.state.canary(ID).unwrap().clone();
    assert_eq!(c.spec.namespace, None);
    let revision = c.target.clone().expect("target").revision;
    assert_eq!(
        hub.state
            .canary_tick_spec(&c, &revision)
            .namespace
            .as_deref(),
        Some("prod")
    );
}

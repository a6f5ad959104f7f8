//! Fleet waves (issue 20): environment labels, rollout policies and the `rollout-wave`
//! constraint, through the public API. Every apply also checks determinism and persistence
//! (see `common::Hub::apply`).

mod common;

use std::collections::BTreeMap;

use common::*;
use hub_engine::entity::Health;
use hub_engine::evaluate::{
    format_time, rollout_status, ConstraintKind, ConstraintResult, Evaluation, Outcome,
};
use hub_engine::plan::PlanKind;
use hub_engine::rollout::HaltCause;
use hub_engine::{Command, CommandError, CommandOutput, State, Trigger};

const API: &str = "com.example:api";
const DB: &str = "com.example:db";

/// Two waves: `eu-canary` (eu-1 by name, eu-2 by label) soaking 30m, `prod` (prod-1 and
/// prod-2 by label) soaking 1h. dev-1 is in no wave.
const TWO_WAVES: &str = "\
product: com.example:api
waves:
  - name: eu-canary
    selector: {environments: [eu-1], labels: {tier: canary}}
    soak: 30m
    onFailure: halt
  - name: prod
    selector: {labels: {tier: prod}}
    soak: 1h
    onFailure: recall
";

fn set_labels(hub: &mut Hub, env: &str, labels: &[(&str, Option<&str>)]) -> CommandOutput {
    hub.ok(Command::SetEnvironmentLabels {
        environment: env.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
            .collect(),
    })
}

fn rollout_wave(e: &Evaluation) -> &ConstraintResult {
    e.constraints
        .iter()
        .find(|c| c.constraint == ConstraintKind::RolloutWave)
        .unwrap_or_else(|| panic!("no rollout-wave constraint in {e:#?}"))
}

fn wave_text(e: &Evaluation) -> String {
    rollout_wave(e).reason.to_string()
}

/// The fleet: environments eu-1, eu-2 (tier=canary), prod-1, prod-2 (tier=prod), dev-1;
/// `products` each with an entity of the product's name in every environment, running
/// 1.0.0; the policy applied; 2.0.0 published. Returns the hub.
fn fleet(products: &[&str], policy: &str) -> Hub {
    let mut hub = Hub::new();
    for env in ["eu-1", "eu-2", "prod-1", "prod-2", "dev-1"] {
        hub.env(env);
    }
    set_labels(&mut hub, "eu-2", &[("tier", Some("canary"))]);
    set_labels(&mut hub, "prod-1", &[("tier", Some("prod"))]);
    set_labels(
        &mut hub,
        "prod-2",
        &[("tier", Some("prod")), ("region", Some("us"))],
    );
    for product in products {
        hub.product(product);
        hub.publish(product, "1.0.0", &[]);
        let name = product.split_once(':').unwrap().1;
        for env in ["eu-1", "eu-2", "prod-1", "prod-2", "dev-1"] {
            let id = hub.helm(env, name, product);
            hub.installed(&id, "1.0.0");
        }
    }
    hub.ok(Command::ApplyRolloutPolicy {
        yaml: policy.into(),
    });
    for product in products {
        hub.publish(product, "2.0.0", &[]);
    }
    hub
}

fn api(env: &str) -> String {
    helm_id(env, "api")
}

fn db(env: &str) -> String {
    helm_id(env, "db")
}

fn soak_until(hub: &Hub, wave: &str) -> Option<i64> {
    hub.state
        .rollout(API, &v("2.0.0"))
        .and_then(|r| r.waves.get(wave))
        .and_then(|w| w.soak_until_ms)
}

#[test]
fn wave_two_opens_exactly_at_the_end_of_wave_ones_soak() {
    let mut hub = fleet(&[API], TWO_WAVES);
    // Wave 1 is open; wave 2 and the entities in no wave wait for it.
    let e = hub.eval(&api("eu-1"));
    assert_eq!(e.outcome, Outcome::Issue, "{}", e.summary());
    assert_eq!(wave_text(&e), "wave `eu-canary` is open for 2.0.0");
    let e = hub.eval(&api("prod-1"));
    assert_eq!(
        e.outcome,
        Outcome::Blocked {
            may_clear_at_ms: None
        }
    );
    assert_eq!(
        wave_text(&e),
        "waiting for wave `eu-canary` to complete (0 of 2 entities done)"
    );
    assert_eq!(
        wave_text(&hub.eval(&api("dev-1"))),
        "waiting for wave `eu-canary` to complete (0 of 2 entities done)"
    );
    // A leader step issues plans to wave 1 only.
    let issued = hub.step();
    let targets: Vec<String> = issued.iter().map(|p| hub.plan(p).entity).collect();
    assert_eq!(targets, [api("eu-1"), api("eu-2")]);
    hub.advance(5 * MINUTE);
    hub.succeed(&issued[0]);
    assert_eq!(
        wave_text(&hub.eval(&api("prod-1"))),
        "waiting for wave `eu-canary` to complete (1 of 2 entities done)"
    );
    assert_eq!(soak_until(&hub, "eu-canary"), None);
    hub.advance(5 * MINUTE);
    let done_at = hub.now;
    // The last task report of wave 1 commits the wave's end of soak, and wakes the product.
    let names = hub.plan(&issued[1]).kind.task_names();
    for name in &names[..names.len() - 1] {
        hub.task(
            &issued[1],
            name,
            1,
            hub_engine::plan::TaskState::Succeeded,
            "",
        )
        .result
        .unwrap();
    }
    let last = hub.task(
        &issued[1],
        names[names.len() - 1],
        1,
        hub_engine::plan::TaskState::Succeeded,
        "",
    );
    assert!(last.triggers.contains(&Trigger::Product(API.into())));
    let soak_end = done_at + 30 * MINUTE;
    assert_eq!(soak_until(&hub, "eu-canary"), Some(soak_end));
    // Wave 2 waits for the soak, with the soak end as its may-clear-at.
    hub.advance(10 * MINUTE);
    let e = hub.eval(&api("prod-1"));
    assert_eq!(
        e.outcome,
        Outcome::Blocked {
            may_clear_at_ms: Some(soak_end)
        }
    );
    assert_eq!(
        wave_text(&e),
        format!(
            "waiting for wave `eu-canary` to soak until {} (2 of 2 entities done)",
            format_time(soak_end)
        )
    );
    assert_eq!(
        wave_text(&e),
        "waiting for wave `eu-canary` to soak until 2026-11-30T00:40:00Z (2 of 2 entities done)"
    );
    assert_eq!(rollout_wave(&e).may_clear_at_ms, Some(soak_end));
    assert!(hub.step().is_empty(), "nothing opens during the soak");
    // One millisecond before the soak end: still blocked; exactly at it: eligible.
    assert!(hub.eval_at(&api("prod-1"), soak_end - 1).is_blocked());
    let e = hub.eval_at(&api("prod-1"), soak_end);
    assert_eq!(e.outcome, Outcome::Issue, "{}", e.summary());
    assert_eq!(wave_text(&e), "wave `prod` is open for 2.0.0");
    hub.set_time(soak_end);
    let issued = hub.step();
    let targets: Vec<String> = issued.iter().map(|p| hub.plan(p).entity).collect();
    assert_eq!(
        targets,
        [api("prod-1"), api("prod-2")],
        "dev-1 waits for prod"
    );
    assert_eq!(
        wave_text(&hub.eval(&api("dev-1"))),
        "waiting for wave `prod` to complete (0 of 2 entities done)"
    );
    for p in &issued {
        hub.succeed(p);
    }
    let prod_end = hub.now + 60 * MINUTE;
    assert_eq!(soak_until(&hub, "prod"), Some(prod_end));
    assert_eq!(
        hub.eval(&api("dev-1")).outcome,
        Outcome::Blocked {
            may_clear_at_ms: Some(prod_end)
        }
    );
    let e = hub.eval_at(&api("dev-1"), prod_end);
    assert_eq!(e.outcome, Outcome::Issue);
    assert_eq!(wave_text(&e), "in no wave: every wave of 2.0.0 has passed");
    // The status view agrees.
    let status = rollout_status(&hub.state, API, &v("2.0.0"), prod_end).unwrap();
    let summary: Vec<(Option<String>, usize, usize, bool)> = status
        .waves
        .iter()
        .map(|w| (w.name.clone(), w.done, w.entities.len(), w.passed))
        .collect();
    assert_eq!(
        summary,
        [
            (Some("eu-canary".into()), 2, 2, true),
            (Some("prod".into()), 2, 2, true),
            (None, 0, 1, false),
        ]
    );
}

#[test]
fn max_parallel_limits_the_plans_of_a_wave() {
    let policy = "\
product: com.example:api
waves:
  - name: prod
    selector: {labels: {tier: prod}, environments: [eu-1]}
    maxParallel: 2
";
    let mut hub = fleet(&[API], policy);
    // eu-1, prod-1 and prod-2 are in the wave: two plans at a time.
    let issued = hub.step();
    let targets: Vec<String> = issued.iter().map(|p| hub.plan(p).entity).collect();
    assert_eq!(targets, [api("eu-1"), api("prod-1")]);
    let e = hub.eval(&api("prod-2"));
    assert!(e.is_blocked());
    assert_eq!(
        wave_text(&e),
        "wave `prod` has 2 entities moving to 2.0.0 (maxParallel 2)"
    );
    // A finished plan frees a place, and wakes the product.
    let names = hub.plan(&issued[0]).kind.task_names();
    let mut last = None;
    for name in names {
        last = Some(hub.task(
            &issued[0],
            name,
            1,
            hub_engine::plan::TaskState::Succeeded,
            "",
        ));
    }
    assert!(last
        .unwrap()
        .triggers
        .contains(&Trigger::Product(API.into())));
    let e = hub.eval(&api("prod-2"));
    assert_eq!(e.outcome, Outcome::Issue, "{}", e.summary());
    assert_eq!(hub.step().len(), 1);
}

#[test]
fn a_failed_plan_halts_the_rollout_and_resume_lifts_it() {
    let mut hub = fleet(&[API], TWO_WAVES);
    let p = hub.step_one(&api("eu-1")).unwrap();
    hub.fail(&p.id, "readiness");
    let halt = hub
        .state
        .rollout(API, &v("2.0.0"))
        .and_then(|r| r.halt.clone())
        .expect("halted");
    assert_eq!(
        halt.cause,
        HaltCause::PlanFailed {
            plan: p.id.clone(),
            entity: api("eu-1"),
            wave: Some("eu-canary".into()),
        }
    );
    assert!(
        halt.recalls.is_empty(),
        "eu-canary halts, it does not recall"
    );
    assert!(hub.state.recall_covering(API, &v("2.0.0")).is_none());
    // Nothing more moves to 2.0.0: not the rest of the wave, not later waves.
    let text = format!(
        "rollout of 2.0.0 halted: plan {} of {} failed in wave `eu-canary`",
        p.id,
        api("eu-1")
    );
    for env in ["eu-2", "prod-1", "dev-1"] {
        let e = hub.eval(&api(env));
        assert!(e.is_blocked(), "{env}: {}", e.summary());
        assert_eq!(wave_text(&e), text);
    }
    // The failed entity itself rolls back (the halt holds back only moves to 2.0.0).
    let e = hub.eval(&api("eu-1"));
    assert!(matches!(
        e.candidate.as_ref().unwrap().kind,
        PlanKind::Rollback { .. }
    ));
    // Resume: audited; the failure that halted it does not halt it again.
    hub.ok(Command::ResumeRollout {
        product: API.into(),
        version: "2.0.0".into(),
        actor: "alice".into(),
    });
    let rollout = hub.state.rollout(API, &v("2.0.0")).unwrap().clone();
    assert!(rollout.halt.is_none());
    assert!(rollout.forgiven.contains(&format!("plan {}", p.id)));
    let audit = hub.state.audit().last().unwrap().clone();
    assert_eq!(
        (
            audit.actor.as_str(),
            audit.action.as_str(),
            audit.target.as_str()
        ),
        ("alice", "resume-rollout", "com.example:api@2.0.0")
    );
    let e = hub.eval(&api("eu-2"));
    assert_eq!(e.outcome, Outcome::Issue, "{}", e.summary());
    // A new failure halts it again.
    let p2 = hub.step_one(&api("eu-2")).unwrap();
    hub.fail(&p2.id, "start");
    let halt = hub.state.rollout(API, &v("2.0.0")).unwrap().halt.clone();
    assert!(
        matches!(halt, Some(h) if matches!(&h.cause, HaltCause::PlanFailed { plan, .. } if *plan == p2.id))
    );
    assert!(matches!(
        hub.err(Command::HaltRollout {
            product: API.into(),
            version: "2.0.0".into(),
            reason: "again".into(),
            actor: "bob".into(),
        }),
        CommandError::FailedPrecondition(_)
    ));
}

#[test]
fn a_failure_in_a_recall_wave_recalls_the_release_fleet_wide() {
    let mut hub = fleet(&[API], TWO_WAVES);
    // Wave 1 passes (promoted, to keep the test short).
    for env in ["eu-1", "eu-2"] {
        hub.converge(&api(env));
    }
    hub.ok(Command::PromoteWave {
        product: API.into(),
        version: "2.0.0".into(),
        actor: "alice".into(),
    });
    let issued = hub.step();
    assert_eq!(issued.len(), 2, "prod-1 and prod-2");
    hub.succeed(&issued[0]);
    hub.fail(&issued[1], "readiness");
    let halt = hub
        .state
        .rollout(API, &v("2.0.0"))
        .unwrap()
        .halt
        .clone()
        .unwrap();
    assert!(
        matches!(&halt.cause, HaltCause::PlanFailed { wave: Some(w), .. } if w == "prod"),
        "{halt:?}"
    );
    assert_eq!(halt.recalls.len(), 1);
    let recall = hub
        .state
        .recall_covering(API, &v("2.0.0"))
        .expect("recalled");
    assert_eq!(recall.id, halt.recalls[0]);
    assert!(
        recall.reason.contains("failed in wave `prod`"),
        "{}",
        recall.reason
    );
    // Every entity running 2.0.0 rolls off it through the recall roll-off, waves or not.
    for env in ["eu-1", "eu-2", "prod-1"] {
        let e = hub.eval(&api(env));
        let c = e.candidate.as_ref().unwrap();
        assert_eq!(c.kind, PlanKind::RecallRollOff, "{env}: {}", e.summary());
        assert_eq!(c.to_version, Some(v("1.0.0")));
        assert_eq!(e.outcome, Outcome::Issue, "{env}: {}", e.summary());
    }
    // dev-1 stays on 1.0.0: 2.0.0 is recalled.
    let e = hub.eval(&api("dev-1"));
    assert!(
        matches!(e.outcome, Outcome::AtTarget { .. }),
        "{}",
        e.summary()
    );
}

#[test]
fn grouped_products_upgrade_db_first_within_a_wave_and_a_db_failure_halts_both() {
    let policy = "\
product: com.example:api
products: [com.example:db]
waves:
  - name: prod
    selector: {labels: {tier: prod}}
";
    let mut hub = fleet(&[DB, API], policy);
    let e = hub.eval(&api("prod-1"));
    assert!(e.is_blocked());
    assert_eq!(
        wave_text(&e),
        "waiting for com.example:db 2.0.0 in wave `prod` (0 of 2 entities done)"
    );
    assert_eq!(hub.eval(&db("prod-1")).outcome, Outcome::Issue);
    // A leader step issues db only.
    let issued = hub.step_entities(&[db("prod-1"), api("prod-1"), db("prod-2"), api("prod-2")]);
    let targets: Vec<String> = issued.iter().map(|p| hub.plan(p).entity).collect();
    assert_eq!(targets, [db("prod-1"), db("prod-2")]);
    hub.succeed(&issued[0]);
    assert_eq!(
        wave_text(&hub.eval(&api("prod-1"))),
        "waiting for com.example:db 2.0.0 in wave `prod` (1 of 2 entities done)"
    );
    // db fails in prod-2: the group's rollout of 2.0.0 halts, api included.
    hub.fail(&issued[1], "readiness");
    let e = hub.eval(&api("prod-1"));
    assert_eq!(
        wave_text(&e),
        format!(
            "rollout of 2.0.0 halted: plan {} of {} failed in wave `prod`",
            issued[1],
            db("prod-2")
        )
    );
    // Resumed and retried, db finishes; then api goes.
    hub.ok(Command::ResumeRollout {
        product: DB.into(),
        version: "2.0.0".into(),
        actor: "alice".into(),
    });
    let rollback = hub.step_one(&db("prod-2")).expect("the rollback");
    hub.succeed(&rollback.id);
    hub.advance(DAY);
    hub.ok(Command::ExpireSuppressions);
    hub.converge(&db("prod-2"));
    let e = hub.eval(&api("prod-1"));
    assert_eq!(e.outcome, Outcome::Issue, "{}", e.summary());
    assert_eq!(wave_text(&e), "wave `prod` is open for 2.0.0");
}

#[test]
fn promote_skips_a_soak_and_halt_and_resume_are_audited() {
    let mut hub = fleet(&[API], TWO_WAVES);
    for env in ["eu-1", "eu-2"] {
        hub.converge(&api(env));
    }
    assert!(soak_until(&hub, "eu-canary").is_some());
    assert!(hub.eval(&api("prod-1")).is_blocked());
    let out = hub.ok(Command::PromoteWave {
        product: API.into(),
        version: "2.0.0".into(),
        actor: "alice".into(),
    });
    assert!(
        out.summary()
            .contains("wave `eu-canary` promoted (soak until"),
        "{}",
        out.summary()
    );
    assert_eq!(hub.eval(&api("prod-1")).outcome, Outcome::Issue);
    let audit = hub.state.audit().last().unwrap().clone();
    assert_eq!(
        (audit.actor.as_str(), audit.action.as_str()),
        ("alice", "promote-wave")
    );
    // An operator's halt holds everything; halting twice or resuming twice is refused.
    let err = hub.err(Command::HaltRollout {
        product: API.into(),
        version: "2.0.0".into(),
        reason: String::new(),
        actor: "bob".into(),
    });
    assert!(matches!(err, CommandError::InvalidField { ref field, .. } if field == "reason"));
    hub.ok(Command::HaltRollout {
        product: API.into(),
        version: "2.0.0".into(),
        reason: "freeze for the holidays".into(),
        actor: "bob".into(),
    });
    assert_eq!(
        wave_text(&hub.eval(&api("prod-1"))),
        "rollout of 2.0.0 halted: by bob: freeze for the holidays"
    );
    assert!(hub.step().is_empty());
    assert_eq!(hub.state.audit().last().unwrap().action, "halt-rollout");
    // Promoting while halted is refused.
    assert!(matches!(
        hub.err(Command::PromoteWave {
            product: API.into(),
            version: "2.0.0".into(),
            actor: "alice".into(),
        }),
        CommandError::FailedPrecondition(_)
    ));
    hub.ok(Command::ResumeRollout {
        product: API.into(),
        version: "2.0.0".into(),
        actor: "bob".into(),
    });
    assert!(matches!(
        hub.err(Command::ResumeRollout {
            product: API.into(),
            version: "2.0.0".into(),
            actor: "bob".into(),
        }),
        CommandError::FailedPrecondition(_)
    ));
    assert_eq!(hub.eval(&api("prod-1")).outcome, Outcome::Issue);
    // Promote the prod wave before it is done, then nothing is left to promote.
    hub.ok(Command::PromoteWave {
        product: API.into(),
        version: "2.0.0".into(),
        actor: "alice".into(),
    });
    assert_eq!(hub.eval(&api("dev-1")).outcome, Outcome::Issue);
    assert!(matches!(
        hub.err(Command::PromoteWave {
            product: API.into(),
            version: "2.0.0".into(),
            actor: "alice".into(),
        }),
        CommandError::FailedPrecondition(_)
    ));
    // Unknown targets.
    assert!(matches!(
        hub.err(Command::PromoteWave {
            product: "com.example:nope".into(),
            version: "2.0.0".into(),
            actor: "alice".into(),
        }),
        CommandError::NotFound { .. }
    ));
    assert!(matches!(
        hub.err(Command::HaltRollout {
            product: API.into(),
            version: "9.9.9".into(),
            reason: "x".into(),
            actor: "alice".into(),
        }),
        CommandError::NotFound { .. }
    ));
}

#[test]
fn label_selectors_follow_label_changes() {
    let mut hub = fleet(&[API], TWO_WAVES);
    assert_eq!(
        hub.state.environment_labels("prod-2"),
        &BTreeMap::from([
            ("region".to_string(), "us".to_string()),
            ("tier".to_string(), "prod".to_string())
        ])
    );
    // eu-2 loses its canary label: it leaves wave 1 (after the last wave now).
    set_labels(&mut hub, "eu-2", &[("tier", None)]);
    assert!(hub
        .state
        .all_environment_labels()
        .all(|l| l.environment != "eu-2"));
    assert_eq!(
        wave_text(&hub.eval(&api("eu-2"))),
        "waiting for wave `eu-canary` to complete (0 of 1 entities done)"
    );
    // dev-1 becomes a canary: in wave 1, open.
    set_labels(&mut hub, "dev-1", &[("tier", Some("canary"))]);
    assert_eq!(
        wave_text(&hub.eval(&api("dev-1"))),
        "wave `eu-canary` is open for 2.0.0"
    );
    // A wave whose label matches nothing more is passed over (nothing to soak).
    set_labels(&mut hub, "prod-1", &[("tier", Some("staging"))]);
    set_labels(&mut hub, "prod-2", &[("tier", Some("staging"))]);
    hub.converge(&api("eu-1"));
    hub.converge(&api("dev-1"));
    let end = soak_until(&hub, "eu-canary").expect("wave 1 done");
    let e = hub.eval_at(&api("eu-2"), end);
    assert_eq!(e.outcome, Outcome::Issue, "{}", e.summary());
    // Labels are validated, with the field named.
    let err = hub.err(Command::SetEnvironmentLabels {
        environment: "eu-1".into(),
        labels: BTreeMap::from([("Tier".to_string(), Some("x".to_string()))]),
    });
    assert!(
        matches!(err, CommandError::InvalidField { ref field, .. } if field == "labels.Tier"),
        "{err}"
    );
    let err = hub.err(Command::SetEnvironmentLabels {
        environment: "eu-1".into(),
        labels: BTreeMap::from([("tier".to_string(), Some("a b".to_string()))]),
    });
    assert!(
        matches!(err, CommandError::InvalidField { ref field, .. } if field == "labels.tier"),
        "{err}"
    );
    let many: BTreeMap<String, Option<String>> = (0..33)
        .map(|i| (format!("k{i}"), Some("v".to_string())))
        .collect();
    let err = hub.err(Command::SetEnvironmentLabels {
        environment: "eu-1".into(),
        labels: many,
    });
    assert!(matches!(err, CommandError::InvalidField { ref field, .. } if field == "labels"));
    assert!(matches!(
        hub.err(Command::SetEnvironmentLabels {
            environment: "nowhere".into(),
            labels: BTreeMap::from([("tier".to_string(), Some("x".to_string()))]),
        }),
        CommandError::NotFound { .. }
    ));
    // Deleting an environment deletes its labels.
    hub.env("empty");
    set_labels(&mut hub, "empty", &[("tier", Some("prod"))]);
    hub.ok(Command::DeleteEnvironment {
        name: "empty".into(),
    });
    assert!(hub.state.environment_labels("empty").is_empty());
    hub.env("empty");
    assert!(hub.state.environment_labels("empty").is_empty());
}

#[test]
fn bad_policies_are_refused_naming_the_field_path() {
    let mut hub = fleet(&[API], TWO_WAVES);
    let field_and_reason = |e: CommandError| match e {
        CommandError::InvalidField { field, reason } => (field, reason),
        other => panic!("{other:?}"),
    };
    let (field, reason) = field_and_reason(
        hub.err(Command::ApplyRolloutPolicy {
            yaml: TWO_WAVES
                .replace("soak: 30m", "soak: half an hour")
                .replace("onFailure: recall", "onFailure: panic"),
        }),
    );
    assert_eq!(field, "rollout-policy");
    assert!(reason.contains("waves[0].soak: "), "{reason}");
    assert!(
        reason.contains("waves[1].onFailure: \"panic\" is not halt or recall"),
        "{reason}"
    );
    let (field, reason) = field_and_reason(hub.err(Command::ApplyRolloutPolicy {
        yaml: TWO_WAVES.replace("    soak: 1h", "    sok: 1h"),
    }));
    assert_eq!(field, "rollout-policy");
    assert!(
        reason.contains("waves[1].sok: unknown field `sok`"),
        "{reason}"
    );
    assert!(reason.contains("line 9"), "{reason}");
    // Checks against the state name their path too.
    let (field, reason) = field_and_reason(hub.err(Command::ApplyRolloutPolicy {
        yaml: TWO_WAVES.replace("product: com.example:api", "product: com.example:nope"),
    }));
    assert_eq!(
        (field.as_str(), reason.as_str()),
        ("product", "product com.example:nope does not exist")
    );
    let (field, reason) = field_and_reason(hub.err(Command::ApplyRolloutPolicy {
        yaml: TWO_WAVES.replace("[eu-1]", "[eu-1, eu-9]"),
    }));
    assert_eq!(field, "waves[0].selector.environments");
    assert!(reason.contains("eu-9"), "{reason}");
    // A product moves under one policy only.
    hub.product("com.example:web");
    let (field, reason) = field_and_reason(hub.err(Command::ApplyRolloutPolicy {
        yaml: TWO_WAVES.replace(
            "product: com.example:api",
            "product: com.example:web\nproducts: [com.example:api]",
        ),
    }));
    assert_eq!(field, "products[0]");
    assert!(
        reason.contains("rollout policy of com.example:api"),
        "{reason}"
    );
    // A soak given is at least one second.
    let (field, reason) = field_and_reason(hub.err(Command::ApplyRolloutPolicy {
        yaml: TWO_WAVES.replace("soak: 30m", "soak: 500ms"),
    }));
    assert_eq!(field, "rollout-policy");
    assert!(
        reason.contains("waves[0].soak: \"500ms\" is under one second"),
        "{reason}"
    );
    // A label selector matching no environment.
    let (field, reason) = field_and_reason(hub.err(Command::ApplyRolloutPolicy {
        yaml: TWO_WAVES.replace("{tier: prod}", "{tier: qa}"),
    }));
    assert_eq!(
        (field.as_str(), reason.as_str()),
        (
            "waves[1].selector",
            "selects no environment: none carries tier=qa"
        )
    );
    // An environment in two waves: named in one, labelled for the other...
    let (field, reason) = field_and_reason(hub.err(Command::ApplyRolloutPolicy {
        yaml: TWO_WAVES.replace("[eu-1]", "[eu-1, prod-1]"),
    }));
    assert_eq!(field, "waves[1].selector");
    assert!(
        reason.starts_with("selects environment prod-1, which waves[0] (`eu-canary`) selects too"),
        "{reason}"
    );
    // ...or named in both (the parser's check).
    let (field, reason) = field_and_reason(hub.err(Command::ApplyRolloutPolicy {
        yaml: TWO_WAVES.replace("{labels: {tier: prod}}", "{environments: [eu-1]}"),
    }));
    assert_eq!(field, "rollout-policy");
    assert!(
        reason.contains("waves[1].selector.environments: eu-1 is already in waves[0]"),
        "{reason}"
    );
    // A label change that would put an applied policy's environment in two waves (eu-1 is
    // named by wave 1; tier=prod selects for wave 2).
    let (field, reason) = field_and_reason(hub.err(Command::SetEnvironmentLabels {
        environment: "eu-1".into(),
        labels: BTreeMap::from([("tier".to_string(), Some("prod".to_string()))]),
    }));
    assert_eq!(
        (field.as_str(), reason.as_str()),
        (
            "labels",
            "eu-1 would be in waves `eu-canary`, `prod` of the rollout policy of \
             com.example:api: an environment belongs to one wave of a policy"
        )
    );
    // A grouped product without an entity in some wave: db runs in eu-1 only.
    hub.product(DB);
    hub.publish(DB, "1.0.0", &[]);
    let id = hub.helm("eu-1", "db", DB);
    hub.installed(&id, "1.0.0");
    let (field, reason) = field_and_reason(hub.err(Command::ApplyRolloutPolicy {
        yaml: TWO_WAVES.replace(
            "product: com.example:api",
            "product: com.example:api\nproducts: [com.example:db]",
        ),
    }));
    assert_eq!(
        (field.as_str(), reason.as_str()),
        (
            "products[0]",
            "com.example:db has no entity in wave `prod` (waves[1]): every product of a \
             group needs one in every wave"
        )
    );
    // The same document again changes nothing; a new one replaces the policy.
    let applied = hub.apply(Command::ApplyRolloutPolicy {
        yaml: TWO_WAVES.into(),
    });
    assert!(applied.result.is_ok());
    assert!(applied.changed.is_empty(), "{:?}", applied.changed);
    hub.ok(Command::ApplyRolloutPolicy {
        yaml: TWO_WAVES.replace("soak: 1h", "soak: 2h"),
    });
    assert_eq!(
        hub.state.rollout_policy(API).unwrap().waves[1].soak_ms,
        2 * HOUR
    );
    // Deleting it forgets its rollouts; the product rolls out without waves.
    hub.ok(Command::DeleteRolloutPolicy {
        product: API.into(),
    });
    assert!(hub.state.rollout_policy_of(API).is_none());
    assert_eq!(hub.state.rollouts().count(), 0);
    let e = hub.eval(&api("prod-1"));
    assert_eq!(e.outcome, Outcome::Issue);
    assert!(e
        .constraints
        .iter()
        .all(|c| c.constraint != ConstraintKind::RolloutWave));
}

#[test]
fn a_state_rebuilt_mid_soak_keeps_the_committed_soak_end() {
    let mut hub = fleet(&[API], TWO_WAVES);
    hub.converge(&api("eu-1"));
    hub.advance(2 * MINUTE);
    let done_at = hub.now;
    hub.converge(&api("eu-2"));
    let soak_end = done_at + 30 * MINUTE;
    assert_eq!(soak_until(&hub, "eu-canary"), Some(soak_end));
    // Mid-soak, a new leader: a state rebuilt from the records (snapshot or store).
    hub.advance(10 * MINUTE);
    let records: Vec<_> = hub.stored_records().cloned().collect();
    let rebuilt = State::from_records(records.clone());
    assert!(rebuilt == hub.state);
    assert_eq!(rebuilt.digest(), hub.state.digest());
    let lookup = |_: &hub_engine::artifact::ArtifactLocation| None;
    let mine = hub.eval(&api("prod-1"));
    let theirs = hub_engine::evaluate(&rebuilt, &api("prod-1"), hub.now, &lookup).unwrap();
    assert_eq!(mine.outcome, theirs.outcome);
    assert_eq!(
        theirs.outcome,
        Outcome::Blocked {
            may_clear_at_ms: Some(soak_end)
        },
        "the soak does not restart on the new leader"
    );
    // The new leader goes on from the records: reports that change entities of the wave
    // do not restart the soak, and the wave opens exactly once, at the committed end.
    hub.load_records(records);
    hub.advance(MINUTE);
    hub.report(&api("eu-1"), Some("2.0.0"), Health::Healthy);
    hub.ok(Command::ReportEntityStates {
        environment: "eu-2".into(),
        states: vec![hub_engine::command::EntityReport {
            entity: api("eu-2"),
            version: Some(v("2.0.0")),
            health: Health::Healthy,
            config_sha256: None,
            secrets_revision: None,
            message: "restarted a pod".into(),
        }],
    });
    assert_eq!(soak_until(&hub, "eu-canary"), Some(soak_end));
    hub.set_time(soak_end - 1);
    assert!(hub.step().is_empty());
    hub.set_time(soak_end);
    assert_eq!(hub.step().len(), 2, "prod-1 and prod-2, once");
    assert_eq!(hub.replay_digest(), hub.state.digest());
}

#[test]
fn a_regression_during_the_soak_restarts_it_and_after_the_soak_changes_nothing() {
    let mut hub = fleet(&[API], TWO_WAVES);
    hub.converge(&api("eu-1"));
    hub.converge(&api("eu-2"));
    let first_end = soak_until(&hub, "eu-canary").unwrap();
    // eu-2 in error before the soak ends: the wave is no longer done.
    hub.advance(10 * MINUTE);
    hub.report(&api("eu-2"), Some("2.0.0"), Health::Error);
    assert_eq!(soak_until(&hub, "eu-canary"), None);
    assert_eq!(
        wave_text(&hub.eval_at(&api("prod-1"), first_end)),
        "waiting for wave `eu-canary` to complete (1 of 2 entities done)"
    );
    // Healthy again: the soak starts again from then.
    hub.advance(5 * MINUTE);
    hub.report(&api("eu-2"), Some("2.0.0"), Health::Healthy);
    let second_end = hub.now + 30 * MINUTE;
    assert_eq!(soak_until(&hub, "eu-canary"), Some(second_end));
    assert!(second_end > first_end);
    assert!(hub.eval_at(&api("prod-1"), first_end).is_blocked());
    // Once the soak has ended, a regression does not close the next wave again.
    hub.set_time(second_end);
    hub.report(&api("eu-2"), Some("2.0.0"), Health::Error);
    assert_eq!(soak_until(&hub, "eu-canary"), Some(second_end));
    assert_eq!(hub.eval(&api("prod-1")).outcome, Outcome::Issue);
}

/// One leader tick of canary `id` with everything healthy (every webhook answers 200, every
/// metric in range), at its committed tick time; the agent applies the step plan it issues.
fn canary_tick(hub: &mut Hub, id: &str) {
    use hub_engine::canary::plan_tick;
    let c = hub.state.canary(id).unwrap().clone();
    if let Some(at) = c.status.next_tick_ms {
        hub.set_time(at.max(hub.now));
    }
    let revision = c.target.as_ref().expect("a target").revision.clone();
    let plan = plan_tick(&c.spec, &c.status, &revision, hub.now);
    let input = healthy_tick_input(&c, &plan, &revision);
    let before: Vec<String> = hub.state.plans().map(|p| p.id.clone()).collect();
    hub.ok(Command::CanaryTick {
        id: id.into(),
        step: plan.step,
        input,
    });
    let issued = hub
        .state
        .plans()
        .map(|p| p.id.clone())
        .find(|p| !before.contains(p));
    if let Some(p) = issued {
        hub.succeed(&p);
    }
}

#[test]
fn a_canary_in_a_wave_holds_the_next_wave_until_it_has_succeeded() {
    // Issue 20 item 2: an entity of the wave under a canary is done only when its canary
    // has Succeeded (and the entity reports the version healthy); until then the next wave
    // waits, and its soak starts from that moment.
    use hub_engine::canary::Phase;
    let mut hub = Hub::new();
    hub.set_revision_key();
    for env in ["eu-1", "eu-2", "prod-1", "prod-2", "dev-1"] {
        hub.env(env);
    }
    set_labels(&mut hub, "eu-2", &[("tier", Some("canary"))]);
    set_labels(&mut hub, "prod-1", &[("tier", Some("prod"))]);
    set_labels(&mut hub, "prod-2", &[("tier", Some("prod"))]);
    hub.product(API);
    hub.publish(API, "1.0.0", &[]);
    for env in ["eu-1", "eu-2", "prod-1", "prod-2", "dev-1"] {
        let id = hub.helm(env, "api", API);
        hub.installed(&id, "1.0.0");
    }
    hub.ok(Command::ApplyRolloutPolicy {
        yaml: TWO_WAVES.into(),
    });
    // eu-1's api runs under a canary, initialised at 1.0.0.
    let path = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("tests/fixtures/canary/valid/podinfo.yml");
    let yaml = std::fs::read_to_string(&path)
        .unwrap()
        .replace("    name: podinfo\n  service", "    name: api\n  service");
    hub.ok(Command::ApplyCanary {
        environment: Some("eu-1".into()),
        yaml,
    });
    let canary = "eu-1/podinfo";
    assert!(hub.step().is_empty(), "a canary target is not a plan");
    for _ in 0..10 {
        if hub.state.canary(canary).unwrap().status.phase == Phase::Initialized {
            break;
        }
        canary_tick(&mut hub, canary);
    }
    assert_eq!(
        hub.state.canary(canary).unwrap().status.phase,
        Phase::Initialized
    );

    // 2.0.0: eu-2 gets a plan, eu-1's canary the new target.
    hub.publish(API, "2.0.0", &[]);
    let issued = hub.step();
    let targets: Vec<String> = issued.iter().map(|p| hub.plan(p).entity).collect();
    assert_eq!(targets, [api("eu-2")]);
    let target = hub.state.canary(canary).unwrap().target.clone().unwrap();
    assert_eq!(target.version, v("2.0.0"));
    hub.succeed(&issued[0]);
    // The canary analyses 2.0.0: eu-1 is not done, wave 2 waits.
    canary_tick(&mut hub, canary);
    assert_eq!(
        hub.state.canary(canary).unwrap().status.phase,
        Phase::Progressing
    );
    assert_eq!(
        wave_text(&hub.eval(&api("prod-1"))),
        "waiting for wave `eu-canary` to complete (1 of 2 entities done)"
    );
    assert!(
        hub.step().is_empty(),
        "wave 2 stays closed during the analysis"
    );
    // Even an entity that reports 2.0.0 healthy is not done while its canary analyses.
    hub.installed(&api("eu-1"), "2.0.0");
    assert_eq!(
        wave_text(&hub.eval(&api("prod-1"))),
        "waiting for wave `eu-canary` to complete (1 of 2 entities done)"
    );
    assert_eq!(soak_until(&hub, "eu-canary"), None);
    hub.installed(&api("eu-1"), "1.0.0");
    for _ in 0..40 {
        if hub.state.canary(canary).unwrap().status.phase == Phase::Succeeded {
            break;
        }
        canary_tick(&mut hub, canary);
        assert_eq!(soak_until(&hub, "eu-canary"), None, "no soak mid-analysis");
    }
    assert_eq!(
        hub.state.canary(canary).unwrap().status.phase,
        Phase::Succeeded
    );
    // Promoted: once the agent reports the primary at 2.0.0, the wave is done and soaks.
    hub.advance(MINUTE);
    hub.installed(&api("eu-1"), "2.0.0");
    let soak_end = hub.now + 30 * MINUTE;
    assert_eq!(soak_until(&hub, "eu-canary"), Some(soak_end));
    assert_eq!(
        wave_text(&hub.eval(&api("prod-1"))),
        format!(
            "waiting for wave `eu-canary` to soak until {} (2 of 2 entities done)",
            format_time(soak_end)
        )
    );
    hub.set_time(soak_end);
    let issued = hub.step();
    let targets: Vec<String> = issued.iter().map(|p| hub.plan(p).entity).collect();
    assert_eq!(targets, [api("prod-1"), api("prod-2")]);
}

//! Fleet waves (issue 20, docs/FLEET.md) end to end: a 3-node hub over TLS, three sim-driver
//! agents in three environments, a rollout policy applied with `hubctl`, a release rolled
//! through its waves with a soak, and a failure in a later wave halting it; then an operator's
//! resume and promote-wave, audited.

use std::time::Duration;

use hub_client::answer::{
    AuditEntryView, ConstraintView, Explain, GetEntity, ListPlans, PlanView, RolloutStatusView,
    WaveStatusView,
};
use hub_tests::{poll_until, Cluster, CONVERGE_TIMEOUT};
use serde_json::json;

const PRODUCT: &str = "com.example:web";

/// Creates environment `env` with `labels`, and entity `web` of the product in it; returns
/// the entity id.
fn env_with_entity(c: &Cluster, env: &str, labels: &[&str]) -> String {
    c.hubctl(&["env", "create", env]).expect_ok("env create");
    let mut args = vec!["env", "label", env];
    args.extend_from_slice(labels);
    c.hubctl(&args).expect_ok("env label");
    let out = c
        .submit(
            json!({"CreateEntity": {"environment": env, "kind": "HelmChart", "name": "web",
            "product_id": PRODUCT, "k8s_namespace": "web", "account_id": null,
            "release_channel": null}}),
        )
        .unwrap_or_else(|e| panic!("entity in {env}: {e}"));
    out["EntityCreated"]
        .as_str()
        .expect("entity id")
        .to_string()
}

fn plans_of(c: &Cluster, entity: &str) -> Vec<PlanView> {
    c.ask(&ListPlans {
        entity: Some(entity.to_string()),
        ..ListPlans::default()
    })
    .map(|v| v.plans)
    .unwrap_or_default()
}

fn status(c: &Cluster) -> RolloutStatusView {
    c.hubctl(&["rollout", "status", PRODUCT, "1.0.0", "-o", "json"])
        .expect_ok("rollout status")
        .answer()
}

fn wave<'a>(status: &'a RolloutStatusView, name: &str) -> &'a WaveStatusView {
    status
        .waves
        .iter()
        .find(|w| w.wave == name)
        .unwrap_or_else(|| panic!("no wave {name}: {status:?}"))
}

fn wave_constraint(c: &Cluster, entity: &str) -> ConstraintView {
    let e = c.ask(&Explain(entity.to_string())).expect("explain");
    e.constraints
        .iter()
        .find(|c| c.constraint == "rollout-wave")
        .cloned()
        .unwrap_or_else(|| panic!("no rollout-wave constraint: {e:?}"))
}

#[test]
fn a_release_rolls_through_waves_with_a_soak_and_a_failure_in_a_later_wave_halts_it() {
    let c = Cluster::up(3, "");
    c.submit(json!({"CreateProduct": {"product_id": PRODUCT, "description": ""}}))
        .expect("product");
    let canary = env_with_entity(&c, "eu-canary", &["tier=canary", "region=eu"]);
    let eu = env_with_entity(&c, "eu-prod", &["tier=prod", "region=eu"]);
    let us = env_with_entity(&c, "us-prod", &["tier=prod", "region=us"]);
    // Every plan in eu-prod fails (the sim driver's scripted failure).
    let _agents = [
        c.start_hub_agent("eu-canary", &["--driver", "sim"]),
        c.start_hub_agent("eu-prod", &["--driver", "sim", "--sim-failure-rate", "1"]),
        c.start_hub_agent("us-prod", &["--driver", "sim"]),
    ];

    let policy = c.dir().join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "product: {PRODUCT}\nwaves:\n\
             - name: canary\n  selector: {{labels: {{tier: canary}}}}\n  soak: 4s\n\
             - name: eu\n  selector: {{labels: {{tier: prod, region: eu}}}}\n  onFailure: halt\n\
             - name: us\n  selector: {{environments: [us-prod]}}\n"
        ),
    )
    .unwrap();
    // A bad policy is refused naming the field, and changes nothing.
    let bad = c.dir().join("bad.yaml");
    std::fs::write(
        &bad,
        format!("product: {PRODUCT}\nwaves:\n- name: w\n  selector: {{}}\n  maxParallel: 0\n"),
    )
    .unwrap();
    let out = c.hubctl(&["rollout-policy", "apply", "-f", bad.to_str().unwrap()]);
    assert!(!out.success(), "{}", out.describe());
    assert!(out.describe().contains("waves[0]"), "{}", out.describe());
    // So is one whose label selector matches no environment (a check against the state).
    std::fs::write(
        &bad,
        format!(
            "product: {PRODUCT}\nwaves:\n- name: w\n  selector: {{labels: {{tier: nowhere}}}}\n"
        ),
    )
    .unwrap();
    let out = c.hubctl(&["rollout-policy", "apply", "-f", bad.to_str().unwrap()]);
    assert!(!out.success(), "{}", out.describe());
    assert!(
        out.describe()
            .contains("waves[0].selector: selects no environment: none carries tier=nowhere"),
        "{}",
        out.describe()
    );
    c.hubctl(&["rollout-policy", "get", "-o", "json"])
        .expect_ok("get")
        .json()
        .as_array()
        .filter(|a| a.is_empty())
        .expect("no policy after the refusal");
    c.hubctl(&["rollout-policy", "apply", "-f", policy.to_str().unwrap()])
        .expect_ok("apply policy");

    c.submit(json!({"PublishRelease": {"manifest": format!(
        "product-group: com.example\nproduct-name: web\nproduct-version: 1.0.0\n")}}))
        .expect("publish 1.0.0");

    // Wave 1 first: the canary environment runs 1.0.0 while the later waves wait for it.
    let soaking = poll_until(CONVERGE_TIMEOUT, || {
        let s = status(&c);
        let w = wave(&s, "canary");
        (w.done == 1 && w.soak_until.is_some()).then_some(s)
    })
    .expect("wave canary done and soaking");
    assert!(
        plans_of(&c, &eu).is_empty() && plans_of(&c, &us).is_empty(),
        "a later wave moved before the canary wave passed: {soaking:?}"
    );
    let r = wave_constraint(&c, &eu);
    if !r.passed {
        let reason = &r.reason;
        assert!(
            reason.starts_with("waiting for wave `canary` to soak until")
                && reason.contains("(1 of 1 entities done)"),
            "{r:?}"
        );
        assert_eq!(r.may_clear_at, wave(&soaking, "canary").soak_until);
    }

    // After the soak, wave 2 moves: its plan fails, and the rollout halts.
    let halted = poll_until(CONVERGE_TIMEOUT, || {
        let s = status(&c);
        s.halted.is_some().then_some(s)
    })
    .expect("the rollout halts after the failure in wave eu");
    assert!(
        halted
            .halted
            .as_ref()
            .is_some_and(|h| h.cause.contains("failed in wave `eu`")),
        "{halted:?}"
    );
    assert!(
        plans_of(&c, &eu).iter().any(|p| p.status == "failed"),
        "{:?}",
        plans_of(&c, &eu)
    );
    let r = wave_constraint(&c, &us);
    assert!(!r.passed, "{r:?}");
    assert!(r.reason.starts_with("rollout of 1.0.0 halted"), "{r:?}");
    // The table shows the halt too.
    let table = c
        .hubctl(&["rollout", "status", PRODUCT, "1.0.0"])
        .expect_ok("status table");
    assert!(table.stdout.contains("HALTED"), "{}", table.stdout);
    println!("{}", table.stdout);

    // Halted stays halted: wave us gets no plan while a leader change happens.
    let leader = c.leader_id();
    c.hubctl(&["cluster", "transfer-leader"])
        .expect_ok("transfer");
    c.wait_leader(CONVERGE_TIMEOUT, |l| l != leader);
    let still = poll_until(Duration::from_secs(10), || {
        let s = status(&c);
        (s.halted.is_some() && !plans_of(&c, &us).is_empty()).then_some(s)
    });
    assert!(still.is_none(), "wave us moved while halted: {still:?}");

    // The operator resumes and lets wave eu pass: wave us gets 1.0.0; both are audited.
    c.hubctl(&["rollout", "resume", PRODUCT, "1.0.0"])
        .expect_ok("resume");
    c.hubctl(&["rollout", "promote-wave", PRODUCT, "1.0.0"])
        .expect_ok("promote-wave");
    poll_until(CONVERGE_TIMEOUT, || {
        let e = c.ask(&GetEntity(us.clone())).ok()?;
        (e.reported.version.as_deref() == Some("1.0.0")).then_some(())
    })
    .unwrap_or_else(|| panic!("wave us never ran 1.0.0: {:?}", status(&c)));
    let audit: Vec<AuditEntryView> = c
        .hubctl(&["audit", "-o", "json"])
        .expect_ok("audit")
        .answer();
    let target = format!("{PRODUCT}@1.0.0");
    for action in ["resume-rollout", "promote-wave"] {
        assert!(
            audit.iter().any(|r| r.action.as_deref() == Some(action)
                && r.target.as_deref() == Some(target.as_str())),
            "{action} not audited: {audit:?}"
        );
    }
    let canary_plans = plans_of(&c, &canary);
    assert_eq!(canary_plans.len(), 1, "{canary_plans:?}");
}

/// The wave `name`'s committed soak end, in ms (polls until a leader answers).
fn soak_until_ms(c: &Cluster, name: &str) -> Option<i64> {
    wave(&status(c), name).soak_until_ms
}

#[test]
fn leaders_killed_during_a_soak_and_during_a_wave_change_nothing_the_waves_decided() {
    // Issue 20 item 6: wave progress and soak ends are committed state. The leader is
    // SIGKILLed while wave 1 soaks (the new leader keeps the committed soak end: no restart,
    // no early opening) and again while wave 2 rolls out one entity at a time (no entity gets
    // a second plan, the rollout completes).
    let mut c = Cluster::up(3, "");
    c.submit(json!({"CreateProduct": {"product_id": PRODUCT, "description": ""}}))
        .expect("product");
    let first = env_with_entity(&c, "eu-canary", &["tier=canary"]);
    let eu = env_with_entity(&c, "eu-prod", &["tier=prod"]);
    let us = env_with_entity(&c, "us-prod", &["tier=prod"]);
    // Wave 2's tasks take 1.5 s each, so a plan is in flight when the leader dies.
    let _agents = [
        c.start_hub_agent("eu-canary", &["--driver", "sim"]),
        c.start_hub_agent("eu-prod", &["--driver", "sim", "--sim-task-ms", "1500"]),
        c.start_hub_agent("us-prod", &["--driver", "sim", "--sim-task-ms", "1500"]),
    ];
    let policy = c.dir().join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "product: {PRODUCT}\nwaves:\n\
             - name: canary\n  selector: {{labels: {{tier: canary}}}}\n  soak: 8s\n\
             - name: prod\n  selector: {{labels: {{tier: prod}}}}\n  maxParallel: 1\n"
        ),
    )
    .unwrap();
    c.hubctl(&["rollout-policy", "apply", "-f", policy.to_str().unwrap()])
        .expect_ok("apply policy");
    c.submit(json!({"PublishRelease": {"manifest": format!(
        "product-group: com.example\nproduct-name: web\nproduct-version: 1.0.0\n")}}))
        .expect("publish 1.0.0");

    // Wave 1 done and soaking: kill the leader in the middle of the soak.
    let soak_end =
        poll_until(CONVERGE_TIMEOUT, || soak_until_ms(&c, "canary")).expect("wave canary soaking");
    let leader = c.leader_id();
    c.kill9(leader);
    c.wait_leader(CONVERGE_TIMEOUT, |l| l != leader);
    c.restart(leader);
    assert_eq!(
        soak_until_ms(&c, "canary"),
        Some(soak_end),
        "the new leader keeps the committed soak end"
    );

    // Wave 2 opens no earlier than the soak end, one entity at a time.
    let in_flight = poll_until(CONVERGE_TIMEOUT, || {
        let mut all: Vec<PlanView> = plans_of(&c, &eu);
        all.extend(plans_of(&c, &us));
        all.into_iter()
            .find(|p| p.status == "issued" || p.status == "running")
    })
    .unwrap_or_else(|| panic!("wave prod never started: {:?}", status(&c)));
    // Kill the leader while that plan runs.
    let leader = c.leader_id();
    c.kill9(leader);
    c.wait_leader(CONVERGE_TIMEOUT, |l| l != leader);
    c.restart(leader);

    poll_until(Duration::from_secs(90), || {
        [&eu, &us]
            .iter()
            .all(|e| {
                c.ask(&GetEntity(e.to_string()))
                    .is_ok_and(|v| v.reported.version.as_deref() == Some("1.0.0"))
            })
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "wave prod never finished: {:?} (in flight was {in_flight:?})",
            status(&c)
        )
    });
    c.wait_converged(CONVERGE_TIMEOUT);
    for entity in [&first, &eu, &us] {
        let ps = plans_of(&c, entity);
        assert_eq!(ps.len(), 1, "{entity}: one plan, executed once: {ps:?}");
        assert_eq!(ps[0].status, "succeeded", "{ps:?}");
        if entity != &first {
            let issued = ps[0].issued_ms;
            assert!(
                issued >= soak_end,
                "{entity}: issued at {issued}, before the soak end {soak_end}"
            );
        }
    }
    // maxParallel 1: the second plan of wave prod was issued after the first one ended.
    let mut wave2: Vec<PlanView> = plans_of(&c, &eu);
    wave2.extend(plans_of(&c, &us));
    wave2.sort_by_key(|p| p.issued_ms);
    assert!(
        wave2[0]
            .ended
            .as_deref()
            .is_some_and(|e| e <= wave2[1].issued.as_str()),
        "{wave2:?}"
    );
    assert_eq!(soak_until_ms(&c, "canary"), Some(soak_end));
}

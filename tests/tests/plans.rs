//! Plans issued by the leader, executed by a (minimal) agent, with the leader killed while
//! plans are being issued (SPEC P2, P6–P8, P10, C9, R2, R4).

use std::collections::{BTreeMap, BTreeSet};

use hub_client::answer::{
    Explain, GetActivity, GetEntity, GetPlan, ListAudit, ListPlans, ListSuppressions,
    MeetsConstraints, PlanView,
};
use hub_tests::{poll_until, Cluster, CONVERGE_TIMEOUT};
use serde_json::json;

const PRODUCT: &str = "com.example:web";

fn manifest(version: &str, artifacts: &[(&str, &str)]) -> String {
    let mut m =
        format!("product-group: com.example\nproduct-name: web\nproduct-version: {version}\n");
    if !artifacts.is_empty() {
        m.push_str("artifacts:\n");
        for (uri, sha) in artifacts {
            m.push_str(&format!("  - uri: {uri}\n    sha256: {sha}\n"));
        }
    }
    m
}

fn setup(cluster: &Cluster, env: &str, entities: usize) -> Vec<String> {
    cluster
        .submit(json!({"CreateEnvironment": {"name": env, "description": ""}}))
        .expect("create env");
    let _ = cluster.submit(json!({"CreateProduct": {"product_id": PRODUCT, "description": ""}}));
    (0..entities)
        .map(|i| {
            let out = cluster
                .submit(json!({"CreateEntity": {
                    "environment": env, "kind": "HelmChart", "name": format!("web{i}"),
                    "product_id": PRODUCT, "k8s_namespace": "web", "account_id": null,
                    "release_channel": null,
                }}))
                .unwrap_or_else(|e| panic!("create entity {i}: {e}"));
            out["EntityCreated"]
                .as_str()
                .expect("entity id")
                .to_string()
        })
        .collect()
}

fn publish(cluster: &Cluster, manifest: &str) {
    cluster
        .submit(json!({"PublishRelease": {"manifest": manifest}}))
        .unwrap_or_else(|e| panic!("publish: {e}"));
}

/// Every plan of `env` (the hub keeps the newest 20 finished ones per entity); `None` while
/// no node can answer (e.g. during an election).
fn try_plans(cluster: &Cluster, env: &str) -> Option<Vec<PlanView>> {
    let v = cluster
        .ask(&ListPlans {
            environment: Some(env.to_string()),
            limit: Some(100000),
            ..ListPlans::default()
        })
        .ok()?;
    Some(v.plans)
}

fn plans(cluster: &Cluster, env: &str) -> Vec<PlanView> {
    poll_until(CONVERGE_TIMEOUT, || try_plans(cluster, env)).expect("the hub answers a plan query")
}

fn count(plans: &[PlanView], kind: &str, status: &str) -> usize {
    plans
        .iter()
        .filter(|p| p.kind == kind && p.status == status)
        .count()
}

/// (entity, kind, to_version) -> plan ids: more than one id means a plan was issued twice.
fn by_target(plans: &[PlanView]) -> BTreeMap<(String, String, String), Vec<String>> {
    let mut m: BTreeMap<_, Vec<String>> = BTreeMap::new();
    for p in plans {
        let key = (
            p.entity.clone(),
            p.kind.clone(),
            p.to_version.as_deref().unwrap_or("-").to_string(),
        );
        m.entry(key).or_default().push(p.id.clone());
    }
    m
}

fn wait_for(cluster: &Cluster, what: &str, mut f: impl FnMut(&[PlanView]) -> bool, env: &str) {
    let ok = poll_until(CONVERGE_TIMEOUT * 2, || {
        let p = try_plans(cluster, env)?;
        f(&p).then_some(())
    });
    if ok.is_none() {
        let p = plans(cluster, env);
        panic!(
            "timed out waiting for {what}; {} plans, statuses {:?}\n{}",
            p.len(),
            p.iter()
                .map(|p| format!("{} {} {}", p.entity, p.kind, p.status))
                .take(20)
                .collect::<Vec<_>>(),
            cluster.log_tails(30)
        );
    }
}

#[test]
fn leader_killed_while_plans_are_issued_issues_each_plan_exactly_once() {
    // SPEC P2, R2, R4, R6: no plan issued twice, none lost, every entity reaches its target.
    const N: usize = 120;
    let mut cluster = Cluster::up(3, "");
    let ids = setup(&cluster, "prod", N);
    let agent = cluster.start_test_agent("prod", &["--task-ms", "30"]);

    publish(&cluster, &manifest("1.0.0", &[]));
    // Kill the leader as soon as issuance has begun.
    poll_until(CONVERGE_TIMEOUT, || {
        (!try_plans(&cluster, "prod")?.is_empty()).then_some(())
    })
    .expect("the leader issues install plans");
    let first = cluster.leader_id();
    cluster.kill9(first);
    wait_for(
        &cluster,
        "every install to succeed",
        |p| count(p, "install", "succeeded") == N,
        "prod",
    );
    cluster.restart(first);

    publish(&cluster, &manifest("1.1.0", &[]));
    poll_until(CONVERGE_TIMEOUT, || {
        let p = try_plans(&cluster, "prod")?;
        (count(&p, "version-change", "issued") + count(&p, "version-change", "running") > 0)
            .then_some(())
    })
    .expect("the leader issues upgrades");
    let second = cluster.leader_id();
    cluster.kill9(second);
    wait_for(
        &cluster,
        "every upgrade to succeed",
        |p| count(p, "version-change", "succeeded") == N,
        "prod",
    );
    cluster.restart(second);

    // Exactly one install and one upgrade per entity, all succeeded, nothing else.
    let all = plans(&cluster, "prod");
    assert_eq!(all.len(), 2 * N, "plans: {all:?}");
    for (key, ids) in by_target(&all) {
        assert_eq!(
            ids.len(),
            1,
            "{key:?} was issued {} times: {ids:?}",
            ids.len()
        );
    }
    let entities: BTreeSet<&str> = all.iter().map(|p| p.entity.as_str()).collect();
    assert_eq!(entities.len(), N);
    for id in &ids {
        let e = cluster.ask(&GetEntity(id.clone())).expect("entity");
        assert_eq!(e.reported.version.as_deref(), Some("1.1.0"), "{id}: {e:?}");
    }
    // The agent started each plan exactly once.
    let exec = agent.executions();
    let distinct: BTreeSet<&str> = exec.iter().map(|e| e.plan.as_str()).collect();
    assert_eq!(distinct.len(), exec.len(), "a plan ran twice: {exec:?}");
    assert_eq!(exec.len(), 2 * N);
    cluster.wait_converged(CONVERGE_TIMEOUT);
}

#[test]
fn a_failed_upgrade_suppresses_the_entity_and_rolls_back() {
    // SPEC P6, P8, P10: failure metadata names the stage; the automatic suppression lets the
    // rollback through; the other entity keeps receiving plans.
    let cluster = Cluster::up(3, "");
    let ids = setup(&cluster, "prod", 2);
    let _agent = cluster.start_test_agent("prod", &["--task-ms", "5", "--fail-version", "2.0.0"]);
    publish(&cluster, &manifest("1.0.0", &[]));
    wait_for(
        &cluster,
        "installs",
        |p| count(p, "install", "succeeded") == 2,
        "prod",
    );

    // Only web0 is upgraded: web1 follows a channel that 2.0.0 is not in.
    cluster
        .submit(json!({"CreateChannel": {"name": "PINNED", "description": ""}}))
        .expect("channel");
    cluster
        .submit(json!({"SetReleaseChannel": {"channel": "PINNED", "product_id": PRODUCT, "version": "1.0.0", "member": true}}))
        .expect("add 1.0.0 to PINNED");
    cluster
        .submit(json!({"SetEntitySettings": {"entity": ids[1], "patch": {"release_channel": "PINNED"}}}))
        .expect("pin web1");
    publish(&cluster, &manifest("2.0.0", &[]));
    wait_for(
        &cluster,
        "the upgrade to fail and the rollback to succeed",
        |p| count(p, "version-change", "failed") == 1 && count(p, "rollback", "succeeded") == 1,
        "prod",
    );
    let all = plans(&cluster, "prod");
    let failed = all
        .iter()
        .find(|p| p.status == "failed")
        .expect("failed plan");
    let full = cluster.ask(&GetPlan(failed.id.clone())).expect("plan");
    let failure = full.failure.as_ref().expect("a failure");
    assert_eq!(failure.stage, "readiness", "{full:?}");
    assert_eq!(failure.not_ready[0], format!("{}:http", ids[0]));
    let rollback = all.iter().find(|p| p.kind == "rollback").expect("rollback");
    assert_eq!(rollback.to_version.as_deref(), Some("1.0.0"));
    assert_eq!(rollback.rolls_back.as_deref(), Some(failed.id.as_str()));
    // The automatic suppression is in force and blocks the retry of 2.0.0.
    let sups = cluster
        .ask(&ListSuppressions {
            environment: Some("prod".into()),
        })
        .expect("suppressions");
    let auto: Vec<_> = sups
        .suppressions
        .iter()
        .filter(|s| s.source == "failed-plan")
        .collect();
    assert_eq!(auto.len(), 1, "{sups:?}");
    let explain = cluster.ask(&Explain(ids[0].clone())).expect("explain");
    assert_eq!(
        explain.meets_constraints,
        MeetsConstraints::No,
        "{explain:?}"
    );
    let blocking: Vec<_> = explain.constraints.iter().filter(|c| !c.passed).collect();
    assert_eq!(blocking.len(), 1, "{explain:?}");
    assert_eq!(blocking[0].constraint, "suppression");
    assert!(explain.may_clear_at.is_some(), "{explain:?}");
    let e = cluster.ask(&GetEntity(ids[0].clone())).expect("entity");
    assert_eq!(e.reported.version.as_deref(), Some("1.0.0"), "{e:?}");
}

#[test]
fn missing_artifacts_block_until_they_appear() {
    // SPEC C9: a file registry; an absent artifact blocks (Unavailable), an existing one
    // passes, and a registry marked not-expected is not checked.
    let cluster = Cluster::up(3, "--artifact-ttl-ms 300");
    let ids = setup(&cluster, "prod", 1);
    let registry = cluster.dir().join("registry");
    std::fs::create_dir_all(registry.join("web")).expect("registry dir");
    cluster
        .submit(
            json!({"SetRegistry": {"environment": "prod", "name": "local",
            "url": format!("file://{}", registry.display()), "hub_access": "expected"}}),
        )
        .expect("registry");
    let sha = "a".repeat(64);
    std::fs::write(registry.join("web/web-1.0.0.tgz"), b"v1").expect("artifact");
    let _agent = cluster.start_test_agent("prod", &["--task-ms", "5"]);
    publish(&cluster, &manifest("1.0.0", &[("web/web-1.0.0.tgz", &sha)]));
    wait_for(
        &cluster,
        "the install",
        |p| count(p, "install", "succeeded") == 1,
        "prod",
    );

    publish(&cluster, &manifest("1.1.0", &[("web/web-1.1.0.tgz", &sha)]));
    let blocked = poll_until(CONVERGE_TIMEOUT, || {
        let x = cluster.ask(&Explain(ids[0].clone())).ok()?;
        let c = x
            .constraints
            .iter()
            .find(|c| c.constraint == "artifacts")?
            .clone();
        (!c.passed && c.reason.contains("unavailable")).then_some(x)
    })
    .expect("the missing artifact blocks the upgrade");
    assert_eq!(
        blocked
            .candidate
            .as_ref()
            .and_then(|c| c.to_version.as_deref()),
        Some("1.1.0"),
        "{blocked:?}"
    );
    // The leader records its decision in Activity in an entry of its own, which may commit
    // after `explain` (computed when asked) already shows the block.
    poll_until(CONVERGE_TIMEOUT, || {
        let activity = cluster.ask(&GetActivity(ids[0].clone())).ok()?;
        activity
            .entries
            .iter()
            .any(|e| e.kind.contains("artifacts") || e.message.contains("artifacts"))
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "Activity never named the blocking constraint: {:?}",
            cluster.ask(&GetActivity(ids[0].clone()))
        )
    });
    assert_eq!(
        count(&plans(&cluster, "prod"), "version-change", "issued"),
        0
    );

    // The artifact appears: the upgrade goes through once the check is retried.
    std::fs::write(registry.join("web/web-1.1.0.tgz"), b"v1.1").expect("artifact");
    wait_for(
        &cluster,
        "the upgrade",
        |p| count(p, "version-change", "succeeded") == 1,
        "prod",
    );

    // A not-expected registry is not checked: 1.2.0's artifact does not exist, yet it passes.
    cluster
        .submit(
            json!({"SetRegistry": {"environment": "prod", "name": "local",
            "url": format!("file://{}", registry.display()), "hub_access": "not-expected"}}),
        )
        .expect("registry");
    publish(&cluster, &manifest("1.2.0", &[("web/web-1.2.0.tgz", &sha)]));
    wait_for(
        &cluster,
        "the unchecked upgrade",
        |p| count(p, "version-change", "succeeded") == 2,
        "prod",
    );
}

#[test]
fn an_emergency_command_bypasses_a_manual_suppression_and_is_audited() {
    // SPEC P1, P4, C2: a break-glass command passes every constraint (here a manual
    // suppression), one per entity at a time, needs a reason, and is audited.
    let cluster = Cluster::up(3, "");
    let ids = setup(&cluster, "prod", 1);
    publish(&cluster, &manifest("1.0.0", &[]));
    publish(&cluster, &manifest("1.1.0", &[]));
    let _ = cluster.submit(json!({"CreateSuppression": {"scope": {"Entity": ids[0]},
        "start_ms": null, "end_ms": 4_102_444_800_000i64, "reason": "frozen", "cancel_active_plans": true,
        "actor": "alice"}}));
    let _agent = cluster.start_test_agent("prod", &["--task-ms", "5"]);
    // Frozen: the install candidate is blocked by the manual suppression.
    let explain = poll_until(CONVERGE_TIMEOUT, || {
        let x = cluster.ask(&Explain(ids[0].clone())).ok()?;
        (x.meets_constraints == MeetsConstraints::No).then_some(x)
    })
    .expect("blocked by the suppression");
    assert_eq!(
        explain.candidate.as_ref().map(|c| c.kind.as_str()),
        Some("install"),
        "{explain:?}"
    );

    let refused = cluster
        .submit(
            json!({"IssueCommand": {"entity": ids[0], "command": {"Install": {"version": "1.0.0"}},
            "reason": "", "actor": "alice"}}),
        )
        .expect_err("a command needs a reason");
    assert!(refused.contains("reason"), "{refused}");
    cluster
        .submit(
            json!({"IssueCommand": {"entity": ids[0], "command": {"Install": {"version": "1.0.0"}},
            "reason": "hotfix for INC-42", "actor": "alice"}}),
        )
        .expect("command issued");
    wait_for(
        &cluster,
        "the command to run",
        |p| count(p, "command", "succeeded") == 1,
        "prod",
    );
    let e = cluster.ask(&GetEntity(ids[0].clone())).expect("entity");
    assert_eq!(e.reported.version.as_deref(), Some("1.0.0"), "{e:?}");
    // Still frozen for ordinary plans: 1.1.0 is not installed.
    let explain = cluster.ask(&Explain(ids[0].clone())).expect("explain");
    assert_eq!(
        explain
            .candidate
            .as_ref()
            .and_then(|c| c.to_version.as_deref()),
        Some("1.1.0"),
        "{explain:?}"
    );
    assert_eq!(
        explain.meets_constraints,
        MeetsConstraints::No,
        "{explain:?}"
    );
    let audit = cluster.ask(&ListAudit::default()).expect("audit");
    let entry = audit
        .audit
        .iter()
        .find(|a| a.action.as_deref() == Some("command install"))
        .cloned()
        .unwrap_or_else(|| panic!("no audit entry: {audit:?}"));
    // The certificate's identity, not the actor field the client sent (SPEC S4).
    assert_eq!(entry.actor.as_deref(), Some("operator/admin"));
    assert_eq!(entry.reason, "hotfix for INC-42");
}

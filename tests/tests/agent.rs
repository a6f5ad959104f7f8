//! `hub-agent` with the process driver against a 3-node hub, with real processes: the demo
//! service's releases installed, upgraded, failed and rolled back; the hub leader and the
//! agent killed mid-plan (SPEC P2, P6, P8, P10, R3, R4, C9, C10).

use std::path::Path;
use std::time::{Duration, Instant};

use hub_client::answer::{GetEntity, GetPlan, ListPlans, ListSuppressions, PlanView};
use hub_tests::agent::http_get;
use hub_tests::{free_port, poll_until, Cluster, CONVERGE_TIMEOUT};
use serde_json::{json, Value};

const PRODUCT: &str = "com.example:demo-service";

struct Demo {
    cluster: Cluster,
    entity: String,
    port: u16,
    starts: std::path::PathBuf,
    dir: std::path::PathBuf,
}

/// A hub with environment `prod`, the demo product with its file registry, and one entity
/// whose config names a free port, a start counter and `ready_after_ms`.
fn demo(ready_after_ms: u64) -> Demo {
    let cluster = Cluster::up(3, "--artifact-ttl-ms 500");
    let dir = cluster.package_demo();
    cluster
        .submit(json!({"CreateEnvironment": {"name": "prod", "description": ""}}))
        .expect("env");
    cluster
        .submit(json!({"SetRegistry": {"environment": "prod", "name": "local",
            "url": format!("file://{}", dir.join("registry").display()), "hub_access": "expected"}}))
        .expect("registry");
    cluster
        .submit(json!({"CreateProduct": {"product_id": PRODUCT, "description": "demo"}}))
        .expect("product");
    let out = cluster
        .submit(json!({"CreateEntity": {"environment": "prod", "kind": "HelmChart", "name": "demo",
            "product_id": PRODUCT, "k8s_namespace": "demo", "account_id": null, "release_channel": null}}))
        .expect("entity");
    let entity = out["EntityCreated"].as_str().expect("id").to_string();
    let port = free_port();
    let starts = cluster.dir().join("starts.log");
    cluster
        .submit(json!({"SetConfigOverrides": {"entity": entity, "version": "0.0.0", "config": format!(
            "port: {port}\nstarts_file: {}\nready_after_ms: {ready_after_ms}\n", starts.display())}}))
        .expect("config");
    Demo {
        cluster,
        entity,
        port,
        starts,
        dir,
    }
}

impl Demo {
    fn publish(&self, version: &str) {
        let manifest = std::fs::read_to_string(
            self.dir
                .join(format!("manifests/demo-service-{version}.yml")),
        )
        .expect("manifest");
        self.cluster
            .submit(json!({"PublishRelease": {"manifest": manifest}}))
            .unwrap_or_else(|e| panic!("publish {version}: {e}"));
    }

    fn plans(&self) -> Option<Vec<PlanView>> {
        let v = self
            .cluster
            .ask(&ListPlans {
                entity: Some(self.entity.clone()),
                limit: Some(1000),
                ..ListPlans::default()
            })
            .ok()?;
        Some(v.plans)
    }

    fn wait_plan(&self, what: &str, f: impl Fn(&[PlanView]) -> bool) -> Vec<PlanView> {
        poll_until(CONVERGE_TIMEOUT * 2, || {
            let p = self.plans()?;
            f(&p).then_some(p)
        })
        .unwrap_or_else(|| {
            panic!(
                "timed out waiting for {what}: {:?}\n{}",
                self.plans(),
                self.cluster.log_tails(20)
            )
        })
    }

    fn serves(&self, version: &str) {
        poll_until(CONVERGE_TIMEOUT, || {
            let (status, body) = http_get(self.port, "/version")?;
            (status == 200 && body.trim() == version).then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "the service never answered {version}: {:?}",
                http_get(self.port, "/version")
            )
        });
    }

    /// Start lines per version in the start counter.
    fn starts(&self, version: &str) -> usize {
        count_starts(&self.starts, version)
    }
}

fn count_starts(path: &Path, version: &str) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(version))
        .count()
}

fn has(plans: &[PlanView], kind: &str, to: &str, status: &str) -> bool {
    plans
        .iter()
        .any(|p| p.kind == kind && p.to_version.as_deref() == Some(to) && p.status == status)
}

#[test]
fn install_upgrade_broken_release_rollback() {
    // SPEC P2, P6, P8, P10, C9: the whole path with real artifacts and processes.
    let d = demo(0);
    let _agent = d.cluster.start_hub_agent("prod", &[]);
    d.publish("1.0.0");
    d.wait_plan("install 1.0.0", |p| has(p, "install", "1.0.0", "succeeded"));
    d.serves("1.0.0");
    d.publish("1.1.0");
    d.wait_plan("upgrade to 1.1.0", |p| {
        has(p, "version-change", "1.1.0", "succeeded")
    });
    d.serves("1.1.0");

    d.publish("2.0.0");
    let plans = d.wait_plan("2.0.0 to fail and the rollback to succeed", |p| {
        has(p, "version-change", "2.0.0", "failed") && has(p, "rollback", "1.1.0", "succeeded")
    });
    let failed = plans
        .iter()
        .find(|p| p.status == "failed")
        .expect("failed plan");
    let full = d.cluster.ask(&GetPlan(failed.id.clone())).expect("plan");
    let failure = full.failure.as_ref().expect("a failure");
    assert_eq!(failure.stage, "readiness", "{full:?}");
    assert!(
        failure.not_ready.iter().any(|w| w.contains("healthz")),
        "names what never became ready: {full:?}"
    );
    let sups = d
        .cluster
        .ask(&ListSuppressions {
            environment: Some("prod".into()),
        })
        .expect("suppressions");
    assert!(
        sups.suppressions.iter().any(|s| s.source == "failed-plan"),
        "{sups:?}"
    );
    d.serves("1.1.0");
    let e = d.cluster.ask(&GetEntity(d.entity.clone())).expect("entity");
    assert_eq!(e.reported.version.as_deref(), Some("1.1.0"), "{e:?}");
    // The agent restored 1.1.0 itself before it reported the failure; the hub's rollback
    // (issued whichever report won) found it running and adopted it: 1.1.0 started twice
    // (the upgrade, the agent's restore), never a third time.
    assert!(
        full.output
            .as_deref()
            .unwrap_or_default()
            .contains("restored previous version 1.1.0"),
        "{full:?}"
    );
    let rollback = plans
        .iter()
        .find(|p| p.kind == "rollback")
        .expect("rollback plan");
    let rollback = d.cluster.ask(&GetPlan(rollback.id.clone())).expect("plan");
    assert!(
        rollback
            .output
            .as_deref()
            .unwrap_or_default()
            .contains("adopted"),
        "the rollback adopts the restored version: {rollback:?}"
    );
    assert_eq!(
        d.starts("1.1.0"),
        2,
        "{:?}",
        std::fs::read_to_string(&d.starts)
    );
}

#[test]
fn hub_leader_killed_during_an_upgrade_the_upgrade_completes_once() {
    // SPEC R3, R4, R6: the agent fails over; the upgrade runs exactly once.
    let mut d = demo(3_000);
    let _agent = d.cluster.start_hub_agent("prod", &[]);
    d.publish("1.0.0");
    d.wait_plan("install", |p| has(p, "install", "1.0.0", "succeeded"));
    d.publish("1.1.0");
    // The upgrade is running (readiness takes 3 s): kill the leader.
    d.wait_plan("the upgrade to start", |p| {
        has(p, "version-change", "1.1.0", "running")
    });
    let leader = d.cluster.leader_id();
    d.cluster.kill9(leader);
    d.wait_plan("the upgrade to succeed", |p| {
        has(p, "version-change", "1.1.0", "succeeded")
    });
    d.serves("1.1.0");
    d.cluster.restart(leader);
    assert_eq!(
        d.starts("1.0.0"),
        1,
        "{:?}",
        std::fs::read_to_string(&d.starts)
    );
    assert_eq!(
        d.starts("1.1.0"),
        1,
        "{:?}",
        std::fs::read_to_string(&d.starts)
    );
    let upgrades = d
        .plans()
        .expect("plans")
        .iter()
        .filter(|p| p.kind == "version-change")
        .count();
    assert_eq!(upgrades, 1);
}

#[test]
fn agent_killed_mid_plan_resumes_without_running_anything_twice() {
    // SPEC R4: the in-progress plan is journaled; a finished task never runs again.
    let d = demo(3_000);
    let mut agent = d.cluster.start_hub_agent("prod", &[]);
    d.publish("1.0.0");
    // Kill the agent while readiness is being probed (the service takes 3 s to be ready).
    poll_until(CONVERGE_TIMEOUT, || {
        let full = d
            .cluster
            .ask(&ListPlans {
                entity: Some(d.entity.clone()),
                ..ListPlans::default()
            })
            .ok()?;
        let id = full.plans.first()?.id.clone();
        let plan = d.cluster.ask(&GetPlan(id)).ok()?;
        let readiness = plan
            .tasks
            .as_ref()?
            .iter()
            .find(|t| t.name == "readiness")?
            .clone();
        (readiness.state == "running").then_some(())
    })
    .expect("the install reaches readiness");
    agent.kill9();
    agent.restart();
    let plans = d.wait_plan("the install to succeed", |p| {
        has(p, "install", "1.0.0", "succeeded")
    });
    assert_eq!(plans.len(), 1);
    d.serves("1.0.0");
    assert_eq!(
        d.starts("1.0.0"),
        1,
        "the service was started once: {:?}",
        std::fs::read_to_string(&d.starts)
    );
    let plan = d.cluster.ask(&GetPlan(plans[0].id.clone())).expect("plan");
    let tasks = plan.tasks.as_ref().expect("tasks");
    let start = tasks.iter().find(|t| t.name == "start").expect("start");
    assert_eq!(start.attempt, 1, "start ran once: {plan:?}");
    let readiness = tasks
        .iter()
        .find(|t| t.name == "readiness")
        .expect("readiness");
    assert_eq!(
        readiness.attempt, 2,
        "readiness resumed with attempt 2: {plan:?}"
    );
}

#[test]
fn an_agent_sees_only_its_environment() {
    // SPEC S1 (scoping), P2: environment B's agent never receives A's plans.
    let d = demo(0);
    d.cluster
        .submit(json!({"CreateEnvironment": {"name": "staging", "description": ""}}))
        .expect("env");
    let mut b = d
        .cluster
        .start_hub_agent("staging", &["--driver", "sim", "--sim-task-ms", "1"]);
    let _a = d.cluster.start_hub_agent("prod", &[]);
    d.publish("1.0.0");
    d.wait_plan("install", |p| has(p, "install", "1.0.0", "succeeded"));
    // The staging agent's journal (its checkpoint and its log) never saw a prod plan.
    let journal = journal_files(&b.data_dir);
    assert!(
        !String::from_utf8_lossy(&journal).contains("p-"),
        "{}",
        String::from_utf8_lossy(&journal)
    );
    // And a report about prod's plan from a staging agent is refused, changing nothing.
    let plan_id = d.plans().expect("plans")[0].id.clone();
    let err = d
        .cluster
        .agent_report_task("staging", &plan_id, "fetch", "failed")
        .expect_err("another environment's plan");
    assert!(err.contains("not found"), "{err}");
    let plan = d.cluster.ask(&GetPlan(plan_id)).expect("plan");
    assert_eq!(plan.status, "succeeded", "{plan:?}");

    // A data directory belongs to one environment: started (from an agent.toml) as prod on
    // staging's data directory, hub-agent refuses at start-up, names both, and leaves the
    // journal untouched (issue 4, bad input).
    b.kill9();
    let before = journal_files(&b.data_dir);
    let config = d.cluster.dir().join("agent-prod-on-staging.toml");
    let prod_tls = d
        .cluster
        .tls_files(&hub_tls::Identity::Agent("prod".into()));
    std::fs::write(
        &config,
        format!(
            "environment = \"prod\"\nendpoints = [{}]\ndata-dir = \"{}\"\ndriver = \"sim\"\n\
             ca-file = \"{}\"\ncert-file = \"{}\"\nkey-file = \"{}\"\n",
            d.cluster
                .endpoints()
                .split(',')
                .map(|e| format!("\"{e}\""))
                .collect::<Vec<_>>()
                .join(", "),
            b.data_dir.display(),
            prod_tls.ca.display(),
            prod_tls.cert.display(),
            prod_tls.key.display(),
        ),
    )
    .expect("write agent.toml");
    let out = std::process::Command::new(hub_tests::bin_dir().join("hub-agent"))
        .arg("--config")
        .arg(&config)
        .output()
        .expect("run hub-agent");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must refuse: {stderr}");
    assert!(
        stderr.contains("belongs to environment \"staging\", not \"prod\""),
        "{stderr}"
    );
    assert!(
        stderr.contains(&b.data_dir.display().to_string()),
        "{stderr}"
    );
    let after = journal_files(&b.data_dir);
    assert_eq!(before, after, "the refused start changed the journal");
}

/// An agent data directory's journal: its checkpoint, then its log.
fn journal_files(data_dir: &std::path::Path) -> Vec<u8> {
    let mut bytes = std::fs::read(data_dir.join("journal.json")).expect("journal checkpoint");
    bytes.extend(std::fs::read(data_dir.join("journal.wal")).expect("journal log"));
    bytes
}

#[test]
fn a_clean_stop_leaves_the_whole_journal_in_its_checkpoint() {
    // The journal's changes are appended to its log (journal.wal); SIGTERM folds the log into
    // the checkpoint (journal.json) before the agent exits, which is what a release from
    // before the log reads.
    let d = demo(0);
    let mut a = d.cluster.start_hub_agent("prod", &[]);
    d.publish("1.0.0");
    let plans = d.wait_plan("install", |p| has(p, "install", "1.0.0", "succeeded"));
    let plan = plans[0].id.clone();
    // The plan's end is journaled before its last reports go; the hub recorded them.
    let log = std::fs::read_to_string(a.data_dir.join("journal.wal")).expect("journal log");
    assert!(log.contains(&plan), "{log}");
    a.signal(libc::SIGTERM);
    let status = a
        .wait_exit(CONVERGE_TIMEOUT)
        .unwrap_or_else(|| panic!("no exit after SIGTERM\n{}", a.log_tail(30)));
    assert!(status.success(), "{status}\n{}", a.log_tail(30));
    let log = std::fs::read(a.data_dir.join("journal.wal")).expect("journal log");
    assert!(log.is_empty(), "{}", String::from_utf8_lossy(&log));
    let checkpoint: Value = serde_json::from_slice(
        &std::fs::read(a.data_dir.join("journal.json")).expect("journal checkpoint"),
    )
    .expect("journal JSON");
    assert!(
        checkpoint["finished"]
            .as_array()
            .is_some_and(|f| f.iter().any(|p| p == plan.as_str())),
        "{checkpoint}"
    );
}

#[test]
fn refused_reports_come_back_as_data_and_unknown_enum_values_are_refused() {
    // Issue 15: a batch's refused reports are listed with a typed reason (through a follower,
    // which forwards the write); the others are applied. A value of an enum the hub does not
    // know is refused, naming the field.
    use hub_proto::{ReportRefusal, ReportTaskRequest, TaskState};
    let cluster = Cluster::up(3, "");
    cluster
        .submit(json!({"CreateEnvironment": {"name": "prod", "description": ""}}))
        .expect("env");
    cluster
        .submit(json!({"CreateProduct": {"product_id": PRODUCT, "description": "demo"}}))
        .expect("product");
    let out = cluster
        .submit(json!({"CreateEntity": {"environment": "prod", "kind": "HelmChart", "name": "demo",
            "product_id": PRODUCT, "k8s_namespace": "demo", "account_id": null, "release_channel": null}}))
        .expect("entity");
    let entity = out["EntityCreated"].as_str().expect("id").to_string();
    let out = cluster
        .submit(
            json!({"IssueCommand": {"entity": entity, "command": "Uninstall",
            "reason": "test", "actor": "admin"}}),
        )
        .expect("command plan");
    let plan = out["Changed"]["id"].as_str().expect("plan id").to_string();
    let report = |plan: &str, task: &str, attempt: u32| ReportTaskRequest {
        plan_id: plan.into(),
        task: task.into(),
        attempt,
        state: TaskState::Running as i32,
        ..Default::default()
    };
    let batch = vec![
        report(&plan, "stop", 1),
        report("p-999999-0", "stop", 1),
        report(&plan, "no-such-task", 1),
        report(&plan, "remove", 0),
    ];
    let leader_id = cluster.leader_id();
    let leader = cluster
        .nodes()
        .iter()
        .position(|n| n.id == leader_id)
        .expect("the leader is a node");
    let follower = (leader + 1) % 3;
    let reply = cluster
        .agent_report_tasks(follower, "prod", batch)
        .expect("the batch is applied");
    let refused: Vec<(u32, &str, i32)> = reply
        .refused
        .iter()
        .map(|r| (r.position, r.task.as_str(), r.reason))
        .collect();
    assert_eq!(
        refused,
        [
            (1, "stop", ReportRefusal::PlanNotFound as i32),
            (2, "no-such-task", ReportRefusal::UnknownTask as i32),
            (3, "remove", ReportRefusal::InvalidReport as i32),
        ],
        "{reply:?}"
    );
    assert_eq!(reply.refused[0].plan_id, "p-999999-0");
    let record = cluster.ask(&GetPlan(plan.clone())).expect("plan");
    assert_eq!(
        record.status, "running",
        "the valid report was applied: {record:?}"
    );
    // Unknown enum values, and the never-sent UNSPECIFIED, are refused naming the field.
    let mut bad = report(&plan, "stop", 2);
    bad.state = 99;
    let err = cluster
        .agent_report_tasks(follower, "prod", vec![report(&plan, "stop", 2), bad])
        .expect_err("unknown task state");
    assert!(
        err.contains("reports[1].state") && err.contains("99"),
        "{err}"
    );
    let mut unset = report(&plan, "stop", 2);
    unset.state = 0;
    let err = cluster
        .agent_report_tasks(leader, "prod", vec![unset])
        .expect_err("unset task state");
    assert!(err.contains("reports[0].state"), "{err}");
    let record = cluster.ask(&GetPlan(plan.clone())).expect("plan");
    let stop = &record.tasks.as_ref().expect("tasks")[0];
    assert_eq!(
        stop.attempt, 1,
        "refused batches changed nothing: {record:?}"
    );
}

#[test]
fn an_unchanged_state_report_is_answered_without_a_write() {
    // SPEC C10: a report repeating what the hub records is answered on a linearizable read
    // (no Raft entry); a changed one is written, on any node, and visible at once.
    let cluster = Cluster::up(3, "");
    cluster
        .submit(json!({"CreateEnvironment": {"name": "prod", "description": ""}}))
        .expect("env");
    cluster
        .submit(json!({"CreateProduct": {"product_id": PRODUCT, "description": "demo"}}))
        .expect("product");
    let out = cluster
        .submit(json!({"CreateEntity": {"environment": "prod", "kind": "HelmChart", "name": "demo",
            "product_id": PRODUCT, "k8s_namespace": "demo", "account_id": null, "release_channel": null}}))
        .expect("entity");
    let entity = out["EntityCreated"].as_str().expect("id").to_string();
    let report = |node: usize, version: &str, health: &str| {
        cluster
            .agent_report_state(node, "prod", &entity, version, health)
            .expect("report")
    };
    assert_ne!(
        report(0, "1.0.0", "healthy"),
        "unchanged",
        "a new state is written"
    );
    for node in 0..3 {
        // Every node sees the write before answering: the read is linearizable.
        assert_eq!(report(node, "1.0.0", "healthy"), "unchanged", "node {node}");
    }
    assert_ne!(
        report(2, "1.0.0", "error"),
        "unchanged",
        "a change is written"
    );
    let e = cluster.ask(&GetEntity(entity.clone())).expect("entity");
    assert_eq!(e.reported.health, "error", "{e:?}");
    assert_eq!(report(1, "1.0.0", "error"), "unchanged");
    // Bad input is still refused, whether or not it would change anything.
    let err = cluster
        .agent_report_state(0, "prod", "eid:prod:helm:nope", "1.0.0", "healthy")
        .expect_err("unknown entity");
    assert!(err.contains("states[0].entity"), "{err}");
    // An operator cannot send an agent's sampled report through Submit, and it changes nothing.
    let err = cluster
        .submit(
            json!({"ReportSampledEntityStates": {"environment": "prod", "states": [
            {"report": {"entity": entity, "version": "9.9.9", "health": "Healthy",
             "config_sha256": null, "secrets_revision": null, "message": ""},
             "reflects_through": null}]}}),
        )
        .expect_err("agents only");
    assert!(err.contains("Agent API"), "{err}");
    let e = cluster.ask(&GetEntity(entity.clone())).expect("entity");
    assert_eq!(e.reported.health, "error", "{e:?}");
    assert_eq!(e.reported.version.as_deref(), Some("1.0.0"), "{e:?}");
}

/// The value of metric `name` (with its labels) in a Prometheus text exposition.
fn counter(metrics: &str, name: &str) -> Option<u64> {
    metrics.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let (labels, value) = rest.rsplit_once(' ')?;
        (labels.is_empty() || labels.starts_with('{'))
            .then(|| value.parse().ok())
            .flatten()
    })
}

#[test]
fn a_fast_plans_task_reports_share_one_write() {
    // hub-agent --report-linger-ms: a report that finds the outbox idle waits for the ones
    // that follow it, so a plan whose tasks all end within the linger costs one write (with
    // `--report-linger-ms 0` this plan took 6).
    let (tasks, metrics) = one_plan(&["--sim-task-ms", "1", "--report-linger-ms", "1000"]);
    assert_eq!(
        counter(&metrics, "hub_agent_reports_sent_total"),
        Some(2 * tasks),
        "each task reported running and succeeded:\n{metrics}"
    );
    assert_eq!(
        counter(&metrics, "hub_agent_report_writes_total"),
        Some(1),
        "one write for the whole plan:\n{metrics}"
    );
}

#[test]
fn a_plans_reports_wait_for_its_end_not_only_for_the_next_report() {
    // The default linger (500 ms) while a plan runs, ended by the plan's end: five 50 ms tasks
    // cost one write (two if the machine stalls the plan past the linger). Before, a report
    // waited 20 ms for the next one, and tasks 50 ms apart cost a write each (5 or 6).
    let (tasks, metrics) = one_plan(&["--sim-task-ms", "50"]);
    assert_eq!(
        counter(&metrics, "hub_agent_reports_sent_total"),
        Some(2 * tasks),
        "each task reported running and succeeded:\n{metrics}"
    );
    let writes = counter(&metrics, "hub_agent_report_writes_total").expect("report writes");
    assert!(
        (1..=2).contains(&writes),
        "{writes} writes for a plan of {tasks} tasks of 50 ms:\n{metrics}"
    );
}

#[test]
fn the_end_of_an_agents_own_plan_does_not_answer_its_poll() {
    // Two plans in turn, polls of up to 30 s: the first fetch is answered at once (the agent
    // knows no set yet), the second by the first plan, the third by the second plan, and the
    // fourth waits. Before, each plan's end answered a poll too (5 or 6 fetches).
    let (_, metrics, ran) = plans_in_turn(&["--poll-wait-ms", "30000"], &["1.0.0", "2.0.0"]);
    assert_eq!(
        counter(&metrics, "hub_agent_plans_succeeded_total"),
        Some(2),
        "{metrics}"
    );
    // A poll waits at least 28.1 s (30 s less up to a sixteenth): one that timed out on a
    // slow machine is no wake.
    let timeouts = (ran.as_millis() / 28_125) as u64;
    let fetches = counter(&metrics, "hub_agent_fetches_total").expect("fetches");
    assert!(
        (4..=4 + timeouts).contains(&fetches),
        "{fetches} fetches in {ran:?}:\n{metrics}"
    );
}

#[test]
fn a_state_the_hub_recorded_at_a_plans_end_is_not_reported_again() {
    // Three upgrades in turn. Each success sets the plan's target as the entity's state at the
    // hub, and the report batch's reply says so: the samples after it (the same version,
    // healthy) are not sent. Before, each plan was followed by one state report. A sample
    // taken between the last task and the reply still goes (a few ms of each second).
    let (_, metrics, _) = plans_in_turn_then(
        &["--state-interval-ms", "1000"],
        &["1.0.0", "2.0.0", "3.0.0"],
        2,
    );
    assert_eq!(
        counter(&metrics, "hub_agent_plans_succeeded_total"),
        Some(3),
        "{metrics}"
    );
    let reports = counter(&metrics, "hub_agent_state_reports_total").expect("state reports");
    assert!(
        reports < 3,
        "{reports} state reports for three plans:\n{metrics}"
    );
}

/// Runs one plan (an upgrade of one entity) through a `hub-agent` with the `sim` driver and
/// `agent_args`; returns the plan's task count and the agent's metrics once its outbox is
/// drained.
fn one_plan(agent_args: &[&str]) -> (u64, String) {
    let (tasks, metrics, _) = plans_in_turn(agent_args, &["1.0.0"]);
    (tasks, metrics)
}

/// Publishes `versions` one after the other, each once the plan of the one before has
/// succeeded, to one entity served by a `hub-agent` with the `sim` driver and `agent_args`;
/// returns the last plan's task count, the agent's metrics once its outbox is drained, and
/// how long the agent had run by then.
fn plans_in_turn(agent_args: &[&str], versions: &[&str]) -> (u64, String, Duration) {
    plans_in_turn_then(agent_args, versions, 0)
}

/// [`plans_in_turn`], where the agent takes `samples` more state samples after each plan's
/// success before the next release.
fn plans_in_turn_then(
    agent_args: &[&str],
    versions: &[&str],
    samples: u64,
) -> (u64, String, Duration) {
    let c = Cluster::up(3, "");
    c.submit(json!({"CreateEnvironment": {"name": "prod", "description": ""}}))
        .expect("env");
    c.submit(json!({"CreateProduct": {"product_id": "com.example:web", "description": ""}}))
        .expect("product");
    let out = c
        .submit(
            json!({"CreateEntity": {"environment": "prod", "kind": "HelmChart", "name": "web",
            "product_id": "com.example:web", "k8s_namespace": "web", "account_id": null,
            "release_channel": null}}),
        )
        .expect("entity");
    let entity = out["EntityCreated"].as_str().expect("id").to_string();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec!["--driver", "sim", "--metrics-listen", &listen];
    args.extend_from_slice(agent_args);
    let started = Instant::now();
    let agent = c.start_hub_agent("prod", &args);
    // The first poll (the agent knows no plan set yet) is answered before any plan exists.
    poll_until(CONVERGE_TIMEOUT, || {
        let (_, body) = http_get(port, "/metrics")?;
        (counter(&body, "hub_agent_fetches_total")? >= 2).then_some(())
    })
    .unwrap_or_else(|| panic!("the agent polls again; agent: {}", agent.log_tail(20)));
    let mut plan: Option<PlanView> = None;
    for (n, version) in versions.iter().enumerate() {
        let manifest =
            format!("product-group: com.example\nproduct-name: web\nproduct-version: {version}\n");
        c.submit(json!({"PublishRelease": {"manifest": manifest}}))
            .expect("publish");
        plan = Some(
            poll_until(CONVERGE_TIMEOUT, || {
                let plans = c
                    .ask(&ListPlans {
                        entity: Some(entity.clone()),
                        ..ListPlans::default()
                    })
                    .ok()?;
                let succeeded: Vec<PlanView> = plans
                    .plans
                    .into_iter()
                    .filter(|p| p.status == "succeeded")
                    .collect();
                (succeeded.len() > n).then(|| succeeded.last().cloned())?
            })
            .unwrap_or_else(|| {
                panic!(
                    "the plan to {version} succeeds; agent: {}",
                    agent.log_tail(20)
                )
            }),
        );
        if samples > 0 {
            let samples_now = || {
                let (_, body) = http_get(port, "/metrics")?;
                counter(&body, "hub_agent_state_samples_total")
            };
            let before = poll_until(CONVERGE_TIMEOUT, samples_now).expect("samples");
            poll_until(CONVERGE_TIMEOUT, || {
                (samples_now()? >= before + samples).then_some(())
            })
            .unwrap_or_else(|| {
                panic!(
                    "{samples} more state samples; agent: {}",
                    agent.log_tail(20)
                )
            });
        }
    }
    let plan = c
        .ask(&GetPlan(plan.expect("a version was published").id))
        .expect("plan");
    let tasks = plan.tasks.as_ref().expect("tasks").len() as u64;
    assert!(tasks >= 2, "{plan:?}");
    let metrics = poll_until(CONVERGE_TIMEOUT, || {
        let (_, body) = http_get(port, "/metrics")?;
        (counter(&body, "hub_agent_outbox") == Some(0)).then_some(body)
    })
    .expect("the agent's metrics, outbox drained");
    (tasks, metrics, started.elapsed())
}

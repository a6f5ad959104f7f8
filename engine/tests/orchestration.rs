//! Table-driven scenario tests of the orchestration engine through its public API: commands
//! applied with `State::apply`, decisions read with `evaluate` and the state's accessors.
//! Every apply also checks determinism and persistence (see `common::Hub::apply`).

mod common;

use common::*;
use hub_engine::artifact::{ArtifactLocation, Availability};
use hub_engine::command::{CancelTarget, EntitySettingsPatch, EnvironmentSettingsPatch};
use hub_engine::entity::{config_sha256, Health, SecretValue};
use hub_engine::evaluate::{
    ConstraintKind, ConstraintResult, Evaluation, Outcome, Reason, BLOCKED_RECHECK_MS,
};
use hub_engine::plan::{EmergencyCommand, PlanKind, PlanStatus, TaskState};
use hub_engine::suppression::{Scope, SuppressionSource};
use hub_engine::{Command, CommandError, CommandOutput, Trigger};

const WEB: &str = "com.example:web";
const DB: &str = "com.example:db";
const APP: &str = "com.example:app";

fn constraint(e: &Evaluation, kind: ConstraintKind) -> &ConstraintResult {
    e.constraints
        .iter()
        .find(|c| c.constraint == kind)
        .unwrap_or_else(|| panic!("no {kind} constraint in {e:#?}"))
}

fn blocking(e: &Evaluation) -> Vec<ConstraintKind> {
    e.blocking().map(|c| c.constraint).collect()
}

fn to_version(e: &Evaluation) -> String {
    e.candidate
        .as_ref()
        .and_then(|c| c.to_version.as_ref())
        .map_or("-".into(), |v| v.to_string())
}

fn kind(e: &Evaluation) -> PlanKind {
    e.candidate.as_ref().expect("a candidate").kind.clone()
}

/// One environment `prod`, product web with the given releases, entity `web` at `at`.
fn web_hub(releases: &[&str], at: Option<&str>) -> (Hub, String) {
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product(WEB);
    for r in releases {
        hub.publish(WEB, r, &[]);
    }
    let w = hub.helm("prod", "web", WEB);
    if let Some(at) = at {
        hub.installed(&w, at);
    }
    (hub, w)
}

fn recall(hub: &mut Hub, product: &str, from: &str, to: &str) -> String {
    match hub.ok(Command::RecallReleases {
        product_id: product.into(),
        from: from.into(),
        to: to.into(),
        reason: "CVE-2026-1".into(),
    }) {
        CommandOutput::Changed { id, .. } => id,
        other => panic!("{other:?}"),
    }
}

fn command(
    hub: &mut Hub,
    entity: &str,
    cmd: EmergencyCommand,
    reason: &str,
) -> Result<String, CommandError> {
    hub.apply(Command::IssueCommand {
        entity: entity.into(),
        command: cmd,
        reason: reason.into(),
        actor: "root".into(),
    })
    .result
    .map(|out| match out {
        CommandOutput::Changed { id, .. } => id,
        other => panic!("{other:?}"),
    })
}

fn cancel(hub: &mut Hub, target: CancelTarget, suppress_for_ms: Option<i64>) -> CommandOutput {
    hub.ok(Command::CancelPlans {
        target,
        reason: "operator says stop".into(),
        suppress_for_ms,
        actor: "alice".into(),
    })
}

fn registry(hub: &mut Hub, env: &str, name: &str, url: &str, access: &str) {
    hub.ok(Command::SetRegistry {
        environment: env.into(),
        name: name.into(),
        url: url.into(),
        hub_access: access.into(),
        ca_pem: None,
        insecure_skip_verify: false,
    });
}

fn http(path: &str) -> ArtifactLocation {
    ArtifactLocation::http(format!("http://127.0.0.1:9/reg/{path}"))
}

fn set_config(hub: &mut Hub, entity: &str, version: &str, text: &str) {
    hub.ok(Command::SetConfigOverrides {
        entity: entity.into(),
        version: version.into(),
        config: Some(text.into()),
    });
}

fn env_window(hub: &mut Hub, env: &str, spec: &str) {
    hub.env_settings(
        env,
        EnvironmentSettingsPatch {
            maintenance_window: Some(hub_engine::command::WindowChange::Set(window(spec))),
            ..Default::default()
        },
    );
}

/// Closed at T0 (Monday 00:00 UTC); opens Saturday 2026-12-05 00:00 UTC.
const WEEKEND: &str = "SATURDAY/00:00-SUNDAY/00:00";
const SATURDAY: i64 = T0 + 5 * DAY;
/// Open at T0.
const MONDAY_NIGHT: &str = "MONDAY/00:00-MONDAY/06:00";
/// Closed at T0; opens Wednesday 10:00.
const WEDNESDAY: &str = "WEDNESDAY/10:00-WEDNESDAY/12:00";
const WEDNESDAY_10: i64 = T0 + 2 * DAY + 10 * HOUR;

// ---------------------------------------------------------------------------------------------
// P2, P3 — evaluation and issuance
// ---------------------------------------------------------------------------------------------

// SPEC P3: the four questions are answerable separately for an entity at any time.
#[test]
fn p3_the_four_questions_are_answered_separately() {
    let (mut hub, w) = web_hub(&["1.0.0", "1.1.0"], Some("1.0.0"));
    env_window(&mut hub, "prod", WEEKEND);
    // 1. a candidate exists; 2. it does not meet its constraints; 3. nothing issued.
    let e = hub.eval(&w);
    assert_eq!(
        e.candidate.as_ref().unwrap().describe(),
        "version-change 1.0.0 -> 1.1.0"
    );
    assert_eq!(blocking(&e), [ConstraintKind::MaintenanceWindow]);
    assert!(
        e.constraints.len() >= 5,
        "every constraint is reported: {:?}",
        e.constraints
    );
    assert!(hub.plans_of(&w).is_empty());
    // 3. issued once the window opens; 4. execution not finished yet.
    hub.set_time(SATURDAY);
    let p = hub.step_one(&w).unwrap();
    let e = hub.eval(&w);
    assert_eq!(
        e.outcome,
        Outcome::PlanActive {
            plan_id: p.id.clone(),
            status: PlanStatus::Issued
        }
    );
    assert_eq!(e.candidate.unwrap().to_version, Some(v("1.1.0")));
    // 4. it succeeded.
    hub.succeed(&p.id);
    assert_eq!(
        hub.plans_of(&w).last().unwrap().status,
        PlanStatus::Succeeded
    );
    assert!(matches!(hub.eval(&w).outcome, Outcome::AtTarget { .. }));
}

// SPEC P2, R2: apply re-validates a leader's proposal: a stale or duplicate Evaluate issues
// nothing.
#[test]
fn p2_a_stale_or_duplicate_evaluate_issues_nothing() {
    let (mut hub, w) = web_hub(&["1.0.0", "1.1.0"], Some("1.0.0"));
    // The leader saw Issue ...
    assert_eq!(hub.eval(&w).outcome, Outcome::Issue);
    // ... but a suppression was committed before its proposal.
    let s = hub.suppress(Scope::Entity(w.clone()), T0 + HOUR);
    let a = hub.apply(Command::Evaluate {
        entities: vec![w.clone()],
        artifacts: vec![],
    });
    assert_eq!(a.result, Ok(CommandOutput::Evaluated { issued: vec![] }));
    hub.ok(Command::DeleteSuppression {
        id: s,
        actor: "alice".into(),
    });
    // The same proposal twice (and the entity named twice): one plan.
    let twice = Command::Evaluate {
        entities: vec![w.clone(), w.clone()],
        artifacts: vec![],
    };
    let first = hub.ok(twice.clone());
    let CommandOutput::Evaluated { issued } = first else {
        panic!()
    };
    assert_eq!(issued.len(), 1);
    assert_eq!(hub.ok(twice), CommandOutput::Evaluated { issued: vec![] });
    assert_eq!(hub.plans_of(&w).len(), 1);
    // An entity that does not exist is skipped.
    assert_eq!(
        hub.ok(Command::Evaluate {
            entities: vec!["eid:prod:helmChart:ghost".into()],
            artifacts: vec![],
        }),
        CommandOutput::Evaluated { issued: vec![] }
    );
}

// SPEC M11 with C7: an entity marked for uninstallation is uninstalled once nothing depends on
// it.
#[test]
fn uninstall_waits_for_dependents() {
    let (mut hub, db, app) = app_db_hub(false);
    hub.installed(&db, "1.0.0");
    hub.installed(&app, "1.0.0");
    hub.entity_settings(
        &db,
        EntitySettingsPatch {
            marked_for_uninstall: Some(true),
            ..Default::default()
        },
    );
    let e = hub.eval(&db);
    assert_eq!(kind(&e), PlanKind::Uninstall);
    assert_eq!(blocking(&e), [ConstraintKind::Dependents]);
    hub.entity_settings(
        &app,
        EntitySettingsPatch {
            ignored_dependencies: Some(vec![DB.into()]),
            ..Default::default()
        },
    );
    let p = hub.converge(&db);
    assert_eq!((p.kind, p.to_version), (PlanKind::Uninstall, None));
    assert_eq!(hub.state.entity(&db).unwrap().reported.version, None);
    match hub.eval(&db).outcome {
        Outcome::AtTarget { detail } => assert!(detail.contains("marked for uninstallation")),
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// P4 — priority
// ---------------------------------------------------------------------------------------------

// SPEC P4; seed 000: "회수된 릴리스에서 다른 버전으로 전환하는 작업 ... 다른 계획보다 우선합니다".
#[test]
fn p4_recall_roll_off_comes_before_an_upgrade() {
    let (mut hub, w) = web_hub(&["1.0.0", "1.1.0", "2.0.0"], Some("1.1.0"));
    let e = hub.eval(&w);
    assert_eq!(
        (kind(&e), to_version(&e)),
        (PlanKind::VersionChange, "2.0.0".into())
    );

    let r = recall(&mut hub, WEB, "1.1.0", "1.1.0");
    let e = hub.eval(&w);
    assert_eq!(
        (kind(&e), to_version(&e)),
        (PlanKind::RecallRollOff, "2.0.0".into())
    );
    let reason = &e.candidate.as_ref().unwrap().reason;
    assert!(
        reason.contains("1.1.0 is recalled") && reason.contains(&r),
        "{reason}"
    );

    // The roll-off goes to the newest non-recalled release, even below the current version.
    recall(&mut hub, WEB, "2.0.0", "2.0.0");
    let e = hub.eval(&w);
    assert_eq!(
        (kind(&e), to_version(&e)),
        (PlanKind::RecallRollOff, "1.0.0".into())
    );
    assert_eq!(e.outcome, Outcome::Issue);

    // An entity in error is still rolled off a recalled release (health does not hold it).
    hub.report(&w, Some("1.1.0"), Health::Error);
    let e = hub.eval(&w);
    assert_eq!(e.outcome, Outcome::Issue);
    let p = hub.step_one(&w).expect("roll-off issued");
    assert_eq!(p.kind, PlanKind::RecallRollOff);
    assert_eq!(p.to_version, Some(v("1.0.0")));
    assert_eq!(p.from_version, Some(v("1.1.0")));
}

// SPEC P4, P5: a recall with nothing to roll off to is "nothing executable".
#[test]
fn p4_recall_without_a_roll_off_target_is_nothing_executable() {
    let (mut hub, w) = web_hub(&["1.0.0", "1.1.0"], Some("1.1.0"));
    recall(&mut hub, WEB, "1.0.0", "1.1.0");
    let e = hub.eval(&w);
    match &e.outcome {
        Outcome::NothingExecutable { reason } => {
            assert!(reason.contains("no release to roll off to"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    hub.step();
    assert!(hub
        .activity(&w)
        .iter()
        .any(|m| m.starts_with("decision: nothing executable")));
    // A recall is withdrawn: the entity is at target again.
    let ids: Vec<String> = hub.state.recalls().map(|r| r.id.clone()).collect();
    for id in ids {
        hub.ok(Command::DeleteRecall { id });
    }
    assert!(matches!(hub.eval(&w).outcome, Outcome::AtTarget { .. }));
}

// SPEC P4: a command beats plans (the active plan is cancelled); one command per entity.
#[test]
fn p4_a_command_beats_an_active_plan_and_only_one_command_at_a_time() {
    let (mut hub, w) = web_hub(&["1.0.0", "2.0.0"], Some("1.0.0"));
    let upgrade = hub.step_one(&w).expect("upgrade issued");
    assert_eq!(upgrade.kind, PlanKind::VersionChange);

    let cmd = command(&mut hub, &w, EmergencyCommand::Restart, "stuck pods").unwrap();
    let old = hub.plan(&upgrade.id);
    assert_eq!(old.status, PlanStatus::Cancelled);
    assert!(old
        .cancel_reason
        .as_deref()
        .unwrap()
        .contains(&format!("superseded by command {cmd}")));
    let active = hub.active(&w).unwrap();
    assert_eq!(active.id, cmd);
    assert!(active.kind.is_command());
    assert_eq!(
        active
            .tasks
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["start", "readiness"]
    );

    // A second command while the first is active is refused and changes nothing.
    let e = hub.err(Command::IssueCommand {
        entity: w.clone(),
        command: EmergencyCommand::EnforceConfig,
        reason: "again".into(),
        actor: "root".into(),
    });
    assert!(matches!(e, CommandError::FailedPrecondition(_)), "{e}");
    assert!(e.to_string().contains("one command per entity"), "{e}");

    // While the command runs no plan is issued; the decision says so.
    assert!(
        matches!(hub.eval(&w).outcome, Outcome::PlanActive { ref plan_id, .. } if *plan_id == cmd)
    );
    assert!(hub.step().is_empty());

    hub.succeed(&cmd);
    let p = hub
        .step_one(&w)
        .expect("the upgrade comes back after the command");
    assert_eq!(
        (p.kind, p.to_version),
        (PlanKind::VersionChange, Some(v("2.0.0")))
    );
}

// SPEC P4, P1; seed 000: "그 버전과 일치하는 최신 설정 재정의를 함께 적용".
#[test]
fn p4_newest_release_of_the_channel_with_the_newest_matching_config() {
    let (mut hub, w) = web_hub(
        &["1.0.0", "1.5.0", "2.0.0", "2.1.0-rc.1", "2.2.0-beta.1"],
        None,
    );
    let rc = hub.helm_on("prod", "web-rc", WEB, Some("RELEASE_CANDIDATE"));
    let dev = hub.helm_on("prod", "web-dev", WEB, Some("DEV"));
    for e in [&w, &rc, &dev] {
        set_config(&mut hub, e, "0.0.0", "replicas: 1");
        set_config(&mut hub, e, "1.5.0", "replicas: 2");
        set_config(&mut hub, e, "2.0.0", "replicas: 3");
        set_config(&mut hub, e, "2.1.0", "replicas: 4");
        hub.installed(e, "1.0.0");
    }
    // Table: entity, expected target, expected config.
    for (e, target, config) in [
        (&w, "2.0.0", "replicas: 3"),
        (&rc, "2.1.0-rc.1", "replicas: 3"),
        (&dev, "2.2.0-beta.1", "replicas: 4"),
    ] {
        let ev = hub.eval(e);
        assert_eq!(ev.outcome, Outcome::Issue, "{e}");
        let c = ev.candidate.unwrap();
        assert_eq!(c.kind, PlanKind::VersionChange, "{e}");
        assert_eq!(c.to_version, Some(v(target)), "{e}");
        assert_eq!(c.to_config.as_deref(), Some(config), "{e}");
    }
    let p = hub.converge(&w);
    assert_eq!(p.to_config.as_deref(), Some("replicas: 3"));
    assert_eq!(p.artifacts[0].uri, "web/web-2.0.0.tgz");
    let reported = &hub.state.entity(&w).unwrap().reported;
    assert_eq!(reported.version, Some(v("2.0.0")));
    assert_eq!(reported.config_sha256, Some(config_sha256("replicas: 3")));
    assert!(matches!(hub.eval(&w).outcome, Outcome::AtTarget { .. }));

    // New overrides for the running version: a config change; then a secret: a secrets change.
    set_config(&mut hub, &w, "2.0.0", "replicas: 5");
    let p = hub.converge(&w);
    assert_eq!(
        (p.kind, p.to_version, p.to_config.as_deref()),
        (
            PlanKind::ConfigChange,
            Some(v("2.0.0")),
            Some("replicas: 5")
        )
    );
    hub.ok(Command::SetSecret {
        entity: w.clone(),
        name: "db-password".into(),
        value: Some(SecretValue("hunter2".into())),
    });
    let p = hub.converge(&w);
    assert_eq!((p.kind, p.secrets_revision), (PlanKind::SecretsChange, 1));
    match hub.eval(&w).outcome {
        Outcome::AtTarget { detail } => assert_eq!(detail, "2.0.0, config and secrets applied"),
        other => panic!("{other:?}"),
    }
}

// SPEC P4, C7: the newest release is blocked by its dependencies: the newest passing newer
// release is chosen and the skipped one is recorded with why.
#[test]
fn p4_falls_back_to_an_older_newer_release_when_the_newest_fails_its_dependencies() {
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product(DB);
    hub.product(APP);
    hub.publish(DB, "1.4.0", &[]);
    hub.publish(DB, "2.0.0", &[]);
    hub.publish(APP, "1.0.0", &[(DB, "1.0.0", "1.x.x", false)]);
    hub.publish(APP, "1.1.0", &[(DB, "1.0.0", "1.x.x", false)]);
    hub.publish(APP, "2.0.0", &[(DB, "2.0.0", "2.x.x", false)]);
    let db = hub.helm("prod", "db", DB);
    let app = hub.helm("prod", "app", APP);
    hub.installed(&db, "1.4.0");
    hub.installed(&app, "1.0.0");

    let e = hub.eval(&app);
    assert_eq!(e.outcome, Outcome::Issue);
    assert_eq!(to_version(&e), "1.1.0");
    assert_eq!(e.skipped.len(), 1, "{:?}", e.skipped);
    assert!(
        e.skipped[0].starts_with(
            "2.0.0 skipped (product-dependencies: requires com.example:db [2.0.0, 2.x.x]"
        ),
        "{:?}",
        e.skipped
    );
    let p = hub.step_one(&app).unwrap();
    assert_eq!(p.to_version, Some(v("1.1.0")));
    // The skipped release and why are recorded with the plan and in Activity.
    assert!(
        p.reason.to_string().contains("2.0.0 skipped"),
        "{}",
        p.reason
    );
    assert!(
        hub.activity(&app)
            .iter()
            .any(|m| m.contains("2.0.0 skipped")),
        "{:?}",
        hub.activity(&app)
    );

    // The other direction: db may not move to 2.0.0 while app (1.x) needs db 1.x.
    let e = hub.eval(&db);
    assert_eq!(to_version(&e), "2.0.0");
    assert_eq!(blocking(&e), [ConstraintKind::Dependents]);
    assert!(constraint(&e, ConstraintKind::Dependents)
        .reason
        .to_string()
        .contains(&app));
}

// SPEC P4, C9: the newest release's artifact is unavailable: fall back.
#[test]
fn p4_falls_back_when_the_newest_artifact_is_unavailable() {
    let (mut hub, w) = web_hub(&["1.0.0", "1.1.0", "2.0.0"], Some("1.0.0"));
    registry(
        &mut hub,
        "prod",
        "reg",
        "http://127.0.0.1:9/reg",
        "expected",
    );
    hub.artifacts.insert(
        http("web/web-2.0.0.tgz"),
        Availability::Unavailable {
            reason: "404".into(),
        },
    );
    hub.artifacts
        .insert(http("web/web-1.1.0.tgz"), Availability::Available);
    let e = hub.eval(&w);
    assert_eq!(
        (e.outcome.clone(), to_version(&e)),
        (Outcome::Issue, "1.1.0".into())
    );
    assert!(
        e.skipped[0].starts_with("2.0.0 skipped (artifacts: web/web-2.0.0.tgz unavailable: 404"),
        "{:?}",
        e.skipped
    );
    assert_eq!(
        e.artifact_locations,
        [http("web/web-2.0.0.tgz"), http("web/web-1.1.0.tgz")]
    );
    assert_eq!(hub.step_one(&w).unwrap().to_version, Some(v("1.1.0")));
}

// SPEC P4: never an automatic downgrade.
#[test]
fn p4_never_downgrades_automatically() {
    let (mut hub, w) = web_hub(&["1.0.0", "2.0.0", "3.0.0-rc.1"], None);
    hub.entity_settings(
        &w,
        EntitySettingsPatch {
            release_channel: Some("RELEASE_CANDIDATE".into()),
            ..Default::default()
        },
    );
    hub.converge(&w);
    assert_eq!(
        hub.state.entity(&w).unwrap().reported.version,
        Some(v("3.0.0-rc.1"))
    );
    // Back to RELEASE, whose newest (2.0.0) is below what runs: no plan.
    let a = hub.apply(Command::SetEntitySettings {
        entity: w.clone(),
        patch: EntitySettingsPatch {
            release_channel: Some("RELEASE".into()),
            ..Default::default()
        },
    });
    assert_eq!(a.triggers, [Trigger::EntityOnly(w.clone())]); // SPEC P11: a settings change
    assert!(matches!(hub.eval(&w).outcome, Outcome::AtTarget { .. }));
    assert!(hub.step().is_empty());
    // A version the hub never heard of, above every release: at target too.
    hub.installed(&w, "9.0.0");
    match hub.eval(&w).outcome {
        Outcome::AtTarget { detail } => assert!(detail.starts_with("9.0.0"), "{detail}"),
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// P5, C1 — Activity
// ---------------------------------------------------------------------------------------------

// SPEC P5, C1: at target / nothing executable / blocked by X with when it may clear; an
// unchanged decision is recorded once.
#[test]
fn p5_activity_says_why_no_plan_is_issued_once_per_decision() {
    let (mut hub, w) = web_hub(&["1.0.0"], Some("1.0.0"));
    hub.product("com.example:empty");
    let empty = hub.helm("prod", "empty", "com.example:empty");
    let blocked = hub.helm("prod", "blocked", WEB);
    hub.entity_settings(
        &blocked,
        EntitySettingsPatch {
            maintenance_window: Some(hub_engine::command::WindowChange::Set(window(WEEKEND))),
            ..Default::default()
        },
    );
    assert!(hub.step().is_empty());

    assert_eq!(
        hub.activity(&w),
        [
            "report: reported 1.0.0 healthy",
            "decision: already at target: 1.0.0, config and secrets applied"
        ]
    );
    assert_eq!(
        hub.activity(&empty),
        ["decision: nothing executable: no release of com.example:empty in channel RELEASE"]
    );
    let e = hub.eval(&blocked);
    assert_eq!(
        e.outcome,
        Outcome::Blocked {
            may_clear_at_ms: Some(SATURDAY)
        }
    );
    let msgs = hub.activity(&blocked);
    assert_eq!(msgs.len(), 1);
    assert!(msgs[0].starts_with("decision: install - -> 1.0.0 blocked by maintenance-window (outside entity window SATURDAY/00:00-SUNDAY/00:00"), "{msgs:?}");
    assert!(
        msgs[0].ends_with("may clear at 2026-12-05T00:00:00Z"),
        "{msgs:?}"
    );

    // The same decisions an hour later: nothing new recorded, no activity record written.
    hub.advance(HOUR);
    let a = hub.apply(Command::Evaluate {
        entities: vec![w.clone(), empty.clone(), blocked.clone()],
        artifacts: vec![],
    });
    assert_eq!(a.result, Ok(CommandOutput::Evaluated { issued: vec![] }));
    assert!(a.changed.is_empty(), "{:?}", a.changed);
    assert_eq!(hub.activity(&blocked).len(), 1);
    assert_eq!(hub.activity(&w).len(), 2);

    // When the window opens the plan is issued, and the decision change is visible.
    hub.set_time(SATURDAY);
    let p = hub
        .step_one(&blocked)
        .expect("issued when the window opens");
    assert_eq!(
        p.created_ms, T0,
        "created when its candidate first appeared (blocked since)"
    );
    assert_eq!(p.issued_ms, SATURDAY);
    assert!(hub.activity(&blocked)[1]
        .starts_with(&format!("plan: plan {} issued: install - -> 1.0.0", p.id)));
}

// ---------------------------------------------------------------------------------------------
// P6, P7 — plan records and their lifecycle
// ---------------------------------------------------------------------------------------------

// SPEC P6, P7: issued -> running -> succeeded, with every field of the record.
#[test]
fn p6_p7_plan_record_fields_and_a_successful_run() {
    let (mut hub, w) = web_hub(&["1.0.0", "1.1.0"], Some("1.0.0"));
    let p = hub.step_one(&w).unwrap();
    assert_eq!(p.entity, w);
    assert_eq!(p.environment, "prod");
    assert_eq!(p.kind, PlanKind::VersionChange);
    assert_eq!(
        (p.from_version.clone(), p.to_version.clone()),
        (Some(v("1.0.0")), Some(v("1.1.0")))
    );
    assert_eq!(p.from_config_sha256, Some(config_sha256("")));
    assert_eq!(p.to_config.as_deref(), Some(""));
    assert_eq!(p.artifacts.len(), 1);
    assert_eq!(p.artifacts[0].sha256, SHA);
    assert_eq!(
        p.tasks.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        PlanKind::VersionChange.task_names()
    );
    assert!(p
        .tasks
        .iter()
        .all(|t| t.state == TaskState::Pending && t.attempt == 0 && t.started_ms.is_none()));
    assert_eq!(
        (p.created_ms, p.issued_ms, p.started_ms, p.ended_ms),
        (T0, T0, None, None)
    );
    assert_eq!(p.status, PlanStatus::Issued);
    assert_eq!(p.output, "");
    assert!(p.failure.is_none() && p.cancel_reason.is_none());
    assert_eq!(hub.plans_of(&w).len(), 1);

    hub.advance(MINUTE);
    hub.task(&p.id, "fetch", 1, TaskState::Running, "fetching\n")
        .result
        .unwrap();
    let q = hub.plan(&p.id);
    assert_eq!(q.status, PlanStatus::Running);
    assert_eq!(q.started_ms, Some(T0 + MINUTE));
    assert_eq!(
        (q.tasks[0].state, q.tasks[0].started_ms, q.tasks[0].ended_ms),
        (TaskState::Running, Some(T0 + MINUTE), None)
    );
    assert!(matches!(
        hub.eval(&w).outcome,
        Outcome::PlanActive {
            status: PlanStatus::Running,
            ..
        }
    ));

    hub.advance(MINUTE);
    for name in PlanKind::VersionChange.task_names() {
        hub.task(
            &p.id,
            name,
            1,
            TaskState::Succeeded,
            &format!("{name} ok\n"),
        )
        .result
        .unwrap();
    }
    let q = hub.plan(&p.id);
    assert_eq!(q.status, PlanStatus::Succeeded);
    assert_eq!(q.ended_ms, Some(T0 + 2 * MINUTE));
    assert!(q
        .tasks
        .iter()
        .all(|t| t.state == TaskState::Succeeded && t.ended_ms == Some(T0 + 2 * MINUTE)));
    assert_eq!(q.tasks[1].started_ms, Some(T0 + 2 * MINUTE));
    assert_eq!(
        q.output,
        "fetching\nfetch ok\nverify ok\nconfigure ok\nstart ok\nreadiness ok\n"
    );
    let e = hub.state.entity(&w).unwrap();
    assert_eq!(
        (e.reported.version.clone(), e.reported.health),
        (Some(v("1.1.0")), Health::Healthy)
    );
    assert!(hub
        .activity(&w)
        .last()
        .unwrap()
        .ends_with(&format!("plan {} succeeded", p.id)));
}

// SPEC P6, P7: a failed run records which stage failed and what was not ready.
#[test]
fn p6_p7_a_failed_run_records_the_stage_and_failure_metadata() {
    let (mut hub, w) = web_hub(&["1.0.0", "1.1.0"], Some("1.0.0"));
    let p = hub.step_one(&w).unwrap();
    hub.advance(MINUTE);
    hub.fail(&p.id, "readiness");
    let q = hub.plan(&p.id);
    assert_eq!(q.status, PlanStatus::Failed);
    assert_eq!(q.ended_ms, Some(T0 + MINUTE));
    let f = q.failure.unwrap();
    assert_eq!(
        (f.stage.as_str(), f.message.as_str()),
        ("readiness", "readiness went wrong")
    );
    assert_eq!(f.not_ready, ["deployment/web"]);
    let t = q.tasks.iter().find(|t| t.name == "readiness").unwrap();
    assert_eq!(
        (t.state, t.error.as_deref()),
        (TaskState::Failed, Some("readiness went wrong"))
    );
    assert_eq!(q.output, "readiness failed\n");
    assert!(hub.activity(&w).iter().any(|m| m
        == &format!(
            "plan: plan {} failed at readiness: readiness went wrong",
            p.id
        )));
    // A failure without metadata is attributed to the failed task.
    let (mut hub, w) = web_hub(&["1.0.0", "1.1.0"], Some("1.0.0"));
    let p = hub.step_one(&w).unwrap();
    hub.task(&p.id, "fetch", 1, TaskState::Failed, "404\n")
        .result
        .unwrap();
    assert_eq!(hub.plan(&p.id).failure.unwrap().stage, "fetch");
    assert_eq!(hub.plan(&p.id).tasks[0].error.as_deref(), Some("failed"));
}

// SPEC P7, R4: reports are idempotent; stale attempts and reports after cancel are ignored;
// a report for a plan of another environment is refused.
#[test]
fn p7_task_reports_are_idempotent() {
    let (mut hub, w) = web_hub(&["1.0.0", "1.1.0"], Some("1.0.0"));
    hub.env("staging");
    let p = hub.step_one(&w).unwrap();

    let first = hub.task(&p.id, "fetch", 1, TaskState::Running, "start\n");
    assert_eq!(first.changed.len(), 1);
    let again = hub.task(&p.id, "fetch", 1, TaskState::Running, "start\n");
    assert!(again.changed.is_empty());
    assert!(again.result.unwrap().summary().contains("ignored"));
    assert_eq!(hub.plan(&p.id).output, "start\n");

    hub.task(&p.id, "fetch", 1, TaskState::Succeeded, "done\n")
        .result
        .unwrap();
    let dup = hub.task(&p.id, "fetch", 1, TaskState::Succeeded, "done\n");
    assert!(dup.changed.is_empty());
    assert_eq!(hub.plan(&p.id).output, "start\ndone\n");

    // Attempt 2 of verify is running; a late report of attempt 1 is stale.
    hub.task(&p.id, "verify", 2, TaskState::Running, "")
        .result
        .unwrap();
    let stale = hub.task(&p.id, "verify", 1, TaskState::Failed, "old failure\n");
    assert!(stale.changed.is_empty());
    let q = hub.plan(&p.id);
    assert_eq!(
        (q.status, q.tasks[1].state, q.tasks[1].attempt),
        (PlanStatus::Running, TaskState::Running, 2)
    );
    assert!(!q.output.contains("old failure"));

    // Another environment's agent cannot report this plan.
    let e = hub.err(Command::ReportTask {
        environment: "staging".into(),
        report: hub_engine::plan::TaskReport {
            plan_id: p.id.clone(),
            task: "verify".into(),
            attempt: 2,
            state: TaskState::Succeeded,
            output: String::new(),
            failure: None,
        },
    });
    assert!(matches!(e, CommandError::NotFound { .. }), "{e}");
    // Bad reports name their field.
    for (task, attempt, state, field) in [
        ("nope", 1, TaskState::Running, "task"),
        ("verify", 0, TaskState::Running, "attempt"),
        ("verify", 3, TaskState::Pending, "state"),
    ] {
        let env = "prod".to_string();
        let e = hub.err(Command::ReportTask {
            environment: env,
            report: hub_engine::plan::TaskReport {
                plan_id: p.id.clone(),
                task: task.into(),
                attempt,
                state,
                output: String::new(),
                failure: None,
            },
        });
        assert!(
            matches!(&e, CommandError::InvalidField { field: f, .. } if f == field),
            "{e}"
        );
    }

    // After a cancel, reports change nothing.
    cancel(&mut hub, CancelTarget::Plan(p.id.clone()), None);
    let late = hub.task(&p.id, "verify", 2, TaskState::Succeeded, "late\n");
    assert!(late.changed.is_empty());
    assert!(late.result.unwrap().summary().contains("plan is cancelled"));
    assert_eq!(hub.plan(&p.id).status, PlanStatus::Cancelled);
    assert_eq!(
        hub.state.entity(&w).unwrap().reported.version,
        Some(v("1.0.0"))
    );
}

// ---------------------------------------------------------------------------------------------
// P8, P9 — automatic suppressions
// ---------------------------------------------------------------------------------------------

// SPEC P8; seed 000: "같은 환경의 다른 배포 개체에는 계속 새 계획을 발행할 수 있습니다".
#[test]
fn p8_a_failed_plan_suppresses_its_entity_only() {
    let (mut hub, w1) = web_hub(&["1.0.0", "1.1.0"], Some("1.0.0"));
    hub.env_settings(
        "prod",
        EnvironmentSettingsPatch {
            auto_suppression_ms: Some(2 * HOUR),
            ..Default::default()
        },
    );
    let w2 = hub.helm("prod", "web2", WEB);
    hub.installed(&w2, "1.0.0");
    let issued = hub.step();
    assert_eq!(issued.len(), 2);
    let (p1, p2) = (hub.active(&w1).unwrap().id, hub.active(&w2).unwrap().id);
    hub.advance(MINUTE);
    // Failed before touching the workload (fetch): no rollback, only the suppression.
    hub.fail(&p1, "fetch");

    let sups: Vec<_> = hub.state.suppressions().cloned().collect();
    assert_eq!(sups.len(), 1);
    let s = &sups[0];
    assert_eq!(s.scope, Scope::Entity(w1.clone()));
    assert_eq!(
        s.source,
        SuppressionSource::FailedPlan {
            plan_id: p1.clone()
        }
    );
    assert_eq!(
        (s.start_ms, s.end_ms),
        (T0 + MINUTE, Some(T0 + MINUTE + 2 * HOUR))
    );
    assert!(hub
        .activity(&w1)
        .iter()
        .any(|m| m.starts_with(&format!("suppression: automatic suppression {}", s.id))));

    hub.succeed(&p2);
    hub.publish(WEB, "1.2.0", &[]);
    let issued = hub.step();
    assert_eq!(issued.len(), 1, "only the healthy entity gets a plan");
    assert_eq!(hub.plan(&issued[0]).entity, w2);
    let e = hub.eval(&w1);
    assert_eq!(blocking(&e), [ConstraintKind::Suppression]);
    assert_eq!(
        e.outcome,
        Outcome::Blocked {
            may_clear_at_ms: s.end_ms
        }
    );
    // When it ends (and is expired), the entity gets its plan.
    hub.set_time(s.end_ms.unwrap());
    hub.ok(Command::ExpireSuppressions);
    assert_eq!(hub.state.suppressions().count(), 0);
    assert_eq!(hub.step_one(&w1).unwrap().to_version, Some(v("1.2.0")));
}

// SPEC P9; seed 000: "자동 억제 상태인 개체 수가 ... 임계값을 초과하면 ... 환경 수준의 억제".
#[test]
fn p9_environment_threshold_suppression_up_and_down() {
    let (mut hub, w1) = web_hub(&["1.0.0", "1.1.0"], Some("1.0.0"));
    hub.env_settings(
        "prod",
        EnvironmentSettingsPatch {
            autosuppression_threshold: Some(1),
            auto_suppression_ms: Some(HOUR),
            ..Default::default()
        },
    );
    let w2 = hub.helm("prod", "web2", WEB);
    let w3 = hub.helm("prod", "web3", WEB);
    for e in [&w2, &w3] {
        hub.installed(e, "1.0.0");
    }
    assert_eq!(hub.step().len(), 3);
    let plan = |hub: &Hub, e: &str| hub.active(e).unwrap().id;
    let (p1, p2, p3) = (plan(&hub, &w1), plan(&hub, &w2), plan(&hub, &w3));
    let env_sups = |hub: &Hub| -> Vec<hub_engine::suppression::Suppression> {
        hub.state
            .suppressions_in(&Scope::Environment("prod".into()))
            .cloned()
            .collect()
    };

    hub.fail(&p1, "fetch");
    assert!(
        env_sups(&hub).is_empty(),
        "1 auto-suppressed entity does not exceed threshold 1"
    );
    hub.succeed(&p3);
    hub.advance(MINUTE);
    hub.fail(&p2, "fetch");
    assert_eq!(hub.state.autosuppressed_count("prod", hub.now), 2);
    let env = env_sups(&hub);
    assert_eq!(env.len(), 1);
    assert_eq!(env[0].source, SuppressionSource::EnvironmentThreshold);
    assert_eq!(env[0].end_ms, None);

    // It blocks everyone, including the healthy entity.
    hub.publish(WEB, "1.2.0", &[]);
    let e = hub.eval(&w3);
    assert_eq!(blocking(&e), [ConstraintKind::Suppression]);
    assert!(constraint(&e, ConstraintKind::Suppression)
        .reason
        .to_string()
        .contains("environment-threshold"));
    assert!(hub.step().is_empty());

    // Deleting one automatic suppression brings the count back to the threshold: removed.
    let auto1 = hub
        .state
        .suppressions_in(&Scope::Entity(w1.clone()))
        .next()
        .unwrap()
        .id
        .clone();
    hub.ok(Command::DeleteSuppression {
        id: auto1,
        actor: "alice".into(),
    });
    assert!(env_sups(&hub).is_empty());
    let issued = hub.step();
    assert_eq!(issued.len(), 2, "w1 and w3 upgrade; w2 is still suppressed");
    assert!(hub.active(&w1).is_some() && hub.active(&w3).is_some() && hub.active(&w2).is_none());
    // Up again (w1 fails once more) and down by expiry.
    let p1 = hub.active(&w1).unwrap().id;
    hub.fail(&p1, "fetch");
    assert_eq!(env_sups(&hub).len(), 1);
    hub.advance(HOUR);
    let a = hub.apply(Command::ExpireSuppressions);
    assert!(a.triggers.contains(&Trigger::Environment("prod".into())));
    assert!(
        env_sups(&hub).is_empty(),
        "the auto suppressions ended: {:?}",
        env_sups(&hub)
    );
    assert_eq!(hub.state.suppressions().count(), 0);
}

// SPEC P9: the threshold is compared with the count whenever either changes, so raising the
// threshold lifts the environment suppression and lowering it below the count creates one.
#[test]
fn p9_changing_the_threshold_reconciles_the_environment_suppression() {
    let (mut hub, w1) = web_hub(&["1.0.0", "1.1.0"], Some("1.0.0"));
    let w2 = hub.helm("prod", "web2", WEB);
    hub.installed(&w2, "1.0.0");
    hub.env_settings(
        "prod",
        EnvironmentSettingsPatch {
            autosuppression_threshold: Some(1),
            ..Default::default()
        },
    );
    hub.step();
    for e in [&w1, &w2] {
        let p = hub.active(e).unwrap().id;
        hub.fail(&p, "fetch");
    }
    let env_sups = |hub: &Hub| {
        hub.state
            .suppressions_in(&Scope::Environment("prod".into()))
            .count()
    };
    assert_eq!(env_sups(&hub), 1);
    hub.env_settings(
        "prod",
        EnvironmentSettingsPatch {
            autosuppression_threshold: Some(5),
            ..Default::default()
        },
    );
    assert_eq!(
        env_sups(&hub),
        0,
        "2 auto-suppressed entities no longer exceed 5"
    );
    hub.env_settings(
        "prod",
        EnvironmentSettingsPatch {
            autosuppression_threshold: Some(0),
            ..Default::default()
        },
    );
    assert_eq!(env_sups(&hub), 1, "2 exceed 0");
}

// ---------------------------------------------------------------------------------------------
// P10 — rollback
// ---------------------------------------------------------------------------------------------

// SPEC P10; seed 000: "롤백 계획은 자동 억제가 있어도 허용 ... 사람이 직접 만든 억제 시간대는 그대로 존중".
#[test]
fn p10_rollback_passes_automatic_but_not_manual_suppression() {
    let (mut hub, w) = web_hub(&["1.0.0", "2.0.0"], Some("1.0.0"));
    set_config(&mut hub, &w, "0.0.0", "mode: old");
    set_config(&mut hub, &w, "2.0.0", "mode: new");
    hub.report(&w, Some("1.0.0"), Health::Healthy);
    let up = hub.step_one(&w).unwrap();
    assert_eq!(up.to_config.as_deref(), Some("mode: new"));
    hub.fail(&up.id, "readiness");
    // The agent reports the half-done upgrade.
    hub.report(&w, Some("2.0.0"), Health::Error);

    let e = hub.eval(&w);
    assert_eq!(
        kind(&e),
        PlanKind::Rollback {
            failed_plan: up.id.clone()
        }
    );
    assert_eq!(
        to_version(&e),
        "1.0.0",
        "back to the failed plan's from_version"
    );
    assert_eq!(e.outcome, Outcome::Issue);
    assert!(constraint(&e, ConstraintKind::Suppression)
        .reason
        .to_string()
        .contains("rollback passes automatic suppression"));
    assert!(constraint(&e, ConstraintKind::Health).passed);

    // A manual suppression is always respected.
    let manual = hub.suppress(Scope::Entity(w.clone()), T0 + DAY);
    let e = hub.eval(&w);
    assert_eq!(blocking(&e), [ConstraintKind::Suppression]);
    assert!(constraint(&e, ConstraintKind::Suppression)
        .reason
        .to_string()
        .contains(&format!("manual {manual}")));
    assert!(hub.step().is_empty());
    hub.ok(Command::DeleteSuppression {
        id: manual,
        actor: "alice".into(),
    });

    let rb = hub.step_one(&w).expect("rollback issued");
    assert_eq!(
        rb.kind,
        PlanKind::Rollback {
            failed_plan: up.id.clone()
        }
    );
    assert_eq!(
        (rb.from_version, rb.to_version.clone()),
        (Some(v("2.0.0")), Some(v("1.0.0")))
    );
    assert_eq!(rb.to_config.as_deref(), Some("mode: old"));
    hub.succeed(&rb.id);
    let ent = hub.state.entity(&w).unwrap();
    assert_eq!(
        (ent.reported.version.clone(), ent.reported.health),
        (Some(v("1.0.0")), Health::Healthy)
    );

    // No further rollback: the upgrade waits for the automatic suppression.
    let e = hub.eval(&w);
    assert_eq!(kind(&e), PlanKind::VersionChange);
    assert_eq!(blocking(&e), [ConstraintKind::Suppression]);
    assert!(hub.step().is_empty());
}

/// The three events that follow a failed upgrade on an agent that restores the previous
/// version by itself, in the order a test applies them.
#[derive(Debug, Clone, Copy)]
enum AfterFailure {
    /// The agent's task report: the upgrade failed at readiness.
    Failure,
    /// The agent's state report: the old version runs again and is healthy.
    Restored,
    /// The leader evaluates the entity and proposes what it decides.
    Evaluate,
}

// SPEC P8–P10: a failed upgrade on an agent that restored the old version itself. The rollback
// is decided from the failed plan alone, so every order of the agent's two reports and the
// leader's evaluation issues the same rollback (the race of a CI run where the state report
// won and no rollback came), the suppression holds the broken version back, and the rollback
// confirms the restored version.
#[test]
fn p10_rollback_is_issued_whichever_report_arrives_first() {
    use AfterFailure::{Evaluate, Failure, Restored};
    let orders = [
        [Failure, Evaluate, Restored],
        [Failure, Restored, Evaluate],
        [Restored, Failure, Evaluate],
    ];
    for order in orders {
        let (mut hub, w) = web_hub(&["1.0.0", "2.0.0"], Some("1.0.0"));
        let up = hub.step_one(&w).expect("upgrade issued");
        assert_eq!(up.to_version, Some(v("2.0.0")));
        let mut rollback = None;
        for event in order {
            match event {
                Failure => hub.fail(&up.id, "readiness"),
                Restored => {
                    hub.report(&w, Some("1.0.0"), Health::Healthy);
                }
                Evaluate => rollback = hub.step_one(&w),
            }
        }
        let rb = rollback.unwrap_or_else(|| panic!("{order:?}: no rollback issued"));
        assert_eq!(
            rb.kind,
            PlanKind::Rollback {
                failed_plan: up.id.clone()
            },
            "{order:?}"
        );
        assert_eq!(rb.to_version, Some(v("1.0.0")), "{order:?}");
        assert_eq!(hub.plan(&up.id).status, PlanStatus::Failed, "{order:?}");
        let sups: Vec<_> = hub.state.suppressions().cloned().collect();
        assert_eq!(sups.len(), 1, "{order:?}");
        assert_eq!(
            sups[0].source,
            SuppressionSource::FailedPlan {
                plan_id: up.id.clone()
            },
            "{order:?}"
        );
        // Whatever the agent reports while the rollback runs, nothing else is issued.
        assert!(hub.step().is_empty(), "{order:?}");
        hub.succeed(&rb.id);
        let ent = hub.state.entity(&w).unwrap();
        assert_eq!(
            (ent.reported.version.clone(), ent.reported.health),
            (Some(v("1.0.0")), Health::Healthy),
            "{order:?}"
        );
        // The broken version waits for the automatic suppression; no second rollback.
        let e = hub.eval(&w);
        assert_eq!(kind(&e), PlanKind::VersionChange, "{order:?}");
        assert_eq!(to_version(&e), "2.0.0", "{order:?}");
        assert_eq!(blocking(&e), [ConstraintKind::Suppression], "{order:?}");
        assert!(hub.step().is_empty(), "{order:?}");
        let plans = hub.activity_of_kind(&w, "plan");
        assert!(
            plans
                .iter()
                .any(|m| m.contains(&format!("plan {} failed at readiness", up.id))),
            "{order:?}: {plans:?}"
        );
        assert!(
            plans
                .iter()
                .any(|m| m.contains(&format!("plan {} succeeded", rb.id))),
            "{order:?}: {plans:?}"
        );
    }
}

// The rollback's reason tells an operator when the agent had already restored the version.
#[test]
fn p10_rollback_reason_says_the_agent_restored_the_old_version() {
    let (mut hub, w) = web_hub(&["1.0.0", "2.0.0"], Some("1.0.0"));
    let up = hub.step_one(&w).unwrap();
    hub.fail(&up.id, "readiness");
    let e = hub.eval(&w);
    let reason = &e.candidate.as_ref().expect("candidate").reason;
    assert_eq!(reason, &format!("plan {} failed; back to 1.0.0", up.id));
    hub.report(&w, Some("1.0.0"), Health::Healthy);
    let e = hub.eval(&w);
    let reason = &e.candidate.as_ref().expect("candidate").reason;
    assert!(
        reason.contains("the agent reports 1.0.0 running and healthy again"),
        "{reason}"
    );
}

// SPEC P10: a failed upgrade that left the entity where it was needs no rollback.
#[test]
fn p10_no_rollback_when_the_entity_is_still_healthy_at_its_old_version() {
    let (mut hub, w) = web_hub(&["1.0.0", "2.0.0"], Some("1.0.0"));
    let up = hub.step_one(&w).unwrap();
    hub.fail(&up.id, "fetch");
    let e = hub.eval(&w);
    assert_eq!(kind(&e), PlanKind::VersionChange);
    assert!(e.is_blocked());
}

// SPEC P10 with P4: a failed roll-off off a recalled release is never "rolled back" onto the
// recalled release; the entity waits (health) instead.
#[test]
fn p10_no_rollback_onto_a_recalled_release() {
    let (mut hub, w) = web_hub(&["1.0.0", "1.1.0"], Some("1.0.0"));
    recall(&mut hub, WEB, "1.0.0", "1.0.0");
    let off = hub.step_one(&w).unwrap();
    assert_eq!(
        (off.kind.clone(), off.to_version.clone()),
        (PlanKind::RecallRollOff, Some(v("1.1.0")))
    );
    hub.fail(&off.id, "readiness");
    hub.report(&w, Some("1.1.0"), Health::Error);
    let e = hub.eval(&w);
    assert!(e.candidate.is_none(), "{}", e.summary());
    assert!(hub.step().is_empty());
    // Once healthy at the new release, the entity is at target.
    hub.report(&w, Some("1.1.0"), Health::Healthy);
    assert!(
        matches!(hub.eval(&w).outcome, Outcome::AtTarget { .. }),
        "{}",
        hub.eval(&w).summary()
    );
}

// SPEC P4 ("release channel"): a custom channel holds only the releases added to it.
#[test]
fn p4_custom_channels() {
    let (mut hub, w) = web_hub(&["1.0.0", "1.1.0", "2.0.0"], Some("1.0.0"));
    hub.ok(Command::CreateChannel {
        name: "CANARY_FLEET".into(),
        description: String::new(),
    });
    let e = hub.err(Command::SetReleaseChannel {
        channel: "NIGHTLY".into(),
        product_id: WEB.into(),
        version: "1.1.0".into(),
        member: true,
    });
    assert!(e.to_string().contains("NIGHTLY"), "{e}");
    hub.entity_settings(
        &w,
        EntitySettingsPatch {
            release_channel: Some("CANARY_FLEET".into()),
            ..Default::default()
        },
    );
    assert!(matches!(hub.eval(&w).outcome, Outcome::AtTarget { .. }));
    let a = hub.apply(Command::SetReleaseChannel {
        channel: "CANARY_FLEET".into(),
        product_id: WEB.into(),
        version: "1.1.0".into(),
        member: true,
    });
    assert_eq!(a.triggers, [Trigger::Product(WEB.into())]);
    assert_eq!(to_version(&hub.eval(&w)), "1.1.0");
}

// ---------------------------------------------------------------------------------------------
// P11 — re-evaluation triggers
// ---------------------------------------------------------------------------------------------

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

// SPEC P11; seed 000: A는 B에 의존하고, B는 C에 의존 — C의 변화는 C와 B를 다시 평가한다.
#[test]
fn p11_a_change_re_evaluates_the_entity_and_its_direct_neighbours() {
    let mut hub = Hub::new();
    hub.env("prod");
    let (pa, pb, pc) = ("com.example:a", "com.example:b", "com.example:c");
    for p in [pa, pb, pc] {
        hub.product(p);
    }
    hub.publish(pc, "1.0.0", &[]);
    hub.publish(pb, "1.0.0", &[(pc, "1.0.0", "1.x.x", false)]);
    hub.publish(pa, "1.0.0", &[(pb, "1.0.0", "1.x.x", false)]);
    let (a, b, c) = (
        hub.helm("prod", "a", pa),
        hub.helm("prod", "b", pb),
        hub.helm("prod", "c", pc),
    );
    // Another environment and another dependency group are not neighbours.
    let other_c = {
        hub.env("staging");
        hub.helm("staging", "c", pc)
    };
    let far_c = hub.helm("prod", "c2", pc);
    hub.entity_settings(
        &far_c,
        EntitySettingsPatch {
            dependency_groups: Some(vec!["elsewhere".into()]),
            ..Default::default()
        },
    );
    for e in [&a, &b, &c, &other_c, &far_c] {
        hub.installed(e, "1.0.0");
    }

    let applied = hub.report(&c, Some("1.0.0"), Health::Error);
    assert_eq!(applied.triggers, [Trigger::Entity(c.clone())]);
    assert_eq!(
        hub.state.affected_entities(&applied.triggers[0]),
        sorted(vec![b.clone(), c.clone()])
    );
    assert_eq!(
        hub.state.affected_entities(&Trigger::Entity(b.clone())),
        sorted(vec![a.clone(), b.clone(), c.clone()])
    );
    assert_eq!(
        hub.state.affected_entities(&Trigger::Entity(a.clone())),
        sorted(vec![a.clone(), b.clone()])
    );
    // An unchanged report triggers nothing.
    let same = hub.report(&c, Some("1.0.0"), Health::Error);
    assert!(same.triggers.is_empty() && same.changed.is_empty());

    // Table: command -> its triggers.
    let cases: Vec<(Command, Vec<Trigger>)> = vec![
        (
            Command::SetEntitySettings {
                entity: a.clone(),
                patch: EntitySettingsPatch {
                    release_channel: Some("DEV".into()),
                    ..Default::default()
                },
            },
            vec![Trigger::EntityOnly(a.clone())],
        ),
        (
            Command::SetConfigOverrides {
                entity: a.clone(),
                version: "1.0.0".into(),
                config: Some("k: v".into()),
            },
            vec![Trigger::EntityOnly(a.clone())],
        ),
        (
            Command::SetSecret {
                entity: a.clone(),
                name: "token".into(),
                value: Some(SecretValue("s".into())),
            },
            vec![Trigger::EntityOnly(a.clone())],
        ),
        (
            Command::PublishRelease {
                manifest: manifest(pc, "1.1.0", &[]),
            },
            vec![Trigger::Product(pc.into())],
        ),
        (
            Command::RecallReleases {
                product_id: pc.into(),
                from: "1.1.0".into(),
                to: "1.1.0".into(),
                reason: "bad".into(),
            },
            vec![Trigger::Product(pc.into())],
        ),
    ];
    for (cmd, want) in cases {
        let kind = cmd.kind();
        assert_eq!(hub.apply(cmd).triggers, want, "{kind}");
    }
    assert_eq!(
        hub.state.affected_entities(&Trigger::Product(pc.into())),
        sorted(vec![c.clone(), far_c.clone(), other_c.clone()])
    );
    assert_eq!(
        hub.state
            .affected_entities(&Trigger::Environment("staging".into())),
        [other_c]
    );
}

// SPEC P11: a plan blocked for more than 4 hours is re-checked, once per 4-hour period.
#[test]
fn p11_blocked_for_more_than_four_hours_is_rechecked_once_per_period() {
    let (mut hub, w) = web_hub(&["1.0.0"], None);
    env_window(&mut hub, "prod", WEEKEND);
    let t0 = hub.now;
    hub.step();
    let rechecks = |hub: &Hub| hub.activity_of_kind(&w, "recheck").len();
    assert_eq!(hub.activity_of_kind(&w, "decision").len(), 1);
    for (t, want) in [
        (t0 + HOUR, 0),
        (t0 + BLOCKED_RECHECK_MS - 1, 0),
        (t0 + BLOCKED_RECHECK_MS + 1, 1),
        (t0 + BLOCKED_RECHECK_MS + 2, 1),
        (t0 + 2 * BLOCKED_RECHECK_MS - 1, 1),
        (t0 + 2 * BLOCKED_RECHECK_MS + 1, 2),
        (t0 + 2 * BLOCKED_RECHECK_MS + 2, 2),
    ] {
        hub.set_time(t);
        hub.step();
        assert_eq!(rechecks(&hub), want, "at t0+{}ms", t - t0);
    }
    assert!(hub.activity_of_kind(&w, "recheck")[0].starts_with(
        "re-checked after 4h blocked: install - -> 1.0.0 blocked by maintenance-window"
    ));
    assert_eq!(
        hub.activity_of_kind(&w, "decision").len(),
        1,
        "the unchanged decision itself is not repeated"
    );
    assert_eq!(hub.state.activity(&w).unwrap().blocked_since_ms, Some(t0));
}

// SPEC P11: one re-check per 4-hour period even when evaluations skipped a period (e.g. no
// leader for a while) or when newer entries pushed old re-checks out of the bounded Activity.
#[test]
fn p11_recheck_is_once_per_period_after_a_gap_and_after_activity_rolls_over() {
    let (mut hub, w) = web_hub(&["1.0.0"], None);
    env_window(&mut hub, "prod", WEEKEND);
    let t0 = hub.now;
    hub.step();
    // Nothing evaluates the entity between 4h and 8h.
    hub.set_time(t0 + 2 * BLOCKED_RECHECK_MS + 1);
    hub.step();
    hub.advance(1);
    hub.step();
    hub.advance(1);
    hub.step();
    let rechecks = hub.activity_of_kind(&w, "recheck");
    assert_eq!(rechecks.len(), 1, "{rechecks:?}");
    assert!(
        rechecks[0].starts_with("re-checked after 8h blocked"),
        "{rechecks:?}"
    );

    // The agent flaps the entity's health 120 times within the same period: the re-check entry
    // rolls out of the kept entries. At most one more re-check is written in this period.
    for i in 0..120 {
        let h = if i % 2 == 0 {
            Health::Error
        } else {
            Health::Unknown
        };
        hub.report(&w, None, h);
    }
    assert!(hub.activity_of_kind(&w, "recheck").is_empty());
    for _ in 0..5 {
        hub.advance(1);
        hub.step();
    }
    assert!(
        hub.activity_of_kind(&w, "recheck").len() <= 1,
        "{:?}",
        hub.activity_of_kind(&w, "recheck")
    );
    // The next period gets its re-check.
    hub.set_time(t0 + 3 * BLOCKED_RECHECK_MS + 1);
    hub.step();
    let last = hub.activity_of_kind(&w, "recheck");
    assert!(
        last.last()
            .unwrap()
            .starts_with("re-checked after 12h blocked"),
        "{last:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// P12 — cancel
// ---------------------------------------------------------------------------------------------

// SPEC P12; seed 000: "Cancel active Plans 작업으로 환경, 개체 또는 개별 계획을 대상으로 취소".
#[test]
fn p12_cancel_a_plan_an_entity_or_an_environment() {
    let (mut hub, w1) = web_hub(&["1.0.0", "1.1.0"], Some("1.0.0"));
    let w2 = hub.helm("prod", "web2", WEB);
    let w3 = hub.helm("prod", "web3", WEB);
    hub.env("staging");
    let s1 = hub.helm("staging", "web", WEB);
    for e in [&w2, &w3, &s1] {
        hub.installed(e, "1.0.0");
    }
    assert_eq!(hub.step().len(), 4);

    // A single plan, without suppression: it may be re-issued at once (the P12 caveat).
    let p1 = hub.active(&w1).unwrap().id;
    let out = cancel(&mut hub, CancelTarget::Plan(p1.clone()), None);
    assert_eq!(out.summary(), format!("1 plans cancelled ({p1})"));
    let c = hub.plan(&p1);
    assert_eq!(
        (c.status, c.cancel_reason.as_deref()),
        (PlanStatus::Cancelled, Some("operator says stop"))
    );
    assert!(c.ended_ms.is_some());
    assert_eq!(hub.step().len(), 1, "a bare cancel is re-issued at once");
    // A finished plan cannot be cancelled.
    let e = hub.err(Command::CancelPlans {
        target: CancelTarget::Plan(p1.clone()),
        reason: "again".into(),
        suppress_for_ms: None,
        actor: "alice".into(),
    });
    assert!(e.to_string().contains("cannot be cancelled"), "{e}");

    // An entity, with a 30-minute suppression: not re-issued until it ends.
    let p2 = hub.active(&w2).unwrap().id;
    cancel(
        &mut hub,
        CancelTarget::Entity(w2.clone()),
        Some(30 * MINUTE),
    );
    assert_eq!(hub.plan(&p2).status, PlanStatus::Cancelled);
    let s: Vec<_> = hub
        .state
        .suppressions_in(&Scope::Entity(w2.clone()))
        .cloned()
        .collect();
    assert_eq!(s.len(), 1);
    assert_eq!(
        (s[0].source.clone(), s[0].end_ms),
        (SuppressionSource::Manual, Some(hub.now + 30 * MINUTE))
    );
    assert!(hub.step().is_empty());
    assert!(
        hub.active(&w1).is_some() && hub.active(&w3).is_some(),
        "other plans untouched"
    );

    // The environment: every active plan of prod, none of staging.
    let out = cancel(
        &mut hub,
        CancelTarget::Environment("prod".into()),
        Some(30 * MINUTE),
    );
    assert!(
        out.summary().starts_with("2 plans cancelled (")
            && out.summary().contains("; suppression s-"),
        "{}",
        out.summary()
    );
    assert!(hub.active(&w1).is_none() && hub.active(&w3).is_none());
    assert!(hub.active(&s1).is_some());
    assert!(hub.step().is_empty());
    assert_eq!(blocking(&hub.eval(&w3)), [ConstraintKind::Suppression]);
    hub.advance(30 * MINUTE);
    assert_eq!(
        hub.step().len(),
        3,
        "issued again once the short suppressions end"
    );
    assert!(hub
        .state
        .audit()
        .any(|a| a.action == "cancel" && a.target == "environment prod"));
}

// SPEC P12, C8: creating a suppression may cancel the active plans in its scope.
#[test]
fn p12_a_suppression_with_cancel_active_plans_cancels_in_its_scope() {
    let (mut hub, w1) = web_hub(&["1.0.0", "1.1.0"], Some("1.0.0"));
    let w2 = hub.helm("prod", "web2", WEB);
    hub.installed(&w2, "1.0.0");
    hub.step();
    let (p1, p2) = (hub.active(&w1).unwrap().id, hub.active(&w2).unwrap().id);
    let out = hub.ok(Command::CreateSuppression {
        scope: Scope::Entity(w1.clone()),
        start_ms: None,
        end_ms: T0 + HOUR,
        reason: "manual db migration".into(),
        cancel_active_plans: true,
        actor: "alice".into(),
    });
    assert!(
        out.summary().ends_with("1 plans cancelled"),
        "{}",
        out.summary()
    );
    assert_eq!(hub.plan(&p1).status, PlanStatus::Cancelled);
    assert_eq!(hub.plan(&p2).status, PlanStatus::Issued);
    // Without the flag nothing is cancelled.
    hub.ok(Command::CreateSuppression {
        scope: Scope::Environment("prod".into()),
        start_ms: None,
        end_ms: T0 + HOUR,
        reason: "freeze".into(),
        cancel_active_plans: false,
        actor: "alice".into(),
    });
    assert_eq!(hub.plan(&p2).status, PlanStatus::Issued);
    hub.ok(Command::CreateSuppression {
        scope: Scope::Environment("prod".into()),
        start_ms: None,
        end_ms: T0 + HOUR,
        reason: "freeze harder".into(),
        cancel_active_plans: true,
        actor: "alice".into(),
    });
    assert_eq!(hub.plan(&p2).status, PlanStatus::Cancelled);
    assert!(hub.step().is_empty());
}

// ---------------------------------------------------------------------------------------------
// C2 — emergency commands
// ---------------------------------------------------------------------------------------------

// SPEC C2, P1: commands bypass every plan constraint, need a reason and are audited.
#[test]
fn c2_commands_bypass_every_constraint_need_a_reason_and_are_audited() {
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product(WEB);
    hub.product(DB);
    hub.publish(WEB, "1.0.0", &[]);
    hub.publish(WEB, "1.1.0", &[]);
    hub.publish(WEB, "2.0.0", &[(DB, "9.0.0", "9.x.x", false)]);
    let w = hub.helm("prod", "web", WEB);
    hub.report(&w, Some("1.0.0"), Health::Error);
    recall(&mut hub, WEB, "1.1.0", "1.1.0");
    env_window(&mut hub, "prod", WEEKEND);
    hub.suppress(Scope::Entity(w.clone()), T0 + DAY);
    hub.suppress(Scope::Environment("prod".into()), T0 + DAY);
    registry(
        &mut hub,
        "prod",
        "reg",
        "http://127.0.0.1:9/reg",
        "expected",
    );
    // Every ordinary plan is blocked several times over.
    assert!(hub.eval(&w).is_blocked());

    // A reason is required; nothing changes without one.
    for reason in ["", "   "] {
        let e = hub.err(Command::IssueCommand {
            entity: w.clone(),
            command: EmergencyCommand::Install {
                version: v("1.1.0"),
            },
            reason: reason.into(),
            actor: "root".into(),
        });
        assert!(
            matches!(&e, CommandError::InvalidField { field, .. } if field == "reason"),
            "{e}"
        );
    }
    let e = hub.err(Command::IssueCommand {
        entity: w.clone(),
        command: EmergencyCommand::Install {
            version: v("7.0.0"),
        },
        reason: "typo".into(),
        actor: "root".into(),
    });
    assert!(matches!(e, CommandError::NotFound { .. }), "{e}");

    // Install a recalled version through suppressions, a closed window and bad health.
    let cmd = command(
        &mut hub,
        &w,
        EmergencyCommand::Install {
            version: v("1.1.0"),
        },
        "hotfix",
    )
    .unwrap();
    let p = hub.plan(&cmd);
    assert_eq!(
        p.kind,
        PlanKind::Command {
            command: EmergencyCommand::Install {
                version: v("1.1.0")
            },
            actor: "root".into()
        }
    );
    assert_eq!(
        (p.to_version, p.status),
        (Some(v("1.1.0")), PlanStatus::Issued)
    );
    assert_eq!(p.artifacts[0].uri, "web/web-1.1.0.tgz");
    let audit = hub.state.audit().last().unwrap().clone();
    assert_eq!(
        (
            audit.actor.as_str(),
            audit.action.as_str(),
            audit.target.as_str(),
            audit.reason.as_str(),
            audit.time_ms
        ),
        ("root", "command install", w.as_str(), "hotfix", hub.now)
    );
    assert!(hub
        .activity(&w)
        .last()
        .unwrap()
        .contains("command install by root"));
    hub.succeed(&cmd);
    assert_eq!(
        hub.state.entity(&w).unwrap().reported.version,
        Some(v("1.1.0"))
    );

    // Enforce a version whose dependencies are not met.
    let cmd = command(
        &mut hub,
        &w,
        EmergencyCommand::EnforceConfigAndVersion {
            version: v("2.0.0"),
        },
        "need 2.0",
    )
    .unwrap();
    hub.succeed(&cmd);
    assert_eq!(
        hub.state.entity(&w).unwrap().reported.version,
        Some(v("2.0.0"))
    );
    // Uninstall.
    let cmd = command(&mut hub, &w, EmergencyCommand::Uninstall, "decommission").unwrap();
    assert_eq!(hub.plan(&cmd).to_version, None);
    hub.succeed(&cmd);
    assert_eq!(hub.state.entity(&w).unwrap().reported.version, None);
    // Restart and enforce-config need an installed product.
    let e = hub.err(Command::IssueCommand {
        entity: w.clone(),
        command: EmergencyCommand::Restart,
        reason: "why not".into(),
        actor: "root".into(),
    });
    assert!(e.to_string().contains("not installed"), "{e}");
    assert_eq!(
        hub.state
            .audit()
            .filter(|a| a.action.starts_with("command"))
            .count(),
        3
    );
}

// ---------------------------------------------------------------------------------------------
// C3–C6 — maintenance windows
// ---------------------------------------------------------------------------------------------

// SPEC C3, C4; seed 000 "개체에 적용할 시간대의 선택": product, unless the environment overrides
// product windows; else the entity's; else the environment's.
#[test]
fn c3_c4_effective_window_precedence_table() {
    // product window | env overrides product windows | entity window | env window
    //   => source named in the reason | passes | may clear at
    type Row = (
        Option<&'static str>,
        bool,
        Option<&'static str>,
        Option<&'static str>,
        &'static str,
        bool,
        Option<i64>,
    );
    let rows: &[Row] = &[
        (
            Some(WEDNESDAY),
            false,
            Some(MONDAY_NIGHT),
            Some(MONDAY_NIGHT),
            "product",
            false,
            Some(WEDNESDAY_10),
        ),
        (
            Some(MONDAY_NIGHT),
            false,
            Some(WEDNESDAY),
            Some(WEDNESDAY),
            "product",
            true,
            None,
        ),
        (
            Some(WEDNESDAY),
            true,
            Some(MONDAY_NIGHT),
            Some(WEDNESDAY),
            "entity",
            true,
            None,
        ),
        (
            Some(WEDNESDAY),
            true,
            None,
            Some(WEDNESDAY),
            "environment",
            false,
            Some(WEDNESDAY_10),
        ),
        (
            Some(MONDAY_NIGHT),
            true,
            None,
            Some(WEDNESDAY),
            "environment",
            false,
            Some(WEDNESDAY_10),
        ),
        (
            None,
            false,
            Some(WEDNESDAY),
            Some(MONDAY_NIGHT),
            "entity",
            false,
            Some(WEDNESDAY_10),
        ),
        (
            None,
            false,
            Some("all-time"),
            Some(WEDNESDAY),
            "entity",
            true,
            None,
        ),
        (
            None,
            false,
            None,
            Some(MONDAY_NIGHT),
            "environment",
            true,
            None,
        ),
        (
            None,
            false,
            None,
            Some(WEEKEND),
            "environment",
            false,
            Some(SATURDAY),
        ),
        (
            None,
            false,
            Some("SUNDAY/22:00-MONDAY/02:00"),
            None,
            "entity",
            true,
            None,
        ),
        (
            None,
            true,
            None,
            None,
            "no maintenance window applies",
            true,
            None,
        ),
        (
            None,
            false,
            None,
            None,
            "no maintenance window applies",
            true,
            None,
        ),
    ];
    for (i, &(product, over, entity, env, source, passes, clear)) in rows.iter().enumerate() {
        let (mut hub, w) = web_hub(&["1.0.0"], None);
        hub.ok(Command::SetProductWindow {
            product_id: WEB.into(),
            window: product.map(window),
        });
        hub.env_settings(
            "prod",
            EnvironmentSettingsPatch {
                maintenance_window: Some(env.map(window).into()),
                override_product_maintenance_windows: Some(over),
                ..Default::default()
            },
        );
        hub.entity_settings(
            &w,
            EntitySettingsPatch {
                maintenance_window: Some(entity.map(window).into()),
                ..Default::default()
            },
        );
        let e = hub.eval(&w);
        let c = constraint(&e, ConstraintKind::MaintenanceWindow);
        assert_eq!(c.passed, passes, "row {i}: {c:?}");
        assert!(c.reason.to_string().contains(source), "row {i}: {c:?}");
        assert_eq!(c.may_clear_at_ms, clear, "row {i}");
        if !passes {
            assert_eq!(
                e.outcome,
                Outcome::Blocked {
                    may_clear_at_ms: clear
                },
                "row {i}"
            );
            assert!(
                c.reason.to_string().contains("next opening"),
                "row {i}: {c:?}"
            );
        }
    }
}

// SPEC C3: windows are in a named time zone and may wrap across days.
#[test]
fn c3_windows_use_their_time_zone() {
    // T0 is Monday 00:00 UTC = Sunday 19:00 in New York = Monday 09:00 in Seoul.
    for (spec, tz, open) in [
        ("SUNDAY/18:00-SUNDAY/20:00", "America/New_York", true),
        ("MONDAY/00:00-MONDAY/01:00", "America/New_York", false),
        ("MONDAY/08:00-MONDAY/10:00", "Asia/Seoul", true),
        ("SATURDAY/22:00-MONDAY/02:00", "UTC", true),
    ] {
        let (mut hub, w) = web_hub(&["1.0.0"], None);
        hub.env_settings(
            "prod",
            EnvironmentSettingsPatch {
                maintenance_window: Some(hub_engine::command::WindowChange::Set(
                    hub_engine::command::WindowSpec {
                        spec: spec.into(),
                        time_zone: tz.into(),
                    },
                )),
                ..Default::default()
            },
        );
        assert_eq!(
            constraint(&hub.eval(&w), ConstraintKind::MaintenanceWindow).passed,
            open,
            "{spec} {tz}"
        );
    }
}

// SPEC C5; seed 000: "임시 유지보수 시간대 예외 ... 모든 다른 제약을 함께 없애는 것은 아닙니다".
#[test]
fn c5_a_window_override_passes_only_the_window() {
    let (mut hub, w) = web_hub(&["1.0.0"], None);
    env_window(&mut hub, "prod", WEEKEND);
    // A future override: the block may clear when it starts, before the window opens.
    hub.ok(Command::AddWindowOverride {
        scope: Scope::Entity(w.clone()),
        start_ms: T0 + HOUR,
        end_ms: T0 + 3 * HOUR,
        reason: "urgent fix".into(),
        actor: "alice".into(),
    });
    let e = hub.eval(&w);
    assert_eq!(
        e.outcome,
        Outcome::Blocked {
            may_clear_at_ms: Some(T0 + HOUR)
        }
    );
    hub.advance(HOUR);
    let e = hub.eval(&w);
    let c = constraint(&e, ConstraintKind::MaintenanceWindow);
    assert!(
        c.passed && c.reason.to_string().starts_with("entity override"),
        "{c:?}"
    );
    assert_eq!(e.outcome, Outcome::Issue);

    // Every other constraint still holds: a suppression, health, dependencies.
    let s = hub.suppress(Scope::Entity(w.clone()), T0 + DAY);
    assert_eq!(blocking(&hub.eval(&w)), [ConstraintKind::Suppression]);
    hub.ok(Command::DeleteSuppression {
        id: s,
        actor: "alice".into(),
    });
    // Health holds an entity that was healthy once (issue 55: a never-healthy one is not
    // held until an attempt of the hub failed).
    hub.report(&w, Some("1.0.0"), Health::Healthy);
    hub.report(&w, None, Health::Error);
    assert_eq!(blocking(&hub.eval(&w)), [ConstraintKind::Health]);
    hub.report(&w, None, Health::Unknown);

    // An environment override works the same way, and the override ends.
    let (mut hub2, w2) = web_hub(&["1.0.0"], None);
    env_window(&mut hub2, "prod", WEEKEND);
    hub2.ok(Command::AddWindowOverride {
        scope: Scope::Environment("prod".into()),
        start_ms: T0,
        end_ms: T0 + HOUR,
        reason: "release day".into(),
        actor: "alice".into(),
    });
    assert!(
        constraint(&hub2.eval(&w2), ConstraintKind::MaintenanceWindow)
            .reason
            .to_string()
            .starts_with("environment override")
    );
    hub2.advance(HOUR);
    assert!(!constraint(&hub2.eval(&w2), ConstraintKind::MaintenanceWindow).passed);
    // The audit records who overrode the window.
    assert!(hub2
        .state
        .audit()
        .any(|a| a.action == "window-override" && a.reason == "release day"));
}

// SPEC C6; seed 000: require-maintenance-windows-for-no-downtime-recalled-release-roll-offs.
#[test]
fn c6_recall_roll_offs_ignore_windows_unless_required() {
    let (mut hub, w) = web_hub(&["1.0.0", "1.1.0", "1.2.0"], Some("1.1.0"));
    env_window(&mut hub, "prod", WEEKEND);
    let e = hub.eval(&w);
    assert_eq!(
        (kind(&e), blocking(&e)),
        (
            PlanKind::VersionChange,
            vec![ConstraintKind::MaintenanceWindow]
        )
    );
    recall(&mut hub, WEB, "1.1.0", "1.1.0");
    let e = hub.eval(&w);
    assert_eq!(kind(&e), PlanKind::RecallRollOff);
    assert_eq!(e.outcome, Outcome::Issue);
    assert_eq!(
        constraint(&e, ConstraintKind::MaintenanceWindow).reason,
        Reason::RecallRollOffIgnoresWindows
    );
    assert_eq!(
        constraint(&e, ConstraintKind::MaintenanceWindow)
            .reason
            .to_string(),
        "recall roll-offs ignore maintenance windows"
    );
    hub.env_settings(
        "prod",
        EnvironmentSettingsPatch {
            require_windows_for_recall_roll_offs: Some(true),
            ..Default::default()
        },
    );
    let e = hub.eval(&w);
    assert_eq!(blocking(&e), [ConstraintKind::MaintenanceWindow]);
    assert_eq!(
        e.outcome,
        Outcome::Blocked {
            may_clear_at_ms: Some(SATURDAY)
        }
    );
}

// ---------------------------------------------------------------------------------------------
// C7 — product dependencies
// ---------------------------------------------------------------------------------------------

/// prod with db and app; app releases depend on db `[1.0.0, 1.x.x]` (optional as given).
fn app_db_hub(optional: bool) -> (Hub, String, String) {
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product(DB);
    hub.product(APP);
    hub.publish(DB, "1.0.0", &[]);
    hub.publish(DB, "2.0.0", &[]);
    hub.publish(APP, "1.0.0", &[(DB, "1.0.0", "1.x.x", optional)]);
    let db = hub.helm("prod", "db", DB);
    let app = hub.helm("prod", "app", APP);
    (hub, db, app)
}

// SPEC C7; seed 000 "제품 의존 관계 제약": both questions, as a table.
#[test]
fn c7_dependencies_in_both_directions() {
    // db version | app version | app ignores db | db group | app decision | db decision
    type Row = (
        Option<&'static str>,
        Option<&'static str>,
        bool,
        &'static str,
        Option<ConstraintKind>,
        Option<ConstraintKind>,
    );
    let rows: &[Row] = &[
        // db at 1.0.0 satisfies app's install; db may not go to 2.0.0 once app runs 1.x.
        (Some("1.0.0"), None, false, "default", None, None),
        (
            Some("1.0.0"),
            Some("1.0.0"),
            false,
            "default",
            None,
            Some(ConstraintKind::Dependents),
        ),
        // db at 2.0.0 does not satisfy app.
        (
            Some("2.0.0"),
            None,
            false,
            "default",
            Some(ConstraintKind::ProductDependencies),
            None,
        ),
        // db not installed: app waits.
        (
            None,
            None,
            false,
            "default",
            Some(ConstraintKind::ProductDependencies),
            None,
        ),
        // An ignored dependency skips both checks.
        (Some("2.0.0"), None, true, "default", None, None),
        (Some("1.0.0"), Some("1.0.0"), true, "default", None, None),
        // A db in another dependency group neither satisfies app nor is held by it.
        (
            Some("1.0.0"),
            None,
            false,
            "other",
            Some(ConstraintKind::ProductDependencies),
            None,
        ),
        (Some("1.0.0"), Some("1.0.0"), false, "other", None, None),
    ];
    for (i, &(db_at, app_at, ignore, group, app_block, db_block)) in rows.iter().enumerate() {
        let (mut hub, db, app) = app_db_hub(false);
        hub.entity_settings(
            &db,
            EntitySettingsPatch {
                dependency_groups: Some(vec![group.into()]),
                ..Default::default()
            },
        );
        if ignore {
            hub.entity_settings(
                &app,
                EntitySettingsPatch {
                    ignored_dependencies: Some(vec![DB.into()]),
                    ..Default::default()
                },
            );
        }
        if let Some(at) = db_at {
            hub.installed(&db, at);
        }
        if let Some(at) = app_at {
            hub.installed(&app, at);
        }
        let ea = hub.eval(&app);
        if app_at.is_none() {
            assert_eq!(
                blocking(&ea).first().copied(),
                app_block,
                "row {i} app: {}",
                ea.summary()
            );
        }
        if db_at == Some("1.0.0") {
            let ed = hub.eval(&db);
            assert_eq!(to_version(&ed), "2.0.0", "row {i}");
            assert_eq!(
                blocking(&ed).first().copied(),
                db_block,
                "row {i} db: {}",
                ed.summary()
            );
        }
        if app_block == Some(ConstraintKind::ProductDependencies) {
            let reason = constraint(&ea, ConstraintKind::ProductDependencies)
                .reason
                .to_string();
            assert!(
                reason.starts_with("requires com.example:db [1.0.0, 1.x.x]"),
                "row {i}: {reason}"
            );
            assert_eq!(ea.waits_on_products, [DB], "row {i}");
        }
    }
}

// SPEC C7: an optional dependency is satisfied when no entity of it exists, but an existing
// one must still be in range.
#[test]
fn c7_optional_dependencies() {
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product(DB);
    hub.product(APP);
    hub.publish(DB, "2.0.0", &[]);
    hub.publish(APP, "1.0.0", &[(DB, "1.0.0", "1.x.x", true)]);
    let app = hub.helm("prod", "app", APP);
    let e = hub.eval(&app);
    assert_eq!(e.outcome, Outcome::Issue);
    assert_eq!(
        constraint(&e, ConstraintKind::ProductDependencies).reason,
        Reason::DependenciesSatisfied {
            checked: 1,
            not_waiting: Vec::new()
        }
    );
    let db = hub.helm("prod", "db", DB);
    hub.installed(&db, "2.0.0");
    let e = hub.eval(&app);
    assert_eq!(blocking(&e), [ConstraintKind::ProductDependencies]);
    assert!(constraint(&e, ConstraintKind::ProductDependencies)
        .reason
        .to_string()
        .contains("runs 2.0.0"));
}

// SPEC C7: "Install order follows dependencies, not list order (a database before the
// application that needs it)".
#[test]
fn c7_install_order_follows_dependencies() {
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product(DB);
    hub.product(APP);
    hub.publish(DB, "1.0.0", &[]);
    hub.publish(APP, "1.0.0", &[(DB, "1.0.0", "1.x.x", false)]);
    // The app is created (and listed) first.
    let app = hub.helm("prod", "app", APP);
    let db = hub.helm("prod", "db", DB);
    let issued = hub.step_entities(&[app.clone(), db.clone()]);
    assert_eq!(issued.len(), 1);
    assert_eq!(hub.plan(&issued[0]).entity, db);
    let e = hub.eval(&app);
    assert_eq!(blocking(&e), [ConstraintKind::ProductDependencies]);
    assert!(constraint(&e, ConstraintKind::ProductDependencies)
        .reason
        .to_string()
        .contains(&format!("{db} is not installed")));
    // While db's plan runs the app still waits.
    assert!(hub.step().is_empty());
    let plan_db = issued[0].clone();
    let before = hub.apply(Command::ReportTask {
        environment: "prod".into(),
        report: hub_engine::plan::TaskReport {
            plan_id: plan_db.clone(),
            task: "fetch".into(),
            attempt: 1,
            state: TaskState::Running,
            output: String::new(),
            failure: None,
        },
    });
    assert!(before.result.is_ok());
    hub.succeed(&plan_db);
    let p = hub.step_one(&app).expect("the app is installed after db");
    assert_eq!(p.kind, PlanKind::Install);
}

// SPEC C7: "circular or optional ones carry no ordering promise" — they must not deadlock.
#[test]
fn c7_circular_and_optional_dependencies_do_not_wait_for_each_other() {
    let mut hub = Hub::new();
    hub.env("prod");
    let (pa, pb) = ("com.example:a", "com.example:b");
    hub.product(pa);
    hub.product(pb);
    hub.publish(pa, "1.0.0", &[(pb, "1.0.0", "1.x.x", false)]);
    hub.publish(pb, "1.0.0", &[(pa, "1.0.0", "1.x.x", false)]);
    let a = hub.helm("prod", "a", pa);
    let b = hub.helm("prod", "b", pb);
    let issued = hub.step();
    assert_eq!(
        issued.len(),
        2,
        "a: {} / b: {}",
        hub.eval(&a).summary(),
        hub.eval(&b).summary()
    );
    for p in issued {
        hub.succeed(&p);
    }
    assert!(hub.step().is_empty());

    // A longer cycle: x -> y -> z -> x.
    let mut hub = Hub::new();
    hub.env("prod");
    let (px, py, pz) = ("com.example:x", "com.example:y", "com.example:z");
    for p in [px, py, pz] {
        hub.product(p);
    }
    hub.publish(px, "1.0.0", &[(py, "1.0.0", "1.x.x", false)]);
    hub.publish(py, "1.0.0", &[(pz, "1.0.0", "1.x.x", false)]);
    hub.publish(pz, "1.0.0", &[(px, "1.0.0", "1.x.x", false)]);
    for (n, p) in [("x", px), ("y", py), ("z", pz)] {
        hub.helm("prod", n, p);
    }
    assert_eq!(hub.step().len(), 3);

    // An optional dependency on a product whose entity is not installed yet: no waiting.
    let (mut hub, db, app) = app_db_hub(true);
    let issued = hub.step_entities(&[app.clone(), db.clone()]);
    assert_eq!(issued.len(), 2, "{}", hub.eval(&app).summary());

    // A non-circular, non-optional dependency still orders (a waits for b; b does not need a).
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product(pa);
    hub.product(pb);
    hub.publish(pa, "1.0.0", &[(pb, "1.0.0", "1.x.x", false)]);
    hub.publish(pb, "1.0.0", &[]);
    let a = hub.helm("prod", "a", pa);
    let b = hub.helm("prod", "b", pb);
    let issued = hub.step();
    assert_eq!(issued.len(), 1);
    assert_eq!(hub.plan(&issued[0]).entity, b);
    assert!(hub.eval(&a).is_blocked());
}

// ---------------------------------------------------------------------------------------------
// C8 — suppression windows
// ---------------------------------------------------------------------------------------------

// SPEC C8; seed 000: "유지보수 시간대보다 우선합니다".
#[test]
fn c8_suppressions_take_precedence_over_open_windows() {
    // scope of the suppression | window open | window override | expected blocking
    for (scope_env, window_open, override_active) in [
        (false, true, false),
        (true, true, false),
        (false, true, true),
        (true, false, true),
        (false, false, false),
    ] {
        let (mut hub, w) = web_hub(&["1.0.0"], None);
        let other = hub.helm("prod", "other", WEB);
        env_window(
            &mut hub,
            "prod",
            if window_open { MONDAY_NIGHT } else { WEEKEND },
        );
        if override_active {
            hub.ok(Command::AddWindowOverride {
                scope: Scope::Entity(w.clone()),
                start_ms: T0,
                end_ms: T0 + DAY,
                reason: "go".into(),
                actor: "alice".into(),
            });
        }
        let scope = if scope_env {
            Scope::Environment("prod".into())
        } else {
            Scope::Entity(w.clone())
        };
        let end = T0 + 2 * HOUR;
        hub.suppress(scope, end);
        let e = hub.eval(&w);
        let row = format!("env={scope_env} open={window_open} override={override_active}");
        let s = constraint(&e, ConstraintKind::Suppression);
        assert!(!s.passed, "{row}");
        assert_eq!(s.may_clear_at_ms, Some(end), "{row}");
        assert!(
            s.reason.to_string().contains("manual")
                && s.reason.to_string().contains("until 2026-11-30T02:00:00Z"),
            "{row}: {s:?}"
        );
        let window_passes = window_open || override_active;
        assert_eq!(
            constraint(&e, ConstraintKind::MaintenanceWindow).passed,
            window_passes,
            "{row}"
        );
        let clear = if window_passes {
            Some(end)
        } else {
            Some(SATURDAY)
        };
        assert_eq!(
            e.outcome,
            Outcome::Blocked {
                may_clear_at_ms: clear
            },
            "{row}"
        );
        // Only the scope is suppressed.
        assert_eq!(
            hub.eval(&other).is_blocked(),
            scope_env || !window_open,
            "{row}"
        );
    }
    // A suppression that starts later does not block now.
    let (mut hub, w) = web_hub(&["1.0.0"], None);
    hub.ok(Command::CreateSuppression {
        scope: Scope::Entity(w.clone()),
        start_ms: Some(T0 + HOUR),
        end_ms: T0 + 2 * HOUR,
        reason: "later".into(),
        cancel_active_plans: false,
        actor: "alice".into(),
    });
    assert_eq!(hub.eval(&w).outcome, Outcome::Issue);
    assert!(hub.eval_at(&w, T0 + HOUR).is_blocked());
    assert_eq!(hub.eval_at(&w, T0 + 2 * HOUR).outcome, Outcome::Issue);
}

// ---------------------------------------------------------------------------------------------
// C9 — missing artifacts
// ---------------------------------------------------------------------------------------------

// SPEC C9; seed 000 "산출물 누락 제약": Available, Unavailable, Unchecked, not checked yet.
#[test]
fn c9_artifact_availability_table() {
    let loc = http("web/web-1.0.0.tgz");
    // registry url | hub access | observed | passes | reason fragment | locations listed
    type Row = (
        Option<&'static str>,
        &'static str,
        Option<Availability>,
        bool,
        &'static str,
        bool,
    );
    let rows: Vec<Row> = vec![
        (
            Some("http://127.0.0.1:9/reg"),
            "expected",
            Some(Availability::Available),
            true,
            "1 available",
            true,
        ),
        (
            Some("http://127.0.0.1:9/reg"),
            "expected",
            Some(Availability::Unavailable {
                reason: "HTTP 404".into(),
            }),
            false,
            "web/web-1.0.0.tgz unavailable: HTTP 404",
            true,
        ),
        (
            Some("http://127.0.0.1:9/reg"),
            "expected",
            Some(Availability::Unavailable {
                reason: "connection refused".into(),
            }),
            false,
            "connection refused",
            true,
        ),
        (
            Some("http://127.0.0.1:9/reg"),
            "expected",
            None,
            false,
            "availability not checked yet: web/web-1.0.0.tgz",
            true,
        ),
        (
            Some("http://127.0.0.1:9/reg"),
            "not-expected",
            None,
            true,
            "registry reg is hub-access: not-expected",
            false,
        ),
        (None, "expected", None, true, "no registry matches", false),
    ];
    for (i, (url, access, observed, passes, fragment, listed)) in rows.into_iter().enumerate() {
        let (mut hub, w) = web_hub(&["1.0.0"], None);
        if let Some(url) = url {
            registry(&mut hub, "prod", "reg", url, access);
        }
        if let Some(a) = observed {
            hub.artifacts.insert(loc.clone(), a);
        }
        let e = hub.eval(&w);
        let c = constraint(&e, ConstraintKind::Artifacts);
        assert_eq!(c.passed, passes, "row {i}: {c:?}");
        assert!(c.reason.to_string().contains(fragment), "row {i}: {c:?}");
        assert_eq!(e.artifact_locations.contains(&loc), listed, "row {i}");
        assert_eq!(hub.step().len(), usize::from(passes), "row {i}");
    }
}

// SPEC C9: absolute artifact URIs match the registry by prefix; file registries give paths.
#[test]
fn c9_registry_matching() {
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product(WEB);
    let abs = format!(
        "product-group: com.example\nproduct-name: web\nproduct-version: 1.0.0\nartifacts:\n  - uri: https://other.example.com/web.tgz\n    sha256: {SHA}\n  - uri: file:///tmp/reg/web/extra.tgz\n    sha256: {SHA}\n"
    );
    hub.ok(Command::PublishRelease { manifest: abs });
    let w = hub.helm("prod", "web", WEB);
    registry(&mut hub, "prod", "files", "file:///tmp/reg", "expected");
    let e = hub.eval(&w);
    assert_eq!(
        e.artifact_locations,
        [ArtifactLocation::File("/tmp/reg/web/extra.tgz".into())]
    );
    let c = constraint(&e, ConstraintKind::Artifacts);
    assert!(
        !c.passed
            && c.reason
                .to_string()
                .contains("not checked yet: file:///tmp/reg/web/extra.tgz"),
        "{c:?}"
    );
    hub.artifacts.insert(
        ArtifactLocation::File("/tmp/reg/web/extra.tgz".into()),
        Availability::Available,
    );
    let e = hub.eval(&w);
    let c = constraint(&e, ConstraintKind::Artifacts);
    assert!(c.passed, "{c:?}");
    assert!(
        c.reason.to_string().starts_with(
            "1 available, 1 unchecked (https://other.example.com/web.tgz: no registry matches"
        ),
        "{c:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// C10 — health
// ---------------------------------------------------------------------------------------------

// SPEC C10: an entity in error is not upgraded by ordinary plans; rollback still applies.
#[test]
fn c10_an_entity_in_error_is_not_upgraded_but_is_rolled_back() {
    // Healthy once, then in error (issue 55: an entity never healthy on any version is not
    // held the same way; engine/tests/never_healthy.rs).
    let (mut hub, w) = web_hub(&["1.0.0", "1.1.0"], Some("1.0.0"));
    hub.report(&w, Some("1.0.0"), Health::Error);
    let e = hub.eval(&w);
    assert_eq!(kind(&e), PlanKind::VersionChange);
    assert_eq!(blocking(&e), [ConstraintKind::Health]);
    assert!(constraint(&e, ConstraintKind::Health)
        .reason
        .to_string()
        .contains("crash loop"));
    assert_eq!(
        e.outcome,
        Outcome::Blocked {
            may_clear_at_ms: None
        }
    );
    assert!(hub.step().is_empty());
    hub.report(&w, Some("1.0.0"), Health::Healthy);
    let up = hub.step_one(&w).unwrap();
    hub.fail(&up.id, "readiness");
    hub.report(&w, Some("1.1.0"), Health::Error);
    let e = hub.eval(&w);
    assert!(matches!(kind(&e), PlanKind::Rollback { .. }));
    assert_eq!(e.outcome, Outcome::Issue);
    let rb = hub.step_one(&w).unwrap();
    assert_eq!(rb.to_version, Some(v("1.0.0")));
}

// ---------------------------------------------------------------------------------------------
// S3 — bad input changes nothing and names the field
// ---------------------------------------------------------------------------------------------

// SPEC S3 (with P4, C3, C7 inputs).
#[test]
fn bad_input_is_refused_naming_the_field_and_changes_nothing() {
    let (mut hub, w) = web_hub(&["1.0.0"], Some("1.0.0"));
    let bad_window = |spec: &str, tz: &str| hub_engine::command::WindowSpec {
        spec: spec.into(),
        time_zone: tz.into(),
    };
    let dep_manifest = |min: &str| {
        format!(
            "product-group: com.example\nproduct-name: web\nproduct-version: 3.0.0\nextensions:\n  product-dependencies:\n    - {{product-group: com.example, product-name: db, minimum-version: {min}, maximum-version: 1.x.x}}\n"
        )
    };
    let cases: Vec<(Command, &str)> =
        vec![
            (
                Command::PublishRelease {
                    manifest: manifest(WEB, "1.2", &[]),
                },
                "product-version",
            ),
            (
                Command::PublishRelease {
                    manifest: manifest(WEB, "v1.2.0", &[]),
                },
                "product-version",
            ),
            (
                Command::PublishRelease {
                    manifest: manifest("com.example:nope", "1.0.0", &[]),
                },
                "product",
            ),
            (
                Command::PublishRelease {
                    manifest: manifest(WEB, "1.3.0", &[]) + "colour: red\n",
                },
                "colour",
            ),
            (
                Command::PublishRelease {
                    manifest: dep_manifest("1.y.0"),
                },
                "minimum-version",
            ),
            (
                Command::PublishRelease {
                    manifest: dep_manifest("2.0.0"),
                },
                "minimum-version",
            ),
            (
                Command::PublishRelease {
                    manifest: "product-group: [".into(),
                },
                "manifest",
            ),
            (
                Command::CreateEntity {
                    environment: "prod".into(),
                    kind: hub_engine::EntityKind::HelmChart,
                    name: "web9".into(),
                    product_id: WEB.into(),
                    k8s_namespace: Some("web".into()),
                    account_id: None,
                    release_channel: Some("NIGHTLY".into()),
                },
                "release_channel",
            ),
            (
                Command::SetEntitySettings {
                    entity: w.clone(),
                    patch: EntitySettingsPatch {
                        release_channel: Some("NIGHTLY".into()),
                        ..Default::default()
                    },
                },
                "release_channel",
            ),
            (
                Command::SetEnvironmentSettings {
                    environment: "prod".into(),
                    patch: EnvironmentSettingsPatch {
                        maintenance_window: Some(hub_engine::command::WindowChange::Set(
                            bad_window("MONDAY/25:00-TUESDAY/06:00", "UTC"),
                        )),
                        ..Default::default()
                    },
                },
                "maintenance_window",
            ),
            (
                Command::SetEnvironmentSettings {
                    environment: "prod".into(),
                    patch: EnvironmentSettingsPatch {
                        maintenance_window: Some(hub_engine::command::WindowChange::Set(
                            bad_window("MONDAY/22:00-TUESDAY/06:00", "Mars/Olympus"),
                        )),
                        ..Default::default()
                    },
                },
                "Mars/Olympus",
            ),
            (
                Command::SetEntitySettings {
                    entity: w.clone(),
                    patch: EntitySettingsPatch {
                        maintenance_window: Some(hub_engine::command::WindowChange::Set(
                            bad_window("FUNDAY/01:00-MONDAY/02:00", "UTC"),
                        )),
                        ..Default::default()
                    },
                },
                "maintenance_window",
            ),
            (
                Command::SetProductWindow {
                    product_id: WEB.into(),
                    window: Some(bad_window("MONDAY/22:00-TUESDAY/06:00", "Europe/Atlantis")),
                },
                "window",
            ),
            (
                Command::RecallReleases {
                    product_id: WEB.into(),
                    from: "one".into(),
                    to: "1.0.0".into(),
                    reason: "x".into(),
                },
                "from",
            ),
            (
                Command::RecallReleases {
                    product_id: "com.example:nope".into(),
                    from: "1.0.0".into(),
                    to: "1.0.0".into(),
                    reason: "x".into(),
                },
                "product",
            ),
            (
                Command::SetConfigOverrides {
                    entity: w.clone(),
                    version: "latest".into(),
                    config: Some("a: 1".into()),
                },
                "version",
            ),
            (
                Command::SetConfigOverrides {
                    entity: w.clone(),
                    version: "1.0.0".into(),
                    config: Some("- a\n- b".into()),
                },
                "config",
            ),
            (
                Command::SetRegistry {
                    environment: "prod".into(),
                    name: "reg".into(),
                    url: "ftp://x/y".into(),
                    hub_access: "expected".into(),
                    ca_pem: None,
                    insecure_skip_verify: false,
                },
                "url",
            ),
            (
                Command::SetRegistry {
                    environment: "prod".into(),
                    name: "reg".into(),
                    url: "http://x/y".into(),
                    hub_access: "sometimes".into(),
                    ca_pem: None,
                    insecure_skip_verify: false,
                },
                "hub_access",
            ),
            (
                // A CA file that holds no certificate.
                Command::SetRegistry {
                    environment: "prod".into(),
                    name: "reg".into(),
                    url: "https://x/y".into(),
                    hub_access: "expected".into(),
                    ca_pem: Some("not a certificate".into()),
                    insecure_skip_verify: false,
                },
                "ca_pem",
            ),
            (
                // Skipping verification means nothing for plain http.
                Command::SetRegistry {
                    environment: "prod".into(),
                    name: "reg".into(),
                    url: "http://x/y".into(),
                    hub_access: "expected".into(),
                    ca_pem: None,
                    insecure_skip_verify: true,
                },
                "insecure_skip_verify",
            ),
            (
                Command::SetEntitySettings {
                    entity: w.clone(),
                    patch: EntitySettingsPatch {
                        ignored_dependencies: Some(vec!["not a product".into()]),
                        ..Default::default()
                    },
                },
                "ignored_dependencies",
            ),
            (
                Command::CreateSuppression {
                    scope: Scope::Entity(w.clone()),
                    start_ms: None,
                    end_ms: T0 - 1,
                    reason: "x".into(),
                    cancel_active_plans: false,
                    actor: "a".into(),
                },
                "end",
            ),
            (
                Command::CreateSuppression {
                    scope: Scope::Entity("eid:prod:helmChart:ghost".into()),
                    start_ms: None,
                    end_ms: T0 + 1,
                    reason: "x".into(),
                    cancel_active_plans: false,
                    actor: "a".into(),
                },
                "ghost",
            ),
            (
                Command::ReportEntityStates {
                    environment: "prod".into(),
                    states: vec![hub_engine::command::EntityReport {
                        entity: "eid:staging:helmChart:web".into(),
                        version: None,
                        health: Health::Healthy,
                        config_sha256: None,
                        secrets_revision: None,
                        message: String::new(),
                    }],
                },
                "states[0].entity",
            ),
            (
                Command::CancelPlans {
                    target: CancelTarget::Plan("p-999-0".into()),
                    reason: "x".into(),
                    suppress_for_ms: None,
                    actor: "a".into(),
                },
                "p-999-0",
            ),
            (
                Command::CancelPlans {
                    target: CancelTarget::Entity(w.clone()),
                    reason: "x".into(),
                    suppress_for_ms: Some(1),
                    actor: "a".into(),
                },
                "suppress_for",
            ),
            (
                Command::AddWindowOverride {
                    scope: Scope::Entity(w.clone()),
                    start_ms: T0,
                    end_ms: T0 + HOUR,
                    reason: "".into(),
                    actor: "a".into(),
                },
                "reason",
            ),
        ];
    let digest = hub.state.digest();
    for (cmd, field) in cases {
        let kind = cmd.kind();
        let e = hub.err(cmd);
        assert!(
            e.to_string().contains(field),
            "{kind}: {e:?} does not name {field:?}"
        );
    }
    assert_eq!(hub.state.digest(), digest);
}

// SPEC R2: the whole log of a scenario replays to the same digest.
#[test]
fn replaying_a_scenario_log_gives_the_same_state() {
    let (mut hub, w) = web_hub(&["1.0.0", "2.0.0"], Some("1.0.0"));
    let up = hub.step_one(&w).unwrap();
    hub.fail(&up.id, "start");
    hub.report(&w, Some("2.0.0"), Health::Error);
    let rb = hub.step_one(&w).unwrap();
    hub.succeed(&rb.id);
    hub.advance(2 * HOUR);
    hub.ok(Command::ExpireSuppressions);
    hub.converge(&w);
    assert_eq!(hub.replay_digest(), hub.state.digest());
}

// SPEC P6, R4: a batch of task reports applies each report on its own; a refused one is
// skipped and named, and the whole batch applied again changes nothing.
#[test]
fn batched_task_reports_apply_each_once() {
    let (mut hub, w) = web_hub(&["1.0.0", "1.1.0"], Some("1.0.0"));
    let plan = hub.step_one(&w).expect("an upgrade");
    let mut reports: Vec<hub_engine::plan::TaskReport> = plan
        .kind
        .task_names()
        .iter()
        .flat_map(|t| {
            [TaskState::Running, TaskState::Succeeded].map(|state| hub_engine::plan::TaskReport {
                plan_id: plan.id.clone(),
                task: t.to_string(),
                attempt: 1,
                state,
                output: format!("{t} {}\n", state.as_str()),
                failure: None,
            })
        })
        .collect();
    reports.insert(
        3,
        hub_engine::plan::TaskReport {
            plan_id: "p-no-such".into(),
            task: "fetch".into(),
            attempt: 1,
            state: TaskState::Running,
            output: String::new(),
            failure: None,
        },
    );
    let batch = Command::ReportTasks {
        environment: "prod".into(),
        reports,
    };
    let out = hub.ok(batch.clone());
    assert!(
        out.summary()
            .starts_with("10 reports applied; 1 refused: p-no-such fetch"),
        "{}",
        out.summary()
    );
    let done = hub.plan(&plan.id);
    assert_eq!(done.status, PlanStatus::Succeeded);
    assert_eq!(done.output.matches("fetch succeeded").count(), 1);
    let digest = hub.state.digest();
    let again = hub.apply(batch);
    assert!(again.result.is_ok());
    assert!(again.changed.is_empty(), "{:?}", again.changed);
    assert_eq!(hub.state.digest(), digest);
    // Another environment's batch is refused as a whole.
    hub.env("staging");
    let err = hub
        .apply(Command::ReportTasks {
            environment: "nowhere".into(),
            reports: vec![],
        })
        .result
        .unwrap_err();
    assert!(err.to_string().contains("nowhere"), "{err}");
}

// SPEC P8/P9: one agent's batch can fail several plans in one entry; each failed plan's
// entity gets its own automatic suppression (ids derived from the entry's index must not
// collide), and the threshold counts them all.
#[test]
fn p8_two_plans_failed_in_one_entry_suppress_both_entities() {
    let (mut hub, w1) = web_hub(&["1.0.0", "1.1.0"], Some("1.0.0"));
    hub.env_settings(
        "prod",
        EnvironmentSettingsPatch {
            autosuppression_threshold: Some(1),
            auto_suppression_ms: Some(HOUR),
            ..Default::default()
        },
    );
    let w2 = hub.helm("prod", "web2", WEB);
    hub.installed(&w2, "1.0.0");
    assert_eq!(hub.step().len(), 2);
    let (p1, p2) = (hub.active(&w1).unwrap().id, hub.active(&w2).unwrap().id);
    let failed = |plan_id: &str| hub_engine::plan::TaskReport {
        plan_id: plan_id.into(),
        task: "fetch".into(),
        attempt: 1,
        state: TaskState::Failed,
        output: "fetch failed\n".into(),
        failure: Some(hub_engine::plan::FailureMetadata {
            stage: "fetch".into(),
            message: "fetch went wrong".into(),
            not_ready: Vec::new(),
            validation_errors: Vec::new(),
        }),
    };
    hub.ok(Command::ReportTasks {
        environment: "prod".into(),
        reports: vec![failed(&p1), failed(&p2)],
    });
    for (entity, plan) in [(&w1, &p1), (&w2, &p2)] {
        assert_eq!(hub.plan(plan).status, PlanStatus::Failed);
        let sups: Vec<_> = hub
            .state
            .suppressions_in(&Scope::Entity(entity.clone()))
            .cloned()
            .collect();
        assert_eq!(sups.len(), 1, "{entity}: {sups:?}");
        assert_eq!(
            sups[0].source,
            SuppressionSource::FailedPlan {
                plan_id: plan.clone()
            }
        );
    }
    assert_eq!(hub.state.autosuppressed_count("prod", hub.now), 2);
    let env: Vec<_> = hub
        .state
        .suppressions_in(&Scope::Environment("prod".into()))
        .cloned()
        .collect();
    assert_eq!(
        env.len(),
        1,
        "2 auto-suppressed entities exceed threshold 1"
    );
    assert_eq!(hub.state.suppressions().count(), 3);
}

// SPEC C10 with P4: an agent's state sample taken before a plan ended, applied after the
// hub recorded that end, must not undo it (the entity would look behind and be planned
// again); a sample that reflects the plan, or says nothing of what it reflects, applies.
#[test]
fn c10_a_state_sample_older_than_a_recorded_plan_end_is_skipped() {
    use hub_engine::command::{EntityReport, SampledEntityReport};
    let (mut hub, w) = web_hub(&["1.0.0", "1.1.0"], Some("1.0.0"));
    let plan = hub.step_one(&w).expect("an upgrade");
    assert_eq!(plan.to_version, Some(v("1.1.0")));
    let sample =
        |version: &str, health: Health, reflects_through: Option<u64>| SampledEntityReport {
            report: EntityReport {
                entity: w.clone(),
                version: Some(v(version)),
                health,
                config_sha256: None,
                secrets_revision: None,
                message: String::new(),
            },
            reflects_through,
        };
    let report = |states: Vec<SampledEntityReport>| Command::ReportSampledEntityStates {
        environment: "prod".into(),
        states,
    };
    // Sampled (1.0.0, from before the plan) while the plan was listed and not finished.
    let stale = sample("1.0.0", Health::Healthy, Some(plan.issued_index - 1));
    hub.succeed(&plan.id);
    let recorded = hub.state.entity(&w).expect("entity").reported.clone();
    assert_eq!(recorded.version, Some(v("1.1.0")));
    let out = hub.ok(report(vec![stale.clone()]));
    assert!(
        out.summary()
            .contains("1 samples older than a recorded plan end skipped"),
        "{}",
        out.summary()
    );
    assert_eq!(
        hub.state.entity(&w).expect("entity").reported,
        recorded,
        "the stale sample changed nothing"
    );
    assert!(hub.step_one(&w).is_none(), "no second plan for 1.1.0");
    // A sample that reflects the plan applies (the entity turned unhealthy after it).
    hub.ok(report(vec![sample(
        "1.1.0",
        Health::Error,
        Some(plan.issued_index),
    )]));
    assert_eq!(
        hub.state.entity(&w).expect("entity").reported.health,
        Health::Error
    );
    // One that does not say what it reflects applies as a plain report does.
    hub.ok(report(vec![sample("1.1.0", Health::Healthy, None)]));
    assert_eq!(
        hub.state.entity(&w).expect("entity").reported.health,
        Health::Healthy
    );
    // A sample of another environment's entity is refused as a whole, stale or not.
    let mut foreign = stale;
    foreign.report.entity = "eid:nope".into();
    let err = hub.apply(report(vec![foreign])).result.unwrap_err();
    assert!(err.to_string().contains("states[0].entity"), "{err}");
}

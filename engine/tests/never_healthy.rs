//! Issue 55, item 4: an entity that has never been healthy on any version is not held by the
//! health constraint (SPEC C10) once its config, a secret or its release changed since the
//! attempt that failed; a once-healthy entity in error still is. Every scenario runs through
//! the [`Hub`] harness (a twin state, persistence of the changed keys) and is replayed from
//! its log at the end.

mod common;

use common::*;
use hub_engine::command::EntityReport;
use hub_engine::entity::{config_sha256, Health};
use hub_engine::evaluate::{ConstraintKind, ConstraintResult, Evaluation, Outcome};
use hub_engine::plan::PlanKind;
use hub_engine::settings::DEFAULT_AUTO_SUPPRESSION_MS;
use hub_engine::{Command, Record};

const WEB: &str = "com.example:web";

fn health(e: &Evaluation) -> &ConstraintResult {
    e.constraints
        .iter()
        .find(|c| c.constraint == ConstraintKind::Health)
        .unwrap_or_else(|| panic!("no health constraint: {}", e.summary()))
}

fn set_config(hub: &mut Hub, entity: &str, version: &str, text: &str) {
    hub.ok(Command::SetConfigOverrides {
        entity: entity.into(),
        version: version.into(),
        config: Some(text.into()),
    });
}

/// `prod` with product web at `releases` and a new entity `web` whose config for 1.0.0 is
/// broken; its first install is issued and fails at `configure`; then the automatic
/// suppression of the failure ends.
fn failed_first_install(releases: &[&str]) -> (Hub, String, String) {
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product(WEB);
    for r in releases {
        hub.publish(WEB, r, &[]);
    }
    let w = hub.helm("prod", "web", WEB);
    set_config(&mut hub, &w, "1.0.0", "port: not-a-port\n");
    assert!(hub.state.never_healthy(&w).is_some(), "a new entity");
    let install = hub.step_one(&w).expect("the first install");
    assert_eq!(install.kind, PlanKind::Install);
    hub.fail(&install.id, "configure");
    assert_eq!(
        hub.state.entity(&w).unwrap().reported.health,
        Health::Error,
        "a failed configure stage leaves the entity in error"
    );
    hub.advance(DEFAULT_AUTO_SUPPRESSION_MS + MINUTE);
    (hub, w, install.id)
}

// (a) The configure stage of the first install failed and the agent reports the release in
// error with the config it applied. Fixing the config issues a config change.
#[test]
fn a_failed_first_install_is_retried_once_the_config_is_fixed() {
    let (mut hub, w, failed) = failed_first_install(&["1.0.0"]);
    hub.ok(Command::ReportEntityStates {
        environment: "prod".into(),
        states: vec![EntityReport {
            entity: w.clone(),
            version: Some(v("1.0.0")),
            health: Health::Error,
            config_sha256: Some(config_sha256("port: not-a-port\n")),
            secrets_revision: None,
            message: "invalid port".into(),
        }],
    });
    // Nothing changed since the failure: nothing to do, and no retry by itself.
    assert!(hub.step().is_empty());

    set_config(&mut hub, &w, "1.0.0", "port: 8080\n");
    let e = hub.eval(&w);
    assert_eq!(e.outcome, Outcome::Issue, "{}", e.summary());
    assert!(health(&e).passed);
    let why = health(&e).reason.to_string();
    assert!(why.contains("never healthy on any version"), "{why}");
    assert!(why.contains("retrying with changed config"), "{why}");
    assert!(why.contains("invalid port"), "{why}");

    let retry = hub.step_one(&w).expect("the retry is issued");
    assert_eq!(retry.kind, PlanKind::ConfigChange);
    assert_eq!(retry.to_config.as_deref(), Some("port: 8080\n"));
    assert_ne!(retry.id, failed);
    hub.succeed(&retry.id);
    assert!(
        hub.state.never_healthy(&w).is_none(),
        "healthy on 1.0.0 now: the row is gone for good"
    );
    assert_eq!(hub.replay_digest(), hub.state.digest());
}

// (b) The first install failed before anything ran (the agent reports nothing installed);
// the same install is held, a new release is installed.
#[test]
fn a_failed_first_install_is_retried_with_a_new_release() {
    let (mut hub, w, failed) = failed_first_install(&["1.0.0"]);
    hub.report(&w, None, Health::Error);
    let e = hub.eval(&w);
    assert_eq!(
        e.outcome,
        Outcome::Blocked {
            may_clear_at_ms: None
        },
        "the failed attempt is not repeated by itself: {}",
        e.summary()
    );
    let why = health(&e).reason.to_string();
    assert!(
        why.contains(&format!("plan {failed} failed with 1.0.0")),
        "{why}"
    );
    assert!(why.contains("publish a new release"), "{why}");
    assert!(hub.step().is_empty());

    hub.publish(WEB, "1.1.0", &[]);
    let e = hub.eval(&w);
    assert_eq!(e.outcome, Outcome::Issue, "{}", e.summary());
    let why = health(&e).reason.to_string();
    assert!(
        why.contains("retrying with a new release (the attempt with 1.0.0 failed)"),
        "{why}"
    );
    let retry = hub.step_one(&w).expect("the install of 1.1.0");
    assert_eq!(retry.kind, PlanKind::Install);
    assert_eq!(retry.to_version, Some(v("1.1.0")));

    // It fails too: 1.1.0 with that config is now the attempt not to repeat.
    hub.fail(&retry.id, "readiness");
    hub.advance(DEFAULT_AUTO_SUPPRESSION_MS + MINUTE);
    let e = hub.eval(&w);
    assert!(!health(&e).passed, "{}", e.summary());
    assert!(health(&e)
        .reason
        .to_string()
        .contains(&format!("plan {} failed with 1.1.0", retry.id)));
    assert_eq!(hub.replay_digest(), hub.state.digest());
}

// (c) The current rule: an entity that was healthy once and is in error after a failed
// upgrade (and a failed rollback) is held, whatever changes.
#[test]
fn a_failed_upgrade_of_a_once_healthy_entity_is_still_held() {
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product(WEB);
    hub.publish(WEB, "1.0.0", &[]);
    let w = hub.helm("prod", "web", WEB);
    hub.converge(&w);
    assert!(hub.state.never_healthy(&w).is_none(), "healthy on 1.0.0");

    hub.publish(WEB, "1.1.0", &[]);
    let up = hub.step_one(&w).expect("the upgrade");
    assert_eq!(up.kind, PlanKind::VersionChange);
    hub.fail(&up.id, "configure");
    let rollback = hub.step_one(&w).expect("the rollback passes health");
    assert!(matches!(rollback.kind, PlanKind::Rollback { .. }));
    hub.fail(&rollback.id, "readiness");
    hub.advance(DEFAULT_AUTO_SUPPRESSION_MS + MINUTE);

    set_config(&mut hub, &w, "1.1.0", "port: 8080\n");
    hub.publish(WEB, "1.2.0", &[]);
    let e = hub.eval(&w);
    assert_eq!(
        e.outcome,
        Outcome::Blocked {
            may_clear_at_ms: None
        },
        "{}",
        e.summary()
    );
    let blocking: Vec<_> = e.blocking().map(|c| c.constraint).collect();
    assert_eq!(blocking, [ConstraintKind::Health]);
    let why = health(&e).reason.to_string();
    assert!(why.starts_with("entity reported in error:"), "{why}");
    assert!(!why.contains("never healthy"), "{why}");
    assert!(hub.step().is_empty());
    assert_eq!(hub.replay_digest(), hub.state.digest());
}

// An entity that was created before the never-healthy record existed has no row: loaded
// from such a state, it keeps the rule it had (held while in error), never a looser one.
#[test]
fn an_entity_without_a_row_keeps_the_rule_it_had() {
    let (mut hub, w, _) = failed_first_install(&["1.0.0"]);
    hub.publish(WEB, "1.1.0", &[]);
    assert_eq!(hub.eval(&w).outcome, Outcome::Issue);
    let old: Vec<Record> = hub
        .stored_records()
        .filter(|r| !matches!(r, Record::NeverHealthy(_)))
        .cloned()
        .collect();
    hub.load_records(old);
    let e = hub.eval(&w);
    assert!(!health(&e).passed, "{}", e.summary());
    assert!(health(&e)
        .reason
        .to_string()
        .starts_with("entity reported in error:"));
}

// An entity reported in error by the agent before any plan of the hub ran is not held (no
// attempt failed); once it is healthy on a version, an error holds it again.
#[test]
fn an_error_before_any_attempt_is_not_held_and_health_ends_the_exception() {
    let mut hub = Hub::new();
    hub.env("prod");
    hub.product(WEB);
    hub.publish(WEB, "1.0.0", &[]);
    hub.publish(WEB, "1.1.0", &[]);
    let w = hub.helm("prod", "web", WEB);
    hub.report(&w, Some("1.0.0"), Health::Error);
    let e = hub.eval(&w);
    assert_eq!(e.outcome, Outcome::Issue, "{}", e.summary());
    assert!(health(&e)
        .reason
        .to_string()
        .contains("no attempt of the hub failed"));
    // Healthy on a version (an agent's report, not only a plan) ends it for good.
    hub.report(&w, Some("1.0.0"), Health::Healthy);
    assert!(hub.state.never_healthy(&w).is_none());
    hub.report(&w, Some("1.0.0"), Health::Error);
    let e = hub.eval(&w);
    assert!(!health(&e).passed, "{}", e.summary());
    // Reported healthy without a version does not count.
    let x = hub.helm("prod", "x", WEB);
    hub.report(&x, None, Health::Healthy);
    assert!(hub.state.never_healthy(&x).is_some());
    assert_eq!(hub.replay_digest(), hub.state.digest());
}

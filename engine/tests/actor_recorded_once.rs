//! The actor of a write is recorded once (issue 54 item 3). A node wraps a verified caller's
//! command in `Command::As`; from feature level 2 on that wrapper is the only record: the
//! command's own `actor` field is left empty and apply names the wrapper's identity. Below
//! level 2 the node stamps the field with the same identity, as the first release did, and
//! apply reads the field, so entries of either level give the same state on every binary.

mod common;

use common::actors::{bind, operator};
use common::{Hub, DAY, T0};
use hub_engine::access::Role;
use hub_engine::feature_level::{BASELINE_LEVEL, LEVEL_2};
use hub_engine::suppression::Scope;
use hub_engine::Command;

/// A hub with environment `prod`, admin `root` and environment operator `alice` on `prod`.
fn hub() -> Hub {
    let mut h = Hub::new();
    bind(&mut h, "root", Role::Admin, &[]);
    h.ok(Command::As {
        actor: operator("root"),
        command: Box::new(Command::CreateEnvironment {
            name: "prod".into(),
            description: String::new(),
        }),
    });
    bind(&mut h, "alice", Role::EnvironmentOperator, &["prod"]);
    h
}

/// A suppression of `prod` whose actor field says `field`.
fn suppression(field: &str) -> Command {
    Command::CreateSuppression {
        scope: Scope::Environment("prod".into()),
        start_ms: None,
        end_ms: T0 + DAY,
        reason: "freeze".into(),
        cancel_active_plans: false,
        actor: field.into(),
    }
}

/// The actor of the newest audit row.
fn last_audited_actor(h: &Hub) -> String {
    h.state
        .audit()
        .next_back()
        .expect("an audit row")
        .actor
        .clone()
}

/// The actor field of the command inside an `As` entry.
fn field_inside(entry: &Command) -> String {
    let Command::As { command, .. } = entry else {
        panic!("not an As entry: {entry:?}");
    };
    let Command::CreateSuppression { actor, .. } = command.as_ref() else {
        panic!("not a suppression: {command:?}");
    };
    actor.clone()
}

#[test]
fn at_level_2_the_wrapper_is_the_only_record_of_the_actor() {
    let mut h = hub();
    h.ok(Command::SetClusterLevel { level: LEVEL_2 });
    // Whatever the client wrote in the field, the node leaves it empty.
    let entry = suppression("operator/mallory").as_verified(&operator("alice"), LEVEL_2);
    assert_eq!(field_inside(&entry), "");
    h.ok(entry);
    assert_eq!(last_audited_actor(&h), "operator/alice");
}

#[test]
fn at_level_2_a_field_left_in_a_wrapped_entry_is_not_believed() {
    let mut h = hub();
    h.ok(Command::SetClusterLevel { level: LEVEL_2 });
    h.ok(Command::As {
        actor: operator("alice"),
        command: Box::new(suppression("operator/mallory")),
    });
    assert_eq!(last_audited_actor(&h), "operator/alice");
}

#[test]
fn below_level_2_the_node_stamps_the_field_and_apply_reads_it() {
    let mut h = hub();
    let entry = suppression("operator/mallory").as_verified(&operator("alice"), BASELINE_LEVEL);
    // What a first-release binary reads: the field, stamped with the verified identity.
    assert_eq!(field_inside(&entry), "operator/alice");
    h.ok(entry);
    assert_eq!(last_audited_actor(&h), "operator/alice");
    // An entry of the first release applies as it did then (replay): the field is the record.
    h.ok(Command::As {
        actor: operator("alice"),
        command: Box::new(suppression("operator/alice-as-stamped")),
    });
    assert_eq!(last_audited_actor(&h), "operator/alice-as-stamped");
}

#[test]
fn without_a_wrapper_the_field_is_the_record_at_every_level() {
    // An insecure node identifies nobody: the field is what its client or dashboard wrote.
    let mut h = Hub::new();
    h.ok(Command::CreateEnvironment {
        name: "prod".into(),
        description: String::new(),
    });
    h.ok(Command::SetClusterLevel { level: LEVEL_2 });
    h.ok(suppression("dashboard"));
    assert_eq!(last_audited_actor(&h), "dashboard");
}

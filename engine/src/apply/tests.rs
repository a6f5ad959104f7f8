//! Apply as a whole: refusals change nothing, request ids, rebuilds from records, and seeded
//! random histories.

use super::*;
use crate::entity::EntityKind;
use crate::record::Record;
use crate::state::State;

fn req(command: Command, time_ms: TimestampMs) -> Request {
    Request {
        command,
        time_ms,
        request_id: None,
    }
}

fn create_env(name: &str) -> Command {
    Command::CreateEnvironment {
        name: name.into(),
        description: String::new(),
    }
}

fn create_helm(env: &str, name: &str) -> Command {
    Command::CreateEntity {
        environment: env.into(),
        kind: EntityKind::HelmChart,
        name: name.into(),
        product_id: "com.example:web".into(),
        k8s_namespace: Some("web".into()),
        account_id: None,
        release_channel: None,
    }
}

#[test]
fn creates_environments_and_entities() {
    let mut s = State::new();
    let a = s.apply(&req(create_env("prod"), 10), 1);
    assert_eq!(
        a.result,
        Ok(CommandOutput::EnvironmentCreated("prod".into()))
    );
    assert_eq!(
        a.changed,
        vec![
            RecordKey::Environment("prod".into()),
            RecordKey::EntryClock("log".into())
        ]
    );
    let a = s.apply(&req(create_helm("prod", "web"), 11), 2);
    assert_eq!(
        a.result,
        Ok(CommandOutput::EntityCreated(
            "eid:prod:helmChart:web".into()
        ))
    );
    let e = s.entities_of("prod").next().unwrap();
    assert_eq!(e.release_channel, "RELEASE");
    assert_eq!(e.created_at_ms, 11);
}

/// The domain records, without the entry clock (which every entry advances).
fn domain(s: &State) -> Vec<Record> {
    s.records()
        .filter(|r| !matches!(r, Record::EntryClock(_)))
        .collect()
}

#[test]
fn refused_commands_change_nothing() {
    // SPEC S3
    let mut s = State::new();
    s.apply(&req(create_env("prod"), 1), 1);
    let before = domain(&s);
    let digest = s.digest();
    for cmd in [
        create_env("prod"),
        create_env("Bad"),
        create_helm("nope", "web"),
        Command::DeleteEnvironment {
            name: "nope".into(),
        },
        Command::CreateEntity {
            environment: "prod".into(),
            kind: EntityKind::HelmChart,
            name: "web".into(),
            product_id: "com.example:web".into(),
            k8s_namespace: None,
            account_id: None,
            release_channel: None,
        },
    ] {
        let a = s.apply(&req(cmd, 2), 2);
        assert!(a.result.is_err());
        assert!(a.changed.is_empty());
    }
    assert_eq!(domain(&s), before);
    assert_eq!(s.digest(), digest);
}

#[test]
fn entry_times_never_go_backwards() {
    // A new leader whose clock is behind the last one's: its entries run at the last time.
    let mut s = State::new();
    s.apply(&req(create_env("prod"), 5_000), 1);
    s.apply(&req(create_helm("prod", "web"), 4_000), 2);
    let e = s.entities_of("prod").next().unwrap();
    assert_eq!(
        e.created_at_ms, 5_000,
        "the behind stamp ran at the last entry time"
    );
    let clock = s.entry_clock();
    assert_eq!(
        (clock.last_ms, clock.raised, clock.max_raise_ms),
        (5_000, 1, 1_000)
    );
    s.apply(&req(create_env("stage"), 6_000), 3);
    assert_eq!(s.entry_clock().last_ms, 6_000);
    // The clock survives a rebuild from the records (a restart, a snapshot).
    let rebuilt = State::from_records(s.records());
    assert_eq!(rebuilt.entry_clock(), s.entry_clock());
    assert_eq!(rebuilt.digest(), s.digest());
}

#[test]
fn duplicate_names_fail_with_the_name() {
    let mut s = State::new();
    s.apply(&req(create_env("prod"), 1), 1);
    let err = s.apply(&req(create_env("prod"), 1), 2).result.unwrap_err();
    assert_eq!(err.to_string(), "environment \"prod\" already exists");
    s.apply(&req(create_helm("prod", "web"), 1), 3);
    let err = s
        .apply(&req(create_helm("prod", "web"), 1), 4)
        .result
        .unwrap_err();
    assert!(err.to_string().contains("eid:prod:helmChart:web"), "{err}");
}

#[test]
fn an_environment_with_entities_is_not_deleted() {
    let mut s = State::new();
    s.apply(&req(create_env("prod"), 1), 1);
    s.apply(&req(create_helm("prod", "web"), 1), 2);
    let a = s.apply(
        &req(
            Command::DeleteEnvironment {
                name: "prod".into(),
            },
            1,
        ),
        3,
    );
    assert!(a.result.unwrap_err().to_string().contains("1 entities"));
    assert!(s.environment("prod").is_some());
}

#[test]
fn request_ids_apply_once_and_expire() {
    let mut s = State::new();
    let mut r = req(create_env("prod"), 1_000);
    r.request_id = Some("k1".into());
    let first = s.apply(&r, 1);
    assert!(first.result.is_ok());
    let again = s.apply(&r, 2);
    assert_eq!(again.result, first.result);
    assert!(again.changed.is_empty());
    // After the TTL the id is forgotten on the next apply.
    let later = s.apply(&req(create_env("dev"), 1_000 + REQUEST_TTL_MS + 1), 3);
    assert!(later.changed.contains(&RecordKey::Request("k1".into())));
    assert!(s.record(&RecordKey::Request("k1".into())).is_none());
}

#[test]
fn entities_of_does_not_leak_across_prefixes() {
    let mut s = State::new();
    for env in ["prod", "prod2"] {
        s.apply(&req(create_env(env), 1), 1);
        s.apply(&req(create_helm(env, "web"), 1), 2);
    }
    assert_eq!(s.entities_of("prod").count(), 1);
    assert_eq!(s.entities_of("prod2").count(), 1);
}

#[test]
fn records_rebuild_an_equal_state_and_digest() {
    let mut s = State::new();
    s.apply(&req(create_env("prod"), 1), 1);
    s.apply(&req(create_helm("prod", "web"), 2), 2);
    let mut r = req(create_env("dev"), 3);
    r.request_id = Some("x".into());
    s.apply(&r, 3);
    let t = State::from_records(s.records());
    assert_eq!(s, t);
    assert_eq!(s.digest(), t.digest());
    assert_ne!(s.digest(), State::new().digest());
}

/// A tiny deterministic generator, so a failing seed can be replayed exactly.
struct SplitMix(u64);

impl SplitMix {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn pick(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_request(rng: &mut SplitMix, t: TimestampMs) -> Request {
    let env = format!("e{}", rng.pick(6));
    let command = match rng.pick(4) {
        0 => create_env(&env),
        1 => Command::DeleteEnvironment { name: env },
        _ => create_helm(&env, &format!("s{}", rng.pick(4))),
    };
    let request_id = (rng.pick(3) == 0).then(|| format!("r{}", rng.pick(20)));
    Request {
        command,
        time_ms: t,
        request_id,
    }
}

#[test]
fn random_histories_are_deterministic_and_rebuildable() {
    for seed in 0..50u64 {
        let mut rng = SplitMix(seed);
        let (mut a, mut b) = (State::new(), State::new());
        let mut t = 0;
        for index in 1..=200u64 {
            // Time jumps now and then past the request-id TTL.
            t += if rng.pick(50) == 0 {
                REQUEST_TTL_MS
            } else {
                1_000
            };
            let req = random_request(&mut rng, t);
            let ra = a.apply(&req, index);
            let rb = b.apply(&req, index);
            assert_eq!(ra, rb, "seed {seed} index {index}");
            // Storage persists exactly the changed keys: rebuilding from records is exact.
            let rebuilt = State::from_records(a.records());
            assert_eq!(rebuilt, a, "seed {seed} index {index}");
        }
        assert_eq!(a.digest(), b.digest(), "seed {seed}");
    }
}

/// A state whose entity `prod/helmChart/web` exists, for the invariant tests.
fn one_entity() -> (State, String) {
    let mut s = State::new();
    s.apply(&req(create_env("prod"), 1), 1).result.unwrap();
    let id = match s.apply(&req(create_helm("prod", "web"), 2), 2).result {
        Ok(CommandOutput::EntityCreated(id)) => id,
        other => panic!("{other:?}"),
    };
    s.check_invariants(&[RecordKey::Entity(id.clone())]);
    (s, id)
}

#[test]
#[should_panic(expected = "active plans against the active-plan index")]
fn invariants_catch_an_active_plan_index_without_the_plan() {
    let (mut s, id) = one_entity();
    s.plans
        .index_mut()
        .active
        .insert(id.clone(), "p-9-0".into());
    s.check_invariants(&[RecordKey::Entity(id)]);
}

#[test]
#[should_panic(expected = "not in the product index")]
fn invariants_catch_an_entity_missing_from_its_product_index() {
    let (mut s, id) = one_entity();
    s.entities.index_mut().by_product.clear();
    s.check_invariants(&[RecordKey::Entity(id)]);
}

#[test]
#[should_panic(expected = "whose installation does not manage it")]
fn invariants_catch_an_owner_without_its_installation() {
    let (mut s, id) = one_entity();
    if let Some(mut e) = s.entities.get_mut(&id, &mut Vec::new()) {
        e.owner_module = Some("monitoring".into());
    }
    s.check_invariants(&[RecordKey::Entity(id)]);
}

#[test]
fn membership_entries_record_removed_nodes_and_survive_a_rebuild() {
    let nodes = |ids: &[u64]| {
        ids.iter()
            .copied()
            .collect::<std::collections::BTreeSet<u64>>()
    };
    let mut s = State::new();
    assert_eq!(
        s.apply_membership(&nodes(&[1, 2, 3])),
        vec![RecordKey::ClusterMembers("raft".into())]
    );
    // The same membership again (a learner promoted keeps the node set) changes nothing.
    assert!(s.apply_membership(&nodes(&[1, 2, 3])).is_empty());
    s.apply(&req(create_env("prod"), 10), 4);
    s.apply_membership(&nodes(&[1, 3]));
    assert!(s.cluster_members().is_removed(2));
    assert!(!s.cluster_members().is_removed(3));
    let rebuilt = State::from_records(s.records());
    assert_eq!(rebuilt.cluster_members(), s.cluster_members());
    assert_eq!(rebuilt.digest(), s.digest());
}

/// Issue 51: `PutSecret` makes a new revision and answers the same whether the value equals
/// the stored one or not, so a right guess of a write-only value is not confirmed; a logged
/// `SetSecret` still applies as it did (an equal value is "unchanged"), so replaying an old
/// log, or applying it beside an older node, reaches the same state.
#[test]
fn a_put_secret_answers_alike_for_a_right_and_a_wrong_guess_and_set_secret_replays_as_before() {
    use crate::entity::SecretValue;
    let id = "eid:prod:helmChart:web".to_string();
    let secret = |put: bool, value: &str| {
        let (entity, name, value) = (
            id.clone(),
            "pw".to_string(),
            Some(SecretValue(value.into())),
        );
        if put {
            Command::PutSecret {
                entity,
                name,
                value,
            }
        } else {
            Command::SetSecret {
                entity,
                name,
                value,
            }
        }
    };
    let summary = |a: &Applied| match &a.result {
        Ok(CommandOutput::Changed { summary, .. }) => summary.clone(),
        other => panic!("{other:?}"),
    };
    let mut s = State::new();
    s.apply(&req(create_env("prod"), 10), 1);
    s.apply(&req(create_helm("prod", "web"), 11), 2);
    let revision = |s: &State| s.entity(&id).expect("entity").secrets_revision;

    assert_eq!(
        summary(&s.apply(&req(secret(true, "hunter2"), 12), 3)),
        "secret pw set (revision 1)"
    );
    let right = s.apply(&req(secret(true, "hunter2"), 13), 4);
    assert_eq!(summary(&right), "secret pw set (revision 2)");
    assert!(right.changed.contains(&RecordKey::Entity(id.clone())));
    let wrong = s.apply(&req(secret(true, "hunter3"), 14), 5);
    assert_eq!(summary(&wrong), "secret pw set (revision 3)");
    assert_eq!(revision(&s), 3);

    // The old command: an equal value changes nothing and says so.
    let old = s.apply(&req(secret(false, "hunter3"), 15), 6);
    assert_eq!(summary(&old), "secret pw unchanged");
    assert_eq!(revision(&s), 3);
    assert_eq!(
        summary(&s.apply(&req(secret(false, "x"), 16), 7)),
        "secret pw set (revision 4)"
    );

    // What a leader proposes for a submitted SetSecret, also inside `As`.
    let actor = hub_identity::Identity::Operator("alice".into());
    let wrapped = Command::As {
        actor: actor.clone(),
        command: Box::new(secret(false, "v")),
    };
    assert_eq!(
        wrapped.current_form(),
        Command::As {
            actor,
            command: Box::new(secret(true, "v")),
        }
    );
    assert_eq!(create_env("x").current_form(), create_env("x"));
}

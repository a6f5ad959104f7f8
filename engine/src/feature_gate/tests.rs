//! Feature levels through apply (issue 56 item 4): every command's level, the cluster's level
//! raised and never lowered, and the gate that refuses a command above it on apply and before
//! a proposal.
//!
//! Every command is level 1 today, so the tests that need a command above the cluster's level,
//! or a binary that applies level 2, simulate the next release on their thread
//! ([`simulated::next_release`]): it changes what `Command::level` and the supported level
//! say, and nothing else; the gate, apply and the records are the real ones.

use hub_identity::Identity;

use crate::audit::WriteOutcome;
use crate::command::{Command, CommandOutput, Request};
use crate::error::CommandError;
use crate::feature_level::{simulated, FeatureLevel, BASELINE_LEVEL, SUPPORTED_LEVEL};
use crate::plan::EmergencyCommand;
use crate::record::Record;
use crate::role::Role;
use crate::state::State;

use super::check_level;

/// A state and the index of its last entry.
struct Log {
    state: State,
    index: u64,
}

impl Log {
    fn new() -> Self {
        Log {
            state: State::new(),
            index: 0,
        }
    }

    /// Applies `command` as a node's own entry.
    fn apply(&mut self, command: Command) -> Result<CommandOutput, CommandError> {
        self.index += 1;
        let request = Request {
            command,
            time_ms: 1_000 * self.index as i64,
            request_id: None,
        };
        self.state.apply(&request, self.index).result
    }

    /// Applies `command` as `actor`'s.
    fn by(&mut self, actor: &Identity, command: Command) -> Result<CommandOutput, CommandError> {
        self.apply(Command::As {
            actor: actor.clone(),
            command: Box::new(command),
        })
    }
}

fn level(n: u32) -> FeatureLevel {
    FeatureLevel(n)
}

fn raise(n: u32) -> Command {
    Command::SetClusterLevel { level: level(n) }
}

fn create_env(name: &str) -> Command {
    Command::CreateEnvironment {
        name: name.into(),
        description: String::new(),
    }
}

/// One command of every variant in [`Command::TAGS`]: decoded from its tag followed by zero
/// bytes (empty strings and lists, `None`, zero, each enum's first variant), or built here
/// when zeros do not decode.
fn every_command() -> Vec<Command> {
    let cfg = bincode::config::standard();
    let mut out = Vec::new();
    for &(tag, name) in Command::TAGS {
        let command = match name {
            // Its first `EmergencyCommand` holds a version, which is never empty.
            "IssueCommand" => Command::IssueCommand {
                entity: "eid:prod:helmChart:web".into(),
                command: EmergencyCommand::Restart,
                reason: "stuck".into(),
                actor: "operator/alice".into(),
            },
            _ => {
                let mut bytes = vec![u8::try_from(tag).expect("tags below 251 are one byte")];
                bytes.extend([0; 256]);
                let (command, _): (Command, usize) = bincode::serde::decode_from_slice(&bytes, cfg)
                    .unwrap_or_else(|e| {
                        panic!("{name}: zeros do not decode ({e}); build its sample here")
                    });
                command
            }
        };
        assert_eq!(command.variant_name(), name);
        out.push(command);
    }
    out
}

/// The commands each release added after the first: a variant's level never changes, so
/// this list only grows.
const ADDED_AFTER_THE_FIRST_RELEASE: [(&str, u32); 3] = [
    ("RevokeCertificates", 2),
    ("ApplyAlertProvider", 2),
    ("DeleteAlertProvider", 2),
];

#[test]
fn every_command_has_the_level_of_the_release_that_added_it() {
    assert_eq!(BASELINE_LEVEL, level(1));
    assert_eq!(SUPPORTED_LEVEL, level(2), "the release after v0.3.0");
    let commands = every_command();
    assert_eq!(commands.len(), Command::TAGS.len());
    for command in &commands {
        let name = command.variant_name();
        let expected = ADDED_AFTER_THE_FIRST_RELEASE
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(1, |(_, l)| *l);
        assert_eq!(command.level(), level(expected), "{name}");
    }
    // The gate admits every level-1 command in a state that never set a level (every log
    // and snapshot written before levels existed), and refuses the later ones there.
    let state = State::new();
    assert_eq!(state.cluster_level(), level(1));
    assert_eq!(state.cluster_level_record(), None);
    for command in &commands {
        let admitted = check_level(&state, command).is_ok();
        assert_eq!(admitted, command.level() == level(1), "{}", command.kind());
    }
}

#[test]
fn a_wrapper_takes_the_higher_level_of_itself_and_what_it_wraps() {
    let wrap = |command: Command| Command::As {
        actor: Identity::Operator("alice".into()),
        command: Box::new(command),
    };
    assert_eq!(wrap(create_env("prod")).level(), level(1));
    // The next release gives CreateEnvironment level 2: an `As` of it needs 2.
    let next = simulated::next_release(3, &[("CreateEnvironment", 2)]);
    assert_eq!(wrap(create_env("prod")).level(), level(2));
    assert_eq!(wrap(raise(2)).level(), level(1));
    drop(next);
    // A wrapper of a higher level than its command: the wrapper's.
    let _next = simulated::next_release(3, &[("CreateEnvironment", 2), ("As", 3)]);
    assert_eq!(wrap(create_env("prod")).level(), level(3));
    assert_eq!(wrap(wrap(create_env("prod"))).level(), level(3));
    assert_eq!(create_env("prod").level(), level(2));
}

#[test]
fn the_cluster_level_is_raised_and_never_lowered() {
    // The next release's binary applies up to level 3.
    let _next = simulated::next_release(3, &[]);
    let mut log = Log::new();
    log.apply(create_env("prod")).unwrap();
    // At or below the cluster's level: succeeds and changes nothing.
    for n in [0, 1] {
        let before = log.state.digest();
        let out = log.apply(raise(n)).unwrap();
        assert_eq!(out.summary(), "the cluster runs feature level 1 already");
        assert_eq!(log.state.digest(), before, "level {n}");
        assert_eq!(log.state.cluster_level_record(), None);
    }
    let out = log.apply(raise(2)).unwrap();
    assert_eq!(out.summary(), "the cluster runs feature level 2 (was 1)");
    assert_eq!(log.state.cluster_level(), level(2));
    let record = log.state.cluster_level_record().cloned().unwrap();
    assert_eq!(
        (record.level, record.set_index, record.set_at_ms),
        (level(2), log.index, 1_000 * log.index as i64)
    );
    for n in [2, 1] {
        let before = log.state.digest();
        let out = log.apply(raise(n)).unwrap();
        assert_eq!(out.summary(), "the cluster runs feature level 2 already");
        assert_eq!(log.state.digest(), before, "level {n}");
    }
    // A node's wrapped entry raises it too.
    log.by(&Identity::Node(2), raise(3)).unwrap();
    assert_eq!(log.state.cluster_level(), level(3));
    // The record survives a rebuild from records (a snapshot).
    let rebuilt = State::from_records(log.state.records());
    assert_eq!(rebuilt.cluster_level(), level(3));
    assert_eq!(rebuilt.digest(), log.state.digest());
}

#[test]
fn a_level_above_what_this_binary_applies_is_refused_and_changes_nothing() {
    let mut log = Log::new();
    let before = log.state.digest();
    let e = log.apply(raise(3)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid level: feature level 3 is above 2, the highest this node's binary applies: \
         a level is set only once every member advertises it"
    );
    assert_eq!(log.state.cluster_level(), level(1));
    assert_eq!(log.state.digest(), before);
    // The next release's binary applies 3 but not 4.
    let _next = simulated::next_release(3, &[]);
    assert!(matches!(
        log.apply(raise(4)),
        Err(CommandError::InvalidField { field, .. }) if field == "level"
    ));
    assert_eq!(log.state.cluster_level(), level(1));
    log.apply(raise(3)).unwrap();
    assert_eq!(log.state.cluster_level(), level(3));
}

/// Every record but the write audit's and the entry clock: what a refused write leaves.
fn content(state: &State) -> Vec<Record> {
    state
        .records()
        .filter(|r| {
            !matches!(
                r,
                Record::WriteAudit(_) | Record::AuditLog(_) | Record::EntryClock(_)
            )
        })
        .collect()
}

#[test]
fn a_command_above_the_cluster_level_is_refused_on_apply_and_before_a_proposal() {
    // The next release adds level 2 and gives it to CreateEnvironment (as if it were new).
    let _next = simulated::next_release(2, &[("CreateEnvironment", 2)]);
    let mut log = Log::new();
    let root = Identity::Operator("root".into());
    log.by(
        &root,
        Command::BindRole {
            identity: root.clone(),
            role: Role::Admin,
            environments: Default::default(),
            products: Default::default(),
        },
    )
    .unwrap();
    let refusal = CommandError::FeatureLevelTooLow {
        cluster: level(1),
        needed: level(2),
        command: "create_environment".into(),
    };
    assert_eq!(
        refusal.to_string(),
        "the cluster runs feature level 1; create_environment needs 2: upgrade every node first"
    );
    // The node's check before proposing, of the command and of its envelope.
    assert_eq!(
        check_level(&log.state, &create_env("prod")),
        Err(refusal.clone())
    );
    let wrapped = Command::As {
        actor: root.clone(),
        command: Box::new(create_env("prod")),
    };
    assert_eq!(check_level(&log.state, &wrapped), Err(refusal.clone()));
    // Apply refuses the entry alike, a node's own or an admin's, and nothing changes but the
    // admin's audit row, which records the refusal.
    let before = log.state.digest();
    assert_eq!(log.apply(create_env("prod")), Err(refusal.clone()));
    assert_eq!(log.state.digest(), before);
    let before = content(&log.state);
    assert_eq!(log.by(&root, create_env("prod")), Err(refusal.clone()));
    assert!(content(&log.state) == before);
    assert!(log.state.environment("prod").is_none());
    let row = log.state.write_audit().next_back().unwrap();
    assert_eq!(
        (&row.command[..], &row.outcome),
        ("CreateEnvironment", &WriteOutcome::Refused(refusal))
    );
    // Once the cluster runs level 2, the same command applies.
    log.apply(raise(2)).unwrap();
    assert_eq!(check_level(&log.state, &wrapped), Ok(()));
    log.by(&root, create_env("prod")).unwrap();
    assert!(log.state.environment("prod").is_some());
}

#[test]
fn a_new_set_cluster_level_is_refused_as_the_issue_says() {
    // Were SetClusterLevel itself new in the next release, a cluster at level 1 would refuse
    // it with the words of issue 56.
    let _next = simulated::next_release(2, &[("SetClusterLevel", 2)]);
    let mut log = Log::new();
    let e = log.apply(raise(2)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the cluster runs feature level 1; set_cluster_level needs 2: upgrade every node first"
    );
    assert_eq!(log.state.cluster_level(), level(1));
}

#[test]
fn the_json_a_node_proposes() {
    let json = serde_json::to_string(&raise(2)).unwrap();
    assert_eq!(json, r#"{"SetClusterLevel":{"level":2}}"#);
    assert_eq!(serde_json::from_str::<Command>(&json).unwrap(), raise(2));
    assert_eq!(raise(2).tag(), 71);
    assert_eq!(raise(2).kind(), "set_cluster_level");
}

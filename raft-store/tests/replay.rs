//! Replaying the log gives the same state on every binary (docs/ARCHITECTURE.md "Feature
//! levels", issue 56 item 4): every command of the log-format fixtures
//! (`fixtures/log-format/command-*.bin`, written by the releases that introduced them) is
//! applied in tag order, as an admin (`SetClusterLevel` as a node, as the leader proposes it,
//! so the commands after it apply at its level), by the current binary, and what each did (its output or
//! its refusal) and the state's digest after all of them must equal `fixtures/replay.txt`.
//! A change to how an existing command applies shows here: it must be keyed on the cluster's
//! feature level, so entries proposed before that level apply the old way (then this file
//! does not change), and a new command gets a fixture and a new line.
//!
//! `HUB_BLESS_FIXTURES=1` writes the file when it is missing; a difference is never blessed
//! silently: delete the file to re-bless on purpose, and say why in the commit.

use std::path::PathBuf;

use hub_engine::access::Role;
use hub_engine::{Command, Request, State};
use hub_identity::Identity;
use raft_store::codec::{self, Limit};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The command fixtures in tag order: (file name, command).
fn commands() -> Vec<(String, Command)> {
    let dir = fixtures().join("log-format");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("the log-format fixtures")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.starts_with("command-") && name.ends_with(".bin"))
        .collect();
    // By tag: `command-<tag>-<Variant>.bin`.
    let tag = |name: &String| -> u32 {
        name.split('-')
            .nth(1)
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{name}: not command-<tag>-<Variant>.bin"))
    };
    files.sort_by_key(tag);
    files
        .into_iter()
        .map(|name| {
            let bytes = std::fs::read(dir.join(&name)).expect("a fixture");
            let command = codec::decode_bounded(&bytes, Limit::Command)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, command)
        })
        .collect()
}

/// Applies every fixture command to a new state, as `operator/admin` (bound admin first;
/// `SetClusterLevel` as `node/1`),
/// one second apart: one line per entry, then the digest.
fn replay() -> String {
    const T0: i64 = 1_800_000_000_000;
    let admin = Identity::Operator("admin".into());
    let mut state = State::new();
    let mut lines = Vec::new();
    let bind = Command::BindRole {
        identity: admin.clone(),
        role: Role::Admin,
        environments: Default::default(),
        products: Default::default(),
    };
    let entries = std::iter::once(("bootstrap: bind admin".to_string(), bind)).chain(commands());
    for (index, (name, command)) in (1u64..).zip(entries) {
        let actor = match command {
            Command::SetClusterLevel { .. } => Identity::Node(1),
            _ => admin.clone(),
        };
        let request = Request {
            command: Command::As {
                actor,
                command: Box::new(command),
            },
            time_ms: T0 + 1_000 * index as i64,
            request_id: None,
        };
        let outcome = match state.apply(&request, index).result {
            Ok(output) => format!("ok {output:?}"),
            Err(e) => format!("refused: {e}"),
        };
        lines.push(format!("{name}: {outcome}"));
    }
    lines.push(format!("digest {}", state.digest()));
    lines.join("\n") + "\n"
}

#[test]
fn every_fixture_command_replays_to_the_same_state() {
    let path = fixtures().join("replay.txt");
    let got = replay();
    match std::fs::read_to_string(&path) {
        Ok(want) => assert!(
            got == want,
            "replaying the fixture commands changed what they do (docs/ARCHITECTURE.md \
             \"Feature levels\": key the change on the cluster's level); diff {} with:\n{got}",
            path.display()
        ),
        Err(_) if std::env::var("HUB_BLESS_FIXTURES").is_ok_and(|v| v == "1") => {
            std::fs::write(&path, &got).expect("write the replay file");
        }
        Err(e) => panic!(
            "{}: {e} (written with HUB_BLESS_FIXTURES=1 when missing)",
            path.display()
        ),
    }
}

#[test]
fn the_replay_is_deterministic() {
    assert_eq!(replay(), replay());
}

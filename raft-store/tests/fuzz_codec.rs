//! Fuzzing the codec (SPEC S3, docs/BENCHMARKS.md "Fuzzing"): valid encodings of commands,
//! forwarded writes, log entries, Raft messages, records and snapshot files, mutated
//! structure-aware (bit flips, truncation, splices, huge length prefixes) and random bytes,
//! into `codec::decode_bounded`. Every decode must return (no panic, no abort) within a time
//! bound, allocate at most a small multiple of its input's budget (a counting allocator
//! measures it), and whatever it accepts must re-encode to bytes that decode to the same value.
//!
//! `HUB_FUZZ_CASES=N` runs N cases per target (default 400).

use std::time::Duration;

use hub_engine::cluster_key::{SecretKey, CANARY_REVISION_KEY};
use hub_engine::entity::SecretValue;
use hub_engine::suppression::Scope;
use hub_engine::{Command, EntityKind, Record, Request, State};
use hub_fuzz::{measure, mutated, within, CountingAlloc};
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use openraft::vote::RaftLeaderId;
use openraft::{EntryPayload, LogId};
use proptest::prelude::*;
use raft_store::codec::{self, budget_for, Limit};
use raft_store::{Entry, LogId as StoreLogId, SnapshotMeta, StoredMembership, TypeConfig, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const CASES: u32 = 400;

/// Slowest acceptable decode (generous: a loaded 2-core machine runs other builds).
const DECODE_TIME: Duration = Duration::from_secs(2);

/// Serde pre-allocates at most 1 MiB per sequence being decoded; a few are nested.
const PREALLOCATION_SLACK: usize = 16 << 20;

const MANIFEST: &str = "product-group: com.example\nproduct-name: web\nproduct-version: 1.2.0\nartifacts:\n  - uri: web/web-1.2.0.tgz\n    sha256: 3f7a9c0d5e1b2a4c6d8e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c\n";

fn canary_yaml() -> String {
    let path = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("../engine/tests/fixtures/canary/valid/podinfo.yml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Commands of most shapes: strings, options, nested enums, YAML payloads, key bytes.
fn commands() -> Vec<Command> {
    let entity = "eid:prod:helmChart:podinfo".to_string();
    vec![
        Command::SetClusterKey {
            name: CANARY_REVISION_KEY.into(),
            key: SecretKey::from_bytes([9; 32]),
        },
        Command::CreateEnvironment {
            name: "prod".into(),
            description: "production".into(),
        },
        Command::CreateProduct {
            product_id: "com.example:podinfo".into(),
            description: String::new(),
        },
        Command::PublishRelease {
            manifest: MANIFEST.replace("web", "podinfo"),
        },
        Command::CreateEntity {
            environment: "prod".into(),
            kind: EntityKind::HelmChart,
            name: "podinfo".into(),
            product_id: "com.example:podinfo".into(),
            k8s_namespace: Some("podinfo".into()),
            account_id: None,
            release_channel: None,
        },
        Command::SetConfigOverrides {
            entity: entity.clone(),
            version: "0.0.0".into(),
            config: Some("port: 9898\nreplicas: 2\n".into()),
        },
        Command::SetSecret {
            entity: entity.clone(),
            name: "db-password".into(),
            value: Some(SecretValue("s3cret".into())),
        },
        Command::ApplyCanary {
            environment: Some("prod".into()),
            yaml: canary_yaml(),
        },
        Command::Evaluate {
            entities: vec![entity.clone()],
            artifacts: Vec::new(),
        },
        Command::CreateSuppression {
            scope: Scope::Environment("prod".into()),
            start_ms: None,
            end_ms: 2_000_000_000_000,
            reason: "freeze".into(),
            cancel_active_plans: false,
            actor: "ops".into(),
        },
        Command::ExpireSuppressions,
    ]
}

/// The state after `commands`, as records: environments, entities, products, releases,
/// canaries, plans, activity, suppressions, request ids, the cluster key.
fn records() -> Vec<Record> {
    let mut state = State::new();
    for (i, command) in commands().into_iter().enumerate() {
        let req = Request {
            command,
            time_ms: 1_795_996_800_000 + i as i64,
            request_id: Some(format!("r-{i}")),
        };
        state.apply(&req, i as u64 + 1);
    }
    let records: Vec<Record> = state.records().collect();
    assert!(records.len() >= 8, "{} records", records.len());
    records
}

fn log_id(index: u64) -> StoreLogId {
    LogId::new(
        openraft::vote::leader_id_adv::CommittedLeaderId::new(3, 1),
        index,
    )
}

fn entries() -> Vec<Entry> {
    let mut out: Vec<Entry> = commands()
        .into_iter()
        .enumerate()
        .map(|(i, command)| Entry {
            log_id: log_id(i as u64 + 2),
            payload: EntryPayload::Normal(Request {
                command,
                time_ms: 7,
                request_id: Some(format!("r-{i}")),
            }),
        })
        .collect();
    out.push(Entry {
        log_id: log_id(1),
        payload: EntryPayload::Blank,
    });
    out.push(Entry {
        log_id: log_id(99),
        payload: EntryPayload::Membership(membership()),
    });
    out
}

fn membership() -> openraft::Membership<u64, openraft::BasicNode> {
    let nodes = (1..=3u64)
        .map(|id| (id, openraft::BasicNode::new(format!("10.0.0.{id}:7401"))))
        .collect::<std::collections::BTreeMap<_, _>>();
    openraft::Membership::new(vec![(1..=3u64).collect()], nodes).expect("membership")
}

fn enc<T: Serialize>(values: &[T]) -> Vec<Vec<u8>> {
    values.iter().map(|v| codec::encode(v)).collect()
}

/// Decodes `bytes` as `T` within `limit`, checking time, allocation and the round trip.
fn check<T: Serialize + DeserializeOwned>(bytes: &[u8], limit: Limit) {
    let (decoded, peak) = measure(|| {
        within(DECODE_TIME, "decode", || {
            codec::decode_bounded::<T>(bytes, limit)
        })
    });
    let bound = 4 * budget_for(bytes.len()) + PREALLOCATION_SLACK;
    assert!(
        peak <= bound,
        "decoding {} bytes allocated {peak} bytes (bound {bound})",
        bytes.len()
    );
    if let Ok(value) = decoded {
        let again = codec::encode(&value);
        let back: T = codec::decode_bounded(&again, Limit::Snapshot).expect("re-encoded value");
        assert_eq!(codec::encode(&back), again, "round trip");
    }
}

/// The snapshot file's layout (positional: `raft_store`'s `SnapshotFile`).
type SnapshotFileShape = (Option<StoreLogId>, StoredMembership, Vec<Record>);

fn snapshot_file() -> SnapshotFileShape {
    (
        Some(log_id(40)),
        StoredMembership::new(Some(log_id(2)), membership()),
        records(),
    )
}

#[test]
fn the_counting_allocator_sees_a_decode_allocate() {
    let (v, peak) = measure(|| vec![7u8; 3 << 20]);
    assert!(peak >= 3 << 20, "{peak}");
    drop(v);
    // A 1 MiB string decodes with about 1 MiB allocated (bincode reads it into one buffer).
    let bytes = codec::encode(&"x".repeat(1 << 20));
    let (s, peak) = measure(|| codec::decode_bounded::<String>(&bytes, Limit::Message).unwrap());
    assert_eq!(s.len(), 1 << 20);
    assert!((1 << 20..3 << 20).contains(&peak), "{peak}");
}

#[test]
fn every_seed_decodes_to_itself() {
    for bytes in enc(&commands()) {
        let c: Command = codec::decode_bounded(&bytes, Limit::Command).unwrap();
        assert_eq!(codec::encode(&c), bytes);
    }
    for bytes in enc(&records()) {
        let r: Record = codec::decode_bounded(&bytes, Limit::Snapshot).unwrap();
        assert_eq!(codec::encode(&r), bytes);
    }
    let file = codec::encode(&snapshot_file());
    let back: SnapshotFileShape = codec::decode_bounded(&file, Limit::Snapshot).unwrap();
    assert_eq!(back.2.len(), records().len());
}

proptest! {
    #![proptest_config(hub_fuzz::config(CASES))]

    /// Forwarded writes: `(Command, Option<String>)` as `Hub.Forward` carries them.
    #[test]
    fn forwarded_commands(bytes in mutated(
        commands().into_iter().map(|c| codec::encode(&(c, Some("req-1".to_string())))).collect()
    )) {
        check::<(Command, Option<String>)>(&bytes, Limit::Command);
        check::<Command>(&bytes, Limit::Command);
    }

    /// Log entries and the requests inside them, as the store reads them back.
    #[test]
    fn entries_and_requests(bytes in mutated(enc(&entries()))) {
        check::<Entry>(&bytes, Limit::Message);
        check::<Request>(&bytes, Limit::Message);
    }

    /// Raft messages from peers: AppendEntries with entries, votes, snapshot headers.
    #[test]
    fn raft_messages(bytes in mutated({
        let mut seeds = Vec::new();
        let all = entries();
        for n in [0, 1, all.len()] {
            let rpc = AppendEntriesRequest::<TypeConfig> {
                vote: Vote::new(3, 1),
                prev_log_id: Some(log_id(1)),
                entries: all[..n].to_vec(),
                leader_commit: Some(log_id(1)),
            };
            seeds.push(codec::encode(&rpc));
        }
        seeds.push(codec::encode(&VoteRequest::<TypeConfig>::new(Vote::new(4, 2), Some(log_id(9)))));
        let meta = SnapshotMeta {
            last_log_id: Some(log_id(40)),
            last_membership: StoredMembership::new(Some(log_id(2)), membership()),
        };
        seeds.push(codec::encode(&(Vote::new(3, 1), meta)));
        seeds
    })) {
        check::<AppendEntriesRequest<TypeConfig>>(&bytes, Limit::Message);
        check::<VoteRequest<TypeConfig>>(&bytes, Limit::Message);
        check::<(Vote, SnapshotMeta)>(&bytes, Limit::Command);
    }

    /// State records, as the store loads them at start.
    #[test]
    fn state_records(bytes in mutated(enc(&records()))) {
        check::<Record>(&bytes, Limit::Snapshot);
    }

    /// Whole snapshot files (the mutations land anywhere in a few kilobytes of records).
    #[test]
    fn snapshot_files(bytes in mutated(vec![codec::encode(&snapshot_file())])) {
        check::<SnapshotFileShape>(&bytes, Limit::Snapshot);
    }
}

//! History (Activity lines) lives in the store, not the state: apply persists it with the
//! state's rows, a reopened store and a snapshot carry it, and the format before the split
//! (one Activity record with its lines) is migrated on open and on install.

mod common;

use common::write_raw;
use raft_store::DigestFreshness;
use std::collections::VecDeque;
use std::path::Path;

use hub_engine::activity::{Activity, ActivityEntryV1, ActivityV1, ACTIVITY_KEPT};
use hub_engine::command::EntityReport;
use hub_engine::entity::Health;
use hub_engine::{Command, EntityKind, Record, Request};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::vote::RaftLeaderId;
use openraft::{Entry, EntryPayload, LogId};

use raft_store::{NodeIdentity, StateMachine};

const ENTITY: &str = "eid:prod:helmChart:web";

fn identity() -> NodeIdentity {
    NodeIdentity {
        node_id: 1,
        cluster_id: "history".into(),
    }
}

fn log_id(index: u64) -> raft_store::LogId {
    LogId::new(
        openraft::vote::leader_id_adv::CommittedLeaderId::new(1, 1),
        index,
    )
}

async fn apply(sm: &mut StateMachine, index: u64, command: Command) {
    let entry = Entry {
        log_id: log_id(index),
        payload: EntryPayload::Normal(Request {
            command,
            time_ms: 1_000 + index as i64,
            request_id: None,
        }),
    };
    sm.apply(futures::stream::iter([Ok((entry, None))]))
        .await
        .expect("apply");
}

/// An environment with one entity, then `reports` reports that flip its health, each of
/// which notes one Activity line. Returns the last index.
async fn entity_with_reports(sm: &mut StateMachine, reports: u64) -> u64 {
    let setup = [
        Command::CreateProduct {
            product_id: "com.example:web".into(),
            description: String::new(),
        },
        Command::CreateEnvironment {
            name: "prod".into(),
            description: String::new(),
        },
        Command::CreateEntity {
            environment: "prod".into(),
            kind: EntityKind::HelmChart,
            name: "web".into(),
            product_id: "com.example:web".into(),
            k8s_namespace: Some("web".into()),
            account_id: None,
            release_channel: None,
        },
    ];
    let mut index = 0;
    for command in setup {
        index += 1;
        apply(sm, index, command).await;
    }
    for i in 0..reports {
        index += 1;
        let health = if i % 2 == 0 {
            Health::Error
        } else {
            Health::Healthy
        };
        let report = EntityReport {
            entity: ENTITY.into(),
            version: None,
            health,
            config_sha256: None,
            secrets_revision: None,
            message: format!("report {i}"),
        };
        let command = Command::ReportEntityStates {
            environment: "prod".into(),
            states: vec![report],
        };
        apply(sm, index, command).await;
    }
    index
}

/// The seqs of the entity's stored lines, newest first.
fn stored_seqs(sm: &StateMachine) -> Vec<u64> {
    sm.history()
        .activity_lines(ENTITY, usize::MAX)
        .expect("read history")
        .iter()
        .map(|l| l.seq)
        .collect()
}

fn head(sm: &StateMachine) -> Activity {
    sm.shared()
        .read()
        .state
        .activity(ENTITY)
        .expect("an activity head")
        .clone()
}

#[tokio::test]
async fn lines_are_stored_apart_bounded_and_survive_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, log, mut sm) = raft_store::open(dir.path(), &identity()).expect("open");
    entity_with_reports(&mut sm, 150).await;
    assert_eq!(head(&sm).lines, 150);
    let kept: Vec<u64> = (50..150).rev().collect();
    assert_eq!(
        stored_seqs(&sm),
        kept,
        "the newest {ACTIVITY_KEPT}, newest first"
    );
    let newest = sm.history().activity_lines(ENTITY, 3).expect("read");
    assert_eq!(
        newest
            .iter()
            .map(|l| l.message.as_str())
            .collect::<Vec<_>>(),
        [
            "reported not installed healthy: report 149",
            "reported not installed error: report 148",
            "reported not installed healthy: report 147"
        ],
        "{newest:?}"
    );
    assert!(sm
        .history()
        .activity_lines("eid:prod:helmChart:we", usize::MAX)
        .expect("read")
        .is_empty());
    let state = sm.shared().read().state.clone();
    drop((store, log, sm));

    let (_store, _log, sm) = raft_store::open(dir.path(), &identity()).expect("reopen");
    assert!(sm.shared().read().state == state, "the state reopens equal");
    assert_eq!(stored_seqs(&sm), kept, "history reopens equal");
}

#[tokio::test]
async fn a_snapshot_carries_the_history_to_a_new_follower() {
    let leader_dir = tempfile::tempdir().expect("tempdir");
    let (_s, _l, mut leader) = raft_store::open(leader_dir.path(), &identity()).expect("open");
    entity_with_reports(&mut leader, 120).await;
    let follower_dir = tempfile::tempdir().expect("tempdir");
    let follower = follower_of(&leader, follower_dir.path()).await;
    assert_eq!(stored_seqs(&follower), stored_seqs(&leader));
    assert_eq!(head(&follower), head(&leader));
    assert_eq!(
        follower
            .digest(DigestFreshness::Probe)
            .await
            .expect("digest"),
        leader.digest(DigestFreshness::Probe).await.expect("digest"),
        "the stored digests, history included, agree"
    );
}

/// An Activity record as a release before the split stored it: three lines, the newest a
/// re-check.
fn v1_record() -> Record {
    let entry = |t: i64, kind: &str| ActivityEntryV1 {
        time_ms: t,
        index: t as u64,
        kind: kind.into(),
        message: format!("line at {t}"),
    };
    Record::ActivityV1(ActivityV1 {
        entity: ENTITY.into(),
        entries: VecDeque::from([
            entry(10, "decision"),
            entry(20, "plan"),
            entry(30, "recheck"),
        ]),
        last_decision: None,
        blocked_since_ms: Some(5),
        blocked_candidate: Some("1.0.0".into()),
    })
}

fn expect_migrated(sm: &StateMachine) {
    let head = head(sm);
    assert_eq!(
        (head.lines, head.blocked_since_ms, head.last_recheck_ms),
        (3, Some(5), Some(30))
    );
    let lines = sm.history().activity_lines(ENTITY, 10).expect("read");
    assert_eq!(
        lines
            .iter()
            .map(|l| (l.seq, l.time_ms, l.kind.as_str()))
            .collect::<Vec<_>>(),
        [(2, 30, "recheck"), (1, 20, "plan"), (0, 10, "decision")]
    );
}

/// A new store in `dir` that installed a snapshot `leader` built.
async fn follower_of(leader: &StateMachine, dir: &Path) -> StateMachine {
    let snapshot = leader.clone().build_snapshot().await.expect("build");
    let (_store, _log, mut follower) = raft_store::open(dir, &identity()).expect("open follower");
    follower
        .install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .expect("install");
    follower
}

/// The metadata of a one-node cluster's snapshot at `index`.
fn one_node_meta(index: u64) -> raft_store::SnapshotMeta {
    let nodes = std::collections::BTreeMap::from([(1u64, openraft::BasicNode::new("n1"))]);
    let membership = openraft::Membership::new(vec![[1u64].into()], nodes).expect("membership");
    raft_store::SnapshotMeta {
        last_log_id: Some(log_id(index)),
        last_membership: raft_store::StoredMembership::new(Some(log_id(index)), membership),
    }
}

/// Writes `record` raw into a store with one entity, as an older release did, opens it
/// (which migrates it), checks it with `expect`, and again after a second open (the
/// migration was written: opening again changes nothing). Returns the records of a
/// snapshot built after, and the store.
async fn migrated_on_open(
    dir: &Path,
    record: &Record,
    expect: fn(&StateMachine),
) -> (Vec<Record>, StateMachine) {
    let (store, log, mut sm) = raft_store::open(dir, &identity()).expect("open");
    entity_with_reports(&mut sm, 0).await;
    drop((store, log, sm));
    write_raw(dir, record);

    let (store, log, sm) = raft_store::open(dir, &identity()).expect("open migrates");
    expect(&sm);
    let (_, migrated_digest) = sm.digest(DigestFreshness::Probe).await.expect("digest");
    drop((store, log, sm));
    let (_s, _l, sm) = raft_store::open(dir, &identity()).expect("open again");
    expect(&sm);
    assert_eq!(
        sm.digest(DigestFreshness::Probe).await.expect("digest").1,
        migrated_digest
    );
    let snapshot = sm.clone().build_snapshot().await.expect("build");
    let records = decode_snapshot(&snapshot.snapshot.read_all().expect("read the snapshot"));
    (records, sm)
}

#[tokio::test]
async fn an_older_activity_record_is_migrated_on_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (records, _sm) = migrated_on_open(dir.path(), &v1_record(), expect_migrated).await;
    assert!(
        !records.iter().any(|r| matches!(r, Record::ActivityV1(_))),
        "no ActivityV1 record is left to snapshot"
    );
}

/// The records of a snapshot file.
fn decode_snapshot(bytes: &[u8]) -> Vec<Record> {
    type File = (
        Option<raft_store::LogId>,
        raft_store::StoredMembership,
        Vec<Record>,
    );
    let (_, _, records): File =
        raft_store::codec::decode_bounded(bytes, raft_store::codec::Limit::Snapshot)
            .expect("a snapshot file");
    records
}

#[tokio::test]
async fn an_older_activity_record_in_a_snapshot_is_migrated_on_install() {
    let meta = one_node_meta(7);
    let records = vec![v1_record()];
    let seed = tempfile::tempdir().expect("tempdir");
    let data = raft_store::snapshot_data(&seed.path().join("v1.snap"), &meta, records.into_iter())
        .expect("write the snapshot");
    let dir = tempfile::tempdir().expect("tempdir");
    let (_s, _l, mut sm) = raft_store::open(dir.path(), &identity()).expect("open");
    sm.install_snapshot(&meta, data).await.expect("install");
    expect_migrated(&sm);
    let rebuilt = sm.clone().build_snapshot().await.expect("build");
    let records = decode_snapshot(&rebuilt.snapshot.read_all().expect("read the snapshot"));
    assert!(!records.iter().any(|r| matches!(r, Record::ActivityV1(_))));
    assert_eq!(
        records
            .iter()
            .filter(|r| matches!(r, Record::ActivityLine(_)))
            .count(),
        3
    );
}

/// A finished plan as a release before finished plans were history stored it: a row of the
/// state.
fn finished_plan_row() -> hub_engine::plan::Plan {
    use hub_engine::plan::{Plan, PlanKind, PlanStatus};
    Plan {
        id: "p-3-0".into(),
        entity: ENTITY.into(),
        environment: "prod".into(),
        kind: PlanKind::Install,
        from_version: None,
        to_version: "1.0.0".parse().ok(),
        from_config_sha256: None,
        to_config: Some(String::new()),
        secrets_revision: 0,
        artifacts: Vec::new(),
        reason: "newest release".into(),
        tasks: Plan::tasks_for(&PlanKind::Install),
        output: "installed\n".into(),
        failure: None,
        created_ms: 3,
        issued_ms: 3,
        started_ms: Some(4),
        ended_ms: Some(5),
        status: PlanStatus::Succeeded,
        cancel_reason: None,
        issued_index: 3,
    }
}

fn expect_plan_migrated(sm: &StateMachine) {
    let plan = finished_plan_row();
    let state = sm.shared().read().state.clone();
    assert!(state.plan(&plan.id).is_none(), "not a row of the state");
    assert_eq!(
        state.plan_outcome(&plan.id),
        Some(&hub_engine::plan_outcome::PlanOutcome::of(&plan))
    );
    assert_eq!(
        sm.history().finished_plan(&plan.id).expect("read"),
        Some(plan)
    );
    assert_eq!(sm.history().finished_plan("p-9-9").expect("read"), None);
}

#[tokio::test]
async fn a_finished_plan_stored_as_a_row_is_migrated_on_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let row = Record::Plan(finished_plan_row());
    let (records, sm) = migrated_on_open(dir.path(), &row, expect_plan_migrated).await;
    assert!(!records.iter().any(|r| matches!(r, Record::Plan(_))));
    assert_eq!(
        records
            .iter()
            .filter(|r| matches!(r, Record::FinishedPlan(_) | Record::PlanOutcome(_)))
            .count(),
        2
    );

    // A new follower gets the plan's history with the snapshot.
    let follower_dir = tempfile::tempdir().expect("tempdir");
    let follower = follower_of(&sm, follower_dir.path()).await;
    expect_plan_migrated(&follower);
}

#[tokio::test]
async fn a_finished_plan_row_in_an_older_snapshot_is_migrated_on_install() {
    let meta = one_node_meta(7);
    let records = vec![Record::Plan(finished_plan_row())];
    let seed = tempfile::tempdir().expect("tempdir");
    let data = raft_store::snapshot_data(&seed.path().join("old.snap"), &meta, records.into_iter())
        .expect("write the snapshot");
    let dir = tempfile::tempdir().expect("tempdir");
    let (_s, _l, mut sm) = raft_store::open(dir.path(), &identity()).expect("open");
    sm.install_snapshot(&meta, data).await.expect("install");
    expect_plan_migrated(&sm);
}

/// The memtable bytes of the state's column families right after RocksDB opens `dir`'s
/// database: what replaying its write-ahead log put back in memory (opened read-only, so
/// the replay is not flushed on open and stays measurable).
fn replayed_state_bytes(dir: &Path) -> u64 {
    let path = dir.join("db");
    let families = rocksdb::DB::list_cf(&rocksdb::Options::default(), &path).expect("list cfs");
    let db =
        rocksdb::DB::open_cf_for_read_only(&rocksdb::Options::default(), &path, &families, false)
            .expect("db");
    // The records are in one of two families (the active one and the one installs stage in).
    ["sm", "sm_b"]
        .into_iter()
        .map(|name| {
            let family = db.cf_handle(name).expect("a records family");
            db.property_int_value_cf(family, "rocksdb.cur-size-active-mem-table")
                .expect("property")
                .expect("a memtable size")
        })
        .sum()
}

#[tokio::test]
/// An install writes its records outside the write-ahead log and flushes them, so a restart
/// has nothing of them to replay into memory.
async fn an_installed_snapshot_is_flushed_so_a_restart_does_not_replay_it() {
    let meta = one_node_meta(9);
    let lines = (0..2_000u32).map(u64::from).map(|seq| {
        Record::ActivityLine(hub_engine::activity::ActivityLine {
            entity: ENTITY.into(),
            seq,
            time_ms: seq as i64,
            index: seq,
            kind: "report".into(),
            message: format!("{seq:0>120}"),
        })
    });
    let seed = tempfile::tempdir().expect("tempdir");
    let data = raft_store::snapshot_data(&seed.path().join("big.snap"), &meta, lines)
        .expect("write the snapshot");
    let snapshot = data.len();
    assert!(snapshot > 256 * 1024, "{snapshot} bytes");
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, log, mut sm) = raft_store::open(dir.path(), &identity()).expect("open");
    sm.install_snapshot(&meta, data).await.expect("install");
    drop((store, log, sm));
    let replayed = replayed_state_bytes(dir.path());
    assert!(
        replayed < snapshot / 8,
        "a restart replayed {replayed} bytes of a {snapshot}-byte install into memory"
    );
}

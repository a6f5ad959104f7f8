//! Crash safety: a child process appends and applies entries and is killed with SIGKILL at an
//! arbitrary point; the reopened store must hold the vote, every entry the child was told was
//! durable, and an applied state at least as new as what the child applied.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::vote::RaftLeaderId;
use openraft::RaftLogReader;
use raft_store::{NodeIdentity, Vote};

mod common;
use common::entry;

const CHILD_ENV: &str = "RAFT_STORE_CRASH_CHILD_DIR";

fn identity() -> NodeIdentity {
    NodeIdentity {
        node_id: 1,
        cluster_id: "crash".into(),
    }
}

/// The child: append + apply one entry at a time, printing what became durable/applied.
async fn child(dir: &Path, term: u64) {
    let (_store, mut log, mut sm) = raft_store::open(dir, &identity()).expect("open");
    log.save_vote(&Vote::new(term, 1)).await.expect("vote");
    println!("VOTE {term}");
    let start = log
        .get_log_state()
        .await
        .expect("log state")
        .last_log_id
        .map(|l| l.index + 1)
        .unwrap_or(1);
    // As openraft does on start: re-apply what is in the log but not yet in the state.
    let (applied, _) = sm.applied_state().await.expect("applied state");
    let from = applied.map(|l| l.index + 1).unwrap_or(1);
    for e in log
        .try_get_log_entries(from..start)
        .await
        .expect("read log")
    {
        sm.apply(futures::stream::iter([Ok((e, None))]))
            .await
            .expect("re-apply");
    }
    for index in start.. {
        let e = entry(term, index);
        log.blocking_append([e.clone()]).await.expect("append");
        println!("ACK {index}");
        sm.apply(futures::stream::iter([Ok((e, None))]))
            .await
            .expect("apply");
        println!("APPLIED {index}");
    }
}

#[test]
fn acknowledged_entries_survive_kill_9() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        let term: u64 = std::env::var("CRASH_TERM").unwrap().parse().unwrap();
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(child(Path::new(&dir), term));
        return;
    }
    let tmp = tempfile::TempDir::new().unwrap();
    let dir = tmp.path().join("node");
    let mut total_acked = 0;
    for (round, kill_after) in [(1u64, 40u64), (2, 7), (3, 120)] {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "acknowledged_entries_survive_kill_9",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &dir)
            .env("CRASH_TERM", round.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut acked, mut applied, mut voted) = (0u64, 0u64, false);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut new_acks = 0;
        while new_acks < kill_after {
            assert!(Instant::now() < deadline, "child too slow");
            let line = lines.next().expect("child exited early").unwrap();
            if let Some(i) = line.strip_prefix("ACK ") {
                acked = i.parse().unwrap();
                new_acks += 1;
            } else if let Some(i) = line.strip_prefix("APPLIED ") {
                applied = i.parse().unwrap();
            } else if line.contains("VOTE ") {
                voted = true;
            }
        }
        assert!(voted);
        // SIGKILL: no destructor, no flush, no clean RocksDB close.
        child.kill().unwrap();
        child.wait().unwrap();
        total_acked = acked;

        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let (_store, mut log, mut sm) = raft_store::open(&dir, &identity()).expect("reopen");
            let vote = log.read_vote().await.unwrap().expect("vote survived");
            assert_eq!(vote, Vote::new(round, 1), "round {round}");
            let state = log.get_log_state().await.unwrap();
            let last = state.last_log_id.expect("log survived").index;
            assert!(
                last >= acked,
                "round {round}: acknowledged {acked}, found only {last}"
            );
            let entries = log.try_get_log_entries(1..=acked).await.unwrap();
            assert_eq!(
                entries.len() as u64,
                acked,
                "round {round}: a gap in the acknowledged log"
            );
            for (i, e) in entries.iter().enumerate() {
                assert_eq!(e.log_id.index, i as u64 + 1);
            }
            let (last_applied, _) = sm.applied_state().await.unwrap();
            let last_applied = last_applied.map(|l| l.index).unwrap_or(0);
            assert!(
                last_applied >= applied,
                "round {round}: applied {applied}, found {last_applied}"
            );
            let shared = sm.shared();
            let s = shared.read();
            // Each entry creates one environment: the state is exactly the applied prefix.
            assert_eq!(s.state.environments().count() as u64, last_applied);
            assert_eq!(s.applied_index(), last_applied);
        });
    }
    assert!(total_acked > 0);
}

#[test]
fn a_data_dir_of_another_node_or_cluster_is_refused_untouched() {
    let tmp = tempfile::TempDir::new().unwrap();
    let dir = tmp.path().join("node");
    drop(raft_store::open(&dir, &identity()).unwrap());
    let listing = |d: &Path| {
        let mut v: Vec<_> = walk(d);
        v.sort();
        v
    };
    let before = listing(&dir);
    let other_node = NodeIdentity {
        node_id: 2,
        ..identity()
    };
    let err = raft_store::open(&dir, &other_node)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("belongs to node 1, not node 2"), "{err}");
    let other_cluster = NodeIdentity {
        cluster_id: "other".into(),
        ..identity()
    };
    let err = raft_store::open(&dir, &other_cluster)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("belongs to cluster"), "{err}");
    assert_eq!(listing(&dir), before, "a refused open changed files");

    let stranger = tmp.path().join("stranger");
    std::fs::create_dir_all(&stranger).unwrap();
    std::fs::write(stranger.join("x"), b"x").unwrap();
    let err = raft_store::open(&stranger, &identity())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("not a hub-node data dir"), "{err}");
}

fn walk(d: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        if m.is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push((e.path().display().to_string(), m.len()));
        }
    }
    out
}

const INSTALL_CHILD_ENV: &str = "RAFT_STORE_INSTALL_CHILD_DIR";
/// Snapshots the install test writes, installed in order across its rounds.
const SNAPSHOTS: u64 = 8;
const ENTITY: &str = "eid:prod:helmChart:web";

/// Snapshot `k`: at log index `10 k`, holding `lines_of(k)` Activity lines of one entity,
/// each stamped with `k`. About 18 MB: the install writes it in more than one batch.
fn snapshot_lines(k: u64) -> u64 {
    6_000 + 37 * k
}

fn install_meta(k: u64) -> raft_store::SnapshotMeta {
    let log_id = openraft::LogId::new(
        openraft::vote::leader_id_adv::CommittedLeaderId::new(1, 1),
        10 * k,
    );
    let nodes = std::collections::BTreeMap::from([(1u64, openraft::BasicNode::new("n1"))]);
    let membership = openraft::Membership::new(vec![[1u64].into()], nodes).expect("membership");
    raft_store::SnapshotMeta {
        last_log_id: Some(log_id),
        last_membership: raft_store::StoredMembership::new(Some(log_id), membership),
    }
}

fn write_install_snapshot(dir: &Path, k: u64) {
    let count = u32::try_from(snapshot_lines(k)).expect("a few thousand lines");
    let lines = (0..count).map(u64::from).map(|seq| {
        hub_engine::Record::ActivityLine(hub_engine::activity::ActivityLine {
            entity: ENTITY.into(),
            seq,
            time_ms: seq as i64,
            index: 10 * k,
            kind: "report".into(),
            message: format!("{k}:{seq}:{:0>3000}", 0),
        })
    });
    let path = dir.join(format!("{k}.snap"));
    raft_store::snapshot_data(&path, &install_meta(k), lines).expect("write a snapshot");
}

/// The install child: installs the snapshots after the one its store holds, in order,
/// printing each before and after.
async fn install_child(dir: &Path, snapshots: &Path) {
    let (_store, _log, mut sm) = raft_store::open(dir, &identity()).expect("open");
    let (applied, _) = sm.applied_state().await.expect("applied state");
    let from = applied.map(|l| l.index / 10 + 1).unwrap_or(1);
    for k in from..=SNAPSHOTS {
        let data = raft_store::SnapshotData::open(&snapshots.join(format!("{k}.snap")))
            .expect("open the snapshot");
        println!("INSTALLING {k}");
        sm.install_snapshot(&install_meta(k), data)
            .await
            .expect("install");
        println!("INSTALLED {k}");
    }
    println!("DONE");
}

/// The number of the snapshot the store in `dir` holds (0 for none), checked whole: its
/// last applied index, its history (every line of that snapshot, no other), and no records
/// left in the family an install stages in.
fn installed_snapshot(dir: &Path) -> u64 {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let k = rt.block_on(async {
        let (_store, _log, mut sm) = raft_store::open(dir, &identity()).expect("reopen");
        let (applied, _) = sm.applied_state().await.unwrap();
        let index = applied.map(|l| l.index).unwrap_or(0);
        assert_eq!(index % 10, 0, "applied {index}: not a snapshot's index");
        let k = index / 10;
        let lines = sm.history().activity_lines(ENTITY, usize::MAX).unwrap();
        let expected = if k == 0 { 0 } else { snapshot_lines(k) };
        assert_eq!(lines.len() as u64, expected, "snapshot {k}: history lines");
        for line in &lines {
            assert!(
                line.message.starts_with(&format!("{k}:{}:", line.seq)),
                "snapshot {k} holds a line of another: {}",
                &line.message[..20]
            );
        }
        k
    });
    // The store is closed: count the records in both families, as RocksDB holds them.
    let path = dir.join("db");
    let families = rocksdb::DB::list_cf(&rocksdb::Options::default(), &path).expect("list");
    let db =
        rocksdb::DB::open_cf_for_read_only(&rocksdb::Options::default(), &path, &families, false)
            .expect("open read-only");
    let mut counts: Vec<u64> = ["sm", "sm_b"]
        .into_iter()
        .map(|name| {
            let family = db.cf_handle(name).expect("a records family");
            db.iterator_cf(family, rocksdb::IteratorMode::Start).count() as u64
        })
        .collect();
    counts.sort();
    let expected = if k == 0 { 0 } else { snapshot_lines(k) };
    assert_eq!(
        counts,
        vec![0, expected],
        "snapshot {k}: records per family"
    );
    k
}

/// The table files of the store's RocksDB (a flush of the staged records writes one).
fn sst_files(dir: &Path) -> std::collections::BTreeSet<String> {
    std::fs::read_dir(dir.join("db"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".sst"))
        .collect()
}

/// What follows `tag` in `line`.
fn after<'a>(line: &'a str, tag: &str) -> Option<&'a str> {
    line.find(tag).map(|at| &line[at + tag.len()..])
}

/// Where a round kills the installing child.
#[derive(Debug, Clone, Copy)]
enum KillAt {
    /// As soon as it says an install began: clearing the staged family or staging.
    Start,
    /// Once the install wrote a RocksDB file: staging's flush or the switch.
    FirstFile,
    /// Once an install finished: clearing the replaced family, or the next install's start.
    Installed,
}

#[test]
fn an_install_killed_midway_leaves_the_old_state_or_the_new_one_whole() {
    if let Ok(dir) = std::env::var(INSTALL_CHILD_ENV) {
        let snapshots = std::env::var("INSTALL_SNAPSHOTS").unwrap();
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(install_child(Path::new(&dir), Path::new(&snapshots)));
        return;
    }
    let tmp = tempfile::TempDir::new().unwrap();
    let dir = tmp.path().join("node");
    let snapshots = tmp.path().join("snapshots");
    std::fs::create_dir_all(&snapshots).unwrap();
    for k in 1..=SNAPSHOTS {
        write_install_snapshot(&snapshots, k);
    }
    let mut held = 0;
    for kill_at in [
        KillAt::Start,
        KillAt::FirstFile,
        KillAt::Installed,
        KillAt::Start,
        KillAt::FirstFile,
    ] {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "an_install_killed_midway_leaves_the_old_state_or_the_new_one_whole",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(INSTALL_CHILD_ENV, &dir)
            .env("INSTALL_SNAPSHOTS", &snapshots)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let deadline = Instant::now() + Duration::from_secs(120);
        let (mut installing, mut installed) = (0, held);
        loop {
            assert!(Instant::now() < deadline, "child too slow");
            let line = lines.next().expect("child exited early").unwrap();
            // The harness prints the test's name on the child's first line, before its own.
            if let Some(k) = after(&line, "INSTALLING ") {
                installing = k.parse().unwrap();
                if matches!(kill_at, KillAt::Start) {
                    break;
                }
                if matches!(kill_at, KillAt::FirstFile) {
                    // Polled, not slept: a file the install writes is the condition.
                    let before = sst_files(&dir);
                    while sst_files(&dir).is_subset(&before) {
                        assert!(Instant::now() < deadline, "no file written");
                        std::thread::yield_now();
                    }
                    break;
                }
            } else if let Some(k) = after(&line, "INSTALLED ") {
                installed = k.parse().unwrap();
                if matches!(kill_at, KillAt::Installed) {
                    break;
                }
            }
        }
        // SIGKILL: no destructor, no flush, no clean RocksDB close.
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(installing <= SNAPSHOTS, "the rounds ran out of snapshots");
        let found = installed_snapshot(&dir);
        eprintln!("{kill_at:?}: installing {installing}, installed {installed}, found {found}");
        assert!(
            found == installed || found == installed + 1 && installed < SNAPSHOTS,
            "{kill_at:?}: installed {installed}, found {found}"
        );
        held = found;
    }
    assert!(held > 0, "no install survived");
}

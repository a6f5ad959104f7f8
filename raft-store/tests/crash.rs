//! Crash safety: a child process appends and applies entries and is killed with SIGKILL at an
//! arbitrary point; the reopened store must hold the vote, every entry the child was told was
//! durable, and an applied state at least as new as what the child applied.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
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

//! Backups (`hubctl snapshot save`, `hubctl snapshot restore`): a backup written from a live
//! store verifies, restores into a new data directory whose state digest is the backup's,
//! with a membership of the new node alone; a damaged, truncated or foreign file, a
//! non-empty directory and the old cluster's id are refused and change nothing.

use std::fs;
use std::path::{Path, PathBuf};

use openraft::storage::{RaftLogReader, RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use raft_store::backup::{self, BackupFile, BackupOrigin, RestoreTarget};
use raft_store::{DigestFreshness, NodeIdentity, Vote};

mod common;
use common::entry;

const CLUSTER: &str = "old";

fn origin() -> BackupOrigin {
    BackupOrigin {
        cluster_id: CLUSTER.into(),
        node_id: 2,
        node_version: "test".into(),
        created_ms: 1_700_000_000_000,
    }
}

/// A store in `dir` that applied `entries` environments (term 3), and its digest.
async fn store_with(dir: &Path, entries: u64) -> (raft_store::StateMachine, String) {
    let identity = NodeIdentity {
        node_id: 2,
        cluster_id: CLUSTER.into(),
    };
    let (_store, mut log, mut sm) = raft_store::open(dir, &identity).expect("open");
    log.save_vote(&Vote::new(3, 1)).await.expect("vote");
    for index in 1..=entries {
        let e = entry(3, index);
        log.blocking_append([e.clone()]).await.expect("append");
        sm.apply(futures::stream::iter([Ok((e, None))]))
            .await
            .expect("apply");
    }
    let (_, digest) = sm
        .digest(DigestFreshness::AtLeast(entries))
        .await
        .expect("digest");
    (sm, digest)
}

/// Writes a backup of `sm` to `path`.
fn save(sm: &raft_store::StateMachine, path: &Path) -> backup::BackupHeader {
    let file = fs::File::create(path).expect("create");
    backup::write_backup(sm, origin(), file).expect("write backup")
}

fn target(dir: PathBuf) -> RestoreTarget {
    RestoreTarget {
        data_dir: dir,
        node_id: 1,
        cluster_id: "new".into(),
        advertise: "127.0.0.1:7401".into(),
    }
}

#[tokio::test]
async fn a_backup_restores_into_a_new_one_node_cluster_with_the_same_digest() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (sm, digest) = store_with(&tmp.path().join("live"), 40).await;
    let path = tmp.path().join("b.snap");
    let written = save(&sm, &path);
    assert_eq!((written.index(), written.term()), (40, 3));
    assert_eq!(written.digest, digest);

    let opened = BackupFile::open(&path).expect("verify");
    assert_eq!(opened.header(), &written);
    assert_eq!(opened.len(), fs::metadata(&path).expect("meta").len());

    let restored_dir = tmp.path().join("restored");
    let restored = backup::restore(&opened, &target(restored_dir.clone()))
        .await
        .expect("restore");
    assert_eq!(restored, digest);

    // The directory opens as node 1 of the new cluster, at the backup's entry, with a log
    // that starts after it, a later vote, and a membership of node 1 alone.
    let identity = NodeIdentity {
        node_id: 1,
        cluster_id: "new".into(),
    };
    let (_store, mut log, mut sm) = raft_store::open(&restored_dir, &identity).expect("reopen");
    let (applied, membership) = sm.applied_state().await.expect("applied");
    assert_eq!(applied.map(|l| l.index), Some(40));
    let voters: Vec<u64> = membership.membership().voter_ids().collect();
    assert_eq!(voters, [1]);
    let state = log.get_log_state().await.expect("log state");
    assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(40));
    assert_eq!(state.last_log_id.map(|l| l.index), Some(40));
    let vote = log.read_vote().await.expect("vote").expect("a vote");
    assert_eq!(vote, Vote::new(4, 1));
    assert_eq!(sm.shared().read().state.environments().count(), 40);
}

#[tokio::test]
async fn a_damaged_truncated_or_foreign_file_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (sm, _) = store_with(&tmp.path().join("live"), 5).await;
    let path = tmp.path().join("b.snap");
    save(&sm, &path);
    let bytes = fs::read(&path).expect("read");
    let refused = |name: &str, bytes: &[u8], needle: &str| {
        let p = tmp.path().join(name);
        fs::write(&p, bytes).expect("write");
        let e = BackupFile::open(&p).expect_err(name).to_string();
        assert!(e.contains(needle), "{name}: {e}");
        assert!(e.contains(name), "{name}: the error names the file: {e}");
    };
    let mut flipped = bytes.clone();
    for at in [20, flipped.len() - 40] {
        flipped[at] ^= 0x40;
    }
    refused("flipped.snap", &flipped, "checksum mismatch");
    refused("cut.snap", &bytes[..bytes.len() - 100], "checksum mismatch");
    refused("short.snap", &bytes[..6], "too short");
    refused("header-only.snap", &bytes[..40], "truncated");
    refused(
        "other.snap",
        b"PK\x03\x04 a zip file, not a backup",
        "not a hub backup",
    );
    let mut huge = bytes.clone();
    huge[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
    refused("huge-header.snap", &huge, "declares a header of");

    // Another store format: the header says so (re-checksummed, so the format is the reason).
    let header_len = u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
    let json = std::str::from_utf8(&bytes[12..12 + header_len]).expect("utf-8");
    let newer = json.replace("\"store_format\":1", "\"store_format\":9");
    assert_ne!(newer, json);
    let mut other = bytes[..8].to_vec();
    other.extend_from_slice(&(newer.len() as u32).to_be_bytes());
    other.extend_from_slice(newer.as_bytes());
    other.extend_from_slice(&bytes[12 + header_len..bytes.len() - 32]);
    use sha2::Digest as _;
    let sum = sha2::Sha256::digest(&other);
    other.extend_from_slice(&sum);
    refused("newer.snap", &other, "store format 9");
}

#[tokio::test]
async fn a_restore_refuses_a_non_empty_directory_and_the_old_cluster_id() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (sm, _) = store_with(&tmp.path().join("live"), 5).await;
    let path = tmp.path().join("b.snap");
    save(&sm, &path);
    let opened = BackupFile::open(&path).expect("verify");

    let busy = tmp.path().join("busy");
    fs::create_dir(&busy).expect("mkdir");
    fs::write(busy.join("keep.txt"), b"mine").expect("write");
    let e = backup::restore(&opened, &target(busy.clone()))
        .await
        .expect_err("non-empty");
    assert!(e.to_string().contains("not empty"), "{e}");
    let left: Vec<_> = fs::read_dir(&busy).expect("ls").collect();
    assert_eq!(left.len(), 1, "nothing was added");

    let same = RestoreTarget {
        cluster_id: CLUSTER.into(),
        ..target(tmp.path().join("same"))
    };
    let e = backup::restore(&opened, &same)
        .await
        .expect_err("same cluster id");
    assert!(e.to_string().contains("needs a new id"), "{e}");
    assert!(!tmp.path().join("same").exists(), "nothing was created");
}

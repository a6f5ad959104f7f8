//! Files at rest (SECURITY "At rest", SPEC S3): the data directory is owner-only whatever the
//! umask left, and a corrupt or hostile value in the store or the snapshot file is an error,
//! never a panic or an abort.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftSnapshotBuilder, RaftStateMachine};
use raft_store::{NodeIdentity, StoreError, Vote};

mod common;
use common::entry;

fn identity() -> NodeIdentity {
    NodeIdentity {
        node_id: 1,
        cluster_id: "at-rest".into(),
    }
}

/// Every path under `dir` with a group or other permission bit, with its mode.
fn loose(dir: &Path) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = fs::symlink_metadata(&p).unwrap();
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            out.push((p.display().to_string(), mode));
        }
        if meta.is_dir() {
            stack.extend(fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
    }
    out
}

async fn write_some(dir: &Path) {
    let (_store, mut log, mut sm) = raft_store::open(dir, &identity()).expect("open");
    log.save_vote(&Vote::new(1, 1)).await.expect("vote");
    for index in 1..=3 {
        let e = entry(1, index);
        log.blocking_append([e.clone()]).await.expect("append");
        sm.apply(futures::stream::iter([Ok((e, None))]))
            .await
            .expect("apply");
    }
    sm.build_snapshot().await.expect("snapshot");
}

#[tokio::test]
async fn the_data_directory_is_owner_only_and_loose_modes_are_fixed() {
    // As hub-node does first thing: RocksDB creates its files with the umask.
    raft_store::private::restrict_umask();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node-1");
    write_some(&dir).await;
    assert_eq!(loose(&dir), Vec::<(String, u32)>::new());
    for file in ["hub-node.json", "snapshots/current.snap"] {
        let mode = fs::metadata(dir.join(file)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{file}");
    }
    assert_eq!(
        fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );

    // What an older release under umask 022 left: readable by everyone. The next open
    // tightens it before serving.
    for p in [dir.clone(), dir.join("db"), dir.join("snapshots")] {
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    }
    for f in ["hub-node.json", "snapshots/current.snap"] {
        fs::set_permissions(dir.join(f), fs::Permissions::from_mode(0o644)).unwrap();
    }
    assert!(!loose(&dir).is_empty());
    drop(raft_store::open(&dir, &identity()).expect("reopen"));
    assert_eq!(loose(&dir), Vec::<(String, u32)>::new());
}

/// The 11-byte length bomb of issue 14 in a value: format byte, varint 2^45, one byte.
fn bomb() -> Vec<u8> {
    let mut b = vec![raft_store::codec::FORMAT_VERSION, 0xfd];
    b.extend_from_slice(&(1u64 << 45).to_le_bytes());
    b.push(b'x');
    b
}

#[tokio::test]
async fn a_hostile_snapshot_file_or_identity_is_an_error_not_an_abort() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node-1");
    write_some(&dir).await;
    fs::write(dir.join("snapshots/current.snap"), bomb()).unwrap();
    match raft_store::open(&dir, &identity()) {
        Err(StoreError::Corrupt { what, .. }) => assert!(what.contains("current.snap"), "{what}"),
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("a corrupt snapshot file was accepted"),
    }
    fs::remove_file(dir.join("snapshots/current.snap")).unwrap();

    // An identity file that is not ours (or huge) is refused before anything is touched.
    fs::write(dir.join("hub-node.json"), vec![b' '; 1 << 20]).unwrap();
    let err = raft_store::open(&dir, &identity()).err().expect("refused");
    assert!(err.to_string().contains("hub-node.json"), "{err}");
}

#[tokio::test]
async fn an_installed_snapshot_with_a_length_bomb_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (_store, _log, mut sm) = raft_store::open(&tmp.path().join("n"), &identity()).unwrap();
    let meta = raft_store::SnapshotMeta::default();
    let data = raft_store::SnapshotData::create(&tmp.path().join("bomb.snap"), &bomb()).unwrap();
    let err = sm.install_snapshot(&meta, data).await.expect_err("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    // The state is untouched and still serves.
    let (applied, _) = sm.applied_state().await.unwrap();
    assert_eq!(applied, None);
}

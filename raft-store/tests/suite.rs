//! openraft's storage conformance suite against the RocksDB store.

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;
use raft_store::{LogStore, NodeIdentity, StateMachine, TypeConfig};
use tempfile::TempDir;

mod common;
use common::entry;

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError<TypeConfig>> {
        let dir = TempDir::new().expect("temp dir");
        let identity = NodeIdentity {
            node_id: 1,
            cluster_id: "suite".into(),
        };
        let (_store, log, sm) =
            raft_store::open(&dir.path().join("node"), &identity).expect("open store");
        Ok((dir, log, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite() {
    Suite::test_all(Builder).await.expect("storage suite");
}

/// The committed log id is written with the next append, not on its own: read back at once
/// it is the one saved; after a restart it is the one the last append carried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_committed_log_id_is_written_with_the_next_append() {
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use openraft::RaftLogReader;

    let tmp = TempDir::new().expect("temp dir");
    let dir = tmp.path().join("node");
    let identity = NodeIdentity {
        node_id: 1,
        cluster_id: "committed".into(),
    };
    let id = |index| entry(1, index).log_id;
    {
        let (_store, mut log, _sm) = raft_store::open(&dir, &identity).expect("open store");
        assert_eq!(log.read_committed().await.expect("read"), None);
        log.blocking_append([entry(1, 1), entry(1, 2)])
            .await
            .expect("append");
        log.save_committed(Some(id(2))).await.expect("save");
        assert_eq!(log.read_committed().await.expect("read"), Some(id(2)));
        log.blocking_append([entry(1, 3)]).await.expect("append");
        log.save_committed(Some(id(3))).await.expect("save");
        assert_eq!(log.read_committed().await.expect("read"), Some(id(3)));
        assert_eq!(
            log.try_get_log_entries(1..4).await.expect("entries").len(),
            3
        );
    }
    // Entry 3's append carried 2; 3 itself waits for an append that never came.
    let (_store, mut log, _sm) = raft_store::open(&dir, &identity).expect("reopen store");
    assert_eq!(log.read_committed().await.expect("read"), Some(id(2)));
}

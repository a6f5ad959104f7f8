//! openraft's storage conformance suite against the RocksDB store.

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;
use raft_store::{LogStore, NodeIdentity, StateMachine, TypeConfig};
use tempfile::TempDir;

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

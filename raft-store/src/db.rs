//! Opening the node's RocksDB instance and checking that the data directory is this node's.

use std::fs;
use std::path::Path;

use rocksdb::{ColumnFamilyDescriptor, Options, DB};
use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::flusher::Flusher;
use crate::log_store::LogStore;
use crate::state_machine::StateMachine;
use crate::store::{Store, CF_LOG, CF_META, CF_SM, CF_SM_B, CF_SM_META};

const IDENTITY_FILE: &str = "hub-node.json";
/// `hub-node.json` is a few dozen bytes; anything much larger is not ours.
const MAX_IDENTITY_BYTES: usize = 64 << 10;

/// Who owns a data directory: written when the directory is first used, checked on every
/// start before anything in it is touched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeIdentity {
    /// The Raft node id.
    pub node_id: u64,
    /// The cluster it belongs to.
    pub cluster_id: String,
}

/// Opens (or creates) the store in `dir` for `identity`.
///
/// A directory that belongs to another node id or cluster, or that holds files but no hub
/// identity, is refused before anything in it is changed.
pub fn open(
    dir: &Path,
    identity: &NodeIdentity,
) -> Result<(Store, LogStore, StateMachine), StoreError> {
    let io = |cause| StoreError::Io {
        path: dir.to_path_buf(),
        cause,
    };
    let id_path = dir.join(IDENTITY_FILE);
    let existing = if dir.exists() {
        match crate::snapshot::read_limited(&id_path, MAX_IDENTITY_BYTES) {
            Ok(bytes) => Some(serde_json::from_slice::<NodeIdentity>(&bytes).map_err(|e| {
                StoreError::IdentityMismatch(format!(
                    "{}: unreadable identity: {e}",
                    id_path.display()
                ))
            })?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let non_empty = fs::read_dir(dir).map_err(io)?.next().is_some();
                if non_empty {
                    return Err(StoreError::IdentityMismatch(format!(
                        "data dir {} is not empty and is not a hub-node data dir (no {IDENTITY_FILE})",
                        dir.display()
                    )));
                }
                None
            }
            Err(e) => return Err(io(e)),
        }
    } else {
        None
    };
    if let Some(found) = &existing {
        if found.node_id != identity.node_id {
            return Err(StoreError::IdentityMismatch(format!(
                "data dir {} belongs to node {}, not node {}",
                dir.display(),
                found.node_id,
                identity.node_id
            )));
        }
        if found.cluster_id != identity.cluster_id {
            return Err(StoreError::IdentityMismatch(format!(
                "data dir {} belongs to cluster {:?}, not {:?}",
                dir.display(),
                found.cluster_id,
                identity.cluster_id
            )));
        }
    }

    // Owner only, and whatever an earlier release or umask left is tightened (SECURITY).
    crate::private::create_private_dir(dir).map_err(io)?;
    crate::private::restrict_tree(dir).map_err(io)?;
    let db_path = dir.join("db");
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    opts.set_max_background_jobs(2);
    opts.set_keep_log_file_num(4);
    // Bound the WAL so a quiet state-machine column family does not pin old WAL files.
    opts.set_max_total_wal_size(64 << 20);
    let cfs = [CF_LOG, CF_META, CF_SM, CF_SM_B, CF_SM_META]
        .into_iter()
        .map(|name| ColumnFamilyDescriptor::new(name, Options::default()));
    let db = DB::open_cf_descriptors(&opts, &db_path, cfs).map_err(|cause| StoreError::Rocks {
        path: db_path.clone(),
        cause,
    })?;
    let store = Store::new(db, dir);

    if existing.is_none() {
        let bytes =
            serde_json::to_vec_pretty(identity).map_err(|e| io(std::io::Error::other(e)))?;
        crate::snapshot::write_atomically(&id_path, &bytes)?;
    }

    let flusher = Flusher::start(store.db.clone());
    let log = LogStore::new(store.db.clone(), flusher);
    let sm = StateMachine::open(store.clone())?;
    Ok((store, log, sm))
}

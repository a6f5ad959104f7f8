//! Installing a snapshot from the leader in bounded memory, atomically.
//!
//! The state's records live in one of two column families ([`RecordSlot`]); `sm_meta` names
//! the active one. An install:
//! 1. clears the inactive family of whatever an interrupted install left there;
//! 2. decodes the snapshot record by record into the new [`State`] and into write batches of
//!    at most [`STAGE_BATCH_BYTES`] to the inactive family, written without the write-ahead
//!    log: nothing reads that family, so nothing needs them before step 3;
//! 3. flushes the family, which syncs its new files: the records are durable;
//! 4. switches ([`switch`]): one synced write to `sm_meta` names the family active, with the
//!    snapshot's last applied log id and membership. The caller does it while holding the
//!    state's write lock and replaces the state in memory under the same lock, so a reader
//!    sees the old state with the old family or the new state with the new one;
//! 5. clears the family that was active ([`clear`]).
//!
//! A crash before step 4 leaves the old state whole, and the next open clears the staged
//! family; a crash after it leaves the new state whole. Memory stays the new state plus one
//! batch and RocksDB's memtables: the install of one snapshot-sized batch it replaces held
//! the batch and its memtable copy too (8.7 GiB at 100,000 entities with history, for a
//! 2.8 GB snapshot; docs/BENCHMARKS.md).

use std::io;

use hub_engine::{Residence, State};
use rocksdb::{WriteBatch, WriteOptions};

use crate::codec;
use crate::error::io_err;
use crate::snapshot::{self, SnapshotDecodeError};
use crate::store::{
    RecordSlot, Store, CF_SM_META, KEY_LAST_APPLIED, KEY_MEMBERSHIP, KEY_RECORD_SLOT,
};
use crate::types::{LogId, SnapshotData, SnapshotMeta, StoredMembership};

/// Bytes of records per write to the staged family: what an install holds beyond the new
/// state and RocksDB's memtables.
pub(crate) const STAGE_BATCH_BYTES: usize = 16 << 20;

/// The first key of every record and the first past them: record keys start with a table
/// tag below 0xff.
const RECORD_RANGE: ([u8; 1], [u8; 1]) = ([0], [0xff]);

/// A snapshot staged by [`stage`]: its records durable in `slot`'s family, its state in
/// memory.
pub(crate) struct Staged {
    /// The decoded state, indexes rebuilt.
    pub(crate) state: State,
    /// The family its records are in (the inactive one when staged).
    pub(crate) slot: RecordSlot,
    /// The last log id the snapshot reflects.
    pub(crate) last_applied: Option<LogId>,
    /// The membership it holds.
    pub(crate) membership: StoredMembership,
    /// Which staging wrote it ([`Store::stagings`]).
    staging: u64,
}

/// Why a snapshot could not be staged.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// The file is not a snapshot this node reads, or not the one its header names: refuse it.
    #[error(transparent)]
    Snapshot(#[from] SnapshotDecodeError),
    /// This node's store failed to write it.
    #[error("writing the staged snapshot to the store: {0}")]
    Store(#[from] rocksdb::Error),
    /// The staging thread did not finish (it panicked or the runtime shut down): a fault of
    /// this node, not of the file.
    #[error("the staging thread did not finish: {0}")]
    Interrupted(String),
}

/// Steps 1 to 3: stages `snapshot`'s records in the inactive family and decodes its state,
/// checking the whole file on the way ([`snapshot::decode_each`]) and that it is at
/// `meta`'s log id. Blocking. Records of an older format are stored as this release's
/// ([`hub_engine::Record::migrated`]), as a node's own store is migrated on open.
pub(crate) fn stage(
    store: &Store,
    meta: &SnapshotMeta,
    snapshot: &SnapshotData,
) -> Result<Staged, StageError> {
    // One staging at a time: the inactive family has one writer.
    let mut stagings = store.stagings.lock().unwrap_or_else(|p| p.into_inner());
    *stagings += 1;
    let staging = *stagings;
    let slot = store.slot().other();
    let family = store.family(slot.family_name());
    store
        .db
        .delete_range_cf(family, RECORD_RANGE.0, RECORD_RANGE.1)?;
    let mut unlogged = WriteOptions::default();
    unlogged.disable_wal(true);
    let mut state = State::new();
    let mut batch = WriteBatch::default();
    let mut value = Vec::new();
    // A failed write of this node's store, told apart from a bad file.
    let mut failed = None;
    let decoded = snapshot::decode_each(snapshot, |record, body| {
        if record.is_legacy() {
            for current in record.clone().migrated() {
                batch.put_cf(family, current.key().to_bytes(), codec::encode(&current));
            }
            state.insert_record(record);
        } else {
            value.clear();
            value.push(codec::FORMAT_VERSION);
            value.extend_from_slice(body);
            let key = record.key();
            batch.put_cf(family, key.to_bytes(), &value);
            // History stays in the store only, as on open: most of a large snapshot's
            // records, so the state is not asked to look at them.
            if key.residence() == Residence::State {
                state.insert_record(record);
            }
        }
        if batch.size_in_bytes() >= STAGE_BATCH_BYTES {
            if let Err(e) = store.db.write_opt(std::mem::take(&mut batch), &unlogged) {
                let text = e.to_string();
                failed = Some(e);
                return Err(io::Error::other(text));
            }
        }
        Ok(())
    });
    let (last_applied, membership) = match (decoded, failed) {
        (_, Some(store_error)) => return Err(StageError::Store(store_error)),
        (decoded, None) => decoded?,
    };
    if last_applied != meta.last_log_id {
        return Err(
            SnapshotDecodeError::from(codec::CodecError::Malformed(format!(
                "the file is at {last_applied:?} but its header says {:?}",
                meta.last_log_id
            )))
            .into(),
        );
    }
    store.db.write_opt(batch, &unlogged)?;
    // Written without the write-ahead log: a flush writes and syncs the family's files.
    store.db.flush_cf(family)?;
    state.rebuild_indexes();
    Ok(Staged {
        state,
        slot,
        last_applied,
        membership,
        staging,
    })
}

/// Step 4: one synced write names `staged`'s family active with its last applied log id and
/// membership; then the store reads that family. The caller holds the state's write lock.
///
/// Refused if another staging began since `staged`'s (its records may be overwritten): the
/// caller stages again.
pub(crate) fn switch(store: &Store, staged: &Staged) -> io::Result<()> {
    let stagings = store.stagings.lock().unwrap_or_else(|p| p.into_inner());
    if *stagings != staged.staging {
        return Err(io::Error::other(format!(
            "staging {} was followed by staging {}: its records are not the staged family's",
            staged.staging, *stagings
        )));
    }
    assert_ne!(
        staged.slot,
        store.slot(),
        "switching to the active records family"
    );
    let meta = store.family(CF_SM_META);
    let mut batch = WriteBatch::default();
    batch.put_cf(meta, KEY_RECORD_SLOT, codec::encode(&staged.slot));
    batch.put_cf(meta, KEY_LAST_APPLIED, codec::encode(&staged.last_applied));
    batch.put_cf(meta, KEY_MEMBERSHIP, codec::encode(&staged.membership));
    let mut sync = WriteOptions::default();
    sync.set_sync(true);
    store.db.write_opt(batch, &sync).map_err(io_err)?;
    store.set_slot(staged.slot);
    drop(stagings);
    Ok(())
}

/// Step 5, and on open the leftovers of an interrupted install: deletes every record of
/// `slot`'s family (which must not be the active one) and compacts it, so its disk space
/// comes back. Blocking. A reader's RocksDB snapshot taken before keeps what it reads.
///
/// Counts as a staging ([`Store::stagings`]): a snapshot staged before can no longer switch.
pub(crate) fn clear(store: &Store, slot: RecordSlot) -> Result<(), rocksdb::Error> {
    let mut stagings = store.stagings.lock().unwrap_or_else(|p| p.into_inner());
    *stagings += 1;
    assert_ne!(slot, store.slot(), "clearing the active records family");
    let family = store.family(slot.family_name());
    store
        .db
        .delete_range_cf(family, RECORD_RANGE.0, RECORD_RANGE.1)?;
    store
        .db
        .compact_range_cf(family, Some(RECORD_RANGE.0), Some(RECORD_RANGE.1));
    Ok(())
}

/// Whether `slot`'s family holds any record.
pub(crate) fn holds_records(store: &Store, slot: RecordSlot) -> Result<bool, rocksdb::Error> {
    let mut iter = store.db.raw_iterator_cf(store.family(slot.family_name()));
    iter.seek_to_first();
    let any = iter.valid();
    iter.status()?;
    Ok(any)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use hub_engine::activity::ActivityLine;
    use hub_engine::Record;
    use openraft::vote::RaftLeaderId;

    use super::*;
    use crate::db::NodeIdentity;
    use crate::store::CF_SM_B;
    use crate::types::SnapshotMeta;

    const ENTITY: &str = "eid:prod:helmChart:web";

    /// The records `slot`'s family holds.
    fn records_in(store: &Store, slot: RecordSlot) -> usize {
        let family = store.family(slot.family_name());
        store
            .db
            .iterator_cf(family, rocksdb::IteratorMode::Start)
            .count()
    }

    fn identity() -> NodeIdentity {
        NodeIdentity {
            node_id: 1,
            cluster_id: "install".into(),
        }
    }

    /// Snapshot `k` at index `k`: `lines` Activity lines of one entity, stamped with `k`.
    fn snapshot(dir: &Path, k: u64, lines: u32) -> (SnapshotMeta, SnapshotData) {
        let log_id = openraft::LogId::new(
            openraft::vote::leader_id_adv::CommittedLeaderId::new(1, 1),
            k,
        );
        let nodes = std::collections::BTreeMap::from([(1u64, openraft::BasicNode::new("n1"))]);
        let membership = openraft::Membership::new(vec![[1u64].into()], nodes).unwrap();
        let meta = SnapshotMeta {
            last_log_id: Some(log_id),
            last_membership: StoredMembership::new(Some(log_id), membership),
        };
        let records = (0..lines).map(u64::from).map(|seq| {
            Record::ActivityLine(ActivityLine {
                entity: ENTITY.into(),
                seq,
                time_ms: 0,
                index: k,
                kind: "report".into(),
                message: format!("{k}"),
            })
        });
        let path = dir.join(format!("{k}.snap"));
        let data = snapshot::snapshot_data(&path, &meta, records).unwrap();
        (meta, data)
    }

    /// Opens the store in `dir` and returns its last applied index, the stamps of its
    /// history lines, and the records in each family (the active one first).
    fn reopened(dir: &Path) -> (u64, Vec<String>, [usize; 2]) {
        let (store, _log, sm) = crate::open(dir, &identity()).unwrap();
        let applied = sm.shared().read().applied_index();
        let stamps = sm
            .history()
            .activity_lines(ENTITY, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|line| line.message)
            .collect();
        let count = |slot| records_in(&store, slot);
        let families = [count(store.slot()), count(store.slot().other())];
        (applied, stamps, families)
    }

    /// A store that installed snapshot 1 (300 lines), then staged snapshot 2 (200 lines)
    /// with `then` done after staging; the store is then closed as a crash leaves it.
    fn staged_then(dir: &Path, then: impl FnOnce(&Store, &Staged)) {
        let (store, _log, _sm) = crate::open(&dir.join("node"), &identity()).unwrap();
        let (meta, first) = snapshot(dir, 1, 300);
        switch(&store, &stage(&store, &meta, &first).unwrap()).unwrap();
        let (meta, second) = snapshot(dir, 2, 200);
        then(&store, &stage(&store, &meta, &second).unwrap());
    }

    #[test]
    fn a_staged_snapshot_that_never_switched_is_deleted_on_open() {
        let dir = tempfile::tempdir().unwrap();
        staged_then(dir.path(), |_, _| {});
        let (applied, stamps, families) = reopened(&dir.path().join("node"));
        assert_eq!(applied, 1);
        assert_eq!(stamps, vec!["1".to_string(); 300]);
        assert_eq!(families, [300, 0], "the staged records are deleted");
    }

    #[test]
    fn after_the_switch_the_new_state_is_whole_and_the_replaced_one_is_deleted_on_open() {
        let dir = tempfile::tempdir().unwrap();
        staged_then(dir.path(), |store, staged| switch(store, staged).unwrap());
        let (applied, stamps, families) = reopened(&dir.path().join("node"));
        assert_eq!(applied, 2);
        assert_eq!(stamps, vec!["2".to_string(); 200]);
        assert_eq!(families, [200, 0], "the replaced records are deleted");
        // And opened again: nothing changes.
        assert_eq!(reopened(&dir.path().join("node")), (2, stamps, [200, 0]));
    }

    #[test]
    fn a_staging_overwritten_by_a_later_one_or_a_clear_cannot_switch() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _log, _sm) = crate::open(&dir.path().join("node"), &identity()).unwrap();
        let (meta, first) = snapshot(dir.path(), 1, 30);
        let (meta2, second) = snapshot(dir.path(), 2, 20);
        let earlier = stage(&store, &meta, &first).unwrap();
        let later = stage(&store, &meta2, &second).unwrap();
        let err = switch(&store, &earlier).unwrap_err().to_string();
        assert!(err.contains("was followed by staging"), "{err}");
        assert_eq!(
            store.slot(),
            RecordSlot::Sm,
            "a refused switch changes nothing"
        );
        clear(&store, later.slot).unwrap();
        assert!(switch(&store, &later).is_err(), "its records were deleted");
        let again = stage(&store, &meta2, &second).unwrap();
        switch(&store, &again).unwrap();
        assert_eq!(store.slot(), RecordSlot::SmB);
    }

    #[tokio::test]
    async fn raft_installs_a_staged_snapshot_by_switching_and_a_discarded_one_is_deleted() {
        use openraft::storage::RaftStateMachine;
        let dir = tempfile::tempdir().unwrap();
        let (store, _log, mut sm) = crate::open(&dir.path().join("node"), &identity()).unwrap();
        let (meta, data) = snapshot(dir.path(), 1, 40);
        sm.stage_snapshot(&meta, data).await.unwrap();
        // The install switches to what was staged: it does not read the file again (this
        // one is not a snapshot at all), only renames it into place.
        let garbage = SnapshotData::create(&dir.path().join("garbage"), b"not read").unwrap();
        sm.install_snapshot(&meta, garbage).await.unwrap();
        assert_eq!(sm.shared().read().applied_index(), 1);
        assert_eq!(sm.history().activity_lines(ENTITY, 100).unwrap().len(), 40);
        let count = |slot| records_in(&store, slot);
        assert_eq!((count(store.slot()), count(store.slot().other())), (40, 0));

        // Staged, then not installed: discarded, its records deleted, the state unchanged.
        let (meta, data) = snapshot(dir.path(), 2, 25);
        sm.stage_snapshot(&meta, data).await.unwrap();
        assert_eq!(count(store.slot().other()), 25);
        sm.discard_staged().await;
        assert_eq!((count(store.slot()), count(store.slot().other())), (40, 0));
        assert_eq!(sm.shared().read().applied_index(), 1);
    }

    #[test]
    fn a_file_at_another_index_than_its_header_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _log, _sm) = crate::open(&dir.path().join("node"), &identity()).unwrap();
        let (_, data) = snapshot(dir.path(), 1, 3);
        let (other_meta, _) = snapshot(dir.path(), 2, 3);
        let err = stage(&store, &other_meta, &data).err().unwrap();
        assert!(
            matches!(&err, StageError::Snapshot(_)) && err.to_string().contains("header says"),
            "{err}"
        );
    }

    #[test]
    fn staging_writes_every_record_flushed_and_leaves_the_active_family_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _log, _sm) = crate::open(&dir.path().join("node"), &identity()).unwrap();
        // Lines of about 4 KiB: more than two batches' worth.
        let lines = u32::try_from(3 * STAGE_BATCH_BYTES / 4096).unwrap();
        let log_id = openraft::LogId::new(
            openraft::vote::leader_id_adv::CommittedLeaderId::new(1, 1),
            7,
        );
        let meta = SnapshotMeta {
            last_log_id: Some(log_id),
            last_membership: StoredMembership::default(),
        };
        let records = (0..lines).map(u64::from).map(|seq| {
            Record::ActivityLine(ActivityLine {
                entity: ENTITY.into(),
                seq,
                time_ms: 0,
                index: 7,
                kind: "report".into(),
                message: format!("{seq:0>4000}"),
            })
        });
        let data = snapshot::snapshot_data(&dir.path().join("big.snap"), &meta, records).unwrap();
        let staged = stage(&store, &meta, &data).unwrap();
        assert_eq!(staged.last_applied, Some(log_id));
        assert_eq!(staged.slot, RecordSlot::SmB);
        // Staged, not switched: the active family is still the empty one.
        assert_eq!(store.slot(), RecordSlot::Sm);
        assert_eq!(records_in(&store, RecordSlot::SmB), lines as usize);
        // Written without the log and flushed: nothing of it is in a memtable.
        let in_memory = store
            .db
            .property_int_value_cf(store.family(CF_SM_B), "rocksdb.cur-size-all-mem-tables")
            .unwrap()
            .unwrap();
        assert!(in_memory < 64 << 10, "{in_memory} bytes left in memtables");
    }
}

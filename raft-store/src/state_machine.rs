//! The replicated state machine: applies committed entries to [`hub_engine::State`] and
//! persists what changed together with `last_applied` in one RocksDB batch.

use std::collections::BTreeSet;
use std::io;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use futures::{Stream, StreamExt};
use hub_engine::{CommandOutput, HistoryWrite, Record, RecordKey, Residence, State, Trigger};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, RaftSnapshotBuilder};
use rocksdb::{WriteBatch, WriteOptions};

use crate::codec::{self, Limit};
use crate::digest::{DigestCache, DigestError, DigestFreshness};
use crate::error::{io_err, StoreError};
use crate::history::History;
use crate::install;
use crate::snapshot;
use crate::store::{RecordSlot, Store, KEY_LAST_APPLIED, KEY_MEMBERSHIP, KEY_RECORD_SLOT};
use crate::types::{
    LogId, Response, Snapshot, SnapshotData, SnapshotMeta, StoredMembership, TypeConfig,
};

/// The applied state with the log position it reflects.
#[derive(Debug, Default)]
pub struct AppliedState {
    /// The domain state.
    pub state: State,
    /// The last log id applied to it.
    pub last_applied: Option<LogId>,
    /// The last membership applied.
    pub membership: StoredMembership,
}

impl AppliedState {
    /// The applied log index (0 before anything was applied).
    pub fn applied_index(&self) -> u64 {
        self.last_applied.as_ref().map(|l| l.index).unwrap_or(0)
    }
}

/// A read handle on the applied state, shared with the node's API handlers.
#[derive(Clone, Default)]
pub struct SharedState(Arc<RwLock<AppliedState>>);

impl SharedState {
    /// Locks the state for reading. Hold the guard briefly: apply waits for it.
    pub fn read(&self) -> RwLockReadGuard<'_, AppliedState> {
        // A poisoned lock means apply panicked mid-way; the process must not serve reads.
        self.0.read().expect("state lock poisoned: apply panicked")
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, AppliedState> {
        self.0.write().expect("state lock poisoned: apply panicked")
    }
}

/// What the state machine tells the node after applying (for the leader's loops and
/// long-polls). Lossy by design: a receiver that lags re-reads the whole state.
#[derive(Debug, Clone)]
pub enum StateEvent {
    /// Entries up to `index` were applied; `triggers` are what may change decisions.
    Applied {
        /// The last applied index.
        index: u64,
        /// The triggers of the applied commands, in order.
        triggers: Arc<Vec<Trigger>>,
        /// Environments whose plans changed (issued, progressed, finished, cancelled), so
        /// plan long-polls wake only for their own environment.
        plan_environments: Arc<Vec<String>>,
    },
    /// The whole state was replaced by a snapshot.
    Replaced,
}

/// Events buffered per subscriber before it is considered lagging.
const EVENT_BUFFER: usize = 4096;

/// openraft's state machine for the hub. Cheap to clone.
#[derive(Clone)]
pub struct StateMachine {
    store: Store,
    shared: SharedState,
    current_snapshot: Arc<RwLock<Option<SnapshotMeta>>>,
    events: tokio::sync::broadcast::Sender<StateEvent>,
    stats: Arc<SnapshotStats>,
    /// The last digest computed and the computation under way ([`DigestCache`]).
    digest: DigestCache,
    /// A snapshot staged before Raft was asked to install it ([`StateMachine::stage_snapshot`]).
    staged: Arc<std::sync::Mutex<Option<install::Staged>>>,
}

/// A snapshot operation of this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotOp {
    /// Built from the applied state.
    Build,
    /// Installed from the leader.
    Install,
}

/// Snapshots built and installed by this node with the time each took, until the node's
/// metrics take them ([`SnapshotStats::drain`]). Bounded: past [`SnapshotStats::KEEP`]
/// untaken ones, the oldest go.
#[derive(Debug, Default)]
pub struct SnapshotStats {
    done: std::sync::Mutex<std::collections::VecDeque<(SnapshotOp, std::time::Duration)>>,
}

impl SnapshotStats {
    /// Most operations kept untaken.
    pub const KEEP: usize = 1_024;

    fn record(&self, op: SnapshotOp, started: std::time::Instant) {
        let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        if done.len() == Self::KEEP {
            done.pop_front();
        }
        done.push_back((op, started.elapsed()));
    }

    /// Takes the operations done since the last call, oldest first.
    pub fn drain(&self) -> Vec<(SnapshotOp, std::time::Duration)> {
        let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        done.drain(..).collect()
    }
}

fn corrupt(what: &str) -> impl FnOnce(codec::CodecError) -> StoreError + '_ {
    move |cause| StoreError::Corrupt {
        what: what.to_string(),
        cause,
    }
}

/// A state-machine meta value (`what`) as read from the store; its default when absent.
fn decode_meta<T: serde::de::DeserializeOwned + Default>(
    bytes: Option<Vec<u8>>,
    what: &str,
) -> Result<T, StoreError> {
    match bytes {
        Some(bytes) => codec::decode_bounded(&bytes, Limit::Command).map_err(corrupt(what)),
        None => Ok(T::default()),
    }
}

impl StateMachine {
    /// Loads the persisted state (every row of the state, last applied, membership) and the
    /// snapshot metadata. History is left in the store ([`Residence::History`]): its key
    /// ranges are skipped without reading them. Records of an older format are migrated
    /// ([`Record::migrated`]) in one synced batch before anything is served. Records an
    /// interrupted install staged are deleted ([`install`]).
    pub(crate) fn open(store: Store) -> Result<Self, StoreError> {
        let rocks = |cause| store.rocks_error(cause);
        let db = &store.db;
        let slot: RecordSlot = decode_meta(
            db.get_cf(store.family(crate::store::CF_SM_META), KEY_RECORD_SLOT)
                .map_err(rocks)?,
            "record slot",
        )?;
        store.set_slot(slot);
        if install::holds_records(&store, slot.other()).map_err(rocks)? {
            tracing::info!("deleting the records of an interrupted snapshot install");
            install::clear(&store, slot.other()).map_err(rocks)?;
        }
        let (cf_sm, cf_meta) = store.sm_families();
        let mut applied = AppliedState::default();
        let mut migration = WriteBatch::default();
        let mut iter = db.raw_iterator_cf(cf_sm);
        iter.seek_to_first();
        while let Some(key) = iter.key() {
            let stored_key = RecordKey::from_bytes(key).ok_or_else(|| StoreError::Corrupt {
                what: "state record".to_string(),
                cause: codec::CodecError::Malformed(format!("unknown record key {key:?}")),
            })?;
            if stored_key.residence() == Residence::History {
                // Key bytes start with the table tag: the whole table is history.
                match key[0].checked_add(1) {
                    Some(next_table) => iter.seek([next_table]),
                    None => break,
                }
                continue;
            }
            let value = iter.value().unwrap_or_default();
            let record: Record =
                codec::decode_bounded(value, Limit::Snapshot).map_err(corrupt("state record"))?;
            if record.key() != stored_key {
                return Err(StoreError::Corrupt {
                    what: "state record".to_string(),
                    cause: codec::CodecError::Malformed(format!(
                        "a record stored under key {stored_key:?} has key {:?}",
                        record.key()
                    )),
                });
            }
            if record.is_legacy() {
                migration.delete_cf(cf_sm, key);
                for current in record.clone().migrated() {
                    migration.put_cf(cf_sm, current.key().to_bytes(), codec::encode(&current));
                }
            }
            applied.state.insert_record(record);
            iter.next();
        }
        iter.status().map_err(rocks)?;
        drop(iter);
        if !migration.is_empty() {
            tracing::info!(
                writes = migration.len(),
                "migrating stored records to this release's format"
            );
            let mut sync = WriteOptions::default();
            sync.set_sync(true);
            db.write_opt(migration, &sync).map_err(rocks)?;
        }
        applied.state.rebuild_indexes();
        applied.last_applied = decode_meta(
            db.get_cf(cf_meta, KEY_LAST_APPLIED).map_err(rocks)?,
            "last_applied",
        )?;
        applied.membership = decode_meta(
            db.get_cf(cf_meta, KEY_MEMBERSHIP).map_err(rocks)?,
            "membership",
        )?;
        check_feature_level(&applied.state)?;
        let current = snapshot::read_current_meta(&store.dir)?;
        Ok(Self {
            store,
            shared: SharedState(Arc::new(RwLock::new(applied))),
            current_snapshot: Arc::new(RwLock::new(current)),
            events: tokio::sync::broadcast::channel(EVENT_BUFFER).0,
            stats: Arc::default(),
            digest: DigestCache::default(),
            staged: Arc::default(),
        })
    }

    /// An applied index and the state digest at it ([`State::digest`]), as recent as
    /// `freshness` asks, computed from a RocksDB snapshot of the stored records on a blocking
    /// thread. It never takes the state's lock: hashing the whole state under it held up
    /// apply, and with it every write of the cluster, for as long as the hash took (about
    /// 250 ms at 70,000 records, on every `NodeStatus` call; docs/BENCHMARKS.md).
    ///
    /// At most one computation runs at a time, and it finishes and is cached when its
    /// callers stop waiting ([`crate::digest`]): at 100,000 entities with history it takes
    /// about 12 s, longer than a status probe waits, and under writes every probe sees a
    /// newer index than the last digest.
    pub async fn digest(&self, freshness: DigestFreshness) -> io::Result<(u64, String)> {
        let applied = self.shared.read().applied_index();
        let store = self.store.clone();
        self.digest
            .get(applied, freshness, move || {
                stored_digest(&store).map_err(|e| DigestError::Store(Arc::new(e)))
            })
            .await
            .map_err(io::Error::other)
    }

    /// Stages the snapshot `data` (described by `meta`) before Raft installs it: its records
    /// in the inactive records family, its state decoded, the whole file checked on the way
    /// ([`install`]). What a node runs on a snapshot from the network before handing it to
    /// Raft: a bad file is refused here, since a failed install is a storage error that
    /// stops the node. The install of the same snapshot then only switches, so the file is
    /// decoded once. Returns the file, for the install.
    pub async fn stage_snapshot(
        &self,
        meta: &SnapshotMeta,
        data: SnapshotData,
    ) -> Result<SnapshotData, install::StageError> {
        self.take_staged();
        let store = self.store.clone();
        let meta = meta.clone();
        let (data, staged) = tokio::task::spawn_blocking(move || {
            install::stage(&store, &meta, &data).map(|staged| (data, staged))
        })
        .await
        .map_err(|e| install::StageError::Interrupted(e.to_string()))??;
        *self.staged.lock().unwrap_or_else(|p| p.into_inner()) = Some(staged);
        Ok(data)
    }

    /// Drops a staged snapshot that Raft did not install (it was older than what this node
    /// holds), and deletes its records.
    pub async fn discard_staged(&self) {
        let Some(staged) = self.take_staged() else {
            return;
        };
        let slot = staged.slot;
        drop(staged);
        let store = self.store.clone();
        let cleared = tokio::task::spawn_blocking(move || install::clear(&store, slot)).await;
        if let Err(e) = cleared.map_err(io_err).and_then(|r| r.map_err(io_err)) {
            tracing::warn!(error = %e, "deleting a staged snapshot's records failed; the next install or start deletes them");
        }
    }

    fn take_staged(&self) -> Option<install::Staged> {
        self.staged.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// A read handle on the stored history (see [`History`] for when it agrees with the
    /// state).
    pub fn history(&self) -> History {
        History::new(self.store.clone())
    }

    /// The store (for backups, [`crate::backup`]).
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// The store's data directory.
    pub fn store_dir(&self) -> &std::path::Path {
        self.store.dir()
    }

    /// Snapshots built and installed so far.
    pub fn snapshot_stats(&self) -> Arc<SnapshotStats> {
        self.stats.clone()
    }

    /// Subscribes to apply events (see [`StateEvent`]).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<StateEvent> {
        self.events.subscribe()
    }

    /// A read handle on the applied state.
    pub fn shared(&self) -> SharedState {
        self.shared.clone()
    }

    /// Metadata of the current snapshot, if one was built or installed.
    pub fn snapshot_meta(&self) -> Option<SnapshotMeta> {
        self.current_snapshot
            .read()
            .expect("snapshot lock poisoned")
            .clone()
    }

    fn set_snapshot_meta(&self, meta: SnapshotMeta) {
        *self
            .current_snapshot
            .write()
            .expect("snapshot lock poisoned") = Some(meta);
    }
}

/// Adds to `batch` what the applied entries wrote: every changed row as the state holds it
/// now (or its deletion), then the history writes as apply made them, in order (their keys
/// are never in `changed`: history is not in the state).
fn stage_records(
    state: &State,
    changed: &BTreeSet<RecordKey>,
    history: &[HistoryWrite],
    batch: &mut WriteBatch,
    cf_sm: &rocksdb::ColumnFamily,
) {
    for key in changed {
        match state.record(key) {
            Some(record) => batch.put_cf(cf_sm, key.to_bytes(), codec::encode(&record)),
            None => batch.delete_cf(cf_sm, key.to_bytes()),
        }
    }
    for write in history {
        match write {
            HistoryWrite::Put(record) => {
                batch.put_cf(cf_sm, record.key().to_bytes(), codec::encode(record))
            }
            HistoryWrite::Delete(key) => batch.delete_cf(cf_sm, key.to_bytes()),
        }
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let s = self.shared.read();
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>>
            + Unpin
            + openraft::OptionalSend,
    {
        let mut responders = Vec::new();
        let mut changed = BTreeSet::new();
        let mut triggers = Vec::new();
        let mut history = Vec::new();
        let db = &self.store.db;
        let (cf_sm, cf_meta) = self.store.sm_families();
        let mut batch = WriteBatch::default();
        // Drain the stream first: the state lock must not be held across an await.
        let mut items = Vec::new();
        while let Some(item) = entries.next().await {
            items.push(item?);
        }
        refuse_levels_beyond_this_binary(items.iter().map(|(entry, _)| entry))?;
        {
            let mut guard = self.shared.write();
            let applied = &mut *guard;
            for (entry, responder) in items {
                let index = entry.log_id.index;
                assert!(
                    applied.applied_index() < index || applied.last_applied.is_none(),
                    "entries applied out of order: {} after {:?}",
                    index,
                    applied.last_applied
                );
                let result = match &entry.payload {
                    EntryPayload::Blank => Ok(CommandOutput::Done),
                    EntryPayload::Normal(req) => {
                        let out = applied.state.apply(req, index);
                        changed.extend(out.changed);
                        triggers.extend(out.triggers);
                        history.extend(out.history);
                        out.result
                    }
                    EntryPayload::Membership(m) => {
                        // The engine keeps the ids that left the membership for good (the
                        // transport refuses them), derived here from the log like the rest.
                        let nodes: BTreeSet<u64> = m.nodes().map(|(id, _)| *id).collect();
                        changed.extend(applied.state.apply_membership(&nodes));
                        applied.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                        batch.put_cf(cf_meta, KEY_MEMBERSHIP, codec::encode(&applied.membership));
                        Ok(CommandOutput::Done)
                    }
                };
                applied.last_applied = Some(entry.log_id);
                if let Some(r) = responder {
                    responders.push((r, Response { result }));
                }
            }
            stage_records(&applied.state, &changed, &history, &mut batch, cf_sm);
            batch.put_cf(
                cf_meta,
                KEY_LAST_APPLIED,
                codec::encode(&applied.last_applied),
            );
            // Not synced: the log holds every applied entry durably, and one WAL orders this
            // batch after them, so a crash loses at most a suffix that is re-applied on
            // start. Written under the state's lock, so a reader of the state reads the
            // history of the same entries ([`History`]).
            db.write(batch).map_err(io_err)?;
        }
        let (index, plan_environments) = {
            let s = self.shared.read();
            let mut envs: Vec<String> = changed
                .iter()
                .filter_map(|k| match k {
                    // Issued, changed or finished in these entries.
                    hub_engine::RecordKey::Plan(id) => s.state.plan_entity(id),
                    _ => None,
                })
                .filter_map(|entity| s.state.entity(entity))
                .map(|e| e.environment.clone())
                .collect();
            envs.sort();
            envs.dedup();
            (s.applied_index(), envs)
        };
        // Every node (followers too) serves plan long-polls; nobody listening is fine.
        let _ = self.events.send(StateEvent::Applied {
            index,
            triggers: Arc::new(triggers),
            plan_environments: Arc::new(plan_environments),
        });
        for (responder, response) in responders {
            responder.send(response);
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        mut snapshot: SnapshotData,
    ) -> Result<(), io::Error> {
        let started = std::time::Instant::now();
        let bytes = snapshot.len();
        // Staged before (the node's intake, [`StateMachine::stage_snapshot`]), or now: record
        // by record from the file into the new state and the inactive records family, off
        // the async runtime; neither the file nor a second copy of the state is held in
        // memory ([`install`]).
        let staged = match self.take_staged() {
            Some(staged)
                if staged.last_applied == meta.last_log_id
                    && staged.membership == meta.last_membership =>
            {
                staged
            }
            _ => {
                let store = self.store.clone();
                let meta = meta.clone();
                let (data, staged) = tokio::task::spawn_blocking(move || {
                    install::stage(&store, &meta, &snapshot).map(|staged| (snapshot, staged))
                })
                .await
                .map_err(io_err)?
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                snapshot = data;
                staged
            }
        };
        check_feature_level(&staged.state).map_err(io_err)?;
        let replaced = self.store.slot();
        {
            let mut guard = self.shared.write();
            install::switch(&self.store, &staged)?;
            *guard = AppliedState {
                state: staged.state,
                last_applied: staged.last_applied,
                membership: staged.membership,
            };
        }
        // The state is durable first; then the file. A crash in between leaves an older
        // snapshot, which is harmless.
        let dir = self.store.dir.clone();
        tokio::task::spawn_blocking(move || snapshot::make_current(&dir, snapshot))
            .await
            .map_err(io_err)?
            .map_err(io_err)?;
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || install::clear(&store, replaced))
            .await
            .map_err(io_err)?
            .map_err(io_err)?;
        self.set_snapshot_meta(meta.clone());
        self.stats.record(SnapshotOp::Install, started);
        tracing::info!(last_log_id = ?meta.last_log_id, bytes, "installed snapshot");
        let _ = self.events.send(StateEvent::Replaced);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        // The header alone: the file is streamed to the follower, whose install checks it
        // record by record.
        let dir = self.store.dir.clone();
        let current = tokio::task::spawn_blocking(move || snapshot::open_current(&dir))
            .await
            .map_err(io_err)?
            .map_err(io_err)?;
        Ok(current.map(|(meta, snapshot)| Snapshot { meta, snapshot }))
    }
}

/// The state machine's column families as RocksDB's snapshot `view` of `store` has them:
/// the records family it names active, and the meta family.
pub(crate) fn families_at<'a>(
    store: &'a Store,
    view: &rocksdb::SnapshotWithThreadMode<'_, rocksdb::DB>,
) -> Result<(&'a rocksdb::ColumnFamily, &'a rocksdb::ColumnFamily), StoreError> {
    let cf_meta = store.family(crate::store::CF_SM_META);
    let slot: RecordSlot = decode_meta(
        view.get_cf(cf_meta, KEY_RECORD_SLOT)
            .map_err(|cause| store.rocks_error(cause))?,
        "record slot",
    )?;
    Ok((store.family(slot.family_name()), cf_meta))
}

/// Refuses a state at a feature level above what this binary applies.
fn check_feature_level(state: &State) -> Result<(), StoreError> {
    let supported = hub_engine::feature_level::SUPPORTED_LEVEL;
    match state.cluster_level() {
        cluster if cluster > supported => Err(StoreError::NewerFeatureLevel { cluster, supported }),
        _ => Ok(()),
    }
}

/// Refuses entries that raise the cluster to a level this binary does not apply: the node
/// stops (the error ends Raft's core; `crash_stop` exits) rather than refuse an entry every
/// upgraded node accepts and diverge from them.
fn refuse_levels_beyond_this_binary<'a>(
    entries: impl Iterator<Item = &'a crate::types::Entry>,
) -> Result<(), io::Error> {
    for entry in entries {
        if let EntryPayload::Normal(req) = &entry.payload {
            if let Some(level) = level_beyond_this_binary(&req.command) {
                let e = StoreError::NewerFeatureLevel {
                    cluster: level,
                    supported: hub_engine::feature_level::SUPPORTED_LEVEL,
                };
                tracing::error!(index = entry.log_id.index, error = %e, "stopping");
                return Err(io_err(e));
            }
        }
    }
    Ok(())
}

/// The feature level `command` raises the cluster to, if this binary cannot apply it.
fn level_beyond_this_binary(
    command: &hub_engine::Command,
) -> Option<hub_engine::feature_level::FeatureLevel> {
    use hub_engine::Command;
    match command {
        Command::SetClusterLevel { level }
            if *level > hub_engine::feature_level::SUPPORTED_LEVEL =>
        {
            Some(*level)
        }
        Command::As { command, .. } => level_beyond_this_binary(command),
        _ => None,
    }
}

/// The last applied log id and membership as RocksDB's snapshot `view` of `store` has them
/// in `cf_meta` (written in the same batch as the records).
pub(crate) fn stored_meta(
    store: &Store,
    view: &rocksdb::SnapshotWithThreadMode<'_, rocksdb::DB>,
    cf_meta: &rocksdb::ColumnFamily,
) -> Result<(Option<LogId>, StoredMembership), StoreError> {
    let rocks = |cause| store.rocks_error(cause);
    let last_applied = decode_meta(
        view.get_cf(cf_meta, KEY_LAST_APPLIED).map_err(rocks)?,
        "last_applied",
    )?;
    let membership = decode_meta(
        view.get_cf(cf_meta, KEY_MEMBERSHIP).map_err(rocks)?,
        "membership",
    )?;
    Ok((last_applied, membership))
}

/// The applied index and state digest of what `store` holds, from one RocksDB snapshot (the
/// records and `last_applied` are written in one batch, so they agree). A stored record is
/// its format byte and then its canonical encoding, hashed as it is.
fn stored_digest(store: &Store) -> Result<(u64, String), StoreError> {
    let rocks = |cause| store.rocks_error(cause);
    let view = store.db.snapshot();
    let (cf_sm, cf_meta) = families_at(store, &view)?;
    let last_applied: Option<LogId> = decode_meta(
        view.get_cf(cf_meta, KEY_LAST_APPLIED).map_err(rocks)?,
        "last_applied",
    )?;
    let mut digest = hub_engine::StateDigest::new();
    for item in view.iterator_cf(cf_sm, rocksdb::IteratorMode::Start) {
        let (key, value) = item.map_err(rocks)?;
        digest.add(
            &key,
            codec::stored_body(&value).map_err(corrupt("state record"))?,
        );
    }
    Ok((last_applied.map(|l| l.index).unwrap_or(0), digest.finish()))
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    type SnapshotData = SnapshotData;

    /// Built from a RocksDB snapshot of the persisted state, not from the state in memory:
    /// apply writes the records an entry changed and `last_applied` in one batch, so any
    /// RocksDB snapshot is the state after some applied entry, complete and consistent. The
    /// state lock is not taken, so apply goes on while the snapshot is read, encoded and
    /// written (copying the records in memory held the lock for 100–400 ms at 30k–90k
    /// records, stalling every write), and all of it runs on a blocking thread.
    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let started = std::time::Instant::now();
        let store = self.store.clone();
        let (meta, snapshot, records) = tokio::task::spawn_blocking(move || {
            let rocks = |cause| store.rocks_error(cause);
            let db = &store.db;
            let view = db.snapshot();
            let (cf_sm, cf_meta) = families_at(&store, &view)?;
            let last_applied: Option<LogId> = decode_meta(
                view.get_cf(cf_meta, KEY_LAST_APPLIED).map_err(rocks)?,
                "last_applied",
            )?;
            let membership: StoredMembership = decode_meta(
                view.get_cf(cf_meta, KEY_MEMBERSHIP).map_err(rocks)?,
                "membership",
            )?;
            // Two passes over the same RocksDB snapshot: the file states the count first,
            // and the records are streamed to it, never collected.
            let mut count = 0u64;
            let mut keys = view.raw_iterator_cf(cf_sm);
            keys.seek_to_first();
            while keys.valid() {
                count += 1;
                keys.next();
            }
            keys.status().map_err(rocks)?;
            drop(keys);
            let records = view
                .iterator_cf(cf_sm, rocksdb::IteratorMode::Start)
                .map(|item| item.map(|(_, value)| value).map_err(rocks));
            let snapshot = snapshot::write_from_stored(
                &snapshot::snapshot_path(&store.dir),
                &last_applied,
                &membership,
                count,
                records,
            )?;
            let meta = SnapshotMeta {
                last_log_id: last_applied,
                last_membership: membership,
            };
            Ok::<_, StoreError>((meta, snapshot, count))
        })
        .await
        .map_err(io_err)?
        .map_err(io_err)?;
        self.set_snapshot_meta(meta.clone());
        self.stats.record(SnapshotOp::Build, started);
        // Every node refuses a larger snapshot file: say so while there is still room, not
        // when a follower first needs one.
        let bytes = snapshot.len();
        let limit = codec::MAX_SNAPSHOT_FILE_BYTES;
        if bytes > limit {
            tracing::error!(
                bytes,
                limit,
                "snapshot is larger than a node accepts: a follower behind the log cannot catch up"
            );
        } else if bytes > limit / 10 * 8 {
            tracing::warn!(
                bytes,
                limit,
                "snapshot is over 80% of the largest a node accepts"
            );
        }
        tracing::info!(
            last_log_id = ?meta.last_log_id,
            bytes,
            records,
            ms = started.elapsed().as_millis(),
            "built snapshot"
        );
        Ok(Snapshot { meta, snapshot })
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::{DigestFreshness, NodeIdentity};

    #[tokio::test]
    async fn a_digest_whose_caller_stopped_waiting_is_still_cached() {
        let dir = tempfile::tempdir().expect("tempdir");
        let identity = NodeIdentity {
            node_id: 1,
            cluster_id: "digest".into(),
        };
        let (_store, _log, sm) = crate::open(dir.path(), &identity).expect("open");
        let expected = sm.shared.read().state.digest();
        // The caller gives up after one poll: the hash runs on another thread (and this
        // runtime has not run the task it was handed to), so it cannot be done yet.
        let gave_up = futures::FutureExt::now_or_never(sm.digest(DigestFreshness::Probe));
        assert!(gave_up.is_none(), "the first poll finished the digest");
        let deadline = Instant::now() + Duration::from_secs(30);
        while sm.digest.done().is_none() {
            assert!(
                Instant::now() < deadline,
                "the computation was dropped with its caller: nothing cached after 30 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(sm.digest.done(), Some((0, expected)));
        assert_eq!(sm.digest.started(), 1);
    }
}

//! openraft storage for the hub on RocksDB: the log ([`LogStore`]) and the state machine
//! ([`StateMachine`]) share one RocksDB instance, so a single write-ahead log orders the vote,
//! the entries and the applied state.
//!
//! Layout (column families):
//! - `log`: big-endian log index → entry
//! - `meta`: vote, last purged log id, node identity
//! - `sm` and `sm_b`: [`hub_engine::RecordKey`] bytes → record: the state's rows and history
//!   ([`hub_engine::Residence`]; read through [`History`]). One of them is active; an install
//!   stages a snapshot in the other, then switches (`install`)
//! - `sm_meta`: last applied log id, membership and the active records family (written in
//!   the same batch as the records)
//!
//! Snapshots live in `<dir>/snapshots/current.snap`, replaced atomically; one arriving from
//! the leader is written to `<dir>/snapshots/incoming.snap` first. Neither is ever read whole
//! into memory ([`SnapshotData`]).
//! Every stored value begins with a format version byte ([`codec`]).

pub mod backup;
pub mod codec;
mod db;
mod digest;
mod error;
mod flusher;
mod history;
mod install;
mod log_store;
pub mod private;
mod snapshot;
mod snapshot_data;
mod state_machine;
mod store;
mod types;

pub use db::{open, NodeIdentity};
pub use digest::DigestFreshness;
pub use error::StoreError;
pub use history::History;
pub use install::StageError;
pub use log_store::LogStore;
pub use snapshot::{
    incoming_path, read_current_meta, snapshot_data, snapshot_path, SnapshotDecodeError,
    SnapshotReceiver,
};
pub use state_machine::{
    AppliedState, SharedState, SnapshotOp, SnapshotStats, StateEvent, StateMachine,
};
pub use store::Store;
pub use types::*;

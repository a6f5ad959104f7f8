//! Helpers shared by the store's integration tests.

use std::path::Path;

use hub_engine::{Command as HubCommand, Record, Request};
use openraft::vote::RaftLeaderId;
use openraft::{Entry, EntryPayload, LogId};

/// An entry of `term` at `index` (leader node 1) creating environment `env-<index>`.
#[allow(dead_code)] // Each test binary includes this module; not all of them build entries.
pub fn entry(term: u64, index: u64) -> raft_store::Entry {
    Entry {
        log_id: LogId::new(
            openraft::vote::leader_id_adv::CommittedLeaderId::new(term, 1),
            index,
        ),
        payload: EntryPayload::Normal(Request {
            command: HubCommand::CreateEnvironment {
                name: format!("env-{index}"),
                description: String::new(),
            },
            time_ms: index as i64,
            request_id: None,
        }),
    }
}

/// Writes `record` under its key straight into the RocksDB of the store in `dir` (closed), as
/// another release did: what the store does with it when it opens is the test.
#[allow(dead_code)] // Each test binary includes this module; not all of them write raw.
pub fn write_raw(dir: &Path, record: &Record) {
    let path = dir.join("db");
    let families = rocksdb::DB::list_cf(&rocksdb::Options::default(), &path).expect("list cfs");
    let db = rocksdb::DB::open_cf(&rocksdb::Options::default(), &path, &families).expect("db");
    let sm = db.cf_handle("sm").expect("the sm family");
    db.put_cf(
        sm,
        record.key().to_bytes(),
        raft_store::codec::encode(record),
    )
    .expect("put");
}

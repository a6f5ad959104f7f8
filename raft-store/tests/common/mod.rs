//! Helpers shared by the store's integration tests.

use hub_engine::{Command as HubCommand, Request};
use openraft::vote::RaftLeaderId;
use openraft::{Entry, EntryPayload, LogId};

/// An entry of `term` at `index` (leader node 1) creating environment `env-<index>`.
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

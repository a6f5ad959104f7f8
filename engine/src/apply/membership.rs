//! Raft membership entries: the removed-for-good node ids (`crate::cluster_members`).

use std::collections::BTreeSet;

use crate::record::RecordKey;
use crate::state::State;

impl State {
    /// Records a membership entry that names `nodes` (voters and learners), applied at the
    /// entry's place in the log: members that left it are removed for good. Returns the keys
    /// it changed (none when the members are as before), for storage to persist with the
    /// entry. Not a [`crate::Command`]: Raft writes membership entries itself, and every node
    /// applies them at the same index, so every state derives the same record.
    pub fn apply_membership(&mut self, nodes: &BTreeSet<u64>) -> Vec<RecordKey> {
        let before = self.cluster_members();
        let after = before.after(nodes);
        let mut changed = Vec::new();
        if after != before {
            self.cluster_members.put(after, &mut changed);
        }
        changed
    }
}

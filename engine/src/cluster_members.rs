//! The cluster's Raft members as the log has seen them: which node ids are members now and
//! which were removed for good.
//!
//! Node ids are never reused, so an id that left the membership is removed forever. A node's
//! transport admits any node of its cluster (its certificate says `node/<id>`) except the ids
//! recorded here as removed: a member that missed a node's addition (it was down, or cut off)
//! still admits that node when it leads, while a removed node stays shut out even on a member
//! that lags behind its removal by the log. The record changes only when the state machine
//! applies a membership entry ([`crate::State::apply_membership`]), so every node derives the
//! same record from the same log, and snapshots carry it.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The record's one name.
pub const CLUSTER_MEMBERS_KEY: &str = "raft";

/// Node ids seen in the membership, and those that left it: one record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMembers {
    /// The nodes (voters and learners) of the last membership applied.
    pub members: BTreeSet<u64>,
    /// Every node that was a member once and is no longer (never readmitted).
    pub removed: BTreeSet<u64>,
}

impl ClusterMembers {
    /// The record after a membership entry naming `nodes` (voters and learners) was applied:
    /// every member that is not in `nodes` is removed for good.
    pub fn after(&self, nodes: &BTreeSet<u64>) -> ClusterMembers {
        let mut removed = self.removed.clone();
        removed.extend(self.members.difference(nodes).copied());
        // An id once removed is never a member again (ids are never reused; `AddNode` refuses
        // one): should a membership name it anyway, it stays removed rather than readmitted.
        let members = nodes.difference(&removed).copied().collect();
        let next = ClusterMembers { members, removed };
        debug_assert!(next.members.is_disjoint(&next.removed));
        debug_assert!(next.removed.is_superset(&self.removed));
        next
    }

    /// Whether node `id` was removed from the cluster.
    pub fn is_removed(&self, id: u64) -> bool {
        self.removed.contains(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[u64]) -> BTreeSet<u64> {
        ids.iter().copied().collect()
    }

    #[test]
    fn a_node_that_leaves_the_membership_is_removed_for_good() {
        let c = ClusterMembers::default().after(&set(&[1, 2, 3]));
        assert_eq!(c.members, set(&[1, 2, 3]));
        assert!(c.removed.is_empty());
        // Joint configuration while 4 replaces 2, then the final one.
        let c = c.after(&set(&[1, 2, 3, 4]));
        assert!(c.removed.is_empty());
        let c = c.after(&set(&[1, 3, 4]));
        assert_eq!(c.removed, set(&[2]));
        assert!(c.is_removed(2));
        assert!(!c.is_removed(4));
        // A membership that names 2 again does not readmit it.
        let c = c.after(&set(&[1, 2, 3, 4]));
        assert_eq!(c.members, set(&[1, 3, 4]));
        assert_eq!(c.removed, set(&[2]));
    }

    #[test]
    fn ids_never_seen_are_not_removed() {
        let c = ClusterMembers::default().after(&set(&[1, 2, 3]));
        assert!(!c.is_removed(7));
    }
}

//! Membership changes under load: a removed node is never again counted, and the healed
//! cluster agrees on the members the runner left it with.
//!
//! From the runner's changes and the samples of every running process (members, and removed
//! nodes left running):
//! - after its removal, no sample names a removed node as leader, and a removed node never
//!   says it is leader itself (it would have needed votes, or been counted);
//! - after healing, every member's voters are exactly the members the changes left.
//!
//! Lost writes and digests are judged by the other checkers, whatever the membership did.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::history::{MemberSample, MembershipChange};

/// The result of [`membership_respected`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipReport {
    /// True without violations.
    pub ok: bool,
    /// Changes made.
    pub changes: usize,
    /// Samples checked.
    pub samples: usize,
    /// What is wrong.
    pub violations: Vec<MembershipViolation>,
}

/// A membership violation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MembershipViolation {
    /// A node followed a removed node as its leader after the removal.
    #[error(
        "node {node} followed removed node {removed} as leader {after_ms} ms after its removal"
    )]
    FollowedRemoved {
        /// The node that followed it.
        node: u64,
        /// The removed node.
        removed: u64,
        /// How long after the removal.
        after_ms: u64,
    },
    /// A removed node said it was leader after its removal.
    #[error("removed node {removed} was leader {after_ms} ms after its removal")]
    RemovedLed {
        /// The removed node.
        removed: u64,
        /// How long after the removal.
        after_ms: u64,
    },
    /// After healing a member's voters differ from the members the changes left.
    #[error("after healing node {node} has voters {voters:?}, not {expected:?}")]
    WrongVoters {
        /// The member.
        node: u64,
        /// Its voters.
        voters: Vec<u64>,
        /// The members the changes left.
        expected: Vec<u64>,
    },
}

/// Checks the samples against the changes; `initial` are the first members.
pub fn membership_respected(
    initial: &[u64],
    changes: &[MembershipChange],
    samples: &[MemberSample],
) -> MembershipReport {
    let mut members: BTreeSet<u64> = initial.iter().copied().collect();
    let mut removed_at: Vec<(u64, u64)> = Vec::new();
    for c in changes {
        if let Some(a) = c.added {
            members.insert(a);
        }
        if let Some(r) = c.removed {
            members.remove(&r);
            removed_at.push((r, c.at_ns));
        }
    }
    let mut violations = Vec::new();
    for s in samples {
        for &(r, at) in removed_at.iter().filter(|(_, at)| s.at_ns > *at) {
            let after_ms = (s.at_ns - at) / 1_000_000;
            if s.node == r && s.role == "leader" {
                violations.push(MembershipViolation::RemovedLed {
                    removed: r,
                    after_ms,
                });
            } else if s.node != r && s.leader == Some(r) && members.contains(&s.node) {
                violations.push(MembershipViolation::FollowedRemoved {
                    node: s.node,
                    removed: r,
                    after_ms,
                });
            }
        }
        if s.settled && !initial.is_empty() && members.contains(&s.node) {
            let voters: BTreeSet<u64> = s.voters.iter().copied().collect();
            if voters != members {
                violations.push(MembershipViolation::WrongVoters {
                    node: s.node,
                    voters: voters.into_iter().collect(),
                    expected: members.iter().copied().collect(),
                });
            }
        }
    }
    MembershipReport {
        ok: violations.is_empty(),
        changes: changes.len(),
        samples: samples.len(),
        violations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_ns: u64, node: u64, role: &str, leader: u64, voters: &[u64]) -> MemberSample {
        MemberSample {
            at_ns,
            node,
            role: role.into(),
            leader: Some(leader),
            voters: voters.to_vec(),
            settled: false,
        }
    }

    /// Node 4 replaced node 3 at 1 s; node 2 was removed (left running) at 2 s.
    fn changes() -> Vec<MembershipChange> {
        vec![
            MembershipChange {
                at_ns: 1_000_000_000,
                added: Some(4),
                removed: Some(3),
                kept_running: false,
            },
            MembershipChange {
                at_ns: 2_000_000_000,
                added: None,
                removed: Some(2),
                kept_running: true,
            },
        ]
    }

    #[test]
    fn a_cluster_that_forgot_its_removed_nodes_passes() {
        let mut settled = sample(9_000_000_000, 1, "leader", 1, &[1, 4]);
        settled.settled = true;
        let samples = [
            // Before its removal node 3 may lead.
            sample(500_000_000, 1, "follower", 3, &[1, 2, 3]),
            sample(2_500_000_000, 4, "follower", 1, &[1, 4]),
            // The removed node 2, left running, follows nobody it may not.
            sample(2_500_000_000, 2, "follower", 1, &[1, 2, 4]),
            settled,
        ];
        let r = membership_respected(&[1, 2, 3], &changes(), &samples);
        assert!(r.ok, "{r:?}");
    }

    #[test]
    fn a_removed_node_leading_or_followed_or_still_a_voter_fails() {
        let mut settled = sample(9_000_000_000, 4, "follower", 1, &[1, 2, 4]);
        settled.settled = true;
        let samples = [
            sample(1_200_000_000, 1, "follower", 3, &[1, 2, 3]),
            sample(3_000_000_000, 2, "leader", 2, &[1, 2, 4]),
            settled,
        ];
        let r = membership_respected(&[1, 2, 3], &changes(), &samples);
        assert_eq!(
            r.violations,
            [
                MembershipViolation::FollowedRemoved {
                    node: 1,
                    removed: 3,
                    after_ms: 200
                },
                MembershipViolation::RemovedLed {
                    removed: 2,
                    after_ms: 1000
                },
                MembershipViolation::WrongVoters {
                    node: 4,
                    voters: vec![1, 2, 4],
                    expected: vec![1, 4]
                },
            ]
        );
        assert!(!r.ok);
    }
}

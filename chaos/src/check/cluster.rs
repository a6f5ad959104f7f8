//! The cluster after healing: every rollout reached a terminal state, and the nodes'
//! state machines converged (equal digests at equal applied indexes).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::history::{NodeDigest, Rollout};

/// The result of [`rollouts_terminal`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutReport {
    /// True without violations.
    pub ok: bool,
    /// Rollouts recorded.
    pub rollouts: usize,
    /// Rollouts in a terminal state.
    pub terminal: usize,
    /// What is wrong.
    pub violations: Vec<RolloutViolation>,
}

/// A rollout violation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RolloutViolation {
    /// A rollout is still in a non-terminal state after healing.
    #[error("{rollout_kind} rollout {id} is stuck in non-terminal state {state}")]
    NotTerminal {
        /// The rollout.
        id: String,
        /// `release`, `module` or `canary`.
        rollout_kind: String,
        /// Its state.
        state: String,
    },
}

/// Checks that every rollout is terminal.
pub fn rollouts_terminal(rollouts: &[Rollout]) -> RolloutReport {
    let violations: Vec<RolloutViolation> = rollouts
        .iter()
        .filter(|r| !r.terminal)
        .map(|r| RolloutViolation::NotTerminal {
            id: r.id.clone(),
            rollout_kind: r.kind.clone(),
            state: r.state.clone(),
        })
        .collect();
    RolloutReport {
        ok: violations.is_empty(),
        rollouts: rollouts.len(),
        terminal: rollouts.len() - violations.len(),
        violations,
    }
}

/// The result of [`converged`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvergenceReport {
    /// True without violations.
    pub ok: bool,
    /// Digests recorded.
    pub nodes: usize,
    /// Digests compared with at least one other taken at the same applied index. When this
    /// is below `nodes`, some nodes could not be compared at all.
    pub compared: usize,
    /// Distinct applied indexes among the digests.
    pub applied_indexes: usize,
    /// What is wrong.
    pub violations: Vec<ConvergenceViolation>,
}

/// A convergence violation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ConvergenceViolation {
    /// Nodes at the same applied index have different state machines.
    #[error("at applied index {applied_index}, nodes {differing:?} differ from the digest {expected} of nodes {agreeing:?}")]
    DigestMismatch {
        /// The applied index.
        applied_index: u64,
        /// The most common digest (ties: the smallest).
        expected: String,
        /// Nodes with that digest.
        agreeing: Vec<u64>,
        /// `(node, digest)` of the others.
        differing: Vec<(u64, String)>,
    },
}

/// Checks that digests taken at the same applied index are equal.
pub fn converged(digests: &[NodeDigest]) -> ConvergenceReport {
    let mut by_index: BTreeMap<u64, Vec<&NodeDigest>> = BTreeMap::new();
    for d in digests {
        by_index.entry(d.applied_index).or_default().push(d);
    }
    let mut report = ConvergenceReport {
        nodes: digests.len(),
        applied_indexes: by_index.len(),
        ..ConvergenceReport::default()
    };
    for (&applied_index, nodes) in &by_index {
        if nodes.len() > 1 {
            report.compared += nodes.len();
        }
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for d in nodes {
            *counts.entry(&d.digest).or_default() += 1;
        }
        if counts.len() <= 1 {
            continue;
        }
        // Most common digest; `max_by_key` keeps the last maximum, so iterate in reverse
        // to prefer the smallest digest on ties.
        let Some((&expected, _)) = counts.iter().rev().max_by_key(|&(_, &n)| n) else {
            continue;
        };
        let mut agreeing: Vec<u64> = nodes
            .iter()
            .filter(|d| d.digest == expected)
            .map(|d| d.node)
            .collect();
        agreeing.sort_unstable();
        let mut differing: Vec<(u64, String)> = nodes
            .iter()
            .filter(|d| d.digest != expected)
            .map(|d| (d.node, d.digest.clone()))
            .collect();
        differing.sort();
        report
            .violations
            .push(ConvergenceViolation::DigestMismatch {
                applied_index,
                expected: expected.to_string(),
                agreeing,
                differing,
            });
    }
    report.ok = report.violations.is_empty();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rollout(id: &str, state: &str, terminal: bool) -> Rollout {
        Rollout {
            id: id.into(),
            kind: "release".into(),
            state: state.into(),
            terminal,
        }
    }

    #[test]
    fn rollouts_must_be_terminal() {
        let good = [
            rollout("r1", "succeeded", true),
            rollout("r2", "rolled_back", true),
        ];
        let rep = rollouts_terminal(&good);
        assert!(rep.ok);
        assert_eq!((rep.rollouts, rep.terminal), (2, 2));
        let rep = rollouts_terminal(&[
            rollout("r1", "succeeded", true),
            rollout("r3", "progressing", false),
        ]);
        assert!(!rep.ok);
        assert_eq!(rep.terminal, 1);
        assert_eq!(
            rep.violations[0].to_string(),
            "release rollout r3 is stuck in non-terminal state progressing"
        );
    }

    fn digest(node: u64, applied_index: u64, d: &str) -> NodeDigest {
        NodeDigest {
            node,
            applied_index,
            digest: d.into(),
        }
    }

    #[test]
    fn equal_digests_converge() {
        let rep = converged(&[
            digest(1, 40, "aa"),
            digest(2, 40, "aa"),
            digest(3, 40, "aa"),
        ]);
        assert!(rep.ok);
        assert_eq!((rep.nodes, rep.compared, rep.applied_indexes), (3, 3, 1));
        // Different indexes are not comparable: counted, not blamed.
        let rep = converged(&[digest(1, 40, "aa"), digest(2, 41, "bb")]);
        assert!(rep.ok);
        assert_eq!((rep.compared, rep.applied_indexes), (0, 2));
    }

    #[test]
    fn diverged_node_is_named() {
        let rep = converged(&[
            digest(1, 40, "aa"),
            digest(2, 40, "bb"),
            digest(3, 40, "aa"),
            digest(4, 39, "cc"),
        ]);
        assert!(!rep.ok);
        assert_eq!(
            rep.violations,
            [ConvergenceViolation::DigestMismatch {
                applied_index: 40,
                expected: "aa".into(),
                agreeing: vec![1, 3],
                differing: vec![(2, "bb".into())]
            }]
        );
    }
}

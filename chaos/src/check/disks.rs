//! Disk faults: a node whose disk filled up or whose syncs failed either kept serving or
//! stopped the clean way (crash-stop), and served again once the fault ended.
//!
//! What it lost or corrupted is not judged here: the durability and linearizability
//! checkers see every acknowledged write, and the convergence checker every node's state,
//! whatever fault came before.

use serde::{Deserialize, Serialize};

use super::history::{DiskFault, DiskStrike};

/// The result of [`disk_faults_survived`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskReport {
    /// True without violations.
    pub ok: bool,
    /// Disk faults struck.
    pub strikes: usize,
    /// Of those, the ones that stopped their node.
    pub stopped: usize,
    /// Of those, the clean stops (crash-stop).
    pub clean_stops: usize,
    /// What is wrong.
    pub violations: Vec<DiskViolation>,
}

/// A disk-fault violation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DiskViolation {
    /// The node died some other way than its crash-stop (a panic, an abort, a kill).
    #[error("node {node} died under {fault:?} without its crash-stop (a panic or an abort?)")]
    UncleanStop {
        /// The node.
        node: u64,
        /// The fault.
        fault: DiskFault,
    },
    /// The node did not serve again after the fault ended and it was restarted.
    #[error("node {node} did not serve again after {fault:?} ended")]
    NotRecovered {
        /// The node.
        node: u64,
        /// The fault.
        fault: DiskFault,
    },
}

/// Checks every disk strike.
pub fn disk_faults_survived(strikes: &[DiskStrike]) -> DiskReport {
    let mut violations = Vec::new();
    for s in strikes {
        if s.stopped && !s.clean_stop {
            violations.push(DiskViolation::UncleanStop {
                node: s.node,
                fault: s.fault,
            });
        }
        if !s.served_again {
            violations.push(DiskViolation::NotRecovered {
                node: s.node,
                fault: s.fault,
            });
        }
    }
    DiskReport {
        ok: violations.is_empty(),
        strikes: strikes.len(),
        stopped: strikes.iter().filter(|s| s.stopped).count(),
        clean_stops: strikes.iter().filter(|s| s.stopped && s.clean_stop).count(),
        violations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strike(fault: DiskFault, stopped: bool, clean_stop: bool, served_again: bool) -> DiskStrike {
        DiskStrike {
            node: 2,
            fault,
            ballast_bytes: 1 << 20,
            syncs_failed: 3,
            stopped,
            clean_stop,
            served_again,
        }
    }

    #[test]
    fn a_clean_stop_or_serving_on_passes() {
        let r = disk_faults_survived(&[
            strike(DiskFault::FsyncError, true, true, true),
            strike(DiskFault::DiskFull, false, false, true),
        ]);
        assert!(r.ok, "{r:?}");
        assert_eq!((r.strikes, r.stopped, r.clean_stops), (2, 1, 1));
    }

    #[test]
    fn a_panic_under_a_failed_sync_and_a_node_that_never_returns_fail() {
        let r = disk_faults_survived(&[
            strike(DiskFault::FsyncError, true, false, true),
            strike(DiskFault::DiskFull, true, true, false),
        ]);
        assert!(!r.ok);
        assert_eq!(
            r.violations,
            [
                DiskViolation::UncleanStop {
                    node: 2,
                    fault: DiskFault::FsyncError
                },
                DiskViolation::NotRecovered {
                    node: 2,
                    fault: DiskFault::DiskFull
                },
            ]
        );
        assert!(r.violations[0]
            .to_string()
            .contains("without its crash-stop"));
    }
}

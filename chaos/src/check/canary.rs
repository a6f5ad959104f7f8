//! Canary weights: the weights applied to the traffic split follow the weights the hub
//! committed, step by step, with nothing skipped, reordered or invented.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::history::CanaryRun;

/// The result of [`canary_weights`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryReport {
    /// True without violations.
    pub ok: bool,
    /// Canary revisions checked.
    pub canaries: usize,
    /// Committed steps, all canaries.
    pub committed_steps: usize,
    /// Applied steps, all canaries.
    pub applied_steps: usize,
    /// What is wrong.
    pub violations: Vec<CanaryViolation>,
}

/// A canary weight violation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CanaryViolation {
    /// Applied steps went backwards or repeated.
    #[error(
        "canary {canary}: applied step {step} (entry {index}) does not follow step {previous}"
    )]
    NonIncreasingStep {
        /// The canary revision.
        canary: String,
        /// Position in the applied list.
        index: usize,
        /// The step before it.
        previous: u64,
        /// The offending step.
        step: u64,
    },
    /// A committed step was never applied.
    #[error("canary {canary}: committed step {step} (weight {weight}) was never applied")]
    MissingStep {
        /// The canary revision.
        canary: String,
        /// The step.
        step: u64,
        /// Its committed weight.
        weight: u8,
    },
    /// A step was applied with another weight than committed.
    #[error("canary {canary}: step {step} committed weight {committed} but applied {applied}")]
    WeightMismatch {
        /// The canary revision.
        canary: String,
        /// The step.
        step: u64,
        /// The committed weight.
        committed: u8,
        /// The applied weight.
        applied: u8,
    },
    /// The applied weight sequence differs from the committed one.
    #[error("canary {canary}: applied weights {applied:?} differ from committed {committed:?} at position {first_difference}")]
    SequenceMismatch {
        /// The canary revision.
        canary: String,
        /// Committed weights, consecutive duplicates collapsed.
        committed: Vec<u8>,
        /// Applied weights from the first committed step on, consecutive duplicates collapsed.
        applied: Vec<u8>,
        /// First position where they differ.
        first_difference: usize,
    },
}

/// Checks every canary revision: applied steps strictly increase; every committed step is
/// applied with its weight; and, collapsing consecutive duplicate weights, the applied
/// weights from the first committed step on equal the committed ones. A revision without
/// committed steps only has its step order checked.
pub fn canary_weights(runs: &[CanaryRun]) -> CanaryReport {
    let mut report = CanaryReport {
        canaries: runs.len(),
        ..CanaryReport::default()
    };
    for run in runs {
        report.committed_steps += run.committed.len();
        report.applied_steps += run.applied.len();
        check_run(run, &mut report.violations);
    }
    report.ok = report.violations.is_empty();
    report
}

fn check_run(run: &CanaryRun, out: &mut Vec<CanaryViolation>) {
    let canary = || run.canary.clone();
    for (index, pair) in run.applied.windows(2).enumerate() {
        let ((previous, _), (step, _)) = (pair[0], pair[1]);
        if step <= previous {
            out.push(CanaryViolation::NonIncreasingStep {
                canary: canary(),
                index: index + 1,
                previous,
                step,
            });
        }
    }
    let mut applied: HashMap<u64, Vec<u8>> = HashMap::new();
    for &(step, weight) in &run.applied {
        applied.entry(step).or_default().push(weight);
    }
    let mut committed = run.committed.clone();
    committed.sort_by_key(|&(step, _)| step);
    for &(step, weight) in &committed {
        match applied.get(&step) {
            None => out.push(CanaryViolation::MissingStep {
                canary: canary(),
                step,
                weight,
            }),
            Some(ws) => {
                if let Some(&other) = ws.iter().find(|&&w| w != weight) {
                    out.push(CanaryViolation::WeightMismatch {
                        canary: canary(),
                        step,
                        committed: weight,
                        applied: other,
                    });
                }
            }
        }
    }
    let Some(&(first_step, _)) = committed.first() else {
        return;
    };
    let want = collapse(committed.iter().map(|&(_, w)| w));
    let got = collapse(
        run.applied
            .iter()
            .filter(|&&(step, _)| step >= first_step)
            .map(|&(_, w)| w),
    );
    if want != got {
        let first_difference = want.iter().zip(&got).take_while(|(a, b)| a == b).count();
        out.push(CanaryViolation::SequenceMismatch {
            canary: canary(),
            committed: want,
            applied: got,
            first_difference,
        });
    }
}

/// The weights with consecutive duplicates collapsed.
fn collapse(weights: impl Iterator<Item = u8>) -> Vec<u8> {
    let mut out: Vec<u8> = Vec::new();
    for w in weights {
        if out.last() != Some(&w) {
            out.push(w);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(committed: &[(u64, u8)], applied: &[(u64, u8)]) -> CanaryRun {
        CanaryRun {
            canary: "web@2".into(),
            committed: committed.to_vec(),
            applied: applied.to_vec(),
        }
    }

    #[test]
    fn matching_weights_pass() {
        let committed = [(3, 10), (4, 25), (5, 25), (6, 50), (7, 100)];
        // Applied from an earlier step than the first committed one; consecutive steps with
        // the same weight collapse.
        let applied = [(1, 0), (3, 10), (4, 25), (5, 25), (6, 50), (7, 100)];
        let rep = canary_weights(&[run(&committed, &applied), run(&[], &[])]);
        assert!(rep.ok, "{rep:?}");
        assert_eq!(
            (rep.canaries, rep.committed_steps, rep.applied_steps),
            (2, 5, 6)
        );
    }

    #[test]
    fn reordered_steps_are_rejected() {
        let rep = canary_weights(&[run(&[(1, 10), (2, 50)], &[(1, 10), (2, 50), (2, 50)])]);
        assert_eq!(
            rep.violations,
            [CanaryViolation::NonIncreasingStep {
                canary: "web@2".into(),
                index: 2,
                previous: 2,
                step: 2
            }]
        );
    }

    #[test]
    fn missing_and_wrong_weights_are_rejected() {
        let rep = canary_weights(&[run(&[(1, 10), (2, 50), (3, 100)], &[(1, 10), (3, 90)])]);
        assert!(!rep.ok);
        assert_eq!(
            rep.violations,
            [
                CanaryViolation::MissingStep {
                    canary: "web@2".into(),
                    step: 2,
                    weight: 50
                },
                CanaryViolation::WeightMismatch {
                    canary: "web@2".into(),
                    step: 3,
                    committed: 100,
                    applied: 90
                },
                CanaryViolation::SequenceMismatch {
                    canary: "web@2".into(),
                    committed: vec![10, 50, 100],
                    applied: vec![10, 90],
                    first_difference: 1
                },
            ]
        );
    }

    #[test]
    fn uncommitted_weight_in_between_is_rejected() {
        // Every committed step is applied correctly, but an extra weight sneaks in.
        let rep = canary_weights(&[run(&[(1, 10), (3, 50)], &[(1, 10), (2, 30), (3, 50)])]);
        assert_eq!(rep.violations.len(), 1);
        assert_eq!(
            rep.violations[0].to_string(),
            "canary web@2: applied weights [10, 30, 50] differ from committed [10, 50] at position 1"
        );
    }
}

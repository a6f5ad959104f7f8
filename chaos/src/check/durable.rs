//! Durability of acknowledged writes: register writes against the values read from every
//! node after healing, and the append-only set workload against the final set.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::history::{AckedWrite, AddOutcome, OpKind, Outcome, RegisterOp, SetAdd};

/// The result of [`acked_writes_durable`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DurabilityReport {
    /// True without violations.
    pub ok: bool,
    /// Acknowledged writes (Ok register writes and `acked_writes`, by id).
    pub acknowledged: usize,
    /// Keys with a final read.
    pub keys_checked: usize,
    /// Keys with acknowledged writes but no final read: nothing could be verified there.
    pub keys_unchecked: usize,
    /// Acknowledged writes proven lost.
    pub lost: usize,
    /// What is wrong.
    pub violations: Vec<DurabilityViolation>,
}

/// A register durability violation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DurabilityViolation {
    /// Nodes returned different values for a key after healing.
    #[error("key {key}: nodes disagree after healing, final reads {values:?}")]
    FinalReadsDisagree {
        /// The register.
        key: String,
        /// The distinct values read.
        values: Vec<Option<u64>>,
    },
    /// A final value no write on the key (other than failed ones) wrote.
    #[error("key {key}: final value {value} was never written")]
    PhantomFinalValue {
        /// The register.
        key: String,
        /// The value.
        value: u64,
    },
    /// The final value is older than acknowledged writes: those writes are lost.
    #[error("key {key}: final value {final_value:?} predates acknowledged writes {lost:?}, which are lost")]
    LostWrites {
        /// The register.
        key: String,
        /// The value read after healing.
        final_value: Option<u64>,
        /// Acknowledged writes invoked after every write of the final value completed (all
        /// acknowledged writes when the final value is `None`).
        lost: Vec<u64>,
    },
}

/// A register write with what is known of its timing.
struct Write {
    id: u64,
    value: u64,
    invoke_ns: Option<u64>,
    /// `None`: unknown or never completed.
    complete_ns: Option<u64>,
    acked: bool,
}

/// Every write that may have taken effect, by key: the recorded ones (not failed) with their
/// times, marked acknowledged from `acked` too, and writes known only from `acked`.
fn writes_by_key<'a>(
    ops: &'a [RegisterOp],
    acked: &'a [AckedWrite],
) -> BTreeMap<&'a str, Vec<Write>> {
    let mut writes: BTreeMap<&str, Vec<Write>> = BTreeMap::new();
    // Where each recorded write sits in `writes`.
    let mut index: HashMap<u64, (&str, usize)> = HashMap::new();
    for op in ops {
        let OpKind::Write { value } = op.kind else {
            continue;
        };
        let (acked_ok, complete_ns) = match op.outcome {
            Outcome::Ok { .. } => (true, op.complete_ns),
            Outcome::Unknown => (false, None),
            Outcome::Failed | Outcome::Mismatch => continue,
        };
        let ws = writes.entry(&op.key).or_default();
        index.insert(op.id, (&op.key, ws.len()));
        ws.push(Write {
            id: op.id,
            value,
            invoke_ns: Some(op.invoke_ns),
            complete_ns,
            acked: acked_ok,
        });
    }
    for a in acked {
        match index.get(&a.id) {
            Some(&(key, i)) if key == a.key => {
                if let Some(w) = writes.get_mut(key).and_then(|ws| ws.get_mut(i)) {
                    w.acked = true;
                }
            }
            _ => {
                let ws = writes.entry(&a.key).or_default();
                index.insert(a.id, (&a.key, ws.len()));
                ws.push(Write {
                    id: a.id,
                    value: a.value,
                    invoke_ns: None,
                    complete_ns: None,
                    acked: true,
                });
            }
        }
    }
    writes
}

/// Checks that the values read after healing keep every acknowledged register write.
///
/// Rules per key with final reads: all nodes agree; the value was written (by a write that
/// did not fail); `None` only when no write was acknowledged; and no acknowledged write was
/// invoked after every write of the final value had completed (it would have overwritten
/// it). Writes known only from `acked` (no [`RegisterOp`] with the same id) have no times, so
/// the last rule cannot blame or clear them. The full ordering argument is the
/// linearizability checker's; this one names the lost writes.
pub fn acked_writes_durable(
    ops: &[RegisterOp],
    acked: &[AckedWrite],
    final_reads: &[(String, Option<u64>)],
) -> DurabilityReport {
    let writes = writes_by_key(ops, acked);
    let acknowledged = writes.values().flatten().filter(|w| w.acked).count();

    let mut finals: BTreeMap<&str, BTreeSet<Option<u64>>> = BTreeMap::new();
    for (key, v) in final_reads {
        finals.entry(key).or_default().insert(*v);
    }
    let mut violations = Vec::new();
    let mut lost_ids = BTreeSet::new();
    for (&key, values) in &finals {
        if values.len() > 1 {
            violations.push(DurabilityViolation::FinalReadsDisagree {
                key: key.to_string(),
                values: values.iter().copied().collect(),
            });
        }
        let ws = writes.get(key).map(Vec::as_slice).unwrap_or(&[]);
        for &v in values {
            let lost: Vec<u64> = match v {
                None => ws.iter().filter(|w| w.acked).map(|w| w.id).collect(),
                Some(x) => {
                    let writers: Vec<&Write> = ws.iter().filter(|w| w.value == x).collect();
                    if writers.is_empty() {
                        violations.push(DurabilityViolation::PhantomFinalValue {
                            key: key.to_string(),
                            value: x,
                        });
                        continue;
                    }
                    // The last completion among the final value's writes; unknown when one
                    // of them never completed (it may have taken effect arbitrarily late).
                    let latest = writers
                        .iter()
                        .map(|w| w.complete_ns)
                        .try_fold(0, |m, c| c.map(|c| m.max(c)));
                    match latest {
                        None => Vec::new(),
                        Some(latest) => ws
                            .iter()
                            .filter(|w| w.acked && w.value != x)
                            .filter(|w| w.invoke_ns.is_some_and(|i| i > latest))
                            .map(|w| w.id)
                            .collect(),
                    }
                }
            };
            if !lost.is_empty() {
                lost_ids.extend(lost.iter().copied());
                violations.push(DurabilityViolation::LostWrites {
                    key: key.to_string(),
                    final_value: v,
                    lost,
                });
            }
        }
    }
    let keys_unchecked = writes
        .iter()
        .filter(|(k, ws)| !finals.contains_key(*k) && ws.iter().any(|w| w.acked))
        .count();
    DurabilityReport {
        ok: violations.is_empty(),
        acknowledged,
        keys_checked: finals.len(),
        keys_unchecked,
        lost: lost_ids.len(),
        violations,
    }
}

/// The result of [`lost_writes`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetReport {
    /// True without violations.
    pub ok: bool,
    /// Adds attempted.
    pub attempted: usize,
    /// Adds acknowledged Ok.
    pub acknowledged: usize,
    /// Adds with an unknown outcome.
    pub unknown: usize,
    /// Unknown adds whose element is in the final set.
    pub recovered: usize,
    /// Acknowledged adds missing from the final set.
    pub lost: usize,
    /// Extra copies of elements in the final set.
    pub duplicates: usize,
    /// Elements in the final set that no add (other than failed ones) attempted.
    pub phantoms: usize,
    /// What is wrong.
    pub violations: Vec<SetViolation>,
}

/// An append-only set violation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SetViolation {
    /// An acknowledged add is missing from the final set.
    #[error("add {id} of {element:?} was acknowledged but is missing from the final set")]
    Lost {
        /// The add.
        id: u64,
        /// Its element.
        element: String,
    },
    /// An element is in the final set more than once (an add applied twice).
    #[error("element {element:?} is in the final set {count} times")]
    Duplicate {
        /// The element.
        element: String,
        /// How many times.
        count: usize,
    },
    /// An element no add attempted is in the final set.
    #[error("element {element:?} is in the final set but was never added")]
    Phantom {
        /// The element.
        element: String,
    },
    /// An element whose only adds failed is in the final set.
    #[error("element {element:?} is in the final set but its adds {ids:?} failed")]
    FailedAddPresent {
        /// The element.
        element: String,
        /// The failed adds.
        ids: Vec<u64>,
    },
}

/// Checks the append-only set workload: every Ok add is in `final_set` (else lost), no
/// element is there twice (duplicate) and every element there was added by an Ok or Unknown
/// add (else phantom, or a failed add that took effect).
pub fn lost_writes(adds: &[SetAdd], final_set: &[String]) -> SetReport {
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for e in final_set {
        *count.entry(e).or_default() += 1;
    }
    let mut possible: HashSet<&str> = HashSet::new();
    let mut failed: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut report = SetReport {
        attempted: adds.len(),
        ..SetReport::default()
    };
    for a in adds {
        let present = count.contains_key(a.element.as_str());
        match a.outcome {
            AddOutcome::Ok => {
                report.acknowledged += 1;
                possible.insert(&a.element);
                if !present {
                    report.lost += 1;
                    report.violations.push(SetViolation::Lost {
                        id: a.id,
                        element: a.element.clone(),
                    });
                }
            }
            AddOutcome::Unknown => {
                report.unknown += 1;
                possible.insert(&a.element);
                if present {
                    report.recovered += 1;
                }
            }
            AddOutcome::Failed => failed.entry(&a.element).or_default().push(a.id),
        }
    }
    for (&element, &n) in &count {
        if n > 1 {
            report.duplicates += n - 1;
            report.violations.push(SetViolation::Duplicate {
                element: element.to_string(),
                count: n,
            });
        }
        if possible.contains(element) {
            continue;
        }
        report.phantoms += 1;
        report.violations.push(match failed.get(element) {
            Some(ids) => SetViolation::FailedAddPresent {
                element: element.to_string(),
                ids: ids.clone(),
            },
            None => SetViolation::Phantom {
                element: element.to_string(),
            },
        });
    }
    report.ok = report.violations.is_empty();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wop(
        id: u64,
        key: &str,
        value: u64,
        inv: u64,
        comp: Option<u64>,
        outcome: Outcome,
    ) -> RegisterOp {
        RegisterOp {
            id,
            client: 0,
            key: key.to_string(),
            kind: OpKind::Write { value },
            invoke_ns: inv,
            complete_ns: comp,
            outcome,
        }
    }
    const OK: Outcome = Outcome::Ok { read_value: None };

    fn finals(v: &[(&str, Option<u64>)]) -> Vec<(String, Option<u64>)> {
        v.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn latest_acked_write_surviving_passes() {
        let ops = [
            wop(1, "a", 1, 0, Some(10), OK),
            wop(2, "a", 2, 20, Some(30), OK),
            wop(3, "b", 3, 0, Some(10), OK),
        ];
        let rep = acked_writes_durable(
            &ops,
            &[],
            &finals(&[("a", Some(2)), ("a", Some(2)), ("b", Some(3))]),
        );
        assert!(rep.ok, "{rep:?}");
        assert_eq!((rep.acknowledged, rep.keys_checked, rep.lost), (3, 2, 0));
    }

    #[test]
    fn older_final_value_loses_later_acked_writes() {
        let ops = [
            wop(1, "a", 1, 0, Some(10), OK),
            wop(2, "a", 2, 20, Some(30), OK),
            wop(3, "a", 3, 25, Some(40), OK),
        ];
        let rep = acked_writes_durable(&ops, &[], &finals(&[("a", Some(1))]));
        assert!(!rep.ok);
        assert_eq!(rep.lost, 2);
        assert_eq!(
            rep.violations,
            [DurabilityViolation::LostWrites {
                key: "a".into(),
                final_value: Some(1),
                lost: vec![2, 3]
            }]
        );
        // Concurrent writes may end in either order.
        let rep = acked_writes_durable(&ops, &[], &finals(&[("a", Some(2))]));
        assert!(rep.ok, "{rep:?}");
    }

    #[test]
    fn final_none_loses_every_acked_write_and_disagreement_is_reported() {
        let acked = [AckedWrite {
            id: 9,
            key: "a".into(),
            value: 4,
        }];
        let rep = acked_writes_durable(&[], &acked, &finals(&[("a", None), ("a", Some(4))]));
        assert!(!rep.ok);
        assert_eq!(rep.lost, 1);
        assert_eq!(
            rep.violations,
            [
                DurabilityViolation::FinalReadsDisagree {
                    key: "a".into(),
                    values: vec![None, Some(4)]
                },
                DurabilityViolation::LostWrites {
                    key: "a".into(),
                    final_value: None,
                    lost: vec![9]
                }
            ]
        );
    }

    #[test]
    fn phantom_final_value_and_unknown_writes() {
        let ops = [
            wop(1, "a", 1, 0, Some(10), OK),
            wop(2, "a", 2, 5, None, Outcome::Unknown),
            wop(3, "a", 3, 50, Some(60), OK),
            wop(4, "a", 4, 5, Some(6), Outcome::Failed),
        ];
        // The Unknown write may have landed after write 3.
        assert!(acked_writes_durable(&ops, &[], &finals(&[("a", Some(2))])).ok);
        let rep = acked_writes_durable(&ops, &[], &finals(&[("a", Some(4))]));
        assert_eq!(
            rep.violations,
            [DurabilityViolation::PhantomFinalValue {
                key: "a".into(),
                value: 4
            }]
        );
        // A key never read after healing is counted, not blamed.
        let rep = acked_writes_durable(&ops, &[], &finals(&[("b", None)]));
        assert!(rep.ok);
        assert_eq!(rep.keys_unchecked, 1);
    }

    fn add(id: u64, e: &str, outcome: AddOutcome) -> SetAdd {
        SetAdd {
            id,
            element: e.to_string(),
            outcome,
        }
    }
    fn set(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn complete_set_passes() {
        let adds = [
            add(1, "x", AddOutcome::Ok),
            add(2, "y", AddOutcome::Unknown),
            add(3, "z", AddOutcome::Unknown),
            add(4, "w", AddOutcome::Failed),
        ];
        let rep = lost_writes(&adds, &set(&["x", "y"]));
        assert!(rep.ok, "{rep:?}");
        assert_eq!(
            (rep.attempted, rep.acknowledged, rep.unknown, rep.recovered),
            (4, 1, 2, 1)
        );
    }

    #[test]
    fn lost_duplicate_phantom_and_failed_adds_are_rejected() {
        let adds = [
            add(1, "x", AddOutcome::Ok),
            add(2, "y", AddOutcome::Ok),
            add(3, "f", AddOutcome::Failed),
        ];
        let rep = lost_writes(&adds, &set(&["x", "x", "ghost", "f"]));
        assert!(!rep.ok);
        assert_eq!((rep.lost, rep.duplicates, rep.phantoms), (1, 1, 2));
        assert_eq!(
            rep.violations,
            [
                SetViolation::Lost {
                    id: 2,
                    element: "y".into()
                },
                SetViolation::FailedAddPresent {
                    element: "f".into(),
                    ids: vec![3]
                },
                SetViolation::Phantom {
                    element: "ghost".into()
                },
                SetViolation::Duplicate {
                    element: "x".into(),
                    count: 2
                },
            ]
        );
        assert_eq!(
            rep.violations[0].to_string(),
            "add 2 of \"y\" was acknowledged but is missing from the final set"
        );
    }
}

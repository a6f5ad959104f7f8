//! Linearizability of register histories with compare-and-set.
//!
//! The register checker ([`super::linear`]) prunes its search with facts that hold only for
//! reads and writes (a read never changes the register, so it is placed as early as
//! possible; a value no read expects is "dead"). A compare-and-set both reads and writes, so
//! a key with any CAS is checked here instead, by the plain Wing & Gong search with Lowe's
//! memoization, as porcupine runs it: the call and return events in time order form a doubly
//! linked list; the search linearizes the first call whose operation is legal in the current
//! register state, lifts it out and restarts from the head, and backtracks when it reaches a
//! return; a (linearized set, register state) configuration is explored at most once.
//!
//! Semantics per operation (the register starts as `None`):
//! - Ok read of `v`: legal when the register holds `v`.
//! - Ok write of `v`: always legal; the register becomes `v`.
//! - Ok CAS `expect → new` (swapped): legal when the register holds `expect`; it becomes
//!   `new`. Mismatch (completed, not swapped): legal when it does not hold `expect`.
//! - Unknown write or CAS: may take effect at any time after its invoke, so its return is at
//!   infinity; it is always legal (a CAS applies only if the register holds `expect`).
//! - Failed operations and reads without an answer constrain nothing ([`super::linear`]
//!   drops them before either search).
//!
//! Effort is capped by [`LinOptions::max_states_per_key`] configurations, past which the
//! verdict is [`Verdict::Unknown`].

use std::collections::HashSet;

use super::history::{OpKind, Outcome, RegisterOp};
use super::lin_report::{KeyReport, LinOptions, LinViolation, Verdict};

/// The end of the event list.
const NIL: usize = usize::MAX;

/// One call or return event.
#[derive(Debug, Clone, Copy)]
struct Event {
    /// The operation (index into the key's operations).
    op: usize,
    /// Call (`true`) or return.
    call: bool,
    /// For a call, the index of its return event.
    ret: usize,
}

/// Whether any operation of the key is a compare-and-set (then this module checks it).
pub fn has_cas(ops: &[&RegisterOp]) -> bool {
    ops.iter().any(|o| matches!(o.kind, OpKind::Cas { .. }))
}

/// The register after `op` in `state`, or `None` when `op` is not legal there.
fn step(op: &RegisterOp, state: Option<u64>) -> Option<Option<u64>> {
    match (op.kind, op.outcome) {
        (OpKind::Read, Outcome::Ok { read_value }) => (read_value == state).then_some(state),
        (OpKind::Write { value }, Outcome::Ok { .. } | Outcome::Unknown) => Some(Some(value)),
        (OpKind::Cas { expect, new }, Outcome::Ok { .. }) => {
            (state == Some(expect)).then_some(Some(new))
        }
        (OpKind::Cas { expect, .. }, Outcome::Mismatch) => (state != Some(expect)).then_some(state),
        (OpKind::Cas { expect, new }, Outcome::Unknown) => Some(if state == Some(expect) {
            Some(new)
        } else {
            state
        }),
        // Dropped before the search (Failed, unanswered reads) or never recorded (a read or
        // write that "mismatched"): constrain nothing.
        (OpKind::Read, _) | (OpKind::Write { .. }, _) | (OpKind::Cas { .. }, Outcome::Failed) => {
            Some(state)
        }
    }
}

/// When `op` completed: infinity unless it completed with an answer.
fn completion(op: &RegisterOp) -> u64 {
    match (op.outcome, op.complete_ns) {
        (Outcome::Ok { .. } | Outcome::Mismatch, Some(c)) => c.max(op.invoke_ns),
        _ => u64::MAX,
    }
}

/// Checks one key whose operations include a compare-and-set.
pub fn check_key(
    key: &str,
    ops: &[&RegisterOp],
    opts: &LinOptions,
) -> (KeyReport, Vec<LinViolation>) {
    // Events in time order, calls before returns at equal times (touching operations are
    // concurrent).
    let mut order: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * ops.len());
    for (i, op) in ops.iter().enumerate() {
        order.push((op.invoke_ns, true, i));
        order.push((completion(op), false, i));
    }
    order.sort_by_key(|&(t, call, i)| (t, !call, i));
    let mut ret_at = vec![NIL; ops.len()];
    for (pos, &(_, call, i)) in order.iter().enumerate() {
        if !call {
            ret_at[i] = pos;
        }
    }
    let events: Vec<Event> = order
        .iter()
        .map(|&(_, call, op)| Event {
            op,
            call,
            ret: if call { ret_at[op] } else { NIL },
        })
        .collect();
    let (verdict, explored) = search(ops, &events, opts.max_states_per_key);
    let report = KeyReport {
        key: key.to_string(),
        verdict,
        operations: ops.len(),
        explored,
    };
    let violations = match verdict {
        Verdict::Linearizable => Vec::new(),
        Verdict::NotLinearizable => vec![LinViolation::NoCasLinearization {
            key: key.to_string(),
            operations: ops.len(),
        }],
        Verdict::Unknown => vec![LinViolation::BudgetExceeded {
            key: key.to_string(),
            explored,
        }],
    };
    (report, violations)
}

/// The search over `events`; returns the verdict and the configurations explored.
fn search(ops: &[&RegisterOp], events: &[Event], budget: u64) -> (Verdict, u64) {
    let n = events.len();
    // The list: index `n` is the head sentinel.
    let mut next: Vec<usize> = (1..=n).collect();
    next[n - 1] = NIL;
    next.push(if n == 0 { NIL } else { 0 });
    let mut prev: Vec<usize> = (0..n).map(|i| if i == 0 { n } else { i - 1 }).collect();
    prev.push(NIL);
    let head = n;
    let words = ops.len().div_ceil(64);
    let mut linearized = vec![0u64; words];
    let mut cache: HashSet<(Vec<u64>, Option<u64>)> = HashSet::new();
    let mut stack: Vec<(usize, Option<u64>)> = Vec::new();
    let mut state: Option<u64> = None;
    let mut explored = 0u64;
    let mut entry = next[head];
    // Lifts the call at `e` and its return out of the list; `relink` puts them back.
    let unlink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, e: usize| {
        for x in [e, events[e].ret] {
            let (p, q) = (prev[x], next[x]);
            next[p] = q;
            if q != NIL {
                prev[q] = p;
            }
        }
    };
    let relink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, e: usize| {
        for x in [events[e].ret, e] {
            let (p, q) = (prev[x], next[x]);
            next[p] = x;
            if q != NIL {
                prev[q] = x;
            }
        }
    };
    while next[head] != NIL {
        // The list always ends with a return (every call's return follows it), so the walk
        // meets one before running off the end; `NIL` is handled as one all the same.
        let ev = (entry != NIL).then(|| events[entry]);
        if let Some(ev) = ev.filter(|ev| ev.call) {
            if let Some(after) = step(ops[ev.op], state) {
                let mut set = linearized.clone();
                set[ev.op / 64] |= 1 << (ev.op % 64);
                if cache.insert((set.clone(), after)) {
                    explored += 1;
                    if explored > budget {
                        return (Verdict::Unknown, explored);
                    }
                    stack.push((entry, state));
                    state = after;
                    linearized = set;
                    unlink(&mut next, &mut prev, entry);
                    entry = next[head];
                    continue;
                }
            }
            entry = next[entry];
        } else {
            // The return of an operation not yet linearized: undo the last choice.
            let Some((e, old)) = stack.pop() else {
                return (Verdict::NotLinearizable, explored);
            };
            let op = events[e].op;
            linearized[op / 64] &= !(1 << (op % 64));
            state = old;
            relink(&mut next, &mut prev, e);
            entry = next[e];
        }
    }
    (Verdict::Linearizable, explored)
}

#[cfg(test)]
mod tests {
    use super::super::linear::check_linearizable;
    use super::*;

    fn op(id: u64, kind: OpKind, outcome: Outcome, inv: u64, comp: Option<u64>) -> RegisterOp {
        RegisterOp {
            id,
            client: id as u32,
            key: "k".into(),
            kind,
            invoke_ns: inv,
            complete_ns: comp,
            outcome,
        }
    }

    fn ok() -> Outcome {
        Outcome::Ok { read_value: None }
    }

    fn read(v: Option<u64>) -> Outcome {
        Outcome::Ok { read_value: v }
    }

    fn cas(expect: u64, new: u64) -> OpKind {
        OpKind::Cas { expect, new }
    }

    #[test]
    fn sequential_compare_and_set_follows_the_register() {
        let h = [
            op(0, OpKind::Write { value: 1 }, ok(), 0, Some(1)),
            op(1, cas(1, 2), ok(), 2, Some(3)),
            op(2, cas(1, 3), Outcome::Mismatch, 4, Some(5)),
            op(3, OpKind::Read, read(Some(2)), 6, Some(7)),
        ];
        assert!(check_linearizable(&h).ok);
    }

    #[test]
    fn a_swap_from_a_value_the_register_never_held_then_is_refused() {
        let h = [
            op(0, OpKind::Write { value: 1 }, ok(), 0, Some(1)),
            op(1, cas(5, 2), ok(), 2, Some(3)),
        ];
        let r = check_linearizable(&h);
        assert!(!r.ok);
        assert!(matches!(
            r.violations[..],
            [LinViolation::NoCasLinearization { operations: 2, .. }]
        ));
        // A mismatch while the register held the expected value is refused too.
        let h = [
            op(0, OpKind::Write { value: 1 }, ok(), 0, Some(1)),
            op(1, cas(1, 2), Outcome::Mismatch, 2, Some(3)),
        ];
        assert!(!check_linearizable(&h).ok);
    }

    #[test]
    fn concurrent_and_unknown_swaps_may_take_effect_either_way() {
        // The read overlaps the swap: it may see either value.
        let h = [
            op(0, OpKind::Write { value: 1 }, ok(), 0, Some(1)),
            op(1, cas(1, 2), ok(), 2, Some(5)),
            op(2, OpKind::Read, read(Some(1)), 3, Some(4)),
        ];
        assert!(check_linearizable(&h).ok);
        // An unknown swap explains a later read of its value, or may never happen.
        let h = [
            op(0, OpKind::Write { value: 1 }, ok(), 0, Some(1)),
            op(1, cas(1, 2), Outcome::Unknown, 2, None),
            op(2, OpKind::Read, read(Some(2)), 6, Some(7)),
            op(3, OpKind::Read, read(Some(2)), 8, Some(9)),
        ];
        assert!(check_linearizable(&h).ok);
        let h = [
            op(0, OpKind::Write { value: 1 }, ok(), 0, Some(1)),
            op(1, cas(1, 2), Outcome::Unknown, 2, None),
            op(2, OpKind::Read, read(Some(1)), 6, Some(7)),
        ];
        assert!(check_linearizable(&h).ok);
    }

    #[test]
    fn the_budget_makes_the_verdict_unknown() {
        let h: Vec<RegisterOp> = (0..12)
            .map(|i| op(i, cas(i, i + 1), Outcome::Unknown, i, None))
            .chain([op(99, OpKind::Read, read(Some(77)), 50, Some(60))])
            .collect();
        let opts = LinOptions {
            max_states_per_key: 10,
            ..LinOptions::default()
        };
        let r = super::super::linear::check_linearizable_with(&h, &opts);
        assert_eq!(r.keys[0].verdict, Verdict::Unknown);
    }
}

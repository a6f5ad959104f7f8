//! Linearizability of register histories.
//!
//! Linearizability is local (Herlihy & Wing), so each key is checked on its own. Per key the
//! checker runs the Wing & Gong search in the form porcupine uses: the history is a doubly
//! linked list of call and return events in time order (calls first at equal times, so
//! operations touching at one instant are concurrent); the search linearizes the first call
//! whose operation is legal in the current register state, lifts that operation out of the
//! list and restarts from the head; reaching a return event means the operation it closes
//! cannot be placed here, so the search backtracks. Lowe's memoization prunes it: a
//! (linearized-set, register-state) configuration is explored at most once.
//!
//! Semantics: a write sets the register, a read returns it, the initial value is `None`.
//! An Ok operation takes effect between invoke and completion; an Unknown write at any time
//! after invoke, or never; Failed operations and Unknown/Failed reads are dropped.
//!
//! Before the search (all sound whether or not written values are unique):
//! - a read of a value that no (non-failed) write on the key wrote, or that completed before
//!   every such write was invoked, is a violation on its own;
//! - an Unknown write whose value no Ok read returned is dropped (it can always be chosen
//!   not to have happened);
//! - an Unknown write that is the only write of a value some Ok read returned must have
//!   happened before the first such read completed, so it becomes an ordinary operation with
//!   that completion. With unique values (the runner's workload) no operation is left with an
//!   infinite completion. Unknown writes of repeated values stay optional: the search
//!   succeeds once every other operation is placed, since a write can always come last.
//!
//! Then the zone pre-check (Gibbons & Korach): a value written once is current over one
//! contiguous stretch of any linearization, from its write through its last read, which
//! the operations' times bound from inside ("forward zone") or outside ("backward zone").
//! Two forward zones overlapping, or a backward zone strictly inside a forward one, is a
//! violation found in `O(n log n)`, whatever the concurrency, and names both values and the
//! operations fixing the bounds. It is only a necessary condition here (values written more
//! than once are skipped); the search decides the rest.
//!
//! Register-specific pruning inside the search (exact, no uniqueness needed):
//! - a write may not overwrite a value that unplaced reads still expect when no unplaced
//!   write of that value is left: those reads could never be placed;
//! - a legal read is placed at once and never retried later (a read does not change the
//!   register, so placing it as early as possible dominates), and so is a write of a value no
//!   unplaced read expects over such a value; when such a forced step fails, the
//!   configuration before it fails too;
//! - all register values no unplaced read expects are one state in the cache ("dead": no
//!   read can follow, any write can).
//!
//! With these the search is close to linear on register workloads (thousands of operations
//! per key, tens of concurrent clients, in milliseconds); its worst case stays exponential,
//! so effort is capped per key by [`LinOptions::max_states_per_key`] distinct configurations,
//! past which the key's verdict is [`Verdict::Unknown`]. A configuration is stored as the
//! state, the prefix (how many ops in call order are all linearized) and a bitmask of the
//! linearized ops just beyond it: 16 bytes while those fit in 64 ops.
//! Tests check the verdicts, with and without the zone pre-check, against an exhaustive
//! search on thousands of small random histories, including repeated values.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::history::{OpKind, Outcome, RegisterOp};

/// How many operations of the longest partial linearization a violation quotes.
const PARTIAL_TAIL: usize = 16;

pub use super::lin_report::{
    KeyReport, LinOptions, LinReport, LinViolation, Verdict, Zone, DEFAULT_MAX_STATES_PER_KEY,
};

/// Checks every key of `ops` with the default budget.
pub fn check_linearizable(ops: &[RegisterOp]) -> LinReport {
    check_linearizable_with(ops, &LinOptions::default())
}

/// Checks every key of `ops`.
pub fn check_linearizable_with(ops: &[RegisterOp], opts: &LinOptions) -> LinReport {
    let mut by_key: BTreeMap<&str, Vec<&RegisterOp>> = BTreeMap::new();
    let mut checked = 0;
    for op in ops {
        if constrains(op) {
            checked += 1;
            by_key.entry(op.key.as_str()).or_default().push(op);
        }
    }
    let mut keys = Vec::new();
    let mut violations = Vec::new();
    for (key, key_ops) in by_key {
        let (report, mut v) = check_key(key, &key_ops, opts);
        keys.push(report);
        violations.append(&mut v);
    }
    LinReport {
        ok: keys.iter().all(|k| k.verdict == Verdict::Linearizable) && violations.is_empty(),
        operations: ops.len(),
        checked,
        keys,
        violations,
    }
}

/// Whether `op` constrains the verdict: Failed operations and reads without an answer do
/// not.
fn constrains(op: &RegisterOp) -> bool {
    !matches!(
        (op.kind, op.outcome),
        (_, Outcome::Failed) | (OpKind::Read, Outcome::Unknown)
    )
}

/// A search operation.
#[derive(Debug, Clone, Copy)]
struct SOp {
    /// Index into the key's original operations.
    src: usize,
    /// `true`: write of value index `val`; `false`: read expecting `val`.
    write: bool,
    /// Value index: 0 is `None`, `i > 0` is `values[i - 1]`.
    val: u32,
    call: u64,
    /// `u64::MAX`: never completes.
    ret: u64,
    /// Must be linearized (false only for optional Unknown writes).
    required: bool,
}

/// Completion of `op`: `u64::MAX` unless it is Ok; an Ok op completing before its invoke
/// (reported as malformed) counts as completing at its invoke.
fn ret_of(op: &RegisterOp) -> u64 {
    match (op.outcome, op.complete_ns) {
        (Outcome::Ok { .. }, Some(c)) => c.max(op.invoke_ns),
        _ => u64::MAX,
    }
}

/// A key's report decided without the search.
fn decided(key: &str, ops: &[&RegisterOp], verdict: Verdict) -> KeyReport {
    KeyReport {
        key: key.to_string(),
        verdict,
        operations: ops.len(),
        explored: 0,
    }
}

/// Checks one key: pre-checks, pruning, then the search.
fn check_key(key: &str, ops: &[&RegisterOp], opts: &LinOptions) -> (KeyReport, Vec<LinViolation>) {
    // The pruning below holds for reads and writes only.
    if super::cas::has_cas(ops) {
        return super::cas::check_key(key, ops, opts);
    }
    let mut violations = malformed(key, ops);
    // Writers of each value (all non-failed writes: `ops` holds no failed ones).
    let mut writers: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        if let OpKind::Write { value } = op.kind {
            writers.entry(value).or_default().push(i);
        }
    }
    // Reads no write explains are violations on their own; the search is skipped then.
    let (unexplained, first_read) = read_prechecks(key, ops, &writers);
    if !unexplained.is_empty() {
        violations.extend(unexplained);
        return (decided(key, ops, Verdict::NotLinearizable), violations);
    }
    let (sops, values) = search_ops(ops, &writers, &first_read);
    if opts.zone_precheck {
        if let Some(conflict) = zone_violation(key, ops, &sops, &values) {
            violations.push(conflict);
            return (decided(key, ops, Verdict::NotLinearizable), violations);
        }
    }
    let result = Search::new(&sops, values.len() + 1).run(opts.max_states_per_key);
    let (verdict, explored) = match result {
        SearchResult::Linearizable { explored } => (Verdict::Linearizable, explored),
        SearchResult::Budget { explored } => {
            violations.push(LinViolation::BudgetExceeded {
                key: key.to_string(),
                explored,
            });
            (Verdict::Unknown, explored)
        }
        SearchResult::NotLinearizable { explored, stuck } => {
            let op = ops[sops[stuck.op].src];
            violations.push(LinViolation::NotLinearizable {
                key: key.to_string(),
                op: op.id,
                op_desc: describe(op),
                linearized: stuck.depth,
                partial_tail: stuck.tail.iter().map(|&s| ops[sops[s].src].id).collect(),
                state: value_at(&values, stuck.state),
                waiting_reads: stuck.waiting.iter().map(|&s| ops[sops[s].src].id).collect(),
            });
            (Verdict::NotLinearizable, explored)
        }
    };
    let report = KeyReport {
        explored,
        ..decided(key, ops, verdict)
    };
    (report, violations)
}

/// Ok operations that completed before they were invoked (a recording bug).
fn malformed(key: &str, ops: &[&RegisterOp]) -> Vec<LinViolation> {
    ops.iter()
        .filter_map(|op| match (op.outcome, op.complete_ns) {
            (Outcome::Ok { .. }, Some(c)) if c < op.invoke_ns => Some(LinViolation::Malformed {
                key: key.to_string(),
                op: op.id,
                invoke_ns: op.invoke_ns,
                complete_ns: c,
            }),
            _ => None,
        })
        .collect()
}

/// Reads that no write explains (a value never written, or read before any write of it was
/// invoked), and the earliest completion of an Ok read returning each value.
fn read_prechecks(
    key: &str,
    ops: &[&RegisterOp],
    writers: &HashMap<u64, Vec<usize>>,
) -> (Vec<LinViolation>, HashMap<u64, u64>) {
    let mut violations = Vec::new();
    let mut first_read: HashMap<u64, u64> = HashMap::new();
    for op in ops {
        let (
            OpKind::Read,
            Outcome::Ok {
                read_value: Some(v),
            },
        ) = (op.kind, op.outcome)
        else {
            continue;
        };
        let r = ret_of(op);
        let ws = writers.get(&v).map(Vec::as_slice).unwrap_or(&[]);
        if ws.is_empty() {
            violations.push(LinViolation::UnwrittenValue {
                key: key.to_string(),
                op: op.id,
                value: v,
            });
        } else if ws.iter().all(|&w| ops[w].invoke_ns > r) {
            violations.push(LinViolation::ReadBeforeWrite {
                key: key.to_string(),
                op: op.id,
                value: v,
                read_complete_ns: r,
                writes: ws.iter().map(|&w| ops[w].id).collect(),
            });
        }
        let e = first_read.entry(v).or_insert(r);
        *e = (*e).min(r);
    }
    (violations, first_read)
}

/// The search operations in call order, with Unknown writes pruned, and the values they
/// name (value index `i > 0` is `values[i - 1]`; 0 is `None`).
fn search_ops(
    ops: &[&RegisterOp],
    writers: &HashMap<u64, Vec<usize>>,
    first_read: &HashMap<u64, u64>,
) -> (Vec<SOp>, Vec<u64>) {
    let mut values: Vec<u64> = Vec::new();
    let mut value_index: HashMap<u64, u32> = HashMap::new();
    let mut index_of = |v: Option<u64>| -> u32 {
        match v {
            None => 0,
            Some(v) => *value_index.entry(v).or_insert_with(|| {
                values.push(v);
                values.len() as u32
            }),
        }
    };
    let mut sops = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let sop = match (op.kind, op.outcome) {
            (OpKind::Write { value }, Outcome::Ok { .. }) => SOp {
                src: i,
                write: true,
                val: index_of(Some(value)),
                call: op.invoke_ns,
                ret: ret_of(op),
                required: true,
            },
            (OpKind::Write { value }, Outcome::Unknown) => {
                let Some(&first) = first_read.get(&value) else {
                    continue; // Never observed: may never have happened.
                };
                let unique = writers.get(&value).is_some_and(|w| w.len() == 1);
                SOp {
                    src: i,
                    write: true,
                    val: index_of(Some(value)),
                    call: op.invoke_ns,
                    // The pre-check guarantees `first >= invoke` for a unique writer.
                    ret: if unique {
                        first.max(op.invoke_ns)
                    } else {
                        u64::MAX
                    },
                    required: unique,
                }
            }
            (OpKind::Read, Outcome::Ok { read_value }) => SOp {
                src: i,
                write: false,
                val: index_of(read_value),
                call: op.invoke_ns,
                ret: ret_of(op),
                required: true,
            },
            // Dropped by the caller; kept out defensively.
            _ => continue,
        };
        sops.push(sop);
    }
    sops.sort_by_key(|s| (s.call, ops[s.src].id));
    (sops, values)
}

/// The value of value index `idx` ([`search_ops`]).
fn value_at(values: &[u64], idx: u32) -> Option<u64> {
    (idx > 0).then(|| values[idx as usize - 1])
}

/// The zone pre-check: two values written once each that must both be current over
/// overlapping times, as a violation.
fn zone_violation(
    key: &str,
    ops: &[&RegisterOp],
    sops: &[SOp],
    values: &[u64],
) -> Option<LinViolation> {
    let (held, other) = zone_conflict(sops, values.len() + 1)?;
    let zone = |z: ZoneAt| Zone {
        value: value_at(values, z.value),
        forward: z.forward,
        start_ns: u64::try_from(z.start).ok(),
        // Ends are finite: an infinite end never conflicts.
        end_ns: u64::try_from(z.end).unwrap_or(u64::MAX),
        start_op: z.start_op.map(|s| ops[sops[s].src].id),
        end_op: ops[sops[z.end_op].src].id,
    };
    Some(LinViolation::ZoneConflict {
        key: key.to_string(),
        held: zone(held),
        other: zone(other),
    })
}

/// A zone in search terms: times as `i128` (`-1`: before everything), ops as search indexes.
#[derive(Debug, Clone, Copy)]
struct ZoneAt {
    value: u32,
    forward: bool,
    start: i128,
    end: i128,
    start_op: Option<usize>,
    end_op: usize,
}

/// The Gibbons & Korach zone conditions, as a sound pre-check. For a value written by exactly
/// one (required) write, the write and the value's reads are contiguous in any
/// linearization. So with `f` the earliest completion and `s` the latest invoke among them:
/// if `f < s` the value is current throughout `[f, s]` (a forward zone), else at some
/// instant of `[s, f]` (a backward zone). Two forward zones may not overlap, and a backward
/// zone may not lie inside a forward one (strictly, so touching operations stay
/// concurrent). The initial value is such a value, written at the beginning. Values written
/// more than once are skipped. Returns a conflicting (forward, other) pair.
fn zone_conflict(sops: &[SOp], n_values: usize) -> Option<(ZoneAt, ZoneAt)> {
    let mut writers = vec![0u32; n_values];
    let mut optional = vec![false; n_values];
    // Per value: (earliest completion, its op) and (latest invoke, its op).
    let mut first_ret: Vec<Option<(i128, Option<usize>)>> = vec![None; n_values];
    let mut last_call: Vec<Option<(i128, usize)>> = vec![None; n_values];
    // The initial value is written before everything.
    writers[0] = 1;
    first_ret[0] = Some((-1, None));
    for (i, o) in sops.iter().enumerate() {
        let v = o.val as usize;
        if o.write {
            writers[v] += 1;
            optional[v] |= !o.required;
        }
        let ret = if o.ret == u64::MAX {
            i128::MAX
        } else {
            i128::from(o.ret)
        };
        if first_ret[v].is_none_or(|(t, _)| ret < t) {
            first_ret[v] = Some((ret, Some(i)));
        }
        let call = i128::from(o.call);
        if last_call[v].is_none_or(|(t, _)| call > t) {
            last_call[v] = Some((call, i));
        }
    }
    let mut forward = Vec::new();
    let mut backward = Vec::new();
    for v in 0..n_values {
        if writers[v] != 1 || optional[v] {
            continue;
        }
        let (Some((f, f_op)), Some((s, s_op))) = (first_ret[v], last_call[v]) else {
            continue; // The initial value without reads: nothing to place.
        };
        if f < s {
            forward.push(ZoneAt {
                value: v as u32,
                forward: true,
                start: f,
                end: s,
                start_op: f_op,
                end_op: s_op,
            });
        } else if let Some(f_op) = f_op {
            backward.push(ZoneAt {
                value: v as u32,
                forward: false,
                start: s,
                end: f,
                start_op: Some(s_op),
                end_op: f_op,
            });
        }
    }
    forward.sort_by_key(|z| (z.start, z.end));
    // Forward zones sorted by start must each begin at or after the previous ones' ends.
    let mut reach: Option<ZoneAt> = None;
    for z in &forward {
        if let Some(r) = reach {
            if z.start < r.end {
                return Some((r, *z));
            }
        }
        if reach.is_none_or(|r| z.end > r.end) {
            reach = Some(*z);
        }
    }
    // Now disjoint and ordered: only the last forward zone starting before a backward zone's
    // start can contain it.
    for b in &backward {
        let k = forward.partition_point(|z| z.start < b.start);
        if let Some(z) = k.checked_sub(1).map(|k| forward[k]) {
            if b.end < z.end {
                return Some((z, *b));
            }
        }
    }
    None
}

/// An operation in words, for violation messages.
fn describe(op: &RegisterOp) -> String {
    let what = match (op.kind, op.outcome) {
        (OpKind::Write { value }, Outcome::Unknown) => format!("write {value}, outcome unknown"),
        (OpKind::Write { value }, _) => format!("write {value}"),
        (OpKind::Read, Outcome::Ok { read_value }) => format!("read returning {read_value:?}"),
        (OpKind::Read, _) => "read".to_string(),
        (OpKind::Cas { expect, new }, Outcome::Mismatch) => {
            format!("cas {expect} -> {new}, not swapped")
        }
        (OpKind::Cas { expect, new }, Outcome::Unknown) => {
            format!("cas {expect} -> {new}, outcome unknown")
        }
        (OpKind::Cas { expect, new }, _) => format!("cas {expect} -> {new}"),
    };
    let done = match op.complete_ns {
        Some(c) if !matches!(op.outcome, Outcome::Unknown) => format!("completed at {c} ns"),
        _ => "never completed".to_string(),
    };
    format!(
        "{what} by client {}, invoked at {} ns, {done}",
        op.client, op.invoke_ns
    )
}

/// Where the longest partial linearization got stuck.
#[derive(Debug)]
struct Stuck {
    /// The search op whose return was reached unlinearized.
    op: usize,
    /// Length of the partial linearization.
    depth: usize,
    /// Its last search ops.
    tail: Vec<usize>,
    /// Register value index after it.
    state: u32,
    /// Reads (search ops) still expecting that value when no write of it is left.
    waiting: Vec<usize>,
}

#[derive(Debug)]
enum SearchResult {
    Linearizable { explored: u64 },
    NotLinearizable { explored: u64, stuck: Stuck },
    Budget { explored: u64 },
}

/// End of the event list.
const NIL: usize = usize::MAX;

/// Canonical register state, in cache keys, for any value no remaining read expects: such
/// states have the same futures (no read can follow, any write can).
const DEAD: u32 = u32::MAX;

/// A multiply-rotate hasher (rustc's FxHash with a final mix) for cache keys: much faster
/// than SipHash and fine for keys the checker builds itself.
#[derive(Debug, Clone, Copy, Default)]
struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        // splitmix64's finalizer: the multiply alone leaves the low bits (the bucket index)
        // depending only on the inputs' low bits.
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

type FastHash = std::hash::BuildHasherDefault<FastHasher>;

/// One step of the current partial linearization, with what undoing it restores.
#[derive(Debug, Clone, Copy)]
struct Step {
    op: usize,
    state: u32,
    prefix: usize,
    hi: usize,
    /// Taken because it dominates every alternative: when it fails, so does the
    /// configuration before it.
    forced: bool,
}

/// The search state for one key.
struct Search<'a> {
    ops: &'a [SOp],
    /// `(time, is_return, op)` sorted; calls before returns at equal times, so operations
    /// that touch at one instant count as concurrent.
    events: Vec<(u64, bool, usize)>,
    call_pos: Vec<usize>,
    ret_pos: Vec<usize>,
    /// Doubly linked list over event positions; position `events.len()` is the head
    /// sentinel.
    next: Vec<usize>,
    prev: Vec<usize>,
    /// Linearized ops (indexes in call order).
    bits: Vec<u64>,
    /// First op not linearized.
    prefix: usize,
    /// One past the last op linearized.
    hi: usize,
    /// Register value index.
    state: u32,
    /// Per value index: reads of it not linearized yet.
    pending_reads: Vec<u32>,
    /// Per value index: writes of it not linearized yet.
    writers_left: Vec<u32>,
    /// Per value index: its reads.
    reads_of: Vec<Vec<usize>>,
    required_left: usize,
    stack: Vec<Step>,
    /// Configurations explored, as `(state << 32 | prefix, window)` when the linearized ops
    /// beyond the prefix fit in one 64-op window...
    small: HashSet<(u64, u64), FastHash>,
    /// ...else as `[state << 32 | prefix, window words...]`.
    large: HashSet<Box<[u64]>, FastHash>,
    /// Scratch buffer for large cache keys.
    key: Vec<u64>,
}

impl<'a> Search<'a> {
    fn new(ops: &'a [SOp], n_values: usize) -> Self {
        let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(ops.len() * 2);
        let mut pending_reads = vec![0; n_values];
        let mut writers_left = vec![0; n_values];
        let mut reads_of = vec![Vec::new(); n_values];
        for (i, o) in ops.iter().enumerate() {
            events.push((o.call, false, i));
            events.push((o.ret, true, i));
            if o.write {
                writers_left[o.val as usize] += 1;
            } else {
                pending_reads[o.val as usize] += 1;
                reads_of[o.val as usize].push(i);
            }
        }
        events.sort_unstable();
        let m = events.len();
        let mut call_pos = vec![0; ops.len()];
        let mut ret_pos = vec![0; ops.len()];
        for (p, &(_, is_ret, i)) in events.iter().enumerate() {
            if is_ret {
                ret_pos[i] = p;
            } else {
                call_pos[i] = p;
            }
        }
        let mut next = vec![NIL; m + 1];
        let mut prev = vec![NIL; m + 1];
        next[m] = if m > 0 { 0 } else { NIL };
        for p in 0..m {
            prev[p] = if p == 0 { m } else { p - 1 };
            next[p] = if p + 1 < m { p + 1 } else { NIL };
        }
        Search {
            ops,
            events,
            call_pos,
            ret_pos,
            next,
            prev,
            bits: vec![0; ops.len().div_ceil(64)],
            prefix: 0,
            hi: 0,
            state: 0,
            pending_reads,
            writers_left,
            reads_of,
            required_left: ops.iter().filter(|o| o.required).count(),
            stack: Vec::new(),
            small: HashSet::default(),
            large: HashSet::default(),
            key: Vec::new(),
        }
    }

    fn head(&self) -> usize {
        self.next[self.events.len()]
    }

    fn unlink(&mut self, p: usize) {
        let (a, b) = (self.prev[p], self.next[p]);
        self.next[a] = b;
        if b != NIL {
            self.prev[b] = a;
        }
    }

    fn relink(&mut self, p: usize) {
        let (a, b) = (self.prev[p], self.next[p]);
        self.next[a] = p;
        if b != NIL {
            self.prev[b] = p;
        }
    }

    fn bit(&self, i: usize) -> bool {
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    /// Whether `o` may be linearized now. A read needs the register to hold its value. A
    /// write may not overwrite a value that reads still expect when no write of it is left
    /// to restore it (those reads could never be placed).
    fn legal(&self, o: &SOp) -> bool {
        let s = self.state as usize;
        if o.write {
            self.pending_reads[s] == 0 || self.writers_left[s] > 0
        } else {
            o.val == self.state
        }
    }

    /// Whether linearizing the legal `o` now dominates every alternative: a read does not
    /// change the register, so placing it as early as possible never hurts; a write of a
    /// value no read expects, over such a value, leads to an equivalent state.
    fn dominant(&self, o: &SOp) -> bool {
        !o.write
            || (self.pending_reads[self.state as usize] == 0
                && self.pending_reads[o.val as usize] == 0)
    }

    /// Linearizes op `i` next.
    fn apply(&mut self, i: usize, forced: bool) {
        let o = self.ops[i];
        self.stack.push(Step {
            op: i,
            state: self.state,
            prefix: self.prefix,
            hi: self.hi,
            forced,
        });
        self.bits[i / 64] |= 1 << (i % 64);
        while self.prefix < self.ops.len() && self.bit(self.prefix) {
            self.prefix += 1;
        }
        self.hi = self.hi.max(i + 1);
        if o.write {
            self.writers_left[o.val as usize] -= 1;
        } else {
            self.pending_reads[o.val as usize] -= 1;
        }
        self.state = o.val;
        if o.required {
            self.required_left -= 1;
        }
        self.unlink(self.call_pos[i]);
        self.unlink(self.ret_pos[i]);
    }

    /// Undoes the last step.
    fn undo(&mut self) -> Option<Step> {
        let step = self.stack.pop()?;
        let i = step.op;
        let o = self.ops[i];
        self.relink(self.ret_pos[i]);
        self.relink(self.call_pos[i]);
        if o.required {
            self.required_left += 1;
        }
        if o.write {
            self.writers_left[o.val as usize] += 1;
        } else {
            self.pending_reads[o.val as usize] += 1;
        }
        self.bits[i / 64] &= !(1 << (i % 64));
        self.state = step.state;
        self.prefix = step.prefix;
        self.hi = step.hi;
        Some(step)
    }

    /// Records the current configuration; false when it was explored before.
    fn visit(&mut self) -> bool {
        let state = if self.pending_reads[self.state as usize] == 0 {
            DEAD
        } else {
            self.state
        };
        // Op indexes fit in 32 bits: histories are far smaller than 2^32 operations.
        let head = (u64::from(state) << 32) | self.prefix as u64;
        // The linearized set is the first `prefix` ops plus the ops in `(prefix, hi)` marked
        // in the window words below (all bits from `hi` on are clear).
        let start = self.prefix + 1;
        let words = self.hi.saturating_sub(start).div_ceil(64);
        let window = |j: usize| -> u64 {
            let pos = start + 64 * j;
            let (w, off) = (pos / 64, pos % 64);
            let low = self.bits.get(w).map_or(0, |b| b >> off);
            let high = match (off, self.bits.get(w + 1)) {
                (1.., Some(b)) => b << (64 - off),
                _ => 0,
            };
            low | high
        };
        if words <= 1 {
            let key = (head, if words == 1 { window(0) } else { 0 });
            return self.small.insert(key);
        }
        self.key.clear();
        self.key.push(head);
        for j in 0..words {
            self.key.push(window(j));
        }
        if self.large.contains(self.key.as_slice()) {
            return false;
        }
        self.large.insert(self.key.as_slice().into());
        true
    }

    /// Describes the current partial linearization, which cannot place op `i`.
    fn stuck_at(&self, i: usize) -> Stuck {
        let from = self.stack.len().saturating_sub(PARTIAL_TAIL);
        let s = self.state as usize;
        let waiting = if self.writers_left[s] == 0 {
            self.reads_of[s]
                .iter()
                .copied()
                .filter(|&r| !self.bit(r))
                .take(PARTIAL_TAIL)
                .collect()
        } else {
            Vec::new()
        };
        Stuck {
            op: i,
            depth: self.stack.len(),
            tail: self.stack[from..].iter().map(|s| s.op).collect(),
            state: self.state,
            waiting,
        }
    }

    /// Runs the search with at most `budget` explored configurations.
    fn run(mut self, budget: u64) -> SearchResult {
        if self.required_left == 0 {
            return SearchResult::Linearizable { explored: 0 };
        }
        let mut explored: u64 = 0;
        let mut stuck: Option<Stuck> = None;
        let mut cursor = self.head();
        loop {
            let dead_end = if cursor == NIL {
                // Unreachable while a required op is left (its return follows its call);
                // treated as a dead end to stay safe.
                true
            } else if self.events[cursor].1 {
                // A return: its op must be linearized before anything after this point and
                // cannot be.
                if stuck.as_ref().is_none_or(|s| self.stack.len() > s.depth) {
                    stuck = Some(self.stuck_at(self.events[cursor].2));
                }
                true
            } else {
                let i = self.events[cursor].2;
                let o = self.ops[i];
                if self.legal(&o) {
                    let forced = self.dominant(&o);
                    self.apply(i, forced);
                    if self.visit() {
                        explored += 1;
                        if explored > budget {
                            return SearchResult::Budget { explored };
                        }
                        if self.required_left == 0 {
                            return SearchResult::Linearizable { explored };
                        }
                        cursor = self.head();
                        continue;
                    }
                    self.undo();
                    // A dominant step explored before: the configuration before it fails.
                    forced
                } else {
                    false
                }
            };
            if !dead_end {
                cursor = self.next[cursor];
                continue;
            }
            // Backtrack to the last step that had alternatives, and try the next one.
            loop {
                let Some(step) = self.undo() else {
                    let stuck = stuck.unwrap_or(Stuck {
                        op: 0,
                        depth: 0,
                        tail: Vec::new(),
                        state: 0,
                        waiting: Vec::new(),
                    });
                    return SearchResult::NotLinearizable { explored, stuck };
                };
                if !step.forced {
                    cursor = self.next[self.call_pos[step.op]];
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(
        id: u64,
        key: &str,
        kind: OpKind,
        inv: u64,
        comp: Option<u64>,
        out: Outcome,
    ) -> RegisterOp {
        RegisterOp {
            id,
            client: id as u32,
            key: key.to_string(),
            kind,
            invoke_ns: inv,
            complete_ns: comp,
            outcome: out,
        }
    }
    fn w(id: u64, v: u64, inv: u64, comp: u64) -> RegisterOp {
        wk(id, "k", v, inv, comp)
    }
    fn wk(id: u64, key: &str, v: u64, inv: u64, comp: u64) -> RegisterOp {
        op(
            id,
            key,
            OpKind::Write { value: v },
            inv,
            Some(comp),
            Outcome::Ok { read_value: None },
        )
    }
    fn r(id: u64, v: Option<u64>, inv: u64, comp: u64) -> RegisterOp {
        rk(id, "k", v, inv, comp)
    }
    fn rk(id: u64, key: &str, v: Option<u64>, inv: u64, comp: u64) -> RegisterOp {
        op(
            id,
            key,
            OpKind::Read,
            inv,
            Some(comp),
            Outcome::Ok { read_value: v },
        )
    }
    fn uw(id: u64, v: u64, inv: u64) -> RegisterOp {
        op(
            id,
            "k",
            OpKind::Write { value: v },
            inv,
            None,
            Outcome::Unknown,
        )
    }
    fn fw(id: u64, v: u64, inv: u64, comp: u64) -> RegisterOp {
        op(
            id,
            "k",
            OpKind::Write { value: v },
            inv,
            Some(comp),
            Outcome::Failed,
        )
    }

    /// The search alone, without the zone pre-check.
    const SEARCH_ONLY: LinOptions = LinOptions {
        max_states_per_key: DEFAULT_MAX_STATES_PER_KEY,
        zone_precheck: false,
    };

    /// The verdict, checked to be the same with and without the zone pre-check.
    fn ok(ops: &[RegisterOp]) -> bool {
        let rep = check_linearizable(ops);
        assert_eq!(rep.ok, rep.violations.is_empty(), "{rep:?}");
        let alone = check_linearizable_with(ops, &SEARCH_ONLY);
        assert_eq!(rep.ok, alone.ok, "{rep:?}\n{alone:?}");
        rep.ok
    }

    #[test]
    fn empty_and_sequential_histories_pass() {
        assert!(ok(&[]));
        assert!(ok(&[
            r(1, None, 0, 1),
            w(2, 1, 2, 3),
            r(3, Some(1), 4, 5),
            w(4, 2, 6, 7),
            r(5, Some(2), 8, 9)
        ]));
    }

    #[test]
    fn stale_read_after_completed_write_is_rejected() {
        let h = [w(1, 1, 0, 10), w(2, 2, 20, 30), r(3, Some(1), 40, 50)];
        let rep = check_linearizable(&h);
        assert!(!rep.ok);
        assert_eq!(rep.keys[0].verdict, Verdict::NotLinearizable);
        assert_eq!(
            rep.violations[0].to_string(),
            "key k: value Some(1) must be current from 10 ns (completion of op 1) to 40 ns \
             (invoke of op 3), but value Some(2) must be current at some instant between 20 ns \
             (invoke of op 2) and 30 ns (completion of op 2); each is written once, so they \
             cannot interleave"
        );
        // The search alone: write 2 cannot overwrite 1 while read 3 still expects it.
        let rep = check_linearizable_with(&h, &SEARCH_ONLY);
        match &rep.violations[..] {
            [LinViolation::NotLinearizable {
                op,
                key,
                waiting_reads,
                ..
            }] => {
                assert_eq!((*op, key.as_str(), &waiting_reads[..]), (2, "k", &[3][..]));
            }
            v => panic!("unexpected {v:?}"),
        }
        // Reading the initial value after a completed write is stale too.
        assert!(!ok(&[w(1, 1, 0, 10), r(2, None, 20, 30)]));
    }

    #[test]
    fn concurrent_read_may_see_either_value() {
        for seen in [Some(1), Some(2)] {
            assert!(ok(&[w(1, 1, 0, 10), w(2, 2, 20, 40), r(3, seen, 25, 35)]));
        }
        // A read concurrent with the first write may see the initial value.
        assert!(ok(&[w(1, 1, 0, 10), r(2, None, 5, 15)]));
    }

    #[test]
    fn read_of_never_written_value_is_rejected() {
        let rep = check_linearizable(&[w(1, 1, 0, 10), r(2, Some(7), 20, 30)]);
        assert!(!rep.ok);
        assert!(matches!(
            rep.violations[..],
            [LinViolation::UnwrittenValue {
                op: 2,
                value: 7,
                ..
            }]
        ));
    }

    #[test]
    fn unknown_write_read_later_is_accepted() {
        assert!(ok(&[w(1, 1, 0, 10), uw(2, 2, 20), r(3, Some(2), 100, 110)]));
        assert!(ok(&[
            w(1, 1, 0, 10),
            uw(2, 2, 20),
            r(3, Some(1), 30, 40),
            r(4, Some(2), 50, 60)
        ]));
        // Never observed: it may not have happened at all.
        assert!(ok(&[w(1, 1, 0, 10), uw(2, 2, 20), r(3, Some(1), 100, 110)]));
        // Once observed it happened: the older value cannot come back.
        assert!(!ok(&[
            w(1, 1, 0, 10),
            uw(2, 2, 20),
            r(3, Some(2), 30, 40),
            r(4, Some(1), 50, 60)
        ]));
    }

    #[test]
    fn unknown_write_read_before_its_invoke_is_rejected() {
        let rep = check_linearizable(&[w(1, 1, 0, 10), r(2, Some(2), 20, 30), uw(3, 2, 40)]);
        assert!(!rep.ok);
        assert!(matches!(
            &rep.violations[..],
            [LinViolation::ReadBeforeWrite { op: 2, value: 2, writes, .. }] if writes == &[3]
        ));
    }

    #[test]
    fn reads_in_an_order_no_write_order_explains_are_rejected() {
        // w1 and w2 both completed before the reads: r1 sees 2 then r2 sees 1.
        assert!(!ok(&[
            w(1, 1, 0, 10),
            w(2, 2, 20, 30),
            r(3, Some(2), 40, 50),
            r(4, Some(1), 60, 70)
        ]));
        // Same with w1 and w2 concurrent with each other.
        assert!(!ok(&[
            w(1, 1, 0, 30),
            w(2, 2, 5, 25),
            r(3, Some(2), 40, 50),
            r(4, Some(1), 60, 70)
        ]));
        // ...where either order alone is fine.
        assert!(ok(&[
            w(1, 1, 0, 30),
            w(2, 2, 5, 25),
            r(3, Some(1), 40, 50),
            r(4, Some(1), 60, 70)
        ]));
        assert!(ok(&[
            w(1, 1, 0, 30),
            w(2, 2, 5, 25),
            r(3, Some(2), 40, 50),
            r(4, Some(2), 60, 70)
        ]));
    }

    #[test]
    fn failed_write_value_read_is_rejected() {
        let rep = check_linearizable(&[w(1, 1, 0, 10), fw(2, 2, 20, 30), r(3, Some(2), 40, 50)]);
        assert!(!rep.ok);
        assert!(matches!(
            rep.violations[..],
            [LinViolation::UnwrittenValue { op: 3, .. }]
        ));
        // A failed write does not hide the previous value.
        assert!(ok(&[
            w(1, 1, 0, 10),
            fw(2, 2, 20, 30),
            r(3, Some(1), 40, 50)
        ]));
    }

    #[test]
    fn unknown_and_failed_reads_constrain_nothing() {
        let h = [
            w(1, 1, 0, 10),
            op(2, "k", OpKind::Read, 20, None, Outcome::Unknown),
            op(3, "k", OpKind::Read, 20, Some(30), Outcome::Failed),
            r(4, Some(1), 40, 50),
        ];
        let rep = check_linearizable(&h);
        assert!(rep.ok, "{rep:?}");
        assert_eq!((rep.operations, rep.checked), (4, 2));
    }

    #[test]
    fn keys_are_checked_independently() {
        let h = [
            wk(1, "a", 1, 0, 10),
            wk(2, "b", 1, 0, 10),
            wk(3, "b", 2, 20, 30),
            rk(4, "a", Some(1), 40, 50),
            rk(5, "b", Some(1), 40, 50),
            // The same value on another key does not explain a read.
            rk(6, "c", Some(1), 40, 50),
        ];
        let rep = check_linearizable_with(&h, &SEARCH_ONLY);
        assert!(!rep.ok);
        let verdicts: Vec<_> = rep
            .keys
            .iter()
            .map(|k| (k.key.as_str(), k.verdict))
            .collect();
        assert_eq!(
            verdicts,
            [
                ("a", Verdict::Linearizable),
                ("b", Verdict::NotLinearizable),
                ("c", Verdict::NotLinearizable)
            ]
        );
        assert_eq!(rep.violations.len(), 2);
        assert!(matches!(
            &rep.violations[0],
            LinViolation::NotLinearizable { key, op: 3, waiting_reads, .. } if key == "b" && waiting_reads == &[5]
        ));
        assert!(
            matches!(&rep.violations[1], LinViolation::UnwrittenValue { key, op: 6, .. } if key == "c")
        );
    }

    #[test]
    fn duplicate_values_are_handled_without_relying_on_uniqueness() {
        let base = [w(1, 1, 0, 10), w(2, 2, 20, 30), w(3, 1, 40, 50)];
        let mut good = base.to_vec();
        good.push(r(4, Some(1), 60, 70));
        assert!(ok(&good));
        let mut stale = base.to_vec();
        stale.push(r(4, Some(1), 32, 38));
        assert!(!ok(&stale));
        // Two Unknown writes of the same value: the later one explains a late read.
        assert!(ok(&[
            w(1, 1, 0, 10),
            uw(2, 5, 20),
            w(3, 2, 30, 40),
            uw(4, 5, 50),
            r(5, Some(5), 60, 70)
        ]));
        // The first one may take effect late, between two completed writes...
        assert!(ok(&[
            uw(1, 5, 0),
            w(2, 1, 10, 20),
            w(3, 2, 30, 40),
            r(4, Some(5), 42, 44),
            uw(5, 5, 50)
        ]));
        // ...but the overwritten value cannot come back after it did.
        assert!(!ok(&[
            uw(1, 5, 0),
            w(2, 1, 10, 20),
            w(3, 2, 30, 40),
            r(4, Some(5), 42, 44),
            uw(5, 5, 50),
            r(6, Some(2), 60, 70)
        ]));
        // Both writes of 5 invoked after the read completed.
        let rep = check_linearizable(&[
            w(1, 1, 0, 10),
            r(2, Some(5), 20, 30),
            uw(3, 5, 40),
            uw(4, 5, 50),
        ]);
        assert!(matches!(
            &rep.violations[..],
            [LinViolation::ReadBeforeWrite { op: 2, writes, .. }] if writes == &[3, 4]
        ));
    }

    #[test]
    fn unknown_write_may_take_effect_late() {
        // Invoked long before, effective after a later completed write.
        assert!(ok(&[
            uw(1, 1, 0),
            w(2, 2, 10, 20),
            r(3, Some(2), 30, 40),
            r(4, Some(1), 50, 60)
        ]));
        // And not at all: the initial value stays readable.
        assert!(ok(&[uw(1, 1, 0), r(2, None, 50, 60)]));
    }

    #[test]
    fn touching_operations_count_as_concurrent() {
        assert!(ok(&[w(1, 1, 0, 10), r(2, None, 10, 20)]));
    }

    #[test]
    fn malformed_completion_is_reported() {
        let rep = check_linearizable(&[w(1, 1, 10, 5), r(2, Some(1), 20, 30)]);
        assert!(!rep.ok);
        assert!(matches!(
            rep.violations[..],
            [LinViolation::Malformed { op: 1, .. }]
        ));
        // The rest of the key is still checked.
        assert_eq!(rep.keys[0].verdict, Verdict::Linearizable);
        let rep = check_linearizable(&[w(1, 1, 10, 5), r(2, None, 20, 30)]);
        assert_eq!(rep.keys[0].verdict, Verdict::NotLinearizable);
        assert_eq!(rep.violations.len(), 2);
    }

    #[test]
    fn budget_exhaustion_is_inconclusive_not_a_pass() {
        // Every operation placed is one configuration: 20 sequential writes need 20.
        let h: Vec<RegisterOp> = (1..=20).map(|i| w(i, i, 10 * i, 10 * i + 5)).collect();
        let rep = check_linearizable_with(
            &h,
            &LinOptions {
                max_states_per_key: 10,
                zone_precheck: false,
            },
        );
        assert!(!rep.ok);
        assert_eq!(rep.keys[0].verdict, Verdict::Unknown);
        assert!(matches!(
            rep.violations[..],
            [LinViolation::BudgetExceeded { explored: 11, .. }]
        ));
        let rep = check_linearizable_with(
            &h,
            &LinOptions {
                max_states_per_key: 20,
                zone_precheck: false,
            },
        );
        assert!(rep.ok);
        assert_eq!(rep.keys[0].explored, 20);
    }

    #[test]
    fn violation_quotes_the_partial_linearization() {
        let h = [
            w(1, 1, 0, 10),
            w(2, 2, 20, 30),
            r(3, Some(2), 40, 50),
            r(4, Some(1), 60, 70),
        ];
        let rep = check_linearizable_with(&h, &SEARCH_ONLY);
        match &rep.violations[..] {
            [LinViolation::NotLinearizable {
                op,
                linearized,
                partial_tail,
                state,
                waiting_reads,
                ..
            }] => {
                assert_eq!((*op, *linearized, *state), (2, 1, Some(1)));
                assert_eq!(
                    (&partial_tail[..], &waiting_reads[..]),
                    (&[1][..], &[4][..])
                );
            }
            v => panic!("unexpected {v:?}"),
        }
        assert_eq!(
            rep.violations[0].to_string(),
            "key k: no linearization explains op 2 (write 2 by client 2, invoked at 20 ns, \
             completed at 30 ns); the longest partial linearization places 1 ops, ending [1], \
             leaving the register at Some(1), which reads [4] still expect and no write left \
             restores"
        );
        // A stale read of the initial value blocks the first write.
        let h = [w(1, 1, 0, 10), w(2, 2, 12, 18), r(3, None, 20, 30)];
        let rep = check_linearizable_with(&h, &SEARCH_ONLY);
        assert_eq!(
            rep.violations[0].to_string(),
            "key k: no linearization explains op 1 (write 1 by client 1, invoked at 0 ns, \
             completed at 10 ns); the longest partial linearization places 0 ops, ending [], \
             leaving the register at None, which reads [3] still expect and no write left \
             restores"
        );
    }

    #[test]
    fn zone_conflicts_name_both_values() {
        // The initial value is read after write 1 completed.
        let rep = check_linearizable(&[w(1, 1, 0, 10), r(2, None, 20, 30)]);
        assert_eq!(
            rep.violations[0].to_string(),
            "key k: value None must be current from the start to 20 ns (invoke of op 2), but \
             value Some(1) must be current at some instant between 0 ns (invoke of op 1) and \
             10 ns (completion of op 1); each is written once, so they cannot interleave"
        );
        // Two values each read on both sides of the other.
        let h = [
            w(1, 1, 0, 10),
            w(2, 2, 0, 10),
            r(3, Some(1), 20, 30),
            r(4, Some(2), 20, 30),
            r(5, Some(1), 40, 50),
            r(6, Some(2), 40, 50),
        ];
        let rep = check_linearizable(&h);
        assert!(matches!(
            &rep.violations[..],
            [LinViolation::ZoneConflict { held, other, .. }]
                if held.forward && other.forward && held.value == Some(1) && other.value == Some(2)
        ));
        assert!(!ok(&h));
    }

    #[test]
    fn hard_search_is_cut_short_by_the_zone_check() {
        // 24 concurrent write/read pairs, then a write, then a read of the first value: the
        // search alone explores every subset of the pairs; the zones see it at once.
        let mut h = Vec::new();
        for i in 1..=24 {
            h.push(w(2 * i, i, 0, 100));
            h.push(r(2 * i + 1, Some(i), 0, 100));
        }
        h.push(w(100, 99, 150, 160));
        h.push(r(101, Some(1), 200, 210));
        let rep = check_linearizable(&h);
        assert!(matches!(
            &rep.violations[..],
            [LinViolation::ZoneConflict { held, other, .. }]
                if held.value == Some(1) && held.end_op == 101 && other.value == Some(99)
        ));
        let small = LinOptions {
            max_states_per_key: 10_000,
            zone_precheck: false,
        };
        let rep = check_linearizable_with(&h, &small);
        assert_eq!(rep.keys[0].verdict, Verdict::Unknown);
    }
}

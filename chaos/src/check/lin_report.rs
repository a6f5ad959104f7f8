//! What the linearizability checkers report: the options of their search, each key's
//! verdict and what is wrong. Shared by the register search ([`super::linear`]) and the
//! compare-and-set search ([`super::cas`]), which the register checker hands keys with a
//! compare-and-set to.

use serde::{Deserialize, Serialize};

/// Default cap on explored configurations per key. Running out of it takes about 5 s and
/// 200 MB in an optimized build (about 12 s unoptimized); valid runner histories need about
/// one configuration per operation.
pub const DEFAULT_MAX_STATES_PER_KEY: u64 = 5_000_000;

/// Tuning of the linearizability search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LinOptions {
    /// Distinct (linearized-set, state) configurations explored per key before giving up.
    pub max_states_per_key: u64,
    /// Run the zone pre-check (on by default; off only to exercise the search alone).
    pub zone_precheck: bool,
}

impl Default for LinOptions {
    fn default() -> Self {
        LinOptions {
            max_states_per_key: DEFAULT_MAX_STATES_PER_KEY,
            zone_precheck: true,
        }
    }
}

/// The outcome of checking one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Some linearization explains every operation.
    Linearizable,
    /// No linearization does.
    NotLinearizable,
    /// The search budget ran out first.
    Unknown,
}

/// The result for one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyReport {
    /// The register.
    pub key: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Operations on the key that constrain the verdict (not Failed, not unanswered reads).
    pub operations: usize,
    /// Configurations the search explored (0 when decided before the search).
    pub explored: u64,
}

/// The result of the linearizability checker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinReport {
    /// True when every key is linearizable (an inconclusive key is not ok).
    pub ok: bool,
    /// Register operations in the history.
    pub operations: usize,
    /// Operations that constrain the result (not Failed, not Unknown reads).
    pub checked: usize,
    /// Per-key results, ordered by key.
    pub keys: Vec<KeyReport>,
    /// What is wrong, per key.
    pub violations: Vec<LinViolation>,
}

/// Why a key is not (known to be) linearizable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LinViolation {
    /// An Ok operation completed before it was invoked (a recording bug).
    #[error(
        "key {key}: op {op} completed at {complete_ns} ns before its invoke at {invoke_ns} ns"
    )]
    Malformed {
        /// The register.
        key: String,
        /// The operation id.
        op: u64,
        /// Its invoke time.
        invoke_ns: u64,
        /// Its completion time.
        complete_ns: u64,
    },
    /// A read returned a value no write on the key (other than failed ones) wrote.
    #[error("key {key}: read op {op} returned {value}, which no write on the key wrote (failed writes excluded)")]
    UnwrittenValue {
        /// The register.
        key: String,
        /// The read.
        op: u64,
        /// The value it returned.
        value: u64,
    },
    /// A read returned a value before any write of that value was invoked.
    #[error("key {key}: read op {op} returned {value} at {read_complete_ns} ns, before any write of it was invoked (writes {writes:?})")]
    ReadBeforeWrite {
        /// The register.
        key: String,
        /// The read.
        op: u64,
        /// The value it returned.
        value: u64,
        /// When the read completed.
        read_complete_ns: u64,
        /// The writes of that value, all invoked later.
        writes: Vec<u64>,
    },
    /// No linearization explains `op`. Quoted from the longest partial linearization found:
    /// it cannot place `op`, typically because `waiting_reads` still expect the register's
    /// value (a stale read) or `op` is a read of another value.
    #[error("key {key}: no linearization explains op {op} ({op_desc}); the longest partial linearization places {linearized} ops, ending {partial_tail:?}, leaving the register at {state:?}{}", waiting(.waiting_reads))]
    NotLinearizable {
        /// The register.
        key: String,
        /// The operation the longest partial linearization could not place.
        op: u64,
        /// That operation in words.
        op_desc: String,
        /// Operations in the longest partial linearization.
        linearized: usize,
        /// Its last operations, in linearization order.
        partial_tail: Vec<u64>,
        /// The register value after it.
        state: Option<u64>,
        /// Reads (not yet placed) still expecting that value, which no write left restores:
        /// `op` cannot overwrite it.
        waiting_reads: Vec<u64>,
    },
    /// Two values written once each must both be current over overlapping times.
    #[error("key {key}: {held}, but {other}; each is written once, so they cannot interleave")]
    ZoneConflict {
        /// The register.
        key: String,
        /// A value that must be current throughout an interval.
        held: Zone,
        /// A value that must be current within that interval too.
        other: Zone,
    },
    /// No order of a key's operations, compare-and-set included, explains every result
    /// (found by the plain search of [`super::cas`]).
    #[error("key {key}: no linearization of its {operations} operations (compare-and-set included) explains every result")]
    NoCasLinearization {
        /// The register.
        key: String,
        /// Operations on the key that constrain the verdict.
        operations: usize,
    },
    /// The search budget ran out: the key is neither accepted nor rejected.
    #[error("key {key}: search budget exceeded after {explored} configurations; linearizability unknown")]
    BudgetExceeded {
        /// The register.
        key: String,
        /// Configurations explored.
        explored: u64,
    },
}

fn waiting(reads: &[u64]) -> String {
    if reads.is_empty() {
        String::new()
    } else {
        format!(", which reads {reads:?} still expect and no write left restores")
    }
}

/// When a value written once must be current, from its operations' times: the write and
/// the reads of the value are contiguous in any linearization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Zone {
    /// The value (`None`: the initial value).
    pub value: Option<u64>,
    /// Forward: the value is current throughout `[start_ns, end_ns]`, from the completion of
    /// `start_op` to the invoke of `end_op`. Backward: it is current at some instant of
    /// `[start_ns, end_ns]`, from the invoke of `start_op` to the completion of `end_op`.
    pub forward: bool,
    /// Start; `None` for the beginning of the history (the initial value).
    pub start_ns: Option<u64>,
    /// End.
    pub end_ns: u64,
    /// The operation fixing the start; `None` for the initial value.
    pub start_op: Option<u64>,
    /// The operation fixing the end.
    pub end_op: u64,
}

impl std::fmt::Display for Zone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let start = match (self.start_ns, self.start_op) {
            (Some(t), Some(op)) if self.forward => format!("{t} ns (completion of op {op})"),
            (Some(t), Some(op)) => format!("{t} ns (invoke of op {op})"),
            _ => "the start".to_string(),
        };
        let end = if self.forward {
            format!("{} ns (invoke of op {})", self.end_ns, self.end_op)
        } else {
            format!("{} ns (completion of op {})", self.end_ns, self.end_op)
        };
        if self.forward {
            write!(
                f,
                "value {:?} must be current from {start} to {end}",
                self.value
            )
        } else {
            write!(
                f,
                "value {:?} must be current at some instant between {start} and {end}",
                self.value
            )
        }
    }
}

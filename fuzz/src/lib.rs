//! Fuzzing support shared by every crate's fuzz targets (docs/BENCHMARKS.md "Fuzzing").
//!
//! - [`config`]: a proptest configuration with [`cases`] cases (`HUB_FUZZ_CASES`, default
//!   given by the target) and no persisted regressions on a read-only CI checkout.
//! - [`mutated`]: a strategy over inputs made from valid seeds by structure-aware mutations:
//!   bit flips, truncation, splicing two seeds, replacing a byte by a huge length prefix
//!   (bincode varints declaring 2^31, 2^45 or 2^64-1 bytes), inserting and deleting runs,
//!   and plain random bytes.
//! - [`CountingAlloc`]: a global allocator that counts, per thread, the bytes allocated since
//!   [`measure`] started, so a target can assert that a decode's peak allocation stays within
//!   a bound however large the lengths its input declares.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

use proptest::prelude::*;

/// The number of cases each target runs: `HUB_FUZZ_CASES` if set, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("HUB_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A proptest configuration running [`cases`]`(default)` cases.
pub fn config(default: u32) -> ProptestConfig {
    ProptestConfig {
        cases: cases(default),
        // Shrinking a failure is useful; persisting it into the source tree is not (CI runs
        // on a fresh clone): failures print the minimal input to add as a regression test.
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..ProptestConfig::default()
    }
}

/// A position in an input of any length: the fraction `p / 2^32` of it.
pub type Pos = u32;

fn at(p: Pos, len: usize) -> usize {
    ((len as u64 * u64::from(p)) >> 32) as usize
}

/// One structure-aware change to an input.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// Flip one bit.
    Flip(Pos, u8),
    /// Cut the input at a position.
    Truncate(Pos),
    /// Keep this input up to a position, then the other seed from a position.
    Splice(Pos, Pos),
    /// Replace the byte at a position by a bincode varint declaring a huge length.
    LengthBomb(Pos, u8),
    /// Insert bytes at a position.
    Insert(Pos, Vec<u8>),
    /// Delete up to 16 bytes at a position.
    Delete(Pos, u8),
    /// Overwrite one byte.
    Set(Pos, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<Pos>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        any::<Pos>().prop_map(Mutation::Truncate),
        (any::<Pos>(), any::<Pos>()).prop_map(|(a, b)| Mutation::Splice(a, b)),
        (any::<Pos>(), 0u8..4).prop_map(|(i, k)| Mutation::LengthBomb(i, k)),
        (any::<Pos>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<Pos>(), 1u8..16).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<Pos>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
    ]
}

/// The bincode varint (standard config) of a huge length: `kind` picks 2^31, 2^45, 2^64-1 or
/// a length just below 2^32.
pub fn huge_length(kind: u8) -> Vec<u8> {
    match kind % 4 {
        0 => [vec![0xfc], (1u32 << 31).to_le_bytes().to_vec()].concat(),
        1 => [vec![0xfd], (1u64 << 45).to_le_bytes().to_vec()].concat(),
        2 => [vec![0xfd], u64::MAX.to_le_bytes().to_vec()].concat(),
        _ => [vec![0xfc], (u32::MAX - 1).to_le_bytes().to_vec()].concat(),
    }
}

/// Applies `mutations` to `input`; `other` is the seed splices take their tail from.
pub fn apply(input: &[u8], other: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut out = input.to_vec();
    for m in mutations {
        match m {
            Mutation::Flip(i, bit) if !out.is_empty() => {
                let p = at(*i, out.len());
                out[p] ^= 1 << bit;
            }
            Mutation::Truncate(i) => {
                let p = at(*i, out.len() + 1);
                out.truncate(p);
            }
            Mutation::Splice(a, b) => {
                let p = at(*a, out.len() + 1);
                let q = at(*b, other.len() + 1);
                out.truncate(p);
                out.extend_from_slice(&other[q..]);
            }
            Mutation::LengthBomb(i, kind) => {
                let p = at(*i, out.len() + 1);
                let tail = out.split_off(p);
                out.extend(huge_length(*kind));
                out.extend(tail.into_iter().skip(1));
            }
            Mutation::Insert(i, bytes) => {
                let p = at(*i, out.len() + 1);
                let tail = out.split_off(p);
                out.extend_from_slice(bytes);
                out.extend(tail);
            }
            Mutation::Delete(i, n) if !out.is_empty() => {
                let p = at(*i, out.len());
                let end = (p + usize::from(*n)).min(out.len());
                out.drain(p..end);
            }
            Mutation::Set(i, b) if !out.is_empty() => {
                let p = at(*i, out.len());
                out[p] = *b;
            }
            _ => {}
        }
    }
    out
}

/// Inputs made from `seeds`: each a seed with one to four [`Mutation`]s, or (one case in
/// eight) random bytes.
pub fn mutated(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    assert!(!seeds.is_empty(), "fuzzing needs at least one seed");
    let n = seeds.len();
    let from_seeds = (0..n, 0..n, prop::collection::vec(mutation(), 1..5))
        .prop_map(move |(a, b, ms)| apply(&seeds[a], &seeds[b], &ms));
    prop_oneof![
        7 => from_seeds,
        1 => prop::collection::vec(any::<u8>(), 0..512),
    ]
}

/// Runs `f` and fails if it took longer than `limit` (a decoder that spins on a declared
/// length, rather than allocating it, is as bad as one that allocates it).
#[track_caller]
pub fn within<T>(limit: Duration, what: &str, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    let took = started.elapsed();
    assert!(took <= limit, "{what} took {took:?} (more than {limit:?})");
    out
}

thread_local! {
    /// Bytes this thread has allocated and not freed since `measure` began.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    /// The most `LIVE` reached.
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

/// A global allocator that counts live bytes per thread (on top of the system allocator).
/// Install it in a fuzz target's test binary with `#[global_allocator]`.
pub struct CountingAlloc;

fn track(delta: isize) {
    // `try_with`: a thread being torn down has no counters left; it is not measured.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| {
            if now > peak.get() {
                peak.set(now);
            }
        });
    });
}

// SAFETY: every call is forwarded to `System` unchanged; the counters are thread-local cells
// with const initialisers, which never allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            track(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            track(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        track(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            track(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Runs `f` and returns its result with the peak bytes this thread allocated during it
/// (above what was live when it began). Meaningful only under [`CountingAlloc`].
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(|l| l.get());
    PEAK.with(|p| p.set(base));
    let out = f();
    let peak = PEAK.with(|p| p.get());
    (out, (peak - base).max(0) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_do_what_they_say() {
        assert_eq!(apply(b"abcd", b"", &[Mutation::Truncate(0)]), b"");
        assert_eq!(apply(b"abcd", b"", &[Mutation::Truncate(1 << 31)]), b"ab");
        assert_eq!(
            apply(b"ab", b"xyz", &[Mutation::Splice(u32::MAX, 0)]),
            b"abxyz"
        );
        assert_eq!(apply(b"ab", b"xyz", &[Mutation::Splice(0, 1 << 31)]), b"z");
        let bombed = apply(&[1, 5, b'x'], b"", &[Mutation::LengthBomb(1 << 30, 1)]);
        assert_eq!(bombed[..2], [1, 0xfd]);
        assert_eq!(bombed.len(), 1 + 9 + 1);
        assert_eq!(apply(b"ab", b"", &[Mutation::Flip(0, 0)]), b"`b");
    }

    #[test]
    fn measure_counts_this_threads_allocations() {
        // Not under CountingAlloc here: the counters stay at zero.
        let (v, peak) = measure(|| vec![0u8; 1 << 20]);
        assert_eq!(v.len(), 1 << 20);
        assert_eq!(peak, 0);
    }
}

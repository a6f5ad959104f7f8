//! Test-only simulation: large register histories generated from a sequential register with
//! overlapping operations, to check the linearizability checker's speed and precision.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::*;

/// xorshift64*: tiny, deterministic, good enough for test workloads.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A valid history: `clients` sequential clients issue `ops` operations on `keys` registers.
/// Each operation takes effect at a random instant inside its interval (Unknown writes: any
/// time after invoke, or never), and reads return what a sequential register holds then.
fn generate(seed: u64, keys: usize, clients: usize, ops: usize) -> Vec<RegisterOp> {
    let mut rng = XorShift(seed);
    let mut history = Vec::with_capacity(ops);
    // (effect time, op index) of the operations that took effect.
    let mut effects: Vec<(u64, usize)> = Vec::new();
    let mut clock: Vec<u64> = (0..clients).map(|_| rng.below(100)).collect();
    let mut next_value = 1;
    for id in 0..ops {
        let client = rng.below(clients as u64) as usize;
        let invoke = clock[client] + rng.below(20);
        let dur = 1 + rng.below(100);
        clock[client] = invoke + dur;
        let key = format!("k{}", rng.below(keys as u64));
        let write = rng.below(2) == 0;
        let kind = if write {
            next_value += 1;
            OpKind::Write { value: next_value }
        } else {
            OpKind::Read
        };
        let roll = rng.below(100);
        let (outcome, complete, effect) = match (write, roll) {
            (true, 0..=2) => {
                let effect = (rng.below(2) == 0).then(|| invoke + rng.below(5 * dur + 1));
                (Outcome::Unknown, None, effect)
            }
            (true, 3..=4) => (Outcome::Failed, Some(invoke + dur), None),
            (false, 0..=1) => (Outcome::Unknown, None, None),
            _ => (
                Outcome::Ok { read_value: None },
                Some(invoke + dur),
                Some(invoke + rng.below(dur + 1)),
            ),
        };
        if let Some(at) = effect {
            effects.push((at, id));
        }
        history.push(RegisterOp {
            id: id as u64,
            client: client as u32,
            key,
            kind,
            invoke_ns: invoke,
            complete_ns: complete,
            outcome,
        });
    }
    effects.sort_unstable();
    let mut register: HashMap<String, u64> = HashMap::new();
    for (_, i) in effects {
        let op = &mut history[i];
        match op.kind {
            OpKind::Write { value } => {
                register.insert(op.key.clone(), value);
            }
            OpKind::Read => {
                op.outcome = Outcome::Ok {
                    read_value: register.get(&op.key).copied(),
                };
            }
            // The generator issues reads and writes only; a swap still acts as one.
            OpKind::Cas { expect, new } => {
                if register.get(&op.key) == Some(&expect) {
                    register.insert(op.key.clone(), new);
                }
            }
        }
    }
    history
}

/// Makes one Ok read in the middle of `h` stale: it returns the value of a write that a later
/// completed write overwrote before the read was invoked. Returns the read's id.
fn corrupt(h: &mut [RegisterOp]) -> u64 {
    let ok_write = |o: &RegisterOp| {
        matches!(
            (o.kind, o.outcome),
            (OpKind::Write { .. }, Outcome::Ok { .. })
        )
    };
    for r in h.len() / 2..h.len() {
        let Outcome::Ok { read_value } = h[r].outcome else {
            continue;
        };
        if h[r].kind != OpKind::Read {
            continue;
        }
        let key = &h[r].key;
        let writes: Vec<&RegisterOp> = h.iter().filter(|o| &o.key == key && ok_write(o)).collect();
        let before = |o: &RegisterOp, t: u64| o.complete_ns.is_some_and(|c| c < t);
        for wb in writes.iter().filter(|wb| before(wb, h[r].invoke_ns)) {
            let stale = writes.iter().find(|wa| {
                before(wa, wb.invoke_ns)
                    && matches!(wa.kind, OpKind::Write { value } if Some(value) != read_value)
            });
            if let Some(wa) = stale {
                let OpKind::Write { value } = wa.kind else {
                    unreachable!()
                };
                h[r].outcome = Outcome::Ok {
                    read_value: Some(value),
                };
                return h[r].id;
            }
        }
    }
    panic!("no read to corrupt");
}

/// The search alone, without the zone pre-check.
const SEARCH_ONLY: LinOptions = LinOptions {
    max_states_per_key: DEFAULT_MAX_STATES_PER_KEY,
    zone_precheck: false,
};

fn timed(h: &[RegisterOp]) -> (LinReport, Duration) {
    let start = Instant::now();
    let rep = check_linearizable(h);
    (rep, start.elapsed())
}

#[test]
fn large_valid_history_is_accepted_fast() {
    let h = generate(0x5eed, 10, 5, 10_000);
    let (rep, took) = timed(&h);
    let explored: u64 = rep.keys.iter().map(|k| k.explored).sum();
    eprintln!(
        "10k ops / 10 keys / 5 clients: {:?}, {} checked, {explored} configurations",
        took, rep.checked
    );
    assert!(rep.ok, "{:?}", rep.violations);
    assert_eq!(rep.keys.len(), 10);
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn large_history_with_one_stale_read_is_rejected() {
    let mut h = generate(0x5eed, 10, 5, 10_000);
    let read = corrupt(&mut h);
    let key = h[read as usize].key.clone();
    for opts in [LinOptions::default(), SEARCH_ONLY] {
        let start = Instant::now();
        let rep = check_linearizable_with(&h, &opts);
        let took = start.elapsed();
        let explored: u64 = rep.keys.iter().map(|k| k.explored).sum();
        eprintln!(
            "corrupted 10k ops, zones {}: {took:?}, {explored} configurations: {}",
            opts.zone_precheck, rep.violations[0]
        );
        assert!(!rep.ok);
        assert!(took < Duration::from_secs(10), "took {took:?}");
        for k in &rep.keys {
            let want = if k.key == key {
                Verdict::NotLinearizable
            } else {
                Verdict::Linearizable
            };
            assert_eq!(k.verdict, want, "{}", k.key);
        }
        // The stale read is named: as the end of its value's zone, as the op that cannot be
        // placed, or as a read still expecting the old value a later write must overwrite.
        match &rep.violations[..] {
            [LinViolation::ZoneConflict { key: k, held, .. }] => {
                assert_eq!((k, held.end_op), (&key, read));
            }
            [LinViolation::NotLinearizable {
                key: k,
                op,
                waiting_reads,
                ..
            }] => {
                assert_eq!(k, &key);
                assert!(*op == read || waiting_reads.contains(&read));
            }
            v => panic!("unexpected {v:?}"),
        }
    }
}

#[test]
fn crowded_keys_are_checked_fast() {
    // ~5 concurrent clients per key, 20,000 operations on 20 keys.
    let h = generate(42, 20, 100, 20_000);
    let (rep, took) = timed(&h);
    let explored: u64 = rep.keys.iter().map(|k| k.explored).sum();
    eprintln!("20k ops / 20 keys / 100 clients: {took:?}, {explored} configurations");
    assert!(rep.ok, "{:?}", rep.violations);
    assert!(took < Duration::from_secs(20), "took {took:?}");

    // Everything on one key with 20 clients.
    let h = generate(7, 1, 20, 5_000);
    let (rep, took) = timed(&h);
    eprintln!(
        "5k ops / 1 key / 20 clients: {took:?}, {} configurations",
        rep.keys[0].explored
    );
    assert!(rep.ok, "{:?}", rep.violations);
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn many_seeds_of_small_histories_are_accepted_and_corruptions_rejected() {
    for seed in 1..=50 {
        let mut h = generate(seed, 2, 4, 300);
        let rep = check_linearizable(&h);
        assert!(rep.ok, "seed {seed}: {:?}", rep.violations);
        assert!(check_linearizable_with(&h, &SEARCH_ONLY).ok, "seed {seed}");
        corrupt(&mut h);
        assert!(!check_linearizable(&h).ok, "seed {seed}");
        assert!(!check_linearizable_with(&h, &SEARCH_ONLY).ok, "seed {seed}");
    }
}

/// Linearizability by exhaustive search straight from the definition, for tiny single-key
/// histories: place operations one by one, any op whose real-time predecessors (ops that
/// completed before it was invoked) are placed, while the register sequence stays legal;
/// succeed once every Ok op is placed (Unknown writes may be left out).
fn brute_force(h: &[RegisterOp]) -> bool {
    let ops: Vec<&RegisterOp> = h
        .iter()
        .filter(|o| {
            !matches!(
                (o.kind, o.outcome),
                (_, Outcome::Failed) | (OpKind::Read, Outcome::Unknown)
            )
        })
        .collect();
    let ret = |o: &RegisterOp| match o.outcome {
        Outcome::Ok { .. } => o.complete_ns.unwrap_or(u64::MAX),
        _ => u64::MAX,
    };
    let required: u32 = (0..ops.len())
        .filter(|&i| ops[i].outcome != Outcome::Unknown)
        .map(|i| 1 << i)
        .sum();
    let preds: Vec<u32> = ops
        .iter()
        .map(|o| {
            (0..ops.len())
                .filter(|&j| ret(ops[j]) < o.invoke_ns)
                .map(|j| 1 << j)
                .sum()
        })
        .collect();
    fn dfs(
        ops: &[&RegisterOp],
        preds: &[u32],
        required: u32,
        placed: u32,
        reg: Option<u64>,
    ) -> bool {
        if placed & required == required {
            return true;
        }
        (0..ops.len()).any(|i| {
            if placed & (1 << i) != 0 || preds[i] & placed != preds[i] {
                return false;
            }
            let next = match (ops[i].kind, ops[i].outcome) {
                (OpKind::Write { value }, _) => Some(value),
                (OpKind::Read, Outcome::Ok { read_value }) if read_value == reg => reg,
                _ => return false,
            };
            dfs(ops, preds, required, placed | 1 << i, next)
        })
    }
    dfs(&ops, &preds, required, 0, None)
}

#[test]
fn agrees_with_brute_force_on_tiny_random_histories() {
    const CASES: usize = 20_000;
    const MAX_OPS: u64 = 9;
    let mut rng = XorShift(0xb0b);
    let (mut valid, mut invalid) = (0, 0);
    for case in 0..CASES {
        let n = 2 + rng.below(MAX_OPS - 1) as usize;
        let h: Vec<RegisterOp> = (0..n)
            .map(|id| {
                let invoke = rng.below(20);
                let complete = invoke + rng.below(10);
                let write = rng.below(2) == 0;
                // Few values, so they repeat; reads mostly see written values.
                let v = 1 + rng.below(3);
                let (kind, outcome) = if write {
                    let outcome = match rng.below(6) {
                        0 => Outcome::Unknown,
                        1 => Outcome::Failed,
                        _ => Outcome::Ok { read_value: None },
                    };
                    (OpKind::Write { value: v }, outcome)
                } else {
                    let read_value = (rng.below(4) != 0).then_some(v);
                    let outcome = match rng.below(10) {
                        0 => Outcome::Unknown,
                        _ => Outcome::Ok { read_value },
                    };
                    (OpKind::Read, outcome)
                };
                RegisterOp {
                    id: id as u64,
                    client: id as u32,
                    key: "k".into(),
                    kind,
                    invoke_ns: invoke,
                    complete_ns: (outcome != Outcome::Unknown).then_some(complete),
                    outcome,
                }
            })
            .collect();
        let want = brute_force(&h);
        let rep = check_linearizable_with(&h, &SEARCH_ONLY);
        assert_eq!(rep.ok, want, "search alone: {h:#?}\n{:?}", rep.violations);
        let rep = check_linearizable(&h);
        assert_eq!(rep.ok, want, "case {case}: {h:#?}\n{:?}", rep.violations);
        if want {
            valid += 1;
        } else {
            invalid += 1;
        }
    }
    eprintln!("{valid} linearizable, {invalid} not");
    assert!(valid > CASES / 10 && invalid > CASES / 10);
}

#[test]
fn agrees_with_brute_force_on_small_simulated_histories() {
    // Valid histories from the simulation, half of them with one read changed to a random
    // written value or `None`.
    let mut rng = XorShift(77);
    let (mut valid, mut invalid) = (0, 0);
    for seed in 1..=3_000 {
        let mut h = generate(seed, 1, 2 + (seed % 6) as usize, 14);
        let reads: Vec<usize> = (0..h.len())
            .filter(|&i| h[i].kind == OpKind::Read && matches!(h[i].outcome, Outcome::Ok { .. }))
            .collect();
        let writes: Vec<u64> = h
            .iter()
            .filter_map(|o| match o.kind {
                OpKind::Write { value } => Some(value),
                OpKind::Read | OpKind::Cas { .. } => None,
            })
            .collect();
        if rng.below(2) == 0 && !reads.is_empty() && !writes.is_empty() {
            let r = reads[rng.below(reads.len() as u64) as usize];
            let v = (rng.below(5) != 0).then(|| writes[rng.below(writes.len() as u64) as usize]);
            h[r].outcome = Outcome::Ok { read_value: v };
        }
        let want = brute_force(&h);
        let rep = check_linearizable_with(&h, &SEARCH_ONLY);
        assert_eq!(rep.ok, want, "search alone: {h:#?}\n{:?}", rep.violations);
        let rep = check_linearizable(&h);
        assert_eq!(rep.ok, want, "seed {seed}: {h:#?}\n{:?}", rep.violations);
        if want {
            valid += 1;
        } else {
            invalid += 1;
        }
    }
    eprintln!("{valid} linearizable, {invalid} not");
    assert!(valid > 300 && invalid > 300);
}

/// Timings at higher concurrency per key; run with `--ignored --nocapture`.
#[test]
#[ignore]
fn stress_high_concurrency() {
    for (keys, clients, ops) in [
        (1, 10, 5000),
        (1, 20, 5000),
        (1, 40, 5000),
        (20, 200, 20_000),
    ] {
        let mut h = generate(99, keys, clients, ops);
        let (rep, took) = timed(&h);
        let explored: u64 = rep.keys.iter().map(|k| k.explored).sum();
        eprintln!("{ops} ops / {keys} keys / {clients} clients: ok={} {took:?}, {explored} configurations", rep.ok);
        assert!(rep.ok);
        corrupt(&mut h);
        let (rep, took) = timed(&h);
        let explored: u64 = rep.keys.iter().map(|k| k.explored).sum();
        eprintln!(
            "  one stale read: ok={} {took:?}, {explored} configurations",
            rep.ok
        );
        assert!(!rep.ok);
    }
}

/// Cost of running out of budget (the default 5 million configurations) on a history the
/// search alone cannot decide; run with `--ignored --nocapture`.
#[test]
#[ignore]
fn stress_budget_exhaustion() {
    let op = |id, kind, invoke_ns, complete_ns, read_value| RegisterOp {
        id,
        client: 0,
        key: "k".into(),
        kind,
        invoke_ns,
        complete_ns: Some(complete_ns),
        outcome: Outcome::Ok { read_value },
    };
    let mut h = Vec::new();
    for i in 1..=24 {
        h.push(op(2 * i, OpKind::Write { value: i }, 0, 100, None));
        h.push(op(2 * i + 1, OpKind::Read, 0, 100, Some(i)));
    }
    h.push(op(100, OpKind::Write { value: 99 }, 150, 160, None));
    h.push(op(101, OpKind::Read, 200, 210, Some(1)));
    let start = Instant::now();
    let rep = check_linearizable_with(&h, &SEARCH_ONLY);
    let took = start.elapsed();
    eprintln!("budget exhausted after {took:?}: {:?}", rep.violations);
    assert_eq!(rep.keys[0].verdict, Verdict::Unknown);
}

//! The linearizability checker against a peer's labelled suite: porcupine's 102 Jepsen etcd
//! register histories (reads, writes, compare-and-set; see `fixtures/jepsen/SOURCE.md`),
//! converted to the checker's format. Every verdict must match porcupine's label.

use std::time::Instant;

use hub_chaos::check::{check_linearizable, parse_jepsen_log, Verdict};

#[test]
fn every_porcupine_etcd_label_matches() {
    let dir = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("tests/fixtures/jepsen");
    let labels = std::fs::read_to_string(dir.join("labels.txt")).expect("labels.txt");
    let mut mismatches = Vec::new();
    let mut rows = Vec::new();
    let started = Instant::now();
    for line in labels.lines() {
        let (number, label) = line.split_once(' ').expect("`NNN label` lines");
        let want = match label {
            "linearizable" => Verdict::Linearizable,
            "not-linearizable" => Verdict::NotLinearizable,
            other => panic!("labels.txt: unknown label {other:?}"),
        };
        let file = dir.join(format!("etcd_{number}.log"));
        let text = std::fs::read_to_string(&file).expect("history");
        let ops = parse_jepsen_log(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let t = Instant::now();
        let report = check_linearizable(&ops);
        let took = t.elapsed();
        let got = if report.ok {
            Verdict::Linearizable
        } else {
            report
                .keys
                .first()
                .map_or(Verdict::Linearizable, |k| k.verdict)
        };
        rows.push((number.to_string(), ops.len(), got, took));
        if got != want {
            mismatches.push(format!("etcd_{number}: {got:?}, porcupine says {want:?}"));
        }
    }
    let total = started.elapsed();
    let slowest = rows.iter().max_by_key(|r| r.3).expect("histories");
    let mut times: Vec<_> = rows.iter().map(|r| r.3).collect();
    times.sort();
    eprintln!(
        "{} histories, {} operations, checked in {total:?}: per history median {:?}, p90 {:?}, \
         slowest etcd_{} ({} ops) {:?}",
        rows.len(),
        rows.iter().map(|r| r.1).sum::<usize>(),
        times[times.len() / 2],
        times[times.len() * 9 / 10],
        slowest.0,
        slowest.1,
        slowest.3
    );
    assert_eq!(rows.len(), 102, "porcupine labels 102 histories");
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

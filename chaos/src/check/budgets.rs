//! Resource budgets: a fault costs the nodes it spares nothing they can notice.
//!
//! From the runner's samples of every member's process and log ([`ResourceHistory`]):
//!
//! - **log flood**: no node writes more than [`MAX_LOG_LINES`] lines in any
//!   [`LOG_WINDOW_NS`] window of the run (faults, their aftermath and the healing included).
//! - **CPU**: no node that a fault spared (not killed, paused, restarted or disk-struck by it)
//!   stays above its pre-fault level by more than [`MAX_CPU_EXCESS_MILLICORES`] over the
//!   whole fault. The pre-fault level is the node's CPU over the workload-only period before
//!   the first fault (the runner's own clients and agents load the nodes on a shared machine,
//!   so an idle level would be meaningless). The node's CPU during the fault is its mean over
//!   the fault's whole window (from the first sample in it to the last, at least
//!   [`CPU_SPAN_NS`] apart): a loop that spins while the fault holds shows, a burst of a few
//!   milliseconds (a snapshot built, an election) does not. The lowest rate over parts of the
//!   window would miss a loop that starts only after the election a leader's death causes.
//!   A window in which the node's process changed (it was restarted) is not judged for it.
//!
//! The report also carries the figures: per node its pre-fault CPU, its busiest 10 s of log,
//! its log's mean rate, its peak memory and file descriptors; per fault kind the largest CPU
//! excess over a fault (its mean) and the most lines a node wrote in the 10 s from a fault's
//! start.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::history::{FaultWindow, ResourceHistory, ResourceSample};

/// The most lines a node may write in any [`LOG_WINDOW_NS`].
pub const MAX_LOG_LINES: u64 = 100;

/// The window of the log budget: 10 s.
pub const LOG_WINDOW_NS: u64 = 10_000_000_000;

/// How far above its pre-fault level a spared node's CPU may stay for a whole fault, in
/// thousandths of a core.
pub const MAX_CPU_EXCESS_MILLICORES: i64 = 200;

/// The shortest span of samples within a fault its CPU is measured over: 0.4 s.
pub const CPU_SPAN_NS: u64 = 400_000_000;

/// The result of [`resource_budgets`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BudgetReport {
    /// True without violations.
    pub ok: bool,
    /// Samples judged.
    pub samples: usize,
    /// Per node.
    pub nodes: Vec<NodeFigures>,
    /// Per fault kind, in the order first struck.
    pub faults: Vec<FaultFigures>,
    /// What is wrong.
    pub violations: Vec<BudgetViolation>,
}

/// One node's figures over the run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeFigures {
    /// The node.
    pub node: u64,
    /// Its CPU over the pre-fault period, in thousandths of a core.
    pub baseline_millicores: Option<i64>,
    /// The most lines it wrote in any 10 s.
    pub max_log_lines_10s: u64,
    /// Its log's mean rate over the run, in bytes a second.
    pub log_bytes_per_s: u64,
    /// Its largest resident memory, in KiB.
    pub max_rss_kib: u64,
    /// Its most open file descriptors.
    pub max_fds: u64,
}

/// One fault kind's figures.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FaultFigures {
    /// The fault's name.
    pub fault: String,
    /// Faults of this kind.
    pub windows: usize,
    /// (node, fault) pairs whose CPU was judged.
    pub judged: usize,
    /// The largest CPU excess of a spared node over its pre-fault level during such a
    /// fault (its mean over the fault), in thousandths of a core (negative: below it).
    pub max_excess_millicores: Option<i64>,
    /// The most lines a node wrote in the 10 s from such a fault's start.
    pub max_log_lines_10s: u64,
}

/// A budget broken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BudgetViolation {
    /// A node wrote too many lines in 10 s.
    #[error("node {node} wrote {lines} log lines in the 10 s from {from_ms} ms (budget {MAX_LOG_LINES})")]
    LogFlood {
        /// The node.
        node: u64,
        /// Lines written.
        lines: u64,
        /// Where the window starts (ms from the run's epoch).
        from_ms: u64,
    },
    /// A spared node's CPU stayed above its pre-fault level over a whole fault.
    #[error(
        "node {node} used {millicores} millicores over {fault} at {from_ms}–{to_ms} ms, \
         {excess} above its pre-fault {baseline_millicores} (budget {MAX_CPU_EXCESS_MILLICORES})"
    )]
    CpuAboveBaseline {
        /// The node.
        node: u64,
        /// The fault.
        fault: String,
        /// Its window (ms from the run's epoch).
        from_ms: u64,
        /// See `from_ms`.
        to_ms: u64,
        /// The node's CPU over the fault.
        millicores: i64,
        /// Its pre-fault level.
        baseline_millicores: i64,
        /// `millicores - baseline_millicores`.
        excess: i64,
    },
}

/// Judges the budgets over `h`.
pub fn resource_budgets(h: &ResourceHistory) -> BudgetReport {
    let mut by_node: BTreeMap<u64, Vec<&ResourceSample>> = BTreeMap::new();
    for s in &h.samples {
        by_node.entry(s.node).or_default().push(s);
    }
    for samples in by_node.values_mut() {
        samples.sort_by_key(|s| s.at_ns);
    }
    let mut violations = Vec::new();
    let mut nodes = Vec::new();
    let mut baselines = BTreeMap::new();
    for (node, samples) in &by_node {
        let (lines, from_ns) = busiest_log_window(samples);
        if lines > MAX_LOG_LINES {
            violations.push(BudgetViolation::LogFlood {
                node: *node,
                lines,
                from_ms: from_ns / 1_000_000,
            });
        }
        let baseline = h
            .baseline_ns
            .and_then(|(from, to)| millicores(samples, from, to));
        if let Some(b) = baseline {
            baselines.insert(*node, b);
        }
        nodes.push(node_figures(*node, samples, baseline, lines));
    }
    let mut faults: Vec<FaultFigures> = Vec::new();
    for w in &h.windows {
        let i = match faults.iter().position(|f| f.fault == w.fault) {
            Some(i) => i,
            None => {
                faults.push(FaultFigures {
                    fault: w.fault.clone(),
                    ..FaultFigures::default()
                });
                faults.len() - 1
            }
        };
        let figures = &mut faults[i];
        figures.windows += 1;
        for (node, samples) in &by_node {
            let lines = lines_between(samples, w.from_ns, w.from_ns + LOG_WINDOW_NS);
            figures.max_log_lines_10s = figures.max_log_lines_10s.max(lines);
            if !w.cpu_judged || w.struck.contains(node) {
                continue;
            }
            let (Some(base), Some(low)) = (baselines.get(node), during(samples, w)) else {
                continue;
            };
            figures.judged += 1;
            let excess = low - base;
            figures.max_excess_millicores = Some(
                figures
                    .max_excess_millicores
                    .map_or(excess, |m| m.max(excess)),
            );
            if excess > MAX_CPU_EXCESS_MILLICORES {
                violations.push(BudgetViolation::CpuAboveBaseline {
                    node: *node,
                    fault: w.fault.clone(),
                    from_ms: w.from_ns / 1_000_000,
                    to_ms: w.to_ns / 1_000_000,
                    millicores: low,
                    baseline_millicores: *base,
                    excess,
                });
            }
        }
    }
    BudgetReport {
        ok: violations.is_empty(),
        samples: h.samples.len(),
        nodes,
        faults,
        violations,
    }
}

/// The figures of `node` from its `samples`.
fn node_figures(
    node: u64,
    samples: &[&ResourceSample],
    baseline: Option<i64>,
    max_log_lines_10s: u64,
) -> NodeFigures {
    let (first, last) = (samples.first(), samples.last());
    let log_bytes_per_s = match (first, last) {
        (Some(a), Some(b)) if b.at_ns > a.at_ns => {
            (b.log_bytes.saturating_sub(a.log_bytes) as u128 * 1_000_000_000
                / u128::from(b.at_ns - a.at_ns)) as u64
        }
        _ => 0,
    };
    NodeFigures {
        node,
        baseline_millicores: baseline,
        max_log_lines_10s,
        log_bytes_per_s,
        max_rss_kib: samples.iter().map(|s| s.rss_kib).max().unwrap_or(0),
        max_fds: samples.iter().map(|s| s.fds).max().unwrap_or(0),
    }
}

/// The most lines between two samples at most [`LOG_WINDOW_NS`] apart, and when the first
/// of them was taken.
fn busiest_log_window(samples: &[&ResourceSample]) -> (u64, u64) {
    let mut best = (0, 0);
    let mut start = 0;
    for end in 0..samples.len() {
        while samples[end].at_ns - samples[start].at_ns > LOG_WINDOW_NS {
            start += 1;
        }
        let lines = samples[end]
            .log_lines
            .saturating_sub(samples[start].log_lines);
        if lines > best.0 {
            best = (lines, samples[start].at_ns);
        }
    }
    best
}

/// Lines written between the first sample at or after `from` and the last at or before `to`.
fn lines_between(samples: &[&ResourceSample], from: u64, to: u64) -> u64 {
    let inside: Vec<&&ResourceSample> = samples
        .iter()
        .filter(|s| s.at_ns >= from && s.at_ns <= to)
        .collect();
    match (inside.first(), inside.last()) {
        (Some(a), Some(b)) => b.log_lines.saturating_sub(a.log_lines),
        _ => 0,
    }
}

/// CPU in thousandths of a core between two samples of one process.
fn rate(a: &ResourceSample, b: &ResourceSample) -> Option<i64> {
    let same = a.pid.is_some() && a.pid == b.pid && b.at_ns > a.at_ns;
    same.then(|| {
        let cpu_ns = b.cpu_ms.saturating_sub(a.cpu_ms) as i128 * 1_000_000;
        (cpu_ns * 1000 / i128::from(b.at_ns - a.at_ns)) as i64
    })
}

/// The node's CPU over `[from, to]`, one process throughout (`None` otherwise, or with
/// fewer than two samples).
fn millicores(samples: &[&ResourceSample], from: u64, to: u64) -> Option<i64> {
    let inside: Vec<&ResourceSample> = samples
        .iter()
        .copied()
        .filter(|s| s.at_ns >= from && s.at_ns <= to)
        .collect();
    let (a, b) = (inside.first()?, inside.last()?);
    if inside.iter().any(|s| s.pid != a.pid) {
        return None;
    }
    rate(a, b)
}

/// The node's CPU over fault window `w`, one process throughout; `None` when its samples in
/// the window span less than [`CPU_SPAN_NS`].
fn during(samples: &[&ResourceSample], w: &FaultWindow) -> Option<i64> {
    let first = samples.iter().find(|s| s.at_ns >= w.from_ns)?;
    let last = samples.iter().rev().find(|s| s.at_ns <= w.to_ns)?;
    if last.at_ns < first.at_ns + CPU_SPAN_NS {
        return None;
    }
    millicores(samples, w.from_ns, w.to_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Samples of `node` every 250 ms over `[0, until_ms)`: its CPU from `cpu(t_ms)` (in
    /// millicores at that time), `lines(t_ms)` lines a second.
    fn node(
        node: u64,
        until_ms: u64,
        cpu: impl Fn(u64) -> u64,
        lines: impl Fn(u64) -> u64,
    ) -> Vec<ResourceSample> {
        let (mut cpu_us, mut log) = (0u64, 0u64);
        (0..until_ms)
            .step_by(250)
            .map(|t| {
                let s = ResourceSample {
                    node,
                    at_ns: t * MS,
                    pid: Some(100 + node as u32),
                    cpu_ms: cpu_us / 1000,
                    rss_kib: 50_000,
                    fds: 40,
                    log_bytes: log * 120,
                    log_lines: log,
                };
                cpu_us += cpu(t) * 250;
                log += lines(t) / 4;
                s
            })
            .collect()
    }

    fn window(fault: &str, from_ms: u64, to_ms: u64, struck: &[u64]) -> FaultWindow {
        FaultWindow {
            fault: fault.into(),
            from_ns: from_ms * MS,
            to_ns: to_ms * MS,
            struck: struck.to_vec(),
            cpu_judged: true,
        }
    }

    /// Node 1 spins at +500 millicores while node 2 is down (from 10 s to 13 s), as the leader
    /// of a dead follower did; node 3 only has a burst (a quarter of a second at a core).
    fn run(spin: bool) -> ResourceHistory {
        let mut samples = node(
            1,
            30_000,
            |t| {
                if spin && (10_000..13_000).contains(&t) {
                    650
                } else {
                    150
                }
            },
            |_| 4,
        );
        samples.extend(node(2, 30_000, |_| 80, |_| 4));
        samples.extend(node(
            3,
            30_000,
            |t| {
                if (11_000..11_250).contains(&t) {
                    1_000
                } else {
                    80
                }
            },
            |_| 4,
        ));
        ResourceHistory {
            samples,
            baseline_ns: Some((1_000 * MS, 8_000 * MS)),
            windows: vec![window("kill-any", 10_000, 13_000, &[2])],
        }
    }

    #[test]
    fn a_quiet_run_passes_with_its_figures() {
        let r = resource_budgets(&run(false));
        assert!(r.ok, "{:?}", r.violations);
        assert_eq!(r.nodes.len(), 3);
        assert_eq!(r.nodes[0].baseline_millicores, Some(150));
        assert!(r.nodes.iter().all(|n| n.max_log_lines_10s == 40), "{r:?}");
        assert_eq!(r.faults[0].fault, "kill-any");
        assert_eq!(r.faults[0].judged, 2, "node 2 was struck");
        // Node 3's burst: 230 millicore-seconds over 3 s.
        let excess = r.faults[0].max_excess_millicores.unwrap();
        assert!((60..=90).contains(&excess), "{excess}");
    }

    /// The spinning spared node fails; the struck one, and a burst, do not.
    #[test]
    fn a_node_spinning_through_a_fault_fails() {
        let r = resource_budgets(&run(true));
        assert!(!r.ok);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        match &r.violations[0] {
            BudgetViolation::CpuAboveBaseline { node, excess, .. } => {
                assert_eq!(*node, 1);
                assert!((480..=520).contains(excess), "{excess}");
            }
            v => panic!("{v}"),
        }
        assert!(r.violations[0].to_string().contains("over kill-any"));
        // Struck, it would not be judged.
        let mut h = run(true);
        h.windows[0].struck = vec![1, 2];
        assert!(resource_budgets(&h).ok);
    }

    /// The spin starting only after an election (the fault's first half second) is caught.
    #[test]
    fn a_spin_after_an_election_is_caught() {
        let mut h = run(true);
        for s in h.samples.iter_mut().filter(|s| s.node == 1) {
            if s.at_ns > 10_000 * MS {
                s.cpu_ms -= 200;
            }
        }
        let r = resource_budgets(&h);
        assert!(!r.ok, "{r:?}");
    }

    /// A node restarted within the window is not judged there.
    #[test]
    fn a_restarted_process_is_not_judged() {
        let mut h = run(true);
        for s in h
            .samples
            .iter_mut()
            .filter(|s| s.node == 1 && s.at_ns >= 12_000 * MS)
        {
            s.pid = Some(999);
        }
        let r = resource_budgets(&h);
        assert!(r.ok, "{:?}", r.violations);
        assert_eq!(r.faults[0].judged, 1);
    }

    /// 11 lines a second for 10 s is a flood; 10 is not.
    #[test]
    fn more_than_a_hundred_lines_in_ten_seconds_is_a_flood() {
        let flood = |per_s: u64| ResourceHistory {
            samples: node(1, 30_000, |_| 100, |t| if t >= 5_000 { per_s } else { 0 }),
            ..ResourceHistory::default()
        };
        assert!(resource_budgets(&flood(8)).ok);
        let r = resource_budgets(&flood(12));
        assert!(!r.ok);
        assert!(
            matches!(
                r.violations[0],
                BudgetViolation::LogFlood {
                    node: 1,
                    lines: 120,
                    ..
                }
            ),
            "{:?}",
            r.violations
        );
        assert!(resource_budgets(&ResourceHistory::default()).ok);
    }
}

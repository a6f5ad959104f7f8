//! Checkers of the chaos runner: pure functions from a recorded [`History`] to a verdict.
//!
//! The runner injects faults, records what clients, agents and the healed cluster saw, and
//! hands the history to [`check_all`]. Each checker returns a serializable report with `ok`,
//! counts and violations naming the operations, keys or plans involved:
//!
//! - [`check_linearizable`]: register operations are linearizable, per key;
//! - [`acked_writes_durable`]: values read after healing keep acknowledged register writes;
//! - [`lost_writes`]: the append-only set keeps acknowledged adds, without phantoms;
//! - [`plans_at_most_once`]: tasks succeed at most once, one plan per entity at a time;
//! - [`canary_weights`]: applied canary weights follow the committed ones;
//! - [`rollouts_terminal`]: every rollout is terminal after healing;
//! - [`converged`]: nodes at the same applied index have equal digests;
//! - [`disk_faults_survived`]: a node under a disk fault kept serving or crash-stopped, and
//!   served again;
//! - [`membership_respected`]: a removed node is never again leader or followed, and the
//!   healed members agree on the voters;
//! - [`fleet_waves`]: no plan of a later wave before an earlier wave's committed soak end, no
//!   wave opened twice, every fleet release rolled out or halted with a cause;
//! - [`upgrade_gated`]: a rolling upgrade across releases upgraded every node once, the
//!   feature-level gate held the new release's command back until the last one, then let it
//!   apply;
//! - [`resource_budgets`]: no node writes more than 100 log lines in any 10 s, and no node a
//!   fault spared uses more than 0.2 cores above its pre-fault CPU over the whole fault.
//!
//! No I/O and no clock: the same history always gives the same report.

mod budgets;
mod canary;
mod cas;
mod cluster;
mod disks;
mod durable;
mod entry_times;
mod fleet;
mod history;
mod jepsen;
mod lin_report;
mod linear;
mod membership;
mod plans;
#[cfg(test)]
mod sim;
mod upgrade;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use budgets::{
    resource_budgets, BudgetReport, BudgetViolation, FaultFigures, NodeFigures, CPU_SPAN_NS,
    LOG_WINDOW_NS, MAX_CPU_EXCESS_MILLICORES, MAX_LOG_LINES,
};
pub use canary::{canary_weights, CanaryReport, CanaryViolation};
pub use cluster::{
    converged, rollouts_terminal, ConvergenceReport, ConvergenceViolation, RolloutReport,
    RolloutViolation,
};
pub use disks::{disk_faults_survived, DiskReport, DiskViolation};
pub use durable::{
    acked_writes_durable, lost_writes, DurabilityReport, DurabilityViolation, SetReport,
    SetViolation,
};
pub use entry_times::{entry_times_true, EntryTimeReport, EntryTimeViolation, ENTRY_TIME_BOUND_MS};
pub use fleet::{fleet_waves, FleetReport, FleetViolation};
pub use history::{
    AckedWrite, AddOutcome, CanaryRun, DiskFault, DiskStrike, FaultWindow, FleetHistory, FleetPlan,
    FleetRelease, FleetWave, History, HubPlan, MemberSample, MembershipChange, NodeDigest, OpKind,
    Outcome, RegisterOp, ResourceHistory, ResourceSample, Rollout, SetAdd, TaskExecution,
    TaskState,
};
pub use jepsen::{parse_jepsen_log, JepsenError};
pub use linear::{
    check_linearizable, check_linearizable_with, KeyReport, LinOptions, LinReport, LinViolation,
    Verdict, Zone, DEFAULT_MAX_STATES_PER_KEY,
};
pub use membership::{membership_respected, MembershipReport, MembershipViolation};
pub use plans::{plans_at_most_once, ExecRef, PlanReport, PlanSpan, PlanViolation};
pub use upgrade::{
    upgrade_gated, AfterUpgrade, GateProbe, UpgradeHistory, UpgradeReport, UpgradeStep,
};

/// Totals over all checkers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Client operations recorded: register operations and set adds.
    pub operations: usize,
    /// Of those, acknowledged writes: register writes and set adds acknowledged Ok.
    pub acknowledged: usize,
    /// Acknowledged writes proven lost (registers and set).
    pub lost: usize,
    /// Things done twice: extra task successes and extra set copies.
    pub duplicates: usize,
    /// Violations over all checkers.
    pub violations: usize,
}

/// The verdict on a whole history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckReport {
    /// True when every checker passed.
    pub ok: bool,
    /// Totals.
    pub summary: Summary,
    /// Register linearizability.
    pub linearizability: LinReport,
    /// Acknowledged register writes survive healing.
    pub durability: DurabilityReport,
    /// The append-only set.
    pub set: SetReport,
    /// Plans at most once.
    pub plans: PlanReport,
    /// Plans' recorded times against the true clock.
    pub entry_times: EntryTimeReport,
    /// Canary weights.
    pub canary: CanaryReport,
    /// Rollouts terminal.
    pub rollouts: RolloutReport,
    /// Convergence.
    pub convergence: ConvergenceReport,
    /// Disk faults: clean stops and recovery.
    #[serde(default)]
    pub disks: DiskReport,
    /// Membership changes: removed nodes never counted again.
    #[serde(default)]
    pub membership: MembershipReport,
    /// Fleet waves: soak ends held, no wave opened twice, nothing stuck.
    #[serde(default)]
    pub fleet: FleetReport,
    /// Resource budgets: log lines per 10 s, CPU of the nodes a fault spared.
    #[serde(default)]
    pub budgets: BudgetReport,
    /// A rolling upgrade across releases, if the run had one.
    #[serde(default)]
    pub upgrade: UpgradeReport,
    /// Every violation as one human-readable line, prefixed by its checker.
    pub messages: Vec<String>,
}

/// Runs every checker with the default linearizability budget.
pub fn check_all(h: &History) -> CheckReport {
    check_all_with(h, &LinOptions::default())
}

/// Runs every checker.
pub fn check_all_with(h: &History, opts: &LinOptions) -> CheckReport {
    let linearizability = check_linearizable_with(&h.register_ops, opts);
    let durability = acked_writes_durable(&h.register_ops, &h.acked_writes, &h.final_reads);
    let set = lost_writes(&h.set_adds, &h.final_set);
    let plans = plans_at_most_once(&h.task_executions, &h.hub_plans);
    let entry_times = entry_times_true(&h.task_executions, &h.hub_plans, h.epoch_wall_ms);
    let canary = canary_weights(&h.canary_runs);
    let rollouts = rollouts_terminal(&h.rollouts);
    let convergence = converged(&h.node_digests);
    let disks = disk_faults_survived(&h.disk_strikes);
    let membership =
        membership_respected(&h.initial_members, &h.membership_changes, &h.member_samples);
    let fleet = fleet_waves(&h.fleet);
    let budgets = resource_budgets(&h.resources);
    let upgrade = upgrade_gated(h.upgrade.as_ref());

    let mut messages = Vec::new();
    let mut add = |checker: &str, lines: Vec<String>| {
        messages.extend(lines.into_iter().map(|l| format!("{checker}: {l}")));
    };
    add("linearizability", strings(&linearizability.violations));
    add("durability", strings(&durability.violations));
    add("set", strings(&set.violations));
    add("plans", strings(&plans.violations));
    add("entry_times", strings(&entry_times.violations));
    add("canary", strings(&canary.violations));
    add("rollouts", strings(&rollouts.violations));
    add("convergence", strings(&convergence.violations));
    add("disks", strings(&disks.violations));
    add("membership", strings(&membership.violations));
    add("fleet", strings(&fleet.violations));
    add("budgets", strings(&budgets.violations));
    add("upgrade", upgrade.violations.clone());

    let summary = Summary {
        operations: h.register_ops.len() + h.set_adds.len(),
        acknowledged: durability.acknowledged + set.acknowledged,
        lost: durability.lost + set.lost,
        duplicates: plans.duplicates + set.duplicates,
        violations: messages.len(),
    };
    CheckReport {
        ok: linearizability.ok
            && durability.ok
            && set.ok
            && plans.ok
            && entry_times.ok
            && canary.ok
            && rollouts.ok
            && convergence.ok
            && disks.ok
            && membership.ok
            && fleet.ok
            && budgets.ok
            && upgrade.ok,
        summary,
        linearizability,
        durability,
        set,
        plans,
        entry_times,
        canary,
        rollouts,
        convergence,
        disks,
        membership,
        fleet,
        budgets,
        upgrade,
        messages,
    }
}

fn strings<T: ToString>(violations: &[T]) -> Vec<String> {
    violations.iter().map(ToString::to_string).collect()
}

impl fmt::Display for CheckReport {
    /// One summary line, then one line per violation.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.summary;
        writeln!(
            f,
            "{}: {} operations, {} acknowledged, {} lost, {} duplicates, {} violations",
            if self.ok { "PASS" } else { "FAIL" },
            s.operations,
            s.acknowledged,
            s.lost,
            s.duplicates,
            s.violations
        )?;
        for m in &self.messages {
            writeln!(f, "  {m}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A history with every part filled in, all of it correct.
    fn full_history() -> History {
        History {
            register_ops: vec![
                RegisterOp {
                    id: 1,
                    client: 0,
                    key: "k".into(),
                    kind: OpKind::Write { value: 7 },
                    invoke_ns: 0,
                    complete_ns: Some(10),
                    outcome: Outcome::Ok { read_value: None },
                },
                RegisterOp {
                    id: 2,
                    client: 1,
                    key: "k".into(),
                    kind: OpKind::Write { value: 8 },
                    invoke_ns: 5,
                    complete_ns: None,
                    outcome: Outcome::Unknown,
                },
                RegisterOp {
                    id: 3,
                    client: 0,
                    key: "k".into(),
                    kind: OpKind::Read,
                    invoke_ns: 20,
                    complete_ns: Some(30),
                    outcome: Outcome::Ok {
                        read_value: Some(7),
                    },
                },
                RegisterOp {
                    id: 4,
                    client: 2,
                    key: "k".into(),
                    kind: OpKind::Write { value: 9 },
                    invoke_ns: 25,
                    complete_ns: Some(26),
                    outcome: Outcome::Failed,
                },
            ],
            acked_writes: vec![AckedWrite {
                id: 1,
                key: "k".into(),
                value: 7,
            }],
            final_reads: vec![("k".into(), Some(7)), ("k".into(), Some(7))],
            set_adds: vec![
                SetAdd {
                    id: 10,
                    element: "e1".into(),
                    outcome: AddOutcome::Ok,
                },
                SetAdd {
                    id: 11,
                    element: "e2".into(),
                    outcome: AddOutcome::Unknown,
                },
            ],
            final_set: vec!["e1".into()],
            task_executions: vec![
                TaskExecution {
                    agent: "a1".into(),
                    plan: "p-1-0".into(),
                    entity: "svc".into(),
                    task: "start".into(),
                    attempt: 1,
                    state: TaskState::Started,
                    at_ns: 100,
                },
                TaskExecution {
                    agent: "a1".into(),
                    plan: "p-1-0".into(),
                    entity: "svc".into(),
                    task: "start".into(),
                    attempt: 1,
                    state: TaskState::Succeeded,
                    at_ns: 200,
                },
            ],
            hub_plans: vec![HubPlan {
                id: "p-1-0".into(),
                entity: "svc".into(),
                status: "succeeded".into(),
                tasks: vec!["start".into()],
                issued_index: None,
                issued_ms: None,
            }],
            canary_runs: vec![CanaryRun {
                canary: "web@2".into(),
                committed: vec![(1, 10), (2, 100)],
                applied: vec![(1, 10), (2, 100)],
            }],
            rollouts: vec![Rollout {
                id: "r1".into(),
                kind: "canary".into(),
                state: "promoted".into(),
                terminal: true,
            }],
            node_digests: vec![
                NodeDigest {
                    node: 1,
                    applied_index: 12,
                    digest: "abc".into(),
                },
                NodeDigest {
                    node: 2,
                    applied_index: 12,
                    digest: "abc".into(),
                },
            ],
            epoch_wall_ms: None,
            disk_strikes: vec![DiskStrike {
                node: 2,
                fault: DiskFault::FsyncError,
                ballast_bytes: 0,
                syncs_failed: 4,
                stopped: true,
                clean_stop: true,
                served_again: true,
            }],
            initial_members: Vec::new(),
            membership_changes: Vec::new(),
            member_samples: Vec::new(),
            fleet: FleetHistory::default(),
            resources: ResourceHistory::default(),
            upgrade: None,
        }
    }

    #[test]
    fn a_write_acknowledged_then_lost_after_a_disk_fault_fails() {
        // Write 7 was acknowledged; node 2's syncs then failed, it crash-stopped and came
        // back, and after healing the register holds nothing: the write is lost.
        let mut h = full_history();
        h.final_reads = vec![("k".into(), None), ("k".into(), None)];
        h.register_ops.truncate(2);
        let rep = check_all(&h);
        assert!(!rep.ok, "{rep}");
        assert!(rep.disks.ok && !rep.durability.ok, "{rep}");
        assert_eq!(rep.summary.lost, 1, "{rep}");
        assert!(
            rep.messages.iter().any(|m| m.starts_with("durability:")),
            "{rep}"
        );
        // And a node that died without its crash-stop fails the disk checker on its own.
        let mut h = full_history();
        h.disk_strikes[0].clean_stop = false;
        let rep = check_all(&h);
        assert!(!rep.ok && !rep.disks.ok, "{rep}");
        assert!(
            rep.messages
                .iter()
                .any(|m| m.starts_with("disks: node 2 died")),
            "{rep}"
        );
    }

    #[test]
    fn history_round_trips_through_json() {
        let h = full_history();
        let json = serde_json::to_string_pretty(&h).expect("serialize");
        let back: History = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, h);
        // Tags as the runner writes them.
        assert!(json.contains(r#""op": "write""#), "{json}");
        assert!(json.contains(r#""status": "unknown""#), "{json}");
        // Missing parts default to empty.
        let empty: History = serde_json::from_str("{}").expect("deserialize");
        assert_eq!(empty, History::default());
    }

    #[test]
    fn good_history_passes_every_checker() {
        let rep = check_all(&full_history());
        assert!(rep.ok, "{rep}");
        assert_eq!(
            rep.summary,
            Summary {
                operations: 6,
                acknowledged: 2,
                lost: 0,
                duplicates: 0,
                violations: 0
            }
        );
        assert!(rep.to_string().starts_with("PASS: 6 operations"));
        assert!(check_all(&History::default()).ok);
    }

    #[test]
    fn every_checker_contributes_to_the_verdict() {
        let mut h = full_history();
        h.final_set.clear();
        h.task_executions.push(h.task_executions[1].clone());
        h.rollouts[0].terminal = false;
        // Stamped an hour after its agent started it.
        h.epoch_wall_ms = Some(0);
        h.hub_plans[0].issued_ms = Some(3_600_000);
        h.hub_plans[0].issued_index = Some(1);
        let rep = check_all(&h);
        assert!(!rep.ok);
        assert_eq!((rep.summary.lost, rep.summary.duplicates), (1, 1));
        assert!(
            rep.messages.iter().any(|m| m.starts_with("set: add 10")),
            "{rep}"
        );
        assert!(
            rep.messages
                .iter()
                .any(|m| m.starts_with("plans: plan p-1-0 task start succeeded 2 times")),
            "{rep}"
        );
        assert!(
            rep.messages
                .iter()
                .any(|m| m.starts_with("rollouts: canary rollout r1")),
            "{rep}"
        );
        assert!(
            rep.messages
                .iter()
                .any(|m| m.starts_with("entry_times: plan p-1-0 was issued at 3600000 ms")),
            "{rep}"
        );

        let mut h = full_history();
        h.register_ops[2].outcome = Outcome::Ok {
            read_value: Some(9),
        };
        h.final_reads.push(("k".into(), Some(9)));
        h.node_digests[1].digest = "abd".into();
        h.canary_runs[0].applied[1].1 = 50;
        let rep = check_all(&h);
        assert!(!rep.ok);
        assert!(
            !rep.linearizability.ok && !rep.durability.ok && !rep.convergence.ok && !rep.canary.ok
        );
        // A fleet plan of wave 2 issued before wave 1's soak end.
        h.fleet = FleetHistory {
            product: "p".into(),
            releases: vec![FleetRelease {
                version: "1.0.1".into(),
                status_read: true,
                halted: None,
                waves: vec![
                    FleetWave {
                        name: "one".into(),
                        entities: vec!["a".into()],
                        done: 1,
                        passed: true,
                        promoted: false,
                        completed_ms: Some(10),
                        soak_until_ms: Some(4010),
                    },
                    FleetWave {
                        name: "two".into(),
                        entities: vec!["b".into()],
                        done: 1,
                        passed: true,
                        promoted: false,
                        completed_ms: Some(4100),
                        soak_until_ms: Some(4100),
                    },
                ],
            }],
            plans: vec![FleetPlan {
                id: "p-7-0".into(),
                entity: "b".into(),
                kind: "version-change".into(),
                to_version: Some("1.0.1".into()),
                status: "succeeded".into(),
                issued_ms: Some(4000),
                issued_index: Some(7),
            }],
            ..FleetHistory::default()
        };
        let rep = check_all(&h);
        assert!(!rep.fleet.ok, "{rep}");
        assert!(
            rep.messages
                .iter()
                .any(|m| m.starts_with("fleet: plan p-7-0 of b to 1.0.1 (wave two)")),
            "{rep}"
        );
        // A node that floods its log.
        h.resources.samples = (0..3u64)
            .map(|i| ResourceSample {
                node: 1,
                at_ns: i * 4_000_000_000,
                log_lines: i * 60,
                ..ResourceSample::default()
            })
            .collect();
        let rep = check_all(&h);
        assert!(!rep.budgets.ok, "{rep}");
        assert!(
            rep.messages
                .iter()
                .any(|m| m.starts_with("budgets: node 1 wrote 120 log lines")),
            "{rep}"
        );
        // The report itself serializes.
        let json = serde_json::to_string(&rep).expect("serialize");
        let back: CheckReport = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, rep);
    }
}

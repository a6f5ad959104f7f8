//! Plans are executed at most once: agent task logs against the hub's plan records.
//!
//! Rules: a (plan, task) succeeds at most once across all agents and restarts; no task is
//! started again after it succeeded; every task of a plan the hub records as succeeded
//! succeeded in the agent logs; and the plans of one entity never overlap in time.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::history::{HubPlan, TaskExecution, TaskState};

/// The result of [`plans_at_most_once`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanReport {
    /// True without violations.
    pub ok: bool,
    /// Task-log events.
    pub executions: usize,
    /// Distinct plans with at least one event.
    pub executed_plans: usize,
    /// Distinct (plan, task) pairs that succeeded.
    pub succeeded_tasks: usize,
    /// Extra successes of a (plan, task) beyond the first.
    pub duplicates: usize,
    /// What is wrong.
    pub violations: Vec<PlanViolation>,
}

/// One task-log event, as quoted in violations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecRef {
    /// The agent.
    pub agent: String,
    /// The attempt number.
    pub attempt: u32,
    /// When.
    pub at_ns: u64,
}

impl fmt::Display for ExecRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "agent {} attempt {} at {} ns",
            self.agent, self.attempt, self.at_ns
        )
    }
}

/// When a plan ran: first start to last finish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanSpan {
    /// The plan.
    pub plan: String,
    /// First `Started` (first event of any kind without one).
    pub start_ns: u64,
    /// Last `Succeeded`/`Failed` (last event of any kind without one).
    pub end_ns: u64,
}

impl fmt::Display for PlanSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} [{} ns, {} ns]",
            self.plan, self.start_ns, self.end_ns
        )
    }
}

/// An at-most-once violation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PlanViolation {
    /// A task succeeded more than once.
    #[error("plan {plan} task {task} succeeded {} times ({})", .successes.len(), list(.successes))]
    DuplicateSuccess {
        /// The plan.
        plan: String,
        /// The task.
        task: String,
        /// Every success, in time order.
        successes: Vec<ExecRef>,
    },
    /// A task was started again after it had succeeded.
    #[error("plan {plan} task {task} started again ({started}) after it succeeded ({succeeded})")]
    StartedAfterSuccess {
        /// The plan.
        plan: String,
        /// The task.
        task: String,
        /// The first success.
        succeeded: ExecRef,
        /// The later start.
        started: ExecRef,
    },
    /// The hub records the plan as succeeded but a task never succeeded on an agent.
    #[error(
        "plan {plan} is succeeded on the hub but task {task} never succeeded in the agent logs"
    )]
    MissingSuccess {
        /// The plan.
        plan: String,
        /// The task.
        task: String,
    },
    /// Two plans of one entity ran at the same time.
    #[error("entity {entity}: plans {first} and {second} overlap")]
    OverlappingPlans {
        /// The entity.
        entity: String,
        /// The plan that started first.
        first: PlanSpan,
        /// The plan that started while it was running.
        second: PlanSpan,
    },
}

fn list(refs: &[ExecRef]) -> String {
    refs.iter()
        .map(ExecRef::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// One plan per entity at a time: the spans of each entity's plans (first start to last
/// end in the agents' logs), swept by start; each overlap is a violation.
fn overlapping_plans(by_plan: &BTreeMap<&str, Vec<&TaskExecution>>) -> Vec<PlanViolation> {
    let mut violations = Vec::new();
    let mut by_entity: BTreeMap<&str, Vec<PlanSpan>> = BTreeMap::new();
    for (&plan, events) in by_plan {
        let starts = events.iter().filter(|e| e.state == TaskState::Started);
        let ends = events.iter().filter(|e| e.state != TaskState::Started);
        let start = starts.map(|e| e.at_ns).min();
        let end = ends.map(|e| e.at_ns).max();
        let start = start.or_else(|| events.iter().map(|e| e.at_ns).min());
        let end = end.or_else(|| events.iter().map(|e| e.at_ns).max());
        let (Some(start_ns), Some(end_ns)) = (start, end) else {
            continue;
        };
        // Every plan in `by_plan` has at least one event.
        let entity = events[0].entity.as_str();
        by_entity.entry(entity).or_default().push(PlanSpan {
            plan: plan.to_string(),
            start_ns,
            end_ns: end_ns.max(start_ns),
        });
    }
    for (entity, mut spans) in by_entity {
        spans.sort_by(|a, b| (a.start_ns, a.end_ns, &a.plan).cmp(&(b.start_ns, b.end_ns, &b.plan)));
        let mut running: Option<&PlanSpan> = None;
        for s in &spans {
            if let Some(r) = running {
                if s.start_ns < r.end_ns {
                    violations.push(PlanViolation::OverlappingPlans {
                        entity: entity.to_string(),
                        first: r.clone(),
                        second: s.clone(),
                    });
                }
            }
            if running.is_none_or(|r| s.end_ns > r.end_ns) {
                running = Some(s);
            }
        }
    }
    violations
}

/// Checks the agent task logs `execs` against the hub's `plans` (read after healing).
pub fn plans_at_most_once(execs: &[TaskExecution], plans: &[HubPlan]) -> PlanReport {
    let mut sorted: Vec<&TaskExecution> = execs.iter().collect();
    sorted.sort_by_key(|e| e.at_ns);
    let mut by_task: BTreeMap<(&str, &str), Vec<&TaskExecution>> = BTreeMap::new();
    let mut by_plan: BTreeMap<&str, Vec<&TaskExecution>> = BTreeMap::new();
    for e in &sorted {
        by_task.entry((&e.plan, &e.task)).or_default().push(e);
        by_plan.entry(&e.plan).or_default().push(e);
    }
    let exec_ref = |e: &TaskExecution| ExecRef {
        agent: e.agent.clone(),
        attempt: e.attempt,
        at_ns: e.at_ns,
    };

    let mut report = PlanReport {
        executions: execs.len(),
        executed_plans: by_plan.len(),
        ..PlanReport::default()
    };
    for (&(plan, task), events) in &by_task {
        let successes: Vec<&&TaskExecution> = events
            .iter()
            .filter(|e| e.state == TaskState::Succeeded)
            .collect();
        let Some(first) = successes.first() else {
            continue;
        };
        report.succeeded_tasks += 1;
        if successes.len() > 1 {
            report.duplicates += successes.len() - 1;
            report.violations.push(PlanViolation::DuplicateSuccess {
                plan: plan.to_string(),
                task: task.to_string(),
                successes: successes.iter().map(|e| exec_ref(e)).collect(),
            });
        }
        if let Some(started) = events
            .iter()
            .find(|e| e.state == TaskState::Started && e.at_ns > first.at_ns)
        {
            report.violations.push(PlanViolation::StartedAfterSuccess {
                plan: plan.to_string(),
                task: task.to_string(),
                succeeded: exec_ref(first),
                started: exec_ref(started),
            });
        }
    }

    for p in plans {
        if !p.status.eq_ignore_ascii_case("succeeded") {
            continue;
        }
        for task in &p.tasks {
            let succeeded = by_task
                .get(&(p.id.as_str(), task.as_str()))
                .is_some_and(|ev| ev.iter().any(|e| e.state == TaskState::Succeeded));
            if !succeeded {
                report.violations.push(PlanViolation::MissingSuccess {
                    plan: p.id.clone(),
                    task: task.clone(),
                });
            }
        }
    }

    report.violations.extend(overlapping_plans(&by_plan));
    report.ok = report.violations.is_empty();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(
        agent: &str,
        plan: &str,
        entity: &str,
        task: &str,
        state: TaskState,
        at: u64,
    ) -> TaskExecution {
        TaskExecution {
            agent: agent.into(),
            plan: plan.into(),
            entity: entity.into(),
            task: task.into(),
            attempt: 1,
            state,
            at_ns: at,
        }
    }
    use TaskState::{Failed, Started, Succeeded};

    fn hub(id: &str, entity: &str, status: &str, tasks: &[&str]) -> HubPlan {
        HubPlan {
            id: id.into(),
            entity: entity.into(),
            status: status.into(),
            tasks: tasks.iter().map(|t| t.to_string()).collect(),
            issued_index: None,
            issued_ms: None,
        }
    }

    fn good_log() -> Vec<TaskExecution> {
        vec![
            ex("a", "p-1-0", "svc", "stop", Started, 10),
            ex("a", "p-1-0", "svc", "stop", Succeeded, 20),
            ex("a", "p-1-0", "svc", "start", Started, 30),
            // Retried after a failure and an agent restart.
            ex("a", "p-1-0", "svc", "start", Failed, 40),
            ex("a", "p-1-0", "svc", "start", Started, 50),
            ex("a", "p-1-0", "svc", "start", Succeeded, 60),
            ex("a", "p-2-0", "svc", "start", Started, 70),
            ex("a", "p-2-0", "svc", "start", Succeeded, 80),
            // Another entity may run at the same time.
            ex("b", "p-3-0", "db", "start", Started, 15),
            ex("b", "p-3-0", "db", "start", Succeeded, 65),
        ]
    }

    #[test]
    fn once_only_executions_pass() {
        let plans = [
            hub("p-1-0", "svc", "succeeded", &["stop", "start"]),
            hub("p-2-0", "svc", "succeeded", &["start"]),
            hub("p-4-0", "svc", "cancelled", &["start"]),
        ];
        let rep = plans_at_most_once(&good_log(), &plans);
        assert!(rep.ok, "{rep:?}");
        assert_eq!(
            (
                rep.executions,
                rep.executed_plans,
                rep.succeeded_tasks,
                rep.duplicates
            ),
            (10, 3, 4, 0)
        );
    }

    #[test]
    fn duplicate_success_and_restart_after_success_are_rejected() {
        let mut log = good_log();
        log.push(ex("a", "p-2-0", "svc", "start", Started, 90));
        log.push(ex("a", "p-2-0", "svc", "start", Succeeded, 95));
        let rep = plans_at_most_once(&log, &[]);
        assert!(!rep.ok);
        assert_eq!(rep.duplicates, 1);
        let text: Vec<String> = rep.violations.iter().map(|v| v.to_string()).collect();
        assert_eq!(
            text,
            [
                "plan p-2-0 task start succeeded 2 times (agent a attempt 1 at 80 ns, agent a attempt 1 at 95 ns)",
                "plan p-2-0 task start started again (agent a attempt 1 at 90 ns) after it succeeded (agent a attempt 1 at 80 ns)",
            ]
        );
    }

    #[test]
    fn hub_success_without_agent_success_is_rejected() {
        let plans = [hub(
            "p-1-0",
            "svc",
            "succeeded",
            &["stop", "start", "verify"],
        )];
        let rep = plans_at_most_once(&good_log(), &plans);
        assert_eq!(
            rep.violations,
            [PlanViolation::MissingSuccess {
                plan: "p-1-0".into(),
                task: "verify".into()
            }]
        );
    }

    #[test]
    fn overlapping_plans_of_one_entity_are_rejected() {
        let mut log = good_log();
        // p-5-0 starts on another agent while p-1-0 is still running.
        log.push(ex("b", "p-5-0", "svc", "start", Started, 45));
        log.push(ex("b", "p-5-0", "svc", "start", Succeeded, 47));
        let rep = plans_at_most_once(&log, &[]);
        assert_eq!(rep.violations.len(), 1, "{rep:?}");
        assert_eq!(
            rep.violations[0].to_string(),
            "entity svc: plans p-1-0 [10 ns, 60 ns] and p-5-0 [45 ns, 47 ns] overlap"
        );
    }
}

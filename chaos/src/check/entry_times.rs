//! Entry times against the true clock: the times the hub stamped on its plans, checked
//! against the runner's clock (the machine's, which no fault skews) and against each other.
//!
//! Rules, for every plan the hub records after healing:
//! - **never backwards**: in log order (the index of the entry that issued it) the issue
//!   times never decrease;
//! - **not ahead**: a plan cannot have been issued after an agent started it, so its issue
//!   time is at most the true time of its first task start plus [`ENTRY_TIME_BOUND_MS`];
//! - **not behind**: the plans of one entity run one after another, and the next is issued
//!   only once the hub learned the previous one ended, so its issue time is at least the true
//!   time of the previous plan's last task event minus the bound.
//!
//! A leader stamping its own skewed clock breaks the second rule when ahead and the first and
//! third when behind. The engine issues plans only inside their windows at the entry time, so
//! with these rules holding no plan is issued outside its window by the true clock by more
//! than the bound.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::history::{HubPlan, TaskExecution, TaskState};

/// How far a recorded issue time may be from the true time, in milliseconds. The cluster
/// time's error is half a heartbeat's round trip (milliseconds here); the agents' log times
/// are mapped to the wall clock once, at the runner's start. One second leaves room for both
/// and is far below the skews the `clock-skew` fault injects (minutes to hours).
pub const ENTRY_TIME_BOUND_MS: i64 = 1_000;

/// The result of [`entry_times_true`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryTimeReport {
    /// True without violations.
    pub ok: bool,
    /// Plans with an issue time.
    pub plans: usize,
    /// Plans checked against an agent's first start.
    pub checked_against_agents: usize,
    /// The largest amount a plan's issue time was ahead of its first start (ms; negative:
    /// always behind, as it should be).
    pub max_ahead_ms: Option<i64>,
    /// What is wrong.
    pub violations: Vec<EntryTimeViolation>,
}

/// An entry-time violation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EntryTimeViolation {
    /// A later entry has an earlier time.
    #[error("plan {later} (issued at log index {later_index}) was issued at {later_ms} ms, before plan {earlier} (index {earlier_index}) at {earlier_ms} ms")]
    Backwards {
        /// The earlier entry's plan.
        earlier: String,
        /// Its log index.
        earlier_index: u64,
        /// Its issue time.
        earlier_ms: i64,
        /// The later entry's plan.
        later: String,
        /// Its log index.
        later_index: u64,
        /// Its issue time.
        later_ms: i64,
    },
    /// Issued after an agent started it, by the true clock.
    #[error("plan {plan} was issued at {issued_ms} ms, {ahead_ms} ms after an agent started it (bound {ENTRY_TIME_BOUND_MS} ms)")]
    Ahead {
        /// The plan.
        plan: String,
        /// Its recorded issue time.
        issued_ms: i64,
        /// By how much it is later than the first start.
        ahead_ms: i64,
    },
    /// Issued before the entity's previous plan ended, by the true clock.
    #[error("plan {plan} was issued at {issued_ms} ms, {behind_ms} ms before the previous plan {previous} of its entity ended (bound {ENTRY_TIME_BOUND_MS} ms)")]
    Behind {
        /// The plan.
        plan: String,
        /// The entity's previous plan.
        previous: String,
        /// Its recorded issue time.
        issued_ms: i64,
        /// By how much it is earlier than the previous plan's end.
        behind_ms: i64,
    },
}

/// Checks the plans' recorded times; `epoch_wall_ms` is the true wall time of the runner's
/// epoch (task execution times are nanoseconds since it). Without it only the order of
/// creation times is checked.
pub fn entry_times_true(
    executions: &[TaskExecution],
    plans: &[HubPlan],
    epoch_wall_ms: Option<i64>,
) -> EntryTimeReport {
    let (executions, epoch_wall_ms) = match epoch_wall_ms {
        Some(t) => (executions, t),
        None => (&[][..], 0),
    };
    let true_ms = |at_ns: u64| epoch_wall_ms + (at_ns / 1_000_000) as i64;
    let mut first_start: BTreeMap<&str, u64> = BTreeMap::new();
    let mut last_event: BTreeMap<&str, u64> = BTreeMap::new();
    for e in executions {
        if e.state == TaskState::Started {
            let t = first_start.entry(&e.plan).or_insert(e.at_ns);
            *t = (*t).min(e.at_ns);
        }
        let t = last_event.entry(&e.plan).or_insert(e.at_ns);
        *t = (*t).max(e.at_ns);
    }
    let mut timed: Vec<(u64, &HubPlan, i64)> = plans
        .iter()
        .filter_map(|p| Some((p.issued_index?, p, p.issued_ms?)))
        .collect();
    timed.sort_by(|a, b| (a.0, &a.1.id).cmp(&(b.0, &b.1.id)));

    let mut report = EntryTimeReport {
        plans: timed.len(),
        ..EntryTimeReport::default()
    };
    let mut latest: Option<(u64, &str, i64)> = None;
    let mut previous_of_entity: BTreeMap<&str, &str> = BTreeMap::new();
    for (index, plan, issued) in &timed {
        if let Some((earlier_index, earlier, earlier_ms)) = latest {
            if *issued < earlier_ms {
                report.violations.push(EntryTimeViolation::Backwards {
                    earlier: earlier.to_string(),
                    earlier_index,
                    earlier_ms,
                    later: plan.id.clone(),
                    later_index: *index,
                    later_ms: *issued,
                });
            }
        }
        if latest.is_none_or(|(_, _, t)| *issued >= t) {
            latest = Some((*index, &plan.id, *issued));
        }
        if let Some(start) = first_start.get(plan.id.as_str()) {
            report.checked_against_agents += 1;
            let ahead = issued - true_ms(*start);
            report.max_ahead_ms = Some(report.max_ahead_ms.map_or(ahead, |m| m.max(ahead)));
            if ahead > ENTRY_TIME_BOUND_MS {
                report.violations.push(EntryTimeViolation::Ahead {
                    plan: plan.id.clone(),
                    issued_ms: *issued,
                    ahead_ms: ahead,
                });
            }
        }
        if let Some(previous) = previous_of_entity.insert(&plan.entity, &plan.id) {
            if let Some(end) = last_event.get(previous) {
                let behind = true_ms(*end) - issued;
                if behind > ENTRY_TIME_BOUND_MS {
                    report.violations.push(EntryTimeViolation::Behind {
                        plan: plan.id.clone(),
                        previous: previous.to_string(),
                        issued_ms: *issued,
                        behind_ms: behind,
                    });
                }
            }
        }
    }
    report.ok = report.violations.is_empty();
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskState::{Started, Succeeded};

    const EPOCH: i64 = 1_800_000_000_000;
    const MS: u64 = 1_000_000;

    fn ex(plan: &str, state: TaskState, at_ms: u64) -> TaskExecution {
        TaskExecution {
            agent: "a".into(),
            plan: plan.into(),
            entity: "svc".into(),
            task: "start".into(),
            attempt: 1,
            state,
            at_ns: at_ms * MS,
        }
    }

    fn plan(id: &str, issued_at: i64) -> HubPlan {
        HubPlan {
            id: id.into(),
            entity: "svc".into(),
            status: "succeeded".into(),
            tasks: vec!["start".into()],
            issued_ms: Some(EPOCH + issued_at),
            issued_index: id.split('-').nth(1).and_then(|i| i.parse().ok()),
        }
    }

    fn log() -> Vec<TaskExecution> {
        vec![
            ex("p-10-0", Started, 1_020),
            ex("p-10-0", Succeeded, 1_100),
            ex("p-20-0", Started, 2_050),
            ex("p-20-0", Succeeded, 2_200),
        ]
    }

    #[test]
    fn true_times_pass() {
        let plans = [plan("p-10-0", 1_000), plan("p-20-0", 2_000)];
        let r = entry_times_true(&log(), &plans, Some(EPOCH));
        assert!(r.ok, "{r:?}");
        assert_eq!((r.plans, r.checked_against_agents), (2, 2));
        assert_eq!(r.max_ahead_ms, Some(-20));
    }

    #[test]
    fn a_plan_stamped_an_hour_ahead_is_rejected() {
        let plans = [plan("p-10-0", 1_000), plan("p-20-0", 2_000 + 3_600_000)];
        let r = entry_times_true(&log(), &plans, Some(EPOCH));
        assert!(!r.ok);
        let text: Vec<String> = r.violations.iter().map(|v| v.to_string()).collect();
        assert_eq!(text.len(), 1, "{text:?}");
        assert!(
            text[0].starts_with("plan p-20-0 was issued at")
                && text[0].contains("3599950 ms after an agent started it"),
            "{}",
            text[0]
        );
    }

    #[test]
    fn a_plan_stamped_an_hour_behind_is_rejected_twice() {
        let plans = [plan("p-10-0", 1_000), plan("p-20-0", 2_000 - 3_600_000)];
        let r = entry_times_true(&log(), &plans, Some(EPOCH));
        let kinds: Vec<&str> = r
            .violations
            .iter()
            .map(|v| match v {
                EntryTimeViolation::Backwards { .. } => "backwards",
                EntryTimeViolation::Ahead { .. } => "ahead",
                EntryTimeViolation::Behind { .. } => "behind",
            })
            .collect();
        assert_eq!(kinds, ["backwards", "behind"], "{:?}", r.violations);
    }

    #[test]
    fn plans_without_a_time_or_an_index_are_skipped() {
        let mut p = plan("p-10-0", 1_000);
        p.issued_ms = None;
        let r = entry_times_true(&log(), &[p, plan("cmd-x", 5)], Some(EPOCH));
        assert!(r.ok && r.plans == 0, "{r:?}");
    }
}

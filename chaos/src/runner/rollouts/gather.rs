//! Pure conversions from what the agents wrote and the hub answered to the checkers' history
//! parts: task executions on the runner's clock, hub plans, canary weights and rollout states.

use std::collections::{BTreeMap, BTreeSet};

use hub_agent::execlog::{ExecLine, ExecState};
use serde_json::Value;

use crate::check::{HubPlan, Rollout, TaskExecution, TaskState};

/// The agent's log lines as task executions of `agent`, with `at_ns` moved from
/// `CLOCK_MONOTONIC` to the runner's epoch (`epoch_monotonic_ns` is the epoch's
/// `CLOCK_MONOTONIC` value; an event before it counts as at 0).
pub fn task_executions(
    agent: &str,
    lines: &[ExecLine],
    epoch_monotonic_ns: u64,
) -> Vec<TaskExecution> {
    lines
        .iter()
        .map(|l| TaskExecution {
            agent: agent.to_string(),
            plan: l.plan.clone(),
            entity: l.entity.clone(),
            task: l.task.clone(),
            attempt: l.attempt,
            state: match l.state {
                ExecState::Started => TaskState::Started,
                ExecState::Succeeded => TaskState::Succeeded,
                ExecState::Failed => TaskState::Failed,
            },
            at_ns: l.at_ns.saturating_sub(epoch_monotonic_ns),
        })
        .collect()
}

/// `(step, canary weight)` of every line of a canary's `applied.jsonl`, in file order
/// (torn or foreign lines are skipped; weights above 100 are clamped, which the checker
/// then reports as a mismatch).
pub fn applied_weights(text: &str) -> Vec<(u64, u8)> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| {
            let step = v["step"].as_u64()?;
            let w = v["canary_weight"].as_u64()?;
            Some((step, u8::try_from(w.min(255)).unwrap_or(u8::MAX)))
        })
        .collect()
}

/// Merges the `committed_weights` of a canary view into `into` (step → weight). The view
/// holds the newest actions only; a step's weight never changes once committed, so the union
/// of views taken over the run is the committed sequence of all of it.
pub fn merge_committed(view: &Value, into: &mut BTreeMap<u64, u8>) {
    let Some(list) = view["committed_weights"].as_array() else {
        return;
    };
    for w in list {
        if let (Some(step), Some(weight)) = (w["step"].as_u64(), w["canary_weight"].as_u64()) {
            into.insert(step, u8::try_from(weight.min(255)).unwrap_or(u8::MAX));
        }
    }
}

/// A plan's full view (`{"query": "plan"}`) as the checker's [`HubPlan`].
pub fn hub_plan(view: &Value) -> Option<HubPlan> {
    Some(HubPlan {
        id: view["id"].as_str()?.to_string(),
        entity: view["entity"].as_str()?.to_string(),
        status: view["status"].as_str()?.to_string(),
        tasks: view["tasks"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default(),
        issued_ms: view["issued_ms"].as_i64(),
        issued_index: view["issued_index"].as_u64(),
    })
}

/// One plan of the plan list, as far as rollouts need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRow {
    /// The plan id.
    pub id: String,
    /// The entity id.
    pub entity: String,
    /// `issued`, `running`, `succeeded`, `failed` or `cancelled`.
    pub status: String,
    /// The target version (`None`: none, e.g. a command).
    pub to_version: Option<String>,
}

impl PlanRow {
    /// Whether the plan is still issued or running.
    pub fn active(&self) -> bool {
        self.status == "issued" || self.status == "running"
    }
}

/// The rows of a `{"query": "plans"}` answer.
pub fn plan_rows(answer: &Value) -> Vec<PlanRow> {
    answer["plans"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| {
                    Some(PlanRow {
                        id: p["id"].as_str()?.to_string(),
                        entity: p["entity"].as_str()?.to_string(),
                        status: p["status"].as_str()?.to_string(),
                        to_version: p["to_version"]
                            .as_str()
                            .filter(|v| *v != "-")
                            .map(String::from),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What the hub records as an entity's reported state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reported {
    /// The deployed version (`None`: not installed).
    pub version: Option<String>,
    /// Whether its health is `error`.
    pub error: bool,
}

impl Reported {
    /// From an `{"query": "entity"}` answer.
    pub fn from_view(v: &Value) -> Reported {
        Reported {
            version: v["reported"]["version"]
                .as_str()
                .filter(|v| *v != "-")
                .map(String::from),
            error: v["reported"]["health"] == "error",
        }
    }
}

/// The rollout of release `version` in environment `env` to `entities` (id → what the hub
/// records as reported), judged from the environment's plans: not terminal while a plan to it
/// is issued or running, or — for the `newest` release — while an entity has neither reached
/// it nor finished a plan to it. Older releases without plans were superseded before any
/// entity got to them. An entity reported in error gets no ordinary plan any more (SPEC C10:
/// after a failed upgrade whose rollback failed too, it waits for an operator): the newest
/// release is settled for it as `blocked`.
pub fn release_rollout(
    env: &str,
    version: &str,
    newest: bool,
    entities: &BTreeMap<String, Reported>,
    plans: &[PlanRow],
) -> Rollout {
    let id = format!("{env}@{version}");
    let to_it: Vec<&PlanRow> = plans
        .iter()
        .filter(|p| entities.contains_key(&p.entity) && p.to_version.as_deref() == Some(version))
        .collect();
    let active = to_it.iter().filter(|p| p.active()).count();
    if active > 0 {
        return Rollout {
            id,
            kind: "release".into(),
            state: format!("rolling out ({active} plans active)"),
            terminal: false,
        };
    }
    let mut blocked: Vec<&str> = Vec::new();
    if newest {
        let waiting = entities.iter().filter(|(e, reported)| {
            reported.version.as_deref() != Some(version) && !to_it.iter().any(|p| &p.entity == *e)
        });
        let (errored, pending): (Vec<_>, Vec<_>) = waiting.partition(|(e, reported)| {
            reported.error && !plans.iter().any(|p| p.active() && &p.entity == *e)
        });
        blocked = errored.into_iter().map(|(e, _)| e.as_str()).collect();
        let pending: Vec<&str> = pending.into_iter().map(|(e, _)| e.as_str()).collect();
        if !pending.is_empty() {
            return Rollout {
                id,
                kind: "release".into(),
                state: format!("pending on {}", pending.join(", ")),
                terminal: false,
            };
        }
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for p in &to_it {
        *counts.entry(p.status.as_str()).or_default() += 1;
    }
    let mut state = if counts.is_empty() {
        if newest {
            "reached".to_string()
        } else {
            "superseded".to_string()
        }
    } else {
        counts
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !blocked.is_empty() {
        state.push_str(&format!(
            "; blocked on {} (reported error)",
            blocked.join(", ")
        ));
    }
    Rollout {
        id,
        kind: "release".into(),
        state,
        terminal: true,
    }
}

/// The rollout of a module change request (`{"query": "change_requests"}` row): terminal once
/// decided (merged, rejected, cancelled, error) and, for a merged one marked `latest`, once no
/// plan of `module_entities` is active any more.
pub fn module_rollout(
    cr: &Value,
    latest: bool,
    module_entities: &BTreeSet<String>,
    plans: &[PlanRow],
) -> Option<Rollout> {
    let id = cr["id"].as_str()?;
    let installation = cr["installation"].as_str().unwrap_or_default();
    let status = cr["status"].as_str().unwrap_or("unknown").to_string();
    let to = cr["to_version"].as_str().unwrap_or_default();
    let active = plans
        .iter()
        .filter(|p| p.active() && module_entities.contains(&p.entity))
        .count();
    let (state, terminal) = match status.as_str() {
        "pending-approval" => (status, false),
        "merged" if latest && active > 0 => (format!("merged ({active} plans active)"), false),
        _ => (status, true),
    };
    Some(Rollout {
        id: format!("{installation}#{id}->{to}"),
        kind: "module".into(),
        state,
        terminal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn execution_lines_move_to_the_runner_epoch() {
        let line = |state, at_ns| ExecLine {
            plan: "p-3-0".into(),
            entity: "eid:e:helmChart:a".into(),
            task: "start".into(),
            attempt: 2,
            state,
            at_ns,
        };
        let lines = vec![
            line(ExecState::Started, 5_000),
            line(ExecState::Succeeded, 7_500),
            line(ExecState::Failed, 900),
        ];
        let execs = task_executions("sim-0", &lines, 1_000);
        assert_eq!(
            execs.iter().map(|e| (e.state, e.at_ns)).collect::<Vec<_>>(),
            vec![
                (TaskState::Started, 4_000),
                (TaskState::Succeeded, 6_500),
                (TaskState::Failed, 0)
            ]
        );
        assert_eq!((execs[0].agent.as_str(), execs[0].attempt), ("sim-0", 2));
        // What the agent writes parses back into what the checker reads.
        let text = serde_json::to_string(&lines[1]).unwrap();
        let back: ExecLine = serde_json::from_str(&text).unwrap();
        assert_eq!(
            task_executions("a", &[back], 0)[0].state,
            TaskState::Succeeded
        );
    }

    #[test]
    fn applied_and_committed_weights_parse() {
        let applied = "{\"step\":1,\"phase\":\"Initialized\",\"canary_weight\":0}\n\
                       {\"step\":3,\"phase\":\"Progressing\",\"canary_weight\":10}\n\
                       {\"step\":4,\"phase\":\"Progr";
        assert_eq!(applied_weights(applied), vec![(1, 0), (3, 10)]);

        let mut committed = BTreeMap::new();
        merge_committed(
            &json!({"committed_weights": [{"step": 1, "canary_weight": 0}, {"step": 3, "canary_weight": 10}]}),
            &mut committed,
        );
        // A later view has dropped the oldest step and added one.
        merge_committed(
            &json!({"committed_weights": [{"step": 3, "canary_weight": 10}, {"step": 4, "canary_weight": 20}]}),
            &mut committed,
        );
        merge_committed(&json!({"status": "Progressing"}), &mut committed);
        assert_eq!(
            committed.into_iter().collect::<Vec<_>>(),
            vec![(1, 0), (3, 10), (4, 20)]
        );
    }

    #[test]
    fn plans_parse_from_the_hub_views() {
        let full = json!({"id": "p-9-0", "entity": "eid:e:helmChart:a", "status": "succeeded",
            "tasks": [{"name": "fetch", "state": "succeeded"}, {"name": "start", "state": "succeeded"}]});
        assert_eq!(
            hub_plan(&full),
            Some(HubPlan {
                id: "p-9-0".into(),
                entity: "eid:e:helmChart:a".into(),
                status: "succeeded".into(),
                tasks: vec!["fetch".into(), "start".into()],
                issued_ms: None,
                issued_index: None,
            })
        );
        assert_eq!(hub_plan(&json!({"id": "p-1"})), None);
        let rows = plan_rows(&json!({"plans": [
            {"id": "p-1", "entity": "a", "status": "running", "to_version": "1.0.1"},
            {"id": "p-2", "entity": "a", "status": "succeeded", "to_version": "-"},
        ]}));
        assert!(rows[0].active() && !rows[1].active());
        assert_eq!(rows[1].to_version, None);
    }

    fn row(id: &str, entity: &str, status: &str, to: &str) -> PlanRow {
        PlanRow {
            id: id.into(),
            entity: entity.into(),
            status: status.into(),
            to_version: Some(to.into()),
        }
    }

    #[test]
    fn release_rollouts_are_terminal_only_when_settled() {
        let at = |v: &str| Reported {
            version: Some(v.to_string()),
            error: false,
        };
        let mut entities = BTreeMap::new();
        entities.insert("a".to_string(), at("1.0.1"));
        entities.insert("b".to_string(), at("1.0.0"));
        let plans = vec![
            row("p-1", "a", "succeeded", "1.0.1"),
            row("p-2", "b", "running", "1.0.1"),
            row("p-3", "x", "running", "1.0.0"),
        ];
        let r = release_rollout("env", "1.0.1", true, &entities, &plans);
        assert!(!r.terminal && r.state.contains("1 plans active"), "{r:?}");
        // b's plan failed: the release is settled (failed on b).
        let plans = vec![
            row("p-1", "a", "succeeded", "1.0.1"),
            row("p-2", "b", "failed", "1.0.1"),
        ];
        let r = release_rollout("env", "1.0.1", true, &entities, &plans);
        assert!(r.terminal, "{r:?}");
        assert_eq!(r.state, "failed 1, succeeded 1");
        assert_eq!(r.id, "env@1.0.1");
        // The newest release with no plan to b and b elsewhere: pending.
        let r = release_rollout("env", "1.0.1", true, &entities, &plans[..1]);
        assert!(!r.terminal && r.state == "pending on b", "{r:?}");
        // b in error after a failed rollback: no plan will come (SPEC C10); blocked, settled.
        // While a plan of b (the rollback) still runs, it is not.
        entities.get_mut("b").unwrap().error = true;
        let r = release_rollout("env", "1.0.1", true, &entities, &plans[..1]);
        assert!(r.terminal, "{r:?}");
        assert_eq!(r.state, "succeeded 1; blocked on b (reported error)");
        let rolling_back = vec![plans[0].clone(), row("p-4", "b", "running", "1.0.0")];
        let r = release_rollout("env", "1.0.1", true, &entities, &rolling_back);
        assert!(!r.terminal && r.state == "pending on b", "{r:?}");
        assert_eq!(
            Reported::from_view(&json!({"reported": {"version": "-", "health": "error"}})),
            Reported {
                version: None,
                error: true
            }
        );
        // An older release nobody got to: superseded, terminal.
        let r = release_rollout("env", "1.0.0", false, &entities, &[]);
        assert!(r.terminal && r.state == "superseded", "{r:?}");
    }

    #[test]
    fn module_rollouts_wait_for_approval_and_plans() {
        let mods: BTreeSet<String> = ["m".to_string()].into();
        let cr = |status: &str| json!({"id": "cr-4", "installation": "env/mod", "status": status, "to_version": "0.3.0"});
        let busy = vec![row("p-1", "m", "running", "1.0.0")];
        let r = module_rollout(&cr("pending-approval"), true, &mods, &[]).unwrap();
        assert!(!r.terminal);
        assert_eq!(r.id, "env/mod#cr-4->0.3.0");
        assert!(
            !module_rollout(&cr("merged"), true, &mods, &busy)
                .unwrap()
                .terminal
        );
        assert!(
            module_rollout(&cr("merged"), false, &mods, &busy)
                .unwrap()
                .terminal
        );
        assert!(
            module_rollout(&cr("cancelled"), true, &mods, &busy)
                .unwrap()
                .terminal
        );
    }
}

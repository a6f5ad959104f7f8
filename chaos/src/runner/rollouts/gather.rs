//! Pure conversions from what the agents wrote and the hub answered to the checkers' history
//! parts: task executions on the runner's clock, hub plans, canary weights and rollout states.

use std::collections::{BTreeMap, BTreeSet};

use hub_agent::execlog::{ExecLine, ExecState};
use hub_client::answer::{CanaryView, ChangeRequestView, EntityView, PlanView, PlansAnswer};
use serde::Deserialize;

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
        .filter_map(|l| serde_json::from_str::<AppliedLine>(l).ok())
        .map(|a| {
            let w = a.canary_weight;
            (a.step, u8::try_from(w.min(255)).unwrap_or(u8::MAX))
        })
        .collect()
}

/// The fields of a line of a canary's `applied.jsonl` that the checker reads (the agent's
/// own file; its other fields are ignored).
#[derive(Deserialize)]
struct AppliedLine {
    /// The step the agent applied.
    step: u64,
    /// The canary weight it applied.
    canary_weight: u64,
}

/// Merges the `committed_weights` of a canary view into `into` (step → weight). The view
/// holds the newest actions only; a step's weight never changes once committed, so the union
/// of views taken over the run is the committed sequence of all of it.
pub fn merge_committed(view: &CanaryView, into: &mut BTreeMap<u64, u8>) {
    for w in view.committed_weights.iter().flatten() {
        into.insert(w.step, w.canary_weight);
    }
}

/// A plan's full view (the answer to `GetPlan`) as the checker's [`HubPlan`].
pub fn hub_plan(view: &PlanView) -> HubPlan {
    HubPlan {
        id: view.id.clone(),
        entity: view.entity.clone(),
        status: view.status.clone(),
        tasks: view
            .tasks
            .iter()
            .flatten()
            .map(|t| t.name.clone())
            .collect(),
        issued_ms: Some(view.issued_ms),
        issued_index: Some(view.issued_index),
    }
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

/// The rows of a `ListPlans` answer.
pub fn plan_rows(answer: &PlansAnswer) -> Vec<PlanRow> {
    answer
        .plans
        .iter()
        .map(|p| PlanRow {
            id: p.id.clone(),
            entity: p.entity.clone(),
            status: p.status.clone(),
            to_version: p.to_version.clone().filter(|v| v != "-"),
        })
        .collect()
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
    /// From a `GetEntity` answer.
    pub fn from_view(v: &EntityView) -> Reported {
        Reported {
            version: v.reported.version.clone().filter(|v| v != "-"),
            error: v.reported.health == "error",
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

/// The rollout of a module change request (a `ListChangeRequests` row): terminal once
/// decided (merged, rejected, cancelled, error) and, for a merged one marked `latest`, once no
/// plan of `module_entities` is active any more.
pub fn module_rollout(
    cr: &ChangeRequestView,
    latest: bool,
    module_entities: &BTreeSet<String>,
    plans: &[PlanRow],
) -> Rollout {
    let id = &cr.id;
    let installation = &cr.installation;
    let status = cr.status.clone();
    let to = &cr.to_version;
    let active = plans
        .iter()
        .filter(|p| p.active() && module_entities.contains(&p.entity))
        .count();
    let (state, terminal) = match status.as_str() {
        "pending-approval" => (status, false),
        "merged" if latest && active > 0 => (format!("merged ({active} plans active)"), false),
        _ => (status, true),
    };
    Rollout {
        id: format!("{installation}#{id}->{to}"),
        kind: "module".into(),
        state,
        terminal,
    }
}

/// Hub answers built for tests: only the fields the conversions read carry meaning.
#[cfg(test)]
pub(crate) mod views {
    use hub_client::answer::{
        CanaryView, ChangeRequestView, CommittedWeightView, EntityView, PlanView, PlansAnswer,
        ReportedView, TaskView,
    };

    /// A plan row (no tasks) or, with `tasks`, a plan's full view.
    pub fn plan(id: &str, entity: &str, status: &str, to_version: Option<&str>) -> PlanView {
        PlanView {
            actor: None,
            artifacts: None,
            cancel_reason: None,
            command: None,
            created: "2026-12-07T00:00:00Z".into(),
            ended: None,
            entity: entity.into(),
            environment: "env".into(),
            failure: None,
            from_config_sha256: None,
            from_version: None,
            id: id.into(),
            issued: "2026-12-07T00:00:00Z".into(),
            issued_index: 0,
            issued_ms: 0,
            kind: "version-change".into(),
            output: None,
            reason: String::new(),
            rolls_back: None,
            secrets_revision: None,
            started: None,
            status: status.into(),
            tasks: None,
            to_config: None,
            to_version: to_version.map(String::from),
        }
    }

    /// The plan with tasks named `names`.
    pub fn with_tasks(mut p: PlanView, names: &[&str]) -> PlanView {
        p.tasks = Some(
            names
                .iter()
                .map(|n| TaskView {
                    attempt: 1,
                    ended: None,
                    error: None,
                    name: n.to_string(),
                    started: None,
                    state: "succeeded".into(),
                })
                .collect(),
        );
        p
    }

    /// A `plans` answer.
    pub fn plans(plans: Vec<PlanView>) -> PlansAnswer {
        PlansAnswer { plans }
    }

    /// An entity reporting `version` with `health`.
    pub fn entity(version: Option<&str>, health: &str) -> EntityView {
        EntityView {
            account_id: None,
            config_overrides: Default::default(),
            dependency_groups: Vec::new(),
            environment: "env".into(),
            id: "eid:env:helmChart:a".into(),
            ignored_dependencies: Vec::new(),
            insecure_registries: Vec::new(),
            k8s_namespace: None,
            kind: "helmChart".into(),
            maintenance_window: None,
            marked_for_uninstall: false,
            name: "a".into(),
            owner_module: None,
            product_id: "com.example:a".into(),
            release_channel: "stable".into(),
            reported: ReportedView {
                at: None,
                config_sha256: None,
                health: health.into(),
                message: String::new(),
                secrets_revision: 0,
                version: version.map(String::from),
            },
            secrets: Vec::new(),
            secrets_revision: 0,
            window_overrides: Vec::new(),
        }
    }

    /// A change request.
    pub fn change_request(
        id: &str,
        installation: &str,
        status: &str,
        to: &str,
    ) -> ChangeRequestView {
        ChangeRequestView {
            approval: None,
            blocked: None,
            closed: None,
            created: "2026-12-07T00:00:00Z".into(),
            decided_by: None,
            from_version: "0.1.0".into(),
            id: id.into(),
            installation: installation.into(),
            message: String::new(),
            reason: String::new(),
            status: status.into(),
            to_version: to.into(),
        }
    }

    /// A canary in `status`, with `committed` weights (`None`: a listing row, without them).
    pub fn canary(status: &str, committed: Option<&[(u64, u8)]>) -> CanaryView {
        CanaryView {
            addresses: None,
            actions: None,
            canary_revision: None,
            committed_weights: committed.map(|c| {
                c.iter()
                    .map(|&(step, canary_weight)| CommittedWeightView {
                        canary_weight,
                        step,
                    })
                    .collect()
            }),
            entity: "eid:env:helmChart:a".into(),
            history: None,
            id: "env/a".into(),
            last_transition: "2026-12-07T00:00:00Z".into(),
            name: "a".into(),
            namespace: "env".into(),
            next_tick: None,
            observation: None,
            primary_revision: None,
            promoted: false,
            queued_steps: None,
            status: status.into(),
            status_block: None,
            step: None,
            target: None,
            weight: 0,
            yaml: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            &views::canary("Progressing", Some(&[(1, 0), (3, 10)])),
            &mut committed,
        );
        // A later view has dropped the oldest step and added one.
        merge_committed(
            &views::canary("Progressing", Some(&[(3, 10), (4, 20)])),
            &mut committed,
        );
        merge_committed(&views::canary("Progressing", None), &mut committed);
        assert_eq!(
            committed.into_iter().collect::<Vec<_>>(),
            vec![(1, 0), (3, 10), (4, 20)]
        );
    }

    #[test]
    fn plans_parse_from_the_hub_views() {
        let mut full = views::with_tasks(
            views::plan("p-9-0", "eid:e:helmChart:a", "succeeded", None),
            &["fetch", "start"],
        );
        (full.issued_ms, full.issued_index) = (1_700, 9);
        assert_eq!(
            hub_plan(&full),
            HubPlan {
                id: "p-9-0".into(),
                entity: "eid:e:helmChart:a".into(),
                status: "succeeded".into(),
                tasks: vec!["fetch".into(), "start".into()],
                issued_ms: Some(1_700),
                issued_index: Some(9),
            }
        );
        // A view without the plan's id, entity or status is no plan view at all.
        assert!(serde_json::from_str::<PlanView>(r#"{"id": "p-1"}"#).is_err());
        let rows = plan_rows(&views::plans(vec![
            views::plan("p-1", "a", "running", Some("1.0.1")),
            views::plan("p-2", "a", "succeeded", Some("-")),
        ]));
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
            Reported::from_view(&views::entity(Some("-"), "error")),
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
        let cr = |status: &str| views::change_request("cr-4", "env/mod", status, "0.3.0");
        let busy = vec![row("p-1", "m", "running", "1.0.0")];
        let r = module_rollout(&cr("pending-approval"), true, &mods, &[]);
        assert!(!r.terminal);
        assert_eq!(r.id, "env/mod#cr-4->0.3.0");
        assert!(!module_rollout(&cr("merged"), true, &mods, &busy).terminal);
        assert!(module_rollout(&cr("merged"), false, &mods, &busy).terminal);
        assert!(module_rollout(&cr("cancelled"), true, &mods, &busy).terminal);
    }
}

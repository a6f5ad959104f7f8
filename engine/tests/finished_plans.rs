//! Finished plans leave the state (issue 18): the state keeps each one's outcome, the plan
//! itself is history, and an entity keeps the newest `FINISHED_PLANS_KEPT` of both. Every
//! apply also checks that history and outcomes agree (see `common::Hub::apply`).

mod common;

use common::*;
use hub_engine::command::CancelTarget;
use hub_engine::plan::{PlanKind, PlanStatus, TaskReport, TaskState, FINISHED_PLANS_KEPT};
use hub_engine::plan_outcome::{OutcomeKind, PlanOutcome};
use hub_engine::{Command, CommandError, CommandOutput, Record, RecordKey, State};

const WEB: &str = "com.example:web";

/// An entity taken through `n` releases, each plan issued and succeeded. Returns the
/// entity and its plans' ids, oldest first.
fn entity_through_releases(hub: &mut Hub, n: usize) -> (String, Vec<String>) {
    hub.env("prod");
    hub.product(WEB);
    let w = hub.helm("prod", "web", WEB);
    let mut ids = Vec::new();
    for i in 0..n {
        hub.publish(WEB, &format!("1.{i}.0"), &[]);
        ids.push(hub.converge(&w).id);
    }
    (w, ids)
}

fn report(plan_id: &str, task: &str) -> Command {
    Command::ReportTask {
        environment: "prod".into(),
        report: TaskReport {
            plan_id: plan_id.into(),
            task: task.into(),
            attempt: 1,
            state: TaskState::Succeeded,
            output: "late\n".into(),
            failure: None,
        },
    }
}

#[test]
fn finished_plans_leave_the_state_and_the_newest_are_kept_as_history() {
    let mut hub = Hub::new();
    let n = FINISHED_PLANS_KEPT + 5;
    let (w, ids) = entity_through_releases(&mut hub, n);
    assert_eq!(hub.state.plans().count(), 0, "no plan is active");
    let kept: Vec<&str> = hub.state.outcomes_of(&w).map(|o| o.id.as_str()).collect();
    let newest: Vec<&str> = ids[n - FINISHED_PLANS_KEPT..]
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(kept, newest, "the newest outcomes, oldest first");
    for forgotten in &ids[..n - FINISHED_PLANS_KEPT] {
        assert!(hub.state.plan_outcome(forgotten).is_none());
        assert!(
            hub.finished_plan(forgotten).is_none(),
            "{forgotten} in history"
        );
        assert!(hub.state.plan_entity(forgotten).is_none());
    }
    // The kept plans are whole in history: tasks, output and all.
    let last = hub.finished_plan(&ids[n - 1]).expect("the newest plan");
    assert_eq!(last.status, PlanStatus::Succeeded);
    assert_eq!(last.tasks.len(), PlanKind::VersionChange.task_names().len());
    assert!(last.tasks.iter().all(|t| t.state == TaskState::Succeeded));
    let outcome = hub.state.plan_outcome(&last.id).expect("its outcome");
    assert_eq!(*outcome, PlanOutcome::of(&last));
    assert_eq!(outcome.kind, OutcomeKind::VersionChange);
    assert_eq!(hub.state.plan_entity(&last.id), Some(w.as_str()));
    // The metrics' counts still count the kept finished plans.
    let counts: Vec<_> = hub.state.plan_counts().collect();
    assert_eq!(
        counts,
        [(("version-change", "succeeded"), FINISHED_PLANS_KEPT as u64)]
    );
}

#[test]
fn a_late_report_of_a_finished_plan_is_ignored_and_of_a_forgotten_one_is_not_found() {
    let mut hub = Hub::new();
    let n = FINISHED_PLANS_KEPT + 1;
    let (_, ids) = entity_through_releases(&mut hub, n);
    let kept = &ids[n - 1];
    let before = hub.finished_plan(kept).expect("kept");
    match hub.ok(report(kept, "start")) {
        CommandOutput::Changed { summary, .. } => {
            assert_eq!(summary, "report ignored: plan is succeeded")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(hub.finished_plan(kept), Some(before), "history unchanged");
    // Checked like any report first: a bad attempt is refused, not ignored.
    let mut bad = report(kept, "start");
    if let Command::ReportTask { report, .. } = &mut bad {
        report.attempt = 0;
    }
    assert!(matches!(hub.err(bad), CommandError::InvalidField { .. }));
    // From another environment, it is not that environment's plan.
    let mut elsewhere = report(kept, "start");
    if let Command::ReportTask { environment, .. } = &mut elsewhere {
        *environment = "staging".into();
    }
    assert!(matches!(hub.err(elsewhere), CommandError::NotFound { .. }));
    // Forgotten: not found.
    assert!(matches!(
        hub.err(report(&ids[0], "start")),
        CommandError::NotFound { .. }
    ));
}

#[test]
fn a_finished_plan_cannot_be_cancelled_and_a_forgotten_one_is_not_found() {
    let mut hub = Hub::new();
    let n = FINISHED_PLANS_KEPT + 1;
    let (_, ids) = entity_through_releases(&mut hub, n);
    let cancel = |id: &str| Command::CancelPlans {
        target: CancelTarget::Plan(id.into()),
        reason: "stop".into(),
        suppress_for_ms: None,
        actor: "alice".into(),
    };
    let e = hub.err(cancel(&ids[n - 1]));
    assert!(
        matches!(&e, CommandError::FailedPrecondition(m) if m.contains("is succeeded and cannot be cancelled")),
        "{e}"
    );
    assert!(matches!(
        hub.err(cancel(&ids[0])),
        CommandError::NotFound { .. }
    ));
}

#[test]
fn a_finished_plan_stored_as_a_row_migrates_to_its_outcome_and_history() {
    let mut hub = Hub::new();
    let (w, ids) = entity_through_releases(&mut hub, 3);
    let plans: Vec<_> = ids
        .iter()
        .map(|id| hub.finished_plan(id).unwrap())
        .collect();
    // As an older release stored them: finished plans as rows of the state.
    let legacy: Vec<Record> = hub
        .stored_records()
        .filter(|r| !matches!(r, Record::PlanOutcome(_) | Record::FinishedPlan(_)))
        .cloned()
        .chain(plans.iter().cloned().map(Record::Plan))
        .collect();
    let old = Record::Plan(plans[0].clone());
    assert!(old.is_legacy());
    assert_eq!(
        old.clone().migrated(),
        [
            Record::PlanOutcome(PlanOutcome::of(&plans[0])),
            Record::FinishedPlan(plans[0].clone()),
        ]
    );
    let migrated = State::from_records(legacy);
    assert!(migrated == hub.state, "loads as the state that wrote them");
    assert_eq!(migrated.outcomes_of(&w).count(), 3);
    // An active plan is a row of this release's format.
    hub.publish(WEB, "2.0.0", &[]);
    let active = hub.step_one(&w).expect("a plan");
    assert!(!Record::Plan(active.clone()).is_legacy());
    assert_eq!(
        Record::Plan(active.clone()).migrated(),
        [Record::Plan(active)]
    );
    assert_eq!(
        RecordKey::FinishedPlan(ids[0].clone()).residence(),
        hub_engine::Residence::History
    );
    assert!(matches!(
        plans[0].kind,
        PlanKind::Install | PlanKind::VersionChange
    ));
}

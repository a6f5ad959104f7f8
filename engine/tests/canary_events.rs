//! A canary's events (issue 52 item 5) through `State::apply`: every tick's outcome is kept
//! per canary in Flagger's wording and event types, the newest 100, in the same entry as the
//! tick; no credential of a webhook URL reaches an event; deleting the canary deletes its
//! events. Every apply runs the harness checks (determinism, persisted changes rebuild the
//! state).

mod common;

use common::*;
use hub_engine::canary::{
    plan_tick, CanaryEvent, EventKind, EventReason, Phase, TickInput, WebhookResult,
};
use hub_engine::canary_events::CANARY_EVENTS_KEPT;
use hub_engine::{Command, Record, RecordKey};

const ID: &str = "prod/podinfo";

/// The podinfo fixture (success rate ≥ 99 %, duration ≤ 500 ms, a load-test rollout
/// webhook) with 1 s intervals and `threshold` failed checks, plus `webhooks` (YAML list
/// items, indented for `analysis.webhooks`).
fn podinfo(threshold: u32, webhooks: &str) -> String {
    let path = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("tests/fixtures/canary/valid/podinfo.yml");
    let yaml = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
    let yaml = yaml
        .replace(
            "interval: 1m\n    threshold: 10",
            "interval: 1s\n    threshold: 10",
        )
        .replace("        interval: 1m\n", "        interval: 1s\n")
        .replace("threshold: 10", &format!("threshold: {threshold}"))
        .replace("    webhooks:\n", &format!("    webhooks:\n{webhooks}"));
    assert!(yaml.contains("interval: 1s"), "{yaml}");
    yaml
}

/// A hub with environment `prod`, the `podinfo` helm entity and canary `yaml` applied.
fn setup(yaml: &str) -> Hub {
    let mut hub = Hub::new();
    hub.env("prod");
    hub.helm("prod", "podinfo", "com.example:podinfo");
    hub.ok(Command::ApplyCanary {
        environment: Some("prod".into()),
        yaml: yaml.into(),
    });
    hub
}

/// One due tick of the canary at revision `r1` while it initialises, `r2` after: every
/// webhook answers 200 and the metrics are in range, then `script` changes what it likes.
/// Returns the keys the tick's entry changed.
fn tick(hub: &mut Hub, script: impl FnOnce(&mut TickInput)) -> Vec<RecordKey> {
    let c = hub.state.canary(ID).expect("canary").clone();
    if let Some(at) = c.status.next_tick_ms {
        hub.set_time(at.max(hub.now));
    }
    let revision = if c.status.phase == Phase::Initializing {
        "r1"
    } else {
        "r2"
    };
    let plan = plan_tick(&c.spec, &c.status, revision, hub.now);
    assert!(plan.due, "{:?}", c.status);
    let mut input = healthy_tick_input(&c, &plan, revision);
    for m in &plan.metrics {
        let value = if m.name == "request-duration" {
            100_000
        } else {
            99_500
        };
        input.metrics.insert(m.name.clone(), Some(value));
    }
    script(&mut input);
    let applied = hub.apply(Command::CanaryTick {
        id: ID.into(),
        step: plan.step,
        input,
    });
    applied.result.expect("tick applies");
    applied.changed
}

fn events(hub: &Hub) -> Vec<CanaryEvent> {
    hub.state.canary_events(ID).cloned().collect()
}

fn shown(events: &[CanaryEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| format!("{} {}", e.kind.as_str(), e.message))
        .collect()
}

/// Ticks until the canary is in `phase` (at most 60 ticks).
fn until(hub: &mut Hub, phase: Phase, script: impl Fn(&mut TickInput)) {
    for _ in 0..60 {
        if hub.state.canary(ID).unwrap().status.phase == phase {
            return;
        }
        tick(hub, &script);
    }
    panic!("not {phase} after 60 ticks: {:#?}", shown(&events(hub)));
}

#[test]
fn a_healthy_rollout_records_flaggers_events_in_order() {
    let mut hub = setup(&podinfo(10, ""));
    // The first tick's entry writes the events with the tick.
    let changed = tick(&mut hub, |_| {});
    assert!(
        changed.contains(&RecordKey::CanaryEvents(ID.into())),
        "{changed:?}"
    );
    until(&mut hub, Phase::Succeeded, |_| {});
    let events = events(&hub);
    assert!(events.iter().all(|e| e.reason == EventReason::Synced));
    let shown = shown(&events);
    let initialising = shown
        .iter()
        .position(|e| e == "Normal Initialization done! podinfo.prod")
        .expect("initialised");
    let mut expected = vec![
        "Normal Initialization done! podinfo.prod".to_string(),
        "Normal New revision detected! Scaling up podinfo.prod".to_string(),
        "Normal Starting canary analysis for podinfo.prod".to_string(),
    ];
    expected
        .extend((1..=10).map(|k| format!("Normal Advance podinfo.prod canary weight {}", 5 * k)));
    expected.extend([
        "Normal Copying podinfo.prod template spec to podinfo-primary.prod".to_string(),
        "Normal Routing all traffic to primary".to_string(),
        "Normal Promotion completed! Scaling down podinfo.prod".to_string(),
    ]);
    assert_eq!(shown[initialising..], expected[..], "{shown:#?}");
    // The ticks that changed the phase are in the entity's Activity with their events.
    let activity = hub.activity_of_kind(&helm_id("prod", "podinfo"), "canary");
    assert!(
        activity
            .iter()
            .any(|a| a.contains("Finalising -> Succeeded")
                && a.contains("Promotion completed! Scaling down podinfo.prod")),
        "{activity:#?}"
    );
    assert!(
        !activity.iter().any(|a| a.contains("canary weight 10")),
        "a tick that keeps the phase is not in Activity: {activity:#?}"
    );
}

#[test]
fn a_failing_metric_halts_with_its_value_and_threshold_then_rolls_back() {
    let mut hub = setup(&podinfo(3, ""));
    until(&mut hub, Phase::Progressing, |_| {});
    tick(&mut hub, |_| {}); // weight 5 (the pre-rollout step)
    let before = events(&hub).len();
    let fail = |input: &mut TickInput| {
        input
            .metrics
            .insert("request-success-rate".into(), Some(80_000));
    };
    until(&mut hub, Phase::Failed, fail);
    let events = events(&hub);
    let shown = shown(&events[before..]);
    assert_eq!(
        shown,
        [
            "Warning Halt podinfo.prod advancement success rate 80.00% < 99%",
            "Warning Rolling back podinfo.prod failed checks threshold reached 3",
            "Warning Canary failed! Scaling down podinfo.prod",
        ],
        "{shown:#?}"
    );
    // One event per failed check, counted as Kubernetes counts a repeated event.
    assert_eq!(events[before].count, 3);
    assert!(events[before].first_time_ms < events[before].time_ms);
}

#[test]
fn a_slow_canary_halts_with_durations_as_flagger_prints_them() {
    let mut hub = setup(&podinfo(3, ""));
    until(&mut hub, Phase::Progressing, |_| {});
    tick(&mut hub, |_| {});
    tick(&mut hub, |input| {
        input
            .metrics
            .insert("request-duration".into(), Some(1_500_000));
    });
    let last = events(&hub).pop().expect("an event");
    assert_eq!(
        (last.kind, last.message.as_str()),
        (
            EventKind::Warning,
            "Halt podinfo.prod advancement request duration 1.5s > 500ms"
        )
    );
}

/// A pre-rollout webhook whose URL carries credentials (a query is refused in a webhook URL:
/// the parser's outbound-address rule).
const SECRET_HOOK: &str = "      - name: conformance-test\n        type: pre-rollout\n        \
     url: https://ci:hunter2-pass@tester.prod/check\n";

#[test]
fn a_failing_pre_rollout_webhook_says_why_without_its_urls_credentials() {
    let mut hub = setup(&podinfo(3, SECRET_HOOK));
    until(&mut hub, Phase::Progressing, |_| {});
    let unreachable = |input: &mut TickInput| {
        input.webhooks.insert(
            "conformance-test".into(),
            WebhookResult::unreachable(
                "error sending request for url (https://ci:hunter2-pass@tester.prod/check): \
                 dns error",
            ),
        );
    };
    tick(&mut hub, unreachable);
    tick(&mut hub, |input| {
        input.webhooks.insert(
            "conformance-test".into(),
            WebhookResult::from_status(
                401,
                "bad credentials ci:hunter2-pass (pw hunter2-pass), sign in at \
                 https://auth.prod/login?token=sekr1t-tok",
            ),
        );
    });
    until(&mut hub, Phase::Failed, unreachable);
    let shown = shown(&events(&hub));
    assert!(
        shown.contains(
            &"Warning Halt podinfo.prod advancement pre-rollout check conformance-test failed \
              error sending request for url (https://tester.prod/check): dns error"
                .to_string()
        ),
        "{shown:#?}"
    );
    assert!(
        shown.contains(
            &"Warning Halt podinfo.prod advancement pre-rollout check conformance-test failed \
              bad credentials <redacted> (pw <redacted>), sign in at \
              https://auth.prod/login?<redacted> (HTTP 401)"
                .to_string()
        ),
        "{shown:#?}"
    );
    // Nowhere: not in the events, the Activity, nor any stored record but the resource.
    let activity = hub.activity(&helm_id("prod", "podinfo"));
    for secret in ["hunter2-pass", "sekr1t-tok"] {
        assert!(!shown.iter().any(|e| e.contains(secret)), "{shown:#?}");
        assert!(
            !activity.iter().any(|a| a.contains(secret)),
            "{activity:#?}"
        );
        for record in hub.stored_records() {
            if let Record::CanaryEvents(e) = record {
                assert!(!format!("{e:?}").contains(secret), "{e:?}");
            }
        }
    }
}

#[test]
fn the_newest_hundred_events_are_kept() {
    let mut hub = setup(&podinfo(1_000, ""));
    until(&mut hub, Phase::Progressing, |_| {});
    tick(&mut hub, |_| {});
    // Each failing tick records one event with its own value: 80.00 %, 80.01 %, ...
    let mut last = String::new();
    for i in 0..(CANARY_EVENTS_KEPT as i64 + 1) {
        tick(&mut hub, |input| {
            input
                .metrics
                .insert("request-success-rate".into(), Some(80_000 + 10 * i));
        });
        last = format!(
            "Halt podinfo.prod advancement success rate {}.{:02}% < 99%",
            80 + i / 100,
            i % 100
        );
    }
    let events = events(&hub);
    assert_eq!(events.len(), CANARY_EVENTS_KEPT);
    // The 101 failing ticks pushed out everything before them, and the first of them.
    assert_eq!(
        events[0].message,
        "Halt podinfo.prod advancement success rate 80.01% < 99%"
    );
    assert_eq!(events[CANARY_EVENTS_KEPT - 1].message, last);
    assert_eq!(
        last,
        "Halt podinfo.prod advancement success rate 81.00% < 99%"
    );
}

#[test]
fn deleting_the_canary_deletes_its_events() {
    let yaml = podinfo(3, "");
    let mut hub = setup(&yaml);
    until(&mut hub, Phase::Progressing, |_| {});
    assert!(!events(&hub).is_empty());
    let applied = hub.apply(Command::DeleteCanary { id: ID.into() });
    applied.result.expect("deleted");
    assert!(applied
        .changed
        .contains(&RecordKey::CanaryEvents(ID.into())));
    assert!(events(&hub).is_empty());
    assert!(!hub
        .stored_records()
        .any(|r| matches!(r, Record::CanaryEvents(_))));
    // A canary of the same name starts without the old one's events.
    hub.ok(Command::ApplyCanary {
        environment: Some("prod".into()),
        yaml,
    });
    assert!(events(&hub).is_empty());
    tick(&mut hub, |_| {});
    assert!(
        !shown(&events(&hub))
            .iter()
            .any(|e| e.contains("New revision detected")),
        "{:#?}",
        shown(&events(&hub))
    );
}

//! Canary analysis end to end (SPEC K2–K10, issue 6): a 3-node hub whose leader runs the
//! analysis, a real `hub-agent` (process driver) running the demo service's primary and
//! canary behind its weighted proxy, real traffic through the `<svc>` port, a real webhook
//! receiver, and hub leaders SIGKILLed mid-rollout. Every test checks that the weights the
//! agent applied are exactly the committed sequence.

use std::time::{Duration, Instant};

use hub_client::answer::{CanaryView, GetEntity, VerdictView};
use hub_tests::agent::{http_get, http_get_at};
use hub_tests::canary::{CanaryHub, Traffic, WebhookServer};
use hub_tests::{poll_until, CONVERGE_TIMEOUT};
use serde_json::{json, Value};

const ROLLOUT: Duration = Duration::from_secs(120);

/// The failed checks of a canary's full view (its Flagger status block).
fn failed_checks(v: &CanaryView) -> u32 {
    v.status_block
        .as_ref()
        .unwrap_or_else(|| panic!("no status block: {v:?}"))
        .failed_checks
}

/// The test canary: 1 s ticks, weights up by `step` to `max`, the proxy's success rate over
/// 2 s must stay at 99% or more, rollback after `threshold` failed checks.
fn canary_yaml(port: u16, extra_spec: &str, analysis_extra: &str) -> String {
    format!(
        "apiVersion: flagger.app/v1beta1
kind: Canary
metadata:
  name: demo
  namespace: prod
spec:
  targetRef:
    kind: helmChart
    name: demo
  service:
    port: {port}
  progressDeadlineSeconds: 30
{extra_spec}  analysis:
    interval: 1s
    threshold: 2
    maxWeight: 30
    stepWeight: 10
    metrics:
      - name: request-success-rate
        thresholdRange:
          min: 99
        interval: 2s
{analysis_extra}"
    )
}

fn webhook(name: &str, kind: &str, url: &str) -> String {
    format!("    webhooks:\n      - name: {name}\n        type: {kind}\n        url: {url}\n        timeout: 2s\n")
}

/// Waits for Initialized: the primary serves 1.0.0 behind the proxy.
fn initialized(hub: &CanaryHub) {
    hub.wait_phase("demo", ROLLOUT, |p| p == "Initialized");
    hub.serves("1.0.0");
}

/// Changes the entity's config (a healthy new revision of the same version).
fn new_config(hub: &CanaryHub, message: &str) {
    hub.cluster
        .submit(
            json!({"SetConfigOverrides": {"entity": hub.entity, "version": "0.0.0",
            "config": format!("port: {}\nmessage: {message}\n", hub.port)}}),
        )
        .expect("config");
}

#[test]
fn a_healthy_release_is_promoted_and_a_faulty_one_rolled_back() {
    // SPEC K3, K4, K6: exact weight sequence; threshold rollback; traffic back on the primary.
    let hub = CanaryHub::start();
    hub.apply(&canary_yaml(hub.port, "", ""));
    let _traffic = Traffic::start(hub.port);
    initialized(&hub);

    hub.publish("1.1.0");
    let v = hub.wait_phase("demo", ROLLOUT, |p| p == "Succeeded");
    assert!(v.promoted);
    hub.serves("1.1.0");
    let weights = hub.assert_applied_equals_committed("demo");
    // Initialisation at 0; the canary deployed at 0, then 10, 20, 30; promotion keeps 30
    // until the primary runs 1.1.0; then all traffic back to it.
    assert_eq!(weights, vec![0, 10, 20, 30, 0], "{weights:?}");
    // The entity reports the promoted primary.
    poll_until(CONVERGE_TIMEOUT, || {
        let e = hub.cluster.ask(&GetEntity(hub.entity.clone())).ok()?;
        (e.reported.version.as_deref() == Some("1.1.0")).then_some(())
    })
    .expect("entity reported at 1.1.0");

    // 1.2.0 answers 20% of requests with 500: two failed checks roll it back.
    hub.publish("1.2.0");
    let v = hub.wait_phase("demo", ROLLOUT, |p| p == "Failed");
    assert!(!v.promoted);
    let full = hub.canary("demo").unwrap();
    assert_eq!(failed_checks(&full), 2, "{full:?}");
    assert_eq!(full.weight, 0);
    // Why, in Flagger's words (issue 52 item 5): `hubctl canary events` lists the promotion
    // of 1.1.0, then 1.2.0's failed checks as warnings and its rollback.
    let events = hub
        .cluster
        .hubctl(&["canary", "events", "demo", "-n", "prod"])
        .expect_ok("canary events")
        .stdout;
    for want in [
        "Promotion completed!",
        "Warning",
        "Rolling back demo.prod failed checks threshold reached 2",
        "Canary failed!",
    ] {
        assert!(events.contains(want), "{want:?} not in:\n{events}");
    }
    let weights = hub.assert_applied_equals_committed("demo");
    assert_eq!(weights.last(), Some(&0));
    // 1.2.0's own steps: a check can pass by chance while few requests reach the canary
    // (a loaded machine sends fewer), and a passed check advances (failed checks add up,
    // as in Flagger), so how far it got is not fixed. What is: it only moved up, in steps,
    // never past maxWeight, until the second failed check rolled it back to 0.
    let faulty = &weights[5..];
    let (rollback, steps) = faulty.split_last().expect("1.2.0 steps");
    assert_eq!(*rollback, 0, "{weights:?}");
    assert!(!steps.is_empty(), "{weights:?}");
    assert!(
        steps.windows(2).all(|w| w[0] <= w[1]) && steps.iter().all(|w| (10..=30).contains(w)),
        "{weights:?}"
    );
    // All traffic is on the primary, still 1.1.0, and stays there: no new analysis starts.
    for _ in 0..20 {
        let (status, body) = http_get(hub.port, "/version").expect("service answers");
        assert_eq!((status, body.trim()), (200, "1.1.0"));
    }
    let entity = hub
        .cluster
        .ask(&GetEntity(hub.entity.clone()))
        .expect("entity");
    assert_eq!(entity.reported.version.as_deref(), Some("1.1.0"));
}

/// A hub whose release 1.2.0 answers 30 ms slower (no errors), with the test canary and a
/// Mann-Whitney latency judge against `baseline` (`primary` or `fresh`) over 5 s, traffic
/// running, initialised at 1.0.0.
fn judged_hub(baseline: &str) -> (CanaryHub, Traffic) {
    let hub = CanaryHub::start();
    hub.cluster
        .submit(
            json!({"SetConfigOverrides": {"entity": hub.entity, "version": "1.2.0",
            "config": format!("port: {}\nlatency_ms: 30\n", hub.port)}}),
        )
        .expect("slow config");
    let judged = format!(
        "      - name: request-duration\n        interval: 5s\n        judge: {{type: \
         mann-whitney, baseline: {baseline}, direction: increase, effectSize: 0.5}}\n"
    );
    hub.apply(&canary_yaml(hub.port, "", &judged));
    let traffic = Traffic::start(hub.port);
    initialized(&hub);
    (hub, traffic)
}

/// The judges' last verdicts (`status.judges.verdicts` of `canary get`).
fn verdicts(hub: &CanaryHub) -> Vec<VerdictView> {
    let view = hub.canary("demo").expect("view");
    view.status_block
        .and_then(|b| b.judges)
        .map(|j| j.verdicts)
        .unwrap_or_default()
}

#[test]
fn a_latency_judge_promotes_an_equal_release_and_fails_a_slower_one() {
    // Issue 20 item 4 in the cluster: the agent's proxy bins every request's latency for the
    // canary and the primary, the hub keeps the judged window's samples, and the leader's
    // judged ticks run the Mann-Whitney judge on them. 1.1.0 answers as fast as the primary
    // and is promoted; 1.2.0 (here: 30 ms slower, no errors, so the success-rate range
    // passes) fails the judge twice and is rolled back.
    let (hub, _traffic) = judged_hub("primary");

    hub.publish("1.1.0");
    hub.wait_phase("demo", ROLLOUT, |p| p == "Succeeded");
    hub.serves("1.1.0");
    let v = verdicts(&hub);
    assert_eq!(v[0].metric, "request-duration", "{v:?}");
    assert_eq!(v[0].verdict, "pass", "{v:?}");
    assert!(v[0].reason.contains("Cliff's delta"), "{v:?}");

    hub.publish("1.2.0");
    hub.wait_phase("demo", ROLLOUT, |p| p == "Failed");
    let full = hub.canary("demo").expect("view");
    assert_eq!(failed_checks(&full), 2, "{full:?}");
    let v = verdicts(&hub);
    assert_eq!(v[0].verdict, "fail", "{v:?}");
    let weights = hub.assert_applied_equals_committed("demo");
    assert_eq!(weights.last(), Some(&0), "{weights:?}");
    hub.serves("1.1.0");
}

#[test]
fn a_fresh_baseline_runs_beside_the_canary_and_the_judge_compares_with_it() {
    // Issue 20, `baseline: fresh`: while a revision is analysed the agent runs a third
    // workload at the primary's revision with the canary's share of the traffic, and the
    // judge compares the canary with it. An equal release is promoted; a slower one fails
    // the judge and is rolled back; the baseline is scaled to zero after each.
    let (hub, _traffic) = judged_hub("fresh");
    let state = || -> Value {
        let path = hub.agent.data_dir.join("canary/prod--demo/state.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_default())
            .unwrap_or(Value::Null)
    };
    let verdict = |hub: &CanaryHub| verdicts(hub)[0].clone();

    hub.publish("1.1.0");
    // During the analysis the baseline runs the primary's 1.0.0.
    let running = poll_until(ROLLOUT, || {
        let st = state();
        (st["baseline"]["running"]["version"] == "1.0.0").then_some(st)
    })
    .unwrap_or_else(|| panic!("no baseline ran: {}", state()));
    assert_eq!(
        running["canary_workload"]["running"]["version"], "1.1.0",
        "{running}"
    );
    hub.wait_phase("demo", ROLLOUT, |p| p == "Succeeded");
    hub.serves("1.1.0");
    let v = verdict(&hub);
    assert_eq!(v.verdict, "pass", "{v:?}");
    assert!(v.reason.contains("vs baseline"), "{v:?}");
    poll_until(CONVERGE_TIMEOUT, || {
        let st = state();
        (st["baseline"]["running"].is_null() && st["baseline"]["started"] == false).then_some(())
    })
    .unwrap_or_else(|| panic!("the baseline was not scaled to zero: {}", state()));

    hub.publish("1.2.0");
    poll_until(ROLLOUT, || {
        (state()["baseline"]["running"]["version"] == "1.1.0").then_some(())
    })
    .unwrap_or_else(|| panic!("no baseline at 1.1.0: {}", state()));
    hub.wait_phase("demo", ROLLOUT, |p| p == "Failed");
    let full = hub.canary("demo").expect("view");
    assert_eq!(failed_checks(&full), 2, "{full:?}");
    assert_eq!(verdict(&hub).verdict, "fail", "{full:?}");
    hub.assert_applied_equals_committed("demo");
    hub.serves("1.1.0");
    poll_until(CONVERGE_TIMEOUT, || {
        state()["baseline"]["running"].is_null().then_some(())
    })
    .unwrap_or_else(|| panic!("the baseline was not scaled to zero: {}", state()));
}

#[test]
fn webhooks_hold_promotion_until_confirmed_and_a_rollback_webhook_aborts() {
    // SPEC K5: confirm-promotion holds in WaitingPromotion until it answers 200; a rollback
    // webhook answering 200 rolls back (without failed checks).
    let hooks = WebhookServer::start();
    hooks.set("/confirm", 403);
    hooks.set("/rollback", 404);
    let hub = CanaryHub::start();
    let analysis_extra = format!(
        "{}      - name: stop\n        type: rollback\n        url: {}\n        timeout: 2s\n\
         \x20     - name: events\n        type: event\n        url: {}\n\
         \x20   alerts:\n      - name: on-call\n        severity: info\n        url: {}\n",
        webhook("gate", "confirm-promotion", &hooks.url("/confirm")),
        hooks.url("/rollback"),
        hooks.url("/events"),
        hooks.url("/alerts")
    );
    hub.apply(&canary_yaml(hub.port, "", &analysis_extra));
    let _traffic = Traffic::start(hub.port);
    initialized(&hub);

    hub.publish("1.1.0");
    hub.wait_phase("demo", ROLLOUT, |p| p == "WaitingPromotion");
    // Held: weight stays at 30 while the gate keeps refusing.
    let calls = hooks.calls("/confirm");
    let held_until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < held_until {
        let v = hub.canary("demo").expect("view");
        assert_eq!(v.status, "WaitingPromotion", "{v:?}");
        assert_eq!(v.weight, 30, "{v:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        hooks.calls("/confirm") > calls,
        "the gate is asked again each tick"
    );
    hooks.set("/confirm", 200);
    hub.wait_phase("demo", ROLLOUT, |p| p == "Succeeded");
    hub.serves("1.1.0");

    // A new revision; the rollback webhook signals at once.
    hooks.set("/rollback", 200);
    new_config(&hub, "second");
    let v = hub.wait_phase("demo", ROLLOUT, |p| p == "Failed");
    let full = hub.canary("demo").unwrap();
    assert_eq!(failed_checks(&full), 0, "{full:?}");
    assert_eq!(v.weight, 0);
    hub.serves("1.1.0");
    hub.assert_applied_equals_committed("demo");
    // The leader sent the event webhook's notifications and the alerts (SPEC K5).
    poll_until(CONVERGE_TIMEOUT, || {
        (hooks.calls("/events") > 0 && hooks.calls("/alerts") > 0).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "events {} alerts {}",
            hooks.calls("/events"),
            hooks.calls("/alerts")
        )
    });
}

#[test]
fn suspend_freezes_weights_and_operators_promote_and_abort() {
    // SPEC K8 (suspend), K10 (manual promote and abort).
    let hub = CanaryHub::start();
    let yaml = canary_yaml(hub.port, "", "").replace("maxWeight: 30", "maxWeight: 80");
    hub.apply(&yaml);
    let _traffic = Traffic::start(hub.port);
    initialized(&hub);

    hub.publish("1.1.0");
    hub.wait_phase("demo", ROLLOUT, |_| {
        hub.canary("demo").is_some_and(|v| v.weight >= 20)
    });
    hub.apply(&yaml.replace("spec:\n", "spec:\n  suspend: true\n"));
    // Frozen: over 5 s (five intervals) the step moves at most once more (a tick the leader
    // proposed before the suspension committed) and the weight at most one step with it.
    let first = hub.canary("demo").expect("view");
    let step0 = first.step.expect("step");
    let mut seen = vec![(step0, first.weight)];
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let v = hub.canary("demo").expect("view");
        let now = (v.step.unwrap(), v.weight);
        if seen.last() != Some(&now) {
            seen.push(now);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        seen.len() <= 2 && seen.last().unwrap().0 <= step0 + 1,
        "suspended canary moved: {seen:?}"
    );
    // Manual commands are refused while suspended.
    hub.cluster
        .hubctl(&["canary", "promote", "demo", "-n", "prod"])
        .expect_err(1, "suspended");
    hub.apply(&yaml);
    hub.cluster
        .hubctl(&["canary", "promote", "demo", "-n", "prod"])
        .expect_ok("promote");
    hub.wait_phase("demo", ROLLOUT, |p| p == "Succeeded");
    hub.serves("1.1.0");

    new_config(&hub, "to-abort");
    hub.wait_phase("demo", ROLLOUT, |p| p == "Progressing");
    hub.cluster
        .hubctl(&["canary", "abort", "demo", "-n", "prod"])
        .expect_ok("abort");
    let v = hub.wait_phase("demo", ROLLOUT, |p| p == "Failed");
    assert_eq!(v.weight, 0);
    hub.serves("1.1.0");
    hub.assert_applied_equals_committed("demo");
}

#[test]
fn a_canary_that_never_becomes_ready_fails_at_its_deadline() {
    // SPEC K8, K10: progressDeadlineSeconds; the primary keeps serving.
    let hub = CanaryHub::start();
    hub.apply(
        &canary_yaml(hub.port, "", "")
            .replace("progressDeadlineSeconds: 30", "progressDeadlineSeconds: 5"),
    );
    let _traffic = Traffic::start(hub.port);
    initialized(&hub);
    let started = Instant::now();
    hub.publish("2.0.0");
    hub.wait_phase("demo", ROLLOUT, |p| p == "Progressing");
    let v = hub.wait_phase("demo", ROLLOUT, |p| p == "Failed");
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "failed before its deadline: {v:?}"
    );
    assert_eq!(v.weight, 0);
    hub.serves("1.0.0");
    hub.assert_applied_equals_committed("demo");
}

#[test]
fn leaders_killed_in_progressing_waiting_promotion_and_promoting() {
    // SPEC K9: after every leader change the analysis resumes from the committed step; the
    // agent applied exactly the committed weights.
    let hooks = WebhookServer::start();
    hooks.set("/confirm", 403);
    let mut hub = CanaryHub::start();
    let yaml = canary_yaml(
        hub.port,
        "",
        &webhook("gate", "confirm-promotion", &hooks.url("/confirm")),
    )
    .replace("maxWeight: 30", "maxWeight: 50")
    .replace(
        "    threshold: 2\n",
        "    threshold: 2\n    stepWeightPromotion: 10\n",
    );
    hub.apply(&yaml);
    let _traffic = Traffic::start(hub.port);
    initialized(&hub);
    hub.publish("1.1.0");

    let kill_leader = |hub: &mut CanaryHub| {
        let leader = hub.cluster.leader_id();
        hub.cluster.kill9(leader);
        hub.cluster.wait_leader(CONVERGE_TIMEOUT, |l| l != leader);
        hub.cluster.restart(leader);
    };

    hub.wait_phase("demo", ROLLOUT, |_| {
        hub.canary("demo")
            .is_some_and(|v| v.status == "Progressing" && v.weight >= 20)
    });
    kill_leader(&mut hub);
    hub.wait_phase("demo", ROLLOUT, |p| p == "WaitingPromotion");
    kill_leader(&mut hub);
    let v = hub.canary("demo").expect("view");
    assert_eq!(
        v.status, "WaitingPromotion",
        "held across the failover: {v:?}"
    );
    hooks.set("/confirm", 200);
    hub.wait_phase("demo", ROLLOUT, |p| p == "Promoting");
    kill_leader(&mut hub);
    hub.wait_phase("demo", ROLLOUT, |p| p == "Succeeded");
    hub.serves("1.1.0");
    let weights = hub.assert_applied_equals_committed("demo");
    // Up by 10 to 50, held, then back by 10 per tick during promotion.
    assert_eq!(
        weights,
        vec![0, 10, 20, 30, 40, 50, 40, 30, 20, 10, 0],
        "{weights:?}"
    );
}

/// Issue 52 item 4: the seed's canary (Flagger's how-it-works example, the file in
/// `tests/fixtures/flagger/`) runs as written but for its analysis interval, 1m made 1s so
/// the test takes seconds rather than 25 minutes. Its only traffic is its `load-test`
/// webhook's `hey -z 1m -q 10 -c 2 http://podinfo-canary.test:9898/`: no Flagger load tester
/// exists here, so the leader hands the command to the agent's built-in one, which sends the
/// load to the stable `<svc>-canary` address (127.0.0.3 at the service port), and the
/// request checks measure it. A healthy release is promoted, a faulty one rolled back.
#[test]
fn the_seed_canary_promotes_and_rolls_back_with_the_built_in_load_tester() {
    let port = 9898;
    let hub = CanaryHub::start_in(
        hub_tests::Cluster::up(3, "--artifact-ttl-ms 500"),
        "test",
        "podinfo",
        port,
        &[],
    );
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/flagger/how-it-works.yaml"
    );
    let seed = std::fs::read_to_string(path).expect("the seed canary");
    let yaml = seed.replacen(
        "    interval: 1m\n    threshold",
        "    interval: 1s\n    threshold",
        1,
    );
    assert_ne!(yaml, seed, "the analysis interval was not found");
    hub.apply(&yaml);
    hub.wait_phase("podinfo", ROLLOUT, |p| p == "Initialized");
    let stable = |ip: [u8; 4]| std::net::SocketAddr::from((ip, port));
    let answers = |ip: [u8; 4]| {
        http_get_at(stable(ip), "/version").map(|(status, body)| (status, body.trim().to_string()))
    };
    // The primary's stable address serves it.
    assert_eq!(answers([127, 0, 0, 2]), Some((200, "1.0.0".to_string())));

    hub.publish("1.1.0");
    let v = hub.wait_phase("podinfo", ROLLOUT, |p| p == "Succeeded");
    assert!(v.promoted, "{v:?}");
    hub.serves("1.1.0");
    assert_eq!(answers([127, 0, 0, 2]), Some((200, "1.1.0".to_string())));
    let full = hub.canary("podinfo").expect("canary");
    let addresses = full.addresses.expect("the stable addresses are shown");
    assert_eq!(addresses.canary, "127.0.0.3:9898");
    assert_eq!(addresses.primary, "127.0.0.2:9898");
    let log = hub.agent.log_tail(2000);
    assert!(
        log.contains("load test running") && log.contains("127.0.0.3:9898"),
        "the built-in load tester never ran against the canary's address:\n{log}"
    );
    // Issue 58: a redirected agent log carries no terminal colour codes.
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in the agent's log:\n{log}"
    );

    hub.publish("1.2.0");
    let v = hub.wait_phase("podinfo", ROLLOUT, |p| p == "Failed");
    assert!(!v.promoted);
    let full = hub.canary("podinfo").expect("canary");
    assert_eq!(failed_checks(&full), 10, "{full:?}");
    for _ in 0..10 {
        assert_eq!(
            http_get(port, "/version").map(|(s, b)| (s, b.trim().to_string())),
            Some((200, "1.1.0".to_string()))
        );
    }
}

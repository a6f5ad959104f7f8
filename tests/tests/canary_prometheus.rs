//! A real Prometheus end to end (issue 52 item 3): Debian's `prometheus`, started by the test
//! on loopback, scrapes the agent's `/metrics` every second; the canary's checks are
//! MetricTemplates whose queries read the agent proxy's per-workload counters and latency
//! histogram from that Prometheus. A healthy release is promoted; a faulty one (20% of its
//! answers are 500s) is rolled back by the template's error rate. No stub Prometheus.
//!
//! Skipped, loudly, when no `prometheus` binary is installed, unless `HUB_REQUIRE_PROMETHEUS`
//! is set (scripts/test.sh sets it: CI fails without the binary).

use std::time::Duration;

use hub_client::answer::GetEntity;
use hub_tests::agent::http_get;
use hub_tests::canary::{CanaryHub, Traffic};
use hub_tests::prometheus::Prometheus;
use hub_tests::{free_port, poll_until, Cluster, CONVERGE_TIMEOUT};

const ROLLOUT: Duration = Duration::from_secs(180);

/// The Prometheus job that scrapes the agent.
const JOB: &str = "hub-agent";

/// Two MetricTemplates on the Prometheus at `PROMETHEUS` (the canary workload's 5xx share in
/// percent, and its p99 latency in ms from the histogram), then the canary using them: 2 s
/// ticks, weights 10, 20, 30, rollback after 2 failed checks.
const CANARY: &str = r#"apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata:
  name: error-rate
  namespace: prod
spec:
  provider:
    type: prometheus
    address: PROMETHEUS
  query: |
    100 * sum(
      rate(hub_agent_proxy_requests_total{environment="{{ namespace }}",canary="{{ name }}",workload="{{ variables.workload }}",code="5xx"}[{{ interval }}])
    )
    /
    sum(
      rate(hub_agent_proxy_requests_total{environment="{{ namespace }}",canary="{{ name }}",workload="{{ variables.workload }}"}[{{ interval }}])
    )
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata:
  name: latency-p99
  namespace: prod
spec:
  provider:
    type: prometheus
    address: PROMETHEUS
  query: |
    1000 * histogram_quantile(0.99,
      sum by (le) (
        rate(hub_agent_proxy_request_duration_seconds_bucket{environment="{{ namespace }}",canary="{{ name }}",workload="canary"}[{{ interval }}])
      )
    )
---
apiVersion: flagger.app/v1beta1
kind: Canary
metadata:
  name: demo
  namespace: prod
spec:
  targetRef:
    kind: helmChart
    name: demo
  service:
    port: PORT
  progressDeadlineSeconds: 60
  analysis:
    interval: 2s
    threshold: 2
    maxWeight: 30
    stepWeight: 10
    metrics:
      - name: error-rate
        templateRef:
          name: error-rate
        templateVariables:
          workload: canary
        thresholdRange:
          max: 1
        interval: 10s
      - name: latency
        templateRef:
          name: latency-p99
          namespace: prod
        thresholdRange:
          max: 5000
        interval: 10s
"#;

/// The canary workload's request rate over the error-rate template's window.
const CANARY_TRAFFIC: &str = r#"sum(rate(hub_agent_proxy_requests_total{environment="prod",canary="demo",workload="canary"}[10s]))"#;

#[test]
fn a_metric_template_on_a_real_prometheus_promotes_a_healthy_release_and_rolls_back_a_faulty_one() {
    let Some(binary) = Prometheus::binary(
        "a_metric_template_on_a_real_prometheus_promotes_a_healthy_release_and_rolls_back_a_faulty_one",
    ) else {
        return;
    };
    let metrics = format!("127.0.0.1:{}", free_port());
    let hub = CanaryHub::start_with_agent_args(
        Cluster::up(3, "--artifact-ttl-ms 500"),
        &["--metrics-listen", &metrics],
    );
    let prometheus = Prometheus::start(&binary, hub.cluster.dir(), JOB, &[metrics]);
    prometheus.wait_scraping(JOB);

    let yaml = CANARY
        .replace("PROMETHEUS", &prometheus.address())
        .replace("PORT", &hub.port.to_string());
    hub.apply(&yaml);
    let _traffic = Traffic::start(hub.port);
    hub.wait_phase("demo", ROLLOUT, |p| p == "Initialized");
    hub.serves("1.0.0");

    // 1.1.0 is healthy: every check reads Prometheus (0% errors, a p99 under 5 s).
    hub.publish("1.1.0");
    let v = hub.wait_phase("demo", ROLLOUT, |p| p == "Succeeded" || p == "Failed");
    assert_eq!(
        v.status,
        "Succeeded",
        "the healthy release was not promoted:\n{}\n{}",
        events(&hub),
        hub.agent.log_tail(30)
    );
    hub.serves("1.1.0");
    let weights = hub.assert_applied_equals_committed("demo");
    assert_eq!(weights, vec![0, 10, 20, 30, 0], "{weights:?}");
    // What Prometheus scraped from the agent: the canary workload's answers by status class
    // and its latency histogram (the p99 the template read).
    let ok = prometheus.query(
        r#"sum(hub_agent_proxy_requests_total{environment="prod",canary="demo",workload="canary",code="2xx"})"#,
    );
    assert!(ok.is_some_and(|n| n > 0.0), "2xx of the canary: {ok:?}");
    let p99 = prometheus.query(
        r#"histogram_quantile(0.99, sum by (le) (hub_agent_proxy_request_duration_seconds_bucket{canary="demo",workload="canary"}))"#,
    );
    assert!(p99.is_some_and(|s| s > 0.0 && s <= 5.0), "p99: {p99:?}");
    assert!(
        events(&hub).contains("Promotion completed!"),
        "{}",
        events(&hub)
    );

    // The canary workload's last 1.1.0 answers leave the template's 10 s window before 1.2.0
    // starts, so 1.2.0 is judged on its own traffic only.
    poll_until(CONVERGE_TIMEOUT, || {
        // No series at all (a restarted proxy's counters) is no traffic too.
        prometheus
            .query(CANARY_TRAFFIC)
            .is_none_or(|r| r == 0.0)
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "the canary workload still gets traffic: {:?}",
            prometheus.query(CANARY_TRAFFIC)
        )
    });

    // 1.2.0 answers 20% of its requests with 500: the error rate from Prometheus rolls it back.
    hub.publish("1.2.0");
    // Its analysis (at least two 2 s ticks) leaves Succeeded first.
    hub.wait_phase("demo", ROLLOUT, |p| p == "Progressing");
    let v = hub.wait_phase("demo", ROLLOUT, |p| p == "Failed" || p == "Succeeded");
    let events = events(&hub);
    assert_eq!(
        v.status, "Failed",
        "the faulty release was promoted:\n{events}"
    );
    assert!(!v.promoted);
    assert!(
        events.contains("Halt demo.prod advancement error-rate "),
        "the rollback was not the template's error rate:\n{events}"
    );
    assert!(
        events.contains("Rolling back demo.prod failed checks threshold reached 2"),
        "{events}"
    );
    // The error rate Prometheus saw for the canary workload is well over the threshold.
    let rate = prometheus.query(
        r#"100 * sum(hub_agent_proxy_requests_total{canary="demo",workload="canary",code="5xx"}) / sum(hub_agent_proxy_requests_total{canary="demo",workload="canary"})"#,
    );
    assert!(rate.is_some_and(|r| r > 1.0), "5xx share: {rate:?}");
    let weights = hub.assert_applied_equals_committed("demo");
    assert_eq!(weights.last(), Some(&0), "{weights:?}");
    // All traffic is back on the primary, still 1.1.0.
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

/// `hubctl canary events demo -n prod`.
fn events(hub: &CanaryHub) -> String {
    hub.cluster
        .hubctl(&["canary", "events", "demo", "-n", "prod"])
        .expect_ok("canary events")
        .stdout
}

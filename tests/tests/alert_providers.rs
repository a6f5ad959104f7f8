//! Issue 52 item 6 end to end: Flagger AlertProviders of each type (`slack`, `msteams`,
//! `discord`, `rocket`, `gchat` and the hub's `generic`) applied to a 3-node hub, a canary
//! whose analysis fails, and the leader posting each alert in its provider's payload shape to
//! a local HTTPS server (its CA made here), filtered by each destination's severity, through
//! the outbound client: a provider on a denied address is never connected to. Through hubctl:
//! bad providers and a canary naming a missing provider are refused with their paths (exit
//! 1), the providers and the canary apply from one file, and a provider in use is not
//! deleted.

use std::time::Duration;

use hub_tests::canary::{CanaryHub, Traffic};
use hub_tests::https::{Route, Seen, TestCa, TestServer};
use hub_tests::{poll_until, Cluster, CONVERGE_TIMEOUT};
use serde_json::{json, Value};

const ROLLOUT: Duration = Duration::from_secs(120);

/// The failure alert's text (the engine's, after two failed checks).
const FAILED: &str = "Failed checks threshold reached 2";
/// The info alert of a new revision.
const NEW_REVISION: &str = "New revision detected, progressing canary analysis.";

/// (provider type, alert severity, path the provider's address names).
const PROVIDERS: &[(&str, &str, &str)] = &[
    ("slack", "error", "/slack"),
    ("msteams", "info", "/msteams"),
    ("discord", "warn", "/discord"),
    ("rocket", "info", "/rocket"),
    ("gchat", "info", "/gchat"),
    ("generic", "error", "/generic"),
];

fn provider(kind: &str, address: &str) -> String {
    format!(
        "apiVersion: flagger.app/v1beta1\nkind: AlertProvider\nmetadata:\n  name: to-{kind}\n  \
         namespace: prod\nspec:\n  type: {kind}\n  channel: releases\n  username: hub\n  \
         address: {address}\n"
    )
}

/// The test canary (1 s ticks, rollback after two failed checks) with one alert per provider
/// and one to the denied provider.
fn canary_yaml(port: u16) -> String {
    let mut alerts = String::new();
    for (kind, severity, _) in PROVIDERS {
        alerts.push_str(&format!(
            "      - name: {kind} alert\n        severity: {severity}\n        providerRef:\n          name: to-{kind}\n"
        ));
    }
    alerts.push_str(
        "      - name: denied alert\n        severity: info\n        providerRef:\n          name: to-denied\n",
    );
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
  analysis:
    interval: 1s
    threshold: 2
    maxWeight: 30
    stepWeight: 10
    metrics:
      - name: request-success-rate
        thresholdRange:
          min: 99
        interval: 2s
    alerts:
{alerts}"
    )
}

/// Applies an AlertProvider, waiting for the cluster to reach feature level 2 (the leader
/// raises it shortly after the cluster starts).
fn apply_provider(cluster: &Cluster, yaml: &str) {
    let command = json!({"ApplyAlertProvider": {"environment": null, "yaml": yaml}});
    let mut last = String::new();
    poll_until(CONVERGE_TIMEOUT, || match cluster.submit(command.clone()) {
        Ok(v) => Some(v),
        Err(e) => {
            last = e;
            None
        }
    })
    .unwrap_or_else(|| panic!("apply alert provider: {last}"));
}

/// The JSON bodies posted to `path`.
fn bodies(seen: &[Seen], path: &str) -> Vec<Value> {
    seen.iter()
        .filter(|s| s.path == path)
        .map(|s| {
            assert_eq!(s.method, "POST", "{s:?}");
            serde_json::from_slice(&s.body).unwrap_or_else(|e| panic!("{path}: {e}"))
        })
        .collect()
}

/// The alert text of a body, by its provider type.
fn text_of(kind: &str, body: &Value) -> String {
    let v = match kind {
        "slack" | "discord" | "rocket" => &body["attachments"][0]["text"],
        "msteams" => &body["sections"][0]["activityTitle"],
        "gchat" => &body["cards"][0]["sections"][0]["widgets"][0]["textParagraph"]["text"],
        _ => &body["message"],
    };
    v.as_str()
        .unwrap_or_else(|| panic!("{kind}: no text in {body}"))
        .to_string()
}

/// The failure alert's body each provider type gets: Flagger's shapes.
fn expected_failure(kind: &str) -> Value {
    let facts = [
        ("Target", "helmChart/demo.prod"),
        ("Failed checks threshold", "2"),
        ("Progress deadline", "30s"),
        ("Traffic routing", "Weight step: 10 max: 30"),
    ];
    let slack = |color: &str| {
        let fields: Vec<Value> = facts
            .iter()
            .map(|(t, v)| json!({"title": t, "value": v, "short": false}))
            .collect();
        json!({
            "channel": "releases", "username": "hub", "icon_url": "", "icon_emoji": ":rocket:",
            "attachments": [{"color": color, "author_name": "demo.prod", "text": FAILED,
                "mrkdwn_in": ["text"], "fields": fields}],
        })
    };
    match kind {
        "slack" | "discord" => slack("danger"),
        "rocket" => slack("#FF0000"),
        "msteams" => {
            let facts: Vec<Value> = facts
                .iter()
                .map(|(n, v)| json!({"name": n, "value": v}))
                .collect();
            json!({
                "@type": "MessageCard", "@context": "http://schema.org/extensions",
                "themeColor": "FF0000", "summary": "demo.prod",
                "sections": [{"activityTitle": FAILED, "activitySubtitle": "demo.prod",
                    "facts": facts}],
            })
        }
        "gchat" => {
            let mut sections = vec![json!({"widgets": [{"textParagraph": {"text":
                format!("<font color=#848484><strong>{FAILED}</strong></font>")}}]})];
            for (n, v) in facts {
                sections.push(json!({"widgets": [{"textParagraph": {"text":
                    format!("{n}<br><font color=#848484><strong>{v}</strong></font>")}}]}));
            }
            json!({"cards": [{"header": {"title": "Flagger", "subtitle": "demo.prod",
                "imageUrl": "https://flagger.app/favicon.png"}, "sections": sections}]})
        }
        _ => json!({"canary": "demo", "namespace": "prod", "severity": "error",
            "message": FAILED, "phase": "Failed"}),
    }
}

#[test]
fn each_provider_type_gets_flaggers_payload_filtered_by_severity() {
    let ca = TestCa::new("alert CA");
    let hooks = TestServer::https(&ca, "127.0.0.1", &["127.0.0.1"]);
    for (_, _, path) in PROVIDERS {
        hooks.route(path, Route::Status(200));
    }
    hooks.route("/discord/slack", Route::Status(200));
    // 127.0.0.2 is loopback too; the hub is told never to connect there.
    let denied = TestServer::plain("127.0.0.2");
    let node_args = format!(
        "--artifact-ttl-ms 500 --outbound-ca-file {} --outbound-deny 127.0.0.2/32",
        ca.pem_path()
    );
    let hub = CanaryHub::start_on(Cluster::up(3, &node_args));
    apply_provider(
        &hub.cluster,
        &provider("generic", &denied.url("/denied")).replace("to-generic", "to-denied"),
    );
    // Bad input through hubctl: refused with its path, non-zero exit, nothing changed.
    let bad = hub.cluster.dir().join("bad-provider.yaml");
    for (yaml, want) in [
        (
            provider("slack", &hooks.url("/slack")).replace("type: slack", "type: pagerduty"),
            "spec.type: unknown alert provider type \"pagerduty\"",
        ),
        (
            provider("slack", &hooks.url("/slack")).replace("channel: releases", "channel: [a]"),
            "spec.channel",
        ),
    ] {
        std::fs::write(&bad, yaml).expect("write");
        hub.cluster
            .hubctl(&["alert-provider", "apply", "-f", bad.to_str().unwrap()])
            .expect_err(1, want);
    }
    // A canary naming a provider that does not exist is refused with the alert's path.
    let canary_alone = hub.cluster.dir().join("canary-alone.yaml");
    std::fs::write(&canary_alone, canary_yaml(hub.port)).expect("write");
    hub.cluster
        .hubctl(&["canary", "apply", "-f", canary_alone.to_str().unwrap()])
        .expect_err(
            1,
            "spec.analysis.alerts[0].providerRef: alert provider to-slack not found in prod",
        );
    // One file: the providers, then the canary (hubctl applies the providers first).
    let mut file: Vec<String> = PROVIDERS
        .iter()
        .map(|(kind, _, path)| provider(kind, &hooks.url(path)))
        .collect();
    file.insert(3, canary_yaml(hub.port));
    hub.apply(&file.join("---\n"));
    // A provider a canary uses cannot be deleted.
    hub.cluster
        .hubctl(&["alert-provider", "delete", "to-slack", "-n", "prod"])
        .expect_err(
            1,
            "alert provider prod/to-slack is used by canary prod/demo",
        );
    let _traffic = Traffic::start(hub.port);
    hub.wait_phase("demo", ROLLOUT, |p| p == "Initialized");

    // 1.2.0 answers 20% of requests with 500: two failed checks roll it back.
    hub.publish("1.2.0");
    hub.wait_phase("demo", ROLLOUT, |p| p == "Failed");
    let path_of = |kind: &str| match kind {
        "discord" => "/discord/slack".to_string(),
        _ => PROVIDERS
            .iter()
            .find(|p| p.0 == kind)
            .map(|p| p.2.to_string())
            .unwrap_or_default(),
    };
    // Every destination gets the failure (error receives errors, warn and info too).
    let seen = poll_until(CONVERGE_TIMEOUT, || {
        let seen = hooks.seen();
        PROVIDERS
            .iter()
            .all(|(kind, _, _)| {
                bodies(&seen, &path_of(kind))
                    .iter()
                    .any(|b| text_of(kind, b).contains(FAILED))
            })
            .then_some(seen)
    })
    .unwrap_or_else(|| panic!("not every provider got the failure: {:?}", hooks.seen()));
    for (kind, severity, _) in PROVIDERS {
        let got = bodies(&seen, &path_of(kind));
        let failure = got
            .iter()
            .find(|b| text_of(kind, b).contains(FAILED))
            .expect("the failure alert");
        assert_eq!(failure, &expected_failure(kind), "{kind}");
        let texts: Vec<String> = got.iter().map(|b| text_of(kind, b)).collect();
        match *severity {
            // info receives the progress alerts as well.
            "info" => assert!(
                texts.iter().any(|t| t.contains(NEW_REVISION)),
                "{kind}: {texts:?}"
            ),
            // error and warn receive no info alert.
            _ => assert!(
                texts
                    .iter()
                    .all(|t| !t.contains(NEW_REVISION) && !t.contains("initialization completed")),
                "{kind} ({severity}): {texts:?}"
            ),
        }
    }
    // Discord's alerts went to the address with /slack appended, never to the bare one.
    assert_eq!(hooks.requests("/discord"), 0);
    // The denied provider was never connected to.
    assert_eq!(denied.connections(), 0, "no connection to a denied address");
}

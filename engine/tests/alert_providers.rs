//! Issue 52, item 6 (the engine's part): Flagger's AlertProviders, applied and deleted as
//! replicated commands, and referenced by canary alerts (`alerts[].providerRef`). The
//! provider in `tests/fixtures/flagger/alert-providers/` is copied verbatim from Flagger's
//! repository (it names its source).

mod common;

use std::fs;
use std::path::PathBuf;

use common::*;
use hub_engine::access::{need, Need, Role, Target};
use hub_engine::canary::{parse_alert_provider, AlertProviderKind};
use hub_engine::feature_level::LEVEL_2;
use hub_engine::{Command, CommandError};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flagger")
}

fn read(file: &str) -> String {
    let path = fixtures().join(file);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A hub at feature level 2 with environments `test` and `flagger` and podinfo in `test`.
fn hub() -> Hub {
    let mut hub = Hub::new();
    hub.ok(Command::SetClusterLevel { level: LEVEL_2 });
    hub.env("test");
    hub.env("flagger");
    hub.product("com.example:podinfo");
    hub.helm("test", "podinfo", "com.example:podinfo");
    hub
}

fn provider(name: &str, namespace: &str, kind: &str) -> String {
    format!(
        "apiVersion: flagger.app/v1beta1\nkind: AlertProvider\nmetadata:\n  name: {name}\n  \
         namespace: {namespace}\nspec:\n  type: {kind}\n  address: https://hooks.example/{name}\n"
    )
}

fn apply_provider(yaml: &str) -> Command {
    Command::ApplyAlertProvider {
        environment: None,
        yaml: yaml.to_string(),
    }
}

/// Flagger's podinfo canary with alerts to `on-call` (in `flagger`) and `qa` (the canary's).
fn canary() -> String {
    "\
apiVersion: flagger.app/v1beta1
kind: Canary
metadata:
  name: podinfo
  namespace: test
spec:
  targetRef:
    kind: helmChart
    name: podinfo
  service:
    port: 9898
  analysis:
    interval: 1m
    threshold: 5
    maxWeight: 50
    stepWeight: 10
    alerts:
      - name: on-call Slack
        severity: error
        providerRef:
          name: on-call
          namespace: flagger
      - name: qa Discord
        severity: warn
        providerRef:
          name: qa
"
    .to_string()
}

fn apply_canary(yaml: &str) -> Command {
    Command::ApplyCanary {
        environment: None,
        yaml: yaml.to_string(),
    }
}

fn invalid(e: CommandError) -> String {
    match e {
        CommandError::InvalidField { reason, .. } => reason,
        other => panic!("not an invalid field: {other}"),
    }
}

#[test]
fn flaggers_documented_provider_applies_with_proxy_and_secret_ref_reported() {
    let mut hub = hub();
    let out = hub.ok(apply_provider(&read(
        "alert-providers/usage-alerting-on-call.yaml",
    )));
    let summary = out.summary();
    assert!(
        summary.contains("alert provider flagger/on-call created"),
        "{summary}"
    );
    assert!(summary.contains("spec.proxy:"), "{summary}");
    assert!(
        summary.contains("spec.secretRef: ignored (not acted on yet"),
        "{summary}"
    );
    let p = hub.state.alert_provider("flagger", "on-call").unwrap();
    assert_eq!(p.spec.kind, AlertProviderKind::Slack);
    assert_eq!(p.spec.channel, "on-call-alerts");
    assert_eq!(p.spec.secret_ref.as_deref(), Some("on-call-url"));
    // The same resource again changes nothing.
    let again = hub.ok(apply_provider(&read(
        "alert-providers/usage-alerting-on-call.yaml",
    )));
    assert!(again.summary().contains("unchanged"), "{}", again.summary());
}

#[test]
fn a_canary_naming_a_missing_provider_is_refused_with_its_path_and_nothing_changes() {
    let mut hub = hub();
    hub.ok(apply_provider(&provider("on-call", "flagger", "slack")));
    let before = hub.replay_digest();
    let e = invalid(hub.err(apply_canary(&canary())));
    assert!(
        e.contains("spec.analysis.alerts[1].providerRef: alert provider qa not found in test"),
        "{e}"
    );
    assert!(!e.contains("alerts[0]"), "{e}");
    assert_eq!(hub.replay_digest(), before);
    assert!(hub.state.canary("test/podinfo").is_none());
    hub.ok(apply_provider(&provider("qa", "test", "discord")));
    hub.ok(apply_canary(&canary()));
    let c = hub.state.canary("test/podinfo").unwrap();
    let ids: Vec<String> = c.spec.alert_providers().map(|(_, id)| id).collect();
    assert_eq!(ids, ["flagger/on-call", "test/qa"]);
}

#[test]
fn before_feature_level_2_a_missing_provider_is_accepted_as_it_was() {
    // Entries of the log written before providers existed apply as they did.
    let mut hub = Hub::new();
    hub.env("test");
    hub.product("com.example:podinfo");
    hub.helm("test", "podinfo", "com.example:podinfo");
    hub.ok(apply_canary(&canary()));
    assert!(hub.state.canary("test/podinfo").is_some());
    // And the provider commands themselves wait for level 2.
    let e = hub.err(apply_provider(&provider("qa", "test", "slack")));
    assert!(e.to_string().contains("feature level"), "{e}");
}

#[test]
fn bad_providers_are_refused_with_their_path_and_nothing_changes() {
    let mut hub = hub();
    let before = hub.replay_digest();
    let wrong_type = provider("a", "test", "slack")
        .replace("  type: slack\n", "  type: slack\n  channel: {x: 1}\n");
    for (yaml, want) in [
        (wrong_type, "spec.channel: invalid type"),
        (
            provider("a", "test", "pagerduty"),
            "spec.type: unknown alert provider type \"pagerduty\"",
        ),
        (provider("a", "nowhere", "slack"), "environment"),
    ] {
        let e = hub.err(apply_provider(&yaml)).to_string();
        assert!(e.contains(want), "{want} missing from {e}");
        assert_eq!(hub.replay_digest(), before);
    }
    let e = hub.err(Command::DeleteAlertProvider {
        id: "test/missing".into(),
    });
    assert!(matches!(e, CommandError::NotFound { .. }), "{e}");
}

#[test]
fn a_provider_in_use_is_not_deleted_nor_its_environment() {
    let mut hub = hub();
    hub.ok(apply_provider(&provider("on-call", "flagger", "msteams")));
    hub.ok(apply_provider(&provider("qa", "test", "gchat")));
    hub.ok(apply_canary(&canary()));
    let e = hub
        .err(Command::DeleteAlertProvider {
            id: "flagger/on-call".into(),
        })
        .to_string();
    assert!(
        e.contains("alert provider flagger/on-call is used by canary test/podinfo (spec.analysis.alerts[0])"),
        "{e}"
    );
    let e = hub
        .err(Command::DeleteEnvironment {
            name: "flagger".into(),
        })
        .to_string();
    assert!(
        e.contains("has alert providers used by canary test/podinfo"),
        "{e}"
    );
    hub.ok(Command::DeleteCanary {
        id: "test/podinfo".into(),
    });
    hub.ok(Command::DeleteAlertProvider {
        id: "test/qa".into(),
    });
    assert!(hub.state.alert_provider("test", "qa").is_none());
    hub.ok(Command::DeleteEnvironment {
        name: "flagger".into(),
    });
    assert!(hub.state.alert_providers().next().is_none());
}

#[test]
fn applying_a_provider_needs_an_operator_of_its_environment() {
    let hub = hub();
    let yaml = provider("on-call", "flagger", "slack");
    assert_eq!(
        need(&hub.state, &apply_provider(&yaml)),
        Need::Role(
            Role::EnvironmentOperator,
            Target::Environment("flagger".into())
        )
    );
    assert_eq!(
        need(
            &hub.state,
            &Command::DeleteAlertProvider {
                id: "test/qa".into()
            }
        ),
        Need::Role(
            Role::EnvironmentOperator,
            Target::Environment("test".into())
        )
    );
    assert!(parse_alert_provider(&yaml).is_ok());
}

/// A viewer, and an operator of another environment, are refused both commands, and
/// nothing changes (the harness checks a refused command changes only its audit row); the
/// operator of the provider's environment applies and deletes it.
#[test]
fn only_an_operator_of_its_environment_applies_or_deletes_a_provider() {
    use common::actors::{as_, bind};
    let mut hub = hub();
    bind(&mut hub, "root", Role::Admin, &[]);
    bind(&mut hub, "vic", Role::Viewer, &[]);
    bind(&mut hub, "tess", Role::EnvironmentOperator, &["test"]);
    bind(&mut hub, "flo", Role::EnvironmentOperator, &["flagger"]);
    let yaml = provider("on-call", "flagger", "slack");
    for who in ["vic", "tess"] {
        let e = hub.err(as_(who, apply_provider(&yaml)));
        assert!(matches!(e, CommandError::PermissionDenied(_)), "{who}: {e}");
    }
    assert!(hub.state.alert_providers().next().is_none());
    hub.ok(as_("flo", apply_provider(&yaml)));
    let delete = || Command::DeleteAlertProvider {
        id: "flagger/on-call".into(),
    };
    for who in ["vic", "tess"] {
        let e = hub.err(as_(who, delete()));
        assert!(matches!(e, CommandError::PermissionDenied(_)), "{who}: {e}");
    }
    assert_eq!(hub.state.alert_providers().count(), 1);
    hub.ok(as_("flo", delete()));
    assert!(hub.state.alert_providers().next().is_none());
}

//! Flagger's `AlertProvider` (`flagger.app/v1beta1`): where the alerts of a canary's
//! `analysis.alerts[].providerRef` go (issue 52 item 6).
//!
//! [`parse_alert_provider`] reads the resource as strictly as a MetricTemplate: the fields of
//! Flagger's CRD with the types it gives them, unknown fields refused, every problem reported
//! with its YAML path. The type is one of Flagger's CRD enum (`slack`, `msteams`, `discord`,
//! `rocket`, `gchat`) or the hub's `generic` (the JSON of an `alerts[].url` alert); anything
//! else is refused as unknown, as the CRD's enum refuses it.

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use super::error::{from_serde, quote, CanaryError, CanaryErrors};
use super::ignored::IgnoredField;
use super::parse::{check_outbound_address, API_VERSION, MAX_CANARY_BYTES};
use super::raw::RawMetadata;
use super::template::{metadata, name};
use crate::yaml_budget::{self, Document};

/// The `kind` of an alert provider resource.
pub const ALERT_PROVIDER_KIND: &str = "AlertProvider";
/// Largest alert provider resource text accepted, in bytes (as a canary's).
pub const MAX_ALERT_PROVIDER_BYTES: usize = MAX_CANARY_BYTES;
/// Longest `channel` or `username`.
pub const MAX_ALERT_LABEL_BYTES: usize = 256;
/// Flagger's `channel` when none is given.
pub const DEFAULT_ALERT_CHANNEL: &str = "general";
/// Flagger's `username` when none is given.
pub const DEFAULT_ALERT_USERNAME: &str = "flagger";

/// The type of an alert provider: Flagger's CRD enum and the hub's `generic`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AlertProviderKind {
    /// `slack`: an incoming webhook (or `chat.postMessage` with a token).
    Slack,
    /// `msteams`: an Office 365 connector card.
    Msteams,
    /// `discord`: Slack's payload at the address with `/slack` appended.
    Discord,
    /// `rocket`: Rocket.Chat, Slack's payload with Rocket's colours.
    Rocket,
    /// `gchat`: a Google Chat card.
    Gchat,
    /// `generic` (a hub addition): the JSON an `alerts[].url` alert gets.
    Generic,
}

impl AlertProviderKind {
    /// Every type, Flagger's in its CRD's order, then the hub's.
    pub const ALL: [AlertProviderKind; 6] = [
        AlertProviderKind::Slack,
        AlertProviderKind::Msteams,
        AlertProviderKind::Discord,
        AlertProviderKind::Rocket,
        AlertProviderKind::Gchat,
        AlertProviderKind::Generic,
    ];

    /// As written in a resource.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertProviderKind::Slack => "slack",
            AlertProviderKind::Msteams => "msteams",
            AlertProviderKind::Discord => "discord",
            AlertProviderKind::Rocket => "rocket",
            AlertProviderKind::Gchat => "gchat",
            AlertProviderKind::Generic => "generic",
        }
    }

    /// The type named `s`, if any.
    pub fn parse(s: &str) -> Option<AlertProviderKind> {
        AlertProviderKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// A validated AlertProvider's spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertProviderSpec {
    /// `spec.type`.
    pub kind: AlertProviderKind,
    /// `spec.channel` (Flagger's default `general`).
    pub channel: String,
    /// `spec.username` (Flagger's default `flagger`).
    pub username: String,
    /// `spec.address`: the hook URL (a credential for Slack: shown by host only). `None` when
    /// only `secretRef` gives it.
    pub address: Option<String>,
    /// `spec.secretRef.name`: the secret holding `address` (and `token`) in the provider's
    /// environment; when set, its address wins over `address`, as in Flagger.
    pub secret_ref: Option<String>,
}

/// A parsed AlertProvider resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedAlertProvider {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`, when given: the hub environment.
    pub namespace: Option<String>,
    /// The spec.
    pub spec: AlertProviderSpec,
    /// Fields accepted and not acted on, with why.
    pub ignored: Vec<IgnoredField>,
}

/// The document.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "an alert provider resource: a mapping with apiVersion, kind, metadata and spec"
)]
struct RawAlertProvider {
    api_version: Option<String>,
    kind: Option<String>,
    metadata: Option<RawMetadata>,
    spec: Option<RawAlertProviderSpec>,
    status: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawAlertProviderSpec {
    #[serde(rename = "type")]
    kind: Option<String>,
    channel: Option<String>,
    username: Option<String>,
    address: Option<String>,
    proxy: Option<String>,
    secret_ref: Option<RawSecretRef>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSecretRef {
    name: Option<String>,
}

/// Parses and validates an AlertProvider resource; every problem is reported with its path.
pub fn parse_alert_provider(yaml: &str) -> Result<ParsedAlertProvider, CanaryErrors> {
    let single = |e: CanaryError| CanaryErrors::single(e);
    if yaml.len() > MAX_ALERT_PROVIDER_BYTES {
        return Err(single(CanaryError::new(
            "",
            format!(
                "resource is {} bytes, at most {MAX_ALERT_PROVIDER_BYTES} bytes allowed",
                yaml.len()
            ),
        )));
    }
    let yaml =
        yaml_budget::check(Document::AlertProvider, yaml).map_err(|e| single(e.to_yaml_error()))?;
    let shape = yaml.shape().map_err(|e| single(from_serde(&e)))?;
    if shape != crate::yaml_error::YamlShape::Mapping {
        return Err(single(CanaryError::new(
            "",
            "an alert provider must be a YAML mapping with apiVersion, kind, metadata and spec",
        )));
    }
    let raw: RawAlertProvider = yaml.parse().map_err(|e| single(from_serde(&e)))?;
    let mut errors = Vec::new();
    let mut ignored = Vec::new();
    if let Some(api) = raw.api_version.as_deref().filter(|a| *a != API_VERSION) {
        errors.push(CanaryError::new(
            "apiVersion",
            format!("must be {API_VERSION:?}, got {}", quote(api)),
        ));
    }
    if let Some(kind) = raw.kind.as_deref().filter(|k| *k != ALERT_PROVIDER_KIND) {
        errors.push(CanaryError::new(
            "kind",
            format!("must be {ALERT_PROVIDER_KIND:?}, got {}", quote(kind)),
        ));
    }
    if raw.status.is_some() {
        ignored.push(IgnoredField {
            path: "status".into(),
            reason: "the hub keeps no status of an alert provider".into(),
        });
    }
    let names = metadata(raw.metadata, &mut errors, &mut ignored);
    let spec = match raw.spec {
        Some(s) => spec(s, &mut errors, &mut ignored),
        None => {
            errors.push(CanaryError::new(
                "spec",
                "required: type and address or secretRef",
            ));
            None
        }
    };
    match (names, spec, CanaryErrors::from_vec(errors)) {
        (Some((name, namespace)), Some(spec), None) => Ok(ParsedAlertProvider {
            name,
            namespace,
            spec,
            ignored,
        }),
        (_, _, Some(errors)) => Err(errors),
        // Not reached: every path that yields nothing records an error.
        _ => Err(single(CanaryError::new("", "invalid alert provider"))),
    }
}

/// `spec.type` as written: refused when missing or not one of the types.
fn kind(value: Option<&str>) -> Result<AlertProviderKind, CanaryError> {
    const P: &str = "spec.type";
    let all = || {
        let all: Vec<&str> = AlertProviderKind::ALL.iter().map(|k| k.as_str()).collect();
        all.join(", ")
    };
    match value {
        None => Err(CanaryError::new(P, format!("required: one of {}", all()))),
        Some(k) => AlertProviderKind::parse(k).ok_or_else(|| {
            CanaryError::new(
                P,
                format!(
                    "unknown alert provider type {}: the types are {}",
                    quote(k),
                    all()
                ),
            )
        }),
    }
}

/// A `channel` or `username`: its default when absent or empty, as in Flagger.
fn label(
    errors: &mut Vec<CanaryError>,
    path: &str,
    value: Option<String>,
    default: &str,
) -> Option<String> {
    match value.filter(|v| !v.is_empty()) {
        None => Some(default.to_string()),
        Some(v) if v.len() > MAX_ALERT_LABEL_BYTES => {
            errors.push(CanaryError::new(
                path,
                format!("at most {MAX_ALERT_LABEL_BYTES} bytes"),
            ));
            None
        }
        Some(v) if v.chars().any(char::is_control) => {
            errors.push(CanaryError::new(
                path,
                "must not contain control characters",
            ));
            None
        }
        Some(v) => Some(v),
    }
}

fn spec(
    raw: RawAlertProviderSpec,
    errors: &mut Vec<CanaryError>,
    ignored: &mut Vec<IgnoredField>,
) -> Option<AlertProviderSpec> {
    let before = errors.len();
    let has_target = raw.address.is_some() || raw.secret_ref.is_some();
    let kind = kind(raw.kind.as_deref()).map_err(|e| errors.push(e)).ok();
    let channel = label(errors, "spec.channel", raw.channel, DEFAULT_ALERT_CHANNEL);
    let username = label(
        errors,
        "spec.username",
        raw.username,
        DEFAULT_ALERT_USERNAME,
    );
    let address = match raw.address {
        None => Some(None),
        Some(a) => match check_outbound_address(&a) {
            Ok(()) => Some(Some(a)),
            Err(reason) => {
                errors.push(CanaryError::new("spec.address", reason.to_string()));
                None
            }
        },
    };
    let secret_ref = match raw.secret_ref {
        None => Some(None),
        Some(s) => name(errors, "spec.secretRef.name", s.name).map(Some),
    };
    if !has_target {
        errors.push(CanaryError::new(
            "spec",
            "needs address or secretRef (Flagger's CRD requires one of them)",
        ));
    }
    if raw.proxy.is_some() {
        ignored.push(IgnoredField {
            path: "spec.proxy".into(),
            reason: "the hub's outbound client connects directly, its deny list applying to \
                     the address; no proxy is used"
                .into(),
        });
    }
    if secret_ref.as_ref().is_some_and(Option::is_some) {
        ignored.push(IgnoredField {
            path: "spec.secretRef".into(),
            reason: "not acted on yet: the hub keeps no secrets for an environment, so the \
                     leader logs the alerts of this provider instead of sending them"
                .into(),
        });
    }
    if errors.len() > before {
        return None;
    }
    Some(AlertProviderSpec {
        kind: kind?,
        channel: channel?,
        username: username?,
        address: address?,
        secret_ref: secret_ref?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
apiVersion: flagger.app/v1beta1
kind: AlertProvider
metadata:
  name: on-call
  namespace: flagger
  labels: {team: web}
spec:
  type: slack
  channel: on-call-alerts
  username: flagger
  address: https://hooks.slack.com/services/YOUR/SLACK/WEBHOOK
";

    #[test]
    fn a_provider_is_read_with_its_defaults() {
        let p = parse_alert_provider(GOOD).unwrap();
        assert_eq!(
            (p.name.as_str(), p.namespace.as_deref()),
            ("on-call", Some("flagger"))
        );
        assert_eq!(p.spec.kind, AlertProviderKind::Slack);
        assert_eq!(p.spec.channel, "on-call-alerts");
        assert_eq!(
            p.spec.address.as_deref(),
            Some("https://hooks.slack.com/services/YOUR/SLACK/WEBHOOK")
        );
        assert_eq!(p.ignored.len(), 1, "{:?}", p.ignored);
        let bare = "metadata: {name: x}\nspec: {type: gchat, address: 'https://chat.example/h'}\n";
        let p = parse_alert_provider(bare).unwrap();
        assert_eq!(
            (p.spec.channel.as_str(), p.spec.username.as_str()),
            ("general", "flagger")
        );
        for kind in AlertProviderKind::ALL {
            let yaml = GOOD.replace("type: slack", &format!("type: {}", kind.as_str()));
            assert_eq!(parse_alert_provider(&yaml).unwrap().spec.kind, kind);
        }
    }

    #[test]
    fn proxy_and_secret_ref_are_reported() {
        let yaml = format!(
            "{GOOD}  proxy: http://my-http-proxy.com\n  secretRef:\n    name: on-call-url\n"
        );
        let p = parse_alert_provider(&yaml).unwrap();
        let paths: Vec<&str> = p.ignored.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["metadata.labels", "spec.proxy", "spec.secretRef"]);
        assert_eq!(p.spec.secret_ref.as_deref(), Some("on-call-url"));
    }

    #[test]
    fn bad_input_is_refused_with_its_path() {
        let e = parse_alert_provider(&GOOD.replace("type: slack", "type: pagerduty"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spec.type: unknown alert provider type \"pagerduty\": the types are slack, msteams, discord, rocket, gchat, generic"),
            "{e}"
        );
        let e = parse_alert_provider(&GOOD.replace("channel: on-call-alerts", "channel: [a]"))
            .unwrap_err();
        assert!(e.first().path.ends_with("channel"), "{e}");
        let e = parse_alert_provider(&GOOD.replace("channel:", "channels:")).unwrap_err();
        assert!(e.to_string().contains("unknown field `channels`"), "{e}");
        let yaml = "\
apiVersion: flagger.app/v1
kind: Provider
metadata: {name: On-Call}
spec: {address: 'ftp://x', secretRef: {}}
";
        let e = parse_alert_provider(yaml).unwrap_err().to_string();
        for want in [
            "apiVersion: must be",
            "kind: must be \"AlertProvider\"",
            "metadata.name:",
            "spec.type: required",
            "spec.address:",
            "spec.secretRef.name: required",
        ] {
            assert!(e.contains(want), "{want} missing from\n{e}");
        }
        let e = parse_alert_provider("metadata: {name: x}\nspec: {type: slack}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("spec: needs address or secretRef"), "{e}");
    }
}

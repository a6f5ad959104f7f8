//! Flagger's `MetricTemplate` (`flagger.app/v1beta1`): a metric provider and a query template
//! that canary metrics reference with `templateRef` (issue 52 item 3).
//!
//! [`parse_metric_template`] reads the resource as strictly as a canary: the fields of
//! Flagger's CRD with the types it gives them, unknown fields refused, every problem reported
//! with its YAML path. The provider's type is one of Flagger's ([`ProviderKind`]); only
//! `prometheus` is run by the hub, the others are refused by name. The query's syntax is
//! checked ([`super::render::parse_query`]) so that a template that could never render is
//! refused when it is applied, not on every tick of the canaries that use it.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::error::{from_serde, quote, CanaryError, CanaryErrors};
use super::ignored::IgnoredField;
use super::parse::{check_outbound_address, API_VERSION, MAX_CANARY_BYTES};
use super::provider::supported_provider;
pub use super::provider::{MetricProvider, MetricTemplateSpec, ProviderKind};
use super::raw::RawMetadata;
use super::render::parse_query;
use crate::name::validate_name;
use crate::yaml_budget::{self, Document};

/// The `kind` of a metric template resource.
pub const METRIC_TEMPLATE_KIND: &str = "MetricTemplate";
/// Largest template resource text accepted, in bytes (as a canary's).
pub const MAX_METRIC_TEMPLATE_BYTES: usize = MAX_CANARY_BYTES;
/// Most headers of a provider.
pub const MAX_PROVIDER_HEADERS: usize = 32;

/// A parsed MetricTemplate resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedMetricTemplate {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`, when given: the hub environment.
    pub namespace: Option<String>,
    /// The spec.
    pub spec: MetricTemplateSpec,
    /// Fields accepted and not acted on, with why.
    pub ignored: Vec<IgnoredField>,
}

/// The document.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a metric template resource: a mapping with apiVersion, kind, metadata and spec"
)]
struct RawMetricTemplate {
    api_version: Option<String>,
    kind: Option<String>,
    metadata: Option<RawMetadata>,
    spec: Option<RawTemplateSpec>,
    status: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTemplateSpec {
    provider: Option<RawTemplateProvider>,
    query: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTemplateProvider {
    #[serde(rename = "type")]
    kind: Option<String>,
    address: Option<String>,
    headers: Option<BTreeMap<String, Vec<String>>>,
    secret_ref: Option<RawSecretRef>,
    region: Option<String>,
    insecure_skip_verify: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSecretRef {
    name: Option<String>,
}

/// Parses and validates a MetricTemplate resource; every problem is reported with its path.
pub fn parse_metric_template(yaml: &str) -> Result<ParsedMetricTemplate, CanaryErrors> {
    let single = |e: CanaryError| CanaryErrors::single(e);
    if yaml.len() > MAX_METRIC_TEMPLATE_BYTES {
        return Err(single(CanaryError::new(
            "",
            format!(
                "resource is {} bytes, at most {MAX_METRIC_TEMPLATE_BYTES} bytes allowed",
                yaml.len()
            ),
        )));
    }
    let yaml = yaml_budget::check(Document::MetricTemplate, yaml)
        .map_err(|e| single(e.to_yaml_error()))?;
    let shape = yaml.shape().map_err(|e| single(from_serde(&e)))?;
    if shape != crate::yaml_error::YamlShape::Mapping {
        return Err(single(CanaryError::new(
            "",
            "a metric template must be a YAML mapping with apiVersion, kind, metadata and spec",
        )));
    }
    let raw: RawMetricTemplate = yaml.parse().map_err(|e| single(from_serde(&e)))?;
    let mut errors = Vec::new();
    let mut ignored = Vec::new();
    if let Some(api) = raw.api_version.as_deref().filter(|a| *a != API_VERSION) {
        errors.push(CanaryError::new(
            "apiVersion",
            format!("must be {API_VERSION:?}, got {}", quote(api)),
        ));
    }
    if let Some(kind) = raw.kind.as_deref().filter(|k| *k != METRIC_TEMPLATE_KIND) {
        errors.push(CanaryError::new(
            "kind",
            format!("must be {METRIC_TEMPLATE_KIND:?}, got {}", quote(kind)),
        ));
    }
    if raw.status.is_some() {
        ignored.push(IgnoredField {
            path: "status".into(),
            reason: "the hub keeps no status of a metric template".into(),
        });
    }
    let names = metadata(raw.metadata, &mut errors, &mut ignored);
    let spec = match raw.spec {
        Some(s) => spec(s, &mut errors, &mut ignored),
        None => {
            errors.push(CanaryError::new("spec", "required: provider and query"));
            None
        }
    };
    match (names, spec, CanaryErrors::from_vec(errors)) {
        (Some((name, namespace)), Some(spec), None) => Ok(ParsedMetricTemplate {
            name,
            namespace,
            spec,
            ignored,
        }),
        (_, _, Some(errors)) => Err(errors),
        // Not reached: every path that yields nothing records an error.
        _ => Err(single(CanaryError::new("", "invalid metric template"))),
    }
}

pub(super) fn name(
    errors: &mut Vec<CanaryError>,
    path: &str,
    value: Option<String>,
) -> Option<String> {
    let Some(n) = value else {
        errors.push(CanaryError::new(path, "required"));
        return None;
    };
    match validate_name(path, &n) {
        Ok(()) => Some(n),
        Err(crate::error::CommandError::InvalidField { reason, .. }) => {
            errors.push(CanaryError::new(path, reason));
            None
        }
        Err(other) => {
            errors.push(CanaryError::new(path, other.to_string()));
            None
        }
    }
}

pub(super) fn metadata(
    raw: Option<RawMetadata>,
    errors: &mut Vec<CanaryError>,
    ignored: &mut Vec<IgnoredField>,
) -> Option<(String, Option<String>)> {
    let Some(m) = raw else {
        errors.push(CanaryError::new(
            "metadata",
            "required: a mapping with name",
        ));
        return None;
    };
    for (set, path) in [
        (m.labels.is_some(), "metadata.labels"),
        (m.annotations.is_some(), "metadata.annotations"),
    ] {
        if set {
            ignored.push(IgnoredField {
                path: path.into(),
                reason: "kept in the stored resource; the hub does not act on them".into(),
            });
        }
    }
    let n = name(errors, "metadata.name", m.name);
    let ns = match m.namespace {
        None => Some(None),
        Some(ns) => name(errors, "metadata.namespace", Some(ns)).map(Some),
    };
    Some((n?, ns?))
}

fn spec(
    raw: RawTemplateSpec,
    errors: &mut Vec<CanaryError>,
    ignored: &mut Vec<IgnoredField>,
) -> Option<MetricTemplateSpec> {
    let query = match raw.query {
        None => {
            errors.push(CanaryError::new("spec.query", "required"));
            None
        }
        Some(q) if q.trim().is_empty() => {
            errors.push(CanaryError::new("spec.query", "must not be empty"));
            None
        }
        Some(q) => match parse_query(&q) {
            Ok(_) => Some(q),
            Err(e) => {
                errors.push(CanaryError::new("spec.query", e.to_string()));
                None
            }
        },
    };
    let provider = match raw.provider {
        None => {
            errors.push(CanaryError::new(
                "spec.provider",
                "required: a mapping with type and address",
            ));
            None
        }
        Some(p) => provider(p, errors, ignored),
    };
    Some(MetricTemplateSpec {
        provider: provider?,
        query: query?,
    })
}

fn provider(
    p: RawTemplateProvider,
    errors: &mut Vec<CanaryError>,
    ignored: &mut Vec<IgnoredField>,
) -> Option<MetricProvider> {
    const P: &str = "spec.provider";
    let before = errors.len();
    let kind = supported_provider(&format!("{P}.type"), p.kind.as_deref())
        .map_err(|e| errors.push(e))
        .ok();
    let address = match p.address {
        None => {
            errors.push(CanaryError::new(format!("{P}.address"), "required"));
            None
        }
        Some(a) => match check_outbound_address(&a) {
            Ok(()) => Some(a),
            Err(reason) => {
                errors.push(CanaryError::new(format!("{P}.address"), reason.to_string()));
                None
            }
        },
    };
    let secret_ref = match p.secret_ref {
        None => Some(None),
        Some(s) => name(errors, &format!("{P}.secretRef.name"), s.name).map(Some),
    };
    let headers = p.headers.unwrap_or_default();
    check_headers(&headers, errors);
    if p.region.is_some() {
        ignored.push(IgnoredField {
            path: format!("{P}.region"),
            reason: "used by Flagger's cloudwatch provider only".into(),
        });
    }
    if errors.len() > before {
        return None;
    }
    Some(MetricProvider {
        kind: kind?,
        address: address?,
        secret_ref: secret_ref?,
        insecure_skip_verify: p.insecure_skip_verify.unwrap_or(false),
        headers,
    })
}

/// Header names are HTTP tokens and values have no control characters, so the leader can
/// always build the request.
fn check_headers(headers: &BTreeMap<String, Vec<String>>, errors: &mut Vec<CanaryError>) {
    const P: &str = "spec.provider.headers";
    if headers.len() > MAX_PROVIDER_HEADERS {
        errors.push(CanaryError::new(
            P,
            format!(
                "{} headers, at most {MAX_PROVIDER_HEADERS} allowed",
                headers.len()
            ),
        ));
    }
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    for (name, values) in headers {
        if name.is_empty() || !name.chars().all(token) {
            errors.push(CanaryError::new(
                format!("{P}.{name}"),
                format!("{} is not an HTTP header name", quote(name)),
            ));
        }
        for (i, v) in values.iter().enumerate() {
            if v.chars().any(|c| c.is_control() && c != '\t') {
                errors.push(CanaryError::new(
                    format!("{P}.{name}[{i}]"),
                    "must not contain control characters",
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata:
  name: latency
  namespace: test
  labels: {team: web}
spec:
  provider:
    type: prometheus
    address: http://prometheus.test:9090
    secretRef: {name: prom-auth}
    insecureSkipVerify: true
    headers: {X-Scope-OrgID: [tenant-1]}
  query: 'histogram_quantile(0.99, rate(x{ns=\"{{ namespace }}\"}[{{ interval }}]))'
";

    #[test]
    fn a_template_is_read_with_its_provider() {
        let t = parse_metric_template(GOOD).unwrap();
        assert_eq!(
            (t.name.as_str(), t.namespace.as_deref()),
            ("latency", Some("test"))
        );
        let p = &t.spec.provider;
        assert_eq!(p.kind, ProviderKind::Prometheus);
        assert_eq!(p.address, "http://prometheus.test:9090");
        assert_eq!(p.secret_ref.as_deref(), Some("prom-auth"));
        assert!(p.insecure_skip_verify);
        assert_eq!(p.headers["X-Scope-OrgID"], vec!["tenant-1".to_string()]);
        assert_eq!(t.ignored.len(), 1, "{:?}", t.ignored);
        assert_eq!(t.ignored[0].path, "metadata.labels");
    }

    #[test]
    fn other_providers_are_refused_by_name_and_unknown_ones_listed() {
        for kind in ProviderKind::ALL.into_iter().filter(|k| !k.is_supported()) {
            let yaml = GOOD.replace("type: prometheus", &format!("type: {}", kind.as_str()));
            let e = parse_metric_template(&yaml).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "spec.provider.type: provider {} is not supported yet",
                    kind.as_str()
                )),
                "{e}"
            );
        }
        let e = parse_metric_template(&GOOD.replace("type: prometheus", "type: prom"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spec.provider.type: unknown provider \"prom\": Flagger's are prometheus,"),
            "{e}"
        );
    }

    #[test]
    fn every_bad_field_is_reported_with_its_path() {
        let yaml = "\
apiVersion: flagger.app/v1
kind: Template
metadata: {name: Latency}
spec:
  provider: {type: prometheus, address: 'ftp://x', secretRef: {}, headers: {'a b': [\"x\\u0001\"]}}
  query: 'x{{ printf }}'
";
        let e = parse_metric_template(yaml).unwrap_err().to_string();
        for want in [
            "apiVersion: must be",
            "kind: must be \"MetricTemplate\"",
            "metadata.name:",
            "spec.query: {{ printf }} is not supported",
            "spec.provider.address:",
            "spec.provider.secretRef.name: required",
            "spec.provider.headers.a b: \"a b\" is not an HTTP header name",
            "spec.provider.headers.a b[0]: must not contain control characters",
        ] {
            assert!(e.contains(want), "{want} missing from\n{e}");
        }
    }

    #[test]
    fn wrong_types_and_unknown_fields_are_refused_with_their_path() {
        let e = parse_metric_template(
            &GOOD.replace("insecureSkipVerify: true", "insecureSkipVerify: maybe"),
        )
        .unwrap_err();
        assert!(e.first().path.ends_with("insecureSkipVerify"), "{e}");
        let e = parse_metric_template(&GOOD.replace("secretRef:", "secretRefs:")).unwrap_err();
        assert!(e.to_string().contains("unknown field `secretRefs`"), "{e}");
        let e = parse_metric_template(&GOOD.replace("  query:", "  queries:")).unwrap_err();
        assert!(e.to_string().contains("unknown field `queries`"), "{e}");
    }

    #[test]
    fn provider_and_query_are_required() {
        let e = parse_metric_template("metadata: {name: x}\nspec: {}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("spec.query: required"), "{e}");
        assert!(e.contains("spec.provider: required"), "{e}");
    }
}

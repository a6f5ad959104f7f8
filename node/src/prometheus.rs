//! The Prometheus metric provider of canary analysis (SPEC K6, issue 6): an instant query
//! (`GET <address>/api/v1/query?query=…`, http or https, through the hub's outbound client;
//! the path and query are set on the parsed address by [`hub_http::endpoint`], and an
//! address with a `?` or `#` is refused) whose first sample is the metric's value. An empty result is "no values found", which
//! fails the check like missing proxy data. Errors keep at most a short excerpt of what
//! Prometheus said.
//!
//! A MetricTemplate's provider ([`run_check`]) adds its `headers` to the query and, with
//! `insecureSkipVerify`, goes through the outbound client that accepts any certificate (the
//! deny list and proxies are the same). Header values may be credentials: no error, log line
//! or event shows one (an invalid header is named, never shown). `secretRef` cannot be read
//! yet: the hub keeps secrets per entity, not per environment, so such a check fails saying
//! so rather than querying without its credentials.

use std::collections::BTreeMap;
use std::time::Duration;

use hub_engine::canary::PrometheusCheck;
use hub_http::{excerpt, HeaderMap, HeaderName, HeaderValue, HttpClient, Method};

use crate::outbound::{Outbound, MAX_ANSWER_BYTES};

/// Runs `check` (a bare query or a MetricTemplate's) through `outbound`: its query as
/// Flagger sends it ([`hub_engine::canary::prometheus_query_text`]), its template's headers,
/// and without TLS verification only when the template says `insecureSkipVerify`.
pub async fn run_check(
    outbound: &Outbound,
    check: &PrometheusCheck<'_>,
    timeout: Duration,
) -> Result<Option<f64>, PrometheusError> {
    let template = || check.template.unwrap_or("-").to_string();
    if let Some(secret) = check.secret_ref {
        return Err(PrometheusError::SecretRefUnsupported {
            template: template(),
            secret: secret.to_string(),
        });
    }
    let headers = match check.headers {
        Some(h) => template_headers(h).map_err(|name| PrometheusError::InvalidHeader {
            template: template(),
            name,
        })?,
        None => HeaderMap::new(),
    };
    let client = if check.insecure_skip_verify {
        outbound.calls_unverified()
    } else {
        outbound.calls()
    };
    let text = hub_engine::canary::prometheus_query_text(check.query);
    query(client, check.address, &text, &headers, timeout).await
}

/// A template's `headers` as HTTP headers, every value of each name in order; `Err` names
/// (at most 64 bytes of) the first header whose name or value HTTP cannot carry.
fn template_headers(headers: &BTreeMap<String, Vec<String>>) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (name, values) in headers {
        let shown = || name.chars().take(64).collect::<String>();
        let key = HeaderName::from_bytes(name.as_bytes()).map_err(|_| shown())?;
        for value in values {
            let mut value = HeaderValue::from_str(value).map_err(|_| shown())?;
            value.set_sensitive(true);
            map.append(key.clone(), value);
        }
    }
    Ok(map)
}

/// Runs `query` through `client` against the Prometheus at `address`
/// (`http(s)://host:port`) with `headers`; `Ok(None)` when it returned no sample.
pub async fn query(
    client: &HttpClient,
    address: &str,
    query: &str,
    headers: &HeaderMap,
    timeout: Duration,
) -> Result<Option<f64>, PrometheusError> {
    let url = hub_http::endpoint(address, &["api", "v1", "query"], &[("query", query)])
        .map_err(|e| PrometheusError::Address(e.to_string()))?;
    let answer = client
        .call_with_headers(Method::GET, &url, None, headers, timeout, MAX_ANSWER_BYTES)
        .await
        .map_err(|e| PrometheusError::Call(e.to_string()))?;
    if !answer.status.is_success() {
        return Err(PrometheusError::Status {
            status: answer.status.as_u16(),
            excerpt: excerpt(&answer.body),
        });
    }
    parse_answer(&answer.body)
}

/// Why a metric's Prometheus query gave no value. Every text is an excerpt of at most a few
/// hundred bytes of what the address or Prometheus said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrometheusError {
    /// The address cannot be queried (a `?` or `#` in it, a scheme other than http(s), …).
    #[error("{0}")]
    Address(String),
    /// The call failed: connection, TLS, the deny list, the timeout, the size budget.
    #[error("{0}")]
    Call(String),
    /// Prometheus answered with an HTTP error status.
    #[error("prometheus answered HTTP {status}: {excerpt}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The start of its body.
        excerpt: String,
    },
    /// The answer is not Prometheus's JSON.
    #[error("prometheus answer is not JSON ({reason}): {excerpt}")]
    NotJson {
        /// What the JSON parser said.
        reason: String,
        /// The start of the answer.
        excerpt: String,
    },
    /// Prometheus refused the query (`"status": "error"`).
    #[error("prometheus query failed: {0}")]
    QueryFailed(String),
    /// A result type other than vector or scalar.
    #[error("unsupported result type {0:?}")]
    UnsupportedResultType(String),
    /// A sample that is not `[time, "value"]` with a numeric value.
    #[error("sample {0:?} is not a number")]
    NotANumber(String),
    /// The metric template's credentials cannot be read: the hub keeps no secrets for an
    /// environment yet.
    #[error("metric template {template}: secretRef {secret} cannot be read: the hub keeps no secrets for an environment yet")]
    SecretRefUnsupported {
        /// The template, `<environment>/<name>`.
        template: String,
        /// The secret's name (never a value).
        secret: String,
    },
    /// A header of the template that HTTP cannot carry (its name; never its value).
    #[error("metric template {template}: header {name:?} has a name or value HTTP cannot carry")]
    InvalidHeader {
        /// The template, `<environment>/<name>`.
        template: String,
        /// The header's name (at most 64 characters).
        name: String,
    },
}

/// An `/api/v1/query` answer, as far as the hub reads it.
#[derive(serde::Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    data: Option<AnswerData>,
}

/// The `data` of a successful answer: a vector's samples are `{metric, value}`, a scalar's
/// result is its one sample.
#[derive(serde::Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
enum AnswerData {
    Vector(Vec<VectorSample>),
    Scalar(Sample),
    Matrix(serde::de::IgnoredAny),
    String(serde::de::IgnoredAny),
}

/// One series of a vector answer.
#[derive(serde::Deserialize)]
struct VectorSample {
    value: Sample,
}

/// `[time, "value"]`: Prometheus writes the value as a string.
#[derive(serde::Deserialize)]
struct Sample(serde::de::IgnoredAny, String);

/// The first sample's value of a Prometheus `/api/v1/query` answer.
fn parse_answer(body: &[u8]) -> Result<Option<f64>, PrometheusError> {
    let answer: Answer = serde_json::from_slice(body).map_err(|e| PrometheusError::NotJson {
        reason: e.to_string(),
        excerpt: excerpt(body),
    })?;
    if answer.status != "success" {
        let error = answer.error.as_deref().unwrap_or("unknown error");
        return Err(PrometheusError::QueryFailed(excerpt(error.as_bytes())));
    }
    let sample = match answer.data {
        Some(AnswerData::Vector(series)) => series.into_iter().next().map(|s| s.value),
        Some(AnswerData::Scalar(sample)) => Some(sample),
        Some(AnswerData::Matrix(_)) => {
            return Err(PrometheusError::UnsupportedResultType("matrix".into()))
        }
        Some(AnswerData::String(_)) => {
            return Err(PrometheusError::UnsupportedResultType("string".into()))
        }
        None => return Err(PrometheusError::UnsupportedResultType("none".into())),
    };
    let Some(Sample(_, text)) = sample else {
        return Ok(None);
    };
    let value: f64 = text
        .parse()
        .map_err(|_| PrometheusError::NotANumber(excerpt(text.as_bytes())))?;
    Ok(value.is_finite().then_some(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read() {
        let vector = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000.1,"99.5"]}]}}"#;
        assert_eq!(parse_answer(vector), Ok(Some(99.5)));
        let empty = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert_eq!(parse_answer(empty), Ok(None), "no values found");
        let scalar = br#"{"status":"success","data":{"resultType":"scalar","result":[1,"3"]}}"#;
        assert_eq!(parse_answer(scalar), Ok(Some(3.0)));
        let nan = br#"{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}"#;
        assert_eq!(parse_answer(nan), Ok(None));
        let err = br#"{"status":"error","error":"parse error"}"#;
        assert_eq!(
            parse_answer(err),
            Err(PrometheusError::QueryFailed("parse error".into()))
        );
        assert!(parse_answer(b"nope").is_err());
    }

    #[tokio::test]
    async fn queries_over_https_and_errors_keep_an_excerpt() {
        use std::sync::Arc;

        use hub_http::local::{LocalCa, LocalServer, Reply};

        let ca = LocalCa::generate("prometheus CA").unwrap();
        let elsewhere = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = elsewhere.clone();
        let handler: hub_http::local::Handler = Arc::new(move |r: hub_http::local::Request| {
            if !r.path.starts_with("/api/v1/query?") {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            if r.path.starts_with("/api/v1/query?query=up") {
                Reply::text(
                    200,
                    r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"42"]}]}}"#,
                )
            } else {
                Reply::text(503, "e".repeat(10_000))
            }
        });
        let server = LocalServer::loopback_https(&ca, handler).await.unwrap();
        let client = crate::outbound::test_client_trusting(ca.ca_pem());
        let address = format!("https://{}", server.addr());
        let t = Duration::from_secs(5);
        assert_eq!(
            query(&client, &address, "up", &HeaderMap::new(), t).await,
            Ok(Some(42.0))
        );
        let err = query(&client, &address, "down", &HeaderMap::new(), t)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("prometheus answered HTTP 503: eee"),
            "{err}"
        );
        assert!(err.len() < 300, "{}", err.len());
        // The review's address: the '#' would have made the query a fragment and sent the
        // GET to /internal/secret. It is refused before any connection.
        let secret = format!("https://{}/internal/secret#", server.addr());
        let err = query(&client, &secret, "up", &HeaderMap::new(), t)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with("'#' is not allowed in an outbound address"),
            "{err}"
        );
        assert_eq!(elsewhere.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_templates_headers_and_insecure_skip_verify_are_used_and_a_secret_ref_is_refused() {
        use std::sync::{Arc, Mutex};

        use hub_http::local::{LocalCa, LocalServer, Reply};

        // A server whose CA the outbound clients do not trust.
        let ca = LocalCa::generate("self-signed prometheus").unwrap();
        type Seen = Vec<(String, Vec<String>)>;
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let record = seen.clone();
        let handler: hub_http::local::Handler = Arc::new(move |r: hub_http::local::Request| {
            let values = |name: &str| {
                r.headers
                    .get_all(name)
                    .iter()
                    .map(|v| v.to_str().unwrap_or("?").to_string())
                    .collect::<Vec<_>>()
            };
            let mut seen = record.lock().unwrap();
            seen.push(("x-scope-orgid".into(), values("x-scope-orgid")));
            seen.push(("x-two".into(), values("x-two")));
            Reply::text(
                200,
                r#"{"status":"success","data":{"resultType":"scalar","result":[1,"7"]}}"#,
            )
        });
        let server = LocalServer::loopback_https(&ca, handler).await.unwrap();
        let outbound = Outbound::new(hub_http::DenyList::none(), None).unwrap();
        let address = format!("https://{}", server.addr());
        let headers: BTreeMap<String, Vec<String>> = [
            ("X-Scope-OrgID".to_string(), vec!["tenant-1".to_string()]),
            ("X-Two".to_string(), vec!["a".to_string(), "b".to_string()]),
        ]
        .into();
        let mut check = PrometheusCheck {
            address: &address,
            query: "sum(up)\n  by (job)",
            template: Some("flagger/latency"),
            secret_ref: None,
            insecure_skip_verify: false,
            headers: Some(&headers),
        };
        let t = Duration::from_secs(5);
        // Verified (the default): the unknown CA fails the check, nothing is answered.
        let err = run_check(&outbound, &check, t).await.unwrap_err();
        assert!(matches!(err, PrometheusError::Call(_)), "{err}");
        assert!(seen.lock().unwrap().is_empty());
        // insecureSkipVerify: answered, with every header value.
        check.insecure_skip_verify = true;
        assert_eq!(run_check(&outbound, &check, t).await, Ok(Some(7.0)));
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                ("x-scope-orgid".to_string(), vec!["tenant-1".to_string()]),
                ("x-two".to_string(), vec!["a".to_string(), "b".to_string()]),
            ]
        );
        // A header HTTP cannot carry is named, its value never shown; nothing is sent.
        let bad: BTreeMap<String, Vec<String>> =
            [("X-Token".to_string(), vec!["s3cret\nvalue".to_string()])].into();
        check.headers = Some(&bad);
        let err = run_check(&outbound, &check, t)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("header \"X-Token\""), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
        // secretRef: refused by name, before any call.
        check.headers = Some(&headers);
        check.secret_ref = Some("prom-auth");
        let err = run_check(&outbound, &check, t)
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "metric template flagger/latency: secretRef prom-auth cannot be read: the hub keeps \
             no secrets for an environment yet"
        );
        assert_eq!(seen.lock().unwrap().len(), 2, "one answered call only");
    }
}

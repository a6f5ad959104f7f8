//! The Prometheus metric provider of canary analysis (SPEC K6, issue 6): an instant query
//! (`GET <address>/api/v1/query?query=…`, http or https, through the hub's outbound client;
//! the path and query are set on the parsed address by [`hub_http::endpoint`], and an
//! address with a `?` or `#` is refused) whose first sample is the metric's value. An empty result is "no values found", which
//! fails the check like missing proxy data. Errors keep at most a short excerpt of what
//! Prometheus said.

use std::time::Duration;

use hub_http::{excerpt, HttpClient, Method};

use crate::outbound::MAX_ANSWER_BYTES;

/// Runs `query` through `client` against the Prometheus at `address`
/// (`http(s)://host:port`); `Ok(None)` when it returned no sample.
pub async fn query(
    client: &HttpClient,
    address: &str,
    query: &str,
    timeout: Duration,
) -> Result<Option<f64>, PrometheusError> {
    let url = hub_http::endpoint(address, &["api", "v1", "query"], &[("query", query)])
        .map_err(|e| PrometheusError::Address(e.to_string()))?;
    let answer = client
        .call(Method::GET, &url, None, timeout, MAX_ANSWER_BYTES)
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
    /// The metric template asks for what this hub cannot send yet.
    #[error("metric template {template}: secretRef, insecureSkipVerify and headers are not supported by this hub yet")]
    UnsupportedTemplate {
        /// The template's name.
        template: String,
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
        assert_eq!(query(&client, &address, "up", t).await, Ok(Some(42.0)));
        let err = query(&client, &address, "down", t)
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
        let err = query(&client, &secret, "up", t)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with("'#' is not allowed in an outbound address"),
            "{err}"
        );
        assert_eq!(elsewhere.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}

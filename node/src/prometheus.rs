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
) -> Result<Option<f64>, String> {
    let url = hub_http::endpoint(address, &["api", "v1", "query"], &[("query", query)])
        .map_err(|e| e.to_string())?;
    let answer = client
        .call(Method::GET, &url, None, timeout, MAX_ANSWER_BYTES)
        .await
        .map_err(|e| e.to_string())?;
    if !answer.status.is_success() {
        return Err(format!(
            "prometheus answered HTTP {}: {}",
            answer.status.as_u16(),
            excerpt(&answer.body)
        ));
    }
    parse_answer(&answer.body)
}

/// The first sample's value of a Prometheus `/api/v1/query` answer.
fn parse_answer(body: &[u8]) -> Result<Option<f64>, String> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| format!("prometheus answer is not JSON ({e}): {}", excerpt(body)))?;
    if v["status"] != "success" {
        return Err(format!(
            "prometheus query failed: {}",
            excerpt(v["error"].as_str().unwrap_or("unknown error").as_bytes())
        ));
    }
    let data = &v["data"];
    let sample = match data["resultType"].as_str() {
        Some("vector") => data["result"].get(0).map(|r| &r["value"]),
        Some("scalar") => Some(&data["result"]),
        other => return Err(format!("unsupported result type {other:?}")),
    };
    let Some(sample) = sample else {
        return Ok(None);
    };
    let text = sample
        .get(1)
        .and_then(|v| v.as_str())
        .ok_or_else(|| "malformed sample".to_string())?;
    let value: f64 = text
        .parse()
        .map_err(|_| format!("sample {:?} is not a number", excerpt(text.as_bytes())))?;
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
        assert!(parse_answer(err).unwrap_err().contains("parse error"));
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
        let err = query(&client, &address, "down", t).await.unwrap_err();
        assert!(
            err.starts_with("prometheus answered HTTP 503: eee"),
            "{err}"
        );
        assert!(err.len() < 300, "{}", err.len());
        // The review's address: the '#' would have made the query a fragment and sent the
        // GET to /internal/secret. It is refused before any connection.
        let secret = format!("https://{}/internal/secret#", server.addr());
        let err = query(&client, &secret, "up", t).await.unwrap_err();
        assert!(
            err.ends_with("'#' is not allowed in an outbound address"),
            "{err}"
        );
        assert_eq!(elsewhere.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}

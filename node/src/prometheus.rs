//! The Prometheus metric provider of canary analysis (SPEC K6, issue 6): an instant query
//! (`GET <address>/api/v1/query?query=…`) whose first sample is the metric's value. An empty
//! result is "no values found", which fails the check like missing proxy data.

use std::time::Duration;

use hyper::Method;

use crate::http;

/// Percent-encodes `s` for a URL query value (RFC 3986 unreserved characters stay).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Runs `query` against the Prometheus at `address` (`http://host:port`); `Ok(None)` when it
/// returned no sample.
pub async fn query(address: &str, query: &str, timeout: Duration) -> Result<Option<f64>, String> {
    let url = format!(
        "{}/api/v1/query?query={}",
        address.trim_end_matches('/'),
        encode(query)
    );
    let (status, body) = http::request(Method::GET, &url, None, timeout).await?;
    if !status.is_success() {
        return Err(format!("prometheus answered HTTP {}", status.as_u16()));
    }
    parse_answer(&body)
}

/// The first sample's value of a Prometheus `/api/v1/query` answer.
fn parse_answer(body: &[u8]) -> Result<Option<f64>, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("prometheus answer is not JSON: {e}"))?;
    if v["status"] != "success" {
        return Err(format!(
            "prometheus query failed: {}",
            v["error"].as_str().unwrap_or("unknown error")
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
        .map_err(|_| format!("sample {text:?} is not a number"))?;
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
        assert_eq!(
            encode("rate(x{a=\"b\"}[1m])"),
            "rate%28x%7Ba%3D%22b%22%7D%5B1m%5D%29"
        );
    }
}

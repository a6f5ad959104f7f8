//! Reading a live node's Prometheus metrics (`hub-node --metrics-listen`) in a test.

use http_body_util::BodyExt;
use tower::ServiceExt;

/// `GET https://addr/metrics` on `channel`, with `bearer`: (status, content type, body).
pub async fn get(
    channel: tonic::transport::Channel,
    addr: &str,
    bearer: Option<&str>,
) -> (u16, String, String) {
    let mut req = http::Request::get(format!("https://{addr}/metrics"));
    if let Some(b) = bearer {
        req = req.header("authorization", format!("Bearer {b}"));
    }
    let req = req.body(tonic::body::Body::empty()).expect("request");
    let res = channel.oneshot(req).await.expect("an answer");
    let status = res.status().as_u16();
    let kind = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = res.into_body().collect().await.expect("body").to_bytes();
    (status, kind, String::from_utf8_lossy(&body).into_owned())
}

/// The value of the sample `name` (with its labels, as written) in `body`.
pub fn sample(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

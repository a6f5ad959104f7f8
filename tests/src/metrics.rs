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

/// Polls node `addr`'s metrics listener at `metrics_addr` (as the harness admin) until the
/// sample `name` has `value`; panics after [`crate::CONVERGE_TIMEOUT`].
pub fn wait_sample(
    rt: &tokio::runtime::Runtime,
    cluster: &crate::Cluster,
    metrics_addr: &str,
    name: &str,
    value: f64,
) {
    let admin = hub_tls::Identity::Operator(crate::tls::ADMIN.into());
    crate::poll_until(crate::CONVERGE_TIMEOUT, || {
        let ch = rt.block_on(cluster.channel_as(&admin, metrics_addr)).ok()?;
        let (_, _, body) = rt.block_on(get(ch, metrics_addr, None));
        (sample(&body, name) == Some(value)).then_some(())
    })
    .unwrap_or_else(|| panic!("{name} never became {value} at {metrics_addr}"));
}

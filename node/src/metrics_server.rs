//! The metrics listener (`hub-node --metrics-listen`): `GET /metrics` over HTTPS (HTTP/1.1 or
//! HTTP/2) with the node's certificate, for a caller identified like any other: a client
//! certificate of the cluster's CA or an operator token (`authorization: Bearer`), holding
//! any role (a viewer's read), or a node. Without one the answer is 401, with the wrong one
//! 403; never data. With `--insecure` (loopback only) it is plain HTTP, open to the loopback.
//!
//! Requests are bounded by [`crate::http_serve`]: a small header block, a few streams per
//! connection, the listener's connection cap and handshake deadline.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;

use crate::http_serve::{ConnectionLimits, HttpLimits};

use crate::auth::{Caller, Policy};
use crate::node::HubNode;

/// The content type of the OpenMetrics text format.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Scrapes are short: a client holding connections open cannot keep the few slots for long.
const LIMITS: HttpLimits = HttpLimits {
    connections: ConnectionLimits {
        admitted: 64,
        unadmitted: 32,
        unadmitted_per_source: 8,
    },
    lifetime: Duration::from_secs(60),
    grace: Duration::from_secs(10),
    max_streams: 4,
};

/// Serves `/metrics` on `listener` until the process ends.
pub async fn serve(
    listener: TcpListener,
    mode: hub_tls::server::ListenerMode,
    node: Arc<HubNode>,
    policy: Policy,
) {
    crate::http_serve::serve(listener, mode, LIMITS, move |info, req| {
        let answer = answer(&node, &policy, &info, &req);
        async move { answer }
    })
    .await;
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The answer to one request.
fn answer(
    node: &HubNode,
    policy: &Policy,
    info: &hub_tls::server::ConnInfo,
    req: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    if req.uri().path() != "/metrics" {
        return text(
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics\n".into(),
        );
    }
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into());
    }
    if let Err(status) = authorize(node, policy, info, req) {
        let code = match status.code() {
            tonic::Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            _ => StatusCode::FORBIDDEN,
        };
        let mut r = text(code, format!("{}\n", status.message()));
        if code == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer realm=\"hub\""),
            );
        }
        return r;
    }
    let body = node.metrics.render(node.id, &node.raft, &node.state);
    let mut r = Response::new(Full::new(Bytes::from(body)));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(OPENMETRICS),
    );
    r
}

/// A node, or a caller holding any role; everyone on an insecure (loopback) listener.
fn authorize(
    node: &HubNode,
    policy: &Policy,
    info: &hub_tls::server::ConnInfo,
    req: &Request<Incoming>,
) -> Result<(), tonic::Status> {
    if policy.insecure {
        return Ok(());
    }
    let identity = policy.identify(
        "/metrics",
        Some(info),
        req.headers().get(hyper::header::AUTHORIZATION),
    )?;
    Caller::Verified(identity).may_read(&node.state.read().state)
}

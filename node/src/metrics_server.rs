//! The metrics listener (`hub-node --metrics-listen`): `GET /metrics` over HTTPS (HTTP/1.1 or
//! HTTP/2) with the node's certificate, for a caller identified like any other: a client
//! certificate of the cluster's CA or an operator token (`authorization: Bearer`), holding
//! any role (a viewer's read), or a node. Without one the answer is 401, with the wrong one
//! 403; never data. With `--insecure` (loopback only) it is plain HTTP, open to the loopback.
//!
//! Requests are bounded: a connection gets at most a small header block, one scrape at a time
//! per connection, and the listener's connection cap and handshake deadline.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio_stream::StreamExt;

use crate::auth::{Caller, Policy};
use crate::node::HubNode;

/// The content type of the OpenMetrics text format.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Longest time one connection is kept (scrapes are short; a client holding connections
/// open cannot keep the listener's few slots for long).
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// How long a scrape in flight at the end of a connection's lifetime may still take.
const GRACE: Duration = Duration::from_secs(10);

/// Serves `/metrics` on `listener` until the process ends.
pub async fn serve(
    listener: TcpListener,
    mode: hub_tls::server::ListenerMode,
    node: Arc<HubNode>,
    policy: Policy,
) {
    let mut incoming = hub_tls::server::incoming(
        listener,
        mode,
        hub_tls::server::Limits {
            max_connections: 64,
            ..Default::default()
        },
    );
    while let Some(conn) = incoming.next().await {
        let Ok(conn) = conn else { continue };
        let info = conn.info().clone();
        let (node, policy) = (node.clone(), policy.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let answer = answer(&node, &policy, &info, &req);
                async move { Ok::<_, Infallible>(answer) }
            });
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder.http1().max_buf_size(16 << 10);
            builder
                .http2()
                .max_header_list_size(16 << 10)
                .max_concurrent_streams(4);
            let served = builder.serve_connection(TokioIo::new(conn), service);
            tokio::pin!(served);
            tokio::select! {
                _ = served.as_mut() => {}
                _ = tokio::time::sleep(CONNECTION_LIFETIME) => {
                    // A scrape in flight finishes; the client reconnects for the next one.
                    served.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(GRACE, served).await;
                }
            }
        });
    }
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

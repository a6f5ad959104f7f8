//! The connection loop of the node's HTTP listeners (metrics, dashboard): HTTPS with the
//! node's certificate speaking HTTP/1.1 or HTTP/2 by ALPN, or plain HTTP on an insecure
//! (loopback) node. Each connection is bounded: the listener's connection budgets and
//! handshake deadline (`hub_tls::budget`: a connection that presents neither a certificate
//! nor a valid token within 10 s is closed, and one source holds at most a few such
//! connections), a request head read within [`HEADER_READ_TIMEOUT`], a small header block, a
//! few streams at once, and a lifetime after which it is shut down gracefully (a request in
//! flight may finish within the grace period; the client reconnects for the next).

use std::future::Future;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio_stream::StreamExt;

use hub_tls::server::{ConnInfo, ListenerMode};

/// The bounds of one listener.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// The connection budgets (the handshake and admission deadlines are the defaults').
    pub connections: ConnectionLimits,
    /// Longest time one connection is kept.
    pub lifetime: Duration,
    /// How long a request in flight at the end of a connection's lifetime may still take.
    pub grace: Duration,
    /// Most HTTP/2 streams in flight on one connection.
    pub max_streams: u32,
}

/// How many connections of each kind a listener keeps (see `hub_tls::budget`).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections of identified callers.
    pub admitted: usize,
    /// Connections that have not proved who is calling yet, in all.
    pub unadmitted: usize,
    /// Such connections from one source.
    pub unadmitted_per_source: usize,
}

/// The largest request header block, either protocol.
const MAX_HEADER_BYTES: usize = 16 << 10;

/// How long an HTTP/1.1 client may take to send a request's head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a handler may take to read a request's body.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `handler` on `listener` until the process ends: one task per connection.
pub async fn serve<H, Fut>(
    listener: TcpListener,
    mode: ListenerMode,
    limits: HttpLimits,
    handler: H,
) where
    H: Fn(ConnInfo, Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let mut incoming = hub_tls::server::incoming(
        listener,
        mode,
        hub_tls::server::Limits {
            max_connections: limits.connections.admitted,
            // Nodes call no HTTP listener; a scraping node is an ordinary caller.
            max_peer_connections: limits.connections.admitted,
            max_unadmitted: limits.connections.unadmitted,
            max_unadmitted_per_source: limits.connections.unadmitted_per_source,
            ..Default::default()
        },
    );
    while let Some(conn) = incoming.next().await {
        let Ok(conn) = conn else { continue };
        let info = conn.info().clone();
        let handler = handler.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let answer = handler(info.clone(), req);
                async move { Ok::<_, std::convert::Infallible>(answer.await) }
            });
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .max_buf_size(MAX_HEADER_BYTES)
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            builder
                .http2()
                .max_header_list_size(MAX_HEADER_BYTES as u32)
                .max_concurrent_streams(limits.max_streams);
            let served = builder.serve_connection(TokioIo::new(conn), service);
            tokio::pin!(served);
            tokio::select! {
                _ = served.as_mut() => {}
                _ = tokio::time::sleep(limits.lifetime) => {
                    served.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(limits.grace, served).await;
                }
            }
        });
    }
}

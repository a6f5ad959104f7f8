//! The connection loop of the node's HTTP listeners (metrics, dashboard): HTTPS with the
//! node's certificate speaking HTTP/1.1 or HTTP/2 by ALPN, or plain HTTP on an insecure
//! (loopback) node. Each connection is bounded: a small header block, a few streams at once,
//! the listener's connection cap and handshake deadline, and a lifetime after which it is shut
//! down gracefully (a request in flight may finish within the grace period; the client
//! reconnects for the next).

use std::future::Future;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio_stream::StreamExt;

use hub_tls::server::{ConnInfo, ListenerMode};

/// The bounds of one listener.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Most connections open at once; more are closed at once.
    pub max_connections: usize,
    /// Longest time one connection is kept.
    pub lifetime: Duration,
    /// How long a request in flight at the end of a connection's lifetime may still take.
    pub grace: Duration,
    /// Most HTTP/2 streams in flight on one connection.
    pub max_streams: u32,
}

/// The largest request header block, either protocol.
const MAX_HEADER_BYTES: usize = 16 << 10;

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
            max_connections: limits.max_connections,
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
            builder.http1().max_buf_size(MAX_HEADER_BYTES);
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

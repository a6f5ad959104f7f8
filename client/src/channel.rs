//! The hub's transport settings for a gRPC channel, shared by the failover client and the
//! nodes' channels to each other.

use std::time::Duration;

use tonic::transport::Endpoint;

/// How long dialling a node (TCP and TLS handshake) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// The hub's transport settings for a client endpoint: a short connect deadline, no Nagle
/// delay, and HTTP/2 keep-alives that notice a silent peer within ten seconds.
pub fn configure(endpoint: Endpoint) -> Endpoint {
    endpoint
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(5))
        .keep_alive_timeout(Duration::from_secs(5))
        .keep_alive_while_idle(true)
}

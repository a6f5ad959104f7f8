//! One reusable gRPC channel per peer address.
//!
//! Channels are created lazily and kept: tonic reconnects a channel by itself after the peer
//! comes back, so Raft heartbeats, appends and forwarded writes share one HTTP/2 connection.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

/// Largest gRPC message a hub node accepts or sends.
pub const MAX_MESSAGE_BYTES: usize = raft_store::codec::MAX_MESSAGE_BYTES;

/// The pool of channels to other nodes.
#[derive(Default)]
pub struct PeerPool {
    channels: Mutex<HashMap<String, Channel>>,
}

impl PeerPool {
    /// The channel to `addr` (`host:port`), created on first use.
    pub fn channel(&self, addr: &str) -> Result<Channel, tonic::transport::Error> {
        let mut map = self.channels.lock().expect("peer pool lock poisoned");
        if let Some(c) = map.get(addr) {
            return Ok(c.clone());
        }
        let channel = endpoint(addr)?.connect_lazy();
        map.insert(addr.to_string(), channel.clone());
        Ok(channel)
    }
}

/// A client endpoint for `addr` with the hub's transport settings.
pub fn endpoint(addr: &str) -> Result<Endpoint, tonic::transport::Error> {
    Ok(Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_millis(500))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(5))
        .keep_alive_timeout(Duration::from_secs(5))
        .keep_alive_while_idle(true))
}

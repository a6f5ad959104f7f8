//! One reusable gRPC channel per peer address.
//!
//! Channels are created lazily and kept: tonic reconnects a channel by itself after the peer
//! comes back, so Raft heartbeats, appends and forwarded writes share one HTTP/2 connection.

use std::collections::HashMap;
use std::sync::Mutex;

use hub_client::channel::configure;
use hub_tls::client::Connector;
use tonic::transport::Channel;

/// Largest gRPC message a hub node accepts or sends.
pub const MAX_MESSAGE_BYTES: usize = hub_proto::MAX_MESSAGE_BYTES;

/// The pool of channels to other nodes.
pub struct PeerPool {
    connector: Connector,
    channels: Mutex<HashMap<String, Channel>>,
}

impl PeerPool {
    /// A pool dialling through `connector` (the node's own certificate over TLS).
    pub fn new(connector: Connector) -> Self {
        Self {
            connector,
            channels: Mutex::new(HashMap::new()),
        }
    }

    /// The channel to `addr` (`host:port`), created on first use.
    pub fn channel(&self, addr: &str) -> Result<Channel, tonic::transport::Error> {
        let mut map = self.channels.lock().expect("peer pool lock poisoned");
        if let Some(c) = map.get(addr) {
            return Ok(c.clone());
        }
        let channel = self.connector.channel_lazy(addr, configure)?;
        map.insert(addr.to_string(), channel.clone());
        Ok(channel)
    }
}

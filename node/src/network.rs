//! The Raft transport, client side: openraft's `RaftNetworkV2` over tonic.
//!
//! Every message is the openraft type encoded with [`raft_store::codec`] inside a protobuf
//! frame that also names the cluster. Snapshots stream in chunks of [`SNAPSHOT_CHUNK_BYTES`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hub_proto::raft_client::RaftClient;
use hub_proto::{RaftReply, RaftRequest, SnapshotChunk};
use openraft::errors::{
    NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::RaftNetworkV2;
use raft_store::codec;
use raft_store::{Node, NodeId, Snapshot, SnapshotData, TypeConfig, Vote};
use tonic::transport::Channel;

use crate::cluster_clock::ClusterClock;
use crate::peers::{PeerPool, MAX_MESSAGE_BYTES};

/// Size of one snapshot chunk on the wire.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;

/// Creates a [`PeerClient`] per target node.
pub struct NetworkFactory {
    /// This node, which never dials itself.
    pub self_id: NodeId,
    /// The cluster every message is stamped with.
    pub cluster_id: Arc<str>,
    /// Shared channels.
    pub peers: Arc<PeerPool>,
    /// Where the peers' clock readings go.
    pub clock: Arc<ClusterClock>,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Self::Network {
        PeerClient {
            target,
            self_id: self.self_id,
            addr: node.addr.clone(),
            cluster_id: self.cluster_id.clone(),
            peers: self.peers.clone(),
            clock: self.clock.clone(),
        }
    }
}

/// The connection to one peer.
pub struct PeerClient {
    target: NodeId,
    self_id: NodeId,
    addr: String,
    cluster_id: Arc<str>,
    peers: Arc<PeerPool>,
    clock: Arc<ClusterClock>,
}

/// Transport failures, before they are mapped to openraft's error kinds.
enum CallError {
    /// The peer could not be reached (connection refused, timeout, reset): back off.
    Unreachable(String),
    /// Anything else on the wire: retry.
    Network(String),
}

impl CallError {
    fn into_rpc(self) -> RPCError<TypeConfig> {
        match self {
            CallError::Unreachable(m) => RPCError::Unreachable(Unreachable::from_string(m)),
            CallError::Network(m) => RPCError::Network(NetworkError::from_string(m)),
        }
    }

    fn into_streaming(self) -> StreamingError<TypeConfig> {
        match self {
            CallError::Unreachable(m) => StreamingError::Unreachable(Unreachable::from_string(m)),
            CallError::Network(m) => StreamingError::Network(NetworkError::from_string(m)),
        }
    }
}

fn status_error(s: tonic::Status) -> CallError {
    use tonic::Code;
    match s.code() {
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => {
            CallError::Unreachable(format!("{}: {}", s.code(), s.message()))
        }
        _ => CallError::Network(format!("{}: {}", s.code(), s.message())),
    }
}

impl PeerClient {
    fn client(&self) -> Result<RaftClient<Channel>, CallError> {
        if self.target == self.self_id {
            return Err(CallError::Unreachable("refusing to dial myself".into()));
        }
        let channel = self
            .peers
            .channel(&self.addr)
            .map_err(|e| CallError::Unreachable(format!("bad address {}: {e}", self.addr)))?;
        Ok(RaftClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    fn request<T: serde::Serialize>(&self, body: &T, ttl: Duration) -> tonic::Request<RaftRequest> {
        let mut req = tonic::Request::new(RaftRequest {
            cluster_id: self.cluster_id.to_string(),
            payload: codec::encode(body),
        });
        req.set_timeout(ttl);
        #[cfg(feature = "chaos-faults")]
        crate::fault_layer::stamp(&mut req);
        req
    }

    /// Decodes a reply carrying `Result<Resp, RaftError>`.
    fn decode<Resp: serde::de::DeserializeOwned>(
        &self,
        reply: RaftReply,
    ) -> Result<Resp, CallError> {
        if !reply.refused.is_empty() {
            return Err(CallError::Unreachable(format!(
                "node {} refused: {}",
                self.target, reply.refused
            )));
        }
        let result: Result<Resp, RaftError<TypeConfig>> =
            codec::decode_bounded(&reply.payload, codec::Limit::Message).map_err(|e| {
                CallError::Network(format!("bad reply from node {}: {e}", self.target))
            })?;
        // The only remote RaftError here is Fatal: that node is shutting down or broken.
        result.map_err(|e| CallError::Unreachable(format!("node {}: {e}", self.target)))
    }

    async fn call<Req, Resp, F, Fut>(
        &self,
        body: &Req,
        ttl: Duration,
        f: F,
    ) -> Result<Resp, CallError>
    where
        Req: serde::Serialize,
        Resp: serde::de::DeserializeOwned,
        F: FnOnce(RaftClient<Channel>, tonic::Request<RaftRequest>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<RaftReply>, tonic::Status>>,
    {
        let client = self.client()?;
        #[cfg(feature = "chaos-faults")]
        if crate::fault_layer::is_cut(self.target) {
            crate::fault_layer::lose(ttl).await;
            return Err(CallError::Unreachable(format!(
                "node {} timed out after {ttl:?}",
                self.target
            )));
        }
        let req = self.request(body, ttl);
        let sent = std::time::Instant::now();
        let reply = tokio::time::timeout(ttl, f(client, req))
            .await
            .map_err(|_| {
                CallError::Unreachable(format!("node {} timed out after {ttl:?}", self.target))
            })?
            .map_err(status_error)?
            .into_inner();
        if reply.refused.is_empty() {
            self.clock
                .observe(self.target, reply.clock_ms, sent, std::time::Instant::now());
        }
        self.decode(reply)
    }
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(&rpc, option.hard_ttl(), |mut c, r| async move {
            c.append_entries(r).await
        })
        .await
        .map_err(CallError::into_rpc)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(&rpc, option.hard_ttl(), |mut c, r| async move {
            c.vote(r).await
        })
        .await
        .map_err(CallError::into_rpc)
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(&rpc, option.hard_ttl(), |mut c, r| async move {
            c.pre_vote(r).await
        })
        .await
        .map_err(CallError::into_rpc)
    }

    async fn transfer_leader(
        &mut self,
        rpc: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(&rpc, option.hard_ttl(), |mut c, r| async move {
            c.transfer_leader(r).await
        })
        .await
        .map_err(CallError::into_rpc)
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + openraft::OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let mut client = self.client().map_err(CallError::into_streaming)?;
        let header = codec::encode(&(vote, snapshot.meta.clone()));
        let data = snapshot.snapshot.into_inner();
        let total = data.len();
        let mut chunks = Vec::with_capacity(total / SNAPSHOT_CHUNK_BYTES + 1);
        let mut first = true;
        let mut rest = data.as_slice();
        while first || !rest.is_empty() {
            let n = rest.len().min(SNAPSHOT_CHUNK_BYTES);
            chunks.push(SnapshotChunk {
                cluster_id: self.cluster_id.to_string(),
                header: if first { header.clone() } else { Vec::new() },
                data: rest[..n].to_vec(),
                total_bytes: if first { total as u64 } else { 0 },
            });
            rest = &rest[n..];
            first = false;
        }
        let ttl = option.hard_ttl();
        let mut req = tonic::Request::new(tokio_stream::iter(chunks));
        req.set_timeout(ttl);
        #[cfg(feature = "chaos-faults")]
        crate::fault_layer::stamp(&mut req);
        let target = self.target;
        tracing::info!(target, bytes = total, "sending snapshot");
        let send = async move {
            #[cfg(feature = "chaos-faults")]
            if crate::fault_layer::is_cut(target) {
                crate::fault_layer::lose(ttl).await;
                return Err(CallError::Unreachable(format!(
                    "snapshot to node {target} timed out after {ttl:?}"
                )));
            }
            tokio::time::timeout(ttl, client.install_snapshot(req))
                .await
                .map_err(|_| {
                    CallError::Unreachable(format!(
                        "snapshot to node {target} timed out after {ttl:?}"
                    ))
                })?
                .map_err(status_error)
        };
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            reply = send => {
                let reply = reply.map_err(CallError::into_streaming)?;
                self.decode(reply.into_inner()).map_err(CallError::into_streaming)
            }
        }
    }
}

//! The Raft transport, client side: openraft's `RaftNetworkV2` over tonic.
//!
//! Every message is the openraft type encoded with [`raft_store::codec`] inside a protobuf
//! frame that also names the cluster. Snapshots stream in chunks of [`SNAPSHOT_CHUNK_BYTES`].
//!
//! Failures are classified for openraft's replication backoff: a peer that refused or reset
//! the connection is *unreachable* and the stream backs off; a call that ran out of time is a
//! *timeout*, retried at once, since the peer is most likely alive and busy. Treating a busy
//! peer as gone paused its replication stream for a whole backoff interval, and when that
//! peer was the one the quorum needed, every write waited with it (the rolling-restart
//! stalls of 300–400 ms in docs/BENCHMARKS.md).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hub_proto::raft_client::RaftClient;
use hub_proto::{RaftReply, RaftRequest, SnapshotChunk};
use openraft::errors::Timeout;
use openraft::errors::{
    NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetworkFactory};
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

/// The slowest a node is expected to move a snapshot through one step of a catch-up (the
/// transfer, the receiver's check, the install): a deadline grows by a second per this many
/// bytes, so a large state's snapshot can finish (2.8 GB at 100,000 entities with history;
/// docs/BENCHMARKS.md) while a stalled one of a small state is still cut off soon.
pub const SNAPSHOT_MIN_BYTES_PER_SEC: u64 = 16 << 20;

/// The time one step of a catch-up may take for `bytes` of snapshot, beyond its fixed part
/// ([`SNAPSHOT_MIN_BYTES_PER_SEC`]).
pub fn snapshot_allowance(bytes: u64) -> Duration {
    Duration::from_secs(bytes / SNAPSHOT_MIN_BYTES_PER_SEC)
}

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
    /// The least time an `AppendEntries` call gets (openraft offers one heartbeat interval).
    pub append_ttl_floor: Duration,
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
            append_ttl_floor: self.append_ttl_floor,
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
    append_ttl_floor: Duration,
}

/// Transport failures, before they are mapped to openraft's error kinds.
enum CallError {
    /// The peer could not be reached (connection refused or reset, bad address): back off.
    Unreachable(String),
    /// The call ran out of time: the peer is probably alive and busy, so retry at once
    /// (openraft backs off only after many of these in a row).
    TimedOut(Timeout<TypeConfig>),
    /// Anything else on the wire: retry.
    Network(String),
}

impl CallError {
    fn into_rpc(self) -> RPCError<TypeConfig> {
        match self {
            CallError::Unreachable(m) => RPCError::Unreachable(Unreachable::from_string(m)),
            CallError::TimedOut(t) => RPCError::Timeout(t),
            CallError::Network(m) => RPCError::Network(NetworkError::from_string(m)),
        }
    }

    fn into_streaming(self) -> StreamingError<TypeConfig> {
        match self {
            CallError::Unreachable(m) => StreamingError::Unreachable(Unreachable::from_string(m)),
            CallError::TimedOut(t) => StreamingError::Timeout(t),
            CallError::Network(m) => StreamingError::Network(NetworkError::from_string(m)),
        }
    }
}

/// What a failed call's status says about the peer; `timed_out` builds the timeout error.
fn status_error(s: tonic::Status, timed_out: impl FnOnce() -> CallError) -> CallError {
    use tonic::Code;
    match s.code() {
        // tonic reports its own deadline (`set_timeout`) as `Cancelled`, the server's as
        // `DeadlineExceeded`.
        Code::DeadlineExceeded | Code::Cancelled => timed_out(),
        Code::Unavailable | Code::Unknown => {
            CallError::Unreachable(format!("{}: {}", s.code(), s.message()))
        }
        _ => CallError::Network(format!("{}: {}", s.code(), s.message())),
    }
}

impl PeerClient {
    /// The timeout error for an `action` call to this peer that got `ttl`.
    fn timed_out(&self, action: RPCTypes, ttl: Duration) -> CallError {
        CallError::TimedOut(Timeout {
            action,
            id: self.self_id,
            target: self.target,
            timeout: ttl,
        })
    }

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
        action: RPCTypes,
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
            // A lost message is a call that never gets its answer.
            crate::fault_layer::lose(ttl).await;
            return Err(self.timed_out(action, ttl));
        }
        let req = self.request(body, ttl);
        let sent = std::time::Instant::now();
        let reply = tokio::time::timeout(ttl, f(client, req))
            .await
            .map_err(|_| self.timed_out(action, ttl))?
            .map_err(|s| status_error(s, || self.timed_out(action, ttl)))?
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
        // One heartbeat interval is too little for a batch of entries to a peer that is busy
        // (catching up a restarted node, a burst of agents): give it the floor.
        let ttl = option.hard_ttl().max(self.append_ttl_floor);
        self.call(RPCTypes::AppendEntries, &rpc, ttl, |mut c, r| async move {
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
        self.call(
            RPCTypes::Vote,
            &rpc,
            option.hard_ttl(),
            |mut c, r| async move { c.vote(r).await },
        )
        .await
        .map_err(CallError::into_rpc)
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(
            RPCTypes::Vote,
            &rpc,
            option.hard_ttl(),
            |mut c, r| async move { c.pre_vote(r).await },
        )
        .await
        .map_err(CallError::into_rpc)
    }

    async fn transfer_leader(
        &mut self,
        rpc: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(
            RPCTypes::TransferLeader,
            &rpc,
            option.hard_ttl(),
            |mut c, r| async move { c.transfer_leader(r).await },
        )
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
        let total = snapshot.snapshot.len();
        let file = snapshot
            .snapshot
            .into_file()
            .map_err(|e| CallError::Network(format!("opening the snapshot file: {e}")))
            .map_err(CallError::into_streaming)?;
        let chunks = file_chunks(file, total, self.cluster_id.to_string(), header);
        // openraft's `install_snapshot_timeout`, plus the transfer, the receiver's check and
        // its install, each at the slowest expected rate: a fixed timeout cut every catch-up
        // of a large state off (and the leader then sent it again, forever).
        let ttl = option.hard_ttl() + 3 * snapshot_allowance(total);
        let mut req = tonic::Request::new(chunks);
        req.set_timeout(ttl);
        #[cfg(feature = "chaos-faults")]
        crate::fault_layer::stamp(&mut req);
        let target = self.target;
        tracing::info!(target, bytes = total, "sending snapshot");
        let timed_out = self.timed_out(RPCTypes::InstallSnapshot, ttl);
        let send = async move {
            #[cfg(feature = "chaos-faults")]
            if crate::fault_layer::is_cut(target) {
                crate::fault_layer::lose(ttl).await;
                return Err(timed_out);
            }
            match tokio::time::timeout(ttl, client.install_snapshot(req)).await {
                Err(_) => Err(timed_out),
                Ok(reply) => reply.map_err(|s| status_error(s, || timed_out)),
            }
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

/// Chunks left in flight between the file's reader and the stream being sent.
const SNAPSHOT_CHUNKS_AHEAD: usize = 4;

/// The snapshot file `file` (of `total` bytes) as a stream of chunks of at most
/// [`SNAPSHOT_CHUNK_BYTES`], read on a blocking thread at most [`SNAPSHOT_CHUNKS_AHEAD`]
/// chunks ahead of the network. The first chunk names the cluster and carries `header` and
/// the total. A read that fails ends the stream early, which the receiver refuses as shorter
/// than declared (the leader then retries).
fn file_chunks(
    mut file: std::fs::File,
    total: u64,
    cluster_id: String,
    header: Vec<u8>,
) -> tokio_stream::wrappers::ReceiverStream<SnapshotChunk> {
    use std::io::Read;
    let (tx, rx) = tokio::sync::mpsc::channel(SNAPSHOT_CHUNKS_AHEAD);
    tokio::task::spawn_blocking(move || {
        let mut first = Some(header);
        let mut sent = 0u64;
        loop {
            let mut data = vec![0u8; SNAPSHOT_CHUNK_BYTES];
            let mut filled = 0;
            while filled < data.len() {
                match file.read(&mut data[filled..]) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        tracing::warn!(error = %e, sent, "reading the snapshot file to send");
                        return;
                    }
                }
            }
            data.truncate(filled);
            let header = first.take();
            let last = filled == 0 || sent + filled as u64 >= total;
            if filled == 0 && header.is_none() {
                return;
            }
            sent += filled as u64;
            let chunk = SnapshotChunk {
                cluster_id: cluster_id.clone(),
                total_bytes: if header.is_some() { total } else { 0 },
                header: header.unwrap_or_default(),
                data,
            };
            // The request was dropped (sent, cancelled or timed out): stop reading.
            if tx.blocking_send(chunk).is_err() || last {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed_out() -> CallError {
        CallError::TimedOut(Timeout {
            action: RPCTypes::AppendEntries,
            id: 1,
            target: 2,
            timeout: Duration::from_millis(300),
        })
    }

    /// What openraft's replication does with each failure: it backs off at once only for an
    /// unreachable peer; a timeout or a network error is retried without delay.
    #[test]
    fn a_slow_peer_is_retried_at_once_and_a_gone_one_backs_off() {
        let rpc = |s: tonic::Status| status_error(s, timed_out).into_rpc();
        // tonic's own deadline and the server's: the peer is alive.
        assert!(matches!(
            rpc(tonic::Status::cancelled("Timeout expired")),
            RPCError::Timeout(t) if t.target == 2 && t.timeout == Duration::from_millis(300)
        ));
        assert!(matches!(
            rpc(tonic::Status::deadline_exceeded("late")),
            RPCError::Timeout(_)
        ));
        // Refused, reset, or a broken handshake: the peer is gone for now.
        assert!(matches!(
            rpc(tonic::Status::unavailable("Connection refused")),
            RPCError::Unreachable(_)
        ));
        assert!(matches!(
            rpc(tonic::Status::unknown("transport error")),
            RPCError::Unreachable(_)
        ));
        assert!(matches!(
            rpc(tonic::Status::invalid_argument("bad frame")),
            RPCError::Network(_)
        ));
        assert!(matches!(
            timed_out().into_streaming(),
            StreamingError::Timeout(_)
        ));
    }

    /// The file goes out whole, in order, in chunks of at most the chunk size; only the
    /// first names the header and the total.
    #[tokio::test]
    async fn a_snapshot_file_streams_in_chunks_with_the_header_first() {
        use tokio_stream::StreamExt;
        for len in [0, 1, SNAPSHOT_CHUNK_BYTES, 2 * SNAPSHOT_CHUNK_BYTES + 17] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.snap");
            let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            std::fs::write(&path, &bytes).unwrap();
            let file = std::fs::File::open(&path).unwrap();
            let chunks: Vec<SnapshotChunk> =
                file_chunks(file, len as u64, "c".into(), vec![1, 2, 3])
                    .collect()
                    .await;
            assert_eq!(
                chunks.len(),
                len.div_ceil(SNAPSHOT_CHUNK_BYTES).max(1),
                "{len}"
            );
            assert_eq!(chunks[0].header, vec![1, 2, 3]);
            assert_eq!(chunks[0].total_bytes, len as u64);
            for c in &chunks[1..] {
                assert!(c.header.is_empty() && c.total_bytes == 0);
            }
            assert!(chunks
                .iter()
                .all(|c| c.cluster_id == "c" && c.data.len() <= SNAPSHOT_CHUNK_BYTES));
            let sent: Vec<u8> = chunks.into_iter().flat_map(|c| c.data).collect();
            assert_eq!(sent, bytes, "{len}");
        }
    }
}

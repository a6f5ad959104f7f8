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
//!
//! openraft waits out its back-off when it is asked for the next request of a session, so a
//! session takes its first request before it dials: a peer whose port refuses connections
//! fails the call before tonic asks for any request, and without this the next session
//! dialled again at once (a leader with a dead follower spun at 25,000 sessions a second).
//! The back-off ([`retry_delays`]) doubles from [`BACKOFF_FIRST`] to [`BACKOFF_CAP`] and starts
//! over after an answer. Every call's outcome goes to [`PeerHealth`], which logs a peer's
//! trouble once per change of state.

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
use crate::peer_health::{PeerHealth, Trouble};
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

/// The first wait before calling a peer again after it failed.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(50);

/// The longest wait between calls to a peer that keeps failing: a restarted follower is
/// caught up at most this long after it listens again.
pub const BACKOFF_CAP: Duration = Duration::from_secs(1);

/// The waits between calls to a peer that keeps failing: [`BACKOFF_FIRST`], doubling, capped
/// at [`BACKOFF_CAP`] (openraft starts a new sequence after an answer).
pub fn retry_delays() -> impl Iterator<Item = Duration> + Send + 'static {
    std::iter::successors(Some(BACKOFF_FIRST), |d| Some((*d * 2).min(BACKOFF_CAP)))
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
    /// Where every call's outcome goes (and the log learns of a peer's trouble).
    pub health: Arc<PeerHealth>,
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
            health: self.health.clone(),
            unary_only: false,
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
    health: Arc<PeerHealth>,
    /// The peer has no `StreamAppend` (an older release): replicate with `AppendEntries`.
    unary_only: bool,
}

/// Transport failures, before they are mapped to openraft's error kinds.
#[derive(Clone)]
enum CallError {
    /// The peer could not be reached (connection refused or reset, bad address): back off.
    Unreachable(String),
    /// The call ran out of time: the peer is probably alive and busy, so retry at once
    /// (openraft backs off only after many of these in a row).
    TimedOut(Timeout<TypeConfig>),
    /// Anything else on the wire: retry.
    Network(String),
    /// The peer does not serve the call (an older release: unknown to its router, or to its
    /// authorization rules): use another.
    Unsupported(String),
}

impl CallError {
    fn into_rpc(self) -> RPCError<TypeConfig> {
        match self {
            CallError::Unreachable(m) => RPCError::Unreachable(Unreachable::from_string(m)),
            CallError::TimedOut(t) => RPCError::Timeout(t),
            CallError::Network(m) | CallError::Unsupported(m) => {
                RPCError::Network(NetworkError::from_string(m))
            }
        }
    }

    /// What the failure says about the peer (`None`: nothing, it is an older release).
    fn trouble(&self) -> Option<Trouble> {
        match self {
            CallError::Unreachable(_) => Some(Trouble::Unreachable),
            CallError::TimedOut(_) => Some(Trouble::Silent),
            CallError::Network(_) => Some(Trouble::Erring),
            CallError::Unsupported(_) => None,
        }
    }

    /// The failure in words, for the log.
    fn message(&self) -> String {
        match self {
            CallError::Unreachable(m) | CallError::Network(m) | CallError::Unsupported(m) => {
                m.clone()
            }
            CallError::TimedOut(t) => t.to_string(),
        }
    }

    fn into_streaming(self) -> StreamingError<TypeConfig> {
        match self {
            CallError::Unreachable(m) => StreamingError::Unreachable(Unreachable::from_string(m)),
            CallError::TimedOut(t) => StreamingError::Timeout(t),
            CallError::Network(m) | CallError::Unsupported(m) => {
                StreamingError::Network(NetworkError::from_string(m))
            }
        }
    }
}

/// The payload of `reply` from node `target`, or why there is none: the peer refused the
/// message (another cluster), or the bytes do not decode.
fn decode_reply<T: serde::de::DeserializeOwned>(
    target: NodeId,
    reply: &RaftReply,
) -> Result<T, CallError> {
    if !reply.refused.is_empty() {
        return Err(CallError::Unreachable(format!(
            "node {target} refused: {}",
            reply.refused
        )));
    }
    codec::decode_bounded(&reply.payload, codec::Limit::Message)
        .map_err(|e| CallError::Network(format!("bad reply from node {target}: {e}")))
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

/// Tells `health` how a call to `peer` at `addr` ended.
fn report<T>(health: &PeerHealth, peer: NodeId, addr: &str, outcome: &Result<T, CallError>) {
    match outcome {
        Ok(_) => health.answered(peer, addr),
        Err(e) => {
            if let Some(trouble) = e.trouble() {
                health.failed(peer, addr, trouble, &e.message());
            }
        }
    }
}

impl PeerClient {
    /// Tells the peers' health how a call to this peer ended.
    fn report<T>(&self, outcome: &Result<T, CallError>) {
        report(&self.health, self.target, &self.addr, outcome);
    }

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
        let result: Result<Resp, RaftError<TypeConfig>> = decode_reply(self.target, &reply)?;
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
        let outcome = async {
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
        .await;
        self.report(&outcome);
        outcome
    }
}

/// The send times of the requests of a replication stream that have no reply yet, oldest
/// first (replies come in order).
type Unanswered = Arc<std::sync::Mutex<std::collections::VecDeque<std::time::Instant>>>;

impl PeerClient {
    /// Opens a `StreamAppend` call carrying `input` and returns its replies as openraft's
    /// stream results. `ttl` bounds the call's opening and each request's wait for its reply;
    /// an idle stream (every request answered) has no deadline.
    async fn open_stream<S>(&self, input: S, ttl: Duration) -> Result<StreamReplies, CallError>
    where
        S: futures::Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
    {
        use futures::StreamExt;
        let mut client = self.client()?;
        #[cfg(feature = "chaos-faults")]
        if crate::fault_layer::is_cut(self.target) {
            crate::fault_layer::lose(ttl).await;
            return Err(self.timed_out(RPCTypes::AppendEntries, ttl));
        }
        let unanswered: Unanswered = Arc::default();
        let outbound = {
            let unanswered = unanswered.clone();
            let cluster_id = self.cluster_id.to_string();
            #[cfg(feature = "chaos-faults")]
            let target = self.target;
            input.then(move |rpc| {
                let unanswered = unanswered.clone();
                let msg = RaftRequest {
                    cluster_id: cluster_id.clone(),
                    payload: codec::encode(&rpc),
                };
                async move {
                    unanswered
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push_back(std::time::Instant::now());
                    // A request to a peer cut off from this node is lost, and so is every
                    // one after it: the stream stalls, and this request's reply deadline
                    // (counted from now) fails it; the next session finds the cut at once.
                    #[cfg(feature = "chaos-faults")]
                    if crate::fault_layer::is_cut(target) {
                        futures::future::pending::<()>().await;
                    }
                    msg
                }
            })
        };
        #[allow(unused_mut)]
        let mut req = tonic::Request::new(outbound);
        #[cfg(feature = "chaos-faults")]
        crate::fault_layer::stamp(&mut req);
        let replies = tokio::time::timeout(ttl, client.stream_append(req))
            .await
            .map_err(|_| self.timed_out(RPCTypes::AppendEntries, ttl))?
            .map_err(|s| match s.code() {
                tonic::Code::Unimplemented | tonic::Code::PermissionDenied => {
                    CallError::Unsupported(format!("{}: {}", s.code(), s.message()))
                }
                _ => status_error(s, || self.timed_out(RPCTypes::AppendEntries, ttl)),
            })?
            .into_inner();
        let reader = ReplyReader {
            replies,
            unanswered,
            ttl,
            target: self.target,
            timeout: self.timed_out(RPCTypes::AppendEntries, ttl),
            clock: self.clock.clone(),
            health: self.health.clone(),
            addr: self.addr.clone(),
        };
        Ok(futures::stream::unfold(Some(reader), |state| async move {
            let mut reader = state?;
            let item = reader.next().await?;
            report(&reader.health, reader.target, &reader.addr, &item);
            // The stream ends after an error or a refused request, as openraft expects.
            let more = matches!(item, Ok(Ok(_)));
            Some((item.map_err(CallError::into_rpc), more.then_some(reader)))
        })
        .boxed())
    }
}

/// The replies of a replication stream, as openraft takes them.
type StreamReplies = openraft::base::BoxStream<
    'static,
    Result<openraft::raft::StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>,
>;

/// Reads a replication stream's replies in order, with a deadline for each request.
struct ReplyReader {
    replies: tonic::Streaming<RaftReply>,
    unanswered: Unanswered,
    ttl: Duration,
    target: NodeId,
    timeout: CallError,
    clock: Arc<ClusterClock>,
    health: Arc<PeerHealth>,
    addr: String,
}

impl ReplyReader {
    /// The next request's result; `None` when the follower ended the stream.
    async fn next(
        &mut self,
    ) -> Option<Result<openraft::raft::StreamAppendResult<TypeConfig>, CallError>> {
        loop {
            let oldest = self
                .unanswered
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .front()
                .copied();
            // With nothing unanswered there is nothing to time out: look again after a
            // while, since a request may have gone out meanwhile.
            let deadline = oldest.unwrap_or_else(std::time::Instant::now) + self.ttl;
            let reply = match tokio::time::timeout_at(deadline.into(), self.replies.message()).await
            {
                Err(_) if oldest.is_some() => return Some(Err(self.timeout.clone())),
                Err(_) => continue,
                Ok(Err(status)) => return Some(Err(status_error(status, || self.timeout.clone()))),
                Ok(Ok(None)) => return None,
                Ok(Ok(Some(reply))) => reply,
            };
            let sent = self
                .unanswered
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front();
            if let (Some(sent), true) = (sent, reply.refused.is_empty()) {
                self.clock
                    .observe(self.target, reply.clock_ms, sent, std::time::Instant::now());
            }
            return Some(decode_reply(self.target, &reply));
        }
    }
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = SnapshotData;

    /// Replication pipelined on one `StreamAppend` call: a request goes out as soon as
    /// openraft has it, without waiting for the reply to the one before (the follower appends
    /// them in order and answers each once flushed). A peer from before the call (it answers
    /// `Unimplemented`) is sent one `AppendEntries` call at a time instead, from then on.
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> openraft::base::BoxFuture<
        's,
        Result<
            openraft::base::BoxStream<
                's,
                Result<openraft::raft::StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>,
            >,
            RPCError<TypeConfig>,
        >,
    >
    where
        S: futures::Stream<Item = AppendEntriesRequest<TypeConfig>>
            + openraft::OptionalSend
            + Unpin
            + 'static,
    {
        Box::pin(async move {
            use futures::StreamExt;
            let mut input = input;
            // openraft waits out its back-off when asked for a request: take the first before
            // dialling, or a peer that refuses at once is dialled again at once.
            let Some(first) = input.next().await else {
                return Ok(futures::stream::empty().boxed());
            };
            let input = futures::stream::once(std::future::ready(first)).chain(input);
            if self.unary_only {
                return openraft::network::stream_append_sequential(self, input, option).await;
            }
            // One heartbeat interval is too little for a batch of entries to a peer that is
            // busy (catching up a restarted node, a burst of agents): give it the floor.
            let ttl = option.soft_ttl().max(self.append_ttl_floor);
            let opened = self.open_stream(input, ttl).await;
            if let Err(e) = &opened {
                report(
                    &self.health,
                    self.target,
                    &self.addr,
                    &Err::<(), _>(e.clone()),
                );
            }
            match opened {
                Ok(replies) => Ok(replies),
                Err(CallError::Unsupported(m)) => {
                    tracing::info!(peer = self.target, reason = %m, "the peer does not take StreamAppend; replicating to it one AppendEntries call at a time");
                    // This session's requests went with the failed call; openraft opens
                    // the next session at once, and that one goes by AppendEntries.
                    self.unary_only = true;
                    Err(CallError::Unsupported(m).into_rpc())
                }
                Err(e) => Err(e.into_rpc()),
            }
        })
    }

    /// After a failure, openraft waits these between a peer's sessions ([`retry_delays`]).
    fn backoff(&self) -> Option<openraft::network::Backoff> {
        Some(openraft::network::Backoff::new(retry_delays()))
    }

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
                let outcome = reply.and_then(|r| self.decode(r.into_inner()));
                self.report(&outcome);
                outcome.map_err(CallError::into_streaming)
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

    /// What a fake follower does with a `StreamAppend` call.
    #[derive(Clone, Copy)]
    enum Follower {
        /// Answers every request in order with its position (1, 2, …) as the flushed index,
        /// the first only once the second has arrived.
        Answers,
        /// Reads the requests and never answers.
        Silent,
        /// Does not serve the call (an older release).
        Unimplemented,
        /// Refuses the first request as another cluster's.
        OtherCluster,
    }

    /// A follower speaking the Raft service over plaintext loopback, counting the
    /// `AppendEntries` calls it gets.
    struct FakeFollower {
        mode: Follower,
        unary_calls: Arc<std::sync::atomic::AtomicUsize>,
    }

    fn flushed(index: u64) -> openraft::raft::StreamAppendResult<TypeConfig> {
        use openraft::vote::RaftLeaderId;
        Ok(Some(openraft::LogId::new(
            openraft::vote::leader_id_adv::CommittedLeaderId::new(1, 1),
            index,
        )))
    }

    #[tonic::async_trait]
    impl hub_proto::raft_server::Raft for FakeFollower {
        type StreamAppendStream = crate::raft_service::StreamAppendReplies;

        async fn stream_append(
            &self,
            req: tonic::Request<tonic::Streaming<RaftRequest>>,
        ) -> Result<tonic::Response<Self::StreamAppendStream>, tonic::Status> {
            use futures::StreamExt;
            let mode = self.mode;
            if let Follower::Unimplemented = mode {
                return Err(tonic::Status::unimplemented("no StreamAppend here"));
            }
            let mut seen = 0u64;
            let replies = req.into_inner().flat_map(move |msg| {
                seen += 1;
                let answer = |i| {
                    Ok(RaftReply {
                        payload: codec::encode(&flushed(i)),
                        refused: String::new(),
                        clock_ms: crate::cluster_clock::local_ms(),
                    })
                };
                let replies = match (mode, msg) {
                    (_, Err(s)) => vec![Err(s)],
                    // The first reply waits for the second request: a leader that waits
                    // for each reply before its next request would never get it.
                    (Follower::Answers, Ok(_)) if seen == 1 => vec![],
                    (Follower::Answers, Ok(_)) if seen == 2 => vec![answer(1), answer(2)],
                    (Follower::Answers, Ok(_)) => vec![answer(seen)],
                    (Follower::OtherCluster, Ok(m)) => vec![Ok(RaftReply {
                        payload: Vec::new(),
                        refused: format!("not {:?}", m.cluster_id),
                        clock_ms: 0,
                    })],
                    (Follower::Silent | Follower::Unimplemented, Ok(_)) => vec![],
                };
                futures::stream::iter(replies)
            });
            Ok(tonic::Response::new(Box::pin(replies)))
        }

        async fn append_entries(
            &self,
            _req: tonic::Request<RaftRequest>,
        ) -> Result<tonic::Response<RaftReply>, tonic::Status> {
            self.unary_calls
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let result: Result<AppendEntriesResponse<TypeConfig>, RaftError<TypeConfig>> =
                Ok(AppendEntriesResponse::Success);
            Ok(tonic::Response::new(RaftReply {
                payload: codec::encode(&result),
                refused: String::new(),
                clock_ms: crate::cluster_clock::local_ms(),
            }))
        }

        async fn vote(
            &self,
            _req: tonic::Request<RaftRequest>,
        ) -> Result<tonic::Response<RaftReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }

        async fn pre_vote(
            &self,
            _req: tonic::Request<RaftRequest>,
        ) -> Result<tonic::Response<RaftReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }

        async fn install_snapshot(
            &self,
            _req: tonic::Request<tonic::Streaming<SnapshotChunk>>,
        ) -> Result<tonic::Response<RaftReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }

        async fn transfer_leader(
            &self,
            _req: tonic::Request<RaftRequest>,
        ) -> Result<tonic::Response<RaftReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("test"))
        }
    }

    /// The reply deadline of the tests' streams.
    const TTL: Duration = Duration::from_millis(200);

    /// Starts a fake follower in `mode` and returns a leader's client of it and the
    /// follower's count of `AppendEntries` calls.
    async fn fake_follower(mode: Follower) -> (PeerClient, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let unary_calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let service = hub_proto::raft_server::RaftServer::new(FakeFollower {
            mode,
            unary_calls: unary_calls.clone(),
        });
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let (client, _) = client_of(&addr.to_string()).await;
        (client, unary_calls)
    }

    /// A leader's (node 1's) client of node 2 at `addr`, and the peers' health it reports to.
    async fn client_of(addr: &str) -> (PeerClient, Arc<PeerHealth>) {
        let health = Arc::new(PeerHealth::default());
        let mut factory = NetworkFactory {
            self_id: 1,
            cluster_id: "c".into(),
            peers: Arc::new(PeerPool::new(hub_tls::client::Connector::new(
                hub_tls::client::ClientMode::Plaintext,
                Duration::from_secs(1),
            ))),
            clock: Arc::new(ClusterClock::new(1, Duration::from_secs(5))),
            append_ttl_floor: TTL,
            health: health.clone(),
        };
        (
            factory.new_client(2, &Node::new(addr.to_string())).await,
            health,
        )
    }

    /// The waits between tries double from the first to the cap and stay there.
    #[test]
    fn retry_delays_double_up_to_the_cap() {
        let d: Vec<u64> = retry_delays()
            .take(8)
            .map(|d| d.as_millis() as u64)
            .collect();
        assert_eq!(d, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
    }

    /// A session dials only once openraft hands it a request (openraft waits out its
    /// back-off there): with none yet, nothing reaches the peer.
    #[tokio::test]
    async fn a_session_dials_only_once_it_has_a_request() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (mut client, _) = client_of(&listener.local_addr().unwrap().to_string()).await;
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let session =
            tokio::spawn(async move { client.stream_append(rx, option()).await.map(|_| ()) });
        let early = tokio::time::timeout(4 * TTL, listener.accept()).await;
        assert!(early.is_err(), "dialled before any request: {early:?}");
        tx.unbounded_send(heartbeat()).unwrap();
        let dialled = tokio::time::timeout(10 * TTL, listener.accept()).await;
        assert!(dialled.is_ok(), "never dialled once a request came");
        session.abort();
    }

    /// A session whose request stream ends before its first request returns no replies
    /// and dials nothing.
    #[tokio::test]
    async fn a_session_without_requests_ends_at_once() {
        use futures::StreamExt;
        let (mut client, health) = client_of("127.0.0.1:1").await;
        let none = futures::stream::empty::<AppendEntriesRequest<TypeConfig>>();
        let mut replies = client.stream_append(none, option()).await.unwrap();
        assert!(replies.next().await.is_none());
        assert!(!health.is_failing(2));
    }

    /// A refused call counts against the peer's health; an answer clears it.
    #[tokio::test]
    async fn failures_and_answers_reach_the_peers_health() {
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = closed.local_addr().unwrap().to_string();
        drop(closed);
        let (mut client, health) = client_of(&addr).await;
        let refused = client
            .stream_append(futures::stream::iter([heartbeat()]), option())
            .await
            .map(|_| ());
        assert!(
            matches!(refused, Err(RPCError::Unreachable(_))),
            "{refused:?}"
        );
        assert!(health.is_failing(2));
        // The same health, now of a peer that answers.
        let (answering, _) = fake_follower(Follower::Answers).await;
        let mut client = PeerClient {
            health: health.clone(),
            ..answering
        };
        use futures::StreamExt;
        let mut replies = client
            .stream_append(futures::stream::iter([heartbeat(), heartbeat()]), option())
            .await
            .unwrap();
        assert!(replies.next().await.unwrap().is_ok());
        assert!(!health.is_failing(2));
    }

    fn heartbeat() -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: Vote::new(1, 1),
            prev_log_id: None,
            leader_commit: None,
            entries: Vec::new(),
        }
    }

    fn option() -> RPCOption {
        RPCOption::new(Duration::from_millis(10))
    }

    /// Requests go out as they come, without waiting for replies; the replies come back in
    /// order; a stream with every request answered waits any time for the next one; the
    /// stream ends when the leader ends its requests.
    #[tokio::test]
    async fn a_replication_stream_answers_in_order_and_waits_idle_without_a_deadline() {
        use futures::StreamExt;
        let (mut client, unary_calls) = fake_follower(Follower::Answers).await;
        let (tx, rx) = futures::channel::mpsc::unbounded();
        for _ in 0..3 {
            tx.unbounded_send(heartbeat()).unwrap();
        }
        let mut replies = client.stream_append(rx, option()).await.unwrap();
        for i in 1..=3 {
            assert_eq!(replies.next().await.unwrap().unwrap(), flushed(i));
        }
        // Idle for several deadlines: no error.
        let idle = tokio::time::timeout(4 * TTL, replies.next()).await;
        assert!(idle.is_err(), "an idle stream ended or failed: {idle:?}");
        tx.unbounded_send(heartbeat()).unwrap();
        assert_eq!(replies.next().await.unwrap().unwrap(), flushed(4));
        drop(tx);
        assert!(replies.next().await.is_none());
        assert_eq!(
            unary_calls.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "everything went on the stream"
        );
    }

    /// A request left unanswered past its deadline fails the stream as a timeout (openraft
    /// retries at once), and the stream ends there.
    #[tokio::test]
    async fn an_unanswered_request_fails_the_stream_after_its_deadline() {
        use futures::StreamExt;
        let (mut client, _) = fake_follower(Follower::Silent).await;
        let (tx, rx) = futures::channel::mpsc::unbounded();
        tx.unbounded_send(heartbeat()).unwrap();
        let started = std::time::Instant::now();
        let mut replies = client.stream_append(rx, option()).await.unwrap();
        let first = tokio::time::timeout(10 * TTL, replies.next())
            .await
            .expect("the deadline fires");
        assert!(
            matches!(first, Some(Err(RPCError::Timeout(ref t))) if t.target == 2),
            "{first:?}"
        );
        assert!(started.elapsed() >= TTL, "{:?}", started.elapsed());
        assert!(replies.next().await.is_none());
    }

    /// A request refused as another cluster's fails the stream as an unreachable peer.
    #[tokio::test]
    async fn a_refused_request_fails_the_stream_as_unreachable() {
        use futures::StreamExt;
        let (mut client, _) = fake_follower(Follower::OtherCluster).await;
        let (tx, rx) = futures::channel::mpsc::unbounded();
        tx.unbounded_send(heartbeat()).unwrap();
        let mut replies = client.stream_append(rx, option()).await.unwrap();
        let first = replies.next().await;
        assert!(
            matches!(first, Some(Err(RPCError::Unreachable(_)))),
            "{first:?}"
        );
        assert!(replies.next().await.is_none());
    }

    /// A peer of an older release, without the call: the first session fails, and from
    /// then on every request goes as its own `AppendEntries` call.
    #[tokio::test]
    async fn a_peer_without_the_stream_gets_one_call_per_request() {
        use futures::StreamExt;
        let (mut client, unary_calls) = fake_follower(Follower::Unimplemented).await;
        let first = client
            .stream_append(futures::stream::iter([heartbeat()]), option())
            .await
            .map(|_| ());
        assert!(matches!(first, Err(RPCError::Network(_))), "{first:?}");
        let mut replies = client
            .stream_append(futures::stream::iter([heartbeat(), heartbeat()]), option())
            .await
            .unwrap();
        let mut answered = 0;
        while let Some(r) = replies.next().await {
            r.unwrap().unwrap();
            answered += 1;
        }
        assert_eq!(answered, 2);
        assert_eq!(unary_calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}

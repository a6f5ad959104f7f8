//! The Raft transport, server side: hands peers' messages to the local openraft instance.

use std::sync::Arc;
use std::time::Duration;

use hub_proto::raft_server::Raft as RaftRpc;
use hub_proto::{RaftReply, RaftRequest, SnapshotChunk};
use openraft::errors::Fatal;
use openraft::errors::RaftError;
use openraft::raft::SnapshotResponse;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, StreamAppendError, TransferLeaderRequest,
    VoteRequest,
};
use raft_store::codec::{self, Limit};
use raft_store::{
    Raft, Snapshot, SnapshotData, SnapshotMeta, SnapshotReceiver, StageError, StateMachine,
    TypeConfig, Vote,
};
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use crate::leader_contact::LeaderContact;
use crate::stopping::Stopping;

/// Largest snapshot a node accepts. It is written to a file as it arrives, never buffered
/// whole.
pub const MAX_SNAPSHOT_BYTES: u64 = codec::MAX_SNAPSHOT_FILE_BYTES;

/// Longest a whole `InstallSnapshot` stream may take to arrive, before the allowance for its
/// declared size ([`crate::network::snapshot_allowance`]); the first chunk must come within
/// it. The sender gives up after 30 s (openraft's `install_snapshot_timeout`) plus its own
/// allowances; a stream still open after this is a stalled or hostile peer holding the
/// node's one snapshot slot.
pub const SNAPSHOT_RECEIVE_DEADLINE: Duration = Duration::from_secs(60);

/// gRPC service for Raft messages.
pub struct RaftService {
    /// The local Raft instance.
    pub raft: Raft,
    /// Messages from another cluster are refused.
    pub cluster_id: Arc<str>,
    /// Held while a snapshot is received and installed: one at a time, so concurrent streams
    /// cannot each write up to [`MAX_SNAPSHOT_BYTES`], and the store's one incoming file
    /// ([`raft_store::incoming_path`]) has one writer.
    receiving: Arc<tokio::sync::Mutex<()>>,
    /// The state machine: an arriving snapshot is written into its store's directory and
    /// staged in its store before Raft installs it.
    sm: StateMachine,
    /// See [`SNAPSHOT_RECEIVE_DEADLINE`].
    receive_deadline: Duration,
    /// Told of every AppendEntries and snapshot this node accepts from a leader.
    contact: Arc<LeaderContact>,
    /// Raised when this node begins to stop: replication streams end (see
    /// [`crate::stopping`]).
    stopping: Stopping,
}

/// A snapshot stream read to its end.
enum Received {
    /// The whole snapshot, in the store's incoming file.
    Snapshot {
        vote: Vote,
        meta: SnapshotMeta,
        data: SnapshotData,
    },
    /// Refused before Raft saw it (another cluster).
    Refused(RaftReply),
}

impl RaftService {
    /// The service for `raft` in cluster `cluster_id`, recording leader contact in `contact`;
    /// snapshots arrive into the store of `sm`, Raft's state machine; replication streams
    /// end once `stopping` is raised.
    pub fn new(
        raft: Raft,
        cluster_id: Arc<str>,
        contact: Arc<LeaderContact>,
        sm: StateMachine,
        stopping: Stopping,
    ) -> Self {
        Self {
            raft,
            cluster_id,
            receiving: Arc::default(),
            sm,
            receive_deadline: SNAPSHOT_RECEIVE_DEADLINE,
            contact,
            stopping,
        }
    }

    /// The same service with another whole-stream deadline (tests).
    pub fn with_receive_deadline(mut self, deadline: Duration) -> Self {
        self.receive_deadline = deadline;
        self
    }

    fn check_cluster(&self, cluster_id: &str) -> Option<RaftReply> {
        refuse_other_cluster(&self.cluster_id, cluster_id)
    }
}

impl RaftService {
    /// Checks the cluster id, decodes the request, hands it to Raft and encodes the result.
    async fn handle<Rpc, Resp, F, Fut>(
        &self,
        req: Request<RaftRequest>,
        f: F,
    ) -> Result<Response<RaftReply>, Status>
    where
        Rpc: serde::de::DeserializeOwned,
        Resp: serde::Serialize,
        F: FnOnce(Raft, Rpc) -> Fut,
        Fut: std::future::Future<Output = Resp>,
    {
        #[cfg(feature = "chaos-faults")]
        let reply_lost = crate::fault_layer::reply_lost(&req);
        let req = req.into_inner();
        if let Some(refused) = self.check_cluster(&req.cluster_id) {
            return Ok(Response::new(refused));
        }
        let rpc: Rpc = decode(&req.payload, Limit::Message)?;
        let result = f(self.raft.clone(), rpc).await;
        #[cfg(feature = "chaos-faults")]
        if reply_lost {
            return Err(crate::fault_layer::lose(std::time::Duration::MAX).await);
        }
        Ok(Response::new(RaftReply {
            payload: codec::encode(&result),
            refused: String::new(),
            clock_ms: crate::cluster_clock::local_ms(),
        }))
    }
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], limit: Limit) -> Result<T, Status> {
    codec::decode_bounded(bytes, limit)
        .map_err(|e| Status::invalid_argument(format!("bad raft payload: {e}")))
}

/// Stages the received snapshot `data` in the store, which checks the whole file
/// ([`raft_store::StateMachine::stage_snapshot`]), then hands it to Raft, whose install only
/// switches to it. A bad file is refused here, and removed: a snapshot that fails to install
/// is a storage error, which stops the node. A staging Raft did not install (an older
/// snapshot than the node holds) is discarded.
async fn install_received(
    raft: &Raft,
    sm: &StateMachine,
    vote: Vote,
    meta: SnapshotMeta,
    data: SnapshotData,
) -> Result<Result<SnapshotResponse<TypeConfig>, Fatal<TypeConfig>>, Status> {
    let path = data.path().to_path_buf();
    let data = match sm.stage_snapshot(&meta, data).await {
        Ok(data) => data,
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            return Err(match e {
                StageError::Snapshot(e) => {
                    Status::invalid_argument(format!("snapshot refused: {e}"))
                }
                StageError::Store(e) => {
                    tracing::error!(error = %e, "staging a received snapshot");
                    Status::internal("this node could not write the snapshot to its store")
                }
                StageError::Interrupted(e) => {
                    tracing::error!(error = %e, "staging a received snapshot");
                    Status::internal("this node could not stage the snapshot")
                }
            });
        }
    };
    let snapshot = Snapshot {
        meta,
        snapshot: data,
    };
    let result = raft.install_full_snapshot(vote, snapshot).await;
    sm.discard_staged().await;
    Ok(result)
}

/// The stream's next chunk, if it comes before `deadline` from `started`.
async fn next_chunk(
    stream: &mut Streaming<SnapshotChunk>,
    started: tokio::time::Instant,
    deadline: Duration,
) -> Result<Option<SnapshotChunk>, Status> {
    match tokio::time::timeout_at(started + deadline, stream.next()).await {
        Err(_) => Err(Status::deadline_exceeded(format!(
            "snapshot stream not complete within {deadline:?}"
        ))),
        Ok(chunk) => chunk.transpose(),
    }
}

fn too_large(bytes: impl std::fmt::Display) -> Status {
    Status::resource_exhausted(format!(
        "snapshot of {bytes} bytes refused: at most {MAX_SNAPSHOT_BYTES} allowed"
    ))
}

/// Runs `step` on the snapshot receiver off the async runtime (file I/O); a failure of the
/// node's own disk is logged here and answered without its details.
async fn off_runtime<T: Send + 'static>(
    what: &'static str,
    step: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(step)
        .await
        .map_err(|e| Status::internal(format!("snapshot writer: {e}")))?
        .map_err(|e| {
            tracing::error!(error = %e, "{what}");
            Status::internal("this node could not write the snapshot to its store")
        })
}

impl RaftService {
    /// Reads a snapshot stream to its end into the store's incoming file: the first chunk
    /// names the cluster and carries the header; no more than [`MAX_SNAPSHOT_BYTES`] (nor
    /// more than the declared size) is written, and all of it arrives within the receive
    /// deadline and the allowance for its declared size. Dropped before it ends (refused,
    /// timed out), the file is removed.
    async fn receive(&self, mut stream: Streaming<SnapshotChunk>) -> Result<Received, Status> {
        let started = tokio::time::Instant::now();
        let first = next_chunk(&mut stream, started, self.receive_deadline)
            .await?
            .ok_or_else(|| Status::invalid_argument("empty snapshot stream"))?;
        if let Some(refused) = self.check_cluster(&first.cluster_id) {
            return Ok(Received::Refused(refused));
        }
        let declared = match first.total_bytes {
            0 => None,
            n if n <= MAX_SNAPSHOT_BYTES => Some(n),
            n => return Err(too_large(n)),
        };
        let limit = declared.unwrap_or(MAX_SNAPSHOT_BYTES);
        let deadline = self.receive_deadline + crate::network::snapshot_allowance(limit);
        let (vote, meta): (Vote, SnapshotMeta) = decode(&first.header, Limit::Command)?;
        let dir = self.sm.store_dir().to_path_buf();
        let mut receiver = off_runtime("creating the file for a received snapshot", move || {
            SnapshotReceiver::create(&dir)
        })
        .await?;
        let mut next = Some(first.data);
        while let Some(data) = next.take() {
            let total = receiver.written() + data.len() as u64;
            if total > limit {
                return Err(match declared {
                    Some(d) if total <= MAX_SNAPSHOT_BYTES => Status::invalid_argument(format!(
                        "snapshot stream longer than its declared {d} bytes"
                    )),
                    _ => too_large(format!("more than {total}")),
                });
            }
            if !data.is_empty() {
                // Dropped with the task if it fails: the file is removed.
                let mut r = receiver;
                receiver = off_runtime("writing a received snapshot", move || {
                    r.write(&data).map(|()| r)
                })
                .await?;
            }
            if let Some(chunk) = next_chunk(&mut stream, started, deadline).await? {
                next = Some(chunk.data);
            }
        }
        let written = receiver.written();
        if let Some(d) = declared.filter(|d| *d != written) {
            return Err(Status::invalid_argument(format!(
                "snapshot stream ended after {written} of its declared {d} bytes"
            )));
        }
        let data = off_runtime("syncing a received snapshot", move || receiver.finish()).await?;
        Ok(Received::Snapshot { vote, meta, data })
    }
}

/// The refusal of a message from cluster `theirs` by a node of cluster `ours`, if they differ.
fn refuse_other_cluster(ours: &str, theirs: &str) -> Option<RaftReply> {
    (theirs != ours).then(|| RaftReply {
        payload: Vec::new(),
        refused: format!("this node belongs to cluster {ours:?}, not {theirs:?}"),
        clock_ms: 0,
    })
}

/// The reply stream of a `StreamAppend` call.
pub type StreamAppendReplies =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<RaftReply, Status>> + Send + 'static>>;

/// Why a `StreamAppend` call's requests stopped before the leader ended them: told to the
/// leader after the replies to the requests before it.
type InputStop = Arc<std::sync::Mutex<Option<Result<RaftReply, Status>>>>;

/// What a `StreamAppend` call reads: the leader's next request, the end of its requests, or
/// this node's stop.
enum Inbound {
    Request(Result<RaftRequest, Status>),
    End,
    Stopping,
}

#[tonic::async_trait]
impl RaftRpc for RaftService {
    type StreamAppendStream = StreamAppendReplies;

    /// The leader's replication stream: every request is checked (cluster) and decoded as it
    /// arrives and handed to openraft's pipelined `stream_append`, which appends them in order
    /// and answers each once its entries are flushed; the replies go back in the same order.
    /// A request from another cluster, one that does not decode, a broken connection or this
    /// node's stop ends the input; the replies to what came before it still go out, then the
    /// reason (for the stop, UNAVAILABLE: the leader backs off, and the stream no longer
    /// holds the stopping node's listener open).
    async fn stream_append(
        &self,
        req: Request<Streaming<RaftRequest>>,
    ) -> Result<Response<Self::StreamAppendStream>, Status> {
        #[cfg(feature = "chaos-faults")]
        let sender = crate::fault_layer::sender(&req);
        let stopping = self.stopping.clone();
        let inbound = req
            .into_inner()
            .map(Inbound::Request)
            .chain(futures::stream::once(async { Inbound::End }))
            .merge(
                futures::stream::once(async move { stopping.begun().await })
                    .map(|()| Inbound::Stopping),
            );
        let stop: InputStop = Arc::default();
        let input = {
            let stop = stop.clone();
            let cluster_id = self.cluster_id.clone();
            inbound.map_while(move |item| {
                let refused = match item {
                    // The leader ended its requests: the replies go out, and the call ends.
                    Inbound::End => return None,
                    Inbound::Stopping => Err(crate::stopping::refusal()),
                    Inbound::Request(Err(status)) => Err(status),
                    Inbound::Request(Ok(msg)) => {
                        match refuse_other_cluster(&cluster_id, &msg.cluster_id) {
                            Some(refusal) => Ok(refusal),
                            None => match decode::<AppendEntriesRequest<TypeConfig>>(
                                &msg.payload,
                                Limit::Message,
                            ) {
                                Ok(rpc) => return Some(rpc),
                                Err(status) => Err(status),
                            },
                        }
                    }
                };
                *stop.lock().unwrap_or_else(|p| p.into_inner()) = Some(refused);
                None
            })
        };
        let contact = self.contact.clone();
        let replies = self.raft.stream_append(input).map(move |item| match item {
            Ok(result) => {
                // Anything but a higher vote means the sender is this term's leader.
                if !matches!(result, Err(StreamAppendError::HigherVote(_))) {
                    contact.heard();
                }
                Ok(RaftReply {
                    payload: codec::encode(&result),
                    refused: String::new(),
                    clock_ms: crate::cluster_clock::local_ms(),
                })
            }
            Err(fatal) => Err(Status::unavailable(format!("raft stopped: {fatal}"))),
        });
        let stopped =
            futures::stream::once(
                async move { stop.lock().unwrap_or_else(|p| p.into_inner()).take() },
            )
            .filter_map(|why| why);
        let replies = replies.chain(stopped);
        #[cfg(feature = "chaos-faults")]
        let replies = crate::fault_layer::withhold_replies_to_cut(sender, replies);
        Ok(Response::new(Box::pin(replies)))
    }

    async fn append_entries(
        &self,
        req: Request<RaftRequest>,
    ) -> Result<Response<RaftReply>, Status> {
        let contact = self.contact.clone();
        self.handle(
            req,
            |raft, rpc: AppendEntriesRequest<TypeConfig>| async move {
                let result = raft.append_entries(rpc).await;
                // Anything but a higher vote means the sender is this term's leader.
                if matches!(&result, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
                    contact.heard();
                }
                result
            },
        )
        .await
    }

    async fn vote(&self, req: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        self.handle(req, |raft, rpc: VoteRequest<TypeConfig>| async move {
            raft.vote(rpc).await
        })
        .await
    }

    async fn pre_vote(&self, req: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        self.handle(req, |raft, rpc: VoteRequest<TypeConfig>| async move {
            raft.pre_vote(rpc).await
        })
        .await
    }

    async fn transfer_leader(
        &self,
        req: Request<RaftRequest>,
    ) -> Result<Response<RaftReply>, Status> {
        self.handle(
            req,
            |raft, rpc: TransferLeaderRequest<TypeConfig>| async move {
                raft.handle_transfer_leader(rpc)
                    .await
                    .map_err(RaftError::<TypeConfig>::Fatal)
            },
        )
        .await
    }

    async fn install_snapshot(
        &self,
        req: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<RaftReply>, Status> {
        #[cfg(feature = "chaos-faults")]
        let reply_lost = crate::fault_layer::reply_lost(&req);
        // One snapshot at a time, received and installed: a second stream is refused at
        // once (the leader retries), not buffered beside the first.
        let Ok(receiving) = self.receiving.clone().try_lock_owned() else {
            return Err(Status::resource_exhausted(
                "this node is already receiving a snapshot: one at a time",
            ));
        };
        let received = self.receive(req.into_inner()).await?;
        let (vote, meta, data) = match received {
            Received::Refused(reply) => return Ok(Response::new(reply)),
            Received::Snapshot { vote, meta, data } => (vote, meta, data),
        };
        tracing::info!(bytes = data.len(), last_log_id = ?meta.last_log_id, "received snapshot");
        // Staged and installed in a task of its own that holds the slot until both end (a
        // lost reply below must not hold it; a cancelled call must not free it while its
        // staging goes on).
        let (raft, sm) = (self.raft.clone(), self.sm.clone());
        let result = tokio::spawn(async move {
            let result = install_received(&raft, &sm, vote, meta, data).await;
            drop(receiving);
            result
        })
        .await
        .map_err(|e| Status::internal(format!("snapshot install: {e}")))??;
        if result.is_ok() {
            self.contact.heard();
        }
        #[cfg(feature = "chaos-faults")]
        if reply_lost {
            return Err(crate::fault_layer::lose(std::time::Duration::MAX).await);
        }
        Ok(Response::new(RaftReply {
            payload: codec::encode(
                &result.map_err(openraft::errors::RaftError::<TypeConfig>::Fatal),
            ),
            refused: String::new(),
            clock_ms: crate::cluster_clock::local_ms(),
        }))
    }
}

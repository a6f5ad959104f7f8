//! The Raft transport, server side: hands peers' messages to the local openraft instance.

use std::io::Cursor;
use std::sync::Arc;

use hub_proto::raft_server::Raft as RaftRpc;
use hub_proto::{RaftReply, RaftRequest, SnapshotChunk};
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use raft_store::codec;
use raft_store::{Raft, Snapshot, SnapshotMeta, TypeConfig, Vote};
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

/// Largest snapshot a node accepts.
pub const MAX_SNAPSHOT_BYTES: usize = 1 << 30;

/// gRPC service for Raft messages.
pub struct RaftService {
    /// The local Raft instance.
    pub raft: Raft,
    /// Messages from another cluster are refused.
    pub cluster_id: Arc<str>,
}

impl RaftService {
    fn check_cluster(&self, cluster_id: &str) -> Option<RaftReply> {
        (cluster_id != &*self.cluster_id).then(|| RaftReply {
            payload: Vec::new(),
            refused: format!(
                "this node belongs to cluster {:?}, not {cluster_id:?}",
                self.cluster_id
            ),
        })
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
        let rpc: Rpc = decode(&req.payload)?;
        let result = f(self.raft.clone(), rpc).await;
        #[cfg(feature = "chaos-faults")]
        if reply_lost {
            return Err(crate::fault_layer::lose(std::time::Duration::MAX).await);
        }
        Ok(Response::new(RaftReply {
            payload: codec::encode(&result),
            refused: String::new(),
        }))
    }
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Status> {
    codec::decode(bytes).map_err(|e| Status::invalid_argument(format!("bad raft payload: {e}")))
}

#[tonic::async_trait]
impl RaftRpc for RaftService {
    async fn append_entries(
        &self,
        req: Request<RaftRequest>,
    ) -> Result<Response<RaftReply>, Status> {
        self.handle(req, |raft, rpc: AppendEntriesRequest<TypeConfig>| async move {
            raft.append_entries(rpc).await
        })
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

    async fn install_snapshot(
        &self,
        req: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<RaftReply>, Status> {
        #[cfg(feature = "chaos-faults")]
        let reply_lost = crate::fault_layer::reply_lost(&req);
        let mut stream = req.into_inner();
        let first = stream
            .next()
            .await
            .ok_or_else(|| Status::invalid_argument("empty snapshot stream"))??;
        if let Some(refused) = self.check_cluster(&first.cluster_id) {
            return Ok(Response::new(refused));
        }
        let (vote, meta): (Vote, SnapshotMeta) = decode(&first.header)?;
        let mut data = first.data;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            if data.len() + chunk.data.len() > MAX_SNAPSHOT_BYTES {
                return Err(Status::resource_exhausted(format!(
                    "snapshot larger than {MAX_SNAPSHOT_BYTES} bytes"
                )));
            }
            data.extend_from_slice(&chunk.data);
        }
        tracing::info!(bytes = data.len(), last_log_id = ?meta.last_log_id, "received snapshot");
        let snapshot = Snapshot {
            meta,
            snapshot: Cursor::new(data),
        };
        let result = self.raft.install_full_snapshot(vote, snapshot).await;
        #[cfg(feature = "chaos-faults")]
        if reply_lost {
            return Err(crate::fault_layer::lose(std::time::Duration::MAX).await);
        }
        Ok(Response::new(RaftReply {
            payload: codec::encode(
                &result.map_err(openraft::errors::RaftError::<TypeConfig>::Fatal),
            ),
            refused: String::new(),
        }))
    }
}

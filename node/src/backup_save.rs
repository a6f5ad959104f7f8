//! `SnapshotSave`: a backup of the replicated state served by a live node (`hubctl snapshot
//! save`, docs/PRODUCTION.md "Backups").
//!
//! The caller must be an admin. A read barrier first makes the backup hold every write
//! acknowledged before the call; the backup itself is written on a blocking thread from one
//! RocksDB snapshot of the store ([`raft_store::backup::write_backup`]), so apply goes on
//! meanwhile, and its bytes go to the caller in chunks through a bounded channel: memory is
//! bounded by the channel, never by the state.
//!
//! Budgets: one backup at a time per node (a second caller is told to retry; each costs a
//! pass over the whole store and holds a RocksDB snapshot, which pins old files, until it
//! ends), and a caller that takes no chunk for [`STALL_LIMIT`] loses the stream.

use std::io::{self, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use hub_proto::SnapshotSaveChunk;
use raft_store::backup::{write_backup, BackupOrigin};
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tonic::Status;

use crate::auth::Caller;
use crate::node::HubNode;

/// Bytes per chunk: well under the gRPC message limit.
const CHUNK_BYTES: usize = 256 << 10;

/// Chunks buffered between the writer and the caller.
const CHANNEL_CHUNKS: usize = 8;

/// How long the writer waits for the caller to take a chunk before it gives up.
pub const STALL_LIMIT: Duration = Duration::from_secs(60);

/// The stream of a backup's chunks.
pub type BackupStream = Pin<Box<dyn Stream<Item = Result<SnapshotSaveChunk, Status>> + Send>>;

/// Starts a backup of `node`'s applied state for `caller` (an admin), at an index at least
/// as high as every write acknowledged before the call.
pub async fn start(node: Arc<HubNode>, caller: &Caller) -> Result<BackupStream, Status> {
    caller.require_admin(&node.state.read().state, "save a snapshot of the hub")?;
    let permit = node.backup_slot.clone().try_acquire_owned().map_err(|_| {
        Status::resource_exhausted(
            "this node is saving another snapshot; retry when it is done (one at a time per node)",
        )
    })?;
    node.read_barrier(false).await?;
    let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
    let origin = BackupOrigin {
        cluster_id: node.cluster_id.to_string(),
        node_id: node.id,
        node_version: env!("CARGO_PKG_VERSION").to_string(),
        created_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
    };
    tracing::info!(?caller, "saving a snapshot for a backup");
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || write(node, origin, tx, runtime, permit));
    Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
}

/// Writes the backup into `tx` and ends the stream with an error if it fails.
fn write(
    node: Arc<HubNode>,
    origin: BackupOrigin,
    tx: mpsc::Sender<Result<SnapshotSaveChunk, Status>>,
    runtime: tokio::runtime::Handle,
    _permit: OwnedSemaphorePermit,
) {
    let mut out = Chunks {
        tx: tx.clone(),
        runtime: runtime.clone(),
        buf: Vec::with_capacity(CHUNK_BYTES),
    };
    let written = write_backup(&node.sm, origin, &mut out).and_then(|header| {
        out.flush()
            .map(|()| header)
            .map_err(|cause| raft_store::backup::BackupError::Io {
                path: "the backup stream".into(),
                cause,
            })
    });
    let outcome = if written.is_ok() { "ok" } else { "error" };
    node.metrics
        .backups
        .get_or_create(&crate::metrics::OutcomeLabel {
            outcome: outcome.into(),
        })
        .inc();
    match written {
        Ok(header) => {
            node.metrics
                .backup_last_success
                .set(header.created_ms / 1000);
            tracing::info!(
                index = header.index(),
                records = header.records,
                "saved a snapshot for a backup"
            )
        }
        Err(e) => {
            tracing::warn!(error = %e, "saving a snapshot for a backup failed");
            let _ = runtime.block_on(tx.send_timeout(
                Err(Status::internal(format!("saving the snapshot failed: {e}"))),
                STALL_LIMIT,
            ));
        }
    }
}

/// A writer that sends what it is given in chunks of [`CHUNK_BYTES`].
struct Chunks {
    tx: mpsc::Sender<Result<SnapshotSaveChunk, Status>>,
    runtime: tokio::runtime::Handle,
    buf: Vec<u8>,
}

impl Chunks {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK_BYTES));
        self.runtime
            .block_on(
                self.tx
                    .send_timeout(Ok(SnapshotSaveChunk { data }), STALL_LIMIT),
            )
            .map_err(|e| match e {
                mpsc::error::SendTimeoutError::Timeout(_) => io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the caller took no data for {} s", STALL_LIMIT.as_secs()),
                ),
                mpsc::error::SendTimeoutError::Closed(_) => {
                    io::Error::new(io::ErrorKind::BrokenPipe, "the caller went away")
                }
            })
    }
}

impl Write for Chunks {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let n = bytes.len().min(CHUNK_BYTES - self.buf.len());
        self.buf.extend_from_slice(&bytes[..n]);
        if self.buf.len() == CHUNK_BYTES {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

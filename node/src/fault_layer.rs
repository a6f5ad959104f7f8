//! Chaos builds only (`cargo build --features hub-node/chaos-faults`, then `hub-node
//! --chaos-faults`): a fault layer in this node's transport, so the chaos runner can
//! partition nodes where it cannot use network namespaces (it is not root). Like TiKV's
//! `fail` points, it is not compiled into a normal build.
//!
//! The runner writes `DATA/chaos-faults.json`, `{"cut_to":[2,3]}`: every message this node
//! would send to those nodes is lost, as if the packets were dropped.
//! - Its outbound calls to them (Raft RPCs, forwarded writes, read-index requests) are never
//!   sent; the caller waits out its own timeout and sees the peer unreachable.
//! - Calls from them are processed but the reply is withheld (a reply is a message to them);
//!   the caller times out. The sender is named by the [`FROM_HEADER`] every node-to-node call
//!   carries in a chaos build.
//! - On the replication stream (`Raft.StreamAppend`) the same holds per message: a request
//!   sent while the peer is cut is lost with every one after it (the stream stalls and the
//!   leader's reply deadline fails it), and a reply to a cut sender is withheld with every one
//!   after it.
//! - Calls without that header (clients, agents, hubctl) are never affected.
//!
//! The file is read every [`POLL`]; a missing file cuts nothing, a malformed one is logged and
//! the previous cuts stay. Once the node has taken up a new file it writes the same bytes to
//! [`APPLIED`] next to it, so the runner knows from when the cut holds.
//!
//! A second file, `DATA/chaos-clock.json` ([`CLOCK_FILE`]), skews this node's wall clock:
//! `{"offset_ms":3600000,"drift_ms_per_s":0}` adds an hour to every reading of
//! [`crate::cluster_clock::local_ms`] (what the node stamps, evaluates and answers its peers
//! with), and a drift adds that many milliseconds more for every second since the file was
//! taken up. The monotonic clock (timers, timeouts) is untouched, as when NTP steps or a VM
//! pause moves only the wall clock. It is read and acknowledged ([`CLOCK_APPLIED`]) like the
//! partition file.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{OnceLock, RwLock};
use std::time::{Duration, Instant};

use raft_store::NodeId;
use serde::Deserialize;

/// The metadata header naming the sending node on node-to-node calls.
pub const FROM_HEADER: &str = "x-hub-from";
/// The control file in the node's data directory.
pub const FILE: &str = "chaos-faults.json";
/// Written with the control file's bytes once they are in force.
pub const APPLIED: &str = "chaos-faults.applied";
/// How often the file is read.
pub const POLL: Duration = Duration::from_millis(50);
/// The clock control file in the node's data directory.
pub const CLOCK_FILE: &str = "chaos-clock.json";
/// Written with the clock file's bytes once they are in force.
pub const CLOCK_APPLIED: &str = "chaos-clock.applied";
/// The longest a withheld reply or an unsent call waits before giving up (its caller has
/// timed out long before).
const LOST_FOR: Duration = Duration::from_secs(10);

/// The control file's content.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    /// Nodes that lose every message this node sends them.
    #[serde(default)]
    pub cut_to: BTreeSet<NodeId>,
}

/// Parses the control file.
pub fn parse(bytes: &[u8]) -> Result<Faults, ControlFileError> {
    serde_json::from_slice(bytes).map_err(|e| ControlFileError::Malformed {
        file: FILE,
        reason: e.to_string(),
    })
}

/// Why a control file was not taken up.
#[derive(Debug, thiserror::Error)]
pub enum ControlFileError {
    /// It could not be read.
    #[error("{path}: {source}")]
    Unreadable {
        /// The file.
        path: String,
        /// The read's error.
        source: std::io::Error,
    },
    /// It is not the file's JSON.
    #[error("{file}: {reason}")]
    Malformed {
        /// The file's name.
        file: &'static str,
        /// What the parser said.
        reason: String,
    },
}

/// The clock control file's content.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockFault {
    /// Added to every wall-clock reading, in milliseconds (negative: behind).
    #[serde(default)]
    pub offset_ms: i64,
    /// Added on top for every second since the file was taken up, in milliseconds.
    #[serde(default)]
    pub drift_ms_per_s: i64,
}

/// Parses the clock control file.
pub fn parse_clock(bytes: &[u8]) -> Result<ClockFault, ControlFileError> {
    serde_json::from_slice(bytes).map_err(|e| ControlFileError::Malformed {
        file: CLOCK_FILE,
        reason: e.to_string(),
    })
}

struct Layer {
    self_id: NodeId,
    cut_to: RwLock<BTreeSet<NodeId>>,
    /// The clock fault and when it was taken up.
    clock: RwLock<(ClockFault, Instant)>,
}

static LAYER: OnceLock<Layer> = OnceLock::new();

/// Turns the layer on for node `self_id`, reading `data_dir/chaos-faults.json` from now on.
pub fn install(self_id: NodeId, data_dir: &Path) {
    let path = data_dir.join(FILE);
    if LAYER
        .set(Layer {
            self_id,
            cut_to: RwLock::new(BTreeSet::new()),
            clock: RwLock::new((ClockFault::default(), Instant::now())),
        })
        .is_err()
    {
        return; // already installed
    }
    tracing::warn!(path = %path.display(), "chaos fault layer installed: not for production");
    tokio::spawn(poll(path, data_dir.join(APPLIED), |bytes| {
        let f = if bytes.is_empty() {
            Faults::default()
        } else {
            parse(bytes)?
        };
        tracing::info!(cut_to = ?f.cut_to, "chaos fault layer: cuts changed");
        if let Some(layer) = LAYER.get() {
            *layer.cut_to.write().unwrap_or_else(|p| p.into_inner()) = f.cut_to;
        }
        Ok(())
    }));
    tokio::spawn(poll(
        data_dir.join(CLOCK_FILE),
        data_dir.join(CLOCK_APPLIED),
        |bytes| {
            let f = if bytes.is_empty() {
                ClockFault::default()
            } else {
                parse_clock(bytes)?
            };
            tracing::info!(
                offset_ms = f.offset_ms,
                drift_ms_per_s = f.drift_ms_per_s,
                "chaos fault layer: clock changed"
            );
            if let Some(layer) = LAYER.get() {
                *layer.clock.write().unwrap_or_else(|p| p.into_inner()) = (f, Instant::now());
            }
            Ok(())
        },
    ));
}

/// Reads `path` every [`POLL`] and hands new contents (empty for a missing file) to `take`;
/// acknowledges what it took in `applied`. A malformed file is logged and ignored.
async fn poll(
    path: PathBuf,
    applied: PathBuf,
    take: impl Fn(&[u8]) -> Result<(), ControlFileError>,
) {
    let mut last: Option<Vec<u8>> = None;
    loop {
        let read = match std::fs::read(&path) {
            Ok(bytes) => Ok(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(ControlFileError::Unreadable {
                path: path.display().to_string(),
                source: e,
            }),
        };
        match read.and_then(|bytes| {
            if last.as_ref() == Some(&bytes) {
                return Ok(None);
            }
            take(&bytes).map(|()| Some(bytes))
        }) {
            Ok(Some(bytes)) => {
                let tmp = applied.with_extension("tmp");
                let acked =
                    std::fs::write(&tmp, &bytes).and_then(|()| std::fs::rename(&tmp, &applied));
                if let Err(e) = acked {
                    tracing::warn!(error = %e, path = %applied.display(), "chaos fault layer: cannot acknowledge");
                }
                last = Some(bytes);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "chaos fault layer: control file ignored"),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// What the clock fault adds to this node's wall clock now, in milliseconds (0 without one).
pub fn clock_offset_ms() -> i64 {
    LAYER.get().map_or(0, |l| {
        let (f, since) = *l.clock.read().unwrap_or_else(|p| p.into_inner());
        let drift = f
            .drift_ms_per_s
            .saturating_mul(since.elapsed().as_secs() as i64);
        f.offset_ms.saturating_add(drift)
    })
}

/// Whether messages from this node to `to` are lost.
pub fn is_cut(to: NodeId) -> bool {
    LAYER.get().is_some_and(|l| {
        l.cut_to
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&to)
    })
}

/// Names this node as the sender of an outbound node-to-node call.
pub fn stamp<T>(req: &mut tonic::Request<T>) {
    if let Some(l) = LAYER.get() {
        if let Ok(v) = l.self_id.to_string().parse() {
            req.metadata_mut().insert(FROM_HEADER, v);
        }
    }
}

/// The node that sent `req`, if it is a node-to-node call.
pub fn sender<T>(req: &tonic::Request<T>) -> Option<NodeId> {
    req.metadata().get(FROM_HEADER)?.to_str().ok()?.parse().ok()
}

/// Whether the reply to `req` is lost (its sender is cut off from this node).
pub fn reply_lost<T>(req: &tonic::Request<T>) -> bool {
    sender(req).is_some_and(is_cut)
}

/// Waits as for a message that never arrives, at most `limit` (capped at 10 s), then returns
/// the error the caller would see.
pub async fn lose(limit: Duration) -> tonic::Status {
    tokio::time::sleep(limit.min(LOST_FOR)).await;
    tonic::Status::unavailable("message lost (chaos fault layer)")
}

/// `replies` to a streaming call from `sender`, with every reply from the first one sent
/// while `sender` is cut off withheld: the stream stalls there (at most 10 s) and ends with
/// the error its caller would see. Replies go in order, so one lost reply loses the rest.
pub fn withhold_replies_to_cut<S, T>(
    sender: Option<NodeId>,
    replies: S,
) -> impl futures::Stream<Item = Result<T, tonic::Status>> + Send + 'static
where
    S: futures::Stream<Item = Result<T, tonic::Status>> + Send + 'static,
    T: Send + 'static,
{
    use futures::StreamExt;
    futures::stream::unfold(Some(Box::pin(replies)), move |state| async move {
        let mut replies = state?;
        let reply = replies.next().await?;
        if sender.is_some_and(is_cut) {
            return Some((Err(lose(Duration::MAX).await), None));
        }
        Some((reply, Some(replies)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_control_file_is_strict() {
        assert_eq!(parse(b"{}").unwrap(), Faults::default());
        assert_eq!(
            parse(br#"{"cut_to":[3,2]}"#).unwrap().cut_to,
            BTreeSet::from([2, 3])
        );
        let e = parse(br#"{"cut_too":[2]}"#).unwrap_err().to_string();
        assert!(
            e.contains("chaos-faults.json") && e.contains("cut_too"),
            "{e}"
        );
        assert!(parse(br#"{"cut_to":["two"]}"#).is_err());
        assert_eq!(
            parse_clock(br#"{"offset_ms":-60000}"#).unwrap(),
            ClockFault {
                offset_ms: -60_000,
                drift_ms_per_s: 0
            }
        );
        let e = parse_clock(br#"{"offset":5}"#).unwrap_err().to_string();
        assert!(
            e.contains("chaos-clock.json") && e.contains("offset"),
            "{e}"
        );
    }

    /// The only test that installs the (process-wide) layer.
    #[tokio::test]
    async fn cuts_follow_the_control_file() {
        let dir = tempfile::tempdir().unwrap();
        let write = |text: &str| {
            let tmp = dir.path().join("tmp");
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, dir.path().join(FILE)).unwrap();
        };
        let wait = |want: bool| async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            while is_cut(2) != want {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "is_cut(2) != {want}"
                );
                tokio::time::sleep(POLL).await;
            }
        };
        install(1, dir.path());
        assert!(!is_cut(2));
        let mut req = tonic::Request::new(());
        stamp(&mut req);
        assert_eq!(sender(&req), Some(1));

        write(r#"{"cut_to":[2]}"#);
        wait(true).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while std::fs::read(dir.path().join(APPLIED)).ok().as_deref()
            != Some(&br#"{"cut_to":[2]}"#[..])
        {
            assert!(tokio::time::Instant::now() < deadline, "no acknowledgement");
            tokio::time::sleep(POLL).await;
        }
        assert!(!is_cut(3));
        let mut from2 = tonic::Request::new(());
        from2
            .metadata_mut()
            .insert(FROM_HEADER, "2".parse().unwrap());
        assert!(reply_lost(&from2));
        assert!(
            !reply_lost(&tonic::Request::new(())),
            "clients are never cut"
        );

        std::fs::remove_file(dir.path().join(FILE)).unwrap();
        wait(false).await;
        assert!(!reply_lost(&from2));

        // The clock: an hour ahead, then back to true. (`cluster_clock::local_ms` adds this
        // offset in chaos builds only; other unit tests of this crate read that clock.)
        assert_eq!(clock_offset_ms(), 0);
        std::fs::write(dir.path().join(CLOCK_FILE), br#"{"offset_ms":3600000}"#).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while clock_offset_ms() != 3_600_000 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "clock fault not taken up"
            );
            tokio::time::sleep(POLL).await;
        }
        std::fs::remove_file(dir.path().join(CLOCK_FILE)).unwrap();
        while clock_offset_ms() != 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "clock fault not lifted"
            );
            tokio::time::sleep(POLL).await;
        }
        // A drift grows with the seconds since it was taken up.
        std::fs::write(dir.path().join(CLOCK_FILE), br#"{"drift_ms_per_s":1000}"#).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while clock_offset_ms() < 1_000 {
            assert!(tokio::time::Instant::now() < deadline, "no drift");
            tokio::time::sleep(POLL).await;
        }
        std::fs::remove_file(dir.path().join(CLOCK_FILE)).unwrap();
        while clock_offset_ms() != 0 {
            assert!(tokio::time::Instant::now() < deadline, "drift not lifted");
            tokio::time::sleep(POLL).await;
        }
    }

    #[test]
    fn the_sender_header_is_read_back() {
        let mut req = tonic::Request::new(());
        assert_eq!(sender(&req), None);
        req.metadata_mut().insert(FROM_HEADER, "7".parse().unwrap());
        assert_eq!(sender(&req), Some(7));
        req.metadata_mut()
            .insert(FROM_HEADER, "seven".parse().unwrap());
        assert_eq!(sender(&req), None);
    }
}

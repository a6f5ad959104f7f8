//! Whether this node is cut off from the cluster's leadership, so that it can say so at once
//! instead of letting callers wait out their timeouts (issue 19: fail fast on the minority
//! side).
//!
//! A follower is in contact while a leader keeps sending it AppendEntries (heartbeats
//! included) that it accepts: [`LeaderContact::heard`] is called by the Raft service for
//! each one. A leader is in contact while a majority keeps acknowledging it (openraft's
//! `last_quorum_acked`). A node that has had no contact for longer than its longest election
//! timeout is *cut off*: a healthy cluster elects a leader, and that leader reaches every
//! connected node, well within that time. A cut-off node answers writes and linearizable
//! reads with UNAVAILABLE and the members it knows, and clients and agents move to another
//! node (`client/src/failover.rs` moves on by the answer's typed refusal, `cut-off`).
//!
//! A node that just started has had no contact yet; it is not counted as cut off until the
//! timeout has passed since it started, so a restart does not refuse calls while the first
//! heartbeat is on its way.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The time of the last contact with a leader, as milliseconds since the node started.
#[derive(Debug)]
pub struct LeaderContact {
    /// When the node started (the zero of `last_ms`).
    started: Instant,
    /// Milliseconds from `started` to the last contact; 0 until the first one.
    last_ms: AtomicU64,
}

impl Default for LeaderContact {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
}

impl LeaderContact {
    /// Records a contact now (an accepted AppendEntries or snapshot from a leader).
    pub fn heard(&self) {
        let ms = self.started.elapsed().as_millis().max(1) as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// The last contact, as milliseconds since the node started (0: none yet). Two equal
    /// readings mean no contact came in between.
    pub fn last_contact_ms(&self) -> u64 {
        self.last_ms.load(Ordering::Relaxed)
    }

    /// How long ago the last contact was, or since the start when there was none.
    pub fn silence(&self) -> Duration {
        let now = self.started.elapsed();
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        now.saturating_sub(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_counts_from_the_start_until_the_first_contact() {
        let c = LeaderContact {
            started: Instant::now() - Duration::from_secs(5),
            last_ms: AtomicU64::new(0),
        };
        assert!(c.silence() >= Duration::from_secs(5));
        c.heard();
        assert!(c.silence() < Duration::from_secs(1));
        // An older contact never moves the last one back.
        c.last_ms.fetch_max(1, Ordering::Relaxed);
        assert!(c.silence() < Duration::from_secs(1));
    }
}

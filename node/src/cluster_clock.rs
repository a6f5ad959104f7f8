//! The cluster's time: what the leader stamps on every entry, and the "now" its loops
//! evaluate at.
//!
//! A leader that used its own wall clock would carry a wrong clock into every decision: an
//! hour ahead, it would issue plans in windows that have not opened and end suppressions an
//! hour early. Instead every Raft reply carries the replying node's wall clock
//! (`RaftReply.clock_ms`), and this node keeps, per peer, the last reading together with the
//! monotonic instant it was taken at (the middle of the call: the reading is off by at most
//! half the round trip). A peer's clock *now* is that reading plus the monotonic time since,
//! so a jump of this node's own wall clock does not move its estimates of the others.
//!
//! The cluster's time is the lower median of this node's clock and the fresh estimates of the
//! voters' clocks. The leader hears from a majority on every heartbeat, so its estimates are
//! at most a heartbeat old. While fewer than half of the clocks it has fresh estimates of are
//! wrong, the median is one of the right clocks (within the round-trip error): one node with
//! a skewed clock, leader or not, is outvoted in a cluster of 3 with all nodes up, two in a
//! cluster of 5. With only two fresh clocks (3 nodes, one down) the lower of them is taken, and
//! a skew of one of them can then show. The entry clock of the state machine
//! (`hub_engine::entry_clock`) adds the other half: entry times never go backwards when
//! leadership moves between nodes whose estimates differ.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use raft_store::NodeId;

/// This node's wall clock, in milliseconds since the Unix epoch (0 before 1970). In a chaos
/// build the fault layer's clock offset is added.
pub fn local_ms() -> i64 {
    let real = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    #[cfg(feature = "chaos-faults")]
    let real = real + crate::fault_layer::clock_offset_ms();
    real
}

/// One reading of a peer's clock.
#[derive(Debug, Clone, Copy)]
struct Reading {
    /// What the peer's clock said.
    peer_ms: i64,
    /// When, on this node's monotonic clock (the middle of the call).
    at: Instant,
    /// The call's round trip: the reading is off by at most half of it.
    round_trip: Duration,
}

/// A peer's clock as this node sees it (for `hubctl status` and the metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerClock {
    /// The peer.
    pub id: NodeId,
    /// Its clock minus this node's, in milliseconds.
    pub offset_ms: i64,
    /// The round trip of the call the reading came from, in milliseconds.
    pub round_trip_ms: u64,
    /// How old the reading is, in milliseconds.
    pub age_ms: u64,
}

/// Per-peer clock readings and the cluster time derived from them.
#[derive(Debug)]
pub struct ClusterClock {
    /// This node (its own clock is read directly).
    self_id: NodeId,
    /// Readings older than this are not used.
    fresh_for: Duration,
    readings: Mutex<BTreeMap<NodeId, Reading>>,
}

impl ClusterClock {
    /// A clock for node `self_id` that trusts readings for `fresh_for`.
    pub fn new(self_id: NodeId, fresh_for: Duration) -> Self {
        ClusterClock {
            self_id,
            fresh_for,
            readings: Mutex::new(BTreeMap::new()),
        }
    }

    /// Records that `peer` answered a call sent at `sent` and answered at `received` (this
    /// node's monotonic clock) with its clock at `peer_ms`. A reading of 0 (a node that does
    /// not send its clock) is ignored.
    pub fn observe(&self, peer: NodeId, peer_ms: i64, sent: Instant, received: Instant) {
        if peer_ms <= 0 || peer == self.self_id || received < sent {
            return;
        }
        let round_trip = received - sent;
        let reading = Reading {
            peer_ms,
            at: sent + round_trip / 2,
            round_trip,
        };
        self.lock().insert(peer, reading);
    }

    /// `peer`'s clock now, if a fresh reading of it exists.
    fn estimate(&self, peer: NodeId, now: Instant) -> Option<i64> {
        let r = *self.lock().get(&peer)?;
        let age = now.saturating_duration_since(r.at);
        (age <= self.fresh_for).then(|| r.peer_ms + age.as_millis() as i64)
    }

    /// The cluster's time now: the lower median of this node's clock and the fresh estimates
    /// of the other `voters`' clocks.
    pub fn now_ms(&self, voters: impl IntoIterator<Item = NodeId>) -> i64 {
        let now = Instant::now();
        let mut clocks = vec![local_ms()];
        clocks.extend(
            voters
                .into_iter()
                .filter(|v| *v != self.self_id)
                .filter_map(|v| self.estimate(v, now)),
        );
        lower_median(&mut clocks)
    }

    /// Every peer's last reading, as offsets from this node's clock.
    pub fn peers(&self) -> Vec<PeerClock> {
        let now = Instant::now();
        let local = local_ms();
        self.lock()
            .iter()
            .map(|(id, r)| {
                let age = now.saturating_duration_since(r.at);
                PeerClock {
                    id: *id,
                    offset_ms: r.peer_ms + age.as_millis() as i64 - local,
                    round_trip_ms: r.round_trip.as_millis() as u64,
                    age_ms: age.as_millis() as u64,
                }
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, Reading>> {
        self.readings.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The lower median of `values` (not empty).
fn lower_median(values: &mut [i64]) -> i64 {
    debug_assert!(!values.is_empty(), "the local clock is always there");
    values.sort_unstable();
    values[(values.len() - 1) / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000;

    fn clock_with(peers: &[(NodeId, i64)]) -> ClusterClock {
        let c = ClusterClock::new(1, Duration::from_secs(2));
        let now = Instant::now();
        for (id, offset) in peers {
            c.observe(*id, local_ms() + offset, now, now);
        }
        c
    }

    fn near(a: i64, b: i64) -> bool {
        (a - b).abs() < 1_000
    }

    #[test]
    fn a_skewed_leader_is_outvoted_by_its_followers() {
        // This node (the leader) is an hour ahead of both followers: from its point of
        // view both are an hour behind it, and the median is theirs.
        let c = clock_with(&[(2, -HOUR), (3, -HOUR + 5)]);
        let t = c.now_ms([1, 2, 3]);
        assert!(near(t, local_ms() - HOUR), "{t}");
    }

    #[test]
    fn one_skewed_follower_changes_nothing() {
        let c = clock_with(&[(2, 3), (3, 2 * HOUR)]);
        assert!(near(c.now_ms([1, 2, 3]), local_ms()));
        // Five nodes, two skewed either way.
        let c = clock_with(&[(2, HOUR), (3, -HOUR), (4, 10), (5, -10)]);
        assert!(near(c.now_ms([1, 2, 3, 4, 5]), local_ms()));
    }

    #[test]
    fn stale_readings_non_voters_and_zero_clocks_are_not_used() {
        let c = ClusterClock::new(1, Duration::from_millis(50));
        let long_ago = Instant::now() - Duration::from_secs(10);
        c.observe(2, local_ms() + HOUR, long_ago, long_ago);
        c.observe(3, 0, Instant::now(), Instant::now());
        assert!(
            near(c.now_ms([1, 2, 3]), local_ms()),
            "only the local clock"
        );
        // A learner's reading does not vote.
        let c = clock_with(&[(4, HOUR), (5, HOUR)]);
        assert!(near(c.now_ms([1, 2, 3]), local_ms()));
    }

    #[test]
    fn an_estimate_moves_with_the_monotonic_clock_and_halves_the_round_trip() {
        let c = ClusterClock::new(1, Duration::from_secs(60));
        let sent = Instant::now() - Duration::from_millis(400);
        let received = sent + Duration::from_millis(200);
        let peer_ms = 1_000_000;
        c.observe(2, peer_ms, sent, received);
        // Read at the middle of the call, 300 ms ago.
        let e = c.estimate(2, Instant::now()).unwrap();
        assert!((e - (peer_ms + 300)).abs() < 50, "{e}");
        let p = c.peers();
        assert_eq!((p[0].id, p[0].round_trip_ms), (2, 200));
    }

    #[test]
    fn two_clocks_take_the_lower() {
        let c = clock_with(&[(2, HOUR)]);
        assert!(near(c.now_ms([1, 2, 3]), local_ms()));
        let c = clock_with(&[(2, -HOUR)]);
        assert!(near(c.now_ms([1, 2, 3]), local_ms() - HOUR));
    }
}

//! Connection budgets of one listener: how many connections each kind of party may hold, so
//! that no party can spend the slots another needs (docs/SECURITY.md "Budgets").
//!
//! Every connection is in one of three classes, each counted apart:
//! - **unadmitted**: its TLS handshake is under way, or it finished without a usable
//!   certificate and no request on it has carried a valid operator token yet. At most
//!   [`Limits::max_unadmitted_per_source`] per source (an IPv4 address, an IPv6 /64) and
//!   [`Limits::max_unadmitted`] in all. A new connection that would pass either limit closes
//!   an unadmitted connection of its source (or of the listener) instead of being refused:
//!   the oldest of those that finished their handshake without proving anything, else the
//!   oldest handshake. The newest wins, so connections that sit idle cannot keep a client
//!   that is connecting now out, and a handshake under way is the last to go. The listener
//!   closes an unadmitted connection whose handshake has not
//!   finished within [`Limits::handshake_timeout`], or that is still unadmitted
//!   [`Limits::admission_timeout`] after it; keep-alive pings admit nothing.
//! - **peers**: a certificate naming a node of this cluster. At most
//!   [`Limits::max_peer_connections`]; no other party's connections count against them.
//! - **admitted**: a certificate naming an agent or an operator, a connection that carried a
//!   valid operator token ([`Admission::admit`]), or any connection of a plaintext
//!   (`--insecure`, loopback) listener. At most [`Limits::max_connections`]; one more is closed
//!   at once.
//!
//! The ledger is one mutex over small maps; each connection touches it when it opens, when it
//! is admitted and when it closes, never per byte.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::oneshot;

/// A listener's budgets (see the module documentation).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Admitted connections (agents, operators, token holders) open at most.
    pub max_connections: usize,
    /// Connections of this cluster's nodes open at most.
    pub max_peer_connections: usize,
    /// Unadmitted connections (handshaking, or without credentials yet) open at most.
    pub max_unadmitted: usize,
    /// Unadmitted connections from one source open at most.
    pub max_unadmitted_per_source: usize,
    /// Deadline of one TLS handshake.
    pub handshake_timeout: Duration,
    /// How long a connection may stay unadmitted after its handshake.
    pub admission_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 4_096,
            max_peer_connections: 64,
            max_unadmitted: 512,
            max_unadmitted_per_source: 16,
            handshake_timeout: Duration::from_secs(5),
            admission_timeout: Duration::from_secs(10),
        }
    }
}

/// Which budget a connection counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Handshaking, or no credentials yet.
    Unadmitted,
    /// A node of this cluster.
    Peer,
    /// An identified party that is not a node, or a plaintext listener's connection.
    Admitted,
}

/// Why a connection could not move into a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    /// The class holds its maximum.
    #[error("the listener holds its maximum of {max} {class} connections")]
    AtCap {
        /// The class's name.
        class: &'static str,
        /// Its limit.
        max: usize,
    },
    /// The connection was closed to make room before it could be admitted.
    #[error("the connection was closed to make room for a newer one")]
    Evicted,
}

/// The key per-source limits count by: an IPv4 address (an IPv4-mapped IPv6 address is the
/// IPv4 one), or an IPv6 /64, which one host usually holds whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Source(IpAddr);

impl Source {
    /// The source `ip` counts as.
    pub fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(_) => Source(ip),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source(IpAddr::V4(v4)),
                None => {
                    let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                    Source(IpAddr::V6(Ipv6Addr::from(prefix)))
                }
            },
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(a) => write!(f, "{a}"),
            IpAddr::V6(a) => write!(f, "{a}/64"),
        }
    }
}

/// What the budget counted since the listener started.
#[derive(Debug, Default)]
pub struct BudgetStats {
    /// Unadmitted connections closed to make room for a newer one.
    pub evicted: AtomicU64,
    /// Connections closed because they were still unadmitted at their deadline.
    pub admission_timeouts: AtomicU64,
    /// Admitted connections closed at once because [`Limits::max_connections`] were open.
    pub over_cap: AtomicU64,
    /// Peer connections closed at once because [`Limits::max_peer_connections`] were open.
    pub peers_over_cap: AtomicU64,
}

/// Where an unadmitted connection stands; idle ones ([`Stage::Idle`]) are closed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    /// Its handshake finished; it has proved nothing.
    Idle,
    /// Its handshake is under way.
    Handshaking,
}

/// An unadmitted connection's place in the eviction order: idle before handshaking, then
/// oldest first.
type Rank = (Stage, u64);

struct Entry {
    class: Class,
    stage: Stage,
    source: Source,
    /// Dropped to close the connection (see [`Slot::poll_evicted`]).
    _evict: oneshot::Sender<()>,
}

#[derive(Default)]
struct Ledger {
    next_id: u64,
    entries: HashMap<u64, Entry>,
    /// Unadmitted connections in eviction order.
    unadmitted: BTreeSet<Rank>,
    unadmitted_by_source: HashMap<Source, BTreeSet<Rank>>,
    peers: usize,
    admitted: usize,
}

impl Ledger {
    /// Takes `rank` out of the unadmitted sets; whether it was there.
    fn leave_unadmitted(&mut self, rank: Rank, source: Source) -> bool {
        let was = self.unadmitted.remove(&rank);
        if let Some(ranks) = self.unadmitted_by_source.get_mut(&source) {
            ranks.remove(&rank);
            if ranks.is_empty() {
                self.unadmitted_by_source.remove(&source);
            }
        }
        was
    }

    fn join_unadmitted(&mut self, rank: Rank, source: Source) {
        self.unadmitted.insert(rank);
        self.unadmitted_by_source
            .entry(source)
            .or_default()
            .insert(rank);
    }

    /// Closes the unadmitted connection of `rank`.
    fn evict(&mut self, rank: Rank) {
        if let Some(entry) = self.entries.remove(&rank.1) {
            debug_assert_eq!(entry.class, Class::Unadmitted);
            self.leave_unadmitted(rank, entry.source);
        }
    }

    fn count(&mut self, class: Class) -> Option<&mut usize> {
        match class {
            Class::Unadmitted => None,
            Class::Peer => Some(&mut self.peers),
            Class::Admitted => Some(&mut self.admitted),
        }
    }
}

/// The budgets of one listener.
pub struct Budget {
    limits: Limits,
    ledger: Mutex<Ledger>,
    stats: Arc<BudgetStats>,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Budget {
    /// A budget of `limits`, counting into `stats`.
    pub fn new(limits: Limits, stats: Arc<BudgetStats>) -> Arc<Budget> {
        assert!(limits.max_unadmitted > 0 && limits.max_unadmitted_per_source > 0);
        Arc::new(Budget {
            limits,
            ledger: Mutex::new(Ledger::default()),
            stats,
        })
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new connection from `ip`, unadmitted; to make room it closes the oldest unadmitted
    /// connection of the same source, or of the listener, when either is at its limit.
    pub fn enter(self: &Arc<Self>, ip: IpAddr) -> Slot {
        let source = Source::of(ip);
        let (evict, evicted) = oneshot::channel();
        let mut ledger = self.ledger();
        let of_source = ledger
            .unadmitted_by_source
            .get(&source)
            .map_or(0, BTreeSet::len);
        if of_source >= self.limits.max_unadmitted_per_source {
            let first = ledger.unadmitted_by_source[&source].first().copied();
            if let Some(first) = first {
                ledger.evict(first);
                self.stats.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        if ledger.unadmitted.len() >= self.limits.max_unadmitted {
            if let Some(first) = ledger.unadmitted.first().copied() {
                ledger.evict(first);
                self.stats.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        let id = ledger.next_id;
        ledger.next_id += 1;
        ledger.entries.insert(
            id,
            Entry {
                class: Class::Unadmitted,
                stage: Stage::Handshaking,
                source,
                _evict: evict,
            },
        );
        ledger.join_unadmitted((Stage::Handshaking, id), source);
        debug_assert!(ledger.unadmitted.len() <= self.limits.max_unadmitted);
        drop(ledger);
        Slot {
            budget: self.clone(),
            id,
            evicted,
            closed: false,
        }
    }

    /// Moves the unadmitted connection `id` into `class`.
    fn promote(&self, id: u64, class: Class) -> Result<(), Full> {
        let max = match class {
            Class::Unadmitted => return Ok(()),
            Class::Peer => self.limits.max_peer_connections,
            Class::Admitted => self.limits.max_connections,
        };
        let mut ledger = self.ledger();
        let (source, stage) = match ledger.entries.get(&id) {
            None => return Err(Full::Evicted),
            Some(e) if e.class == class => return Ok(()),
            Some(e) => (e.source, e.stage),
        };
        let count = ledger.count(class).map_or(0, |c| *c);
        if count >= max {
            let counter = match class {
                Class::Peer => &self.stats.peers_over_cap,
                Class::Admitted | Class::Unadmitted => &self.stats.over_cap,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            return Err(Full::AtCap {
                class: match class {
                    Class::Peer => "peer",
                    Class::Admitted | Class::Unadmitted => "client",
                },
                max,
            });
        }
        let was_unadmitted = ledger.leave_unadmitted((stage, id), source);
        debug_assert!(was_unadmitted, "only an unadmitted connection is promoted");
        if let Some(c) = ledger.count(class) {
            *c += 1;
        }
        if let Some(e) = ledger.entries.get_mut(&id) {
            e.class = class;
        }
        Ok(())
    }

    fn release(&self, id: u64) {
        let mut ledger = self.ledger();
        let Some(entry) = ledger.entries.remove(&id) else {
            return; // evicted earlier
        };
        match entry.class {
            Class::Unadmitted => {
                ledger.leave_unadmitted((entry.stage, id), entry.source);
            }
            class => {
                if let Some(c) = ledger.count(class) {
                    *c = c.saturating_sub(1);
                }
            }
        }
    }

    /// Marks the unadmitted connection `id` as done with its handshake: it is closed before
    /// any handshake under way when room must be made.
    fn handshaken(&self, id: u64) {
        let mut ledger = self.ledger();
        let Some(entry) = ledger.entries.get_mut(&id) else {
            return;
        };
        if entry.class != Class::Unadmitted || entry.stage == Stage::Idle {
            return;
        }
        entry.stage = Stage::Idle;
        let source = entry.source;
        ledger.leave_unadmitted((Stage::Handshaking, id), source);
        ledger.join_unadmitted((Stage::Idle, id), source);
    }

    /// Open connections per class: (unadmitted, peers, admitted).
    pub fn open(&self) -> (usize, usize, usize) {
        let ledger = self.ledger();
        (ledger.unadmitted.len(), ledger.peers, ledger.admitted)
    }
}

/// One connection's place in its listener's budget; released when dropped.
pub struct Slot {
    budget: Arc<Budget>,
    id: u64,
    evicted: oneshot::Receiver<()>,
    closed: bool,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("id", &self.id).finish()
    }
}

impl Slot {
    /// Ready once the budget closed this connection to make room for a newer one.
    pub fn poll_evicted(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.closed {
            return Poll::Ready(());
        }
        match std::pin::Pin::new(&mut self.evicted).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(_) => {
                self.closed = true;
                Poll::Ready(())
            }
        }
    }

    /// Marks the handshake done (see [`Budget`]'s eviction order).
    pub fn handshaken(&self) {
        self.budget.handshaken(self.id);
    }

    /// Moves the connection into `class` (from unadmitted).
    pub fn promote(&self, class: Class) -> Result<(), Full> {
        self.budget.promote(self.id, class)
    }

    /// The admission handle of this connection, for the requests on it.
    pub fn admission(&self) -> Arc<Admission> {
        Arc::new(Admission {
            admitted: AtomicBool::new(false),
            slot: Some((self.budget.clone(), self.id)),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.budget.release(self.id);
    }
}

/// Whether a connection has proved who is calling; shared by the connection and the requests
/// on it, so that a request carrying a valid operator token admits its connection.
#[derive(Debug)]
pub struct Admission {
    admitted: AtomicBool,
    slot: Option<(Arc<Budget>, u64)>,
}

impl Admission {
    /// An admission that holds already (a certificate, a plaintext listener, or a connection
    /// that belongs to no budget).
    pub fn granted() -> Arc<Admission> {
        Arc::new(Admission {
            admitted: AtomicBool::new(true),
            slot: None,
        })
    }

    /// Whether the connection is admitted.
    pub fn is_admitted(&self) -> bool {
        self.admitted.load(Ordering::Acquire)
    }

    /// Admits the connection (a request on it carried a valid operator token): it leaves the
    /// unadmitted budget for the admitted one and its deadline no longer holds. Fails when the
    /// admitted connections are at their cap, or the connection was already closed.
    pub fn admit(&self) -> Result<(), Full> {
        self.admit_as(Class::Admitted)
    }

    /// Moves the connection into `class` (a peer or an admitted party) and lifts its deadline.
    pub(crate) fn admit_as(&self, class: Class) -> Result<(), Full> {
        if self.is_admitted() {
            return Ok(());
        }
        if let Some((budget, id)) = &self.slot {
            budget.promote(*id, class)?;
        }
        self.admitted.store(true, Ordering::Release);
        Ok(())
    }
}

/// Connections per source for listeners without identities (the agent's canary proxy and
/// metrics): one source holds at most `max` at once, and one more from it is refused. Unlike
/// [`Budget`] nothing is evicted: these are the service's clients, mid-request.
#[derive(Debug)]
pub struct PerSource {
    max: usize,
    open: Arc<Mutex<HashMap<Source, usize>>>,
}

impl PerSource {
    /// At most `max` connections per source.
    pub fn new(max: usize) -> PerSource {
        PerSource {
            max,
            open: Arc::default(),
        }
    }

    /// A place for one more connection from `ip`, or `None` when its source holds `max`.
    pub fn try_enter(&self, ip: IpAddr) -> Option<SourceSlot> {
        let source = Source::of(ip);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(source).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(SourceSlot {
            open: self.open.clone(),
            source,
        })
    }
}

/// One connection counted by [`PerSource`]; released when dropped.
#[derive(Debug)]
pub struct SourceSlot {
    open: Arc<Mutex<HashMap<Source, usize>>>,
    source: Source,
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.source) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn limits(per_source: usize, total: usize) -> Limits {
        Limits {
            max_connections: 2,
            max_peer_connections: 1,
            max_unadmitted: total,
            max_unadmitted_per_source: per_source,
            ..Limits::default()
        }
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    fn is_evicted(slot: &mut Slot) -> bool {
        let waker = std::task::Waker::noop();
        slot.poll_evicted(&mut Context::from_waker(waker))
            .is_ready()
    }

    #[test]
    fn a_source_at_its_limit_loses_its_oldest_unadmitted_connection() {
        let stats = Arc::new(BudgetStats::default());
        let budget = Budget::new(limits(2, 100), stats.clone());
        let mut a1 = budget.enter(ip(1));
        let mut a2 = budget.enter(ip(1));
        let mut b1 = budget.enter(ip(2));
        let mut a3 = budget.enter(ip(1));
        assert!(is_evicted(&mut a1), "the oldest of 10.0.0.1 made room");
        assert!(!is_evicted(&mut a2) && !is_evicted(&mut a3) && !is_evicted(&mut b1));
        assert_eq!(budget.open(), (3, 0, 0));
        assert_eq!(stats.evicted.load(Ordering::Relaxed), 1);
        drop(a1);
        assert_eq!(
            budget.open(),
            (3, 0, 0),
            "an evicted slot releases nothing twice"
        );
    }

    #[test]
    fn idle_connections_go_before_handshakes_under_way() {
        let budget = Budget::new(limits(3, 100), Arc::default());
        let mut handshaking = budget.enter(ip(1));
        let mut idle = budget.enter(ip(1));
        idle.handshaken();
        let mut newer = budget.enter(ip(1));
        let _newest = budget.enter(ip(1));
        assert!(
            is_evicted(&mut idle),
            "the idle one goes first, though younger"
        );
        assert!(!is_evicted(&mut handshaking) && !is_evicted(&mut newer));
        let _one_more = budget.enter(ip(1));
        assert!(is_evicted(&mut handshaking), "then the oldest handshake");
    }

    #[test]
    fn the_listener_at_its_limit_loses_its_oldest_unadmitted_connection() {
        let budget = Budget::new(limits(10, 2), Arc::default());
        let mut a = budget.enter(ip(1));
        let mut b = budget.enter(ip(2));
        let mut c = budget.enter(ip(3));
        assert!(is_evicted(&mut a));
        assert!(!is_evicted(&mut b) && !is_evicted(&mut c));
    }

    #[test]
    fn admitted_and_peer_connections_are_never_evicted_and_have_their_own_caps() {
        let stats = Arc::new(BudgetStats::default());
        let budget = Budget::new(limits(1, 1), stats.clone());
        let mut peer = budget.enter(ip(1));
        peer.promote(Class::Peer).unwrap();
        let mut client = budget.enter(ip(1));
        client.promote(Class::Admitted).unwrap();
        let mut strangers: Vec<Slot> = (0..10).map(|_| budget.enter(ip(1))).collect();
        assert!(!is_evicted(&mut peer) && !is_evicted(&mut client));
        assert_eq!(
            strangers
                .iter_mut()
                .filter_map(|s| (!is_evicted(s)).then_some(()))
                .count(),
            1
        );
        assert_eq!(budget.open(), (1, 1, 1));
        let second_peer = budget.enter(ip(3));
        assert_eq!(
            second_peer.promote(Class::Peer),
            Err(Full::AtCap {
                class: "peer",
                max: 1
            })
        );
        assert_eq!(stats.peers_over_cap.load(Ordering::Relaxed), 1);
        drop(peer);
        assert_eq!(second_peer.promote(Class::Peer), Ok(()));
    }

    #[test]
    fn a_token_admits_its_connection_once_and_an_evicted_one_not_at_all() {
        let budget = Budget::new(limits(1, 10), Arc::default());
        let first = budget.enter(ip(1));
        let admission = first.admission();
        assert!(!admission.is_admitted());
        assert_eq!(admission.admit(), Ok(()));
        assert_eq!(admission.admit(), Ok(()));
        assert!(admission.is_admitted());
        assert_eq!(budget.open(), (0, 0, 1));
        let second = budget.enter(ip(2));
        let _third = budget.enter(ip(2));
        assert_eq!(second.admission().admit(), Err(Full::Evicted));
        drop(first);
        assert_eq!(budget.open(), (1, 0, 0));
    }

    #[test]
    fn per_source_refuses_past_its_limit_and_frees_on_drop() {
        let limit = PerSource::new(2);
        let a = limit.try_enter(ip(1)).unwrap();
        let _b = limit.try_enter(ip(1)).unwrap();
        assert!(limit.try_enter(ip(1)).is_none());
        assert!(limit.try_enter(ip(2)).is_some());
        drop(a);
        assert!(limit.try_enter(ip(1)).is_some());
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(Source::of(a), Source::of(b));
        assert_ne!(Source::of(a), Source::of(c));
        assert_eq!(Source::of(a).to_string(), "2001:db8:1:2::/64");
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(Source::of(mapped), Source::of(ip(1)));
    }
}

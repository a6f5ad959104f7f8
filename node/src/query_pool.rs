//! Where reads that cost more than a lookup run: off the runtime's workers, which carry Raft,
//! apply and every call, at most [`query_threads`] scans and as many parses at a time, and at
//! most [`PER_CALLER_QUERIES`] in flight (running or waiting) per verified identity.
//!
//! A read that parses operator-supplied text (`module_dry_run`) or lists a table of a large
//! state costs milliseconds to seconds. Answered on a runtime worker it stalled that worker
//! (and the Raft tasks queued behind it), and answered under the state's lock it stalled
//! apply, which waits for the write lock, and then every reader behind apply: four viewers'
//! dry runs took write latency from 7 ms to 2.6 s and caused an election (issue 51). The
//! callers decide what runs here ([`crate::query::Cost`]).
//!
//! Two kinds of thread. A parse of the caller's text needs no state: it runs without the
//! state's lock on threads of their own at a lower CPU priority ([`PARSE_NICENESS`] above the
//! node's), so on a busy machine the scheduler runs Raft and apply first. Whatever holds the
//! state's lock (a scan, a dry run's check against the published modules) runs on tokio's
//! blocking threads at the node's own priority: apply never waits for a lock held by a thread
//! the scheduler puts last.
//!
//! A caller over its limit is refused at once with `RESOURCE_EXHAUSTED` naming the limit,
//! before anything is parsed or read. Nodes are not counted: a node asks on behalf of a
//! caller its own pool already counted (a follower forwarding `explain` to the leader).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hub_tls::Identity;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

use crate::auth::Caller;

/// Scans that run at once on one node, and parses apart: half its cores each, at least one;
/// more wait, in arrival order. Parses must leave Raft and apply a core even when every place
/// is busy: on two cores, two parse places doubled the writes' p99 under a storm of dry runs,
/// one kept it within twice the idle p99 (`tests/tests/abuse/queries.rs`). Scans are short
/// and hold the state's lock; their own places keep a storm of parses from holding up a
/// list.
pub fn query_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get() / 2)
        .max(1)
}

/// Reads one caller (a verified identity, or everyone on an `--insecure` node) may have in
/// flight on one node, running or waiting; one more is refused.
pub const PER_CALLER_QUERIES: usize = 4;

/// How much lower the parse threads' CPU priority is than the node's (added to its nice
/// value, at most 19).
pub const PARSE_NICENESS: i32 = 10;

/// The pool of one node.
#[derive(Debug)]
pub struct QueryPool {
    /// Places for work at the node's priority (scans, checks under the lock).
    running: Arc<Semaphore>,
    /// Places for parses, apart: a storm of dry runs does not hold up a list.
    parsing: Arc<Semaphore>,
    in_flight: Arc<Mutex<HashMap<Option<Identity>, usize>>>,
    per_caller: usize,
    parsers: Parsers,
}

/// The parse threads: a runtime of their own, whose threads lower their priority as they
/// start. Stopped in the background when dropped (a runtime dropped inside another one's task
/// would panic).
#[derive(Debug)]
struct Parsers(Option<tokio::runtime::Runtime>);

impl Drop for Parsers {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// Lowers the calling thread's CPU priority by [`PARSE_NICENESS`] (Linux: a thread id names
/// one thread to `setpriority`). Lowering never needs a privilege; a failure leaves the
/// thread as it was.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: plain system calls on the calling thread's own id; no memory is shared.
    unsafe {
        let tid = libc::gettid() as libc::id_t;
        let current = libc::getpriority(libc::PRIO_PROCESS, tid);
        libc::setpriority(libc::PRIO_PROCESS, tid, (current + PARSE_NICENESS).min(19));
    }
}

/// One caller's place in the pool, held from admission until its work is done (also when the
/// call was given up meanwhile: work already started still counts).
#[derive(Debug)]
pub struct Slot {
    in_flight: Arc<Mutex<HashMap<Option<Identity>, usize>>>,
    /// `None` for a node's read, which is not counted.
    key: Option<Option<Identity>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else {
            return;
        };
        let mut in_flight = lock(&self.in_flight);
        if let Some(n) = in_flight.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                in_flight.remove(&key);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The counts stay consistent whatever panicked while they were held (each change is one
    // statement).
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a read holds while its work runs: its caller's slot and one of the running places.
type Held = (Slot, OwnedSemaphorePermit);

fn failed(e: tokio::task::JoinError) -> Status {
    tracing::error!(error = %e, "a query failed on the query pool");
    Status::internal("the query failed on this node (see its log)")
}

impl QueryPool {
    /// A pool running `threads` scans and `threads` parses at once, `per_caller` in flight
    /// per caller. Fails if the parse threads' runtime cannot be built.
    pub fn new(threads: usize, per_caller: usize) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let parsers = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(threads)
            .thread_name("hub-query-parse")
            .on_thread_start(lower_priority)
            .build()?;
        Ok(QueryPool {
            running: Arc::new(Semaphore::new(threads)),
            parsing: Arc::new(Semaphore::new(threads)),
            in_flight: Arc::default(),
            per_caller: per_caller.max(1),
            parsers: Parsers(Some(parsers)),
        })
    }

    /// Admits one read of `caller`, or refuses it with `RESOURCE_EXHAUSTED` when the caller
    /// already has its limit in flight. The slot is released when dropped.
    pub fn admit(&self, caller: &Caller) -> Result<Slot, Status> {
        let key = match caller {
            Caller::Verified(Identity::Node(_)) => {
                return Ok(Slot {
                    in_flight: self.in_flight.clone(),
                    key: None,
                })
            }
            Caller::Verified(identity) => Some(identity.clone()),
            Caller::Insecure => None,
        };
        let mut in_flight = lock(&self.in_flight);
        let n = in_flight.entry(key.clone()).or_insert(0);
        if *n >= self.per_caller {
            let who = key.map_or_else(|| "this insecure node's callers".into(), |i| i.to_string());
            return Err(Status::resource_exhausted(format!(
                "{who} already has {n} queries in flight on this node, at most {} per caller \
                 (the query budget); retry when one has answered",
                self.per_caller
            )));
        }
        *n += 1;
        Ok(Slot {
            in_flight: self.in_flight.clone(),
            key: Some(key),
        })
    }

    /// One of `places`, waited for in arrival order.
    async fn place(places: &Arc<Semaphore>) -> Result<OwnedSemaphorePermit, Status> {
        places
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| crate::stopping::refusal())
    }

    /// Runs `work` (which may take the state's lock) for the caller admitted as `slot`, on a
    /// blocking thread at the node's priority, once one of the pool's places is free. The
    /// slot and the place are released when `work` returns, even if the call was dropped
    /// while it ran.
    pub async fn run<T, F>(&self, slot: Slot, work: F) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let held: Held = (slot, Self::place(&self.running).await?);
        tokio::task::spawn_blocking(move || {
            let _held = held;
            work()
        })
        .await
        .map_err(failed)
    }

    /// Runs `parse` (which must not take the state's lock) for the caller admitted as
    /// `slot`, on a parse thread at the lower priority, once one of the pool's places is
    /// free; returns its result and the slot, for the read's next step. The place is
    /// released when `parse` returns, and the slot too if the call was dropped meanwhile.
    pub async fn parse<T, F>(&self, slot: Slot, parse: F) -> Result<(T, Slot), Status>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (slot, place) = (slot, Self::place(&self.parsing).await?);
        let parsers = self
            .parsers
            .0
            .as_ref()
            .ok_or_else(crate::stopping::refusal)?;
        parsers
            .spawn_blocking(move || {
                let parsed = parse();
                drop(place);
                (parsed, slot)
            })
            .await
            .map_err(failed)
    }

    /// How many of `caller`'s reads are in flight now.
    pub fn in_flight(&self, caller: &Caller) -> usize {
        let key = match caller {
            Caller::Verified(identity) => Some(identity.clone()),
            Caller::Insecure => None,
        };
        lock(&self.in_flight).get(&key).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn op(name: &str) -> Caller {
        Caller::Verified(Identity::Operator(name.into()))
    }

    #[test]
    fn a_caller_over_its_limit_is_refused_naming_the_limit_and_others_are_not() {
        let pool = QueryPool::new(1, 2).expect("pool");
        let a1 = pool.admit(&op("alice")).expect("first");
        let _a2 = pool.admit(&op("alice")).expect("second");
        let refused = pool.admit(&op("alice")).expect_err("third");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(
            refused.message().contains("operator/alice")
                && refused.message().contains("at most 2 per caller"),
            "{}",
            refused.message()
        );
        // Another caller is counted apart; a node is not counted at all.
        let _b = pool.admit(&op("bob")).expect("bob");
        for _ in 0..10 {
            std::mem::forget(
                pool.admit(&Caller::Verified(Identity::Node(2)))
                    .expect("node"),
            );
        }
        // A released slot admits again.
        drop(a1);
        assert_eq!(pool.in_flight(&op("alice")), 1);
        let _a3 = pool.admit(&op("alice")).expect("after a release");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_parse_runs_at_a_lower_priority_and_what_follows_at_the_nodes() {
        fn nice() -> i32 {
            // SAFETY: a plain system call on the calling thread's own id.
            unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
        }
        let pool = QueryPool::new(1, 1).expect("pool");
        let node = nice();
        let slot = pool.admit(&op("alice")).expect("admitted");
        let (parse, slot) = pool.parse(slot, nice).await.expect("parsed");
        assert_eq!(
            pool.in_flight(&op("alice")),
            1,
            "the slot is kept for the next step"
        );
        let then = pool.run(slot, nice).await.expect("ran");
        assert_eq!((parse, then), ((node + PARSE_NICENESS).min(19), node));
        assert_eq!(pool.in_flight(&op("alice")), 0);
    }

    #[tokio::test]
    async fn a_parse_that_runs_long_holds_up_no_scan() {
        let pool = Arc::new(QueryPool::new(1, 4).expect("pool"));
        let (finish_tx, finish_rx) = std::sync::mpsc::channel::<()>();
        let p = pool.clone();
        let slot = pool.admit(&op("alice")).expect("admitted");
        let parse = tokio::spawn(async move {
            p.parse(slot, move || finish_rx.recv().ok())
                .await
                .map(|(_, slot)| drop(slot))
        });
        let slot = pool.admit(&op("bob")).expect("admitted");
        let scan = tokio::time::timeout(Duration::from_secs(10), pool.run(slot, || 7));
        assert_eq!(
            scan.await
                .expect("the scan waited for the parse")
                .expect("ran"),
            7
        );
        finish_tx.send(()).expect("send");
        parse.await.expect("joined").expect("parsed");
    }

    #[tokio::test]
    async fn work_runs_at_most_threads_at_once_and_holds_its_slot_until_done() {
        let pool = Arc::new(QueryPool::new(2, 8).expect("pool"));
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut calls = Vec::new();
        for _ in 0..6 {
            let (pool, running, most) = (pool.clone(), running.clone(), most.clone());
            let slot = pool.admit(&op("alice")).expect("admitted");
            calls.push(tokio::spawn(async move {
                pool.run(slot, move || {
                    use std::sync::atomic::Ordering::SeqCst;
                    let now = running.fetch_add(1, SeqCst) + 1;
                    most.fetch_max(now, SeqCst);
                    std::thread::sleep(Duration::from_millis(30));
                    running.fetch_sub(1, SeqCst);
                })
                .await
            }));
        }
        for c in calls {
            c.await.expect("joined").expect("ran");
        }
        assert_eq!(most.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(pool.in_flight(&op("alice")), 0);

        // A call dropped while its work runs keeps its slot until the work ends.
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (finish_tx, finish_rx) = std::sync::mpsc::channel::<()>();
        let slot = pool.admit(&op("bob")).expect("admitted");
        let p = pool.clone();
        let call = tokio::spawn(async move {
            p.run(slot, move || {
                started_tx.send(()).expect("send");
                finish_rx.recv().ok();
            })
            .await
        });
        tokio::task::spawn_blocking(move || started_rx.recv().expect("started"))
            .await
            .expect("joined");
        call.abort();
        assert_eq!(
            pool.in_flight(&op("bob")),
            1,
            "released before the work ended"
        );
        finish_tx.send(()).expect("send");
        let released = async {
            while pool.in_flight(&op("bob")) != 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), released)
            .await
            .expect("released once the work ended");
    }
}

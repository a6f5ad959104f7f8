//! The state digest, computed at most once at a time.
//!
//! A digest hashes every stored record ([`hub_engine::StateDigest`]): about 12 s at 100,000
//! entities with history. Callers are status probes (`NodeStatus`, `ClusterStatus`) and
//! linearizable reads (`StateDigest`), and under writes every call sees a newer applied
//! index than the last digest. Computed once per caller, a probe polled more often than a
//! digest takes would queue computations without end, each a core for seconds.
//!
//! So at most one computation runs ([`DigestCache`]); a caller joins it when its result is
//! recent enough for the caller ([`DigestFreshness`]), and waits for it before starting the
//! next one otherwise. After a computation that took `t`, the next one starts no earlier than
//! [`REST_FACTOR`]` × t` after it ended: however often callers ask, hashing takes at most a
//! fifth of one core. The computation runs in its own task: it finishes and fills the cache
//! when every caller has stopped waiting.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::StoreError;

/// After a computation that took `t`, the next one starts no earlier than this many times
/// `t` after it ended (computing at most 1 / (1 + 4) of the time).
pub(crate) const REST_FACTOR: u32 = 4;

/// How recent a digest a caller needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestFreshness {
    /// A status probe: the digest at the applied index when asked, or else the result of
    /// the computation under way, or the last one while the next may not start yet, whatever
    /// its index (the reply names it).
    Probe,
    /// At this applied index or later: a read after a read barrier.
    AtLeast(u64),
}

/// A digest computation's result: the applied index and the digest at it, or why it failed.
pub(crate) type Outcome = Result<(u64, String), DigestError>;

/// Why a digest computation gave no digest. `Clone`: one computation's outcome goes to every
/// caller waiting on it, so the causes are shared.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum DigestError {
    /// The store could not be read.
    #[error(transparent)]
    Store(Arc<StoreError>),
    /// The computation's task failed (it panicked or was cancelled).
    #[error("the digest computation failed: {0}")]
    Failed(#[source] Arc<tokio::task::JoinError>),
    /// The computation's task was dropped (the runtime is shutting down).
    #[error("the digest computation was stopped")]
    Stopped,
}

/// The last digest computed and the computation under way. Cheap to clone; clones share.
#[derive(Clone, Default)]
pub(crate) struct DigestCache {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    /// The newest digest computed, with its applied index.
    done: Option<(u64, String)>,
    /// The computation under way.
    running: Option<Running>,
    /// Computations started so far.
    started: u64,
    /// When the next computation may start (see [`REST_FACTOR`]).
    rested_at: Option<Instant>,
}

/// A computation to wait on: its generation, the index it began at, and its outcome.
type Waiting = (u64, u64, watch::Receiver<Option<Outcome>>);

/// What a caller does next ([`DigestCache::next_step`]).
enum Step {
    /// Returns this.
    Done(Outcome),
    /// Waits until the next computation may start, then looks again.
    RestUntil(Instant),
    /// Waits for the computation under way (joined, or just started).
    Wait(Waiting),
}

struct Running {
    /// Which computation this is (the value of `started` when it began).
    generation: u64,
    /// The applied index when it began: its result is at this index or later, since the
    /// stored records are written before the applied index moves (under the state's lock).
    from: u64,
    /// Its outcome, once there is one.
    outcome: watch::Receiver<Option<Outcome>>,
    /// Callers that joined it after the one that started it.
    joined: u64,
}

impl DigestCache {
    /// The digest `freshness` asks for, where the applied index is `applied` now.
    /// `compute` hashes the stored records on a blocking thread and returns their applied
    /// index with the digest; it is called only when neither the cache nor the computation
    /// under way will do.
    pub(crate) async fn get<F>(
        &self,
        applied: u64,
        freshness: DigestFreshness,
        compute: F,
    ) -> Outcome
    where
        F: Fn() -> Outcome + Clone + Send + 'static,
    {
        let need = match freshness {
            DigestFreshness::Probe => applied,
            DigestFreshness::AtLeast(index) => index,
        };
        loop {
            let step = self.next_step(need, freshness, || (applied.max(need), compute.clone()));
            let (generation, from, mut outcome) = match step {
                Step::Done(outcome) => return outcome,
                Step::RestUntil(at) => {
                    tokio::time::sleep_until(at).await;
                    continue;
                }
                Step::Wait(waiting) => waiting,
            };
            let waited = outcome.wait_for(Option::is_some).await.map(|o| o.clone());
            let result = match waited {
                Ok(Some(result)) => result,
                // The computation's task was dropped (the runtime is shutting down): forget
                // it, so a later caller starts a new one.
                Ok(None) | Err(_) => {
                    let mut inner = self.lock();
                    if inner.running.as_ref().map(|r| r.generation) == Some(generation) {
                        inner.running = None;
                    }
                    return Err(DigestError::Stopped);
                }
            };
            match (freshness, &result) {
                (DigestFreshness::Probe, _) | (_, Err(_)) => return result,
                (DigestFreshness::AtLeast(_), Ok((index, _))) if *index >= need => return result,
                // A computation that began before the index this caller needs: its own
                // begins now (or it joins one that began since).
                (DigestFreshness::AtLeast(_), Ok(_)) => {
                    debug_assert!(from < need, "a computation from {from} ended below it");
                }
            }
        }
    }

    /// What a caller that needs index `need` does next: decided, and a computation started
    /// if one is due (`start` gives its lower index bound and function), under one hold of
    /// the lock.
    fn next_step<F>(
        &self,
        need: u64,
        freshness: DigestFreshness,
        start: impl FnOnce() -> (u64, F),
    ) -> Step
    where
        F: Fn() -> Outcome + Send + 'static,
    {
        let mut inner = self.lock();
        if let Some((index, digest)) = &inner.done {
            if *index >= need {
                return Step::Done(Ok((*index, digest.clone())));
            }
        }
        let resting = inner.rested_at.filter(|at| *at > Instant::now());
        let Inner { running, done, .. } = &mut *inner;
        match (running, resting, &*done, freshness) {
            (Some(r), _, _, _) => {
                r.joined += 1;
                Step::Wait((r.generation, r.from, r.outcome.clone()))
            }
            (None, Some(_), Some(done), DigestFreshness::Probe) => Step::Done(Ok(done.clone())),
            (None, Some(at), _, _) => Step::RestUntil(at),
            (None, None, _, _) => {
                let (from, compute) = start();
                Step::Wait(self.start(&mut inner, from, compute))
            }
        }
    }

    /// Computations started so far.
    #[cfg(test)]
    pub(crate) fn started(&self) -> u64 {
        self.lock().started
    }

    /// The newest digest computed.
    #[cfg(test)]
    pub(crate) fn done(&self) -> Option<(u64, String)> {
        self.lock().done.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing panics while holding the lock (plain field updates): a poisoned lock still
        // holds consistent fields.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a computation whose result is at index `from` or later; returns what a caller
    /// waits on.
    fn start<F>(&self, inner: &mut Inner, from: u64, compute: F) -> Waiting
    where
        F: Fn() -> Outcome + Send + 'static,
    {
        assert!(inner.running.is_none(), "two digest computations at once");
        inner.started += 1;
        let generation = inner.started;
        let (tx, rx) = watch::channel(None);
        inner.running = Some(Running {
            generation,
            from,
            outcome: rx.clone(),
            joined: 0,
        });
        let cache = self.clone();
        tokio::spawn(async move {
            let began = Instant::now();
            let outcome = tokio::task::spawn_blocking(compute)
                .await
                .unwrap_or_else(|e| Err(DigestError::Failed(Arc::new(e))));
            let took = began.elapsed();
            {
                let mut inner = cache.lock();
                let joined = match &inner.running {
                    Some(r) if r.generation == generation => r.joined,
                    _ => 0,
                };
                match &outcome {
                    Ok((index, _)) => tracing::debug!(
                        generation,
                        index,
                        joined,
                        took_ms = took.as_millis() as u64,
                        "state digest computed"
                    ),
                    Err(error) => tracing::warn!(generation, %error, "state digest failed"),
                }
                if let Ok((index, digest)) = &outcome {
                    if inner.done.as_ref().is_none_or(|(done, _)| done <= index) {
                        inner.done = Some((*index, digest.clone()));
                    }
                }
                if inner.running.as_ref().map(|r| r.generation) == Some(generation) {
                    inner.running = None;
                }
                inner.rested_at = Some(Instant::now() + took * REST_FACTOR);
            }
            // Sent after the cache is updated: a woken caller that loops finds it there.
            let _ = tx.send(Some(outcome));
        });
        (generation, from, rx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use futures::future::join_all;

    use super::*;

    /// A computation that blocks until the test releases it with an outcome, and counts
    /// how often it was called.
    #[derive(Clone)]
    struct Gated {
        release: Arc<Mutex<mpsc::Receiver<Outcome>>>,
        calls: Arc<AtomicU64>,
    }

    impl Gated {
        fn new() -> (Self, mpsc::Sender<Outcome>) {
            let (tx, rx) = mpsc::channel();
            let gated = Gated {
                release: Arc::new(Mutex::new(rx)),
                calls: Arc::default(),
            };
            (gated, tx)
        }

        fn compute(&self) -> impl Fn() -> Outcome + Clone + Send + 'static {
            let gated = self.clone();
            move || {
                gated.calls.fetch_add(1, Ordering::SeqCst);
                let release = gated.release.lock().expect("gate");
                release
                    .recv_timeout(Duration::from_secs(30))
                    .expect("the test never released the gate")
            }
        }

        fn calls(&self) -> u64 {
            self.calls.load(Ordering::SeqCst)
        }

        /// Waits until the computation has been called `n` times in all.
        async fn until_called(&self, n: u64) {
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.calls() < n {
                assert!(Instant::now() < deadline, "computation {n} never started");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }

    fn digest(index: u64) -> (u64, String) {
        (index, format!("digest-{index}"))
    }

    /// The digest an outcome gave (the test fails if it gave none).
    fn digested(outcome: Outcome) -> (u64, String) {
        outcome.expect("a digest")
    }

    #[tokio::test]
    async fn probes_while_the_index_moves_share_one_computation() {
        let cache = DigestCache::default();
        let (gated, gate) = Gated::new();
        // A hundred probes, each at a newer applied index (writes go on meanwhile).
        let mut probes = join_all(
            (1..=100).map(|applied| cache.get(applied, DigestFreshness::Probe, gated.compute())),
        );
        assert!(futures::poll!(&mut probes).is_pending());
        gated.until_called(1).await;
        gate.send(Ok(digest(1))).expect("release");
        for reply in probes.await {
            assert_eq!(digested(reply), digest(1));
        }
        assert_eq!((cache.started(), gated.calls()), (1, 1));

        // Cached at the index asked for: nothing computed.
        assert_eq!(
            digested(cache.get(1, DigestFreshness::Probe, gated.compute()).await),
            digest(1)
        );
        assert_eq!(cache.started(), 1);
        // A read at a newer index: one more.
        gate.send(Ok(digest(7))).expect("release");
        assert_eq!(
            digested(
                cache
                    .get(7, DigestFreshness::AtLeast(7), gated.compute())
                    .await
            ),
            digest(7)
        );
        assert_eq!((cache.started(), gated.calls()), (2, 2));
    }

    #[tokio::test]
    async fn after_a_computation_the_next_waits_four_times_as_long() {
        let cache = DigestCache::default();
        let (gated, gate) = Gated::new();
        let mut first = Box::pin(cache.get(1, DigestFreshness::Probe, gated.compute()));
        assert!(futures::poll!(&mut first).is_pending());
        gated.until_called(1).await;
        // Not synchronisation: the computation is made to take at least this long.
        let took = Duration::from_millis(300);
        tokio::time::sleep(took).await;
        let released = Instant::now();
        gate.send(Ok(digest(1))).expect("release");
        assert_eq!(digested(first.await), digest(1));
        // A probe at a newer index while the next computation may not start: the last one.
        assert_eq!(
            digested(cache.get(5, DigestFreshness::Probe, gated.compute()).await),
            digest(1)
        );
        assert_eq!(gated.calls(), 1);
        // A read at that index waits until it may, then computes.
        gate.send(Ok(digest(5))).expect("release");
        assert_eq!(
            digested(
                cache
                    .get(5, DigestFreshness::AtLeast(5), gated.compute())
                    .await
            ),
            digest(5)
        );
        assert_eq!(gated.calls(), 2);
        let rested = released.elapsed();
        assert!(
            rested >= took * REST_FACTOR,
            "the second computation began {rested:?} after the first ended"
        );
    }

    #[tokio::test]
    async fn a_read_waits_out_an_older_computation_and_starts_one_at_its_index() {
        let cache = DigestCache::default();
        let (gated, gate) = Gated::new();
        let mut probe = Box::pin(cache.get(1, DigestFreshness::Probe, gated.compute()));
        assert!(futures::poll!(&mut probe).is_pending());
        gated.until_called(1).await;
        // Two reads after a barrier at index 3 while the computation from index 1 runs.
        let reads: Vec<_> = (0..2)
            .map(|_| {
                let (cache, compute) = (cache.clone(), gated.compute());
                tokio::spawn(
                    async move { cache.get(3, DigestFreshness::AtLeast(3), compute).await },
                )
            })
            .collect();
        // Both joined the computation under way (they started none of their own).
        let deadline = Instant::now() + Duration::from_secs(30);
        while cache.lock().running.as_ref().map(|r| r.joined) != Some(2) {
            assert!(Instant::now() < deadline, "the reads never joined");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert_eq!(gated.calls(), 1);
        gate.send(Ok(digest(1))).expect("release");
        assert_eq!(
            digested(probe.await),
            digest(1),
            "a probe takes the computation under way"
        );
        // The reads start exactly one computation of their own, from index 3.
        gated.until_called(2).await;
        gate.send(Ok(digest(3))).expect("release");
        for read in reads {
            assert_eq!(digested(read.await.expect("read task")), digest(3));
        }
        assert_eq!((cache.started(), gated.calls()), (2, 2));
        assert_eq!(cache.done(), Some(digest(3)));
    }

    #[tokio::test]
    async fn a_failed_computation_is_not_cached() {
        let cache = DigestCache::default();
        let (gated, gate) = Gated::new();
        let fire = StoreError::IdentityMismatch("disk on fire".into());
        gate.send(Err(DigestError::Store(Arc::new(fire))))
            .expect("release");
        let failed = cache.get(4, DigestFreshness::Probe, gated.compute()).await;
        assert!(
            matches!(&failed, Err(DigestError::Store(e))
                if matches!(&**e, StoreError::IdentityMismatch(m) if m == "disk on fire")),
            "{failed:?}"
        );
        assert_eq!(cache.done(), None);
        gate.send(Ok(digest(4))).expect("release");
        assert_eq!(
            digested(cache.get(4, DigestFreshness::Probe, gated.compute()).await),
            digest(4)
        );
        assert_eq!(cache.started(), 2);
    }

    #[tokio::test]
    async fn a_computation_whose_callers_stopped_waiting_still_fills_the_cache() {
        let cache = DigestCache::default();
        let (gated, gate) = Gated::new();
        let mut probe = Box::pin(cache.get(9, DigestFreshness::Probe, gated.compute()));
        assert!(futures::poll!(&mut probe).is_pending());
        drop(probe);
        gate.send(Ok(digest(9))).expect("release");
        let deadline = Instant::now() + Duration::from_secs(30);
        while cache.done().is_none() {
            assert!(
                Instant::now() < deadline,
                "the computation was dropped with its caller"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert_eq!(cache.done(), Some(digest(9)));
        assert_eq!(
            digested(cache.get(9, DigestFreshness::Probe, gated.compute()).await),
            digest(9)
        );
        assert_eq!(gated.calls(), 1);
    }
}

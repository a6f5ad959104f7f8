//! Closed-loop writers, the same for both systems: each client issues one write, waits for
//! its acknowledgement, and issues the next, until the run's time is up. Clients connect
//! before the clock starts, one connection each.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::stats::Latencies;

/// One client's connection and the write it repeats.
pub trait Writer: Send + 'static {
    /// Writes record `seq` (unique per writer) and waits for the acknowledgement; `Err` with
    /// the system's message.
    fn write(&mut self, seq: u64) -> impl Future<Output = Result<(), String>> + Send;
}

/// What one run of closed-loop writers did.
#[derive(Debug, Default, Clone)]
pub struct LoadResult {
    /// Acknowledged writes.
    pub writes: usize,
    /// Failed writes.
    pub errors: u64,
    /// The first failure's message, if any.
    pub first_error: Option<String>,
    /// Latency of every acknowledged write.
    pub latencies: Latencies,
    /// Wall time from the start to the last writer's end.
    pub elapsed: Duration,
}

impl LoadResult {
    /// Acknowledged writes per second.
    pub fn throughput(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.writes as f64 / s
        } else {
            0.0
        }
    }

    /// Adds another run of the same cell (a later round): writes, errors and time add up, so
    /// the throughput is over both.
    pub fn merge(&mut self, other: LoadResult) {
        self.writes += other.writes;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.latencies.extend(other.latencies);
        self.elapsed += other.elapsed;
    }
}

/// Runs every writer for `duration` and collects what they did.
pub async fn closed_loop<W: Writer>(writers: Vec<W>, duration: Duration) -> LoadResult {
    let start = Instant::now();
    let deadline = start + duration;
    let tasks: Vec<_> = writers
        .into_iter()
        .map(|mut w| {
            tokio::spawn(async move {
                let mut r = LoadResult::default();
                let mut seq = 0u64;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    match w.write(seq).await {
                        Ok(()) => r.latencies.push(t.elapsed()),
                        Err(e) => {
                            r.errors += 1;
                            r.first_error.get_or_insert(e);
                        }
                    }
                    seq += 1;
                }
                r
            })
        })
        .collect();
    let mut all = LoadResult::default();
    for t in tasks {
        match t.await {
            Ok(r) => all.merge(r),
            Err(e) => {
                all.errors += 1;
                all.first_error
                    .get_or_insert(format!("writer task failed: {e}"));
            }
        }
    }
    all.writes = all.latencies.len();
    all.elapsed = start.elapsed();
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    struct EveryThird;

    impl Writer for EveryThird {
        async fn write(&mut self, seq: u64) -> Result<(), String> {
            tokio::task::yield_now().await;
            if seq % 3 == 2 {
                Err(format!("refused {seq}"))
            } else {
                Ok(())
            }
        }
    }

    #[tokio::test]
    async fn counts_acknowledged_and_failed_writes() {
        let r = closed_loop(vec![EveryThird, EveryThird], Duration::from_millis(50)).await;
        assert!(r.writes > 0);
        assert!(r.errors > 0);
        assert_eq!(r.first_error.as_deref(), Some("refused 2"));
        assert_eq!(r.writes, r.latencies.len());
        assert!(r.throughput() > 0.0);
    }
}

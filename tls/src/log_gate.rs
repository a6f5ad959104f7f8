//! A gate for log lines a flood could repeat: one line per period passes, the rest are counted
//! and the next line that passes says how many were held back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Milliseconds since the first gate was consulted (monotonic).
fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// One line per period (see the module documentation).
#[derive(Debug)]
pub struct LogGate {
    period_ms: u64,
    /// When the next line may pass; 0 before the first.
    next_ms: AtomicU64,
    held: AtomicU64,
}

impl LogGate {
    /// A gate passing one line per `period`.
    pub const fn new(period: Duration) -> LogGate {
        LogGate {
            period_ms: period.as_millis() as u64,
            next_ms: AtomicU64::new(0),
            held: AtomicU64::new(0),
        }
    }

    /// `Some(held)` when a line may be logged now (`held` lines were held back since the last
    /// one); `None` when this one is held back.
    pub fn pass(&self) -> Option<u64> {
        let now = now_ms();
        let next = self.next_ms.load(Ordering::Relaxed);
        if now >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now + self.period_ms,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            Some(self.held.swap(0, Ordering::Relaxed))
        } else {
            self.held.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period_and_the_count_of_the_rest() {
        let gate = LogGate::new(Duration::from_secs(3600));
        assert_eq!(gate.pass(), Some(0));
        assert_eq!(gate.pass(), None);
        assert_eq!(gate.pass(), None);
        let open = LogGate::new(Duration::ZERO);
        assert_eq!(open.pass(), Some(0));
        assert_eq!(open.pass(), Some(0));
    }
}

//! The binned per-request samples of a canary's workloads (issue 20), as the agent reports
//! them beside its metric windows: the proxy's latency histogram and the 5xx / other split of
//! the canary's and the primary's requests over each window. The hub keeps those of judged
//! metrics and its statistical judges compare them.

use hub_proto::{CanaryHistogram, CanaryHistogramBin, CanarySampleWindow, CanaryWorkloadSamples};
use hub_wire::canary_units::{FAILURE_VALUE, MILLI, SUCCESS_VALUE};

use crate::proxy::WindowStats;

/// Requests a second of the simulated driver's perfect workloads answer (as its metric window).
const SIMULATED_REQUESTS_PER_SECOND: u64 = 10;

/// One workload's window as samples: latency buckets by their upper bound in thousandths of
/// a millisecond, and success as two buckets (5xx at 0, the others at 100 %). Empty buckets
/// are left out.
pub fn workload_samples(w: &WindowStats) -> CanaryWorkloadSamples {
    let latency = w
        .latency
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(i, n)| CanaryHistogramBin {
            le: WindowStats::bucket_bound_ms(i) as i64 * MILLI,
            count: *n,
        })
        .collect();
    CanaryWorkloadSamples {
        latency: Some(CanaryHistogram { bins: latency }),
        success: Some(success(w.errors, w.requests.saturating_sub(w.errors))),
    }
}

fn success(failures: u64, successes: u64) -> CanaryHistogram {
    let bins = [(FAILURE_VALUE, failures), (SUCCESS_VALUE, successes)]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(le, count)| CanaryHistogramBin { le, count })
        .collect();
    CanaryHistogram { bins }
}

/// The window of `interval_ms` from the canary's, the primary's and (when one runs) the fresh
/// baseline's proxy statistics.
pub fn sample_window(
    interval_ms: i64,
    canary: &WindowStats,
    primary: &WindowStats,
    baseline: Option<&WindowStats>,
) -> CanarySampleWindow {
    CanarySampleWindow {
        interval_ms,
        canary: Some(workload_samples(canary)),
        primary: Some(workload_samples(primary)),
        baseline: baseline.map(workload_samples),
    }
}

/// The simulated driver's window: canary, primary and (with `baseline`) the fresh baseline
/// alike (all requests successful, at 1 ms) while the canary is healthy; the canary without
/// samples otherwise.
pub fn synthetic_sample_window(
    interval_ms: i64,
    secs: u64,
    healthy: bool,
    baseline: bool,
) -> CanarySampleWindow {
    let n = secs.max(1) * SIMULATED_REQUESTS_PER_SECOND;
    let perfect = CanaryWorkloadSamples {
        latency: Some(CanaryHistogram {
            bins: vec![CanaryHistogramBin {
                le: MILLI,
                count: n,
            }],
        }),
        success: Some(success(0, n)),
    };
    CanarySampleWindow {
        interval_ms,
        canary: Some(if healthy {
            perfect.clone()
        } else {
            CanaryWorkloadSamples::default()
        }),
        primary: Some(perfect.clone()),
        baseline: baseline.then_some(perfect),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_becomes_latency_and_success_buckets() {
        let mut w = WindowStats {
            requests: 12,
            errors: 2,
            ..WindowStats::default()
        };
        w.latency[2] = 10; // ≤ 5 ms
        w.latency[16] = 2; // beyond 5 s
        let s = workload_samples(&w);
        let latency = s.latency.unwrap().bins;
        assert_eq!(
            latency.iter().map(|b| (b.le, b.count)).collect::<Vec<_>>(),
            vec![(5_000, 10), (10_000_000, 2)]
        );
        let success = s.success.unwrap().bins;
        assert_eq!(
            success.iter().map(|b| (b.le, b.count)).collect::<Vec<_>>(),
            vec![(0, 2), (100_000, 10)]
        );
        // No traffic: no buckets at all.
        let empty = workload_samples(&WindowStats::default());
        assert!(empty.latency.unwrap().bins.is_empty());
        assert!(empty.success.unwrap().bins.is_empty());
    }

    #[test]
    fn the_simulated_canary_matches_the_primary_while_healthy() {
        let w = synthetic_sample_window(2_000, 2, true, true);
        assert_eq!(w.canary, w.primary);
        assert_eq!(w.baseline, w.primary);
        let w = synthetic_sample_window(2_000, 2, false, false);
        assert_eq!(w.canary, Some(CanaryWorkloadSamples::default()));
        assert_eq!(w.baseline, None);
    }
}

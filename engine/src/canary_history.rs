//! A canary's analysis over time: one sample per committed step (phase, weight and the metric
//! values the leader measured for it), bounded, so a dashboard can chart a rollout without a
//! time-series database. Replicated like every record: every node charts the same history.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::canary::Phase;
use crate::TimestampMs;

/// Samples kept per canary; older ones are dropped (a 1-minute interval keeps six hours).
pub const CANARY_HISTORY_KEPT: usize = 360;

/// Metric values kept per sample: a canary's analysis names few metrics, and a sample never
/// grows beyond this whatever a resource declares.
pub const CANARY_SAMPLE_METRICS: usize = 16;

/// Where one committed step left the canary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanarySample {
    /// Entry time of the step.
    pub time_ms: TimestampMs,
    /// The step that was decided.
    pub step: u64,
    /// The phase after it.
    pub phase: Phase,
    /// The canary's traffic weight after it (0–100).
    pub canary_weight: u8,
    /// Metric name → the value the step judged, in thousandths (`None`: no data). Empty for
    /// a manual step, which measures nothing.
    pub metrics: Vec<(String, Option<i64>)>,
}

/// The samples of one canary, keyed like the canary (`<environment>/<name>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryHistory {
    /// The canary's id.
    pub canary: String,
    /// The newest [`CANARY_HISTORY_KEPT`] samples, oldest first.
    pub samples: VecDeque<CanarySample>,
}

impl CanaryHistory {
    /// Appends a sample (its metrics cut to [`CANARY_SAMPLE_METRICS`]), dropping the oldest
    /// beyond [`CANARY_HISTORY_KEPT`].
    pub fn push(&mut self, mut sample: CanarySample) {
        sample.metrics.truncate(CANARY_SAMPLE_METRICS);
        self.samples.push_back(sample);
        while self.samples.len() > CANARY_HISTORY_KEPT {
            self.samples.pop_front();
        }
        debug_assert!(self.samples.len() <= CANARY_HISTORY_KEPT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(step: u64, metrics: usize) -> CanarySample {
        CanarySample {
            time_ms: step as i64 * 1000,
            step,
            phase: Phase::Progressing,
            canary_weight: 10,
            metrics: (0..metrics).map(|i| (format!("m{i}"), Some(1))).collect(),
        }
    }

    #[test]
    fn the_history_keeps_the_newest_samples_and_few_metrics() {
        let mut h = CanaryHistory::default();
        for step in 0..(CANARY_HISTORY_KEPT as u64 + 5) {
            h.push(sample(step, 40));
        }
        assert_eq!(h.samples.len(), CANARY_HISTORY_KEPT);
        assert_eq!(h.samples.front().map(|s| s.step), Some(5));
        assert!(h
            .samples
            .iter()
            .all(|s| s.metrics.len() == CANARY_SAMPLE_METRICS));
    }
}

//! The replicated side of a canary's statistical judges (issue 20): which metrics are judged
//! and against what, the binned samples the agent last reported for them, the count of
//! consecutive inconclusive judgements, and the last verdicts. One record per judged canary,
//! keyed like the canary; a canary without judges has none, so the [`crate::canary_record::Canary`]
//! record and its encoding stay as they were.
//!
//! Everything a judged tick decides on is here or in the tick's entry: a new leader reads the
//! same inconclusive count and continues exactly where the old one stopped.

use serde::{Deserialize, Serialize};

use crate::canary::{
    Baseline, Judge, MetricSamples, MetricSource, SampleWindow, Verdict, MAX_SAMPLE_WINDOWS,
};
use crate::TimestampMs;

/// Most judged metrics of one canary (a canary names few metrics; this bounds the record).
pub const MAX_JUDGED_METRICS: usize = 16;

/// Longest verdict reason kept (the judge's reason is short; this bounds the record).
pub const MAX_REASON_BYTES: usize = 512;

/// One judged metric, as the leader needs it to pick the samples of a tick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgedMetric {
    /// The metric's name.
    pub name: String,
    /// The metric's interval: the sample window it is judged on.
    pub interval_ms: i64,
    /// What is measured (a proxy metric: latency or success).
    pub source: MetricSource,
    /// The judge.
    pub judge: Judge,
}

/// The last verdict of one judged metric.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgeResult {
    /// The metric's name.
    pub metric: String,
    /// The status step that judged it.
    pub step: u64,
    /// The verdict.
    pub verdict: Verdict,
    /// The numbers behind it (counts, Cliff's delta, p-value), cut to [`MAX_REASON_BYTES`].
    pub reason: String,
}

/// A judged canary's replicated judging state, keyed by the canary's id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryJudging {
    /// The canary's id (`<environment>/<name>`).
    pub canary: String,
    /// The judged metrics, in the spec's order (at most [`MAX_JUDGED_METRICS`]).
    pub metrics: Vec<JudgedMetric>,
    /// `analysis.inconclusiveLimit`, if set.
    pub inconclusive_limit: Option<u32>,
    /// The sample windows of the agent's last report (judged intervals only, at most
    /// [`MAX_SAMPLE_WINDOWS`]).
    pub samples: Vec<SampleWindow>,
    /// The step of the last step plan the agent had applied when it took `samples`.
    pub samples_step: u64,
    /// Entry time of the report that carried `samples`.
    pub samples_ms: TimestampMs,
    /// Consecutive inconclusive judgements (reset by a conclusive step, a new revision and
    /// every manual command).
    pub inconclusive: u32,
    /// The verdicts of the last judged step, in the spec's order.
    pub verdicts: Vec<JudgeResult>,
}

impl CanaryJudging {
    /// The samples metric `m` is judged on: the canary's histogram and the baseline's (the
    /// primary's, or the fresh baseline's) from the window of `m`'s interval. Empty (an
    /// inconclusive judgement) when the agent measured no such window.
    pub fn samples_of(&self, m: &JudgedMetric) -> MetricSamples {
        let Some(w) = self.samples.iter().find(|w| w.interval_ms == m.interval_ms) else {
            return MetricSamples::default();
        };
        let baseline = match m.judge.baseline {
            Baseline::Primary => Some(&w.primary),
            Baseline::Fresh => w.baseline.as_ref(),
        };
        MetricSamples {
            canary: w.canary.of(&m.source).cloned().unwrap_or_default(),
            baseline: baseline
                .and_then(|b| b.of(&m.source))
                .cloned()
                .unwrap_or_default(),
        }
    }

    /// Whether the record keeps a window of `interval_ms` (a judged metric's interval).
    pub fn judges_window(&self, interval_ms: i64) -> bool {
        self.metrics.iter().any(|m| m.interval_ms == interval_ms)
    }

    /// Checks the record's bounds (debug builds check them after every apply).
    pub fn within_bounds(&self) -> bool {
        self.metrics.len() <= MAX_JUDGED_METRICS
            && self.samples.len() <= MAX_SAMPLE_WINDOWS
            && self.verdicts.len() <= MAX_JUDGED_METRICS
            && self
                .verdicts
                .iter()
                .all(|v| v.reason.len() <= MAX_REASON_BYTES)
    }
}

/// `reason` cut to at most [`MAX_REASON_BYTES`] on a character boundary.
pub fn bounded_reason(reason: &str) -> String {
    if reason.len() <= MAX_REASON_BYTES {
        return reason.to_string();
    }
    let mut end = MAX_REASON_BYTES;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canary::{Direction, Histogram, WorkloadSamples, DEFAULT_CONFIDENCE_MILLI};

    fn metric(interval_ms: i64, source: MetricSource, baseline: Baseline) -> JudgedMetric {
        JudgedMetric {
            name: "m".into(),
            interval_ms,
            source,
            judge: Judge {
                baseline,
                direction: Direction::Increase,
                effect_size_milli: 100,
                confidence_milli: DEFAULT_CONFIDENCE_MILLI,
            },
        }
    }

    #[test]
    fn samples_come_from_the_window_of_the_metrics_interval() {
        let latency = |n| Histogram::from_pairs(&[(1_000, n)]);
        let j = CanaryJudging {
            canary: "prod/demo".into(),
            samples: vec![SampleWindow {
                interval_ms: 5_000,
                canary: WorkloadSamples {
                    latency: latency(3),
                    success: Histogram::success(1, 2),
                },
                primary: WorkloadSamples {
                    latency: latency(7),
                    success: Histogram::success(0, 7),
                },
                baseline: None,
            }],
            ..CanaryJudging::default()
        };
        let s = j.samples_of(&metric(
            5_000,
            MetricSource::RequestDuration,
            Baseline::Primary,
        ));
        assert_eq!((s.canary.total(), s.baseline.total()), (3, 7));
        let s = j.samples_of(&metric(
            5_000,
            MetricSource::RequestSuccessRate,
            Baseline::Primary,
        ));
        assert_eq!(s.canary, Histogram::success(1, 2));
        // No fresh baseline ran: the baseline side is empty (inconclusive).
        let s = j.samples_of(&metric(
            5_000,
            MetricSource::RequestDuration,
            Baseline::Fresh,
        ));
        assert_eq!((s.canary.total(), s.baseline.total()), (3, 0));
        // Another interval: nothing.
        let s = j.samples_of(&metric(
            2_000,
            MetricSource::RequestDuration,
            Baseline::Primary,
        ));
        assert_eq!(s, MetricSamples::default());
    }

    #[test]
    fn reasons_are_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_REASON_BYTES);
        let cut = bounded_reason(&long);
        assert!(cut.len() <= MAX_REASON_BYTES && cut.chars().all(|c| c == 'é'));
        assert_eq!(bounded_reason("short"), "short");
    }
}

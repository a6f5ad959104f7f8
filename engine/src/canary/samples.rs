//! Binned per-request samples (issue 20): what the agent's proxy measures of each workload
//! over a metric's interval, as histograms (bucket upper bound → count), and what a judged
//! tick carries to the statistical judge ([`MetricSamples`]).
//!
//! Values are in thousandths ([`super::MILLI`]) like every metric value: a latency bucket
//! `le: 25_000` holds the requests answered in at most 25 ms (and more than the previous
//! bucket's bound). Per-request success is binned as two buckets: `le: 0` holds the requests
//! answered with a 5xx, `le: 100_000` (100 %) the others, so the mean of the samples is the
//! success rate in percent, like `request-success-rate`.
//!
//! Every value in one bucket counts as the same value: the rank test treats them as ties.
//! Sizes are bounded ([`MAX_BINS`], [`MAX_BIN_TOTAL`]) so the statistic's integer sums cannot
//! overflow (see [`super::mann_whitney`]).

use serde::{Deserialize, Serialize};

use super::spec::MetricSource;

/// Most buckets in one histogram.
pub const MAX_BINS: usize = 128;
/// Most samples (requests) in one histogram: 2^32. With two histograms of at most this many
/// samples, every sum the rank test forms fits a `u128` (the largest, `Σ t³`, is below 2^109).
pub const MAX_BIN_TOTAL: u64 = 1 << 32;
/// Most sample windows in one report of one canary: one per metric window the agent measures.
pub const MAX_SAMPLE_WINDOWS: usize = super::rollout::MAX_WINDOWS;
pub use hub_wire::canary_units::{FAILURE_VALUE, SUCCESS_VALUE};

/// One histogram bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bin {
    /// Upper bound of the bucket (inclusive), in thousandths.
    pub le: i64,
    /// Samples in the bucket.
    pub count: u64,
}

/// Samples of one workload, binned: buckets in strictly increasing order of `le`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    /// The buckets; empty buckets may be left out.
    pub bins: Vec<Bin>,
}

/// A malformed histogram, with the path of the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct SamplesError {
    /// Where, e.g. `samples["latency"].canary.bins[3].le`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl SamplesError {
    fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        SamplesError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl Histogram {
    /// A histogram from `(le, count)` pairs (not validated).
    pub fn from_pairs(pairs: &[(i64, u64)]) -> Self {
        Histogram {
            bins: pairs.iter().map(|&(le, count)| Bin { le, count }).collect(),
        }
    }

    /// A success histogram of `failures` 5xx answers and `successes` other answers.
    pub fn success(failures: u64, successes: u64) -> Self {
        Histogram::from_pairs(&[(FAILURE_VALUE, failures), (SUCCESS_VALUE, successes)])
    }

    /// The number of samples (saturating; a validated histogram has at most
    /// [`MAX_BIN_TOTAL`]).
    pub fn total(&self) -> u64 {
        self.bins
            .iter()
            .fold(0u64, |acc, b| acc.saturating_add(b.count))
    }

    /// Checks the bounds: at most [`MAX_BINS`] buckets, `le` strictly increasing, at most
    /// [`MAX_BIN_TOTAL`] samples. `path` names the histogram in errors.
    pub fn validate(&self, path: &str) -> Result<(), SamplesError> {
        if self.bins.len() > MAX_BINS {
            return Err(SamplesError::new(
                format!("{path}.bins"),
                format!("{} buckets, at most {MAX_BINS}", self.bins.len()),
            ));
        }
        for (i, pair) in self.bins.windows(2).enumerate() {
            if pair[1].le <= pair[0].le {
                return Err(SamplesError::new(
                    format!("{path}.bins[{}].le", i + 1),
                    format!(
                        "{} is not above the previous bucket's {}: bounds must strictly increase",
                        pair[1].le, pair[0].le
                    ),
                ));
            }
        }
        let mut total: u64 = 0;
        for (i, b) in self.bins.iter().enumerate() {
            total = match total.checked_add(b.count) {
                Some(t) if t <= MAX_BIN_TOTAL => t,
                _ => {
                    return Err(SamplesError::new(
                        format!("{path}.bins[{i}].count"),
                        format!("more than {MAX_BIN_TOTAL} samples in the histogram"),
                    ))
                }
            };
        }
        Ok(())
    }
}

/// What a judge compares for one metric: the canary's samples and the baseline's (the
/// primary's or the fresh baseline's, as the judge says), over the metric's interval.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricSamples {
    /// The canary workload's samples.
    pub canary: Histogram,
    /// The baseline's samples.
    pub baseline: Histogram,
}

impl MetricSamples {
    /// Validates both histograms; `path` names this entry in errors.
    pub fn validate(&self, path: &str) -> Result<(), SamplesError> {
        self.canary.validate(&format!("{path}.canary"))?;
        self.baseline.validate(&format!("{path}.baseline"))
    }
}

/// The binned samples of one workload over one window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadSamples {
    /// Per-request latency.
    pub latency: Histogram,
    /// Per-request success ([`Histogram::success`]).
    pub success: Histogram,
}

impl WorkloadSamples {
    /// The histogram a proxy metric's judge compares (`None` for Prometheus metrics).
    pub fn of(&self, source: &MetricSource) -> Option<&Histogram> {
        match source {
            MetricSource::RequestDuration => Some(&self.latency),
            MetricSource::RequestSuccessRate => Some(&self.success),
            MetricSource::Prometheus { .. } | MetricSource::Template { .. } => None,
        }
    }

    fn validate(&self, path: &str) -> Result<(), SamplesError> {
        self.latency.validate(&format!("{path}.latency"))?;
        self.success.validate(&format!("{path}.success"))
    }
}

/// What the agent's proxy measured of one canary's workloads over one window ending when
/// the report was taken: the canary, the primary and, when the canary runs a fresh baseline
/// ([`super::Action::DeployBaseline`]), the baseline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleWindow {
    /// The window, in milliseconds (a judged metric's `interval`).
    pub interval_ms: i64,
    /// The canary workload.
    pub canary: WorkloadSamples,
    /// The primary workload.
    pub primary: WorkloadSamples,
    /// The fresh baseline workload, when one runs.
    pub baseline: Option<WorkloadSamples>,
}

impl SampleWindow {
    /// Validates every histogram; `path` names this window in errors.
    pub fn validate(&self, path: &str) -> Result<(), SamplesError> {
        if self.interval_ms <= 0 {
            return Err(SamplesError::new(
                format!("{path}.interval_ms"),
                "must be positive",
            ));
        }
        self.canary.validate(&format!("{path}.canary"))?;
        self.primary.validate(&format!("{path}.primary"))?;
        if let Some(b) = &self.baseline {
            b.validate(&format!("{path}.baseline"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_histograms_pass() {
        let h = Histogram::from_pairs(&[(5_000, 10), (10_000, 0), (25_000, 3)]);
        assert_eq!(h.validate("h"), Ok(()));
        assert_eq!(h.total(), 13);
        assert_eq!(Histogram::default().validate("h"), Ok(()));
        assert_eq!(Histogram::success(2, 98).total(), 100);
    }

    #[test]
    fn bad_histograms_name_the_field() {
        let h = Histogram::from_pairs(&[(5_000, 1), (5_000, 1)]);
        let e = h.validate("samples[\"p99\"].canary").unwrap_err();
        assert_eq!(e.path, "samples[\"p99\"].canary.bins[1].le");
        let h = Histogram::from_pairs(&[(1, MAX_BIN_TOTAL), (2, 1)]);
        assert_eq!(h.validate("x").unwrap_err().path, "x.bins[1].count");
        let h = Histogram::from_pairs(&[(1, u64::MAX), (2, u64::MAX)]);
        assert_eq!(h.validate("x").unwrap_err().path, "x.bins[0].count");
        let h = Histogram {
            bins: (0..=MAX_BINS as i64)
                .map(|le| Bin { le, count: 1 })
                .collect(),
        };
        assert_eq!(h.validate("x").unwrap_err().path, "x.bins");
        let m = MetricSamples {
            canary: Histogram::default(),
            baseline: Histogram::from_pairs(&[(2, 1), (1, 1)]),
        };
        assert_eq!(
            m.validate("samples[\"a\"]").unwrap_err().to_string(),
            "samples[\"a\"].baseline.bins[1].le: 1 is not above the previous bucket's 2: bounds must strictly increase"
        );
        let w = SampleWindow {
            interval_ms: 0,
            ..SampleWindow::default()
        };
        assert_eq!(w.validate("w").unwrap_err().path, "w.interval_ms");
    }
}

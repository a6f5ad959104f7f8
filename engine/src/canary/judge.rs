//! The statistical judge of a metric (issue 20): `judge: {type: mann-whitney, ...}` compares
//! the canary's per-request samples with the baseline's ([`MetricSamples`]) and says pass,
//! fail or inconclusive ([`Verdict`]), and the analysis policy around it ([`AnalysisPolicy`]:
//! the judges, `inconclusiveLimit`, `onFailure`).
//!
//! # The decision
//!
//! With `n₁` canary and `n₂` baseline samples, the one-sided (or, for `either`, two-sided)
//! Mann-Whitney test ([`super::mann_whitney`]) gives a p-value, and Cliff's delta `δ` the size
//! of the shift (`P(canary > baseline) − P(canary < baseline)`). The *bad effect* is `δ` for
//! `direction: increase` (a higher canary value is bad, as for latency), `−δ` for `decrease`
//! (as for the success rate) and `|δ|` for `either`. With `α = 1 − confidence`:
//!
//! - fewer than [`JUDGE_MIN_SAMPLES`] samples on either side → **inconclusive** (the normal
//!   approximation is not trusted below that);
//! - bad effect ≥ `effectSize` and p < α → **fail**: a shift that matters and is significant;
//! - bad effect ≥ `effectSize` and p ≥ α → **inconclusive**: a shift that would matter but is
//!   not significant (marginal evidence; more samples decide);
//! - bad effect < `effectSize` → **pass**: the canary is not worse by as much as matters
//!   (even if a smaller shift is significant).
//!
//! `effectSize` is therefore a threshold on Cliff's delta, in (0, 1]. Romano et al. (2006)
//! call |δ| < 0.147 negligible, < 0.33 small, < 0.474 medium. For success samples (two
//! buckets) δ is exactly the difference of the success rates: `effectSize: 0.01` fails a
//! canary whose success rate is significantly lower by one percentage point or more.
//!
//! Every type here that is stored holds no floats: `effectSize` and `confidence` are kept in
//! thousandths.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::mann_whitney::{mann_whitney, Alternative, MannWhitney};
use super::samples::MetricSamples;
use super::spec::MILLI;

/// Fewest samples on each side (canary and baseline) for a verdict other than inconclusive.
pub const JUDGE_MIN_SAMPLES: u64 = 20;
/// `confidence` when none is given (0.95), in thousandths.
pub const DEFAULT_CONFIDENCE_MILLI: u32 = 950;
/// Lowest accepted `confidence` (0.5), in thousandths.
pub const MIN_CONFIDENCE_MILLI: u32 = 500;
/// Highest accepted `confidence` (0.999), in thousandths.
pub const MAX_CONFIDENCE_MILLI: u32 = 999;

/// What the canary is compared with (`judge.baseline`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Baseline {
    /// `primary`: the primary workload, serving the rest of the traffic.
    Primary,
    /// `fresh`: a third workload from the primary's revision at the canary's weight, started
    /// with the canary (Spinnaker's rule: baseline and canary are equally new, equally
    /// loaded).
    Fresh,
}

impl Baseline {
    /// `primary` or `fresh`.
    pub fn as_str(self) -> &'static str {
        match self {
            Baseline::Primary => "primary",
            Baseline::Fresh => "fresh",
        }
    }

    /// The baseline spelled `s`, if any.
    pub fn parse(s: &str) -> Option<Baseline> {
        [Baseline::Primary, Baseline::Fresh]
            .into_iter()
            .find(|b| b.as_str() == s)
    }
}

/// Which shift of the canary is bad (`judge.direction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Direction {
    /// `increase`: a higher canary value is bad (latency).
    Increase,
    /// `decrease`: a lower canary value is bad (success rate).
    Decrease,
    /// `either`: any shift is bad.
    Either,
}

impl Direction {
    /// `increase`, `decrease` or `either`.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Increase => "increase",
            Direction::Decrease => "decrease",
            Direction::Either => "either",
        }
    }

    /// The direction spelled `s`, if any.
    pub fn parse(s: &str) -> Option<Direction> {
        [Direction::Increase, Direction::Decrease, Direction::Either]
            .into_iter()
            .find(|d| d.as_str() == s)
    }

    /// The test's alternative hypothesis.
    pub fn alternative(self) -> Alternative {
        match self {
            Direction::Increase => Alternative::Greater,
            Direction::Decrease => Alternative::Less,
            Direction::Either => Alternative::TwoSided,
        }
    }

    /// The bad part of Cliff's delta `delta`.
    fn bad_effect(self, delta: f64) -> f64 {
        match self {
            Direction::Increase => delta,
            Direction::Decrease => -delta,
            Direction::Either => delta.abs(),
        }
    }
}

/// What a failed-checks threshold does (`analysis.onFailure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum OnFailure {
    /// `rollback` (the default): all traffic to the primary, canary to zero, Failed.
    #[default]
    Rollback,
    /// `hold`: the weights stay, phase Halted until an operator promotes, aborts or retries.
    Hold,
}

impl OnFailure {
    /// `rollback` or `hold`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Rollback => "rollback",
            OnFailure::Hold => "hold",
        }
    }

    /// The policy spelled `s`, if any.
    pub fn parse(s: &str) -> Option<OnFailure> {
        [OnFailure::Rollback, OnFailure::Hold]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// A metric's `judge` (only `type: mann-whitney` exists).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judge {
    /// What the canary is compared with.
    pub baseline: Baseline,
    /// Which shift is bad.
    pub direction: Direction,
    /// Smallest bad Cliff's delta that fails, in thousandths (1–1000).
    pub effect_size_milli: u32,
    /// Confidence level, in thousandths ([`MIN_CONFIDENCE_MILLI`]–[`MAX_CONFIDENCE_MILLI`]).
    pub confidence_milli: u32,
}

/// The analysis settings of issue 20, kept beside the stored [`super::CanarySpec`] (whose
/// encoding they leave unchanged): the judges by metric name, `inconclusiveLimit` and
/// `onFailure`; and whether config changes are analysed (issue 55). [`AnalysisPolicy::default`] is the behaviour of a resource without them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnalysisPolicy {
    /// Metric name → its judge.
    pub judges: BTreeMap<String, Judge>,
    /// Consecutive inconclusive judgements that halt the canary for an operator; `None`: no
    /// limit (the weight holds and the judges run again every interval).
    pub inconclusive_limit: Option<u32>,
    /// What the failed-checks threshold does.
    pub on_failure: OnFailure,
    /// `metadata.annotations."flagger.app/config-tracking": disabled` (issue 55): a revision
    /// that differs from the primary's only in config or secrets is promoted without analysis.
    pub config_tracking_disabled: bool,
}

impl AnalysisPolicy {
    /// Whether the resource sets none of the issue-20 fields.
    pub fn is_default(&self) -> bool {
        *self == AnalysisPolicy::default()
    }

    /// Whether a judge compares with a fresh baseline, which the agent then runs.
    pub fn uses_fresh_baseline(&self) -> bool {
        self.judges.values().any(|j| j.baseline == Baseline::Fresh)
    }
}

/// A judge's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Verdict {
    /// The canary is not worse by as much as matters.
    Pass,
    /// The canary is significantly worse by at least `effectSize`.
    Fail,
    /// Too few samples, or a shift that would matter but is not significant.
    Inconclusive,
}

impl Verdict {
    /// `pass`, `fail` or `inconclusive`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Inconclusive => "inconclusive",
        }
    }
}

/// A verdict with the numbers behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// The verdict.
    pub verdict: Verdict,
    /// The test, when both sides had samples.
    pub test: Option<MannWhitney>,
    /// Why, for events: counts, p-value, effect.
    pub reason: String,
}

/// Judges `samples` (canary against baseline) by `judge` (see the module documentation).
pub fn judge(judge: &Judge, samples: &MetricSamples) -> Judgement {
    let (n1, n2) = (samples.canary.total(), samples.baseline.total());
    if n1 < JUDGE_MIN_SAMPLES || n2 < JUDGE_MIN_SAMPLES {
        return Judgement {
            verdict: Verdict::Inconclusive,
            test: None,
            reason: format!(
                "too few samples (canary {n1}, baseline {n2}; at least {JUDGE_MIN_SAMPLES} each)"
            ),
        };
    }
    let Some(test) = mann_whitney(
        &samples.canary,
        &samples.baseline,
        judge.direction.alternative(),
    ) else {
        // Not reached: both sides have at least JUDGE_MIN_SAMPLES samples.
        return Judgement {
            verdict: Verdict::Inconclusive,
            test: None,
            reason: "no samples".to_string(),
        };
    };
    let milli = MILLI as f64;
    let alpha = f64::from(1_000u32.saturating_sub(judge.confidence_milli)) / milli;
    let threshold = f64::from(judge.effect_size_milli) / milli;
    let bad = judge.direction.bad_effect(test.cliffs_delta);
    let significant = test.p_value < alpha;
    let verdict = match (bad >= threshold, significant) {
        (true, true) => Verdict::Fail,
        (true, false) => Verdict::Inconclusive,
        (false, _) => Verdict::Pass,
    };
    let reason = format!(
        "canary {n1} vs baseline {n2} samples, Cliff's delta {:+.3} (bad {}: {:.3}, effectSize \
         {:.3}), p {:.4} ({} at confidence {:.3})",
        test.cliffs_delta,
        judge.direction.as_str(),
        bad,
        threshold,
        test.p_value,
        if significant {
            "significant"
        } else {
            "not significant"
        },
        f64::from(judge.confidence_milli) / milli,
    );
    Judgement {
        verdict,
        test: Some(test),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canary::Histogram;

    fn latency_judge(effect_size_milli: u32) -> Judge {
        Judge {
            baseline: Baseline::Primary,
            direction: Direction::Increase,
            effect_size_milli,
            confidence_milli: DEFAULT_CONFIDENCE_MILLI,
        }
    }

    fn samples(canary: &[(i64, u64)], baseline: &[(i64, u64)]) -> MetricSamples {
        MetricSamples {
            canary: Histogram::from_pairs(canary),
            baseline: Histogram::from_pairs(baseline),
        }
    }

    /// The SciPy "heavy_ties" case of the statistic's tests: the canary is slower,
    /// p(greater) = 0.000896, δ = 6205/(100·100)·2 − 1 = 0.241.
    fn slower_canary() -> MetricSamples {
        samples(
            &[(5, 10), (10, 40), (25, 30), (50, 15), (100, 5)],
            &[(5, 20), (10, 50), (25, 20), (50, 8), (100, 2)],
        )
    }

    #[test]
    fn a_significant_large_shift_fails() {
        let j = judge(&latency_judge(147), &slower_canary());
        assert_eq!(j.verdict, Verdict::Fail, "{}", j.reason);
        let t = j.test.unwrap();
        assert!((t.cliffs_delta - 0.241).abs() < 1e-12, "{t:?}");
    }

    #[test]
    fn a_significant_small_shift_passes() {
        // δ = 0.241 is below an effect size of 0.3: significant but too small to matter.
        let j = judge(&latency_judge(300), &slower_canary());
        assert_eq!(j.verdict, Verdict::Pass, "{}", j.reason);
    }

    #[test]
    fn a_large_shift_without_significance_is_inconclusive() {
        // SciPy "unequal_sizes": δ = 5035/(30·300)·2 − 1 = 0.119, p(greater) = 0.131.
        let s = samples(
            &[(1, 3), (2, 7), (4, 12), (8, 6), (16, 2)],
            &[(1, 40), (2, 90), (4, 110), (8, 45), (16, 15)],
        );
        let j = judge(&latency_judge(100), &s);
        assert_eq!(j.verdict, Verdict::Inconclusive, "{}", j.reason);
        assert!(j.reason.contains("not significant"), "{}", j.reason);
        // The wrong direction is no concern: the canary being faster passes.
        let faster = Judge {
            direction: Direction::Decrease,
            ..latency_judge(100)
        };
        assert_eq!(judge(&faster, &s).verdict, Verdict::Pass);
    }

    #[test]
    fn too_few_samples_are_inconclusive() {
        let s = samples(&[(5, 19)], &[(5, 1_000)]);
        let j = judge(&latency_judge(147), &s);
        assert_eq!(j.verdict, Verdict::Inconclusive);
        assert!(j.test.is_none());
        assert!(j.reason.contains("at least 20 each"), "{}", j.reason);
        let j = judge(&latency_judge(147), &MetricSamples::default());
        assert_eq!(j.verdict, Verdict::Inconclusive);
    }

    #[test]
    fn equal_samples_pass() {
        let h = [(5, 12), (10, 30), (20, 8)];
        for direction in [Direction::Increase, Direction::Decrease, Direction::Either] {
            let j = judge(
                &Judge {
                    direction,
                    ..latency_judge(1)
                },
                &samples(&h, &h),
            );
            assert_eq!(j.verdict, Verdict::Pass, "{direction:?}: {}", j.reason);
        }
    }

    #[test]
    fn a_lower_success_rate_fails_a_decrease_judge() {
        // SciPy "success_rates": 95 % against 99 %, p(less) = 0.000508, δ = −0.04.
        let s = MetricSamples {
            canary: Histogram::success(5, 95),
            baseline: Histogram::success(10, 990),
        };
        let j = Judge {
            direction: Direction::Decrease,
            ..latency_judge(10)
        };
        assert_eq!(judge(&j, &s).verdict, Verdict::Fail);
        // Either direction: |δ| counts.
        let either = Judge {
            direction: Direction::Either,
            ..j
        };
        assert_eq!(judge(&either, &s).verdict, Verdict::Fail);
        // Five points needed: 4 points pass.
        let lax = Judge {
            effect_size_milli: 50,
            ..j
        };
        assert_eq!(judge(&lax, &s).verdict, Verdict::Pass);
        // At 99.9 % confidence p = 0.000508 is still significant; an increase judge
        // (success going up is bad) passes.
        let strict = Judge {
            confidence_milli: 999,
            ..j
        };
        assert_eq!(judge(&strict, &s).verdict, Verdict::Fail);
        let up = Judge {
            direction: Direction::Increase,
            ..j
        };
        assert_eq!(judge(&up, &s).verdict, Verdict::Pass);
    }

    #[test]
    fn spellings_round_trip() {
        for b in [Baseline::Primary, Baseline::Fresh] {
            assert_eq!(Baseline::parse(b.as_str()), Some(b));
        }
        for d in [Direction::Increase, Direction::Decrease, Direction::Either] {
            assert_eq!(Direction::parse(d.as_str()), Some(d));
        }
        for o in [OnFailure::Rollback, OnFailure::Hold] {
            assert_eq!(OnFailure::parse(o.as_str()), Some(o));
        }
        assert_eq!(Direction::parse("up"), None);
        assert!(AnalysisPolicy::default().is_default());
    }
}

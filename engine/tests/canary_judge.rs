//! Statistical judges and the hold phase (issue 20), end to end through the pure phase
//! machine: the `judged.yml` fixture driven tick by tick with binned samples, the way the
//! leader drives it (plan, I/O, [`advance_judged`] at the planned step).

use std::collections::BTreeMap;
use std::fs;

use hub_engine::canary::{
    advance_judged, parse_canary_with_policy, plan_tick, Action, AnalysisPolicy, Baseline,
    CanarySpec, CanaryStatus, Direction, Histogram, Judge, Judging, Manual, MetricSamples,
    OnFailure, Phase, Severity, TickInput, TickOutcome,
};
use hub_engine::TimestampMs;

/// Monday 2026-11-30T00:00:00Z.
const T0: TimestampMs = 1_795_996_800_000;

fn judged_fixture() -> (CanarySpec, AnalysisPolicy) {
    let path = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("tests/fixtures/canary/valid/judged.yml");
    let text = fs::read_to_string(path).unwrap();
    let (spec, policy, _) = parse_canary_with_policy(&text).unwrap_or_else(|e| panic!("{e}"));
    (spec, policy)
}

/// Latency samples where canary and baseline agree (a pass).
fn same_latency() -> MetricSamples {
    let h = Histogram::from_pairs(&[(5_000, 20), (10_000, 50), (25_000, 20), (50_000, 10)]);
    MetricSamples {
        canary: h.clone(),
        baseline: h,
    }
}

/// A slower canary: Cliff's delta 0.241, p(greater) 0.0009 (SciPy, see the statistic's
/// tests): a fail for effectSize 0.147.
fn slower_canary() -> MetricSamples {
    MetricSamples {
        canary: Histogram::from_pairs(&[
            (5_000, 10),
            (10_000, 40),
            (25_000, 30),
            (50_000, 15),
            (100_000, 5),
        ]),
        baseline: Histogram::from_pairs(&[
            (5_000, 20),
            (10_000, 50),
            (25_000, 20),
            (50_000, 8),
            (100_000, 2),
        ]),
    }
}

fn same_success() -> MetricSamples {
    MetricSamples {
        canary: Histogram::success(1, 199),
        baseline: Histogram::success(1, 199),
    }
}

fn samples(latency: MetricSamples) -> BTreeMap<String, MetricSamples> {
    BTreeMap::from([
        ("request-duration".to_string(), latency),
        ("request-success-rate".to_string(), same_success()),
    ])
}

/// Too few samples for any verdict.
fn few() -> BTreeMap<String, MetricSamples> {
    let h = Histogram::from_pairs(&[(5_000, 5)]);
    samples(MetricSamples {
        canary: h.clone(),
        baseline: h,
    })
}

struct Run {
    spec: CanarySpec,
    policy: AnalysisPolicy,
    status: CanaryStatus,
    inconclusive: u32,
    now: TimestampMs,
    revision: String,
}

impl Run {
    /// The fixture, initialised at r1, analysing r2 at weight 10 (the first step done).
    fn at_weight_10(policy: impl FnOnce(&mut AnalysisPolicy)) -> Run {
        let (spec, mut p) = judged_fixture();
        policy(&mut p);
        let mut run = Run {
            spec,
            policy: p,
            status: CanaryStatus::new(T0),
            inconclusive: 0,
            now: T0,
            revision: "r1".into(),
        };
        run.tick(&BTreeMap::new()); // Initialize
        run.tick(&BTreeMap::new()); // Initialized
        assert_eq!(run.status.phase, Phase::Initialized);
        run.revision = "r2".into();
        let out = run.tick(&BTreeMap::new());
        assert_eq!(run.status.phase, Phase::Progressing);
        assert_eq!(
            out.actions[..2],
            [
                Action::DeployCanary {
                    revision: "r2".into()
                },
                Action::DeployBaseline {
                    revision: "r1".into()
                }
            ],
            "the fresh baseline starts with the canary, from the primary's revision"
        );
        run.tick(&BTreeMap::new()); // first step: pre-rollout only, then weight 10
        assert_eq!(run.status.canary_weight, 10);
        run
    }

    fn input(&self, manual: Option<Manual>) -> TickInput {
        let mut input = TickInput::new(self.revision.clone());
        input.manual = manual;
        let plan = plan_tick(&self.spec, &self.status, &self.revision, self.now);
        for m in &plan.metrics {
            input.metrics.insert(m.name.clone(), Some(99_900));
        }
        input
    }

    fn apply(
        &mut self,
        input: TickInput,
        samples: &BTreeMap<String, MetricSamples>,
    ) -> TickOutcome {
        let judging = Judging {
            policy: &self.policy,
            samples,
            inconclusive: self.inconclusive,
        };
        let out = advance_judged(&self.spec, &self.status, &input, &judging, self.now);
        self.status = out.outcome.status.clone();
        self.inconclusive = out.inconclusive;
        self.now += self.spec.analysis.interval_ms;
        out.outcome
    }

    /// One due tick with `samples`.
    fn tick(&mut self, samples: &BTreeMap<String, MetricSamples>) -> TickOutcome {
        let plan = plan_tick(&self.spec, &self.status, &self.revision, self.now);
        assert!(plan.due, "tick not due in {}", self.status.phase);
        let input = self.input(None);
        self.apply(input, samples)
    }

    fn manual(&mut self, m: Manual) -> TickOutcome {
        let input = self.input(Some(m));
        self.apply(input, &BTreeMap::new())
    }
}

fn alerts(out: &TickOutcome) -> Vec<Severity> {
    out.actions
        .iter()
        .filter_map(|a| match a {
            Action::Alert { severity, .. } => Some(*severity),
            _ => None,
        })
        .collect()
}

fn routes(out: &TickOutcome) -> bool {
    out.actions.iter().any(|a| a.weights().is_some())
}

#[test]
fn the_fixture_sets_the_policy() {
    let (_, policy) = judged_fixture();
    assert_eq!(policy.on_failure, OnFailure::Hold);
    assert_eq!(policy.inconclusive_limit, Some(3));
    assert_eq!(
        policy.judges["request-duration"],
        Judge {
            baseline: Baseline::Fresh,
            direction: Direction::Increase,
            effect_size_milli: 147,
            confidence_milli: 950,
        }
    );
    assert_eq!(policy.judges["request-success-rate"].effect_size_milli, 10);
    assert!(policy.uses_fresh_baseline());
}

#[test]
fn a_passing_judgement_advances_the_weight() {
    let mut run = Run::at_weight_10(|_| {});
    let out = run.tick(&samples(same_latency()));
    assert_eq!(run.status.canary_weight, 20, "{:?}", out.events);
    assert!(
        out.events.iter().any(|e| e
            .message
            .starts_with("Judge of metric request-duration passed")),
        "{:?}",
        out.events
    );
    assert_eq!(run.status.failed_checks, 0);
}

#[test]
fn a_failing_judgement_is_a_failed_check_and_hold_keeps_the_weights() {
    let mut run = Run::at_weight_10(|_| {});
    for n in 1..=2 {
        let out = run.tick(&samples(slower_canary()));
        assert_eq!(run.status.failed_checks, n);
        assert_eq!(run.status.canary_weight, 10);
        assert!(
            out.events.iter().any(|e| e
                .message
                .contains("judge of metric request-duration failed")),
            "{:?}",
            out.events
        );
    }
    // Threshold 2 reached: onFailure: hold halts instead of rolling back.
    let out = run.tick(&samples(slower_canary()));
    assert_eq!(run.status.phase, Phase::Halted);
    assert_eq!(run.status.phase.as_str(), "Halted");
    assert_eq!(run.status.canary_weight, 10, "the weights stay");
    assert_eq!(run.status.canary_revision.as_deref(), Some("r2"));
    assert!(!routes(&out), "no routing change: {:?}", out.actions);
    assert!(!out.actions.contains(&Action::ScaleCanaryToZero));
    assert_eq!(alerts(&out), [Severity::Error]);
    // Halted waits for an operator: no tick is due.
    let plan = plan_tick(&run.spec, &run.status, &run.revision, run.now);
    assert!(!plan.due);
}

#[test]
fn the_default_policy_still_rolls_back_and_removes_the_baseline() {
    let mut run = Run::at_weight_10(|p| p.on_failure = OnFailure::Rollback);
    for _ in 0..2 {
        run.tick(&samples(slower_canary()));
    }
    let out = run.tick(&samples(slower_canary()));
    assert_eq!(run.status.phase, Phase::Failed);
    assert_eq!(run.status.canary_weight, 0);
    assert!(out.actions.contains(&Action::RouteAllToPrimary));
    assert!(out.actions.contains(&Action::ScaleCanaryToZero));
    assert!(out.actions.contains(&Action::ScaleBaselineToZero));
}

fn halted_run() -> Run {
    let mut run = Run::at_weight_10(|_| {});
    for _ in 0..3 {
        run.tick(&samples(slower_canary()));
    }
    assert_eq!(run.status.phase, Phase::Halted);
    run
}

#[test]
fn retry_resumes_analysis_at_the_weight_with_failed_checks_reset() {
    let mut run = halted_run();
    let out = run.manual(Manual::Retry);
    assert_eq!(run.status.phase, Phase::Progressing);
    assert_eq!(run.status.failed_checks, 0);
    assert_eq!(run.status.canary_weight, 10);
    assert!(!routes(&out), "{:?}", out.actions);
    // The analysis goes on from there.
    run.tick(&samples(same_latency()));
    assert_eq!(run.status.canary_weight, 20);
}

#[test]
fn promote_out_of_halted_promotes_and_removes_the_baseline() {
    let mut run = halted_run();
    let out = run.manual(Manual::Promote);
    assert_eq!(run.status.phase, Phase::Promoting);
    assert!(out.actions.contains(&Action::PromoteCanary {
        revision: "r2".into()
    }));
    assert!(out.actions.contains(&Action::ScaleBaselineToZero));
}

#[test]
fn abort_out_of_halted_rolls_back() {
    let mut run = halted_run();
    let out = run.manual(Manual::Abort);
    assert_eq!(run.status.phase, Phase::Failed);
    assert_eq!(run.status.canary_weight, 0);
    assert_eq!(run.status.failed_spec.as_deref(), Some("r2"));
    assert!(out.actions.contains(&Action::RouteAllToPrimary));
    assert!(out.actions.contains(&Action::ScaleBaselineToZero));
    assert_eq!(alerts(&out), [Severity::Warn]);
}

#[test]
fn a_new_revision_restarts_a_halted_analysis() {
    let mut run = halted_run();
    run.revision = "r3".into();
    let plan = plan_tick(&run.spec, &run.status, &run.revision, run.now);
    assert!(plan.due);
    let out = run.tick(&BTreeMap::new());
    assert_eq!(run.status.phase, Phase::Progressing);
    assert_eq!(run.status.canary_weight, 0);
    assert_eq!(run.status.failed_checks, 0);
    assert!(out.actions.contains(&Action::DeployBaseline {
        revision: "r1".into()
    }));
}

#[test]
fn inconclusive_judgements_hold_the_weight_then_halt_at_the_limit() {
    let mut run = Run::at_weight_10(|_| {});
    for n in 1..=2 {
        let out = run.tick(&few());
        assert_eq!(run.status.phase, Phase::Progressing);
        assert_eq!(run.status.canary_weight, 10, "the weight holds");
        assert_eq!(run.status.failed_checks, 0, "not a failed check");
        assert_eq!(run.inconclusive, n);
        assert!(
            out.events
                .iter()
                .any(|e| e.message.contains("too few samples") && e.message.contains("limit 3")),
            "{:?}",
            out.events
        );
    }
    let out = run.tick(&few());
    assert_eq!(run.status.phase, Phase::Halted);
    assert_eq!(run.status.canary_weight, 10);
    assert_eq!(alerts(&out), [Severity::Warn]);
    // Retry counts from zero again.
    run.manual(Manual::Retry);
    assert_eq!(run.inconclusive, 0);
    assert_eq!(run.status.phase, Phase::Progressing);
}

#[test]
fn a_conclusive_judgement_resets_the_inconclusive_count() {
    let mut run = Run::at_weight_10(|_| {});
    run.tick(&few());
    run.tick(&few());
    assert_eq!(run.inconclusive, 2);
    run.tick(&samples(same_latency()));
    assert_eq!(run.inconclusive, 0);
    assert_eq!(run.status.canary_weight, 20);
    run.tick(&few());
    run.tick(&few());
    assert_eq!(run.status.phase, Phase::Progressing, "two in a row only");
}

#[test]
fn without_a_limit_inconclusive_judgements_never_halt() {
    let mut run = Run::at_weight_10(|p| p.inconclusive_limit = None);
    for _ in 0..10 {
        run.tick(&few());
    }
    assert_eq!(run.status.phase, Phase::Progressing);
    assert_eq!(run.status.canary_weight, 10);
    assert_eq!(run.inconclusive, 10);
}

#[test]
fn missing_samples_are_inconclusive_not_failed() {
    let mut run = Run::at_weight_10(|_| {});
    run.tick(&BTreeMap::new());
    assert_eq!(run.status.failed_checks, 0);
    assert_eq!(run.inconclusive, 1);
}

#[test]
fn halted_is_appended_last_so_stored_phases_keep_their_numbers() {
    // bincode numbers enum variants by position: Halted must come after Terminating (9).
    let cfg = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec(Phase::Halted, cfg).unwrap();
    assert_eq!(bytes, [10]);
    let bytes = bincode::serde::encode_to_vec(Phase::Terminating, cfg).unwrap();
    assert_eq!(bytes, [9]);
}

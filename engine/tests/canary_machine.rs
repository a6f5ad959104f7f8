//! Canary analysis end to end (SPEC K1–K10): the resource fixtures, and the phase machine
//! driven tick by tick with scripted inputs, the way the leader drives it (plan, I/O,
//! advance at the planned step).
//!
//! Every file under `fixtures/canary/valid/` parses; every file under
//! `fixtures/canary/invalid/` is refused with the error its first line announces
//! (`# expect: <path>: <message fragment>`, an empty path meaning the document).

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use hub_engine::canary::{
    advance, legacy_revision_hash, parse_canary, parse_canary_reporting, plan_tick, revision_hash,
    terminate, Action, AlertTarget, CanarySpec, CanaryStatus, ConditionStatus, HeaderMatch, Manual,
    MetricSource, Phase, StepWeights, Strategy, TickInput, TickOutcome, TickPlan, WebhookResult,
    WebhookType, MAX_CANARY_BYTES,
};
use hub_engine::entity::EntityKind;
use hub_engine::TimestampMs;
use proptest::prelude::*;
use proptest::strategy::Strategy as _;

/// Monday 2026-11-30T00:00:00Z.
const T0: TimestampMs = 1_795_996_800_000;
const SECOND: TimestampMs = 1_000;

// ----- fixtures -----

fn dir(name: &str) -> PathBuf {
    std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("tests/fixtures/canary")
    .join(name)
}

fn fixtures(name: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = fs::read_dir(dir(name))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("yml"))
        .map(|p| {
            let file = p.file_name().unwrap().to_str().unwrap().to_string();
            (file, fs::read_to_string(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

fn fixture(file: &str) -> CanarySpec {
    let text = fs::read_to_string(dir("valid").join(file)).unwrap();
    parse_canary(&text).unwrap_or_else(|e| panic!("{file}:\n{e}"))
}

#[test]
fn valid_fixtures_parse() {
    let all = fixtures("valid");
    assert!(all.len() >= 4);
    for (file, text) in &all {
        let spec = parse_canary(text).unwrap_or_else(|e| panic!("{file}:\n{e}"));
        // Stored specs survive bincode (the replicated state's encoding).
        let cfg = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(&spec, cfg).unwrap();
        let (back, _): (CanarySpec, usize) =
            bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
        assert_eq!(back, spec, "{file}");
    }
}

#[test]
fn podinfo_example_reads_as_the_seed_describes() {
    let s = fixture("podinfo.yml");
    assert_eq!(s.name, "podinfo");
    assert_eq!(s.target.kind, EntityKind::HelmChart);
    assert_eq!(s.service.name, "podinfo");
    assert_eq!(s.service.canary_name(), "podinfo-canary");
    assert_eq!(s.service.primary_name(), "podinfo-primary");
    assert_eq!(s.service.port, 9898);
    assert_eq!(s.analysis.interval_ms, 60_000);
    assert_eq!(s.analysis.threshold, 10);
    assert_eq!(
        s.analysis.strategy,
        Strategy::Canary {
            steps: StepWeights::Fixed(5),
            max_weight: 50
        }
    );
    assert_eq!(s.analysis.metrics.len(), 2);
    assert_eq!(
        s.analysis.metrics[0].source,
        MetricSource::RequestSuccessRate
    );
    assert_eq!(s.analysis.metrics[0].range.min, Some(99_000));
    assert_eq!(s.analysis.metrics[1].range.max, Some(500_000));
    let hook = &s.analysis.webhooks[0];
    assert_eq!(hook.kind, WebhookType::Rollout);
    assert_eq!(hook.timeout_ms, 10_000);
    assert!(hook.metadata["cmd"].starts_with("hey -z 1m"));
}

#[test]
fn ab_blue_green_and_step_weights_examples_derive_their_strategies() {
    let ab = fixture("ab-testing.yml");
    let Strategy::AbTesting {
        iterations,
        match_rules,
    } = &ab.analysis.strategy
    else {
        panic!("{:?}", ab.analysis.strategy)
    };
    assert_eq!(*iterations, 10);
    assert_eq!(
        match_rules[0].headers["x-canary"],
        HeaderMatch::Exact("insider".into())
    );
    assert!(matches!(
        match_rules[1].headers["cookie"],
        HeaderMatch::Regex(_)
    ));
    assert_eq!(ab.namespace.as_deref(), Some("prod"));
    assert_eq!(ab.analysis.metrics[0].range.min, Some(99_500));
    assert_eq!(ab.progress_deadline_seconds, 300);

    let bg = fixture("blue-green.yml");
    assert_eq!(bg.analysis.strategy, Strategy::BlueGreen { iterations: 5 });
    assert_eq!(bg.target.kind, EntityKind::TerraformModule);
    assert_eq!(bg.service.name, "payments-api");
    assert_eq!(bg.analysis.interval_ms, 90_000);
    assert_eq!(bg.analysis.step_weight_promotion, Some(25));
    assert_eq!(
        (
            bg.analysis.primary_ready_threshold,
            bg.analysis.canary_ready_threshold
        ),
        (80, 90)
    );
    assert_eq!(
        bg.analysis.alerts[0].target,
        AlertTarget::Provider {
            name: "pagerduty".into(),
            namespace: None
        }
    );

    let sw = fixture("step-weights.yml");
    assert_eq!(
        sw.analysis.strategy,
        Strategy::Canary {
            steps: StepWeights::List(vec![1, 5, 10, 50]),
            max_weight: 50
        }
    );
    assert!(sw.revert_on_deletion);
    assert_eq!(sw.analysis.webhooks.len(), 8);
    assert!(matches!(
        sw.analysis.metrics[1].source,
        MetricSource::Prometheus { .. }
    ));
    assert_eq!(sw.analysis.metrics[1].interval_ms, 120_000);
}

fn expectation(file: &str, text: &str) -> (String, String) {
    let first = text.lines().next().unwrap_or("");
    let rest = first
        .strip_prefix("# expect: ")
        .unwrap_or_else(|| panic!("{file}: first line must be `# expect: <path>: <fragment>`"));
    let (path, fragment) = rest
        .split_once(": ")
        .unwrap_or_else(|| panic!("{file}: expectation has no `: `"));
    (path.to_string(), fragment.to_string())
}

#[test]
fn invalid_corpus_is_refused_with_the_expected_error() {
    let corpus = fixtures("invalid");
    assert!(corpus.len() >= 20, "only {} invalid fixtures", corpus.len());
    for (file, text) in &corpus {
        let (path, fragment) = expectation(file, text);
        let errs = match parse_canary(text) {
            Ok(_) => panic!("{file}: accepted"),
            Err(e) => e,
        };
        assert!(
            errs.iter()
                .any(|e| e.path == path && e.message.contains(&fragment)),
            "{file}: want `{path}: ...{fragment}...`, got:\n{errs}"
        );
    }
}

#[test]
fn errors_name_path_and_line_and_are_all_collected() {
    let text = fs::read_to_string(dir("invalid").join("unknown-field.yml")).unwrap();
    let errs = parse_canary(&text).unwrap_err();
    assert_eq!(errs.first().path, "spec.analysis.stepWeigth");
    assert_eq!(errs.first().line, Some(17));
    assert!(errs.to_string().contains("(line 17, column 5)"), "{errs}");

    let text = "\
metadata: {name: demo}
spec:
  targetRef: {name: demo}
  service: {port: 9898}
  analysis:
    stepWeights: [1, 10, 10, 50]
    stepWeightPromotion: 0
    metrics:
      - {name: latency, thresholdRange: {max: 1}}
    webhooks:
      - {name: gate, type: approve, url: 'http://x/'}
    alerts:
      - {name: pager, severity: critical, url: 'http://p/'}
";
    let errs = parse_canary(text).unwrap_err();
    let shown = errs.to_string();
    for want in [
        "spec.analysis.stepWeights[2]: must be greater than 10",
        "spec.analysis.stepWeightPromotion: must be between 1 and 100, got 0",
        "spec.analysis.metrics[0].name: \"latency\" is not a built-in metric",
        "spec.analysis.webhooks[0].type: unknown webhook type \"approve\"",
        "spec.analysis.alerts[0].severity: \"critical\" is not a severity",
    ] {
        assert!(shown.contains(want), "{want} missing from\n{shown}");
    }
    assert_eq!(errs.as_slice().len(), 5, "{shown}");
}

#[test]
fn oversized_resource_is_refused_before_parsing() {
    let text = format!("# {}\n", "x".repeat(MAX_CANARY_BYTES));
    let errs = parse_canary(&text).unwrap_err();
    assert!(errs.first().message.contains("bytes"), "{errs}");
}

// ----- the driver -----

/// Drives one canary as the leader would: plan, answer the plan (healthy unless a script
/// says otherwise), advance at the entry's time, and record what happened.
struct Driver {
    spec: CanarySpec,
    status: CanaryStatus,
    now: TimestampMs,
    revision: String,
    /// Canary weight after every routing action, in order.
    weights: Vec<u8>,
    /// Phase after every applied tick.
    phases: Vec<Phase>,
    actions: Vec<Action>,
    events: Vec<String>,
    /// Every applied tick: status before, input, time (for replay).
    log: Vec<(CanaryStatus, TickInput, TimestampMs)>,
}

/// The healthy answer to a plan: every gate passes, rollback webhooks stay silent, every
/// metric in range.
fn healthy(spec: &CanarySpec, plan: &TickPlan, revision: &str) -> TickInput {
    let mut input = TickInput::new(revision);
    for call in &plan.webhooks {
        let result = if call.kind == WebhookType::Rollback {
            WebhookResult::from_status(404, "no rollback")
        } else {
            WebhookResult::from_status(200, "ok")
        };
        input.webhooks.insert(call.name.clone(), result);
    }
    for q in &plan.metrics {
        let m = spec
            .analysis
            .metrics
            .iter()
            .find(|m| m.name == q.name)
            .unwrap();
        let value = match (m.range.min, m.range.max) {
            (Some(lo), Some(hi)) => (lo + hi) / 2,
            (Some(lo), None) => lo,
            (None, Some(hi)) => hi,
            (None, None) => 0,
        };
        input.metrics.insert(q.name.clone(), Some(value));
    }
    input
}

impl Driver {
    fn new(spec: CanarySpec) -> Self {
        Driver {
            spec,
            status: CanaryStatus::new(T0),
            now: T0,
            revision: "r1".to_string(),
            weights: Vec::new(),
            phases: Vec::new(),
            actions: Vec::new(),
            events: Vec::new(),
            log: Vec::new(),
        }
    }

    fn yaml(yaml: &str) -> Self {
        Driver::new(parse_canary(yaml).unwrap_or_else(|e| panic!("{e}")))
    }

    /// Initialises at revision `r1` (two ticks) and deploys `r2`, which starts analysis.
    fn started(yaml: &str) -> Self {
        let mut d = Driver::yaml(yaml);
        d.tick();
        d.tick();
        assert_eq!(d.status.phase, Phase::Initialized);
        d.revision = "r2".into();
        d.tick();
        assert_eq!(d.status.phase, Phase::Progressing);
        d
    }

    fn plan(&self) -> TickPlan {
        plan_tick(&self.spec, &self.status, &self.revision, self.now)
    }

    /// One tick with a scripted input; `None` when the plan was empty (time still moves on
    /// by one interval).
    fn tick_with(&mut self, script: impl FnOnce(&TickPlan, &mut TickInput)) -> Option<TickOutcome> {
        let plan = self.plan();
        assert_eq!(plan.step, self.status.step);
        if !plan.due {
            self.now += self.spec.analysis.interval_ms;
            return None;
        }
        let mut input = healthy(&self.spec, &plan, &self.revision);
        script(&plan, &mut input);
        Some(self.apply(input))
    }

    fn apply(&mut self, input: TickInput) -> TickOutcome {
        let out = advance(&self.spec, &self.status, &input, self.now);
        // Determinism: the same tick gives the same outcome.
        assert_eq!(out, advance(&self.spec, &self.status, &input, self.now));
        assert_eq!(out.status.step, self.status.step + 1);
        self.log.push((self.status.clone(), input, self.now));
        for a in &out.actions {
            if let Some((p, c)) = a.weights() {
                assert_eq!(u16::from(p) + u16::from(c), 100, "{a:?}");
                if !matches!(a, Action::Initialize { .. }) {
                    self.weights.push(c);
                }
            }
        }
        self.actions.extend(out.actions.iter().cloned());
        self.events
            .extend(out.events.iter().map(|e| e.message.clone()));
        self.phases.push(out.status.phase);
        self.status = out.status.clone();
        self.now = self.status.next_tick_ms.unwrap_or(self.now + SECOND);
        out
    }

    fn tick(&mut self) -> Option<TickOutcome> {
        self.tick_with(|_, _| {})
    }

    /// Ticks healthily until `phase` (at most `max` ticks).
    fn until(&mut self, phase: Phase, max: usize) {
        for _ in 0..max {
            if self.status.phase == phase {
                return;
            }
            self.tick();
        }
        assert_eq!(
            self.status.phase,
            phase,
            "events:\n{}",
            self.events.join("\n")
        );
    }

    fn manual(&mut self, m: Manual) -> TickOutcome {
        let mut input = TickInput::manual(self.revision.clone(), m);
        input.primary_ready_percent = 100;
        self.apply(input)
    }
}

const CANARY: &str = "\
metadata: {name: demo, namespace: prod}
spec:
  targetRef: {name: demo}
  service: {port: 9898}
  progressDeadlineSeconds: 5
  analysis:
    interval: 1s
    threshold: 3
    maxWeight: 50
    stepWeight: 10
    metrics:
      - {name: request-success-rate, thresholdRange: {min: 99}, interval: 1m}
      - {name: request-duration, thresholdRange: {max: 500}, interval: 30s}
    webhooks:
      - {name: gate, type: confirm-rollout, url: 'http://gate/rollout'}
      - {name: smoke, type: pre-rollout, url: 'http://tester/smoke'}
      - {name: load, type: rollout, url: 'http://tester/load', metadata: {cmd: hey}}
      - {name: traffic, type: confirm-traffic-increase, url: 'http://gate/traffic'}
      - {name: promotion, type: confirm-promotion, url: 'http://gate/promotion'}
      - {name: done, type: post-rollout, url: 'http://chat/done'}
      - {name: kill, type: rollback, url: 'http://gate/kill'}
    alerts:
      - {name: chat, severity: info, url: 'http://chat/alerts'}
";

/// The workload and routing actions (for the agent), without alerts and notifications.
fn ops(out: &TickOutcome) -> Vec<Action> {
    out.actions
        .iter()
        .filter(|a| !matches!(a, Action::Alert { .. } | Action::NotifyWebhook { .. }))
        .cloned()
        .collect()
}

fn fail(input: &mut TickInput, hook: &str) {
    if input.webhooks.contains_key(hook) {
        input
            .webhooks
            .insert(hook.to_string(), WebhookResult::from_status(503, "not yet"));
    }
}

fn bad_success_rate(input: &mut TickInput) {
    if input.metrics.contains_key("request-success-rate") {
        input
            .metrics
            .insert("request-success-rate".into(), Some(50_000));
    }
}

// ----- scenarios -----

#[test]
fn initialisation_sets_up_the_primary_then_waits_for_it() {
    let mut d = Driver::yaml(CANARY);
    let out = d.tick().unwrap();
    assert_eq!(
        ops(&out)[0],
        Action::Initialize {
            revision: "r1".into()
        }
    );
    assert_eq!(d.status.phase, Phase::Initializing);
    // Not ready yet: Initializing holds.
    d.tick_with(|_, i| i.primary_ready_percent = 50);
    assert_eq!(d.status.phase, Phase::Initializing);
    d.tick();
    assert_eq!(d.status.phase, Phase::Initialized);
    assert_eq!(d.status.last_promoted_spec.as_deref(), Some("r1"));
    assert_eq!(d.status.last_applied_spec.as_deref(), Some("r1"));
    assert!(d.status.is_promoted());
    // Nothing new: nothing to do.
    assert!(d.plan().is_empty());
}

#[test]
fn healthy_canary_is_promoted_with_the_exact_weight_sequence() {
    let mut d = Driver::started(CANARY);
    assert!(d.actions.contains(&Action::DeployCanary {
        revision: "r2".into()
    }));
    d.until(Phase::Succeeded, 20);
    assert_eq!(d.weights, vec![10, 20, 30, 40, 50, 0]);
    let tail: Vec<Phase> = d.phases.iter().rev().take(3).rev().copied().collect();
    assert_eq!(
        tail,
        vec![Phase::Promoting, Phase::Finalising, Phase::Succeeded]
    );
    assert!(d.actions.contains(&Action::PromoteCanary {
        revision: "r2".into()
    }));
    assert_eq!(
        d.actions
            .iter()
            .filter(|a| **a == Action::ScaleCanaryToZero)
            .count(),
        1
    );
    let s = &d.status;
    assert_eq!(s.last_promoted_spec.as_deref(), Some("r2"));
    assert_eq!(s.last_applied_spec.as_deref(), Some("r2"));
    assert_eq!(s.primary_revision.as_deref(), Some("r2"));
    assert_eq!(s.canary_revision, None);
    assert_eq!((s.canary_weight, s.failed_checks, s.iterations), (0, 0, 0));
    assert_eq!(s.promoted.status, ConditionStatus::True);
    assert_eq!(s.promoted.reason, Phase::Succeeded);
    assert_eq!(
        s.promoted.message,
        "Canary analysis completed successfully, promotion finished."
    );
    // Post-rollout webhook notified with phase Succeeded; an info alert sent.
    assert!(d.actions.iter().any(|a| matches!(a,
        Action::NotifyWebhook { call } if call.name == "done" && call.payload.phase == "Succeeded"
            && call.payload.checksum == "r2" && call.payload.namespace == "prod")));
    assert!(d
        .actions
        .iter()
        .any(|a| matches!(a, Action::Alert { message, .. }
        if message == "Canary analysis completed successfully, promotion finished.")));
    // One tick per interval: Progressing at T0+2s, five steps, promote at T0+8s,
    // Finalising at T0+9s, Succeeded at T0+10s.
    assert_eq!(s.phase_started_ms, T0 + 10 * SECOND);
    assert!(d.plan().is_empty());
}

#[test]
fn step_weights_list_sets_each_entry_in_turn() {
    let yaml = CANARY.replace(
        "    maxWeight: 50\n    stepWeight: 10\n",
        "    stepWeights: [1, 5, 10, 50]\n",
    );
    let mut d = Driver::started(&yaml);
    d.until(Phase::Succeeded, 20);
    assert_eq!(d.weights, vec![1, 5, 10, 50, 0]);
}

#[test]
fn step_weight_promotion_moves_traffic_back_gradually() {
    let yaml = CANARY.replace(
        "    maxWeight: 50\n    stepWeight: 10\n",
        "    maxWeight: 60\n    stepWeight: 20\n    stepWeightPromotion: 25\n",
    );
    let mut d = Driver::started(&yaml);
    d.until(Phase::Succeeded, 20);
    assert_eq!(d.weights, vec![20, 40, 60, 35, 10, 0]);
}

#[test]
fn first_step_runs_pre_rollout_only_and_later_steps_rollout_then_metrics() {
    let mut d = Driver::started(CANARY);
    let names = |p: &TickPlan| {
        p.webhooks
            .iter()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>()
    };
    let plan = d.plan();
    assert_eq!(names(&plan), vec!["kill", "smoke", "traffic"]);
    assert!(plan.metrics.is_empty());
    assert_eq!(plan.webhooks[1].payload.phase, "Progressing");
    assert_eq!(plan.webhooks[0].payload.checksum, "r2");
    d.tick();
    let plan = d.plan();
    assert_eq!(names(&plan), vec!["kill", "load", "traffic"]);
    let load = &plan.webhooks[1];
    assert_eq!(load.payload.metadata["cmd"], "hey");
    assert_eq!(load.timeout_ms, 10_000);
    let metrics: Vec<_> = plan
        .metrics
        .iter()
        .map(|m| (m.name.as_str(), m.interval_ms))
        .collect();
    assert_eq!(
        metrics,
        vec![
            ("request-success-rate", 60_000),
            ("request-duration", 30_000)
        ]
    );
    d.until(Phase::Progressing, 1);
    while d.status.canary_weight < 50 {
        d.tick();
    }
    assert_eq!(names(&d.plan()), vec!["kill", "load", "promotion"]);
}

#[test]
fn faulty_revision_is_rolled_back_after_exactly_threshold_failed_checks() {
    let mut d = Driver::started(CANARY);
    d.tick(); // pre-rollout passes: weight 10
    for n in 1..=3 {
        d.tick_with(|_, i| bad_success_rate(i));
        assert_eq!(d.status.failed_checks, n);
        assert_eq!(d.status.phase, Phase::Progressing);
        assert_eq!(
            d.status.canary_weight, 10,
            "a failed check keeps the weight"
        );
    }
    // The threshold is reached: the next tick rolls back (Flagger's order).
    let out = d.tick_with(|_, i| bad_success_rate(i)).unwrap();
    assert_eq!(d.status.phase, Phase::Failed);
    assert_eq!(d.status.failed_checks, 3);
    assert_eq!(ops(&out)[0], Action::RouteAllToPrimary);
    assert_eq!(ops(&out)[1], Action::ScaleCanaryToZero);
    assert_eq!(d.weights, vec![10, 0]);
    let s = &d.status;
    assert_eq!((s.canary_weight, s.primary_weight()), (0, 100));
    assert_eq!(s.canary_revision, None);
    assert_eq!(s.failed_spec.as_deref(), Some("r2"));
    assert_eq!(s.last_applied_spec.as_deref(), Some("r2"));
    assert_eq!(s.last_promoted_spec.as_deref(), Some("r1"));
    assert_eq!(s.promoted.status, ConditionStatus::False);
    assert_eq!(s.promoted.reason, Phase::Failed);
    assert!(d
        .events
        .iter()
        .any(|e| e.contains("failed checks threshold reached 3")));
    assert!(out.actions.iter().any(|a| matches!(a,
        Action::NotifyWebhook { call } if call.name == "done" && call.payload.phase == "Failed")));
}

#[test]
fn failed_checks_are_cumulative_across_steps() {
    let mut d = Driver::started(CANARY);
    d.tick(); // 10
    d.tick_with(|_, i| bad_success_rate(i));
    d.tick(); // 20
    d.tick_with(|_, i| fail(i, "load"));
    d.tick(); // 30
    assert_eq!(d.status.failed_checks, 2);
    d.tick_with(|_, i| bad_success_rate(i));
    assert_eq!(d.status.failed_checks, 3);
    assert_eq!(d.weights, vec![10, 20, 30]);
    d.tick();
    assert_eq!(d.status.phase, Phase::Failed);
}

#[test]
fn a_metric_without_data_fails_the_check() {
    let mut d = Driver::started(CANARY);
    d.tick();
    d.tick_with(|_, i| {
        i.metrics.insert("request-duration".into(), None);
    });
    assert_eq!(d.status.failed_checks, 1);
    assert!(d
        .events
        .last()
        .unwrap()
        .contains("no values found for proxy metric request-duration"));
    // A metric missing from the input altogether fails the same way.
    d.tick_with(|_, i| {
        i.metrics.remove("request-success-rate");
    });
    assert_eq!(d.status.failed_checks, 2);
    assert_eq!(d.status.canary_weight, 10);
}

#[test]
fn confirm_promotion_holds_in_waiting_promotion_until_it_succeeds() {
    let mut d = Driver::started(CANARY);
    while d.status.canary_weight < 50 {
        d.tick();
    }
    for _ in 0..4 {
        d.tick_with(|_, i| fail(i, "promotion"));
        assert_eq!(d.status.phase, Phase::WaitingPromotion);
        assert_eq!(d.status.canary_weight, 50);
        assert_eq!(d.status.failed_checks, 0);
    }
    assert!(!d.status.is_promoted());
    assert_eq!(d.status.promoted.message, "Waiting for approval.");
    d.tick();
    assert_eq!(d.status.phase, Phase::Promoting);
    d.until(Phase::Succeeded, 5);
    assert_eq!(d.weights, vec![10, 20, 30, 40, 50, 0]);
}

#[test]
fn analysis_continues_while_waiting_for_promotion() {
    let mut d = Driver::started(CANARY);
    while d.status.canary_weight < 50 {
        d.tick();
    }
    d.tick_with(|_, i| fail(i, "promotion"));
    assert_eq!(d.status.phase, Phase::WaitingPromotion);
    for _ in 0..3 {
        d.tick_with(|_, i| bad_success_rate(i));
    }
    d.tick();
    assert_eq!(d.status.phase, Phase::Failed);
}

#[test]
fn a_rollback_webhook_answering_ok_rolls_back() {
    let mut d = Driver::started(CANARY);
    d.tick();
    d.tick();
    assert_eq!(d.status.canary_weight, 20);
    let out = d
        .tick_with(|_, i| {
            i.webhooks
                .insert("kill".into(), WebhookResult::from_status(200, "stop"));
        })
        .unwrap();
    assert_eq!(d.status.phase, Phase::Failed);
    assert_eq!(d.status.failed_checks, 0);
    assert_eq!(ops(&out)[0], Action::RouteAllToPrimary);
    assert!(d.events.iter().any(|e| e == "Rollback check kill passed"));
    assert!(d
        .events
        .iter()
        .any(|e| e.ends_with("manual webhook invoked")));
}

#[test]
fn confirm_traffic_increase_failing_holds_the_weight_without_a_failed_check() {
    let mut d = Driver::started(CANARY);
    d.tick();
    for _ in 0..5 {
        d.tick_with(|_, i| fail(i, "traffic"));
        assert_eq!(d.status.canary_weight, 10);
        assert_eq!(d.status.failed_checks, 0);
        assert_eq!(d.status.phase, Phase::Progressing);
    }
    d.tick();
    assert_eq!(d.status.canary_weight, 20);
}

#[test]
fn confirm_rollout_failing_waits_without_a_failed_check() {
    let mut d = Driver::yaml(CANARY);
    d.tick();
    d.tick();
    d.revision = "r2".into();
    for _ in 0..3 {
        let out = d.tick_with(|_, i| fail(i, "gate")).unwrap();
        assert_eq!(d.status.phase, Phase::Waiting);
        assert!(!out
            .actions
            .iter()
            .any(|a| matches!(a, Action::DeployCanary { .. })));
    }
    assert_eq!(d.status.failed_checks, 0);
    assert_eq!(d.status.last_applied_spec.as_deref(), Some("r1"));
    d.tick();
    assert_eq!(d.status.phase, Phase::Progressing);
    assert_eq!(d.status.last_applied_spec.as_deref(), Some("r2"));
    // Abort while waiting rejects the revision: it does not start by itself.
    let mut d = Driver::yaml(CANARY);
    d.tick();
    d.tick();
    d.revision = "r2".into();
    d.tick_with(|_, i| fail(i, "gate"));
    d.manual(Manual::Abort);
    assert_eq!(d.status.phase, Phase::Failed);
    assert_eq!(d.status.failed_spec.as_deref(), Some("r2"));
    assert!(d.plan().is_empty());
    // Waiting, then back at the promoted revision: it settles.
    let mut d = Driver::yaml(CANARY);
    d.tick();
    d.tick();
    d.revision = "r2".into();
    d.tick_with(|_, i| fail(i, "gate"));
    d.revision = "r1".into();
    d.tick();
    assert_eq!(d.status.phase, Phase::Succeeded);
    assert!(d.plan().is_empty());
}

#[test]
fn suspend_freezes_a_running_analysis() {
    let mut d = Driver::started(CANARY);
    d.tick();
    d.tick();
    d.tick();
    assert_eq!(d.status.canary_weight, 30);
    d.spec.suspend = true;
    let frozen = d.status.clone();
    for _ in 0..10 {
        // The leader proposes nothing...
        assert!(d.plan().is_empty());
        assert!(d.tick().is_none());
    }
    // ...and a tick applied anyway (proposed before the suspension) changes nothing but
    // the step, even a manual command.
    let mut input = TickInput::new("r2");
    input.manual = Some(Manual::Abort);
    let out = advance(&d.spec, &d.status, &input, d.now);
    assert!(out.actions.is_empty());
    let mut expect = frozen.clone();
    expect.step += 1;
    assert_eq!(out.status, expect);
    assert!(out.events[0].message.contains("suspended"));
    // A new revision while suspended does not restart either.
    d.revision = "r3".into();
    assert!(d.plan().is_empty());
    d.revision = "r2".into();
    d.spec.suspend = false;
    d.tick();
    assert_eq!(d.status.canary_weight, 40);
    assert_eq!(d.weights, vec![10, 20, 30, 40]);
}

#[test]
fn a_canary_that_never_becomes_ready_fails_at_the_progress_deadline() {
    let mut d = Driver::yaml(CANARY);
    d.tick();
    d.tick();
    d.revision = "r2".into();
    d.tick();
    let started = d.status.revision_started_ms.unwrap();
    loop {
        d.tick_with(|_, i| i.canary_ready_percent = 0);
        if d.status.phase == Phase::Failed {
            break;
        }
        assert_eq!(d.status.canary_weight, 0);
        assert_eq!(d.status.failed_checks, 0);
        assert!(d.now - started < 10 * SECOND, "no deadline");
    }
    // progressDeadlineSeconds: 5, interval 1s: the tick at start + 5s fails.
    assert_eq!(d.status.phase_started_ms, started + 5 * SECOND);
    assert!(d
        .events
        .iter()
        .any(|e| e.contains("progress deadline exceeded canary")));
    assert_eq!(d.status.failed_spec.as_deref(), Some("r2"));
    assert!(d.actions.contains(&Action::ScaleCanaryToZero));
}

#[test]
fn a_canary_reporting_another_revision_is_not_ready() {
    let mut d = Driver::started(CANARY);
    d.tick_with(|_, i| i.canary_revision = Some("r1".into()));
    assert_eq!(
        d.status.canary_weight, 0,
        "the canary still runs the old revision"
    );
    d.tick_with(|_, i| i.canary_revision = Some("r2".into()));
    assert_eq!(d.status.canary_weight, 10);
}

#[test]
fn manual_promote_skips_the_remaining_steps() {
    let mut d = Driver::started(CANARY);
    d.tick();
    d.tick();
    let out = d.manual(Manual::Promote);
    assert_eq!(
        ops(&out),
        vec![Action::PromoteCanary {
            revision: "r2".into()
        }]
    );
    assert_eq!(d.status.phase, Phase::Promoting);
    d.until(Phase::Succeeded, 5);
    assert_eq!(d.weights, vec![10, 20, 0]);
    assert_eq!(d.status.last_promoted_spec.as_deref(), Some("r2"));
}

#[test]
fn manual_abort_rolls_back_at_once_and_retry_restarts_the_analysis() {
    let mut d = Driver::started(CANARY);
    d.tick();
    d.tick_with(|_, i| bad_success_rate(i));
    let out = d.manual(Manual::Abort);
    assert_eq!(ops(&out)[0], Action::RouteAllToPrimary);
    assert_eq!(d.status.phase, Phase::Failed);
    assert_eq!(d.status.failed_spec.as_deref(), Some("r2"));
    // Failed and the same spec: nothing starts by itself.
    for _ in 0..5 {
        assert!(d.tick().is_none());
    }
    // Promote is refused for a failed revision; retry restarts it.
    let out = d.manual(Manual::Promote);
    assert!(out.actions.is_empty());
    assert!(out.events[0].message.contains("ignored"));
    let out = d.manual(Manual::Retry);
    assert_eq!(
        ops(&out),
        vec![Action::DeployCanary {
            revision: "r2".into()
        }]
    );
    assert_eq!(d.status.phase, Phase::Progressing);
    assert_eq!((d.status.failed_checks, d.status.canary_weight), (0, 0));
    assert_eq!(d.status.failed_spec, None);
    d.until(Phase::Succeeded, 20);
    assert_eq!(d.status.last_promoted_spec.as_deref(), Some("r2"));
}

#[test]
fn manual_commands_out_of_place_change_nothing() {
    let mut d = Driver::started(CANARY);
    let out = d.manual(Manual::Retry);
    assert!(out.actions.is_empty());
    while d.status.phase != Phase::Promoting {
        d.tick();
    }
    let out = d.manual(Manual::Abort);
    assert!(out.actions.is_empty());
    assert_eq!(d.status.phase, Phase::Promoting);
    d.until(Phase::Succeeded, 5);
    let out = d.manual(Manual::Promote);
    assert!(out.actions.is_empty() && out.events[0].message.contains("ignored"));
}

#[test]
fn a_new_revision_mid_analysis_restarts_from_weight_zero() {
    let mut d = Driver::started(CANARY);
    d.tick();
    d.tick_with(|_, i| bad_success_rate(i));
    d.tick();
    d.tick();
    assert_eq!((d.status.canary_weight, d.status.failed_checks), (30, 1));
    d.revision = "r3".into();
    let plan = d.plan();
    assert!(
        plan.due && plan.webhooks.is_empty(),
        "no confirm-rollout again"
    );
    let out = d.tick().unwrap();
    assert_eq!(
        ops(&out),
        vec![
            Action::RouteAllToPrimary,
            Action::DeployCanary {
                revision: "r3".into()
            }
        ]
    );
    let s = &d.status;
    assert_eq!(s.phase, Phase::Progressing);
    assert_eq!((s.canary_weight, s.failed_checks, s.iterations), (0, 0, 0));
    assert_eq!(s.last_applied_spec.as_deref(), Some("r3"));
    d.until(Phase::Succeeded, 20);
    assert_eq!(d.weights, vec![10, 20, 30, 0, 10, 20, 30, 40, 50, 0]);
    assert_eq!(d.status.last_promoted_spec.as_deref(), Some("r3"));
}

#[test]
fn going_back_to_the_promoted_revision_mid_analysis_cancels_it() {
    let mut d = Driver::started(CANARY);
    d.tick();
    d.revision = "r1".into();
    let out = d.tick().unwrap();
    assert_eq!(
        ops(&out),
        vec![Action::RouteAllToPrimary, Action::ScaleCanaryToZero]
    );
    assert_eq!(d.status.phase, Phase::Succeeded);
    assert!(d.plan().is_empty());
}

#[test]
fn the_same_failed_spec_does_not_restart_by_itself() {
    let mut d = Driver::started(CANARY);
    d.tick();
    d.manual(Manual::Abort);
    assert_eq!(d.status.phase, Phase::Failed);
    for _ in 0..5 {
        assert!(d.tick().is_none());
    }
    // Back to the promoted revision: nothing to do either.
    d.revision = "r1".into();
    assert!(d.tick().is_none());
    // The failed one again: still nothing.
    d.revision = "r2".into();
    assert!(d.tick().is_none());
    // A new one starts.
    d.revision = "r3".into();
    d.tick();
    assert_eq!(d.status.phase, Phase::Progressing);
    assert_eq!(d.status.failed_spec, None);
}

#[test]
fn skip_analysis_promotes_straight_away() {
    let yaml = CANARY.replace("  progressDeadlineSeconds: 5\n", "  skipAnalysis: true\n");
    let mut d = Driver::started(&yaml);
    let plan = d.plan();
    assert!(plan.due && plan.webhooks.is_empty() && plan.metrics.is_empty());
    let out = d.tick().unwrap();
    assert_eq!(
        ops(&out)[..3],
        [
            Action::RouteAllToPrimary,
            Action::PromoteCanary {
                revision: "r2".into()
            },
            Action::ScaleCanaryToZero
        ]
    );
    assert_eq!(d.status.phase, Phase::Succeeded);
    assert_eq!(d.status.last_promoted_spec.as_deref(), Some("r2"));
}

#[test]
fn ab_testing_counts_iterations_on_the_match_route_then_promotes() {
    let yaml = "\
metadata: {name: ab}
spec:
  targetRef: {name: ab}
  service: {port: 80}
  analysis:
    interval: 1s
    threshold: 2
    iterations: 3
    match:
      - headers: {x-canary: {exact: insider}}
    metrics:
      - {name: request-success-rate, thresholdRange: {min: 99}}
";
    let mut d = Driver::started(yaml);
    let out = d.tick().unwrap();
    assert!(matches!(&ops(&out)[0],
        Action::SetRouting { canary_weight: 0, match_rules } if match_rules.len() == 1));
    assert!(d.status.match_routing);
    assert_eq!(d.status.iterations, 1);
    d.tick_with(|_, i| bad_success_rate(i));
    assert_eq!((d.status.iterations, d.status.failed_checks), (1, 1));
    d.tick();
    d.tick();
    assert_eq!(d.status.iterations, 3);
    assert_eq!(d.status.phase, Phase::Progressing);
    d.tick();
    assert_eq!(d.status.phase, Phase::Promoting);
    d.until(Phase::Succeeded, 5);
    // Canary weight 0 throughout: the match rules carried the canary's traffic.
    assert_eq!(d.weights, vec![0, 0]);
    assert!(!d.status.match_routing);
}

#[test]
fn blue_green_gives_no_live_traffic_then_switches_and_promotes() {
    let mut spec = fixture("blue-green.yml");
    spec.analysis.interval_ms = SECOND;
    spec.analysis.iterations_for_test(2);
    let mut d = Driver::new(spec);
    d.tick();
    d.tick();
    d.revision = "r2".into();
    d.tick();
    d.tick(); // pre-rollout: iteration 1
    d.tick(); // iteration 2
    assert_eq!(d.status.iterations, 2);
    assert!(d.weights.is_empty(), "no live traffic before the switch");
    // confirm-promotion holds the switch.
    d.tick_with(|_, i| fail(i, "approve"));
    assert_eq!(d.status.phase, Phase::WaitingPromotion);
    d.tick(); // switch
    assert_eq!(d.weights, vec![100]);
    assert_eq!(d.status.phase, Phase::Progressing);
    d.tick(); // one more analysis with all traffic on the canary, then promote
    assert_eq!(d.status.phase, Phase::Promoting);
    d.until(Phase::Succeeded, 10);
    // stepWeightPromotion 25 moves traffic back to the promoted primary.
    assert_eq!(d.weights, vec![100, 75, 50, 25, 0]);
}

trait IterationsForTest {
    fn iterations_for_test(&mut self, n: u32);
}

impl IterationsForTest for hub_engine::canary::Analysis {
    fn iterations_for_test(&mut self, n: u32) {
        self.strategy = Strategy::BlueGreen { iterations: n };
    }
}

#[test]
fn promotion_never_routes_traffic_to_a_primary_that_is_not_ready() {
    let yaml = CANARY.replace(
        "    maxWeight: 50\n    stepWeight: 10\n",
        "    maxWeight: 50\n    stepWeight: 50\n    stepWeightPromotion: 20\n",
    );
    let mut d = Driver::started(&yaml);
    d.tick(); // 50
    d.tick(); // promote
    assert_eq!(d.status.phase, Phase::Promoting);
    let promoted_at = d.status.phase_started_ms;
    // The primary rolls to r2 and is not ready: weights hold.
    d.tick_with(|_, i| i.primary_ready_percent = 40);
    assert_eq!(d.status.canary_weight, 50);
    // It reports the old revision: not ready either.
    d.tick_with(|_, i| i.primary_revision = Some("r1".into()));
    assert_eq!(d.status.canary_weight, 50);
    // Ready: traffic moves back by stepWeightPromotion.
    d.tick_with(|_, i| i.primary_revision = Some("r2".into()));
    assert_eq!(d.status.canary_weight, 30);
    // Not ready again until the deadline: the promotion fails forward onto the canary.
    while d.status.phase == Phase::Promoting {
        d.tick_with(|_, i| i.primary_ready_percent = 0);
    }
    assert_eq!(d.status.phase, Phase::Failed);
    assert!(d.now - promoted_at >= 5 * SECOND);
    assert_eq!(d.weights, vec![50, 30, 100]);
    assert_eq!(d.status.canary_weight, 100);
    assert_eq!(
        d.status.canary_revision.as_deref(),
        Some("r2"),
        "canary keeps running"
    );
    assert!(!d.actions.contains(&Action::ScaleCanaryToZero));
    assert_eq!(d.status.promoted.status, ConditionStatus::False);
    // A new revision waits for the primary rather than route traffic to it.
    d.revision = "r3".into();
    d.tick_with(|_, i| i.primary_ready_percent = 0);
    assert_eq!(d.status.phase, Phase::Failed);
    assert_eq!(d.status.canary_weight, 100);
    // Retry retries the promotion of r2.
    d.revision = "r2".into();
    let out = d.manual(Manual::Retry);
    assert_eq!(
        ops(&out),
        vec![Action::PromoteCanary {
            revision: "r2".into()
        }]
    );
    d.until(Phase::Succeeded, 10);
    assert_eq!(d.weights, vec![50, 30, 100, 80, 60, 40, 20, 0]);
}

#[test]
fn a_primary_that_loses_readiness_while_finalising_gets_no_traffic() {
    let mut d = Driver::started(CANARY);
    d.until(Phase::Finalising, 20);
    let out = d.tick_with(|_, i| i.primary_ready_percent = 0).unwrap();
    assert_eq!(
        ops(&out)[0],
        Action::SetWeights {
            primary: 0,
            canary: 100
        }
    );
    assert_eq!(d.status.phase, Phase::Promoting);
    assert!(!d.actions.contains(&Action::ScaleCanaryToZero));
    d.until(Phase::Succeeded, 5);
    assert_eq!(d.weights, vec![10, 20, 30, 40, 50, 0, 100, 0]);
}

#[test]
fn a_primary_that_never_initialises_fails_and_the_next_revision_reinitialises() {
    let mut d = Driver::yaml(CANARY);
    d.tick();
    while d.status.phase == Phase::Initializing {
        d.tick_with(|_, i| i.primary_ready_percent = 0);
    }
    assert_eq!(d.status.phase, Phase::Failed);
    assert_eq!(d.status.phase_started_ms, T0 + 5 * SECOND);
    assert!(d.tick().is_none(), "same revision: nothing");
    // Retry sets the primary up again from the same revision.
    let out = d.manual(Manual::Retry);
    assert_eq!(
        ops(&out),
        vec![Action::Initialize {
            revision: "r1".into()
        }]
    );
    while d.status.phase == Phase::Initializing {
        d.tick_with(|_, i| i.primary_ready_percent = 0);
    }
    assert_eq!(d.status.phase, Phase::Failed);
    d.revision = "r2".into();
    let out = d.tick().unwrap();
    assert_eq!(
        ops(&out),
        vec![Action::Initialize {
            revision: "r2".into()
        }]
    );
    d.tick();
    assert_eq!(d.status.phase, Phase::Initialized);
    assert_eq!(d.status.last_promoted_spec.as_deref(), Some("r2"));
}

#[test]
fn no_tick_comes_early_after_a_failover() {
    let mut d = Driver::started(CANARY);
    d.tick();
    let due = d.status.next_tick_ms.unwrap();
    // A new leader with the same replicated status plans nothing before the due time...
    assert!(plan_tick(&d.spec, &d.status, "r2", due - 1).is_empty());
    assert!(!plan_tick(&d.spec, &d.status, "r2", due).is_empty());
    // ...and a tick stamped early applies as a no-op (only the step moves).
    let plan = plan_tick(&d.spec, &d.status, "r2", due);
    let input = healthy(&d.spec, &plan, "r2");
    let out = advance(&d.spec, &d.status, &input, due - 1);
    assert!(out.actions.is_empty());
    assert_eq!(out.status.canary_weight, d.status.canary_weight);
    assert_eq!(out.status.next_tick_ms, d.status.next_tick_ms);
}

/// The integrator's apply rule: an entry carries the step it was planned at and applies only
/// if the status is still at that step.
fn apply_entry(
    spec: &CanarySpec,
    status: &CanaryStatus,
    planned_step: u64,
    input: &TickInput,
    now: TimestampMs,
) -> Option<TickOutcome> {
    (status.step == planned_step).then(|| advance(spec, status, input, now))
}

#[test]
fn a_tick_applies_at_most_once_across_leader_failovers() {
    let mut d = Driver::started(CANARY);
    d.tick();
    // Old leader and new leader both plan the same tick and propose it.
    let plan = d.plan();
    let input = healthy(&d.spec, &plan, "r2");
    let first = apply_entry(&d.spec, &d.status, plan.step, &input, d.now).unwrap();
    assert_eq!(first.status.canary_weight, 20);
    // The duplicate is refused: no step repeated.
    assert!(apply_entry(&d.spec, &first.status, plan.step, &input, d.now + 1).is_none());
}

#[test]
fn ticks_replay_to_the_same_statuses_and_actions() {
    let mut d = Driver::started(CANARY);
    d.tick();
    d.tick_with(|_, i| bad_success_rate(i));
    d.tick_with(|_, i| fail(i, "traffic"));
    d.until(Phase::Succeeded, 20);
    // Replaying the log from the first status reproduces every outcome.
    let mut status = d.log[0].0.clone();
    for (before, input, now) in &d.log {
        assert_eq!(&status, before);
        status = advance(&d.spec, &status, input, *now).status;
    }
    assert_eq!(status, d.status);
    // And the log survives its encoding.
    let cfg = bincode::config::standard();
    for (before, input, _) in &d.log {
        let bytes = bincode::serde::encode_to_vec((before, input), cfg).unwrap();
        let (back, _): ((CanaryStatus, TickInput), usize) =
            bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
        assert_eq!(&back.0, before);
        assert_eq!(&back.1, input);
    }
}

#[test]
fn event_webhooks_and_alerts_follow_the_spec() {
    let spec = fixture("step-weights.yml");
    let mut d = Driver::new(spec);
    d.tick();
    d.tick();
    d.revision = "r2".into();
    d.tick();
    let notes: Vec<_> = d
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::NotifyWebhook { call } if call.name == "audit" => Some(call),
            _ => None,
        })
        .collect();
    assert_eq!(
        notes.len(),
        d.events.len(),
        "one event webhook call per event"
    );
    let last = notes.last().unwrap();
    assert_eq!(last.payload.metadata["eventType"], "Normal");
    assert_eq!(last.payload.metadata["team"], "search");
    assert!(last.payload.metadata["eventMessage"].starts_with("New revision detected!"));
    assert_eq!(last.payload.namespace, "staging");
    // Info alerts go out because one destination receives info.
    assert!(d.actions.iter().any(|a| matches!(a, Action::Alert { .. })));
    // The podinfo example has no alert destination: no alert actions.
    let mut p = Driver::new(fixture("podinfo.yml"));
    p.tick();
    p.tick();
    p.revision = "r2".into();
    p.tick();
    assert!(!p.actions.iter().any(|a| matches!(a, Action::Alert { .. })));
}

#[test]
fn deletion_reverts_only_when_asked() {
    let mut d = Driver::started(CANARY);
    d.tick();
    let out = terminate(&d.spec, &d.status, d.now);
    assert!(out.actions.is_empty());
    assert_eq!(out.status.phase, Phase::Terminating);
    assert!(plan_tick(&d.spec, &out.status, "r9", d.now + 60_000).is_empty());
    d.spec.revert_on_deletion = true;
    let out = terminate(&d.spec, &d.status, d.now);
    assert_eq!(out.actions, vec![Action::RestoreOriginal]);
    assert_eq!(out.status.step, d.status.step + 1);
}

#[test]
fn revision_hash_is_the_pinned_canonical_one() {
    // SPEC K3: the same value the unit test pins, through the public API.
    let secrets: BTreeMap<String, String> = [("api-key", "k"), ("db-password", "s3cret")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(
        legacy_revision_hash("1.2.3", "replicas: 2\nimage: podinfo:6.0.0\n", &secrets),
        "510106a52c3582c0"
    );
    let key = hub_engine::cluster_key::SecretKey::from_bytes([7; 32]);
    assert_eq!(
        revision_hash(
            &key,
            "1.2.3",
            "replicas: 2\nimage: podinfo:6.0.0\n",
            &secrets
        ),
        "v2:2482bf23970034ad"
    );
}

// ----- properties -----

/// One scripted tick of the property test.
#[derive(Debug, Clone)]
struct Step {
    /// Milliseconds to move the clock (may be less than the interval).
    wait: i64,
    /// Switch the target to revision `r<n>`.
    revision: Option<u8>,
    primary_ready: u8,
    canary_ready: u8,
    /// Per webhook (in spec order): does it answer 200?
    hooks: Vec<bool>,
    /// Success rate in percent, or no data.
    success_rate: Option<u8>,
    manual: Option<Manual>,
    toggle_suspend: bool,
    /// Propose even if the plan is empty (a stale proposal).
    force: bool,
}

fn step_strategy() -> impl proptest::strategy::Strategy<Value = Step> {
    (
        prop_oneof![Just(1_000i64), Just(500), Just(5_000)],
        prop::option::weighted(0.1, 1u8..4),
        prop_oneof![4 => Just(100u8), 1 => 0u8..=100],
        prop_oneof![4 => Just(100u8), 1 => 0u8..=100],
        prop::collection::vec(prop::bool::weighted(0.85), 8),
        prop_oneof![6 => Just(Some(100u8)), 1 => Just(None), 2 => (0u8..=100).prop_map(Some)],
        prop::option::weighted(
            0.08,
            prop_oneof![
                Just(Manual::Promote),
                Just(Manual::Abort),
                Just(Manual::Retry)
            ],
        ),
        prop::bool::weighted(0.05),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(
                wait,
                revision,
                primary_ready,
                canary_ready,
                hooks,
                success_rate,
                manual,
                toggle_suspend,
                force,
            )| Step {
                wait,
                revision,
                primary_ready,
                canary_ready,
                hooks,
                success_rate,
                manual,
                toggle_suspend,
                force,
            },
        )
}

/// What the agent would have after carrying out every action so far.
#[derive(Default)]
struct Agent {
    canary_weight: u8,
    match_routing: bool,
    canary: Option<String>,
    primary: Option<String>,
    baseline: Option<String>,
}

impl Agent {
    fn carry_out(&mut self, actions: &[Action]) {
        for a in actions {
            match a {
                Action::Initialize { revision } => {
                    self.primary = Some(revision.clone());
                    self.canary = None;
                    self.canary_weight = 0;
                    self.match_routing = false;
                }
                Action::DeployCanary { revision } => self.canary = Some(revision.clone()),
                Action::SetWeights { canary, .. } => {
                    self.canary_weight = *canary;
                    self.match_routing = false;
                }
                Action::SetRouting { canary_weight, .. } => {
                    self.canary_weight = *canary_weight;
                    self.match_routing = true;
                }
                Action::RouteAllToPrimary => {
                    self.canary_weight = 0;
                    self.match_routing = false;
                }
                Action::PromoteCanary { revision } => self.primary = Some(revision.clone()),
                Action::ScaleCanaryToZero => self.canary = None,
                Action::DeployBaseline { revision } => self.baseline = Some(revision.clone()),
                Action::ScaleBaselineToZero => self.baseline = None,
                Action::Alert { .. } | Action::NotifyWebhook { .. } | Action::RestoreOriginal => {}
            }
        }
    }
}

fn property_specs() -> Vec<CanarySpec> {
    let mut canary = parse_canary(CANARY).unwrap();
    canary.analysis.step_weight_promotion = Some(20);
    let mut list = fixture("step-weights.yml");
    list.analysis.interval_ms = SECOND;
    list.progress_deadline_seconds = 4;
    let mut ab = fixture("ab-testing.yml");
    ab.analysis.interval_ms = SECOND;
    ab.progress_deadline_seconds = 4;
    ab.analysis.strategy = match ab.analysis.strategy {
        Strategy::AbTesting { match_rules, .. } => Strategy::AbTesting {
            iterations: 3,
            match_rules,
        },
        other => other,
    };
    let mut bg = fixture("blue-green.yml");
    bg.analysis.interval_ms = SECOND;
    bg.progress_deadline_seconds = 4;
    bg.analysis.strategy = Strategy::BlueGreen { iterations: 2 };
    vec![canary, list, ab, bg]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_ticks_never_break_the_invariants(
        which in 0usize..4,
        steps in prop::collection::vec(step_strategy(), 1..120),
    ) {
        let mut spec = property_specs().swap_remove(which);
        let max_weight = spec.max_weight();
        let mut status = CanaryStatus::new(T0);
        let mut now = T0;
        let mut revision = "r1".to_string();
        let mut agent = Agent::default();
        for step in steps {
            now += step.wait;
            if let Some(r) = step.revision {
                revision = format!("r{r}");
            }
            if step.toggle_suspend {
                spec.suspend = !spec.suspend;
            }
            let plan = plan_tick(&spec, &status, &revision, now);
            prop_assert_eq!(plan.step, status.step);
            if !plan.due && step.manual.is_none() && !step.force {
                continue;
            }
            let mut input = TickInput::new(revision.clone());
            input.primary_ready_percent = step.primary_ready;
            input.canary_ready_percent = step.canary_ready;
            input.manual = step.manual;
            for (i, w) in spec.analysis.webhooks.iter().enumerate() {
                if plan.webhooks.iter().any(|c| c.name == w.name) {
                    input.webhooks.insert(
                        w.name.clone(),
                        WebhookResult::from_status(if step.hooks[i % 8] { 200 } else { 500 }, ""),
                    );
                }
            }
            for q in &plan.metrics {
                let value = match (&q.source, step.success_rate) {
                    (_, None) => None,
                    (MetricSource::RequestSuccessRate, Some(p)) => Some(i64::from(p) * 1_000),
                    (MetricSource::RequestDuration, Some(p)) => Some(if p > 50 { 100_000 } else { 900_000 }),
                    (MetricSource::Prometheus { .. } | MetricSource::Template { .. }, Some(p)) => Some(i64::from(p) * 1_000),
                };
                input.metrics.insert(q.name.clone(), value);
            }
            let before = status.clone();
            let out = advance(&spec, &status, &input, now);
            // Deterministic.
            prop_assert_eq!(&out, &advance(&spec, &status, &input, now));
            let s = &out.status;
            // The step moves by exactly one.
            prop_assert_eq!(s.step, before.step + 1);
            // Weights sum to 100.
            prop_assert!(s.canary_weight <= 100);
            for a in &out.actions {
                if let Some((p, c)) = a.weights() {
                    prop_assert_eq!(u16::from(p) + u16::from(c), 100, "{:?}", a);
                }
            }
            // No more than maxWeight outside promotion (and a failed promotion, whose
            // traffic stays on the canary).
            let promotion = s.phase.is_promoting() || (s.phase == Phase::Failed && s.canary_weight > 0);
            if !promotion {
                prop_assert!(s.canary_weight <= max_weight, "{} > {} in {}", s.canary_weight, max_weight, s.phase);
            }
            if s.phase == Phase::Failed && s.canary_weight > 0 {
                prop_assert_eq!(s.canary_weight, 100);
                prop_assert!(s.canary_revision.is_some());
            }
            // Resting phases hold no traffic on the canary.
            if matches!(s.phase, Phase::Initialized | Phase::Succeeded) {
                prop_assert_eq!(s.canary_weight, 0);
                prop_assert!(!s.match_routing);
                prop_assert_eq!(&s.canary_revision, &None);
            }
            // Failed checks never decrease within one analysis of a revision.
            if s.last_applied_spec == before.last_applied_spec
                && s.revision_started_ms == before.revision_started_ms
            {
                prop_assert!(s.failed_checks >= before.failed_checks);
            }
            // Suspended: nothing happens but the step.
            if spec.suspend {
                prop_assert!(out.actions.is_empty());
                let mut same = before.clone();
                same.step += 1;
                prop_assert_eq!(s, &same);
            }
            // Nothing due and no manual command: no action.
            if !plan.due && step.manual.is_none() {
                prop_assert!(out.actions.is_empty(), "{:?}", out.actions);
            }
            // The status describes what the actions did.
            agent.carry_out(&out.actions);
            prop_assert_eq!(agent.canary_weight, s.canary_weight);
            prop_assert_eq!(agent.match_routing, s.match_routing);
            prop_assert_eq!(&agent.canary, &s.canary_revision);
            prop_assert_eq!(&agent.primary, &s.primary_revision);
            status = out.status;
        }
    }
}

/// The seed's own podinfo canary (seeds/002, copied byte for byte into
/// `valid/flagger-podinfo.yml`), with `targetRef: {apiVersion: apps/v1, kind: Deployment}`,
/// reads as the hub's adapted example does: the helmChart entity `podinfo`.
#[test]
fn the_seeds_flagger_canary_reads_as_written() {
    let seed = fixture("flagger-podinfo.yml");
    let adapted = fixture("podinfo.yml");
    assert_eq!(seed, adapted);
    let text = fs::read_to_string(dir("valid").join("flagger-podinfo.yml")).unwrap();
    assert!(
        text.contains("apiVersion: apps/v1\n    kind: Deployment"),
        "{text}"
    );
    let (_, ignored) = parse_canary_reporting(&text).unwrap();
    assert!(ignored.is_empty(), "{ignored:?}");
}

#[test]
fn kubernetes_only_fields_are_accepted_and_reported_by_path() {
    let text = fs::read_to_string(dir("valid").join("flagger-kubernetes-fields.yml")).unwrap();
    let (spec, ignored) = parse_canary_reporting(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(spec.target.kind, EntityKind::HelmChart);
    assert_eq!(spec.target.name, "podinfo");
    let paths: Vec<&str> = ignored.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.provider",
            "spec.autoscalerRef",
            "spec.service.targetPort",
            "spec.service.portDiscovery",
            "spec.service.headless",
            "spec.service.appProtocol",
            "spec.service.trafficDistribution",
            "spec.analysis.sessionAffinity",
        ]
    );
    assert!(ignored
        .iter()
        .all(|f| f.to_string().starts_with(&format!("{}: ignored (", f.path))));
}

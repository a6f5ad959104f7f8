//! The judging records of canaries with statistical judges (issue 20): created and updated
//! with the resource, fed by the agents' sample reports, and updated by every tick with the
//! inconclusive count and the verdicts. See [`crate::canary_judging`].

use std::collections::BTreeMap;

use crate::canary::{
    AnalysisPolicy, CanaryObservation, CanarySpec, MetricSamples, SampleWindow, Verdict,
    MAX_OBSERVATIONS, MAX_SAMPLE_WINDOWS,
};
use crate::canary_judging::{
    bounded_reason, CanaryJudging, JudgeResult, JudgedMetric, MAX_JUDGED_METRICS,
};
use crate::error::CommandError;
use crate::state::State;

use super::Tx;

impl State {
    /// Keeps the judging record of canary `id` in line with its resource: created when the
    /// resource judges a metric or sets `inconclusiveLimit`, updated (the counters and the
    /// samples kept) when it still does, removed when it no longer does.
    pub(super) fn set_judged_metrics(
        &mut self,
        id: &str,
        metrics: Vec<JudgedMetric>,
        inconclusive_limit: Option<u32>,
        tx: &mut Tx,
    ) {
        debug_assert!(metrics.len() <= MAX_JUDGED_METRICS, "checked at apply");
        if metrics.is_empty() && inconclusive_limit.is_none() {
            self.canary_judging.remove(id, &mut tx.changed);
            return;
        }
        let j = self
            .canary_judging
            .get_or_insert_with(id.to_string(), &mut tx.changed, || CanaryJudging {
                canary: id.to_string(),
                ..CanaryJudging::default()
            });
        j.metrics = metrics;
        j.inconclusive_limit = inconclusive_limit;
        let kept: Vec<i64> = j.metrics.iter().map(|m| m.interval_ms).collect();
        j.samples.retain(|w| kept.contains(&w.interval_ms));
        let names: Vec<String> = j.metrics.iter().map(|m| m.name.clone()).collect();
        j.verdicts.retain(|v| names.contains(&v.metric));
    }

    /// Stores what a tick decided about the judges of canary `id` (a canary without a
    /// judging record and without judges has nothing to store).
    pub(super) fn record_judgements(
        &mut self,
        id: &str,
        step: u64,
        inconclusive: u32,
        verdicts: Vec<(String, Verdict, String)>,
        tx: &mut Tx,
    ) {
        if !self.canary_judging.contains_key(id) {
            debug_assert!(verdicts.is_empty(), "a judged canary has a judging record");
            return;
        }
        let Some(j) = self.canary_judging.get_mut(id, &mut tx.changed) else {
            return;
        };
        j.inconclusive = inconclusive;
        if !verdicts.is_empty() {
            j.verdicts = verdicts
                .into_iter()
                .take(MAX_JUDGED_METRICS)
                .map(|(metric, verdict, reason)| JudgeResult {
                    metric,
                    step,
                    verdict,
                    reason: bounded_reason(&reason),
                })
                .collect();
        }
    }

    /// Stores the sample windows the agent of `environment` reported for its judged canaries:
    /// only the judged intervals, with the step the agent had applied (from its observation
    /// of the same canary) and the entry's time. Canaries of other environments, without a
    /// judging record or without an observation in the report are skipped.
    pub(super) fn store_samples(
        &mut self,
        environment: &str,
        observations: &[(String, CanaryObservation)],
        samples: &[(String, Vec<SampleWindow>)],
        tx: &mut Tx,
    ) {
        let now = tx.now;
        for (id, windows) in samples {
            if self
                .canaries
                .get(id)
                .is_none_or(|c| c.environment != environment)
            {
                continue;
            }
            let Some(applied_step) = observations
                .iter()
                .find(|(o, _)| o == id)
                .map(|(_, o)| o.applied_step)
            else {
                continue;
            };
            let Some(j) = self.canary_judging.get_mut(id, &mut tx.changed) else {
                continue;
            };
            let kept: Vec<SampleWindow> = windows
                .iter()
                .filter(|w| j.judges_window(w.interval_ms))
                .take(MAX_SAMPLE_WINDOWS)
                .cloned()
                .collect();
            j.samples = kept;
            j.samples_step = applied_step;
            j.samples_ms = now;
        }
    }
}

/// The judged metrics of a resource, in the spec's order.
pub(super) fn judged_metrics(spec: &CanarySpec, policy: &AnalysisPolicy) -> Vec<JudgedMetric> {
    spec.analysis
        .metrics
        .iter()
        .filter_map(|m| {
            policy.judges.get(&m.name).map(|judge| JudgedMetric {
                name: m.name.clone(),
                interval_ms: m.interval_ms,
                source: m.source.clone(),
                judge: *judge,
            })
        })
        .collect()
}

/// Checks a judged tick's samples: at most one entry per judged metric a resource can have,
/// and every histogram within its bounds (so the statistic's sums cannot overflow).
pub(super) fn validate_tick_samples(
    samples: &BTreeMap<String, MetricSamples>,
) -> Result<(), CommandError> {
    if samples.len() > MAX_JUDGED_METRICS {
        return Err(CommandError::invalid(
            "samples",
            format!("{} metrics, at most {MAX_JUDGED_METRICS}", samples.len()),
        ));
    }
    for (name, s) in samples {
        s.validate(&format!("samples[{name:?}]"))
            .map_err(|e| CommandError::invalid(&e.path, e.message))?;
    }
    Ok(())
}

/// Checks an agent's sample report: at most one entry per observation, at most
/// [`MAX_SAMPLE_WINDOWS`] windows each, every histogram within its bounds.
pub(super) fn validate_reported_samples(
    samples: &[(String, Vec<SampleWindow>)],
) -> Result<(), CommandError> {
    if samples.len() > MAX_OBSERVATIONS {
        return Err(CommandError::invalid(
            "samples",
            format!("{} canaries, at most {MAX_OBSERVATIONS}", samples.len()),
        ));
    }
    for (i, (id, windows)) in samples.iter().enumerate() {
        if windows.len() > MAX_SAMPLE_WINDOWS {
            return Err(CommandError::invalid(
                &format!("samples[{i}]"),
                format!(
                    "{id}: {} windows, at most {MAX_SAMPLE_WINDOWS}",
                    windows.len()
                ),
            ));
        }
        for (k, w) in windows.iter().enumerate() {
            w.validate(&format!("samples[{i}].windows[{k}]"))
                .map_err(|e| CommandError::invalid(&e.path, e.message))?;
        }
    }
    Ok(())
}

//! Whether a canary's tick is due, and whether the agent has caught up for it.

use std::collections::BTreeMap;

use crate::canary::{plan_tick, MetricSamples, TickInput, TickPlan};
use crate::canary_record::Canary;
use crate::state::State;
use crate::TimestampMs;

/// An observation older than this does not describe the workloads now.
pub const OBSERVATION_MAX_AGE_MS: TimestampMs = 5_000;

/// What the leader does about one canary now.
// One value per canary per pass, moved once into the tick it starts: its size does not
// matter, and boxing the tick would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CanaryStep {
    /// No tick is due (or the entity runs nothing, or the canary has no target yet).
    Idle,
    /// A tick is due, but the agent is still applying the last step plan: wait for it to
    /// finish (a committed change).
    WaitForPlan,
    /// A tick is due and the agent has not reported a fresh observation since the last step:
    /// wait for one, until `until`; after that the tick goes ahead with what is known.
    WaitForObservation {
        /// The step the wait is for.
        step: u64,
        /// Since when the tick has waited.
        since: TimestampMs,
        /// When waiting ends.
        until: TimestampMs,
    },
    /// Prepare this tick: call the plan's webhooks, query its Prometheus metrics, fill them
    /// into `input` and propose `CanaryTick`.
    Tick {
        /// What to call and measure.
        plan: TickPlan,
        /// The input so far: readiness and proxy metrics from the agent's observation.
        input: TickInput,
        /// For a canary with judged metrics (propose `CanaryJudgedTick`): judged metric →
        /// the samples of the agent's last report, when it is fresh; a metric without fresh
        /// samples is left out (inconclusive). `None` for a canary without judges.
        samples: Option<BTreeMap<String, MetricSamples>>,
        /// `true` when no fresh observation came in time: the workloads count as not ready
        /// and the proxy metrics have no data, which fails the checks.
        stale: bool,
    },
}

/// What the leader does about canary `c` at `now`. `waiting` is the (step, since) this
/// leader's tick for `c` has waited for an observation, as the last [`CanaryStep::WaitForObservation`]
/// said.
pub fn canary_step(
    state: &State,
    c: &Canary,
    waiting: Option<(u64, TimestampMs)>,
    now: TimestampMs,
) -> CanaryStep {
    let Some(entity) = state.entity(&c.entity) else {
        return CanaryStep::Idle;
    };
    let (Some(_), Some(target)) = (entity.reported.version.as_ref(), c.target.as_ref()) else {
        return CanaryStep::Idle;
    };
    let spec = state.canary_tick_spec(c, &target.revision);
    let plan = plan_tick(&spec, &c.status, &target.revision, now);
    if !plan.due {
        return CanaryStep::Idle;
    }
    // The agent applies step plans one at a time; the next tick waits for the last one.
    if state.active_plan_of(&c.entity).is_some() {
        return CanaryStep::WaitForPlan;
    }
    let last_step = state
        .outcomes_of(&c.entity)
        .filter_map(|o| o.canary_step())
        .filter(|(canary, _)| *canary == c.id)
        .map(|(_, step)| step)
        .max()
        .unwrap_or(0);
    let fresh = c
        .observation
        .as_ref()
        .filter(|o| o.applied_step >= last_step && now - o.observed_ms <= OBSERVATION_MAX_AGE_MS);
    let judging = state
        .canary_judging(&c.id)
        .filter(|j| !j.metrics.is_empty());
    let mut samples = judging.map(|_| BTreeMap::new());
    let mut input = TickInput::new(target.revision.clone());
    let proxies = plan.metrics.iter().filter(|m| m.source.is_proxy());
    if let Some(o) = fresh {
        input.primary_ready_percent = o.primary_ready_percent;
        input.canary_ready_percent = o.canary_ready_percent;
        input.primary_revision = o.primary_revision.clone();
        input.canary_revision = o.canary_revision.clone();
        for m in proxies {
            input
                .metrics
                .insert(m.name.clone(), o.metric(&m.source, m.interval_ms));
        }
        let fresh_samples = judging.filter(|j| {
            j.samples_step >= last_step && now - j.samples_ms <= OBSERVATION_MAX_AGE_MS
        });
        if let (Some(j), Some(samples)) = (fresh_samples, samples.as_mut()) {
            for m in &j.metrics {
                samples.insert(m.name.clone(), j.samples_of(m));
            }
        }
        return CanaryStep::Tick {
            plan,
            input,
            samples,
            stale: false,
        };
    }
    // Wait up to one interval for the agent; then decide on what is known: no readiness, no
    // data.
    let since = match waiting {
        Some((step, since)) if step == plan.step => since,
        _ => now,
    };
    let until = since + c.spec.analysis.interval_ms;
    if now < until {
        return CanaryStep::WaitForObservation {
            step: plan.step,
            since,
            until,
        };
    }
    input.primary_ready_percent = 0;
    input.canary_ready_percent = 0;
    for m in proxies {
        input.metrics.insert(m.name.clone(), None);
    }
    CanaryStep::Tick {
        plan,
        input,
        samples,
        stale: true,
    }
}

//! The status of a canary (SPEC K7): everything the analysis needs to resume after a restart
//! or a leader failover, stored in the replicated state and changed only by
//! [`super::advance`] and [`super::terminate`].
//!
//! Besides Flagger's fields it holds the desired workload state (`primary_revision`,
//! `canary_revision`, `canary_weight`, `match_routing`), so an agent that restarts can
//! reconcile to it without replaying actions, and the tick bookkeeping (`step`,
//! `next_tick_ms`) that makes ticks apply at most once (SPEC K9).

use serde::{Deserialize, Serialize};

use super::spec::TOTAL_WEIGHT;
use crate::TimestampMs;

/// The phase of a canary (SPEC K7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Phase {
    /// Created; the primary is being set up from the current revision.
    Initializing,
    /// The primary runs the initial revision; waiting for a new one.
    Initialized,
    /// A new revision waits for its confirm-rollout webhooks.
    Waiting,
    /// Analysis runs; traffic shifts to the canary step by step.
    Progressing,
    /// Analysis done; waiting for the confirm-promotion webhooks.
    WaitingPromotion,
    /// The canary spec was copied to the primary; traffic moves back to it.
    Promoting,
    /// All traffic is on the promoted primary; the canary is scaled to zero next.
    Finalising,
    /// The last revision was promoted.
    Succeeded,
    /// The last revision was rolled back (or its promotion failed).
    Failed,
    /// The canary is being deleted.
    Terminating,
    /// Analysis stopped for an operator (issue 20): the failed-checks threshold was reached
    /// with `onFailure: hold`, or `inconclusiveLimit` inconclusive judgements came in a row.
    /// The weights and workloads stay as they are until a manual promote, abort or retry (or
    /// a new revision). Appended last: the variant numbers of the others, and so every
    /// stored status, are unchanged.
    Halted,
}

impl Phase {
    /// The phase as Flagger spells it (`WaitingPromotion`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Initializing => "Initializing",
            Phase::Initialized => "Initialized",
            Phase::Waiting => "Waiting",
            Phase::Progressing => "Progressing",
            Phase::WaitingPromotion => "WaitingPromotion",
            Phase::Promoting => "Promoting",
            Phase::Finalising => "Finalising",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Terminating => "Terminating",
            Phase::Halted => "Halted",
        }
    }

    /// Whether an analysis of a revision is under way (a new revision restarts it).
    pub fn is_analysing(self) -> bool {
        matches!(self, Phase::Progressing | Phase::WaitingPromotion)
    }

    /// Whether the canary spec has been copied to the primary and traffic is moving back.
    pub fn is_promoting(self) -> bool {
        matches!(self, Phase::Promoting | Phase::Finalising)
    }

    /// Whether the canary rests, waiting for a new revision.
    pub fn is_idle(self) -> bool {
        matches!(self, Phase::Initialized | Phase::Succeeded | Phase::Failed)
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The status of a condition: `True`, `False` or `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// It does not.
    False,
    /// Not decided yet.
    Unknown,
}

impl ConditionStatus {
    /// `True`, `False` or `Unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

/// The `Promoted` condition (SPEC K7): whether the last revision reached the primary.
/// `wait --for=promoted` waits for `status == True`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromotedCondition {
    /// True after initialisation and success, False after failure, Unknown in between.
    pub status: ConditionStatus,
    /// The phase that set it (Flagger's reasons are the phase names).
    pub reason: Phase,
    /// Human-readable explanation.
    pub message: String,
    /// When `status` last changed.
    pub last_transition_ms: TimestampMs,
    /// When the condition was last written.
    pub last_update_ms: TimestampMs,
}

/// The status of one canary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryStatus {
    /// Where the canary is in its phase machine.
    pub phase: Phase,
    /// Percent of traffic routed to the canary (the primary gets `100 - canary_weight`).
    pub canary_weight: u8,
    /// Whether A/B `match` rules currently send matching requests to the canary.
    pub match_routing: bool,
    /// Failed checks of the current revision (cumulative across steps).
    pub failed_checks: u32,
    /// Successful checks so far (A/B and blue/green).
    pub iterations: u32,
    /// Revision hash of the last revision analysis started for (or initialised).
    pub last_applied_spec: Option<String>,
    /// Revision hash the primary was last promoted to.
    pub last_promoted_spec: Option<String>,
    /// The revision whose failure is the current `Failed` state: it does not start again
    /// by itself; [`super::Manual::Retry`] clears it.
    pub failed_spec: Option<String>,
    /// Revision the primary workload runs (`None` before initialisation).
    pub primary_revision: Option<String>,
    /// Revision the canary workload runs (`None`: scaled to zero).
    pub canary_revision: Option<String>,
    /// Committed tick counter: every applied [`super::advance`] adds exactly one. A tick
    /// planned at step `n` is applied only while the status is still at step `n`.
    pub step: u64,
    /// When the next tick is due (`None`: at once).
    pub next_tick_ms: Option<TimestampMs>,
    /// When the phase last changed (LASTTRANSITIONTIME of the listing).
    pub phase_started_ms: TimestampMs,
    /// When analysis of the current revision started.
    pub revision_started_ms: Option<TimestampMs>,
    /// Since when a workload the analysis waits for has been continuously not ready; the
    /// progress deadline counts from here.
    pub not_ready_since_ms: Option<TimestampMs>,
    /// The `Promoted` condition.
    pub promoted: PromotedCondition,
}

impl CanaryStatus {
    /// The status of a canary created at `now`: Initializing, due at once.
    pub fn new(now: TimestampMs) -> Self {
        CanaryStatus {
            phase: Phase::Initializing,
            canary_weight: 0,
            match_routing: false,
            failed_checks: 0,
            iterations: 0,
            last_applied_spec: None,
            last_promoted_spec: None,
            failed_spec: None,
            primary_revision: None,
            canary_revision: None,
            step: 0,
            next_tick_ms: None,
            phase_started_ms: now,
            revision_started_ms: None,
            not_ready_since_ms: None,
            promoted: PromotedCondition {
                status: ConditionStatus::Unknown,
                reason: Phase::Initializing,
                message: "New canary detected, starting initialization.".to_string(),
                last_transition_ms: now,
                last_update_ms: now,
            },
        }
    }

    /// Percent of traffic routed to the primary.
    pub fn primary_weight(&self) -> u8 {
        TOTAL_WEIGHT.saturating_sub(self.canary_weight)
    }

    /// Whether the last revision is promoted (`wait --for=promoted`).
    pub fn is_promoted(&self) -> bool {
        self.promoted.status == ConditionStatus::True
    }

    /// Whether a tick is due at `now`.
    pub fn is_due(&self, now: TimestampMs) -> bool {
        self.next_tick_ms.is_none_or(|t| now >= t)
    }

    /// Moves to `phase` at `now`, updating the `Promoted` condition as Flagger does: the
    /// condition is rewritten when its status or reason changes, and its transition time
    /// moves only when its status changes.
    pub(super) fn set_phase(&mut self, phase: Phase, message: String, now: TimestampMs) {
        if self.phase != phase {
            self.phase_started_ms = now;
        }
        self.phase = phase;
        let status = match phase {
            Phase::Initialized | Phase::Succeeded => ConditionStatus::True,
            Phase::Failed => ConditionStatus::False,
            _ => ConditionStatus::Unknown,
        };
        if self.promoted.status == status && self.promoted.reason == phase {
            return;
        }
        if self.promoted.status != status {
            self.promoted.last_transition_ms = now;
        }
        self.promoted.status = status;
        self.promoted.reason = phase;
        self.promoted.message = message;
        self.promoted.last_update_ms = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_spelled_as_flagger_does() {
        assert_eq!(Phase::WaitingPromotion.as_str(), "WaitingPromotion");
        assert_eq!(Phase::Finalising.to_string(), "Finalising");
    }

    #[test]
    fn condition_transition_time_moves_only_with_its_status() {
        let mut s = CanaryStatus::new(10);
        s.set_phase(Phase::Progressing, "p".into(), 20);
        assert_eq!(s.promoted.status, ConditionStatus::Unknown);
        assert_eq!(s.promoted.last_transition_ms, 10);
        assert_eq!(s.promoted.last_update_ms, 20);
        assert_eq!(s.phase_started_ms, 20);
        s.set_phase(Phase::Succeeded, "ok".into(), 30);
        assert!(s.is_promoted());
        assert_eq!(s.promoted.last_transition_ms, 30);
        // Same status and reason: nothing rewritten.
        s.set_phase(Phase::Succeeded, "again".into(), 40);
        assert_eq!(s.promoted.message, "ok");
        assert_eq!(s.promoted.last_update_ms, 30);
    }

    #[test]
    fn status_round_trips_through_bincode() {
        let mut s = CanaryStatus::new(1);
        s.last_applied_spec = Some("abc".into());
        s.next_tick_ms = Some(61_000);
        let cfg = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(&s, cfg).unwrap();
        let (back, _): (CanaryStatus, usize) =
            bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
        assert_eq!(back, s);
    }
}

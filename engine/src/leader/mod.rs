//! The leader's policy, as pure functions: what the leader proposes, when it looks again and
//! what it watches. The node's leader loops hold only the queues and timers these answers
//! fill, and do the I/O (artifact probes, webhooks, metric queries) the answers ask for.
//!
//! - [`next_step`]: for one entity's [`Evaluation`], whether `Evaluate` is worth proposing,
//!   when to wake the entity without another trigger, and which artifact checks and
//!   products should wake it.
//! - [`canary_step`]: whether a canary's tick is due now and, if the agent has caught up,
//!   the tick to prepare (beside [`crate::canary::plan_tick`], which it calls).
//!
//! Apply records decisions with the same rules ([`decision_changed`], [`blocked_periods`]),
//! so what the leader proposes and what apply notes in Activity cannot drift apart.

mod canary;

use crate::activity::Activity;
use crate::artifact::{ArtifactLocation, Availability};
use crate::evaluate::{Evaluation, Outcome, Reason, BLOCKED_RECHECK_MS};
use crate::TimestampMs;

pub use canary::{canary_step, CanaryStep, OBSERVATION_MAX_AGE_MS};

/// The same unchanged decision is not proposed again within this time.
pub const REPROPOSE_AFTER_MS: TimestampMs = 5_000;

/// The whole 4-hour periods an entity has been blocked since `since` (SPEC P11). Each
/// period is a trigger of its own: apply notes one re-check per period, and the leader
/// proposes once one has passed.
pub fn blocked_periods(since: TimestampMs, now: TimestampMs) -> i64 {
    (now - since).max(0) / BLOCKED_RECHECK_MS
}

/// When the next 4-hour period of a block that began at `since` ends.
pub fn next_recheck_at(since: TimestampMs, now: TimestampMs) -> TimestampMs {
    since + BLOCKED_RECHECK_MS * (1 + blocked_periods(since, now))
}

/// Whether a decision with `fingerprint` differs from the last one recorded in Activity.
pub fn decision_changed(last_decision: Option<&str>, fingerprint: &str) -> bool {
    last_decision != Some(fingerprint)
}

/// What apply last recorded about an entity's decisions (from its [`Activity`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecisionRecord {
    /// The fingerprint of the last decision noted in Activity.
    pub last_decision: Option<String>,
    /// Since when its current candidate has been blocked.
    pub blocked_since_ms: Option<TimestampMs>,
}

impl DecisionRecord {
    /// The decision record of `activity` (without its timeline).
    pub fn of(activity: &Activity) -> Self {
        DecisionRecord {
            last_decision: activity.last_decision.clone(),
            blocked_since_ms: activity.blocked_since_ms,
        }
    }
}

/// What the leader last proposed for an entity, this term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastProposal {
    /// The evaluation's fingerprint then.
    pub fingerprint: String,
    /// The leader's clock then.
    pub at_ms: TimestampMs,
}

/// What the leader does about one entity's evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderStep {
    /// Propose `Evaluate` for the entity, with these artifact observations; `None`: propose
    /// nothing.
    pub propose: Option<Vec<(ArtifactLocation, Availability)>>,
    /// Evaluate the entity again at this time even without a trigger (always after `now`).
    pub wake_at: Option<TimestampMs>,
    /// Evaluate it again when one of these artifact checks completes.
    pub watch_artifacts: Vec<ArtifactLocation>,
    /// Evaluate it again when an entity of one of these products in its environment
    /// changes (dependency waits).
    pub watch_products: Vec<String>,
    /// The evaluation's fingerprint, to remember with the proposal.
    pub fingerprint: String,
}

/// Decides what the leader does about `eval` at `now`.
///
/// - `recorded`: what the entity's replicated Activity says of its last decision.
/// - `last_proposed`: what this leader proposed for the entity before, this term.
/// - `artifacts`: the leader's checker's answer for each of `eval.artifact_locations`, in
///   order (`None`: not checked yet).
/// - `artifact_recheck_ms`: how long an artifact result is trusted; an unavailable artifact
///   is looked at again after it.
pub fn next_step(
    eval: &Evaluation,
    recorded: &DecisionRecord,
    last_proposed: Option<&LastProposal>,
    artifacts: &[(ArtifactLocation, Option<Availability>)],
    artifact_recheck_ms: TimestampMs,
    now: TimestampMs,
) -> LeaderStep {
    assert_eq!(
        artifacts.len(),
        eval.artifact_locations.len(),
        "one checker answer per artifact location"
    );
    let last_decision = recorded.last_decision.as_deref();
    let blocked_since = recorded.blocked_since_ms;
    let fingerprint = eval.fingerprint();

    // Artifacts not checked yet wake the entity when the check completes; an unavailable one
    // is probed again once its result expires: wake then, and again when that probe ends.
    let mut watch_artifacts = Vec::new();
    let mut pending = false;
    let mut unavailable = false;
    for (location, availability) in artifacts {
        match availability {
            None => pending = true,
            Some(Availability::Unavailable { .. }) => unavailable = true,
            Some(Availability::Available | Availability::Unchecked { .. }) => continue,
        }
        watch_artifacts.push(location.clone());
    }

    let mut wake_at = match &eval.outcome {
        Outcome::Blocked { may_clear_at_ms } => {
            let recheck = next_recheck_at(blocked_since.unwrap_or(now), now);
            Some(may_clear_at_ms.map_or(recheck, |t| t.min(recheck)))
        }
        _ => None,
    };
    if unavailable {
        let t = now + artifact_recheck_ms + 10;
        wake_at = Some(wake_at.map_or(t, |w| w.min(t)));
    }
    let wake_at = wake_at.map(|w| w.max(now + 1));

    // A block made only of artifacts not checked yet: the checker wakes the entity.
    let only_pending = eval.is_blocked()
        && pending
        && eval
            .blocking()
            .all(|c| matches!(c.reason, Reason::ArtifactsNotCheckedYet { .. }));
    let decisive = matches!(eval.outcome, Outcome::Issue | Outcome::CanaryTarget { .. });
    let worth = match &eval.outcome {
        Outcome::PlanActive { .. } => false,
        Outcome::Issue | Outcome::CanaryTarget { .. } => true,
        _ if only_pending => false,
        _ => {
            let recheck_due = eval.is_blocked()
                && blocked_since.is_some_and(|since| blocked_periods(since, now) >= 1);
            decision_changed(last_decision, &fingerprint) || recheck_due
        }
    };
    // Against proposal storms: the same undecisive decision is not proposed again soon. A
    // clock that went back counts as time passed.
    let repeated = last_proposed.is_some_and(|p| {
        p.fingerprint == fingerprint && (0..REPROPOSE_AFTER_MS).contains(&(now - p.at_ms))
    });
    let propose = (worth && (decisive || !repeated)).then(|| {
        artifacts
            .iter()
            .filter_map(|(l, a)| a.clone().map(|a| (l.clone(), a)))
            .collect()
    });
    LeaderStep {
        propose,
        wake_at,
        watch_artifacts,
        watch_products: eval.waits_on_products.clone(),
        fingerprint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(outcome: Outcome) -> Evaluation {
        Evaluation {
            entity: "eid:prod:helmChart:web".into(),
            time_ms: 0,
            candidate: None,
            constraints: Vec::new(),
            outcome,
            skipped: Vec::new(),
            artifact_locations: Vec::new(),
            waits_on_products: Vec::new(),
        }
    }

    #[test]
    fn an_unchanged_decision_is_not_proposed_again_within_five_seconds() {
        let eval = decision(Outcome::NothingExecutable {
            reason: "no release".into(),
        });
        let fresh = next_step(&eval, &DecisionRecord::default(), None, &[], 1_000, 10_000);
        assert!(fresh.propose.is_some(), "never recorded: propose");
        let last = LastProposal {
            fingerprint: fresh.fingerprint.clone(),
            at_ms: 10_000,
        };
        let soon = next_step(
            &eval,
            &DecisionRecord::default(),
            Some(&last),
            &[],
            1_000,
            12_000,
        );
        assert!(soon.propose.is_none(), "proposed 2 s ago");
        let later = next_step(
            &eval,
            &DecisionRecord::default(),
            Some(&last),
            &[],
            1_000,
            15_000,
        );
        assert!(later.propose.is_some(), "5 s passed");
        // A clock that went back counts as time passed, not as a proposal just made.
        let back = next_step(
            &eval,
            &DecisionRecord::default(),
            Some(&last),
            &[],
            1_000,
            9_000,
        );
        assert!(back.propose.is_some(), "the clock went back");
        // Once recorded, it is not news.
        let recorded = DecisionRecord {
            last_decision: Some(fresh.fingerprint),
            blocked_since_ms: None,
        };
        assert!(next_step(&eval, &recorded, None, &[], 1_000, 20_000)
            .propose
            .is_none());
    }

    #[test]
    fn a_plan_to_issue_is_always_proposed_and_an_active_plan_never() {
        let issue = decision(Outcome::Issue);
        let first = next_step(&issue, &DecisionRecord::default(), None, &[], 1_000, 0);
        let last = LastProposal {
            fingerprint: first.fingerprint,
            at_ms: 0,
        };
        let again = next_step(
            &issue,
            &DecisionRecord::default(),
            Some(&last),
            &[],
            1_000,
            1,
        );
        assert!(again.propose.is_some());
        let active = decision(Outcome::PlanActive {
            plan_id: "p-1-0".into(),
            status: crate::plan::PlanStatus::Issued,
        });
        assert!(
            next_step(&active, &DecisionRecord::default(), None, &[], 1_000, 0)
                .propose
                .is_none()
        );
    }

    #[test]
    fn a_block_wakes_at_its_clearing_or_the_next_recheck() {
        let blocked = |clear| {
            decision(Outcome::Blocked {
                may_clear_at_ms: clear,
            })
        };
        let since = DecisionRecord {
            last_decision: None,
            blocked_since_ms: Some(1_000),
        };
        let now = 2_000;
        let step = next_step(&blocked(None), &since, None, &[], 1_000, now);
        assert_eq!(step.wake_at, Some(1_000 + BLOCKED_RECHECK_MS));
        let step = next_step(&blocked(Some(5_000)), &since, None, &[], 1_000, now);
        assert_eq!(step.wake_at, Some(5_000));
        // A clearing time in the past still wakes after now.
        let step = next_step(&blocked(Some(0)), &since, None, &[], 1_000, now);
        assert_eq!(step.wake_at, Some(now + 1));
        assert_eq!(
            next_recheck_at(0, 2 * BLOCKED_RECHECK_MS),
            3 * BLOCKED_RECHECK_MS
        );
        assert_eq!(
            blocked_periods(10, 5),
            0,
            "a clock behind the block's start"
        );
        // An unchanged block is proposed again once 4 hours have passed (the re-check).
        let fresh = next_step(&blocked(None), &since, None, &[], 1_000, now);
        let recorded = DecisionRecord {
            last_decision: Some(fresh.fingerprint),
            blocked_since_ms: Some(1_000),
        };
        let before = 1_000 + BLOCKED_RECHECK_MS - 1;
        assert!(
            next_step(&blocked(None), &recorded, None, &[], 1_000, before)
                .propose
                .is_none()
        );
        let due = 1_000 + BLOCKED_RECHECK_MS;
        assert!(next_step(&blocked(None), &recorded, None, &[], 1_000, due)
            .propose
            .is_some());
    }
}

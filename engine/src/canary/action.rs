//! What a tick decided ([`TickOutcome`]): the new status, the [`Action`]s the agent (workloads,
//! routing) and the leader (alerts, notifications) carry out, in order, once the tick is
//! committed, and the events to record ([`CanaryEvent`]).

use serde::{Deserialize, Serialize};

use super::event::CanaryEvent;
use super::spec::{MatchRule, Severity, TOTAL_WEIGHT};
use super::status::CanaryStatus;
use super::webhook::WebhookCall;

/// One thing to do because of a committed tick. Actions of one tick are carried out in the
/// order given; each is idempotent, and the status after the tick describes the state they
/// lead to (`primary_revision`, `canary_revision`, `canary_weight`, `match_routing`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Set up the canary: create the primary from the target at `revision`, route the
    /// service (`<svc>`, `<svc>-primary`) to it, and keep the canary scaled to zero.
    Initialize {
        /// The revision the primary starts with.
        revision: String,
    },
    /// Start (or replace) the canary workload at `revision`, reachable at `<svc>-canary`.
    DeployCanary {
        /// The revision under analysis.
        revision: String,
    },
    /// Route by weight, without match rules: `primary + canary == 100`.
    SetWeights {
        /// Percent to the primary.
        primary: u8,
        /// Percent to the canary.
        canary: u8,
    },
    /// A/B routing: requests matching any rule go to the canary, the rest by weight (the
    /// canary weight is 0 during A/B analysis).
    SetRouting {
        /// Percent of non-matching traffic to the canary.
        canary_weight: u8,
        /// The rules.
        match_rules: Vec<MatchRule>,
    },
    /// All traffic to the primary, match rules removed.
    RouteAllToPrimary,
    /// Copy the canary's spec (the target at `revision`) to the primary.
    PromoteCanary {
        /// The revision the primary moves to.
        revision: String,
    },
    /// Scale the canary workload to zero.
    ScaleCanaryToZero,
    /// Send an alert to every alert destination of the spec that receives `severity`
    /// ([`super::AlertSpec::receives`]). Only emitted when at least one does.
    Alert {
        /// How bad.
        severity: Severity,
        /// What happened.
        message: String,
    },
    /// Call a notification webhook (post-rollout, event); its answer changes nothing.
    NotifyWebhook {
        /// The call.
        call: WebhookCall,
    },
    /// The canary is deleted with `revertOnDeletion`: give the target back its original
    /// role (the primary's replicas, the service routed to it) and remove the primary.
    RestoreOriginal,
    /// Start (or replace) the fresh baseline (issue 20, `judge.baseline: fresh`): a third
    /// workload from the primary's `revision`, reached through `<svc>` only, that receives
    /// as much traffic as the canary, taken out of the primary's share: with weights
    /// `primary/canary` from [`Action::SetWeights`] the split is
    /// `primary − canary / canary / canary` (baseline in the middle), so `maxWeight` ≤ 50.
    /// Its proxy samples are reported as [`super::SampleWindow::baseline`].
    DeployBaseline {
        /// The primary's revision.
        revision: String,
    },
    /// Remove the fresh baseline's traffic and scale it to zero (analysis ended).
    ScaleBaselineToZero,
}

impl Action {
    /// The `(primary, canary)` weights this action sets, if it routes by weight.
    pub fn weights(&self) -> Option<(u8, u8)> {
        match self {
            Action::SetWeights { primary, canary } => Some((*primary, *canary)),
            Action::RouteAllToPrimary | Action::Initialize { .. } => Some((TOTAL_WEIGHT, 0)),
            Action::SetRouting { canary_weight, .. } => {
                Some((TOTAL_WEIGHT.saturating_sub(*canary_weight), *canary_weight))
            }
            _ => None,
        }
    }
}

/// The result of [`super::advance`] (or [`super::terminate`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickOutcome {
    /// The status after the tick: `step` one more than before.
    pub status: CanaryStatus,
    /// What to do, in order.
    pub actions: Vec<Action>,
    /// What happened and why, in Flagger's wording, for the canary's events and the
    /// activity timeline; messages are bounded and free of credentials.
    pub events: Vec<CanaryEvent>,
}

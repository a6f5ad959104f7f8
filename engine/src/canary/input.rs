//! What the leader observed for one tick ([`TickInput`]): the target's revision, workload
//! readiness as the agent reports it, the webhook answers and metric values the
//! [`super::TickPlan`] asked for, and an operator's manual command. The input travels in the
//! Raft entry, so every node applies the tick to the same facts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// HTTP statuses up to this one mean success (SPEC K5: ≤ 202).
pub const WEBHOOK_MAX_SUCCESS_STATUS: u16 = 202;

/// The answer of one webhook call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookResult {
    /// Whether the call succeeded (HTTP status ≤ 202).
    pub ok: bool,
    /// The HTTP status, when a response arrived.
    pub status: Option<u16>,
    /// The response body or the transport error, cut short by the caller; shown in events.
    pub message: String,
}

impl WebhookResult {
    /// The result of a response with `status`: ok when `status` ≤ 202.
    pub fn from_status(status: u16, message: impl Into<String>) -> Self {
        WebhookResult {
            ok: status <= WEBHOOK_MAX_SUCCESS_STATUS,
            status: Some(status),
            message: message.into(),
        }
    }

    /// A call that got no response (timeout, refused connection, ...): a failure.
    pub fn unreachable(message: impl Into<String>) -> Self {
        WebhookResult {
            ok: false,
            status: None,
            message: message.into(),
        }
    }
}

/// An operator's command for the current revision (SPEC K10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Manual {
    /// Promote the revision under analysis now, skipping the remaining steps and gates.
    Promote,
    /// Roll the revision under analysis (or waiting for approval) back now.
    Abort,
    /// Run the analysis of a failed revision again (after a failed promotion: retry the
    /// promotion).
    Retry,
}

impl Manual {
    /// `promote`, `abort` or `retry`.
    pub fn as_str(self) -> &'static str {
        match self {
            Manual::Promote => "promote",
            Manual::Abort => "abort",
            Manual::Retry => "retry",
        }
    }
}

/// Everything one tick decides on besides the spec, the status and the time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickInput {
    /// Revision hash of the target now ([`super::revision_hash`]).
    pub revision: String,
    /// Percent of primary replicas ready (0–100).
    pub primary_ready_percent: u8,
    /// Percent of canary replicas ready (0–100).
    pub canary_ready_percent: u8,
    /// Revision the agent reports the primary runs, when it reports one: readiness of a
    /// primary that does not run [`super::CanaryStatus::primary_revision`] yet counts as 0.
    pub primary_revision: Option<String>,
    /// Revision the agent reports the canary runs, likewise.
    pub canary_revision: Option<String>,
    /// Webhook name → answer, for the webhooks of the plan. A webhook the tick needs but
    /// finds no answer for counts as failed (a rollback webhook: as not signalling).
    pub webhooks: BTreeMap<String, WebhookResult>,
    /// Metric name → value in thousandths (`None`: the query returned no data, which fails
    /// the check, as does a metric missing from the map).
    pub metrics: BTreeMap<String, Option<i64>>,
    /// An operator's command, acted on at once (whether the tick is due or not) and consumed
    /// by this tick whether it applies or not (the outcome's events say which).
    pub manual: Option<Manual>,
}

impl TickInput {
    /// An input for `revision` with both workloads fully ready and no answers yet.
    pub fn new(revision: impl Into<String>) -> Self {
        TickInput {
            revision: revision.into(),
            primary_ready_percent: 100,
            canary_ready_percent: 100,
            primary_revision: None,
            canary_revision: None,
            webhooks: BTreeMap::new(),
            metrics: BTreeMap::new(),
            manual: None,
        }
    }

    /// The input of a manual tick: a manual command needs no webhook or metric.
    pub fn manual(revision: impl Into<String>, manual: Manual) -> Self {
        TickInput {
            manual: Some(manual),
            ..TickInput::new(revision)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_is_status_up_to_202() {
        assert!(WebhookResult::from_status(200, "").ok);
        assert!(WebhookResult::from_status(202, "").ok);
        assert!(!WebhookResult::from_status(203, "").ok);
        assert!(!WebhookResult::from_status(500, "boom").ok);
        assert!(!WebhookResult::unreachable("timeout").ok);
    }
}

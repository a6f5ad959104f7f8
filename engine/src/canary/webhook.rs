//! Webhook calls the leader makes for a canary (SPEC K5): who to call, with which payload.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::spec::{CanarySpec, Webhook, WebhookType};
use super::status::Phase;

/// The JSON body POSTed to a webhook (SPEC K5): `{name, namespace, phase, checksum,
/// metadata}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookPayload {
    /// The canary's name.
    pub name: String,
    /// Its namespace (the hub environment; empty when the resource names none).
    pub namespace: String,
    /// The phase, as Flagger spells it.
    pub phase: String,
    /// The revision hash concerned.
    pub checksum: String,
    /// The webhook's metadata (for event webhooks also `eventMessage`, `eventType`,
    /// `timestamp`).
    pub metadata: BTreeMap<String, String>,
}

/// One webhook call to make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookCall {
    /// The webhook's name: the key of its answer in [`super::TickInput::webhooks`].
    pub name: String,
    /// Its type.
    pub kind: WebhookType,
    /// Where to POST.
    pub url: String,
    /// Request timeout in milliseconds.
    pub timeout_ms: i64,
    /// Retries after a failed call.
    pub retries: u32,
    /// The body.
    pub payload: WebhookPayload,
}

impl WebhookCall {
    /// The call of `webhook` with `payload`.
    pub fn new(webhook: &Webhook, payload: WebhookPayload) -> Self {
        WebhookCall {
            name: webhook.name.clone(),
            kind: webhook.kind,
            url: webhook.url.clone(),
            timeout_ms: webhook.timeout_ms,
            retries: webhook.retries,
            payload,
        }
    }
}

/// The payload of a call to a webhook of `spec` in `phase` about `revision`, with `extra`
/// metadata added (the webhook's own keys do not override them).
pub(super) fn payload(
    spec: &CanarySpec,
    webhook: &Webhook,
    phase: Phase,
    revision: &str,
    extra: &[(&str, String)],
) -> WebhookPayload {
    let mut metadata: BTreeMap<String, String> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    for (k, v) in &webhook.metadata {
        metadata.entry(k.clone()).or_insert_with(|| v.clone());
    }
    WebhookPayload {
        name: spec.name.clone(),
        namespace: spec.namespace.clone().unwrap_or_default(),
        phase: phase.as_str().to_string(),
        checksum: revision.to_string(),
        metadata,
    }
}

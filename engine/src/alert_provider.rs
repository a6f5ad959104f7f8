//! The replicated `AlertProvider` record (issue 52 item 6): a Flagger AlertProvider applied
//! to an environment, which canary alerts reference with `providerRef`. The resource format
//! and its validation are in [`crate::canary`] ([`crate::canary::parse_alert_provider`]);
//! applying and deleting are in `apply/alert_providers.rs`.

use serde::{Deserialize, Serialize};

use crate::canary::AlertProviderSpec;
use crate::TimestampMs;

/// An alert provider of an environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertProvider {
    /// `<environment>/<name>`.
    pub id: String,
    /// The environment (the resource's namespace).
    pub environment: String,
    /// The resource's name.
    pub name: String,
    /// The validated spec.
    pub spec: AlertProviderSpec,
    /// The resource as applied (it may hold the hook URL, a credential: never shown when
    /// `spec.address` is set).
    pub yaml: String,
    /// Entry time of the first apply.
    pub created_ms: TimestampMs,
    /// Entry time of the last apply that changed it.
    pub updated_ms: TimestampMs,
}

impl AlertProvider {
    /// The id of provider `name` in `environment`.
    pub fn id_of(environment: &str, name: &str) -> String {
        format!("{environment}/{name}")
    }
}

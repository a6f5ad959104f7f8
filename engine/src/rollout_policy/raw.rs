//! The YAML shape of a rollout policy, as serde reads it: camelCase field names, unknown
//! fields refused everywhere, every field optional so that validation ([`super::parse`]) can
//! report all missing and bad values at once with their paths. Numbers are read wide (`i64`)
//! so that a `maxParallel` of 0 gets a range message rather than a type error.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The document.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a rollout policy: a mapping with product, products and waves"
)]
pub(super) struct RawPolicy {
    pub product: Option<String>,
    pub products: Option<Vec<String>>,
    pub waves: Option<Vec<RawWave>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawWave {
    pub name: Option<String>,
    pub selector: Option<RawSelector>,
    pub soak: Option<String>,
    pub max_parallel: Option<i64>,
    pub on_failure: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawSelector {
    pub environments: Option<Vec<String>>,
    pub labels: Option<BTreeMap<String, String>>,
}

//! The YAML shape of a module definition, as serde reads it: camelCase field names, unknown
//! fields refused everywhere, `type` plus one matching block per tagged item. Validation
//! ([`super::parse`]) turns it into the domain types of [`super::definition`].

use std::collections::BTreeMap;

use serde::Deserialize;

/// The document.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a module definition: a mapping with name, displayName, description, variables, entities, submodules, restrictions"
)]
pub(super) struct RawDefinition {
    pub name: String,
    pub display_name: Option<String>,
    pub description: Option<String>,
    pub variables: Option<BTreeMap<String, RawVariable>>,
    pub entities: Option<Vec<RawEntity>>,
    pub submodules: Option<Vec<RawSubmodule>>,
    pub restrictions: Option<RawRestrictions>,
}

/// `variables.<name>`: `type` and the block of that name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawVariable {
    #[serde(rename = "type")]
    pub kind: String,
    pub string: Option<RawStringVariable>,
    pub options: Option<RawOptionsVariable>,
    pub string_preset: Option<RawPreset>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawStringVariable {
    pub default_value: Option<String>,
    pub description: Option<String>,
    pub constraint: Option<RawConstraint>,
}

/// `constraint`: `type: oneOf` + `oneOf: [...]` or `type: regex` + `regex: ...`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawConstraint {
    #[serde(rename = "type")]
    pub kind: String,
    pub one_of: Option<Vec<String>>,
    pub regex: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawOptionsVariable {
    pub values: Vec<String>,
    pub default_value: Option<String>,
    pub description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawPreset {
    pub options: String,
    pub mapping: BTreeMap<String, String>,
    pub description: Option<String>,
}

/// `entities[i]`: `type` and the block of that name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawEntity {
    #[serde(rename = "type")]
    pub kind: String,
    pub helm_chart: Option<RawEntityBody>,
    pub terraform_module: Option<RawEntityBody>,
}

/// The fields of a `helmChart` or `terraformModule` block; which are allowed depends on the
/// kind and is checked in validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawEntityBody {
    pub product_id: String,
    pub k8s_namespace: Option<String>,
    pub account_id: Option<String>,
    pub entity_name: Option<String>,
    pub dependency_groups: Option<Vec<String>>,
    pub dependency_group_overrides: Option<BTreeMap<String, Vec<String>>>,
    pub sync_config_overrides: Option<RawSyncMode>,
    pub config_overrides: Option<String>,
    pub install_config_overrides: Option<String>,
    pub secret_requirements: Option<BTreeMap<String, RawSecret>>,
    pub marked_for_uninstallation: Option<RawUninstall>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub(super) enum RawSyncMode {
    Enabled,
    Merge,
    Disabled,
}

/// `secretRequirements.<name>`: `type: multikey` + `multikey:`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawSecret {
    #[serde(rename = "type")]
    pub kind: String,
    pub multikey: Option<RawMultikey>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawMultikey {
    pub description: Option<String>,
    pub keys: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawUninstall {
    pub min_version: Option<String>,
    pub unmanage_after_uninstall: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawSubmodule {
    pub name: String,
    pub version: String,
    pub variable_overrides: Option<BTreeMap<String, String>>,
    pub entity_overrides: Option<BTreeMap<String, RawEntityOverride>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawEntityOverride {
    pub config_overrides: Option<String>,
    pub secret_requirements: Option<BTreeMap<String, RawSecret>>,
    pub ignored_dependencies: Option<Vec<String>>,
    pub dependency_groups: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawRestrictions {
    pub new_installations: Option<RawNewInstallations>,
    pub submodule_usage: Option<RawSubmoduleUsage>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawNewInstallations {
    pub allowed: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawSubmoduleUsage {
    pub allow_entity_overrides: bool,
}

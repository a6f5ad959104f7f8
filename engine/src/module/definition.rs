//! The validated module definition (SPEC M1, M4, M6, M7, M11, M13): what a published module
//! version holds once [`parse_definition`](super::parse_definition) accepted it.
//!
//! These types are replicated (bincode, serde) and exposed as JSON, so they use only plain
//! serde shapes: structs, externally tagged enums, maps and sequences; no tagged, untagged or
//! flattened representations and no self-describing values.

use std::collections::BTreeMap;

use semver::Version;
use serde::{Deserialize, Serialize};

use super::variable::Variable;
use crate::entity::EntityKind;

/// A validated module definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleDefinition {
    /// Internal name: a lowercase DNS-label-like name; the file is `<name>.yml|.yaml`.
    pub name: String,
    /// For people.
    pub display_name: Option<String>,
    /// For people.
    pub description: Option<String>,
    /// Variables by name.
    pub variables: BTreeMap<String, Variable>,
    /// Deployment entities, in definition order.
    pub entities: Vec<EntityTemplate>,
    /// Modules included by name and exact version.
    pub submodules: Vec<SubmoduleRef>,
    /// How this module may be used.
    pub restrictions: Restrictions,
}

/// One entity of a module. String fields may hold `{{ moduleVariable.NAME }}` placeholders;
/// they are substituted when the module is rendered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityTemplate {
    /// `helmChart` or `terraformModule`.
    pub kind: EntityKind,
    /// `group:name` of the product.
    pub product_id: String,
    /// Kubernetes namespace (helm charts: required; terraform modules: none).
    pub k8s_namespace: Option<String>,
    /// Installation account (terraform modules only).
    pub account_id: Option<String>,
    /// Entity name; defaults to the product name (the part after `:` of the product id).
    pub entity_name: Option<String>,
    /// Dependency groups of the entity (SPEC M5); empty means the default group.
    pub dependency_groups: Vec<String>,
    /// Per depended-on product id, the groups its providing entity is looked up in.
    pub dependency_group_overrides: BTreeMap<String, Vec<String>>,
    /// How the module's config overrides meet the entity's (SPEC M13).
    pub sync_config_overrides: SyncMode,
    /// The raw `configOverrides` YAML text, placeholders still in.
    pub config_overrides: Option<String>,
    /// The raw `installConfigOverrides` YAML text (MERGE only), placeholders still in.
    pub install_config_overrides: Option<String>,
    /// Secrets the entity needs, by name.
    pub secret_requirements: BTreeMap<String, MultikeySecret>,
    /// Set when the module asks for the entity's uninstallation (SPEC M11).
    pub marked_for_uninstallation: Option<Uninstall>,
}

/// `syncConfigOverrides` (SPEC M13).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SyncMode {
    /// The module's overrides replace the entity's.
    #[default]
    Enabled,
    /// Module keys overwrite, other keys stay; `{{ unset }}` removes a key.
    Merge,
    /// The entity's overrides are kept as they are.
    Disabled,
}

impl SyncMode {
    /// The YAML spelling: `ENABLED`, `MERGE`, `DISABLED`.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::Enabled => "ENABLED",
            SyncMode::Merge => "MERGE",
            SyncMode::Disabled => "DISABLED",
        }
    }
}

/// A `multikey` secret requirement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultikeySecret {
    /// For people.
    pub description: Option<String>,
    /// The keys the secret must hold; never empty, no duplicates.
    pub keys: Vec<String>,
}

/// `markedForUninstallation` (SPEC M11): `{}` or `{minVersion, unmanageAfterUninstall}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Uninstall {
    /// Uninstall only once the entity runs at least this version.
    pub min_version: Option<Version>,
    /// What happens to the entity's management after the uninstall: `AUTOMATIC` (the
    /// default) or `MANUAL` ([`UnmanageAfterUninstall`]); kept as written, placeholders
    /// included, and checked once rendered.
    pub unmanage_after_uninstall: Option<String>,
}

impl Uninstall {
    /// What happens to the entity's management once it is uninstalled. A value that is not
    /// one of [`UnmanageAfterUninstall`]'s (validation refuses it) keeps the management, the
    /// choice that loses nothing.
    pub fn unmanage(&self) -> UnmanageAfterUninstall {
        match self.unmanage_after_uninstall.as_deref() {
            None => UnmanageAfterUninstall::Automatic,
            Some(text) => {
                UnmanageAfterUninstall::parse(text).unwrap_or(UnmanageAfterUninstall::Manual)
            }
        }
    }
}

/// `markedForUninstallation.unmanageAfterUninstall`: whether the module's management of an
/// entity ends by itself once the entity is uninstalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnmanageAfterUninstall {
    /// `AUTOMATIC` (the default): the uninstall's success ends the module's management; the
    /// entity stays, not installed, and the module's later versions do not take it back while
    /// they mark it for uninstallation.
    Automatic,
    /// `MANUAL`: the module keeps managing the uninstalled entity until an operator lets it go
    /// (drops it from the definition and updates the installation, or unlinks the
    /// installation).
    Manual,
}

impl UnmanageAfterUninstall {
    /// The spellings, as written in a definition.
    pub const VALUES: [&'static str; 2] = ["AUTOMATIC", "MANUAL"];

    /// Parses a written value (exact spelling).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "AUTOMATIC" => Some(UnmanageAfterUninstall::Automatic),
            "MANUAL" => Some(UnmanageAfterUninstall::Manual),
            _ => None,
        }
    }

    /// The error reason for a value that is not one of [`Self::VALUES`].
    pub fn refusal(text: &str) -> String {
        format!(
            "must be {} or {}, got {text:?}",
            Self::VALUES[0],
            Self::VALUES[1]
        )
    }
}

/// A submodule included by name and exact version (SPEC M6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmoduleRef {
    /// The submodule's name.
    pub name: String,
    /// Its exact version.
    pub version: Version,
    /// Values for the submodule's variables; may reference this module's variables.
    pub variable_overrides: BTreeMap<String, String>,
    /// Changes to the submodule's entities, by their product id.
    pub entity_overrides: BTreeMap<String, EntityOverride>,
}

/// What a parent module changes in one entity of a submodule (`entityOverrides.<productId>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityOverride {
    /// Config overrides (same format as `configOverrides`) deep-merged over the submodule's.
    pub config_overrides: Option<String>,
    /// Secret requirements added to (or replacing, by name) the submodule's.
    pub secret_requirements: BTreeMap<String, MultikeySecret>,
    /// Product ids whose dependency checks the entity skips.
    pub ignored_dependencies: Vec<String>,
    /// Replaces the entity's dependency groups when set.
    pub dependency_groups: Option<Vec<String>>,
}

/// `restrictions` (SPEC M7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restrictions {
    /// `newInstallations.allowed`: whether the module can be installed directly.
    pub new_installations_allowed: bool,
    /// `submoduleUsage.allowEntityOverrides`: whether a parent may use `entityOverrides`.
    pub allow_entity_overrides: bool,
}

impl Default for Restrictions {
    fn default() -> Self {
        Restrictions {
            new_installations_allowed: true,
            allow_entity_overrides: true,
        }
    }
}

impl EntityTemplate {
    /// The entity name written in the definition, or the product name (after `:`) when none
    /// is; placeholders are not substituted.
    pub fn name_template(&self) -> &str {
        match &self.entity_name {
            Some(name) => name,
            None => product_name(&self.product_id),
        }
    }
}

/// The product name of a `group:name` product id (the whole id when it has no `:`).
pub(crate) fn product_name(product_id: &str) -> &str {
    product_id
        .split_once(':')
        .map_or(product_id, |(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::{parse_definition, render};

    /// Every valid fixture, parsed.
    fn fixtures() -> Vec<(String, ModuleDefinition)> {
        let dir = std::path::PathBuf::from(
            std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
        )
        .join("tests/fixtures/modules/valid");
        let mut out: Vec<(String, ModuleDefinition)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| {
                let file = p.file_name().unwrap().to_str().unwrap().to_string();
                let text = std::fs::read_to_string(&p).unwrap();
                let def =
                    parse_definition(Some(&file), &text).unwrap_or_else(|e| panic!("{file}:\n{e}"));
                (file, def)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    fn round_trip<T>(value: &T) -> T
    where
        T: Serialize + serde::de::DeserializeOwned,
    {
        let cfg = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(value, cfg).unwrap();
        let (back, used): (T, usize) = bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
        assert_eq!(used, bytes.len());
        back
    }

    #[test]
    fn every_valid_fixture_round_trips_through_bincode() {
        // Definitions are replicated with bincode (not self-describing): the derived serde
        // shapes must read back exactly.
        let defs = fixtures();
        assert!(defs.len() >= 18, "{}", defs.len());
        let catalog: BTreeMap<(String, Version), ModuleDefinition> = defs
            .iter()
            .map(|(_, d)| ((d.name.clone(), Version::new(0, 1, 0)), d.clone()))
            .collect();
        for (file, def) in &defs {
            assert_eq!(&round_trip(def), def, "{file}");
            // Rendered entities too, where the fixture renders without installer values.
            if def.submodules.is_empty() {
                if let Ok(rendered) = render(def, &catalog, &BTreeMap::new()) {
                    assert_eq!(round_trip(&rendered), rendered, "{file}");
                }
            }
        }
    }

    #[test]
    fn entity_name_defaults_to_the_product_name() {
        assert_eq!(
            product_name("com.example:backend-service"),
            "backend-service"
        );
        assert_eq!(product_name("plain"), "plain");
    }
}

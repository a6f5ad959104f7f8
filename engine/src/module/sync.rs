//! Config sync (SPEC M13, M14): how a module's config overrides meet an entity's when the
//! entity is created, adopted or its installation updated, and which edits a user may make
//! to a module-managed entity under MERGE.
//!
//! Config overrides are maps from version key to the YAML text of an overrides mapping (the
//! shape of [`Entity::config_overrides`](crate::entity::Entity::config_overrides)).

use std::collections::BTreeMap;

use semver::Version;
use serde_yaml_ng::Mapping;

use super::config::{
    emit, get_path, merge, parse_mapping, remove_path, KeyPath, ModuleConfig, OverridesError,
};
use super::definition::SyncMode;

/// Why config overrides could not be synced, or a user's edit is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigSyncError {
    /// The entity's current overrides under `version` are not a YAML mapping.
    #[error("{version}: the entity's config overrides are not a YAML mapping: {reason}")]
    InvalidExisting {
        /// The version key.
        version: Version,
        /// Why.
        #[source]
        reason: OverridesError,
    },
    /// The proposed overrides under `version` are not a YAML mapping.
    #[error("{version}: the proposed config overrides are not a YAML mapping: {reason}")]
    InvalidProposed {
        /// The version key.
        version: Version,
        /// Why.
        #[source]
        reason: OverridesError,
    },
    /// The module's overrides under `version` are not a YAML mapping (not produced by
    /// [`render`](super::render)).
    #[error("{version}: the module's config overrides are not a YAML mapping: {reason}")]
    InvalidModule {
        /// The version key.
        version: Version,
        /// Why.
        #[source]
        reason: OverridesError,
    },
    /// A user's edit changes a key the module controls.
    #[error("{version}: {path} is controlled by module {module}")]
    Controlled {
        /// The version key.
        version: Version,
        /// The key path.
        path: KeyPath,
        /// The module controlling it.
        module: String,
    },
    /// A user's edit sets a key the module unsets.
    #[error("{version}: {path} is unset by module {module} and cannot be set")]
    Unset {
        /// The version key.
        version: Version,
        /// The key path.
        path: KeyPath,
        /// The module unsetting it.
        module: String,
    },
}

fn module_mapping(version: &Version, cfg: &ModuleConfig) -> Result<Mapping, ConfigSyncError> {
    parse_mapping(&cfg.overrides).map_err(|reason| ConfigSyncError::InvalidModule {
        version: version.clone(),
        reason,
    })
}

fn emitted(version: &Version, m: &Mapping) -> Result<String, ConfigSyncError> {
    emit(m).map_err(|reason| ConfigSyncError::InvalidModule {
        version: version.clone(),
        reason,
    })
}

/// Module keys overwrite `base`, other keys stay, unset keys go.
fn apply(base: &mut Mapping, version: &Version, cfg: &ModuleConfig) -> Result<(), ConfigSyncError> {
    merge(base, &module_mapping(version, cfg)?);
    for path in &cfg.unset {
        remove_path(base, path);
    }
    Ok(())
}

/// The entity's config overrides after a module (re)applies `module` (and, at creation under
/// MERGE, `install`). `existing` is the entity's current overrides, `None` for a new entity.
///
/// - New entity, any mode: the module's overrides (under MERGE, over the install overrides).
/// - `Enabled`: the module's overrides replace the entity's, whole.
/// - `Merge`: per version key, module keys overwrite, other keys stay, `{{ unset }}` keys are
///   removed; keys the module no longer sets stay; install overrides are not re-applied.
/// - `Disabled`: the entity's overrides, unchanged.
///
/// Versions whose text is untouched keep their text; merged ones are emitted canonically.
pub fn sync_config(
    mode: SyncMode,
    existing: Option<&BTreeMap<Version, String>>,
    module: &BTreeMap<Version, ModuleConfig>,
    install: &BTreeMap<Version, ModuleConfig>,
) -> Result<BTreeMap<Version, String>, ConfigSyncError> {
    let Some(existing) = existing else {
        let mut maps: BTreeMap<Version, Mapping> = BTreeMap::new();
        if mode == SyncMode::Merge {
            for (version, cfg) in install {
                apply(maps.entry(version.clone()).or_default(), version, cfg)?;
            }
        }
        for (version, cfg) in module {
            apply(maps.entry(version.clone()).or_default(), version, cfg)?;
        }
        return maps
            .iter()
            .map(|(v, m)| Ok((v.clone(), emitted(v, m)?)))
            .collect();
    };
    match mode {
        SyncMode::Disabled => Ok(existing.clone()),
        SyncMode::Enabled => Ok(module
            .iter()
            .map(|(v, cfg)| (v.clone(), cfg.overrides.clone()))
            .collect()),
        SyncMode::Merge => {
            let mut out = existing.clone();
            for (version, cfg) in module {
                let mut base = match existing.get(version) {
                    Some(text) => {
                        parse_mapping(text).map_err(|reason| ConfigSyncError::InvalidExisting {
                            version: version.clone(),
                            reason,
                        })?
                    }
                    None => Mapping::new(),
                };
                apply(&mut base, version, cfg)?;
                out.insert(version.clone(), emitted(version, &base)?);
            }
            Ok(out)
        }
    }
}

/// Under MERGE, whether a user may replace the entity's config overrides with `proposed`:
/// every key the module controls keeps the module's value and no key the module unsets is
/// set. The first violation (by version, then key path) is the error.
pub fn check_user_edit(
    module: &BTreeMap<Version, ModuleConfig>,
    proposed: &BTreeMap<Version, String>,
) -> Result<(), ConfigSyncError> {
    for (version, cfg) in module {
        let ours = module_mapping(version, cfg)?;
        let theirs = match proposed.get(version) {
            Some(text) => {
                parse_mapping(text).map_err(|reason| ConfigSyncError::InvalidProposed {
                    version: version.clone(),
                    reason,
                })?
            }
            None => Mapping::new(),
        };
        for path in &cfg.controlled {
            if get_path(&theirs, path) != get_path(&ours, path) {
                return Err(ConfigSyncError::Controlled {
                    version: version.clone(),
                    path: path.clone(),
                    module: cfg.module.clone(),
                });
            }
        }
        for path in &cfg.unset {
            if get_path(&theirs, path).is_some() {
                return Err(ConfigSyncError::Unset {
                    version: version.clone(),
                    path: path.clone(),
                    module: cfg.module.clone(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::config::finalize;

    fn v3() -> Version {
        Version::new(3, 0, 0)
    }

    fn module_cfg(text: &str) -> BTreeMap<Version, ModuleConfig> {
        let cfg = finalize("control-plane-module", parse_mapping(text).unwrap()).unwrap();
        BTreeMap::from([(v3(), cfg)])
    }

    fn one(text: &str) -> BTreeMap<Version, String> {
        BTreeMap::from([(v3(), text.to_string())])
    }

    #[test]
    fn spec_m13_worked_example() {
        let entity = one("conf:\n  key1: a\n  key2: b\n  key3: c\n");
        let module = module_cfg("conf:\n  key1: x\n  key3: \"{{ unset }}\"\n  key4: d\n");
        let none = BTreeMap::new();
        let merge = sync_config(SyncMode::Merge, Some(&entity), &module, &none).unwrap();
        assert_eq!(merge, one("conf:\n  key1: x\n  key2: b\n  key4: d\n"));
        let enabled = sync_config(SyncMode::Enabled, Some(&entity), &module, &none).unwrap();
        assert_eq!(enabled, one("conf:\n  key1: x\n  key4: d\n"));
        let disabled = sync_config(SyncMode::Disabled, Some(&entity), &module, &none).unwrap();
        assert_eq!(disabled, entity);

        // key1 dropped from the module.
        let module = module_cfg("conf:\n  key3: \"{{ unset }}\"\n  key4: d\n");
        let merge2 = sync_config(SyncMode::Merge, Some(&merge), &module, &none).unwrap();
        assert_eq!(merge2, merge);
        let enabled2 = sync_config(SyncMode::Enabled, Some(&enabled), &module, &none).unwrap();
        assert_eq!(enabled2, one("conf:\n  key4: d\n"));
        let disabled2 = sync_config(SyncMode::Disabled, Some(&disabled), &module, &none).unwrap();
        assert_eq!(disabled2, entity);
    }

    #[test]
    fn user_edits_under_merge() {
        let module = module_cfg("conf:\n  key1: x\n  key3: \"{{ unset }}\"\n  key4: d\n");
        check_user_edit(&module, &one("conf: {key1: x, key2: zz, key4: d}")).unwrap();
        let err = check_user_edit(&module, &one("conf: {key1: y, key4: d}")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "3.0.0: conf.key1 is controlled by module control-plane-module"
        );
        let err = check_user_edit(&module, &one("conf: {key1: x, key3: c, key4: d}")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "3.0.0: conf.key3 is unset by module control-plane-module and cannot be set"
        );
        // Removing a controlled key is changing it.
        assert!(check_user_edit(&module, &one("conf: {key4: d}")).is_err());
        assert!(check_user_edit(&module, &BTreeMap::new()).is_err());
        assert!(matches!(
            check_user_edit(&module, &one("[1]")),
            Err(ConfigSyncError::InvalidProposed { .. })
        ));
    }

    #[test]
    fn new_entities_get_install_overrides_under_merge_only() {
        let module = module_cfg("feature-flag: enabled\n");
        let install = module_cfg("resources: {requests: {cpu: 8}}\nfeature-flag: off\n");
        let created = sync_config(SyncMode::Merge, None, &module, &install).unwrap();
        assert_eq!(
            created,
            one("feature-flag: enabled\nresources:\n  requests:\n    cpu: 8\n")
        );
        let created = sync_config(SyncMode::Enabled, None, &module, &install).unwrap();
        assert_eq!(created, one("feature-flag: enabled\n"));
        // Later syncs do not re-apply install overrides.
        let existing = one("resources: {requests: {cpu: 2}}\n");
        let later = sync_config(SyncMode::Merge, Some(&existing), &module, &install).unwrap();
        assert_eq!(
            later,
            one("feature-flag: enabled\nresources:\n  requests:\n    cpu: 2\n")
        );
        let bad = one("- a");
        assert!(matches!(
            sync_config(SyncMode::Merge, Some(&bad), &module, &install),
            Err(ConfigSyncError::InvalidExisting { .. })
        ));
    }
}

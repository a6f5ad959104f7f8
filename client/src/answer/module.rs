//! `modules`, `module`, `module_dry_run`, `module_installations` and `module_installation`:
//! modules, their versions and where they are installed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Typed;
use crate::query::Query;

/// One module, with every version published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleSummaryView {
    /// How many installations it has.
    pub installations: usize,
    /// Its newest version.
    pub latest: Option<String>,
    /// Its name.
    pub name: String,
    /// Its versions, oldest first.
    pub versions: Vec<String>,
}

/// The answer to `modules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModulesAnswer {
    /// By name.
    pub modules: Vec<ModuleSummaryView>,
}

/// Asks for every module with its versions and installations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListModules;

impl Typed for ListModules {
    type Answer = ModulesAnswer;
    fn query(&self) -> Query {
        Query::Modules
    }
}

/// One entity a module defines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleEntityView {
    /// `helmChart` or `terraformModule`.
    pub kind: String,
    /// Its name, placeholders (`{{ moduleVariable.NAME }}`) still in.
    pub name: String,
    /// The product it deploys (`group:name`).
    pub product_id: String,
}

/// The answer to `module`: one module version with its definition's YAML.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleView {
    /// Whether a parent module may override its entities.
    pub allow_entity_overrides: bool,
    /// For people.
    pub description: Option<String>,
    /// For people.
    pub display_name: Option<String>,
    /// Its entities, in definition order.
    pub entities: Vec<ModuleEntityView>,
    /// Its name.
    pub name: String,
    /// Whether it can be installed directly.
    pub new_installations_allowed: bool,
    /// When this version was published.
    pub published: String,
    /// The modules it includes: `name@version`.
    pub submodules: Vec<String>,
    /// Its variables' names.
    pub variables: Vec<String>,
    /// The version.
    pub version: String,
    /// The definition as published.
    pub yaml: String,
}

/// Asks for one module version (the latest when none is named), with its YAML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetModule {
    /// The module's name.
    pub name: String,
    /// The version.
    pub version: Option<String>,
}

impl Typed for GetModule {
    type Answer = ModuleView;
    fn query(&self) -> Query {
        Query::Module {
            name: self.name.clone(),
            version: self.version.clone(),
        }
    }
}

/// The answer to `module_dry_run`: what publishing the definition would create (a definition
/// publishing would refuse is answered with an error, not with this).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleDryRunAnswer {
    /// How many entities it defines.
    pub entities: usize,
    /// The module's name.
    pub name: String,
    /// Whether it is valid (always `true`).
    pub valid: bool,
    /// How many variables it defines.
    pub variables: usize,
    /// The version it would be published as.
    pub version: String,
}

/// Validates a definition as publishing would, without publishing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleDryRun {
    /// The file name (checked against the module's name).
    pub file_name: Option<String>,
    /// The definition.
    pub yaml: String,
}

impl Typed for ModuleDryRun {
    type Answer = ModuleDryRunAnswer;
    fn query(&self) -> Query {
        Query::ModuleDryRun {
            file_name: self.file_name.clone(),
            yaml: self.yaml.clone(),
        }
    }
}

/// One module installation, as `module_installations` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleInstallationView {
    /// The channel it tracks.
    pub channel: String,
    /// How many entities it manages.
    pub entities: usize,
    /// Its environment.
    pub environment: String,
    /// `<environment>/<module>`.
    pub id: String,
    /// When it was installed.
    pub installed: String,
    /// The module's name.
    pub module: String,
    /// Whether its updates are paused.
    pub paused: bool,
    /// The approval policy it falls under (`installation/prod/web`, `environment/prod`), if
    /// any.
    pub policy: Option<String>,
    /// Whether updates were resumed and the reconciling change request is not merged yet.
    pub resuming: bool,
    /// `Paused`, `Resuming Updates`, `Update Pending` or `Up To Date`.
    pub status: String,
    /// When its last update was applied.
    pub updated: String,
    /// The module version applied.
    pub version: String,
}

/// The answer to `module_installations`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleInstallationsAnswer {
    /// By id.
    pub installations: Vec<ModuleInstallationView>,
}

/// Asks for module installations, optionally of one environment or module.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListModuleInstallations {
    /// Only this environment.
    pub environment: Option<String>,
    /// Only this module.
    pub module: Option<String>,
}

impl Typed for ListModuleInstallations {
    type Answer = ModuleInstallationsAnswer;
    fn query(&self) -> Query {
        Query::ModuleInstallations {
            environment: self.environment.clone(),
            module: self.module.clone(),
        }
    }
}

/// One entity an installation manages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstallationEntityView {
    /// `eid:…`.
    pub id: String,
    /// Whether its product is to be uninstalled.
    pub marked_for_uninstall: bool,
    /// The secrets the module requires it to have, by name.
    pub secret_requirements: Vec<String>,
    /// The module (or `parent/sub`) that defines it.
    pub source: String,
    /// How the module's config overrides meet the entity's: `ENABLED`, `MERGE` or
    /// `DISABLED`.
    pub sync: String,
}

/// The answer to `module_installation`: one installation with its entities and variables.
/// Unlike a [`ModuleInstallationView`] row, `entities` lists the entities rather than counting
/// them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleInstallationDetail {
    /// The channel it tracks.
    pub channel: String,
    /// The entities it manages, by id.
    pub entities: Vec<InstallationEntityView>,
    /// Its environment.
    pub environment: String,
    /// `<environment>/<module>`.
    pub id: String,
    /// When it was installed.
    pub installed: String,
    /// The module's name.
    pub module: String,
    /// Whether its updates are paused.
    pub paused: bool,
    /// The approval policy it falls under (`installation/prod/web`, `environment/prod`), if
    /// any.
    pub policy: Option<String>,
    /// Whether updates were resumed and the reconciling change request is not merged yet.
    pub resuming: bool,
    /// `Paused`, `Resuming Updates`, `Update Pending` or `Up To Date`.
    pub status: String,
    /// When its last update was applied.
    pub updated: String,
    /// The installer's values, by variable name (`sub.var` for a submodule's variable).
    pub variables: BTreeMap<String, String>,
    /// The module version applied.
    pub version: String,
}

/// Asks for one module installation (`<environment>/<module>`) with its entities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetModuleInstallation(pub String);

impl Typed for GetModuleInstallation {
    type Answer = ModuleInstallationDetail;
    fn query(&self) -> Query {
        Query::ModuleInstallation { id: self.0.clone() }
    }
}

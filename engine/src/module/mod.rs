//! Modules (SPEC M1–M16): definitions that bundle products' entities, their configuration
//! and installer variables, published as immutable versions.
//!
//! - [`parse_definition`] reads and validates one definition file (everything checkable
//!   within it), reporting every problem with its YAML path and line ([`DefinitionErrors`]);
//!   [`validate_against`] checks its submodules against a [`ModuleCatalog`], and
//!   [`parse_and_validate`] does both ([`ParsedDefinition`]: the two halves apart, so the
//!   parse needs no catalog at hand).
//! - [`render`] turns a definition and installer values into [`RenderedEntity`]s.
//! - [`sync_config`] and [`check_user_edit`] decide how module config overrides meet an
//!   entity's (`syncConfigOverrides`).
//!
//! Everything here is pure: no I/O, no clock. The definition format is documented in
//! `docs/MODULES-YAML.md`.

mod catalog;
mod config;
mod definition;
mod error;
mod parse;
mod placeholder;
mod position;
mod raw;
mod render;
mod sync;
mod variable;

pub use catalog::{
    parse_and_validate, validate_against, ModuleCatalog, ParsedDefinition, MAX_SUBMODULE_DEPTH,
};
pub use config::{KeyPath, ModuleConfig, OverridesError};
pub use definition::{
    EntityOverride, EntityTemplate, ModuleDefinition, MultikeySecret, Restrictions, SubmoduleRef,
    SyncMode, Uninstall, UnmanageAfterUninstall,
};
pub use error::{DefinitionError, DefinitionErrors};
pub use parse::{parse_definition, MAX_DEFINITION_BYTES, MAX_FILLED_BYTES};
pub use placeholder::VARIABLE_NAMESPACE;
pub use render::{render, RenderError, RenderedEntity, MAX_RENDERED_BYTES};
pub use sync::{check_user_edit, sync_config, ConfigSyncError};
pub use variable::{
    is_variable_name, Constraint, InvalidRegex, ValueError, Variable, MAX_VARIABLE_NAME_LEN,
};
